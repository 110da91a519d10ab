#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# tools/arm64/orders-control.sh: builds the negative control of the arm64 order tests
# (tools/arm64/arm64_orders.py) and prints its directory: libmorpheus, the JNI library and the Node addon
# cross-built for aarch64-unknown-linux-gnu (release) from a scratch copy of their crates in which
# sdk-rust/src/protocol.rs's four fast-path accesses are weakened (below): the checkpoint's load of
# preempt_seq relaxed, the critical enter's fence gone, the exit's store relaxed, the acknowledgement's
# load and CAS relaxed. The tests must reject these libraries on every access they check, or their
# checks could not fail. Never edits the source tree.
#
# The copy and its target directory are <target>/arm64-orders-relaxed: the product's libraries in
# <target>/aarch64-unknown-linux-gnu/release must never be these (cargo copies a cdylib there by its
# name). A file is rewritten only when its content changed, so an unchanged tree builds nothing. One
# cargo call for the three crates, whichever test asks, under a lock, so that the order tests of sdk-c,
# sdk-java and sdk-node share one build.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${CARGO_TARGET_DIR:-$root/target}/arm64-orders-relaxed"
mkdir -p "$dir/tree"
dir="$(cd "$dir" && pwd)" # absolute: cargo runs in the copy
exec 9>"$dir/.lock"
flock 9
python3 - "$root" "$dir/tree" <<'EOF'
import os, re, shutil, sys

root, tree = sys.argv[1], sys.argv[2]
# The weakenings, each of a text that must occur exactly once in sdk-rust/src/protocol.rs (the same
# texts as sdk-rust/tests/loom_mutations.sh's mutations of these orders, which loom must catch).
WEAKEN = [
    ("preempt_seq.load(Acquire)", "preempt_seq.load(Relaxed)"),
    # (SeqCst stays used: the copy builds without an unused-import warning.)
    ("in_critical.store(1, Relaxed);\n    A::fence(SeqCst);", "in_critical.store(1, Relaxed);\n    let _no_fence = SeqCst;"),
    ("in_critical.store(0, Release)", "in_critical.store(0, Relaxed)"),
    ("let mut current = last_ack_seq.load(Acquire);", "let mut current = last_ack_seq.load(Relaxed);"),
    ("compare_exchange(current, seq, AcqRel, Acquire)", "compare_exchange(current, seq, Relaxed, Relaxed)"),
]
CRATES = ["abi/rust", "sdk-rust", "sdk-c", "sdk-java/jni", "sdk-node"]
SKIP = {"target", "node_modules", "native"}


def put(rel: str, data: bytes) -> None:
    """Write tree/rel when its content differs (an unchanged file keeps its mtime: cargo sees it fresh)."""
    path = os.path.join(tree, rel)
    if os.path.exists(path) and open(path, "rb").read() == data:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def copy_crate(crate: str) -> None:
    """A crate's Rust sources, manifests and headers (a symlinked header, abi/rust/morpheus_abi.h, as a file)."""
    for top, dirs, files in os.walk(os.path.join(root, crate)):
        dirs[:] = [d for d in dirs if d not in SKIP]
        for name in files:
            rel = os.path.relpath(os.path.join(top, name), root)
            if name.endswith((".rs", ".toml", ".h")) and rel != "sdk-rust/src/protocol.rs":
                put(rel, open(os.path.join(root, rel), "rb").read())


for crate in CRATES:
    copy_crate(crate)
put("abi/c/morpheus_abi.h", open(os.path.join(root, "abi/c/morpheus_abi.h"), "rb").read())
# The workspace's lock, which cargo then trims to the copy's members: copied again only when it changed.
lock = open(os.path.join(root, "Cargo.lock"), "rb").read()
if not os.path.exists(os.path.join(tree, ".Cargo.lock.source")) or open(os.path.join(tree, ".Cargo.lock.source"), "rb").read() != lock:
    put("Cargo.lock", lock)
    put(".Cargo.lock.source", lock)
put(".cargo/config.toml", open(os.path.join(root, ".cargo/config.toml"), "rb").read())
manifest, n = re.subn(r"members = \[[^\]]*\]", "members = [" + ", ".join(f'"{c}"' for c in CRATES) + "]",
                      open(os.path.join(root, "Cargo.toml")).read())
if n != 1:
    sys.exit(f"orders-control.sh: {root}/Cargo.toml: expected one 'members = [...]', found {n}")
put("Cargo.toml", manifest.encode())
protocol = open(os.path.join(root, "sdk-rust/src/protocol.rs")).read()
for old, new in WEAKEN:
    if protocol.count(old) != 1:
        sys.exit(f"orders-control.sh: sdk-rust/src/protocol.rs holds {protocol.count(old)} copies of {old!r}, "
                 "expected one: update the weakenings to the protocol's code")
    protocol = protocol.replace(old, new)
put("sdk-rust/src/protocol.rs", protocol.encode())
EOF
cd "$dir/tree"
CARGO_TARGET_DIR="$dir" cargo build --release --quiet --target aarch64-unknown-linux-gnu -p morpheus-c -p morpheus-jni -p morpheus-node >&2 ||
  { echo "tools/arm64/orders-control.sh: the relaxed control build failed" >&2; exit 1; }
echo "$dir/aarch64-unknown-linux-gnu/release"
