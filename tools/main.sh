#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# The project's main job: set up the machine (tools/setup.sh), then run each
# step below in order, stopping at the first that fails.
#
# Usage: tools/main.sh            run every step in STEPS
#        tools/main.sh STEP...    run only these steps (names as in STEPS)
#        tools/main.sh --list     print the steps
#
# To add a step: write a function step_<name> (it runs in the repository root
# and fails by returning non-zero) and add <name> to STEPS where it belongs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

log() { printf 'main: %s\n' "$*"; }

# ---------------------------------------------------------------------------
# Steps.

# The ABI's layout as generated from spec/abi.toml, for the record.
step_abi_report() {
  python3 abi/gen/morpheus_abigen.py --report
}

# The committed abi/ must be what spec/abi.toml generates, and compatible with the released locks.
step_abi_check() {
  python3 abi/gen/morpheus_abigen.py --check
}

# scx_morpheus for linux-arm64-gnu, cross-built (BPF objects with __TARGET_ARCH_arm64 and scx_utils'
# arm64 vmlinux.h; libelf/zlib from tools/setup.sh's arm64 root, tools/arm64/scx-env.sh), its BPF object's
# acquire loads checked for their full barriers (tests/bpf_release.rs), and the sim backend's CLI tests run
# under qemu-aarch64-static. A step rather than a bazel test: it cross-builds all of scx_morpheus and its
# test dependencies (cold target dir: 12 minutes on 2 loaded cores; 1.5 with the host's build dependencies
# already built; under a minute warm). The tracing and kernel backends cannot run here (qemu-user has no bpf(2): ENOSYS).
step_scx_arm64() {
  tools/arm64/scx-env.sh cargo test -p scx_morpheus --target aarch64-unknown-linux-gnu --test bpf_release --test cli
}

# The arm64 conformance columns too slow for tools/test.sh's budget: python-arm64 (the agent on Debian's
# arm64 python3.11 over the arm64 wheel) and java-ffm-arm64, java-jni-arm64 (the Java agent on Temurin's arm64 JRE, the jar's aarch64
# natives), each agent under qemu-aarch64-static and started afresh for every cell (a JVM's start under
# emulation is most of a Java cell). The release gates run the same columns (release/sdks.toml
# `conformance`) and stamp them into the arm64 wheel and beside the jar's linux-aarch64 natives. Measured
# on 2 cores shared with other builds: python-arm64 11.5 to 12 minutes at load 35-80, the Java arm64 columns
# about 50 minutes at load 20-87 (conformance/README.md). c-arm64, node-arm64 and
# rust-arm64 run in `bazel test` (//conformance:c_arm64, ...).
step_conformance_arm64() {
  python3 conformance/harness/cli.py gate python-arm64 java-ffm-arm64 java-jni-arm64
}

# The scheduler on arm64 in an arm64 VM: Debian sid's arm64 kernel (sched_ext, BTF) under trixie's
# qemu-system-aarch64 -M virt -cpu max, TCG (installed by tools/setup.sh --qemu-trixie the first time),
# with the cross-built scx_morpheus and morpheus-e2e-worker (the same debug build as scx_arm64): the
# tracing backend's gate replay (the matrix's trace-arm64 column) and live phases, then e2e/guest.sh on
# sched_ext (kernel-arm64 column, kick, throttle, hybrid, stress, restart, live and trust phases), with the
# Rust worker (scheduler/e2e/arm64-vm.sh). Every verdict is a count or a state. About 16 minutes with
# the cross build warm and the kernel cached (the guest: 12.5 to 14 minutes at load 6-10 on 2 cores, 8 of them
# the critical-section stress). A step, not a bazel test: it takes longer than tools/test.sh's budget
# allows and needs the cross build (12 minutes cold) and the trixie root, which tools/test.sh does not set up.
step_trace_arm64_vm() {
  bash tools/setup.sh --qemu-trixie
  bash scheduler/e2e/arm64-vm.sh
}

# Starvation benchmark: Morpheus off / observer / enforced side by side, observer and enforced on the sim
# backend and on the tracing backend (where root and BTF allow; otherwise sim only, saying why) in the
# same rounds, 5 rounds with the spread of each ratio to off (scheduler/BENCHMARKS.md, "Starvation").
# The benchmark starts and stops scx_morpheus (private region and socket; trace: private bpffs)
# itself for each mode. About 2 minutes.
step_starvation() {
  bash scheduler/starvation/run.sh --seconds "${MORPHEUS_STARVATION_SECONDS:-15}" --rounds "${MORPHEUS_STARVATION_ROUNDS:-5}"
}

# The same starvation benchmark in the real-kernel VM (Debian sid under qemu TCG): off with the
# kernel's default scheduler, observer and enforced with scx_morpheus's sched_ext backend, one boot.
# About 1.5 minutes with a built tree and a cached kernel (the first run fetches it).
step_starvation_vm() {
  bash scheduler/e2e/starvation-vm.sh -- --seconds "${MORPHEUS_STARVATION_VM_SECONDS:-12}" --rounds 3
}

# The tracing backend (BPF on the host kernel, no sched_ext) against the sim backend in the same run,
# side by side: detection latency (CPU time past the slice end when preempt_seq is published,
# p50/p99/max) and overhead with 0, 8 and 64 registered busy workers (agent CPU, BPF CPU, context-switch
# cost against no agent), each a ratio within a round, 5 rounds, median [min-max] (scheduler/BENCHMARKS.md,
# "Tracing backend"). Needs root and BPF with BTF; about 10 minutes.
step_trace_bench() {
  bash scheduler/trace-bench/run.sh --rounds "${MORPHEUS_TRACE_BENCH_ROUNDS:-5}" --seconds "${MORPHEUS_TRACE_BENCH_SECONDS:-5}"
}

# Time to yield per SDK on the tracing backend: request (preempt_seq published) to acknowledgement
# (the runtime's store to last_ack_seq, caught by a hardware write breakpoint), p50/p99, with the
# checkpoint density, for the e2e workers of Rust, C, Python, Node and Java (scheduler/BENCHMARKS.md,
# "Time to yield per SDK"). Needs root, BPF with BTF and hardware breakpoints; about 3 minutes.
step_yield_bench() {
  bash scheduler/trace-bench/yield.sh --rounds "${MORPHEUS_YIELD_BENCH_ROUNDS:-5}" --seconds "${MORPHEUS_YIELD_BENCH_SECONDS:-4}"
}

# sdk-python's asyncio table (blocking / naive / morpheus, latency probe) against the real BPF scheduler
# in the VM: off (kernel default scheduler) and scx_morpheus on sched_ext in one boot, probe p99 beside
# slice + grace and its ratio to off (sdk-python/BENCHMARKS.md).
step_python_bench_vm() {
  bash scheduler/e2e/pybench-vm.sh -- --seconds "${MORPHEUS_PYBENCH_VM_SECONDS:-2}" --repeat 1 --calls 0 --modes idle,blocking,naive,morpheus
}

# sdk-python as a service sees it, against the real agent at its defaults (slice 5 ms, grace 2 ms), the
# sim backend and the tracing backend (BPF, where the kernel and root allow; otherwise it says why and
# runs sim only) side by side, each in a private runtime directory: fairness of 2/4/8 CPU-bound tasks
# and an aiohttp service over loopback (light p99 as a ratio to `asyncio.sleep(0)` per round and
# backend, heavy req/s), 5 rounds (sdk-python/BENCHMARKS.md, "Service"). About 4 minutes.
step_python_service() {
  bash sdk-python/bench/service.sh "${MORPHEUS_SERVICE_SECONDS:-8}" "${MORPHEUS_SERVICE_ROUNDS:-5}" "${MORPHEUS_SERVICE_FAIRNESS_ROUNDS:-2}"
}

# sdk-node's service table: the example Fastify service driven over loopback with scx_morpheus's sim
# and tracing backends side by side (trace where the kernel and root allow it; the output says why not
# otherwise); per backend and round, light-route p99 over the best fixed setImmediate cadence and
# heavy throughput over no yields, plus what Morpheus costs when nothing is asked
# (sdk-node/BENCHMARKS.md). About 5 minutes at 3 s a cell, 5 rounds.
step_node_service() {
  bash sdk-node/bench/service.sh --seconds "${MORPHEUS_NODE_SERVICE_SECONDS:-3}" --rounds "${MORPHEUS_NODE_SERVICE_ROUNDS:-5}"
}

# scx_morpheus against EEVDF and the scx peers scx_bpfland, scx_lavd, scx_flash, scx_cosmos and
# scx_pandemonium (built from crates.io by tools/setup.sh --peers-only the first time this step runs, and
# only then: it says so and cargo shows its progress), observer, enforced, and enforced on the former
# default base order, `recent` (the before/after of the base policy), on the reference evaluation's tables
# (latency, starvation, liar) and a CPU-bound batch, in the real-kernel VM, one boot, schedulers
# interleaved by round (scheduler/BENCHMARKS.md, "Comparison"). Prints the tables with ratios to EEVDF
# and the verdicts, and writes one p99 plot per table to $MORPHEUS_CACHE/compare. About 36 minutes on a
# quiet host with the peers built (all nine columns in a fresh clone: 2,165 s, scheduler/BENCHMARKS.md,
# with 2.5 s starvation cells), and about 10 minutes more with the 16 s starvation cell it now runs
# (MORPHEUS_COMPARE_STARVATION_SECONDS; shorter cells leave that verdict unresolved, BENCHMARKS.md),
# plus the peers' first build (about 10 minutes with warm cargo caches, far longer from cold ones). On a loaded host a round is far longer: 10 minutes for seven schedulers at
# load average 20-40 (scx_lavd's BPF load alone took 2 minutes under TCG; scheduler/BENCHMARKS.md).
# MORPHEUS_COMPARE_TABLES picks tables (default all: latency,checkpoint_cost,starvation,liar,batch), e.g.
# latency,starvation,batch for the peers' verdicts alone; MORPHEUS_COMPARE_SCHEDULERS picks columns.
# MORPHEUS_COMPARE_QEMU=trixie runs the VM on Debian trixie's qemu with multi-threaded TCG (installed
# by tools/setup.sh --qemu-trixie then); the default is the host's qemu 7.2, single-threaded.
step_compare() {
  # The peers are built here, the first time a comparison needs them, not by every step's set-up.
  bash tools/setup.sh --peers-only
  local out="${MORPHEUS_COMPARE_OUT:-$MORPHEUS_CACHE/compare}" vm=(--qemu host --tcg-threads single)
  if [[ "${MORPHEUS_COMPARE_QEMU:-host}" == trixie ]]; then
    bash tools/setup.sh --qemu-trixie
    vm=(--qemu trixie --tcg-threads multi)
  fi
  mkdir -p "$out"
  bash scheduler/compare/run-vm.sh --plots "$out" --json "$out/results.jsonl" --log "$out/console.log" "${vm[@]}" -- \
    --schedulers "${MORPHEUS_COMPARE_SCHEDULERS:-eevdf,bpfland,lavd,flash,cosmos,pandemonium,observer,enforced,enforced-recent}" \
    --rounds "${MORPHEUS_COMPARE_ROUNDS:-5}" --cell-seconds "${MORPHEUS_COMPARE_CELL_SECONDS:-2.5}" \
    --starvation-seconds "${MORPHEUS_COMPARE_STARVATION_SECONDS:-16}" \
    --tables "${MORPHEUS_COMPARE_TABLES:-latency,checkpoint_cost,starvation,liar,batch}"
}

# add steps here (scheduler, kernel VM, benchmarks, conformance report, ...)

STEPS=(
  abi_check
  abi_report
  scx_arm64
  conformance_arm64
  trace_arm64_vm
  starvation
  trace_bench
  yield_bench
  starvation_vm
  python_bench_vm
  python_service
  node_service
  compare
)

# ---------------------------------------------------------------------------

run_step() {
  local name="$1" start=$SECONDS status=0
  log "step $name: start"
  # A subshell outside any `||`/`if`, so `set -e` stops the step at its first
  # failing command (bash ignores -e inside a function called as `f || ...`).
  set +e
  (
    set -e
    "step_$name"
  )
  status=$?
  set -e
  if ((status != 0)); then
    log "step $name: FAILED (exit status $status) after $((SECONDS - start))s"
    return "$status"
  fi
  log "step $name: done in $((SECONDS - start))s"
}

main() {
  if [[ "${1:-}" == "--list" ]]; then
    printf '%s\n' "${STEPS[@]}"
    return
  fi
  local steps=("$@")
  ((${#steps[@]})) || steps=("${STEPS[@]}")
  local name
  for name in "${steps[@]}"; do
    declare -F "step_$name" >/dev/null || { log "unknown step '$name'; steps: ${STEPS[*]}"; return 2; }
  done

  # The peer schedulers are built by the compare step itself, when it runs (several minutes each).
  bash tools/setup.sh --no-peers
  # shellcheck source=tools/env.sh
  source tools/env.sh

  for name in "${steps[@]}"; do
    run_step "$name"
  done
  log "all ${#steps[@]} steps done"
}

main "$@"
