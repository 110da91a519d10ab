#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# Runner behind tree_test / tree_binary (bazel/tree_test.bzl): finds the real
# source tree, changes into the target's working directory there and runs the
# command. Called only by the scripts those rules generate:
#
#   tree_exec.sh --runfiles DIR --label LABEL --runner PATH --workdir DIR
#                [--env KEY=VALUE]... -- PROGRAM [ARG]...
set -euo pipefail

die() {
  echo "tree_exec: ${label:-?}: $*" >&2
  exit 2
}

runfiles="" label="" runner="" workdir="" have_workdir=0
envs=()
while (($#)); do
  case "$1" in
    --runfiles) runfiles="$2"; shift 2 ;;
    --label) label="$2"; shift 2 ;;
    --runner) runner="$2"; shift 2 ;;
    --workdir) workdir="$2"; have_workdir=1; shift 2 ;;
    --env) envs+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) die "unknown option '$1' (this script is run by bazel/tree_test.bzl's targets)" ;;
  esac
done
(($# > 0)) || die "no command given"
[[ -n "$runfiles" && -n "$runner" && $have_workdir == 1 ]] || die "missing --runfiles, --runner or --workdir"

# The real workspace root. `bazel run` tells us; `bazel test` does not, but the
# runner's runfile is a symlink that leads back to bazel/tree_exec.sh in the
# source tree (these targets are never sandboxed).
if [[ -n "${BUILD_WORKSPACE_DIRECTORY:-}" ]]; then
  root="$BUILD_WORKSPACE_DIRECTORY"
else
  runner_link="$runfiles/$runner"
  [[ -e "$runner_link" ]] || die "runfile '$runner_link' is missing; is this target run by bazel test/run?"
  runner_real="$(readlink -f -- "$runner_link")"
  root="${runner_real%/"$runner"}"
  if [[ "$root" == "$runner_real" || "$root" == */execroot/* || "$root" == */bazel-out/* ]]; then
    die "runfile '$runner_link' resolves to '$runner_real', not into the source tree;" \
      "tree targets need runfile symlinks and no sandbox (tags local, no-sandbox)"
  fi
fi
[[ -f "$root/WORKSPACE" ]] || die "'$root' has no WORKSPACE file; cannot find the workspace root"

dir="$root${workdir:+/$workdir}"
[[ -d "$dir" ]] || die "working directory '$workdir' does not exist under '$root'"

export MORPHEUS_ROOT="$root"
export TREE_RUNFILES="$runfiles"
for kv in "${envs[@]+"${envs[@]}"}"; do
  export "${kv?}"
done

# Bazel's test setup puts '.' first in PATH; after the cd below that would
# let a file in the working directory shadow a real tool.
[[ "$PATH" == .:* ]] && PATH="${PATH#.:}"

cd "$dir"
command -v -- "$1" >/dev/null || die "program '$1' not found (in '$dir', PATH=$PATH)"
# One line so a failing test's log says exactly what ran and where.
printf 'tree_exec: %s: in %s: %s\n' "$label" "$dir" "$(printf '%q ' "$@")" >&2
exec "$@"
