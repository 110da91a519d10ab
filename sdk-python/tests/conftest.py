# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Fixtures: region files laid out with the generated ABI module (abi/python/morpheus_abi).

The tests play the scheduler: they create a region file, bump preempt_seq and read what the SDK
wrote. Every offset comes from the generated module, none is written here.
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import struct
import sys
import threading
from pathlib import Path

import pytest

REPO_ROOT = Path(os.environ.get("MORPHEUS_ROOT") or Path(__file__).resolve().parents[2])


def _load_abi():
    if "morpheus_abi" in sys.modules:
        return sys.modules["morpheus_abi"]
    path = REPO_ROOT / "abi" / "python" / "morpheus_abi" / "__init__.py"
    spec = importlib.util.spec_from_file_location("morpheus_abi", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["morpheus_abi"] = module
    spec.loader.exec_module(module)
    return module


abi = _load_abi()


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
        self.put_header(H.MAGIC, abi.REGION_MAGIC)
        self.put_header(H.ABI_MAJOR, abi.ABI_MAJOR)
        self.put_header(H.ABI_MINOR, abi.ABI_MINOR)
        self.put_header(H.HEADER_SIZE, self.header_size)
        self.put_header(H.SCB_STRIDE, self.stride)
        self.put_header(H.SCB_COUNT, slots)
        self.put_header(H.SLICE_NS, abi.DEFAULT_SLICE_NS)
        self.put_header(H.GRACE_NS, abi.DEFAULT_GRACE_NS)
        self.put_header(H.GENERATION, generation)

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
        self.put(slot, abi.Scb.PREEMPT_SEQ, self.get(slot, abi.Scb.PREEMPT_SEQ) + n)

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
