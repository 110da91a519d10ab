# SPDX-License-Identifier: GPL-2.0-only
"""Each SDK's live-kernel column of the conformance matrix, from guest.sh's `e2e-live: SDK ROW STATUS`
lines: conformance/results/live-<sdk>.results.json (merged by `bazel run //conformance:report`).
A row the guest never reported is red. Exit 1 if any row of any column is red.

usage: live_columns.py LIVE_LINES RESULTS_DIR COMMIT
"""

import json
import sys

SDKS = ("rust", "c", "python", "node", "java-ffm", "java-jni")
ROWS = (
    "observer_workers_ran",
    "observer_hints_advance_preempt_seq",
    "observer_cooperative_acknowledges",
    "observer_never_escalates",
    "enforced_workers_ran",
    "enforced_escapable_spinner_escalated",
    "enforced_critical_never_escalated",
    "enforced_unescapable_never_escalated",
)


def main(lines_path: str, results: str, commit: str) -> int:
    seen = {}
    for line in open(lines_path):
        parts = line.split()
        if len(parts) == 3:
            seen[(parts[0], parts[1])] = parts[2]
    failed = False
    for sdk in SDKS:
        rows = {}
        for row in ROWS:
            status = seen.get((sdk, row))
            rows[row] = {"status": "pass"} if status == "pass" else {
                "status": "fail", "message": "failed in the guest" if status else "the guest never reported it"}
        failed |= any(c["status"] != "pass" for c in rows.values())
        column = {"column": f"live-{sdk}", "commit": commit, "rows": rows}
        with open(f"{results}/live-{sdk}.results.json", "w") as out:
            out.write(json.dumps(column, indent=2) + "\n")
        passed = sum(c["status"] == "pass" for c in rows.values())
        print(f"e2e-kernel: live-{sdk}: {passed}/{len(ROWS)} live checks pass", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
