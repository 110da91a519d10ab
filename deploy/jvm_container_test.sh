#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The JVM example image (deploy/images/build.sh jvm: a jlink'd runtime, the released sdk-java jar,
# deploy/examples/jvm-service/Service.java) against the agent's image, as container_test.sh runs the
# Node one: the service, in a pid namespace of its own as uid 1005, registers its hog, critical and
# unescapable threads through the shared socket; each gets hints; in enforced mode the hog is
# escalated and acknowledges, the critical-section and escapable=0 threads are judged by the gate and
# never escalated. States are awaited with a generous deadline. Needs root and podman.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=deploy/testlib.sh
source "$here/testlib.sh"
testlib_setup jvm-container-test "test-mj$$" jvm
agent="$tag-agent" service="$tag-jvm"
containers+=("$service")
mkdir -m 0755 "$tmp/run-morpheus"

AGENT_OPTS+=(--network=none)
start_agent "$agent" "$tmp/run-morpheus" --mode enforced
# The SDK copies its natives out of the jar: a read-only root needs a writable /tmp (an emptyDir).
pod_run -d --name "$service" --user 1005:1005 --group-add "$GID" --network=none --read-only --tmpfs /tmp \
  -e HOG_BURST_MS=3000 -v "$tmp/run-morpheus:/run/morpheus:ro" "$service_image" hog,critical,unescapable >/dev/null
for role in hog critical unescapable; do await_registered "$service" "$role"; done
# Thread names are the comm the agent records (15 bytes): morpheus-hog, morpheus-critic, morpheus-unesca.
HOG='by["morpheus-hog"]["escalations"] > 0 and by["morpheus-hog"]["yields"] > 0'
JUDGED='m["gate_verdicts"]["critical"] > 0 and m["gate_verdicts"]["not_escapable"] > 0'
await "the hog escalated and the others judged by the gate" \
  "snapshot $agent && [[ \$(query 'len(by) == 3 and $HOG and $JUDGED' 2>/dev/null) == True ]]"
snapshot "$agent"
say "workers (comm, runtime, hints, yields, escalations, in_critical, escapable): $(query '[(x["comm"], x["runtime_kind"], x["preempt_seq"], x["yields"], x["escalations"], x["in_critical"], x["escapable"]) for x in w]')"
if [[ $(query 'all(x["runtime_kind"] == "JAVA" and x["uid"] == 1005 and x["preempt_seq"] > 0 for x in w)') == True ]]; then
  say "ok: three JAVA workers of uid 1005, each got hints"
else
  fail "the workers are not three hinted JAVA workers of uid 1005"
fi
if [[ $(query "$HOG") == True ]]; then say "ok: the escapable hog was escalated and acknowledged"; else fail "the hog was not escalated"; fi
if [[ $(query 'by["morpheus-critic"]["escalations"] + by["morpheus-unesca"]["escalations"]') == 0 && $(query 'by["morpheus-critic"]["in_critical"]') == 1 ]]; then
  say "ok: the critical-section and escapable=0 threads were never escalated (gate verdicts: $(query 'm["gate_verdicts"]'))"
else
  fail "a critical-section or escapable=0 thread was escalated: $(query 'w')"
fi
finish
