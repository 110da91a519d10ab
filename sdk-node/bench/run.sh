#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the addon and scx_morpheus (release, the command the other benchmarks use; the busy-loop
# table runs against it), then run the per-call benchmark pinned to one CPU (the last one) when
# taskset exists (the agents it starts run on every CPU). Arguments go to bench/bench.mjs.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/tools/build.sh"
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus >&2)
export MORPHEUS_SCX_BIN="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
cd "$here"
pin=()
if command -v taskset >/dev/null; then pin=(taskset -c "$(($(nproc) - 1))"); fi
exec "${pin[@]}" node bench/bench.mjs "$@"
