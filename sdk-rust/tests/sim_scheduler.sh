#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Builds the scheduler (scx_morpheus) and runs tests/sim_scheduler.rs against its sim backend.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p scx_morpheus
target_dir="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
export MORPHEUS_SCX_BIN="$target_dir/debug/scx_morpheus"
exec cargo test -p morpheus --all-features --test sim_scheduler -- --ignored
