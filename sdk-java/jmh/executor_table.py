#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Print BENCHMARKS.md's executor tables from executor.sh's results (target/executor/*.json): per scheduler
setting, heavy tasks and mode, the heavy throughput (median over rounds, min–max), its ratio to blocking
taken within each round, the light tasks run per second and their wait from submission to start."""
import json
import statistics
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "target" / "executor"
SETTINGS = {"no_pressure": "observer, slice 10 s (never asks within a cell)",
            "pressure": "observer, default slice 5 ms and grace 2 ms"}


def spread(values, fmt):
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))})"


def table(name, describe):
    path = OUT / f"{name}.json"
    if not path.exists():
        return
    run = json.loads(path.read_text())
    load = (OUT / f"{name}.load").read_text().strip() if (OUT / f"{name}.load").exists() else "?"
    cells = run["cells"]
    print(f"\n### {name}: scheduler '{describe}'; {run['threads']} pool threads, work checked every {run['every']} units, "
          f"{run['rounds']} rounds x {run['seconds']:.1f} s per cell; {run['backend']} backend, JDK {run['jdk']}; "
          f"load average before / after: {load}\n")
    print("| heavy tasks | mode | M units/s, median (min–max) | / blocking, per round: median (min–max) "
          "| light tasks run / s | light wait p50 / p99 ms (median of rounds) | light tasks run / submitted per round |")
    print("|---|---|---|---|---|---|---|")
    by = {}
    for c in cells:
        by.setdefault((c["heavy"], c["mode"]), []).append(c)
    blocking = {(c["heavy"], c["round"]): c for c in cells if c["mode"] == "blocking"}
    for heavy in sorted({c["heavy"] for c in cells}):
        for mode in ("blocking", "yield", "resubmit", "morpheus"):
            rows = sorted(by.get((heavy, mode), []), key=lambda c: c["round"])
            if not rows:
                continue
            rate = [c["heavy_units"] / c["seconds"] / 1e6 for c in rows]
            if mode == "blocking":
                ratio = "—"
            else:
                ratio = spread([c["heavy_units"] / blocking[(heavy, c["round"])]["heavy_units"] * 100 for c in rows],
                               lambda v: f"{v:.0f}%")
            light = statistics.median(c["light_run"] / c["seconds"] for c in rows)
            p50 = [c["wait_p50_ms"] for c in rows if c["wait_p50_ms"] is not None]
            p99 = [c["wait_p99_ms"] for c in rows if c["wait_p99_ms"] is not None]
            waits = (f"{statistics.median(p50):.2f} / {statistics.median(p99):.2f}" if len(p50) == len(rows)
                     else "— (none ran in some rounds)" if not p50 else
                     f"{statistics.median(p50):.2f} / {statistics.median(p99):.2f} ({len(p50)} of {len(rows)} rounds)")
            counts = " ".join(f"{c['light_run']}/{c['light_submitted']}" for c in rows)
            print(f"| {heavy} | {mode} | {spread(rate, lambda v: f'{v:.0f}')} | {ratio} | {light:.0f} | {waits} | {counts} |")


def main():
    for name, describe in SETTINGS.items():
        table(name, describe)
    return 0


if __name__ == "__main__":
    sys.exit(main())
