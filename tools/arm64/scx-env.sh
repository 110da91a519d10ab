#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/scx-env.sh COMMAND ARGS...: runs COMMAND (e.g. `cargo build -p scx_morpheus --target
# aarch64-unknown-linux-gnu`) with what scx_morpheus's arm64 build and its runs under qemu need beyond
# .cargo/config.toml: Debian's arm64 libelf and zlib, unpacked by tools/setup.sh into a root under the
# project's cache. libbpf-sys links them from LIBBPF_SYS_LIBRARY_PATH_aarch64_unknown_linux_gnu; the
# linker finds libelf's own libraries (zlib, zstd) through -rpath-link; under qemu-aarch64-static the arm64
# loader finds them through the guest's LD_LIBRARY_PATH, which qemu sets from QEMU_SET_ENV (the host's
# programs never see it).
set -euo pipefail
root="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/scx-libs-root"
[[ -e $root/usr/lib/aarch64-linux-gnu/libelf.so ]] || { echo "tools/arm64/scx-env.sh: $root/usr/lib/aarch64-linux-gnu/libelf.so is missing: run tools/setup.sh" >&2; exit 1; }
libs="$root/usr/lib/aarch64-linux-gnu:$root/lib/aarch64-linux-gnu"
export LIBBPF_SYS_LIBRARY_PATH_aarch64_unknown_linux_gnu="$libs"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-Wl,-rpath-link,$libs"
export QEMU_SET_ENV="LD_LIBRARY_PATH=$libs"
exec "$@"
