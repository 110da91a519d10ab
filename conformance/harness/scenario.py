# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Scenario files (conformance/scenarios/*.toml): loading and validation.

The format is specified in spec/CONFORMANCE.md ("Scenario files"). A malformed file raises
ScenarioError naming the file, the step and what is wrong; the runner reports it as a failed row.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from abi import HEADER_FIELDS, SCB_FIELDS, m
from region import RegionSpec

TARGETS = ("sdk", "gate")
CHECKPOINT_MODES = ("sync", "async")
# Agent operations a scenario may request, and the arguments each accepts (CONFORMANCE.md).
AGENT_OPS = {
    "attach": {"path"},
    "register": {"slot", "escapable", "priority"},
    "register_agent": {"escapable", "priority"},
    "checkpoint": {"mode"},
    "checkpoint_loop": {"mode", "duration_ms"},
    "critical_enter": set(),
    "critical_exit": set(),
    "set_escapable": {"value"},
    "set_priority": {"value"},
    "state": set(),
    "status": set(),
    "shutdown": set(),
    "explicit_yield": set(),
    "mode_clock": {"ns"},
    "tasks": {"count", "checkpoints", "tick_ns", "callbacks"},
    "gate": {"slot", "runtime_ns"},
    "escalate": {"slot", "runtime_ns", "now_ns"},
    "hint": {"slot", "runtime_ns", "now_ns"},
}
# Ops an SDK may lack (CONFORMANCE.md §2.2, the hello's `ops`): a cell whose scenario uses one the agent
# does not declare is n/a, with the reason given here.
OPTIONAL_OPS = {
    "explicit_yield": "the SDK offers no explicit yield (SCB.md §5.8)",
    "tasks": "the SDK drives no event loop of several tasks (SCB.md §5.7 binds event-loop SDKs only)",
    "mode_clock": "the SDK offers no clock the harness controls for its runtime modes (CONFORMANCE.md §2.3, `mode_clock`)",
}
# Optional capabilities a step asks for through an argument (CONFORMANCE.md §2.2, the hello's `ops`): the
# argument, the capability the hello must list, and the reason a cell is n/a without it.
OPTIONAL_ARGS = {
    ("tasks", "tick_ns"): ("turn_clock", "the SDK's rotation offers no clock the harness controls (CONFORMANCE.md §2.3, "
                                         "`tasks`'s `tick_ns`)"),
}
# Gate-target ops and their integer arguments that may be written as expressions.
GATE_OPS = ("gate", "escalate", "hint")
EXPR_ARGS = ("runtime_ns", "now_ns")
EXPECT_KEYS = {"ok", "error", "reply", "scb", "header", "check", "during_yield", "slot", "watch", "stores",
               "fill", "reclaimed", "at_store", "untouched", "requests"}
STEP_KINDS = ("agent", "write", "write_header", "bump", "concurrent", "fill", "listen", "agent_gone", "restart",
              "until_registered")
# Fields of a registration request (spec/abi.toml reg_request) that `expect.requests` may name.
REQUEST_FIELDS = {f.name for f in m.RegRequest.FIELDS if f.struct_format}
MAX_STORE_WATCHES = 4  # hardware watchpoints of the CPU (harness/stores.py)


class ScenarioError(Exception):
    pass


@dataclass
class Step:
    index: int  # 1-based, as printed
    kind: str
    label: str
    op: str = ""
    args: dict = field(default_factory=dict)
    writes: dict = field(default_factory=dict)
    fill: dict = field(default_factory=dict)
    slot: int = 0
    by: int = 1
    expect: dict = field(default_factory=dict)
    # concurrent
    count: int = 0
    bumps: int = 0

    def describe(self) -> str:
        return f"step {self.index} ({self.label})"


@dataclass
class Scenario:
    name: str
    path: Path
    intent: str
    spec: str
    target: str
    checkpoint_modes: tuple[str, ...]
    region: RegionSpec
    env_region: str | None  # MORPHEUS_REGION for the agent: None = unset, "@region" = the region path
    slot: int
    steps: list[Step]
    # The scenario changes the region between `attach` and `register`, which means something only to an
    # SDK whose attach keeps the mapping it validated (CONFORMANCE.md §2.2, the hello's `attach_maps`).
    attach_maps: bool = False

    def uses_checkpoint_mode(self) -> bool:
        return any((s.op in ("checkpoint", "checkpoint_loop") or s.kind == "until_registered") and "mode" not in s.args
                   for s in self.steps)

    def variants(self) -> list[str | None]:
        """Checkpoint flavours the scenario runs under; None when it does not depend on one."""
        return list(self.checkpoint_modes) if self.uses_checkpoint_mode() else [None]


def _fail(path: Path, where: str, what: str) -> ScenarioError:
    return ScenarioError(f"{path.name}: {where}: {what}")


def _check_fields(path, where, table, known, kind):
    if not isinstance(table, dict):
        raise _fail(path, where, f"{kind} must be a table of field = value")
    for name in table:
        if name not in known:
            raise _fail(path, where, f"{name!r} is not a {kind} field")


def load(path: Path) -> Scenario:
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(path.read_text())
        else:
            raise _fail(path, "file", "scenario files end in .toml")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise _fail(path, "file", f"not valid TOML: {err}") from None
    known_top = {"intent", "spec", "target", "checkpoint_modes", "region", "env_region", "slot", "step",
                 "attach_maps"}
    unknown = set(data) - known_top
    if unknown:
        raise _fail(path, "top level", f"unknown keys {sorted(unknown)}")
    intent = data.get("intent")
    if not isinstance(intent, str) or not intent.strip():
        raise _fail(path, "top level", "`intent` (one sentence saying what the scenario proves) is missing")
    target = data.get("target", "sdk")
    if target not in TARGETS:
        raise _fail(path, "target", f"{target!r} is not one of {TARGETS}")
    modes = tuple(data.get("checkpoint_modes", CHECKPOINT_MODES))
    if not modes or any(m not in CHECKPOINT_MODES for m in modes):
        raise _fail(path, "checkpoint_modes", f"must be a non-empty subset of {CHECKPOINT_MODES}")
    try:
        region = RegionSpec.from_table(data.get("region", {}))
    except (ValueError, TypeError) as err:
        raise _fail(path, "[region]", str(err)) from None
    env_region = data.get("env_region")
    if env_region is not None and not isinstance(env_region, str):
        raise _fail(path, "env_region", "must be a string (\"@region\" for the scenario's region)")
    attach_maps = data.get("attach_maps", False)
    if not isinstance(attach_maps, bool):
        raise _fail(path, "attach_maps", "must be a boolean")
    default_slot = data.get("slot", 0)
    raw_steps = data.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise _fail(path, "top level", "no [[step]] entries")
    steps = [_load_step(path, i + 1, raw, default_slot) for i, raw in enumerate(raw_steps)]
    tasks = [s for s in steps if s.op == "tasks"]
    clocked = [s for s in tasks if "tick_ns" in s.args]
    if clocked and clocked[0] is not tasks[0] or len(clocked) > 1:
        raise _fail(path, clocked[-1].describe(), "tick_ns belongs to the scenario's first `tasks` op only "
                    "(CONFORMANCE.md §2.3: the agent's clock starts at 0 there)")
    return Scenario(
        name=path.stem, path=path, intent=" ".join(intent.split()), spec=data.get("spec", ""),
        target=target, checkpoint_modes=modes, region=region, env_region=env_region,
        slot=default_slot, steps=steps, attach_maps=attach_maps,
    )


def _load_step(path: Path, index: int, raw: dict, default_slot: int) -> Step:
    where = f"step {index}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "must be a table")
    kinds = [k for k in STEP_KINDS if k in raw]
    if len(kinds) != 1:
        raise _fail(path, where, f"needs exactly one of {STEP_KINDS}, has {kinds or 'none'}")
    kind = kinds[0]
    expect = raw.get("expect", {})
    if not isinstance(expect, dict):
        raise _fail(path, where, "`expect` must be a table")
    bad = set(expect) - EXPECT_KEYS
    if bad:
        raise _fail(path, where, f"expect has unknown keys {sorted(bad)}; known: {sorted(EXPECT_KEYS)}")
    if "scb" in expect:
        _check_fields(path, where + " expect.scb", expect["scb"], SCB_FIELDS, "scb")
    if "header" in expect:
        _check_fields(path, where + " expect.header", expect["header"], HEADER_FIELDS, "region_header")
    if "watch" in expect:
        _check_fields(path, where + " expect.watch", expect["watch"], SCB_FIELDS, "scb")
        for name, order in expect["watch"].items():
            if not (isinstance(order, list) and order):
                raise _fail(path, where, f"expect.watch.{name} must be the list of values in their order")
    if "stores" in expect:
        stores = expect["stores"]
        _check_fields(path, where + " expect.stores", stores, SCB_FIELDS, "scb")
        if not len(stores) <= MAX_STORE_WATCHES:
            raise _fail(path, where, f"expect.stores watches 1 to {MAX_STORE_WATCHES} fields, not {len(stores)}")
        for name, order in stores.items():
            if not isinstance(order, list) or SCB_FIELDS[name].size not in (1, 2, 4, 8):
                raise _fail(path, where, f"expect.stores.{name} must be the list of values stored, in order "
                                         "([] for none), of a field of 1, 2, 4 or 8 bytes")
    if "at_store" in expect:
        at = expect["at_store"]
        if not (isinstance(at, dict) and set(at) <= {"field", "value", "scb"} and "field" in at and "value" in at
                and at["field"] in SCB_FIELDS):
            raise _fail(path, where, "expect.at_store takes { field = SCB_FIELD, value = V, scb = { field = value } }")
        _check_fields(path, where + " expect.at_store.scb", at.get("scb", {}), SCB_FIELDS, "scb")
        if len(set(expect.get("stores", {})) | {at["field"]}) > MAX_STORE_WATCHES:
            raise _fail(path, where, f"expect.stores and expect.at_store watch more than {MAX_STORE_WATCHES} fields")
    if "fill" in expect:
        _check_fill(path, where + " expect.fill", expect["fill"])
    if "untouched" in expect and expect["untouched"] is not True:
        raise _fail(path, where, "expect.untouched takes only `true`")
    if "reclaimed" in expect and expect["reclaimed"] is not True:
        raise _fail(path, where, "expect.reclaimed takes only `true`")
    if "during_yield" in expect:
        dy = expect["during_yield"]
        if not isinstance(dy, dict) or set(dy) - {"bump", "write", "write_header"}:
            raise _fail(path, where, "expect.during_yield takes `bump = N`, `write = { field = value }` and "
                                     "`write_header = { field = value }`")
        if "write" in dy:
            _check_fields(path, where + " expect.during_yield.write", dy["write"], SCB_FIELDS, "scb")
        if "write_header" in dy:
            _check_fields(path, where + " expect.during_yield.write_header", dy["write_header"], HEADER_FIELDS,
                          "region_header")
    if "requests" in expect:
        reqs = expect["requests"]
        if not isinstance(reqs, list) or not all(isinstance(r, dict) for r in reqs):
            raise _fail(path, where, "expect.requests must be the list of requests, each { field = value }")
        for r in reqs:
            _check_fields(path, where + " expect.requests", r, REQUEST_FIELDS, "reg_request")
    if "check" in expect and not (
        isinstance(expect["check"], list) and all(isinstance(c, str) for c in expect["check"])):
        raise _fail(path, where, "expect.check must be a list of expressions")
    slot = raw.get("slot", expect.get("slot", default_slot))
    step = Step(index=index, kind=kind, label=raw.get("label", ""), slot=slot, expect=expect)
    common = {"label", "expect", "slot", kind}
    if kind == "agent":
        op = raw["agent"]
        if op not in AGENT_OPS:
            raise _fail(path, where, f"agent op {op!r} is not one of {sorted(AGENT_OPS)}")
        args = {k: v for k, v in raw.items() if k not in common}
        bad = set(args) - AGENT_OPS[op] - {"slot"}
        if bad:
            raise _fail(path, where, f"{op} takes no argument(s) {sorted(bad)}")
        if op in ("register",) + GATE_OPS:
            args["slot"] = slot
        missing = {"runtime_ns", "now_ns"} & AGENT_OPS[op] - set(args)
        if missing:
            raise _fail(path, where, f"{op} needs {sorted(missing)}")
        if op == "mode_clock" and not (isinstance(args.get("ns"), int) and not isinstance(args["ns"], bool) and args["ns"] >= 0):
            raise _fail(path, where, "mode_clock needs an integer ns >= 0")
        if op == "tasks" and not all(isinstance(args.get(k), int) and args[k] >= 1 for k in ("count", "checkpoints")):
            raise _fail(path, where, "tasks needs positive integers count and checkpoints")
        if op == "tasks" and "tick_ns" in args and not (isinstance(args["tick_ns"], int) and not isinstance(args["tick_ns"], bool)
                                                        and args["tick_ns"] >= 1):
            raise _fail(path, where, "tasks's tick_ns must be a positive integer")
        if op == "tasks" and "callbacks" in args and not (isinstance(args["callbacks"], int) and not isinstance(args["callbacks"], bool)
                                                          and args["callbacks"] >= 1):
            raise _fail(path, where, "tasks's callbacks must be a positive integer")
        if "mode" in args and args["mode"] not in CHECKPOINT_MODES:
            raise _fail(path, where, f"mode {args['mode']!r} is not one of {CHECKPOINT_MODES}")
        step.op, step.args = op, args
        step.label = step.label or op
    elif kind in ("write", "write_header"):
        writes = raw[kind]
        known = SCB_FIELDS if kind == "write" else HEADER_FIELDS
        _check_fields(path, where, writes, known, "scb" if kind == "write" else "region_header")
        extra = set(raw) - common
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        step.writes = writes
        step.label = step.label or f"{kind} " + ", ".join(f"{k}={v}" for k, v in writes.items())
    elif kind == "fill":
        _check_fill(path, where, raw["fill"])
        extra = set(raw) - common
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        step.fill = raw["fill"]
        step.label = step.label or "fill bytes {from}..{to} of the slot with {byte}".format(**raw["fill"])
    elif kind == "bump":
        by = raw["bump"]
        if not isinstance(by, int) or isinstance(by, bool) or by < 1:
            raise _fail(path, where, "bump = N needs a positive integer")
        step.by = by
        step.label = step.label or f"bump preempt_seq by {by}"
    elif kind == "listen":
        answers = raw["listen"]
        from regsocket import ANSWERS
        if not (isinstance(answers, list) and answers and all(a in ANSWERS for a in answers)):
            raise _fail(path, where, f"listen takes the list of answers to REGISTER, each one of {list(ANSWERS)}")
        extra = set(raw) - common
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        step.args = {"answers": answers}
        step.label = step.label or "the harness's agent listens, answering " + ", ".join(answers)
    elif kind in ("agent_gone", "restart"):
        if raw[kind] is not True:
            raise _fail(path, where, f"{kind} takes only `true`")
        extra = set(raw) - common
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        step.label = step.label or {"agent_gone": "the agent is killed (its socket file stays)",
                                    "restart": "the agent restarts: region retired, a new one, a new socket"}[kind]
    elif kind == "until_registered":
        if raw[kind] is not True:
            raise _fail(path, where, "until_registered takes only `true` (and an optional `mode`)")
        extra = set(raw) - common - {"mode"}
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        if "mode" in raw:
            if raw["mode"] not in CHECKPOINT_MODES:
                raise _fail(path, where, f"mode {raw['mode']!r} is not one of {CHECKPOINT_MODES}")
            step.args["mode"] = raw["mode"]
        step.op = "checkpoint"
        step.label = step.label or "checkpoints until the SDK registers again"
    elif kind == "concurrent":
        op = raw["concurrent"]
        if op != "checkpoint_loop":
            raise _fail(path, where, "concurrent supports only \"checkpoint_loop\"")
        duration, bumps = raw.get("duration_ms"), raw.get("bumps")
        if not (isinstance(duration, int) and duration > 0 and isinstance(bumps, int) and bumps > 0):
            raise _fail(path, where, "concurrent needs positive integers `duration_ms` and `bumps`")
        extra = set(raw) - common - {"duration_ms", "bumps", "mode"}
        if extra:
            raise _fail(path, where, f"unknown keys {sorted(extra)}")
        step.op, step.count, step.bumps = op, duration, bumps
        step.args = {"duration_ms": duration}
        if "mode" in raw:
            step.args["mode"] = raw["mode"]
        step.label = step.label or f"checkpoints for {duration} ms while the harness bumps {bumps} times"
    return step


def _check_fill(path: Path, where: str, table) -> None:
    if not isinstance(table, dict) or set(table) != {"from", "to", "byte"}:
        raise _fail(path, where, "takes { from = OFFSET, to = OFFSET, byte = N } (offsets in the slot's stride)")
    byte = table["byte"]
    if not isinstance(byte, int) or isinstance(byte, bool) or not 0 <= byte <= 255:
        raise _fail(path, where, f"byte must be 0..255, not {byte!r}")


def load_dir(directory: Path) -> tuple[list[Scenario], list[tuple[Path, str]]]:
    """All scenarios in a directory, and the files that failed to load with why."""
    scenarios, broken = [], []
    for path in sorted(directory.glob("*.toml")):
        try:
            scenarios.append(load(path))
        except ScenarioError as err:
            broken.append((path, str(err)))
    return scenarios, broken
