#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Reference conformance agent: the SDK rules of spec/SCB.md, written directly on the region bytes.

It is the executable form of the spec that the harness was built against; the release gates are the
real SDK agents. It speaks the agent protocol of spec/CONFORMANCE.md on stdin/stdout and plays the
runtime_kind given by --kind (default PYTHON, so that the escapable = false default is exercised too).

Every store is one aligned ctypes store. The runtime is the only writer of the SCB's runtime line, so
the acknowledging compare-and-swap is a load and a store here; the real SDKs use atomic CAS.

MORPHEUS_CONFORMANCE_BREAK=ack_before_yield makes it acknowledge before yielding (async) — a broken
rule on purpose, used by the harness's own tests to show which cells turn red. Never set otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
from abi import m  # noqa: E402  (the generated ABI, imported by path)

_CTYPE = {"u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "i32": ctypes.c_int32}
BREAK = os.environ.get("MORPHEUS_CONFORMANCE_BREAK", "")


class SdkError(Exception):
    def __init__(self, code: "m.ErrorCode", message: str):
        super().__init__(message)
        self.code = code


class Worker:
    """What one SDK thread knows: its region, slot, cached ack and critical depth."""

    def __init__(self, kind: "m.RuntimeKind"):
        self.kind = kind
        self.mm = None
        self.attached = False
        self.attach_generation = 0
        self.slot = None  # SCB index while the worker writes to a region; None when detached
        self.registered = False
        self.cached_ack = 0
        self.depth = 0
        self.scb_base = 0
        self.yields = 0
        self.generation_lost = False

    # -- raw access -------------------------------------------------------------------------------

    def _hdr(self, f):
        return _CTYPE[f.type].from_buffer(self.mm, f.offset)

    def _scb(self, f):
        return _CTYPE[f.type].from_buffer(self.mm, self.scb_base + f.offset)

    def load(self, f):
        return self._scb(f).value

    def store(self, f, value):
        self._scb(f).value = int(value)

    # -- attach -----------------------------------------------------------------------------------

    def attach(self, path: str | None):
        if path is None:
            env = os.environ.get(m.ENV_REGION)
            if env is not None:
                path = env
            elif os.path.exists(m.PINNED_REGION_PATH):
                raise SdkError(m.ErrorCode.IO, "the reference agent cannot open pinned BPF maps")
            elif os.path.exists(m.SIM_REGION_PATH):
                path = m.SIM_REGION_PATH
            else:
                path = ""
        if path == "":
            self.attached = False
            return {"attached": False}
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as err:
            raise SdkError(m.ErrorCode.IO, f"open {path}: {err.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size < m.RegionHeader.SIZE:
                raise SdkError(m.ErrorCode.REGION_TRUNCATED,
                               f"{path} has {size} bytes, less than a region header ({m.RegionHeader.SIZE})")
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        H = m.RegionHeader

        def h(f):
            return _CTYPE[f.type].from_buffer(mm, f.offset).value

        if h(H.MAGIC) != m.REGION_MAGIC:
            raise SdkError(m.ErrorCode.BAD_MAGIC, f"{path} does not start with the region magic")
        if h(H.ABI_MAJOR) != m.ABI_MAJOR:
            raise SdkError(m.ErrorCode.ABI_MAJOR_MISMATCH,
                           f"region ABI major {h(H.ABI_MAJOR)}, SDK ABI major {m.ABI_MAJOR}")
        hs, stride, count = h(H.HEADER_SIZE), h(H.SCB_STRIDE), h(H.SCB_COUNT)
        line = m.CACHE_LINE_SIZE
        if hs < H.SIZE or stride < m.Scb.SIZE or hs % line or stride % line:
            raise SdkError(m.ErrorCode.BAD_LAYOUT, f"header_size {hs}, scb_stride {stride}")
        if size < hs + count * stride:
            raise SdkError(m.ErrorCode.REGION_TRUNCATED,
                           f"{path} has {size} bytes, the header describes {hs + count * stride}")
        known = 0
        for feat in m.Feature:
            known |= int(feat)
        if h(H.REQUIRED_FEATURES) & ~known:
            raise SdkError(m.ErrorCode.UNKNOWN_REQUIRED_FEATURE,
                           f"required features {h(H.REQUIRED_FEATURES):#x}")
        generation = h(H.GENERATION)
        if generation == 0:
            raise SdkError(m.ErrorCode.NOT_READY, "region generation is 0")
        self.mm, self.attached, self.attach_generation = mm, True, generation
        self.header_size, self.stride, self.count = hs, stride, count
        return {"attached": True}

    def generation_ok(self) -> bool:
        ok = self._hdr(m.RegionHeader.GENERATION).value == self.attach_generation
        if not ok:
            self.generation_lost = True
        return ok

    # -- registration -----------------------------------------------------------------------------

    def register(self, slot: int):
        if self.registered:
            raise SdkError(m.ErrorCode.ALREADY_REGISTERED, "this thread already holds a worker")
        tid = threading.get_native_id()
        if not self.attached:  # SCB.md §7: registration returns a detached worker
            self.registered = True
            return {"slot": None, "tid": tid, "attached": False}
        if not 0 <= slot < self.count:
            raise SdkError(m.ErrorCode.SLOT_OUT_OF_RANGE, f"slot {slot} >= scb_count {self.count}")
        if not self.generation_ok():
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted")
        self.scb_base = self.header_size + slot * self.stride
        S = m.Scb
        if self.load(S.WORKER_STATE) != m.WorkerState.INIT:
            raise SdkError(m.ErrorCode.SLOT_BUSY, f"slot {slot} is in state {self.load(S.WORKER_STATE)}")
        self.store(S.WORKER_STATE, m.WorkerState.REGISTERED)
        self.store(S.TID, tid)
        self.store(S.PID, os.getpid())
        self.store(S.SLOT_GENERATION, self.load(S.SLOT_GENERATION) + 1)
        seq = self.load(S.PREEMPT_SEQ)
        self.store(S.LAST_ACK_SEQ, seq)
        self.cached_ack = seq
        self.store(S.RUNTIME_KIND, self.kind)
        self.store(S.ESCAPABLE, m.ESCAPABLE_DEFAULT[self.kind])
        self.store(S.PRIORITY, 0)
        self.store(S.RUNTIME_MODE, m.RuntimeMode.DETERMINISTIC)
        self.store(S.IN_CRITICAL, 0)
        self.store(S.WORKER_STATE, m.WorkerState.RUNNING)
        self.slot = slot
        self.registered = True
        return {"slot": slot, "tid": tid, "attached": True}

    def _need_worker(self):
        if not self.registered:
            raise SdkError(m.ErrorCode.NOT_REGISTERED, "this thread holds no worker")

    def _detach(self):
        self.slot = None  # SCB.md §6: write nothing more to this region

    def shutdown(self):
        self._need_worker()
        S = m.Scb
        if self.slot is not None and self.generation_ok():
            self.store(S.WORKER_STATE, m.WorkerState.QUIESCING)
            self.store(S.WORKER_STATE, m.WorkerState.DEAD)
            # Direct registration: the registrar's reclaim clear (SCB.md §4), generated from abi.toml.
            m.scb_clear_for_reuse(self.mm, self.scb_base, self.stride)
            self.store(S.WORKER_STATE, m.WorkerState.INIT)
        self.slot = None
        self.registered = False
        self.depth = 0
        return {}

    # -- checkpoint -------------------------------------------------------------------------------

    def _pending(self):
        """(seq, reason it does not yield or None)."""
        if self.slot is None:
            return 0, "idle"  # detached / unregistered: the static zeroed SCB
        seq = self.load(m.Scb.PREEMPT_SEQ)
        if seq == self.cached_ack:
            return seq, "idle"
        if self.depth > 0:
            return seq, "critical"
        if not self.generation_ok():
            self._detach()
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted; re-register")
        return seq, None

    def _acknowledge(self, seq):
        S = m.Scb
        self.store(S.LAST_YIELD_REASON, m.YieldReason.PREEMPT_REQUEST)
        self.store(S.YIELD_COUNT, self.load(S.YIELD_COUNT) + 1)
        if self.load(S.LAST_ACK_SEQ) < seq:  # never decrease
            self.store(S.LAST_ACK_SEQ, seq)
        self.cached_ack = seq
        self.yields += 1

    def checkpoint_sync(self):
        seq, blocked = self._pending()
        if blocked:
            return False
        self._acknowledge(seq)
        return True  # the caller yields now

    def checkpoint_async(self, suspend):
        seq, blocked = self._pending()
        if blocked:
            return False
        if BREAK == "ack_before_yield":
            self._acknowledge(seq)
            suspend()
            return True
        suspend()  # yield to the executor first
        if not self.generation_ok():
            self._detach()
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted during the yield")
        self._acknowledge(seq)
        return True

    # -- critical sections ------------------------------------------------------------------------

    def critical_enter(self):
        self.depth += 1
        if self.depth == 1 and self.slot is not None:
            if self.generation_ok():
                self.store(m.Scb.IN_CRITICAL, 1)
            else:
                self._detach()
        return {"depth": self.depth}

    def critical_exit(self):
        if self.depth == 0:
            raise SdkError(m.ErrorCode.NOT_IN_CRITICAL, "critical exit without enter")
        self.depth -= 1
        if self.depth == 0 and self.slot is not None:
            if self.generation_ok():
                self.store(m.Scb.IN_CRITICAL, 0)
            else:
                self._detach()
        return {"depth": self.depth}

    def set_escapable(self, value: bool):
        self._need_worker()
        if self.slot is not None and self.generation_ok():
            self.store(m.Scb.ESCAPABLE, 1 if value else 0)
        return {}

    def set_priority(self, value: int):
        self._need_worker()
        if self.slot is not None and self.generation_ok():
            self.store(m.Scb.PRIORITY, value)
        return {}

    def state(self):
        return {
            "attached": self.attached, "registered": self.registered, "slot": self.slot,
            "depth": self.depth, "cached_ack": self.cached_ack, "yields": self.yields,
            "mode": m.RuntimeMode.DETERMINISTIC.name,
            "escapable": bool(self.load(m.Scb.ESCAPABLE)) if self.slot is not None else None,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", default="PYTHON", choices=[k.name for k in m.RuntimeKind])
    kind = m.RuntimeKind[parser.parse_args().kind]
    worker = Worker(kind)
    out = sys.stdout

    def send(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    send({"protocol": "morpheus-conformance", "version": 1, "sdk": "reference",
          "runtime_kind": kind.name, "abi_major": m.ABI_MAJOR, "abi_minor": m.ABI_MINOR,
          "checkpoint_modes": ["sync", "async"], "pid": os.getpid()})
    lines = iter(sys.stdin.readline, "")
    for line in lines:
        req = json.loads(line)
        rid, op = req.get("id"), req.get("op")
        if op == "exit":
            return 0

        def suspend():
            send({"id": rid, "event": "suspended"})
            resume = json.loads(next(lines))
            if resume.get("op") != "resume" or resume.get("id") != rid:
                raise SystemExit(f"reference agent: expected resume for {rid}, got {resume}")

        try:
            if op == "attach":
                result = worker.attach(req.get("path"))
            elif op == "register":
                result = worker.register(req["slot"])
            elif op == "checkpoint":
                if req["mode"] == "sync":
                    result = {"yielded": worker.checkpoint_sync()}
                else:
                    result = {"yielded": worker.checkpoint_async(suspend)}
            elif op == "checkpoint_loop":
                yields = iterations = 0
                end = time.monotonic() + req["duration_ms"] / 1000.0
                while time.monotonic() < end:
                    iterations += 1
                    if req["mode"] == "sync":
                        yields += worker.checkpoint_sync()
                    else:
                        yields += worker.checkpoint_async(lambda: None)
                result = {"iterations": iterations, "yields": yields}
            elif op == "critical_enter":
                result = worker.critical_enter()
            elif op == "critical_exit":
                result = worker.critical_exit()
            elif op == "set_escapable":
                result = worker.set_escapable(bool(req["value"]))
            elif op == "set_priority":
                result = worker.set_priority(int(req["value"]))
            elif op == "state":
                result = worker.state()
            elif op == "shutdown":
                result = worker.shutdown()
            else:
                send({"id": rid, "ok": False, "error": "UNSUPPORTED", "message": f"unknown op {op!r}"})
                continue
            send({"id": rid, "ok": True, **result})
        except SdkError as err:
            send({"id": rid, "ok": False, "error": err.code.name, "message": str(err)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
