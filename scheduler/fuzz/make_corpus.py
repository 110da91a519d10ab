# SPDX-License-Identifier: GPL-2.0-only
"""Writes the fuzz targets' seed corpus (committed under corpus/), laid out by the generated ABI
module: valid and near-valid registration requests, request sequences for the handler, region images."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "abi", "python"))
import morpheus_abi as m  # noqa: E402

CALLING_THREAD = 0xFFFFFFFE  # src/fuzzing.rs: stands for the calling thread
PREFIX = m.RegRequest.ESCAPABLE.offset


def put(buf, field, value, base=0):
    struct.pack_into(field.struct_format, buf, base + field.offset, value)


def request(op, tid=0, slot=0, sized=True, escapable=0, priority=0, total=None):
    buf = bytearray(m.RegRequest.SIZE)
    put(buf, m.RegRequest.MAGIC, m.REG_MAGIC)
    put(buf, m.RegRequest.ABI_MAJOR, m.ABI_MAJOR)
    put(buf, m.RegRequest.ABI_MINOR, m.ABI_MINOR)
    put(buf, m.RegRequest.OP, op)
    put(buf, m.RegRequest.TID, tid)
    put(buf, m.RegRequest.SLOT, slot)
    put(buf, m.RegRequest.RUNTIME_KIND, m.RuntimeKind.RUST)
    if not sized:
        return bytes(buf[:PREFIX])
    size = total or m.RegRequest.SIZE
    put(buf, m.RegRequest.MESSAGE_SIZE, size)
    put(buf, m.RegRequest.ESCAPABLE, escapable)
    put(buf, m.RegRequest.PRIORITY, priority)
    return bytes(buf) + bytes(size - m.RegRequest.SIZE)


def region(scb_count, stride=m.Scb.SIZE, generation=1, length=None):
    header = m.RegionHeader.SIZE
    buf = bytearray(length if length is not None else header + scb_count * stride)
    if len(buf) >= header:
        put(buf, m.RegionHeader.MAGIC, m.REGION_MAGIC)
        put(buf, m.RegionHeader.ABI_MAJOR, m.ABI_MAJOR)
        put(buf, m.RegionHeader.ABI_MINOR, m.ABI_MINOR)
        put(buf, m.RegionHeader.HEADER_SIZE, header)
        put(buf, m.RegionHeader.SCB_STRIDE, stride)
        put(buf, m.RegionHeader.SCB_COUNT, scb_count)
        put(buf, m.RegionHeader.GENERATION, generation)
    return bytes(buf)


R, U = m.RegOp.REGISTER, m.RegOp.UNREGISTER
SEEDS = {
    "reg_request": {
        "v12_register": request(R, 1234, sized=False),
        "v13_register": request(R, 1234, escapable=m.RegEscapable.YES, priority=-20),
        "v13_unregister": request(U, slot=3),
        "v13_longer_zero_tail": request(R, 1, total=48),
        "v13_priority_out_of_range": request(R, 1, priority=20),
    },
    "agent_handler": {
        "register_self": request(R, CALLING_THREAD),
        "register_unregister": request(R, CALLING_THREAD) + request(U, slot=0),
        "register_twice_v12": request(R, CALLING_THREAD, sized=False) * 2,
        "register_foreign_then_bad": request(R, 1) + request(R, CALLING_THREAD, escapable=7),
        "unregister_unknown": request(U, slot=0xFFFFFFFF),
    },
    "region_parser": {
        "two_slots": region(2),
        "wide_stride": region(3, stride=256),
        "not_ready": region(1, generation=0),
        "truncated_header": region(1, length=64),
        "count_past_end": region(4, length=m.RegionHeader.SIZE + 2 * m.Scb.SIZE),
    },
}

for target, seeds in SEEDS.items():
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
print("wrote", sum(len(s) for s in SEEDS.values()), "seeds")
