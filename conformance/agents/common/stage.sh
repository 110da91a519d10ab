#!/bin/sh
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# stage.sh DEST_DIR FILE...: put each FILE (a file or a symlink) into DEST_DIR under its own name by a
# rename, never by rewriting the file that is there. An agent of another gate still running on this
# tree keeps the inode it mapped; an in-place copy would change its code pages under it, and it dies
# of SIGBUS or SIGSEGV in the middle of a scenario (seen in a release gate test).
set -eu
[ $# -ge 2 ] || { echo "usage: stage.sh DEST_DIR FILE..." >&2; exit 2; }
dest=$1
shift
mkdir -p "$dest"
for file in "$@"; do
	[ -e "$file" ] || [ -L "$file" ] || { echo "stage.sh: $file does not exist" >&2; exit 1; }
	name=$(basename "$file")
	cp -P "$file" "$dest/.$name.staging.$$"
	mv -f "$dest/.$name.staging.$$" "$dest/$name"
done
