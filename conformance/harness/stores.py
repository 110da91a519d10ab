# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Every store an agent makes to chosen SCB fields during one request, in order (CONFORMANCE.md §3,
`expect.stores`).

Comparing bytes after a step cannot see a store of the value a field already held, nor a value that
was stored and overwritten before the step ended (a registrar that skips REGISTERED, a fast path that
re-stores an unchanged acknowledgement). A sampler could miss them on a loaded machine. So the harness
asks the CPU: it attaches to the agent with ptrace and arms one hardware write watchpoint per field
(x86-64 debug registers DR0-DR3) in every thread of the agent. Each store to a watched field stops the
storing thread right after the store; the harness reads the value from its own mapping of the region
and lets the thread go on. Nothing is sampled, so nothing depends on timing.

The region may not be mapped by the agent yet when the request starts (libmorpheus maps it inside its
register call): then the tracer also stops the agent at every system-call exit until the region's
mapping appears in /proc/PID/maps, arms the watchpoints there, and lets it run freely afterwards.

Where this cannot work (another CPU architecture, ptrace refused, debug registers not writable) the
tracer raises Unavailable with the reason; the cell is reported as skipped with it, never as passed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import struct
import threading
import time

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.waitpid.restype = ctypes.c_int
_libc.waitpid.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]

PTRACE_CONT, PTRACE_PEEKUSER, PTRACE_POKEUSER, PTRACE_DETACH, PTRACE_SYSCALL = 7, 3, 6, 17, 24
PTRACE_SETOPTIONS, PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4200, 0x4206, 0x4207
PTRACE_O_TRACESYSGOOD, PTRACE_O_TRACECLONE = 0x1, 0x8
PTRACE_EVENT_CLONE, PTRACE_EVENT_STOP = 3, 128
# __WALL | __WNOTHREAD: every traced thread, and only this thread's tracees (never another cell's
# agent process, which the harness's other threads wait for).
WALL = 0x40000000 | 0x20000000
# offsetof(struct user, u_debugreg) on x86-64 (sys/user.h): where PTRACE_POKEUSER finds DR0..DR7.
X86_64_DEBUGREG_OFFSET = 848
MAX_WATCHES = 4  # DR0..DR3
# How long the tracer waits for one thread to stop (it is normally a few microseconds).
WAIT_FOR_THREAD_S = 10.0
_LEN_BITS = {1: 0b00, 2: 0b01, 4: 0b11, 8: 0b10}  # DR7 LENn encodings


class Unavailable(Exception):
    """Store tracing cannot run here; the message says why."""


def _call(request, tid, addr=0, data=0) -> int:
    ctypes.set_errno(0)
    r = _libc.ptrace(request, tid, ctypes.c_void_p(addr), ctypes.c_void_p(data))
    err = ctypes.get_errno()
    if r == -1 and err:
        raise OSError(err, os.strerror(err))
    return r


def region_mappings(pid: int, path: str) -> list[tuple[int, int, int]]:
    """(start, end, file offset) of every mapping of `path` in process `pid`."""
    real = os.path.realpath(path)
    out = []
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and os.path.realpath(parts[5].strip()) == real:
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    out.append((start, end, int(parts[2], 16)))
    except OSError:
        pass
    return out


class StoreTracer:
    """Arms watchpoints on `fields` (name -> (file offset, size)) of the region file `path` in every
    thread of process `pid`; `start()` before the request, `stop()` after its reply, then `stores`
    holds {name: [value stored, ...]} in the order the stores happened."""

    def __init__(self, pid: int, path: str, fields: dict[str, tuple[int, int, str]], mm):
        if platform.machine() != "x86_64":
            raise Unavailable(f"store tracing uses x86-64 debug registers; this host is {platform.machine()}")
        if len(fields) > MAX_WATCHES:
            raise Unavailable(f"at most {MAX_WATCHES} fields can be watched at once, not {len(fields)}")
        for name, (offset, size, _fmt) in fields.items():
            if size not in _LEN_BITS or offset % size:
                raise Unavailable(f"field {name} ({size} bytes at {offset}) is not watchable")
        self.pid, self.path, self.fields, self.mm = pid, path, fields, mm
        self.stores: dict[str, list[int]] = {name: [] for name in fields}
        # (field, value stored, the region's bytes right after that store), in the order of the stores.
        self.events: list[tuple[str, int, bytes]] = []
        self._names = list(fields)
        self._threads: set[int] = set()
        self._armed: set[int] = set()
        self._dr: dict[int, int] = {}  # debug register index -> address, once the mapping is known
        self._error: BaseException | None = None
        self._started = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # -- control (harness thread) -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        self._started.wait()
        if self._error:
            raise self._error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self._thread.is_alive():
            raise Unavailable("the store tracer did not stop")
        if self._error:
            raise self._error

    # -- the tracer thread (ptrace requests must come from the thread that attached) --------------

    def _arm(self, tid: int) -> None:
        dr7 = 0
        for index, addr in self._dr.items():
            size = self.fields[self._names[index]][1]
            _call(PTRACE_POKEUSER, tid, X86_64_DEBUGREG_OFFSET + 8 * index, addr)
            dr7 |= (1 << (2 * index)) | (0b01 << (16 + 4 * index)) | (_LEN_BITS[size] << (18 + 4 * index))
        _call(PTRACE_POKEUSER, tid, X86_64_DEBUGREG_OFFSET + 7 * 8, dr7)
        self._armed.add(tid)

    def _disarm(self, tid: int) -> None:
        try:
            _call(PTRACE_POKEUSER, tid, X86_64_DEBUGREG_OFFSET + 7 * 8, 0)
        except OSError:
            pass

    def _locate(self) -> bool:
        maps = region_mappings(self.pid, self.path)
        if not maps:
            return False
        if len(maps) * len(self.fields) > MAX_WATCHES:
            raise Unavailable(f"the agent maps the region {len(maps)} times; {len(self.fields)} field(s) "
                              f"need more than {MAX_WATCHES} watchpoints")
        # One watchpoint per field and mapping; a store through any mapping is seen.
        self._names = [name for name in self.fields for _ in maps]
        self._dr = {}
        for i, name in enumerate(self._names):
            start, end, file_off = maps[i % len(maps)]
            offset = self.fields[name][0]
            if not file_off <= offset < file_off + (end - start):
                raise Unavailable(f"the agent's mapping of the region does not cover {name}")
            self._dr[i] = start + offset - file_off
        return True

    def _run(self) -> None:
        try:
            self._attach_all()
        except BaseException as err:  # noqa: BLE001 - handed to the harness thread
            self._error = err if isinstance(err, Unavailable) else Unavailable(f"ptrace: {err}")
            self._detach_all()
            self._started.set()
            return
        self._started.set()
        try:
            self._loop()
        except BaseException as err:  # noqa: BLE001
            self._error = Unavailable(f"store tracer: {err}")
        finally:
            self._detach_all()

    def _attach_all(self) -> None:
        tids = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        for tid in tids:
            try:
                _call(PTRACE_SEIZE, tid, 0, PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACECLONE)
            except OSError as err:
                raise Unavailable(f"ptrace cannot attach to the agent ({err.strerror}); "
                                  "store tracing needs ptrace of a child process") from None
            self._threads.add(tid)
        self._located = self._locate()
        for tid in tids:  # stop each thread once to set its debug registers
            _call(PTRACE_INTERRUPT, tid)
            self._wait_for(tid)
            if self._located:
                try:
                    self._arm(tid)
                except OSError as err:
                    raise Unavailable(f"cannot set hardware watchpoints ({err.strerror})") from None
            self._resume(tid)

    def _wait_for(self, tid: int) -> int:
        # Bounded: a traced thread-group leader that has exited is reported only once every other
        # thread has, and those may be stopped by this very tracer, so a blocking wait could wait for
        # ever (seen with a JVM agent). Past the deadline the thread counts as gone.
        status = ctypes.c_int()
        deadline = time.monotonic() + WAIT_FOR_THREAD_S
        while True:
            got = _libc.waitpid(tid, ctypes.byref(status), WALL | 1)  # WNOHANG
            if got == tid:
                return status.value
            if got == -1 and ctypes.get_errno() != 4:  # EINTR
                raise OSError(ctypes.get_errno(), "waitpid")
            if time.monotonic() > deadline:
                raise OSError(errno.ETIMEDOUT, f"thread {tid} did not stop within {WAIT_FOR_THREAD_S} s")
            time.sleep(0.0005)

    def _resume(self, tid: int, sig: int = 0) -> None:
        # Until the mapping is found, stop at every system-call exit to look for it.
        _call(PTRACE_CONT if self._located else PTRACE_SYSCALL, tid, 0, sig)

    def _loop(self) -> None:
        status = ctypes.c_int()
        while self._threads:
            got = _libc.waitpid(-1, ctypes.byref(status), WALL | 1)  # WNOHANG
            if got == 0:
                if self._stop.is_set():
                    return
                self._stop.wait(0.0005)
                continue
            if got == -1:
                if ctypes.get_errno() == 4:
                    continue
                return  # no traced child left
            tid, s = got, status.value
            if os.WIFEXITED(s) or os.WIFSIGNALED(s):
                self._threads.discard(tid)
                continue
            if not os.WIFSTOPPED(s):
                continue
            sig, event = os.WSTOPSIG(s), (s >> 16) & 0xFFFF
            if event == PTRACE_EVENT_CLONE:
                child = ctypes.c_ulong()
                _libc.ptrace(0x4201, tid, None, ctypes.byref(child))  # PTRACE_GETEVENTMSG
                self._threads.add(child.value)
                self._resume(tid)
                continue
            if event == PTRACE_EVENT_STOP:  # a new thread's first stop, or an interrupt
                if tid not in self._threads:
                    self._threads.add(tid)
                if self._located and tid not in self._armed:
                    self._arm(tid)
                self._resume(tid)
                continue
            if sig == signal.SIGTRAP | 0x80:  # system-call stop, while looking for the mapping
                if not self._located and self._locate():
                    self._located = True
                    self._arm(tid)
                    for other in self._threads - {tid}:
                        _call(PTRACE_INTERRUPT, other)  # armed at their interrupt stop
                self._resume(tid)
                continue
            if sig == signal.SIGTRAP and self._located:
                self._record(tid)
                self._resume(tid)
                continue
            self._resume(tid, sig)  # any other signal goes to the agent as it would have

    def _record(self, tid: int) -> None:
        dr6 = _call(PTRACE_PEEKUSER, tid, X86_64_DEBUGREG_OFFSET + 6 * 8)
        _call(PTRACE_POKEUSER, tid, X86_64_DEBUGREG_OFFSET + 6 * 8, 0)
        for index, name in enumerate(self._names):
            if dr6 & (1 << index):
                offset, _size, fmt = self.fields[name]
                image = bytes(self.mm[:])  # the storing thread is stopped right after its store
                value = struct.unpack_from(fmt, image, offset)[0]
                self.stores[name].append(value)
                self.events.append((name, value, image))

    def _detach_all(self) -> None:
        for tid in list(self._threads):
            try:
                _call(PTRACE_INTERRUPT, tid)
                s = self._wait_for(tid)
                while os.WIFSTOPPED(s) and (s >> 16) != PTRACE_EVENT_STOP:
                    # A pending trap or signal stop first; record it, then wait for the interrupt.
                    if os.WSTOPSIG(s) == signal.SIGTRAP and self._located:
                        self._record(tid)
                        _call(PTRACE_CONT, tid)
                    elif os.WSTOPSIG(s) == signal.SIGTRAP | 0x80:
                        _call(PTRACE_CONT, tid)
                    else:
                        _call(PTRACE_CONT, tid, 0, os.WSTOPSIG(s))
                    s = self._wait_for(tid)
                if os.WIFSTOPPED(s):
                    self._disarm(tid)
                    _call(PTRACE_DETACH, tid)
            except OSError:
                pass
        self._threads.clear()

