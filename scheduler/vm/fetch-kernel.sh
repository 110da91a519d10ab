#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Fetch Debian sid's current amd64 kernel (the one `linux-image-amd64` points
# at; with --arch arm64, the arm64 one `linux-image-arm64` points at) through a private apt configuration, extract it into a cache keyed by
# the resolved version and print the path of the extracted kernel directory:
#
#   <dir>/vmlinuz  <dir>/config  <dir>/System.map  <dir>/kernel-release
#   <dir>/lib/modules/<release>/   (modules, depmod'ed)   <dir>/modules -> it
#   <dir>/busybox  (--arch arm64 only: sid's busybox-static for that architecture)
#
# The system's apt configuration (/etc/apt) is never read or written: apt is
# driven through APT_CONFIG pointing at a generated apt.conf whose Dir::*
# entries all live under the cache directory.
set -euo pipefail

readonly PROG=fetch-kernel
readonly DEFAULT_MIRROR=http://deb.debian.org/debian
readonly KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
readonly REQUIRED_CONFIG=(CONFIG_SCHED_CLASS_EXT=y CONFIG_DEBUG_INFO_BTF=y)
# Package sources whose binaries make up a kernel; dependencies on anything
# else (kmod, initramfs-tools, linux-base's perl helpers, ...) are not needed
# to boot the image under qemu and are not followed.
readonly KERNEL_SOURCE_RE='^linux(-signed-.*)?$'
# "(= 7.2.13-1)" in a Depends entry.
readonly EXACT_VERSION_RE='^\(=[[:space:]]*([^[:space:]()]+)\)'

usage() {
	cat <<EOF
usage: $0 [options]

Resolve, download (if not cached) and extract Debian sid's current kernel.
Prints the extracted kernel directory on stdout; progress goes to stderr.

options:
  --cache-dir DIR   private apt state and kernel cache
                    (default: \${MORPHEUS_CACHE:-\$HOME/.cache/morpheus}/sid-apt[-ARCH])
  --arch ARCH       Debian architecture of the kernel: amd64 or arm64
                    (default: amd64); the apt state of each lives apart
                    (sid-apt for amd64, sid-apt-ARCH otherwise)
  --package NAME    kernel metapackage to resolve (default: linux-image-ARCH)
  --mirror URL      Debian mirror (default: $DEFAULT_MIRROR)
  --max-age HOURS   reuse package lists younger than this without touching
                    the network (default: \${MORPHEUS_SID_MAX_AGE_HOURS:-6})
  --refresh         always run 'apt-get update' first
  --offline         never touch the network: use the newest cached kernel
  --check-valid-until yes|no
                    reject sid Release files past their Valid-Until date
                    (default: the system apt's Acquire::Check-Valid-Until,
                    which is only read, or \$MORPHEUS_SID_CHECK_VALID_UNTIL)
  -h, --help        show this help
EOF
}

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

cache_root=""
meta_package=""
arch=amd64
mirror=$DEFAULT_MIRROR
max_age_hours=${MORPHEUS_SID_MAX_AGE_HOURS:-6}
mode=auto # auto | refresh | offline
check_valid_until=${MORPHEUS_SID_CHECK_VALID_UNTIL:-}

while [[ $# -gt 0 ]]; do
	case "$1" in
	--cache-dir) [[ $# -ge 2 ]] || die "--cache-dir needs a directory"; cache_root=$2; shift 2 ;;
	--arch) [[ $# -ge 2 ]] || die "--arch needs amd64 or arm64"; arch=$2; shift 2 ;;
	--package) [[ $# -ge 2 ]] || die "--package needs a package name"; meta_package=$2; shift 2 ;;
	--mirror) [[ $# -ge 2 ]] || die "--mirror needs a URL"; mirror=$2; shift 2 ;;
	--max-age) [[ $# -ge 2 ]] || die "--max-age needs a number of hours"; max_age_hours=$2; shift 2 ;;
	--refresh) mode=refresh; shift ;;
	--offline) mode=offline; shift ;;
	--check-valid-until)
		[[ $# -ge 2 ]] || die "--check-valid-until needs yes or no"
		check_valid_until=$2
		shift 2
		;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument '$1'" ;;
	esac
done

[[ "$arch" == amd64 || "$arch" == arm64 ]] || die "--arch must be amd64 or arm64, got '$arch'"
[[ -n "$meta_package" ]] || meta_package=linux-image-$arch
[[ "$max_age_hours" =~ ^[0-9]+$ ]] || die "--max-age must be a whole number of hours, got '$max_age_hours'"
[[ "$meta_package" =~ ^[a-z0-9][a-z0-9+.-]+$ ]] || die "--package '$meta_package' is not a valid Debian package name"
[[ "$mirror" =~ ^https?://[^[:space:]]+$ ]] || die "--mirror must be an http(s) URL, got '$mirror'"
if [[ -z "$check_valid_until" ]]; then
	# Machines that serve a frozen mirror snapshot disable this globally; follow
	# the system's choice rather than silently weakening it everywhere.
	check_valid_until=$(env -u APT_CONFIG apt-config dump --format '%v%n' Acquire::Check-Valid-Until 2>/dev/null || true)
	check_valid_until=${check_valid_until:-yes}
fi
case "${check_valid_until,,}" in
yes | true | 1) check_valid_until=true ;;
no | false | 0) check_valid_until=false ;;
*) die "--check-valid-until must be yes or no, got '$check_valid_until'" ;;
esac
if [[ -z "$cache_root" ]]; then
	base=${MORPHEUS_CACHE:-}
	if [[ -z "$base" ]]; then
		[[ -n "${HOME:-}" ]] || die "neither MORPHEUS_CACHE nor HOME is set; pass --cache-dir"
		base=$HOME/.cache/morpheus
	fi
	cache_root=$base/sid-apt
	[[ "$arch" == amd64 ]] || cache_root=$cache_root-$arch
fi

for tool in apt-get apt-cache dpkg-deb dpkg depmod flock; do
	command -v "$tool" >/dev/null || die "'$tool' not found; run tools/setup.sh (needs apt, dpkg, kmod, util-linux)"
done
[[ -r "$KEYRING" ]] || die "$KEYRING missing; install debian-archive-keyring (tools/setup.sh)"

mkdir -p "$cache_root" || die "cannot create cache dir '$cache_root'"
cache_root=$(cd "$cache_root" && pwd -P)
kernels_dir=$cache_root/kernels
mkdir -p "$cache_root"/etc/{apt.conf.d,preferences.d,sources.list.d,trusted.gpg.d} \
	"$cache_root"/state/lists/partial "$cache_root"/cache/archives/partial \
	"$cache_root"/log "$kernels_dir"

# One fetch at a time per cache (tests may run in parallel).
exec 9>"$cache_root/lock"
flock 9

# --- private apt configuration ------------------------------------------------
apt_conf=$cache_root/apt.conf
sandbox_user=_apt
# The cache usually lives in a home directory that _apt cannot enter.
[[ $(id -u) -eq 0 ]] && sandbox_user=root
cat >"$apt_conf" <<EOF
// Generated by scheduler/vm/fetch-kernel.sh: private apt for Debian sid.
Dir::Etc "$cache_root/etc/";
Dir::Etc::main "/dev/null";
Dir::Etc::parts "$cache_root/etc/apt.conf.d/";
Dir::Etc::sourcelist "$cache_root/etc/sources.list";
Dir::Etc::sourceparts "$cache_root/etc/sources.list.d/";
Dir::Etc::preferences "$cache_root/etc/preferences";
Dir::Etc::preferencesparts "$cache_root/etc/preferences.d/";
Dir::Etc::trusted "$cache_root/etc/trusted.gpg";
Dir::Etc::trustedparts "$cache_root/etc/trusted.gpg.d/";
Dir::State "$cache_root/state/";
Dir::State::status "$cache_root/state/status";
Dir::Cache "$cache_root/cache/";
Dir::Cache::srcpkgcache ""; // only binary packages are looked up
Dir::Log "$cache_root/log/";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
Acquire::Languages "none";
Acquire::Check-Valid-Until "$check_valid_until";
APT::Sandbox::User "$sandbox_user";
EOF
printf 'deb [signed-by=%s] %s sid main\n' "$KEYRING" "$mirror" >"$cache_root/etc/sources.list"
touch "$cache_root/state/status" # nothing is "installed" in this private root
export APT_CONFIG=$apt_conf
unset APT_CONFIG_DIR 2>/dev/null || true

# --- helpers -----------------------------------------------------------------
field() { # field NAME < control record
	awk -v f="$1:" 'index($0, f) == 1 { sub(/^[^:]*:[ \t]*/, ""); print; exit }'
}

# The exact record apt would pick for "name" or "name=version"; empty if none.
package_record() {
	{ apt-cache show --no-all-versions "$1" 2>/dev/null || true; } | awk 'NF == 0 { exit } { print }'
}

newest_cached() {
	local best="" best_ver="" dir ver
	for dir in "$kernels_dir"/"$meta_package"_*; do
		[[ -f "$dir/.complete" ]] || continue
		ver=$(<"$dir/deb-version")
		if [[ -z "$best" ]] || dpkg --compare-versions "$ver" gt "$best_ver"; then
			best=$dir best_ver=$ver
		fi
	done
	printf '%s' "$best"
}

check_config() { # check_config KERNEL_DIR
	local want missing=()
	for want in "${REQUIRED_CONFIG[@]}"; do
		grep -qx "$want" "$1/config" || missing+=("$want")
	done
	if [[ ${#missing[@]} -gt 0 ]]; then
		die "kernel config $1/config lacks ${missing[*]}; sched_ext and BTF are required"
	fi
}

# A kernel for another architecture than the host's comes with that architecture's busybox-static
# (sid's, from the same private apt), which mkinitramfs.sh builds that kernel's image around:
# <dir>/busybox. The host's own busybox serves amd64.
ensure_busybox() { # ensure_busybox KERNEL_DIR
	local dir=$1 tmp debs bin
	[[ "$arch" != amd64 && ! -x "$dir/busybox" ]] || return 0
	[[ "$mode" != offline ]] || die "--offline given but $dir has no busybox for $arch (run once online)"
	tmp=$(mktemp -d "$kernels_dir/.busybox.XXXXXX")
	if ! (cd "$tmp" && apt-get -q download busybox-static) >"$cache_root/log/busybox.log" 2>&1; then
		sed 's/^/  apt: /' "$cache_root/log/busybox.log" >&2
		rm -rf "$tmp"
		die "'apt-get download busybox-static' ($arch) failed (log: $cache_root/log/busybox.log)"
	fi
	debs=("$tmp"/busybox-static_*.deb)
	dpkg-deb -x "${debs[0]}" "$tmp/root" || die "dpkg-deb -x failed for ${debs[0]}"
	for bin in "$tmp/root/usr/bin/busybox" "$tmp/root/bin/busybox" ""; do [[ ! -f "$bin" ]] || break; done
	[[ -n "$bin" ]] || die "busybox-static ($arch) has neither usr/bin/busybox nor bin/busybox"
	install -m 0755 "$bin" "$dir/.busybox.tmp"
	mv "$dir/.busybox.tmp" "$dir/busybox"
	dpkg-deb -f "${debs[0]}" Version >"$dir/busybox-version"
	rm -rf "$tmp"
	log "added busybox-static $(<"$dir/busybox-version") ($arch) to $dir"
}

finish() { # finish KERNEL_DIR: verify and print
	check_config "$1"
	ensure_busybox "$1"
	log "kernel $(<"$1/kernel-release") (package version $(<"$1/deb-version"))"
	printf '%s\n' "$1"
	exit 0
}

fallback_or_die() { # fallback_or_die REASON
	local cached
	cached=$(newest_cached)
	[[ -n "$cached" ]] || die "$1, and no kernel is cached in $kernels_dir"
	log "warning: $1; using the newest cached kernel instead: $cached"
	finish "$cached"
}

# --- 1. package lists ----------------------------------------------------------
if [[ "$mode" == offline ]]; then
	cached=$(newest_cached)
	[[ -n "$cached" ]] || die "--offline given but no kernel is cached in $kernels_dir"
	finish "$cached"
fi

lists_stamp=$cache_root/state/lists/.morpheus-updated
need_update=1
# The stamp holds the mirror the lists came from.
if [[ "$mode" == auto && -f "$lists_stamp" && "$(<"$lists_stamp")" == "$mirror" ]] &&
	[[ -n $(find "$lists_stamp" -mmin "-$((max_age_hours * 60))" 2>/dev/null) ]]; then
	need_update=0
fi
if [[ $need_update -eq 1 ]]; then
	log "updating sid package lists from $mirror"
	if apt-get -q update >"$cache_root/log/update.log" 2>&1 &&
		! grep -qE '^(W|E): ' "$cache_root/log/update.log"; then
		printf '%s' "$mirror" >"$lists_stamp"
	else
		rm -f "$lists_stamp"
		sed 's/^/  apt: /' "$cache_root/log/update.log" >&2
		if grep -qE 'NO_PUBKEY|EXPKEYSIG|not signed|signature' "$cache_root/log/update.log"; then
			log "hint: sid's signing key may be newer than $KEYRING; update debian-archive-keyring"
		fi
		fallback_or_die "'apt-get update' for sid failed (log: $cache_root/log/update.log)"
	fi
fi

# --- 2. resolve the metapackage's kernel closure ---------------------------------
meta_record=$(package_record "$meta_package")
[[ -n "$meta_record" ]] || fallback_or_die "package '$meta_package' not found in sid's package lists"
meta_version=$(field Version <<<"$meta_record")
key=${meta_package}_${meta_version}
kernel_dir=$kernels_dir/$key

if [[ -f "$kernel_dir/.complete" ]]; then
	log "$meta_package $meta_version is cached"
	finish "$kernel_dir"
fi

# Walk Depends/Pre-Depends from the metapackage, following only packages built
# from the kernel's own sources. Old layouts (linux-image-<abi>-amd64 holding
# /boot/vmlinuz-* and /lib/modules) and newer split ones (linux-binary-*,
# linux-modules-*, linux-base-<abi>-*) are both covered because the walk does
# not assume any package name.
declare -A seen=()
closure=()
queue=("$meta_package=$meta_version")
while [[ ${#queue[@]} -gt 0 ]]; do
	spec=${queue[0]}
	queue=("${queue[@]:1}")
	[[ -z "${seen[$spec]:-}" ]] || continue
	seen[$spec]=1
	record=$(package_record "$spec")
	[[ -n "$record" ]] || die "apt has no record for '$spec' (needed by $meta_package $meta_version)"
	closure+=("$spec")
	deps=$(printf '%s\n%s' "$(field Pre-Depends <<<"$record")" "$(field Depends <<<"$record")")
	while IFS= read -r group; do
		[[ -n "${group// /}" ]] || continue
		IFS='|' read -ra alternatives <<<"$group"
		for alt in "${alternatives[@]}"; do
			read -r name constraint <<<"$alt"
			name=${name%%:*}
			version=""
			if [[ "$constraint" =~ $EXACT_VERSION_RE ]]; then
				version=${BASH_REMATCH[1]}
			fi
			candidate=$name${version:+=$version}
			alt_record=$(package_record "$candidate")
			[[ -n "$alt_record" ]] || continue # virtual or unavailable
			source=$(field Source <<<"$alt_record")
			source=${source%% *}
			[[ -n "$source" ]] || source=$(field Package <<<"$alt_record")
			if [[ "$source" =~ $KERNEL_SOURCE_RE ]]; then
				queue+=("$name=$(field Version <<<"$alt_record")")
			fi
			break # the first available alternative is the one apt would pick
		done
	done < <(tr ',' '\n' <<<"$deps")
done
log "resolved $meta_package $meta_version -> ${closure[*]}"

# --- 3. download and extract ------------------------------------------------------
work=$(mktemp -d "$kernels_dir/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root"
log "downloading ${#closure[@]} packages"
if ! (cd "$work/debs" && apt-get -q download "${closure[@]}") >"$cache_root/log/download.log" 2>&1; then
	sed 's/^/  apt: /' "$cache_root/log/download.log" >&2
	fallback_or_die "'apt-get download' failed (log: $cache_root/log/download.log)"
fi
for deb in "$work"/debs/*.deb; do
	dpkg-deb -x "$deb" "$work/root" || die "dpkg-deb -x failed for $deb"
done

shopt -s nullglob
images=("$work"/root/usr/lib/modules/*/vmlinuz "$work"/root/lib/modules/*/vmlinuz "$work"/root/boot/vmlinuz-*)
shopt -u nullglob
[[ ${#images[@]} -eq 1 ]] ||
	die "expected exactly one kernel image in ${closure[*]}, found ${#images[@]}: ${images[*]:-none}"
image=${images[0]}
if [[ "$image" == */boot/vmlinuz-* ]]; then
	release=${image##*/vmlinuz-}
else
	release=$(basename "$(dirname "$image")")
fi
modules_src=""
for candidate in "$work/root/usr/lib/modules/$release" "$work/root/lib/modules/$release"; do
	[[ -d "$candidate" ]] && modules_src=$candidate
done
[[ -n "$modules_src" ]] || die "no modules directory for kernel $release in ${closure[*]}"

# Normalised layout; kmod's depmod -b wants <base>/lib/modules/<release>.
out=$work/out
mkdir -p "$out/lib/modules"
mv "$image" "$out/vmlinuz"
for item in config System.map; do
	if [[ -f "$modules_src/$item" ]]; then
		mv "$modules_src/$item" "$out/$item"
	elif [[ -f "$work/root/boot/$item-$release" ]]; then
		mv "$work/root/boot/$item-$release" "$out/$item"
	else
		die "kernel $release: no $item found in ${closure[*]}"
	fi
done
mv "$modules_src" "$out/lib/modules/$release"
ln -s "lib/modules/$release" "$out/modules"
printf '%s\n' "$release" >"$out/kernel-release"
printf '%s\n' "$meta_version" >"$out/deb-version"
printf '%s\n' "${closure[@]}" >"$out/packages"
check_config "$out"
log "generating module dependencies (depmod) for $release"
depmod -b "$out" "$release" || die "depmod failed for kernel $release"
touch "$out/.complete"

rm -rf "$kernel_dir"
mv "$out" "$kernel_dir"
finish "$kernel_dir"
