#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""report.py's arithmetic and verdicts on a made-up run whose answers are known (no VM)."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402

SCHEDULERS = ["eevdf", "scx_bpfland", "scx_pandemonium", "morpheus_observer", "morpheus_enforced", "morpheus_enforced_cputime"]


def line(kind, record):
    return f"{kind} {json.dumps(record)}\n"


def made_up_run(rounds=5):
    """A run where every figure's answer is known:
    - batch: observer 1.00× EEVDF in every round (met), enforced 1.10× (missed);
    - starvation: enforced p99 0.1× EEVDF in four rounds and 0.5× in one (not resolved);
    - checkpoint cost: observer 0.995 (met), enforced 0.97 in every round (missed);
    - Table 1 w4: enforced best in every round (met: the former-order mode, lower still, is scx_morpheus's
      own, not a peer); observer 1.714× pandemonium, the best peer (missed); the best mode is cputime;
    - liar: 0.1 % overhead and no escalation inside, except enforced took one inside (missed)."""
    out = [line("config", {"schedulers": SCHEDULERS, "rounds": rounds, "cell_seconds": 1.0, "cpus": 2,
                           "starvation": {"seconds": 8.0}})]
    out.append("a console line that is not a record\n")
    out.append("result {\"cut by a kernel messa\n")
    for k in range(1, rounds + 1):
        drift = 1.0 + 0.3 * k  # the host's load moves every scheduler alike within a round
        batch = {"eevdf": 1.0, "scx_bpfland": 1.2, "scx_pandemonium": 1.0, "morpheus_observer": 1.0, "morpheus_enforced": 1.1,
                 "morpheus_enforced_cputime": 1.0}
        p99 = {"eevdf": 1000, "scx_bpfland": 800, "scx_pandemonium": 700, "morpheus_observer": 1200, "morpheus_enforced": 400,
               "morpheus_enforced_cputime": 300}
        starv = {"eevdf": 10_000, "scx_bpfland": 9_000, "scx_pandemonium": 9_000, "morpheus_observer": 8_000,
                 "morpheus_enforced": 5_000 if k == 3 else 1_000, "morpheus_enforced_cputime": 9_000}
        cost = {"eevdf": 1.0, "scx_bpfland": 1.0, "scx_pandemonium": 1.0, "morpheus_observer": 0.995, "morpheus_enforced": 0.97,
                "morpheus_enforced_cputime": 0.995}
        for s in SCHEDULERS:
            base = {"scheduler": s, "round": k}
            # Where the batch's time went: carried by the morpheus rounds only (an older run's records have none).
            spent = {"samples": 2, "thread_switches": 40 * k, "idle_ms": 10} if s.startswith("morpheus") else {}
            out.append(line("round", {**base, "table": "batch", "cell": "2_threads", "p50": int(2e9 * batch[s] * drift), **spent}))
            out.append(line("round", {**base, "table": "latency", "cell": "w4", "p99": int(p99[s] * drift), "ops_per_s": 100}))
            out.append(line("round", {**base, "table": "starvation", "cell": "zombie+3", "p99": int(starv[s] * drift),
                                      "slice_plus_grace_ns": 2_000 * drift}))
            out.append(line("round", {**base, "table": "checkpoint_cost", "cell": "w4_pressure", "ops_ratio": cost[s]}))
            out.append(line("round", {**base, "table": "liar", "cell": "section_100ms", "mean": 1000}))
    for s in SCHEDULERS:
        pooled = {"scheduler": s, "samples": 10, "min": 1, "p50": 2, "p90": 3, "p99": 4, "p999": 5, "max": 6, "mean": 3.0}
        out.append(line("result", {**pooled, "table": "batch", "cell": "2_threads"}))
        out.append(line("result", {**pooled, "table": "latency", "cell": "w4", "ops_per_s": 100.0}))
        out.append(line("result", {**pooled, "table": "starvation", "cell": "zombie+3", "slice_plus_grace_ns": 2000}))
        out.append(line("result", {**pooled, "table": "checkpoint_cost", "cell": "w4_pressure",
                                   "cost": {"ops_with": 5, "ops_without": 5, "mean_with_ns": 1e6, "mean_without_ns": 1e6,
                                            "think_ns": 1e6, "ops_ratio": 1.0},
                                   "without": pooled}))
        out.append(line("result", {**pooled, "table": "liar", "cell": "section_100ms",
                                   "escalations_inside": 1 if s == "morpheus_enforced" else 0}))
    return "".join(out)


class Verdicts(unittest.TestCase):
    def test_the_range_decides(self):
        self.assertEqual(report.verdict([0.9, 1.0, 1.05], 1.05), "met")
        self.assertEqual(report.verdict([1.06, 1.2], 1.05), "missed")
        self.assertEqual(report.verdict([0.9, 1.2], 1.05), "not resolved")
        self.assertEqual(report.verdict([0.99, 0.985], 0.98, at_most=False), "met")
        self.assertEqual(report.verdict([0.97, 0.95], 0.98, at_most=False), "missed")
        self.assertEqual(report.verdict([None], 1.0), "no data")

    def test_ratios_are_paired_within_a_round(self):
        rounds = report.by_round([
            {"table": "t", "cell": "c", "scheduler": "eevdf", "round": 1, "p99": 100},
            {"table": "t", "cell": "c", "scheduler": "eevdf", "round": 2, "p99": 1000},
            {"table": "t", "cell": "c", "scheduler": "x", "round": 1, "p99": 50},
            {"table": "t", "cell": "c", "scheduler": "x", "round": 2, "p99": 500},
            {"table": "t", "cell": "c", "scheduler": "x", "round": 3, "p99": 7},  # no EEVDF in round 3
        ])
        self.assertEqual(report.paired_ratios(rounds, "t", "c", "x", "p99"), [0.5, 0.5])
        self.assertEqual(report.spread([0.5, 0.5]), "0.500 [0.500–0.500]")
        self.assertEqual(report.spread([]), "—")


class Report(unittest.TestCase):
    def render(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        out, err = io.StringIO(), io.StringIO()
        sys.argv = ["report.py", f.name]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            report.main()
        return out.getvalue(), err.getvalue()

    def verdict_of(self, out, starts):
        # The name must end where `starts` does: morpheus_enforced is not morpheus_enforced_cputime.
        rows = [r for r in out.splitlines() if r.startswith(f"| {starts}") and r[len(starts) + 2:][:1] in (" ", ":", ",")]
        self.assertEqual(len(rows), 1, f"one verdict row for {starts!r}: {rows}")
        return rows[0].rstrip(" |").rsplit("| ", 1)[1]

    def test_every_target_gets_the_verdict_its_rounds_give(self):
        out, err = self.render(made_up_run())
        self.assertIn("1 garbled result line(s) skipped", err)
        self.assertIn("with 5 rounds the range holds the true median with confidence 93.8%", out)
        self.assertIn("1.0 s per cell and round (8.0 s for the starvation cell)", out)
        self.assertEqual(self.verdict_of(out, "no-worker batch ≤ 1.03× EEVDF, morpheus_observer"), "met")
        self.assertEqual(self.verdict_of(out, "no-worker batch ≤ 1.03× EEVDF, morpheus_enforced"), "missed")
        self.assertEqual(self.verdict_of(out, "enforced starvation p99 ≤ 0.33× EEVDF"), "not resolved")
        self.assertEqual(self.verdict_of(out, "enforced starvation p99 ≤ slice + grace"), "not resolved")
        self.assertEqual(self.verdict_of(out, "checkpoints cost ≤ 2 % of throughput, w4_pressure, morpheus_observer"), "met")
        self.assertEqual(self.verdict_of(out, "checkpoints cost ≤ 2 % of throughput, w4_pressure, morpheus_enforced"), "missed")
        self.assertEqual(self.verdict_of(out, "Table 1 w4, morpheus_enforced"), "met")
        self.assertEqual(self.verdict_of(out, "Table 1 w4, morpheus_observer"), "missed")
        self.assertEqual(self.verdict_of(out, "Table 1 w4: lowest p99 of all, best scx_morpheus mode (morpheus_enforced_cputime)"), "met")
        # Every scheduler of the run has its column in the tables.
        for s in SCHEDULERS:
            self.assertIn(f"| w4 | {s} |", out)
        self.assertEqual(self.verdict_of(out, "liar section_100ms, morpheus_observer"), "met")
        self.assertEqual(self.verdict_of(out, "liar section_100ms, morpheus_enforced"), "missed")
        # Per run over the rounds: switches (40 + ... + 200) / 10 runs, idle 50 ms / 10 runs; "—" without records.
        self.assertIn("| 2_threads | morpheus_observer | 10 | 0 | 0 | 0 | 1.000 | 1.000 [1.000–1.000] | 60 | 5 |", out)
        self.assertIn("| 2_threads | eevdf | 10 | 0 | 0 | 0 | 1.000 | 1.000 [1.000–1.000] | — | — |", out)
        # The paired ratio is exact although every round's absolute figures differ.
        self.assertIn("1.100 [1.100–1.100]", out)
        self.assertIn("1.714 [1.714–1.714]", out)

    def test_a_file_without_results_is_refused_by_name(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("booting...\n")
        self.addCleanup(os.unlink, f.name)
        run = subprocess.run([sys.executable, report.__file__, f.name], capture_output=True, text=True)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn(f"{f.name} has no 'config' line or no 'result' lines", run.stderr)


if __name__ == "__main__":
    unittest.main()
