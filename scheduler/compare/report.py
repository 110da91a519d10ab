#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Tables and plots of a scheduler comparison run (scheduler/compare, scheduler/BENCHMARKS.md).

Reads the `config {json}` and `result {json}` lines the `compare` binary printed (the VM's console
with its prefix removed, other lines ignored) and prints, per table, every scheduler's figures with
their ratio to EEVDF's in the same run (markdown), then writes one PNG per table: the p99 per
scheduler and cell.

usage: report.py [--plots DIR] RESULTS
"""

import argparse
import json
import sys
from collections import OrderedDict

BASELINE = "eevdf"


def load(path):
    config, results, skipped = None, [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            kind, _, body = line.partition(" ")
            if kind == "unavailable":
                try:
                    u = json.loads(body)
                    print(f"report: {u['scheduler']} could not be loaded in the guest: {u['error']}", file=sys.stderr)
                except json.JSONDecodeError:
                    skipped += 1
                continue
            if kind not in ("config", "result"):
                continue
            try:
                record = json.loads(body)
            except json.JSONDecodeError:
                skipped += 1  # a console line a kernel message cut into
                continue
            if kind == "config":
                config = record
            else:
                results.append(record)
    if config is None or not results:
        sys.exit(f"report: {path} has no 'config' line or no 'result' lines: did the comparison run?")
    if skipped:
        print(f"report: warning: {skipped} garbled result line(s) skipped", file=sys.stderr)
    return config, results


def index(results):
    """(table, cell) -> scheduler -> record, cells in first-seen order."""
    tables = OrderedDict()
    for r in results:
        tables.setdefault(r["table"], OrderedDict()).setdefault(r["cell"], {})[r["scheduler"]] = r
    return tables


def ratio(value, base):
    return f"{value / base:.3f}" if base else "—"


def us(ns):
    return f"{ns / 1000:.0f}"


def rows(cells, order):
    """(cell, scheduler, its result, EEVDF's result in that cell or {}) for every scheduler that ran."""
    for cell, by in cells.items():
        base = by.get(BASELINE) or {}
        for s in order:
            if by.get(s):
                yield cell, s, by[s], base


def latency_table(cells, order):
    print("| cell | scheduler | ops/s | p50 µs | p90 µs | p99 µs | p99.9 µs | ops/s ÷ EEVDF | p50 ÷ EEVDF | p99 ÷ EEVDF | p99.9 ÷ EEVDF |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cell, s, r, b in rows(cells, order):
        print(f"| {cell} | {s} | {r['ops_per_s']:.0f} | {us(r['p50'])} | {us(r['p90'])} | {us(r['p99'])} | {us(r['p999'])} | "
              f"{ratio(r['ops_per_s'], b.get('ops_per_s'))} | {ratio(r['p50'], b.get('p50'))} | {ratio(r['p99'], b.get('p99'))} | "
              f"{ratio(r['p999'], b.get('p999'))} |")


def checkpoint_cost(cells, order):
    """Throughput with checkpoints over without, per scheduler and shape (the ≤ 2 % target)."""
    print()
    print("Checkpoint cost (ops/s with checkpoints ÷ without, same scheduler, same run):")
    print()
    print("| shape | " + " | ".join(order) + " |")
    print("|---|" + "---:|" * len(order))
    for cell, by in cells.items():
        if cell.endswith("_ckpt"):
            continue
        on = cells.get(cell + "_ckpt", {})
        row = [ratio(on[s]["ops_per_s"], by[s]["ops_per_s"]) if s in on and s in by else "—" for s in order]
        print(f"| {cell} | " + " | ".join(row) + " |")


def starvation_table(cells, order, config):
    print("| scheduler | samples | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | p50 ÷ EEVDF | p99 ÷ EEVDF | max ÷ EEVDF | p99 ÷ (slice+grace) | escalations (all cells) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for _, s, r, base in rows(cells, order):
        bound = r.get("slice_plus_grace_ns")
        vs_bound = f"{r['p99'] / bound:.2f}" if bound and s.startswith("morpheus") else "—"
        esc = r.get("escalations_all_cells", "—") if s.startswith("morpheus") else "—"
        print(f"| {s} | {r['samples']} | {us(r['p50'])} | {us(r['p90'])} | {us(r['p99'])} | {us(r['p999'])} | {us(r['max'])} | "
              f"{ratio(r['p50'], base.get('p50'))} | {ratio(r['p99'], base.get('p99'))} | {ratio(r['max'], base.get('max'))} | {vs_bound} | {esc} |")


def liar_table(cells, order):
    print("| section | scheduler | sections | mean overhead % | p50 % | p99 % | max % | p99 ÷ EEVDF | escalations inside sections |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    pct = lambda ppm: f"{ppm / 1e4:.2f}"
    for cell, s, r, base in rows(cells, order):
        print(f"| {cell} | {s} | {r['samples']} | {pct(r['mean'])} | {pct(r['p50'])} | {pct(r['p99'])} | {pct(r['max'])} | "
              f"{ratio(r['p99'], base.get('p99'))} | {r.get('escalations_inside', 0)} |")


def batch_table(cells, order):
    print("| threads | scheduler | runs | median ms | min ms | max ms | median ÷ EEVDF |")
    print("|---|---|---:|---:|---:|---:|---:|")
    ms = lambda ns: f"{ns / 1e6:.0f}"
    for cell, s, r, base in rows(cells, order):
        print(f"| {cell} | {s} | {r['samples']} | {ms(r['p50'])} | {ms(r.get('min', r['p50']))} | {ms(r['max'])} | {ratio(r['p50'], base.get('p50'))} |")


def plot(table, cells, order, path, ylabel, scale):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(cells)
    width = 0.8 / max(1, len(order))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(names) + 2), 4))
    for i, s in enumerate(order):
        xs = [j + (i - (len(order) - 1) / 2) * width for j in range(len(names))]
        ys = [cells[c][s]["p99"] / scale if s in cells[c] else 0 for c in names]
        ax.bar(xs, ys, width, label=s)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{table}: p99 per scheduler (same run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--plots", help="directory for the PNG plots (not written without it)")
    args = parser.parse_args()
    config, results = load(args.results)
    seen = {r["scheduler"] for r in results}
    order = [s for s in config["schedulers"] if s in seen]
    tables = index(results)
    print(f"Comparison: {config['rounds']} rounds, {config['cell_seconds']} s per cell and round, {config['cpus']} CPUs; "
          f"ratios are to {BASELINE} of the same run.")
    sections = [
        ("latency", "Table 1, latency (request workers; op latency = end of think time to end of work)", latency_table),
        ("starvation", "Table 2, starvation (cooperative workers' release latency beside a zombie, one CPU)", None),
        ("liar", "Table 3, liar (wall time over the CPU time asked for, inside critical sections)", liar_table),
        ("batch", "CPU-bound batch, no worker registered (wall time)", batch_table),
    ]
    for name, title, fn in sections:
        if name not in tables:
            continue
        print()
        print(f"### {title}")
        print()
        if name == "starvation":
            starvation_table(tables[name], order, config)
        else:
            fn(tables[name], order)
        if name == "latency":
            checkpoint_cost(tables[name], order)
    if args.plots:
        import os

        os.makedirs(args.plots, exist_ok=True)
        specs = {"latency": ("op latency p99, µs", 1e3), "starvation": ("release latency p99, µs", 1e3),
                 "liar": ("section overhead p99, %", 1e4)}
        for name, (ylabel, scale) in specs.items():
            if name in tables:
                path = os.path.join(args.plots, f"{name}-p99.png")
                plot(name, tables[name], order, path, ylabel, scale)
                print(f"\nreport: wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
