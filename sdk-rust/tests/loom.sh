#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The loom model checks (tests/loom.rs) of the SCB protocol: built with --cfg loom into a target
# subdirectory of their own, so they never invalidate the normal build's artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}"
export CARGO_TARGET_DIR="$base/loom"
export RUSTFLAGS="--cfg loom"
# The preemption bound defaults to 5 in tests/loom.rs; LOOM_MAX_PREEMPTIONS in the environment overrides it.
exec cargo test --release -p morpheus --test loom "$@"
