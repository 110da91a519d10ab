#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Morpheus conformance harness: every scenario against every agent, one matrix.

    cli.py report                  run everything present, print the Markdown matrix
    cli.py gate rust               one SDK's release gate: exit 1 on any deviation
    cli.py run --agent c --scenario 'checkpoint_*' --out DIR
    cli.py run --agent-cmd 'my-agent --flag' --column kernel --target gate --export kernel.json

Agents are found in conformance/agents/<name>/agent.toml; scenarios in conformance/scenarios/.
The agent protocol and the scenario format are specified in spec/CONFORMANCE.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gatecases  # noqa: E402
import matrix as matrix_mod  # noqa: E402
from abi import REPO_ROOT  # noqa: E402
from runner import AgentSpec, CellResult, CellRun  # noqa: E402
from scenario import load_dir  # noqa: E402

CONFORMANCE = REPO_ROOT / "conformance"
SCENARIOS = CONFORMANCE / "scenarios"
AGENTS = CONFORMANCE / "agents"
RESULTS = CONFORMANCE / "results"


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand(text: str) -> str:
    """`${NAME}` and `${NAME:-default}` in a manifest's command and build (e.g. the cargo target dir)."""
    return _ENV_REF.sub(lambda mt: os.environ.get(mt.group(1)) or (mt.group(2) or ""), text)


def load_agents(directory: Path = AGENTS) -> dict[str, AgentSpec]:
    agents = {}
    manifests = []
    for manifest in directory.glob("*/agent.toml"):
        order = tomllib.loads(manifest.read_text()).get("order", 50)
        manifests.append((order, manifest.parent.name, manifest))
    for _, _, manifest in sorted(manifests):
        data = tomllib.loads(manifest.read_text())
        name = data.get("column", manifest.parent.name)
        command = data.get("command")
        if not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
            raise SystemExit(f"{manifest}: `command` must be a non-empty list of strings")
        if not isinstance(data.get("order", 50), int):
            raise SystemExit(f"{manifest}: `order` (the column's place in the matrix) must be an integer")
        if data.get("target", "sdk") not in ("sdk", "gate"):
            raise SystemExit(f"{manifest}: target must be \"sdk\" or \"gate\"")
        agents[name] = AgentSpec(
            name=name, target=data.get("target", "sdk"), command=[expand(c) for c in command], cwd=str(REPO_ROOT),
            build=[[expand(c) for c in cmd] for cmd in data.get("build", [])], description=data.get("description", ""),
            env=data.get("env", {}),
        )
    return agents


def build_agent(spec: AgentSpec) -> str | None:
    """Run the agent's build commands; the error text if one fails."""
    for cmd in spec.build:
        proc = subprocess.run(cmd, cwd=spec.cwd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip()[-1500:]
            return f"build command {shlex.join(cmd)} failed ({proc.returncode}): {tail}"
    return None


def run_matrix(agents, scenarios, timeout: float, jobs: int, build: bool = True):
    results: list[CellResult] = []
    cells = []
    for spec in agents:
        error = build_agent(spec) if build else None
        for sc in scenarios:
            if sc.target != spec.target:
                continue
            for variant in sc.variants():
                if error:
                    results.append(CellResult(sc.name, variant, spec.name, "fail", message=error))
                else:
                    cells.append((sc, variant, spec))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(CellRun(sc, v, spec, timeout if spec.timeout is None else spec.timeout).run)
                   for sc, v, spec in cells]
        results += [f.result() for f in futures]
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "report", "gate", "list", "export-gate-cases", "import-answers"])
    parser.add_argument("names", nargs="*", help="gate: the agent(s) to gate")
    parser.add_argument("--agent", action="append", default=[], help="run only these agents")
    parser.add_argument("--agent-cmd", help="an agent command line not in agents/ (with --column)")
    parser.add_argument("--column", default="custom", help="column name for --agent-cmd")
    parser.add_argument("--target", default="sdk", choices=["sdk", "gate"], help="--agent-cmd plays this")
    parser.add_argument("--scenario", action="append", default=[], help="glob on scenario names")
    parser.add_argument("--scenarios-dir", type=Path, default=SCENARIOS)
    parser.add_argument("--agents-dir", type=Path, default=AGENTS)
    parser.add_argument("--merge", action="append", default=None,
                        help="result files to merge as extra columns (default: results/*.results.json)")
    parser.add_argument("--out", type=Path, help="write matrix.json and matrix.md here")
    parser.add_argument("--export", type=Path, help="write the results as a mergeable column file")
    # A hang detector, not a performance bound: a JVM agent on a loaded 2-core machine once took over
    # 20 s to answer one request (java-jni, register_escapable_priority_at_registration).
    parser.add_argument("--timeout", type=float, default=float(os.environ.get("MORPHEUS_CONFORMANCE_TIMEOUT", 120)),
                        help="seconds an agent may take to answer one request (a hang detector)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the matrix as JSON, not Markdown")
    parser.add_argument("--cases", type=Path, help="export-gate-cases: write here; import-answers: read from here")
    parser.add_argument("--answers", type=Path, help="import-answers: the replayer's answer lines")
    args = parser.parse_args(argv)

    scenarios, broken = load_dir(args.scenarios_dir)
    if args.scenario:
        scenarios = [s for s in scenarios if any(fnmatch.fnmatch(s.name, p) for p in args.scenario)]
        broken = [(p, w) for p, w in broken if any(fnmatch.fnmatch(p.stem, pat) for pat in args.scenario)]
    agents = load_agents(args.agents_dir)
    if args.command == "export-gate-cases":
        if not args.cases:
            parser.error("export-gate-cases needs --cases FILE")
        cases = gatecases.export_cases(scenarios)
        gatecases.write_cases(cases, args.cases)
        print(f"{len(cases)} gate cases from {len({c['scenario'] for c in cases})} scenarios -> {args.cases}")
        return 0
    if args.command == "import-answers":
        if not (args.cases and args.answers and args.export):
            parser.error("import-answers needs --cases, --answers and --export (and --column)")
        cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
        column = gatecases.import_answers(cases, args.answers.read_text().splitlines(), args.column)
        args.export.write_text(json.dumps(column, indent=2) + "\n")
        failed = [r for r, c in column["rows"].items() if c["status"] != "pass"]
        print(f"{args.column}: {len(column['rows']) - len(failed)}/{len(column['rows'])} scenarios pass -> {args.export}")
        return 1 if failed else 0
    if args.command == "list":
        for sc in scenarios:
            print(f"{sc.name:40} [{sc.target}] {sc.intent}")
        for name, spec in agents.items():
            print(f"agent {name:12} [{spec.target}] {spec.description}")
        return 0
    chosen = list(args.names) + list(args.agent) if args.command != "report" else list(args.agent)
    if args.agent_cmd:
        agents[args.column] = AgentSpec(args.column, args.target, shlex.split(args.agent_cmd), str(REPO_ROOT))
        chosen.append(args.column)
    if args.command == "gate" and not chosen:
        parser.error("gate needs the name of an agent, e.g. `gate rust`")
    unknown = [n for n in chosen if n not in agents]
    if unknown:
        parser.error(f"no agent named {unknown}; present: {sorted(agents)}")
    selected = [agents[n] for n in (chosen or agents)]

    results = run_matrix(selected, scenarios, args.timeout, args.jobs, build=not args.no_build)
    merge_paths = args.merge if args.merge is not None else (
        sorted(RESULTS.glob("*.results.json")) if args.command == "report" else [])
    merged = matrix_mod.load_merged(merge_paths)
    columns = [s.name for s in selected]
    mx = matrix_mod.build(results, columns, [s for s in scenarios], broken, merged)
    if args.out:
        matrix_mod.write(mx, args.out)
    if args.export:
        rows = {r.row: r.to_json() for r in results}
        args.export.write_text(json.dumps({"column": args.column if args.agent_cmd else columns[0],
                                           "rows": rows}, indent=2) + "\n")
    print(json.dumps(mx, indent=2) if args.json else matrix_mod.markdown(mx), end="")

    failed = [f for f in matrix_mod.failures(mx) if f[1] in columns]
    if args.command == "gate":
        for name in columns:
            passed = sum(1 for r in results if r.agent == name and r.status == "pass")
            if passed == 0:
                print(f"gate {name}: no scenario passed (nothing ran?)", file=sys.stderr)
                return 1
        for row, col, cell in matrix_mod.skips(mx):
            if col in columns:
                print(f"gate {col}: {row} SKIPPED: {cell.get('message', '')}", file=sys.stderr)
        if failed:
            print(f"gate {', '.join(columns)}: {len(failed)} deviation(s); see the table", file=sys.stderr)
            return 1
        print(f"gate {', '.join(columns)}: every scenario conforms", file=sys.stderr)
        return 0
    return 1 if failed and args.command == "run" else 0


if __name__ == "__main__":
    sys.exit(main())
