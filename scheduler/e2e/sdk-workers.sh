#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Builds every SDK's own test worker for the live phases (e2e/live.sh), as a user of each SDK gets it,
# into OUT_DIR: the same build for the VM (e2e/run.sh ships OUT_DIR into the initramfs) and the host
# (e2e/trace-host.sh):
#   OUT_DIR/morpheus-e2e-worker-c   C, linked statically against libmorpheus.a;
#   OUT_DIR/py/                     the Python wheel installed as a directory, with morpheus_abi and worker_py.py;
#   OUT_DIR/node/                   worker_node.js beside node_modules/@morpheus-sched/node, the npm package
#                                   as the release gate packs it (sdk-node/tools/pack.sh), unpacked as npm would;
#   OUT_DIR/java/                   morpheus.jar (Maven, JDK 25, natives inside) and WorkerJava compiled for
#                                   JDK 17, so both Java backends (FFM on 25, JNI on 17) run it.
#   OUT_DIR/jdks.env                JDK25= and JDK17=, the JDKs' homes on this machine (the callers run the
#                                   workers on them).
# JAVA_BUILD_DIR names Maven's build directory under sdk-java/target (one per caller: the VM and the host
# tests may build at the same time). Progress goes to stderr.
#
# usage: scheduler/e2e/sdk-workers.sh OUT_DIR JAVA_BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
out=${1:?usage: sdk-workers.sh OUT_DIR JAVA_BUILD_DIR}
java_build=${2:?usage: sdk-workers.sh OUT_DIR JAVA_BUILD_DIR}
target_dir=${CARGO_TARGET_DIR:-$root/target}
# The JDKs the Java workers run on (tools/setup.sh installs both).
JDK25=/usr/lib/jvm/temurin-25-jdk-amd64
JDK17=/usr/lib/jvm/java-17-openjdk-amd64
mkdir -p "$out"

echo "sdk-workers: the C worker (libmorpheus.a)" >&2
make -s -C "$root/sdk-c" lib >&2
static_libs=$(sed -n 's/^STATIC_LIBS *:= *//p' "$root/sdk-c/Makefile")
# shellcheck disable=SC2086
cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/sdk-c/include" -I"$root/abi/c" -o "$out/morpheus-e2e-worker-c" \
	"$here/worker_c.c" "$target_dir/sdk-c/lib/libmorpheus.a" $static_libs

echo "sdk-workers: the Python wheel" >&2
mkdir -p "$out/py" "$out/wheel"
wheel=$("$root/sdk-python/tools/build.sh" "$out/wheel")
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$out/py" "$wheel" >&2
rm -rf "$out/wheel"
cp -r "$root/abi/python/morpheus_abi" "$here/worker_py.py" "$out/py/"

echo "sdk-workers: the Node package, the Java jar" >&2
mkdir -p "$out/node/node_modules/@morpheus-sched/node" "$out/java"
tarball=$(bash "$root/sdk-node/tools/pack.sh" "$out")
tar -xzf "$tarball" -C "$out/node/node_modules/@morpheus-sched/node" --strip-components=1
rm -f "$tarball"
cp "$here/worker_node.js" "$out/node/"
JAVA_HOME=$JDK25 mvn -q -B -f "$root/sdk-java/pom.xml" package -DskipTests -Dmorpheus.build.dir="$root/sdk-java/target/$java_build" >&2
jars=("$root/sdk-java/target/$java_build"/morpheus-*[0-9].jar)
if [[ ${#jars[@]} -ne 1 || ! -f ${jars[0]} ]]; then
	echo "sdk-workers: error: expected one jar in sdk-java/target/$java_build, found: ${jars[*]}" >&2
	exit 1
fi
cp "${jars[0]}" "$out/java/morpheus.jar"
"$JDK25/bin/javac" --release 17 -cp "$out/java/morpheus.jar" -d "$out/java" "$here/WorkerJava.java"
printf 'JDK25=%s\nJDK17=%s\n' "$JDK25" "$JDK17" >"$out/jdks.env"
