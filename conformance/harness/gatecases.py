# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The scheduler-side scenarios as flat cases, for runs where neither the harness nor an agent process
can live (the busybox guest of the real-kernel VM test), and the way their answers come back.

    export: every `gate` or `escalate` step of every target = "gate" scenario becomes one JSON line
            holding the whole region image at that moment (hex), the op, the slot, runtime_ns (and for
            escalate now_ns, and reset on a scenario's first) and the expected answer:
            {"case": "gate_critical_blocks#4", "scenario": ..., "step": 4, "op": "gate", "slot": 0,
             "runtime_ns": ..., "region_hex": "...", "expect": {"escalate": false, "verdict": "BLOCKED_CRITICAL"}}
            escalate cases of one scenario are in step order: the replayer keeps the episode between them.
    replay (someone else's program, e.g. in the VM): for each case, put region_hex where the BPF gate
            reads it, evaluate, print {"case": ..., "escalate": ..., "verdict": ...} per line.
    import: the harness judges those lines against the expectations and writes a mergeable column
            (CONFORMANCE.md §2.7), e.g. conformance/results/kernel.results.json.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from region import Region, constants, resolve_enum
from abi import HEADER_FIELDS, SCB_FIELDS
from expr import evaluate
from scenario import EXPR_ARGS, GATE_OPS


def export_cases(scenarios) -> list[dict]:
    cases = []
    for sc in scenarios:
        if sc.target != "gate":
            continue
        with tempfile.TemporaryDirectory(prefix="morpheus-gatecases-") as tmp:
            region = Region(os.path.join(tmp, "region"), sc.region)
            escalated_before = False
            try:
                for step in sc.steps:
                    names = {**constants(), **region.header, **region.scb_fields(step.slot)}
                    if step.kind in ("write", "write_header"):
                        for name, value in step.writes.items():
                            value = resolve_enum(name, value, names)
                            if step.kind == "write":
                                assert name in SCB_FIELDS
                                region.write_scb(step.slot, name, value)
                            else:
                                assert name in HEADER_FIELDS
                                region.write_header(name, value)
                    elif step.kind == "bump":
                        region.write_scb(step.slot, "preempt_seq", region.read_scb(step.slot, "preempt_seq") + step.by)
                    elif step.kind == "agent" and step.op in GATE_OPS:
                        values = {k: step.args[k] for k in EXPR_ARGS if k in step.args}
                        for key, value in values.items():
                            if isinstance(value, str):
                                values[key] = evaluate(value, names)
                        case = {
                            "case": f"{sc.name}#{step.index}", "scenario": sc.name, "step": step.index,
                            "label": step.label, "op": step.op, "slot": step.slot, **values,
                            "region_hex": region.snapshot().hex(),
                            "expect": step.expect.get("reply", {}),
                        }
                        if step.op == "escalate":
                            # The state machine's episodes start afresh with each scenario.
                            case["reset"] = not escalated_before
                            escalated_before = True
                        cases.append(case)
            finally:
                region.close()
    return cases


def import_answers(cases: list[dict], answer_lines: list[str], column: str) -> dict:
    """A result column: per scenario, pass if every case was answered as expected."""
    answers = {}
    for line in answer_lines:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
            answers[msg["case"]] = msg
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"answer line is not {{\"case\": ..., ...}}: {line[:200]!r}") from None
    rows: dict[str, dict] = {}
    for case in cases:
        row = rows.setdefault(case["scenario"], {"status": "pass"})
        if row["status"] == "fail":
            continue
        got = answers.get(case["case"])
        problem = None
        if got is None:
            problem = "no answer for this case"
        elif "error" in got:
            # The replayer refused the case (e.g. a region layout the BPF map cannot hold).
            problem = f"the replayer refused the case: {got['error']}: {got.get('message', '')}".rstrip(": ")
        else:
            for key, want in case["expect"].items():
                if got.get(key) != want:
                    problem = f"{key} = {got.get(key)!r}, expected {want!r}"
                    break
        if problem:
            row.update(status="fail", step=case["step"], step_label=case["label"],
                       message=f"step {case['step']} ({case['label']}): {problem}")
    return {"column": column, "rows": rows}


def write_cases(cases, path: Path) -> None:
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
