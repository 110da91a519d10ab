#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Proves the VM pipeline works on this machine, for real:
#   1. bad input to every script is rejected with a message naming the problem;
#   2. sid's kernel is fetched (or taken from the cache);
#   3. a guest (booted through run-guest.sh, the interface tests use) checks sched_ext, bpffs, cgroup2, BTF, module loading and a
#      dynamically linked binary; the run must exit 0;
#   4. the same guest with a wrong expectation must exit 1 (checks can fail,
#      and a forged marker without the run id is ignored);
#   5. a guest that hangs must end in a timeout (124), a guest that panics
#      the kernel must end as "no result" (125).
# Exits 0 only if all of that held.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly PROG=selftest

usage() {
	cat <<EOF
usage: $0 [--kernel DIR] [--expect-state STATE] [--quick] [--keep]

  --kernel DIR          use this kernel directory instead of fetch-kernel.sh
  --expect-state STATE  sched_ext state the guest expects (default: disabled);
                        anything else must make the selftest fail
  --quick               only steps 1-3
  --keep                keep the work directory (initramfs images, logs)
EOF
}

die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

kernel=""
expected_state=disabled
quick=0
keep=0
while [[ $# -gt 0 ]]; do
	case "$1" in
	--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel=$2; shift 2 ;;
	--expect-state) [[ $# -ge 2 ]] || die "--expect-state needs a value"; expected_state=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	--keep) keep=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument '$1'" ;;
	esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-vm-selftest.XXXXXX")
if [[ $keep -eq 0 ]]; then
	trap 'rm -rf "$work"' EXIT
fi
failures=0
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
now() { date +%s.%N; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# expect_error CODE MESSAGE COMMAND...: COMMAND must exit CODE and say MESSAGE.
expect_error() {
	local want_code=$1 want_message=$2 output code=0
	shift 2
	output=$("$@" 2>&1 >/dev/null) || code=$?
	if [[ $code -ne $want_code ]]; then
		fail "'$*' exited $code, expected $want_code (output: $output)"
	elif ! grep -qF -- "$want_message" <<<"$output"; then
		fail "'$*' did not say '$want_message' (output: $output)"
	fi
}

# --- 1. bad input ------------------------------------------------------------------
say "step 1: bad input is rejected clearly"
mk=$here/mkinitramfs.sh
run=$here/run-vm.sh
fetch=$here/fetch-kernel.sh
printf 'echo no interpreter line\n' >"$work/no-shebang.sh"
printf '#!/bin/bash\necho needs bash\n' >"$work/needs-bash.sh"
printf '#!/bin/sh\nexit 0\n' >"$work/ok.sh"
printf 'not a kernel\n' >"$work/bad-initrd"
mkdir -p "$work/fake-kernel"
printf 'not a kernel\n' >"$work/fake-kernel/vmlinuz"
printf '1.0-amd64\n' >"$work/fake-kernel/kernel-release"
expect_error 1 "no output file given" "$mk"
expect_error 1 "must end in .cpio.gz" "$mk" "$work/x.img" --init-script "$work/ok.sh"
expect_error 1 "--init-script is required" "$mk" "$work/x.cpio.gz"
expect_error 1 "is not a file" "$mk" "$work/x.cpio.gz" --init-script "$work/missing.sh"
expect_error 1 "output directory '$work/nodir' does not exist" "$mk" "$work/nodir/x.cpio.gz" --init-script "$work/ok.sh"
expect_error 1 "--bin '$work/missing' is not a file" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --bin "$work/missing"
expect_error 1 "--bin '$work/ok.sh' is not executable" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --bin "$work/ok.sh"
expect_error 1 "must be SRC:DEST" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --file "$work/ok.sh"
expect_error 1 "must be an absolute path" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --file "$work/ok.sh:etc/x"
expect_error 1 "must be an absolute path" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --file "$work/ok.sh:/etc/../x"
expect_error 1 "--module needs --kernel" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --module cpuid
expect_error 1 "has no #! line" "$mk" "$work/x.cpio.gz" --init-script "$work/no-shebang.sh"
expect_error 1 "needs interpreter '/bin/bash'" "$mk" "$work/x.cpio.gz" --init-script "$work/needs-bash.sh"
expect_error 1 "unknown option '--bogus'" "$mk" "$work/x.cpio.gz" --bogus
expect_error 2 "--kernel is required" "$run" --initrd "$work/bad-initrd"
expect_error 2 "--initrd is required" "$run" --kernel "$work"
expect_error 2 "has no vmlinuz" "$run" --kernel "$work" --initrd "$work/bad-initrd"
expect_error 2 "--timeout must be a positive whole number" "$run" --kernel "$work/bad-initrd" --initrd "$work/bad-initrd" --timeout 0
expect_error 2 "--mem must look like 2G" "$run" --kernel "$work/bad-initrd" --initrd "$work/bad-initrd" --mem 2X
expect_error 2 "--smp must be a positive whole number" "$run" --kernel "$work/bad-initrd" --initrd "$work/bad-initrd" --smp x
expect_error 2 "--init-script is required" "$here/run-guest.sh" --bin /bin/true
expect_error 2 "unknown argument '--bogus'" "$here/run-guest.sh" --bogus
expect_error 125 "could not build the initramfs" "$here/run-guest.sh" --kernel "$work/fake-kernel" --init-script "$work/no-shebang.sh"
expect_error 1 "--max-age must be a whole number" "$fetch" --max-age soon
expect_error 1 "--check-valid-until must be yes or no" "$fetch" --check-valid-until maybe
expect_error 1 "no kernel is cached" "$fetch" --cache-dir "$work/empty-cache" --offline
# A cached kernel without sched_ext must be refused, not used.
fake=$work/fake-cache/kernels/linux-image-amd64_1.0-1
mkdir -p "$fake"
printf '1.0-1\n' >"$fake/deb-version"
printf '1.0-amd64\n' >"$fake/kernel-release"
printf 'CONFIG_DEBUG_INFO_BTF=y\n# CONFIG_SCHED_CLASS_EXT is not set\n' >"$fake/config"
touch "$fake/.complete"
expect_error 1 "lacks CONFIG_SCHED_CLASS_EXT=y" "$fetch" --cache-dir "$work/fake-cache" --offline
# The arm64 options (--arch): a wrong architecture, an arm64 image without its kernel directory (its
# busybox) or with an x86-64 binary, an arm64 boot on the host's qemu (bookworm's has no aarch64 here).
expect_error 1 "--arch must be amd64 or arm64, got 'sparc'" "$fetch" --arch sparc
expect_error 1 "--arch must be amd64 or arm64, got 'sparc'" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --arch sparc
expect_error 1 "--arch arm64 needs --kernel DIR" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --arch arm64
expect_error 1 "--lib-path is for --arch arm64" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --lib-path /usr/lib
expect_error 1 "$work/fake-kernel/busybox not found" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --arch arm64 --kernel "$work/fake-kernel"
expect_error 2 "--arch must be amd64 or arm64, got 'sparc'" "$run" --kernel "$work/bad-initrd" --initrd "$work/bad-initrd" --arch sparc
expect_error 2 "--arch arm64 needs --qemu trixie" "$run" --kernel "$work/bad-initrd" --initrd "$work/bad-initrd" --arch arm64
expect_error 2 "--arch must be amd64 or arm64, got 'sparc'" "$here/run-guest.sh" --init-script "$work/ok.sh" --arch sparc
if command -v qemu-aarch64-static >/dev/null && [[ -d /usr/aarch64-linux-gnu/lib ]]; then
	# An x86-64 binary in an arm64 image is refused (the fake kernel directory lends a busybox stand-in:
	# the refusal comes before busybox is run).
	mkdir -p "$work/fake-arm64"
	cp "$work/fake-kernel/kernel-release" "$work/fake-arm64/"
	printf '#!/bin/sh
' >"$work/fake-arm64/busybox"
	chmod +x "$work/fake-arm64/busybox"
	expect_error 1 "is not an ELF binary for arm64" "$mk" "$work/x.cpio.gz" --init-script "$work/ok.sh" --arch arm64 --kernel "$work/fake-arm64" --bin /bin/true
fi
[[ $failures -eq 0 ]] || die "bad-input checks failed ($failures)"

# --- 2. kernel --------------------------------------------------------------------------
if [[ -z "$kernel" ]]; then
	say "step 2: fetching sid's kernel"
	start=$(now)
	kernel=$("$fetch")
	say "kernel ready in $(since "$start")s: $kernel"
else
	say "step 2: using --kernel $kernel"
fi
[[ -f "$kernel/vmlinuz" ]] || die "kernel directory '$kernel' has no vmlinuz"

# --- 3. the real check --------------------------------------------------------------------
# run_guest NAME WANT_CODE ARGS...: boot through run-guest.sh (or the command
# in $runner) and compare the exit code.
runner=$here/run-guest.sh
run_guest() {
	local name=$1 want=$2 code=0 start
	shift 2
	start=$(now)
	"$runner" --kernel "$kernel" --log "$work/$name.log" "$@" || code=$?
	say "$name: exit code $code (expected $want), $(since "$start")s wall clock"
	if [[ $code -ne $want ]]; then
		fail "$name: exited $code, expected $want (log: $work/$name.log)"
		keep=1
		trap - EXIT
		return 1
	fi
}
# selftest_guest STATE: run-guest.sh arguments for selftest-guest.sh.
selftest_guest() {
	printf '%s\n' "$1" >"$work/expected-state.$1"
	guest_args=(--init-script "$here/selftest-guest.sh" --bin "$(command -v bash)"
		--file "$work/expected-state.$1:/etc/morpheus-selftest/expected-state" --module cpuid)
}

say "step 3: guest checks with expected sched_ext state '$expected_state'"
selftest_guest "$expected_state"
if run_guest pass 0 "${guest_args[@]}" --timeout 180; then
	grep -q 'selftest-guest: all checks passed' "$work/pass.log" ||
		fail "pass: exit code 0 but the guest did not say all checks passed"
fi

if [[ $quick -eq 0 ]]; then
	say "step 4: a wrong expectation must fail"
	selftest_guest "not-$expected_state"
	if run_guest wrong-expectation 1 "${guest_args[@]}" --timeout 180 --quiet; then
		grep -q "selftest-guest: FAIL: sched_ext state is 'not-$expected_state'" "$work/wrong-expectation.log" ||
			fail "wrong-expectation: exit code 1 but not for the sched_ext state check"
	fi

	say "step 5: a hanging guest times out, a panicking kernel reports no result"
	runner=$run # the lower layers directly: mkinitramfs.sh, then run-vm.sh
	printf '#!/bin/sh\necho hanging on purpose\nexec sleep 3600\n' >"$work/hang.sh"
	"$mk" "$work/hang.cpio.gz" --init-script "$work/hang.sh" 2>/dev/null
	run_guest timeout 124 --initrd "$work/hang.cpio.gz" --timeout 25 --quiet || true
	printf '#!/bin/sh\necho c >/proc/sysrq-trigger\n' >"$work/panic.sh"
	"$mk" "$work/panic.cpio.gz" --init-script "$work/panic.sh" 2>/dev/null
	run_guest panic 125 --initrd "$work/panic.cpio.gz" --timeout 180 --quiet || true

	say "step 6: live code patching while both vCPUs are busy"
	runner=$here/run-guest.sh
	if run_guest static-keys 0 --init-script "$here/selftest-static-keys.sh" --timeout 300 --quiet; then
		grep -q 'selftest-static-keys: .* flips survived' "$work/static-keys.log" ||
			fail "static-keys: exit code 0 but the guest did not report its flips"
	fi
fi

if [[ $failures -ne 0 ]]; then
	say "FAILED: $failures problem(s); work directory kept: $work"
	exit 1
fi
say "PASSED (kernel $(<"$kernel/kernel-release"))"
