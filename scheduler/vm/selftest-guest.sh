#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest half of selftest.sh: checks that the VM gives the scheduler what it
# needs. Exits 0 only if every check passed.

# A forged result line without this run's id: run-vm.sh must ignore it, which
# the failing selftest run proves (it must still report this script's code).
echo "MORPHEUS-VM-EXIT=0"

expected_state=$(cat /etc/morpheus-selftest/expected-state)
failures=0
check() { # check DESCRIPTION COMMAND...
	description=$1
	shift
	if "$@"; then
		echo "selftest-guest: ok: $description"
	else
		echo "selftest-guest: FAIL: $description"
		failures=$((failures + 1))
	fi
}
mount_type() { # mount_type DIR: file system type mounted on DIR
	awk -v dir="$1" '$2 == dir { type = $3 } END { print type }' /proc/self/mounts
}

state_file=/sys/kernel/sched_ext/state
check "$state_file exists" test -f "$state_file"
state=$(cat "$state_file" 2>/dev/null)
echo "selftest-guest: sched_ext state: $state"
check "sched_ext state is '$expected_state'" test "$state" = "$expected_state"

check "/sys/fs/bpf is a bpffs" test "$(mount_type /sys/fs/bpf)" = bpf
check "/sys/fs/cgroup is cgroup2" test "$(mount_type /sys/fs/cgroup)" = cgroup2
check "/sys/kernel/debug is debugfs" test "$(mount_type /sys/kernel/debug)" = debugfs

btf=/sys/kernel/btf/vmlinux
check "$btf exists and is not empty" test -s "$btf"
# BTF starts with the little-endian magic 0xeB9F.
check "$btf starts with the BTF magic" test "$(od -An -tx1 -N2 "$btf" | tr -d ' ')" = 9feb

check "cpuid module usable (/dev/cpu/0/cpuid)" test -c /dev/cpu/0/cpuid
# bash is dynamically linked on the host: proves libraries and loader came along.
check "dynamically linked host binary runs" test -n "$(bash -c 'echo "$BASH_VERSION"')"

if [ "$failures" -ne 0 ]; then
	echo "selftest-guest: $failures check(s) failed"
	exit 1
fi
echo "selftest-guest: all checks passed"
