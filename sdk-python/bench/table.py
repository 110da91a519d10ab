#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Markdown tables of bench/results/{no_pressure,pressure}.json (written by bench/run.sh)."""

import json
import sys
from pathlib import Path

results = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("results"))


def m(x, unit=1e6, nd=2):
    return "—" if x is None else f"{x / unit:.{nd}f}"


def spread(xs, unit=1e6):
    return f"{min(xs) / unit:.2f}–{max(xs) / unit:.2f}"


def pct(xs):
    return f"{min(xs) * 100:.0f}–{max(xs) * 100:.0f}%"


for name in ("no_pressure", "pressure"):
    path = results / f"{name}.json"
    if not path.exists():
        continue
    data = json.loads(path.read_text())
    info = data["info"]
    print(f"### {name.replace('_', ' ')}: scheduler {info['scheduler']!r}, slice {info['slice_ms']} ms, "
          f"grace {info['grace_ms']} ms; {info['repeat']} rounds x {info['seconds_per_cell']} s per cell; "
          f"load average before/after {info['loadavg_before'][0]:.1f}/{info['loadavg_after'][0]:.1f}; "
          f"yields {info['yields']}\n")
    print("| workers | mode | M units/s median (min–max) | / blocking, median of rounds (min–max) | "
          "/ naive, median of rounds (min–max) | probe p50 / p99 ms (median of rounds) | probe samples per round |")
    print("|---|---|---|---|---|---|---|")
    for c in data["cells"]:
        def rel(base):
            med = c.get(f"over_{base}_median")
            return "—" if med is None else f"{med * 100:.0f}% ({pct(c[f'over_{base}_runs'])})"

        probe = f"{m(c['probe_p50_ms_median'], 1, 2)} / {m(c['probe_p99_ms_median'], 1, 2)}"
        samples = " ".join(str(n) for n in c["probe_samples_runs"])
        print(f"| {c['workers']} | {c['mode']} | {m(c['units_per_s_median'])} ({spread(c['units_per_s_runs'])}) | "
              f"{rel('blocking')} | {rel('naive')} | {probe} | {samples} |")
    costs = data.get("per_call")
    if costs:
        print("\n| call | ns/call | ratio to a no-op C-extension call (`gc.isenabled()`) |\n|---|---|---|")
        base = costs["noop_c_call_ns"]
        for label, key in [("no-op C-extension call `gc.isenabled()`", "noop_c_call_ns"),
                           ("`morpheus.checkpoint()` (sync, nothing pending)", "checkpoint_sync_ns"),
                           ("`await morpheus.checkpoint_async()` (nothing pending)", "checkpoint_async_await_ns"),
                           ("`await asyncio.sleep(0)`", "sleep0_await_ns")]:
            print(f"| {label} | {costs[key]:.1f} | {costs[key] / base:.2f} |")
    print()
