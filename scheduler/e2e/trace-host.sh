#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The trust phase of the real-kernel test (e2e/trust-guest.sh: root-only pins, the effect journal
# across SIGKILL, a forged header, per-uid region maps attacked by another unprivileged user) against
# the tracing backend on the host kernel (`scx_morpheus --backend trace`; needs root and a kernel with
# BPF and BTF, not sched_ext). The checks run in a mount namespace of their own with a private bpffs on
# /sys/fs/bpf, a private /tmp and a private /run/morpheus, so they meet no other run's pins, files or
# socket; the cgroup they cap is named after this run. Exit 0 only if every check passed.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -z "${MORPHEUS_TRACE_HOST_INNER:-}" ]; then
	cd "$root"
	cargo build -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus || exit 1
	target="${CARGO_TARGET_DIR:-$root/target}/debug"
	exec env MORPHEUS_TRACE_HOST_INNER=1 MORPHEUS_TRACE_HOST_BIN="$target" \
		unshare --mount --propagation private bash "$here/trace-host.sh" "$@"
fi

mount -t bpf bpf /sys/fs/bpf || exit 1
mkdir -p /run/morpheus && mount -t tmpfs -o mode=0755 tmpfs /run/morpheus || exit 1
# The private /tmp is filled before it is moved over the real one: the checkout, its target directory
# or both may lie under /tmp, and are hidden from then on. It holds the binaries (the workers of the
# other users must be able to run them) and the checks.
stage="$(mktemp -d)" || exit 1
mount -t tmpfs -o mode=1777 tmpfs "$stage" || exit 1
mkdir -m 0755 "$stage/bin" || exit 1
for b in scx_morpheus morpheus-e2e-worker morpheus; do install -m 0755 "$MORPHEUS_TRACE_HOST_BIN/$b" "$stage/bin/" || exit 1; done
install -m 0644 "$root/scheduler/e2e/trust-guest.sh" "$stage/trust-guest.sh" || exit 1
mount --move "$stage" /tmp || exit 1
export PATH="/tmp/bin:$PATH"

failures=0
ok() { echo "e2e: ok: $*"; }
bad() { echo "e2e: FAIL: $*"; failures=$((failures + 1)); }
check() { # check DESCRIPTION COMMAND...
	d=$1
	shift
	if "$@"; then ok "$d"; else bad "$d"; fi
}
# field ROLE KEY FILE: value of KEY on the worker line of ROLE
field() { awk -v role="role=$1" -v key="$2" '$1 == role { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == key) print kv[2] } }' "$3"; }
SOCK=/run/morpheus/agent.sock
agent_stat() { timeout 30 morpheus stats --socket "$SOCK" --get "$1"; }
WORKER_SECONDS=${WORKER_SECONDS:-3}
SETPRIV=$(command -v setpriv)
TRUST_CGROUP=/sys/fs/cgroup/e2e-trust-trace-$$

agent_pid=""
start_agent() { # start_agent LOG ARGS...
	log=$1
	shift
	rm -f "$SOCK"
	scx_morpheus --backend trace --stats 1 "$@" >"$log" 2>&1 &
	agent_pid=$!
	i=0
	while [ $i -lt 600 ]; do
		[ -S "$SOCK" ] && return 0
		if ! kill -0 "$agent_pid" 2>/dev/null; then
			echo "e2e: scx_morpheus exited during start-up:"
			cat "$log"
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	echo "e2e: scx_morpheus did not come up in 60 s:"
	cat "$log"
	return 1
}
stop_agent() { # stop_agent LOG: Ctrl-C, wait, show the agent's output
	kill -INT "$agent_pid"
	wait "$agent_pid"
	rc=$?
	echo "---- scx_morpheus output ($1) ----"
	cat "$1"
	echo "---- end ----"
	check "scx_morpheus exits 0 after SIGINT (got $rc)" test "$rc" -eq 0
	check "pinned region removed" test ! -e /sys/fs/bpf/morpheus/region
}

echo "e2e: tracing backend on the host: kernel $(uname -r), $(nproc) CPUs"
. /tmp/trust-guest.sh || bad "the checks (e2e/trust-guest.sh) did not run to the end"
rmdir "$TRUST_CGROUP" 2>/dev/null
echo "e2e: $failures failed"
[ "$failures" -eq 0 ]
