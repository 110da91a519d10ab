#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the addon, then run the per-call benchmark pinned to one CPU (the last one) when taskset exists.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/tools/build.sh"
cd "$here"
pin=()
if command -v taskset >/dev/null; then pin=(taskset -c "$(($(nproc) - 1))"); fi
exec "${pin[@]}" node bench/bench.mjs "$@"
