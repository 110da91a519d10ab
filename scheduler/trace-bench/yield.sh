#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Time to yield per SDK on the tracing backend (tools/main.sh step yield_bench; scheduler/BENCHMARKS.md
# "Time to yield per SDK"): builds scx_morpheus and the e2e workers of scheduler/e2e/ for Rust, C,
# Python, Node and Java (FFM on JDK 25) as scheduler/e2e/run.sh builds them, and runs
# scheduler/trace-bench/yield.py over them (it says what it measures). Needs root, a kernel with BPF
# and BTF, and hardware breakpoints. Arguments go to yield.py (e.g. --rounds 5 --seconds 4).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
# The same build command as scheduler/starvation/run.sh and scheduler/e2e/run.sh.
cargo build --release -p scx_morpheus --bin scx_morpheus --bin morpheus-e2e-worker --bin morpheus
target_dir=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-yield.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
e2e="$root/scheduler/e2e"

# C: the worker linked statically against libmorpheus.a.
make -s -C "$root/sdk-c" lib >&2
static_libs=$(sed -n 's/^STATIC_LIBS *:= *//p' "$root/sdk-c/Makefile")
# shellcheck disable=SC2086
cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/sdk-c/include" -I"$root/abi/c" -o "$work/morpheus-e2e-worker-c" \
	"$e2e/worker_c.c" "$target_dir/sdk-c/lib/libmorpheus.a" $static_libs
# Python: the wheel installed into a directory of its own, beside the generated ABI module.
mkdir -p "$work/py" "$work/wheel"
wheel=$("$root/sdk-python/tools/build.sh" "$work/wheel")
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$work/py" "$wheel" >&2
cp -r "$root/abi/python/morpheus_abi" "$e2e/worker_py.py" "$work/py/"
# Node: the npm package as the release gate packs it, unpacked as `npm install` would.
mkdir -p "$work/node/node_modules/@morpheus-sched/node"
tarball=$(bash "$root/sdk-node/tools/pack.sh" "$work")
tar -xzf "$tarball" -C "$work/node/node_modules/@morpheus-sched/node" --strip-components=1
cp "$e2e/worker_node.js" "$work/node/"
# Java: the jar Maven builds (JDK 25, natives inside), the worker on the FFM backend.
jdk25=/usr/lib/jvm/temurin-25-jdk-amd64
mkdir -p "$work/java"
JAVA_HOME=$jdk25 mvn -q -B -f "$root/sdk-java/pom.xml" package -DskipTests -Dmorpheus.build.dir="$root/sdk-java/target/yield" >&2
jars=("$root"/sdk-java/target/yield/morpheus-*[0-9].jar)
[[ ${#jars[@]} -eq 1 && -f ${jars[0]} ]] || { echo "yield.sh: expected one jar in sdk-java/target/yield, found: ${jars[*]}" >&2; exit 1; }
cp "${jars[0]}" "$work/java/morpheus.jar"
"$jdk25/bin/javac" --release 17 -cp "$work/java/morpheus.jar" -d "$work/java" "$e2e/WorkerJava.java"

# The Node and Java workers read their SCB at start and end through `morpheus-e2e-worker --scb-of`.
export PATH="$target_dir/release:$PATH"
python3 "$here/yield.py" --bin-dir "$target_dir/release" \
	--worker "rust=$target_dir/release/morpheus-e2e-worker" \
	--worker "c=$work/morpheus-e2e-worker-c" \
	--worker "python=env PYTHONPATH=$work/py PYTHONDONTWRITEBYTECODE=1 python3 $work/py/worker_py.py" \
	--worker "node=node $work/node/worker_node.js" \
	--worker "java=$jdk25/bin/java -Xmx128m -XX:+UseSerialGC -XX:-UsePerfData --enable-native-access=ALL-UNNAMED -Dmorpheus.backend=ffm -Djava.util.logging.ConsoleHandler.level=WARNING -cp $work/java/morpheus.jar:$work/java WorkerJava" \
	"$@"
