# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Starting an agent and talking to it (spec/CONFORMANCE.md, "Agent protocol").

Every failure of the agent itself (crash, hang, garbage on stdout, a reply that breaks the protocol)
becomes an AgentFault naming what went wrong; the runner turns it into a failed cell and moves on.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time

PROTOCOL = "morpheus-conformance"
PROTOCOL_VERSION = 1


class AgentFault(Exception):
    """The agent broke the protocol, crashed or hung."""


class Agent:
    def __init__(self, command: list[str], cwd: str, env: dict[str, str], timeout: float):
        self.timeout = timeout
        self._stderr = tempfile.TemporaryFile()
        self._lines: queue.Queue = queue.Queue()
        self._next_id = 1
        try:
            self.proc = subprocess.Popen(
                command, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, start_new_session=True,
            )
        except OSError as err:
            raise AgentFault(f"cannot start agent {command}: {err}") from err
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.hello = self._expect_hello()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            self._lines.put(raw)
        self._lines.put(None)

    def stderr_tail(self, limit: int = 400) -> str:
        self._stderr.seek(0)
        data = self._stderr.read().decode("utf-8", "replace").strip()
        return data[-limit:]

    def _died(self, what: str) -> AgentFault:
        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        detail = f"exit status {code}" if code is not None and code >= 0 else (
            f"killed by signal {-code}" if code is not None else "stdout closed")
        tail = self.stderr_tail()
        return AgentFault(f"agent died {what} ({detail})" + (f"; stderr: {tail}" if tail else ""))

    def _next_line(self, what: str, deadline: float) -> dict:
        remaining = deadline - time.monotonic()
        try:
            raw = self._lines.get(timeout=max(remaining, 0))
        except queue.Empty:
            self.kill()
            raise AgentFault(f"agent did not answer {what} within {self.timeout:g}s; killed") from None
        if raw is None:
            raise self._died(what)
        text = raw.decode("utf-8", "replace").rstrip("\n")
        try:
            msg = json.loads(text)
        except json.JSONDecodeError:
            self.kill()
            raise AgentFault(f"agent printed a line that is not JSON {what}: {text[:200]!r}") from None
        if not isinstance(msg, dict):
            self.kill()
            raise AgentFault(f"agent printed JSON that is not an object {what}: {text[:200]!r}")
        return msg

    def _expect_hello(self) -> dict:
        msg = self._next_line("at start-up (hello)", time.monotonic() + self.timeout)
        if msg.get("protocol") != PROTOCOL or msg.get("version") != PROTOCOL_VERSION:
            self.kill()
            raise AgentFault(
                f"agent's first line is not a hello for {PROTOCOL} v{PROTOCOL_VERSION}: {msg}")
        for key in ("sdk", "runtime_kind", "abi_major", "abi_minor", "checkpoint_modes"):
            if key not in msg:
                self.kill()
                raise AgentFault(f"agent's hello lacks {key!r}: {msg}")
        ops = msg.get("ops", [])
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            self.kill()
            raise AgentFault(f"agent's hello 'ops' is not a list of op names: {msg}")
        return msg

    def _send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(f"before request {msg.get('op')!r}") from None

    def request(self, op: str, args: dict, on_suspended=None, timeout: float | None = None) -> dict:
        """Send one request and return its final reply.

        on_suspended: called (with the suspended event) when an async checkpoint reports that its task
        is suspended; the agent waits for our "resume" before it polls the task again.
        """
        req_id = self._next_id
        self._next_id += 1
        self._send({"id": req_id, "op": op, **args})
        deadline = time.monotonic() + (timeout or self.timeout)
        suspensions = 0
        while True:
            msg = self._next_line(f"request {req_id} ({op})", deadline)
            if msg.get("id") != req_id:
                self.kill()
                raise AgentFault(f"reply to request {req_id} ({op}) carries id {msg.get('id')!r}: {msg}")
            if msg.get("event") == "suspended":
                suspensions += 1
                if suspensions > 1:
                    self.kill()
                    raise AgentFault(f"{op}: the task was suspended more than once in one checkpoint")
                if on_suspended is not None:
                    on_suspended(msg)
                self._send({"id": req_id, "op": "resume"})
                deadline = time.monotonic() + (timeout or self.timeout)
                continue
            if "ok" not in msg or not isinstance(msg["ok"], bool):
                self.kill()
                raise AgentFault(f"reply to {op} has no boolean 'ok': {msg}")
            if not msg["ok"] and not isinstance(msg.get("error"), str):
                self.kill()
                raise AgentFault(f"error reply to {op} has no 'error' name: {msg}")
            msg["_suspensions"] = suspensions
            return msg

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send({"id": self._next_id, "op": "exit"})
                self.proc.stdin.close()
                self.proc.wait(timeout=min(self.timeout, 5))
            except (AgentFault, subprocess.TimeoutExpired, OSError):
                self.kill()
        self._reader.join(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
