#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Build a busybox-static initramfs that runs one test script and powers off.
# Executables given with --bin get every shared library ldd reports (and the
# dynamic loader) copied to the same path in the image. See README.md.
set -euo pipefail

readonly PROG=mkinitramfs
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly GUEST_INIT=$here/guest-init.sh
readonly BUSYBOX=${MORPHEUS_BUSYBOX:-/bin/busybox}
readonly ELF_MAGIC=7f454c46
readonly ELF_MACHINE_X86_64=3e00 # e_machine, little endian
readonly ELF_MACHINE_AARCH64=b700
# Where an arm64 image's --bin libraries are looked up (their DT_NEEDED entries, recursively): the
# directories of --lib-path first, then the cross toolchain's arm64 libc (libc6-arm64-cross).
readonly ARM64_CROSS_LIBC=/usr/aarch64-linux-gnu/lib

usage() {
	cat <<EOF
usage: $0 OUT.cpio.gz --init-script SCRIPT [options]

Build a gzip'ed initramfs whose /init mounts proc, sys, devtmpfs, debugfs,
tracefs, bpffs (/sys/fs/bpf), cgroup2 (/sys/fs/cgroup) and tmpfs (/run, /tmp,
/dev/shm), runs SCRIPT (as /morpheus/test, interpreter from its #! line),
prints MORPHEUS-VM-EXIT=<code> and powers off.

options:
  --init-script SCRIPT   the test to run in the guest (required)
  --bin PATH[:DEST]      executable plus the shared libraries it needs;
                         DEST defaults to /usr/local/bin/<name> (on PATH)
  --file SRC:DEST        copy a file or directory to absolute DEST
                         (a DEST ending in / keeps SRC's name)
  --kernel DIR           kernel directory from fetch-kernel.sh (for --module;
                         with --arch arm64, also the source of busybox)
  --arch amd64|arm64     the guest's architecture (default: amd64): every ELF
                         --bin must be built for it. arm64 images take busybox
                         from the kernel directory (fetch-kernel.sh --arch arm64)
                         and resolve a --bin's libraries from --lib-path and
                         $ARM64_CROSS_LIBC (the host's ldd cannot)
  --lib-path DIR[:DIR]   arm64: directories holding the --bin's libraries
  --module NAME          load module NAME and its dependencies before the
                         test (skipped with a note if built in)
  -h, --help             show this help
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

out=""
init_script=""
kernel_dir=""
bins=()
files=()
modules=()
arch=amd64
lib_path=""
while [[ $# -gt 0 ]]; do
	case "$1" in
	--init-script) [[ $# -ge 2 ]] || die "--init-script needs a file"; init_script=$2; shift 2 ;;
	--bin) [[ $# -ge 2 ]] || die "--bin needs PATH[:DEST]"; bins+=("$2"); shift 2 ;;
	--file) [[ $# -ge 2 ]] || die "--file needs SRC:DEST"; files+=("$2"); shift 2 ;;
	--kernel) [[ $# -ge 2 ]] || die "--kernel needs a directory"; kernel_dir=$2; shift 2 ;;
	--module) [[ $# -ge 2 ]] || die "--module needs a module name"; modules+=("$2"); shift 2 ;;
	--arch) [[ $# -ge 2 ]] || die "--arch needs amd64 or arm64"; arch=$2; shift 2 ;;
	--lib-path) [[ $# -ge 2 ]] || die "--lib-path needs directories"; lib_path=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	-*) usage >&2; die "unknown option '$1'" ;;
	*)
		[[ -z "$out" ]] || die "more than one output file given ('$out' and '$1')"
		out=$1
		shift
		;;
	esac
done

[[ -n "$out" ]] || { usage >&2; die "no output file given"; }
[[ "$out" == *.cpio.gz ]] || die "output '$out' must end in .cpio.gz"
out_parent=$(dirname "$out")
[[ -d "$out_parent" ]] || die "output directory '$out_parent' does not exist"
[[ -n "$init_script" ]] || die "--init-script is required"
[[ -f "$init_script" ]] || die "--init-script '$init_script' is not a file"
if [[ ${#modules[@]} -gt 0 ]]; then
	[[ -n "$kernel_dir" ]] || die "--module needs --kernel DIR (from fetch-kernel.sh)"
fi
if [[ -n "$kernel_dir" ]]; then
	[[ -f "$kernel_dir/kernel-release" ]] || die "--kernel '$kernel_dir' is not a kernel directory from fetch-kernel.sh (no kernel-release file)"
fi
for tool in cpio gzip ldd find sort; do
	command -v "$tool" >/dev/null || die "'$tool' not found; run tools/setup.sh"
done
busybox=$BUSYBOX
busybox_run=("$busybox")
case "$arch" in
amd64)
	elf_machine=$ELF_MACHINE_X86_64
	[[ -z "$lib_path" ]] || die "--lib-path is for --arch arm64 (amd64 binaries' libraries are found with ldd)"
	;;
arm64)
	elf_machine=$ELF_MACHINE_AARCH64
	[[ -n "$kernel_dir" ]] || die "--arch arm64 needs --kernel DIR (from fetch-kernel.sh --arch arm64: it holds arm64 busybox)"
	busybox=$kernel_dir/busybox
	[[ -x "$busybox" ]] || die "$busybox not found; fetch the kernel with scheduler/vm/fetch-kernel.sh --arch arm64"
	command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static not found (qemu-user-static; tools/setup.sh): it lists arm64 busybox's applets"
	command -v readelf >/dev/null || die "readelf not found (binutils)"
	[[ -d "$ARM64_CROSS_LIBC" ]] || die "$ARM64_CROSS_LIBC not found (libc6-arm64-cross; tools/setup.sh)"
	busybox_run=(qemu-aarch64-static "$busybox")
	;;
*) die "--arch must be amd64 or arm64, got '$arch'" ;;
esac
is_elf() { [[ "$(od -An -tx1 -N4 "$1" | tr -d ' \n')" == "$ELF_MAGIC" ]]; }
# Every ELF --bin is for the image's architecture, checked before anything is built.
for spec in "${bins[@]}"; do
	src=$spec
	[[ "$spec" != *:* ]] || src=${spec%:*}
	[[ -f "$src" ]] || die "--bin '$src' is not a file"
	[[ -x "$src" ]] || die "--bin '$src' is not executable"
	if is_elf "$src"; then
		machine=$(od -An -tx1 -j18 -N2 "$src" | tr -d ' \n')
		[[ "$machine" == "$elf_machine" ]] || die "--bin '$src' is not an ELF binary for $arch (e_machine $machine, want $elf_machine)"
	fi
done
[[ -x "$busybox" ]] || die "$busybox not found; install busybox-static (tools/setup.sh)"
if [[ "$arch" == amd64 ]] && ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked; install busybox-static (tools/setup.sh)"
fi
if [[ "$arch" == arm64 ]] && readelf -lW "$busybox" | grep -q 'INTERP'; then
	die "$busybox is dynamically linked; it must be busybox-static's"
fi
[[ -f "$GUEST_INIT" ]] || die "$GUEST_INIT is missing"

stage=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-initramfs.XXXXXX")
tmp_out=""
trap 'rm -rf "$stage" ${tmp_out:+"$tmp_out"}' EXIT

# --- skeleton and busybox ------------------------------------------------------
chmod 0755 "$stage" # becomes / in the guest
mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,dev,proc,sys,run,tmp,root,etc/morpheus,morpheus}
chmod 1777 "$stage/tmp"
cp "$busybox" "$stage/bin/busybox"
while IFS= read -r applet; do
	[[ -e "$stage/$applet" || -L "$stage/$applet" ]] && continue
	mkdir -p "$stage/$(dirname "$applet")"
	ln -s /bin/busybox "$stage/$applet"
done < <("${busybox_run[@]}" --list-full)
[[ -L "$stage/bin/sh" ]] || die "$busybox provides no sh applet"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$stage/etc/passwd"
printf 'root:x:0:\n' >"$stage/etc/group"
install -m 0755 "$GUEST_INIT" "$stage/init"

# --- executables and their libraries -----------------------------------------------
declare -A lib_dirs=()
scripts=("/morpheus/test") # guest paths whose #! interpreter must exist

guest_path_ok() { [[ "$1" == /* && "/$1/" != */../* ]]; }

# copy_into SRC DEST: DEST is a guest path; parent directories are created.
copy_into() {
	mkdir -p "$stage$(dirname "$2")"
	cp -a -L "$1" "$stage$2"
}

add_libraries() { # add_libraries BINARY
	local bin=$1 ldd_out line lib
	# ldd fails for static binaries and scripts; that is fine, they need nothing.
	ldd_out=$(ldd "$bin" 2>&1) || return 0
	if grep -q 'not found' <<<"$ldd_out"; then
		die "--bin $bin: missing shared libraries on this host: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t\n' ' ')"
	fi
	while IFS= read -r line; do
		# "libx.so => /path/libx.so (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)";
		# the vdso has no path.
		if [[ "$line" =~ =\>[[:space:]]*(/[^[:space:]]+) ]]; then
			lib=${BASH_REMATCH[1]}
		elif [[ "$line" =~ ^[[:space:]]*(/[^[:space:]]+)[[:space:]]+\( ]]; then
			lib=${BASH_REMATCH[1]}
		else
			continue
		fi
		[[ -f "$lib" ]] || die "--bin $bin: ldd reported '$lib' but it is not a file"
		if [[ ! -e "$stage$lib" ]]; then
			copy_into "$lib" "$lib"
		fi
		lib_dirs[$(dirname "$lib")]=1
	done <<<"$ldd_out"
}

# add_arm64_libraries BINARY: its program interpreter (at its own path) and every library it needs,
# recursively (DT_NEEDED), from --lib-path and the cross libc, into /lib/aarch64-linux-gnu.
add_arm64_libraries() {
	local bin=$1 interp needed name dir found
	interp=$(readelf -lW "$bin" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')
	[[ -n "$interp" ]] || return 0 # static
	if [[ ! -e "$stage$interp" ]]; then
		[[ -f "$ARM64_CROSS_LIBC/$(basename "$interp")" ]] || die "--bin $bin: its loader $interp is not in $ARM64_CROSS_LIBC"
		copy_into "$ARM64_CROSS_LIBC/$(basename "$interp")" "$interp"
	fi
	local -a queue=("$bin") search
	IFS=: read -ra search <<<"$lib_path:$ARM64_CROSS_LIBC"
	while [[ ${#queue[@]} -gt 0 ]]; do
		needed=$(readelf -dW "${queue[0]}" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
		queue=("${queue[@]:1}")
		for name in $needed; do
			[[ ! -e "$stage/lib/aarch64-linux-gnu/$name" ]] || continue
			found=""
			for dir in "${search[@]}"; do
				[[ -n "$dir" && -f "$dir/$name" ]] && { found=$dir/$name; break; }
			done
			[[ -n "$found" ]] || die "--bin $bin: library $name is in neither --lib-path '$lib_path' nor $ARM64_CROSS_LIBC"
			copy_into "$found" "/lib/aarch64-linux-gnu/$name"
			queue+=("$found")
		done
	done
	lib_dirs[/lib/aarch64-linux-gnu]=1
}

for spec in "${bins[@]}"; do
	src=$spec dest=""
	if [[ "$spec" == *:* ]]; then
		src=${spec%:*} dest=${spec##*:}
	fi
	[[ -f "$src" ]] || die "--bin '$src' is not a file"
	[[ -x "$src" ]] || die "--bin '$src' is not executable"
	[[ -n "$dest" ]] || dest=/usr/local/bin/$(basename "$src")
	guest_path_ok "$dest" || die "--bin '$spec': destination '$dest' must be an absolute path without '..'"
	if is_elf "$src"; then
		if [[ "$arch" == arm64 ]]; then add_arm64_libraries "$src"; else add_libraries "$src"; fi
	else
		scripts+=("$dest")
	fi
	rm -f "$stage$dest" # may be a busybox applet link
	copy_into "$src" "$dest"
	chmod 0755 "$stage$dest"
	log "added executable $dest"
done

for spec in "${files[@]}"; do
	[[ "$spec" == *:* ]] || die "--file '$spec' must be SRC:DEST"
	src=${spec%:*} dest=${spec##*:}
	[[ -e "$src" ]] || die "--file '$spec': '$src' does not exist"
	guest_path_ok "$dest" || die "--file '$spec': destination '$dest' must be an absolute path without '..'"
	[[ "$dest" == */ ]] && dest=$dest$(basename "$src")
	rm -rf "${stage:?}$dest"
	copy_into "$src" "$dest"
	log "added file $dest"
done

install -m 0755 "$init_script" "$stage/morpheus/test"

# --- kernel modules ---------------------------------------------------------------------
if [[ ${#modules[@]} -gt 0 ]]; then
	command -v modprobe >/dev/null || die "'modprobe' not found; install kmod (tools/setup.sh)"
	release=$(<"$kernel_dir/kernel-release")
	declare -A loaded=()
	for name in "${modules[@]}"; do
		deps=$(modprobe -d "$kernel_dir" -S "$release" --show-depends "$name" 2>&1) ||
			die "--module $name: $deps"
		while read -r kind path _; do
			case "$kind" in
			builtin) log "module $path is built into $release; nothing to load" ;;
			insmod)
				[[ -z "${loaded[$path]:-}" ]] || continue
				loaded[$path]=1
				rel=${path#"$kernel_dir"/lib/modules/"$release"/}
				[[ "$rel" != "$path" ]] || die "--module $name: unexpected module path '$path'"
				guest=/lib/modules/$release/${rel%.[gx]z}
				guest=${guest%.zst}
				mkdir -p "$stage$(dirname "$guest")"
				# Decompressed here so that busybox insmod needs no decompressor.
				case "$path" in
				*.xz) xz -dc "$path" >"$stage$guest" ;;
				*.zst) zstd -qdc "$path" >"$stage$guest" ;;
				*.gz) gzip -dc "$path" >"$stage$guest" ;;
				*) cp "$path" "$stage$guest" ;;
				esac
				printf '%s\n' "$guest" >>"$stage/etc/morpheus/modules"
				log "added module $guest"
				;;
			*) die "--module $name: cannot parse modprobe output: $kind $path" ;;
			esac
		done <<<"$deps"
	done
fi

# --- checks and archive ------------------------------------------------------------------
guest_has_command() { # guest_has_command NAME: on the guest's PATH?
	local dir
	for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
		[[ -e "$stage$dir/$1" || -L "$stage$dir/$1" ]] && return 0
	done
	return 1
}
for script in "${scripts[@]}"; do
	first_line=""
	read -r first_line <"$stage$script" || true
	[[ "$first_line" == '#!'* ]] || die "$script in the image has no #! line (start it with #!/bin/sh)"
	read -r interpreter argument _ <<<"${first_line#'#!'}"
	[[ -e "$stage$interpreter" || -L "$stage$interpreter" ]] ||
		die "$script needs interpreter '$interpreter', which is not in the image (add it with --bin)"
	if [[ "$interpreter" == */env && -n "${argument:-}" && "$argument" != -* ]]; then
		guest_has_command "$argument" ||
			die "$script needs '$argument' (via $interpreter), which is not in the image (add it with --bin)"
	fi
done

if [[ ${#lib_dirs[@]} -gt 0 ]]; then
	# No ld.so.cache in the image; libraries found via the host's cache or
	# LD_LIBRARY_PATH must still be found in the guest.
	(IFS=:; printf '%s\n' "${!lib_dirs[*]}") >"$stage/etc/morpheus/ld-library-path"
fi

tmp_out=$(mktemp "$out_parent/.$(basename "$out").XXXXXX")
(cd "$stage" && find . -print0 | LC_ALL=C sort -z |
	cpio --null --create --format=newc --owner=0:0 --reproducible --quiet) |
	gzip -6 -n >"$tmp_out"
mv "$tmp_out" "$out"
log "wrote $out ($(du -h "$out" | cut -f1))"
