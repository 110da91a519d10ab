# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The matrix: scenario x agent -> pass / fail / n/a, as JSON and as a Markdown table."""

from __future__ import annotations

import json
from pathlib import Path

from abi import m

SYMBOL = {"pass": "pass", "fail": "FAIL", "n/a": "n/a", "skip": "skip", "absent": "-"}


def build(results, columns, scenarios, broken, merged=None) -> dict:
    """results: CellResults; columns: agent names in order; merged: {column: {row: cell}} from files."""
    rows: dict[str, dict] = {}
    for sc in scenarios:
        for variant in sc.variants():
            row = sc.name if variant is None else f"{sc.name}[{variant}]"
            rows[row] = {"scenario": sc.name, "variant": variant, "intent": sc.intent,
                         "target": sc.target, "cells": {}}
    for path, why in broken:
        rows[path.stem] = {"scenario": path.stem, "variant": None, "intent": "(file did not load)",
                           "target": "?", "cells": {c: {"status": "fail", "message": why} for c in columns}}
    for r in results:
        rows.setdefault(r.row, {"scenario": r.scenario, "variant": r.variant, "intent": "",
                                "target": "?", "cells": {}})["cells"][r.agent] = r.to_json()
    all_columns = list(columns)
    for column, cells in (merged or {}).items():
        if column not in all_columns:
            all_columns.append(column)
        for row, cell in cells.items():
            if row in rows:
                rows[row]["cells"][column] = cell
            else:
                rows[row] = {"scenario": row, "variant": None, "intent": "(only in " + column + ")",
                             "target": "?", "cells": {column: cell}}
    return {
        "abi": f"{m.ABI_MAJOR}.{m.ABI_MINOR}",
        "protocol": 1,
        "columns": all_columns,
        "rows": rows,
    }


def failures(matrix: dict, column: str | None = None) -> list[tuple[str, str, dict]]:
    out = []
    for row, data in matrix["rows"].items():
        for col, cell in data["cells"].items():
            if (column is None or col == column) and cell["status"] == "fail":
                out.append((row, col, cell))
    return out


def skips(matrix: dict) -> list[tuple[str, str, dict]]:
    return [(row, col, cell) for row, data in matrix["rows"].items() for col, cell in data["cells"].items()
            if cell["status"] == "skip"]


def markdown(matrix: dict) -> str:
    cols = matrix["columns"]
    lines = [
        f"Morpheus conformance matrix (ABI {matrix['abi']}, agent protocol v{matrix['protocol']})",
        "",
        "| scenario | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for row, data in matrix["rows"].items():
        cells = []
        for c in cols:
            cell = data["cells"].get(c)
            cells.append(SYMBOL["absent"] if cell is None else SYMBOL.get(cell["status"], cell["status"]))
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    fails = failures(matrix)
    counts = {c: sum(1 for d in matrix["rows"].values() if d["cells"].get(c, {}).get("status") == "pass")
              for c in cols}
    totals = {c: sum(1 for d in matrix["rows"].values() if d["cells"].get(c, {}).get("status") in ("pass", "fail"))
              for c in cols}
    lines.append("| **passed** | " + " | ".join(f"{counts[c]}/{totals[c]}" for c in cols) + " |")
    if fails:
        lines += ["", "Failures (first deviation of each failed cell):", ""]
        for row, col, cell in fails:
            lines.append(f"- **{col}** / {row}: {cell.get('message', '')}")
    skipped = skips(matrix)
    if skipped:
        lines += ["", "Skipped (a check this host cannot make; not a pass):", ""]
        for row, col, cell in skipped:
            lines.append(f"- **{col}** / {row}: {cell.get('message', '')}")
    lines += ["", "pass = every step matched byte for byte; FAIL = see below; "
              "n/a = the SDK has no such checkpoint flavour or optional op; skip = the host cannot make a check the "
              "scenario needs (see above); - = not run for this column."]
    return "\n".join(lines) + "\n"


def write(matrix: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    j, md = out_dir / "matrix.json", out_dir / "matrix.md"
    j.write_text(json.dumps(matrix, indent=2, sort_keys=False) + "\n")
    md.write_text(markdown(matrix))
    return j, md


def load_merged(paths) -> dict:
    """Result files from runs elsewhere (the kernel VM): {"column": name, "rows": {row: cell}}."""
    merged = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or "column" not in data or not isinstance(data.get("rows"), dict):
            raise ValueError(f"{path}: a result file is {{\"column\": NAME, \"rows\": {{ROW: CELL}}}}")
        merged[data["column"]] = data["rows"]
    return merged
