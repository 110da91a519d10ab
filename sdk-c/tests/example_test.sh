#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# The C example, built against the *installed* pkg-config file, runs against a sim region; the test
# plays the scheduler: it asks the worker to yield and checks that a checkpoint acknowledged exactly
# that request. Run by `make example-test` (BUILD is the Makefile's build directory; for a cross build,
# TARGET is the Rust target, EXAMPLE_CC its C compiler and RUN the emulator that runs the example).
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:?run through make example-test}"
prefix="$build/prefix"
tool="$build/region_tool"
region="$(mktemp -u /dev/shm/morpheus-example-XXXXXX)"
out="$build/worker_loop.out"
pid=""

cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  rm -f "$region"
}
trap cleanup EXIT
fail() { echo "example_test: FAIL: $*" >&2; [[ -f "$out" ]] && sed 's/^/  worker_loop| /' "$out" >&2; exit 1; }

rm -rf "$prefix"
make -s -C "$here" install PREFIX="$prefix" TARGET="${TARGET:-}" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists morpheus || fail "pkg-config does not find morpheus in $PKG_CONFIG_PATH"
# shellcheck disable=SC2046 # pkg-config output is a list of flags
${EXAMPLE_CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror "$here/examples/worker_loop.c" $(pkg-config --cflags --libs morpheus) \
  -pthread -Wl,-rpath,"$prefix/lib" -o "$build/worker_loop"
dynamic=$(readelf -d "$build/worker_loop")
grep -q 'NEEDED.*libmorpheus\.so\.' <<<"$dynamic" ||
  fail "worker_loop is not linked against the installed libmorpheus.so"

"$tool" create "$region" 4
slot=2
env "MORPHEUS_REGION=$region" ${RUN:-} "$build/worker_loop" --slot "$slot" --yields 1 --seconds 30 >"$out" 2>&1 &
pid=$!
"$tool" wait-state "$region" "$slot" RUNNING 10000 || fail "the worker never reached RUNNING"
seq="$("$tool" request "$region" "$slot")"
wait "$pid" || fail "worker_loop exited with status $?"
pid=""
# Read once the example has exited: it reaches RUNNING (in the region) before it prints this line, and
# under emulation or load the line could still be unwritten when wait-state returns.
grep -q "registered, slot $slot (attached)" "$out" || fail "the worker did not attach to slot $slot"
grep -q "checkpoint yielded, acknowledged preempt_seq $seq\$" "$out" ||
  fail "no checkpoint acknowledged request $seq"
show="$("$tool" show "$region" "$slot")"
[[ "$show" == *"state=INIT "* ]] || fail "slot $slot not released after unregister: $show"
[[ "$show" == *"last_ack_seq=$seq "* ]] || fail "last_ack_seq is not $seq: $show"
echo "example_test: ok: request $seq acknowledged by the C example's checkpoint ($show)"
