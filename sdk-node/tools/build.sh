#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Build the addon with the napi-rs CLI (from npm, sdk-node/package-lock.json; it runs cargo and
# writes the TypeScript declarations of the native part) into sdk-node/native/.
# Usage: tools/build.sh [--target RUST-TARGET]: for this host, or cross-built for another Rust target
# (aarch64-unknown-linux-gnu: native/morpheus.linux-arm64-gnu.node, napi-rs's name for it, which
# lib/native.js loads on linux-arm64; tools/setup.sh installs the cross toolchain).
#
# `bazel test //sdk-node/... //conformance:node` runs two callers at once, and a test may have the
# addon loaded meanwhile: builds are serialised with a lock, and a file is replaced (a rename: a
# process that mapped the old one keeps it) only when its content changed.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
target=()
case "${1:-}" in
  "") ;;
  --target) target=(--target "${2:?tools/build.sh --target needs a Rust target}") ;;
  *) echo "usage: tools/build.sh [--target RUST-TARGET]" >&2; exit 2 ;;
esac
cd "$here"
mkdir -p native
exec 9>"$here/native/.build.lock"
flock 9
# Dependencies from the committed lock file, reinstalled only when it changed.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  # Not `npm ci`: the lock names @napi-rs/cli's optional per-platform packages that the registry does
  # not serve for every platform, and npm ci refuses such a lock as "out of sync" on a fresh clone.
  # `npm install --no-save` installs the locked versions and never rewrites the lock.
  npm install --no-save --no-audit --no-fund --loglevel=error >&2
fi
tmp="$(mktemp -d "$here/native/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
node_modules/.bin/napi build --release --platform "${target[@]}" --output-dir "$tmp" --no-js --dts binding.d.ts >&2
for file in "$tmp"/*; do
  name="$(basename "$file")"
  cmp -s "$file" "native/$name" || mv -f "$file" "native/$name"
done
