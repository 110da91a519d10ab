#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/orders-control.sh: builds the negative control of the arm64 order tests
# (tools/arm64/arm64_orders.py) and prints its directory: libmorpheus, the JNI library and the Node addon
# cross-built for aarch64-unknown-linux-gnu (release) with `--cfg morpheus_relaxed_orders`, which makes
# sdk-rust/src/protocol.rs's fast-path accesses relaxed and drops the critical enter's fence. The tests
# must reject these libraries on every access they check, or their checks could not fail.
#
# A target directory of its own, under the workspace's: the cfg changes every crate's build, and the
# product's libraries in <target>/aarch64-unknown-linux-gnu/release must never be these. One cargo call
# for the three crates, whichever test asks, so that the order tests of sdk-c, sdk-java and sdk-node
# share one build (cargo's lock serialises them; after the first, a call is a no-op).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${CARGO_TARGET_DIR:-$root/target}/arm64-orders-relaxed"
cd "$root"
unset CARGO_ENCODED_RUSTFLAGS
RUSTFLAGS="--cfg morpheus_relaxed_orders" CARGO_TARGET_DIR="$dir" \
  cargo build --release --quiet --target aarch64-unknown-linux-gnu -p morpheus-c -p morpheus-jni -p morpheus-node >&2 ||
  { echo "tools/arm64/orders-control.sh: the relaxed control build failed" >&2; exit 1; }
echo "$dir/aarch64-unknown-linux-gnu/release"
