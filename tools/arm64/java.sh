#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/java.sh ARGS...: a Java runtime for linux-aarch64 (Temurin's JRE, installed by tools/setup.sh
# into the project's cache) run under qemu-aarch64-static user-mode emulation, with the arm64 libc as
# QEMU_LD_PREFIX. os.arch is "aarch64" there, so sdk-java loads its linux-aarch64 natives.
# tools/arm64/java.sh --home prints the JRE's directory: Maven Surefire's -Djvm= must be a file named java,
# which the kernel hands to qemu-aarch64 through binfmt_misc (tools/setup.sh) with QEMU_LD_PREFIX inherited.
set -euo pipefail
version=$(sed -n 's/^ARM64_JRE_VERSION=//p' "$(dirname "${BASH_SOURCE[0]}")/../setup.sh")
java="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/jre-$version/bin/java"
[[ -x $java ]] || { echo "tools/arm64/java.sh: $java is missing: run tools/setup.sh" >&2; exit 1; }
[[ "${1:-}" == --home ]] && { dirname "$(dirname "$java")"; exit 0; }
QEMU_LD_PREFIX=/usr/aarch64-linux-gnu exec qemu-aarch64-static "$java" "$@"
