#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Builds scx_morpheus and the starvation benchmark (release) and runs the benchmark: Morpheus off,
# observer and enforced side by side, observer and enforced on each backend (sim, and trace where this
# machine allows it: see below). The benchmark starts and stops scx_morpheus itself (private region
# and socket under $TMPDIR; trace: a private bpffs) for each Morpheus mode. Arguments go to the
# benchmark (e.g. --seconds 5 --rounds 5, or --backend sim to choose).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# scx_morpheus is built by exactly the command scheduler/e2e/run.sh uses (default features, which
# include `kernel`), so this build never replaces the binary a running VM test uses with a
# differently configured one; the benchmark is a separate invocation for the same reason.
cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus
cargo build --release -p morpheus-starvation
target="${CARGO_TARGET_DIR:-$root/target}/release"
# Without --backend: the simulation backend and, where this machine allows it (root, a kernel with
# BTF), the tracing backend side by side in the same rounds; otherwise sim alone, saying why.
backend=()
if [[ " $* " != *" --backend"* ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "run.sh: the tracing backend needs root to load its BPF programs (uid $(id -u)): sim only"
    backend=(--backend sim)
  elif [[ ! -r /sys/kernel/btf/vmlinux ]]; then
    echo "run.sh: this kernel has no BTF (/sys/kernel/btf/vmlinux), which the tracing backend needs: sim only"
    backend=(--backend sim)
  else
    backend=(--backend sim,trace)
  fi
  if [[ -d /sys/kernel/sched_ext ]]; then
    echo "run.sh: this kernel has sched_ext; the benchmark still measures sim and trace (pass --backend kernel for the sched_ext one)"
  fi
fi
exec "$target/starvation" --scheduler "$target/scx_morpheus" "${backend[@]}" "$@"
