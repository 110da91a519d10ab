#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# The jar as a user gets it: `mvn install` of sdk-java into a scratch local repository from which
# dev.morpheus is removed first (so the artifact can only come from this install), then the example
# (examples/worker-loop) built as a fresh Maven project against it and run on a sim region twice: on
# JDK 25, where the FFM backend is the default, and on JDK 17, where it is JNI. The test plays the
# scheduler: it asks the worker to yield and checks that a checkpoint acknowledged exactly that request.
# Run from sdk-java/ (bazel test //sdk-java:install_test).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
build="${CARGO_TARGET_DIR:-$root/target}/sdk-c"
tool="$build/region_tool"
repo="$here/target/install-test-m2"
project="$(mktemp -d)"
region="$(mktemp -u /dev/shm/morpheus-java-example-XXXXXX)"
out="$project/worker_loop.out"
pid=""
JDK25=/usr/lib/jvm/temurin-25-jdk-amd64
JDK17=/usr/lib/jvm/java-17-openjdk-amd64

cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  rm -rf "$project" "$region"
}
trap cleanup EXIT
fail() { echo "install_test: FAIL: $*" >&2; [[ -f "$out" ]] && sed 's/^/  worker-loop| /' "$out" >&2; exit 1; }

make -s -C "$root/sdk-c" BUILD="$build" "$tool" >/dev/null
rm -rf "$repo/dev/morpheus"
JAVA_HOME=$JDK25 mvn -q -B -f "$here/pom.xml" install -DskipTests -Dmaven.repo.local="$repo" -Dmorpheus.build.dir=target/install-test
[[ -f "$repo/dev/morpheus/morpheus/0.1.0/morpheus-0.1.0.jar" ]] || fail "mvn install put no jar in $repo"

cp -r "$here/examples/worker-loop/." "$project/"
rm -rf "$project/target"
JAVA_HOME=$JDK25 mvn -q -B -f "$project/pom.xml" package -Dmaven.repo.local="$repo"
cp="$project/target/classes:$(cat "$project/target/classpath.txt")"
[[ "$cp" == *"$repo/dev/morpheus/morpheus/0.1.0/morpheus-0.1.0.jar"* ]] ||
  fail "the example does not use the installed artifact: $cp"

"$tool" create "$region" 4
slot=1
for jdk in "$JDK25 ffm" "$JDK17 jni"; do
  read -r home backend <<<"$jdk"
  MORPHEUS_REGION="$region" "$home/bin/java" --enable-native-access=ALL-UNNAMED -cp "$cp" example.WorkerLoop \
    --slot "$slot" --yields 1 --seconds 60 >"$out" 2>&1 &
  pid=$!
  "$tool" wait-state "$region" "$slot" RUNNING 30000 || fail "the worker on $home never reached RUNNING"
  seq="$("$tool" request "$region" "$slot")"
  wait "$pid" || fail "the example exited with status $? on $home"
  pid=""
  grep -q "registered, slot $slot (attached), backend $backend" "$out" ||
    fail "expected the $backend backend attached to slot $slot on $home"
  grep -q "checkpoint yielded, acknowledged preempt_seq $seq\$" "$out" || fail "no checkpoint acknowledged request $seq"
  show="$("$tool" show "$region" "$slot")"
  [[ "$show" == *"state=INIT "* ]] || fail "slot $slot not released after close: $show"
  [[ "$show" == *"last_ack_seq=$seq "* ]] || fail "last_ack_seq is not $seq: $show"
  echo "install_test: ok: $backend backend on $("$home/bin/java" -version 2>&1 | head -n 1): request $seq acknowledged ($show)"
done
