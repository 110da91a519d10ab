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
# Preemption bound of the exploration (tests/loom.rs); the models are small enough to run unbounded
# in well under the time budget of a loaded 2-core machine.
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
exec cargo test --release -p morpheus --test loom "$@"
