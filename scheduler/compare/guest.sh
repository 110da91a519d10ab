#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Guest half of the scheduler comparison (run by compare/run-vm.sh inside the VM as /morpheus/test):
# the `compare` binary with every scheduler's binary from the initramfs, one boot. Its output goes to
# the console prefixed `compare-vm: ` for the host's report. Exit: compare's own code.

COMPARE_ARGS="--rounds 3 --cell-seconds 3"
[ -r /etc/morpheus/compare.env ] && . /etc/morpheus/compare.env
# Per-section diagnostics of the liar on stderr (the host sets it with COMPARE_DEBUG=1).
[ -n "${COMPARE_DEBUG:-}" ] && export COMPARE_DEBUG

echo "compare-vm: kernel $(uname -r), $(nproc) CPUs; compare $COMPARE_ARGS"
peers=""
for peer in scx_bpfland scx_lavd scx_flash scx_cosmos scx_pandemonium; do
	path=$(command -v $peer) && peers="$peers --$(echo $peer | tr _ -) $path"
done
# shellcheck disable=SC2086 # word splitting of the argument lists is intended
# Streamed to the console as compare prints it (a line at a time), prefixed so the host picks the
# results out of the console log (kernel messages interleave there): the `round` lines of the rounds
# done reach the host even when the run is cut short (run-vm.sh's timeout), not only at the end.
{
	compare --scx-morpheus "$(command -v scx_morpheus)" $peers $COMPARE_ARGS 2>/tmp/compare.err
	echo $? >/tmp/compare.rc
} | sed 's/^/compare-vm: /'
rc=$(cat /tmp/compare.rc)
sed 's/^/compare-log: /' /tmp/compare.err | tail -n 200
echo "compare-vm: exit $rc"
exit $rc
