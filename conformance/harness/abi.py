# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The generated Python ABI module (abi/python/morpheus_abi), imported by path.

Every offset, size, enum and constant the harness uses comes from there; this module only finds it
and derives lookup tables (field by name, enum of a field) from what it generates.
"""

from __future__ import annotations

import enum
import importlib.util
import os
import sys
from pathlib import Path

REPO_ROOT = Path(os.environ.get("MORPHEUS_ROOT") or Path(__file__).resolve().parents[2])
_ABI_INIT = REPO_ROOT / "abi" / "python" / "morpheus_abi" / "__init__.py"


def _load():
    if "morpheus_abi" in sys.modules:
        return sys.modules["morpheus_abi"]
    if not _ABI_INIT.is_file():
        raise SystemExit(
            f"conformance: {_ABI_INIT} is missing; generate it with `python3 abi/gen/morpheus_abigen.py`"
        )
    spec = importlib.util.spec_from_file_location("morpheus_abi", _ABI_INIT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["morpheus_abi"] = module
    spec.loader.exec_module(module)
    return module


m = _load()

HEADER_FIELDS = {f.name: f for f in m.RegionHeader.FIELDS}
# The pressure record's fields, addressable as "pressure.level" etc. (offsets within the header).
HEADER_FIELDS.update({
    f"pressure.{f.name}": m.Field(f"pressure.{f.name}", f.type, m.RegionHeader.PRESSURE.offset + f.offset, f.size,
                                  f.atomic, f.struct_format)
    for f in m.Pressure.FIELDS
})
SCB_FIELDS = {f.name: f for f in m.Scb.FIELDS}

# The reclaim clear of SCB.md §4, generated from abi.toml's `reclaim` keys: the harness's expected image and
# the reference agent use the same function as every SDK.
scb_clear_for_reuse = m.scb_clear_for_reuse


def _load_writer():
    path = REPO_ROOT / "abi" / "python" / "morpheus_test_region.py"
    if "morpheus_test_region" in sys.modules:
        return sys.modules["morpheus_test_region"]
    spec = importlib.util.spec_from_file_location("morpheus_test_region", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["morpheus_test_region"] = module
    spec.loader.exec_module(module)
    return module


# The scheduler's publication of a region, generated from abi.toml's [[publication]] order (test-only writer).
publish_region = _load_writer().publish_region

def _snake(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


# Every enum class the generator emits, keyed by its spec name (worker_state, yield_reason, ...).
ENUMS: dict[str, type[enum.IntEnum]] = {
    _snake(name): obj
    for name, obj in vars(m).items()
    if isinstance(obj, type) and issubclass(obj, enum.IntEnum) and obj.__module__ == m.__name__
}


def enum_of_field(field_name: str) -> type[enum.IntEnum] | None:
    """The enum a field holds: the one whose spec name ends the field name (last_yield_reason ->
    yield_reason, worker_state -> worker_state). None for plain numbers."""
    field_name = field_name.replace(".", "_")  # pressure.level -> pressure_level
    best = None
    for enum_name, cls in ENUMS.items():
        if field_name == enum_name or field_name.endswith("_" + enum_name):
            if best is None or len(enum_name) > len(best[0]):
                best = (enum_name, cls)
    return best[1] if best else None


def error_names() -> set[str]:
    return {e.name for e in m.ErrorCode}


def escapable_default(runtime_kind_name: str) -> bool:
    kind = m.RuntimeKind[runtime_kind_name]
    if kind not in m.ESCAPABLE_DEFAULT:
        raise KeyError(f"spec has no escapable default for runtime_kind {runtime_kind_name}")
    return m.ESCAPABLE_DEFAULT[kind]
