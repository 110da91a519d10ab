#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Fleet metrics: two agent containers (two "nodes", each with its own socket directory and a service
# container registered with it) expose --metrics; a real Prometheus (Debian's, started here) scrapes
# both with a node label and loads deploy/prometheus/rules.yaml; PromQL queries over its HTTP API
# return the hints, acknowledged yields and escalations of each node, and the recording rules give
# each node's rates. Every verdict is a state awaited with a generous deadline. Needs root, podman and
# prometheus (tools/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=deploy/testlib.sh
source "$here/testlib.sh"
AWAIT_INTERVAL=1

# Four free local TCP ports: two agents, Prometheus, and one spare.
read -r port_a port_b port_prom _ < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')

testlib_setup prometheus-test "test-mp$$" node prometheus
prom_pid=""
# Stops Prometheus (it writes into $tmp) before the containers, images and $tmp go.
cleanup() {
  if [[ -n $prom_pid ]]; then
    kill "$prom_pid" 2>/dev/null || true
    wait "$prom_pid" 2>/dev/null || true
  fi
  testlib_cleanup
}
trap cleanup EXIT
AGENT_OPTS+=(--network=host)

# One node: its socket directory, its agent (enforced, --metrics on the host's loopback), a service.
start_node() {
  local node="$1" port="$2" dir="$tmp/$1"
  mkdir -m 0755 "$dir"
  start_agent "$tag-agent-$node" "$dir" --mode enforced --metrics "127.0.0.1:$port"
  containers+=("$tag-svc-$node")
  pod_run -d --name "$tag-svc-$node" --user 1001:1001 --group-add "$GID" --network=none --read-only -v "$dir:/run/morpheus:ro" \
    "$service_image" hog,cooperative >/dev/null
}
start_node node-a "$port_a"
start_node node-b "$port_b"

cat >"$tmp/prometheus.yml" <<CONFIG
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $here/prometheus/rules.yaml
scrape_configs:
  - job_name: morpheus
    static_configs:
      - targets: ["127.0.0.1:$port_a"]
        labels: {node: node-a}
      - targets: ["127.0.0.1:$port_b"]
        labels: {node: node-b}
CONFIG
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" --web.listen-address="127.0.0.1:$port_prom" \
  >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
say "prometheus $(prometheus --version 2>&1 | head -n 1 | awk '{print $3}') on 127.0.0.1:$port_prom scrapes node-a (127.0.0.1:$port_a) and node-b (127.0.0.1:$port_b)"

# The PromQL query $1 as "node=value" pairs, sorted ("" while Prometheus is not answering).
promql() {
  curl -sf --get "http://127.0.0.1:$port_prom/api/v1/query" --data-urlencode "query=$1" 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(" ".join(sorted("%s=%g" % (x["metric"].get("node", "?"), float(x["value"][1])) for x in r)))' 2>/dev/null || true
}
# Whether the query $1 gives both nodes a value above 0.
both_positive() {
  local out
  out="$(promql "$1")"
  [[ $out =~ ^node-a=([0-9.e+-]+)\ node-b=([0-9.e+-]+)$ ]] &&
    python3 -c 'import sys; sys.exit(0 if all(float(v) > 0 for v in sys.argv[1:]) else 1)' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
}

HINTS='sum by (node) (morpheus_hints_emitted_total{job="morpheus"})'
YIELDS='sum by (node) (morpheus_reaction_samples_total{job="morpheus", kind="acknowledgement"})'
ESCALATIONS='sum by (node) (morpheus_escalations_total{job="morpheus"})'
await "both nodes scraped" "[[ \$(promql 'up{job=\"morpheus\"}') == 'node-a=1 node-b=1' ]]" && say "ok: up: $(promql 'up{job="morpheus"}')"
for q in "hints:$HINTS" "acknowledged yields:$YIELDS" "escalations:$ESCALATIONS"; do
  await "${q%%:*} on both nodes" "both_positive '${q#*:}'" && say "ok: ${q%%:*} per node: $(promql "${q#*:}")   (${q#*:})"
done
for rule in node:morpheus_hints:rate5m node:morpheus_acknowledgements:rate5m node:morpheus_escalations:rate5m; do
  await "recording rule $rule for both nodes" "both_positive '$rule'" && say "ok: $rule: $(promql "$rule")"
done
out="$(curl -sf "http://127.0.0.1:$port_prom/api/v1/rules" | python3 -c '
import json, sys
g = json.load(sys.stdin)["data"]["groups"]
print(" ".join(sorted(r["name"] for x in g for r in x["rules"] if r["health"] != "ok")))')"
if [[ -z $out ]]; then say "ok: every rule of deploy/prometheus/rules.yaml evaluates (health ok)"; else fail "rules not healthy: $out"; fi

if ((failures)); then
  say "prometheus log:"
  tail -n 20 "$tmp/prometheus.log"
fi
finish
