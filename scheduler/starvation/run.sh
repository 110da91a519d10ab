#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds scx_morpheus and the starvation benchmark (release) and runs the benchmark: Morpheus off,
# observer and enforced side by side. The benchmark starts and stops scx_morpheus itself (simulation
# backend, private region and socket under $TMPDIR) for each Morpheus mode. Arguments go to the
# benchmark (e.g. --seconds 5).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# scx_morpheus is built by exactly the command scheduler/e2e/run.sh uses (default features, which
# include `kernel`), so this build never replaces the binary a running VM test uses with a
# differently configured one; the benchmark is a separate invocation for the same reason.
cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus
cargo build --release -p morpheus-starvation
target="${CARGO_TARGET_DIR:-$root/target}/release"
if [[ -d /sys/kernel/sched_ext ]]; then
  echo "run.sh: this kernel has sched_ext; the benchmark still measures the simulation backend (pass --backend kernel for the real one)"
fi
exec "$target/starvation" --scheduler "$target/scx_morpheus" "$@"
