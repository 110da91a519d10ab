#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/python.sh ARGS...: Debian's python3.11 for arm64 (unpacked by tools/setup.sh into a root
# under the project's cache) run under qemu-aarch64-static user-mode emulation with that root as
# QEMU_LD_PREFIX, so it loads the arm64 libc and libraries unpacked beside it; platform.machine() is
# aarch64 there. tools/arm64/python.sh --root prints the root (pip's wheel is at ROOT/pip-VERSION.whl).
set -euo pipefail
root="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/python3.11-root"
[[ -x $root/usr/bin/python3.11 ]] || { echo "tools/arm64/python.sh: $root/usr/bin/python3.11 is missing: run tools/setup.sh" >&2; exit 1; }
[[ "${1:-}" == --root ]] && { echo "$root"; exit 0; }
QEMU_LD_PREFIX="$root" exec qemu-aarch64-static "$root/usr/bin/python3.11" "$@"
