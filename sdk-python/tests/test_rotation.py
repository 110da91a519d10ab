# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The rotation of an event loop's tasks (spec/SCB.md §5.7), with the test playing the scheduler on a
region file: one task steps aside per request, the yielder goes to the back, the tasks made ready
during a yield take their first steps before a CPU-bound task resumes, and nobody waits forever.
Every verdict counts steps and turns; none depends on time (turns are measured with a clock the test
advances per unit of work, see `turn_clock`)."""

from __future__ import annotations

import asyncio
import math
import os

import pytest

import morpheus
from conftest import abi

S = abi.Scb
PASSES = morpheus._morpheus.YIELD_PASSES


def _loop_factories():
    factories = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:
        if os.environ.get("MORPHEUS_REQUIRE_UVLOOP"):
            raise
    else:
        factories.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    return factories


def _run(loop_factory, coro):
    loop = loop_factory()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture(autouse=True)
def turn_clock():
    """Turns are measured with a clock the test owns (it stands still unless a Scheduler advances it
    by one unit's worth), not with the thread's CPU time: which task the rotation resumes weighs run
    times, and a verdict must not depend on how fast this machine ran each unit."""
    morpheus._morpheus._set_turn_clock(0)
    yield
    morpheus._morpheus._set_turn_clock(None)


class Scheduler:
    """Asks for a yield after every `units_per_slice` units of work, counted across all tasks; each
    unit costs UNIT_NS on the turn clock, and the region's slice is that many units, as a scheduler
    publishes it. (A turn the rotation gives also ends after one slice of the clock; with requests on
    time, the request always comes first.) With `ask=False` it never asks: only the clock ends turns."""

    UNIT_NS = 1_000_000

    def __init__(self, region, units_per_slice, ask=True):
        self.region = region
        self.units_per_slice = units_per_slice
        self.ask = ask
        self.units = 0
        self.requests = 0
        region.put_header(abi.RegionHeader.SLICE_NS, units_per_slice * self.UNIT_NS)

    def unit_done(self):
        self.units += 1
        morpheus._morpheus._set_turn_clock(self.units * self.UNIT_NS)
        if self.ask and self.units % self.units_per_slice == 0:
            self.region.bump(0)
            self.requests += 1


@pytest.mark.parametrize("loop_factory", _loop_factories())
@pytest.mark.parametrize("tasks", [2, 4, 8])
def test_cpu_bound_tasks_take_turns_of_one_request_each(region, loop_factory, tasks):
    sched = Scheduler(region, units_per_slice=40)
    progress = [0] * tasks
    runs = []  # which task ran each unit, to read the turns back
    requests_wanted = 20 * tasks

    async def cpu_bound(i):
        while sched.requests < requests_wanted:
            progress[i] += 1
            runs.append(i)
            sched.unit_done()
            await morpheus.checkpoint_async()

    async def main():
        await asyncio.gather(*(cpu_bound(i) for i in range(tasks)))

    with morpheus.Worker(region=str(region.path), slot=0) as w:
        _run(loop_factory, main())
        yields = w.yield_counts()["PREEMPT_REQUEST"]
    # Turns: maximal runs of one task. Each is one whole slice (the tasks that ran during a yield did
    # not step aside for its request). Which task goes next weighs the run time of the turns, so the
    # order is not asserted; what it is for is: equal progress.
    turns = []
    for i in runs:
        if not turns or turns[-1][0] != i:
            turns.append([i, 0])
        turns[-1][1] += 1
    # The first round: task 0 runs a slice, the others (made ready before it) take their first step
    # during its yield, one unit each up to their first checkpoint, then step aside.
    assert [length for _, length in turns[1:tasks]] == [1] * (tasks - 1), turns[:12]
    assert all(length % sched.units_per_slice == 0 for _, length in turns[tasks + 1:-1]), turns[:12]
    assert min(progress) / max(progress) >= 0.8, progress
    # One task steps aside per request.
    assert yields == sched.requests, (yields, sched.requests)


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_tasks_made_ready_during_a_yield_step_before_the_next_cpu_bound_turn(region, loop_factory):
    order = []
    sched = Scheduler(region, units_per_slice=10)

    async def light(name):
        order.append(f"{name}-step1")
        await asyncio.sleep(0)
        order.append(f"{name}-step2")
        await asyncio.sleep(0)
        order.append(f"{name}-step3")

    async def cpu_bound(name):
        for unit in range(60):
            if name == "a" and unit == 25:
                # In a's second turn (b waits in the rotation): a request arrives, queued behind a
                # as an accepted connection's handler is.
                asyncio.get_running_loop().call_soon(asyncio.ensure_future, light("light"))
                order.append("spawned")
            order.append(name)
            sched.unit_done()
            await morpheus.checkpoint_async()

    async def main():
        await asyncio.gather(cpu_bound("a"), cpu_bound("b"))

    with morpheus.Worker(region=str(region.path), slot=0):
        _run(loop_factory, main())
    spawned = order.index("spawned")
    assert order[spawned - 1] == "a" and "b" in order[:spawned], order[:spawned + 1]
    next_b = order.index("b", spawned)
    # a's next yield: the light task takes all three steps (three passes of the yield) before b's
    # turn begins, and none before a yields.
    first_light = order.index("light-step1")
    assert set(order[spawned + 1:first_light]) == {"a"}, order[spawned:next_b + 1]
    assert order[next_b - 3:next_b] == ["light-step1", "light-step2", "light-step3"], order[spawned:next_b + 1]


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_a_turn_given_back_without_a_yield_passes_to_the_next_task(region, loop_factory):
    # Requests stop (the scheduler went idle): waiting tasks must not be stranded.
    done = []

    async def cpu_bound(name, units):
        for unit in range(units):
            if name == "a" and unit == 0:
                region.bump(0)  # the only request
            await morpheus.checkpoint_async()
        done.append(name)

    async def main():
        await asyncio.wait_for(asyncio.gather(cpu_bound("a", 5), cpu_bound("b", 5), cpu_bound("c", 5)), 60)

    with morpheus.Worker(region=str(region.path), slot=0):
        _run(loop_factory, main())
    assert sorted(done) == ["a", "b", "c"]


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_a_cancelled_waiter_is_skipped(region, loop_factory):
    errors = []

    async def steps_aside():
        return await morpheus.checkpoint_async()

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        region.bump(0)
        first = asyncio.ensure_future(steps_aside())
        await asyncio.sleep(0)  # first yields for the request and waits in the rotation
        first.cancel()
        region.bump(0)
        second = await asyncio.wait_for(morpheus.checkpoint_async(), 60)  # behind the cancelled one
        return first.cancelled(), second

    with morpheus.Worker(region=str(region.path), slot=0):
        assert _run(loop_factory, main()) == (True, True)
    assert errors == []


def _timed_turns(region, loop_factory, busy_loop):
    """One request starts the rotation of a and b; after it the scheduler is silent (it measures CPU
    time, and a loaded machine stretches a slice of CPU into many slices of wall time). A light task
    is queued during a's turn; with `busy_loop`, another task is ready at every pass of the loop."""
    sched = Scheduler(region, units_per_slice=10, ask=False)
    order = []
    done = []

    async def light():
        order.append("light")

    async def ticker():
        while len(done) < 2:
            await asyncio.sleep(0)

    async def cpu_bound(name, units):
        for unit in range(units):
            if name == "a" and unit == 35:
                asyncio.get_running_loop().call_soon(asyncio.ensure_future, light())
                order.append("spawned")
            order.append(name)
            sched.unit_done()
            if name == "a" and unit == 0:
                region.bump(0)  # the only request
            await morpheus.checkpoint_async()
        done.append(name)

    async def main():
        await asyncio.gather(cpu_bound("a", 60), cpu_bound("b", 60), *([ticker()] if busy_loop else []))

    with morpheus.Worker(region=str(region.path), slot=0) as w:
        _run(loop_factory, main())
        assert w.yield_counts()["PREEMPT_REQUEST"] == 1
    turns = []
    for name in (n for n in order if n in ("a", "b")):
        if not turns or turns[-1][0] != name:
            turns.append([name, 0])
        turns[-1][1] += 1
    spawned, ran = order.index("spawned"), order.index("light")
    # The light task, made ready during a's turn, runs when that turn ends, before b's.
    assert set(order[spawned + 1:ran]) == {"a"}, order[spawned:ran + 1]
    assert order[ran + 1] == "b", order[spawned:ran + 2]
    return turns


def _units_between_looks(loop_factory):
    """A timed turn ends (uvloop) or looks for work (asyncio) this many units after it began."""
    looks = morpheus._morpheus.LOOKS_PER_SLICE if loop_factory is asyncio.new_event_loop else 1
    return math.ceil(10 / looks)  # the slice is 10 units (Scheduler above)


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_a_turn_ends_after_one_slice_of_the_clock_without_a_request(region, loop_factory):
    turns = _timed_turns(region, loop_factory, busy_loop=True)
    # a yields for the request after one unit, b takes its first step and steps aside, then each
    # turn lasts until the clock ends it: one slice (10 units) on uvloop; on asyncio, which looks
    # for other work LOOKS_PER_SLICE times per slice, the first look (the ticker is always ready).
    every = _units_between_looks(loop_factory)
    assert turns[:3] == [["a", 1], ["b", 1], ["a", every]], turns
    assert all(length == every for _, length in turns[2:-2]), turns


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_a_contended_timed_turn_lasts_its_slice_whatever_the_looks(region, loop_factory):
    turns = _timed_turns(region, loop_factory, busy_loop=False)
    # b waits in the rotation during a's turn, and the loop has nothing else to run. asyncio's looks
    # within the slice end a turn only for the loop's own work, never for b; at the slice's end the
    # waiting b ends it (the kit's rule, §5.7). So every turn lasts one slice (10 units) on both loops.
    assert turns[:4] == [["a", 1], ["b", 1], ["a", 10], ["b", 10]], turns


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_an_uncontended_timed_turn_carries_on_while_the_loop_has_nothing_else_to_run(region, loop_factory):
    # One CPU-bound task, so nobody waits in the rotation: on asyncio, which shows its queue, timers
    # and poll, its turn goes past every look and slice that finds nothing else to run, and ends at
    # the first look after a light task was queued (unit 35); uvloop shows none of them, so its
    # timed turns end every slice.
    sched = Scheduler(region, units_per_slice=10, ask=False)
    order = []

    async def light():
        order.append("light")

    async def cpu_bound():
        for unit in range(60):
            if unit == 35:
                asyncio.get_running_loop().call_soon(asyncio.ensure_future, light())
                order.append("spawned")
            order.append("a")
            sched.unit_done()
            if unit == 0:
                region.bump(0)  # the only request
            step = morpheus.checkpoint_async()
            if isinstance(step, morpheus._morpheus.PendingCheckpoint):
                order.append("aside")  # a yield or a step aside: the task waits for its turn
            await step

    with morpheus.Worker(region=str(region.path), slot=0):
        _run(loop_factory, cpu_bound())
    spawned, ran = order.index("spawned"), order.index("light")
    between = order[spawned + 1:ran].count("a")
    asides = order[:spawned].count("aside")
    if loop_factory is asyncio.new_event_loop:
        assert asides == 1, order[:spawned]  # the yield for the request only
        assert 1 <= between <= _units_between_looks(loop_factory), order[spawned:ran + 1]
    else:
        assert asides > 1, order[:spawned]
        assert 1 <= between <= 10, order[spawned:ran + 1]


@pytest.mark.parametrize("loop_factory", _loop_factories())
def test_a_task_inside_a_critical_section_does_not_step_aside_during_a_yield(region, loop_factory):
    # A critical section holds every yield (§5.3), a step aside during another task's yield too: b's
    # first five units each end at a checkpoint inside a section, so its first step lasts until the
    # checkpoint after the sections, six units, instead of ending at its first checkpoint.
    sched = Scheduler(region, units_per_slice=40)
    runs = []

    async def unit(name):
        runs.append(name)
        sched.unit_done()
        await morpheus.checkpoint_async()

    async def cpu_bound(name, section_units):
        done = 0
        while sched.requests < 3:
            if done < section_units:
                with morpheus.critical():
                    await unit(name)
            else:
                await unit(name)
            done += 1

    async def main():
        await asyncio.gather(cpu_bound("a", 0), cpu_bound("b", 5))

    with morpheus.Worker(region=str(region.path), slot=0):
        _run(loop_factory, main())
    turns = []
    for name in runs:
        if not turns or turns[-1][0] != name:
            turns.append([name, 0])
        turns[-1][1] += 1
    assert turns[:2] == [["a", 40], ["b", 6]], turns[:4]
