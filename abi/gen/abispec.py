# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Load, validate and compare the Morpheus ABI spec (spec/abi.toml).

Every rule that makes a spec acceptable lives here, so the generator, its tests and the
compatibility gate agree on what a valid ABI is. Errors name the record and field at fault.
"""
from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

PRIMITIVES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i32": 4, "i64": 8}
# A pointer field (`*const T` / `*mut T`, T a primitive or `opaque`, an untyped handle) has the size and
# alignment of a pointer on the 64-bit targets the spec states layouts for. Pointers never cross a process:
# only a `process` record (one process's memory, versioned by its own layout_version) may hold one.
POINTER_SIZE = 8
DIRECTIONS = {"scheduler_to_runtime", "runtime_to_scheduler", "header", "message", "process"}
ACCESS = {"atomic", "plain"}
RECLAIM = {"zero", "keep"}
# How a publication step stores its field (spec/abi.toml [[publication]]): "plain" (before the publication nobody
# reads the record), or an atomic store with the named memory order. The last step is the release readers pair with.
STORES = {"plain", "relaxed", "release"}
STEP_OPS = {"store", "add"}
CONSTANT_TYPES = {"u32", "u64", "i32", "str"}
CACHE_LINE = 64
_BYTES = re.compile(r"u8\[(\d+)\]")
_POINTER = re.compile(r"\*(const|mut) ([a-z0-9_]+)")
_IDENT = re.compile(r"[a-z_][a-z0-9_]*")
_UPPER_IDENT = re.compile(r"[A-Z][A-Z0-9_]*")
# Names the generated code gives every record (Python attributes, Java constants such as SIZE, Node keys),
# so no field may take them.
RECORD_MEMBER_NAMES = {"size", "align", "fields", "name", "layout"}


class SpecError(Exception):
    """A spec (or a change to it) that the ABI rules refuse."""


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    offset: int
    size: int
    align: int
    direction: str
    writer: str
    access: str
    ordering: str
    doc: str
    reclaim: str = "zero"

    @property
    def reserved(self) -> bool:
        return self.name.startswith("_")

    @property
    def array_len(self) -> int | None:
        m = _BYTES.fullmatch(self.type)
        return int(m.group(1)) if m else None

    @property
    def end(self) -> int:
        return self.offset + self.size

    @property
    def pointer(self) -> tuple[bool, str] | None:
        """(mutable, pointee) of a pointer field; pointee is a primitive or "opaque"."""
        m = _POINTER.fullmatch(self.type)
        return (m.group(1) == "mut", m.group(2)) if m else None


@dataclass(frozen=True)
class Record:
    name: str
    size: int
    align: int
    doc: str
    fields: tuple[Field, ...]
    lines: tuple[str, ...] = ()
    # A `process` record (memory of one process, e.g. read by code compiled into a program) is versioned on
    # its own: its layout_version and the shared library soname that carries it, locked per version in
    # spec/locks/<name>-layout-<version>.lock.json. 0 / "" for the records of the versioned region ABI.
    layout_version: int = 0
    soname: str = ""

    @property
    def natural_align(self) -> int:
        return max(f.align for f in self.fields)


@dataclass(frozen=True)
class EnumValue:
    name: str
    value: int
    doc: str


@dataclass(frozen=True)
class Enum:
    name: str
    type: str
    flags: bool
    prefix: str
    doc: str
    values: tuple[EnumValue, ...]


@dataclass(frozen=True)
class Constant:
    name: str
    type: str
    value: int | str
    stable: bool
    doc: str


@dataclass(frozen=True)
class PublicationStep:
    """One store of a publication: `field` ("*" = every other writable field of the record, from the caller's
    values, in offset order), how it is stored, and what: `value` (a constant), or the caller's argument."""

    field: str
    store: str
    op: str
    value: int | None


@dataclass(frozen=True)
class Publication:
    """The order in which a party stores a record's fields so that a reader whose acquire load sees the last
    (release) step also sees every earlier one (SCB.md §2, §5.2)."""

    name: str
    record: str
    writer: str
    doc: str
    steps: tuple[PublicationStep, ...]


@dataclass
class Spec:
    name: str
    major: int
    minor: int
    constants: list[Constant] = field(default_factory=list)
    enums: list[Enum] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    escapable_default: dict[str, bool] = field(default_factory=dict)
    publications: list[Publication] = field(default_factory=list)

    def record(self, name: str) -> Record:
        return next(r for r in self.records if r.name == name)

    def enum(self, name: str) -> Enum:
        return next(e for e in self.enums if e.name == name)


def _need(table: dict, key: str, where: str, kind: type | tuple[type, ...]):
    if key not in table:
        raise SpecError(f"{where}: missing key '{key}'")
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SpecError(f"{where}: '{key}' must be {getattr(kind, '__name__', kind)}, found {value!r}")
    return value


def _unique(names: list[str], where: str, what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise SpecError(f"{where}: duplicate {what} '{n}'")
        seen.add(n)


def load(path: str | Path) -> Spec:
    """Parse and validate a spec file; raise SpecError naming the first problem found."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    return parse(raw)


def parse(raw: dict) -> Spec:
    abi = raw.get("abi")
    if not isinstance(abi, dict):
        raise SpecError("spec: missing [abi] table")
    spec = Spec(
        name=_need(abi, "name", "[abi]", str),
        major=_need(abi, "major", "[abi]", int),
        minor=_need(abi, "minor", "[abi]", int),
    )
    if spec.major < 1 or spec.minor < 0:
        raise SpecError(f"[abi]: version {spec.major}.{spec.minor} is not valid (major >= 1, minor >= 0)")

    for c in raw.get("constant", []):
        where = f"constant {c.get('name', '?')}"
        name = _need(c, "name", where, str)
        if not _UPPER_IDENT.fullmatch(name):
            raise SpecError(f"{where}: name must be UPPER_SNAKE_CASE")
        ctype = _need(c, "type", where, str)
        if ctype not in CONSTANT_TYPES:
            raise SpecError(f"{where}: unknown type '{ctype}' (expected one of {sorted(CONSTANT_TYPES)})")
        value = _need(c, "value", where, str if ctype == "str" else int)
        lo, hi = (-(1 << 31), 1 << 31) if ctype == "i32" else (0, 1 << (8 * PRIMITIVES.get(ctype, 0)))
        if ctype != "str" and not lo <= value < hi:
            raise SpecError(f"{where}: value {value} does not fit {ctype}")
        spec.constants.append(Constant(name, ctype, value, bool(c.get("stable", False)), _need(c, "doc", where, str)))
    _unique([c.name for c in spec.constants], "constants", "constant")

    for e in raw.get("enum", []):
        where = f"enum {e.get('name', '?')}"
        name = _need(e, "name", where, str)
        if not _IDENT.fullmatch(name):
            raise SpecError(f"{where}: name must be lower_snake_case")
        etype = e.get("type", "u32")
        if etype not in ("u32", "u64"):
            raise SpecError(f"{where}: unknown type '{etype}' (expected u32 or u64)")
        flags = bool(e.get("flags", False))
        values = []
        for v in _need(e, "values", where, list):
            vname = _need(v, "name", where, str)
            vwhere = f"{where}.{vname}"
            if not _UPPER_IDENT.fullmatch(vname):
                raise SpecError(f"{vwhere}: name must be UPPER_SNAKE_CASE")
            value = _need(v, "value", vwhere, int)
            if not 0 <= value < 1 << (8 * PRIMITIVES[etype]):
                raise SpecError(f"{vwhere}: value {value} does not fit {etype}")
            if flags and (value == 0 or value & (value - 1)):
                raise SpecError(f"{vwhere}: flag value {value:#x} must be a single bit")
            values.append(EnumValue(vname, value, _need(v, "doc", vwhere, str)))
        _unique([v.name for v in values], where, "enum value name")
        by_value: dict[int, str] = {}
        for v in values:
            if v.value in by_value:
                raise SpecError(f"{where}: duplicate enum value {v.value} ({by_value[v.value]} and {v.name})")
            by_value[v.value] = v.name
        prefix = e.get("prefix", f"MORPHEUS_{name.upper()}")
        spec.enums.append(Enum(name, etype, flags, prefix, _need(e, "doc", where, str), tuple(values)))
    _unique([e.name for e in spec.enums], "enums", "enum")

    kinds = {v.name for v in spec.enum("runtime_kind").values} if any(e.name == "runtime_kind" for e in spec.enums) else set()
    for lang, value in raw.get("escapable_default", {}).items():
        if lang not in kinds:
            raise SpecError(f"escapable_default: '{lang}' is not a runtime_kind")
        if not isinstance(value, bool):
            raise SpecError(f"escapable_default.{lang}: must be true or false, found {value!r}")
        spec.escapable_default[lang] = value

    for r in raw.get("record", []):
        spec.records.append(_parse_record(r, spec))
    _unique([r.name for r in spec.records], "records", "record")
    for p in raw.get("publication", []):
        spec.publications.append(_parse_publication(p, spec))
    _unique([p.name for p in spec.publications], "publications", "publication")
    return spec


def _parse_publication(p: dict, spec: Spec) -> Publication:
    where = f"publication {p.get('name', '?')}"
    name = _need(p, "name", where, str)
    if not _IDENT.fullmatch(name):
        raise SpecError(f"{where}: name must be lower_snake_case")
    rname = _need(p, "record", where, str)
    rec = next((r for r in spec.records if r.name == rname), None)
    if rec is None or rec.layout_version:
        raise SpecError(f"{where}: record '{rname}' is not a shared record of this spec")
    fields = {f.name: f for f in rec.fields}
    steps = []
    for i, st in enumerate(_need(p, "steps", where, list)):
        swhere = f"{where} step {i + 1}"
        fname = _need(st, "field", swhere, str)
        store = _need(st, "store", swhere, str)
        op = st.get("op", "store")
        value = st.get("value")
        if store not in STORES:
            raise SpecError(f"{swhere}: unknown store '{store}' (expected one of {sorted(STORES)})")
        if op not in STEP_OPS:
            raise SpecError(f"{swhere}: unknown op '{op}' (expected one of {sorted(STEP_OPS)})")
        if fname == "*":
            if i != 0 or op != "store" or value is not None or store == "release":
                raise SpecError(f"{swhere}: '*' (the caller's values for every other field) must be the first step, "
                                "a plain or relaxed store without a value")
        else:
            f = fields.get(fname)
            if f is None or f.reserved or f.type not in PRIMITIVES:
                raise SpecError(f"{swhere}: '{fname}' is not a writable integer field of {rname}")
            if store != "plain" and f.access != "atomic":
                raise SpecError(f"{swhere}: a {store} store needs an atomic field; {rname}.{fname} is {f.access}")
            if op == "add" and (store == "plain" or not isinstance(value, int)):
                raise SpecError(f"{swhere}: an add is an atomic read-modify-write of a constant value")
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or
                                      not 0 <= value < 1 << (8 * f.size)):
                raise SpecError(f"{swhere}: value {value!r} does not fit {f.type}")
        steps.append(PublicationStep(fname, store, op, value))
    if not steps:
        raise SpecError(f"{where}: no steps")
    _unique([s.field for s in steps], where, "step field")
    last = steps[-1]
    if last.field == "*" or last.store != "release":
        raise SpecError(f"{where}: the last step must be the release store readers pair with; it is "
                        f"{last.field} ({last.store})")
    if any(s.store == "release" for s in steps[:-1]):
        raise SpecError(f"{where}: only the last step is a release: a reader that sees an earlier release need not "
                        "see the fields stored after it")
    if "release" not in fields[last.field].ordering:
        raise SpecError(f"{where}: {rname}.{last.field} publishes the record, but its ordering does not say release: "
                        f"{fields[last.field].ordering!r}")
    return Publication(name, rname, _need(p, "writer", where, str), _need(p, "doc", where, str), tuple(steps))


def publication_stores(spec: Spec, pub: Publication) -> list[tuple[Field, PublicationStep]]:
    """Each store of a publication in order, the '*' step expanded to every writable integer field of the record
    that no other step names, in offset order."""
    rec = spec.record(pub.record)
    named = {s.field for s in pub.steps}
    out = []
    for s in pub.steps:
        if s.field == "*":
            out += [(f, s) for f in rec.fields if not f.reserved and f.type in PRIMITIVES and f.name not in named]
        else:
            out.append((next(f for f in rec.fields if f.name == s.field), s))
    return out


def _type_layout(ftype: str, spec: Spec, where: str) -> tuple[int, int]:
    """(size, natural alignment) of a field type."""
    if ftype in PRIMITIVES:
        return PRIMITIVES[ftype], PRIMITIVES[ftype]
    m = _POINTER.fullmatch(ftype)
    if m:
        if m.group(2) not in PRIMITIVES and m.group(2) != "opaque":
            raise SpecError(f"{where}: pointer to unknown type '{m.group(2)}' (expected a primitive or opaque)")
        return POINTER_SIZE, POINTER_SIZE
    m = _BYTES.fullmatch(ftype)
    if m:
        if int(m.group(1)) == 0:
            raise SpecError(f"{where}: empty byte array")
        return int(m.group(1)), 1
    for rec in spec.records:
        if rec.name == ftype:
            return rec.size, rec.align
    raise SpecError(f"{where}: unknown type '{ftype}' (expected one of {sorted(PRIMITIVES)}, u8[N], *const T, *mut T, or a record defined earlier)")


def _parse_record(r: dict, spec: Spec) -> Record:
    where = f"record {r.get('name', '?')}"
    name = _need(r, "name", where, str)
    if not _IDENT.fullmatch(name):
        raise SpecError(f"{where}: name must be lower_snake_case")
    size = _need(r, "size", where, int)
    align = _need(r, "align", where, int)
    if align <= 0 or align & (align - 1):
        raise SpecError(f"{where}: align {align} is not a power of two")
    if size <= 0 or size % align:
        raise SpecError(f"{where}: size {size} is not a positive multiple of align {align}")
    fields = []
    for f in _need(r, "fields", where, list):
        fname = _need(f, "name", where, str)
        fwhere = f"field {name}.{fname}"
        if not _IDENT.fullmatch(fname):
            raise SpecError(f"{fwhere}: name must be lower_snake_case")
        if fname in RECORD_MEMBER_NAMES:
            raise SpecError(f"{fwhere}: the name is taken by the generated code of every record "
                            f"({', '.join(sorted(RECORD_MEMBER_NAMES))}); choose another")
        ftype = _need(f, "type", fwhere, str)
        tsize, talign = _type_layout(ftype, spec, fwhere)
        offset = _need(f, "offset", fwhere, int)
        declared = _need(f, "size", fwhere, int)
        if declared != tsize:
            raise SpecError(f"{fwhere}: declared size {declared} disagrees with type {ftype} ({tsize} bytes)")
        if offset < 0 or offset % talign:
            raise SpecError(f"{fwhere}: offset {offset} is not naturally aligned for {ftype} (alignment {talign})")
        direction = _need(f, "direction", fwhere, str)
        if direction not in DIRECTIONS:
            raise SpecError(f"{fwhere}: unknown direction '{direction}' (expected one of {sorted(DIRECTIONS)})")
        access = _need(f, "access", fwhere, str)
        if access not in ACCESS:
            raise SpecError(f"{fwhere}: unknown access '{access}' (expected atomic or plain)")
        if access == "atomic":
            if ftype not in PRIMITIVES:
                raise SpecError(f"{fwhere}: only a primitive integer can be atomic, not {ftype}")
            if offset // CACHE_LINE != (offset + tsize - 1) // CACHE_LINE:
                raise SpecError(f"{fwhere}: atomic field straddles a cache line (bytes {offset}-{offset + tsize - 1})")
        reclaim = f.get("reclaim", "zero")
        if reclaim not in RECLAIM:
            raise SpecError(f"{fwhere}: unknown reclaim '{reclaim}' (expected one of {sorted(RECLAIM)})")
        fld = Field(fname, ftype, offset, tsize, talign, direction, _need(f, "writer", fwhere, str), access,
                    _need(f, "ordering", fwhere, str), _need(f, "doc", fwhere, str), reclaim)
        if fld.reserved and fld.writer != "nobody":
            raise SpecError(f"{fwhere}: reserved fields (leading '_') must have writer = \"nobody\"")
        if fld.pointer and direction != "process":
            raise SpecError(f"{fwhere}: a pointer means nothing outside its process; only direction \"process\" may hold {ftype}")
        fields.append(fld)
    if not fields:
        raise SpecError(f"{where}: has no fields")
    _unique([f.name for f in fields], where, "field")

    # The fields must tile the record exactly: no overlap, no implicit padding, nothing past the end.
    pos = 0
    for f in sorted(fields, key=lambda f: f.offset):
        if f.offset < pos:
            prev = next(p for p in fields if p.offset < f.offset + f.size and f.offset < p.end and p is not f)
            raise SpecError(f"field {name}.{f.name}: overlaps {name}.{prev.name} (bytes {f.offset}-{min(f.end, prev.end) - 1})")
        if f.offset > pos:
            raise SpecError(f"field {name}.{f.name}: implicit padding at bytes {pos}-{f.offset - 1} before it; declare a _reserved field")
        pos = f.end
    if pos > size:
        raise SpecError(f"{where}: fields end at byte {pos}, past the record size {size}")
    if pos < size:
        raise SpecError(f"{where}: implicit tail padding at bytes {pos}-{size - 1}; declare a _reserved field")
    if [f.offset for f in fields] != sorted(f.offset for f in fields):
        raise SpecError(f"{where}: fields must be listed in offset order")
    for f in fields:
        if f.type not in PRIMITIVES and f.array_len is None and f.pointer is None and f.offset % spec.record(f.type).align:
            raise SpecError(f"field {name}.{f.name}: offset {f.offset} is not aligned for record {f.type}")

    natural = max(f.align for f in fields)
    if align < natural:
        raise SpecError(f"{where}: align {align} is less than its fields need ({natural})")

    lines = tuple(r.get("lines", ()))
    if lines:
        if len(lines) * CACHE_LINE != size:
            raise SpecError(f"{where}: 'lines' names {len(lines)} cache lines but the record has {size // CACHE_LINE}")
        for f in fields:
            if f.reserved:
                continue
            for line in range(f.offset // CACHE_LINE, (f.end - 1) // CACHE_LINE + 1):
                if f.direction != lines[line]:
                    raise SpecError(f"field {name}.{f.name}: direction {f.direction} is not allowed in cache line {line} ({lines[line]} only)")
    process = [f.direction == "process" for f in fields]
    if any(process) and not all(process):
        raise SpecError(f"{where}: mixes direction \"process\" with shared directions; a record lives in one process or is shared")
    layout_version, soname = r.get("layout_version", 0), r.get("soname", "")
    if all(process):
        layout_version = _need(r, "layout_version", where, int)
        soname = _need(r, "soname", where, str)
        if layout_version < 1 or not soname:
            raise SpecError(f"{where}: layout_version must be >= 1 and soname non-empty")
    elif layout_version or soname:
        raise SpecError(f"{where}: only a \"process\" record has a layout_version and soname (the region ABI is versioned by [abi])")
    return Record(name, size, align, _need(r, "doc", where, str), tuple(fields), lines, layout_version, soname)


def reclaim_stores(record: Record) -> list[tuple[int, int]]:
    """(offset, width) of the zero stores of the reclaim clear (SCB.md §4): every byte of the record
    except the fields marked reclaim = "keep", as naturally aligned stores of 8, 4, 2 or 1 bytes."""
    stores = []
    for f in record.fields:
        if f.reclaim == "keep":
            continue
        pos = f.offset
        while pos < f.end:
            width = next(w for w in (8, 4, 2, 1) if pos % w == 0 and pos + w <= f.end)
            stores.append((pos, width))
            pos += width
    return stores


# --- Compatibility gate -----------------------------------------------------------------------------------

def lock_of(spec: Spec) -> dict:
    """The released shape of an ABI version: what later versions of the same major must keep."""
    return {
        "abi": {"name": spec.name, "major": spec.major, "minor": spec.minor},
        "constants": {c.name: c.value for c in spec.constants if c.stable},
        "enums": {e.name: {v.name: v.value for v in e.values} for e in spec.enums},
        "records": {
            r.name: {
                "size": r.size,
                "align": r.align,
                "fields": [{"name": f.name, "type": f.type, "offset": f.offset, "size": f.size} for f in r.fields],
            }
            for r in spec.records
            if not r.layout_version
        },
    }


def record_lock_of(rec: Record) -> dict:
    """The released shape of one layout_version of a process record: changed only by a new version."""
    return {
        "record": rec.name,
        "layout_version": rec.layout_version,
        "soname": rec.soname,
        "size": rec.size,
        "align": rec.align,
        "fields": [{"name": f.name, "type": f.type, "offset": f.offset, "size": f.size} for f in rec.fields],
    }


def record_lock_path(lock_dir: Path, name: str, layout_version: int) -> Path:
    return lock_dir / f"{name}-layout-{layout_version}.lock.json"


def record_locks(lock_dir: Path) -> dict[str, dict[int, dict]]:
    """Every released layout of every process record: {record: {layout_version: lock}}."""
    out: dict[str, dict[int, dict]] = {}
    for p in sorted(lock_dir.glob("*-layout-*.lock.json")):
        lock = json.loads(p.read_text())
        out.setdefault(lock["record"], {})[lock["layout_version"]] = lock
    return out


def check_record_layouts(spec: Spec, locks: dict[str, dict[int, dict]]) -> None:
    """Refuse, naming the field, a released layout of a process record changed in place, a process record
    removed, a new layout version below a released one, or a new layout reusing a released soname (a program
    built against the old layout would load the library and misread the struct)."""
    for name, versions in locks.items():
        rec = next((r for r in spec.records if r.name == name), None)
        if rec is None:
            raise SpecError(f"record {name}: layout {max(versions)} released ({versions[max(versions)]['soname']}), now removed")
        old = versions.get(rec.layout_version)
        if old is None:
            newest = max(versions)
            if rec.layout_version < newest:
                raise SpecError(f"record {name}: layout_version {rec.layout_version} is older than the released layout {newest}")
            for v, lock in versions.items():
                if lock["soname"] == rec.soname:
                    raise SpecError(f"record {name}: layout {rec.layout_version} reuses soname {rec.soname} of released layout {v}; "
                                    "a new layout needs a new soname")
            continue
        where = f"layout {rec.layout_version} of record {name} ({old['soname']})"
        fix = "a released layout is never changed in place: bump layout_version and give it a new soname"
        if rec.soname != old["soname"]:
            raise SpecError(f"record {name}: soname changed from {old['soname']} to {rec.soname} under released layout "
                            f"{rec.layout_version}; {fix}")
        now = {f.name: f for f in rec.fields}
        for of in old["fields"]:
            f = now.get(of["name"])
            if f is None:
                raise SpecError(f"field {name}.{of['name']}: in released {where}, now removed; {fix}")
            if (f.offset, f.size, f.type) != (of["offset"], of["size"], of["type"]):
                raise SpecError(f"field {name}.{of['name']}: {where} has it at offset {of['offset']} ({of['size']} bytes, "
                                f"{of['type']}), now at offset {f.offset} ({f.size} bytes, {f.type}); {fix}")
        released = {of["name"] for of in old["fields"]}
        for f in rec.fields:
            if f.name not in released:
                raise SpecError(f"field {name}.{f.name}: not in released {where}; {fix}")
        if (rec.size, rec.align) != (old["size"], old["align"]):
            raise SpecError(f"record {name}: {where} is {old['size']} bytes, {old['align']}-aligned, now {rec.size} "
                            f"bytes, {rec.align}-aligned; {fix}")


def lock_path(lock_dir: Path, major: int, minor: int) -> Path:
    return lock_dir / f"abi-{major}.{minor}.lock.json"


def latest_lock(lock_dir: Path, major: int) -> dict | None:
    """The newest released lock of the given major version, if any."""
    best = None
    for p in lock_dir.glob(f"abi-{major}.*.lock.json"):
        lock = json.loads(p.read_text())
        if best is None or lock["abi"]["minor"] > best["abi"]["minor"]:
            best = lock
    return best


def check_compatible(spec: Spec, lock: dict) -> None:
    """Refuse, naming the field, any change that breaks readers of the released version `lock`."""
    old_v = f"{lock['abi']['major']}.{lock['abi']['minor']}"
    if spec.major != lock["abi"]["major"]:
        return  # a new major version may change anything
    if spec.minor < lock["abi"]["minor"]:
        raise SpecError(f"[abi]: minor {spec.minor} is older than the released {old_v}")
    grew = False
    for name, value in lock["constants"].items():
        now = next((c for c in spec.constants if c.name == name), None)
        if now is None or now.value != value:
            raise SpecError(f"constant {name}: stable since {old_v} with value {value!r}, now {now.value if now else 'removed'!r}")
    for ename, values in lock["enums"].items():
        now = next((e for e in spec.enums if e.name == ename), None)
        if now is None:
            raise SpecError(f"enum {ename}: released in {old_v}, now removed")
        current = {v.name: v.value for v in now.values}
        for vname, value in values.items():
            if vname not in current:
                raise SpecError(f"enum {ename}.{vname}: released in {old_v}, now removed")
            if current[vname] != value:
                raise SpecError(f"enum {ename}.{vname}: value changed from {value} to {current[vname]}")
        released_values = {v: n for n, v in values.items()}
        for vname, value in current.items():
            if vname not in values:
                if value in released_values:
                    raise SpecError(f"enum {ename}.{vname}: reuses value {value} of {released_values[value]} released in {old_v}")
                grew = True
    for e in spec.enums:
        if e.name not in lock["enums"]:
            grew = True
    for rname, old in lock["records"].items():
        try:
            rec = spec.record(rname)
        except StopIteration:
            raise SpecError(f"record {rname}: released in {old_v}, now removed") from None
        if rec.size < old["size"]:
            raise SpecError(f"record {rname}: shrinks from {old['size']} to {rec.size} bytes")
        if rec.align != old["align"]:
            raise SpecError(f"record {rname}: alignment changed from {old['align']} to {rec.align}")
        now = {f.name: f for f in rec.fields}
        reserved_ranges = []
        for of in old["fields"]:
            if of["name"].startswith("_"):
                reserved_ranges.append((of["offset"], of["offset"] + of["size"]))
                continue
            f = now.get(of["name"])
            if f is None:
                raise SpecError(f"field {rname}.{of['name']}: released in {old_v}, now removed")
            if f.offset != of["offset"]:
                raise SpecError(f"field {rname}.{of['name']}: moved from offset {of['offset']} to {f.offset}")
            if f.type != of["type"]:
                raise SpecError(f"field {rname}.{of['name']}: type changed from {of['type']} to {f.type}")
        released = {of["name"] for of in old["fields"] if not of["name"].startswith("_")}
        for f in rec.fields:
            if f.name in released or f.reserved:
                continue
            # A new field must be appended or carved out of space that was reserved in the released version.
            if f.offset >= old["size"] or any(lo <= f.offset and f.end <= hi for lo, hi in reserved_ranges):
                grew = True
                continue
            raise SpecError(f"field {rname}.{f.name}: new in {spec.major}.{spec.minor} but placed at offset {f.offset}, "
                            f"which was not reserved in {old_v}")
        if rec.size > old["size"]:
            grew = True
    if any(r.name not in lock["records"] for r in spec.records if not r.layout_version):
        grew = True
    if grew and spec.minor == lock["abi"]["minor"]:
        raise SpecError(f"[abi]: the layout grew since the released {old_v}; bump the minor version")
