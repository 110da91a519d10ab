# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Misuse and a scheduler that is not there: each gets a clear error or a logged reason, never a
crash at start-up or a silent loss of every yield."""

from __future__ import annotations

import asyncio
import logging
import socket as socketlib
import subprocess
import sys

import pytest

import morpheus
import morpheus.aio
from conftest import abi

S = abi.Scb


def test_checkpoint_and_explicit_yield_of_a_detached_worker_are_not_errors():
    with morpheus.Worker(detached=True) as w:
        assert w.checkpoint() is False
        assert w.record_explicit_yield() is None
        with pytest.raises(morpheus.DetachedError, match="status needs"):
            w.status()  # status is the call that reports it


@pytest.fixture
def no_forced_detach(monkeypatch):
    """conftest forces detached mode (MORPHEUS_REGION=""); these tests look at the agent socket."""
    monkeypatch.delenv(abi.ENV_REGION)


def test_an_explicit_socket_that_does_not_exist_is_an_error_naming_it(no_forced_detach):
    with pytest.raises(morpheus.IoError, match="/nonexistent/agent.sock"):
        morpheus.Worker(socket="/nonexistent/agent.sock")
    assert morpheus.current_worker() is None


def test_a_socket_nobody_accepts_on_is_detached_mode_with_a_logged_reason(tmp_path, caplog, no_forced_detach):
    path = tmp_path / "agent.sock"
    leftover = socketlib.socket(socketlib.AF_UNIX)
    leftover.bind(str(path))
    leftover.close()  # the file stays: a killed agent's leftover
    with caplog.at_level(logging.INFO, logger="morpheus"):
        with morpheus.Worker(socket=str(path)) as w:
            assert w.attached is False
            assert w.detach_reason == "NO_SCHEDULER"
            assert "no agent accepts" in w.detach_detail
            assert w.waiting_for_scheduler is True
            assert morpheus.checkpoint() is False
    assert any("no agent accepts" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_aio_run_with_a_dead_socket_returns_mains_value(tmp_path, no_forced_detach):
    path = tmp_path / "agent.sock"
    leftover = socketlib.socket(socketlib.AF_UNIX)
    leftover.bind(str(path))
    leftover.close()

    async def main():
        await morpheus.checkpoint_async()
        return 42

    assert morpheus.aio.run(main(), socket=str(path)) == 42


def _critical_depths(region):
    seen = []

    @morpheus.critical
    def numbers(n):
        for i in range(n):
            seen.append(("body", morpheus.critical_depth(), region.get(0, S.IN_CRITICAL)))
            received = yield i
            seen.append(("sent", received))
        return "done"

    @morpheus.critical
    async def anumbers(n):
        for i in range(n):
            await asyncio.sleep(0)
            seen.append(("abody", morpheus.critical_depth()))
            yield i

    gen = numbers(2)
    assert next(gen) == 0
    seen.append(("consumer", morpheus.critical_depth()))
    assert gen.send("x") == 1
    with pytest.raises(StopIteration) as stop:
        gen.send("y")
    assert stop.value.value == "done"

    async def consume():
        out = []
        async for i in anumbers(2):
            out.append((i, morpheus.critical_depth()))
        return out

    return seen, asyncio.run(consume())


def test_critical_covers_every_step_of_a_generator_and_an_async_generator(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        seen, consumed = _critical_depths(region)
    assert seen[:4] == [("body", 1, 1), ("consumer", 0), ("sent", "x"), ("body", 1, 1)], seen
    assert ("abody", 1) in seen
    assert consumed == [(0, 0), (1, 0)]  # the consumer's code between items is outside the section
    assert morpheus.critical_depth() == 0


def test_a_generator_closed_early_leaves_no_section_open(region):
    @morpheus.critical
    def forever():
        while True:
            yield morpheus.critical_depth()

    with morpheus.Worker(region=str(region.path), slot=0):
        gen = forever()
        assert next(gen) == 1
        gen.close()
        assert morpheus.critical_depth() == 0 and region.get(0, S.IN_CRITICAL) == 0


def test_a_critical_section_left_open_is_reported(region, caplog):
    region.put_header(abi.RegionHeader.SLICE_NS, 1)  # ten slices pass at once: only the count matters
    with caplog.at_level(logging.WARNING, logger="morpheus"):
        with morpheus.Worker(region=str(region.path), slot=0):
            morpheus._morpheus.critical_enter()
            try:
                region.bump(0)
                for _ in range(2000):
                    assert morpheus.checkpoint() is False
            finally:
                morpheus._morpheus.critical_exit()
            assert morpheus.checkpoint() is True
    leaks = [r for r in caplog.records if "never exited" in r.getMessage()]
    assert len(leaks) == 1, [r.getMessage() for r in caplog.records]


def _python(code, *args):
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_checkpoints_on_an_unregistered_thread_are_reported_once():
    code = (
        "import asyncio, logging, morpheus\n"
        "logging.basicConfig(level=logging.WARNING, format='%(name)s %(levelname)s %(message)s')\n"
        "async def main():\n"
        "    for _ in range(3):\n"
        "        await morpheus.checkpoint_async()\n"
        "asyncio.run(main())\n"
        "morpheus.checkpoint()\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("holds no worker") == 1, result.stderr
    assert "morpheus WARNING" in result.stderr


def test_morpheus_run_names_a_missing_script_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "morpheus.run", "--detached", str(tmp_path / "missing.py")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert "no such script" in result.stderr and "missing.py" in result.stderr
    assert "Traceback" not in result.stderr
