# SPDX-License-Identifier: Apache-2.0 OR MIT
"""An aiohttp service under mixed load, driven over loopback: heavy requests (CPU-bound, a yield
point every unit of work) beside light ones, with the heavy loop yielding by `await asyncio.sleep(0)`
(the naive yield) or by `await morpheus.checkpoint_async()`, in the same run.

    python bench/service.py serve --mode {sleep0,morpheus} --socket AGENT_SOCKET
        the service: prints its port, then serves until killed. Its loop thread is registered with
        the agent in both modes (morpheus.aio.run), so the only difference is the yield.
    python bench/service.py drive --agent BACKEND=SOCKET [--agent ...] [--seconds S] [--rounds R] [--json OUT]
        per round, for each agent (backend) and mode: starts the service registered with that agent,
        runs two closed-loop heavy clients and light requests at a fixed rate (open loop) for S
        seconds, and records light latency and heavy throughput. Prints one line per round and a
        markdown table with the ratios of morpheus to sleep(0) within each round and backend.
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


MODES = ("sleep0", "morpheus")


def drive(agents: dict, seconds: float, rounds: int, out: str | None) -> None:
    """Per round, the 2 x len(agents) cells (each backend's agent with each yield) in an order rotated
    by one each round, so no cell always runs first or last; the ratios are within a round and a
    backend: morpheus ÷ sleep(0), both registered with that backend's agent."""
    cells = [(backend, mode) for backend in agents for mode in MODES]
    results = []
    for r in range(rounds):
        order = cells[r % len(cells):] + cells[:r % len(cells)]
        row = {backend: {} for backend in agents}
        for backend, mode in order:
            row[backend][mode] = _run_mode(mode, agents[backend], seconds)
            if not row[backend][mode]["attached"]:
                raise SystemExit(f"service.py: the service ({mode}) did not attach to the {backend} agent at {agents[backend]}")
        results.append(row)
        print(f"round {r + 1}: {json.dumps(row)}", file=sys.stderr, flush=True)
        print(f"round {r + 1}: " + "; ".join(
            f"{b}: light p99 {row[b]['sleep0']['light_p99_ms']:.1f} -> {row[b]['morpheus']['light_p99_ms']:.1f} ms "
            f"({row[b]['morpheus']['light_p99_ms'] / max(row[b]['sleep0']['light_p99_ms'], 1e-9):.2f}x), heavy req/s "
            f"{row[b]['sleep0']['heavy_per_s']:.2f} -> {row[b]['morpheus']['heavy_per_s']:.2f}" for b in agents), flush=True)
    if out:
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "backends": list(agents), "rounds": results}, f, indent=1)
    print()
    print(table(results, seconds, list(agents)))


def table(results: list, seconds: float, backends: list) -> str:
    def med(backend, mode, key):
        return statistics.median(r[backend][mode][key] for r in results)

    def ratios(backend, key):
        # A cell with no heavy request done in it (a starved host) has no ratio: nan, shown as such.
        return [r[backend]["morpheus"][key] / r[backend]["sleep0"][key] if r[backend]["sleep0"][key] else float("nan")
                for r in results]

    def spread(values):
        known = [v for v in values if v == v]
        if not known:
            return "no round with a ratio"
        nan = f", {len(values) - len(known)} rounds without a ratio" if len(known) < len(values) else ""
        return f"{statistics.median(known):.2f} [{min(known):.2f}–{max(known):.2f}]{nan}"

    lines = [
        f"aiohttp service over loopback: {HEAVY_CLIENTS} closed-loop heavy clients (~{HEAVY_UNITS * UNIT_SPIN // 1000}k "
        f"additions of CPU each, a yield point per {UNIT_SPIN} additions) and {LIGHT_RATE:.0f} light requests/s; "
        f"{len(results)} rounds x {seconds:.0f} s per cell, backends {' and '.join(backends)} in the same rounds; medians of rounds",
        "",
        "| backend | heavy loop yields by | light p50 ms | light p99 ms | heavy req/s | heavy req per CPU-s | errors |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for backend in backends:
        for mode, name in (("sleep0", "`await asyncio.sleep(0)`"), ("morpheus", "`await morpheus.checkpoint_async()`")):
            errors = sum(r[backend][mode]["errors"] for r in results)
            lines.append(
                f"| {backend} | {name} | {med(backend, mode, 'light_p50_ms'):.1f} | {med(backend, mode, 'light_p99_ms'):.1f} | "
                f"{med(backend, mode, 'heavy_per_s'):.2f} | {med(backend, mode, 'heavy_per_cpu_s'):.2f} | {errors} |"
            )
    lines += [
        "",
        "| morpheus ÷ sleep(0), same round and backend: median [min–max] | " + " | ".join(backends) + " |",
        "|---|" + "---:|" * len(backends),
    ]
    for key, name in (("light_p99_ms", "light p99 (target ≤ 1.0 in every round)"), ("heavy_per_s", "heavy req/s"),
                      ("heavy_per_cpu_s", "heavy requests per CPU-second of the service (the yields' cost)")):
        lines.append(f"| {name} | " + " | ".join(spread(ratios(b, key)) for b in backends) + " |")
    for b in backends:
        values = ratios(b, "light_p99_ms")
        met = sum(v <= 1.0 for v in values)
        lines.append("")
        lines.append(f"{b}: light p99 ratio per round " + ", ".join(f"{v:.2f}" for v in values) +
                     f"; ≤ 1.0 in {met} of {len(values)} rounds")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--mode", choices=["sleep0", "morpheus"], required=True)
    s.add_argument("--socket", required=True)
    d = sub.add_parser("drive")
    d.add_argument("--agent", action="append", required=True, metavar="BACKEND=SOCKET",
                   help="an agent to run the service against (repeat for each backend, e.g. sim=/run/a.sock)")
    d.add_argument("--seconds", type=float, default=10.0)
    d.add_argument("--rounds", type=int, default=3)
    d.add_argument("--json")
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.mode, args.socket)
    else:
        agents = {}
        for spec in args.agent:
            backend, sep, path = spec.partition("=")
            if not sep or not backend or not path:
                parser.error(f"--agent {spec!r}: expected BACKEND=SOCKET")
            if backend in agents:
                parser.error(f"--agent {spec!r}: backend {backend!r} given twice")
            agents[backend] = path
        drive(agents, args.seconds, args.rounds, args.json)


if __name__ == "__main__":
    main()
