#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# Install each artifact of the release gate in a clean environment and use it:
#   c       the tarball unpacked into a temporary prefix; a C program built through pkg-config
#           (shared, then static) calls the library and checks the .pc's ABI against the header
#   rust    the packaged crates unpacked; a fresh cargo project depends on them by path
#   python  the wheel installed into a fresh venv (no system site-packages); a detached worker checkpoints
# Every artifact must carry RELEASE.json with its version, ABI and commit.
#
# usage: release/install_test.sh SDK... (default: c rust python). Artifacts come from
# `release.py build SDK --out DIR` in a temporary directory (or from DIST_DIR/SDK when DIST_DIR is set).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
work=$(mktemp -d "${TMPDIR:-/tmp}/morpheus-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "install-test: FAIL: $*" >&2; exit 1; }

artifacts() { # SDK -> directory holding its artifacts
	if [[ -n ${DIST_DIR:-} ]]; then echo "$DIST_DIR/$1"; return; fi
	python3 "$root/release/release.py" build "$1" --out "$work/built-$1" >&2
	echo "$work/built-$1"
}

check_stamp() { # RELEASE.json SDK
	python3 - "$1" "$2" <<'EOF' || fail "$1: bad RELEASE.json"
import json, sys
stamp = json.load(open(sys.argv[1]))
for key in ("sdk", "version", "abi", "commit"):
    assert stamp.get(key), f"{sys.argv[1]}: no {key}"
assert stamp["sdk"] == sys.argv[2], stamp["sdk"]
print(f"install-test: {stamp['sdk']} {stamp['version']} ABI {stamp['abi']} commit {stamp['commit'][:12]} gated={stamp['gated']}")
EOF
}

test_c() {
	local dir prefix
	dir=$(artifacts c)
	prefix=$work/c-prefix
	mkdir -p "$prefix"
	tar -xzf "$dir"/morpheus-c-*.tar.gz -C "$prefix" --strip-components=1
	check_stamp "$prefix/share/morpheus-c/RELEASE.json" c
	export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
	pc=(pkg-config --define-variable=prefix="$prefix")
	local abi_major
	abi_major=$("${pc[@]}" --variable=abi_major morpheus)
	cat >"$work/use.c" <<-EOF
	#include <morpheus.h>
	#include <stdio.h>
	#include <string.h>
	#if MORPHEUS_ABI_MAJOR != $abi_major
	#error "morpheus.pc's abi_major differs from the header's"
	#endif
	int main(void) {
		/* A region that does not exist is refused with a named error, not a crash. */
		int32_t rc = morpheus_region_check("/nonexistent/morpheus-region");
		const char *why = morpheus_last_error();
		if (rc == 0 || why == NULL || strlen(why) == 0) {
			fprintf(stderr, "expected an error, got %d\n", rc);
			return 1;
		}
		printf("ok: ABI %u.%u, missing region refused (%d): %s\n", MORPHEUS_ABI_MAJOR, MORPHEUS_ABI_MINOR, rc, why);
		return 0;
	}
	EOF
	# shellcheck disable=SC2046
	cc -std=c11 -Wall -Werror -o "$work/use-shared" "$work/use.c" $("${pc[@]}" --cflags --libs morpheus) \
		-Wl,-rpath,"$prefix/lib"
	"$work/use-shared" || fail "C program against the shared library"
	# shellcheck disable=SC2046
	cc -std=c11 -Wall -Werror -o "$work/use-static" "$work/use.c" $("${pc[@]}" --cflags morpheus) \
		"$prefix/lib/libmorpheus.a" $("${pc[@]}" --static --libs-only-l morpheus | sed 's/-lmorpheus//')
	"$work/use-static" || fail "C program against the static library"
	echo "install-test: c: pkg-config build, shared and static, ran"
}

test_rust() {
	local dir
	dir=$(artifacts rust)
	mkdir -p "$work/crates" "$work/use-crate/src"
	for c in "$dir"/*.crate; do tar -xzf "$c" -C "$work/crates"; done
	local morpheus abi
	morpheus=$(ls -d "$work"/crates/morpheus-[0-9]*)
	abi=$(ls -d "$work"/crates/morpheus-abi-*)
	check_stamp "$morpheus/RELEASE.json" rust
	cat >"$work/use-crate/Cargo.toml" <<-EOF
	[package]
	name = "use-morpheus"
	version = "0.0.0"
	edition = "2021"
	publish = false
	[dependencies]
	morpheus = { path = "$morpheus" }
	[patch.crates-io]
	morpheus-abi = { path = "$abi" }
	[workspace]
	EOF
	cat >"$work/use-crate/src/main.rs" <<-'EOF'
	fn main() {
	    // No worker registered on this thread: a checkpoint asks nothing and a critical section nests.
	    assert!(!morpheus::checkpoint_sync());
	    let _section = morpheus::critical_section();
	    println!("ok: morpheus crate from the package");
	}
	EOF
	(cd "$work/use-crate" && cargo run --quiet --offline) || fail "cargo project using the packaged crate"
	echo "install-test: rust: fresh cargo project built and ran"
}

test_python() {
	local dir
	dir=$(artifacts python)
	python3 -m venv "$work/venv"
	"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps "$dir"/morpheus-*.whl
	(cd "$work" && "$work/venv/bin/python" - <<-'EOF') || fail "the wheel in a fresh venv"
	import importlib.metadata, importlib.resources, json, sys
	import morpheus
	assert "site-packages" in morpheus.__file__, morpheus.__file__
	stamp = json.loads(importlib.resources.files("morpheus").joinpath("RELEASE.json").read_text())
	assert stamp["version"] == importlib.metadata.version("morpheus"), stamp
	assert stamp["abi"] == f"{morpheus.ABI_MAJOR}.{morpheus.ABI_MINOR}", stamp
	worker = morpheus.init_worker(detached=True)
	morpheus.checkpoint()
	with morpheus.critical():
	    assert morpheus.critical_depth() == 1
	worker.close()
	print(f"ok: morpheus {stamp['version']} ABI {stamp['abi']} from {morpheus.__file__}")
	EOF
	check_stamp <(unzip -p "$dir"/morpheus-*.whl morpheus/RELEASE.json) python
	echo "install-test: python: wheel in a fresh venv imported and used"
}

sdks=("$@")
[[ ${#sdks[@]} -gt 0 ]] || sdks=(c rust python)
for sdk in "${sdks[@]}"; do
	case "$sdk" in
	c) test_c ;; rust) test_rust ;; python) test_python ;;
	*) fail "no install test for SDK '$sdk'" ;;
	esac
done
echo "install-test: every artifact installed and used: ${sdks[*]}"
