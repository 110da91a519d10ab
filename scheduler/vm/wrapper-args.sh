# SPDX-License-Identifier: GPL-2.0-only
#
# The command line the VM wrappers share (e2e/run.sh, e2e/arm64-vm.sh, e2e/starvation-vm.sh, e2e/pybench-vm.sh,
# compare/run-vm.sh), sourced by each after `set -euo pipefail` and `readonly PROG=<name>`:
#
#   [--kernel DIR] [--log FILE] [--timeout SECS] [the wrapper's own options] [-- GUEST-ARGS...]
#
# -h/--help prints the wrapper's header comment (line 3 up to its first line that is not a comment),
# so the help cannot fall behind the header; default_log picks the console log when --log is not
# given. Tested by wrapper-args-test.sh.

# die MESSAGE: "PROG: error: MESSAGE" on stderr, exit 2 (a bad command line or a missing tool).
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 2; }

# parse_vm_args "$@": the wrapper's command line. The wrapper sets before the call:
#   timeout                 --timeout's default (seconds)
#   guest_args=(...)        the guest arguments' default (those after --), and
#   guest_args_name         what they are, in messages ("benchmark": "benchmark arguments go after --");
#                           unset: the wrapper takes no guest arguments and `--` is an unknown argument
#   own_options=([--NAME]="what it needs" ...)  (optional, an associative array) the wrapper's own
#                           options, each with a value ("--plots" needs "a directory")
#   reserved_guest_args=(GLOB...) and reserved_why  (optional) guest arguments the wrapper sets
#                           itself, refused with "ARG: $reserved_why"
# and gets: kernel_args (empty, or --kernel DIR), log (empty if not given), timeout, guest_args and,
# for each own option given, own_values[--NAME].
parse_vm_args() {
	kernel_args=()
	log=""
	declare -gA own_values=()
	local after=""
	[[ -z "${guest_args_name:-}" ]] || after=" ($guest_args_name arguments go after --)"
	while [[ $# -gt 0 ]]; do
		case "$1" in
		--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel_args=(--kernel "$2"); shift 2 ;;
		--log) [[ $# -ge 2 ]] || die "--log needs a file"; log=$2; shift 2 ;;
		--timeout) [[ $# -ge 2 ]] || die "--timeout needs seconds"; timeout=$2; shift 2 ;;
		-h | --help) print_vm_help; exit 0 ;;
		--)
			[[ -n "${guest_args_name:-}" ]] || die "unknown argument '$1'"
			shift; guest_args=("$@"); break ;;
		*)
			if [[ "$1" == --* ]] && declare -p own_options &>/dev/null && [[ -n "${own_options[$1]+set}" ]]; then
				[[ $# -ge 2 ]] || die "$1 needs ${own_options[$1]}"
				own_values[$1]=$2; shift 2
			else
				die "unknown argument '$1'$after"
			fi ;;
		esac
	done
	[[ -n "${guest_args_name:-}" ]] || return 0
	local arg glob
	for arg in "${guest_args[@]}"; do
		# The arguments travel to the guest as one shell word list: keep them plain.
		[[ "$arg" =~ ^[A-Za-z0-9=.,_:/+-]+$ ]] || die "$guest_args_name argument '$arg' has characters the guest shell would interpret"
		for glob in ${reserved_guest_args[@]+"${reserved_guest_args[@]}"}; do
			# shellcheck disable=SC2053 # a glob on purpose
			[[ "$arg" != $glob ]] || die "$arg: $reserved_why"
		done
	done
}

# print_vm_help: the wrapper's header comment, from line 3 (after the shebang and SPDX lines).
print_vm_help() {
	awk 'NR < 3 { next } /^#/ { print; next } { exit }' "$0"
}

# default_log NAME: without --log, the console log goes to a new $TMPDIR/NAME.XXXXXX.log; says where.
default_log() {
	[[ -n "$log" ]] || log=$(mktemp "${TMPDIR:-/tmp}/$1.XXXXXX.log")
	echo "$PROG: console log: $log" >&2
}

# need_bpf_clang: the BPF build (scx_utils' and our build scripts) runs $BPF_CLANG (the workspace's
# .cargo/config.toml: clang-19).
need_bpf_clang() {
	command -v "${BPF_CLANG:-clang-19}" >/dev/null || die "${BPF_CLANG:-clang-19} not found; run tools/setup.sh"
}
