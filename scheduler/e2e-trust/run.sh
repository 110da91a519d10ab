#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The attack tests of the security review (attacks.py): builds scx_morpheus, copies the binary out of
# the (possibly shared) cargo target directory, and runs every attack as real unprivileged users.
# Needs root (it creates and removes the users morpheus-atk and morpheus-vic and the group
# morpheus-trust). Usage: run.sh [S1 S2 ...]
# The attacks run under load by default: one busy loop per CPU beside them, for the whole run, so that
# no verdict depends on an idle machine (MORPHEUS_TRUST_LOAD=0 runs them without).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -p scx_morpheus
target_dir="$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
load=()
# Stops only the busy loops this script started (by pid), and removes the copy.
trap 'if ((${#load[@]})); then kill "${load[@]}" 2>/dev/null || true; wait "${load[@]}" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
cp "$target_dir/debug/scx_morpheus" "$work/scx_morpheus"
chmod 0755 "$work"
# The users and group are machine-wide: runs from several checkouts take this lock in turn.
exec 9>/run/lock/morpheus-trust-attacks.lock
flock 9
if [[ "${MORPHEUS_TRUST_LOAD:-1}" != 0 ]]; then
  for _ in $(seq "$(nproc)"); do
    bash -c 'while :; do :; done' 9>&- &
    load+=("$!")
  done
  echo "run.sh: ${#load[@]} busy loop(s) beside the attacks (MORPHEUS_TRUST_LOAD=0: none)" >&2
fi
# Not exec: the EXIT trap must still remove the copy (36 MB per run was left in /tmp).
python3 e2e-trust/attacks.py --bin "$work/scx_morpheus" "$@"
