#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Turn run.sh's results (target/results/*.json, or the directory given) into BENCHMARKS.md's tables: per configuration, each
benchmark's average time (mean over the rounds' forks), sample-time percentiles, and each checkpoint's
ratio to its baselines taken per round (the benchmarks of one round ran back to back) with the mean, a 95%
interval (Student t over the rounds) and the range."""
import json
import math
import statistics
import sys
from pathlib import Path

RESULTS = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "target" / "results"
CONFIGS = {"ffm-25": ["atomicLongGetAcquire", "segmentGetAcquire"],
           "jni-25": ["atomicLongGetAcquire", "emptyJniCall"],
           "jni-17": ["atomicLongGetAcquire", "emptyJniCall"]}
MEASURED = ["checkpoint", "criticalEnterExit"]
# two-sided 95% Student t quantiles by degrees of freedom
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def results(path):
    return {r["benchmark"].rsplit(".", 1)[1]: r for r in json.loads(path.read_text())}


def interval(values):
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, T95.get(len(values) - 1, 2.0) * statistics.stdev(values) / math.sqrt(len(values))


def table(config, baselines):
    rounds = [results(p) for p in sorted(RESULTS.glob(f"{config}-avgt-*.json"))]
    if not rounds:
        return
    sample = results(RESULTS / f"{config}-sample.json") if (RESULTS / f"{config}-sample.json").exists() else {}
    first = next(iter(rounds[0].values()))
    print(f"\n### `{config}`: {config.split('-')[0]} backend on JDK {first['vmVersion']}; {len(rounds)} rounds of one "
          f"fork each, warm-up {first['warmupIterations']}x{first['warmupTime']}, measurement "
          f"{first['measurementIterations']}x{first['measurementTime']}\n")
    print("| benchmark | avg ns/op (mean of rounds) | ± (95%) | p50 | p99 | p99.9 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in sorted(rounds[0]):
        mean, half = interval([r[name]["primaryMetric"]["score"] for r in rounds])
        p = sample.get(name, {}).get("primaryMetric", {}).get("scorePercentiles", {})
        print(f"| `{name}` | {mean:.2f} | {half:.2f} | {p.get('50.0', math.nan):.0f} | {p.get('99.0', math.nan):.0f} "
              f"| {p.get('99.9', math.nan):.0f} |")
    print("\n| ratio (per round) | mean | ± (95%) | min | max |")
    print("|---|---:|---:|---:|---:|")
    for name in MEASURED:
        for base in baselines:
            ratios = [r[name]["primaryMetric"]["score"] / r[base]["primaryMetric"]["score"] for r in rounds]
            mean, half = interval(ratios)
            print(f"| `{name}` ÷ `{base}` | {mean:.2f} | {half:.2f} | {min(ratios):.2f} | {max(ratios):.2f} |")


def main():
    for config, baselines in CONFIGS.items():
        table(config, baselines)
    load = RESULTS / "load.txt"
    if load.exists():
        print("\nLoad average (1, 5, 15 min) at the start, after each configuration's fork, and at the end:")
        print("`" + " / ".join(line.split("load average:")[-1].strip() if "load average" in line else line.strip()
                               for line in load.read_text().splitlines()) + "`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
