#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""CPU-bound asyncio tasks: blocking vs naive sleep(0) yields vs Morpheus checkpoints.

One event loop (one worker thread) runs W CPU-bound tasks for D seconds per cell, plus a latency
probe task that sleeps 10 ms and records how late it wakes. Modes:

  blocking  no yields at all
  naive     await asyncio.sleep(0) every 1,000 iterations
  morpheus  await morpheus.checkpoint_async() every 1,000 iterations (the loop thread registered)

Pressure: --pressure runs a scheduler stand-in process (bench/sim_scheduler.py) that bumps the
worker's preempt_seq after each slice of CPU time without an acknowledgement, as spec/SCB.md §5.2
says; without it the region is attached and idle (no pressure). Also reports the per-call cost of
the checkpoint fast paths beside a no-op C call (timeit), as ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import timeit

import morpheus

ITERATIONS_PER_YIELD = 1000


def unit(x: int) -> int:
    return (x * 1103515245 + 12345) & 0xFFFFFFFF


async def task_blocking(end: float, counts: list, i: int) -> None:
    n = 0
    x = i
    clock = time.perf_counter
    while clock() < end:
        for _ in range(ITERATIONS_PER_YIELD):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        n += ITERATIONS_PER_YIELD
    counts[i] = n


async def task_naive(end: float, counts: list, i: int) -> None:
    n = 0
    x = i
    clock = time.perf_counter
    sleep = asyncio.sleep
    while clock() < end:
        for _ in range(ITERATIONS_PER_YIELD):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        n += ITERATIONS_PER_YIELD
        await sleep(0)
    counts[i] = n


async def task_morpheus(end: float, counts: list, i: int) -> None:
    n = 0
    x = i
    clock = time.perf_counter
    checkpoint = morpheus.checkpoint_async
    while clock() < end:
        for _ in range(ITERATIONS_PER_YIELD):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        n += ITERATIONS_PER_YIELD
        await checkpoint()
    counts[i] = n


TASKS = {"blocking": task_blocking, "naive": task_naive, "morpheus": task_morpheus}


async def probe(end: float, delays: list) -> None:
    while True:
        target = time.perf_counter() + 0.010
        if target > end:
            return
        await asyncio.sleep(0.010)
        delays.append(time.perf_counter() - target)


async def cell(mode: str, workers: int, seconds: float) -> dict:
    counts = [0] * workers
    delays: list = []
    start = time.perf_counter()
    end = start + seconds
    probe_task = asyncio.ensure_future(probe(end, delays))
    await asyncio.sleep(0)  # the probe arms its first sleep before the workers start
    await asyncio.gather(*(TASKS[mode](end, counts, i) for i in range(workers)))
    elapsed = time.perf_counter() - start
    probe_task.cancel()
    try:
        await probe_task
    except asyncio.CancelledError:
        pass
    delays_ms = sorted(d * 1000 for d in delays)

    def pct(p: float) -> float | None:
        if not delays_ms:
            return None
        return delays_ms[min(len(delays_ms) - 1, int(p * len(delays_ms)))]

    return {
        "mode": mode, "workers": workers, "seconds": elapsed,
        "units_per_s": sum(counts) / elapsed, "probe_samples": len(delays_ms),
        "probe_p50_ms": pct(0.50), "probe_p99_ms": pct(0.99),
    }


def per_call_costs(number: int) -> dict:
    """Fast-path cost of the checkpoints beside a no-op C call, same process, same run."""
    noop = len  # a C function doing almost nothing: the cost of one C-extension call
    arg = ()

    def best(stmt, glb):
        return min(timeit.repeat(stmt, globals=glb, number=number, repeat=5)) / number * 1e9

    base_loop = best("for _ in r: pass", {"r": range(1000)}) / 1000
    c_call = best("f(a)", {"f": noop, "a": arg})
    sync = best("f()", {"f": morpheus.checkpoint})

    async def awaits(k: int, f) -> float:
        t = time.perf_counter()
        for _ in range(k):
            await f()
        return time.perf_counter() - t

    async def loop_only(k: int) -> float:
        t = time.perf_counter()
        for _ in range(k):
            pass
        return time.perf_counter() - t

    loop = asyncio.new_event_loop()
    try:
        k = number
        a = min(loop.run_until_complete(awaits(k, morpheus.checkpoint_async)) for _ in range(5))
        base = min(loop.run_until_complete(loop_only(k)) for _ in range(5))
        s0 = min(loop.run_until_complete(awaits(k // 10, asyncio.sleep0 if hasattr(asyncio, "sleep0") else _sleep0)) for _ in range(3))
    finally:
        loop.close()
    async_ns = (a - base) / k * 1e9
    sleep0_ns = (s0 - base / 10) / (k // 10) * 1e9
    return {
        "noop_c_call_ns": c_call, "checkpoint_sync_ns": sync, "checkpoint_async_await_ns": async_ns,
        "sleep0_await_ns": sleep0_ns, "loop_overhead_ns": base_loop,
        "sync_over_noop": sync / c_call, "async_over_noop": async_ns / c_call,
    }


def _sleep0():
    return asyncio.sleep(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per cell (default 3)")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--modes", default="blocking,naive,morpheus")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (median reported, spread shown)")
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--region", help="region file to register in (default: detached)")
    parser.add_argument("--slot", type=int, default=0)
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls per timeit sample")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()

    worker = morpheus.Worker(region=args.region, slot=args.slot) if args.region else morpheus.Worker(detached=True)
    info = {"python": sys.version.split()[0], "loop": "uvloop" if args.uvloop else "asyncio",
            "attached": worker.attached, "slot": worker.slot, "cpus": os.cpu_count(),
            "seconds_per_cell": args.seconds, "repeat": args.repeat}
    if args.uvloop:
        import uvloop
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    results = []
    for workers in [int(w) for w in args.workers.split(",")]:
        for mode in args.modes.split(","):
            runs = []
            for _ in range(args.repeat):
                loop = new_loop()
                try:
                    runs.append(loop.run_until_complete(cell(mode, workers, args.seconds)))
                finally:
                    loop.close()
            ups = [r["units_per_s"] for r in runs]
            best = sorted(runs, key=lambda r: r["units_per_s"])[len(runs) // 2]
            best = dict(best, units_per_s_runs=ups)
            results.append(best)
            print(json.dumps(best), flush=True)
    costs = per_call_costs(args.calls)
    print(json.dumps(costs), flush=True)
    info["yields"] = worker.yield_counts()
    worker.close()
    out = {"info": info, "cells": results, "per_call": costs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
