#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The C compiler's layout of abi/c/morpheus_abi.h must be the one spec/abi.toml states.
set -euo pipefail
dump=$1 generator=$2 spec=$3
"$dump" | python3 "$generator" --spec "$spec" --verify-dump -
