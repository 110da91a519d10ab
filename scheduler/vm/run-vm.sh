#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Boot a kernel and an initramfs from mkinitramfs.sh under qemu (TCG), stream
# the serial console to stdout and a log file, and exit with the exit code the
# guest's test reported (MORPHEUS-VM-EXIT=<code> run=<id> on the console).
#
# Exit codes besides the guest's own: 124 = wall-clock timeout (qemu killed),
# 125 = no result from the guest (kernel panic, qemu failure, ...). Both come
# with a "run-vm: error:" line on stderr that says which.
set -euo pipefail

readonly PROG=run-vm
readonly EXIT_TIMEOUT=124
readonly EXIT_NO_RESULT=125

usage() {
	cat <<EOF
usage: $0 --kernel DIR --initrd FILE [options]

options:
  --kernel DIR|FILE  kernel directory from fetch-kernel.sh (or a bzImage)
  --arch amd64|arm64 the guest's architecture (default: amd64): arm64 boots
                     under qemu-system-aarch64 -M virt -cpu max (trixie's
                     qemu only: --qemu trixie), console on the PL011 ttyAMA0
  --initrd FILE      initramfs from mkinitramfs.sh
  --timeout SECS     wall-clock limit for the whole run (default: 300)
  --smp N            virtual CPUs (default: 2)
  --mem SIZE         guest memory, e.g. 2G or 1536M (default: 2G)
  --log FILE         also write the console output here (truncated first)
  --append ARGS      extra kernel command line arguments
  --cpu MODEL        qemu -cpu model (default: qemu's own default)
  --share-host-root  export the host's / read-only over virtio-9p, tag "hostroot"
                     (the guest mounts it to run runtimes it does not carry: Python)
  --tcg-threads single|multi
                     one host thread for all vCPUs, or one each (default:
                     single; see README.md for why)
  --qemu host|trixie the host's qemu-system-x86_64 (default), or Debian
                     trixie's from its root in the cache (qemu-trixie.sh;
                     tools/setup.sh --qemu-trixie installs it)
  --quiet            do not copy the console to stdout (log file only)
  -h, --help         show this help
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$1" >&2; exit "${2:-2}"; } # die MESSAGE [CODE]

kernel=""
initrd=""
timeout_secs=300
smp=2
mem=2G
log_file=""
append=""
cpu=""
tcg_threads=single
qemu_from=host
quiet=0
share_root=0
arch=amd64
while [[ $# -gt 0 ]]; do
	case "$1" in
	--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel=$2; shift 2 ;;
	--initrd) [[ $# -ge 2 ]] || die "--initrd needs a file"; initrd=$2; shift 2 ;;
	--timeout) [[ $# -ge 2 ]] || die "--timeout needs seconds"; timeout_secs=$2; shift 2 ;;
	--smp) [[ $# -ge 2 ]] || die "--smp needs a CPU count"; smp=$2; shift 2 ;;
	--mem) [[ $# -ge 2 ]] || die "--mem needs a size"; mem=$2; shift 2 ;;
	--log) [[ $# -ge 2 ]] || die "--log needs a file"; log_file=$2; shift 2 ;;
	--append) [[ $# -ge 2 ]] || die "--append needs kernel arguments"; append=$2; shift 2 ;;
	--arch) [[ $# -ge 2 ]] || die "--arch needs amd64 or arm64"; arch=$2; shift 2 ;;
	--cpu) [[ $# -ge 2 ]] || die "--cpu needs a model"; cpu=$2; shift 2 ;;
	--tcg-threads) [[ $# -ge 2 ]] || die "--tcg-threads needs single or multi"; tcg_threads=$2; shift 2 ;;
	--qemu) [[ $# -ge 2 ]] || die "--qemu needs host or trixie"; qemu_from=$2; shift 2 ;;
	--quiet) quiet=1; shift ;;
	--share-host-root) share_root=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument '$1'" ;;
	esac
done

[[ -n "$kernel" ]] || die "--kernel is required"
[[ -n "$initrd" ]] || die "--initrd is required"
if [[ -d "$kernel" ]]; then
	image=$kernel/vmlinuz
	[[ -f "$image" ]] || die "--kernel '$kernel' has no vmlinuz (expected a directory from fetch-kernel.sh)"
else
	image=$kernel
	[[ -f "$image" ]] || die "--kernel '$kernel' is neither a directory nor a file"
fi
[[ -f "$initrd" && -s "$initrd" ]] || die "--initrd '$initrd' is not a non-empty file"
[[ "$timeout_secs" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive whole number of seconds, got '$timeout_secs'"
[[ "$smp" =~ ^[1-9][0-9]*$ ]] || die "--smp must be a positive whole number, got '$smp'"
[[ "$mem" =~ ^[1-9][0-9]*[MG]$ ]] || die "--mem must look like 2G or 1536M, got '$mem'"
[[ "$tcg_threads" == single || "$tcg_threads" == multi ]] || die "--tcg-threads must be single or multi, got '$tcg_threads'"
[[ "$append" != *morpheus_run=* ]] || die "--append must not set morpheus_run (run-vm.sh sets it)"
case "$arch" in
amd64) qemu_system=qemu-system-x86_64 ;;
arm64)
	qemu_system=qemu-system-aarch64
	[[ "$qemu_from" == trixie ]] || die "--arch arm64 needs --qemu trixie (trixie's qemu-system-aarch64; tools/setup.sh --qemu-trixie installs it)"
	;;
*) die "--arch must be amd64 or arm64, got '$arch'" ;;
esac
if [[ "$qemu_from" == host ]]; then
	command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; install qemu-system-x86 (tools/setup.sh)"
	qemu_bin=(qemu-system-x86_64)
elif [[ "$qemu_from" == trixie ]]; then
	# qemu runs chrooted in the trixie root, where only /tmp, /dev and the cache are bound in.
	cache=${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}
	for f in "$image" "$initrd"; do
		f=$(realpath "$f")
		[[ "$f" == /tmp/* || "$f" == "$(realpath -m "$cache")"/* ]] || die "--qemu trixie sees only /tmp and $cache, not $f"
	done
	[[ $share_root -eq 0 ]] || die "--share-host-root needs the host's qemu (--qemu trixie sees only /tmp, /dev and the cache)"
	[[ -x "$cache/qemu-trixie/root/usr/bin/$qemu_system" ]] || die "no trixie $qemu_system in $cache/qemu-trixie; run tools/setup.sh --qemu-trixie"
	qemu_bin=(bash "$(dirname "${BASH_SOURCE[0]}")/qemu-trixie.sh" --system "$qemu_system")
else
	die "--qemu must be host or trixie, got '$qemu_from'"
fi
command -v timeout >/dev/null || die "'timeout' (coreutils) not found"

if [[ -n "$log_file" ]]; then
	[[ -d "$(dirname "$log_file")" ]] || die "--log directory '$(dirname "$log_file")' does not exist"
	: >"$log_file"
else
	log_file=$(mktemp "${TMPDIR:-/tmp}/morpheus-vm.XXXXXX.log")
	trap 'rm -f "$log_file"' EXIT
fi

# A fresh id per run: only the marker carrying it counts as the result.
run_id=$(od -An -tx1 -N8 /dev/urandom | tr -d ' \n')
# panic=-1 reboots at once on a panic and -no-reboot turns that into qemu
# exiting; oops=panic makes any oops end the run instead of limping on.
# no_timer_check: under TCG on a loaded host the IO-APIC timer check at boot can miss its ticks and
# panic ("IO-APIC + timer doesn't work"); the check proves nothing about an emulated timer.
# arm64: the virt board's console is its PL011 UART; -cpu max is every feature TCG emulates (LSE
# atomics among them, which the BPF JIT and the Rust code use when present), with the cheaper
# implementation-defined pointer-authentication algorithm (QARMA under TCG is slow, and nothing here
# tests the algorithm).
if [[ "$arch" == arm64 ]]; then
	cmdline="console=ttyAMA0 panic=-1 oops=panic rdinit=/init morpheus_run=$run_id${append:+ $append}"
	arch_args=(-M virt -cpu "${cpu:-max,pauth-impdef=on}")
	cpu=""
else
	cmdline="console=ttyS0,115200 panic=-1 oops=panic no_timer_check rdinit=/init morpheus_run=$run_id${append:+ $append}"
	arch_args=()
fi
qemu=("${qemu_bin[@]}" "${arch_args[@]}" -accel "tcg,thread=$tcg_threads" -smp "$smp" -m "$mem" -nographic -no-reboot
	-monitor none -serial stdio -kernel "$image" -initrd "$initrd" -append "$cmdline")
[[ -z "$cpu" ]] || qemu+=(-cpu "$cpu")
[[ $share_root -eq 0 ]] || qemu+=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on")

log "booting $image with $initrd ($arch, smp $smp, mem $mem, qemu $qemu_from, tcg threads $tcg_threads, timeout ${timeout_secs}s)"
start=$(date +%s.%N)
set +e
if [[ $quiet -eq 1 ]]; then
	timeout --kill-after=10 "$timeout_secs" "${qemu[@]}" </dev/null >"$log_file" 2>&1
	qemu_status=$?
else
	timeout --kill-after=10 "$timeout_secs" "${qemu[@]}" </dev/null 2>&1 | tee -a "$log_file"
	qemu_status=${PIPESTATUS[0]}
fi
set -e
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')

marker=$(tr -d '\r' <"$log_file" | grep -a -oE "MORPHEUS-VM-EXIT=[0-9]+ run=$run_id\$" | tail -n 1 || true)
if [[ -n "$marker" ]]; then
	code=${marker#MORPHEUS-VM-EXIT=}
	code=${code%% *}
	if [[ $qemu_status -ne 0 ]]; then
		log "warning: qemu exited with status $qemu_status after the guest reported its result"
	fi
	log "guest test exited with $code (${elapsed}s wall clock)"
	exit "$code"
fi

trap - EXIT # keep the console log for the post-mortem
if [[ $qemu_status -eq 124 || $qemu_status -eq 137 ]]; then
	die "timed out after ${timeout_secs}s (wall clock): killed qemu before the guest reported a result; console log: $log_file" "$EXIT_TIMEOUT"
fi
reason="qemu exited with status $qemu_status"
panic=$(tr -d '\r' <"$log_file" | grep -a -m 1 -E 'Kernel panic|BUG:|Oops' || true)
[[ -z "$panic" ]] || reason="kernel failure: $panic"
if [[ $qemu_status -ne 0 && -z "$panic" ]]; then
	reason="$reason: $(tail -n 3 "$log_file" | tr -d '\r' | tr '\n' ' ')"
fi
die "guest did not report a result (no MORPHEUS-VM-EXIT marker) after ${elapsed}s; $reason; console log: $log_file" "$EXIT_NO_RESULT"
