#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The service benchmark (bench/service.mjs): builds the addon and scx_morpheus (release, the command
# scheduler/starvation/run.sh uses), then runs it. Arguments go to bench/service.mjs (--seconds,
# --rounds, --slice-us, --out FILE).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/tools/build.sh"
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus >&2)
target="${CARGO_TARGET_DIR:-$root/target}/release"
cd "$here"
exec node bench/service.mjs --scheduler "$target/scx_morpheus" "$@"
