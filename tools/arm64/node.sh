#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/node.sh ARGS...: Node for linux-arm64-gnu (installed by tools/setup.sh into the project's
# cache) run under qemu-aarch64-static user-mode emulation, with the arm64 libc as QEMU_LD_PREFIX.
# process.arch is 'arm64' there, so a package resolves its arm64 addon.
set -euo pipefail
version=$(sed -n 's/^ARM64_NODE_VERSION=//p' "$(dirname "${BASH_SOURCE[0]}")/../setup.sh")
node="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/node-v$version/bin/node"
[[ -x $node ]] || { echo "tools/arm64/node.sh: $node is missing: run tools/setup.sh" >&2; exit 1; }
QEMU_LD_PREFIX=/usr/aarch64-linux-gnu exec qemu-aarch64-static "$node" "$@"
