#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Turn run.sh's JMH results (target/jmh-ffm.json, target/jmh-jni.json) into BENCHMARKS.md's tables:
average time with its error, sample-time percentiles, and each checkpoint's ratio to its baselines."""
import json
import sys
from pathlib import Path

TARGET = Path(__file__).resolve().parent / "target"
BASELINES = {"ffm": ["atomicLongGetAcquire", "segmentGetAcquire"], "jni": ["atomicLongGetAcquire", "emptyJniCall"]}


def load(backend):
    rows = {}
    for r in json.loads((TARGET / f"jmh-{backend}.json").read_text()):
        name = r["benchmark"].rsplit(".", 1)[1]
        m = r["primaryMetric"]
        row = rows.setdefault(name, {"forks": r["forks"], "warmup": f'{r["warmupIterations"]}x{r["warmupTime"]}',
                                     "measurement": f'{r["measurementIterations"]}x{r["measurementTime"]}',
                                     "jvm": r["vmVersion"]})
        if r["mode"] == "avgt":
            row["avg"], row["err"] = m["score"], m["scoreError"]
        elif r["mode"] == "sample":
            p = m["scorePercentiles"]
            row["p50"], row["p99"], row["p999"] = p["50.0"], p["99.0"], p["99.9"]
    return rows


def main():
    for backend in ("ffm", "jni"):
        rows = load(backend)
        any_row = next(iter(rows.values()))
        print(f"\n### Backend `{backend}` (JDK {any_row['jvm']}; {any_row['forks']} forks, warm-up {any_row['warmup']}, "
              f"measurement {any_row['measurement']})\n")
        print("| benchmark | avg ns/op | ± (99.9%) | p50 | p99 | p99.9 | " +
              " | ".join(f"ratio to {b}" for b in BASELINES[backend]) + " |")
        print("|---|---:|---:|---:|---:|---:|" + "---:|" * len(BASELINES[backend]))
        for name, row in rows.items():
            ratios = " | ".join(f'{row["avg"] / rows[b]["avg"]:.2f}' for b in BASELINES[backend])
            print(f'| `{name}` | {row["avg"]:.2f} | {row["err"]:.2f} | {row.get("p50", float("nan")):.0f} | '
                  f'{row.get("p99", float("nan")):.0f} | {row.get("p999", float("nan")):.0f} | {ratios} |')
    return 0


if __name__ == "__main__":
    sys.exit(main())
