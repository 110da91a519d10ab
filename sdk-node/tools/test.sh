#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the addon, then run the node:test suite: the API and bad input, checkpoints against region
# files, worker_threads and exits, preloads, the TypeScript declarations, and the packed tarball
# installed into a fresh folder with the example run from there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/tools/build.sh"
# test/scheduler.test.js runs against the real sim agent: built here (release, the command the
# benchmarks use), so the test never skips for want of it.
root="$(cd "$here/.." && pwd)"
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus >&2)
export MORPHEUS_SCX_BIN="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
cd "$here"
# A test that hangs fails after 5 minutes, by name, instead of holding the suite until bazel's timeout
# (the slowest test, the packed tarball's, takes about 15 s). Node before 20.11 has no --test-timeout.
timeout=()
if node --test-timeout=1 -e '' 2>/dev/null; then
	timeout=(--test-timeout=300000)
fi
# --expose-gc: the view-lifetime test collects the buffers of a closed registration.
exec node --expose-gc --test --test-reporter=spec "${timeout[@]}" "$@" test/*.test.js
