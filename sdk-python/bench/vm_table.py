#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The asyncio benchmark in the VM against the real BPF scheduler (scheduler/e2e/pybench-vm.sh):
bench/results/vm_off.json (kernel default scheduler, worker detached) beside vm_pressure.json
(scx_morpheus on sched_ext, observer, default slice and grace), cell by cell.

Per cell: units/s and probe p99 with their ratio to off (same boot); the checkpoint interval (the time
1,000 units take, between two checkpoints of one task); for the morpheus cells the ratio of the probe p99
to naive's (same boot, same workers: a sleep(0) at every checkpoint, the lowest latency a checkpoint every
1,000 units can give) and two targets:
  * absolute: probe p99 <= slice + grace (met only where the machine's timer floor and checkpoint interval
    are small beside it, i.e. natively or under KVM);
  * scaled to this machine: probe p99 <= slice + grace + idle floor + one checkpoint interval, where the
    idle floor is the probe p99 of the `idle` cell (no work, same run: how late a timer fires here at all)
    and the interval is how long the running task may take to reach its checkpoint. One interval, not one
    per task: SCB.md §5.7 (one yielder per request) lets the loop poll its timers right after that task
    yields. An SDK where every CPU-bound task steps aside for the same request (1.3's asyncio path) makes
    the probe wait for each of the W tasks to reach a checkpoint: about W intervals.
"""

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
      f"{info['repeat']} round(s) x {info['seconds_per_cell']} s per cell; yields {info['yields']}; "
      f"load average in the guest {info['loadavg_before'][0]:.2f} -> {info['loadavg_after'][0]:.2f}\n")
print("| workers | mode | M units/s off | M units/s pressure (/ off) | checkpoint interval ms | probe p99 ms off "
      "| probe p99 ms pressure (/ off) | / naive | scaled bound ms | p99 <= slice + grace | p99 <= scaled bound |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
cells_off = {(c["workers"], c["mode"]): c for c in off["cells"]}
cells_on = {(c["workers"], c["mode"]): c for c in on["cells"]}
fmt = lambda v, digits=2: "—" if v is None else f"{v:.{digits}f}"
ratio = lambda a, b: "—" if a is None or not b else f"{a / b:.2f}"
missed, missed_scaled = [], []
for c in on["cells"]:
    o = cells_off.get((c["workers"], c["mode"]))
    if o is None:
        continue
    w = c["workers"]
    up_on, up_off = c["units_per_s_median"], o["units_per_s_median"]
    p_on, p_off = c["probe_p99_ms_median"], o["probe_p99_ms_median"]
    # ms per 1,000 units: the time between two checkpoints of a task (naive, morpheus; blocking has none)
    interval = 1e6 / up_on if up_on and c["mode"] in ("naive", "morpheus") else None
    floor = cells_on.get((w, "idle"), {}).get("probe_p99_ms_median")
    naive = cells_on.get((w, "naive"), {}).get("probe_p99_ms_median")
    scaled = budget + floor + interval if c["mode"] == "morpheus" and floor is not None and interval else None
    verdict = "—" if p_on is None or c["mode"] == "idle" else ("yes" if p_on <= budget else "no")
    verdict_scaled = "—" if scaled is None or p_on is None else ("yes" if p_on <= scaled else "no")
    if c["mode"] == "morpheus":
        if verdict != "yes":
            missed.append(f"{w} workers: p99 {fmt(p_on)} ms")
        if verdict_scaled != "yes":
            missed_scaled.append(f"{w} workers: p99 {fmt(p_on)} ms > {fmt(scaled)} ms")
    print(f"| {w} | {c['mode']} | {up_off / 1e6:.2f} | {up_on / 1e6:.2f} ({ratio(up_on, up_off)}) | {fmt(interval)} | "
          f"{fmt(p_off)} | {fmt(p_on)} ({ratio(p_on, p_off)}) | {ratio(p_on, naive) if c['mode'] == 'morpheus' else '—'} | "
          f"{fmt(scaled)} | {verdict} | {verdict_scaled} |")
print()
print("absolute target (morpheus cells: probe p99 <= slice + grace): " +
      ("met in every cell" if not missed else "MISSED: " + "; ".join(missed)))
print("scaled target (morpheus cells: probe p99 <= slice + grace + idle floor + one checkpoint interval): " +
      ("met in every cell" if not missed_scaled else "MISSED: " + "; ".join(missed_scaled)))
