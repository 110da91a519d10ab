# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Fixtures: region files laid out with the generated ABI module (abi/python/morpheus_abi).

The tests play the scheduler: they create a region file, make yield requests and read what the SDK
wrote. Every offset comes from the generated module, and every publication (the region, a request)
is the generated test writer's (abi/python/morpheus_test_region.py), in spec/abi.toml's order.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import struct
import sys
import threading
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(os.environ.get("MORPHEUS_ROOT") or Path(__file__).resolve().parents[2])


def _load(name, path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


abi = _load("morpheus_abi", REPO_ROOT / "abi" / "python" / "morpheus_abi" / "__init__.py")
publish = _load("morpheus_test_region", REPO_ROOT / "abi" / "python" / "morpheus_test_region.py")


class SimRegion:
    """A region file the test writes as the scheduler would."""

    def __init__(self, path: Path, slots: int = 4, generation: int = 7):
        H = abi.RegionHeader
        self.path = path
        self.header_size = H.SIZE
        self.stride = abi.Scb.SIZE
        self.size = self.header_size + slots * self.stride
        with open(path, "wb") as f:
            f.write(bytes(self.size))
        self._fd = os.open(path, os.O_RDWR)
        self.mm = mmap.mmap(self._fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        publish.publish_region(self.mm, 0, {
            "magic": abi.REGION_MAGIC,
            "abi_major": abi.ABI_MAJOR,
            "abi_minor": abi.ABI_MINOR,
            "header_size": self.header_size,
            "scb_stride": self.stride,
            "scb_count": slots,
            "scheduler_mode": abi.SchedulerMode.OBSERVER,
            "escalation_policy": abi.EscalationPolicy.NONE,
            "slice_ns": abi.DEFAULT_SLICE_NS,
            "grace_ns": abi.DEFAULT_GRACE_NS,
            "hint_min_interval_ns": abi.DEFAULT_HINT_MIN_INTERVAL_NS,
            "scheduler_pid": os.getpid(),
            "backend": abi.Backend.SIM,
        }, generation)

    def close(self):
        self.mm.close()
        os.close(self._fd)

    def put_header(self, field, value):
        struct.pack_into(field.struct_format, self.mm, field.offset, int(value))

    def header(self, field):
        return struct.unpack_from(field.struct_format, self.mm, field.offset)[0]

    def _scb_off(self, slot, field):
        return self.header_size + slot * self.stride + field.offset

    def put(self, slot, field, value):
        struct.pack_into(field.struct_format, self.mm, self._scb_off(slot, field), int(value))

    def get(self, slot, field):
        return struct.unpack_from(field.struct_format, self.mm, self._scb_off(slot, field))[0]

    def bump(self, slot, n=1):
        """n yield requests, each the generated publication; returns the last preempt_seq."""
        for _ in range(n):
            seq = publish.publish_request(self.mm, self.header_size + slot * self.stride, time.monotonic_ns())
        return seq

    def scb_bytes(self, slot):
        start = self.header_size + slot * self.stride
        return bytes(self.mm[start:start + self.stride])


@pytest.fixture
def region(tmp_path):
    r = SimRegion(tmp_path / "region")
    yield r
    r.close()


@pytest.fixture(autouse=True)
def no_worker_left(monkeypatch):
    """Each test starts and ends on a thread without a worker, and without an ambient scheduler."""
    import morpheus

    monkeypatch.setenv(abi.ENV_REGION, "")
    assert morpheus.current_worker() is None, "a previous test left a worker registered"
    yield
    w = morpheus.current_worker()
    if w is not None:
        w.close()
        pytest.fail("the test left a worker registered on the main thread")
    assert morpheus.critical_depth() == 0, "the test left a critical section open"


def run_in_thread(fn):
    """Run fn on a fresh thread (a fresh worker slot of the process) and return its result."""
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
            out["error"] = err

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out.get("value")
