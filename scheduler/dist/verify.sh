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
sed "s|^ExecStart=/usr/bin/scx_morpheus|ExecStart=$work/scx_morpheus|" dist/scx_morpheus.service >"$work/scx_morpheus.service"
out="$(systemd-analyze verify "$work/scx_morpheus.service" 2>&1 || true)"
# verify also reports problems of unrelated units installed on this machine: keep ours.
ours="$(grep -F "scx_morpheus.service" <<<"$out" || true)"
if [[ -n $ours ]]; then
  echo "systemd-analyze verify found problems in the unit:" >&2
  echo "$ours" >&2
  exit 1
fi
# The command line parses: --help after the unit's arguments must not report an unknown option.
args="$(sed -n 's|^ExecStart=/usr/bin/scx_morpheus ||p' dist/scx_morpheus.service)"
# shellcheck disable=SC2086
"$work/scx_morpheus" $args --help >/dev/null
echo "scx_morpheus.service: systemd-analyze verify is clean; its options parse"
