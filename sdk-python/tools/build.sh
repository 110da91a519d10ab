#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the abi3 wheel with maturin and install it into sdk-python/.build/venv (a virtualenv that
# also sees the interpreter's site-packages, where tools/setup.sh put pytest and uvloop).
# Prints the wheel's path; with an argument DIR, copies the wheel there first (under the lock, so another
# build cannot replace it meanwhile) and prints the copy's path. Used by the Bazel tests, the
# conformance agent's build step and the bench.
#
# `bazel test //sdk-python/... //conformance:python` runs two callers at once: this script's lock keeps
# them from replacing each other's wheel in .build/wheels and the venv's install (tools/maturin.sh's lock
# serialises the maturin build itself with every other of the tree), and the wheel is reinstalled only
# when its extension differs from the installed one (reinstalling under a test that is importing it
# would break that test).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/.build"
mkdir -p "$build/wheels"
exec 9>"$build/build.lock"
flock 9
rm -f "$build/wheels"/morpheus-*.whl
"$here/tools/maturin.sh" build --release --quiet -m "$here/Cargo.toml" -o "$build/wheels" >&2
wheel="$(ls "$build/wheels"/morpheus-*.whl)"
if [[ ! -x "$build/venv/bin/python" ]]; then
  python3 -m venv --system-site-packages "$build/venv"
fi
same="$("$build/venv/bin/python" - "$wheel" <<'EOF'
import hashlib, importlib.util, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
built = {n: hashlib.sha256(wheel.read(n)).digest() for n in wheel.namelist() if n.startswith("morpheus/")}
spec = importlib.util.find_spec("morpheus")
if spec is None or not spec.submodule_search_locations:
    print("no"); sys.exit()
root = spec.submodule_search_locations[0].rsplit("/morpheus", 1)[0]
try:
    installed = {n: hashlib.sha256(open(f"{root}/{n}", "rb").read()).digest() for n in built}
except OSError:
    print("no"); sys.exit()
print("yes" if installed == built else "no")
EOF
)"
if [[ $same != yes ]]; then
  "$build/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel" >&2
fi
if [[ $# -ge 1 ]]; then
  cp "$wheel" "$1/"
  wheel="$1/$(basename "$wheel")"
fi
echo "$wheel"
