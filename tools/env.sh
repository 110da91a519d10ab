# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Environment shared by tools/test.sh and tools/main.sh (source it; it only sets
# defaults, so a value already in the environment wins). .bazelrc passes these
# through to tests.

# Downloads and build products kept between runs (kernel packages, VM images).
# A tool that reads it should default to this same path when it is unset (as
# under a plain `bazel test`).
export MORPHEUS_CACHE="${MORPHEUS_CACHE:-${HOME:-/root}/.cache/morpheus}"

# CI builds once from a clean clone, so cargo's incremental caches and full debug info are only disk:
# on a fresh run they were 0.7 GB and about half of target/debug's 3.7 GB, and a CI run once died on a
# full disk. Line tables keep panics' backtraces readable.
if [[ "${CI:-}" == "true" ]]; then
  export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
  export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
fi
