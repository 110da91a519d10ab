#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds scx_morpheus (release) and runs the tracing backend's benchmark against the simulation backend
# on the host kernel (scheduler/trace-bench/bench.py says what it measures; scheduler/BENCHMARKS.md
# "Tracing backend" has the figures). Needs root and a kernel with BPF and BTF. Arguments go to
# bench.py (e.g. --rounds 5 --seconds 5).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The same build command as scheduler/starvation/run.sh, so neither replaces the other's binaries with
# differently configured ones.
cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus
exec python3 scheduler/trace-bench/bench.py --bin-dir "${CARGO_TARGET_DIR:-$root/target}/release" "$@"
