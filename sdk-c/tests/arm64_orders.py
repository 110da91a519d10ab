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
tests/arm64_orders.c, the Rust core's through libmorpheus's exported entry points (which inline
sdk-rust's protocol.rs) and the function that makes the acknowledgement (morpheus::slow_path::commit).
A check is per function, without debug information: it shows that the function holds an instruction of
the documented order after the accesses it names, not which source line each instruction came from. The
functions are the small fast paths themselves (the checkpoint wrapper has one atomic load; the
critical-section functions also make the acquire load of `generation`, so their check is on the store
and the fence), and any 64-bit CAS weaker than acq_rel in the acknowledging function is an error.

    arm64_orders.py inline OBJECT [--expect-reject]   the C wrappers' object
    arm64_orders.py lib LIBRARY                        libmorpheus.so for arm64

--expect-reject inverts the verdict (the negative control: the same wrappers with relaxed orders must be
rejected, naming each missing order). Exit 0 when the verdict is the expected one, 1 otherwise.
"""
import argparse
import os
import re
import subprocess
import sys

OBJDUMP = os.environ.get("AARCH64_OBJDUMP", "aarch64-linux-gnu-objdump")


def disassemble(path: str) -> dict[str, list[str]]:
    """Function name (demangled) -> its instructions ("mnemonic operands", branch targets by symbol)."""
    try:
        out = subprocess.run([OBJDUMP, "-d", "-C", "--no-show-raw-insn", path], check=True, text=True,
                             capture_output=True).stdout
    except FileNotFoundError:
        sys.exit(f"arm64_orders: {OBJDUMP} not found (tools/setup.sh installs binutils-aarch64-linux-gnu)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"arm64_orders: {OBJDUMP} failed on {path}: {e.stderr.strip()}")
    if "file format elf64-littleaarch64" not in out:
        sys.exit(f"arm64_orders: {path} is not an arm64 ELF object")
    functions: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            current = functions.setdefault(m.group(1), [])
            continue
        m = re.match(r"^\s+[0-9a-f]+:\s+(\S.*)$", line)
        if m and current is not None:
            current.append(re.sub(r"\s+", " ", m.group(1).split("//")[0].strip()))
    return functions


def find(functions: dict[str, list[str]], pattern: str) -> list[str]:
    """The one function whose name matches `pattern` (a Rust path, its hash suffix dropped)."""
    names = [n for n in functions if re.fullmatch(pattern + r"(::h[0-9a-f]{16})?", n)]
    if len(names) != 1:
        raise LookupError(f"expected one function named {pattern}, found {names or 'none'}")
    return functions[names[0]]


ACQUIRE_LOAD_64 = re.compile(r"^(ldar|ldapr) x\d+, \[")
FULL_BARRIER = re.compile(r"^dmb ish$")
STORE_32 = re.compile(r"^(str|stlr) (w\d+|wzr), \[x\d+\]$")
RELEASE_STORE_32 = re.compile(r"^stlr (w\d+|wzr), \[")
CAS_64 = re.compile(r"^(cas|casa|casl|casal) x\d+, x\d+, \[")
OUTLINE_CAS_64 = re.compile(r"^bl [0-9a-f]+ <(__aarch64_cas8_(relax|acq|rel|acq_rel))>$")


def check_acquire_load(name: str, insns: list[str]) -> list[str]:
    if any(ACQUIRE_LOAD_64.match(i) for i in insns):
        return []
    return [f"{name}: no 64-bit load-acquire (ldar/ldapr): the checkpoint's load of preempt_seq is not acquire"]


def check_store_then_fence(name: str, insns: list[str]) -> list[str]:
    stores = [k for k, i in enumerate(insns) if STORE_32.match(i)]
    if not stores:
        return [f"{name}: no 32-bit store through a pointer: where is in_critical := 1?"]
    if any(FULL_BARRIER.match(i) for i in insns[stores[0] + 1:]):
        return []
    return [f"{name}: no full barrier (dmb ish) after the store of in_critical: fence(seq_cst) is missing"]


def check_release_store(name: str, insns: list[str]) -> list[str]:
    if any(RELEASE_STORE_32.match(i) for i in insns):
        return []
    return [f"{name}: no 32-bit store-release (stlr): in_critical := 0 is not a release"]


def check_acq_rel_cas(name: str, insns: list[str], functions: dict[str, list[str]]) -> list[str]:
    problems, found = [], False
    for i in insns:
        m = CAS_64.match(i)
        if m:
            if m.group(1) == "casal":
                found = True
            else:
                problems.append(f"{name}: a 64-bit CAS weaker than acq_rel: {i}")
        m = OUTLINE_CAS_64.match(i)
        if m:
            if m.group(2) != "acq_rel":
                problems.append(f"{name}: a call of {m.group(1)}, a 64-bit CAS weaker than acq_rel")
                continue
            helper = functions.get(m.group(1), [])
            lse = any(h.startswith("casal x") for h in helper)
            llsc = any(h.startswith("ldaxr x") for h in helper) and any(h.startswith("stlxr ") for h in helper)
            if lse and llsc:
                found = True
            else:
                problems.append(f"{m.group(1)} lacks casal or the ldaxr/stlxr loop: {helper}")
    if any(i.startswith("ldaxr x") for i in insns) and any(i.startswith("stlxr ") for i in insns):
        found = True
    if not found:
        problems.append(f"{name}: no acq_rel 64-bit CAS (casal, ldaxr/stlxr, or __aarch64_cas8_acq_rel): "
                        "the acknowledgement of last_ack_seq is not acq_rel")
    return problems


def check_inline(path: str) -> list[str]:
    f = disassemble(path)
    try:
        return (check_acquire_load("morpheus_checkpoint (C inline)", find(f, "orders_checkpoint"))
                + check_store_then_fence("morpheus_critical_enter (C inline)", find(f, "orders_critical_enter"))
                + check_release_store("morpheus_critical_exit (C inline)", find(f, "orders_critical_exit")))
    except LookupError as e:
        return [f"{path}: {e}"]


def check_lib(path: str) -> list[str]:
    f = disassemble(path)
    try:
        return (check_acquire_load("Worker::try_checkpoint (Rust, via morpheus_checkpoint_call)",
                                   find(f, r"morpheus::worker::Worker::try_checkpoint"))
                + check_store_then_fence("morpheus_critical_enter_call (Rust)", find(f, "morpheus_critical_enter_call"))
                + check_release_store("morpheus_critical_exit_call (Rust)", find(f, "morpheus_critical_exit_call"))
                + check_acq_rel_cas("morpheus::slow_path::commit (the acknowledgement)",
                                    find(f, r"morpheus::slow_path::commit"), f))
    except LookupError as e:
        return [f"{path}: {e}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["inline", "lib"])
    parser.add_argument("path")
    parser.add_argument("--expect-reject", action="store_true")
    args = parser.parse_args()
    problems = check_inline(args.path) if args.kind == "inline" else check_lib(args.path)
    for p in problems:
        print(f"arm64_orders: {'rejected as expected' if args.expect_reject else 'FAIL'}: {p}")
    if args.expect_reject:
        if len(problems) >= 3:
            print(f"arm64_orders: ok: the relaxed control {os.path.basename(args.path)} is rejected ({len(problems)} orders missing)")
            return 0
        print(f"arm64_orders: FAIL: the relaxed control {args.path} was not rejected on every order: the check cannot fail")
        return 1
    if problems:
        return 1
    print(f"arm64_orders: ok: {os.path.basename(args.path)} ({args.kind}): the documented orders are in the arm64 code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
