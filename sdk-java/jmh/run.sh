#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The sdk-java checkpoint benchmarks (results: ../BENCHMARKS.md, tables made by report.py).
# Installs the SDK into a scratch Maven repository, builds this module twice (release 22, and release 17
# with -Pjdk17) and runs three configurations: the FFM backend on JDK 25, the JNI backend on JDK 25, and
# the JNI backend on JDK 17. On a shared machine a ratio between two benchmarks measured minutes apart
# says little, so the forks are interleaved: ROUNDS rounds (default 5), each running every configuration
# once with one fork in average-time mode; report.py takes each ratio per round (checkpoint ÷ baseline of
# the same fork set) and gives its mean and spread. Then one sample-time fork per configuration for the
# percentiles.
#   run.sh [ROUNDS] [JMH options...]     e.g. `run.sh 1 -wi 2 -i 2` for a quick look
#   MORPHEUS_JMH_CONFIGS="jni-25 jni-17" run.sh 4    only some configurations
#   MORPHEUS_JMH_OUT=DIR                             results there instead of target/results (emptied first)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
jdk25=${JDK25:-/usr/lib/jvm/temurin-25-jdk-amd64}
jdk17=${JDK17:-/usr/lib/jvm/java-17-openjdk-amd64}
rounds=${1:-5}
shift || true
export JAVA_HOME=$jdk25
repo=${MORPHEUS_JMH_REPO:-$here/target/m2}
mvn -q -B -f "$here/../pom.xml" install -DskipTests -Dmaven.repo.local="$repo"
mvn -q -B -f "$here/pom.xml" package -Dmaven.repo.local="$repo"
mvn -q -B -f "$here/pom.xml" package -Pjdk17 -Dmaven.repo.local="$repo"
out=${MORPHEUS_JMH_OUT:-$here/target/results}
rm -rf "$out" && mkdir -p "$out"
uptime >"$out/load.txt"

# configuration name -> JDK, build directory, backend, benchmarks (each checkpoint beside its baselines)
read -r -a configs <<<"${MORPHEUS_JMH_CONFIGS:-ffm-25 jni-25 jni-17}"
for c in "${configs[@]}"; do
  case $c in ffm-25|jni-25|jni-17) ;; *) echo "run.sh: MORPHEUS_JMH_CONFIGS: expected ffm-25, jni-25 or jni-17, found '$c'" >&2; exit 2;; esac
done
declare -A jdk=([ffm-25]=$jdk25 [jni-25]=$jdk25 [jni-17]=$jdk17)
declare -A build=([ffm-25]=target [jni-25]=target [jni-17]=target/jdk17)
declare -A benchmarks=(
  [ffm-25]='CheckpointBench\.(atomicLongGetAcquire|checkpoint|criticalEnterExit)$|SegmentBaselineBench\.segmentGetAcquire$'
  [jni-25]='CheckpointBench\.(atomicLongGetAcquire|emptyJniCall|checkpoint|criticalEnterExit)$'
  [jni-17]='CheckpointBench\.(atomicLongGetAcquire|emptyJniCall|checkpoint|criticalEnterExit)$'
)

run() { # config mode output [JMH options...]
  local c=$1 mode=$2 file=$3 backend=${1%-*}
  shift 3
  local cp="$here/${build[$c]}/classes:$(cat "$here/${build[$c]}/classpath.txt")"
  "${jdk[$c]}/bin/java" -cp "$cp" org.openjdk.jmh.Main "${benchmarks[$c]}" -p backend="$backend" -bm "$mode" -f 1 \
    -jvmArgsAppend "--enable-native-access=ALL-UNNAMED -Dmorpheus.backend=$backend" -rf json -rff "$file" "$@"
}

for ((r = 1; r <= rounds; r++)); do
  for c in "${configs[@]}"; do
    echo "== round $r/$rounds: $c (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    run "$c" avgt "$out/$c-avgt-$r.json" "$@"
    cut -d' ' -f1-3 /proc/loadavg >>"$out/load.txt"
  done
done
for c in "${configs[@]}"; do
  echo "== sample time: $c"
  run "$c" sample "$out/$c-sample.json" "$@"
done
uptime >>"$out/load.txt"
python3 "$here/report.py" "$out"
