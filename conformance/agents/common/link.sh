#!/bin/sh
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# link.sh OUTPUT CC-ARGS...: `cc -o OUTPUT CC-ARGS...`, linked under a name of its own and then renamed
# onto OUTPUT. The linker's half-written output is not executable yet, and a gate of this tree starting
# the agent meanwhile would get EACCES; a running agent keeps the file it was started from. LINK_CC names
# another compiler driver (a cross gcc: agents/c-arm64) instead of cc.
set -eu
[ $# -ge 2 ] || { echo "usage: link.sh OUTPUT CC-ARGS..." >&2; exit 2; }
out=$1
shift
tmp="$(dirname "$out")/.$(basename "$out").linking.$$"
mkdir -p "$(dirname "$out")"
"${LINK_CC:-cc}" -o "$tmp" "$@" || { rm -f "$tmp"; exit 1; }
mv -f "$tmp" "$out"
