#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest half of the arm64 VM test (run by e2e/arm64-vm.sh as /morpheus/test inside qemu-system-aarch64,
# on Debian sid's arm64 kernel), with the cross-built scx_morpheus and morpheus-e2e-worker (aarch64):
#   1. the tracing backend (`--backend trace`, BPF and BTF, no sched_ext): its object answers the
#      escalation gate's conformance cases (loaded, never attached; `e2e-gate-answer-trace:` lines,
#      judged on the host), then the Rust worker through the observer and enforced (kick) phases
#      (e2e/live.sh's live_sdks): hints advance preempt_seq, a cooperative worker acknowledges, nobody
#      is escalated in observer mode, an escapable spinner is escalated in enforced mode, a worker in a
#      critical section and one registered with escapable=0 never are;
#   2. the kernel backend on sched_ext (sid's arm64 kernel has CONFIG_SCHED_CLASS_EXT=y; fetch-kernel.sh
#      refuses one without): e2e/guest.sh itself, the x86-64 VM's checks (its gate replay, answered on
#      `e2e-gate-answer:` lines; observer and enforced kick with the gate's verdict counters; a killed
#      agent; throttle, hybrid and the critical-section stress; a restart the kernel asks for by taking
#      CPU 1 offline and back; the live phases; the trust phase with Debian's arm64 setpriv), with the
#      Rust worker only (E2E_SDKS) and without its overhead benchmark (BENCH_ROUNDS=0).
# Not run here: the SDKs other than Rust (their arm64 builds, libmorpheus, the wheel, the addon and the
# JNI library, and arm64 runtimes are not in this image). Every verdict is a count or a state
# (e2e/live.sh). Exit 0 only if every check passed.

E2E_DIR=/morpheus
E2E_BACKEND=trace
. /morpheus/live.sh

echo "e2e: arm64 guest: kernel $(uname -r) ($(uname -m)), $(nproc) CPUs"
check "the guest is arm64 (uname -m is '$(uname -m)')" test "$(uname -m)" = aarch64
check "the agent binary is the arm64 one (it runs here)" scx_morpheus --version
GATE_CASES=/morpheus/gate-cases.jsonl

# replay_gate BACKEND: the backend's BPF object answers every conformance case, loaded, not attached.
replay_gate() {
	scx_morpheus --backend "$1" --replay-gate "$GATE_CASES" >"/tmp/gate-answers-$1.jsonl" 2>"/tmp/gate-replay-$1.log"
	rc=$?
	cat "/tmp/gate-replay-$1.log"
	sed "s/^/e2e-gate-answer-$1: /" "/tmp/gate-answers-$1.jsonl"
	check "$1 backend: the gate answered every conformance case ($(wc -l <"/tmp/gate-answers-$1.jsonl") of $(wc -l <"$GATE_CASES"), exit $rc)" \
		test "$rc" -eq 0 -a "$(wc -l <"/tmp/gate-answers-$1.jsonl")" -eq "$(wc -l <"$GATE_CASES")"
}

# --- 1. the tracing backend ---------------------------------------------------------------------
echo "e2e: --- tracing backend ---"
E2E_BACKEND=trace
replay_gate trace
check "the tracing backend's replay attached no scheduler (sched_ext is '$(state)')" test "$(state)" = disabled
live_sdks rust
check "the tracing backend never attached a scheduler (sched_ext is '$(state)')" test "$(state)" = disabled

# --- 2. the kernel backend on sched_ext: e2e/guest.sh ----------------------------------------------
echo "e2e: --- kernel backend (sched_ext): e2e/guest.sh ---"
env E2E_SDKS=rust BENCH_ROUNDS=0 sh /morpheus/guest.sh
guest_rc=$?
check "e2e/guest.sh (kernel backend) passed every check (exit $guest_rc)" test "$guest_rc" -eq 0

echo "e2e: $failures failed"
[ "$failures" -eq 0 ]
