#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Every measurement of BENCHMARKS.md in one run: criterion (checkpoint.rs) and its ratio table, the
# plain-loop Rust bench and the C inline bench (same method), each pinned to one CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
cpu="${BENCH_CPU:-1}"
echo "== machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
echo "== $(rustc --version); $(cc --version | head -n 1)"
cargo bench -q -p morpheus --bench checkpoint --no-run
cargo bench -q -p morpheus --bench plain_loop --no-run
make -s -C sdk-c lib >/dev/null
echo "== criterion (taskset -c $cpu)"
taskset -c "$cpu" cargo bench -q -p morpheus --bench checkpoint 2>&1 | grep -E '^[a-z_]+/|time:' || true
python3 sdk-rust/benches/ratios.py
echo "== rust plain loop (taskset -c $cpu)"
taskset -c "$cpu" cargo bench -q -p morpheus --bench plain_loop 2>&1 | grep -v '^\s*$'
echo "== c inline (taskset -c $cpu)"
taskset -c "$cpu" make -s --no-print-directory -C sdk-c bench 2>&1 | grep -v '^cargo\|^cp\|^ln\|Finished'

