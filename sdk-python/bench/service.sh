#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The service benchmark (tools/main.sh step python_service): builds the wheel and scx_morpheus,
# starts the real agent (`scx_morpheus --backend sim`, its defaults: slice 5 ms, grace 2 ms,
# observer) in a private runtime directory as the calling user, then prints two tables, each
# comparing the naive yield and morpheus in the same run:
#   bench/fairness.py  slowest ÷ fastest progress of 2/4/8 CPU-bound tasks of one loop;
#   bench/service.py   an aiohttp service over loopback: light p50/p99 and heavy req/s.
# Usage: bench/service.sh [SECONDS_PER_CELL] [ROUNDS]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
secs=${1:-8}
rounds=${2:-3}
"$here/tools/build.sh" > /dev/null
cargo build --release --quiet -p scx_morpheus --manifest-path "$root/Cargo.toml"
scx="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
py="$here/.build/venv/bin/python"
"$py" -c 'import aiohttp' 2>/dev/null || { echo "bench/service.sh: aiohttp is missing (tools/setup.sh installs it)" >&2; exit 1; }
dir="$(mktemp -d)"
chmod 700 "$dir"
mkdir -p "$here/bench/results"
"$scx" --backend sim --socket "$dir/agent.sock" -w 16 2> "$here/bench/results/service.scheduler.log" &
sched=$!
trap 'kill -INT "$sched" 2>/dev/null || true; wait "$sched" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 200); do [[ -S $dir/agent.sock ]] && break; sleep 0.05; done
[[ -S $dir/agent.sock ]] || { echo "bench/service.sh: scx_morpheus did not start, see bench/results/service.scheduler.log" >&2; exit 1; }
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$here/bench/fairness.py" --socket "$dir/agent.sock" --seconds "$(( secs > 3 ? 3 : secs ))" --rounds "$rounds"
echo
"$py" "$here/bench/service.py" drive --socket "$dir/agent.sock" --seconds "$secs" --rounds "$rounds" \
  --json "$here/bench/results/service.json"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
