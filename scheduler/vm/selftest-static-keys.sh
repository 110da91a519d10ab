#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest for selftest.sh step 6: flip static keys (enabling and disabling the
# sched tracepoints patches kernel text with int3 breakpoints, as sched_ext
# does when a scheduler loads) while both vCPUs keep switching tasks. A VM
# whose CPUs see stale code dies with "Oops: int3"; this must not.
flips=20
events=/sys/kernel/tracing/events/sched/enable
[ -w "$events" ] || { echo "selftest-static-keys: $events missing (tracefs not mounted?)"; exit 1; }
for _ in 1 2; do # one busy task per vCPU
	(while :; do usleep 50; done) &
done
i=0
while [ "$i" -lt "$flips" ]; do
	echo 1 >"$events" || exit 1
	echo 0 >"$events" || exit 1
	i=$((i + 1))
done
echo "selftest-static-keys: $i flips survived"
