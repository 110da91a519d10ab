#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# The memory orders of spec/SCB.md §5.1 and §5.3 in the linux-aarch64 JNI library's machine code
# (tools/arm64/arm64_orders.py jni): the native checkpoint's acquire load of preempt_seq (ldar/ldapr),
# the critical enter's store then full barrier (dmb ish), the exit's store-release (stlr) and the
# acknowledging CAS of last_ack_seq, acq_rel (casal, ldaxr/stlxr or __aarch64_cas8_acq_rel), each found
# by the library's exported Java_dev_morpheus_JniNative_* symbol (and the core's functions it calls).
# Java's own inline check of the fast-path word is JIT code, not in the library: not checked here.
#
# The library is the one the jar carries: cargo builds it with pom.xml's arguments (the same cargo call,
# so after any Maven build of sdk-java it is a no-op). The negative control (tools/arm64/orders-control.sh:
# the same library with the protocol's orders relaxed) must be rejected on every access. Run from sdk-java/.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
cargo build --release --quiet --target aarch64-unknown-linux-gnu -p morpheus-c -p morpheus-jni
python3 tools/arm64/arm64_orders.py jni "${CARGO_TARGET_DIR:-$root/target}/aarch64-unknown-linux-gnu/release/libmorpheus_jni.so"
relaxed="$(tools/arm64/orders-control.sh)"
python3 tools/arm64/arm64_orders.py jni "$relaxed/libmorpheus_jni.so" --expect-reject
