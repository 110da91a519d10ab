# SPDX-License-Identifier: Apache-2.0 OR MIT
"""An aiohttp service under mixed load, driven over loopback: heavy requests (CPU-bound, a yield
point every unit of work) beside light ones, with the heavy loop yielding by `await asyncio.sleep(0)`
(the naive yield) or by `await morpheus.checkpoint_async()`, in the same run.

    python bench/service.py serve --mode {sleep0,morpheus} --socket AGENT_SOCKET
        the service: prints its port, then serves until killed. Its loop thread is registered with
        the agent in both modes (morpheus.aio.run), so the only difference is the yield.
    python bench/service.py drive --socket AGENT_SOCKET [--seconds S] [--rounds R] [--json OUT]
        per round, for each mode: starts the service, runs two closed-loop heavy clients and light
        requests at a fixed rate (open loop) for S seconds, and records light latency and heavy
        throughput. Prints a markdown table with the ratios of morpheus to sleep(0) within each round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

UNIT_SPIN = 3000  # one unit of heavy work: ~0.1 ms of CPU in CPython
HEAVY_UNITS = 2000  # one heavy request: ~0.2 s of CPU
LIGHT_RATE = 50.0  # light requests per second (open loop)
HEAVY_CLIENTS = 2


def _unit():
    x = 0
    for i in range(UNIT_SPIN):
        x += i
    return x


# ------------------------------------------------------------------------------------------------
# The service


def serve(mode: str, socket_path: str) -> None:
    from aiohttp import web

    import morpheus
    import morpheus.aio

    if mode == "sleep0":
        async def yield_point():
            await asyncio.sleep(0)
    else:
        yield_point = morpheus.checkpoint_async

    async def heavy(request):
        for _ in range(HEAVY_UNITS):
            _unit()
            await yield_point()
        return web.Response(text="heavy")

    async def light(request):
        return web.Response(text="light")

    async def stats(request):
        w = morpheus.current_worker()
        return web.json_response({"attached": w.attached, "yields": w.yield_counts(), "cpu_s": time.process_time()})

    async def main():
        app = web.Application()
        app.router.add_get("/heavy", heavy)
        app.router.add_get("/light", light)
        app.router.add_get("/stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    morpheus.aio.run(main(), socket=socket_path)


# ------------------------------------------------------------------------------------------------
# The driver


async def _load(port: int, seconds: float) -> dict:
    import aiohttp

    base = f"http://127.0.0.1:{port}"
    light_ms = []
    heavy_done = 0
    heavy_served = 0
    errors = 0
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/light") as r:  # warm the connection pool
            await r.read()
        async with session.get(f"{base}/stats") as r:
            cpu_start = (await r.json())["cpu_s"]
        start = time.monotonic()
        end = start + seconds

        async def heavy_client():
            nonlocal heavy_done, heavy_served, errors
            while time.monotonic() < end:
                try:
                    async with session.get(f"{base}/heavy") as r:
                        await r.read()
                        if r.status == 200:
                            heavy_served += 1  # the CPU read at the end paid for these, late or not
                        if r.status == 200 and time.monotonic() <= end:
                            heavy_done += 1
                except aiohttp.ClientError:
                    errors += 1

        async def one_light():
            nonlocal errors
            sent = time.monotonic()
            try:
                async with session.get(f"{base}/light") as r:
                    await r.read()
                light_ms.append((time.monotonic() - sent) * 1000)
            except aiohttp.ClientError:
                errors += 1

        heavies = [asyncio.ensure_future(heavy_client()) for _ in range(HEAVY_CLIENTS)]
        lights = []
        k = 0
        while True:
            due = start + k / LIGHT_RATE
            if due >= end:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            lights.append(asyncio.ensure_future(one_light()))
            k += 1
        await asyncio.gather(*lights)
        await asyncio.gather(*heavies)
        async with session.get(f"{base}/stats") as r:
            stats = await r.json()
    light_ms.sort()
    pick = lambda q: light_ms[min(len(light_ms) - 1, int(q * len(light_ms)))] if light_ms else float("nan")
    return {
        "light_p50_ms": pick(0.50),
        "light_p99_ms": pick(0.99),
        "light_samples": len(light_ms),
        "heavy_per_s": heavy_done / seconds,
        # What the host's other load cannot move: heavy requests per second of the service's CPU.
        "heavy_per_cpu_s": heavy_served / max(1e-9, stats["cpu_s"] - cpu_start),
        "errors": errors,
        "yields": stats["yields"],
        "attached": stats["attached"],
    }


def _run_mode(mode: str, socket_path: str, seconds: float) -> dict:
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "serve", "--mode", mode, "--socket", socket_path],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        port = int(proc.stdout.readline())
        return asyncio.run(_load(port, seconds))
    finally:
        proc.kill()
        proc.wait()


def drive(socket_path: str, seconds: float, rounds: int, out: str | None) -> None:
    results = []
    for r in range(rounds):
        pair = {mode: _run_mode(mode, socket_path, seconds) for mode in ("sleep0", "morpheus")}
        results.append(pair)
        print(f"round {r + 1}: {json.dumps(pair)}", file=sys.stderr, flush=True)
    if out:
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "rounds": results}, f, indent=1)
    print(table(results, seconds))


def table(results: list, seconds: float) -> str:
    def med(mode, key):
        return statistics.median(r[mode][key] for r in results)

    def ratio(key):
        values = [r["morpheus"][key] / r["sleep0"][key] for r in results]
        return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"

    lines = [
        f"aiohttp service over loopback: {HEAVY_CLIENTS} closed-loop heavy clients (~{HEAVY_UNITS * UNIT_SPIN // 1000}k "
        f"additions of CPU each, a yield point per {UNIT_SPIN} additions) and {LIGHT_RATE:.0f} light requests/s; "
        f"{len(results)} rounds x {seconds:.0f} s per mode; medians of rounds",
        "",
        "| heavy loop yields by | light p50 ms | light p99 ms | heavy req/s | heavy req per CPU-s | errors |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, name in (("sleep0", "`await asyncio.sleep(0)`"), ("morpheus", "`await morpheus.checkpoint_async()`")):
        errors = sum(r[mode]["errors"] for r in results)
        lines.append(
            f"| {name} | {med(mode, 'light_p50_ms'):.1f} | {med(mode, 'light_p99_ms'):.1f} | "
            f"{med(mode, 'heavy_per_s'):.2f} | {med(mode, 'heavy_per_cpu_s'):.2f} | {errors} |"
        )
    lines += [
        "",
        "| morpheus ÷ sleep(0), same round: median (min–max) | |",
        "|---|---:|",
        f"| light p99 (target ≤ 1.5) | {ratio('light_p99_ms')} |",
        f"| heavy req/s (target ≥ 1.0) | {ratio('heavy_per_s')} |",
        f"| heavy requests per CPU-second of the service (the yields' cost, whatever CPU the host left it) | {ratio('heavy_per_cpu_s')} |",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--mode", choices=["sleep0", "morpheus"], required=True)
    s.add_argument("--socket", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--socket", required=True)
    d.add_argument("--seconds", type=float, default=10.0)
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--json")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.mode, args.socket)
    else:
        drive(args.socket, args.seconds, args.rounds, args.json)


if __name__ == "__main__":
    main()
