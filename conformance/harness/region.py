# SPDX-License-Identifier: Apache-2.0 OR MIT
"""A region file the harness builds and then drives as the scheduler would.

The harness maps the file MAP_SHARED, so the agent under test and the harness see the same bytes.
Stores to atomic fields go through an aligned ctypes integer (one machine store, never torn), which
is what lets the harness bump preempt_seq while an agent checkpoints concurrently.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
from dataclasses import dataclass, field

from abi import HEADER_FIELDS, SCB_FIELDS, enum_of_field, m, publish_region

_CTYPE = {
    "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
    "i32": ctypes.c_int32, "i64": ctypes.c_int64,
}

# A generation that is not 0 (0 means "not ready") and easy to spot in a hex dump.
DEFAULT_GENERATION = 0x4D4F5250_00000001


@dataclass
class RegionSpec:
    """What to put in a new region. Scenario files override any of these in their [region] table."""

    scb_count: int = 4
    header: dict[str, int] = field(default_factory=dict)  # header field -> value, over the defaults
    size: int | None = None  # file size in bytes; None = exactly header_size + count * stride
    create: bool = True  # False: the path is given to the agent but no file exists

    @classmethod
    def from_table(cls, table: dict) -> "RegionSpec":
        known = {"scb_count", "header", "size", "create"}
        unknown = set(table) - known
        if unknown:
            raise ValueError(f"[region] has unknown keys {sorted(unknown)}; known: {sorted(known)}")
        header = dict(table.get("header", {}))
        for name in header:
            if name not in HEADER_FIELDS:
                raise ValueError(f"[region.header] names {name!r}, which is not a region_header field")
        return cls(
            scb_count=int(table.get("scb_count", 4)),
            header=header,
            size=table.get("size"),
            create=bool(table.get("create", True)),
        )


def default_header(scb_count: int) -> dict[str, int]:
    """The header a freshly started simulation scheduler publishes."""
    return {
        "magic": m.REGION_MAGIC,
        "abi_major": m.ABI_MAJOR,
        "abi_minor": m.ABI_MINOR,
        "header_size": m.RegionHeader.SIZE,
        "scb_stride": m.Scb.SIZE,
        "scb_count": scb_count,
        "generation": DEFAULT_GENERATION,
        "required_features": 0,
        "optional_features": 0,
        "scheduler_mode": m.SchedulerMode.OBSERVER,
        "escalation_policy": m.EscalationPolicy.NONE,
        "slice_ns": m.DEFAULT_SLICE_NS,
        "grace_ns": m.DEFAULT_GRACE_NS,
        "hint_min_interval_ns": m.DEFAULT_HINT_MIN_INTERVAL_NS,
        "scheduler_pid": os.getpid(),
        "backend": m.Backend.SIM,
    }


def constants() -> dict[str, int]:
    """The generated numeric constants (ABI_MAJOR, REGION_MAGIC, ...), for scenario expressions."""
    return {k: v for k, v in vars(m).items() if k.isupper() and isinstance(v, int) and not isinstance(v, bool)}


def resolve_enum(field_name: str, value, names: dict | None = None) -> int:
    """A value a scenario stores: a number, an enum name ("RUNNING") or an expression over `names`."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        cls = enum_of_field(field_name)
        if cls is not None and value in cls.__members__:
            return int(cls[value])
        if names is not None:
            from expr import ExprError, evaluate
            try:
                return int(evaluate(value, names, field_name))
            except ExprError as err:
                raise ValueError(f"{field_name} = {value!r}: {err}") from None
        if cls is None:
            raise ValueError(f"field {field_name!r} holds a number, not an enum; got {value!r}")
        raise ValueError(f"{value!r} is not a {cls.__name__} name (one of {[e.name for e in cls]})")
    raise ValueError(f"field {field_name!r}: cannot store {value!r}")


class Region:
    """A region file plus the harness's shared mapping of it."""

    def __init__(self, path: str, spec: RegionSpec):
        self.path = path
        self.spec = spec
        self.header = default_header(spec.scb_count)
        for name, value in spec.header.items():
            # "ABI_MAJOR + 1", "generation + 1": computed from the generated constants and defaults.
            names = {**constants(), **self.header}
            self.header[name] = resolve_enum(name, value, names)
        header_size = self.header["header_size"]
        stride = self.header["scb_stride"]
        self.full_size = header_size + spec.scb_count * stride
        if spec.size is None:
            self.size = self.full_size
        else:
            self.size = resolve_enum("size", spec.size, {**constants(), **self.header})
        self._mm = None
        if not spec.create:
            return
        # The header as a scheduler publishes it (the generated writer, spec/abi.toml's order), then cut to
        # the size the scenario asks for (a truncated region keeps the bytes that fit).
        image = bytearray(max(self.size, m.RegionHeader.SIZE))
        published = {f.name for f in m.RegionHeader.FIELDS if f.struct_format}
        for name, value in self.header.items():  # the pressure record's fields: bytes the agent's seqlock owns
            if name not in published:
                struct.pack_into(HEADER_FIELDS[name].struct_format, image, HEADER_FIELDS[name].offset, value)
        values = {k: v for k, v in self.header.items() if k in published and k != "generation"}
        publish_region(image, 0, values, self.header["generation"])
        image = image[: self.size]
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, bytes(image))
            if self.size:
                self._mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    # -- geometry ---------------------------------------------------------------------------------

    def scb_offset(self, slot: int) -> int:
        if not 0 <= slot < self.spec.scb_count:
            raise ValueError(f"slot {slot} is outside the region's {self.spec.scb_count} SCBs")
        return self.header["header_size"] + slot * self.header["scb_stride"]

    def locate(self, offset: int) -> str:
        """Human name of a byte: header.generation+3, scb[1].last_ack_seq+0, ..."""
        hs, stride = self.header["header_size"], self.header["scb_stride"]
        if offset < m.RegionHeader.SIZE:
            where, rel, fields = "header", offset, m.RegionHeader.FIELDS
        elif offset < hs:
            return f"header padding +{offset}"
        else:
            slot, rel = divmod(offset - hs, stride)
            where, fields = f"scb[{slot}]", m.Scb.FIELDS
            if rel >= m.Scb.SIZE:
                return f"{where} padding +{rel - m.Scb.SIZE}"
        for f in fields:
            if f.offset <= rel < f.offset + f.size:
                return f"{where}.{f.name}+{rel - f.offset}"
        return f"{where}+{rel}"

    # -- access -----------------------------------------------------------------------------------

    def _view(self, absolute: int, f):
        if self._mm is None:
            raise RuntimeError(f"region {self.path} is not mapped (not created, or empty)")
        return _CTYPE[f.type].from_buffer(self._mm, absolute)

    def read_scb(self, slot: int, name: str) -> int:
        f = SCB_FIELDS[name]
        return self._view(self.scb_offset(slot) + f.offset, f).value

    def write_scb(self, slot: int, name: str, value) -> None:
        f = SCB_FIELDS[name]
        if not f.struct_format:
            raise ValueError(f"scb field {name!r} is reserved bytes; scenarios may not write it")
        self._view(self.scb_offset(slot) + f.offset, f).value = resolve_enum(name, value)

    def read_header(self, name: str) -> int:
        f = HEADER_FIELDS[name]
        return self._view(f.offset, f).value

    def write_header(self, name: str, value) -> None:
        f = HEADER_FIELDS[name]
        if not f.struct_format:
            raise ValueError(f"header field {name!r} is not a number; scenarios may not write it")
        value = resolve_enum(name, value)
        self._view(f.offset, f).value = value
        self.header[name] = value

    def fill(self, start: int, end: int, byte: int) -> None:
        """Raw bytes (e.g. the part of a stride this ABI version does not define)."""
        if self._mm is None:
            raise RuntimeError(f"region {self.path} is not mapped (not created, or empty)")
        self._mm[start:end] = bytes([byte]) * (end - start)

    def mapping(self):
        """The harness's shared mapping (read by the store tracer while the agent is stopped)."""
        if self._mm is None:
            raise RuntimeError(f"region {self.path} is not mapped (not created, or empty)")
        return self._mm

    def snapshot(self) -> bytes:
        if self._mm is None:
            return b""
        return bytes(self._mm[:])

    def scb_fields(self, slot: int, image: bytes | None = None) -> dict[str, int]:
        image = self.snapshot() if image is None else image
        base = self.scb_offset(slot)
        return {
            f.name: struct.unpack_from(f.struct_format, image, base + f.offset)[0]
            for f in m.Scb.FIELDS
            if f.struct_format
        }

    def close(self) -> None:
        if self._mm is not None:
            # ctypes views may still point into the map; drop the reference and let GC unmap it.
            try:
                self._mm.close()
            except BufferError:
                pass
            self._mm = None


def first_difference(expected: bytes, actual: bytes) -> int | None:
    if expected == actual:
        return None
    for i, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            return i
    return min(len(expected), len(actual))
