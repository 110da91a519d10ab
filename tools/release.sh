#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/release.sh SDK [--run-vm]: the release gate (release/README.md), same as `bazel run //release:SDK`.
# Native artifacts are built for every platform of release.py's PLATFORMS (linux-x64-gnu, and linux-arm64-gnu
# cross-built: the C tarballs, the wheels, the npm platform packages, the jar's natives), each gated by its own
# conformance columns and unit tests (release/sdks.toml); the arm64 columns run under qemu user-mode.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
[[ $# -ge 1 ]] || { echo "usage: tools/release.sh SDK [--run-vm]   (SDKs: release/sdks.toml)" >&2; exit 2; }
exec python3 "$root/release/release.py" gate "$@"
