#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
echo "morpheus: 'bazel coverage' is not supported: Bazel's coverage tools are a download and this build is offline." >&2
echo "Use each ecosystem's own coverage tool (cargo llvm-cov, pytest-cov, c8, jacoco) instead." >&2
exit 1
