#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# The release gate refuses, and says why, in a scratch copy of this tree committed as its own repository:
#   * an SDK not releasable yet (an entry whose directory is missing), an unknown SDK, a conformance column
#     no platform's artifact carries (sdk-c's c-arm64 taken off its arm64 tarball), a dirty tree, a
#     kernel column that is missing, from another commit or red, a red live-kernel column of the SDK (sdk-c;
#     sdk-java, whose two live columns, FFM and JNI, must both be green: one missing, then one red);
#   * sdk-rust with its conformance agent broken on purpose (MORPHEUS_CONFORMANCE_BREAK=ack_before_yield):
#     the refusal names a red scenario and dist/ holds no rust artifact, not even a partial one;
# while sdk-c, gated at the same commit, still releases; its tarball carries RELEASE.json (gated, the
# commit, both conformance columns) and is then installed and used (install_test.sh c).
#
# The kernel and live columns here are fixtures written for the scratch commit (every gate scenario passing, or
# one failing): this tests the gate's judgement of that file, not the kernel (//scheduler:e2e_kernel does).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# A fixed scratch path, so cargo's fingerprints (paths included) are reused from one run to the next.
scratch=${TMPDIR:-/tmp}/morpheus-release-gate-test
repo=$scratch/repo
fail() { echo "gate-test: FAIL: $*" >&2; exit 1; }

# The tree as it is (tracked and new files, ignored ones left out), mtimes kept.
rm -rf "$repo"
mkdir -p "$repo"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r ls -d 2>/dev/null | tr '\n' '\0' |
	tar --null -T - -cf -) | tar -xf - -C "$repo"
rm -rf "$repo/.git" "$repo/dist" "$repo/conformance/results"
# An SDK the table knows whose branch has not landed (no directory on this commit).
cat >>"$repo/release/sdks.toml" <<-'EOF'

	[sdk.ruby]
	dir = "sdk-ruby"
	manifest = "sdk-ruby/morpheus.gemspec"
	version = "version"
	abi = "abi"
	changelog = "sdk-ruby/CHANGELOG.md"
	conformance = "ruby"
	live = "live-ruby"
	artifact = "gem"
	EOF
git -C "$repo" init --quiet
git -C "$repo" add -A
git -C "$repo" -c user.name=gate-test -c user.email=gate-test@localhost commit --quiet -m scratch
commit=$(git -C "$repo" rev-parse HEAD)
gate() { python3 "$repo/release/release.py" gate "$@" 2>&1; }

# expect_refusal TEXT SDK [ARGS...]: the gate exits 1 and its message contains TEXT.
expect_refusal() {
	local text=$1 out code=0
	shift
	out=$(gate "$@") || code=$?
	[[ $code -eq 1 ]] || fail "release $* exited $code, expected a refusal:\n$out"
	grep -qF -- "$text" <<<"$out" || fail "release $*: refusal does not say '$text':\n$out"
	[[ ! -e $repo/dist/$1 ]] || fail "release $* refused but left dist/$1"
	echo "gate-test: refused as expected ($*): $(grep -m1 'refused' <<<"$out")"
}

kernel_column() { # COMMIT [RED_SCENARIO]: the kernel column, and the live columns of sdk-c, sdk-rust, sdk-java
	mkdir -p "$repo/conformance/results"
	for sdk in c rust java-ffm java-jni; do
		python3 - "$1" "$sdk" >"$repo/conformance/results/live-$sdk.results.json" <<-'EOF'
		import json, sys
		rows = {r: {"status": "pass"} for r in ("observer_hints_advance_preempt_seq", "enforced_escapable_spinner_escalated")}
		print(json.dumps({"column": f"live-{sys.argv[2]}", "commit": sys.argv[1], "rows": rows}))
		EOF
	done
	python3 "$repo/conformance/harness/cli.py" export-gate-cases --cases "$scratch/cases.jsonl" >/dev/null
	python3 - "$scratch/cases.jsonl" "$1" "${2:-}" >"$repo/conformance/results/kernel.results.json" <<-'EOF'
	import json, sys
	names = sorted({json.loads(l)["scenario"] for l in open(sys.argv[1]) if l.strip()})
	rows = {n: {"status": "pass"} for n in names}
	if sys.argv[3]:
	    rows[sys.argv[3]] = {"status": "fail", "message": "fixture: answered wrongly"}
	print(json.dumps({"column": "kernel", "commit": sys.argv[2], "rows": rows}, indent=2))
	EOF
}

expect_refusal "is not releasable yet: sdk-ruby/ does not exist" ruby
expect_refusal "no SDK named 'cobol'" cobol

# A column the gate runs must be carried by exactly one platform's artifact (sdks.toml `platforms`): sdk-c with
# its arm64 column taken off the arm64 tarball is refused, naming the column (checked before the tree's state).
cp "$repo/release/sdks.toml" "$scratch/sdks.toml"
sed -i 's/linux-arm64-gnu = \["c-arm64"\]/linux-arm64-gnu = []/' "$repo/release/sdks.toml"
expect_refusal "column 'c-arm64' is carried by 0 platforms" c
cp "$scratch/sdks.toml" "$repo/release/sdks.toml"

touch "$repo/stray-file"
expect_refusal "the tree is not clean" c
rm "$repo/stray-file"

expect_refusal "kernel.results.json is missing" c
kernel_column 0123456789abcdef0123456789abcdef01234567
expect_refusal "is from commit 0123456789ab" c
kernel_column "$commit" gate_critical_blocks
expect_refusal "gate_critical_blocks: fixture: answered wrongly" c
kernel_column "$commit"
python3 - "$repo/conformance/results/live-c.results.json" <<-'EOF'
import json, sys
column = json.load(open(sys.argv[1]))
column["rows"]["enforced_critical_never_escalated"] = {"status": "fail", "message": "fixture: escalated in a section"}
open(sys.argv[1], "w").write(json.dumps(column))
EOF
expect_refusal "live-c column is red" c
kernel_column "$commit"
# Java's release needs both of its live columns (FFM, JNI): one missing, then one red, is refused.
rm "$repo/conformance/results/live-java-jni.results.json"
expect_refusal "live-java-jni.results.json is missing" java
kernel_column "$commit"
python3 - "$repo/conformance/results/live-java-jni.results.json" <<-'EOF'
import json, sys
column = json.load(open(sys.argv[1]))
column["rows"]["enforced_unescapable_never_escalated"] = {"status": "fail", "message": "fixture: escalated with escapable=0"}
open(sys.argv[1], "w").write(json.dumps(column))
EOF
expect_refusal "the live-java-jni column is red" java
kernel_column "$commit"

# One SDK broken: its release is refused, naming a scenario, with nothing in dist/.
MORPHEUS_CONFORMANCE_BREAK=ack_before_yield expect_refusal "async_yield_before_ack[async]" rust
leftover=$(find "$repo/dist" -mindepth 1 -maxdepth 1 2>/dev/null || true)
[[ -z $leftover ]] || fail "a refused release left $leftover"

# Another SDK at the same commit releases.
out=$(gate c) || fail "sdk-c did not release:\n$out"
ls "$repo"/dist/c/morpheus-c-*-linux-x86_64.tar.gz "$repo"/dist/c/morpheus-c-*-linux-aarch64.tar.gz >/dev/null ||
	fail "dist/c lacks a tarball of each platform: $(ls "$repo/dist/c")"
python3 - "$repo/dist/c/RELEASE.json" "$commit" <<-'EOF' || fail "dist/c/RELEASE.json"
import json, sys
stamp = json.load(open(sys.argv[1]))
assert stamp["gated"] is True and stamp["commit"] == sys.argv[2], stamp
conformance = stamp["conformance"]
assert list(conformance["sdk"]) == ["c", "c-arm64"] and list(conformance["live"]) == ["live-c"], conformance.keys()
assert conformance["sdk"]["c"]["rows"] and conformance["kernel"]["rows"] and conformance["live"]["live-c"]["rows"]
assert conformance["sdk"]["c-arm64"]["rows"]
assert all(c["status"] in ("pass", "n/a", "skip") for col in conformance["sdk"].values() for c in col["rows"].values())
print(f"gate-test: sdk-c {stamp['version']} released at {sys.argv[2][:12]} "
      f"({len(conformance['sdk']['c']['rows'])} conformance cells, {len(conformance['kernel']['rows'])} kernel scenarios)")
EOF
# Read the member whole and compare the field (a `tar | grep -q` pipeline fails under pipefail when grep
# stops reading early and tar takes SIGPIPE, which depends on timing).
# Each platform's tarball carries its own columns: x86-64 the c and live-c columns, arm64 the c-arm64 column.
python3 - "$repo/dist/c" "$commit" <<-'EOF' || fail "a tarball's RELEASE.json does not name commit $commit and its own platform's columns"
import json, sys, tarfile
from pathlib import Path
own = {"x86_64": ("linux-x64-gnu", ["c"], ["live-c"]), "aarch64": ("linux-arm64-gnu", ["c-arm64"], [])}
for machine, (platform, sdk, live) in own.items():
    [path] = Path(sys.argv[1]).glob(f"morpheus-c-*-linux-{machine}.tar.gz")
    with tarfile.open(path) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/share/morpheus-c/RELEASE.json"))
        stamp = json.load(tar.extractfile(member))
    assert stamp["commit"] == sys.argv[2], stamp["commit"]
    assert stamp["platform"] == platform, (path, stamp["platform"])
    assert list(stamp["conformance"]["sdk"]) == sdk and list(stamp["conformance"]["live"]) == live, (path, stamp["conformance"].keys())
EOF
[[ -z $(find "$repo/dist" -name '.staging-*' -o -name '.old-*') ]] || fail "staging directories left in dist/"
DIST_DIR=$repo/dist bash "$root/release/install_test.sh" c
echo "gate-test: every refusal named its cause; sdk-c released and installed"
