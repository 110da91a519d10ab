#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""A scheduler stand-in for the benchmark: creates a sim region and applies spec/SCB.md §5.2.

Used because `scx_morpheus --backend sim` was not runnable when the benchmark was written. Every
millisecond, for each RUNNING slot: the worker's CPU time (/proc/<pid>/task/<tid>/schedstat) since
its last yield point (the last advance of last_ack_seq) over slice_ns, and no hint within
hint_min_interval_ns -> preempt_seq += 1, last_hint_ns = now. Layout from the generated ABI module.

    sim_scheduler.py REGION_PATH [--slots 4] [--seconds 600]
"""

from __future__ import annotations

import argparse
import importlib.util
import mmap
import os
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("morpheus_abi", ROOT / "abi/python/morpheus_abi/__init__.py")
abi = importlib.util.module_from_spec(_spec)
sys.modules["morpheus_abi"] = abi  # dataclasses look their module up
_spec.loader.exec_module(abi)
H, S = abi.RegionHeader, abi.Scb


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--no-hints", action="store_true", help="publish the region but never ask (no pressure)")
    a = p.parse_args()
    size = H.SIZE + a.slots * S.SIZE
    tmp = a.path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(bytes(size))
    fd = os.open(tmp, os.O_RDWR)
    mm = mmap.mmap(fd, size)

    def put(off, field, v):
        struct.pack_into(field.struct_format, mm, off + field.offset, int(v))

    def get(off, field):
        return struct.unpack_from(field.struct_format, mm, off + field.offset)[0]

    for field, v in [(H.MAGIC, abi.REGION_MAGIC), (H.ABI_MAJOR, abi.ABI_MAJOR), (H.ABI_MINOR, abi.ABI_MINOR),
                     (H.HEADER_SIZE, H.SIZE), (H.SCB_STRIDE, S.SIZE), (H.SCB_COUNT, a.slots),
                     (H.SLICE_NS, abi.DEFAULT_SLICE_NS), (H.GRACE_NS, abi.DEFAULT_GRACE_NS),
                     (H.HINT_MIN_INTERVAL_NS, abi.DEFAULT_HINT_MIN_INTERVAL_NS),
                     (H.SCHEDULER_PID, os.getpid()), (H.BACKEND, abi.Backend.SIM)]:
        put(0, field, v)
    put(0, H.GENERATION, int(time.time()) | 1)  # published last
    os.replace(tmp, a.path)
    print("ready", flush=True)
    state = {}  # slot -> (acked seq, cpu ns at that yield point)
    end = time.monotonic() + a.seconds
    slice_ns, interval = abi.DEFAULT_SLICE_NS, abi.DEFAULT_HINT_MIN_INTERVAL_NS
    while time.monotonic() < end:
        for slot in range(a.slots):
            off = H.SIZE + slot * S.SIZE
            if get(off, S.WORKER_STATE) != abi.WorkerState.RUNNING:
                state.pop(slot, None)
                continue
            try:
                with open(f"/proc/{get(off, S.PID)}/task/{get(off, S.TID)}/schedstat") as f:
                    cpu = int(f.read().split()[0])
            except OSError:
                continue
            ack = get(off, S.LAST_ACK_SEQ)
            prev = state.get(slot)
            if prev is None or ack != prev[0]:
                state[slot] = (ack, cpu)  # a yield point
                continue
            now = time.monotonic_ns()
            last_hint = get(off, S.LAST_HINT_NS)
            if cpu - prev[1] > slice_ns and not a.no_hints:
                if last_hint == 0 or now - last_hint >= interval:
                    put(off, S.LAST_HINT_NS, now)
                    put(off, S.BUDGET_REMAINING_NS, 0)
                    put(off, S.PREEMPT_SEQ, get(off, S.PREEMPT_SEQ) + 1)
                else:
                    put(off, S.HINTS_DROPPED, get(off, S.HINTS_DROPPED) + 1)
        time.sleep(0.001)
    put(0, H.GENERATION, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
