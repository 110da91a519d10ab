#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The sdk-java benchmarks: installs the SDK into a scratch Maven repository, builds the JMH module and runs
# it on Temurin 25, once per backend (each fork gets -Dmorpheus.backend). Extra arguments go to JMH,
# e.g. `run.sh -f 1 -wi 2 -i 2` for a quick look. Results: ../BENCHMARKS.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
repo=${MORPHEUS_JMH_REPO:-$here/target/m2}
mvn -q -B -f "$here/../pom.xml" install -DskipTests -Dmaven.repo.local="$repo"
mvn -q -B -f "$here/pom.xml" package -Dmaven.repo.local="$repo"
cp="$here/target/classes:$(cat "$here/target/classpath.txt")"
# Per backend: the checkpoint and critical section beside their baselines (the plain-segment read for FFM,
# the empty JNI call for JNI; AtomicLong.getAcquire for both).
declare -A benchmarks=(
  [ffm]='CheckpointBench\.(atomicLongGetAcquire|segmentGetAcquire|checkpoint|criticalEnterExit)$'
  [jni]='CheckpointBench\.(atomicLongGetAcquire|emptyJniCall|checkpoint|criticalEnterExit)$'
)
for backend in ffm jni; do
  "$JAVA_HOME/bin/java" -cp "$cp" org.openjdk.jmh.Main "${benchmarks[$backend]}" -p backend=$backend \
    -jvmArgsAppend "--enable-native-access=ALL-UNNAMED -Dmorpheus.backend=$backend" -rf json -rff "$here/target/jmh-$backend.json" "$@"
done
