#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Reference conformance agent: the SDK rules of spec/SCB.md (ABI 1.4), written directly on the region
bytes.

It is the executable form of the spec that the harness was built against; the release gates are the
real SDK agents. It speaks the agent protocol of spec/CONFORMANCE.md on stdin/stdout and plays the
runtime_kind given by --kind (default PYTHON, so that the escapable = false default is exercised too).

Every store is one aligned ctypes store. Where SCB.md asks for a compare-and-swap (the INIT -> CLAIMED
and DEAD -> CLAIMED hand-offs, the acknowledgement) this agent loads and then stores: in a conformance
cell it is the only writer of those fields (the harness plays the scheduler and writes only between
requests), so the load-store pair has the CAS's outcome. A real SDK shares the region with other
registrars and MUST use the atomic CAS. Python's ctypes stores are not ordered by the C11 model either;
the memory orders of SCB.md §3.1 are the real SDKs' business (and loom's), not what this agent shows.

MORPHEUS_CONFORMANCE_BREAK breaks one rule on purpose, for the harness's own tests (never set otherwise):
  ack_before_yield      acknowledge before yielding (async);
  skip_registered       registration stores RUNNING straight after CLAIMED, never REGISTERED;
  restore_on_fast_path  the fast path re-stores last_ack_seq with the value it already holds;
  late_escapable        escapable and priority are stored after REGISTERED, not while CLAIMED;
  reclaim_128           the reclaim clear covers only the 128 bytes of the 1.0 SCB, not the stride;
  no_modes              the runtime mode never leaves DETERMINISTIC;
  refusal_order         registration refusals in the wrong order: a slot past scb_count, then a held
                        worker, before an out-of-range priority (SCB.md §4 gives the reverse);
  status_unlatched      status reports a changed generation without losing the worker, so the worker
                        writes again once the generation changes back (SCB.md §6: losing is a latch);
  modes_in_critical     a checkpoint inside a critical section evaluates the mode (SCB.md §5.4: none);
  unknown_level_keeps   a pressure level the reader does not know keeps the previous pressure state
                        (SCB.md §2.1: it is a good snapshot, not HIGH);
  no_snapshot_keeps_mode  with no pressure snapshot ever read, leaving DEFENSIVE keeps the current mode
                        (SCB.md §5.4: with none the level is not HIGH);
  env_retired_detaches  a retired region named by MORPHEUS_REGION is detached mode, as a retired default
                        region would be (SCB.md §1.2: the environment's region is explicit, NOT_READY);
  mode_yield_acks_late  an async mode yield (BUDGET, DEFENSIVE) acknowledges the preempt_seq it reads
                        after its suspension (SCB.md §5.4: it acknowledges nothing; a request that
                        arrived meanwhile stays pending);
  explicit_no_ack       the explicit yield records its reason and count but acknowledges nothing
                        (SCB.md §5.8: it acknowledges the preempt_seq it loads);
  explicit_no_reason    the explicit yield acknowledges but stores no reason and counts no yield
                        (SCB.md §5.8: EXPLICIT and yield_count, like every yield);
  explicit_refused_in_critical  inside a critical section the explicit yield does nothing
                        (SCB.md §5.8: it is allowed there and behaves the same);
  explicit_lost_errors  the explicit yield of a lost worker fails with GENERATION_CHANGED (SCB.md §6:
                        it writes nothing and is never an error);
  every_task_yields     on the event loop (`tasks`), the request is acknowledged only when its yielder
                        resumes, so every task that runs meanwhile sees it pending and yields for it too
                        (SCB.md §5.7: one yielder per request, acknowledged when the loop has control);
  register_retired_detaches  direct registration on a region retired since the attach returns a detached
                        worker (SCB.md §4: the error GENERATION_CHANGED);
  register_busy_first   direct registration looks at the slot before the generation: a busy slot of a
                        retired region is SLOT_BUSY (SCB.md §4: GENERATION_CHANGED comes first);
  refused_attach_drops  an attach refused with IO drops the region attached earlier (CONFORMANCE.md §2.3:
                        a refused attach changes nothing);
  state_placeholder     the state op reports the fast path's comparand as cached_ack, the unreachable value
                        in PRESSURED and DEFENSIVE (CONFORMANCE.md §2.3: the last acknowledged sequence);
  rotation_ignores_critical  on the event loop (`tasks`), a task yields for a request inside the loop
                        thread's critical section (SCB.md §5.7: a section holds any step aside);
  turn_end_counted      a turn that ends on the wall clock (SCB.md §5.7) is counted as a yield in the SCB
                        (it is a step aside that writes nothing);
  waiter_at_look        on the event loop (`tasks`), a task waiting in the FIFO ends a timed turn at any
                        look within the slice (SCB.md §5.7, 1.5: only once the slice is over; a look
                        within it ends the turn only for the loop's own work);
  waiter_never          on the event loop (`tasks`), a task waiting in the FIFO never ends a timed turn,
                        so on a loop with no work of its own one task holds it to its end (SCB.md §5.7:
                        a turn lasts one slice at most, and a waiter ends it once the slice is over);
  loop_work_ignored     on the event loop (`tasks`), the loop's own work never ends a timed turn, so with
                        no task waiting a CPU-bound task holds the loop while a callback waits (SCB.md
                        §5.7: a turn lasts one slice at most; a look ends it for the loop's own work);
  channel_legacy_request  registration through the agent sends the 32-byte 1.2 request (message_size 0),
                        so the escapable and priority asked for never reach the registrar (SCB.md §4.1:
                        a 1.3 client sends its size and the options);
  channel_refusal_detaches  a REGISTER the agent refuses returns a detached worker (SCB.md §4.1, §6.1: a
                        refusal is the error REGISTRATION_REFUSED; only an absent scheduler detaches);
  leftover_socket_errors  a socket nobody accepts on (ECONNREFUSED) is the error IO (SCB.md §6.1: a killed
                        agent's leftover is the scheduler's absence, detached mode);
  absent_socket_errors  a MORPHEUS_SOCKET that names no socket is the error IO (SCB.md §1.2, §6.1: the
                        environment's socket only moves the default; none there is the scheduler's
                        absence, detached mode; Appendix A 15b);
  reregister_defaults   after a restart the worker registers again with the defaults, not the options it
                        registered with (SCB.md §6.1: its original options);
  reregister_in_critical  after a restart the worker registers again inside a critical section (SCB.md
                        §6.1: outside one only);
  status_no_reread      the status call reports what the worker's last write check saw, without loading
                        `generation` again (SCB.md §6: it re-reads it, Appendix A 8b);
  pending_by_comparand  the checkpoint's pending test compares preempt_seq with the fast path's comparand,
                        which outside DETERMINISTIC is the unreachable placeholder, not with the last
                        acknowledged sequence (SCB.md §5.1, Appendix A 7a: two values);
  evaluate_before_deciding  a checkpoint with nothing pending evaluates the mode (when a slice has passed
                        since the last evaluation) before it decides a mode yield, so it decides from the
                        new mode (SCB.md §5.4, Appendix A 21a: decide from the current mode, evaluate when
                        not yielding or after the yield);
  slice_cached          the mode rules use the slice_ns the worker first read, not the header's at each
                        checkpoint (SCB.md §5.4, Appendix A 21b: loaded at that checkpoint);
  explicit_keeps_mode_clocks  the explicit yield leaves the mode clocks where they were, so a DEFENSIVE or
                        PRESSURED yield comes a slice after the yield before it (SCB.md §5.8: a yield of
                        any reason restarts them, §5.4);
  request_reserved_set  the registration request carries a nonzero reserved byte (SCB.md §4.1: bytes past
                        the fields the agent knows are zero; the agent answers MALFORMED);
  lost_writes_retired   a worker registered through the agent stores DEAD into its slot of the lost region
                        when it notices the restart (SCB.md §6: a lost worker writes nothing to it);
  status_reregisters    the status call of a worker lost to a restart registers again when a new instance
                        accepts and reports it attached (SCB.md §6: status reports GENERATION_CHANGED;
                        §6.1: the next checkpoint registers again).

Registration through the agent (`register_agent`): this agent has no watcher thread; it looks at the
socket path at each checkpoint instead (SCB.md §6.1 allows looking at the path at an interval where no
directory watch can be had), so a replaced socket loses the worker at its next checkpoint, and the
checkpoint after a loss registers again if a new socket accepts.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import socket
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))
from abi import m, scb_clear_for_reuse  # noqa: E402  (the generated ABI, imported by path)

_CTYPE = {"u16": ctypes.c_uint16, "u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "i32": ctypes.c_int32}
BREAK = os.environ.get("MORPHEUS_CONFORMANCE_BREAK", "")
# A cached_ack that preempt_seq never reaches: PRESSURED and DEFENSIVE leave the fast path (SCB.md §5.4).
FORCE_SLOW_PATH = (1 << 64) - 1
# Looks per slice of a timed turn on the event loop (`tasks`): this loop can see it has no work of its
# own, so it looks within the slice (SCB.md §5.7 lets it; how often is the SDK's choice).
LOOKS_PER_SLICE = 4
S = m.Scb
W = m.WorkerState
Mode = m.RuntimeMode


class SdkError(Exception):
    def __init__(self, code: "m.ErrorCode", message: str):
        super().__init__(message)
        self.code = code


class Worker:
    """What one SDK thread knows: its region, slot, cached ack, critical depth and runtime mode."""

    def __init__(self, kind: "m.RuntimeKind"):
        self.kind = kind
        self.mm = None
        self.attached = False
        self.attach_generation = 0
        self.slot = None  # SCB index while the worker writes to a region; None when detached or lost
        self.registered = False
        self.lost = False  # the scheduler restarted under the worker (SCB.md §6)
        self.cached_ack = 0
        self.acked = 0
        self.depth = 0  # per thread (SCB.md §5.3): survives registration and shutdown
        self.scb_base = 0
        self.yields = 0
        self.escapable = False
        self.priority = 0
        self.mode = Mode.DETERMINISTIC
        self.pressured = False  # the last pressure level read was HIGH
        self.pressure_snapshot = None  # last good seqlock snapshot of `level` (SCB.md §2.1)
        self.last_dropped = 0
        self.last_yield_ns = 0
        self.last_eval_ns = 0
        self.mode_clock = None  # the `mode_clock` op's time, read instead of CLOCK_MONOTONIC (None: not set)
        # Registration through the agent (SCB.md §4.1, §6.1).
        self.conn = None  # the connection kept for UNREGISTER
        self.socket_id = None  # (st_dev, st_ino) of the socket of the instance the worker registered with
        self.awaiting = False  # lost or detached by an absent agent: registers again on a new instance
        self.options = (None, None)  # escapable and priority as the application asked (None: absent)

    # -- raw access -------------------------------------------------------------------------------

    def _hdr(self, f):
        return _CTYPE[f.type].from_buffer(self.mm, f.offset)

    def _scb(self, f):
        return _CTYPE[f.type].from_buffer(self.mm, self.scb_base + f.offset)

    def load(self, f):
        return self._scb(f).value

    def store(self, f, value):
        self._scb(f).value = int(value)

    # -- attach -----------------------------------------------------------------------------------

    def attach(self, path: str | None):
        from_env = False
        if path is None:
            env = os.environ.get(m.ENV_REGION)
            if env is not None:
                path, from_env = env, True
            elif os.path.exists(m.PINNED_REGION_PATH):
                raise SdkError(m.ErrorCode.IO, "the reference agent cannot open pinned BPF maps")
            elif os.path.exists(m.SIM_REGION_PATH):
                path = m.SIM_REGION_PATH
            else:
                path = ""
        if path == "":
            self.attached = False
            return {"attached": False}
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as err:
            if BREAK == "refused_attach_drops":
                self.attached, self.mm = False, None
            raise SdkError(m.ErrorCode.IO, f"open {path}: {err.strerror}") from None
        return self._map(fd, path, from_env)

    def _map(self, fd: int, path: str, from_env: bool):
        """Map the region behind `fd` (closed here) and validate its header (SCB.md §1.3)."""
        try:
            size = os.fstat(fd).st_size
            if size < m.RegionHeader.SIZE:
                raise SdkError(m.ErrorCode.REGION_TRUNCATED,
                               f"{path} has {size} bytes, less than a region header ({m.RegionHeader.SIZE})")
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        H = m.RegionHeader

        def h(f):
            return _CTYPE[f.type].from_buffer(mm, f.offset).value

        # SCB.md §1.3: generation is loaded first (its acquire orders the layout loads) and checked last.
        generation = h(H.GENERATION)
        if h(H.MAGIC) != m.REGION_MAGIC:
            raise SdkError(m.ErrorCode.BAD_MAGIC,
                           f"{path}: magic {h(H.MAGIC):#x}, expected the region magic {m.REGION_MAGIC:#x}")
        if h(H.ABI_MAJOR) != m.ABI_MAJOR:
            raise SdkError(m.ErrorCode.ABI_MAJOR_MISMATCH,
                           f"region ABI major {h(H.ABI_MAJOR)}, SDK ABI major {m.ABI_MAJOR}")
        hs, stride, count = h(H.HEADER_SIZE), h(H.SCB_STRIDE), h(H.SCB_COUNT)
        line = m.CACHE_LINE_SIZE
        if hs < H.SIZE or stride < m.Scb.SIZE or hs % line or stride % line:
            raise SdkError(m.ErrorCode.BAD_LAYOUT,
                           f"header_size {hs}, scb_stride {stride}: each must be >= {H.SIZE} / {m.Scb.SIZE} "
                           f"and a multiple of {line}")
        if size < hs + count * stride:  # Python integers: the 64-bit overflow cannot hide a short file
            raise SdkError(m.ErrorCode.REGION_TRUNCATED,
                           f"{path} has {size} bytes, the header describes {hs + count * stride}")
        known = 0
        for feat in m.Feature:
            known |= int(feat)
        unknown = h(H.REQUIRED_FEATURES) & ~known
        if unknown:  # optional_features are never looked at: unknown optional bits are ignored
            raise SdkError(m.ErrorCode.UNKNOWN_REQUIRED_FEATURE,
                           f"required feature bits {unknown:#x} are unknown to ABI {m.ABI_MAJOR}.{m.ABI_MINOR}")
        if generation == 0:
            if BREAK == "env_retired_detaches" and from_env:
                self.attached = False
                return {"attached": False}
            raise SdkError(m.ErrorCode.NOT_READY, "region generation is 0 (not ready or retired)")
        self.mm, self.attached, self.attach_generation = mm, True, generation
        self.header_size, self.stride, self.count = hs, stride, count  # cached: never re-read
        return {"attached": True}

    def generation_ok(self) -> bool:
        """SCB.md §6: before any write. A change (even back to the old value later) loses the worker."""
        if self._hdr(m.RegionHeader.GENERATION).value == self.attach_generation:
            return True
        self._lose()
        return False

    def _lose(self):
        if BREAK == "lost_writes_retired" and self.slot is not None and self.conn is not None and not self.lost:
            self.store(S.WORKER_STATE, W.DEAD)  # the broken goodbye, into the lost region's slot
        if self.slot is not None:
            self.lost = True
            self.awaiting = self.conn is not None
        self.slot = None  # write nothing more to this region, ever
        self.cached_ack = 0

    # -- registration -----------------------------------------------------------------------------

    def register(self, slot: int, escapable=None, priority=None):
        if BREAK == "refusal_order":
            if self.attached and not 0 <= slot < self.count:
                raise SdkError(m.ErrorCode.SLOT_OUT_OF_RANGE, f"slot {slot} >= scb_count {self.count}")
            if self.registered:
                raise SdkError(m.ErrorCode.ALREADY_REGISTERED, "this thread already holds a worker")
        # SCB.md §4's order: own arguments, then a held worker, then the slot.
        if priority is None:
            priority = 0
        if not m.PRIORITY_MIN <= priority <= m.PRIORITY_MAX:
            raise SdkError(m.ErrorCode.INVALID_ARGUMENT,
                           f"priority {priority} is outside {m.PRIORITY_MIN}..{m.PRIORITY_MAX}")
        if self.registered:
            raise SdkError(m.ErrorCode.ALREADY_REGISTERED, "this thread already holds a worker")
        escapable = m.ESCAPABLE_DEFAULT[self.kind] if escapable is None else bool(escapable)
        tid = threading.get_native_id()
        if not self.attached:  # SCB.md §7: registration returns a detached worker
            self.registered, self.lost = True, False
            self.escapable, self.priority = escapable, priority
            return {"slot": None, "tid": tid, "attached": False}
        if not 0 <= slot < self.count:
            raise SdkError(m.ErrorCode.SLOT_OUT_OF_RANGE, f"slot {slot} >= scb_count {self.count}")
        retired = self._hdr(m.RegionHeader.GENERATION).value != self.attach_generation
        if retired and BREAK == "register_retired_detaches":
            self.registered, self.lost = True, False
            self.escapable, self.priority = escapable, priority
            return {"slot": None, "tid": tid, "attached": False}
        if retired and BREAK != "register_busy_first":
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted; attach again")
        self.scb_base = self.header_size + slot * self.stride
        # INIT -> CLAIMED (the CAS; see the module doc). Any other value, unknown ones included (§3.2),
        # is not a free slot.
        state = self.load(S.WORKER_STATE)
        if state != W.INIT:
            name = W(state).name if state in W._value2member_map_ else f"unknown value {state}"
            raise SdkError(m.ErrorCode.SLOT_BUSY, f"slot {slot} is in state {name}")
        if retired:  # register_busy_first: the slot was looked at before the generation
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted; attach again")
        self.store(S.WORKER_STATE, W.CLAIMED)
        # While CLAIMED: the slot's data, then REGISTERED publishes it (SCB.md §4).
        self.store(S.TID, tid)
        self.store(S.PID, os.getpid())
        gen = (self.load(S.SLOT_GENERATION) + 1) & 0xFFFFFFFF
        self.store(S.SLOT_GENERATION, gen or 1)
        seq = self.load(S.PREEMPT_SEQ)
        self.store(S.LAST_ACK_SEQ, seq)
        if BREAK != "late_escapable":
            self.store(S.ESCAPABLE, escapable)
            self.store(S.PRIORITY, priority)
        if BREAK != "skip_registered":
            self.store(S.WORKER_STATE, W.REGISTERED)
        if BREAK == "late_escapable":
            self.store(S.ESCAPABLE, escapable)
            self.store(S.PRIORITY, priority)
        # REGISTERED -> RUNNING, the runtime's part: escapable and priority are left as registered.
        self.store(S.RUNTIME_KIND, self.kind)
        self.store(S.RUNTIME_MODE, Mode.DETERMINISTIC)
        self.store(S.IN_CRITICAL, 1 if self.depth > 0 else 0)
        self.store(S.WORKER_STATE, W.RUNNING)
        self.slot = slot
        self.registered, self.lost = True, False
        self.escapable, self.priority = escapable, priority
        self.acked = self.cached_ack = seq
        self.mode, self.pressured, self.pressure_snapshot = Mode.DETERMINISTIC, False, None
        self.last_dropped = self.load(S.HINTS_DROPPED)  # the DEFENSIVE baseline (SCB.md §5.4)
        self.last_yield_ns = self.last_eval_ns = self.mode_now()
        return {"slot": slot, "tid": tid, "attached": True}

    def _socket_path(self) -> str:
        return os.environ.get(m.ENV_SOCKET) or m.DEFAULT_SOCKET_PATH

    def _socket_identity(self):
        try:
            st = os.stat(self._socket_path())
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def register_agent(self, escapable=None, priority=None):
        """Registration through the agent by discovery (SCB.md §1.2 step 2, §4.1)."""
        p = 0 if priority is None else priority
        if not m.PRIORITY_MIN <= p <= m.PRIORITY_MAX:
            raise SdkError(m.ErrorCode.INVALID_ARGUMENT,
                           f"priority {p} is outside {m.PRIORITY_MIN}..{m.PRIORITY_MAX}")
        if self.registered:
            raise SdkError(m.ErrorCode.ALREADY_REGISTERED, "this thread already holds a worker")
        self.options = (escapable, priority)
        return self._register_agent(escapable, priority)

    def _detached(self, escapable, priority, awaiting):
        self.registered, self.lost, self.slot, self.attached = True, False, None, False
        self.awaiting = awaiting
        self.escapable = m.ESCAPABLE_DEFAULT[self.kind] if escapable is None else bool(escapable)
        self.priority = priority or 0
        return {"slot": None, "tid": threading.get_native_id(), "attached": False}

    def _register_agent(self, escapable, priority):
        path = self._socket_path()
        if not os.path.exists(path):
            if BREAK == "absent_socket_errors":
                raise SdkError(m.ErrorCode.IO, f"connecting to {path}: no such file")
            return self._detached(escapable, priority, False)  # no agent: the default paths, then detached
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except ConnectionRefusedError:
            conn.close()
            if BREAK == "leftover_socket_errors":
                raise SdkError(m.ErrorCode.IO, f"connecting to {path}: connection refused") from None
            # §6.1: a killed agent's leftover is the scheduler's absence; wait for a new instance.
            self.socket_id = self._socket_identity()
            return self._detached(escapable, priority, True)
        except OSError as err:
            conn.close()
            raise SdkError(m.ErrorCode.IO, f"connecting to {path}: {err.strerror}") from None
        tid = threading.get_native_id()
        conn.sendall(self._request(m.RegOp.REGISTER, tid=tid, escapable={
            None: m.RegEscapable.DEFAULT, False: m.RegEscapable.NO, True: m.RegEscapable.YES}[escapable],
            priority=priority or 0))
        data, fds = b"", []
        while len(data) < m.RegReply.SIZE:
            chunk, got, _, _ = socket.recv_fds(conn, m.RegReply.SIZE - len(data), 4)
            fds += got
            if not chunk:
                for fd in fds:
                    os.close(fd)
                conn.close()
                raise SdkError(m.ErrorCode.IO, f"the agent at {path} closed the connection without a reply")
            data += chunk
        P = {f.name: f for f in m.RegReply.FIELDS}
        reply = {name: struct.unpack_from(f.struct_format, data, f.offset)[0] for name, f in P.items()
                 if f.struct_format}
        if reply["status"] != m.RegStatus.OK:
            for fd in fds:
                os.close(fd)
            conn.close()
            if BREAK == "channel_refusal_detaches":
                return self._detached(escapable, priority, False)
            raise SdkError(m.ErrorCode.REGISTRATION_REFUSED,
                           f"the agent refused: {m.RegStatus(reply['status']).name}")
        if not fds:
            conn.close()
            raise SdkError(m.ErrorCode.IO, "the agent's OK carried no region descriptor")
        for fd in fds[1:]:
            os.close(fd)
        self._map(fds[0], "the agent's region", False)
        if reply["generation"] != self.attach_generation:
            conn.close()
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the region changed since the agent assigned the slot")
        slot = reply["slot"]
        self.scb_base = self.header_size + slot * self.stride
        self.escapable = m.ESCAPABLE_DEFAULT[self.kind] if escapable is None else bool(escapable)
        self.priority = priority or 0
        # REGISTERED -> RUNNING, the runtime's part (SCB.md §4): escapable and priority are left as the
        # registrar wrote them when they are what was asked (a 1.2 registrar did not know them).
        if self.load(S.ESCAPABLE) != int(self.escapable):
            self.store(S.ESCAPABLE, self.escapable)
        if self.load(S.PRIORITY) != self.priority:
            self.store(S.PRIORITY, self.priority)
        self.store(S.RUNTIME_KIND, self.kind)
        self.store(S.RUNTIME_MODE, Mode.DETERMINISTIC)
        self.store(S.IN_CRITICAL, 1 if self.depth > 0 else 0)
        self.store(S.WORKER_STATE, W.RUNNING)
        self.slot, self.conn, self.socket_id = slot, conn, self._socket_identity()
        self.registered, self.lost, self.awaiting = True, False, False
        seq = self.load(S.LAST_ACK_SEQ)
        self.acked = self.cached_ack = seq
        self.mode, self.pressured, self.pressure_snapshot = Mode.DETERMINISTIC, False, None
        self.last_dropped = self.load(S.HINTS_DROPPED)
        self.last_yield_ns = self.last_eval_ns = self.mode_now()
        return {"slot": slot, "tid": tid, "attached": True}

    def _watch(self):
        """The watcher's part (SCB.md §6.1), looked at per checkpoint: a replaced or removed socket loses
        a worker registered through it; a waiting worker outside a critical section registers again,
        with its original options, once a new socket accepts (a refusal waits for the next one)."""
        if self.slot is not None and self.conn is not None and self._socket_identity() != self.socket_id:
            self._lose()
        if not self.awaiting or (self.depth > 0 and BREAK != "reregister_in_critical"):
            return
        current = self._socket_identity()
        if current is None or current == self.socket_id:
            return
        self.socket_id = current  # one attempt per instance
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        escapable, priority = (None, None) if BREAK == "reregister_defaults" else self.options
        try:
            self._register_agent(escapable, priority)
        except SdkError:
            self.registered, self.awaiting = True, True

    def _need_worker(self):
        if not self.registered:
            raise SdkError(m.ErrorCode.NOT_REGISTERED, "this thread holds no worker")

    def status(self):
        self._need_worker()
        if BREAK == "status_unlatched" and self.slot is not None:
            if self._hdr(m.RegionHeader.GENERATION).value != self.attach_generation:
                raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted (not latched)")
        if self.slot is not None and BREAK != "status_no_reread":
            self.generation_ok()
        if BREAK == "status_reregisters":
            self._watch()
        if self.lost:
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted; the worker is lost")
        return {"attached": self.slot is not None}

    def shutdown(self):
        self._need_worker()
        if self.slot is not None and self.generation_ok():
            self.store(S.WORKER_STATE, W.QUIESCING)
            self.store(S.WORKER_STATE, W.DEAD)
            if self.conn is not None:
                self._unregister()
            else:
                # Direct registration: the registrar's DEAD -> CLAIMED -> INIT rows (SCB.md §4), with the
                # reclaim clear over the whole stride in between.
                self.store(S.WORKER_STATE, W.CLAIMED)
                # The generated reclaim clear (worker_state stays CLAIMED through it), then INIT.
                scb_clear_for_reuse(self.mm, self.scb_base, m.Scb.SIZE if BREAK == "reclaim_128" else self.stride)
                self.store(S.WORKER_STATE, W.INIT)
        # A lost worker: nothing written, no error (SCB.md §6), no UNREGISTER.
        if self.conn is not None:
            self.conn.close()
        self.conn, self.awaiting = None, False
        self.slot = None
        self.registered = self.lost = False
        self.cached_ack = self.acked = 0
        return {}

    def _request(self, op, **fields) -> bytes:
        """One sized reg_request (SCB.md §4.1) of this client: magic, ABI, kind, size, then `fields`."""
        R = {f.name: f for f in m.RegRequest.FIELDS}
        req = bytearray(m.RegRequest.SIZE)
        values = {"magic": m.REG_MAGIC, "abi_major": m.ABI_MAJOR, "abi_minor": m.ABI_MINOR, "op": op,
                  "runtime_kind": self.kind, "message_size": m.RegRequest.SIZE, **fields}
        if BREAK == "channel_legacy_request":  # the 1.2 request: 32 bytes, no size, no options
            req = req[:32]
            values = {k: v for k, v in values.items() if R[k].offset < 32}
            values["message_size"] = 0
        for name, value in values.items():
            struct.pack_into(R[name].struct_format, req, R[name].offset, int(value))
        if BREAK == "request_reserved_set":  # the broken client: a reserved byte not zero
            req[R["_reserved0"].offset] = 1
        return bytes(req)

    def _unregister(self):
        """UNREGISTER of the worker's slot on its connection (SCB.md §4.1)."""
        self.conn.sendall(self._request(m.RegOp.UNREGISTER, slot=self.slot))
        data = b""
        while len(data) < m.RegReply.SIZE:
            chunk = self.conn.recv(m.RegReply.SIZE - len(data))
            if not chunk:
                raise SdkError(m.ErrorCode.IO, "the agent closed the connection before answering UNREGISTER")
            data += chunk
        status = struct.unpack_from("<I", data, m.RegReply.STATUS.offset)[0]
        if status != m.RegStatus.OK:
            raise SdkError(m.ErrorCode.REGISTRATION_REFUSED, f"UNREGISTER refused: {m.RegStatus(status).name}")

    # -- runtime modes (SCB.md §5.4) ---------------------------------------------------------------

    def _slice_ns(self):
        if BREAK == "slice_cached":
            if getattr(self, "_cached_slice", None) is None:
                self._cached_slice = self._hdr(m.RegionHeader.SLICE_NS).value
            return self._cached_slice
        return self._hdr(m.RegionHeader.SLICE_NS).value

    def _pressure_level(self):
        """The bounded seqlock reader of SCB.md §2.1: the level, or the last good one (None: none yet)."""
        P, base = m.Pressure, m.RegionHeader.PRESSURE.offset
        seq = _CTYPE[P.SEQ.type].from_buffer(self.mm, base + P.SEQ.offset)
        level = _CTYPE[P.LEVEL.type].from_buffer(self.mm, base + P.LEVEL.offset)
        for _ in range(m.SEQLOCK_MAX_RETRIES):
            s1 = seq.value
            if s1 & 1:
                continue
            value = level.value
            if seq.value == s1:
                self.pressure_snapshot = value
                return value
        return self.pressure_snapshot

    def _evaluate_mode(self, now):
        """Re-read hints_dropped and the pressure level; publish a changed mode. Generation checked."""
        self.last_eval_ns = now
        dropped = self.load(S.HINTS_DROPPED)
        grew = dropped != self.last_dropped
        self.last_dropped = dropped
        level = self._pressure_level()
        if BREAK == "unknown_level_keeps" and level is not None and level not in m.PressureLevel._value2member_map_:
            level = None
        if level is not None:  # no fresh snapshot: the last good one; none yet: not HIGH (SCB.md §2.1)
            self.pressured = level == m.PressureLevel.HIGH
        mode = Mode.DEFENSIVE if grew else (Mode.PRESSURED if self.pressured else Mode.DETERMINISTIC)
        if BREAK == "no_snapshot_keeps_mode" and level is None and not grew:
            mode = self.mode
        if BREAK == "no_modes":
            mode = Mode.DETERMINISTIC
        if mode != self.mode:
            self.mode = mode
            self.store(S.RUNTIME_MODE, mode)
        self.cached_ack = self.acked if mode == Mode.DETERMINISTIC else FORCE_SLOW_PATH

    # -- checkpoint -------------------------------------------------------------------------------

    def mode_now(self):
        """The clock of the mode rules (SCB.md §5.4): the `mode_clock` op's time once set, else CLOCK_MONOTONIC."""
        return self.mode_clock if self.mode_clock is not None else time.monotonic_ns()

    def _decide(self):
        """(seq, reason) for a checkpoint that yields, or None. Writes nothing except a changed mode."""
        self._watch()
        if self.slot is None:
            return None  # no worker, detached or lost: the static zeroed SCB
        seq = self.load(S.PREEMPT_SEQ)
        if seq == self.cached_ack:
            if BREAK == "restore_on_fast_path":
                self.store(S.LAST_ACK_SEQ, self.load(S.LAST_ACK_SEQ))  # the broken fast path
            return None
        if self.depth > 0:
            if BREAK == "modes_in_critical" and self.generation_ok():
                self._evaluate_mode(self.mode_now())
            return None  # a request stays pending; no mode evaluation (SCB.md §5.4)
        if not self.generation_ok():
            return None  # lost: a plain no-yield, never an error (§6)
        if seq != (self.cached_ack if BREAK == "pending_by_comparand" else self.acked):
            return seq, m.YieldReason.PREEMPT_REQUEST
        now = self.mode_now()
        if BREAK == "evaluate_before_deciding" and now - self.last_eval_ns >= self._slice_ns():
            self._evaluate_mode(now)  # the other reading of Appendix A 21a: evaluate, then decide
        ran_a_slice = now - self.last_yield_ns >= self._slice_ns()
        if self.mode == Mode.PRESSURED and ran_a_slice and self.load(S.BUDGET_REMAINING_NS) == 0:
            return seq, m.YieldReason.BUDGET
        if self.mode == Mode.DEFENSIVE and ran_a_slice:
            return seq, m.YieldReason.DEFENSIVE
        if now - self.last_eval_ns >= self._slice_ns():
            self._evaluate_mode(now)
        return None

    def _acknowledge(self, seq, reason):
        if not self.generation_ok():
            return  # the restart spanned the yield: it happened, nothing is acknowledged (§6)
        self.store(S.LAST_YIELD_REASON, reason)
        self.store(S.YIELD_COUNT, self.load(S.YIELD_COUNT) + 1)
        cur = self.load(S.LAST_ACK_SEQ)
        if BREAK == "mode_yield_acks_late" and reason != m.YieldReason.PREEMPT_REQUEST:
            seq = self.load(S.PREEMPT_SEQ)  # the broken reading: what is pending after the suspension
            reason_acks = True
        else:
            reason_acks = reason == m.YieldReason.PREEMPT_REQUEST
        if reason_acks and cur < seq:  # the CAS: up only
            self.store(S.LAST_ACK_SEQ, seq)
        self.acked = max(seq, cur, self.acked)
        self.yields += 1
        now = self.mode_now()
        self.last_yield_ns = now
        if reason == m.YieldReason.PREEMPT_REQUEST or now - self.last_eval_ns >= self._slice_ns():
            self._evaluate_mode(now)
        else:
            self.cached_ack = self.acked if self.mode == Mode.DETERMINISTIC else FORCE_SLOW_PATH

    def checkpoint_sync(self):
        decided = self._decide()
        if decided is None:
            return False
        self._acknowledge(*decided)
        return True  # the caller yields now

    def checkpoint_async(self, suspend):
        decided = self._decide()
        if decided is None:
            return False
        if BREAK == "ack_before_yield":
            self._acknowledge(*decided)
            suspend()
            return True
        suspend()  # yield to the executor first
        self._acknowledge(*decided)
        return True

    def explicit_yield(self):
        """SCB.md §5.8: a record of a yield the application made on its own; suspends nothing."""
        self._need_worker()
        if self.slot is None:
            return {}  # detached or lost: writes nothing, never an error (§6, §7)
        if BREAK == "explicit_refused_in_critical" and self.depth > 0:
            return {}
        if BREAK == "explicit_lost_errors" and not self.generation_ok():
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted (explicit yield)")
        if not self.generation_ok():
            return {}
        seq = self.load(S.PREEMPT_SEQ)
        if BREAK != "explicit_no_reason":
            self.store(S.LAST_YIELD_REASON, m.YieldReason.EXPLICIT)
            self.store(S.YIELD_COUNT, self.load(S.YIELD_COUNT) + 1)
        cur = self.load(S.LAST_ACK_SEQ)
        if seq > self.acked and cur < seq and BREAK != "explicit_no_ack":  # the CAS of §5.1: up only
            self.store(S.LAST_ACK_SEQ, seq)
            self.acked = max(seq, cur, self.acked)
        self.yields += 1
        now = self.mode_now()
        if BREAK != "explicit_keeps_mode_clocks":
            self.last_yield_ns = now  # a yield of any reason: the mode clocks restart (§5.4)
            self._evaluate_mode(now)
        return {}

    def run_tasks(self, count: int, checkpoints: int, tick_ns: int | None = None, callbacks: int = 0) -> dict:
        """SCB.md §5.7 on a minimal event loop: `count` CPU-bound tasks, each making `checkpoints`
        async checkpoints back to back, served from one FIFO. A task's turn lasts until a checkpoint
        yields (the yielder goes to the back; the loop acknowledges its request before any other task
        runs, so no other task yields for it), until its timed turn is over (a step aside that writes
        nothing), or until the task ends. A timed turn is looked at LOOKS_PER_SLICE times per slice of
        wall time: this loop has no work of its own, so a look within the slice lets the turn carry on,
        and the first look at or after the slice's end ends it if a task waits (none waits: it carries
        on, timed afresh). `tick_ns`: the turns are timed by a clock that advances by it just before each
        checkpoint (CONFORMANCE.md §2.3), else by CLOCK_MONOTONIC. `callbacks`: the loop's own work, one
        task that awaits the loop's next turn that many times: it takes one step whenever the loop has
        control between two turns, and while it has steps left a look ends the turn (CONFORMANCE.md
        §2.3: `longest_run`). The yield's passes of a real loop are not modelled: no task here waits for
        I/O."""
        clock = [0]

        def now():
            return clock[0] if tick_ns else time.monotonic_ns()

        queue = list(range(count))
        remaining = [checkpoints] * count
        deferred = {}  # every_task_yields: the acknowledgement each yielder makes when it resumes
        yields = steps = turns = 0
        last = None
        light = callbacks  # the loop's own work: steps left
        run = longest = 0  # checkpoints since its last step, while it has steps left
        while queue:
            if light > 0:  # the loop has control: its own work takes a step first
                light, run = light - 1, 0
            task = queue.pop(0)
            if task in deferred:
                self._acknowledge(*deferred.pop(task))
            slice_ns = self._slice_ns() if self.slot is not None else m.DEFAULT_SLICE_NS
            look_ns = max(slice_ns // LOOKS_PER_SLICE, 1)
            slice_end = now() + slice_ns
            look = min(now() + look_ns, slice_end)
            while remaining[task] > 0:
                remaining[task] -= 1
                steps += 1
                clock[0] += tick_ns or 0
                if task != last:
                    turns, last = turns + 1, task
                if light > 0:
                    run += 1
                    longest = max(longest, run)
                decided = self._decide()
                if decided is None and BREAK == "rotation_ignores_critical" and self.depth > 0:
                    depth, self.depth = self.depth, 0  # the broken reading: the section is the task's
                    decided = self._decide()
                    self.depth = depth
                if decided is not None:
                    yields += 1
                    if BREAK == "every_task_yields":
                        deferred[task] = decided
                    else:
                        self._acknowledge(*decided)  # the loop's first callback after the suspension
                    queue.append(task)
                    break
                if remaining[task] == 0 or now() < look:
                    continue
                # A look: the loop's own work ends the turn (loop_work_ignored: never); a waiting task
                # ends it once the slice is over (waiter_at_look: at any look).
                slice_over = now() >= slice_end
                if light > 0 and BREAK != "loop_work_ignored":
                    queue.append(task)
                    break
                if queue and (slice_over or BREAK == "waiter_at_look") and BREAK != "waiter_never":
                    if BREAK == "turn_end_counted" and self.slot is not None and self.generation_ok():
                        self.store(S.YIELD_COUNT, self.load(S.YIELD_COUNT) + 1)
                    queue.append(task)
                    break
                if slice_over:
                    slice_end = now() + slice_ns
                look = min(now() + look_ns, slice_end)
        return {"steps": steps, "yields": yields, "turns": turns, "longest_run": longest}

    # -- critical sections ------------------------------------------------------------------------

    def critical_enter(self):
        self.depth += 1
        if self.depth == 1 and self.slot is not None and self.generation_ok():
            self.store(S.IN_CRITICAL, 1)
        return {"depth": self.depth}

    def critical_exit(self):
        if self.depth == 0:
            raise SdkError(m.ErrorCode.NOT_IN_CRITICAL, "critical exit without enter")
        self.depth -= 1
        if self.depth == 0 and self.slot is not None and self.generation_ok():
            self.store(S.IN_CRITICAL, 0)
        return {"depth": self.depth}

    def _settable(self):
        self._need_worker()
        if self.slot is not None:
            self.generation_ok()
        if BREAK == "status_reregisters":
            self._watch()
        if self.lost:
            raise SdkError(m.ErrorCode.GENERATION_CHANGED, "the scheduler restarted; nothing written")

    def set_escapable(self, value: bool):
        self._settable()
        self.escapable = value
        if self.slot is not None:
            self.store(S.ESCAPABLE, 1 if value else 0)
        return {}

    def set_priority(self, value: int):
        self._settable()
        if not m.PRIORITY_MIN <= value <= m.PRIORITY_MAX:
            raise SdkError(m.ErrorCode.INVALID_ARGUMENT,
                           f"priority {value} is outside {m.PRIORITY_MIN}..{m.PRIORITY_MAX}")
        self.priority = value
        if self.slot is not None:
            self.store(S.PRIORITY, value)
        return {}

    def state(self):
        out = {"attached": self.attached, "registered": self.registered, "depth": self.depth}
        if self.registered:
            out.update(slot=self.slot, cached_ack=self.cached_ack if BREAK == "state_placeholder" else self.acked, yields=self.yields, mode=self.mode.name,
                       escapable=self.escapable, priority=self.priority)
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", default="PYTHON", choices=[k.name for k in m.RuntimeKind])
    kind = m.RuntimeKind[parser.parse_args().kind]
    worker = Worker(kind)
    out = sys.stdout

    def send(msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    send({"protocol": "morpheus-conformance", "version": 1, "sdk": "reference",
          "runtime_kind": kind.name, "abi_major": m.ABI_MAJOR, "abi_minor": m.ABI_MINOR,
          "checkpoint_modes": ["sync", "async"], "state_fields": ["escapable", "priority"],
          "ops": ["explicit_yield", "tasks", "turn_clock", "mode_clock"], "pid": os.getpid()})
    lines = iter(sys.stdin.readline, "")
    for line in lines:
        req = json.loads(line)
        rid, op = req.get("id"), req.get("op")
        if op == "exit":
            return 0

        def suspend():
            send({"id": rid, "event": "suspended"})
            resume = json.loads(next(lines))
            if resume.get("op") != "resume" or resume.get("id") != rid:
                raise SystemExit(f"reference agent: expected resume for {rid}, got {resume}")

        try:
            if op == "attach":
                result = worker.attach(req.get("path"))
            elif op == "register":
                result = worker.register(req["slot"], req.get("escapable"), req.get("priority"))
            elif op == "register_agent":
                result = worker.register_agent(req.get("escapable"), req.get("priority"))
            elif op == "checkpoint":
                if req["mode"] == "sync":
                    result = {"yielded": worker.checkpoint_sync()}
                else:
                    result = {"yielded": worker.checkpoint_async(suspend)}
            elif op == "checkpoint_loop":
                yields = iterations = 0
                end = time.monotonic() + req["duration_ms"] / 1000.0
                while time.monotonic() < end:
                    iterations += 1
                    if req["mode"] == "sync":
                        yields += worker.checkpoint_sync()
                    else:
                        yields += worker.checkpoint_async(lambda: None)
                result = {"iterations": iterations, "yields": yields}
            elif op == "critical_enter":
                result = worker.critical_enter()
            elif op == "critical_exit":
                result = worker.critical_exit()
            elif op == "set_escapable":
                result = worker.set_escapable(bool(req["value"]))
            elif op == "set_priority":
                result = worker.set_priority(int(req["value"]))
            elif op == "state":
                result = worker.state()
            elif op == "status":
                result = worker.status()
            elif op == "shutdown":
                result = worker.shutdown()
            elif op == "explicit_yield":
                result = worker.explicit_yield()
            elif op == "mode_clock":
                worker.mode_clock = int(req["ns"])
                result = {}
            elif op == "tasks":
                tick = req.get("tick_ns")
                result = worker.run_tasks(int(req["count"]), int(req["checkpoints"]), None if tick is None else int(tick),
                                          int(req.get("callbacks") or 0))
            else:
                send({"id": rid, "ok": False, "error": "UNSUPPORTED", "message": f"unknown op {op!r}"})
                continue
            send({"id": rid, "ok": True, **result})
        except SdkError as err:
            send({"id": rid, "ok": False, "error": err.code.name, "message": str(err)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
