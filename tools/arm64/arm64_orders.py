#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The memory orders of spec/SCB.md §3.1 in the arm64 machine code of the runtime's fast paths.

The spec's orders are checked by loom on the C11 model (sdk-rust/tests/loom.rs); this checks that the
compilers turned them into the arm64 instructions that implement them, in the linux-arm64-gnu build:

    acquire load of preempt_seq (checkpoint)        ldar / ldapr  (a plain ldr is relaxed)
    in_critical := 1, then fence(seq_cst) (enter)   dmb ish after the store (a full barrier; ishld/ishst are not)
    store-release in_critical := 0 (exit)           stlr
    acknowledging CAS of last_ack_seq, acq_rel      casal, or ldaxr ... stlxr, or a call of libgcc's /
                                                    compiler-builtins' __aarch64_cas8_acq_rel (outline atomics:
                                                    casal when the CPU has LSE, else ldaxr/stlxr), whose body
                                                    is checked too; a weaker 64-bit CAS there is an error

Each fast path is found by its symbol: the C SDK's inline functions through the out-of-line wrappers of
sdk-c/tests/arm64_orders.c, the Rust core's through libmorpheus's exported entry points (which inline
sdk-rust's protocol.rs) and the function that makes the acknowledgement (morpheus::slow_path::commit);
the bindings' through their exported entry points too: the JNI library's Java_dev_morpheus_JniNative_*
functions, the napi addon's callbacks (morpheus_node::*_c_callback, the functions napi-rs registers).
Where a binding's entry point only calls the code that holds the access, the checker follows the call
into the functions named for that check and no others (the core's morpheus::kit wrappers, the
`LocalKey<T>::with` instance that runs a thread-local closure, a guard's drop), never into napi-rs, jni-rs
or the rest of std. A check is per access, without debug information: it shows that those functions hold
an instruction of the documented order after the accesses it names, not which source line each
instruction came from. The checkpoint's load is told from the other 64-bit loads of its function (a
status check's acquire load of `generation` beside it, as in libmorpheus's try_checkpoint) by where its
pointer and its comparand come from: the worker's `preempt_seq` field and its `cached_ack` (offsets from
the generated ABI); the critical-section functions also make the acquire load of `generation`, so their
check is on the store and the fence; and any 64-bit CAS weaker than acq_rel in the acknowledging
function is an error. The Java and JS sides' own inline checks of the fast-path word are JIT code, not in these
files: not checked here.

The negative controls show that each check can fail: the C wrappers compiled with relaxed orders
(ORDERS_NEGATIVE_CONTROL), and the Rust libraries built from a copy of their crates in which only
sdk-rust/src/protocol.rs's four fast-path accesses are relaxed and the enter's fence is gone
(tools/arm64/orders-control.sh): that the checked functions then hold no instruction of the class
checked shows that the instructions found in the real build come from those accesses.

    arm64_orders.py inline OBJECT   the C wrappers' object
    arm64_orders.py lib LIBRARY     libmorpheus.so for arm64
    arm64_orders.py jni LIBRARY     libmorpheus_jni.so for arm64 (sdk-java's JNI backend)
    arm64_orders.py node ADDON      the napi addon for arm64 (sdk-node's morpheus.linux-arm64-gnu.node)

--expect-reject inverts the verdict (the negative control: the relaxed build must be rejected on each of
the accesses checked, naming what is missing). Exit 0 when the verdict is the expected one, 1 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "abi", "python"))
from morpheus_abi import Worker  # noqa: E402  (the generated ABI: the fast-path state's layout)

OBJDUMP = os.environ.get("AARCH64_OBJDUMP", "aarch64-linux-gnu-objdump")


class Binary:
    """One arm64 ELF file's functions by section and address (a name can repeat: every instance of a generic such as
    `LocalKey<T>::with` demangles to the same name), each a list of "mnemonic operands" with branch
    targets as `ADDRESS <symbol>`."""

    def __init__(self, path: str):
        try:
            out = subprocess.run([OBJDUMP, "-d", "-C", "--no-show-raw-insn", path], check=True, text=True,
                                 capture_output=True).stdout
        except FileNotFoundError:
            sys.exit(f"arm64_orders: {OBJDUMP} not found (tools/setup.sh installs binutils-aarch64-linux-gnu)")
        except subprocess.CalledProcessError as e:
            sys.exit(f"arm64_orders: {OBJDUMP} failed on {path}: {e.stderr.strip()}")
        if "file format elf64-littleaarch64" not in out:
            sys.exit(f"arm64_orders: {path} is not an arm64 ELF object")
        self.path = path
        # Keyed by (section, address): in a relocatable object every section starts at 0.
        self.names: dict[tuple[str, int], str] = {}
        self.code: dict[tuple[str, int], list[str]] = {}
        current, section = None, ""
        for line in out.splitlines():
            m = re.match(r"^Disassembly of section (\S+):$", line)
            if m:
                section = m.group(1)
                continue
            m = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
            if m:
                current = (section, int(m.group(1), 16))
                self.names[current] = m.group(2)
                self.code[current] = []
                continue
            m = re.match(r"^\s+[0-9a-f]+:\s+(\S.*)$", line)
            if m and current is not None:
                self.code[current].append(re.sub(r"\s+", " ", m.group(1).split("//")[0].strip()))

    def find(self, pattern: str) -> tuple[str, int]:
        """The address of the one function whose name matches `pattern` (a Rust path, its hash suffix
        dropped); LookupError when none or several do."""
        found = [a for a, n in self.names.items() if re.fullmatch(pattern + r"(::h[0-9a-f]{16})?", n)]
        if len(found) != 1:
            raise LookupError(f"expected one function named {pattern}, found {[self.names[a] for a in found] or 'none'}")
        return found[0]

    def named(self, name: str) -> list[str]:
        """The instructions of the first function called exactly `name` (empty when there is none)."""
        return next((self.code[a] for a, n in self.names.items() if n == name), [])

    def scope(self, pattern: str, follow: str | None = None) -> list[tuple[str, list[str]]]:
        """The function named `pattern` and, transitively, every function it calls or tail-calls
        (`bl`/`b` to a function's first instruction) whose name matches `follow`: where a compiler put
        the inlined body of a fast path that a binding reaches through a closure (a binding's
        thread-local state, whose closure runs in `LocalKey<T>::with`). Each function stays separate,
        its instructions in order."""
        entry = self.find(pattern)
        seen, todo = [], [entry]
        while todo:
            address = todo.pop()
            if address in seen:
                continue
            seen.append(address)
            for insn in self.code[address]:
                m = re.match(r"^(?:bl|b) ([0-9a-f]+) <", insn)
                target = (address[0], int(m.group(1), 16)) if m else None
                if follow and target in self.code and re.fullmatch(follow, self.names[target]):
                    todo.append(target)
        return [(f"{self.names[a]}@{a[1]:x}", self.code[a]) for a in seen]


ACQUIRE_LOAD_64 = re.compile(r"^(ldar|ldapr) x\d+, \[")
FULL_BARRIER = re.compile(r"^dmb ish$")
STORE_32 = re.compile(r"^(str|stlr) (w\d+|wzr), \[x\d+\]$")
RELEASE_STORE_32 = re.compile(r"^stlr (w\d+|wzr), \[")
CAS_64 = re.compile(r"^(cas|casa|casl|casal) x\d+, x\d+, \[")
OUTLINE_CAS_64 = re.compile(r"^bl [0-9a-f]+ <(__aarch64_cas8_(relax|acq|rel|acq_rel))>$")


Scope = list[tuple[str, list[str]]]


LOAD_64 = re.compile(r"^(ldr|ldur|ldar|ldapr) (x\d+), \[(x\d+|sp)(?:, #(-?(?:0x)?[0-9a-f]+))?\]$")
LOAD_PAIR_64 = re.compile(r"^ldp (x\d+), (x\d+), \[(x\d+|sp)(?:, #(-?(?:0x)?[0-9a-f]+))?\]$")
COMPARE_64 = re.compile(r"^cmp (x\d+), (x\d+)$")
# Instructions that write no general register (a stored register, a compared one, a branch's).
WRITES_NONE = re.compile(r"^(st\S*|cmp|cmn|ccmp|ccmn|tst|fcmp\S*|b|b\.\S+|cbn?z|tbn?z|ret|dmb|dsb|isb|nop|prfm|hint|bti)\b")
CALL = re.compile(r"^(bl|blr) ")


def checkpoint_loads(insns: list[str]) -> list[str]:
    """The checkpoint's loads of preempt_seq in one function: a 64-bit load through the pointer read from
    the worker's `preempt_seq` field whose value is then compared with the same worker's `cached_ack`
    (the fast path of spec/SCB.md §5.1; offsets from the generated ABI). Other 64-bit loads, such as the
    acquire load of `generation` that a status check makes in the same function, are not it. A linear
    scan of the code: a register is known as "loaded from [base, #offset]" until an instruction writes
    it (a call clobbers x0-x18)."""
    origin: dict[str, tuple[str, int]] = {}  # register -> (base register, offset) it was loaded from
    value: dict[str, tuple[str, str]] = {}   # register -> (the load, the worker's base register)
    found = []

    def written(reg: str) -> None:
        origin.pop(reg, None)
        value.pop(reg, None)

    for insn in insns:
        if m := LOAD_PAIR_64.match(insn):
            first, second, base, offset = m.group(1), m.group(2), m.group(3), int(m.group(4) or "0", 0)
            for reg, at in ((first, offset), (second, offset + 8)):
                written(reg)
                origin[reg] = (base, at)
        elif m := LOAD_64.match(insn):
            dest, base, offset = m.group(2), m.group(3), int(m.group(4) or "0", 0)
            through = origin.get(base)
            written(dest)
            if offset == 0 and through is not None and through[1] == Worker.PREEMPT_SEQ.offset:
                value[dest] = (insn, through[0])
            else:
                origin[dest] = (base, offset)
        elif m := COMPARE_64.match(insn):
            for a, b in ((m.group(1), m.group(2)), (m.group(2), m.group(1))):
                if a in value and origin.get(b) == (value[a][1], Worker.CACHED_ACK.offset):
                    found.append(value[a][0])
        elif CALL.match(insn):
            for n in range(19):
                written(f"x{n}")
        elif not WRITES_NONE.match(insn):
            m = re.match(r"^\S+ ([wx])(\d+)\b", insn)
            if m:
                written(f"x{m.group(2)}")
    return found


def check_acquire_load(scope: Scope, binary: Binary) -> list[str]:
    loads = [insn for _, insns in scope for insn in checkpoint_loads(insns)]
    if not loads:
        return ["no 64-bit load through the worker's preempt_seq pointer compared with its cached_ack: "
                "where is the checkpoint's load of preempt_seq?"]
    plain = [insn for insn in loads if not ACQUIRE_LOAD_64.match(insn)]
    if plain:
        return [f"the checkpoint's load of preempt_seq is not acquire ({', '.join(plain)}; expected ldar/ldapr)"]
    return []


def check_store_then_fence(scope: Scope, binary: Binary) -> list[str]:
    stored = False
    for _, insns in scope:
        stores = [k for k, i in enumerate(insns) if STORE_32.match(i)]
        stored = stored or bool(stores)
        if stores and any(FULL_BARRIER.match(i) for i in insns[stores[0] + 1:]):
            return []
    if not stored:
        return ["no 32-bit store through a pointer: where is in_critical := 1?"]
    return ["no full barrier (dmb ish) after the store of in_critical: fence(seq_cst) is missing"]


def check_release_store(scope: Scope, binary: Binary) -> list[str]:
    if any(RELEASE_STORE_32.match(i) for _, insns in scope for i in insns):
        return []
    if not any(STORE_32.match(i) for _, insns in scope for i in insns):
        return ["no 32-bit store through a pointer: where is in_critical := 0?"]
    return ["no 32-bit store-release (stlr), only plain stores: in_critical := 0 is not a release"]


def check_acq_rel_cas(scope: Scope, binary: Binary) -> list[str]:
    problems, found = [], False
    for name, insns in scope:
        for i in insns:
            m = CAS_64.match(i)
            if m:
                if m.group(1) == "casal":
                    found = True
                else:
                    problems.append(f"a 64-bit CAS weaker than acq_rel in {name}: {i}")
            m = OUTLINE_CAS_64.match(i)
            if m:
                if m.group(2) != "acq_rel":
                    problems.append(f"a call of {m.group(1)} in {name}, a 64-bit CAS weaker than acq_rel")
                    continue
                helper = binary.named(m.group(1))
                lse = any(h.startswith("casal x") for h in helper)
                llsc = any(h.startswith("ldaxr x") for h in helper) and any(h.startswith("stlxr ") for h in helper)
                if lse and llsc:
                    found = True
                else:
                    problems.append(f"{m.group(1)} lacks casal or the ldaxr/stlxr loop: {helper}")
        if any(i.startswith("ldaxr x") for i in insns) and any(i.startswith("stlxr ") for i in insns):
            found = True
    if not found:
        problems.append("no acq_rel 64-bit CAS (casal, ldaxr/stlxr, or __aarch64_cas8_acq_rel): "
                        "the acknowledgement of last_ack_seq is not acq_rel")
    return problems


LOCAL_KEY_WITH = re.escape("std::thread::local::LocalKey<T>::with")

# What each kind of file is checked for: (the access and where its code is, the check, the entry
# function's name, the callees followed from it). A binding's callees are followed only into its own
# closures and the core's code, never into napi-rs, jni-rs or std, whose code is not the protocol's.
CHECKS = {
    "inline": [
        ("morpheus_checkpoint (C inline)", check_acquire_load, "orders_checkpoint", None),
        ("morpheus_critical_enter (C inline)", check_store_then_fence, "orders_critical_enter", None),
        ("morpheus_critical_exit (C inline)", check_release_store, "orders_critical_exit", None),
    ],
    "lib": [
        ("Worker::try_checkpoint (Rust, via morpheus_checkpoint_call)", check_acquire_load,
         r"morpheus::worker::Worker::try_checkpoint", None),
        ("morpheus_critical_enter_call (Rust)", check_store_then_fence, "morpheus_critical_enter_call", None),
        ("morpheus_critical_exit_call (Rust)", check_release_store, "morpheus_critical_exit_call", None),
        ("morpheus::slow_path::commit (the acknowledgement)", check_acq_rel_cas, r"morpheus::slow_path::commit", None),
    ],
    "jni": [
        ("JniNative.checkpointSlow (morpheus::kit::checkpoint_slow)", check_acquire_load,
         "Java_dev_morpheus_JniNative_checkpointSlow", r"morpheus::kit::checkpoint_slow"),
        ("JniNative.threadCriticalEnter (morpheus::kit::critical_enter)", check_store_then_fence,
         "Java_dev_morpheus_JniNative_threadCriticalEnter", r"morpheus::kit::critical_enter"),
        ("JniNative.criticalEnter (the worker's, in its thread-local closure)", check_store_then_fence,
         "Java_dev_morpheus_JniNative_criticalEnter", LOCAL_KEY_WITH),
        ("JniNative.threadCriticalExit (morpheus::kit::critical_exit)", check_release_store,
         "Java_dev_morpheus_JniNative_threadCriticalExit", r"morpheus::kit::critical_exit"),
        ("JniNative.criticalExit (the worker's, in its thread-local closure)", check_release_store,
         "Java_dev_morpheus_JniNative_criticalExit", LOCAL_KEY_WITH),
        ("morpheus::slow_path::commit (the acknowledgement)", check_acq_rel_cas, r"morpheus::slow_path::commit", None),
    ],
    "node": [
        ("checkpointSync (its napi callback)", check_acquire_load, r"morpheus_node::checkpoint_sync_c_callback", None),
        ("criticalEnter (its napi callback and thread-local closure)", check_store_then_fence,
         r"morpheus_node::critical_enter_c_callback", LOCAL_KEY_WITH),
        ("criticalExit (its napi callback, thread-local closure and CriticalSection's drop)", check_release_store,
         r"morpheus_node::critical_exit_c_callback",
         LOCAL_KEY_WITH + r"|core::ptr::drop_in_place<morpheus::worker::CriticalSection>"),
        ("morpheus::slow_path::commit (the acknowledgement)", check_acq_rel_cas, r"morpheus::slow_path::commit", None),
    ],
}


def check(kind: str, path: str) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Each access of `kind` with the problems found in its code (none: the documented order is there),
    and the accesses whose functions the file lacks (a problem too, and never a control's rejection)."""
    binary = Binary(path)
    results, missing = [], []
    for label, checker, pattern, follow in CHECKS[kind]:
        try:
            problems = checker(binary.scope(pattern, follow), binary)
        except LookupError as e:
            problems = [f"{path}: {e}"]
            missing.append(label)
        results.append((label, problems))
    return results, missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(CHECKS))
    parser.add_argument("path")
    parser.add_argument("--expect-reject", action="store_true")
    args = parser.parse_args()
    results, missing = check(args.kind, args.path)
    for label, problems in results:
        for p in problems:
            verdict = "rejected as expected" if args.expect_reject and label not in missing else "FAIL"
            print(f"arm64_orders: {verdict}: {label}: {p}")
    if args.expect_reject:
        if missing:
            print(f"arm64_orders: FAIL: the relaxed control {args.path} lacks the functions of {missing}: it shows nothing there")
            return 1
        kept = [label for label, problems in results if not problems]
        if kept:
            print(f"arm64_orders: FAIL: the relaxed control {args.path} was not rejected on {kept}: the check cannot fail there")
            return 1
        print(f"arm64_orders: ok: the relaxed control {os.path.basename(args.path)} ({args.kind}) is rejected on each of its {len(results)} accesses")
        return 0
    if any(problems for _, problems in results):
        return 1
    print(f"arm64_orders: ok: {os.path.basename(args.path)} ({args.kind}): the documented orders are in the arm64 code ({len(results)} accesses)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
