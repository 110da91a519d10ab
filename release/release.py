#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The release gate: an SDK's artifacts are built only from a clean commit whose tests and
conformance columns (the SDK's own and the kernel's) are green.

    release.py check-versions          every SDK's version, declared ABI and changelog against spec/abi.toml
    release.py gate SDK [--run-vm]     gate one SDK, then build its artifacts into dist/SDK/
    release.py build SDK --out DIR     build the artifacts alone (stamped "gated": false; install tests)

SDKs and their commands: release/sdks.toml. Each artifact carries RELEASE.json: the SDK, its version,
the ABI it speaks, the commit, and the conformance results: its conformance and live-kernel columns (by
name: Java has two of each) and the kernel column.
"""

from __future__ import annotations

import argparse
import hashlib
import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path
from xml.etree import ElementTree

ROOT = Path(__file__).resolve().parent.parent
TABLE = Path(__file__).resolve().parent / "sdks.toml"
KERNEL_COLUMN = Path("conformance/results/kernel.results.json")


class Refused(Exception):
    """The gate says no; the message names why."""


def run(cmd: list[str], what: str, env: dict | None = None, capture: bool = False) -> str:
    print(f"release: {what}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True,
                          stdout=subprocess.PIPE if capture else sys.stderr, stderr=subprocess.STDOUT if capture else None)
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-2000:] if capture else ""
        raise Refused(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}".rstrip())
    return proc.stdout or ""


def dotted(data: dict, key, where: str):
    """`key` in `data`: a dotted string ("package.metadata.morpheus.abi") or a list of keys."""
    value = data
    for part in (key.split(".") if isinstance(key, str) else key):
        if not isinstance(value, dict) or part not in value:
            raise Refused(f"{where} has no `{key if isinstance(key, str) else '/'.join(key)}`")
        value = value[part]
    return value


def xml_tree(element) -> dict:
    """A pom's elements as nested dicts (namespace dropped; a leaf is its text; the first of a name wins)."""
    children = list(element)
    if not children:
        return (element.text or "").strip()
    tree = {}
    for child in children:
        if isinstance(child.tag, str):
            tree.setdefault(child.tag.rsplit("}", 1)[-1], xml_tree(child))
    return tree


def load_manifest(relpath: str) -> dict:
    """A package manifest as nested dicts: TOML (Cargo.toml, pyproject.toml), JSON (package.json), or a
    Maven pom (the elements below <project>)."""
    path = ROOT / relpath
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        if path.suffix == ".xml":
            return xml_tree(ElementTree.parse(path).getroot())
        return tomllib.loads(path.read_text())
    except (OSError, ValueError, ElementTree.ParseError) as e:
        raise Refused(f"{relpath}: cannot read it: {e}") from None


def columns(entry: dict, key: str) -> list[str]:
    """`conformance` or `live` of an SDK: one column name or a list of them."""
    value = entry[key]
    return [value] if isinstance(value, str) else list(value)


def spec_abi() -> tuple[int, int]:
    abi = tomllib.loads((ROOT / "spec/abi.toml").read_text())["abi"]
    return int(abi["major"]), int(abi["minor"])


def parse_abi(text: str, where: str) -> tuple[int, int]:
    try:
        major, minor = (int(p) for p in str(text).split("."))
    except ValueError:
        raise Refused(f"{where}: ABI {text!r} is not \"major.minor\"") from None
    return major, minor


def load_table() -> dict:
    return tomllib.loads(TABLE.read_text())


def sdk_entry(name: str) -> dict:
    table = load_table()["sdk"]
    if name not in table:
        raise Refused(f"no SDK named {name!r} in release/sdks.toml; known: {', '.join(sorted(table))}")
    entry = table[name]
    if not (ROOT / entry["dir"]).is_dir():
        raise Refused(f"SDK {name!r} is not releasable yet: {entry['dir']}/ does not exist on this commit "
                      f"(it joins the release gate when its branch lands)")
    if entry["artifact"] not in BUILDERS or "version" not in entry:
        raise Refused(f"SDK {name!r} is not releasable yet: release/sdks.toml gives it no version key, or "
                      f"release.py no builder for its artifact {entry['artifact']!r}")
    return entry


def version_info(name: str, entry: dict) -> dict:
    """The SDK's version and declared ABI, checked against the spec and its changelog."""
    data = load_manifest(entry["manifest"])
    version = str(dotted(data, entry["version"], entry["manifest"]))
    declared = str(dotted(data, entry["abi"], entry["manifest"]))
    major, minor = parse_abi(declared, entry["manifest"])
    spec_major, spec_minor = spec_abi()
    if major != spec_major:
        raise Refused(f"{entry['manifest']}: declares ABI {declared}, but spec/abi.toml is {spec_major}.{spec_minor} "
                      f"(ABI_MAJOR_MISMATCH)")
    if minor > spec_minor:
        raise Refused(f"{entry['manifest']}: declares ABI {declared}, newer than spec/abi.toml's {spec_major}.{spec_minor}")
    changelog = ROOT / entry["changelog"]
    if not changelog.is_file():
        raise Refused(f"{name}: {entry['changelog']} is missing")
    if f"## [{version}]" not in changelog.read_text():
        raise Refused(f"{name}: {entry['changelog']} has no entry `## [{version}]` for version {version}")
    return {"sdk": name, "version": version, "abi": declared, "spec_abi": f"{spec_major}.{spec_minor}"}


def platform_problems(name: str, entry: dict) -> list[str]:
    """An SDK's `platforms` (sdks.toml) must name platforms of PLATFORMS and only the SDK's own columns, and
    give each of its conformance and live columns to exactly one platform: a platform's artifact then
    carries its own results, and a column added to the gate cannot be missing from every artifact's stamp."""
    platforms = entry.get("platforms")
    if platforms is None:
        return []
    problems = []
    unknown = sorted(set(platforms) - {p["name"] for p in PLATFORMS})
    if unknown:
        problems.append(f"{name}: release/sdks.toml `platforms` names unknown platforms {unknown}")
    own = columns(entry, "conformance") + columns(entry, "live")
    for column in own:
        carriers = [platform for platform, names in platforms.items() if column in names]
        if len(carriers) != 1:
            problems.append(f"{name}: column {column!r} is carried by {len(carriers)} platforms in release/sdks.toml "
                            f"`platforms` ({', '.join(carriers) or 'none'}), expected exactly one")
    for platform, names in platforms.items():
        stray = sorted(set(names) - set(own))
        if stray:
            problems.append(f"{name}: release/sdks.toml `platforms` gives {platform} {stray}, which are not among "
                            f"its conformance or live columns")
    return problems


def check_versions() -> list[str]:
    problems = []
    table = load_table()
    for name, entry in table["sdk"].items():
        if not (ROOT / entry["dir"]).is_dir() or "version" not in entry:
            continue
        problems += platform_problems(name, entry)
        try:
            info = version_info(name, entry)
            print(f"{name:8} {info['version']:10} ABI {info['abi']} (spec {info['spec_abi']})")
        except Refused as e:
            problems.append(str(e))
    for name, entry in table.get("publisher", {}).items():
        declared = str(dotted(load_manifest(entry["manifest"]), entry["abi"], entry["manifest"]))
        spec = "%d.%d" % spec_abi()
        if declared != spec:
            problems.append(f"{entry['manifest']}: publishes ABI {declared}, spec/abi.toml is {spec}")
        if not (ROOT / entry["changelog"]).is_file():
            problems.append(f"{name}: {entry['changelog']} is missing")
        print(f"{name:8} publishes ABI {declared} (spec {spec})")
    return problems


def clean_commit() -> str:
    status = run(["git", "status", "--porcelain", "--untracked-files=normal"], "tree status", capture=True)
    if status.strip():
        raise Refused("the tree is not clean (commit or remove these first):\n" + status.rstrip())
    return run(["git", "rev-parse", "HEAD"], "commit", capture=True).strip()


def red_rows(column: dict) -> list[str]:
    """One line per red cell, naming its scenario; cells failing for one reason (a build error) share it."""
    by_message: dict[str, list[str]] = {}
    for row, cell in sorted(column["rows"].items()):
        # As the harness's own gate: n/a (the SDK lacks the feature, e.g. C's async checkpoint) and skip
        # (this machine cannot observe it, named in the cell) are not red; RELEASE.json keeps them.
        if cell["status"] not in ("pass", "n/a", "skip"):
            by_message.setdefault(str(cell.get("message") or cell["status"]).strip(), []).append(row)
    lines = []
    for message, rows in by_message.items():
        lines.append(f"{', '.join(rows)}: {message[:600]}")
    return lines


def vm_column(relpath: Path, commit: str, run_vm: bool) -> dict:
    """A column the VM test writes (the kernel's, an SDK's live one) of this very commit, green; runs
    the VM test first if asked."""
    path = ROOT / relpath
    why = None
    if not path.is_file():
        why = f"{relpath} is missing"
    else:
        column = json.loads(path.read_text())
        if column.get("commit") != commit:
            why = (f"{relpath} is from commit {column.get('commit') or '(unrecorded)'}, "
                   f"not {commit}")
    if why and run_vm:
        run(["bash", "scheduler/e2e/run.sh"], f"VM test ({why})")
        return vm_column(relpath, commit, run_vm=False)
    if why:
        raise Refused(f"{why}: run `bazel test //scheduler:e2e_kernel` at this commit, or pass --run-vm")
    if not column.get("rows"):
        raise Refused(f"{relpath} has no rows")
    red = red_rows(column)
    if red:
        raise Refused(f"the {column.get('column', relpath)} column is red:\n  " + "\n  ".join(red))
    return column


def conformance_column(name: str, scratch: Path) -> dict:
    out = scratch / f"{name}.json"
    print(f"release: conformance column {name}", file=sys.stderr)
    proc = subprocess.run([sys.executable, "conformance/harness/cli.py", "gate", name,
                           "--export", str(out)], cwd=ROOT, text=True, capture_output=True)
    if not out.is_file():
        raise Refused(f"conformance column {name} did not run (exit {proc.returncode}):\n"
                      + (proc.stderr or proc.stdout)[-2000:])
    column = json.loads(out.read_text())
    red = red_rows(column)
    if red or proc.returncode != 0:
        raise Refused(f"conformance column {name} is red:\n  "
                      + "\n  ".join(red or [(proc.stderr or proc.stdout)[-1500:]]))
    return column


# ---- artifacts -------------------------------------------------------------------------------------------

def release_json(stamp: dict) -> bytes:
    return (json.dumps(stamp, indent=2, sort_keys=True) + "\n").encode()


def add_to_tar_gz(archive: Path, members: dict[str, bytes]) -> None:
    """Rewrite a .tar.gz with extra members (cargo's .crate is one)."""
    with tarfile.open(archive, "r:gz") as src:
        items = [(m, src.extractfile(m).read() if m.isfile() else None) for m in src.getmembers()]
    with tarfile.open(archive, "w:gz") as dst:
        for member, data in items:
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            dst.addfile(info, io.BytesIO(data))


def build_crate(info: dict, stamp: dict, out: Path) -> list[Path]:
    # morpheus-abi is packaged with it (the crate depends on that exact version); a library crate ships
    # no lockfile, and without one cargo does not look the unpublished morpheus-abi up in the registry.
    # --allow-dirty: the gate has already refused a dirty tree; `build` alone (the install test, a
    # developer's try) must work on a working tree with changes, as every other test does.
    run(["cargo", "package", "--quiet", "--offline", "--no-verify", "--allow-dirty", "--exclude-lockfile",
         "-p", "morpheus-abi", "-p", "morpheus"], "cargo package")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "package"
    abi_version = json.loads(run(["cargo", "metadata", "--quiet", "--offline", "--no-deps", "--format-version", "1"],
                                 "cargo metadata", capture=True))
    versions = {p["name"]: p["version"] for p in abi_version["packages"]}
    made = []
    for crate in ("morpheus-abi", "morpheus"):
        base = f"{crate}-{versions[crate]}"
        dest = out / f"{base}.crate"
        shutil.copy2(target / f"{base}.crate", dest)
        add_to_tar_gz(dest, {f"{base}/RELEASE.json": release_json(stamp)})
        made.append(dest)
    return made


# The platforms every native artifact is built for, all from an x86-64 host: linux-arm64-gnu is cross-built
# (tools/setup.sh's arm64 section: the Rust target, Debian's cross gcc, qemu-user-static for its tests).
# name: napi-rs's platform name; rust: the Rust target; machine: `uname -m` there (the C tarball's suffix).
PLATFORMS = [
    {"name": "linux-x64-gnu", "rust": "x86_64-unknown-linux-gnu", "machine": "x86_64"},
    {"name": "linux-arm64-gnu", "rust": "aarch64-unknown-linux-gnu", "machine": "aarch64"},
]


def host_platform() -> dict:
    machine = os.uname().machine
    if machine != "x86_64":
        raise Refused(f"release builds run on an x86-64 host (they cross-build linux-arm64-gnu); this one is {machine}")
    return PLATFORMS[0]


def platform_stamp(stamp: dict, platform: dict) -> dict:
    """The RELEASE.json of one platform's artifact: the platform, and of the gated columns only that
    platform's (release/sdks.toml `platforms`: column names per platform; an SDK without it has one)."""
    columns = load_table()["sdk"][stamp["sdk"]].get("platforms", {}).get(platform["name"])
    conformance = stamp.get("conformance")
    if columns is None or conformance is None:
        return dict(stamp, platform=platform["name"])
    own = {"sdk": {k: v for k, v in conformance["sdk"].items() if k in columns},
           "live": {k: v for k, v in conformance["live"].items() if k in columns},
           "kernel": conformance["kernel"]}
    return dict(stamp, platform=platform["name"], conformance=own)


def build_c_tarball(info: dict, stamp: dict, out: Path) -> list[Path]:
    """One tarball per platform (sdk-c/Makefile TARGET= for the cross-built ones)."""
    made = []
    host = host_platform()
    for platform in PLATFORMS:
        target = [] if platform is host else [f"TARGET={platform['rust']}"]
        with tempfile.TemporaryDirectory() as tmp:
            stage = Path(tmp) / f"morpheus-c-{info['version']}"
            # The .pc names /usr/local; a user unpacking elsewhere sets pkg-config's prefix variable.
            run(["make", "-s", "-C", "sdk-c", "install", "PREFIX=/usr/local", f"DESTDIR={stage}", *target],
                f"C install ({platform['name']})")
            tree = stage / "usr/local"
            share = tree / "share/morpheus-c"
            share.mkdir(parents=True)
            (share / "RELEASE.json").write_bytes(release_json(platform_stamp(stamp, platform)))
            shutil.copy2(ROOT / "sdk-c/CHANGELOG.md", share / "CHANGELOG.md")
            dest = out / f"morpheus-c-{info['version']}-linux-{platform['machine']}.tar.gz"
            with tarfile.open(dest, "w:gz") as tar:
                tar.add(tree, arcname=f"morpheus-c-{info['version']}")
        made.append(dest)
    return made


def add_to_wheel(wheel: Path, path: str, data: bytes) -> None:
    """Add one file to a wheel and its RECORD (sha256, size), keeping everything else."""
    with zipfile.ZipFile(wheel) as src:
        items = [(i, src.read(i.filename)) for i in src.infolist()]
    record = next(i.filename for i, _ in items if i.filename.endswith(".dist-info/RECORD"))
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item, content in items:
            if item.filename == record:
                content = content.rstrip(b"\n") + f"\n{path},sha256={digest},{len(data)}\n".encode()
            dst.writestr(item, content)
        dst.writestr(path, data)
    tmp.replace(wheel)


def build_wheel(info: dict, stamp: dict, out: Path) -> list[Path]:
    """One abi3 wheel per platform (maturin --target; the arm64 one linked by the cross gcc), each checked
    against its manylinux tag by sdk-python/tools/wheel_check.py and stamped with its platform's RELEASE.json."""
    wheels = []
    for platform in PLATFORMS:
        staging = out / f".wheel-{platform['name']}"
        # sdk-python/tools/maturin.sh: maturin under the lock every maturin build of the tree takes.
        run(["bash", "sdk-python/tools/maturin.sh", "build", "--release", "--quiet", "-m", "sdk-python/Cargo.toml",
             "--target", platform["rust"], "-o", str(staging)], f"maturin ({platform['name']})")
        made = list(staging.glob("morpheus-*.whl"))
        if len(made) != 1 or "abi3" not in made[0].name:
            raise Refused(f"maturin made {[w.name for w in made]} for {platform['name']}, expected one abi3 wheel")
        if f"morpheus-{info['version']}-" not in made[0].name:
            raise Refused(f"wheel {made[0].name} does not carry version {info['version']}")
        run([sys.executable, "sdk-python/tools/wheel_check.py", str(made[0]), platform["machine"]], "wheel_check")
        add_to_wheel(made[0], "morpheus/RELEASE.json", release_json(platform_stamp(stamp, platform)))
        wheels.append(made[0].replace(out / made[0].name))
        staging.rmdir()
    return wheels


def build_npm(info: dict, stamp: dict, out: Path) -> list[Path]:
    # sdk-node/tools/pack.sh --platforms: napi-rs's layout. The main package (@morpheus/abi bundled,
    # RELEASE.json and the changelog at its root) carries no addon; each platform's addon is the platform
    # package @morpheus-sched/node-<platform> (morpheus.<platform>.node at its root, napi-rs's
    # <binaryName>.<platform>.node, with its own RELEASE.json), printed before the main package, which names
    # each as an optionalDependency and lib/native.js resolves for the machine it runs on.
    print(f"release: npm pack: sdk-node/tools/pack.sh {out} --platforms", file=sys.stderr)
    proc = subprocess.run(["bash", "sdk-node/tools/pack.sh", str(out), "--platforms"], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE)
    if proc.returncode != 0:
        raise Refused(f"npm pack failed (exit {proc.returncode}): sdk-node/tools/pack.sh")
    made = proc.stdout.strip().splitlines()
    tarball = Path(made[-1]) if made else None
    if tarball is None or not tarball.is_file():
        raise Refused(f"sdk-node/tools/pack.sh made no tarball in {out} (it printed {made!r})")
    if not tarball.name.endswith(f"-{info['version']}.tgz"):
        raise Refused(f"npm tarball {tarball.name} does not carry version {info['version']}")
    with tarfile.open(tarball, "r:gz") as tar:
        names = set(tar.getnames())
    for needed in ("package/package.json", "package/node_modules/@morpheus/abi/index.js"):
        if needed not in names:
            raise Refused(f"npm tarball {tarball.name} lacks {needed}")
    bundled = sorted(n for n in names if n.endswith(".node"))
    if bundled:
        raise Refused(f"npm tarball {tarball.name} bundles addons {bundled}: they belong in the platform packages")
    add_to_tar_gz(tarball, {"package/RELEASE.json": release_json(stamp),
                            "package/CHANGELOG.md": (ROOT / "sdk-node/CHANGELOG.md").read_bytes()})
    platform_tarballs = []
    for platform in PLATFORMS:
        path = out / f"morpheus-sched-node-{platform['name']}-{info['version']}.tgz"
        if str(path) not in made[:-1] or not path.is_file():
            raise Refused(f"sdk-node/tools/pack.sh made no platform package {path.name} (it printed {made!r})")
        with tarfile.open(path, "r:gz") as tar:
            if f"package/morpheus.{platform['name']}.node" not in tar.getnames():
                raise Refused(f"npm tarball {path.name} lacks package/morpheus.{platform['name']}.node")
        add_to_tar_gz(path, {"package/RELEASE.json": release_json(platform_stamp(stamp, platform))})
        platform_tarballs.append(path)
    return [tarball, *platform_tarballs]


JDK = Path("/usr/lib/jvm/temurin-25-jdk-amd64")
# The jar carries natives for every platform, one directory each, linux-<machine> (sdk-java's
# NativeLibrary.platform() resolves it at run time).
JAR_PLATFORMS = [f"linux-{platform['machine']}" for platform in PLATFORMS]
# The sources the jar is compiled from (sdk-java/pom.xml: the API and JNI backend, the FFM backend, the
# generated abi/java classes); the sources and javadoc jars are made of them.
JAVA_SOURCES = ["sdk-java/src/main/java", "sdk-java/src/main/java22", "abi/java/src/main/java"]


def add_to_zip(archive: Path, members: dict[str, bytes]) -> None:
    """Rewrite a zip (a jar) with extra members after the existing ones (the manifest stays first)."""
    with zipfile.ZipFile(archive) as src:
        items = [(i, src.read(i.filename)) for i in src.infolist()]
    clash = [n for n in members if any(i.filename == n for i, _ in items)]
    if clash:
        raise Refused(f"{archive.name} already holds {clash}")
    tmp = archive.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for item, content in items:
            dst.writestr(item, content)
        for name, data in members.items():
            dst.writestr(name, data)
    tmp.replace(archive)


def build_jar(info: dict, stamp: dict, out: Path) -> list[Path]:
    """The Maven Central set: jar (natives inside), pom, sources and javadoc jars, each with .sha1 and
    .md5 (Central also wants .asc signatures: signing needs the project's key, which is not here)."""
    with tempfile.TemporaryDirectory() as tmp:
        build = Path(tmp) / "build"
        run(["env", f"JAVA_HOME={JDK}", "mvn", "-q", "-B", "-f", "sdk-java/pom.xml", "package", "-DskipTests",
             f"-Dmorpheus.build.dir={build}"], "mvn package")
        base = f"morpheus-{info['version']}"
        jar = build / f"{base}.jar"
        if not jar.is_file():
            raise Refused(f"mvn package made no {jar.name} (found {sorted(p.name for p in build.glob('*.jar'))})")
        made = [out / f"{base}.jar", out / f"{base}.pom", out / f"{base}-sources.jar", out / f"{base}-javadoc.jar"]
        shutil.copy2(jar, made[0])
        with zipfile.ZipFile(made[0]) as z:
            missing = {f"dev/morpheus/native/{platform}/{lib}" for platform in JAR_PLATFORMS
                       for lib in ("libmorpheus_c.so", "libmorpheus_jni.so")} - set(z.namelist())
        if missing:
            raise Refused(f"{jar.name} lacks its natives {sorted(missing)} (built without cargo?)")
        # Every column in META-INF; beside each platform's natives, that platform's own (sdks.toml `platforms`).
        add_to_zip(made[0], {"META-INF/morpheus/RELEASE.json": release_json(stamp),
                             "META-INF/morpheus/CHANGELOG.md": (ROOT / "sdk-java/CHANGELOG.md").read_bytes(),
                             **{f"dev/morpheus/native/linux-{platform['machine']}/RELEASE.json":
                                release_json(platform_stamp(stamp, platform)) for platform in PLATFORMS}})
        shutil.copy2(ROOT / "sdk-java/pom.xml", made[1])
        run([str(JDK / "bin/jar"), "--create", "--file", str(made[2])]
            + [arg for src in JAVA_SOURCES for arg in ("-C", src, ".")], "sources jar")
        docs = Path(tmp) / "javadoc"
        # The FFM backend's sources are release 22 (the rest 17): the docs are built at 22.
        run([str(JDK / "bin/javadoc"), "-quiet", "-Xdoclint:none", "--release", "22", "-d", str(docs),
             "-sourcepath", ":".join(JAVA_SOURCES), "-subpackages", "dev.morpheus"], "javadoc", capture=True)
        run([str(JDK / "bin/jar"), "--create", "--file", str(made[3]), "-C", str(docs), "."], "javadoc jar")
    for path in list(made):
        data = path.read_bytes()
        for algorithm in ("sha1", "md5"):
            digest = path.with_name(f"{path.name}.{algorithm}")
            digest.write_text(hashlib.new(algorithm, data).hexdigest())
            made.append(digest)
    return made


BUILDERS = {"crate": build_crate, "c-tarball": build_c_tarball, "wheel": build_wheel, "npm": build_npm, "jar": build_jar}


def build_into(name: str, entry: dict, info: dict, stamp: dict, final: Path) -> list[Path]:
    """Build into a staging directory beside `final`, then move it in place: no partial artifact."""
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".staging-{name}-", dir=final.parent))
    try:
        made = BUILDERS[entry["artifact"]](info, stamp, staging)
        (staging / "RELEASE.json").write_bytes(release_json(stamp))
        old = None
        if final.exists():
            old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=final.parent))
            final.rename(old / "previous")
        staging.rename(final)
        if old:
            shutil.rmtree(old)
        return [final / m.name for m in made]
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def gate(name: str, run_vm: bool, dist: Path) -> int:
    entry = sdk_entry(name)
    info = version_info(name, entry)
    problems = platform_problems(name, entry)
    if problems:
        raise Refused("\n  ".join(problems))
    commit = clean_commit()
    kernel = vm_column(KERNEL_COLUMN, commit, run_vm)
    print(f"release: {name}: kernel column of {commit[:12]}: {len(kernel['rows'])} scenarios pass", file=sys.stderr)
    live = {}
    for live_name in columns(entry, "live"):
        live[live_name] = vm_column(Path(f"conformance/results/{live_name}.results.json"), commit, run_vm)
        print(f"release: {name}: {live_name} column of {commit[:12]}: {len(live[live_name]['rows'])} live checks pass",
              file=sys.stderr)
    sdk_columns = {}
    with tempfile.TemporaryDirectory() as tmp:
        for column_name in columns(entry, "conformance"):
            column = sdk_columns[column_name] = conformance_column(column_name, Path(tmp))
            passed = sum(c["status"] == "pass" for c in column["rows"].values())
            print(f"release: {name}: conformance column {column_name}: {passed} cells pass, "
                  f"{len(column['rows']) - passed} not applicable or skipped", file=sys.stderr)
    for cmd in entry.get("unit_tests", []):
        run(cmd, f"{name} unit tests")
    if clean_commit() != commit:
        raise Refused("the tree changed while the gate ran")
    stamp = dict(info, commit=commit, gated=True,
                 conformance={"sdk": sdk_columns, "kernel": kernel, "live": live})
    made = build_into(name, entry, info, stamp, dist / name)
    for path in made:
        print(f"release: {name} {info['version']} (ABI {info['abi']}, {commit[:12]}): {path}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["gate", "build", "check-versions"])
    parser.add_argument("sdk", nargs="?")
    parser.add_argument("--run-vm", action="store_true",
                        help="gate: run the VM test when the kernel column is missing or from another commit")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="gate: where dist/<sdk>/ goes")
    parser.add_argument("--out", type=Path, help="build: the directory the artifacts go to")
    args = parser.parse_args(argv)
    try:
        if args.command == "check-versions":
            problems = check_versions()
            for p in problems:
                print(f"release: {p}", file=sys.stderr)
            return 1 if problems else 0
        if not args.sdk:
            parser.error(f"{args.command} needs an SDK name")
        if args.command == "gate":
            return gate(args.sdk, args.run_vm, args.dist.resolve())
        if not args.out:
            parser.error("build needs --out DIR")
        entry = sdk_entry(args.sdk)
        info = version_info(args.sdk, entry)
        commit = run(["git", "rev-parse", "HEAD"], "commit", capture=True).strip()
        made = build_into(args.sdk, entry, info, dict(info, commit=commit, gated=False), args.out.resolve())
        for path in made:
            print(path)
        return 0
    except Refused as e:
        print(f"release {args.sdk or ''}: refused: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
