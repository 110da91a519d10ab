#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The asyncio benchmark in the VM against the real BPF scheduler (scheduler/e2e/pybench-vm.sh):
bench/results/vm_off.json (kernel default scheduler, worker detached) beside vm_pressure.json
(scx_morpheus on sched_ext, observer, default slice and grace), cell by cell, with the probe p99's
ratio to off and the target: the morpheus cells' probe p99 at most slice + grace."""

import json
import sys
from pathlib import Path

results = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("results"))
try:
    off = json.loads((results / "vm_off.json").read_text())
    on = json.loads((results / "vm_pressure.json").read_text())
except FileNotFoundError as err:
    sys.exit(f"vm_table: {err.filename} is missing (run scheduler/e2e/pybench-vm.sh)")
info = on["info"]
if not info["attached"]:
    sys.exit("vm_table: the pressure run's worker was not attached to the scheduler")
budget = info["slice_ms"] + info["grace_ms"]
print(f"### In the VM (qemu TCG, {info['cpus']} vCPUs, Python {info['python']}): off = kernel default scheduler; "
      f"pressure = {info['scheduler']}, slice {info['slice_ms']} ms + grace {info['grace_ms']} ms = {budget} ms; "
      f"{info['repeat']} round(s) x {info['seconds_per_cell']} s per cell; yields {info['yields']}\n")
print("| workers | mode | M units/s off | M units/s pressure (/ off) | probe p99 ms off | probe p99 ms pressure (/ off) | p99 <= slice + grace |")
print("|---|---|---|---|---|---|---|")
cells_off = {(c["workers"], c["mode"]): c for c in off["cells"]}
missed = []
for c in on["cells"]:
    o = cells_off.get((c["workers"], c["mode"]))
    if o is None:
        continue
    up_on, up_off = c["units_per_s_median"], o["units_per_s_median"]
    p_on, p_off = c["probe_p99_ms_median"], o["probe_p99_ms_median"]
    ratio = f"{p_on / p_off:.2f}" if p_on is not None and p_off else "—"
    verdict = "—" if p_on is None else ("yes" if p_on <= budget else "no")
    if c["mode"] == "morpheus" and verdict != "yes":
        missed.append(f"{c['workers']} workers: p99 {p_on} ms")
    fmt = lambda v: "—" if v is None else f"{v:.2f}"
    print(f"| {c['workers']} | {c['mode']} | {up_off / 1e6:.2f} | {up_on / 1e6:.2f} ({up_on / up_off:.2f}) | "
          f"{fmt(p_off)} | {fmt(p_on)} ({ratio}) | {verdict} |")
print()
print("target (morpheus cells: probe p99 <= slice + grace): " +
      ("met in every cell" if not missed else "MISSED: " + "; ".join(missed)))
