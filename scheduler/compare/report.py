#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Tables and plots of a scheduler comparison run (scheduler/compare, scheduler/BENCHMARKS.md).

Reads the `config {json}`, `round {json}` and `result {json}` lines the `compare` binary printed (the
VM's console with its prefix removed, other lines ignored) and prints, per table, every scheduler's
figures with their ratio to EEVDF's in the same run (markdown), then the verdicts against the
targets of scheduler/BENCHMARKS.md, then writes one PNG per table: the p99 per scheduler and cell.

Ratios to EEVDF are paired within a round (the schedulers of one round ran minutes apart; rounds
ran up to an hour apart), and each is given as the median over the rounds with the range
[min-max]. With n rounds that range holds the true median ratio with confidence 1 - 2^(1-n) (the
sign test: each round's ratio falls either side of it with even odds), so a verdict says "met" when
the whole range is on the right side of its target, "missed" when it is all on the wrong side, and
"not resolved" otherwise.

usage: report.py [--plots DIR] RESULTS
"""

import argparse
import json
import statistics
import sys
from collections import OrderedDict

BASELINE = "eevdf"
# scx_morpheus's modes (the last ones: enforced on the CPU-time base order, on its slice-lag variant and on
# that with the CPU used since the last sleep, whole, beyond twice the usual burst or only for a task that
# has not slept recently, and that with such a task keyed by when it was queued, and the default order
# with a wake-up preemption margin of 500 µs: the befores and afters of a before/after); every other
# scheduler is a peer it is measured against.
MORPHEUS = ("morpheus_observer", "morpheus_enforced", "morpheus_enforced_cputime", "morpheus_enforced_lag", "morpheus_enforced_burst",
            "morpheus_enforced_spare", "morpheus_enforced_recent",
            "morpheus_enforced_arrival", "morpheus_enforced_margin500")


def load(path):
    """(config, pooled result records, per-round records) from a results file."""
    config, results, rounds, skipped = None, [], [], 0
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
            if kind not in ("config", "result", "round"):
                continue
            try:
                record = json.loads(body)
            except json.JSONDecodeError:
                skipped += 1  # a console line a kernel message cut into
                continue
            if kind == "config":
                config = record
            elif kind == "round":
                rounds.append(record)
            else:
                results.append(record)
    if config is None or not results:
        sys.exit(f"report: {path} has no 'config' line or no 'result' lines: did the comparison run?")
    if skipped:
        print(f"report: warning: {skipped} garbled result line(s) skipped", file=sys.stderr)
    return config, results, rounds


def by_round(rounds):
    """(table, cell, scheduler) -> round -> record."""
    out = {}
    for r in rounds:
        out.setdefault((r["table"], r["cell"], r["scheduler"]), {})[r["round"]] = r
    return out


def per_round(values):
    """Median and range of per-round values: (median, min, max, n), or None without any."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values), min(values), max(values), len(values)


def paired_ratios(rounds, table, cell, sched, metric, base=BASELINE):
    """sched's metric over base's in each round both ran (a round where base's is 0 is left out)."""
    mine, theirs = rounds.get((table, cell, sched), {}), rounds.get((table, cell, base), {})
    return [mine[k][metric] / theirs[k][metric] for k in sorted(mine) if k in theirs and theirs[k][metric]]


def spread(values, digits=3):
    """'median [min-max]' of per-round values, or an em dash."""
    s = per_round(values)
    if s is None:
        return "—"
    med, lo, hi, _ = s
    return f"{med:.{digits}f} [{lo:.{digits}f}–{hi:.{digits}f}]"


def verdict(values, target, at_most=True):
    """'met', 'missed' or 'not resolved' for per-round values against a target (see the module doc)."""
    s = per_round(values)
    if s is None:
        return "no data"
    _, lo, hi, _ = s
    ok_all, ok_none = (hi <= target, lo > target) if at_most else (lo >= target, hi < target)
    return "met" if ok_all else "missed" if ok_none else "not resolved"


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


def latency_table(cells, order, rounds):
    print("| cell | scheduler | ops/s | p50 µs | p90 µs | p99 µs | p99.9 µs | ops/s ÷ EEVDF | p50 ÷ EEVDF | p99 ÷ EEVDF | p99.9 ÷ EEVDF | p99 ÷ EEVDF per round |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cell, s, r, b in rows(cells, order):
        print(f"| {cell} | {s} | {r['ops_per_s']:.0f} | {us(r['p50'])} | {us(r['p90'])} | {us(r['p99'])} | {us(r['p999'])} | "
              f"{ratio(r['ops_per_s'], b.get('ops_per_s'))} | {ratio(r['p50'], b.get('p50'))} | {ratio(r['p99'], b.get('p99'))} | "
              f"{ratio(r['p999'], b.get('p999'))} | {spread(paired_ratios(rounds, 'latency', cell, s, 'p99'))} |")


def checkpoint_cost_table(cells, order, rounds):
    """Ops/s of the ops with checkpoints over the ops without, in the same cell (the ≤ 2 % target)."""
    print("| shape | scheduler | ops with / without | mean latency with / without µs | p99 with / without µs | ops/s with ÷ without (pooled) | per round |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for cell, s, r, _ in rows(cells, order):
        cost, without = r["cost"], r["without"]
        pooled = f"{cost['ops_ratio']:.4f}" if cost.get("ops_ratio") is not None else "—"
        per = [x.get("ops_ratio") for x in rounds.get(("checkpoint_cost", cell, s), {}).values()]
        print(f"| {cell} | {s} | {cost['ops_with']} / {cost['ops_without']} | {us(cost['mean_with_ns'])} / {us(cost['mean_without_ns'])} | "
              f"{us(r['p99'])} / {us(without['p99'])} | {pooled} | {spread(per, 4)} |")


def starvation_table(cells, order, rounds):
    print("| scheduler | samples | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | p50 ÷ EEVDF | p99 ÷ EEVDF | max ÷ EEVDF | p99 ÷ EEVDF per round | p99 ÷ (slice+grace) | escalations (all cells) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cell, s, r, base in rows(cells, order):
        bound = r.get("slice_plus_grace_ns")
        vs_bound = f"{r['p99'] / bound:.2f}" if bound and s.startswith("morpheus") else "—"
        esc = r.get("escalations_all_cells", "—") if s.startswith("morpheus") else "—"
        print(f"| {s} | {r['samples']} | {us(r['p50'])} | {us(r['p90'])} | {us(r['p99'])} | {us(r['p999'])} | {us(r['max'])} | "
              f"{ratio(r['p50'], base.get('p50'))} | {ratio(r['p99'], base.get('p99'))} | {ratio(r['max'], base.get('max'))} | "
              f"{spread(paired_ratios(rounds, 'starvation', cell, s, 'p99'), 2)} | {vs_bound} | {esc} |")


def liar_table(cells, order, rounds):
    print("| section | scheduler | sections | mean overhead % | p50 % | p99 % | max % | p99 ÷ EEVDF | mean % per round | escalations inside sections |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    pct = lambda ppm: f"{ppm / 1e4:.2f}"
    for cell, s, r, base in rows(cells, order):
        per = [x["mean"] / 1e4 for x in rounds.get(("liar", cell, s), {}).values()]
        print(f"| {cell} | {s} | {r['samples']} | {pct(r['mean'])} | {pct(r['p50'])} | {pct(r['p99'])} | {pct(r['max'])} | "
              f"{ratio(r['p99'], base.get('p99'))} | {spread(per, 2)} | {r.get('escalations_inside', 0)} |")


def batch_table(cells, order, rounds):
    print("| threads | scheduler | runs | median ms | min ms | max ms | median ÷ EEVDF | per round | "
          "switches of the threads per run | CPU idle ms per run |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ms = lambda ns: f"{ns / 1e6:.0f}"

    def per_run(cell, s, key):
        # Where the time went: the rounds' sums per run ("—" for older records, which carry none).
        recs = [x for x in rounds.get(("batch", cell, s), {}).values() if key in x]
        runs = sum(x["samples"] for x in recs)
        return f"{sum(x[key] for x in recs) / runs:.0f}" if runs else "—"

    for cell, s, r, base in rows(cells, order):
        print(f"| {cell} | {s} | {r['samples']} | {ms(r['p50'])} | {ms(r.get('min', r['p50']))} | {ms(r['max'])} | "
              f"{ratio(r['p50'], base.get('p50'))} | {spread(paired_ratios(rounds, 'batch', cell, s, 'p50'))} | "
              f"{per_run(cell, s, 'thread_switches')} | {per_run(cell, s, 'idle_ms')} |")


def best_mode_line(rounds, cell, mine, peers):
    """Table 1's target for a cell: the best of scx_morpheus's modes (named) has the lowest p99 of all,
    or lies within the best peer's own round-to-round spread: its median ratio to the best other
    scheduler is at most 1 + that peer's spread (max - min of its per-round p99 ÷ EEVDF, over their
    median), when the plain verdict is not 'met'."""
    def p99s(s):
        return rounds.get(("latency", cell, s), {})

    medians = {s: (per_round([r["p99"] for r in p99s(s).values()]) or (float("inf"),))[0] for s in mine}
    best = min(mine, key=lambda s: medians[s]) if mine else None
    if best is None:
        return (f"Table 1 {cell}: lowest p99 of all, best scx_morpheus mode", "—", "no data")
    ratios = []
    for k, rec in sorted(p99s(best).items()):
        theirs = [p99s(p)[k]["p99"] for p in peers if k in p99s(p)]
        if theirs and min(theirs):
            ratios.append(rec["p99"] / min(theirs))
    v = verdict(ratios, 1.0)
    peer_medians = {p: per_round(paired_ratios(rounds, "latency", cell, p, "p99")) for p in peers if p != BASELINE}
    peer_medians = {p: s for p, s in peer_medians.items() if s}
    if v != "met" and ratios and peer_medians:
        best_peer = min(peer_medians, key=lambda p: peer_medians[p][0])
        med, lo, hi, _ = peer_medians[best_peer]
        allowed = 1 + (hi - lo) / med if med else 1
        if statistics.median(ratios) <= allowed:
            v = f"within {best_peer}'s spread ({allowed:.2f})"
    return (f"Table 1 {cell}: lowest p99 of all, best scx_morpheus mode ({best})", spread(ratios), v)


def verdicts(tables, order, rounds, n_rounds):
    """One line per target of scheduler/BENCHMARKS.md: the per-round figures and met / missed / not resolved."""
    lines = []
    mine = [s for s in MORPHEUS if s in order]
    peers = [s for s in order if s not in MORPHEUS]
    for cell in tables.get("checkpoint_cost", {}):
        for s in mine:
            per = [x.get("ops_ratio") for x in rounds.get(("checkpoint_cost", cell, s), {}).values()]
            lines.append((f"checkpoints cost ≤ 2 % of throughput, {cell}, {s} (ops/s with ÷ without)", spread(per, 4), verdict(per, 0.98, at_most=False)))
    for cell in tables.get("batch", {}):
        for s in mine:
            per = paired_ratios(rounds, "batch", cell, s, "p50")
            lines.append((f"no-worker batch ≤ 1.03× EEVDF, {s}", spread(per), verdict(per, 1.03)))
    for cell in tables.get("starvation", {}):
        if "morpheus_enforced" in order:
            per = paired_ratios(rounds, "starvation", cell, "morpheus_enforced", "p99")
            lines.append(("enforced starvation p99 ≤ 0.33× EEVDF", spread(per), verdict(per, 0.33)))
            recs = rounds.get(("starvation", cell, "morpheus_enforced"), {}).values()
            per = [x["p99"] / x["slice_plus_grace_ns"] for x in recs if x.get("slice_plus_grace_ns")]
            lines.append(("enforced starvation p99 ≤ slice + grace", spread(per, 2), verdict(per, 1.0)))
    for cell, by in tables.get("liar", {}).items():
        for s in mine:
            if s in by:
                per = [x["mean"] / 1e4 for x in rounds.get(("liar", cell, s), {}).values()]
                inside = by[s].get("escalations_inside", 0)
                v = verdict(per, 0.5)
                lines.append((f"liar {cell}, {s}: mean overhead ≤ 0.5 %, 0 escalations inside ({inside})", spread(per, 2),
                              v if inside == 0 else "missed"))
    for cell in tables.get("latency", {}):
        for s in mine:
            best_peer = []
            mine_by = rounds.get(("latency", cell, s), {})
            for k, rec in sorted(mine_by.items()):
                theirs = [rounds[("latency", cell, p)][k]["p99"] for p in peers if k in rounds.get(("latency", cell, p), {})]
                if theirs and min(theirs):
                    best_peer.append(rec["p99"] / min(theirs))
            lines.append((f"Table 1 {cell}, {s}: p99 ≤ the best other scheduler's in the round", spread(best_peer), verdict(best_peer, 1.0)))
        lines.append(best_mode_line(rounds, cell, mine, peers))
    if not lines:
        return
    if n_rounds > 1:
        print(f"Each figure: the median over the rounds [min–max]; with {n_rounds} rounds the range holds the true median "
              f"with confidence {1 - 2 ** (1 - n_rounds):.1%} (sign test).")
    else:
        print("One round: each range is a single value, and no verdict carries any confidence.")
    print()
    print("| target | per round | verdict |")
    print("|---|---:|---|")
    for what, figure, v in lines:
        print(f"| {what} | {figure} | {v} |")


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
    config, results, round_records = load(args.results)
    rounds = by_round(round_records)
    seen = {r["scheduler"] for r in results}
    order = [s for s in config["schedulers"] if s in seen]
    tables = index(results)
    # Runs before the starvation cell had a length of its own ran it for cell_seconds.
    starvation_s = config.get("starvation", {}).get("seconds")
    starvation = f" ({starvation_s} s for the starvation cell)" if starvation_s else ""
    print(f"Comparison: {config['rounds']} rounds, {config['cell_seconds']} s per cell and round{starvation}, "
          f"{config['cpus']} CPUs; ratios are to {BASELINE} of the same run.")
    sections = [
        ("latency", "Table 1, latency (request workers; op latency = end of think time to end of work)", latency_table),
        ("checkpoint_cost", "Checkpoint cost (Table 1's shapes, each worker alternating ops with and without checkpoints)", checkpoint_cost_table),
        ("starvation", "Table 2, starvation (cooperative workers' release latency beside a zombie, one CPU)", starvation_table),
        ("liar", "Table 3, liar (wall time over the CPU time asked for, inside critical sections)", liar_table),
        ("batch", "CPU-bound batch, no worker registered (wall time)", batch_table),
    ]
    for name, title, fn in sections:
        if name not in tables:
            continue
        print()
        print(f"### {title}")
        print()
        fn(tables[name], order, rounds)
    print()
    print("### Verdicts against the targets (scheduler/BENCHMARKS.md)")
    print()
    verdicts(tables, order, rounds, config["rounds"])
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
