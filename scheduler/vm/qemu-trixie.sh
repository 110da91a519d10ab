#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# qemu-system-x86_64 (or, with --system qemu-system-aarch64 first, the arm64 one) from Debian trixie (qemu 10.0, installed by `tools/setup.sh --qemu-trixie` in a
# minbase root under the cache), run with the arguments given: in a private mount namespace, /tmp,
# /dev and the cache are bound into the trixie root at their own paths and qemu runs chrooted there,
# so the host's qemu (bookworm's 7.2) and libraries are untouched. Every file named on qemu's command
# line must therefore lie under /tmp or the cache (run-vm.sh checks). Needs root (mount, chroot). The
# script execs all the way down: its pid is qemu's, so a timeout's signal reaches qemu itself.
set -euo pipefail
cache=${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}
root=$cache/qemu-trixie/root
system=qemu-system-x86_64
if [[ "${1:-}" == --system ]]; then
	system=${2:-}
	shift 2 || { echo "qemu-trixie: error: --system needs qemu-system-x86_64 or qemu-system-aarch64" >&2; exit 2; }
fi
[[ "$system" == qemu-system-x86_64 || "$system" == qemu-system-aarch64 ]] || { echo "qemu-trixie: error: --system must be qemu-system-x86_64 or qemu-system-aarch64, got '$system'" >&2; exit 2; }
if [[ ! -f "$cache/qemu-trixie/root.done" || ! -x "$root/usr/bin/$system" ]]; then
	echo "qemu-trixie: error: no trixie $system at $root; run tools/setup.sh --qemu-trixie" >&2
	exit 2
fi
# shellcheck disable=SC2016 # expanded by the inner shell
exec unshare --mount --propagation private -- bash -c '
	set -e
	root=$1 cache=$2 system=$3
	shift 3
	mkdir -p "$root/tmp" "$root/dev" "$root$cache"
	mount --bind /tmp "$root/tmp"
	mount --rbind /dev "$root/dev"
	mount --bind "$cache" "$root$cache"
	exec chroot "$root" "/usr/bin/$system" "$@"' qemu-trixie "$root" "$cache" "$system" "$@"
