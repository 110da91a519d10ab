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
# shellcheck source=../vm/wrapper-args.sh
source "$root/scheduler/vm/wrapper-args.sh"

timeout=1500
parse_vm_args "$@"
need_bpf_clang
# The trust-domain phase runs its workers as unprivileged users (util-linux setpriv, shipped in the image).
command -v setpriv >/dev/null || die "setpriv (util-linux) not found"

# The column names the commit it was produced at, read before the build (the release gate accepts only its own commit's);
# a tree with uncommitted changes is marked so no commit can claim it.
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
[[ -z $(git -C "$root" status --porcelain --untracked-files=normal 2>/dev/null) ]] || commit="$commit+uncommitted-changes"
target_dir=${CARGO_TARGET_DIR:-$root/target}
# Default features (they include `kernel`); scheduler/starvation/run.sh builds with the same command.
echo "$PROG: building scx_morpheus (default features: kernel) and morpheus-e2e-worker, release" >&2
(cd "$root" && cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus)

# The gate scenarios as flat cases (one JSON line each, with the region image) for the guest.
work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-e2e.XXXXXX")
trap 'rm -rf "$work"' EXIT
cases=$work/gate-cases.jsonl
answers=$work/gate-answers.jsonl
python3 "$root/conformance/harness/cli.py" export-gate-cases --cases "$cases" >&2

# Every SDK's own worker for e2e/live.sh's phases, built as on the host (e2e/sdk-workers.sh). The
# Python interpreter, node and the JDKs come from the host's root, shared read-only over virtio-9p
# (/morpheus/python.env and /morpheus/runtimes.env say where); the guest links the host's /etc
# directories the JDKs' absolute symlinks point into (Debian's JDK 17: lib/jvm.cfg -> /etc/java-17-openjdk/...).
echo "$PROG: building every SDK's worker (e2e/sdk-workers.sh)" >&2
bash "$here/sdk-workers.sh" "$work/sdk" e2e
# shellcheck source=/dev/null
. "$work/sdk/jdks.env"
py_home=$(python3 -c 'import sys; print(sys.base_prefix)')
py_bin=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
py_libdir=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
cat >"$work/python.env" <<EOF
PY_HOME=/hostroot$py_home
PY_BIN=/hostroot$py_bin
PY_LIBS=/hostroot$py_libdir:/hostroot/lib/x86_64-linux-gnu:/hostroot/usr/lib/x86_64-linux-gnu
EOF
etc_links=$(find "$JDK25/" "$JDK17/" -type l -lname '/etc/*' -printf '%l\n' | sed -n 's|^\(/etc/[^/]*\)/.*|\1|p' | sort -u | tr '\n' ' ')
cat >"$work/runtimes.env" <<EOF
NODE_BIN=/hostroot$(readlink -f "$(command -v node)")
JAVA25=/hostroot$JDK25/bin/java
JAVA17=/hostroot$JDK17/bin/java
HOST_ETC_LINKS="$etc_links"
EOF

default_log morpheus-e2e
code=0
"$root/scheduler/vm/run-guest.sh" "${kernel_args[@]}" \
	--init-script "$here/guest.sh" \
	--bin "$target_dir/release/scx_morpheus" \
	--bin "$target_dir/release/morpheus-e2e-worker" \
	--bin "$target_dir/release/morpheus" \
	--file "$cases:/morpheus/gate-cases.jsonl" \
	--bin "$work/sdk/morpheus-e2e-worker-c" \
	--bin "$(command -v setpriv)" \
	--file "$work/sdk/py:/morpheus/py" --file "$work/python.env:/morpheus/python.env" \
	--file "$work/sdk/node:/morpheus/node" --file "$work/sdk/java:/morpheus/java" --file "$work/runtimes.env:/morpheus/runtimes.env" \
	--module 9p --module 9pnet_virtio --share-host-root \
	--file "$here/trust-guest.sh:/morpheus/trust-guest.sh" --file "$here/live.sh:/morpheus/live.sh" \
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
if [[ -f $results/kernel.results.json ]]; then
	python3 - "$results/kernel.results.json" "$commit" <<-'EOF'
	import json, sys
	column = json.load(open(sys.argv[1]))
	column["commit"] = sys.argv[2]
	open(sys.argv[1], "w").write(json.dumps(column, indent=2) + "\n")
	EOF
fi

# Each SDK's live-kernel column (guest.sh's `e2e-live: SDK ROW pass|fail` lines); a row the guest never
# reported is red, so a guest that died early leaves red columns, not old ones.
tr -d '\r' <"$log" | sed -n 's/^e2e-live: //p' >"$work/live.txt"
python3 "$here/live_columns.py" "$work/live.txt" "$results" "$commit" || code=1

# The figures the guest printed, in one place.
echo "$PROG: --- summary ---" >&2
tr -d '\r' <"$log" | grep -aE '^(e2e|e2e-bench|e2e-stress|e2e-veristat|e2e-live): |BPF counters|gate verdicts|escalation lifts|reaction ' >&2 || true
echo "$PROG: guest exit code $code" >&2
exit "$code"
