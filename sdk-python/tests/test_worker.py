# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Registration, lifecycle, attach errors and detached mode (spec/SCB.md §1, §4, §7)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import morpheus
from conftest import abi, run_in_thread

S = abi.Scb
H = abi.RegionHeader


def test_exception_classes_follow_the_abi_error_codes():
    for code in abi.ErrorCode:
        name = "".join(word.capitalize() for word in code.name.split("_")) + "Error"
        cls = getattr(morpheus, name)
        assert issubclass(cls, morpheus.MorpheusError)
        assert cls.code == code.value and cls.code.name == code.name
    assert morpheus.MorpheusError.code is None


def test_direct_registration_writes_the_spec_fields(region):
    with morpheus.Worker(region=str(region.path), slot=1) as w:
        assert w.registered and w.attached and w.slot == 1
        assert region.get(1, S.WORKER_STATE) == abi.WorkerState.RUNNING
        assert region.get(1, S.TID) == threading.get_native_id()
        assert region.get(1, S.PID) == os.getpid()
        assert region.get(1, S.RUNTIME_KIND) == abi.RuntimeKind.PYTHON
        # Python's default comes from the ABI: the worker holds the GIL.
        assert region.get(1, S.ESCAPABLE) == int(abi.ESCAPABLE_DEFAULT[abi.RuntimeKind.PYTHON]) == 0
        assert w.escapable is False and morpheus.escapable_default() is False
        assert region.get(1, S.SLOT_GENERATION) == 1
    assert region.get(1, S.WORKER_STATE) == abi.WorkerState.INIT
    assert region.get(1, S.TID) == 0 and region.get(1, S.PID) == 0
    assert not w.registered


def test_escapable_and_priority_overrides(region):
    with morpheus.Worker(region=morpheus.attach(str(region.path)), slot=0, escapable=True, priority=-5) as w:
        assert region.get(0, S.ESCAPABLE) == 1 and w.escapable
        assert region.get(0, S.PRIORITY) == -5
        w.escapable = False
        w.priority = 3
        assert region.get(0, S.ESCAPABLE) == 0 and region.get(0, S.PRIORITY) == 3
        with pytest.raises(morpheus.InvalidArgumentError, match="expected priority in -20..=19, found 20"):
            w.priority = 20
        assert region.get(0, S.PRIORITY) == 3 and w.priority == 3, "a refused priority writes nothing"


def test_one_worker_per_thread(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        with pytest.raises(morpheus.AlreadyRegisteredError, match="already holds a worker"):
            morpheus.Worker(region=str(region.path), slot=1)
        assert region.get(1, S.WORKER_STATE) == abi.WorkerState.INIT


def test_slot_busy_and_out_of_range(region):
    region.put(2, S.WORKER_STATE, abi.WorkerState.RUNNING)
    with pytest.raises(morpheus.SlotBusyError, match="expected state INIT, found RUNNING"):
        morpheus.Worker(region=str(region.path), slot=2)
    with pytest.raises(morpheus.SlotOutOfRangeError, match="below scb_count 4, found slot 9"):
        morpheus.Worker(region=str(region.path), slot=9)
    assert morpheus.current_worker() is None


@pytest.mark.parametrize(
    "field, value, error, message",
    [
        (H.MAGIC, 0x1234, morpheus.BadMagicError, "expected magic"),
        (H.ABI_MAJOR, abi.ABI_MAJOR + 1, morpheus.AbiMajorMismatchError, f"ABI major {abi.ABI_MAJOR}, the region has ABI major {abi.ABI_MAJOR + 1}"),
        (H.SCB_STRIDE, 100, morpheus.BadLayoutError, "scb_stride"),
        (H.SCB_COUNT, 1000, morpheus.RegionTruncatedError, "needed at least"),
        (H.REQUIRED_FEATURES, 1 << 40, morpheus.UnknownRequiredFeatureError, "0x10000000000"),
        (H.GENERATION, 0, morpheus.NotReadyError, "nonzero generation"),
    ],
)
def test_bad_regions_are_refused_with_their_error(region, field, value, error, message):
    region.put_header(field, value)
    before = bytes(region.mm)
    with pytest.raises(error, match=message) as info:
        morpheus.attach(str(region.path))
    assert info.value.code.name == error.code.name
    with pytest.raises(error):
        morpheus.Worker(region=str(region.path), slot=0)
    assert bytes(region.mm) == before, "a refused region must not be written"


def test_a_file_shorter_than_a_header(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(b"MORPHEUS")
    with pytest.raises(morpheus.RegionTruncatedError, match="found 8"):
        morpheus.attach(str(short))


def test_explicit_missing_path_is_an_error_not_a_detach(tmp_path):
    with pytest.raises(morpheus.IoError, match="No such file"):
        morpheus.attach(str(tmp_path / "missing"))


def test_env_empty_string_forces_detached_mode(monkeypatch):
    monkeypatch.setenv(abi.ENV_REGION, "")
    assert morpheus.attach() is None
    with morpheus.Worker() as w:
        assert not w.attached and w.slot is None and w.detach_reason == "FORCED_BY_ENVIRONMENT"
        with pytest.raises(morpheus.DetachedError):
            w.status()
        assert morpheus.checkpoint() is False


def test_env_region_is_discovered(monkeypatch, region):
    monkeypatch.setenv(abi.ENV_REGION, str(region.path))
    r = morpheus.attach()
    assert r is not None and r.attached_generation == 7 and r.scb_count == 4 and r.backing == "FILE"
    assert r.is_current and r.slice_ns == abi.DEFAULT_SLICE_NS


def test_bad_arguments_name_what_is_wrong(region):
    with pytest.raises(ValueError, match="slot index >= 0, got -1"):
        morpheus.Worker(region=str(region.path), slot=-1)
    with pytest.raises(ValueError, match="not both"):
        morpheus.Worker(region=str(region.path), detached=True)
    with pytest.raises(ValueError, match="not both"):
        morpheus.Worker(slot=0, socket="/tmp/x")
    with pytest.raises(TypeError, match="expected a path or a morpheus.Region, got int"):
        morpheus.Worker(region=42)
    with pytest.raises(morpheus.MorpheusError, match="expected priority in -20..=19, found 99") as bad:
        morpheus.Worker(detached=True, priority=99)
    assert bad.value.code == morpheus.ErrorCode.INVALID_ARGUMENT, "out of range is INVALID_ARGUMENT, never clamped"
    with pytest.raises(ValueError, match="from 1 to"):
        morpheus.Ticker(0)
    with pytest.raises(TypeError, match="decorates a function"):
        morpheus.critical(42)
    assert morpheus.current_worker() is None


def test_handle_acts_only_on_its_own_thread(region):
    with morpheus.Worker(region=str(region.path), slot=0) as w:
        def elsewhere():
            with pytest.raises(morpheus.NotRegisteredError):
                w.slot
            w.close()  # not this thread's registration: nothing happens
            return True

        assert run_in_thread(elsewhere)
        assert w.registered and region.get(0, S.WORKER_STATE) == abi.WorkerState.RUNNING


def test_thread_exit_releases_the_slot(region):
    def work():
        morpheus.init_worker(region=str(region.path), slot=3)
        return region.get(3, S.WORKER_STATE)

    assert run_in_thread(work) == abi.WorkerState.RUNNING
    # Thread.join() returns before the OS thread has run its thread-local destructors.
    deadline = time.monotonic() + 5
    while region.get(3, S.WORKER_STATE) != abi.WorkerState.INIT and time.monotonic() < deadline:
        time.sleep(0.01)
    assert region.get(3, S.WORKER_STATE) == abi.WorkerState.INIT


def test_interpreter_exit_releases_the_main_threads_slot(region):
    code = (
        "import morpheus, sys\n"
        f"morpheus.init_worker(region={str(region.path)!r}, slot=2)\n"
        "print(morpheus.current_worker().slot)\n"
    )
    env = dict(os.environ)
    env.pop(abi.ENV_REGION, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "2"
    assert region.get(2, S.WORKER_STATE) == abi.WorkerState.INIT
    assert region.get(2, S.SLOT_GENERATION) == 1


def test_generation_change_detaches_the_worker(region):
    with morpheus.Worker(region=str(region.path), slot=0) as w:
        region.put_header(H.GENERATION, 8)
        region.bump(0)
        before = region.scb_bytes(0)
        assert morpheus.checkpoint() is False
        with pytest.raises(morpheus.GenerationChangedError, match="generation 7, the region now has generation 8"):
            w.status()
        with morpheus.critical():
            pass
        assert region.scb_bytes(0) == before


def test_pressure_is_bounded_when_the_seqlock_is_parked(region):
    """SCB.md §2.1: a writer killed mid-update (seq odd forever) cannot stall a reader; the reader
    returns None until it has read one consistent snapshot, then keeps that one."""
    import struct

    P = abi.Pressure
    base = H.PRESSURE.offset

    def put(field, value):
        struct.pack_into(field.struct_format, region.mm, base + field.offset, value)

    attached = morpheus.attach(str(region.path))
    put(P.SEQ, 1)
    assert attached.pressure() is None, "unavailable, and it returned"
    put(P.LEVEL, abi.PressureLevel.HIGH)
    put(P.CPU_SOME_AVG10, 6000)
    put(P.SEQ, 2)
    good = attached.pressure()
    assert good is not None and good["level"] == "HIGH" and good["cpu_some_avg10"] == 6000
    put(P.SEQ, 3)
    put(P.CPU_SOME_AVG10, 1)  # a torn write in progress is never returned
    assert attached.pressure() == good, "the last good snapshot"
