#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# build.sh: the python-arm64 agent's build. maturin cross-builds the abi3 wheel for aarch64-unknown-linux-gnu
# (through sdk-python/tools/maturin.sh, as every maturin build of the tree: it holds the lock that keeps
# two builds from staging the library at the same path at once), and pip installs it for that platform
# (--platform manylinux_2_34_aarch64: pip refuses a wheel whose tags do not fit) into target/conformance/arm64/python-<digest>, the digest of the package's
# members in the wheel (morpheus/*, names and contents, as sdk-python/tools/build.sh compares them: the
# wheel's own bytes and its SBOM differ each build).
# target/conformance/arm64/python is a symlink to that directory, replaced by a rename: an agent of another
# gate still running on this tree keeps the files it imported, and a directory once installed is never
# rewritten (an unchanged wheel installs nothing).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
out=target/conformance/arm64
mkdir -p "$out" sdk-python/.build
scratch="$(mktemp -d "$out/.python-build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
bash sdk-python/tools/maturin.sh build --release --quiet -m sdk-python/Cargo.toml --target aarch64-unknown-linux-gnu \
  -o "$scratch/wheel" >&2
wheel="$(ls "$scratch"/wheel/morpheus-*.whl)"
digest="$(python3 - "$wheel" <<'PY'
import hashlib, sys, zipfile
h = hashlib.sha256()
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in sorted(n for n in wheel.namelist() if n.startswith("morpheus/")):
        h.update(name.encode() + b"\0" + hashlib.sha256(wheel.read(name)).digest())
print(h.hexdigest()[:16])
PY
)"
site="$out/python-$digest"
if [[ ! -d $site ]]; then
  # The host's pip, told the target platform: pip on arm64 Python under qemu takes minutes on a loaded
  # host, and installs the same files (sdk-python/tools/test-arm64.sh proves that install).
  python3 -m pip install --quiet --no-index --no-deps --disable-pip-version-check --root-user-action=ignore \
    --only-binary=:all: --platform manylinux_2_34_aarch64 --implementation cp --python-version 3.11 \
    --target "$scratch/site" "$wheel" >&2
  # -T: when another build installed the same wheel meanwhile, the rename fails and that directory stays.
  mv -T "$scratch/site" "$site" 2>/dev/null || [[ -d $site ]]
fi
ln -sfn "$(basename "$site")" "$scratch/python"
mv -T "$scratch/python" "$out/python"
