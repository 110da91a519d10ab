#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the addon, then run the node:test suite: the API and bad input, checkpoints against region
# files, worker_threads and exits, preloads, the TypeScript declarations, and the packed tarball
# installed into a fresh folder with the example run from there.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
"$here/tools/build.sh"
cd "$here"
# --expose-gc: the view-lifetime test collects the buffers of a closed registration.
exec node --expose-gc --test --test-reporter=spec "$@" test/*.test.js
