#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the abi3 wheel with maturin and install it into sdk-python/.build/venv (a virtualenv that
# also sees the interpreter's site-packages, where tools/setup.sh put pytest and uvloop).
# Prints the wheel's path. Used by the Bazel tests and by the conformance agent's build step.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/.build"
mkdir -p "$build/wheels"
rm -f "$build/wheels"/morpheus-*.whl
maturin build --release --quiet -m "$here/Cargo.toml" -o "$build/wheels" >&2
wheel="$(ls "$build/wheels"/morpheus-*.whl)"
if [[ ! -x "$build/venv/bin/python" ]]; then
  python3 -m venv --system-site-packages "$build/venv"
fi
"$build/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
echo "$wheel"
