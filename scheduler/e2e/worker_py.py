# SPDX-License-Identifier: GPL-2.0-only
"""The Python SDK's test worker for the real-kernel test (e2e/guest.sh): one role per process (the GIL
would make threads of one process take turns), registered through the agent by the `morpheus` wheel,
printing the same report line as worker.rs and worker_c.c.

    python3 worker_py.py [--ready FILE] (--seconds S | --until FILE) ROLE      (cooperative, spin, critical, unescapable)

--ready FILE: once registered, the worker writes `pid=P tid=T` (its process and thread) to FILE.
--until FILE: it runs until FILE exists, or its directory is gone (the test that owned it has ended
without making it), instead of for a time: the test decides when (as worker.rs).

The SCB counters are read from the region the SDK attached to: the SDK's own mapping of the agent's
memfd (found in /proc/self/maps), a pinned BPF map opened with BPF_OBJ_GET, or a file, mapped
read-only; offsets come from the generated morpheus_abi module.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import struct
import sys
import threading
import time

import morpheus
import morpheus_abi as abi

BPF_OBJ_GET = 7
SYS_BPF = 321  # x86_64


def map_region(region):
    """The region's bytes, read-only: a buffer over the memory the SDK reads and writes."""
    path = os.fspath(region.path)
    if region.backing == "AGENT_FD":
        # The agent handed the SDK a descriptor (SCB.md §10: a memfd under the sim backend, the BPF map
        # under the kernel's): find the SDK's own mapping of it, the readable one that starts with the
        # region magic and carries the generation the worker attached to.
        size = len(region)
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                name = parts[5] if len(parts) >= 6 else ""
                if not parts[1].startswith("r") or int(parts[2], 16) != 0 or name.startswith("["):
                    continue
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if hi - lo < size:
                    continue
                view = (ctypes.c_char * size).from_address(lo)
                header = abi.RegionHeader
                magic = struct.unpack_from(header.MAGIC.struct_format, view, header.MAGIC.offset)[0]
                generation = struct.unpack_from(header.GENERATION.struct_format, view, header.GENERATION.offset)[0]
                if magic == abi.REGION_MAGIC and generation == region.attached_generation:
                    return view
        raise RuntimeError(f"no mapping of the region ({size} bytes, generation {region.attached_generation:#x}) in /proc/self/maps")
    if region.backing == "PINNED_MAP":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        name = ctypes.create_string_buffer(os.fsencode(path))
        # union bpf_attr for BPF_OBJ_GET: pathname (u64), bpf_fd, file_flags, path_fd; rest zero.
        attr = ctypes.create_string_buffer(struct.pack("<QIIi", ctypes.addressof(name), 0, 0, 0), 32)
        fd = libc.syscall(SYS_BPF, BPF_OBJ_GET, attr, 32)
        if fd < 0:
            raise OSError(ctypes.get_errno(), f"BPF_OBJ_GET {path}")
    else:
        fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, len(region), mmap.MAP_SHARED, mmap.PROT_READ)
    finally:
        os.close(fd)


class ScbView:
    def __init__(self, mapping, slot: int):
        header = abi.RegionHeader
        size = struct.unpack_from(header.HEADER_SIZE.struct_format, mapping, header.HEADER_SIZE.offset)[0]
        stride = struct.unpack_from(header.SCB_STRIDE.struct_format, mapping, header.SCB_STRIDE.offset)[0]
        self.mapping, self.base = mapping, size + slot * stride

    def __getitem__(self, field) -> int:
        return struct.unpack_from(field.struct_format, self.mapping, self.base + field.offset)[0]


def burn(iterations: int) -> int:
    x = 0x9E3779B9
    for i in range(iterations):
        x = (x * 31 + i) & 0xFFFFFFFF
    return x


def main() -> int:
    parser = argparse.ArgumentParser()
    span = parser.add_mutually_exclusive_group(required=True)
    span.add_argument("--seconds", type=float)
    span.add_argument("--until")
    parser.add_argument("--ready")
    parser.add_argument("role", choices=["cooperative", "spin", "critical", "unescapable"])
    args = parser.parse_args()
    # The critical role opens its section before it registers: the depth is the thread's, so the SCB
    # says in_critical before the worker is RUNNING (as the Rust SDK writes it at registration). Opened
    # after, the interpreter's few milliseconds under TCG between the two were enough to be escalated.
    section = morpheus.critical() if args.role == "critical" else None
    if section:
        section.__enter__()
    worker = morpheus.init_worker(escapable=args.role != "unescapable")
    if not worker.attached or worker.slot is None:
        print(f"role={args.role} sdk=python error=registered but detached ({worker.detach_reason})")
        return 1
    scb = ScbView(map_region(worker.region), worker.slot)
    if args.ready:
        # Whole or not at all: written aside, then renamed.
        with open(f"{args.ready}.tmp", "w") as ready:
            ready.write(f"pid={os.getpid()} tid={threading.get_native_id()}\n")
        os.rename(f"{args.ready}.tmp", args.ready)
    seq0 = scb[abi.Scb.PREEMPT_SEQ]
    if args.until:
        until_dir = os.path.dirname(args.until) or "."

        def running() -> bool:
            return not os.path.exists(args.until) and os.path.isdir(until_dir)
    else:
        deadline = time.monotonic() + args.seconds

        def running() -> bool:
            return time.monotonic() < deadline
    yields = 0
    while running():
        burn(2000)
        if args.role == "cooperative" and morpheus.checkpoint():
            yields += 1
            os.sched_yield()
    # The report is taken before the section closes: once it is closed the worker, still ignoring its
    # requests, may rightly be escalated, and that must not count against the section (as the Rust
    # and C workers do).
    report = (f"role={args.role} sdk=python slot={worker.slot} preempt_seq_start={seq0} "
              f"preempt_seq={scb[abi.Scb.PREEMPT_SEQ]} last_ack_seq={scb[abi.Scb.LAST_ACK_SEQ]} "
              f"escalations={scb[abi.Scb.ESCALATIONS]} yields={yields}")
    if section:
        section.__exit__(None, None, None)
    print(report, flush=True)
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
