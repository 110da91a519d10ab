#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/release.sh SDK [--run-vm]: the release gate (release/README.md), same as `bazel run //release:SDK`.
# Native artifacts are built for every platform of release.py's PLATFORMS (linux-x64-gnu, and linux-arm64-gnu
# cross-built: so far the C tarball), each gated by its own conformance column and unit tests (release/sdks.toml).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
[[ $# -ge 1 ]] || { echo "usage: tools/release.sh SDK [--run-vm]   (SDKs: release/sdks.toml)" >&2; exit 2; }
exec python3 "$root/release/release.py" gate "$@"
