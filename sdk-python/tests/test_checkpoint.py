# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Checkpoints (sync and asyncio) and critical sections (spec/SCB.md §5.1, §5.3)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import morpheus
import morpheus.aio
from conftest import abi

S = abi.Scb


def test_idle_checkpoint_writes_nothing(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        before = region.scb_bytes(0)
        for _ in range(1000):
            assert morpheus.checkpoint() is False
        assert region.scb_bytes(0) == before


def test_sync_checkpoint_acknowledges_once_per_observation(region):
    with morpheus.Worker(region=str(region.path), slot=0) as w:
        region.bump(0, 3)
        assert morpheus.checkpoint() is True
        assert region.get(0, S.LAST_ACK_SEQ) == 3
        assert region.get(0, S.YIELD_COUNT) == 1
        assert region.get(0, S.LAST_YIELD_REASON) == abi.YieldReason.PREEMPT_REQUEST
        assert morpheus.checkpoint() is False
        assert w.yield_counts()["PREEMPT_REQUEST"] == 1 and w.acknowledged_seq == 3


def test_async_checkpoint_fast_path_is_one_shared_object(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        assert morpheus.checkpoint_async() is morpheus.checkpoint_async()
        assert isinstance(morpheus.checkpoint_async(), morpheus.Checkpoint)

        async def main():
            return await morpheus.checkpoint_async()

        assert asyncio.run(main()) is None


def _yield_before_ack(region, loop_factory):
    seen = {}

    async def other():
        # Runs only if the checkpointing task really gave the loop back.
        seen["ack_while_suspended"] = region.get(0, S.LAST_ACK_SEQ)
        region.bump(0)  # arrives during the yield: stays pending

    async def main():
        region.bump(0, 2)
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(other()))
        await asyncio.sleep(0)  # let other() be scheduled behind us
        pending = morpheus.checkpoint_async()
        assert isinstance(pending, morpheus.PendingCheckpoint)
        first = await pending
        second = await morpheus.checkpoint_async()
        third = await morpheus.checkpoint_async()
        return first, second, third

    with morpheus.Worker(region=str(region.path), slot=0):
        loop = loop_factory()
        try:
            result = loop.run_until_complete(main())
        finally:
            loop.close()
    return seen, result


def test_async_checkpoint_yields_before_acknowledging(region):
    seen, (first, second, third) = _yield_before_ack(region, asyncio.new_event_loop)
    assert seen["ack_while_suspended"] == 0
    assert (first, second, third) == (True, True, None)
    # Both yields were acknowledged after resuming; the worker is back to idle.


def test_async_checkpoint_under_uvloop(region):
    if os.environ.get("MORPHEUS_REQUIRE_UVLOOP"):
        import uvloop  # the Bazel target: tools/setup.sh installs it, a skip would hide its absence
    else:
        uvloop = pytest.importorskip("uvloop")
    seen, result = _yield_before_ack(region, uvloop.new_event_loop)
    assert seen["ack_while_suspended"] == 0 and result == (True, True, None)


def test_pending_checkpoint_yields_exactly_once(region):
    steps = []

    async def counter():
        for i in range(100):
            steps.append(i)
            await asyncio.sleep(0)

    async def main():
        task = asyncio.ensure_future(counter())
        await asyncio.sleep(0)
        region.bump(0)
        start = len(steps)
        assert await morpheus.checkpoint_async() is True
        between = len(steps) - start
        # Driven by hand: exactly one suspension (a loop future), then the result.
        region.bump(0)
        awaiting = morpheus.checkpoint_async().__await__()
        assert isinstance(next(awaiting), asyncio.Future)
        with pytest.raises(StopIteration) as done:
            awaiting.send(None)
        assert done.value.value is True
        await task
        return between

    with morpheus.Worker(region=str(region.path), slot=0) as w:
        # One suspension spans YIELD_PASSES passes of the loop (spec/SCB.md §5.7): a task that is
        # ready at every pass (the counter) steps once in each, and once more before the yielder's
        # wake-up, which is queued behind the last pass.
        assert asyncio.run(main()) == morpheus._morpheus.YIELD_PASSES + 1
        assert w.yield_counts()["PREEMPT_REQUEST"] == 2


def _yield_reaches_the_poll(region, loop_factory):
    order = []

    async def asked():
        region.bump(0)
        # Due at the loop's next poll: a yield that honours the request must let it run first.
        asyncio.get_running_loop().call_later(0, order.append, "timer")
        order.append("asked-before")
        order.append(("asked-after", await morpheus.checkpoint_async()))

    async def other(name):
        # Runs in the same loop iteration, after asked() yielded: the request is asked()'s to honour
        # (spec/SCB.md §5.7: one yielder per request); this task's first step ends at its checkpoint.
        order.append(f"{name}-before")
        order.append((f"{name}-after", await morpheus.checkpoint_async()))

    async def main():
        await asyncio.gather(asked(), other("b"), other("c"))
        return await morpheus.checkpoint_async()  # the step-aside is over: fast path again

    with morpheus.Worker(region=str(region.path), slot=0) as w:
        loop = loop_factory()
        try:
            last = loop.run_until_complete(main())
        finally:
            loop.close()
        assert w.yield_counts()["PREEMPT_REQUEST"] == 1 and region.get(0, S.LAST_ACK_SEQ) == 1
    return order, last


@pytest.mark.parametrize("flavour", ["asyncio", "uvloop"])
def test_a_yield_lets_the_loop_poll_before_any_task_computes_again(region, flavour):
    if flavour == "uvloop":
        uvloop = pytest.importorskip("uvloop") if not os.environ.get("MORPHEUS_REQUIRE_UVLOOP") else __import__("uvloop")
        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    order, last = _yield_reaches_the_poll(region, factory)
    # b and c take their first step during asked()'s yield: b acknowledges asked()'s request (the
    # loop had control) without yielding for it, and both step aside at their first checkpoint, so
    # the loop reaches its poll (the timer) before any of the three computes again.
    assert order[:4] == ["asked-before", "b-before", "c-before", "timer"], order
    assert sorted(order[4:], key=str) == [("asked-after", True), ("b-after", None), ("c-after", None)], order
    assert last is None  # acknowledged: the fast path again


@pytest.mark.parametrize("flavour", ["asyncio", "uvloop"])
def test_a_task_woken_by_the_poll_runs_before_the_yielding_task_computes_again(region, flavour):
    # A sleeping *task* (not a bare timer callback): its timer resolves its future, whose callback
    # queues its step; the yielding task's wake-up must be queued behind that step.
    if flavour == "uvloop":
        uvloop = pytest.importorskip("uvloop") if not os.environ.get("MORPHEUS_REQUIRE_UVLOOP") else __import__("uvloop")
        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    order = []

    async def sleeper():
        await asyncio.sleep(0.002)
        order.append("sleeper-woke")

    async def cpu_bound():
        deadline = time.monotonic() + 0.020  # the sleeper's timer is due well before the yield
        while time.monotonic() < deadline:
            pass
        region.bump(0)
        order.append("cpu-before")
        order.append(("cpu-after", await morpheus.checkpoint_async()))

    async def main():
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)  # the sleeper arms its timer
        await asyncio.gather(cpu_bound(), task)

    with morpheus.Worker(region=str(region.path), slot=0):
        loop = factory()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    assert order == ["cpu-before", "sleeper-woke", ("cpu-after", True)], order


def test_critical_section_holds_the_request_until_the_outermost_exit(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        with morpheus.critical():
            assert region.get(0, S.IN_CRITICAL) == 1
            with morpheus.critical():
                region.bump(0)
                assert morpheus.checkpoint() is False
                assert morpheus.critical_depth() == 2
            assert region.get(0, S.IN_CRITICAL) == 1
            assert morpheus.checkpoint() is False
        assert region.get(0, S.IN_CRITICAL) == 0
        assert region.get(0, S.LAST_ACK_SEQ) == 0
        assert morpheus.checkpoint() is True


def test_critical_decorators_sync_and_async(region):
    @morpheus.critical
    def sync_section():
        return region.get(0, S.IN_CRITICAL), morpheus.critical_depth()

    @morpheus.critical()
    async def async_section():
        await asyncio.sleep(0)
        return region.get(0, S.IN_CRITICAL)

    @morpheus.critical
    def raises():
        raise KeyError("boom")

    with morpheus.Worker(region=str(region.path), slot=0):
        assert sync_section() == (1, 1)
        assert asyncio.run(async_section()) == 1
        with pytest.raises(KeyError):
            raises()
        assert morpheus.critical_depth() == 0 and region.get(0, S.IN_CRITICAL) == 0


def test_unbalanced_exit_is_an_error_and_writes_nothing(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        region.put(0, S.IN_CRITICAL, 1)  # a stray store of 0 would show
        with pytest.raises(morpheus.NotInCriticalError, match="depth 0"):
            morpheus._morpheus.critical_exit()
        assert region.get(0, S.IN_CRITICAL) == 1
        region.put(0, S.IN_CRITICAL, 0)


def test_detached_checkpoints_and_critical_sections_work():
    assert morpheus.checkpoint() is False  # no worker at all: the static zeroed SCB
    with morpheus.critical():
        assert morpheus.critical_depth() == 1
    with pytest.raises(morpheus.NotInCriticalError):
        morpheus._morpheus.critical_exit()

    async def main():
        tick = morpheus.Ticker(2)
        results = [await tick for _ in range(4)]
        results.append(await morpheus.checkpoint_async())
        return results

    assert asyncio.run(main()) == [None] * 5


def test_ticker_checkpoints_every_nth_call(region):
    with morpheus.Worker(region=str(region.path), slot=0):
        tick = morpheus.Ticker(every=3)
        region.bump(0)
        assert [tick.tick() for _ in range(3)] == [False, False, True]
        assert tick.every == 3

        async def main():
            region.bump(0)
            return [await tick for _ in range(3)]

        assert asyncio.run(main()) == [None, None, True]


def test_aio_run_registers_the_loop_thread(region):
    async def main():
        w = morpheus.current_worker()
        async for _ in morpheus.aio.checkpointed(range(10), every=4):
            pass
        return w.slot

    assert morpheus.aio.run(main(), region=str(region.path), slot=1) == 1
    assert morpheus.current_worker() is None
    assert region.get(1, S.WORKER_STATE) == abi.WorkerState.INIT
    with pytest.raises(TypeError, match="expects a coroutine"):
        morpheus.aio.run(lambda: None)
