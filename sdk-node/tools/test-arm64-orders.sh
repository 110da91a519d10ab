#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The memory orders of spec/SCB.md §5.1 and §5.3 in the linux-arm64-gnu addon's machine code
# (tools/arm64/arm64_orders.py node): the native checkpoint's acquire load of preempt_seq (ldar/ldapr),
# the critical enter's store then full barrier (dmb ish), the exit's store-release (stlr) and the
# acknowledging CAS of last_ack_seq, acq_rel (casal, ldaxr/stlxr or __aarch64_cas8_acq_rel), each found
# by the symbol of the napi callback that JS calls (and the thread-local closure the body is in). The JS
# side's own check of the shared word (Atomics on a SharedArrayBuffer) is V8's JIT code: not checked here.
#
# The addon is the one the package carries (tools/build.sh --target aarch64-unknown-linux-gnu, as
# //sdk-node:arm64_test builds it). The negative control (tools/arm64/orders-control.sh: the same crate
# with the protocol's orders relaxed, built by cargo without the napi CLI, which for this target adds no
# compiler flag: it writes the TypeScript declarations and names and copies the library) must be
# rejected on every access.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
"$here/tools/build.sh" --target aarch64-unknown-linux-gnu
python3 "$root/tools/arm64/arm64_orders.py" node "$here/native/morpheus.linux-arm64-gnu.node"
relaxed="$("$root/tools/arm64/orders-control.sh")"
python3 "$root/tools/arm64/arm64_orders.py" node "$relaxed/libmorpheus_node.so" --expect-reject
