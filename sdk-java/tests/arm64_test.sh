#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# sdk-java's JUnit suite on linux-aarch64: Maven builds the jar's natives for both platforms (pom.xml) and
# Surefire forks the test JVM as Temurin's arm64 JRE (tools/arm64/java.sh --home), which the kernel runs
# under qemu-aarch64-static (binfmt_misc, with the arm64 libc as QEMU_LD_PREFIX), so
# NativeLibrary resolves linux-aarch64 and every test runs the cross-built libraries. The backend is JNI
# by default (the first argument picks another: ffm). The same tests as on x86-64, the scheduler they
# start (scx_morpheus, sim backend) stays an x86-64 process sharing the region. Run from sdk-java/.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
backend="${1:-jni}"
shift || true
java="$("$root/tools/arm64/java.sh" --home)/bin/java"
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
arch="$("$java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *os.arch = //p')"
[[ "$arch" == aarch64 ]] || { echo "arm64_test: FAIL: $java reports os.arch '$arch', expected aarch64" >&2; exit 1; }
# Maven compiles the FFM backend at release 22: it runs on the host's JDK 25.
JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64 exec mvn -q -B -f "$here/pom.xml" test -Dmorpheus.test.backend="$backend" -Djvm="$java" \
  -Dmorpheus.build.dir="target/bazel-arm64-$backend" "$@"
