#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Conformance agent for sdk-python: the agent protocol of the conformance harness on stdin/stdout,
every operation done through the public `morpheus` package (nothing of the protocol is written here).

Async checkpoints run in a real asyncio event loop: the harness's "suspended" event is sent by a
loop callback that runs while the checkpointing task is parked in the loop (it yielded), and the
task resumes after the harness's "resume".
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time

import morpheus

BREAK = os.environ.get("MORPHEUS_CONFORMANCE_BREAK", "")


class ProtocolError(Exception):
    pass


class Agent:
    def __init__(self) -> None:
        self.region = None
        self.attached_flag = False
        self.worker = None
        self.lines = iter(sys.stdin.readline, "")
        self.loop = asyncio.new_event_loop()

    def send(self, msg: dict) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    def status(self) -> dict:
        """The SDK's status call (SCB.md §6): attached, detached, or GENERATION_CHANGED for a lost worker."""
        worker = self.need_worker("status")
        try:
            worker.status()
        except morpheus.DetachedError:
            return {"attached": False}
        return {"attached": True}

    # -- operations -------------------------------------------------------------------------------

    def attach(self, req: dict) -> dict:
        path = req.get("path")
        if path == "":
            self.region = None
        else:
            self.region = morpheus.attach(path)  # None: discovery found no scheduler
        return {"attached": self.region is not None}

    def register(self, req: dict) -> dict:
        slot = req.get("slot")
        # Optional: what the registration request asks for (SCB.md §4: written before REGISTERED).
        options = {}
        if req.get("escapable") is not None:
            options["escapable"] = bool(req["escapable"])
        if req.get("priority") is not None:
            options["priority"] = int(req["priority"])
        if self.region is not None:
            if not isinstance(slot, int):
                raise ProtocolError("register needs an integer slot")
            worker = morpheus.Worker(region=self.region, slot=slot, **options)
        else:
            worker = morpheus.Worker(detached=True, **options)
        self.worker = worker
        return {"slot": worker.slot, "tid": threading.get_native_id(), "attached": worker.attached}

    def register_agent(self, req: dict) -> dict:
        """Registration through the agent (SCB.md §4.1) by discovery (§1.2): no region, no slot."""
        options = {}
        if req.get("escapable") is not None:
            options["escapable"] = bool(req["escapable"])
        if req.get("priority") is not None:
            options["priority"] = int(req["priority"])
        worker = morpheus.Worker(**options)
        self.worker = worker
        return {"slot": worker.slot, "tid": threading.get_native_id(), "attached": worker.attached}

    def checkpoint_sync(self) -> bool:
        # A lost worker's checkpoint is a plain no-yield, never an error (SCB.md §6): reported as is.
        return morpheus.checkpoint()

    def checkpoint_async(self, rid) -> bool:
        if BREAK == "ack_before_yield":
            yielded = morpheus.checkpoint()  # the broken order on purpose: acknowledge, then yield
            if yielded:
                self.suspend(rid)
            return yielded
        state = {"done": False}

        def on_suspended() -> None:
            # Runs while the checkpointing task is parked in the loop, if it yielded at all.
            if not state["done"]:
                self.suspend(rid)

        async def task() -> bool:
            asyncio.get_running_loop().call_soon(on_suspended)
            result = await morpheus.checkpoint_async()
            state["done"] = True
            return bool(result)

        return self.loop.run_until_complete(task())

    def suspend(self, rid) -> None:
        self.send({"id": rid, "event": "suspended"})
        resume = json.loads(next(self.lines))
        if resume.get("op") != "resume" or resume.get("id") != rid:
            raise SystemExit(f"python agent: expected resume for {rid}, got {resume}")

    def checkpoint_loop(self, req: dict) -> dict:
        end = time.monotonic() + req["duration_ms"] / 1000.0
        iterations = yields = 0
        if req.get("mode") == "async":
            async def run() -> tuple:
                n = y = 0
                while time.monotonic() < end:
                    for _ in range(64):
                        n += 1
                        y += bool(await morpheus.checkpoint_async())
                return n, y

            iterations, yields = self.loop.run_until_complete(run())
        else:
            while time.monotonic() < end:
                for _ in range(64):
                    iterations += 1
                    yields += morpheus.checkpoint()
        return {"iterations": iterations, "yields": yields}

    def tasks(self, req: dict) -> dict:
        """`count` CPU-bound tasks started together on the agent's one asyncio loop, each making
        `checkpoints` async checkpoints back to back with nothing else to await (SCB.md §5.7: the SDK's
        rotation serves them); returns when every task has ended. `tick_ns`: the rotation times turns by
        the SDK's test clock (`_set_turn_clock`), advanced by it just before each checkpoint; `turns`
        counts the runs of checkpoints one task made back to back. `callbacks`: also the loop's own work,
        a task that awaits the loop's next turn (`asyncio.sleep(0)`) that many times; `longest_run`: the
        most checkpoints made between two of its steps."""
        count, checkpoints, tick = req.get("count"), req.get("checkpoints"), req.get("tick_ns")
        callbacks = req.get("callbacks") or 0
        if not isinstance(count, int) or not isinstance(checkpoints, int):
            raise ProtocolError("tasks needs integers count and checkpoints")
        if tick is not None and (not isinstance(tick, int) or isinstance(tick, bool) or tick < 1):
            raise ProtocolError("tasks needs a positive integer tick_ns")
        if not isinstance(callbacks, int) or isinstance(callbacks, bool) or callbacks < 0:
            raise ProtocolError("tasks needs a positive integer callbacks")
        totals = {"steps": 0, "yields": 0, "turns": 0}
        last, clock = [None], [0]
        light, run = [callbacks], [0]  # the loop's own work: steps left; checkpoints since its last step
        if callbacks:
            totals["longest_run"] = 0

        async def one(me: int) -> None:
            for _ in range(checkpoints):
                totals["steps"] += 1
                if me != last[0]:
                    totals["turns"] += 1
                    last[0] = me
                if light[0] > 0:
                    run[0] += 1
                    totals["longest_run"] = max(totals["longest_run"], run[0])
                if tick is not None:
                    clock[0] += tick
                    morpheus._morpheus._set_turn_clock(clock[0])
                totals["yields"] += bool(await morpheus.checkpoint_async())

        async def work() -> None:
            while light[0] > 0:
                await asyncio.sleep(0)
                light[0] -= 1
                run[0] = 0

        async def run_all() -> None:
            await asyncio.gather(*(one(me) for me in range(count)), *([work()] if callbacks else []))

        if tick is not None:
            morpheus._morpheus._set_turn_clock(0)
        try:
            self.loop.run_until_complete(run_all())
        finally:
            if tick is not None:
                morpheus._morpheus._set_turn_clock(None)
        return totals

    def state(self) -> dict:
        out = {"attached": self.region is not None, "registered": self.worker is not None,
               "depth": morpheus.critical_depth()}
        if self.worker is not None:
            w = self.worker
            out.update(slot=w.slot, cached_ack=w.acknowledged_seq, escapable=w.escapable, priority=w.priority,
                       mode=w.runtime_mode, yields=sum(w.yield_counts().values()))
        return out

    def need_worker(self, op: str):
        if self.worker is None:
            # Ask the SDK: a handle-less thread holds no worker, so any worker method reports it.
            raise morpheus.NotRegisteredError(f"NOT_REGISTERED: {op} needs a worker, and this thread holds none")
        return self.worker

    def handle(self, rid, req: dict) -> dict:
        op = req.get("op")
        if op == "attach":
            return self.attach(req)
        if op == "register":
            return self.register(req)
        if op == "register_agent":
            return self.register_agent(req)
        if op == "checkpoint":
            mode = req.get("mode")
            if mode == "sync":
                return {"yielded": self.checkpoint_sync()}
            if mode == "async":
                return {"yielded": self.checkpoint_async(rid)}
            raise ProtocolError(f"mode must be sync or async, got {mode!r}")
        if op == "checkpoint_loop":
            return self.checkpoint_loop(req)
        if op == "critical_enter":
            morpheus._morpheus.critical_enter()
            return {"depth": morpheus.critical_depth()}
        if op == "critical_exit":
            morpheus._morpheus.critical_exit()
            return {"depth": morpheus.critical_depth()}
        if op == "set_escapable":
            if not isinstance(req.get("value"), bool):
                raise ProtocolError("value must be a boolean")
            self.need_worker("set_escapable").escapable = req["value"]
            return {}
        if op == "set_priority":
            self.need_worker("set_priority").priority = int(req["value"])
            return {}
        if op == "state":
            return self.state()
        if op == "status":
            return self.status()
        if op == "explicit_yield":
            self.need_worker("explicit_yield").record_explicit_yield()
            return {}
        if op == "mode_clock":
            ns = req.get("ns")
            if not isinstance(ns, int) or isinstance(ns, bool) or ns < 0:
                raise ProtocolError("mode_clock needs an integer ns >= 0")
            morpheus._morpheus._set_mode_clock(ns)  # this thread's: every op runs on it
            return {}
        if op == "tasks":
            return self.tasks(req)
        if op == "shutdown":
            worker = self.need_worker("shutdown")
            self.worker = None
            worker.close()
            return {}
        raise KeyError(op)


def main() -> int:
    agent = Agent()
    agent.send({"protocol": "morpheus-conformance", "version": 1, "sdk": "python",
                "runtime_kind": "PYTHON", "abi_major": morpheus.ABI_MAJOR, "abi_minor": morpheus.ABI_MINOR,
                "checkpoint_modes": ["sync", "async"], "state_fields": ["escapable", "priority"],
                "ops": ["explicit_yield", "tasks", "turn_clock", "mode_clock"], "pid": os.getpid()})
    for line in agent.lines:
        try:
            req = json.loads(line)
        except json.JSONDecodeError as err:
            agent.send({"id": None, "ok": False, "error": "BAD_REQUEST", "message": str(err)})
            continue
        rid = req.get("id")
        if req.get("op") == "exit":
            break
        try:
            agent.send({"id": rid, "ok": True, **agent.handle(rid, req)})
        except morpheus.MorpheusError as err:
            agent.send({"id": rid, "ok": False, "error": err.code.name, "message": str(err)})
        except KeyError as err:
            agent.send({"id": rid, "ok": False, "error": "UNSUPPORTED", "message": f"unknown op or argument {err}"})
        except (ProtocolError, ValueError, TypeError) as err:
            agent.send({"id": rid, "ok": False, "error": "BAD_REQUEST", "message": str(err)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
