#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# One call for tests: fetch (or reuse) sid's kernel, build an initramfs with
# the given binaries and files around a guest script, boot it and exit with
# the guest script's exit code. A thin composition of fetch-kernel.sh,
# mkinitramfs.sh and run-vm.sh; see README.md.
#
# Exit codes: the guest script's own; 124 = wall-clock timeout; 125 = no
# result (kernel or initramfs could not be prepared, kernel panic, qemu
# failure); 2 = bad arguments. Errors are explained on stderr.
set -euo pipefail

readonly PROG=run-guest
readonly EXIT_NO_RESULT=125
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

usage() {
	cat <<EOF
usage: $0 --init-script SCRIPT [options]

image (passed to mkinitramfs.sh):
  --init-script SCRIPT   the guest test (required); its exit code is ours
  --bin PATH[:DEST]      executable plus its shared libraries
                         (DEST defaults to /usr/local/bin/<name>, on PATH)
  --file SRC:DEST        extra file or directory at absolute DEST
  --module NAME          kernel module to load before the test
  --lib-path DIR[:DIR]   arm64: where the --bin's libraries are (mkinitramfs.sh)
architecture:
  --arch amd64|arm64     the guest's (default: amd64): the kernel, busybox and
                         qemu-system-* follow it (arm64 needs --qemu trixie)
kernel:
  --kernel DIR           kernel directory (default: output of fetch-kernel.sh,
                         cached under \${MORPHEUS_CACHE:-\$HOME/.cache/morpheus})
VM (passed to run-vm.sh):
  --timeout SECS  --smp N  --mem SIZE  --log FILE  --append ARGS  --cpu MODEL
  --tcg-threads single|multi  --qemu host|trixie  --quiet  --share-host-root
  --keep-initrd FILE     also keep the built initramfs at FILE
EOF
}

die() { printf '%s: error: %s\n' "$PROG" "$1" >&2; exit "${2:-2}"; } # die MESSAGE [CODE]

image_args=()
vm_args=()
kernel=""
keep_initrd=""
have_script=0
arch=amd64
while [[ $# -gt 0 ]]; do
	case "$1" in
	--init-script | --bin | --file | --module | --lib-path)
		[[ $# -ge 2 ]] || die "$1 needs a value"
		[[ "$1" != --init-script ]] || have_script=1
		image_args+=("$1" "$2")
		shift 2
		;;
	--timeout | --smp | --mem | --log | --append | --cpu | --tcg-threads | --qemu)
		[[ $# -ge 2 ]] || die "$1 needs a value"
		vm_args+=("$1" "$2")
		shift 2
		;;
	--quiet | --share-host-root) vm_args+=("$1"); shift ;;
	--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel=$2; shift 2 ;;
	--arch) [[ $# -ge 2 ]] || die "--arch needs amd64 or arm64"; arch=$2; shift 2 ;;
	--keep-initrd) [[ $# -ge 2 ]] || die "--keep-initrd needs a file"; keep_initrd=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument '$1'" ;;
	esac
done
[[ $have_script -eq 1 ]] || die "--init-script is required"
[[ "$arch" == amd64 || "$arch" == arm64 ]] || die "--arch must be amd64 or arm64, got '$arch'"
[[ -z "$keep_initrd" || "$keep_initrd" == *.cpio.gz ]] || die "--keep-initrd '$keep_initrd' must end in .cpio.gz"

if [[ -z "$kernel" ]]; then
	kernel=$("$here/fetch-kernel.sh" --arch "$arch") || die "could not get a kernel (fetch-kernel.sh failed, see above)" "$EXIT_NO_RESULT"
fi
[[ "$arch" == amd64 ]] || vm_args+=(--arch "$arch")
[[ -f "$kernel/vmlinuz" ]] || die "--kernel '$kernel' has no vmlinuz (expected a directory from fetch-kernel.sh)"

work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT
initrd=$work/guest.cpio.gz
"$here/mkinitramfs.sh" "$initrd" --kernel "$kernel" --arch "$arch" "${image_args[@]}" ||
	die "could not build the initramfs (mkinitramfs.sh failed, see above)" "$EXIT_NO_RESULT"
[[ -z "$keep_initrd" ]] || cp "$initrd" "$keep_initrd"

code=0
"$here/run-vm.sh" --kernel "$kernel" --initrd "$initrd" "${vm_args[@]}" || code=$?
exit "$code"
