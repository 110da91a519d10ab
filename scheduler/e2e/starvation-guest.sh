#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest half of the starvation benchmark in the VM (run by e2e/starvation-vm.sh inside the VM as
# /morpheus/test): the same `starvation` binary and scenario as scheduler/starvation/run.sh, with
# scx_morpheus on its sched_ext backend (real BPF scheduler) for the observer and enforced modes and
# the kernel's default scheduler for `off`, all in one boot. Prints the table on the console.
# Exit: the benchmark's own code (0 = all three modes ran).

# Settings from the host (starvation-vm.sh); defaults for a manual run.
STARVATION_ARGS="--seconds 12 --rounds 3"
[ -r /etc/morpheus/starvation.env ] && . /etc/morpheus/starvation.env

state=$(cat /sys/kernel/sched_ext/state 2>/dev/null)
if [ "$state" != disabled ]; then
	echo "starvation-vm: sched_ext state is '${state:-missing}', expected 'disabled'"
	exit 1
fi
echo "starvation-vm: kernel $(uname -r), $(nproc) CPUs; starvation --backend kernel $STARVATION_ARGS"
# shellcheck disable=SC2086 # word splitting of the argument list is intended
starvation --backend kernel --scheduler "$(command -v scx_morpheus)" $STARVATION_ARGS >/tmp/starvation.out 2>&1
rc=$?
# Prefixed so the host picks the table out of the console log (kernel messages interleave there).
sed 's/^/starvation-vm: /' /tmp/starvation.out
echo "starvation-vm: exit $rc"
exit $rc
