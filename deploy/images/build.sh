#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Builds the OCI images of deploy/ with podman, FROM scratch, from this repository's own build outputs
# (no base image is pulled from a registry):
#
#   agent   localhost/morpheus/scx_morpheus:TAG  scx_morpheus and morpheus (cargo build -p scx_morpheus),
#           the shared libraries they link (ldd), busybox for the privilege check (agent-entrypoint.sh)
#   node    localhost/morpheus/node-service:TAG  node and its libraries, the npm package made by
#           sdk-node/tools/pack.sh for this machine's platform (the same code `tools/release.sh node`
#           ships, but one package with the x86-64 addon inside rather than the released main package
#           plus its platform package) installed offline, and
#           deploy/examples/node-service/service.js
#   jvm     localhost/morpheus/jvm-service:TAG   a Java runtime made by jlink from the JDK, the released
#           jar of sdk-java (its Maven build, what `tools/release.sh java` ships; natives inside), and
#           deploy/examples/jvm-service/Service.java compiled against it
#
# Usage: deploy/images/build.sh [--tag TAG] [--profile debug|release] [agent] [node] [jvm]   (default: all;
# TAG defaults to `dev`). Prints each image's name. Needs podman (tools/setup.sh) and root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=deploy/images/podman.sh
source "$here/podman.sh"

die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'build.sh: %s\n' "$*" >&2; }

tag=dev profile=debug images=()
while (($#)); do
  case "$1" in
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --profile) profile="${2:?--profile needs debug or release}"; shift 2 ;;
    agent | node | jvm) images+=("$1"); shift ;;
    *) die "unknown argument '$1' (usage: build.sh [--tag TAG] [--profile debug|release] [agent] [node] [jvm])" ;;
  esac
done
((${#images[@]})) || images=(agent node jvm)
[[ $profile == debug || $profile == release ]] || die "--profile $profile: expected debug or release"
command -v podman >/dev/null || die "podman not found (tools/setup.sh installs it)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Copies every shared library that the ELF files $2... load (ldd) into root $1, at their own paths.
copy_libs() {
  local root="$1" file lib
  shift
  for file in "$@"; do
    while read -r lib; do
      [[ -e "$root$lib" ]] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done < <(ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
  done
}

# The files every image root has: passwd/group naming root and nobody (id(1), error messages).
base_root() {
  local root="$1"
  mkdir -p "$root/etc" "$root/tmp" "$root/run" "$root/proc" "$root/sys" "$root/dev"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\n' >"$root/etc/group"
}

# Builds image $2 from root $1 with the Containerfile lines that follow.
build_image() {
  local root="$1" name="$2"
  shift 2
  { echo "FROM scratch"; echo "COPY root/ /"; printf '%s\n' "$@"; } >"$(dirname "$root")/Containerfile"
  pod build --quiet --no-cache -t "$name" -f "$(dirname "$root")/Containerfile" "$(dirname "$root")" >/dev/null ||
    die "podman build of $name failed (see above)"
  echo "$name"
}

build_agent() {
  local root="$work/agent/root" flags=()
  [[ $profile == release ]] && flags=(--release)
  log "agent: cargo build ${flags[*]} -p scx_morpheus"
  (cd "$repo" && cargo build --quiet "${flags[@]}" -p scx_morpheus --bin scx_morpheus --bin morpheus) || die "cargo build -p scx_morpheus failed"
  local target="${CARGO_TARGET_DIR:-$repo/target}/$profile"
  base_root "$root"
  mkdir -p "$root/usr/local/bin" "$root/bin"
  install -m 0755 "$target/scx_morpheus" "$target/morpheus" "$root/usr/local/bin/"
  copy_libs "$root" "$root/usr/local/bin/scx_morpheus" "$root/usr/local/bin/morpheus"
  local busybox
  busybox="$(command -v busybox)" || die "busybox not found (apt busybox-static)"
  file -L "$busybox" | grep -q 'statically linked' || die "$busybox is not static (apt busybox-static)"
  cp -L "$busybox" "$root/bin/busybox"
  for applet in sh sed grep id cat; do ln -s busybox "$root/bin/$applet"; done
  install -m 0755 "$here/agent-entrypoint.sh" "$root/usr/local/bin/agent-entrypoint"
  build_image "$root" "localhost/morpheus/scx_morpheus:$tag" \
    'ENV PATH=/usr/local/bin:/bin' \
    'ENTRYPOINT ["/usr/local/bin/agent-entrypoint"]' \
    'CMD ["--backend", "sim", "--socket", "/run/morpheus/agent.sock"]'
}

build_node() {
  local root="$work/node/root" dist="$work/node/dist"
  mkdir -p "$dist"
  log "node: sdk-node/tools/pack.sh (the npm package for this platform, addon inside)"
  local tarball
  tarball="$(bash "$repo/sdk-node/tools/pack.sh" "$dist")" || die "sdk-node/tools/pack.sh failed"
  [[ -f $tarball ]] || die "sdk-node/tools/pack.sh made no tarball (it printed '$tarball')"
  base_root "$root"
  local node
  node="$(readlink -f "$(command -v node)")" || die "node not found"
  mkdir -p "$root/usr/bin" "$root/app"
  install -m 0755 "$node" "$root/usr/bin/node"
  copy_libs "$root" "$node"
  (cd "$root/app" && npm install --offline --no-audit --no-fund --no-save --loglevel=error "$tarball" >&2) ||
    die "npm install of $tarball into the image root failed"
  copy_libs "$root" "$root"/app/node_modules/@morpheus-sched/node/native/*.node
  install -m 0644 "$repo/deploy/examples/node-service/service.js" "$root/app/service.js"
  build_image "$root" "localhost/morpheus/node-service:$tag" \
    'WORKDIR /app' \
    'ENV NODE_PATH=/app/node_modules' \
    'ENTRYPOINT ["/usr/bin/node", "/app/service.js"]'
}

# The JDK sdk-java builds with (its FFM backend needs 22+; tools/setup.sh's Java section).
JDK=${MORPHEUS_JDK:-/usr/lib/jvm/temurin-25-jdk-amd64}

build_jvm() {
  local root="$work/jvm/root" build="$work/jvm/build"
  [[ -x $JDK/bin/jlink ]] || die "no JDK at $JDK (tools/setup.sh's Java section; MORPHEUS_JDK to choose another)"
  log "jvm: mvn package of sdk-java (the released jar)"
  (cd "$repo" && JAVA_HOME="$JDK" mvn -q -B -f sdk-java/pom.xml package -DskipTests "-Dmorpheus.build.dir=$build" >&2) ||
    die "mvn package of sdk-java failed"
  local jar
  jar="$(find "$build" -maxdepth 1 -name 'morpheus-*.jar' ! -name '*-sources.jar' ! -name '*-javadoc.jar' | head -n 1)"
  [[ -f $jar ]] || die "mvn package made no morpheus-*.jar in $build"
  base_root "$root"
  mkdir -p "$root/app" "$root/opt"
  cp "$jar" "$root/app/morpheus.jar"
  local modules
  modules="$("$JDK/bin/jdeps" --ignore-missing-deps --print-module-deps "$jar")" || die "jdeps failed on $jar"
  "$JDK/bin/jlink" --add-modules "$modules" --strip-debug --no-header-files --no-man-pages --output "$root/opt/java" ||
    die "jlink failed"
  "$JDK/bin/javac" -d "$root/app" -cp "$jar" "$repo/deploy/examples/jvm-service/Service.java" || die "javac of Service.java failed"
  # The natives inside the jar are loaded from a copy; the libraries they link come with the image.
  mkdir -p "$work/jvm/natives"
  (cd "$work/jvm/natives" && "$JDK/bin/jar" xf "$jar" dev/morpheus/native)
  copy_libs "$root" "$root/opt/java/bin/java" "$root"/opt/java/lib/*.so "$root"/opt/java/lib/server/libjvm.so \
    $(find "$work/jvm/natives" -name '*.so')
  build_image "$root" "localhost/morpheus/jvm-service:$tag" \
    'WORKDIR /app' \
    'ENTRYPOINT ["/opt/java/bin/java", "--enable-native-access=ALL-UNNAMED", "-cp", "/app/morpheus.jar:/app", "Service"]'
}

for image in "${images[@]}"; do
  "build_$image"
done
