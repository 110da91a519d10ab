#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The scheduler comparison (scheduler/BENCHMARKS.md, "Comparison") in the real-kernel VM: builds
# scx_morpheus (the same command as e2e/run.sh) and the `compare` binary, release; takes the peers
# (scx_bpfland, scx_lavd, scx_flash, scx_cosmos, scx_pandemonium) from tools/setup.sh's install under
# $MORPHEUS_CACHE/scx-peers (setup_scx_peers: the versions are its SCX_PEERS); boots Debian sid's
# kernel under qemu TCG once with all of them in a busybox initramfs and runs compare/guest.sh there.
# Then compare/report.py prints the tables with ratios to EEVDF and writes the plots.
#
# usage: scheduler/compare/run-vm.sh [--kernel DIR] [--log FILE] [--timeout SECS] [--plots DIR]
#                                    [--json FILE] [--qemu host|trixie] [--tcg-threads single|multi]
#                                    [-- COMPARE-ARGS...]
#        (--qemu and --tcg-threads go to scheduler/vm/run-vm.sh; default: the host's qemu, single)
#        (default COMPARE-ARGS: --rounds 3 --cell-seconds 3)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
readonly PROG=compare-vm
# shellcheck source=../vm/wrapper-args.sh
source "$root/scheduler/vm/wrapper-args.sh"

# Nine schedulers × 5 rounds × five tables took well over an hour on a loaded 2-core host (a round of
# seven schedulers, three tables: 10 minutes at load average 20-40): the limit is three hours.
timeout=10800
guest_args=(--rounds 3 --cell-seconds 3)
guest_args_name=compare
declare -A own_options=([--plots]="a directory" [--json]="a file" [--qemu]="host or trixie" [--tcg-threads]="single or multi")
reserved_guest_args=('--scx-*')
reserved_why="the VM run passes the scheduler binaries itself"
parse_vm_args "$@"
plots=${own_values[--plots]-$root/scheduler/compare/plots}
json=${own_values[--json]-}
qemu_from=${own_values[--qemu]-host}
tcg_threads=${own_values[--tcg-threads]-single}
# Checked before the builds: scheduler/vm/run-vm.sh refuses a bad value too, but only at boot.
[[ "$qemu_from" == host || "$qemu_from" == trixie ]] || die "--qemu must be host or trixie, got '$qemu_from'"
[[ "$tcg_threads" == single || "$tcg_threads" == multi ]] || die "--tcg-threads must be single or multi, got '$tcg_threads'"
vm_opts=(--qemu "$qemu_from" --tcg-threads "$tcg_threads")
need_bpf_clang
peers="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/scx-peers"
peer_bins=()
for crate in scx_bpfland scx_lavd scx_flash scx_cosmos scx_pandemonium; do
	# The version installed is the one tools/setup.sh's SCX_PEERS names (one directory per crate-version).
	bin=$(compgen -G "$peers/$crate-*/bin/$crate" | sort -V | tail -n 1 || true)
	# A peer not installed makes `compare` refuse to run it by name (unless --schedulers leaves it out).
	if [[ -n "$bin" && -x "$bin" ]]; then
		peer_bins+=(--bin "$bin")
	else
		echo "$PROG: note: $crate not found under $peers (tools/setup.sh --peers-only installs the scx peers)" >&2
	fi
done

# The kernel (fetched once, cached), resolved here because its config goes into the guest too:
# the peers' BPF programs read Kconfig values (libbpf looks for
# /boot/config-<release>), which the initramfs would not have.
if [[ ${#kernel_args[@]} -eq 0 ]]; then
	kernel_args=(--kernel "$("$root/scheduler/vm/fetch-kernel.sh")") || die "could not get a kernel (fetch-kernel.sh failed)"
fi
kdir=${kernel_args[1]}
[[ -f "$kdir/config" && -f "$kdir/kernel-release" ]] || die "$kdir has no config or kernel-release (expected a directory from fetch-kernel.sh)"
kconfig=(--file "$kdir/config:/boot/config-$(cat "$kdir/kernel-release")")

target_dir=${CARGO_TARGET_DIR:-$root/target}
echo "$PROG: building scx_morpheus (default features: kernel) and compare, release" >&2
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker)
(cd "$root" && cargo build --release -p morpheus-compare)

work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-compare-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
printf 'COMPARE_ARGS="%s"\nCOMPARE_DEBUG="%s"\n' "${guest_args[*]}" "${COMPARE_DEBUG:+1}" >"$work/compare.env"
default_log morpheus-compare-vm
if [[ "$tcg_threads" == multi ]]; then
	# The guard of multi-threaded TCG (scheduler/vm/README.md): live code patching must survive on this
	# qemu before any figure from it counts.
	echo "$PROG: multi-threaded TCG: scheduler/vm/selftest-static-keys.sh first, as its guard (console: $log.static-keys)" >&2
	"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" --init-script "$root/scheduler/vm/selftest-static-keys.sh" \
		"${vm_opts[@]}" --timeout 600 --log "$log.static-keys" --quiet &&
		grep -q 'selftest-static-keys: .* flips survived' "$log.static-keys" || {
		tr -d '\r' <"$log.static-keys" | tail -n 30 >&2
		die "selftest-static-keys.sh did not survive on ${vm_opts[*]} (its console's end above, all of it in $log.static-keys); use --tcg-threads single"
	}
fi
code=0
"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" \
	--init-script "$here/guest.sh" \
	--bin "$target_dir/release/scx_morpheus" \
	--bin "$target_dir/release/compare" \
	"${peer_bins[@]}" \
	--file "$work/compare.env:/etc/morpheus/compare.env" "${kconfig[@]}" \
	"${vm_opts[@]}" --timeout "$timeout" --log "$log" --quiet || code=$?

results="$work/results.jsonl"
tr -d '\r' <"$log" | sed -n 's/^compare-vm: //p' >"$results"
[[ -z "$json" ]] || cp "$results" "$json"
echo "$PROG: guest exit code $code"
if [[ $code -ne 0 ]]; then
	tr -d '\r' <"$log" | tail -n 40 >&2
	echo "$PROG: the guest streamed $(grep -c '^round ' "$results" || true) round line(s) before it stopped${json:+ (kept in $json)}" >&2
	exit "$code"
fi
python3 "$here/report.py" --plots "$plots" "$results"
