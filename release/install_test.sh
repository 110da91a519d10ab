#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0 OR MIT
#
# Install each artifact of the release gate in a clean environment and use it:
#   c       the tarball unpacked into a temporary prefix; a C program built through pkg-config
#           (shared, then static) calls the library and checks the .pc's ABI against the header
#   rust    the packaged crates unpacked; a fresh cargo project depends on them by path
#   python  the wheel installed into a fresh venv (no system site-packages); a detached worker checkpoints
#   node    the npm tarball installed into a fresh folder (offline: the addon and @morpheus/abi are inside);
#           a missing region is refused by name, a detached worker checkpoints; then, by npm on Node for
#           arm64 under qemu, the main package with its linux-arm64-gnu platform package, used the same way
#   java    jar, pom, sources and javadoc jars (checksums checked) in a temporary local Maven repository; a
#           fresh Maven project compiled offline against it, run on JDK 25 (FFM) and JDK 17 (JNI)
# Every artifact must carry RELEASE.json with its version, ABI and commit.
#
# usage: release/install_test.sh SDK... (default: c rust python node java). Artifacts come from
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

# One tarball per platform: linux-x86_64 natively, linux-aarch64 cross-compiled with Debian's aarch64 gcc
# and run under qemu-aarch64-static (QEMU_LD_PREFIX: the arm64 libc), each in a prefix of its own.
test_c() {
	local dir machine
	dir=$(artifacts c)
	for machine in x86_64 aarch64; do
		[[ -f $(echo "$dir"/morpheus-c-*-linux-$machine.tar.gz) ]] || fail "no linux-$machine tarball in $dir: $(ls "$dir")"
		case $machine in
		x86_64) test_c_platform "$dir" $machine linux-x64-gnu cc X86-64 ;;
		aarch64) test_c_platform "$dir" $machine linux-arm64-gnu aarch64-linux-gnu-gcc AArch64 \
			env QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64-static ;;
		esac
	done
}

test_c_platform() { # DIR MACHINE PLATFORM CC ELF-MACHINE [RUNNER...]
	local dir=$1 machine=$2 platform=$3 cc=$4 elf=$5 prefix
	shift 5
	local runner=("$@")
	prefix=$work/c-prefix-$machine
	mkdir -p "$prefix"
	tar -xzf "$dir"/morpheus-c-*-linux-"$machine".tar.gz -C "$prefix" --strip-components=1
	check_stamp "$prefix/share/morpheus-c/RELEASE.json" c
	python3 - "$prefix/share/morpheus-c/RELEASE.json" "$platform" <<-'EOF' || fail "$machine tarball: RELEASE.json names another platform"
	import json, sys
	stamp = json.load(open(sys.argv[1]))
	assert stamp.get("platform") == sys.argv[2], stamp.get("platform")
	EOF
	readelf -h "$prefix"/lib/libmorpheus.so.* | grep -q "Machine:.*$elf" || fail "$machine tarball: libmorpheus is not $elf"
	export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
	pc=(pkg-config --define-variable=prefix="$prefix")
	local abi_major
	abi_major=$("${pc[@]}" --variable=abi_major morpheus)
	cat >"$work/use-$machine.c" <<-EOF
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
	"$cc" -std=c11 -Wall -Werror -o "$work/use-shared-$machine" "$work/use-$machine.c" $("${pc[@]}" --cflags --libs morpheus) \
		-Wl,-rpath,"$prefix/lib"
	"${runner[@]}" "$work/use-shared-$machine" || fail "$machine: C program against the shared library"
	# shellcheck disable=SC2046
	"$cc" -std=c11 -Wall -Werror -o "$work/use-static-$machine" "$work/use-$machine.c" $("${pc[@]}" --cflags morpheus) \
		"$prefix/lib/libmorpheus.a" $("${pc[@]}" --static --libs-only-l morpheus | sed 's/-lmorpheus//')
	"${runner[@]}" "$work/use-static-$machine" || fail "$machine: C program against the static library"
	echo "install-test: c $platform: pkg-config build, shared and static, ran${runner[*]:+ under ${runner[*]}}"
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
	"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps "$dir"/morpheus-*_x86_64.whl
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
	check_stamp <(unzip -p "$dir"/morpheus-*_x86_64.whl morpheus/RELEASE.json) python
	echo "install-test: python: wheel in a fresh venv imported and used"
	# linux-arm64-gnu: the arm64 wheel checked against its tag, installed by pip on Debian's arm64 Python
	# under qemu into a fresh directory, its example run and a request acknowledged there.
	local arm64
	arm64=$(ls "$dir"/morpheus-*_aarch64.whl) || fail "no linux-aarch64 wheel in $dir: $(ls "$dir")"
	bash "$root/sdk-python/tools/test-arm64.sh" --wheel "$arm64" || fail "the arm64 wheel on arm64 Python (qemu)"
	check_stamp <(unzip -p "$arm64" morpheus/RELEASE.json) python
	unzip -p "$arm64" morpheus/RELEASE.json | python3 -c 'import json, sys; assert json.load(sys.stdin)["platform"] == "linux-arm64-gnu"' ||
		fail "$arm64's RELEASE.json does not name linux-arm64-gnu"
}

test_node() {
	local dir app
	dir=$(artifacts node)
	app=$work/node-app
	mkdir -p "$app"
	echo '{ "name": "use-morpheus", "private": true }' >"$app/package.json"
	# The main package (@morpheus/abi bundled, no addon) and the linux-x64-gnu platform package, offline:
	# no registry. npm skips the arm64 optionalDependency here (its cpu field), as it would on a user's x86-64.
	local main x64
	main=$(ls "$dir"/morpheus-sched-node-[0-9]*.tgz) || fail "no main npm tarball in $dir"
	x64=$(ls "$dir"/morpheus-sched-node-linux-x64-gnu-*.tgz) || fail "no linux-x64-gnu platform package in $dir"
	(cd "$app" && npm install --offline --no-audit --no-fund --loglevel=error "$main" "$x64") ||
		fail "npm install of the main and linux-x64-gnu platform packages into a fresh folder"
	check_stamp "$app/node_modules/@morpheus-sched/node/RELEASE.json" node
	check_stamp "$app/node_modules/@morpheus-sched/node-linux-x64-gnu/RELEASE.json" node
	(cd "$app" && node - <<-'EOF') || fail "the npm package in a fresh folder"
	const assert = require('node:assert/strict');
	const fs = require('node:fs');
	const path = require('node:path');
	const morpheus = require('@morpheus-sched/node');
	const home = path.dirname(require.resolve('@morpheus-sched/node/package.json'));
	assert.ok(home.startsWith(path.join(process.cwd(), 'node_modules')), home);
	// The main package bundles no addon: the one loaded is the platform package's.
	assert.deepEqual(fs.readdirSync(path.join(home, 'native')).filter((f) => f.endsWith('.node')), []);
	const addon = Object.keys(require.cache).find((f) => f.endsWith('.node'));
	assert.equal(path.relative(process.cwd(), addon), path.join('node_modules', '@morpheus-sched', 'node-linux-x64-gnu', 'morpheus.linux-x64-gnu.node'));
	assert.equal(JSON.parse(fs.readFileSync(require.resolve('@morpheus-sched/node-linux-x64-gnu/RELEASE.json'), 'utf8')).platform, 'linux-x64-gnu');
	const stamp = JSON.parse(fs.readFileSync(path.join(home, 'RELEASE.json'), 'utf8'));
	assert.equal(stamp.version, require('@morpheus-sched/node/package.json').version);
	assert.equal(stamp.abi, `${morpheus.ABI_MAJOR}.${morpheus.ABI_MINOR}`);
	// A region that does not exist is refused with a named error; detached, the calls work.
	assert.throws(() => morpheus.initWorker({ region: '/nonexistent/morpheus-region' }), (e) => e instanceof morpheus.MorpheusError && e.code.length > 0);
	const worker = morpheus.initWorker({ detached: true });
	assert.equal(worker.attached, false);
	assert.equal(morpheus.shouldYield(), false);
	assert.equal(morpheus.critical(() => morpheus.criticalDepth()), 1);
	worker.close();
	console.log(`ok: @morpheus-sched/node ${stamp.version} ABI ${stamp.abi} from ${home} with ${path.relative(process.cwd(), addon)}`);
	EOF
	echo "install-test: node: main and linux-x64-gnu platform packages installed into a fresh folder and used"
	test_node_arm64 "$dir"
}

# linux-arm64-gnu: Node for arm64 under qemu-aarch64-static (tools/arm64/node.sh) runs npm's own CLI, so
# npm installs as on an arm64 machine (process.arch arm64): the main package and its arm64 platform
# package, offline, into a fresh folder; the addon loaded must be the platform package's.
test_node_arm64() {
	local dir=$1 app npm_cli
	app=$work/node-app-arm64
	mkdir -p "$app"
	echo '{ "name": "use-morpheus", "private": true }' >"$app/package.json"
	npm_cli="$(npm root -g)/npm/bin/npm-cli.js"
	[[ -f $npm_cli ]] || fail "npm's CLI is not at $npm_cli"
	local main platform
	main=$(ls "$dir"/morpheus-sched-node-[0-9]*.tgz) || fail "no main npm tarball in $dir"
	platform=$(ls "$dir"/morpheus-sched-node-linux-arm64-gnu-*.tgz) || fail "no linux-arm64-gnu platform package in $dir"
	(cd "$app" && "$root/tools/arm64/node.sh" "$npm_cli" install --offline --no-audit --no-fund --loglevel=error "$main" "$platform") ||
		fail "npm (on arm64 Node) install of the main and arm64 platform packages into a fresh folder"
	check_stamp "$app/node_modules/@morpheus-sched/node-linux-arm64-gnu/RELEASE.json" node
	(cd "$app" && "$root/tools/arm64/node.sh" - <<-'EOF') || fail "the npm package on arm64 Node"
	const assert = require('node:assert/strict');
	const fs = require('node:fs');
	const path = require('node:path');
	const morpheus = require('@morpheus-sched/node');
	assert.equal(process.arch, 'arm64');
	const addon = Object.keys(require.cache).find((f) => f.endsWith('.node'));
	assert.equal(path.relative(process.cwd(), addon), path.join('node_modules', '@morpheus-sched', 'node-linux-arm64-gnu', 'morpheus.linux-arm64-gnu.node'));
	const stamp = JSON.parse(fs.readFileSync(require.resolve('@morpheus-sched/node-linux-arm64-gnu/RELEASE.json'), 'utf8'));
	assert.equal(stamp.platform, 'linux-arm64-gnu');
	assert.equal(stamp.abi, `${morpheus.ABI_MAJOR}.${morpheus.ABI_MINOR}`);
	assert.throws(() => morpheus.initWorker({ region: '/nonexistent/morpheus-region' }), (e) => e instanceof morpheus.MorpheusError && e.code.length > 0);
	const worker = morpheus.initWorker({ detached: true });
	assert.equal(worker.attached, false);
	assert.equal(morpheus.shouldYield(), false);
	assert.equal(morpheus.critical(() => morpheus.criticalDepth()), 1);
	worker.close();
	console.log(`ok: @morpheus-sched/node ${stamp.version} on ${process.arch} with ${path.relative(process.cwd(), addon)}`);
	EOF
	echo "install-test: node linux-arm64-gnu: main and platform package installed by npm on arm64 Node (qemu) and used"
}

test_java() {
	local dir repo project version
	dir=$(artifacts java)
	version=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$dir/RELEASE.json")
	# A temporary local repository holding only this release under dev/morpheus (laid out as Maven
	# installs it); Maven's own plugins come from the user's cache, linked in, so the build runs offline.
	repo=$work/m2
	mkdir -p "$repo/dev/morpheus/morpheus/$version"
	for entry in "${HOME}"/.m2/repository/*; do
		[[ -e $entry && $(basename "$entry") != dev ]] && ln -s "$entry" "$repo/"
	done
	cp "$dir/morpheus-$version.jar" "$dir/morpheus-$version.pom" "$dir/morpheus-$version-sources.jar" \
		"$dir/morpheus-$version-javadoc.jar" "$repo/dev/morpheus/morpheus/$version/"
	for f in "$dir"/morpheus-"$version"*.jar "$dir/morpheus-$version.pom"; do
		[[ $(sha1sum <"$f") == "$(cat "$f.sha1")  -" ]] || fail "$f does not match its .sha1"
	done
	project=$work/java-app
	mkdir -p "$project/src/main/java/app"
	cat >"$project/pom.xml" <<-EOF
	<project xmlns="http://maven.apache.org/POM/4.0.0">
	  <modelVersion>4.0.0</modelVersion>
	  <groupId>app</groupId>
	  <artifactId>use-morpheus</artifactId>
	  <version>1.0</version>
	  <properties>
	    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
	    <maven.compiler.release>17</maven.compiler.release>
	  </properties>
	  <dependencies>
	    <dependency><groupId>dev.morpheus</groupId><artifactId>morpheus</artifactId><version>$version</version></dependency>
	  </dependencies>
	  <build><plugins>
	    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-resources-plugin</artifactId><version>3.3.1</version></plugin>
	    <plugin><groupId>org.apache.maven.plugins</groupId><artifactId>maven-compiler-plugin</artifactId><version>3.13.0</version></plugin>
	  </plugins></build>
	</project>
	EOF
	cat >"$project/src/main/java/app/Main.java" <<-'EOF'
	package app;

	import dev.morpheus.Morpheus;
	import dev.morpheus.MorpheusException;
	import dev.morpheus.Options;
	import dev.morpheus.Worker;
	import java.nio.charset.StandardCharsets;

	public final class Main {
	    public static void main(String[] args) throws Exception {
	        String stamp;
	        try (var in = Morpheus.class.getResourceAsStream("/META-INF/morpheus/RELEASE.json")) {
	            stamp = new String(in.readAllBytes(), StandardCharsets.UTF_8);
	        }
	        // A region that does not exist is refused with a named error.
	        try {
	            Morpheus.register(Options.defaults().regionPath("/nonexistent/morpheus-region")).close();
	            throw new AssertionError("a missing region was accepted");
	        } catch (MorpheusException expected) {
	            System.out.println("refused: " + expected.getMessage());
	        }
	        try (Worker worker = Morpheus.register(Options.defaults().detached())) {
	            if (worker.isAttached() || worker.checkpoint()) throw new AssertionError(worker.toString());
	            worker.criticalEnter();
	            if (worker.criticalDepth() != 1) throw new AssertionError("depth");
	            worker.criticalExit();
	        }
	        System.out.println("ok: backend " + Morpheus.backendName() + ", stamp " + stamp.replaceAll("\\s+", " "));
	    }
	}
	EOF
	JAVA_HOME=/usr/lib/jvm/temurin-25-jdk-amd64 mvn -q -B -o -f "$project/pom.xml" compile -Dmaven.repo.local="$repo" ||
		fail "a fresh Maven project against the jar in a temporary local repository"
	unzip -p "$dir/morpheus-$version.jar" META-INF/morpheus/RELEASE.json >"$work/java-stamp.json"
	check_stamp "$work/java-stamp.json" java
	# Beside each platform's natives, that platform's RELEASE.json (its own conformance columns when gated).
	local machine platform
	for machine in x86_64 aarch64; do
		platform=linux-x64-gnu
		[[ $machine == aarch64 ]] && platform=linux-arm64-gnu
		unzip -p "$dir/morpheus-$version.jar" "dev/morpheus/native/linux-$machine/RELEASE.json" >"$work/java-stamp-$machine.json" ||
			fail "the jar has no dev/morpheus/native/linux-$machine/RELEASE.json"
		check_stamp "$work/java-stamp-$machine.json" java
		python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["platform"] == sys.argv[2]' "$work/java-stamp-$machine.json" "$platform" ||
			fail "the jar's linux-$machine RELEASE.json does not name $platform"
	done
	local jar=$repo/dev/morpheus/morpheus/$version/morpheus-$version.jar
	# Outputs go to files, then grep reads them whole (no `java | grep -q`: under pipefail that fails when
	# grep stops early and java takes SIGPIPE, which depends on timing).
	/usr/lib/jvm/temurin-25-jdk-amd64/bin/java --enable-native-access=ALL-UNNAMED -cp "$project/target/classes:$jar" app.Main \
		>"$work/java25.out" || fail "the project on JDK 25 (FFM)"
	grep -q "^ok: backend ffm" "$work/java25.out" || fail "JDK 25 did not use the FFM backend: $(cat "$work/java25.out")"
	/usr/lib/jvm/java-17-openjdk-amd64/bin/java -cp "$project/target/classes:$jar" app.Main >"$work/java17.out" ||
		fail "the project on JDK 17 (JNI)"
	grep -q "^ok: backend jni" "$work/java17.out" || fail "JDK 17 did not use the JNI backend: $(cat "$work/java17.out")"
	# linux-aarch64: the same project on Temurin's arm64 JRE under qemu (tools/arm64/java.sh), once per backend:
	# the jar's linux-aarch64 natives are the ones loaded (an x86-64 library would not load there).
	local backend
	for backend in ffm jni; do
		"$root/tools/arm64/java.sh" --enable-native-access=ALL-UNNAMED -Dmorpheus.backend=$backend \
			-cp "$project/target/classes:$jar" app.Main >"$work/java-arm64-$backend.out" 2>&1 ||
			fail "the project on the arm64 JRE ($backend): $(cat "$work/java-arm64-$backend.out")"
		grep -q "^ok: backend $backend" "$work/java-arm64-$backend.out" ||
			fail "the arm64 JRE did not use the $backend backend: $(cat "$work/java-arm64-$backend.out")"
	done
	echo "install-test: java: fresh Maven project built offline against a temporary local repository, ran on JDK 25 (FFM) and 17 (JNI), and on the arm64 JRE under qemu (FFM, JNI)"
}

sdks=("$@")
[[ ${#sdks[@]} -gt 0 ]] || sdks=(c rust python node java)
for sdk in "${sdks[@]}"; do
	case "$sdk" in
	c) test_c ;; rust) test_rust ;; python) test_python ;; node) test_node ;; java) test_java ;;
	*) fail "no install test for SDK '$sdk'" ;;
	esac
done
echo "install-test: every artifact installed and used: ${sdks[*]}"
