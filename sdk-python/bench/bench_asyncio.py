#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""CPU-bound asyncio tasks: blocking vs naive sleep(0) yields vs Morpheus checkpoints.

One event loop (one worker thread) runs W CPU-bound tasks for D seconds per cell, plus a latency
probe task that sleeps 5-15 ms at random and records how late it wakes. Modes:

  blocking  no yields at all
  naive     await asyncio.sleep(0) every 1,000 iterations
  morpheus  await morpheus.checkpoint_async() every 1,000 iterations (the loop thread registered)
  idle      no work (only with --modes idle,...): the probe alone, the timer floor of this machine

The loop thread registers with the scheduler agent (--socket; the region comes with its reply: bench/run.sh starts the real
`scx_morpheus --backend sim`); whether the scheduler asks (pressure) depends on how it was started.
Also reports the per-call cost of the checkpoint fast paths beside a no-op call into a C extension
(timeit, same process), as ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import time
import timeit

import morpheus

ITERATIONS_PER_YIELD = 1000
PROBE_SEED = 20261122


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


async def task_idle(end: float, counts: list, i: int) -> None:
    # No work at all: the probe alone measures how late the loop's timers fire on this machine (the
    # clock, the kernel's timers, the interpreter), the floor the other cells are read against.
    await asyncio.sleep(max(0.0, end - time.perf_counter()))
    counts[i] = 0


TASKS = {"idle": task_idle, "blocking": task_blocking, "naive": task_naive, "morpheus": task_morpheus}


async def probe(end: float, delays: list) -> None:
    # Sleeps of 5-15 ms (mean 10), not a fixed 10 ms: a fixed sleep armed right after a yield falls
    # at the same phase of the yield cadence every time and measures one point of it (every sample
    # equal), not the distribution. Seeded, so every cell sees the same sequence.
    rng = random.Random(PROBE_SEED)
    while True:
        target = time.perf_counter() + rng.uniform(0.005, 0.015)
        if target > end:
            return
        await asyncio.sleep(target - time.perf_counter())
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
    # A C-extension function that does nothing but return a bool, called like morpheus.checkpoint().
    noop = gc.isenabled

    def best(stmt, glb):
        return min(timeit.repeat(stmt, globals=glb, number=number, repeat=5)) / number * 1e9

    base_loop = best("for _ in r: pass", {"r": range(1000)}) / 1000
    c_call = best("f()", {"f": noop})
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
    parser.add_argument("--region", help="region to register in (default: detached)")
    parser.add_argument("--socket", help="the scheduler agent's socket (default: direct registration of --slot)")
    parser.add_argument("--slot", type=int, default=0)
    parser.add_argument("--scheduler", default="", help="how the scheduler was started (recorded in the results)")
    parser.add_argument("--calls", type=int, default=1_000_000, help="calls per timeit sample (0: skip)")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()

    if args.socket:
        worker = morpheus.Worker(region=args.region, socket=args.socket)
    elif args.region:
        worker = morpheus.Worker(region=args.region, slot=args.slot)
    else:
        worker = morpheus.Worker(detached=True)
    region = worker.region
    info = {"python": sys.version.split()[0], "loop": "uvloop" if args.uvloop else "asyncio",
            "attached": worker.attached, "slot": worker.slot, "cpus": os.cpu_count(),
            "registration": "agent" if args.socket else ("direct" if args.region else "detached"),
            "scheduler": args.scheduler,
            "slice_ms": region.slice_ns / 1e6 if region else None,
            "grace_ms": region.grace_ns / 1e6 if region else None,
            "seconds_per_cell": args.seconds, "probe_sleep_ms": [5, 15], "repeat": args.repeat, "loadavg_before": os.getloadavg()}
    if args.uvloop:
        import uvloop
        new_loop = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    worker_counts = [int(w) for w in args.workers.split(",")]
    modes = args.modes.split(",")
    # Rounds outermost: each round runs every mode back to back for each worker count, so the modes
    # of one round see the same machine load; ratios are taken within a round, then the median.
    raw = {(w, m): [] for w in worker_counts for m in modes}
    for round_no in range(args.repeat):
        for workers in worker_counts:
            for mode in modes:
                loop = new_loop()
                try:
                    run = loop.run_until_complete(cell(mode, workers, args.seconds))
                finally:
                    loop.close()
                raw[(workers, mode)].append(run)
                print(json.dumps(dict(run, round=round_no)), flush=True)
    results = []
    for workers in worker_counts:
        for mode in modes:
            runs = raw[(workers, mode)]
            ups = [r["units_per_s"] for r in runs]
            p99s = [r["probe_p99_ms"] for r in runs if r["probe_p99_ms"] is not None]
            p50s = [r["probe_p50_ms"] for r in runs if r["probe_p50_ms"] is not None]
            out = {"mode": mode, "workers": workers, "units_per_s_runs": ups,
                   "units_per_s_median": statistics.median(ups),
                   "probe_p50_ms_median": statistics.median(p50s) if p50s else None,
                   "probe_p99_ms_median": statistics.median(p99s) if p99s else None,
                   "probe_p99_ms_runs": [r["probe_p99_ms"] for r in runs],
                   "probe_samples_runs": [r["probe_samples"] for r in runs]}
            for base in ("blocking", "naive"):
                if base != mode and mode != "idle" and (workers, base) in raw:
                    ratios = [a / b for a, b in zip(ups, (r["units_per_s"] for r in raw[(workers, base)]))]
                    out[f"over_{base}_runs"] = ratios
                    out[f"over_{base}_median"] = statistics.median(ratios)
            results.append(out)
    costs = per_call_costs(args.calls) if args.calls else None
    if costs:
        print(json.dumps(costs), flush=True)
    info["yields"] = worker.yield_counts()
    info["loadavg_after"] = os.getloadavg()
    try:
        worker.close()
    except morpheus.MorpheusError as err:
        # scx_morpheus drops a registration connection idle for 5 s, so the UNREGISTER of a worker
        # that lived longer fails; the agent reclaims the slot when the thread is gone. Reported, not hidden.
        info["close_error"] = str(err)
        print(f"bench: worker.close(): {err}", file=sys.stderr)
    out = {"info": info, "cells": results, "per_call": costs}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
