# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Tests of the ABI generator: bad specs fail naming the field, the gates catch drift and breaks."""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import abispec  # noqa: E402
import morpheus_abigen  # noqa: E402
from abispec import SpecError  # noqa: E402

ROOT = HERE.parents[1]
RAW = tomllib.loads((ROOT / "spec" / "abi.toml").read_text())


def raw() -> dict:
    return copy.deepcopy(RAW)


def scb_fields(spec: dict) -> list[dict]:
    return next(r for r in spec["record"] if r["name"] == "scb")["fields"]


def field(spec: dict, name: str, record: str = "scb") -> dict:
    return next(f for f in next(r for r in spec["record"] if r["name"] == record)["fields"] if f["name"] == name)


def test_the_real_spec_is_valid_and_the_scb_is_two_cache_lines():
    spec = abispec.parse(raw())
    scb = spec.record("scb")
    assert (scb.size, scb.align) == (128, 64)
    assert all(f.end <= 64 for f in scb.fields if f.direction == "scheduler_to_runtime")
    assert all(f.offset >= 64 for f in scb.fields if f.direction == "runtime_to_scheduler")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: field(s, "budget_remaining_ns").update(offset=4), "scb.budget_remaining_ns: offset 4 is not naturally aligned"),
        (lambda s: field(s, "tid").update(offset=24), "overlaps"),
        (lambda s: field(s, "preempt_seq").update(size=4), "scb.preempt_seq: declared size 4 disagrees with type u64"),
        (lambda s: field(s, "tid").update(type="u24"), "scb.tid: unknown type 'u24'"),
        (lambda s: field(s, "tid").update(name="pid"), "duplicate field 'pid'"),
        (lambda s: scb_fields(s).pop(scb_fields(s).index(field(s, "tid"))), "implicit padding at bytes 28-31"),
        (lambda s: field(s, "_reserved1").update(type="u8[16]", size=16), "implicit tail padding at bytes 124-127"),
        (lambda s: field(s, "worker_state").update(direction="scheduler_to_runtime"), "scb.worker_state: direction scheduler_to_runtime is not allowed in cache line 1"),
        (lambda s: field(s, "escapable").update(direction="sideways"), "unknown direction 'sideways'"),
        (lambda s: field(s, "_reserved0").update(writer="scheduler"), "reserved fields"),
        (lambda s: s["enum"][0]["values"].append({"name": "TURBO", "value": 1, "doc": "x"}), "duplicate enum value 1 (ENFORCED and TURBO)"),
        (lambda s: s["enum"][0]["values"].append({"name": "ENFORCED", "value": 9, "doc": "x"}), "duplicate enum value name 'ENFORCED'"),
        (lambda s: s["constant"].append(dict(s["constant"][0])), "duplicate constant 'REGION_MAGIC'"),
        (lambda s: field(s, "tid").update(reclaim="sometimes"), "scb.tid: unknown reclaim 'sometimes'"),
        (lambda s: s["escapable_default"].update(COBOL=True), "escapable_default: 'COBOL' is not a runtime_kind"),
        (lambda s: s["record"][1].update(align=48), "align 48 is not a power of two"),
    ],
)
def test_bad_specs_fail_naming_what_is_wrong(mutate, message):
    spec = raw()
    mutate(spec)
    with pytest.raises(SpecError) as err:
        abispec.parse(spec)
    assert message in str(err.value)


def test_the_reclaim_clear_zeroes_every_byte_but_the_kept_fields_once():
    scb = abispec.parse(raw()).record("scb")
    zeroed = bytearray(scb.size)
    for offset, width in abispec.reclaim_stores(scb):
        assert offset % width == 0, f"store at {offset} is not aligned for {width} bytes"
        assert not any(zeroed[offset:offset + width]), f"byte {offset} stored twice"
        zeroed[offset:offset + width] = b"\x01" * width
    for f in scb.fields:
        expected = 0 if f.reclaim == "keep" else 1
        assert set(zeroed[f.offset:f.end]) == {expected}, f.name
    kept = {f.name for f in scb.fields if f.reclaim == "keep"}
    assert {"preempt_seq", "last_ack_seq", "slot_generation", "worker_state"} <= kept
    assert not kept & {"tid", "pid", "in_critical", "escapable", "priority"}


def test_the_python_reclaim_clear_zeroes_the_whole_stride():
    sys.path.insert(0, str(ROOT / "abi" / "python"))
    import morpheus_abi as m
    buf = bytearray(b"\xff" * 3 * 256)
    m.scb_clear_for_reuse(buf, 256, 256)
    assert buf[:256] == b"\xff" * 256 and buf[512:] == b"\xff" * 256, "only the one slot is written"
    slot = buf[256:512]
    assert slot[128:] == bytes(128), "bytes past the known SCB must not leak to the next occupant"
    kept_names = {f.name for f in abispec.parse(raw()).record("scb").fields if f.reclaim == "keep"}
    for f in m.Scb.FIELDS:
        kept = f.name in kept_names
        assert slot[f.offset:f.offset + f.size] == (b"\xff" * f.size if kept else bytes(f.size)), f.name


def test_an_atomic_field_across_a_cache_line_is_refused_naming_it():
    # With natural alignment no primitive up to 8 bytes can straddle a 64-byte line, so the alignment
    # rule fires first; the straddle rule guards wider atomics a later version might add.
    spec = raw()
    header = next(r for r in spec["record"] if r["name"] == "region_header")
    plain = {"direction": "header", "writer": "nobody", "access": "plain", "ordering": "none", "doc": "x"}
    header["fields"] = [
        {"name": "_reserved0", "type": "u8[60]", "offset": 0, "size": 60, **plain},
        {**plain, "name": "gen", "type": "u64", "offset": 60, "size": 8, "writer": "scheduler", "access": "atomic"},
        {"name": "_reserved1", "type": "u8[60]", "offset": 68, "size": 60, **plain},
    ]
    with pytest.raises(SpecError, match=r"field region_header\.gen: offset 60 is not naturally aligned"):
        abispec.parse(spec)


def lock() -> dict:
    """The newest released layout of the spec's major version: what the gate checks against."""
    return abispec.latest_lock(ROOT / "spec" / "locks", RAW["abi"]["major"])


RELEASED = "{major}.{minor}".format(**lock()["abi"])


def test_the_real_spec_is_compatible_with_every_released_lock_of_its_major():
    spec = abispec.parse(raw())
    locks = sorted((ROOT / "spec" / "locks").glob(f"abi-{spec.major}.*.lock.json"))
    assert locks, "no released lock"
    for path in locks:
        abispec.check_compatible(spec, json.loads(path.read_text()))


def swap_fields(spec: dict, a: str, b: str) -> None:
    fa, fb = field(spec, a), field(spec, b)
    fa["offset"], fb["offset"] = fb["offset"], fa["offset"]
    fields = scb_fields(spec)
    fields.sort(key=lambda f: f["offset"])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: swap_fields(s, "tid", "slot_generation"), "field scb.slot_generation: moved from offset 24 to 28"),
        (lambda s: field(s, "priority").update(type="u32"), "field scb.priority: type changed from i32 to u32"),
        (lambda s: next(e for e in s["enum"] if e["name"] == "worker_state")["values"][2].update(value=7),
         "enum worker_state.RUNNING: value changed from 2 to 7"),
        (lambda s: next(r for r in s["record"] if r["name"] == "hint").update(
            size=32, fields=[f for f in next(r for r in s["record"] if r["name"] == "hint")["fields"] if f["name"] != "overrun_ns"]),
         "record hint: shrinks from 40 to 32 bytes"),
        (lambda s: next(c for c in s["constant"] if c["name"] == "REGION_MAGIC").update(value=1),
         f"constant REGION_MAGIC: stable since {RELEASED}"),
    ],
)
def test_the_compatibility_gate_names_the_breaking_change(mutate, message):
    spec = raw()
    mutate(spec)
    with pytest.raises(SpecError) as err:
        abispec.check_compatible(abispec.parse(spec), lock())
    assert message in str(err.value)


def test_reusing_an_enum_value_is_refused():
    spec = raw()
    states = next(e for e in spec["enum"] if e["name"] == "worker_state")["values"]
    states[:] = [v for v in states if v["name"] != "DEAD"] + [{"name": "ZOMBIE", "value": 4, "doc": "x"}]
    with pytest.raises(SpecError, match=f"enum worker_state.DEAD: released in {RELEASED}, now removed"):
        abispec.check_compatible(abispec.parse(spec), lock())
    states.append({"name": "DEAD", "value": 4, "doc": "x"})
    states[-2]["value"] = 4
    spec2 = raw()
    next(e for e in spec2["enum"] if e["name"] == "worker_state")["values"].append({"name": "ZOMBIE", "value": 3, "doc": "x"})
    with pytest.raises(SpecError, match="duplicate enum value 3"):
        abispec.check_compatible(abispec.parse(spec2), lock())


def carve_reserved(spec: dict) -> None:
    """Add a u32 out of scb._reserved1, the way a minor version would."""
    fields = scb_fields(spec)
    res = field(spec, "_reserved1")
    res.update(offset=res["offset"] + 4, type="u8[16]", size=16)
    fields.insert(fields.index(res), {"name": "numa_node", "type": "u32", "offset": 108, "size": 4,
                                      "direction": "runtime_to_scheduler", "writer": "runtime", "access": "plain",
                                      "ordering": "x", "doc": "x"})


def test_carving_reserved_space_needs_a_minor_bump_and_then_passes():
    spec = raw()
    spec["abi"]["minor"] = lock()["abi"]["minor"]  # start from the released version, not one in development
    carve_reserved(spec)
    with pytest.raises(SpecError, match="bump the minor version"):
        abispec.check_compatible(abispec.parse(spec), lock())
    spec["abi"]["minor"] += 1
    abispec.check_compatible(abispec.parse(spec), lock())


def test_a_new_field_over_a_used_offset_is_refused_even_with_a_bump():
    spec = raw()
    spec["abi"]["minor"] += 1
    hint = next(r for r in spec["record"] if r["name"] == "hint")
    hint["fields"] = [f for f in hint["fields"] if f["name"] != "reason"]
    hint["fields"].insert(4, {"name": "cause", "type": "u32", "offset": 24, "size": 4, "direction": "scheduler_to_runtime",
                              "writer": "scheduler", "access": "plain", "ordering": "x", "doc": "x"})
    with pytest.raises(SpecError, match=f"field hint.reason: released in {RELEASED}, now removed"):
        abispec.check_compatible(abispec.parse(spec), lock())


def test_a_new_major_version_may_change_anything():
    spec = raw()
    swap_fields(spec, "tid", "slot_generation")
    spec["abi"]["major"] = 2
    abispec.check_compatible(abispec.parse(spec), lock())


def run_gen(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / "morpheus_abigen.py"), *args], cwd=cwd, capture_output=True, text=True)


def copy_tree(tmp_path: Path) -> Path:
    """A scratch repository with the spec, its locks and the committed generated files."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "spec", root / "spec")
    for rel in morpheus_abigen.generate(abispec.load(ROOT / "spec" / "abi.toml")):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)
    return root


def test_the_committed_abi_has_no_drift():
    result = run_gen("--check")
    assert result.returncode == 0, result.stderr


def test_editing_a_generated_file_by_hand_fails_the_drift_gate_naming_it(tmp_path):
    root = copy_tree(tmp_path)
    header = root / "abi" / "c" / "morpheus_abi.h"
    header.write_text(header.read_text().replace("morpheus_u64 preempt_seq;", "morpheus_u32 preempt_seq;"))
    result = run_gen("--check", "--root", str(root), "--spec", str(root / "spec" / "abi.toml"))
    assert result.returncode == 1
    assert "abi/c/morpheus_abi.h: differs" in result.stderr
    assert "abi/rust/src/generated.rs" not in result.stderr


def test_a_stale_generated_java_file_is_named(tmp_path):
    root = copy_tree(tmp_path)
    stale = root / "abi/java/src/main/java/dev/morpheus/abi/OldThing.java"
    stale.write_text("// old\n")
    result = run_gen("--check", "--root", str(root), "--spec", str(root / "spec" / "abi.toml"))
    assert result.returncode == 1 and "OldThing.java: generated file no longer produced" in result.stderr


def test_moving_a_field_in_the_spec_fails_the_compatibility_gate_naming_it(tmp_path):
    root = copy_tree(tmp_path)
    spec_file = root / "spec" / "abi.toml"
    text = spec_file.read_text()
    text = text.replace('{ name = "slot_generation", type = "u32", offset = 24,', '{ name = "slot_generation", type = "u32", offset = 28,', 1)
    text = text.replace('{ name = "tid", type = "u32", offset = 28,', '{ name = "tid", type = "u32", offset = 24,', 1)
    spec_file.write_text(text)
    result = run_gen("--check", "--root", str(root), "--spec", str(spec_file))
    assert result.returncode == 1
    assert "fields must be listed in offset order" in result.stderr or "moved from offset" in result.stderr
    # In offset order the gate names the moved field.
    lines = text.splitlines()
    i = next(n for n, l in enumerate(lines) if 'name = "slot_generation"' in l)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    spec_file.write_text("\n".join(lines) + "\n")
    result = run_gen("--check", "--root", str(root), "--spec", str(spec_file))
    assert result.returncode == 1
    assert "field scb.slot_generation: moved from offset 24 to 28" in result.stderr


def test_release_refuses_to_rewrite_a_released_version(tmp_path):
    root = copy_tree(tmp_path)
    spec_file = root / "spec" / "abi.toml"
    spec_file.write_text(spec_file.read_text().replace("value = 1024", "value = 2048"))  # MAX_WORKERS is not stable
    result = run_gen("--release", "--root", str(root), "--spec", str(spec_file))
    assert result.returncode == 0, result.stderr  # the lock only holds stable facts: unchanged
    text = spec_file.read_text().replace('name = "HINT_RING_BYTES"\ntype = "u32"\nvalue = 262144\nstable = false',
                                         'name = "HINT_RING_BYTES"\ntype = "u32"\nvalue = 262144\nstable = true')
    spec_file.write_text(text)
    result = run_gen("--release", "--root", str(root), "--spec", str(spec_file))
    assert result.returncode == 1 and "already released" in result.stderr


def test_a_bad_spec_file_is_reported_with_its_path(tmp_path):
    bad = tmp_path / "abi.toml"
    bad.write_text("[abi\n")
    result = run_gen("--check", "--spec", str(bad))
    assert result.returncode == 1 and "not valid TOML" in result.stderr and str(bad) in result.stderr


def test_verify_dump_reports_the_first_disagreeing_line():
    spec = abispec.load(ROOT / "spec" / "abi.toml")
    good = "\n".join(morpheus_abigen.expected_dump(spec))
    assert morpheus_abigen.verify_dump(spec, good) == []
    bad = good.replace("field scb in_critical 84 4", "field scb in_critical 88 4")
    problems = morpheus_abigen.verify_dump(spec, bad)
    assert "-field scb in_critical 84 4" in problems and "+field scb in_critical 88 4" in problems


def test_a_field_named_like_a_generated_record_member_is_refused():
    spec = raw()
    req = next(r for r in spec["record"] if r["name"] == "reg_request")
    next(f for f in req["fields"] if f["name"] == "message_size")["name"] = "size"
    with pytest.raises(SpecError, match="field reg_request.size: the name is taken by the generated code"):
        abispec.parse(spec)


def test_every_runtime_kind_has_an_escapable_default_and_unknown_is_not_escapable():
    """SCB.md §5.5: a new language's SDK stores UNKNOWN and is judged against its default, false."""
    spec = abispec.parse(raw())
    assert set(spec.escapable_default) == {v.name for v in spec.enum("runtime_kind").values}
    assert spec.escapable_default["UNKNOWN"] is False


def test_the_rust_escapable_default_has_a_catch_all_only_for_kinds_left_out():
    """With every kind listed the match is exhaustive (a `_` arm would be unreachable); a kind left out
    falls to `false`."""
    partial_raw = raw()
    del partial_raw["escapable_default"]["UNKNOWN"]

    def arms(spec_raw: dict) -> str:
        rust = morpheus_abigen.emit_rust(abispec.parse(spec_raw))
        return rust.split("pub const fn escapable_default")[1].split("\n}\n")[0]

    full, partial = arms(raw()), arms(partial_raw)
    assert "RuntimeKind::Unknown => false," in full and "_ => false," not in full
    assert "RuntimeKind::Unknown" not in partial and "_ => false," in partial


# --- struct morpheus_worker: a process record, locked per layout_version -----------------------------------

def worker_record(spec: dict) -> dict:
    return next(r for r in spec["record"] if r["name"] == "worker")


def record_locks() -> dict:
    return abispec.record_locks(ROOT / "spec" / "locks")


def test_the_worker_layout_is_released_as_layout_1_of_libmorpheus_so_1_and_outside_the_region_abi():
    spec = abispec.parse(raw())
    abispec.check_record_layouts(spec, record_locks())
    lock1 = record_locks()["worker"][1]
    assert (lock1["soname"], lock1["size"], lock1["align"]) == ("libmorpheus.so.1", 56, 8)
    assert [(f["name"], f["offset"], f["size"]) for f in lock1["fields"]] == [
        ("preempt_seq", 0, 8), ("cached_ack", 8, 8), ("critical_depth", 16, 4), ("reserved", 20, 4),
        ("in_critical", 24, 8), ("generation", 32, 8), ("attached_generation", 40, 8), ("inner", 48, 8)]
    # The region ABI's lock does not hold it: a worker layout change never needs an ABI minor, nor the reverse.
    assert "worker" not in abispec.lock_of(spec)["records"]


def swap_worker_fields(spec: dict, a: str, b: str) -> None:
    fa, fb = field(spec, a, "worker"), field(spec, b, "worker")
    fa["offset"], fb["offset"] = fb["offset"], fa["offset"]
    worker_record(spec)["fields"].sort(key=lambda f: f["offset"])


def widen_critical_depth(spec: dict) -> None:
    fields = worker_record(spec)["fields"]
    fields.remove(field(spec, "reserved", "worker"))
    field(spec, "critical_depth", "worker").update(type="u64", size=8)


def append_worker_field(spec: dict) -> None:
    worker_record(spec)["size"] = 64
    worker_record(spec)["fields"].append(dict(field(spec, "cached_ack", "worker"), name="budget", offset=56))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: swap_worker_fields(s, "critical_depth", "reserved"),
         "field worker.critical_depth: layout 1 of record worker (libmorpheus.so.1) has it at offset 16 (4 bytes, u32), "
         "now at offset 20 (4 bytes, u32); a released layout is never changed in place"),
        (widen_critical_depth, "field worker.critical_depth: layout 1 of record worker (libmorpheus.so.1) has it at offset "
         "16 (4 bytes, u32), now at offset 16 (8 bytes, u64)"),
        (lambda s: field(s, "inner", "worker").update(type="u64"), "field worker.inner: layout 1 of record worker "
         "(libmorpheus.so.1) has it at offset 48 (8 bytes, *mut opaque), now at offset 48 (8 bytes, u64)"),
        (append_worker_field, "field worker.budget: not in released layout 1 of record worker (libmorpheus.so.1)"),
        (lambda s: worker_record(s).update(soname="libmorpheus.so.9"),
         "record worker: soname changed from libmorpheus.so.1 to libmorpheus.so.9 under released layout 1"),
        (lambda s: s["record"].remove(worker_record(s)), "record worker: layout 1 released (libmorpheus.so.1), now removed"),
    ],
)
def test_a_released_worker_layout_changed_in_place_is_refused_naming_the_field(mutate, message):
    spec = raw()
    mutate(spec)
    with pytest.raises(SpecError) as err:
        abispec.check_record_layouts(abispec.parse(spec), record_locks())
    assert message in str(err.value)


def test_a_new_worker_layout_needs_a_new_version_and_a_new_soname():
    spec = raw()
    append_worker_field(spec)
    worker_record(spec)["layout_version"] = 2
    with pytest.raises(SpecError, match="record worker: layout 2 reuses soname libmorpheus.so.1 of released layout 1"):
        abispec.check_record_layouts(abispec.parse(spec), record_locks())
    worker_record(spec)["soname"] = "libmorpheus.so.2"
    abispec.check_record_layouts(abispec.parse(spec), record_locks())
    # The region ABI's gate is not involved: no minor bump is asked for.
    abispec.check_compatible(abispec.parse(spec), lock())
    locks = record_locks()
    locks["worker"][3] = dict(locks["worker"][1], layout_version=3, soname="libmorpheus.so.3")
    with pytest.raises(SpecError, match="record worker: layout_version 2 is older than the released layout 3"):
        abispec.check_record_layouts(abispec.parse(spec), locks)


def test_the_gate_refuses_a_worker_field_moved_in_place_and_release_locks_a_new_layout(tmp_path):
    root = copy_tree(tmp_path)
    spec_file = root / "spec" / "abi.toml"
    text = spec_file.read_text()
    moved = text.replace('{ name = "critical_depth", type = "u32", offset = 16,', '{ name = "critical_depth", type = "u32", offset = 20,', 1)
    moved = moved.replace('{ name = "reserved", type = "u32", offset = 20,', '{ name = "reserved", type = "u32", offset = 16,', 1)
    lines = moved.splitlines()
    i = next(n for n, l in enumerate(lines) if 'name = "critical_depth"' in l)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    spec_file.write_text("\n".join(lines) + "\n")
    for mode in ("--check", "--release"):
        result = run_gen(mode, "--root", str(root), "--spec", str(spec_file))
        assert result.returncode == 1, mode
        assert "field worker.critical_depth: layout 1 of record worker (libmorpheus.so.1) has it at offset 16" in result.stderr
    assert not (root / "spec" / "locks" / "worker-layout-2.lock.json").exists()
    spec_file.write_text("\n".join(lines).replace("layout_version = 1", "layout_version = 2")
                         .replace('soname = "libmorpheus.so.1"', 'soname = "libmorpheus.so.2"') + "\n")
    result = run_gen("--release", "--root", str(root), "--spec", str(spec_file))
    assert result.returncode == 0, result.stderr
    assert "released layout 2 of worker (libmorpheus.so.2)" in result.stdout
    assert json.loads((root / "spec/locks/worker-layout-2.lock.json").read_text())["fields"][2] == \
        {"name": "reserved", "type": "u32", "offset": 16, "size": 4}
    assert json.loads((root / "spec/locks/worker-layout-1.lock.json").read_text()) == record_locks()["worker"][1]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: field(s, "preempt_seq").update(type="*const u64", access="plain"),
         "field scb.preempt_seq: a pointer means nothing outside its process"),
        (lambda s: field(s, "inner", "worker").update(type="*mut thing"), "field worker.inner: pointer to unknown type 'thing'"),
        (lambda s: worker_record(s).pop("layout_version"), "record worker: missing key 'layout_version'"),
        (lambda s: field(s, "cached_ack", "worker").update(direction="message"), "record worker: mixes direction \"process\""),
        (lambda s: next(r for r in s["record"] if r["name"] == "hint").update(layout_version=1, soname="x"),
         "record hint: only a \"process\" record has a layout_version"),
    ],
)
def test_pointer_fields_and_process_records_are_checked(mutate, message):
    spec = raw()
    mutate(spec)
    with pytest.raises(SpecError) as err:
        abispec.parse(spec)
    assert message in str(err.value)


def test_the_c_header_declares_the_worker_with_its_pointer_types():
    header = (ROOT / "abi" / "c" / "morpheus_abi.h").read_text()
    for decl in ("const morpheus_u64 *preempt_seq;", "morpheus_u32 *in_critical;", "const morpheus_u64 *generation;",
                 "void *inner;", "#define MORPHEUS_WORKER_LAYOUT_VERSION 1u", '#define MORPHEUS_WORKER_SONAME "libmorpheus.so.1"'):
        assert decl in header


# --- Publications (spec/abi.toml [[publication]]) and the test-region writers generated from them ---------

def publication(spec: dict, name: str) -> dict:
    return next(p for p in spec["publication"] if p["name"] == name)


def test_the_real_publications_end_with_their_release():
    spec = abispec.parse(raw())
    order = {p.name: [(f.name, s.store) for f, s in abispec.publication_stores(spec, p)] for p in spec.publications}
    assert order["request"] == [("last_hint_ns", "relaxed"), ("budget_remaining_ns", "relaxed"), ("preempt_seq", "release")]
    assert order["region"][-1] == ("generation", "release")
    assert all(store == "plain" for _, store in order["region"][:-1])


def _swap_last_two(steps):
    steps[-1], steps[-2] = steps[-2], steps[-1]


@pytest.mark.parametrize("mutate, message", [
    # The increment of preempt_seq before the hint field: a runtime could see the request and a stale budget.
    (lambda s: _swap_last_two(publication(s, "request")["steps"]),
     r"publication request: the last step must be the release store readers pair with; it is budget_remaining_ns"),
    # generation first: a reader could accept a header whose magic and layout are still being written.
    (lambda s: publication(s, "region")["steps"].reverse(),
     r"publication region step 2: '\*' \(the caller's values for every other field\) must be the first step"),
    (lambda s: publication(s, "request")["steps"][0].update(store="release"),
     r"publication request: only the last step is a release"),
    (lambda s: publication(s, "request")["steps"].append({"field": "budget_remaining_ns", "store": "release"}),
     r"publication request: duplicate step field 'budget_remaining_ns'"),
    (lambda s: publication(s, "region")["steps"].insert(1, {"field": "magic", "store": "relaxed"}),
     r"publication region step 2: a relaxed store needs an atomic field; region_header.magic is plain"),
    (lambda s: publication(s, "request")["steps"][0].update(field="_reserved0"),
     r"publication request step 1: '_reserved0' is not a writable integer field of scb"),
    (lambda s: publication(s, "request")["steps"][-1].update(field="hints_dropped"),
     r"publication request: scb.hints_dropped publishes the record, but its ordering does not say release"),
    (lambda s: publication(s, "request").update(record="worker"),
     r"publication request: record 'worker' is not a shared record"),
])
def test_a_broken_publication_order_is_refused_naming_the_step(mutate, message):
    spec = raw()
    mutate(spec)
    with pytest.raises(SpecError, match=message):
        abispec.parse(spec)


@pytest.mark.parametrize("path, start, end, key", [
    ("abi/c/morpheus_test_region.h", "morpheus_test_publish_{name}(", "\n}\n", r"->{field}\b"),
    ("abi/python/morpheus_test_region.py", "def publish_{name}(", "\n\n\n", r"# {field}\b"),
    ("abi/node/test-region.js", "function publish{Name}(", "\n};\n", r"// {field}\b"),
    ("abi/java/src/testFixtures/java/dev/morpheus/abi/TestRegionWriter.java", " publish{Name}(", "\n    }\n", r"// {field}\b"),
    ("abi/rust/src/test_region.rs", "fn publish_{name}(", "\n}\n", r"// {field}\b"),
])
def test_every_language_writer_stores_in_the_spec_order(path, start, end, key):
    import re
    spec = abispec.parse(raw())
    text = morpheus_abigen.generate(spec)[path] + end
    for p in spec.publications:
        body = text[text.index(start.format(name=p.name, Name=morpheus_abigen.camel(p.name))):]
        body = body[:body.index(end)]
        stores = abispec.publication_stores(spec, p)
        found = [re.search(key.format(field=f.name), body) for f, _ in stores]
        assert all(found), f"{path}: publication {p.name} does not store {[f.name for (f, _), m in zip(stores, found) if not m]}"
        assert [m.start() for m in found] == sorted(m.start() for m in found), \
            f"{path}: publication {p.name} stores out of the spec's order"


def test_the_python_writer_publishes_a_request_and_a_region_and_refuses_an_unknown_field():
    spec = abispec.parse(raw())
    module: dict = {}
    exec(compile(morpheus_abigen.generate(spec)["abi/python/morpheus_test_region.py"], "writer", "exec"), module)
    scb = spec.record("scb")
    off = {f.name: f.offset for f in scb.fields}
    buf = bytearray(scb.size)
    buf[off["budget_remaining_ns"]:off["budget_remaining_ns"] + 8] = (5).to_bytes(8, "little")
    assert module["publish_request"](buf, 0, 1234) == 1
    assert module["publish_request"](buf, 0, 99) == 2
    u64 = lambda name: int.from_bytes(buf[off[name]:off[name] + 8], "little")  # noqa: E731
    assert (u64("preempt_seq"), u64("budget_remaining_ns"), u64("last_hint_ns")) == (2, 0, 99)
    header = bytearray(spec.record("region_header").size)
    module["publish_region"](header, 0, {"magic": 0x5355454850524F4D, "scb_count": 3}, 7)
    assert header[:8] == b"MORPHEUS" and header[24] == 7 and header[20] == 3
    with pytest.raises(ValueError, match=r"publish_region: \['magik'\] are not fields it stores"):
        module["publish_region"](header, 0, {"magik": 1}, 7)
