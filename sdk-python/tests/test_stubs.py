# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The .pyi stub names exactly what the extension defines (so it cannot drift from the ABI)."""

import ast
from pathlib import Path

import morpheus
from morpheus import _morpheus


def test_stub_matches_the_extension():
    stub = Path(morpheus.__file__).with_name("_morpheus.pyi")
    tree = ast.parse(stub.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    public = {n for n in dir(_morpheus) if not n.startswith("__") and n not in ("_at_exit", "_pass", "_keeper")} | {"__version__"}
    assert names == public
    codes = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ErrorCode")
    stub_codes = [t.targets[0].id for t in codes.body if isinstance(t, ast.Assign)]
    assert stub_codes == [c.name for c in morpheus.ErrorCode]
    assert (stub.parent / "py.typed").exists()
