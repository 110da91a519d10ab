#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The agent and two services in real containers (podman, images from deploy/images/build.sh), on this
# machine as one Kubernetes node would run them (deploy/base): the agent in the host's pid namespace
# with the DaemonSet's capabilities, the node's socket directory shared read-only into each service,
# each service in a pid namespace of its own under a uid of its own, member of the socket's group.
#
#   1. bad input: the agent image without the host's pid namespace, without root, without CAP_CHOWN,
#      CAP_SYS_PTRACE or CAP_CHECKPOINT_RESTORE, enforced without CAP_SYS_NICE, tracing without
#      CAP_BPF, exits 78 naming what is missing; the agent refuses a socket directory that belongs
#      to another uid, naming it and its owner;
#   2. service A (uid 1001: hog, cooperative) and B (uid 1002: critical, unescapable) register through
#      the shared socket; every worker gets hints, A's and B's checkpointing workers acknowledge; in
#      enforced mode A's escapable hog is escalated, while B's critical-section and escapable=0 workers
#      are judged by the gate (verdicts critical and not_escapable) and never escalated;
#   3. a service without the socket runs detached and logs why; one whose uid may not use the socket
#      (not in its group) is refused with the reason and runs detached;
#   4. neither service can see or signal the other's processes (pid namespaces), and each uid has a
#      region of its own (the agent's trust domains, spec/SCB.md §10);
#   5. the agent's container is SIGKILLed while A's hog is demoted (SCHED_IDLE); the next agent
#      container restores it from the journal in the node's socket directory before serving, and
#      the services register again on their own; a final SIGTERM leaves no demoted thread behind.
#
# Every verdict is a state reached (a log line, a stats field, a thread's policy), waited for with a
# generous deadline: a slow machine only makes the test slower. Needs root and podman (tools/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
# shellcheck source=deploy/testlib.sh
source "$here/testlib.sh"

run_id="mt$$"
# Container names, unique to this run.
AGENT1="$run_id-agent1" AGENT2="$run_id-agent2" SVC_A="$run_id-svc-a" SVC_B="$run_id-svc-b" SVC_C="$run_id-svc-c" SVC_D="$run_id-svc-d"
testlib_setup container-test "test-$run_id" node
node="$tmp/run-morpheus" # the node's /run/morpheus
mkdir -m 0755 "$node"

# The DaemonSet's container (testlib.sh's AGENT_OPTS and AGENT_ARGS) with the tracing backend's
# capabilities, and the agent's throttle bound.
AGENT_OPTS+=(--network=none --cap-add=BPF,PERFMON)
AGENT_ARGS+=(--throttle-max-ms 60000)

# Starts service container $1 as uid $2 with roles $3; further arguments are podman options.
start_service() {
  local name="$1" uid="$2" roles="$3"
  shift 3
  containers+=("$name")
  pod_run -d --name "$name" --user "$uid:$uid" --network=none --read-only -e HOG_BURST_MS=3000 "$@" "$service_image" "$roles" >/dev/null
}

# The scheduling policy of thread $2 of host process $1 (/proc/PID/task/TID/stat field 41; 5: SCHED_IDLE).
policy() {
  awk '{ sub(/.*\) /, ""); print $39 }' "/proc/$1/task/$2/stat"
}

# Sets demoted to one of the threads $3 (tids) of host process $2 seen demoted (SCHED_IDLE) while the
# agent (host pid $1) is SIGSTOPped, and leaves the agent stopped; after DEADLINE seconds without one,
# leaves demoted empty, the agent running, and returns 1.
catch_demoted() {
  local agent_pid="$1" pid="$2" tids="$3" t start=$SECONDS
  demoted=""
  while [[ -z $demoted ]] && ((SECONDS - start <= DEADLINE)); do
    kill -STOP "$agent_pid"
    for t in $tids; do [[ $(policy "$pid" "$t") == 5 ]] && demoted=$t; done
    [[ -n $demoted ]] || { kill -CONT "$agent_pid"; sleep 0.2; }
  done
  [[ -n $demoted ]]
}

# --- 1. bad input: the agent's privileges and socket directory ----------------------------------
# Runs the agent image with podman options "$@" and agent arguments ${EXTRA[@]}; it must exit 78 saying $2.
bad_agent() {
  local what="$1" expected="$2"
  shift 2
  local out rc=0
  out="$(pod_run --rm --network=none "$@" -v "$node:/run/morpheus" "$agent_image" "${AGENT_ARGS[@]}" "${EXTRA[@]+"${EXTRA[@]}"}" 2>&1)" || rc=$?
  if [[ $rc -eq 78 && $out == *"$expected"* ]]; then
    say "ok: the agent image $what exits 78: $(grep -o 'error: .*' <<<"$out" | head -n 1)"
  else
    fail "the agent image $what: exit $rc (expected 78 naming '$expected'), output: $out"
  fi
}
EXTRA=()
bad_agent "in a pid namespace of its own" "the agent must share the host's pid namespace" --cap-drop=all --cap-add=CHOWN,SYS_PTRACE
bad_agent "as uid 1000" "not root (uid 0)" --pid=host --user 1000:1000
bad_agent "without CAP_CHOWN" "missing capability CAP_CHOWN" --pid=host --cap-drop=all --cap-add=SYS_PTRACE,DAC_READ_SEARCH,CHECKPOINT_RESTORE
bad_agent "without CAP_SYS_PTRACE" "missing capability CAP_SYS_PTRACE" --pid=host --cap-drop=all --cap-add=CHOWN,DAC_READ_SEARCH,CHECKPOINT_RESTORE
bad_agent "without CAP_CHECKPOINT_RESTORE" "missing capability CAP_CHECKPOINT_RESTORE" --pid=host --cap-drop=all --cap-add=CHOWN,SYS_PTRACE,DAC_READ_SEARCH
EXTRA=(--mode enforced)
bad_agent "in enforced mode without CAP_SYS_NICE" "missing capability CAP_SYS_NICE" --pid=host --cap-drop=all --cap-add=CHOWN,SYS_PTRACE,DAC_READ_SEARCH,CHECKPOINT_RESTORE
EXTRA=(--backend trace)
bad_agent "with the tracing backend without CAP_BPF" "missing capability CAP_BPF" --pid=host --cap-drop=all --cap-add=CHOWN,SYS_PTRACE,DAC_READ_SEARCH,CHECKPOINT_RESTORE
EXTRA=()

# A socket directory of another uid (as a hostPath the kubelet did not create): refused, named.
wrong="$tmp/wrong-owner"
mkdir -m 0755 "$wrong"
chown 1000:1000 "$wrong"
rc=0
out="$(pod_run --rm "${AGENT_OPTS[@]}" -v "$wrong:/run/morpheus" "$agent_image" "${AGENT_ARGS[@]}" 2>&1)" || rc=$?
if [[ $rc -ne 0 && $out == *"/run/morpheus"* && $out == *"1000"* ]]; then
  say "ok: a socket directory owned by uid 1000 is refused (exit $rc): $(grep -i 'error' <<<"$out" | head -n 1)"
else
  fail "a socket directory owned by uid 1000: exit $rc, output: $out"
fi

# --- 2. two services register, get hints, acknowledge; enforced mode escalates only A's hog -----
start_agent ${AGENT1} "$node" --mode enforced -v
SOCKET_MOUNT=(-v "$node:/run/morpheus:ro" --group-add "$GID")
start_service ${SVC_A} 1001 hog,cooperative "${SOCKET_MOUNT[@]}"
start_service ${SVC_B} 1002 critical,unescapable "${SOCKET_MOUNT[@]}"
for c in "${SVC_A} hog" "${SVC_A} cooperative" "${SVC_B} critical" "${SVC_B} unescapable"; do
  read -r name role <<<"$c"
  await_registered "$name" "$role"
done

# A's hog: escapable, outside any section. B's workers: one in a section, one escapable=0.
HOG='[x for x in w if x["uid"] == 1001 and x["escapable"] == 1 and x["escalations"] > 0 and x["yields"] > 0]'
JUDGED='m["gate_verdicts"]["critical"] > 0 and m["gate_verdicts"]["not_escapable"] > 0'
# Every worker outside a section acknowledges at its next checkpoint, which for the hog and the
# escapable=0 worker comes only after a burst: the snapshot is taken once each has, never at a moment
# chosen by how fast the host runs (a loaded host once caught B's escapable=0 worker before its first).
ACKED='all(x["yields"] > 0 and x["last_ack_seq"] > 0 for x in w if not x["in_critical"])'
await "A's hog escalated, B's workers judged by the gate and every worker outside a section acknowledged" \
  "snapshot ${AGENT1} && [[ \$(query 'len(w) == 4 and bool($HOG) and $JUDGED and $ACKED') == True ]]"
snapshot ${AGENT1}
say "${AGENT1}: workers (uid, tid, kind, hints, yields, escalations): $(query '[(x["uid"], x["tid"], "critical" if x["in_critical"] else "escapable=%d" % x["escapable"], x["preempt_seq"], x["yields"], x["escalations"]) for x in w]')"
say "${AGENT1}: gate verdicts $(query 'm["gate_verdicts"]')"
[[ $(query 'len([x for x in w if x["uid"] == 1001]) == 2 and len([x for x in w if x["uid"] == 1002]) == 2') == True ]] ||
  fail "the agent does not list two workers of uid 1001 and two of uid 1002"
if [[ $(query 'all(x["preempt_seq"] > 0 for x in w)') == True ]]; then say "ok: every worker got hints (preempt_seq > 0)"; else fail "a worker got no hint"; fi
if [[ $(query "$ACKED") == True ]]; then
  say "ok: every worker outside a section acknowledged (yields and last_ack_seq > 0)"
else
  fail "a worker outside a section never acknowledged"
fi
if [[ $(query "bool($HOG)") == True ]]; then say "ok: A's escapable hog was escalated"; else fail "A's hog was not escalated"; fi
if [[ $(query 'sum(x["escalations"] for x in w if x["uid"] == 1002)') == 0 ]]; then
  say "ok: B's critical-section and escapable=0 workers were never escalated (gate verdicts: critical $(query 'm["gate_verdicts"]["critical"]'), not_escapable $(query 'm["gate_verdicts"]["not_escapable"]'))"
else
  fail "a worker of B was escalated: $(query '[x for x in w if x["uid"] == 1002]')"
fi
[[ $(query '[x["in_critical"] for x in w if x["uid"] == 1002 and x["escapable"] == 1]') == "[1]" ]] || fail "B's critical worker is not seen in its section"

# --- 3. a service without the socket, and one not allowed to use it -----------------------------
start_service ${SVC_C} 1003 cooperative
await "${SVC_C} detached with a reason" "pod logs ${SVC_C} 2>&1 | grep -q 'role=cooperative notice .*running detached: no scheduler found'" &&
  say "ok: a service without the socket runs detached: $(pod logs ${SVC_C} 2>&1 | grep 'running detached' | head -n 1)"
start_service ${SVC_D} 1004 cooperative -v "$node:/run/morpheus:ro"
await "${SVC_D} refused with a reason" "pod logs ${SVC_D} 2>&1 | grep -q 'role=cooperative notice refused by the agent, running detached: .*ask for membership.*Permission denied'" &&
  say "ok: a service whose uid may not use the socket is refused: $(pod logs ${SVC_D} 2>&1 | grep 'refused by the agent' | head -n 1)"
for c in ${SVC_C} ${SVC_D}; do
  if [[ $(pod inspect -f '{{.State.Running}}' "$c") == true ]]; then say "ok: $c keeps running detached"; else fail "$c is not running"; fi
done

# --- 4. neither service sees or touches the other's workers ------------------------------------
snapshot ${AGENT1}
a_pid="$(query '[x["pid"] for x in w if x["uid"] == 1001][0]')"
b_pid="$(query '[x["pid"] for x in w if x["uid"] == 1002][0]')"
for probe in "${SVC_A} $b_pid" "${SVC_B} $a_pid"; do
  read -r name pid <<<"$probe"
  out="$(pod exec "$name" node /app/service.js --probe-pid "$pid")"
  if [[ $out == *"signal=ESRCH in_proc=false"* ]]; then
    say "ok: $name can neither see nor signal the other's process (host pid $pid): $out"
  else
    fail "$name reaches the other's process $pid: $out"
  fi
done
# The regions each process maps (memfds, through the host's /proc): one per uid, never shared.
region_of() {
  local f
  for f in /proc/"$1"/map_files/*; do
    if [[ $(readlink "$f") == /memfd:* ]]; then stat -L -c '%i' "$f"; fi
  done | sort -u | tr '\n' ' '
}
a_regions="$(region_of "$a_pid")" b_regions="$(region_of "$b_pid")"
if [[ -n $a_regions && -n $b_regions && -z $(comm -12 <(tr ' ' '\n' <<<"$a_regions" | sort) <(tr ' ' '\n' <<<"$b_regions" | sort) | tr -d '\n') ]]; then
  say "ok: A and B map different regions (memfd inodes: A $a_regions, B $b_regions)"
else
  fail "A and B do not map disjoint regions (A: '$a_regions', B: '$b_regions')"
fi

# --- 5. the agent's container restarted ---------------------------------------------------------
tids_of() { query "' '.join(str(x['tid']) for x in w if x['uid'] == $1)"; }
a_tids="$(tids_of 1001)"
# SIGSTOP the agent until one of A's workers is seen demoted (SCHED_IDLE) while it cannot change.
agent_pid="$(pod inspect -f '{{.State.Pid}}' ${AGENT1})"
catch_demoted "$agent_pid" "$a_pid" "$a_tids" || die "none of A's workers ($a_tids) was demoted within ${DEADLINE}s"
pod kill -s KILL ${AGENT1} >/dev/null
kill -CONT "$agent_pid" 2>/dev/null || true
await "${AGENT1} gone" "[[ \$(pod inspect -f '{{.State.Running}}' ${AGENT1}) == false ]]"
say "ok: ${AGENT1} SIGKILLed while A's thread $demoted is demoted: its policy is $(policy "$a_pid" "$demoted") (5: SCHED_IDLE) with no agent"
# The services wait, stopped, while the next agent starts: nothing but its recovery can touch them.
kill -STOP "$a_pid" "$b_pid"
start_agent ${AGENT2} "$node" --mode enforced -v
p="$(policy "$a_pid" "$demoted")"
if [[ $p == 0 ]]; then say "ok: ${AGENT2} restored A's thread $demoted (policy 0) from the journal before serving"; else fail "A's thread $demoted still has policy $p after ${AGENT2} started"; fi
kill -CONT "$a_pid" "$b_pid"
await "A's two workers and B's unescapable worker registered again with ${AGENT2}" \
  "snapshot ${AGENT2} && [[ \$(query 'len([x for x in w if x[\"uid\"] == 1001]) == 2 and len([x for x in w if x[\"uid\"] == 1002 and x[\"escapable\"] == 0]) == 1') == True ]]" &&
  say "ok: the services registered again on their own: $(pod logs ${SVC_A} 2>&1 | grep -c 'reattachments=1') of A's workers logged reattachments=1; ${AGENT2} lists $(query 'len(w)') workers (B's critical worker never checkpoints, so it stays lost)"

# A final SIGTERM while a worker is demoted leaves nothing behind.
agent_pid="$(pod inspect -f '{{.State.Pid}}' ${AGENT2})"
a_tids="$(snapshot ${AGENT2} && tids_of 1001)"
catch_demoted "$agent_pid" "$a_pid" "$a_tids" || fail "none of A's workers was demoted by ${AGENT2} within ${DEADLINE}s"
kill -TERM "$agent_pid"
kill -CONT "$agent_pid"
await "${AGENT2} exited" "[[ \$(pod inspect -f '{{.State.Running}}' ${AGENT2}) == false ]]"
left=""
for pid in $a_pid $b_pid; do
  for t in /proc/"$pid"/task/*; do
    [[ $(policy "$pid" "${t##*/}") == 0 ]] || left+=" $pid/${t##*/}"
  done
done
if [[ -z $left ]]; then
  say "ok: ${AGENT2} stopped (SIGTERM, exit $(pod inspect -f '{{.State.ExitCode}}' ${AGENT2})) with A's thread $demoted demoted: every thread of A and B is back to SCHED_OTHER"
else
  fail "threads left with a changed policy after the agent stopped:$left"
fi

finish
