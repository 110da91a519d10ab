#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The executor benchmark against the real scheduler: `scx_morpheus --backend sim --mode observer` on a
# private socket, and ExecutorThroughput (heavy CPU-bound tasks with light probe tasks beside them;
# blocking / Thread.yield() / return to the executor every N units / Morpheus) whose Morpheus pool threads
# register through that socket. Two scheduler settings, as sdk-python/bench/run.sh:
#   no_pressure: --slice-us 10000000 (10 s of CPU before a worker is asked: practically never);
#   pressure:    the default slice (5 ms) and grace (2 ms).
# Results: target/executor/{no_pressure,pressure}.json; executor_table.py prints BENCHMARKS.md's tables.
# Usage: executor.sh [SECONDS_PER_CELL] [ROUNDS] [all|no_pressure|pressure] [ExecutorThroughput options...]
#   (also: bazel run //sdk-java:executor_bench -- 3 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
secs=${1:-3}
rounds=${2:-3}
which=${3:-all}
shift $(($# < 3 ? $# : 3))
case $which in all|no_pressure|pressure) ;; *) echo "executor.sh: third argument: all, no_pressure or pressure, not '$which'" >&2; exit 2;; esac
export JAVA_HOME=${JDK25:-/usr/lib/jvm/temurin-25-jdk-amd64}
repo=${MORPHEUS_JMH_REPO:-$here/target/m2}
cargo build --release --quiet -p scx_morpheus --manifest-path "$root/Cargo.toml"
scx="${CARGO_TARGET_DIR:-$root/target}/release/scx_morpheus"
mvn -q -B -f "$here/../pom.xml" install -DskipTests -Dmaven.repo.local="$repo"
mvn -q -B -f "$here/pom.xml" package -Dmaven.repo.local="$repo"
cp="$here/target/classes:$(cat "$here/target/classpath.txt")"
out=$here/target/executor
mkdir -p "$out"
dir=$(mktemp -d)
sched=""
stop_scheduler() {
  if [[ -n $sched ]]; then kill -INT "$sched" 2>/dev/null || true; wait "$sched" 2>/dev/null || true; fi
  sched=""
}
trap 'stop_scheduler; rm -rf "$dir"' EXIT

run() { # NAME SCHEDULER_OPTIONS...
  local name=$1
  shift
  "$scx" --backend sim --mode observer --socket "$dir/$name.sock" --max-workers 4 "$@" >"$out/$name.scheduler.log" 2>&1 &
  sched=$!
  for _ in $(seq 200); do [[ -S $dir/$name.sock ]] && break; sleep 0.05; done
  [[ -S $dir/$name.sock ]] || { echo "executor.sh: scx_morpheus did not start, see $out/$name.scheduler.log" >&2; exit 1; }
  local before
  before=$(cut -d' ' -f1-3 /proc/loadavg)
  "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED -cp "$cp" dev.morpheus.ExecutorThroughput \
    --socket "$dir/$name.sock" --seconds "$secs" --rounds "$rounds" --json "$out/$name.json" "${extra[@]}"
  echo "$before / $(cut -d' ' -f1-3 /proc/loadavg)" >"$out/$name.load"
  stop_scheduler
}

extra=("$@")
if [[ $which != pressure ]]; then run no_pressure --slice-us 10000000; fi
if [[ $which != no_pressure ]]; then run pressure; fi
python3 "$here/executor_table.py"
