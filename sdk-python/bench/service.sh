#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The service benchmark (tools/main.sh step python_service): builds the wheel and scx_morpheus,
# starts the real agent at its defaults (slice 5 ms, grace 2 ms, observer) once per backend, each in a
# private runtime directory, both alive for the whole run:
#   sim    `scx_morpheus --backend sim` (the /proc sampler on its 1 ms tick), any kernel;
#   trace  `scx_morpheus --backend trace` (BPF at sched_switch and a BPF timer, on the host kernel), as
#          root on a kernel with BPF and BTF, in a mount namespace of its own with a private bpffs on
#          /sys/fs/bpf; where that is not possible the reason is printed and only sim runs;
# then prints two tables, each comparing the naive yield and morpheus in the same run:
#   bench/fairness.py  slowest ÷ fastest progress of 2/4/8 CPU-bound tasks of one loop, per backend;
#   bench/service.py   an aiohttp service over loopback: light p50/p99 and heavy req/s, per round the
#                      cells of both backends in a rotated order, ratios within a round and backend.
# Usage: bench/service.sh [SECONDS_PER_CELL] [ROUNDS] [FAIRNESS_ROUNDS]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
secs=${1:-8}
rounds=${2:-5}
fair_rounds=${3:-2}
"$here/tools/build.sh" > /dev/null
cargo build --release --quiet -p scx_morpheus --manifest-path "$root/Cargo.toml"
scx="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
py="$here/.build/venv/bin/python"
"$py" -c 'import aiohttp' 2>/dev/null || { echo "bench/service.sh: aiohttp is missing (tools/setup.sh installs it)" >&2; exit 1; }
dir="$(mktemp -d)"
chmod 700 "$dir"
mkdir -p "$here/bench/results"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# start_agent BACKEND COMMAND...: runs COMMAND (an scx_morpheus) with its socket at $dir/BACKEND/agent.sock,
# its log in bench/results/service.BACKEND.log; returns non-zero (the log says why) if no socket came up.
start_agent() {
  local backend=$1 log="$here/bench/results/service.$1.log"
  shift
  mkdir -m 700 "$dir/$backend"
  "$@" --socket "$dir/$backend/agent.sock" -w 16 2> "$log" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    [[ -S $dir/$backend/agent.sock ]] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "bench/service.sh: scx_morpheus --backend $backend did not start:" >&2
  tail -n 5 "$log" >&2
  return 1
}

agents=()
start_agent sim "$scx" --backend sim || exit 1
agents+=(--agent "sim=$dir/sim/agent.sock")
# The tracing backend needs root (BPF) and BTF; its own bpffs keeps its pins away from any other agent's.
if [[ $(id -u) -ne 0 ]]; then
  echo "trace backend: not run (needs root to load BPF programs; this runs as uid $(id -u)): sim only"
elif [[ ! -r /sys/kernel/btf/vmlinux ]]; then
  echo "trace backend: not run (this kernel has no BTF, /sys/kernel/btf/vmlinux): sim only"
elif start_agent trace unshare --mount --propagation private sh -c 'mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@"' "$scx" --backend trace; then
  agents+=(--agent "trace=$dir/trace/agent.sock")
else
  echo "trace backend: not run (scx_morpheus --backend trace failed to start, see bench/results/service.trace.log): sim only"
fi
echo "kernel $(uname -r), $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < ${#agents[@]}; i += 2)); do
  spec=${agents[i + 1]}
  echo
  echo "backend ${spec%%=*}:"
  "$py" "$here/bench/fairness.py" --socket "${spec#*=}" --seconds "$(( secs > 3 ? 3 : secs ))" --rounds "$fair_rounds"
done
echo
"$py" "$here/bench/service.py" drive "${agents[@]}" --seconds "$secs" --rounds "$rounds" \
  --json "$here/bench/results/service.json"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
