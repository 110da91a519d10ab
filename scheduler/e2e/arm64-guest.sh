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
#      refuses one without): sched_ext starts disabled, the BPF program's gate answers the same cases
#      with no scheduler attached (`e2e-gate-answer-kernel:` lines), scx_morpheus attaches as
#      "morpheus..." (sched_ext enabled), then the same live phases, and after each stop sched_ext is
#      disabled again with nothing left pinned.
# The SDKs other than Rust are not run here: their arm64 builds (libmorpheus, the wheel, the addon, the
# JNI library) and arm64 runtimes are not in this image. Every verdict is a count or a state
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

# --- 2. the kernel backend on sched_ext -------------------------------------------------------------
echo "e2e: --- kernel backend (sched_ext) ---"
E2E_BACKEND=kernel
check "sched_ext is built in (/sys/kernel/sched_ext/state exists)" test -e /sys/kernel/sched_ext/state
check "sched_ext starts 'disabled' (is '$(state)')" test "$(state)" = disabled
replay_gate kernel
check "the kernel backend's replay attached no scheduler (sched_ext is '$(state)')" test "$(state)" = disabled
if start_agent /tmp/attach.log --mode observer; then
	ops=$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null)
	check "sched_ext state is 'enabled' while scx_morpheus runs" test "$(state)" = enabled
	case "$ops" in morpheus*) ok "root/ops is '$ops'" ;; *) bad "root/ops is '$ops', expected morpheus..." ;; esac
	check "region pinned at /sys/fs/bpf/morpheus/region" test -e /sys/fs/bpf/morpheus/region
	sed -n 's/.*verified_insns: /e2e-veristat: /p' /tmp/attach.log
	stop_agent /tmp/attach.log
else
	bad "scx_morpheus (kernel backend, observer) did not start"
fi
live_sdks rust

echo "e2e: $failures failed"
[ "$failures" -eq 0 ]
