# SPDX-License-Identifier: GPL-2.0-only
"""Attacker programs of the bounded-cost attacks (A03, A04, A05, A07, A12, A15 in attacks.py), of the
protocol abuse (A09) and of the reach probe (A14), run as an unprivileged user. Each prints JSON lines
on stdout for the orchestrator; they speak the registration protocol through client.py's raw-bytes
helpers (no SDK).
"""

import argparse
import ctypes
import errno
import json
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import client as c  # noqa: E402
from client import m  # noqa: E402

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
SYS_setresuid = 117 if os.uname().machine == "x86_64" else 147


def say(obj):
    print(json.dumps(obj), flush=True)


def thread_setuid(uid):
    """Changes the uids of the calling thread only (the raw syscall; glibc's wrapper would change
    every thread's): SO_PEERCRED then reports this uid for sockets this thread connects."""
    if libc.syscall(SYS_setresuid, uid, uid, uid) != 0:
        raise OSError(ctypes.get_errno(), f"setresuid({uid})")


def register_once(sock_path, tid=None):
    """One REGISTER of `tid` (default: this thread) on a fresh connection, closed after; the slot stays
    while the thread lives. Returns the status, or an error string."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        reply, fd = c.exchange(s, c.request(m.RegOp.REGISTER, c.gettid() if tid is None else tid))
        if fd is not None:
            os.close(fd)
        return reply["status"]
    except (OSError, ConnectionError) as e:
        return f"error: {e}"
    finally:
        s.close()


def enter_userns():
    """A user namespace of our own, mapped by root as newuidmap would (the orchestrator writes
    `0 <uid> 1` and `1 <subuid start> <n>`; no gid_map, so the supplementary groups, the socket group
    too, still apply). Returns once the map is written."""
    if libc.unshare(CLONE_NEWUSER) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER)")
    say({"pid": os.getpid()})
    if sys.stdin.readline().strip() != "mapped":
        raise SystemExit("no map")


def hold_threads(count, uid_of, sock_path, hold):
    """`count` threads, thread k as namespace uid uid_of(k), each registering itself once (one
    connection at a time, as the per-user connection limit allows) and then holding its slot until
    `hold` is set. Returns the statuses."""
    results = [None] * count
    turn = threading.Lock()
    done = threading.Semaphore(0)

    def one(k):
        try:
            thread_setuid(uid_of(k))
            with turn:
                results[k] = register_once(sock_path)
        except OSError as e:
            results[k] = f"error: {e}"
        done.release()
        hold.wait()

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(count)]
    for t in threads:
        t.start()
    for _ in threads:
        done.acquire()
    return results, threads


def summary(results):
    out = {}
    for r in results:
        out[str(r)] = out.get(str(r), 0) + 1
    return out


def subuid(a):
    """A03: slots (--phase slots: two processes, each holding 32 slots as its own subordinate uid),
    connections (--phase conns: 64 trickling connections from 4 subordinate uids) or domains
    (--phase domains: one registration from each of --count subordinate uids)."""
    enter_userns()
    hold = threading.Event()
    if a.phase == "slots":
        kids = []
        for n in (1, 2):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                results, _ = hold_threads(a.count, lambda k, n=n: n, a.socket, hold)
                os.write(w, (json.dumps(summary(results)) + "\n").encode())
                time.sleep(a.seconds)
                os._exit(0)
            os.close(w)
            kids.append((pid, r))
        got = []
        for pid, r in kids:
            with os.fdopen(r) as f:
                got.append(json.loads(f.readline()))
        say({"phase": "slots", "processes": got})
        time.sleep(a.seconds)
        return
    if a.phase == "conns":
        stop = time.monotonic() + a.seconds
        opened = [0]
        lock = threading.Lock()

        def trickle(k):
            thread_setuid(3 + k % 4)
            s = None
            while time.monotonic() < stop:
                if s is None:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    try:
                        s.connect(a.socket)
                        with lock:
                            opened[0] += 1
                    except OSError:
                        s.close()
                        s = None
                        time.sleep(0.05)
                        continue
                try:
                    s.send(b"M")  # a request that never completes
                except OSError:
                    s.close()
                    s = None
                    continue
                time.sleep(0.3)

        threads = [threading.Thread(target=trickle, args=(k,), daemon=True) for k in range(a.count)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        say({"phase": "conns", "opened": opened[0]})
        for t in threads:
            t.join()
        return
    if a.phase == "domains":
        results, _ = hold_threads(a.count, lambda k: 10 + k, a.socket, hold)
        say({"phase": "domains", "results": summary(results)})
        time.sleep(a.seconds)
        return
    raise SystemExit(f"unknown phase {a.phase}")


def refusal_flood(a):
    """A05: on `--count` connections at once, REGISTER requests for tid 1 (never a thread of ours:
    NOT_CALLER_TID), as fast as the agent answers, for `--seconds`; a closed connection is reopened.
    Reports the replies received."""
    stop = time.monotonic() + a.seconds
    replies = [0] * a.count
    closed = [0] * a.count
    data = c.request(m.RegOp.REGISTER, 1)

    def flood(k):
        s = None
        while time.monotonic() < stop:
            if s is None:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(a.socket)
                    s.settimeout(2.0)
                except OSError:
                    s.close()
                    s = None
                    time.sleep(0.01)
                    continue
            try:
                reply, _ = c.exchange(s, data)
                if reply["status"] == m.RegStatus.NOT_CALLER_TID:
                    replies[k] += 1
            except (OSError, ConnectionError):
                closed[k] += 1
                s.close()
                s = None

    threads = [threading.Thread(target=flood, args=(k,)) for k in range(a.count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    say({"refusals": sum(replies), "closed": sum(closed)})


def yield_overflow(a):
    """A12: registers, runs without yielding with preempt_seq at MAX (the agent's next hint adds one),
    then writes MAX, 0, MAX to its yield_count (the agent sums the deltas), each held a while."""
    reg = c.Registration(a.socket)
    if reg.region is None:
        say({"status": reg.reply["status"]})
        return
    reg.start_running(True)
    top = 0xFFFFFFFFFFFFFFFF
    c.put(reg.region, m.Scb.PREEMPT_SEQ, top, reg.scb)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end and c.get(reg.region, m.Scb.PREEMPT_SEQ, reg.scb) == top:
        for _ in range(20000):
            pass
    hinted = c.get(reg.region, m.Scb.PREEMPT_SEQ, reg.scb) != top
    for value in (top, 0, top):
        c.put(reg.region, m.Scb.YIELD_COUNT, value, reg.scb)
        time.sleep(0.5)
    say({"status": 0, "hinted_past_max": hinted, "preempt_seq": c.get(reg.region, m.Scb.PREEMPT_SEQ, reg.scb)})


def many_clients(a):
    """A07: `--count` registrations, each from a new process (forked, registers its main thread,
    exits), `--parallel` at a time. Reports how many were OK."""
    ok = 0
    other = {}
    running = {}
    started = 0
    while started < a.count or running:
        while started < a.count and len(running) < a.parallel:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                status = register_once(a.socket)
                os.write(w, f"{status}\n".encode())
                os._exit(0)
            os.close(w)
            running[pid] = r
            started += 1
        pid, _ = os.wait()
        r = running.pop(pid)
        with os.fdopen(r) as f:
            status = f.read().strip()
        if status == "0":
            ok += 1
        else:
            other[status] = other.get(status, 0) + 1
    say({"ok": ok, "other": other})


def connect_early(a):
    """A15: spins on connect() to the socket path until it succeeds or `--seconds` pass; a connection
    made is kept, and once the agent serves (a line on stdin) a REGISTER is sent on it."""
    end = time.monotonic() + a.seconds
    s = None
    refused = 0
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(a.socket)
            break
        except OSError:
            refused += 1
            s.close()
            s = None
    say({"connected": s is not None, "failed_connects": refused})
    if s is None:
        return
    r, _, _ = select.select([sys.stdin], [], [], 30)
    if r:
        sys.stdin.readline()
    try:
        reply, fd = c.exchange(s, c.request(m.RegOp.REGISTER, c.gettid()))
        say({"status": reply["status"], "region": fd is not None})
    except (OSError, ConnectionError) as e:
        say({"status": f"error: {e}"})


def trickle_http(a):
    """A04: one TCP connection to the metrics endpoint sending a byte of a request every `--every`
    seconds, reopened when cut off, for `--seconds`."""
    host, port = a.address.rsplit(":", 1)
    end = time.monotonic() + a.seconds
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 8192
    s, at, cut = None, 0, 0
    say({"started": True})
    while time.monotonic() < end:
        if s is None:
            try:
                s = socket.create_connection((host, int(port)), timeout=2)
                at = 0
            except OSError:
                time.sleep(0.1)
                continue
        try:
            s.send(request[at : at + 1])
            at = (at + 1) % len(request)
        except OSError:
            cut += 1
            s.close()
            s = None
            continue
        time.sleep(a.every)
    say({"cut_off": cut})


def protocol_abuse(a):
    """A09: traffic no client sends. Each phase reports what the agent did with it."""
    out = {}
    tid = c.gettid()
    register = c.request(m.RegOp.REGISTER, tid)

    def conn(timeout=15):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(a.socket)
        s.settimeout(timeout)
        return s

    def closed(s, within=15):
        """True once the agent has closed `s` (EOF or reset) within `within` seconds; unread replies are skipped."""
        s.settimeout(within)
        try:
            while s.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True
        except OSError:
            return False

    # 40 REGISTERs of this thread in one write: every one answered, in order (OK, then ALREADY_REGISTERED).
    s = conn()
    s.sendall(register * 40)
    statuses = []
    for _ in range(40):
        got = b""
        while len(got) < c.REPLY_LEN:
            chunk, anc, _f, _a = s.recvmsg(c.REPLY_LEN - len(got), socket.CMSG_SPACE(4))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    os.close(int.from_bytes(payload[:4], "little"))
            if not chunk:
                break
            got += chunk
        if len(got) < c.REPLY_LEN:
            break
        statuses.append(c.get(got, m.RegReply.STATUS))
    out["pipelined"] = sorted(set(statuses)) if len(statuses) == 40 and statuses[0] == m.RegStatus.OK else statuses
    s.close()  # the slot stays this thread's while it lives; released below
    # 200 descriptors passed (SCM_RIGHTS) with a request: answered; the agent keeps none.
    s = conn()
    nulls = [os.open("/dev/null", os.O_RDONLY) for _ in range(200)]
    socket.send_fds(s, [c.request(m.RegOp.UNREGISTER, slot=0)], nulls)
    for fd in nulls:
        os.close(fd)
    reply = s.recv(c.REPLY_LEN)
    out["fds_passed"] = c.get(reply, m.RegReply.STATUS) if len(reply) == c.REPLY_LEN else f"{len(reply)} bytes"
    # The connection's own socket passed over itself.
    socket.send_fds(s, [c.request(m.RegOp.UNREGISTER, slot=0)], [s.fileno()])
    reply = s.recv(c.REPLY_LEN)
    out["own_socket_passed"] = c.get(reply, m.RegReply.STATUS) if len(reply) == c.REPLY_LEN else f"{len(reply)} bytes"
    s.close()
    # 1 MiB of garbage: the connection is closed.
    s = conn()
    try:
        s.sendall(os.urandom(1 << 20))
    except OSError:
        pass
    out["garbage_closed"] = closed(s)
    s.close()
    # An idle connection is closed (the agent's idle limit is 5 s).
    s = conn()
    t0 = time.monotonic()
    out["idle_closed"] = closed(s, 20)
    out["idle_seconds"] = round(time.monotonic() - t0, 1)
    s.close()
    # A client that writes requests and never reads a reply is cut off.
    s = conn()
    s.settimeout(1)
    t0, cut = time.monotonic(), False
    while time.monotonic() - t0 < 30 and not cut:
        try:
            s.send(register)
        except (BrokenPipeError, ConnectionResetError):
            cut = True
        except socket.timeout:
            pass
    out["never_reading_cut_off"] = cut
    s.close()
    say(out)


def probe(a):
    """A14: what this user can reach of the agent's and another user's private state. Each probe is
    "ok" if it got through, else the errno's name; a non-member also tries to register."""
    out = {}

    def attempt(name, what):
        try:
            what()
            out[name] = "ok"
        except OSError as e:
            out[name] = c.errno_name(e)

    def connect(path):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        finally:
            s.close()

    def read(path):
        with open(path, "rb") as f:
            f.read(1)

    def open_links(directory):
        """Lists `directory` and opens its entries (descriptors, mappings) for reading, without
        waiting on a pipe; a socket's entry cannot be opened by anyone (ENXIO) and one may close
        meanwhile (ENOENT)."""
        for name in os.listdir(directory):
            try:
                os.close(os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.ENOENT):
                    raise

    attempt("stats socket", lambda: connect(a.socket + ".stats"))
    attempt("journal", lambda: read(a.socket + ".journal"))
    agent, victim = a.pids
    attempt("agent fd", lambda: open_links(f"/proc/{agent}/fd"))
    attempt("agent map_files", lambda: open_links(f"/proc/{agent}/map_files"))
    attempt("agent mem", lambda: os.close(os.open(f"/proc/{agent}/mem", os.O_RDONLY)))
    attempt("victim map_files", lambda: open_links(f"/proc/{victim}/map_files"))
    attempt("victim fd", lambda: open_links(f"/proc/{victim}/fd"))
    if a.register:
        attempt("register", lambda: connect(a.socket))
    say(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=["subuid", "refusal-flood", "yield-overflow", "many-clients", "connect-early", "trickle-http", "probe", "protocol-abuse"])
    p.add_argument("--socket")
    p.add_argument("--phase")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--address")
    p.add_argument("--every", type=float, default=0.5)
    p.add_argument("--pids", type=int, nargs=2, help="probe: the agent's pid and a victim worker's pid")
    p.add_argument("--register", action="store_true", help="probe: also connect to the registration socket")
    a = p.parse_args()
    {
        "subuid": subuid,
        "refusal-flood": refusal_flood,
        "yield-overflow": yield_overflow,
        "many-clients": many_clients,
        "connect-early": connect_early,
        "trickle-http": trickle_http,
        "probe": probe,
        "protocol-abuse": protocol_abuse,
    }[a.action](a)


if __name__ == "__main__":
    main()
