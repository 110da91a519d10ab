#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The real-kernel test (bazel test //scheduler:e2e_kernel): builds scx_morpheus with the sched_ext
# backend and the test worker (release), boots Debian sid's kernel under qemu TCG with both in a
# busybox initramfs and runs e2e/guest.sh there. Exits with the guest's code (0 = every check passed).
#
# It also produces the conformance matrix's "kernel" column (spec/CONFORMANCE.md §2.7): the escalation
# gate's scenarios are exported here as cases, the guest answers them with the BPF program's gate
# (`scx_morpheus --replay-gate`), the answers come back on the serial console (`e2e-gate-answer:`
# lines) and are judged here into conformance/results/kernel.results.json, which
# `bazel run //conformance:report` merges. A case answered wrongly fails this test too.
#
# usage: scheduler/e2e/run.sh [--kernel DIR] [--log FILE] [--timeout SECS]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
readonly PROG=e2e-kernel

die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 2; }

kernel_args=()
log=""
timeout=900
while [[ $# -gt 0 ]]; do
	case "$1" in
	--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel_args=(--kernel "$2"); shift 2 ;;
	--log) [[ $# -ge 2 ]] || die "--log needs a file"; log=$2; shift 2 ;;
	--timeout) [[ $# -ge 2 ]] || die "--timeout needs seconds"; timeout=$2; shift 2 ;;
	-h | --help) sed -n '3,8p' "$0"; exit 0 ;;
	*) die "unknown argument '$1'" ;;
	esac
done

# scx_utils' and our build scripts run $BPF_CLANG (the workspace's .cargo/config.toml: clang-19).
command -v "${BPF_CLANG:-clang-19}" >/dev/null || die "${BPF_CLANG:-clang-19} not found; run tools/setup.sh"

target_dir=${CARGO_TARGET_DIR:-$root/target}
# Default features (they include `kernel`); scheduler/starvation/run.sh builds with the same command.
echo "$PROG: building scx_morpheus (default features: kernel) and morpheus-e2e-worker, release" >&2
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker)

# The gate scenarios as flat cases (one JSON line each, with the region image) for the guest.
work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
cases=$work/gate-cases.jsonl
answers=$work/gate-answers.jsonl
python3 "$root/conformance/harness/cli.py" export-gate-cases --cases "$cases" >&2

if [[ -z "$log" ]]; then
	log=$(mktemp "${TMPDIR:-/tmp}/morpheus-e2e.XXXXXX.log")
fi
echo "$PROG: console log: $log" >&2
code=0
"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" \
	--init-script "$here/guest.sh" \
	--bin "$target_dir/release/scx_morpheus" \
	--bin "$target_dir/release/morpheus-e2e-worker" \
	--file "$cases:/morpheus/gate-cases.jsonl" \
	--file "$here/trust-guest.sh:/morpheus/trust-guest.sh" \
	--timeout "$timeout" --log "$log" || code=$?

# The kernel column: judge the BPF gate's answers (a case without one fails its scenario, so a guest
# that never got to the replay leaves a red column, not an old one).
tr -d '\r' <"$log" | sed -n 's/^e2e-gate-answer: //p' >"$answers"
results=$root/conformance/results
mkdir -p "$results"
if ! python3 "$root/conformance/harness/cli.py" import-answers --cases "$cases" --answers "$answers" \
	--column kernel --export "$results/kernel.results.json" >"$work/import.out" 2>&1; then
	[[ $code -ne 0 ]] || code=1
fi
sed "s/^/$PROG: /" "$work/import.out" >&2

# The figures the guest printed, in one place.
echo "$PROG: --- summary ---" >&2
tr -d '\r' <"$log" | grep -aE '^(e2e|e2e-bench|e2e-stress|e2e-veristat): |BPF counters|gate verdicts|escalation lifts|reaction ' >&2 || true
echo "$PROG: guest exit code $code" >&2
exit "$code"
