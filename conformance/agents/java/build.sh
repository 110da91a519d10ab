#!/bin/sh
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# build.sh: the Java agents' build (columns java-ffm and java-jni run the same agent). Maven builds
# sdk-java's jar with Temurin 25 (one build at a time on this tree: flock), the agent is compiled for
# JDK 17 and packed into a jar of its own, and both jars go into target/conformance/java by a rename
# (agents/common/stage.sh): an agent JVM of another gate still running on this tree keeps the jars it
# opened, and loads its classes lazily from them, so neither may be rewritten in place.
set -eu
jdk=/usr/lib/jvm/temurin-25-jdk-amd64
out=target/conformance/java
mkdir -p "$out"
scratch=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
(
	flock 9
	JAVA_HOME="$jdk" mvn -q -B -f sdk-java/pom.xml package -DskipTests
	cp sdk-java/target/morpheus-0.1.0.jar "$scratch/"
) 9>"$out/.maven.lock"
mkdir "$scratch/classes"
"$jdk/bin/javac" --release 17 -cp "$scratch/morpheus-0.1.0.jar" -d "$scratch/classes" conformance/agents/java/Agent.java
"$jdk/bin/jar" --create --file "$scratch/morpheus-conformance-agent.jar" -C "$scratch/classes" .
sh conformance/agents/common/stage.sh "$out" "$scratch/morpheus-0.1.0.jar" "$scratch/morpheus-conformance-agent.jar"
