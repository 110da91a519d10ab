# SPDX-License-Identifier: GPL-2.0-only
"""A registration client for the trust tests, run as an unprivileged user (attacker or victim).

It speaks the registration protocol with raw bytes laid out by the generated ABI module (no SDK:
an attacker does not use one), maps whatever region it can reach (the descriptor an agent sends with
its reply, or a path), and either behaves (victim) or writes what an attacker would. One JSON line on
stdout reports what happened; `--status FILE` keeps a JSON status file current for the orchestrator.
"""

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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "abi", "python"))
import morpheus_abi as m  # noqa: E402

libc = ctypes.CDLL(None, use_errno=True)
SYS_gettid = 186 if os.uname().machine == "x86_64" else 178


def gettid():
    return libc.syscall(SYS_gettid)


def put(buf, field, value, base=0):
    struct.pack_into(field.struct_format, buf, base + field.offset, value)


def get(buf, field, base=0):
    return struct.unpack_from(field.struct_format, buf, base + field.offset)[0]


REQUEST_PREFIX = m.RegRequest.ESCAPABLE.offset  # the 1.0-1.2 request
# The records' sizes.
REQUEST_LEN = m.RegRequest.SIZE
REPLY_LEN = m.RegReply.SIZE


def request(op, tid=0, slot=0, sized=False, escapable=0, priority=0):
    size = REQUEST_LEN if sized else REQUEST_PREFIX
    buf = bytearray(REQUEST_LEN)
    put(buf, m.RegRequest.MAGIC, m.REG_MAGIC)
    put(buf, m.RegRequest.ABI_MAJOR, m.ABI_MAJOR)
    put(buf, m.RegRequest.ABI_MINOR, 2 if not sized else m.ABI_MINOR)
    put(buf, m.RegRequest.OP, op)
    put(buf, m.RegRequest.TID, tid)
    put(buf, m.RegRequest.SLOT, slot)
    put(buf, m.RegRequest.RUNTIME_KIND, m.RuntimeKind.RUST)
    if sized:
        put(buf, m.RegRequest.MESSAGE_SIZE, size)
        put(buf, m.RegRequest.ESCAPABLE, escapable)
        put(buf, m.RegRequest.PRIORITY, priority)
    return bytes(buf[:size])


def exchange(sock, data):
    """Sends a request; returns (reply fields, region fd or None)."""
    sock.sendall(data)
    reply_len = REPLY_LEN
    got, fds = b"", []
    while len(got) < reply_len:
        chunk, anc, _flags, _addr = sock.recvmsg(reply_len - len(got), socket.CMSG_SPACE(4 * 4))
        for level, kind, payload in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4]))
        if not chunk:
            raise ConnectionError(f"agent closed after {len(got)} bytes")
        got += chunk
    reply = {
        "status": get(got, m.RegReply.STATUS),
        "slot": get(got, m.RegReply.SLOT),
        "generation": get(got, m.RegReply.GENERATION),
        "slot_generation": get(got, m.RegReply.SLOT_GENERATION),
        "region_path": got[m.RegReply.REGION_PATH.offset:].split(b"\0")[0].decode(),
    }
    for extra in fds[1:]:
        os.close(extra)
    return reply, (fds[0] if fds else None)


def map_fd(fd):
    size = os.fstat(fd).st_size
    return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


class Registration:
    """One thread's registration (this thread), the region it got, and the connection kept."""

    def __init__(self, socket_path, sized=False, escapable=0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(socket_path)
        self.tid = gettid()
        self.reply, fd = exchange(self.sock, request(m.RegOp.REGISTER, self.tid, sized=sized, escapable=escapable))
        self.fd = fd
        if self.reply["status"] != m.RegStatus.OK:
            self.region = None
            return
        if fd is None and self.reply["region_path"]:
            self.fd = os.open(self.reply["region_path"], os.O_RDWR)
        self.region = map_fd(self.fd)
        self.scb = get(self.region, m.RegionHeader.HEADER_SIZE) + self.reply["slot"] * get(self.region, m.RegionHeader.SCB_STRIDE)

    def start_running(self, escapable):
        """What an SDK does after REGISTERED (spec §4): kind, escapable, RUNNING."""
        put(self.region, m.Scb.RUNTIME_KIND, m.RuntimeKind.RUST, self.scb)
        put(self.region, m.Scb.ESCAPABLE, 1 if escapable else 0, self.scb)
        put(self.region, m.Scb.IN_CRITICAL, 0, self.scb)
        put(self.region, m.Scb.WORKER_STATE, m.WorkerState.RUNNING, self.scb)

    def set_critical(self, on):
        put(self.region, m.Scb.IN_CRITICAL, 1 if on else 0, self.scb)

    def unregister(self):
        reply, _ = exchange(self.sock, request(m.RegOp.UNREGISTER, slot=self.reply["slot"]))
        return reply["status"]


def policy_of(tid):
    return libc.sched_getscheduler(tid)


def spin(seconds, status_file=None, reg=None):
    """Burns CPU without ever acknowledging, keeping a status file current."""
    end = time.monotonic() + seconds
    next_status = 0.0
    x = 1
    while time.monotonic() < end:
        for _ in range(20000):
            x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
        now = time.monotonic()
        if status_file and now >= next_status:
            state = {"pid": os.getpid(), "tid": gettid(), "policy": policy_of(0), "nice": os.getpriority(os.PRIO_PROCESS, 0)}
            if reg is not None and reg.region is not None:
                state.update(
                    generation=get(reg.region, m.RegionHeader.GENERATION),
                    preempt_seq=get(reg.region, m.Scb.PREEMPT_SEQ, reg.scb),
                    slot=reg.reply["slot"],
                )
            tmp = status_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(state, f)
            os.replace(tmp, status_file)
            next_status = now + 0.05


def errno_name(e):
    """The symbolic name of an OSError's errno (EACCES, EPERM, ...)."""
    import errno

    return errno.errorcode.get(e.errno, str(e.errno))


def scb_of(region, slot):
    return get(region, m.RegionHeader.HEADER_SIZE) + slot * get(region, m.RegionHeader.SCB_STRIDE)


def stdin_ready():
    import select

    return bool(select.select([sys.stdin], [], [], 0)[0])


def kept_connection(socket_path):
    """A connection whose peer is a dead process: a child connects, hands the socket to this process
    over SCM_RIGHTS and exits, and this process reaps it. Returns (connection, the child's pid)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(socket_path)
            socket.send_fds(theirs, [b"c"], [s.fileno()])
        finally:
            os._exit(0)
    _msg, fds, _flags, _addr = socket.recv_fds(mine, 1, 1)
    os.waitpid(pid, 0)
    return socket.socket(fileno=fds[0]), pid


def on_kept_connection(conn, orders):
    """Carries out `orders` ({"register": [tids], "unregister": [slots]}) on a kept connection. A slot
    granted is marked escapable, RUNNING and never acknowledged. Returns each reply's status, or
    "closed" once the agent closed the connection."""
    results, regions = [], []
    for tid in orders.get("register", []):
        try:
            reply, fd = exchange(conn, request(m.RegOp.REGISTER, tid, sized=True, escapable=2))
        except (OSError, ConnectionError):
            results.append("closed")
            continue
        results.append(reply["status"])
        if reply["status"] == m.RegStatus.OK and fd is not None:
            region = map_fd(fd)
            at = scb_of(region, reply["slot"])
            put(region, m.Scb.ESCAPABLE, 1, at)
            put(region, m.Scb.IN_CRITICAL, 0, at)
            put(region, m.Scb.WORKER_STATE, m.WorkerState.RUNNING, at)
            regions.append(region)
    for slot in orders.get("unregister", []):
        try:
            reply, _ = exchange(conn, request(m.RegOp.UNREGISTER, slot=slot))
            results.append(reply["status"])
        except (OSError, ConnectionError):
            results.append("closed")
    return results, regions


def reachable_regions(paths):
    """Every region this user can map: the given paths (a 1.2 agent's region file, /proc links)."""
    out = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as e:
            out.append({"path": path, "error": e.strerror})
            continue
        try:
            out.append({"path": path, "fd": fd, "map": map_fd(fd)})
        except (OSError, ValueError) as e:
            out.append({"path": path, "error": str(e)})
    return out


def slots(region):
    header = get(region, m.RegionHeader.HEADER_SIZE)
    stride = get(region, m.RegionHeader.SCB_STRIDE)
    count = get(region, m.RegionHeader.SCB_COUNT)
    return [header + i * stride for i in range(count) if header + (i + 1) * stride <= len(region)]


def attack(kind, region, fd, victim_pid, victim_tid):
    """Writes what the attack `kind` writes into one mapped region; returns what happened."""
    if kind == "truncate":
        try:
            os.ftruncate(fd, 0)
            return "truncated"
        except OSError as e:
            return f"truncate refused: {e.strerror}"
    if kind == "fake-slot":
        for at in slots(region):
            if get(region, m.Scb.WORKER_STATE, at) == m.WorkerState.INIT:
                put(region, m.Scb.TID, victim_tid, at)
                put(region, m.Scb.PID, victim_pid, at)
                put(region, m.Scb.ESCAPABLE, 1, at)
                put(region, m.Scb.IN_CRITICAL, 0, at)
                put(region, m.Scb.WORKER_STATE, m.WorkerState.RUNNING, at)
                return "fake slot naming the victim"
        return "no free slot"
    if kind == "mode":
        put(region, m.RegionHeader.SCHEDULER_MODE, m.SchedulerMode.ENFORCED)
        put(region, m.RegionHeader.ESCALATION_POLICY, m.EscalationPolicy.THREAD_KICK)
        put(region, m.RegionHeader.GRACE_NS, 1000)
        return "header says enforced"
    if kind == "odd-seq":
        base = m.RegionHeader.PRESSURE.offset
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            seq = get(region, m.Pressure.SEQ, base)
            put(region, m.Pressure.SEQ, seq | 1, base)
            time.sleep(0.0005)
        return "pressure seq left odd"
    if kind == "gen0":
        put(region, m.RegionHeader.GENERATION, 0)
        return "generation 0"
    if kind == "fill-slots":
        n = 0
        for at in slots(region):
            if get(region, m.Scb.WORKER_STATE, at) == m.WorkerState.INIT:
                put(region, m.Scb.WORKER_STATE, m.WorkerState.REGISTERED, at)
                n += 1
        return f"{n} free slots marked REGISTERED"
    if kind == "slotgen-max":
        for at in slots(region):
            put(region, m.Scb.SLOT_GENERATION, 0xFFFFFFFF, at)
        return "slot_generation 0xffffffff everywhere"
    raise SystemExit(f"unknown attack {kind}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["spin-registered", "busy", "attack", "register-once", "flood-conns", "hog-slots", "keep-conn", "register-then-exit", "refusal-flood", "escape-demotion"])
    p.add_argument("--socket", required=True)
    p.add_argument("--status")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--escapable", action="store_true")
    p.add_argument("--sized", action="store_true", help="send 1.3 (40-byte) requests")
    p.add_argument("--kind")
    p.add_argument("--paths", nargs="*", default=[])
    p.add_argument("--victim-pid", type=int, default=0)
    p.add_argument("--victim-tid", type=int, default=0)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--batch-nice", action="store_true", help="register-then-exit: SCHED_BATCH and nice 19 first")
    p.add_argument("--critical", action="store_true", help="register-then-exit: hold in_critical until told to exit")
    p.add_argument("--until-demoted", action="store_true", help="register-then-exit: spin until demoted first")
    a = p.parse_args()

    if a.action == "keep-conn":
        # A01/A08/A11: the connection outlives the process that made it; orders come on stdin (JSON).
        conn, dead = kept_connection(a.socket)
        print(json.dumps({"dead_pid": dead}), flush=True)
        orders = json.loads(sys.stdin.readline())
        results, _regions = on_kept_connection(conn, orders)
        print(json.dumps({"results": results}), flush=True)
        time.sleep(a.seconds)
        return
    if a.action == "register-then-exit":
        # A02/A13: a worker that registers, goes RUNNING unacknowledged, and exits on "exit" (stdin)
        # without unregistering, so that its id can be given to another user's thread.
        if a.batch_nice:
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, 0, 19)
        reg = Registration(a.socket, sized=True, escapable=2)
        if reg.region is None:
            print(json.dumps({"status": reg.reply["status"]}), flush=True)
            return
        reg.start_running(True)
        reg.set_critical(a.critical)
        print(json.dumps({"status": 0, "pid": os.getpid(), "tid": reg.tid}), flush=True)
        if a.until_demoted:
            end = time.monotonic() + a.seconds
            x = 1
            while policy_of(0) != 5 and time.monotonic() < end:  # SCHED_IDLE
                for _ in range(20000):
                    x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
            print(json.dumps({"demoted": policy_of(0) == 5}), flush=True)
            # Keep running (never sleeping, never acknowledging) so the demotion stays in force.
            while not stdin_ready():
                for _ in range(20000):
                    x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
        else:
            sys.stdin.readline()
        reg.set_critical(False)
        os._exit(0)
    if a.action == "escape-demotion":
        # A10: an escapable worker that never acknowledges, once demoted to SCHED_IDLE, tries to set
        # itself back to SCHED_OTHER (RLIMIT_NICE 0, an unprivileged user's default); then it does
        # what the protocol says lifts an episode: enters a critical section, and later leaves RUNNING.
        import resource

        resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
        reg = Registration(a.socket, sized=True, escapable=2)
        if reg.region is None:
            print(json.dumps({"status": reg.reply["status"]}), flush=True)
            return
        reg.start_running(True)
        x = 1

        def burn_until(good, seconds):
            nonlocal x
            end = time.monotonic() + seconds
            while not good() and time.monotonic() < end:
                for _ in range(20000):
                    x = (x * 6364136223846793005 + 1) & 0xFFFFFFFFFFFFFFFF
            return good()

        out = {"status": 0, "tid": reg.tid}
        # Demoted: the agent changed this thread's policy (it starts SCHED_OTHER); the orchestrator
        # checks it is SCHED_IDLE, which the attempt below must fail to leave.
        out["demoted"] = burn_until(lambda: policy_of(0) != os.SCHED_OTHER, a.seconds)
        out["demoted_to"] = policy_of(0)
        if out["demoted"]:
            try:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                out["escape"] = "allowed"
            except OSError as e:
                out["escape"] = errno_name(e)
            out["policy_after_escape"] = policy_of(0)
            # A critical section lifts the demotion at the agent's next tick.
            reg.set_critical(True)
            out["lifted_by_critical"] = burn_until(lambda: policy_of(0) == os.SCHED_OTHER, 5)
            reg.set_critical(False)
            out["demoted_again"] = burn_until(lambda: policy_of(0) != os.SCHED_OTHER, a.seconds)
            # Leaving RUNNING (REGISTERED: not driven by a runtime) lifts it too.
            put(reg.region, m.Scb.WORKER_STATE, m.WorkerState.REGISTERED, reg.scb)
            out["lifted_by_leaving_running"] = burn_until(lambda: policy_of(0) == os.SCHED_OTHER, 5)
        print(json.dumps(out), flush=True)
        return
    if a.action == "refusal-flood":
        # A06: `count` threads in all (idle), then REGISTERs of a tid that is not the caller's, one at a
        # time (the agent holds refusals back past a per-user rate; nothing is pipelined). After the
        # report the connections stay open until "close" on stdin, so their agent threads can be read.
        threading.stack_size(128 << 10)
        stop = threading.Event()
        idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(a.count - 1)]
        for t in idle:
            t.start()
        conns = []
        for _ in range(a.connections):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(a.socket)
            s.settimeout(60)
            conns.append(s)
        print(json.dumps({"threads": threading.active_count()}), flush=True)
        sys.stdin.readline()
        sent, statuses = 0, set()
        end = time.monotonic() + a.seconds
        data = request(m.RegOp.REGISTER, 1, sized=True)
        while time.monotonic() < end:
            for s in conns:
                reply, _ = exchange(s, data)
                statuses.add(reply["status"])
                sent += 1
        print(json.dumps({"requests": sent, "statuses": sorted(statuses)}), flush=True)
        sys.stdin.readline()
        stop.set()
        return
    if a.action == "busy":
        print(json.dumps({"pid": os.getpid(), "tid": gettid()}), flush=True)
        spin(a.seconds, a.status)
        return
    if a.action == "spin-registered":
        reg = Registration(a.socket, sized=a.sized, escapable=2 if a.escapable else 1)
        if reg.region is None:
            print(json.dumps({"status": reg.reply["status"]}), flush=True)
            return
        reg.start_running(a.escapable)
        print(json.dumps({"status": 0, "pid": os.getpid(), "tid": reg.tid, "slot": reg.reply["slot"]}), flush=True)
        spin(a.seconds, a.status, reg)
        return
    if a.action == "register-once":
        results = []
        for _ in range(a.count):
            try:
                reg = Registration(a.socket, sized=a.sized)
                results.append(reg.reply["status"])
                if reg.reply["status"] == m.RegStatus.OK:
                    reg.unregister()
                reg.sock.close()
            except (OSError, ConnectionError) as e:
                results.append(f"error: {e}")
        print(json.dumps({"results": results, "tid": gettid(), "pid": os.getpid()}), flush=True)
        return
    if a.action == "hog-slots":
        # As many slots as this process gets, one thread each, held for `seconds`.
        got, lock = [], threading.Lock()
        stop = threading.Event()

        def one():
            try:
                reg = Registration(a.socket, sized=a.sized)
            except (OSError, ConnectionError):
                return
            with lock:
                got.append(reg.reply["status"])
            if reg.reply["status"] == m.RegStatus.OK:
                stop.wait(a.seconds)

        threads = [threading.Thread(target=one) for _ in range(a.count)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        with lock:
            print(json.dumps({"ok": sum(1 for s in got if s == m.RegStatus.OK), "results": list(got)}), flush=True)
        for t in threads:
            t.join()
        return
    if a.action == "flood-conns":
        conns = []
        for _ in range(a.count):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(a.socket)
                conns.append(s)
            except OSError:
                s.close()
        print(json.dumps({"opened": len(conns)}), flush=True)
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            alive = []
            for s in conns:
                try:
                    s.send(b"M")  # one byte of a request that never completes
                    alive.append(s)
                except OSError:
                    s.close()
                    ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        ns.connect(a.socket)
                        alive.append(ns)
                    except OSError:
                        ns.close()
            conns = alive
            time.sleep(0.3)
        return
    if a.action == "attack":
        # Its own registration: the region an agent hands this user (all it can reach legitimately).
        own = Registration(a.socket)
        mapped = [{"path": "own registration", "fd": own.fd, "map": own.region}] if own.region is not None else []
        mapped += reachable_regions(a.paths)
        results = []
        for r in mapped:
            if "map" in r:
                results.append({"path": r["path"], "did": attack(a.kind, r["map"], r["fd"], a.victim_pid, a.victim_tid)})
            else:
                results.append({"path": r["path"], "error": r["error"]})
        out = {"own_status": own.reply["status"], "results": results}
        if a.kind == "slotgen-max":
            own.unregister()
            again = Registration(a.socket)
            out["slot_generation_after"] = again.reply["slot_generation"]
            out["again_status"] = again.reply["status"]
        print(json.dumps(out), flush=True)
        time.sleep(a.seconds)
        return


if __name__ == "__main__":
    main()
