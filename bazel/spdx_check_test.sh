#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# Tests bazel/spdx_check.py on small git trees made here: it must pass a clean
# tree and fail, naming the file and the reason, on each kind of violation.
set -euo pipefail

check="$TEST_SRCDIR/$TEST_WORKSPACE/bazel/spdx_check.py"
failures=0
# Never let git find a repository above the scratch trees.
export GIT_CEILING_DIRECTORIES="$TEST_TMPDIR"

new_tree() {
  tree="$(mktemp -d "$TEST_TMPDIR/tree.XXXXXX")"
  git -C "$tree" init -q
  mkdir -p "$tree/sdk-rust/src" "$tree/scheduler/src/bpf" "$tree/abi/c" "$tree/.ci"
  printf '// SPDX-License-Identifier: Apache-2.0 OR MIT\nfn main() {}\n' >"$tree/sdk-rust/src/main.rs"
  printf '// SPDX-License-Identifier: GPL-2.0-only\nint x;\n' >"$tree/scheduler/src/bpf/main.bpf.c"
  printf '/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */\n' >"$tree/abi/c/morpheus_abi.h"
  printf '#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0 OR MIT\n' >"$tree/.ci/run"
  printf '{"no": "comments in json"}\n' >"$tree/package.json"
  printf 'notes without a licence line\n' >"$tree/README.md"
}

expect() {  # expect PASS|FAIL WHAT [PATTERN]
  local want="$1" what="$2" pattern="${3:-}" out rc=0
  out="$(python3 "$check" "$tree" 2>&1)" || rc=$?
  if [[ $want == PASS && $rc -ne 0 ]] || [[ $want == FAIL && $rc -ne 1 ]]; then
    echo "FAIL: $what: expected $want, exit code $rc; output:"; echo "$out"; failures=$((failures + 1)); return
  fi
  if [[ -n $pattern ]] && ! grep -qF -- "$pattern" <<<"$out"; then
    echo "FAIL: $what: output lacks '$pattern'; output:"; echo "$out"; failures=$((failures + 1)); return
  fi
  echo "ok: $what"
}

new_tree
expect PASS "clean tree" "4 source files checked, 0 with problems"

new_tree
printf 'fn f() {}\n' >"$tree/sdk-rust/src/lib.rs"
expect FAIL "missing SPDX line" "sdk-rust/src/lib.rs: no 'SPDX-License-Identifier:' line"

new_tree
printf '#!/bin/sh\necho no licence\n' >"$tree/.ci/extra"
expect FAIL "extensionless script without SPDX" ".ci/extra: no 'SPDX-License-Identifier:'"

new_tree
printf '// SPDX-License-Identifier: GPL-2.0-only\n' >"$tree/sdk-rust/src/lib.rs"
expect FAIL "GPL outside scheduler/" "sdk-rust/src/lib.rs: licence 'GPL-2.0-only' is not allowed here"

new_tree
printf '# SPDX-License-Identifier: MIT\n' >"$tree/sdk-rust/build.py"
expect FAIL "licence not in the allowed set" "sdk-rust/build.py: licence 'MIT' is not allowed here"

new_tree
printf 'target/\n' >"$tree/.gitignore"
mkdir -p "$tree/target"
printf 'fn generated() {}\n' >"$tree/target/out.rs"
expect PASS "ignored build output is skipped" "0 with problems"

empty="$(mktemp -d "$TEST_TMPDIR/nogit.XXXXXX")"
tree="$empty"
expect FAIL "not a git work tree" "is not a git work tree"

echo "spdx_check_test: $failures failed"
((failures == 0))
