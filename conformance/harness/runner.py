# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Runs one scenario against one agent and judges every step, bytes first.

The harness keeps the image it expects the region to hold. Its own writes go to both the region and
that image; after an agent step only the fields the scenario names may differ from it, and they must
hold the values it gives. Any other byte that changed is a failure reported with its offset and name.
"""

from __future__ import annotations

import os
import random
import struct
import tempfile
import threading
import time
from dataclasses import dataclass, field

import abi
import softdirty
import stores
from abi import HEADER_FIELDS, SCB_FIELDS, m
from agentproc import Agent, AgentFault
from expr import ExprError, evaluate
from region import DEFAULT_GENERATION, Region, RegionSpec, constants, first_difference, resolve_enum
from regsocket import AgentSocket
from scenario import EXPR_ARGS, OPTIONAL_ARGS, OPTIONAL_OPS, Scenario, Step


# Optional `state` result fields (CONFORMANCE.md §2.3) and their JSON types; an agent lists those its SDK
# can tell in its hello's `state_fields`.
OPTIONAL_STATE_FIELDS = {"escapable": bool, "priority": int}


@dataclass
class AgentSpec:
    """An agent as its manifest (conformance/agents/<name>/agent.toml) describes it."""

    name: str
    target: str
    command: list[str]
    cwd: str
    build: list[list[str]] = field(default_factory=list)
    description: str = ""
    env: dict[str, str] = field(default_factory=dict)
    # Seconds this agent may take to answer a request, in place of the run's --timeout (None: the run's).
    timeout: float | None = None


@dataclass
class CellResult:
    scenario: str
    variant: str | None
    agent: str
    status: str  # pass | fail | n/a | skip (a check this host cannot make; message says why)
    step: int | None = None
    step_label: str = ""
    message: str = ""
    first_diff: dict | None = None
    seconds: float = 0.0

    @property
    def row(self) -> str:
        return self.scenario if self.variant is None else f"{self.scenario}[{self.variant}]"

    def to_json(self) -> dict:
        out = {"status": self.status, "seconds": round(self.seconds, 3)}
        if self.step is not None:
            out["step"] = self.step
            out["step_label"] = self.step_label
        if self.message:
            out["message"] = self.message
        if self.first_diff:
            out["first_diff"] = self.first_diff
        return out


# Errors of the agent protocol itself (spec/CONFORMANCE.md), not of the SDK.
PROTOCOL_ERRORS = ("BAD_REQUEST", "UNSUPPORTED")


class StepFailure(Exception):
    def __init__(self, message: str, first_diff: dict | None = None):
        super().__init__(message)
        self.first_diff = first_diff


class StepSkipped(Exception):
    """The step needs a facility this host lacks (e.g. hardware watchpoints); never a pass."""


def _diff_report(region: Region, expected: bytes, actual: bytes, context: str) -> StepFailure:
    off = first_difference(expected, actual)
    exp = expected[off] if off < len(expected) else None
    act = actual[off] if off < len(actual) else None
    where = region.locate(off)
    diff = {"offset": off, "where": where, "expected": exp, "actual": act}
    # Whole-field values make the message readable; the byte stays the precise locator.
    field_note = ""
    name = where.split(".", 1)[-1].split("+")[0] if "." in where else ""
    if where.startswith("scb[") and name in SCB_FIELDS and SCB_FIELDS[name].struct_format:
        slot = int(where[4:where.index("]")])
        f = SCB_FIELDS[name]
        base = region.scb_offset(slot) + f.offset
        e = struct.unpack_from(f.struct_format, expected, base)[0]
        a = struct.unpack_from(f.struct_format, actual, base)[0]
        diff.update({"field": f"scb[{slot}].{name}", "expected_value": e, "actual_value": a})
        field_note = f" (scb[{slot}].{name}: expected {e}, found {a})"
    elif where.startswith("header.") and name in HEADER_FIELDS and HEADER_FIELDS[name].struct_format:
        f = HEADER_FIELDS[name]
        e = struct.unpack_from(f.struct_format, expected, f.offset)[0]
        a = struct.unpack_from(f.struct_format, actual, f.offset)[0]
        diff.update({"field": f"header.{name}", "expected_value": e, "actual_value": a})
        field_note = f" (header.{name}: expected {e}, found {a})"
    return StepFailure(
        f"{context}: byte {off} ({where}) is {act}, expected {exp}{field_note}", diff)


class CellRun:
    def __init__(self, scenario: Scenario, variant: str | None, spec: AgentSpec, timeout: float):
        self.scenario = scenario
        self.variant = variant
        self.spec = spec
        self.timeout = timeout
        self.agent: Agent | None = None
        self.region: Region | None = None
        self.expected = b""
        self.tid: int | None = None
        # The harness playing the agent (regsocket.py): its current instance, the requests it received,
        # the regions retired by restarts with the image each must keep, and the lock that orders the
        # socket threads' registrar writes with the runner's expected image.
        self.tmp = ""
        self.socket_path = ""
        self.socket_agent: AgentSocket | None = None
        self.listen_slot = 0
        self.answers: list[str] = []
        self.requests: list[dict] = []
        self.retired: list[tuple[Region, bytes]] = []
        self.lock = threading.RLock()

    # -- helpers ----------------------------------------------------------------------------------

    def _names(self, image: bytes, slot: int, reply: dict) -> dict:
        names: dict = {"reply": reply}
        hello = self.agent.hello if self.agent else {}
        if "pid" in hello:
            names["pid"] = hello["pid"]
        if self.tid is not None:
            names["tid"] = self.tid
        kind = hello.get("runtime_kind")
        if kind in m.RuntimeKind.__members__:
            names["runtime_kind"] = int(m.RuntimeKind[kind])
            try:
                names["escapable_default"] = int(abi.escapable_default(kind))
            except KeyError:
                pass
        if (image and self.region.spec.create and self.region.size >= self.region.full_size
                and 0 <= slot < self.region.spec.scb_count):
            names.update(self.region.scb_fields(slot, image))
            for f in m.RegionHeader.FIELDS:
                if f.struct_format and f.name not in names:
                    names[f.name] = struct.unpack_from(f.struct_format, image, f.offset)[0]
        return names

    def _apply(self, image: bytearray, base: int, f, value) -> None:
        struct.pack_into(f.struct_format, image, base + f.offset, value)

    def _harness_write(self, fields: dict, slot: int | None) -> None:
        image = bytearray(self.expected)
        names = {**constants(), **self._names(self.expected, slot or 0, {})}
        for name, value in fields.items():
            value = resolve_enum(name, value, names)
            if slot is None:
                self.region.write_header(name, value)
                self._apply(image, 0, HEADER_FIELDS[name], resolve_enum(name, value))
            else:
                self.region.write_scb(slot, name, value)
                self._apply(image, self.region.scb_offset(slot), SCB_FIELDS[name], resolve_enum(name, value))
        self.expected = bytes(image)

    def _fill_range(self, fill: dict, slot: int, image: bytes, step: Step) -> tuple[int, int]:
        """Absolute [start, end) of a `fill` table's offsets, which count from the slot's first byte."""
        names = {**constants(), **self._names(image, slot, {}), "scb_size": m.Scb.SIZE}
        try:
            lo, hi = (int(evaluate(fill[k], names)) for k in ("from", "to"))
        except ExprError as err:
            raise StepFailure(f"{step.describe()}: fill: {err}") from None
        stride = self.region.header["scb_stride"]
        if not 0 <= lo <= hi <= stride:
            raise StepFailure(f"{step.describe()}: fill {lo}..{hi} is outside the slot's stride of {stride} bytes")
        base = self.region.scb_offset(slot)
        return base + lo, base + hi

    def _harness_fill(self, step: Step) -> None:
        start, end = self._fill_range(step.fill, step.slot, self.expected, step)
        self.region.fill(start, end, step.fill["byte"])
        image = bytearray(self.expected)
        image[start:end] = bytes([step.fill["byte"]]) * (end - start)
        self.expected = bytes(image)

    def _bump(self, slot: int, by: int) -> None:
        seq = self.region.read_scb(slot, "preempt_seq") + by
        self._harness_write({"preempt_seq": seq}, slot)

    def _check_bytes(self, step: Step, before: bytes, reply: dict) -> None:
        if not self.region.spec.create or self.region.size == 0:
            return
        actual = self.region.snapshot()
        expected = bytearray(before)
        expect = step.expect
        slot = step.slot
        post_names = self._names(actual, slot, reply)
        if expect.get("reclaimed"):
            # The reclaim clear (SCB.md §4) over the whole stride, then INIT published.
            base = self.region.scb_offset(slot)
            abi.scb_clear_for_reuse(expected, base, self.region.header["scb_stride"])
            struct.pack_into(SCB_FIELDS["worker_state"].struct_format, expected,
                             base + SCB_FIELDS["worker_state"].offset, int(m.WorkerState.INIT))
        if expect.get("fill"):
            start, end = self._fill_range(expect["fill"], slot, actual, step)
            expected[start:end] = bytes([expect["fill"]["byte"]]) * (end - start)
        for table, fields, base in (
            (expect.get("scb", {}), SCB_FIELDS, self.region.scb_offset(slot) if expect.get("scb") else 0),
            (expect.get("header", {}), HEADER_FIELDS, 0),
        ):
            for name, want in table.items():
                f = fields[name]
                start, end = base + f.offset, base + f.offset + f.size
                if want == "any":
                    expected[start:end] = actual[start:end]
                    continue
                names = dict(post_names)
                names["prev"] = struct.unpack_from(f.struct_format, before, start)[0]
                try:
                    value = evaluate(want, names, name)
                except ExprError as err:
                    raise StepFailure(f"{step.describe()}: expect {name}: {err}") from None
                if isinstance(value, bool):
                    value = int(value)
                try:
                    struct.pack_into(f.struct_format, expected, start, value)
                except struct.error:
                    raise StepFailure(f"{step.describe()}: expect {name} = {value} does not fit") from None
        if bytes(expected) != actual:
            raise _diff_report(self.region, bytes(expected), actual, step.describe())
        for text in expect.get("check", []):
            names = dict(post_names)
            try:
                ok = evaluate(text, names)
            except ExprError as err:
                raise StepFailure(f"{step.describe()}: check: {err}") from None
            if not ok:
                raise StepFailure(f"{step.describe()}: check failed: {text} (with "
                                  + ", ".join([f"{k}={v}" for k, v in names.items() if k in text and k != "reply"]
                                              + [f"reply.{k}={v}" for k, v in (reply or {}).items() if f"reply.{k}" in text]) + ")")
        self.expected = actual

    def _check_reply(self, step: Step, reply: dict) -> None:
        expect = step.expect
        want_error = expect.get("error")
        want_ok = expect.get("ok", want_error is None)
        if want_ok == "either":  # success (reply checked) or the named error
            if not reply["ok"]:
                want_ok = False
            else:
                want_ok = True
        if reply["ok"] and not want_ok:
            raise StepFailure(f"{step.describe()}: succeeded, expected error {want_error}: {reply}")
        if not reply["ok"]:
            if reply["error"] in PROTOCOL_ERRORS:
                raise StepFailure(f"{step.describe()}: the agent refused the request: {reply['error']}"
                                  f" ({reply.get('message', '')})")
            if reply["error"] not in abi.error_names():
                raise StepFailure(f"{step.describe()}: error {reply['error']!r} is not an error_code name")
            if want_ok:
                raise StepFailure(f"{step.describe()}: failed with {reply['error']}"
                                  f" ({reply.get('message', '')}), expected success")
            if want_error is not None and reply["error"] != want_error:
                raise StepFailure(f"{step.describe()}: error {reply['error']}, expected {want_error}"
                                  f" ({reply.get('message', '')})")
        for key, want in (expect.get("reply", {}) if reply["ok"] else {}).items():
            if key not in reply:
                raise StepFailure(f"{step.describe()}: reply lacks {key!r}: {reply}")
            if reply[key] != want:
                raise StepFailure(f"{step.describe()}: reply {key} = {reply[key]!r}, expected {want!r}")

    # -- steps ------------------------------------------------------------------------------------

    def _agent_step(self, step: Step) -> None:
        args = dict(step.args)
        if step.op in ("checkpoint", "checkpoint_loop") and "mode" not in args:
            args["mode"] = self.variant
        if step.op == "attach" and "path" in args and args["path"] == "@region":
            args["path"] = self.region.path
        for key in EXPR_ARGS:
            if isinstance(args.get(key), str):  # e.g. "slice_ns + grace_ns + 1"
                names = {**constants(), **self._names(self.expected, step.slot, {})}
                args[key] = evaluate(args[key], names)
        during_yield = step.expect.get("during_yield", {})
        suspended_failure: list[StepFailure] = []

        def on_suspended(_event):
            # The task is parked in the executor: the SDK must not have written anything yet.
            actual = self.region.snapshot()
            if actual != self.expected:
                suspended_failure.append(_diff_report(
                    self.region, self.expected, actual,
                    f"{step.describe()}: while the task was suspended in its yield (before resumption)"))
                self.expected = actual
            bump = during_yield.get("bump", 0)
            if bump:
                self._bump(step.slot, bump)
            if during_yield.get("write"):
                # Another path of the same runtime (SCB.md §3: why last_ack_seq is a CAS) or the scheduler.
                self._harness_write(during_yield["write"], step.slot)
            if during_yield.get("write_header"):
                # E.g. a scheduler restart while the task is suspended (SCB.md §6).
                self._harness_write(during_yield["write_header"], None)

        watcher = self._watch(step) if step.expect.get("watch") else None
        tracer = self._tracer(step) if step.expect.get("stores") or step.expect.get("at_store") else None
        pages = self._page_watch(step) if step.expect.get("untouched") else None
        requests_before = len(self.requests)
        try:
            reply = self.agent.request(step.op, args, on_suspended=on_suspended)
        finally:
            if watcher:
                watcher.stop()
            if tracer:
                try:
                    tracer.stop()
                except stores.Unavailable as err:
                    raise StepSkipped(f"{step.describe()}: expect.stores: {err}") from None
        if watcher:
            watcher.judge(step)
        if tracer:
            self._judge_stores(step, tracer)
        if pages:
            written = pages.written()
            if written:
                raise StepFailure(f"{step.describe()}: the agent stored into the page(s) at file offset(s) "
                                  f"{written} holding scb[{step.slot}] (its soft-dirty bit is set), expected no "
                                  "store at all")
        if suspended_failure:
            raise suspended_failure[0]
        if step.op == "checkpoint" and reply.get("ok"):
            yielded = reply.get("yielded")
            if not isinstance(yielded, bool):
                raise StepFailure(f"{step.describe()}: checkpoint reply has no boolean 'yielded': {reply}")
            if args["mode"] == "async" and reply["_suspensions"] != int(yielded):
                raise StepFailure(
                    f"{step.describe()}: async checkpoint returned yielded={yielded} after "
                    f"{reply['_suspensions']} suspension(s); a yield suspends exactly once, no yield never")
        if step.op in ("register", "register_agent") and reply.get("ok"):
            tid = reply.get("tid")
            pid = self.agent.hello.get("pid")
            if not isinstance(tid, int) or not os.path.exists(f"/proc/{pid}/task/{tid}"):
                raise StepFailure(f"{step.describe()}: register reply tid {tid!r} is not a thread of "
                                  f"the agent process {pid}")
            self.tid = tid
        self._check_reply(step, reply)
        if step.op == "state" and reply.get("ok"):
            self._check_state_fields(step, reply)
        self._check_channel(step, requests_before)
        # self.expected holds the image before the step plus the harness's own writes during the yield
        # and the registrar's writes of the harness's agent.
        self._check_bytes(step, self.expected, reply)

    def _check_state_fields(self, step: Step, reply: dict) -> None:
        """`state`'s optional fields (CONFORMANCE.md §2.3): those the hello declares in `state_fields` must
        be in every reply with a worker, and what a reply says about an attached worker must be what its
        SCB holds (the SDK wrote those values itself; nothing else writes them in SDK scenarios)."""
        if not reply.get("registered"):
            return
        declared = self.agent.hello.get("state_fields", [])
        if not isinstance(declared, list) or not set(declared) <= OPTIONAL_STATE_FIELDS.keys():
            raise StepFailure(f"{step.describe()}: the hello's state_fields {declared!r} is not a list of "
                              f"{sorted(OPTIONAL_STATE_FIELDS)}")
        slot = reply.get("slot")
        attached = (reply.get("attached") is True and isinstance(slot, int) and not isinstance(slot, bool)
                    and self.region.spec.create and self.region.size >= self.region.full_size
                    and 0 <= slot < self.region.spec.scb_count)
        for name, kind in OPTIONAL_STATE_FIELDS.items():
            if reply.get(name) is None:  # absent or null: the agent cannot tell
                if name in declared:
                    raise StepFailure(f"{step.describe()}: the hello declares state field {name!r}, "
                                      f"the reply does not give it: {reply}")
                continue
            value = reply[name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise StepFailure(f"{step.describe()}: state {name} = {value!r} is not a {kind.__name__}")
            if attached:
                stored = self.region.read_scb(slot, name)
                if int(value) != stored:
                    raise StepFailure(f"{step.describe()}: state reports {name} = {value!r}, "
                                      f"scb[{slot}].{name} holds {stored}")

    def _page_watch(self, step: Step) -> softdirty.PageWatch:
        base = self.region.scb_offset(step.slot)
        try:
            return softdirty.PageWatch(self.agent.proc.pid, self.region.path, base,
                                       base + self.region.header["scb_stride"])
        except stores.Unavailable as err:
            raise StepSkipped(f"{step.describe()}: expect.untouched: {err}") from None

    def _tracer(self, step: Step) -> stores.StoreTracer:
        base = self.region.scb_offset(step.slot)
        names = list(step.expect.get("stores", {}))
        trigger = step.expect.get("at_store", {}).get("field")
        if trigger and trigger not in names:
            names.append(trigger)
        fields = {name: (base + SCB_FIELDS[name].offset, SCB_FIELDS[name].size, SCB_FIELDS[name].struct_format)
                  for name in names}
        try:
            tracer = stores.StoreTracer(self.agent.proc.pid, self.region.path, fields, self.region.mapping())
            tracer.start()
        except stores.Unavailable as err:
            raise StepSkipped(f"{step.describe()}: expect.stores: {err}") from None
        return tracer

    def _judge_stores(self, step: Step, tracer: stores.StoreTracer) -> None:
        names = self._names(self.region.snapshot(), step.slot, {})
        for name, order in step.expect.get("stores", {}).items():
            want = [resolve_enum(name, v, names) for v in order]
            seen = tracer.stores[name]
            if seen != want:
                cls = abi.enum_of_field(name)

                def show(values):
                    if cls is None:
                        return str(values)
                    return "[" + ", ".join(cls(v).name if v in cls._value2member_map_ else str(v)
                                           for v in values) + "]"
                raise StepFailure(f"{step.describe()}: the agent stored scb[{step.slot}].{name} = {show(seen)} "
                                  f"(every store, in order, equal values included); expected {show(want)}")
        at = step.expect.get("at_store")
        if at:
            # The SCB as it was the instant the agent stored `field = value` (e.g. worker_state = REGISTERED).
            field = at["field"]
            want = resolve_enum(field, at["value"])
            hits = [image for name, value, image in tracer.events if name == field and value == want]
            if not hits:
                raise StepFailure(f"{step.describe()}: the agent never stored scb[{step.slot}].{field} = "
                                  f"{at['value']}; it stored {tracer.stores[field]}")
            image = hits[0]
            names = self._names(image, step.slot, {})
            base = self.region.scb_offset(step.slot)
            for name, expr in at.get("scb", {}).items():
                f = SCB_FIELDS[name]
                held = struct.unpack_from(f.struct_format, image, base + f.offset)[0]
                try:
                    value = evaluate(expr, names, name)
                except ExprError as err:
                    raise StepFailure(f"{step.describe()}: expect.at_store {name}: {err}") from None
                if held != int(value):
                    raise StepFailure(f"{step.describe()}: when the agent stored {field} = {at['value']}, "
                                      f"scb[{step.slot}].{name} held {held}, expected {value} ({expr})")

    def _watch(self, step: Step) -> "_Watcher":
        return _Watcher(self.region, step.slot, step.expect["watch"])

    # -- the harness as the agent (registration channel, SCB.md §4.1 and §6.1) --------------------------

    def _registrar_store(self, region: Region, slot: int, name: str, value: int) -> None:
        """One store of the registrar, to the region and to the expected image (lock held)."""
        region.write_scb(slot, name, value)
        if region is self.region:
            image = bytearray(self.expected)
            self._apply(image, region.scb_offset(slot), SCB_FIELDS[name], value)
            self.expected = bytes(image)

    def _assign(self, record: dict, pid: int) -> tuple[int, int] | None:
        """The agent's INIT -> CLAIMED -> REGISTERED (SCB.md §4) for an accepted REGISTER, with the data
        in the table's order while CLAIMED; escapable and priority from the request (§4.1: DEFAULT is the
        request's runtime_kind's default). None when the slot is not INIT (the agent has no free slot)."""
        region, slot = self.region, self.listen_slot
        if region.read_scb(slot, "worker_state") != int(m.WorkerState.INIT):
            return None
        store = lambda name, value: self._registrar_store(region, slot, name, value)  # noqa: E731
        store("worker_state", int(m.WorkerState.CLAIMED))
        store("tid", record["tid"])
        store("pid", pid)
        generation = (region.read_scb(slot, "slot_generation") + 1) & 0xFFFFFFFF or 1
        store("slot_generation", generation)
        store("last_ack_seq", region.read_scb(slot, "preempt_seq"))
        kind = record["runtime_kind"]
        default = m.ESCAPABLE_DEFAULT.get(m.RuntimeKind(kind), False) if kind in m.RuntimeKind._value2member_map_ else False
        escapable = {int(m.RegEscapable.DEFAULT): default, int(m.RegEscapable.NO): False,
                     int(m.RegEscapable.YES): True}[record["escapable"]]
        store("escapable", int(escapable))
        store("priority", record["priority"])
        store("worker_state", int(m.WorkerState.REGISTERED))
        return slot, generation

    def _release(self, slot: int) -> None:
        """UNREGISTER: the registrar's DEAD -> CLAIMED, the reclaim clear, INIT (SCB.md §4)."""
        region = self.region
        self._registrar_store(region, slot, "worker_state", int(m.WorkerState.CLAIMED))
        base, stride = region.scb_offset(slot), region.header["scb_stride"]
        abi.scb_clear_for_reuse(region.mapping(), base, stride)
        image = bytearray(self.expected)
        image[base:base + stride] = region.snapshot()[base:base + stride]
        self.expected = bytes(image)
        self._registrar_store(region, slot, "worker_state", int(m.WorkerState.INIT))

    def _listen(self) -> None:
        self.socket_agent = AgentSocket(self.socket_path, self.answers, self._assign, self._release,
                                        self.region.path, self.region.header["generation"], self.lock,
                                        self.requests)

    def _restart(self, step: Step) -> None:
        """A restart inside the agent's own process (SCB.md §6.1): the old region retired (generation 0)
        and unlinked, the socket replaced, a new region in new memory with the next generation."""
        if self.socket_agent is None:
            raise StepFailure(f"{step.describe()}: restart before listen (scenario error)")
        with self.lock:
            self._harness_write({"generation": 0}, None)
            # The socket file stays until the new one is renamed over it: a new inode, never a reused one.
            self.socket_agent.close(unlink=False)
            self.retired.append((self.region, self.expected))
            os.unlink(self.region.path)
            old = self.scenario.region
            spec = RegionSpec(scb_count=old.scb_count, header={**old.header, "generation": DEFAULT_GENERATION
                                                              + len(self.retired)})
            self.region = Region(os.path.join(self.tmp, f"region.{len(self.retired)}"), spec)
            self.expected = self.region.snapshot()
            self._listen()

    def _check_channel(self, step: Step, since: int) -> None:
        """After an agent step: the retired regions kept every byte (a lost worker writes nothing to them,
        SCB.md §6), no request was malformed, and `expect.requests` holds for the requests of the step."""
        for old, image in self.retired:
            actual = old.snapshot()
            if actual != image:
                raise _diff_report(old, image, actual, f"{step.describe()}: the retired region {old.path}")
        with self.lock:
            received = list(self.requests[since:])
        for record in received:
            if "malformed" in record:
                raise StepFailure(f"{step.describe()}: the SDK sent a malformed registration request "
                                  f"({record['malformed']}): {record}")
        if "requests" not in step.expect:
            return
        want = step.expect["requests"]
        ops = [m.RegOp(r["op"]).name for r in received]
        if len(received) != len(want):
            raise StepFailure(f"{step.describe()}: the SDK sent {len(received)} registration request(s) {ops}, "
                              f"expected {len(want)}")
        # The agent's names (pid, tid, runtime_kind from its hello and replies), never the SCB's fields of
        # the same names: a request is compared with what the SDK is, not with what a slot holds.
        names = {**constants(), **self._names(b"", step.slot, {}), "reg_request_size": m.RegRequest.SIZE}
        enums = {"op": m.RegOp, "escapable": m.RegEscapable}
        for i, (record, fields) in enumerate(zip(received, want)):
            for name, value in fields.items():
                if name in enums and isinstance(value, str) and value in enums[name].__members__:
                    value = int(enums[name][value])
                else:
                    try:
                        value = int(evaluate(value, names, name))
                    except ExprError as err:
                        raise StepFailure(f"{step.describe()}: expect.requests[{i}].{name}: {err}") from None
                if record[name] != value:
                    raise StepFailure(f"{step.describe()}: registration request {i + 1} ({ops[i]}) has {name} = "
                                      f"{record[name]}, expected {value} ({fields[name]})")

    def _until_registered(self, step: Step) -> None:
        """Checkpoints, one request at a time, until the harness's agent has received a REGISTER during
        the step (the SDK's watcher, SCB.md §6.1, decides when): only the outcome is judged, never how
        many checkpoints it took. Bounded by the cell's timeout."""
        mode = step.args.get("mode", self.variant)
        since = len(self.requests)
        deadline = time.monotonic() + self.timeout
        count = 0
        while True:
            reply = self.agent.request("checkpoint", {"mode": mode})
            count += 1
            if not reply.get("ok"):
                raise StepFailure(f"{step.describe()}: checkpoint {count} failed with {reply.get('error')} "
                                  f"({reply.get('message', '')}); a lost worker's checkpoint is never an error")
            with self.lock:
                done = any(r["op"] == int(m.RegOp.REGISTER) for r in self.requests[since:])
            if done:
                break
            if time.monotonic() > deadline:
                raise StepFailure(f"{step.describe()}: no REGISTER on the agent's socket after {count} checkpoints "
                                  f"in {self.timeout:.0f} s: the SDK did not register again")
            time.sleep(0.01)
        self._check_channel(step, since)
        self._check_bytes(step, self.expected, {})

    def _concurrent_step(self, step: Step) -> None:
        """The agent checkpoints in a loop while the harness bumps preempt_seq and samples the SCB."""
        args = dict(step.args)
        args.setdefault("mode", self.variant)
        slot = step.slot
        stop = threading.Event()
        problems: list[str] = []
        samples = [0]
        bumped = [0]

        spacing = step.count / 1000.0 * 0.8 / step.bumps  # bumps spread over 80% of the loop

        def bumper():
            rng = random.Random(0x5EED)
            last_ack = self.region.read_scb(slot, "last_ack_seq")
            while not stop.is_set() and bumped[0] < step.bumps:
                self._bump(slot, 1)
                bumped[0] += 1
                for _ in range(rng.randint(1, 8)):
                    # Read the ack first: ack(t1) <= preempt(t1) <= preempt(t2) must hold.
                    ack = self.region.read_scb(slot, "last_ack_seq")
                    seq = self.region.read_scb(slot, "preempt_seq")
                    samples[0] += 1
                    if ack > seq:
                        problems.append(f"last_ack_seq {ack} ran ahead of preempt_seq {seq}")
                    if ack < last_ack:
                        problems.append(f"last_ack_seq went backwards: {last_ack} -> {ack}")
                    last_ack = ack
                    if problems:
                        stop.set()
                        return
                time.sleep(spacing * rng.random() * 2)

        thread = threading.Thread(target=bumper, daemon=True)
        thread.start()
        try:
            reply = self.agent.request("checkpoint_loop", args, timeout=self.timeout + step.count / 1000.0)
        finally:
            stop.set()
            thread.join()
        if problems:
            raise StepFailure(f"{step.describe()}: after {samples[0]} samples: {problems[0]}")
        if bumped[0] == 0:
            raise StepFailure(f"{step.describe()}: the loop ended before the harness could bump once")
        self._check_reply(step, reply)
        # The harness's bumps are already in self.expected; judge the rest against it.
        self._check_bytes(step, self.expected, reply)

    def _lacking_ops(self) -> str | None:
        """Why this agent cannot run the scenario at all: a mapping kept from attach to register, or an
        optional op (for `tasks`, also the async checkpoint it is made of) or capability an argument asks
        for (OPTIONAL_ARGS), that its hello does not declare; None if it has them all."""
        if self.scenario.attach_maps and self.agent.hello.get("attach_maps", True) is False:
            return ("the SDK's attach only checks the region and its register maps it again (CONFORMANCE.md "
                    "§2.3), so a region changed between the two is judged at register by SCB.md §1.3")
        ops = self.agent.hello.get("ops", [])
        for step in self.scenario.steps:
            if step.kind != "agent" or step.op not in OPTIONAL_OPS:
                continue
            if step.op not in ops:
                return f"{step.describe()}: {OPTIONAL_OPS[step.op]}"
            for arg in step.args:
                capability, reason = OPTIONAL_ARGS.get((step.op, arg), (None, ""))
                if capability is not None and capability not in ops:
                    return f"{step.describe()}: {reason}"
            if step.op == "tasks" and "async" not in self.agent.hello["checkpoint_modes"]:
                return f"{step.describe()}: the SDK has no async checkpoint"
        return None

    def run(self) -> CellResult:
        start = time.monotonic()
        result = CellResult(self.scenario.name, self.variant, self.spec.name, "pass")
        with tempfile.TemporaryDirectory(prefix="morpheus-conf-") as tmp:
            path = os.path.join(tmp, "region")
            self.tmp = tmp
            self.socket_path = os.path.join(tmp, "agent.sock")
            current: Step | None = None
            try:
                self.region = Region(path, self.scenario.region)
                self.expected = self.region.snapshot()
                env = {k: v for k, v in os.environ.items() if k not in (m.ENV_REGION, m.ENV_SOCKET)}
                # Nobody listens there unless a `listen` step makes the harness play the agent.
                env[m.ENV_SOCKET] = self.socket_path
                if self.scenario.env_region is not None:
                    env[m.ENV_REGION] = path if self.scenario.env_region == "@region" else self.scenario.env_region
                env.update(self.spec.env)
                self.agent = Agent(self.spec.command, self.spec.cwd, env, self.timeout)
                if self.variant is not None and self.variant not in self.agent.hello["checkpoint_modes"]:
                    result.status = "n/a"
                    result.message = f"the SDK has no {self.variant} checkpoint"
                    return result
                lacking = self._lacking_ops()
                if lacking:
                    result.status, result.message = "n/a", lacking
                    return result
                for step in self.scenario.steps:
                    current = step
                    if step.kind == "agent":
                        self._agent_step(step)
                    elif step.kind == "write":
                        self._harness_write(step.writes, step.slot)
                    elif step.kind == "write_header":
                        self._harness_write(step.writes, None)
                    elif step.kind == "fill":
                        self._harness_fill(step)
                    elif step.kind == "bump":
                        self._bump(step.slot, step.by)
                    elif step.kind == "concurrent":
                        self._concurrent_step(step)
                    elif step.kind == "listen":
                        if self.socket_agent is not None:
                            self.socket_agent.close(unlink=False)
                        self.listen_slot, self.answers = step.slot, list(step.args["answers"])
                        self._listen()
                    elif step.kind == "agent_gone":
                        if self.socket_agent is not None:
                            self.socket_agent.close(unlink=False)
                            self.socket_agent = None
                    elif step.kind == "restart":
                        self._restart(step)
                    elif step.kind == "until_registered":
                        self._until_registered(step)
            except StepFailure as err:
                result.status, result.message, result.first_diff = "fail", str(err), err.first_diff
            except StepSkipped as err:
                result.status, result.message = "skip", str(err)
            except AgentFault as err:
                where = current.describe() if current else "start-up"
                result.status, result.message = "fail", f"{where}: {err}"
            except (ValueError, KeyError, TypeError) as err:
                where = current.describe() if current else "set-up"
                result.status, result.message = "fail", f"{where}: scenario error: {err}"
            finally:
                if result.status in ("fail", "skip") and current is not None:
                    result.step, result.step_label = current.index, current.label
                if self.agent is not None:
                    self.agent.close()
                if self.socket_agent is not None:
                    self.socket_agent.close(unlink=True)
                if self.region is not None:
                    self.region.close()
                for old, _ in self.retired:
                    old.close()
                result.seconds = time.monotonic() - start
        return result


class _Watcher:
    """Samples SCB fields as fast as it can while an agent request runs, so that the order of the
    values an SDK stores can be judged (lifecycle: INIT, REGISTERED, RUNNING, QUIESCING, DEAD, INIT).
    A sampler can miss short-lived values but never invents an order: every value seen must appear in
    the expected order, and no value may be seen after a later one."""

    def __init__(self, region: Region, slot: int, fields: dict):
        self.region, self.slot = region, slot
        self.orders = {name: [resolve_enum(name, v) for v in values] for name, values in fields.items()}
        self.seen: dict[str, list[int]] = {name: [] for name in fields}
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for name, seen in self.seen.items():
            value = self.region.read_scb(self.slot, name)
            if not seen or seen[-1] != value:
                seen.append(value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def judge(self, step: Step) -> None:
        for name, order in self.orders.items():
            seen, position = self.seen[name], 0
            for value in seen:
                # Consume the expected order; a value may repeat only as consecutive samples.
                while position < len(order) and order[position] != value:
                    position += 1
                if position == len(order):
                    raise StepFailure(f"{step.describe()}: {name} took the values {seen} in this order; "
                                      f"the spec's order is {order}")
                position += 1
            if seen[0] != order[0] or seen[-1] != order[-1]:
                raise StepFailure(f"{step.describe()}: {name} went {seen}; expected to start at "
                                  f"{order[0]} and end at {order[-1]}")
