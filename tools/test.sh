#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# Runs the whole test suite: tools/setup.sh, then `bazel test`, then a summary.
#
# Usage: tools/test.sh [BAZEL_TEST_ARGS...]
#   With no target pattern among the arguments, //... is tested. Examples:
#     tools/test.sh
#     tools/test.sh --test_output=all //bazel/...
#     tools/test.sh -- -//scheduler/vm/...      (everything but the VM tests)
# Exit status: bazel's (0 all passed, 3 some test failed, 1 build failed, ...).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# The peer schedulers are for the comparison (tools/main.sh compare) only.
bash tools/setup.sh --no-peers
# shellcheck source=tools/env.sh
source tools/env.sh

args=("$@")
have_target=0
for arg in "${args[@]+"${args[@]}"}"; do
  case "$arg" in //* | @* | :*) have_target=1 ;; esac
done
((have_target)) || args=("//..." "${args[@]+"${args[@]}"}")

config=()
[[ "${CI:-}" == "true" ]] && config=(--config=ci)

# A clean run writes about 8 GB (cargo builds, VM images, the JDK and npm caches); say so up front
# rather than let bazel die midway on a full disk.
free_gb=$(df -P -BG "$root" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
if ((free_gb < 10)); then
  echo "test.sh: warning: only ${free_gb} GB free on $(df -P "$root" | awk 'NR == 2 { print $6 }'); a clean run needs about 8 GB"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/morpheus-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
events="$work/events.json"

echo "test.sh: bazel test ${config[*]} ${args[*]}"
start=$SECONDS
status=0
bazel test "${config[@]+"${config[@]}"}" --build_event_json_file="$events" "${args[@]}" </dev/null || status=$?
elapsed=$((SECONDS - start))

# One line per test target from Bazel's build event log, then the totals.
python3 - "$events" "$status" "$elapsed" <<'PY'
import json, sys

events_path, status, elapsed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tests, built_not, results = set(), set(), {}
try:
    with open(events_path) as f:
        for line in f:
            event = json.loads(line)
            kind, key = next(iter(event["id"].items()))
            label = key.get("label") if isinstance(key, dict) else None
            if kind == "targetConfigured" and "testSize" in event.get("configured", {}):
                tests.add(label)
            elif kind == "targetCompleted" and not event.get("completed", {}).get("success", False):
                built_not.add(label)
            elif kind == "testSummary":
                # A build that dies midway (e.g. the disk fills) reports "aborted" in place of a summary.
                aborted = event.get("aborted", {})
                results[label] = event.get("testSummary", {}).get(
                    "overallStatus", "ABORTED (" + aborted.get("reason", "no reason given") + ")" if aborted else "NO_STATUS")
except FileNotFoundError:
    pass
for label in tests - results.keys():
    results[label] = "FAILED_TO_BUILD" if label in built_not else "NOT_RUN"

passed = sorted(l for l, s in results.items() if s in ("PASSED", "FLAKY"))
failed = sorted(l for l, s in results.items() if s not in ("PASSED", "FLAKY"))
for label in failed:
    print(f"test.sh: {results[label]}: {label}")
for label in passed:
    if results[label] == "FLAKY":
        print(f"test.sh: FLAKY (passed on retry): {label}")
if status != 0 and not failed:
    print(f"test.sh: bazel failed (exit status {status}) before running any test; see its errors above")
print(f"test.sh: bazel exit status {status} after {elapsed}s")
print(f"bazel: {len(passed)} passed, {len(failed)} failed")
PY
exit "$status"
