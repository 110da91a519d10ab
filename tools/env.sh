# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Environment shared by tools/test.sh and tools/main.sh (source it; it only sets
# defaults, so a value already in the environment wins). .bazelrc passes these
# through to tests.

# sdk-java builds with Temurin 25 (FFM API); Bazel's own JVM is pinned in .bazelrc.
export JAVA_HOME="${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}"
# Downloads and build products kept between runs (kernel packages, VM images).
export MORPHEUS_CACHE="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"
