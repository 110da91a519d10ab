# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Two builds of the SDK against the naive yield, in the same rounds: the aiohttp service of
service.py served by `--before` (a Python whose `morpheus` is the earlier build, e.g. a venv with
main's wheel) and by `--after` (this build), beside `await asyncio.sleep(0)`. Each round runs the
three cells in a rotated order (each takes each place in turn), and every ratio is taken within a
round, so a change is read against the same load as its baseline.

    python bench/service_compare.py --socket AGENT_SOCKET --before OLD_PYTHON [--after PYTHON]
        [--seconds S] [--rounds R] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import service  # noqa: E402


def run_cell(python: str, mode: str, socket_path: str, seconds: float) -> dict:
    proc = subprocess.Popen([python, service.__file__, "serve", "--mode", mode, "--socket", socket_path],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        return asyncio.run(service._load(port, seconds))
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--before", required=True, help="Python with the earlier build of morpheus")
    parser.add_argument("--after", default=sys.executable, help="Python with this build (default: this one)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json")
    args = parser.parse_args()
    cells = [("sleep0", args.after, "sleep0"), ("before", args.before, "morpheus"), ("after", args.after, "morpheus")]
    rounds = []
    for r in range(args.rounds):
        order = cells[r % 3:] + cells[:r % 3]
        rounds.append({name: run_cell(python, mode, args.socket, args.seconds) for name, python, mode in order})
        print(f"round {r + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": args.seconds, "rounds": rounds}, f, indent=1)

    def ratio(name, key):
        values = [r[name][key] / r["sleep0"][key] for r in rounds]
        return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"

    print(f"{len(rounds)} rounds x {args.seconds:.0f} s per cell; ÷ sleep(0) of the same round: median (min–max)\n")
    print("| build | light p99 (target ≤ 1.5) | heavy req/s (target ≥ 1.0) | heavy requests per CPU-second |")
    print("|---|---:|---:|---:|")
    for name in ("before", "after"):
        print(f"| {name} | {ratio(name, 'light_p99_ms')} | {ratio(name, 'heavy_per_s')} | {ratio(name, 'heavy_per_cpu_s')} |")


if __name__ == "__main__":
    main()
