#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The scheduler on arm64, in an arm64 VM (tools/main.sh step trace_arm64_vm): cross-builds scx_morpheus
# and morpheus-e2e-worker for aarch64-unknown-linux-gnu (tools/arm64/scx-env.sh), boots Debian sid's
# arm64 kernel (fetch-kernel.sh --arch arm64; it has sched_ext and BTF) under trixie's
# qemu-system-aarch64 -M virt -cpu max, TCG (tools/setup.sh --qemu-trixie), with both in an arm64
# busybox initramfs, and runs e2e/arm64-guest.sh there: the tracing backend's gate replay and live
# phases, then the kernel (sched_ext) backend's checks of e2e/guest.sh with the Rust worker. Exits with the guest's code (0 = every check passed).
#
# The gate's answers come back on the serial console and are judged here into the conformance matrix's
# arm64 columns, conformance/results/trace-arm64.results.json and kernel-arm64.results.json (merged by
# `bazel run //conformance:report`); a case answered wrongly, or not at all, fails this test.
#
# usage: scheduler/e2e/arm64-vm.sh [--kernel DIR] [--log FILE] [--timeout SECS]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
readonly PROG=e2e-arm64
readonly TARGET=aarch64-unknown-linux-gnu
# shellcheck source=../vm/wrapper-args.sh
source "$root/scheduler/vm/wrapper-args.sh"

timeout=2400
parse_vm_args "$@"
need_bpf_clang
vm_tools=${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/vm-tools-root
[[ -x $vm_tools/usr/bin/setpriv ]] || die "$vm_tools/usr/bin/setpriv is missing: run tools/setup.sh"
[[ ${#kernel_args[@]} -gt 0 ]] || kernel_args=(--kernel "$("$root/scheduler/vm/fetch-kernel.sh" --arch arm64)")

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git -C "$root" status --porcelain --untracked-files=normal 2>/dev/null) ]] || commit="$commit+uncommitted-changes"
target_dir=${CARGO_TARGET_DIR:-$root/target}
# Debug, as tools/main.sh's scx_arm64 step builds them (one build serves both steps).
echo "$PROG: cross-building scx_morpheus, morpheus-e2e-worker and morpheus for $TARGET" >&2
(cd "$root" && tools/arm64/scx-env.sh cargo build -p scx_morpheus --target "$TARGET" --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus)
# Where the arm64 libelf, zlib and zstd are (tools/arm64/scx-env.sh says, from tools/setup.sh's root), and
# Debian's arm64 util-linux whose setpriv the trust phase runs its users with (tools/setup.sh's
# setup_arm64_vm_tools; busybox's setpriv cannot change ids).
lib_path=$("$root/tools/arm64/scx-env.sh" printenv LIBBPF_SYS_LIBRARY_PATH_aarch64_unknown_linux_gnu)
lib_path=$lib_path:$vm_tools/lib/aarch64-linux-gnu

work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-e2e-arm64.XXXXXX")
trap 'rm -rf "$work"' EXIT
cases=$work/gate-cases.jsonl
python3 "$root/conformance/harness/cli.py" export-gate-cases --cases "$cases" >&2

default_log morpheus-e2e-arm64
bin=$target_dir/$TARGET/debug
code=0
"$root/scheduler/vm/run-guest.sh" --arch arm64 --qemu trixie "${kernel_args[@]}" \
	--init-script "$here/arm64-guest.sh" \
	--bin "$bin/scx_morpheus" --bin "$bin/morpheus-e2e-worker" --bin "$bin/morpheus" --lib-path "$lib_path" \
	--bin "$vm_tools/usr/bin/setpriv" --file "$here/trust-guest.sh:/morpheus/trust-guest.sh" \
	--file "$cases:/morpheus/gate-cases.jsonl" --file "$here/live.sh:/morpheus/live.sh" --file "$here/guest.sh:/morpheus/guest.sh" \
	--timeout "$timeout" --log "$log" || code=$?

# The arm64 gate columns: a case without an answer fails its scenario, so a guest that never got to a
# replay leaves a red column, not an old one.
results=$root/conformance/results
mkdir -p "$results"
for backend in trace kernel; do
	prefix=e2e-gate-answer-trace # e2e/guest.sh, the kernel backend's, answers on e2e-gate-answer: lines
	[[ $backend == trace ]] || prefix=e2e-gate-answer
	tr -d '\r' <"$log" | sed -n "s/^$prefix: //p" >"$work/answers-$backend.jsonl"
	column=$backend-arm64
	if ! python3 "$root/conformance/harness/cli.py" import-answers --cases "$cases" --answers "$work/answers-$backend.jsonl" \
		--column "$column" --export "$results/$column.results.json" >"$work/import-$backend.out" 2>&1; then
		[[ $code -ne 0 ]] || code=1
	fi
	sed "s/^/$PROG: /" "$work/import-$backend.out" >&2
	[[ -f $results/$column.results.json ]] || continue
	python3 - "$results/$column.results.json" "$commit" <<-'EOF'
	import json, sys
	column = json.load(open(sys.argv[1]))
	column["commit"] = sys.argv[2]
	open(sys.argv[1], "w").write(json.dumps(column, indent=2) + "\n")
	EOF
done

echo "$PROG: --- summary ---" >&2
tr -d '\r' <"$log" | grep -aE '^e2e(-live)?: ' | grep -avE '^e2e: ok: ' >&2 || true
echo "$PROG: checks passed: $(tr -d '\r' <"$log" | grep -ac '^e2e: ok: ')" >&2
echo "$PROG: guest exit code $code" >&2
exit "$code"
