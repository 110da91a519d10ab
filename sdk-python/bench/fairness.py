# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Fairness between CPU-bound tasks of one event loop, registered with the agent (AGENT_SOCKET):
for 2, 4 and 8 tasks, each mode runs for S seconds of wall time and the table gives slowest ÷
fastest task progress (units of work) in that run, `await asyncio.sleep(0)` and
`await morpheus.checkpoint_async()` side by side in each round.

    python bench/fairness.py --socket AGENT_SOCKET [--seconds S] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import morpheus
import morpheus.aio


def _unit():
    x = 0
    for i in range(1000):
        x += i
    return x


async def _run(tasks: int, mode: str, seconds: float) -> float:
    progress = [0] * tasks
    end = time.monotonic() + seconds
    if mode == "sleep0":
        async def yield_point():
            await asyncio.sleep(0)
    else:
        yield_point = morpheus.checkpoint_async

    async def cpu_bound(i):
        while time.monotonic() < end:
            _unit()
            progress[i] += 1
            await yield_point()

    await asyncio.gather(*(cpu_bound(i) for i in range(tasks)))
    return min(progress) / max(progress)


async def _all(seconds: float, rounds: int) -> dict:
    results = {n: {"sleep0": [], "morpheus": []} for n in (2, 4, 8)}
    for _ in range(rounds):
        for n in results:
            for mode in ("sleep0", "morpheus"):
                results[n][mode].append(await _run(n, mode, seconds))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = morpheus.aio.run(_all(args.seconds, args.rounds), socket=args.socket)
    spread = lambda v: f"{statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f})"
    print(f"fairness: slowest ÷ fastest task progress in the same run (target ≥ 0.8); {args.rounds} rounds x "
          f"{args.seconds:.0f} s per cell; median (min–max) of rounds")
    print()
    print("| CPU-bound tasks | `await asyncio.sleep(0)` | `await morpheus.checkpoint_async()` |")
    print("|---:|---:|---:|")
    for n, by_mode in results.items():
        print(f"| {n} | {spread(by_mode['sleep0'])} | {spread(by_mode['morpheus'])} |")


if __name__ == "__main__":
    main()
