#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Check a built wheel against its own tags, as auditwheel's manylinux rule does (PEP 600).

    wheel_check.py WHEEL MACHINE       MACHINE: x86_64 or aarch64

The wheel's file name and its WHEEL file must agree on one tag, cp39-abi3-manylinux_X_Y_MACHINE (the abi3
extension pyproject.toml builds); the extension morpheus/_morpheus.abi3.so must be an ELF for MACHINE,
need no glibc symbol version newer than X.Y, and link only libraries every manylinux system has (the
manylinux policies' list: libc, libm, libdl, libpthread, librt, libgcc_s and the loader). Exit 0 when it
holds, 1 naming each violation.
"""
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
OBJDUMP = {"x86_64": "objdump", "aarch64": "aarch64-linux-gnu-objdump"}
# The manylinux policies' libraries (auditwheel's policy.json, manylinux_2_17 and later, both machines).
ALLOWED = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libgcc_s.so.1",
           "libutil.so.1", "libnsl.so.1", "libcrypt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
EXTENSION = "morpheus/_morpheus.abi3.so"


def check(wheel: Path, machine: str) -> list[str]:
    problems = []
    m = re.fullmatch(r"morpheus-[^-]+-cp39-abi3-manylinux_(\d+)_(\d+)_(\w+?)(\.manylinux\w+)?\.whl", wheel.name)
    if not m:
        return [f"{wheel.name}: expected the tag cp39-abi3-manylinux_X_Y_{machine}"]
    glibc = (int(m.group(1)), int(m.group(2)))
    if m.group(3) != machine:
        problems.append(f"{wheel.name}: tagged for {m.group(3)}, expected {machine}")
    with zipfile.ZipFile(wheel) as z:
        info = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = [line.split(": ", 1)[1] for line in z.read(info).decode().splitlines() if line.startswith("Tag: ")]
        name_tag = f"cp39-abi3-manylinux_{glibc[0]}_{glibc[1]}_{m.group(3)}"
        if name_tag not in tags:
            problems.append(f"{info}: tags {tags} do not include the file name's {name_tag}")
        with tempfile.TemporaryDirectory() as tmp:
            ext = Path(z.extract(EXTENSION, tmp))
            header = ext.read_bytes()[:20]
            if header[:4] != b"\x7fELF" or int.from_bytes(header[18:20], "little") != ELF_MACHINE[machine]:
                problems.append(f"{EXTENSION}: not an ELF for {machine} (e_machine {int.from_bytes(header[18:20], 'little')})")
                return problems
            dump = subprocess.run([OBJDUMP[machine], "-T", "-p", str(ext)], check=True, text=True,
                                  capture_output=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"\bGLIBC_(\d+\.\d+(?:\.\d+)?)\b", dump)}
    newest = max(versions, default=(0, 0))
    if newest[:2] > glibc:
        problems.append(f"{EXTENSION} needs GLIBC_{'.'.join(map(str, newest))}, newer than its tag's glibc {glibc[0]}.{glibc[1]}")
    needed = set(re.findall(r"^\s*NEEDED\s+(\S+)$", dump, re.M))
    if needed - ALLOWED:
        problems.append(f"{EXTENSION} links {sorted(needed - ALLOWED)}, outside the manylinux policy")
    if not problems:
        print(f"wheel_check: {wheel.name}: {machine} extension, newest GLIBC_{'.'.join(map(str, newest))} "
              f"<= {glibc[0]}.{glibc[1]}, needs {sorted(needed)}")
    return problems


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ELF_MACHINE:
        sys.exit("usage: wheel_check.py WHEEL x86_64|aarch64")
    found = check(Path(sys.argv[1]), sys.argv[2])
    for problem in found:
        print(f"wheel_check: {problem}", file=sys.stderr)
    sys.exit(1 if found else 0)
