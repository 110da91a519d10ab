#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the wheel, run the pytest suite against the installed wheel (not the source tree), then
# install the wheel into a brand-new virtualenv and run the example there (tests/test_wheel_install.py).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# A private copy of the wheel: another build (the conformance gate's) may replace it meanwhile.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
wheel="$("$here/tools/build.sh" "$tmp")"
# The real agent for tests/test_sim_scheduler.py (its sim backend; no root, no sched_ext).
root="$(cd "$here/.." && pwd)"
cargo build --quiet -p scx_morpheus --manifest-path "$root/Cargo.toml" >&2
export MORPHEUS_SCX_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/scx_morpheus"
cd "$here"
# Import from the installed wheel: run pytest from tests/ so python/ is not on sys.path.
(cd tests && MORPHEUS_WHEEL="$wheel" "$here/.build/venv/bin/python" -m pytest -q -p no:cacheprovider -rs "$@" .)
