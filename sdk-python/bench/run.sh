#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The whole benchmark in one run, registered in a sim region: without pressure (the scheduler
# stand-in never asks) and with it (it asks after every 5 ms slice). Results: bench/results/*.json.
# Usage: bench/run.sh [SECONDS_PER_CELL] [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
secs=${1:-2}
repeat=${2:-3}
mkdir -p bench/results
dir=$(mktemp -d)
"$py" bench/sim_scheduler.py "$dir/idle" --slots 2 --no-hints > /dev/null &
idle=$!
"$py" bench/sim_scheduler.py "$dir/busy" --slots 2 > /dev/null &
busy=$!
trap 'kill $idle $busy 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [[ -e $dir/idle && -e $dir/busy ]] && break; sleep 0.1; done
"$py" bench/bench_asyncio.py --seconds "$secs" --repeat "$repeat" --region "$dir/idle" --json bench/results/no_pressure.json
"$py" bench/bench_asyncio.py --seconds "$secs" --repeat "$repeat" --region "$dir/busy" --modes naive,morpheus --json bench/results/pressure.json
