# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Environment shared by tools/test.sh and tools/main.sh (source it; it only sets
# defaults, so a value already in the environment wins). .bazelrc passes these
# through to tests.

# Downloads and build products kept between runs (kernel packages, VM images).
# A tool that reads it should default to this same path when it is unset (as
# under a plain `bazel test`).
export MORPHEUS_CACHE="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"
