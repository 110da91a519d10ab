#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Checks the systemd unit with systemd-analyze verify (ExecStart pointed at a built scx_morpheus, since
# verify insists the binary exists), and that the options it passes are ones scx_morpheus accepts.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v systemd-analyze >/dev/null || { echo "verify.sh: systemd-analyze is not installed" >&2; exit 1; }
cargo build -p scx_morpheus --no-default-features
target_dir="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$target_dir/debug/scx_morpheus" "$work/scx_morpheus"
# verify_unit DIR: systemd-analyze verify of DIR/scx_morpheus.service (and its drop-ins in DIR).
verify_unit() {
  local out ours
  out="$(systemd-analyze verify "$1/scx_morpheus.service" 2>&1 || true)"
  # verify also reports problems of unrelated units installed on this machine: keep ours.
  ours="$(grep -F "scx_morpheus.service" <<<"$out" || true)"
  if [[ -n $ours ]]; then
    echo "systemd-analyze verify found problems in the unit ($1):" >&2
    echo "$ours" >&2
    exit 1
  fi
}
# check_args FILE: the command line of FILE's ExecStart parses (--help after it reports no unknown option).
check_args() {
  local args
  args="$(sed -n 's|^ExecStart=/usr/bin/scx_morpheus ||p' "$1")"
  [[ -n $args ]] || { echo "verify.sh: no scx_morpheus command line in $1" >&2; exit 1; }
  # shellcheck disable=SC2086
  "$work/scx_morpheus" $args --help >/dev/null
}
mkdir "$work/plain" "$work/metrics" "$work/metrics/scx_morpheus.service.d"
for dir in "$work/plain" "$work/metrics"; do
  sed "s|^ExecStart=/usr/bin/scx_morpheus|ExecStart=$work/scx_morpheus|" dist/scx_morpheus.service >"$dir/scx_morpheus.service"
done
sed "s|^ExecStart=/usr/bin/scx_morpheus|ExecStart=$work/scx_morpheus|" dist/scx_morpheus.service.d/metrics.conf \
  >"$work/metrics/scx_morpheus.service.d/metrics.conf"
# The descriptor limit: set, and a number large enough for the default caps (256 domains at two
# descriptors each, 64 connections, a descriptor per worker).
nofile="$(sed -n 's/^LimitNOFILE=//p' dist/scx_morpheus.service)"
[[ $nofile =~ ^[0-9]+$ ]] && ((nofile >= 4096)) ||
  { echo "verify.sh: dist/scx_morpheus.service must set LimitNOFILE= to a number >= 4096 (found '$nofile')" >&2; exit 1; }
verify_unit "$work/plain"
verify_unit "$work/metrics"
check_args dist/scx_morpheus.service
check_args dist/scx_morpheus.service.d/metrics.conf
echo "scx_morpheus.service (alone and with the metrics drop-in): systemd-analyze verify is clean; the options parse"
