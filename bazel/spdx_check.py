#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Check that every source file in the repository carries the right SPDX line.

The licence rule (see the project brief): the scheduler (BPF and agent) is
GPL-2.0-only, the generated C header is LGPL-2.1 OR BSD-2-Clause, everything
else is Apache-2.0 OR MIT. A source file needs an `SPDX-License-Identifier:`
line within its first lines, naming one of those, and GPL-2.0-only only under
scheduler/.

Usage: spdx_check.py [ROOT]   (ROOT defaults to the current directory; it must
be a git work tree: the files checked are the tracked ones plus untracked ones
that .gitignore does not exclude.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

# What counts as source: code and build files. Data, docs, lock files and JSON
# (which cannot hold a comment) are not.
SOURCE_SUFFIXES = {
    ".bash", ".bzl", ".bazel", ".c", ".cc", ".cjs", ".cpp", ".h", ".hpp", ".java",
    ".js", ".kt", ".mjs", ".mts", ".py", ".pyi", ".rs", ".sh", ".ts",
}
SOURCE_NAMES = {"BUILD", "WORKSPACE", "Makefile"}
HEAD_LINES = 10

PERMISSIVE = "Apache-2.0 OR MIT"
GENERATED_C_HEADER = "LGPL-2.1 OR BSD-2-Clause"
SCHEDULER = "GPL-2.0-only"
SCHEDULER_DIR = "scheduler"

SPDX_RE = re.compile(r"SPDX-License-Identifier:\s*(.+)")


def allowed_licences(path: PurePosixPath) -> set[str]:
    allowed = {PERMISSIVE, GENERATED_C_HEADER}
    if path.parts and path.parts[0] == SCHEDULER_DIR:
        allowed.add(SCHEDULER)
    return allowed


def is_source(root: Path, path: PurePosixPath) -> bool:
    if path.suffix in SOURCE_SUFFIXES or path.name in SOURCE_NAMES:
        return True
    # Extensionless scripts such as .ci/run.
    if path.suffix == "":
        try:
            with open(root / path, "rb") as f:
                return f.read(2) == b"#!"
        except OSError:
            return False
    return False


def licence_of(text_head: str) -> str | None:
    match = SPDX_RE.search(text_head)
    if not match:
        return None
    expr = match.group(1).strip()
    # Strip comment closers and the parentheses libbpf-style headers use.
    expr = re.sub(r"\s*(\*/|-->)\s*$", "", expr).strip()
    if expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1].strip()
    return expr


def listed_files(root: Path) -> list[PurePosixPath]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root, check=True, capture_output=True,
        ).stdout
    except FileNotFoundError:
        sys.exit("spdx_check: git is not installed; it lists the files to check")
    except subprocess.CalledProcessError as err:
        sys.exit(f"spdx_check: {root} is not a git work tree: {err.stderr.decode().strip()}")
    return sorted({PurePosixPath(p) for p in out.decode().split("\0") if p})


def problems_in(root: Path) -> tuple[int, list[str]]:
    checked = 0
    problems = []
    for path in listed_files(root):
        full = root / path
        if not full.is_file() or not is_source(root, path):
            continue  # deleted in the work tree, or not source
        checked += 1
        with open(full, encoding="utf-8", errors="replace") as f:
            head = "".join(line for _, line in zip(range(HEAD_LINES), f))
        licence = licence_of(head)
        allowed = allowed_licences(path)
        if licence is None:
            problems.append(f"{path}: no 'SPDX-License-Identifier:' line in its first {HEAD_LINES} lines")
        elif licence not in allowed:
            problems.append(
                f"{path}: licence '{licence}' is not allowed here; use one of: "
                + ", ".join(f"'{a}'" for a in sorted(allowed))
            )
    return checked, problems


def main(argv: list[str]) -> int:
    if len(argv) > 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[1] if len(argv) == 2 else ".").resolve()
    checked, problems = problems_in(root)
    for problem in problems:
        print(problem)
    print(f"spdx_check: {checked} source files checked, {len(problems)} with problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
