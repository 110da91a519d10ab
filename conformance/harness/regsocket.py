# SPDX-License-Identifier: Apache-2.0 OR MIT
"""The harness playing the agent on the registration channel (spec/SCB.md §4.1, CONFORMANCE.md §3).

A Unix stream socket at the cell's MORPHEUS_SOCKET path, speaking the channel's wire format from the
generated ABI (reg_request, reg_reply): it reads a request's first 32 bytes, then `message_size - 32`
more (a size below 32 or above REG_MESSAGE_MAX is MALFORMED and closes the connection; bytes past the
fields this ABI knows must be zero), and answers each REGISTER with the scenario's next answer:

- "OK": the registrar's INIT -> CLAIMED -> REGISTERED (SCB.md §4) on the harness's region, through the
  `assign` callback of the runner (so the expected image follows), then the 128-byte reply with the
  region's descriptor as SCM_RIGHTS and an empty region_path (a 1.3 sim agent's reply);
- a reg_status name: that refusal, with no effect;
- "close": the connection closed unanswered.

UNREGISTER of a slot the caller's process holds is answered OK after DEAD -> CLAIMED, the reclaim clear
and INIT (the `release` callback); any other slot is NOT_OWNER. Every request received is recorded, in
order, with its fields, for `expect.requests`.
"""

from __future__ import annotations

import os
import socket
import struct
import threading

from abi import m

_REQ = {f.name: f for f in m.RegRequest.FIELDS}
_REP = {f.name: f for f in m.RegReply.FIELDS}
LEGACY_REQUEST = 32  # the 1.0-1.2 request: the bytes every request starts with (SCB.md §4.1)
ANSWERS = ("OK", "close") + tuple(m.RegStatus.__members__)


def _peer(conn: socket.socket) -> tuple[int, int, int]:
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid, gid


class AgentSocket:
    """One instance of the agent the harness plays: a listening socket and its connections."""

    def __init__(self, path: str, answers: list[str], assign, release, region_path: str, generation: int,
                 lock: threading.RLock, requests: list):
        self.path, self.answers = path, list(answers)
        self.assign, self.release = assign, release
        self.region_path, self.generation = region_path, generation
        self.lock, self.requests = lock, requests
        self.held: dict[int, int] = {}  # slot -> pid of the process that holds it
        self._conns: list[socket.socket] = []
        self._closed = False
        # Bound and listening under another name, then renamed over the path in one step: a socket
        # found at the path accepts, and it is a new inode (an old socket file still exists while the new
        # one is made, so its inode number cannot be reused: clients tell instances by st_dev/st_ino).
        staging = path + ".new"
        if os.path.lexists(staging):
            os.unlink(staging)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(staging)
        self.sock.listen(16)
        os.rename(staging, path)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _next_answer(self) -> str:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read(conn: socket.socket, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            try:
                chunk = conn.recv(n - len(data))
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def _reply(self, conn, status: str, request_size: int, slot: int = 0, slot_generation: int = 0, fd=None):
        buf = bytearray(m.RegReply.SIZE)
        values = {"magic": m.REG_MAGIC, "status": int(m.RegStatus[status]), "slot": slot, "abi_major": m.ABI_MAJOR,
                  "abi_minor": m.ABI_MINOR, "generation": self.generation if status == "OK" else 0,
                  "slot_generation": slot_generation,
                  # A 1.0-1.2 client gets exactly the 128-byte 1.2 reply; a sized one the size of ours.
                  "message_size": 0 if request_size == 0 else m.RegReply.SIZE}
        for name, value in values.items():
            struct.pack_into(_REP[name].struct_format, buf, _REP[name].offset, value)
        if fd is None:
            conn.sendall(bytes(buf))
        else:
            socket.send_fds(conn, [bytes(buf)], [fd])

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                head = self._read(conn, LEGACY_REQUEST)
                if head is None:
                    return
                size = struct.unpack_from(_REQ["message_size"].struct_format, head, _REQ["message_size"].offset)[0]
                record = {"bytes": LEGACY_REQUEST}
                if size and not LEGACY_REQUEST <= size <= m.REG_MESSAGE_MAX:
                    record.update(self._fields(head), malformed=f"message_size {size}")
                    with self.lock:
                        self.requests.append(record)
                    self._reply(conn, "MALFORMED", size)
                    return  # the stream cannot be resynchronised
                rest = self._read(conn, size - LEGACY_REQUEST) if size > LEGACY_REQUEST else b""
                if rest is None:
                    return
                data = head + rest
                record["bytes"] = len(data)
                record.update(self._fields(data))
                status = self._check(data, record)
                peer_pid = _peer(conn)[0]
                with self.lock:
                    self.requests.append(record)
                    if status is None:
                        status = self._handle(conn, record, peer_pid, size)
                if status == "close":
                    return
                if status is not None:
                    self._reply(conn, status, size)
        finally:
            conn.close()

    @staticmethod
    def _fields(data: bytes) -> dict:
        full = data[: m.RegRequest.SIZE].ljust(m.RegRequest.SIZE, b"\0")
        return {f.name: struct.unpack_from(f.struct_format, full, f.offset)[0] for f in m.RegRequest.FIELDS
                if f.struct_format}

    @staticmethod
    def _check(data: bytes, record: dict) -> str | None:
        """MALFORMED for what no agent accepts (SCB.md §4.1); None if the request is well formed."""
        reserved = _REQ["_reserved0"]
        if record["magic"] != m.REG_MAGIC:
            record["malformed"] = "magic"
        elif any(data[reserved.offset:reserved.offset + reserved.size]) or any(data[m.RegRequest.SIZE:]):
            record["malformed"] = "nonzero reserved bytes"
        elif record["op"] not in (int(m.RegOp.REGISTER), int(m.RegOp.UNREGISTER)):
            record["malformed"] = f"op {record['op']}"
        else:
            return None
        return "MALFORMED"

    def _handle(self, conn, record: dict, peer_pid: int, size: int) -> str | None:
        """Under the lock. Returns the status to reply with, or None when a reply was sent here."""
        if record["op"] == int(m.RegOp.UNREGISTER):
            slot = record["slot"]
            if self.held.get(slot) != peer_pid:
                return "NOT_OWNER"
            del self.held[slot]
            self.release(slot)
            return "OK"
        answer = self._next_answer()
        if answer != "OK":
            return answer  # a refusal (no effect) or "close"
        if record["abi_major"] != m.ABI_MAJOR:
            return "ABI_MAJOR_MISMATCH"
        if not os.path.exists(f"/proc/{peer_pid}/task/{record['tid']}"):
            return "NOT_CALLER_TID"
        if not m.PRIORITY_MIN <= record["priority"] <= m.PRIORITY_MAX or record["escapable"] not in {
                int(e) for e in m.RegEscapable}:
            return "INVALID_ARGUMENT"
        assigned = self.assign(record, peer_pid)
        if assigned is None:
            return "NO_FREE_SLOT"
        slot, slot_generation = assigned
        self.held[slot] = peer_pid
        fd = os.open(self.region_path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._reply(conn, "OK", size, slot, slot_generation, fd)
        finally:
            os.close(fd)
        return None

    def close(self, unlink: bool) -> None:
        """Stop accepting and close every connection. unlink=False leaves the socket file: a killed
        agent's leftover, on which connecting is refused (ECONNREFUSED)."""
        with self.lock:
            self._closed = True
            conns, self._conns = self._conns, []
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if unlink and os.path.lexists(self.path):
            os.unlink(self.path)
