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
# shellcheck source=deploy/images/podman.sh
source "$here/images/podman.sh"

GID=2390
DEADLINE=${MORPHEUS_CONTAINER_DEADLINE:-240}
failures=0
say() { printf 'jvm-container-test: %s\n' "$*"; }
fail() { printf 'jvm-container-test: FAIL: %s\n' "$*"; failures=$((failures + 1)); }
die() { printf 'jvm-container-test: error: %s\n' "$*" >&2; exit 1; }
[[ $EUID -eq 0 ]] || die "needs root"
command -v podman >/dev/null || die "podman not found (tools/setup.sh installs it)"

tag="test-mj$$"
agent="$tag-agent" service="$tag-jvm"
tmp="$(mktemp -d /tmp/morpheus-jvm-container-test.XXXXXX)"
chmod 0755 "$tmp"
mkdir -m 0755 "$tmp/run-morpheus"
cleanup() {
  pod rm -f -t 2 "$service" "$agent" >/dev/null 2>&1 || true
  pod rmi -f "localhost/morpheus/scx_morpheus:$tag" "localhost/morpheus/jvm-service:$tag" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

await() {
  local what="$1" cond="$2" start=$SECONDS
  until eval "$cond"; do
    if ((SECONDS - start > DEADLINE)); then
      fail "waited ${DEADLINE}s for: $what"
      return 1
    fi
    sleep 0.5
  done
}
snapshot() { pod exec "$agent" morpheus top --json --socket /run/morpheus/agent.sock >"$tmp/stats.json" 2>/dev/null; }
query() {
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1])); w = m["workers"]
by = {x["comm"]: x for x in w}
print(eval(sys.argv[2]))' "$tmp/stats.json" "$1"
}

say "building the images (deploy/images/build.sh --tag $tag agent jvm)"
bash "$here/images/build.sh" --tag "$tag" agent jvm >/dev/null

# The DaemonSet's container (deploy/base, SYS_NICE from overlays/enforced).
pod_run -d --name "$agent" --pid=host --network=none --read-only --cap-drop=all \
  --cap-add=CHOWN,SYS_PTRACE,DAC_READ_SEARCH,CHECKPOINT_RESTORE,SYS_NICE -v "$tmp/run-morpheus:/run/morpheus" \
  "localhost/morpheus/scx_morpheus:$tag" --backend sim --mode enforced --socket /run/morpheus/agent.sock --socket-group "$GID" >/dev/null
await "the agent serving" "pod logs $agent 2>&1 | grep -q 'listening for registrations'"
# The SDK copies its natives out of the jar: a read-only root needs a writable /tmp (an emptyDir).
pod_run -d --name "$service" --user 1005:1005 --group-add "$GID" --network=none --read-only --tmpfs /tmp \
  -e HOG_BURST_MS=3000 -v "$tmp/run-morpheus:/run/morpheus:ro" "localhost/morpheus/jvm-service:$tag" hog,critical,unescapable >/dev/null
for role in hog critical unescapable; do
  await "the $role thread registered" "pod logs $service 2>&1 | grep -q 'role=$role registered'" &&
    say "ok: $(pod logs "$service" 2>&1 | grep "role=$role registered" | head -n 1)"
done
# Thread names are the comm the agent records (15 bytes): morpheus-hog, morpheus-critic, morpheus-unesca.
HOG='by["morpheus-hog"]["escalations"] > 0 and by["morpheus-hog"]["yields"] > 0'
JUDGED='m["gate_verdicts"]["critical"] > 0 and m["gate_verdicts"]["not_escapable"] > 0'
await "the hog escalated and the others judged by the gate" \
  "snapshot && [[ \$(query 'len(by) == 3 and $HOG and $JUDGED' 2>/dev/null) == True ]]"
snapshot
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
if ((failures)); then
  say "$failures check(s) failed"
  exit 1
fi
say "all checks passed"
