#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# `npm pack` of @morpheus-sched/node with the prebuilt linux-x64-gnu addon and the generated ABI module
# (@morpheus/abi, a bundled dependency) inside. Usage: tools/pack.sh DEST_DIR; prints the tarball's path.
# The package is staged in a temporary directory so that the bundled dependency is a real copy of
# abi/node (in the source tree it is a symlink, which npm does not pack).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$(cd "${1:?usage: tools/pack.sh DEST_DIR}" && pwd)"
"$here/tools/build.sh"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cd "$here"
cp -r package.json lib native register.js register.mjs examples "$stage/"
rm -f "$stage/native/.build.lock"
rm -rf "$stage"/native/.build.*
mkdir -p "$stage/node_modules/@morpheus"
# What npm itself would install from the file: dependency, as a plain directory.
(cd "$here/../abi/node" && npm pack --silent --pack-destination "$stage" >/dev/null)
mkdir -p "$stage/node_modules/@morpheus/abi"
tar -xzf "$stage"/morpheus-abi-*.tgz -C "$stage/node_modules/@morpheus/abi" --strip-components=1
rm "$stage"/morpheus-abi-*.tgz
(cd "$stage" && npm pack --silent --pack-destination "$dest") | tail -n 1 | sed "s|^|$dest/|"
