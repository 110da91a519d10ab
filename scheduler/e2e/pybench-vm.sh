#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# sdk-python's asyncio benchmark (sdk-python/BENCHMARKS.md) against the real BPF scheduler: boots
# Debian sid's kernel under qemu TCG and runs e2e/pybench-guest.sh there (off, then scx_morpheus on
# sched_ext), one boot. Prints the table (sdk-python/bench/vm_table.py): per cell the probe p99 beside
# slice + grace, and its ratio to off in the same run. Results: sdk-python/bench/results/vm_{off,pressure}.json.
#
# usage: scheduler/e2e/pybench-vm.sh [--kernel DIR] [--log FILE] [--timeout SECS] [-- BENCH-ARGS...]
#        (default BENCH-ARGS: --seconds 2 --repeat 1 --calls 0 --modes idle,blocking,naive,morpheus)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
readonly PROG=pybench-vm
# shellcheck source=../vm/wrapper-args.sh
source "$root/scheduler/vm/wrapper-args.sh"

timeout=1200
guest_args=(--seconds 2 --repeat 1 --calls 0 --modes idle,blocking,naive,morpheus)
guest_args_name=benchmark
parse_vm_args "$@"

target_dir=${CARGO_TARGET_DIR:-$root/target}
echo "$PROG: building scx_morpheus (kernel backend) and the wheel" >&2
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus)
work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-pybench-vm.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/py" "$work/wheel"
wheel=$("$root/sdk-python/tools/build.sh" "$work/wheel")
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$work/py" "$wheel" >&2
cp "$root/sdk-python/bench/bench_asyncio.py" "$work/py/"
cat >"$work/python.env" <<ENV
PY_HOME=/hostroot$(python3 -c 'import sys; print(sys.base_prefix)')
PY_BIN=/hostroot$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
PY_LIBS=/hostroot$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))'):/hostroot/lib/x86_64-linux-gnu:/hostroot/usr/lib/x86_64-linux-gnu
ENV
printf 'BENCH_ARGS="%s"\n' "${guest_args[*]}" >"$work/pybench.env"
default_log morpheus-pybench-vm
code=0
"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" \
	--init-script "$here/pybench-guest.sh" \
	--bin "$target_dir/release/scx_morpheus" \
	--file "$work/py:/morpheus/py" --file "$work/python.env:/morpheus/python.env" \
	--file "$work/pybench.env:/morpheus/pybench.env" \
	--module 9p --module 9pnet_virtio --share-host-root \
	--timeout "$timeout" --log "$log" --quiet || code=$?

results=$root/sdk-python/bench/results
mkdir -p "$results"
for name in off pressure; do
	tr -d '\r' <"$log" | sed -n "s/^pybench-json: $name //p" | tail -n 1 >"$work/$name.json"
	if [[ -s "$work/$name.json" ]]; then
		cp "$work/$name.json" "$results/vm_$name.json"
	else
		echo "$PROG: the guest printed no $name results" >&2
		[[ $code -ne 0 ]] || code=1
		rm -f "$results/vm_$name.json"
	fi
done
tr -d '\r' <"$log" | grep -a '^pybench-vm: ' | grep -v '{' || true
python3 "$root/sdk-python/bench/vm_table.py" "$results" || code=1
echo "$PROG: guest exit code $code"
exit "$code"
