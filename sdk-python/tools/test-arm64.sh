#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
# The abi3 wheel for linux-aarch64: cross-built by maturin (--target aarch64-unknown-linux-gnu, linked by
# Debian's cross gcc through .cargo/config.toml), its manylinux tag checked against what its extension
# needs (tools/wheel_check.py, auditwheel's rule), installed by pip running on Debian's arm64 python3.11
# under qemu user-mode (tools/arm64/python.sh) into a fresh directory, then used there: the import, the
# example (examples/crunch.py, detached), a missing region refused naming it, and a worker attached to a
# sim region whose checkpoint acknowledges the request this script (the scheduler's part) writes.
# Usage: tools/test-arm64.sh [WHEEL_DIR] (the wheel is built and left there; default .build/wheels-arm64)
#        tools/test-arm64.sh --wheel WHEEL (a wheel built before, e.g. the release's: checked, installed, used).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
wheel=""
if [[ "${1:-}" == --wheel ]]; then
  wheel="$(cd "$(dirname "${2:?usage: tools/test-arm64.sh --wheel WHEEL}")" && pwd)/$(basename "$2")"
  [[ -f $wheel ]] || { echo "test-arm64: FAIL: no wheel $2" >&2; exit 1; }
fi
out="${1:-$here/.build/wheels-arm64}"
python_arm64="$root/tools/arm64/python.sh"
tool="${CARGO_TARGET_DIR:-$root/target}/sdk-c/region_tool"
work="$(mktemp -d)"
region="$(mktemp -u /dev/shm/morpheus-python-arm64-XXXXXX)"
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  rm -rf "$work" "$region"
}
trap cleanup EXIT
fail() { echo "test-arm64: FAIL: $*" >&2; exit 1; }

if [[ -z $wheel ]]; then
  mkdir -p "$out" "$here/.build"
  exec 9>"$here/.build/build-arm64.lock"
  flock 9
  rm -f "$out"/morpheus-*.whl
  "$here/tools/maturin.sh" build --release --quiet -m "$here/Cargo.toml" --target aarch64-unknown-linux-gnu -o "$out" >&2
  wheel="$(ls "$out"/morpheus-*.whl)"
fi
python3 "$here/tools/wheel_check.py" "$wheel" aarch64 || fail "$wheel is not what its tag says"

pip_wheel="$(ls "$("$python_arm64" --root)"/pip-*.whl)"
"$python_arm64" "$pip_wheel/pip" install --quiet --no-index --no-deps --disable-pip-version-check \
  --root-user-action=ignore --target "$work/site" "$wheel" || fail "pip on arm64 Python refused $wheel"
run() { PYTHONPATH="$work/site" PYTHONNOUSERSITE=1 MORPHEUS_REGION="" "$python_arm64" "$@"; }

out_import="$(cd / && run -c 'import platform, morpheus, morpheus._morpheus as ext; print(platform.machine(), ext.__file__, morpheus.checkpoint())')" ||
  fail "import on arm64 Python"
[[ "$out_import" == "aarch64 $work/site/morpheus/_morpheus.abi3.so False" ]] || fail "import: $out_import"
echo "test-arm64: imported on $out_import"

run "$here/examples/crunch.py" >"$work/crunch.out" 2>&1 || fail "the example: $(cat "$work/crunch.out")"
grep -q "^crunched 4 x 200000 in .*; worker detached$" "$work/crunch.out" || fail "the example printed $(cat "$work/crunch.out")"
echo "test-arm64: example: $(cat "$work/crunch.out")"

if run -c 'import morpheus; morpheus.init_worker(region="/nonexistent/morpheus-region", slot=1)' 2>"$work/bad.err"; then
  fail "a missing region was accepted"
fi
grep -q "/nonexistent/morpheus-region" "$work/bad.err" || fail "the refusal does not name the region: $(cat "$work/bad.err")"

make -s -C "$root/sdk-c" BUILD="$(dirname "$tool")" "$tool" >/dev/null
"$tool" create "$region" 4
slot=2
run - "$region" "$slot" >"$work/attached.out" 2>&1 <<'PY' &
import sys, time
import morpheus
worker = morpheus.init_worker(region=sys.argv[1], slot=int(sys.argv[2]))
assert worker.attached, worker
deadline = time.monotonic() + 120
while not morpheus.checkpoint():
    if time.monotonic() > deadline:
        sys.exit("no request in 120 s")
    time.sleep(0.001)
worker.close()
print("checkpoint yielded")
PY
pid=$!
"$tool" wait-state "$region" "$slot" RUNNING 120000 || fail "the arm64 worker never reached RUNNING: $(cat "$work/attached.out")"
seq="$("$tool" request "$region" "$slot")"
wait "$pid" || fail "the attached worker exited with status $?: $(cat "$work/attached.out")"
pid=""
grep -qx "checkpoint yielded" "$work/attached.out" || fail "the attached worker printed $(cat "$work/attached.out")"
show="$("$tool" show "$region" "$slot")"
[[ "$show" == *"last_ack_seq=$seq "* ]] || fail "last_ack_seq is not $seq: $show"
[[ "$show" == *"state=INIT "* ]] || fail "slot $slot not released after close: $show"
echo "test-arm64: ok: $(basename "$wheel") installed by pip on arm64 Python (qemu), example run, request $seq acknowledged ($show)"
