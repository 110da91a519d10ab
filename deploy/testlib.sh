#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The set-up the container tests of deploy/ share (container_test.sh, jvm_container_test.sh,
# prometheus_test.sh), sourced by them after `set -euo pipefail`; it sources images/podman.sh (`pod`,
# `pod_run`). `testlib_setup NAME TAG SERVICE [COMMAND...]` checks root, podman and the COMMANDs,
# makes $tmp, arranges the clean-up on exit and builds the agent's image and the SERVICE example image
# tagged TAG ($agent_image, $service_image). It provides:
#   say/fail/die  a line prefixed with NAME; fail counts into $failures; die exits 1;
#   await         waits for a shell condition, failing the test after $DEADLINE seconds;
#   start_agent   the DaemonSet's agent container ($AGENT_OPTS, $AGENT_ARGS: deploy/base, overlays/enforced);
#   await_registered  waits for a service container's worker to log its registration;
#   snapshot/query  an agent's `morpheus top --json` and Python expressions over it;
#   finish        the verdict: exit 1 if any check failed.
# Containers appended to $containers are removed on exit, with the two images and $tmp.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/images/podman.sh
source "$here/images/podman.sh"

GID=2390                                     # the DaemonSet's --socket-group
DEADLINE=${MORPHEUS_CONTAINER_DEADLINE:-240} # seconds any one awaited state may take
AWAIT_INTERVAL=0.5                           # seconds between two evaluations of an awaited condition
# The DaemonSet's container as podman options (deploy/base/daemonset.yaml; SYS_NICE from
# overlays/enforced), and the agent's arguments; a test appends its network and extras.
AGENT_OPTS=(--pid=host --read-only --cap-drop=all --cap-add=CHOWN,SYS_PTRACE,DAC_READ_SEARCH,CHECKPOINT_RESTORE,SYS_NICE)
AGENT_ARGS=(--backend sim --socket /run/morpheus/agent.sock --socket-group "$GID")
failures=0
containers=()
testlib_name=test
tag=""
tmp=""
say() { printf '%s: %s\n' "$testlib_name" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$testlib_name" "$*"; failures=$((failures + 1)); }
die() { printf '%s: error: %s\n' "$testlib_name" "$*" >&2; exit 1; }

# Removes this run's containers, its two images and $tmp (the EXIT trap; a test with more to stop
# calls it from its own trap).
testlib_cleanup() {
  local c
  for c in "${containers[@]+"${containers[@]}"}"; do pod rm -f -t 2 "$c" >/dev/null 2>&1 || true; done
  [[ -z $tag ]] || pod rmi -f "$agent_image" "$service_image" >/dev/null 2>&1 || true
  [[ -z $tmp ]] || rm -rf "$tmp"
}

# testlib_setup NAME TAG SERVICE [COMMAND...]: NAME prefixes every line; TAG names this run's images;
# SERVICE is the example image to build besides the agent's (node or jvm; deploy/images/build.sh);
# podman and each COMMAND must be on PATH.
testlib_setup() {
  testlib_name="$1"
  [[ $EUID -eq 0 ]] || die "needs root (containers in the host's pid namespace, services under uids of their own)"
  local c
  for c in podman "${@:4}"; do
    command -v "$c" >/dev/null || die "$c not found (tools/setup.sh installs it)"
  done
  agent_image="localhost/morpheus/scx_morpheus:$2"
  service_image="localhost/morpheus/$3-service:$2"
  tmp="$(mktemp -d "/tmp/morpheus-$1.XXXXXX")"
  chmod 0755 "$tmp"
  trap testlib_cleanup EXIT
  tag="$2"
  say "building the images (deploy/images/build.sh --tag $tag agent $3)"
  bash "$here/images/build.sh" --tag "$tag" agent "$3" >/dev/null
}

# Waits until the shell condition $2 holds; fails the test naming $1 after DEADLINE seconds.
await() {
  local what="$1" cond="$2" start=$SECONDS
  until eval "$cond"; do
    if ((SECONDS - start > DEADLINE)); then
      fail "waited ${DEADLINE}s for: $what"
      return 1
    fi
    sleep "$AWAIT_INTERVAL"
  done
}

# start_agent NAME DIR [agent arguments...]: the agent's image as container NAME with ${AGENT_OPTS[@]}
# and DIR as the node's /run/morpheus, run with ${AGENT_ARGS[@]} and the arguments; waits until it serves.
start_agent() {
  local name="$1" dir="$2"
  shift 2
  containers+=("$name")
  pod_run -d --name "$name" "${AGENT_OPTS[@]}" -v "$dir:/run/morpheus" "$agent_image" "${AGENT_ARGS[@]}" "$@" >/dev/null
  await "agent $name serving" "pod logs $name 2>&1 | grep -q 'listening for registrations'"
}

# Waits until service container $1 logs that its $2 worker registered, and says so with that line (a
# deadline passed is a failure counted by await, not an exit).
await_registered() {
  if await "$1's $2 worker registered" "pod logs $1 2>&1 | grep -q 'role=$2 registered'"; then
    say "ok: $1: $(pod logs "$1" 2>&1 | grep "role=$2 registered" | head -n 1)"
  fi
}

# One stats snapshot of agent container $1 (morpheus top --json, inside the agent's image) into $tmp/stats.json.
snapshot() {
  pod exec "$1" morpheus top --json --socket /run/morpheus/agent.sock >"$tmp/stats.json" 2>/dev/null
}

# Evaluates the Python expression $1 over the snapshot (m: the stats; w: its workers; by: the workers by comm).
query() {
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1])); w = m["workers"]
by = {x["comm"]: x for x in w}
print(eval(sys.argv[2]))' "$tmp/stats.json" "$1"
}

# The verdict: exits 1 naming the count if any check failed.
finish() {
  if ((failures)); then
    say "$failures check(s) failed"
    exit 1
  fi
  say "all checks passed"
}
