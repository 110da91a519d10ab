#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# `npm pack` of @morpheus-sched/node with the generated ABI module (@morpheus/abi, a bundled dependency)
# inside. Usage: tools/pack.sh DEST_DIR [--platforms]; prints the tarballs' paths, the main package's last.
# Without a flag: one package with linux-x64-gnu's addon inside (native/morpheus.linux-x64-gnu.node), what
# the repository's own x86-64 tests and images install.
# --platforms: the layout that is released, napi-rs's: the main package carries no addon; each triple of
# package.json's napi.targets is a platform package @morpheus-sched/node-<triple> (made by
# `napi create-npm-dirs`: os/cpu/libc fields, the addon at its root), named as an optionalDependency of the
# main package's version, so npm installs only the one of the machine it runs on; lib/native.js resolves it.
# The package is staged in a temporary directory so that the bundled dependency is a real copy of
# abi/node (in the source tree it is a symlink, which npm does not pack).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$(cd "${1:?usage: tools/pack.sh DEST_DIR [--platforms]}" && pwd)"
platforms=0
case "${2:-}" in
  "") ;;
  --platforms) platforms=1 ;;
  *) echo "usage: tools/pack.sh DEST_DIR [--platforms]" >&2; exit 2 ;;
esac
"$here/tools/build.sh"
((platforms)) && "$here/tools/build.sh" --target aarch64-unknown-linux-gnu
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cd "$here"
cp -r package.json lib native register.js register.mjs examples "$stage/"
rm -f "$stage/native/.build.lock"
rm -rf "$stage"/native/.build.*
if ((platforms)); then
  # Every addon is in its platform package, none in the main package.
  find "$stage/native" -name 'morpheus.*.node' -delete
  node_modules/.bin/napi create-npm-dirs --cwd "$stage" --npm-dir npm >&2
  node - "$stage" <<'EOF'
const fs = require('node:fs');
const path = require('node:path');
const stage = process.argv[2];
const main = JSON.parse(fs.readFileSync(path.join(stage, 'package.json'), 'utf8'));
main.optionalDependencies = {};
for (const dir of fs.readdirSync(path.join(stage, 'npm'))) {
  const platform = JSON.parse(fs.readFileSync(path.join(stage, 'npm', dir, 'package.json'), 'utf8'));
  main.optionalDependencies[platform.name] = platform.version;
}
fs.writeFileSync(path.join(stage, 'package.json'), JSON.stringify(main, null, 2) + '\n');
EOF
  for dir in "$stage"/npm/*/; do
    platform="$(basename "$dir")"
    cp "native/morpheus.$platform.node" "$dir/"
    (cd "$dir" && npm pack --silent --pack-destination "$dest") | tail -n 1 | sed "s|^|$dest/|"
  done
  rm -rf "$stage/npm"
else
  # The main package carries linux-x64-gnu's addon only.
  find "$stage/native" -name 'morpheus.*.node' ! -name 'morpheus.linux-x64-gnu.node' -delete
fi
mkdir -p "$stage/node_modules/@morpheus"
# What npm itself would install from the file: dependency, as a plain directory.
(cd "$here/../abi/node" && npm pack --silent --pack-destination "$stage" >/dev/null)
mkdir -p "$stage/node_modules/@morpheus/abi"
tar -xzf "$stage"/morpheus-abi-*.tgz -C "$stage/node_modules/@morpheus/abi" --strip-components=1
rm "$stage"/morpheus-abi-*.tgz
(cd "$stage" && npm pack --silent --pack-destination "$dest") | tail -n 1 | sed "s|^|$dest/|"
