#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The whole benchmark against the real scheduler: `scx_morpheus --backend sim` (observer mode) publishes
# a region and the benchmark's event-loop thread registers through its socket.
#   no pressure: --slice-us at its maximum (10 s of CPU time before a worker is asked to yield);
#   pressure:    the default slice and grace (the scheduler asks after every slice of CPU time).
# Results: bench/results/{no_pressure,pressure}.json (with the load average before and after).
# Usage: bench/run.sh [SECONDS_PER_CELL] [REPEAT] [all|no_pressure|pressure]   (also: bazel run //sdk-python:bench -- 3 5)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
secs=${1:-3}
repeat=${2:-5}
which=${3:-all}
case $which in all|no_pressure|pressure) ;; *) echo "bench/run.sh: third argument: all, no_pressure or pressure, not '$which'" >&2; exit 2;; esac
"$here/tools/build.sh" > /dev/null
cargo build --release --quiet -p scx_morpheus --manifest-path "$root/Cargo.toml"
scx="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
py="$here/.build/venv/bin/python"
mkdir -p "$here/bench/results"
dir="$(mktemp -d)"
sched=""
stop_scheduler() {
  if [[ -n $sched ]]; then kill -INT "$sched" 2>/dev/null || true; wait "$sched" 2>/dev/null || true; fi
  sched=""
}
trap 'stop_scheduler; rm -rf "$dir"' EXIT

# run NAME SCHEDULER_OPTIONS... -- BENCH_OPTIONS...
run() {
  local name=$1; shift
  local -a sched_opts=() bench_opts=()
  while [[ $1 != -- ]]; do sched_opts+=("$1"); shift; done
  shift
  bench_opts=("$@")
  "$scx" --backend sim --mode observer --socket "$dir/$name.sock" \
    --max-workers 4 "${sched_opts[@]}" 2> "$here/bench/results/$name.scheduler.log" &
  sched=$!
  for _ in $(seq 200); do [[ -S $dir/$name.sock ]] && break; sleep 0.05; done
  [[ -S $dir/$name.sock ]] || { echo "bench: scx_morpheus did not start, see bench/results/$name.scheduler.log" >&2; exit 1; }
  "$py" "$here/bench/bench_asyncio.py" --seconds "$secs" --repeat "$repeat" \
    --socket "$dir/$name.sock" --json "$here/bench/results/$name.json" "${bench_opts[@]}"
  stop_scheduler
}

if [[ $which != pressure ]]; then
  run no_pressure --slice-us 10000000 -- --scheduler "observer, slice 10 s (never asks within a cell)"
fi
if [[ $which != no_pressure ]]; then
  run pressure -- --scheduler "observer, default slice and grace" --calls 0
fi
