#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Print the ratio table of BENCHMARKS.md from criterion's estimates of the last
`cargo bench -p morpheus --bench checkpoint` (target/criterion/<group>/<bench>/new/estimates.json).

Usage: ratios.py [CRITERION_DIR]   (default: $CARGO_TARGET_DIR/criterion or <repo>/target/criterion)
"""

import json
import os
import sys
from pathlib import Path

# (measurement, baseline, target ratio or None)
ROWS = [
    ("attached/checkpoint_sync", "baseline/atomic_load_acquire", 1.5),
    ("attached/free_checkpoint_sync", "baseline/atomic_load_acquire", 1.5),
    ("detached/checkpoint_sync", "baseline/atomic_load_relaxed", 1.5),
    ("unregistered_thread/checkpoint_sync", "baseline/atomic_load_relaxed", 1.5),
    ("attached/request_then_checkpoint_yield", "baseline/atomic_load_acquire", None),
    ("attached/critical_enter_exit", "baseline/atomic_load_acquire", None),
    ("attached/critical_enter_exit", "baseline/store_seqcst_then_release", None),
    ("attached/critical_nested_enter_exit", "baseline/atomic_load_acquire", None),
    ("detached/critical_enter_exit", "baseline/atomic_load_acquire", None),
]


def estimate(root: Path, bench: str) -> float:
    path = root / bench / "new" / "estimates.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        sys.exit(f"ratios.py: {path} is missing; run `cargo bench -p morpheus --bench checkpoint` first")
    return data["median"]["point_estimate"]


def main() -> None:
    default = Path(os.environ.get("CARGO_TARGET_DIR", Path(__file__).resolve().parents[2] / "target")) / "criterion"
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    print("| measurement | median | baseline | baseline median | ratio | target |")
    print("|---|---:|---|---:|---:|---|")
    for bench, base, target in ROWS:
        ns, base_ns = estimate(root, bench), estimate(root, base)
        ratio = ns / base_ns
        verdict = "" if target is None else (f"≤ {target}× {'met' if ratio <= target else 'MISSED'}")
        print(f"| {bench} | {ns:.3f} ns | {base} | {base_ns:.3f} ns | {ratio:.2f}× | {verdict} |")


if __name__ == "__main__":
    main()
