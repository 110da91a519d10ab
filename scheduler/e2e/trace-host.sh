#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The real-kernel test's phases against the tracing backend on the host kernel (`scx_morpheus --backend
# trace`; needs root and a kernel with BPF and BTF, not sched_ext), the same phases the VM runs against
# sched_ext (e2e/guest.sh), from the same files:
#   1. the conformance matrix's `trace` column: the escalation gate's cases (cli.py export-gate-cases)
#      answered by the tracing backend's object (`--replay-gate`, loaded, never attached), judged here
#      into conformance/results/trace.results.json; a wrong or missing answer fails this test;
#   2. every SDK's own workers (Rust, C, Python, Node, Java on FFM and on JNI, built by e2e/sdk-workers.sh)
#      through the observer and enforced (kick) phases (e2e/live.sh's live_sdks): hints advance
#      preempt_seq, a cooperative worker acknowledges, nobody is escalated in observer mode, an escapable
#      spinner is escalated in enforced mode, a critical-section worker and an escapable=0 one never are;
#   3. the trust phase (e2e/trust-guest.sh): root-only pins, the effect journal across SIGKILL where the
#      host has cgroup v2's cpu, a forged header, per-uid region maps attacked by another unprivileged user
#      (the Rust attacker, uid 1002) with each SDK's own escapable=0 worker as the victim (uid 1001).
# The checks run in a mount namespace of their own with a private bpffs on /sys/fs/bpf, a private /tmp
# and a private /run/morpheus, so they meet no other run's pins, files or socket; the cgroup they cap is
# named after this run. Every verdict is a count or a state (e2e/live.sh). Exit 0 only if every check
# passed and the column is all green.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -z "${MORPHEUS_TRACE_HOST_INNER:-}" ]; then
	set -o pipefail
	cd "$root" || exit 1
	# The column names the commit it was produced at, read before the build; a tree with uncommitted
	# changes is marked so no commit can claim it (as e2e/run.sh does for the kernel column).
	commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
	[ -z "$(git -C "$root" status --porcelain --untracked-files=normal 2>/dev/null)" ] || commit="$commit+uncommitted-changes"
	cargo build -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus || exit 1
	work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-trace-host.XXXXXX") || exit 1
	trap 'rm -rf "$work"' EXIT
	bash "$here/sdk-workers.sh" "$work/sdk" e2e-host || exit 1
	echo "trace-host: built scx_morpheus and every SDK's worker in ${SECONDS} s"
	python3 "$root/conformance/harness/cli.py" export-gate-cases --cases "$work/gate-cases.jsonl" >&2 || exit 1
	code=0
	env MORPHEUS_TRACE_HOST_INNER=1 MORPHEUS_TRACE_HOST_BIN="${CARGO_TARGET_DIR:-$root/target}/debug" MORPHEUS_TRACE_HOST_WORK="$work" \
		unshare --mount --propagation private bash "$here/trace-host.sh" "$@" | tee "$work/log" || code=1
	# The trace column: judge the answers (a case without one fails its scenario, so a run that never
	# got to the replay leaves a red column, not an old one).
	sed -n 's/^e2e-gate-answer: //p' "$work/log" >"$work/gate-answers.jsonl"
	results=$root/conformance/results
	mkdir -p "$results"
	python3 "$root/conformance/harness/cli.py" import-answers --cases "$work/gate-cases.jsonl" --answers "$work/gate-answers.jsonl" \
		--column trace --export "$results/trace.results.json" || code=1
	if [ -f "$results/trace.results.json" ]; then
		python3 - "$results/trace.results.json" "$commit" <<-'EOF'
		import json, sys
		column = json.load(open(sys.argv[1]))
		column["commit"] = sys.argv[2]
		open(sys.argv[1], "w").write(json.dumps(column, indent=2) + "\n")
		EOF
	fi
	echo "trace-host: --- summary ---"
	echo "trace-host: checks passed: $(grep -ac "^e2e: ok" "$work/log")"
	grep -aE '^e2e: (FAIL|phase time)' "$work/log" | sed 's/^/trace-host: /'
	echo "trace-host: exit $code"
	exit "$code"
fi

mount -t bpf bpf /sys/fs/bpf || exit 1
mkdir -p /run/morpheus && mount -t tmpfs -o mode=0755 tmpfs /run/morpheus || exit 1
# The runtimes the SDK workers run on: this host's own, found before the private /tmp hides the
# checkout (the working directory may lie under /tmp, and a version manager's shim reads it).
PY_BIN=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') && [ -x "$PY_BIN" ] || { echo "trace-host: no Python interpreter found (python3 on PATH)" >&2; exit 1; }
PY_HOME=$(python3 -c 'import sys; print(sys.base_prefix)') || exit 1
case $PY_BIN in "$PY_HOME"/*) ;; *) echo "trace-host: the interpreter $PY_BIN is not under its home $PY_HOME" >&2; exit 1 ;; esac
NODE_BIN=$(command -v node) || { echo "trace-host: no node on PATH" >&2; exit 1; }
# The private /tmp is filled before it is moved over the real one: the checkout, its target directory
# or both may lie under /tmp, and are hidden from then on. It holds the binaries (the workers of the
# other users must be able to run them), the SDK workers, the gate cases and the checks.
stage="$(mktemp -d)" || exit 1
mount -t tmpfs -o mode=1777 tmpfs "$stage" || exit 1
mkdir -m 0755 "$stage/bin" "$stage/e2e" || exit 1
for b in scx_morpheus morpheus-e2e-worker morpheus; do install -m 0755 "$MORPHEUS_TRACE_HOST_BIN/$b" "$stage/bin/" || exit 1; done
install -m 0755 "$MORPHEUS_TRACE_HOST_WORK/sdk/morpheus-e2e-worker-c" "$stage/bin/" || exit 1
cp -r "$MORPHEUS_TRACE_HOST_WORK/sdk/py" "$MORPHEUS_TRACE_HOST_WORK/sdk/node" "$MORPHEUS_TRACE_HOST_WORK/sdk/java" \
	"$MORPHEUS_TRACE_HOST_WORK/gate-cases.jsonl" "$stage/e2e/" || exit 1
chmod -R a+rX "$stage/e2e" || exit 1
# The interpreter's home, read-only at a path every user reaches (the trust phase runs the SDK workers as
# other users, and a home under a private directory such as /root's is out of their reach): the
# interpreter runs from there, its libpython found through LD_LIBRARY_PATH ahead of its RUNPATH.
mkdir -m 0755 "$stage/python" && mount --bind "$PY_HOME" "$stage/python" && mount -o remount,bind,ro "$stage/python" || exit 1
PY_BIN=/tmp/python/${PY_BIN#"$PY_HOME"/}
PY_HOME=/tmp/python
PY_LIBS=$PY_HOME/lib
install -m 0644 "$root/scheduler/e2e/trust-guest.sh" "$root/scheduler/e2e/live.sh" "$stage/" || exit 1
. "$MORPHEUS_TRACE_HOST_WORK/sdk/jdks.env" || exit 1
mount --move "$stage" /tmp || exit 1
export PATH="/tmp/bin:$PATH"

JAVA25=$JDK25/bin/java
JAVA17=$JDK17/bin/java
HOST_LIBS=""
E2E_BACKEND=trace
E2E_DIR=/tmp/e2e
. /tmp/live.sh || exit 1
SETPRIV=$(command -v setpriv)
TRUST_CGROUP=/sys/fs/cgroup/e2e-trust-trace-$$
# The SDKs whose workers run the live phases and are the trust domains' victim (user A): all of them.
# MORPHEUS_TRACE_HOST_SDKS narrows the list when debugging one SDK (set and empty: no live phases, and
# the trust phase's victim is the Rust worker, its default).
SDKS=${MORPHEUS_TRACE_HOST_SDKS-rust c python node java-ffm java-jni}
TRUST_SDKS=$SDKS

echo "e2e: tracing backend on the host: kernel $(uname -r), $(nproc) CPUs"

# --- conformance: the escalation gate's cases, judged by the tracing backend's object ---------------
GATE_CASES=/tmp/e2e/gate-cases.jsonl
scx_morpheus --backend trace --replay-gate "$GATE_CASES" >/tmp/gate-answers.jsonl 2>/tmp/gate-replay.log
rc=$?
cat /tmp/gate-replay.log
sed 's/^/e2e-gate-answer: /' /tmp/gate-answers.jsonl
check "the tracing backend's gate answered every conformance case ($(wc -l </tmp/gate-answers.jsonl) of $(wc -l <"$GATE_CASES"), exit $rc)" \
	test "$rc" -eq 0 -a "$(wc -l </tmp/gate-answers.jsonl)" -eq "$(wc -l <"$GATE_CASES")"

echo "e2e: phase time: gate replay ${SECONDS} s"
phase_start=$SECONDS
# --- every SDK's own workers, live -------------------------------------------------------------
live_sdks $SDKS

echo "e2e: phase time: every SDK's live phases $((SECONDS - phase_start)) s"
phase_start=$SECONDS
# --- trust ---------------------------------------------------------------------------------------
. /tmp/trust-guest.sh || bad "the checks (e2e/trust-guest.sh) did not run to the end"
rmdir "$TRUST_CGROUP" 2>/dev/null
echo "e2e: phase time: trust $((SECONDS - phase_start)) s"
echo "e2e: $failures failed"
[ "$failures" -eq 0 ]
