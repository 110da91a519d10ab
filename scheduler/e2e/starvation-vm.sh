#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The starvation benchmark (scheduler/starvation, scheduler/BENCHMARKS.md) on the real sched_ext
# backend: builds scx_morpheus (the same command as e2e/run.sh) and the benchmark, release; boots
# Debian sid's kernel under qemu TCG with both in a busybox initramfs and runs e2e/starvation-guest.sh
# there: modes off (kernel default scheduler), observer and enforced (scx_morpheus --backend kernel)
# in one boot. Prints the table from the console log. Exits with the guest's code.
#
# usage: scheduler/e2e/starvation-vm.sh [--kernel DIR] [--log FILE] [--timeout SECS] [-- STARVATION-ARGS...]
#        (default STARVATION-ARGS: --seconds 12 --rounds 3)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
readonly PROG=starvation-vm
# shellcheck source=../vm/wrapper-args.sh
source "$root/scheduler/vm/wrapper-args.sh"

timeout=600
guest_args=(--seconds 12 --rounds 3)
guest_args_name=benchmark
reserved_guest_args=('--backend*' '--scheduler*')
reserved_why="the VM run sets --backend kernel and --scheduler itself"
parse_vm_args "$@"
need_bpf_clang

target_dir=${CARGO_TARGET_DIR:-$root/target}
echo "$PROG: building scx_morpheus (default features: kernel) and the starvation benchmark, release" >&2
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus)
(cd "$root" && cargo build --release -p morpheus-starvation)

work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-starvation-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf 'STARVATION_ARGS="%s"\n' "${guest_args[*]}" >"$work/starvation.env"
default_log morpheus-starvation-vm
code=0
"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" \
	--init-script "$here/starvation-guest.sh" \
	--bin "$target_dir/release/scx_morpheus" \
	--bin "$target_dir/release/starvation" \
	--file "$work/starvation.env:/etc/morpheus/starvation.env" \
	--timeout "$timeout" --log "$log" --quiet || code=$?

echo "$PROG: --- starvation benchmark in the VM (sched_ext backend, qemu TCG) ---"
tr -d '\r' <"$log" | sed -n 's/^starvation-vm: //p' | grep -v -e '^scx_morpheus: ' -e '^EXIT: ' || true
echo "$PROG: guest exit code $code"
exit "$code"
