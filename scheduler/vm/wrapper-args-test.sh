#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The VM wrappers' shared command line (wrapper-args.sh): its parser on its own, then each wrapper
# (e2e/run.sh, e2e/arm64-vm.sh, e2e/starvation-vm.sh, e2e/pybench-vm.sh, compare/run-vm.sh) with --help and bad
# options, each of which must end before anything is built or booted. No VM, no cargo.
# `bazel test //scheduler/vm:wrapper_args_test`.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
failures=0

fail() { printf 'FAIL: %s\n' "$*" >&2; failures=$((failures + 1)); }

# expect NAME WANT_RC WANT_STDERR WANT_STDOUT CMD...: runs CMD and compares its exit code, stderr
# and stdout with what is wanted, exactly.
expect() {
	local name=$1 want_rc=$2 want_err=$3 want_out=$4 out err rc
	shift 4
	err=$(mktemp)
	out=$("$@" 2>"$err")
	rc=$?
	[[ $rc -eq $want_rc ]] || fail "$name: exit code $rc, wanted $want_rc (stderr: $(cat "$err"))"
	[[ "$(cat "$err")" == "$want_err" ]] || fail "$name: stderr '$(cat "$err")', wanted '$want_err'"
	[[ "$out" == "$want_out" ]] || fail "$name: stdout '$out', wanted '$want_out'"
	rm -f "$err"
}

# A wrapper's settings as one of the real ones makes them, then parse_vm_args on the arguments and
# the result printed one line a variable.
benchmark_like() {
	(
		set -euo pipefail
		readonly PROG=bench
		source "$here/wrapper-args.sh"
		timeout=600
		guest_args=(--seconds 12 --rounds 3)
		guest_args_name=benchmark
		declare -A own_options=([--plots]="a directory")
		reserved_guest_args=('--backend*' '--scheduler*')
		reserved_why="the VM run sets --backend kernel and --scheduler itself"
		parse_vm_args "$@"
		echo "kernel_args=${kernel_args[*]}"
		echo "log=$log"
		echo "timeout=$timeout"
		echo "guest_args=${guest_args[*]}"
		echo "plots=${own_values[--plots]-unset}"
	)
}

without_guest_args() {
	(
		set -euo pipefail
		readonly PROG=plain
		source "$here/wrapper-args.sh"
		timeout=1500
		parse_vm_args "$@"
		echo "kernel_args=${kernel_args[*]} log=$log timeout=$timeout"
	)
}

# The parser on its own.
expect "defaults" 0 "" $'kernel_args=\nlog=\ntimeout=600\nguest_args=--seconds 12 --rounds 3\nplots=unset' \
	benchmark_like
expect "every option" 0 "" $'kernel_args=--kernel /k\nlog=/l.log\ntimeout=9\nguest_args=--seconds 1\nplots=/p' \
	benchmark_like --kernel /k --log /l.log --timeout 9 --plots /p -- --seconds 1
expect "an empty own value is kept" 0 "" $'kernel_args=\nlog=\ntimeout=600\nguest_args=--seconds 12 --rounds 3\nplots=' \
	benchmark_like --plots ""
expect "no guest arguments after --" 0 "" $'kernel_args=\nlog=\ntimeout=600\nguest_args=\nplots=unset' \
	benchmark_like --
expect "options after -- are the guest's" 0 "" $'kernel_args=\nlog=\ntimeout=600\nguest_args=--timeout=3\nplots=unset' \
	benchmark_like -- --timeout=3
for opt in "--kernel:a directory" "--log:a file" "--timeout:seconds" "--plots:a directory"; do
	expect "${opt%%:*} without its value" 2 "bench: error: ${opt%%:*} needs ${opt#*:}" "" benchmark_like "${opt%%:*}"
done
expect "an unknown option" 2 "bench: error: unknown argument '--frobnicate' (benchmark arguments go after --)" "" \
	benchmark_like --timeout 5 --frobnicate
expect "a stray word" 2 "bench: error: unknown argument 'seconds' (benchmark arguments go after --)" "" \
	benchmark_like seconds
expect "a guest argument the guest shell would interpret" 2 \
	"bench: error: benchmark argument 'a;b' has characters the guest shell would interpret" "" benchmark_like -- --seconds 'a;b'
expect "a guest argument with a space" 2 \
	"bench: error: benchmark argument 'a b' has characters the guest shell would interpret" "" benchmark_like -- 'a b'
expect "a reserved guest argument" 2 "bench: error: --backend=sim: the VM run sets --backend kernel and --scheduler itself" "" \
	benchmark_like -- --seconds 1 --backend=sim
expect "a wrapper without guest arguments: defaults" 0 "" "kernel_args= log= timeout=1500" without_guest_args
expect "a wrapper without guest arguments: --" 2 "plain: error: unknown argument '--'" "" without_guest_args --
expect "a wrapper without guest arguments: unknown option" 2 "plain: error: unknown argument '--plots'" "" \
	without_guest_args --plots /p

# The console log: --log's file as given, else a new one under $TMPDIR named for the wrapper.
log_of() {
	(
		set -euo pipefail
		readonly PROG=bench
		source "$here/wrapper-args.sh"
		timeout=1
		parse_vm_args "$@"
		default_log morpheus-bench
		echo "$log"
	)
}
scratch=$(mktemp -d)
expect "--log FILE is the console log" 0 "bench: console log: $scratch/given.log" "$scratch/given.log" log_of --log "$scratch/given.log"
made=$(TMPDIR=$scratch log_of 2>/dev/null)
[[ "$made" == "$scratch"/morpheus-bench.*.log && -f "$made" ]] || fail "without --log: '$made' is not a new file morpheus-bench.*.log in \$TMPDIR"
rm -rf "$scratch"

# Each wrapper: --help prints its header (through its usage line), bad options are named and nothing
# runs after them.
for entry in "e2e/run.sh:e2e-kernel:" "e2e/arm64-vm.sh:e2e-arm64:" "e2e/starvation-vm.sh:starvation-vm:benchmark" \
	"e2e/pybench-vm.sh:pybench-vm:benchmark" "compare/run-vm.sh:compare-vm:compare"; do
	IFS=: read -r script prog what <<<"$entry"
	path=$root/scheduler/$script
	help=$(bash "$path" --help) || fail "$script --help: exit code $?"
	grep -q "^# usage: scheduler/$script " <<<"$help" || fail "$script --help: no usage line in '$help'"
	[[ "$(sed -n '3p' "$path")" == "$(head -n 1 <<<"$help")" ]] || fail "$script --help: does not start at the header's line 3"
	after=""
	[[ -z "$what" ]] || after=" ($what arguments go after --)"
	expect "$script: unknown option" 2 "$prog: error: unknown argument '--frobnicate'$after" "" bash "$path" --frobnicate
	expect "$script: --timeout without seconds" 2 "$prog: error: --timeout needs seconds" "" bash "$path" --timeout
	expect "$script: --kernel without a directory" 2 "$prog: error: --kernel needs a directory" "" bash "$path" --log /dev/null --kernel
	if [[ -n "$what" ]]; then
		expect "$script: a guest argument with a quote" 2 \
			"$prog: error: $what argument 'x\"y' has characters the guest shell would interpret" "" bash "$path" -- 'x"y'
	else
		expect "$script: --" 2 "$prog: error: unknown argument '--'" "" bash "$path" --
	fi
done
expect "starvation-vm.sh: a reserved benchmark argument" 2 \
	"starvation-vm: error: --scheduler: the VM run sets --backend kernel and --scheduler itself" "" \
	bash "$root/scheduler/e2e/starvation-vm.sh" -- --seconds 3 --scheduler /bin/true
expect "compare/run-vm.sh: a reserved compare argument" 2 \
	"compare-vm: error: --scx-bpfland=/x: the VM run passes the scheduler binaries itself" "" \
	bash "$root/scheduler/compare/run-vm.sh" --plots /tmp -- --scx-bpfland=/x
expect "compare/run-vm.sh: --json without a file" 2 "compare-vm: error: --json needs a file" "" \
	bash "$root/scheduler/compare/run-vm.sh" --json
# compare/run-vm.sh's VM options are checked before anything is built (scheduler/vm/run-vm.sh would
# refuse a bad one only at boot, after the release builds).
expect "compare/run-vm.sh: --qemu without a value" 2 "compare-vm: error: --qemu needs host or trixie" "" \
	bash "$root/scheduler/compare/run-vm.sh" --qemu
expect "compare/run-vm.sh: an unknown --qemu" 2 "compare-vm: error: --qemu must be host or trixie, got 'qemu10'" "" \
	bash "$root/scheduler/compare/run-vm.sh" --qemu qemu10 --tcg-threads multi
expect "compare/run-vm.sh: an unknown --tcg-threads" 2 "compare-vm: error: --tcg-threads must be single or multi, got 'many'" "" \
	bash "$root/scheduler/compare/run-vm.sh" --qemu trixie --tcg-threads many
expect "pybench-vm.sh: compare's --plots is not its option" 2 \
	"pybench-vm: error: unknown argument '--plots' (benchmark arguments go after --)" "" \
	bash "$root/scheduler/e2e/pybench-vm.sh" --plots /tmp

if [[ $failures -ne 0 ]]; then
	echo "wrapper-args-test: $failures failure(s)" >&2
	exit 1
fi
echo "wrapper-args-test: all checks passed"
