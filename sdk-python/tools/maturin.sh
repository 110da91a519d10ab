#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# maturin, run while holding this tree's one maturin lock. Every maturin build of sdk-python, for any
# target, stages the extension at one fixed path of the shared cargo target dir (target/maturin/
# lib_morpheus.so) before it packs the wheel, so two builds at once (a test's, the release gate's or
# install test's, a conformance agent's) move or read each other's file ("Failed to stage ... No such
# file or directory"). Every caller in this repository builds through this script.
# Usage: tools/maturin.sh ARGS... (passed to maturin as they are)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$(cd "$here/.." && pwd)/target}"
mkdir -p "$target"
exec 9>"$target/maturin.lock"
flock 9
maturin "$@"
