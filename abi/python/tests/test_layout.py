# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The generated Python ABI module against spec/abi.toml, read afresh; ctypes computes the offsets."""
import ctypes
import sys
import tomllib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import morpheus_abi as abi  # noqa: E402

SPEC = tomllib.loads((HERE.parents[2] / "spec" / "abi.toml").read_text())


def camel(name: str) -> str:
    return "".join(p.capitalize() for p in name.split("_"))


def test_version():
    assert (abi.ABI_MAJOR, abi.ABI_MINOR) == (SPEC["abi"]["major"], SPEC["abi"]["minor"])


@pytest.mark.parametrize("record", SPEC["record"], ids=lambda r: r["name"])
def test_record_layout_matches_the_spec(record):
    cls = getattr(abi, camel(record["name"]))
    struct = getattr(abi, camel(record["name"]) + "Struct")
    assert cls.SIZE == record["size"] == ctypes.sizeof(struct)
    assert cls.ALIGN == record["align"]
    assert [f.name for f in cls.FIELDS] == [f["name"] for f in record["fields"]]
    for spec_field in record["fields"]:
        field = getattr(cls, spec_field["name"].upper())
        assert (field.offset, field.size, field.type) == (spec_field["offset"], spec_field["size"], spec_field["type"])
        assert field.atomic == (spec_field["access"] == "atomic")
        ctype_field = getattr(struct, spec_field["name"])
        assert (ctype_field.offset, ctype_field.size) == (spec_field["offset"], spec_field["size"]), spec_field["name"]


@pytest.mark.parametrize("enum", SPEC["enum"], ids=lambda e: e["name"])
def test_enum_values_match_the_spec(enum):
    cls = getattr(abi, camel(enum["name"]))
    assert {m.name: m.value for m in cls} == {v["name"]: v["value"] for v in enum["values"]}


def test_constants_and_escapable_defaults_match_the_spec():
    for const in SPEC["constant"]:
        assert getattr(abi, const["name"]) == const["value"], const["name"]
    assert {k.name: v for k, v in abi.ESCAPABLE_DEFAULT.items()} == SPEC["escapable_default"]


def test_struct_formats_round_trip_through_a_buffer():
    import struct

    buf = bytearray(abi.Scb.SIZE)
    f = abi.Scb.PREEMPT_SEQ
    struct.pack_into(f.struct_format, buf, f.offset, 0x0102030405060708)
    view = abi.ScbStruct.from_buffer(buf)
    assert view.preempt_seq == 0x0102030405060708
    assert buf[:8] == bytes([8, 7, 6, 5, 4, 3, 2, 1])  # little-endian, at offset 0
