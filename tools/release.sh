#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/release.sh SDK [--run-vm]: the release gate (release/README.md), same as `bazel run //release:SDK`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
[[ $# -ge 1 ]] || { echo "usage: tools/release.sh SDK [--run-vm]   (SDKs: release/sdks.toml)" >&2; exit 2; }
exec python3 "$root/release/release.py" gate "$@"
