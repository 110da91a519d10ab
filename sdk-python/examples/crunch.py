# SPDX-License-Identifier: Apache-2.0 OR MIT
"""A CPU-bound asyncio program that stays responsive: checkpoints every 1,000 iterations.

    python examples/crunch.py            # detached unless a scheduler is running
    python -m morpheus.run examples/crunch.py
"""

import asyncio
import time

import morpheus
import morpheus.aio


async def crunch(n: int) -> int:
    tick = morpheus.Ticker(every=1000)
    x = 0
    for i in range(n):
        x = (x * 1103515245 + i) & 0xFFFFFFFF
        await tick
    return x


async def heartbeat(stop: asyncio.Event) -> int:
    beats = 0
    while not stop.is_set():
        await asyncio.sleep(0.01)
        beats += 1
    return beats


async def main() -> None:
    stop = asyncio.Event()
    beat = asyncio.ensure_future(heartbeat(stop))
    start = time.perf_counter()
    results = await asyncio.gather(*(crunch(200_000) for _ in range(4)))
    stop.set()
    worker = morpheus.current_worker()
    print(f"crunched {len(results)} x 200000 in {time.perf_counter() - start:.2f}s; "
          f"heartbeats {await beat}; worker {'attached' if worker and worker.attached else 'detached'}")


if __name__ == "__main__":
    if morpheus.current_worker() is None:
        morpheus.aio.run(main())
    else:  # under `python -m morpheus.run`: the main thread is already a worker
        asyncio.run(main())
