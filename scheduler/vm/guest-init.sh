#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# /init of the Morpheus test VM, run by busybox sh as PID 1 (installed by
# mkinitramfs.sh). Sets up the usual pseudo file systems, loads the modules
# listed in /etc/morpheus/modules, runs /morpheus/test and reports its exit
# code on the console as
#
#   MORPHEUS-VM-EXIT=<code>[ run=<id>]
#
# then powers off. <id> comes from the kernel command line (morpheus_run=,
# which the kernel hands to init as an environment variable) so that run-vm.sh
# can tell the real marker from anything the test itself prints.
# PID 1 must never exit (the kernel would panic), hence no `set -e`.

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
run_id=${morpheus_run:-}
unset morpheus_run

report() {
	# Leading newline: kernel messages may have left the cursor mid-line.
	printf '\nMORPHEUS-VM-EXIT=%s%s\n' "$1" "${run_id:+ run=$run_id}"
	sync
	poweroff -f
	# Only reached if power-off failed; keep PID 1 alive so that run-vm.sh's
	# timeout, not a kernel panic, ends the run.
	while :; do sleep 3600; done
}

mount -t devtmpfs devtmpfs /dev
# The kernel may have started us without a console if /dev/console was absent.
exec </dev/console >/dev/console 2>&1

setup_errors=""
mount_fs() { # mount_fs TYPE DIR [optional]
	[ -d "$2" ] || mkdir -p "$2"
	if ! mount -t "$1" "$1" "$2"; then
		if [ "${3:-}" = optional ]; then
			echo "morpheus-init: note: could not mount $1 on $2"
		else
			setup_errors="$setup_errors $1@$2"
		fi
	fi
}

mount_fs proc /proc
mount_fs sysfs /sys
[ -d /sys/kernel/debug ] && mount_fs debugfs /sys/kernel/debug
[ -d /sys/kernel/tracing ] && mount_fs tracefs /sys/kernel/tracing optional
mount_fs bpf /sys/fs/bpf
mount_fs cgroup2 /sys/fs/cgroup
mount_fs tmpfs /run
mount_fs tmpfs /tmp
mount_fs tmpfs /dev/shm
mount_fs devpts /dev/pts optional
hostname morpheus-vm

if [ -s /etc/morpheus/modules ]; then
	while read -r module; do
		[ -n "$module" ] || continue
		insmod "$module" || setup_errors="$setup_errors insmod:$module"
	done </etc/morpheus/modules
fi

if [ -s /etc/morpheus/ld-library-path ]; then
	LD_LIBRARY_PATH=$(cat /etc/morpheus/ld-library-path)
	export LD_LIBRARY_PATH
fi

if [ -n "$setup_errors" ]; then
	echo "morpheus-init: error: VM setup failed:$setup_errors; test not run"
	report 125
fi

echo "morpheus-init: running /morpheus/test on $(uname -r) ($(nproc) CPUs)"
export HOME=/root TERM=dumb MORPHEUS_VM=1
cd /
# shellcheck disable=SC2065 # not the test(1) builtin: our test program
/morpheus/test </dev/null
rc=$?
echo "morpheus-init: test exited with $rc after $(cut -d' ' -f1 /proc/uptime) s of uptime"
report "$rc"
