# SPDX-License-Identifier: GPL-2.0-only
"""Attack tests of the security reviews (S1-S12 of the first, A01-A15 of the second, each defined with
its rule in scheduler/SECURITY.md): each one reproduces an attack with real unprivileged users against
the real agent and checks it has no effect.

Attacks that need a process or thread to get a dead one's id do it deterministically: as root,
clone3() with set_tid (spawn_at.c, compiled here with cc) creates the victim with exactly that pid,
while the agent is stopped (SIGSTOP) so it cannot notice the death before the reuse; then it
continues. No verdict depends on winning a race against pid_max.

Run as root (it creates the users `morpheus-atk` and `morpheus-vic` and the group `morpheus-trust`,
idempotently, and removes them at the end; processes run as them through setpriv):

    python3 scheduler/e2e-trust/attacks.py --bin target/debug/scx_morpheus [S1 S3 ...]
    python3 scheduler/e2e-trust/attacks.py --bin OLD_BINARY --old     # a 1.2-era agent: --region file

`--old` starts the agent the way a 1.2-era agent is started (a region file beside the socket, no
--socket-group) so the same attacks can be run against it: there they succeed, which is what the
review found. Prints one line per attack (PASS: no effect; FAIL: the attack worked) and exits 1 if
any attack worked.
"""

import argparse
import collections
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "abi", "python"))
import morpheus_abi  # noqa: E402
CLIENT = os.path.join(HERE, "client.py")
ABUSE = os.path.join(HERE, "abuse.py")
PYTHON = "/usr/bin/python3"  # a system interpreter every user can run
ATTACKER, VICTIM, GROUP = "morpheus-atk", "morpheus-vic", "morpheus-trust"
SCHED_IDLE = 5


def run(cmd, **kw):
    return subprocess.run(cmd, check=False, capture_output=True, text=True, **kw)


def ensure_users():
    if run(["getent", "group", GROUP]).returncode != 0:
        subprocess.run(["groupadd", "--system", GROUP], check=True)
    for user in (ATTACKER, VICTIM):
        if run(["id", user]).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", GROUP, user], check=True)
        else:
            subprocess.run(["usermod", "-aG", GROUP, user], check=True)


def remove_users():
    for user in (ATTACKER, VICTIM):
        run(["pkill", "-KILL", "-u", user])  # only the test's own users' processes
        run(["userdel", user])
    run(["groupdel", GROUP])


def as_user(user, args):
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--inh-caps=-all", "--"] + args


def client(user, *args):
    return as_user(user, [PYTHON, CLIENT, *args])


def abuse(user, *args):
    return as_user(user, [PYTHON, ABUSE, *args])


def outsider(args):
    """A real unprivileged user outside the socket group (nobody, no supplementary groups)."""
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all", "--"] + args


def uid(user):
    return pwd.getpwnam(user).pw_uid


class Agent:
    def __init__(self, binary, old, directory, extra=(), region_dir=None, verbose=True, wrap=(), popen=None):
        self.dir = directory
        self.socket = os.path.join(directory, "agent.sock")
        args = [binary, "--backend", "sim", "--socket", self.socket, "--slice-us", "2000", "--grace-us", "2000"] + (["-v"] if verbose else [])
        if old:
            args += ["--region", os.path.join(region_dir or directory, "region")]
        else:
            args += ["--socket-group", GROUP]
        self.stderr_path = os.path.join(tempfile.gettempdir(), f"trust-agent-{os.getpid()}-{time.monotonic_ns()}.log")
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(list(wrap) + args + list(extra), stdout=subprocess.DEVNULL, stderr=self.stderr, **(popen or {}))
        STARTED.append(self.proc)

    def wait_ready(self, timeout=20):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(self.socket)
                s.close()
                return True
            except OSError:
                time.sleep(0.02)
        return False

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        self.stderr.flush()
        with open(self.stderr_path) as f:
            return f.read()

    def pause(self):
        """SIGSTOP, returning once every thread of the agent is stopped."""
        os.kill(self.proc.pid, signal.SIGSTOP)

        def stopped():
            try:
                tasks = os.listdir(f"/proc/{self.proc.pid}/task")
                states = [open(f"/proc/{self.proc.pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0] for t in tasks]
            except OSError:
                return False
            return all(st in ("T", "t") for st in states)

        if not eventually(10.0, stopped):
            raise RuntimeError("the agent did not stop")

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
        if os.path.exists(self.stderr_path):
            os.unlink(self.stderr_path)

    def kill9(self):
        self.proc.kill()
        self.proc.wait()


# Everything a test started or created, undone after each test whatever happened.
STARTED = []
CREATED = []
GROUPS = []  # process groups (sessions) a test started, killed whole


def kill_group(p):
    """Kills the process group `p` leads (it and every process it forked), then reaps `p`."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()
# Processes created at an exact pid: (spawn_at process, the pid it created).
PLACED = []
# cgroup directories a test created (removed once empty).
CGROUPS = []


def private_dir():
    """A root-owned 0755 runtime directory (systemd's RuntimeDirectory= style)."""
    d = tempfile.mkdtemp(prefix="morpheus-trust-")
    os.chmod(d, 0o755)
    CREATED.append(d)
    return d


def cleanup():
    while GROUPS:
        try:
            os.killpg(GROUPS.pop(), signal.SIGKILL)
        except ProcessLookupError:
            pass
    while PLACED:
        helper, pid = PLACED.pop()
        if helper.poll() is None:  # not yet reaped by its parent: `pid` is still the process we made
            os.kill(pid, signal.SIGKILL)
            helper.wait()
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()
    while CREATED:
        shutil.rmtree(CREATED.pop(), ignore_errors=True)
    while CGROUPS:
        d = CGROUPS.pop()
        if eventually(5.0, lambda: not open(os.path.join(d, "cgroup.procs")).read().strip()):
            os.rmdir(d)


def status_file():
    """Where a victim (another user) may write its status: a fresh sticky world-writable directory."""
    d = tempfile.mkdtemp(prefix="morpheus-trust-status-")
    os.chmod(d, 0o1777)
    CREATED.append(d)
    return os.path.join(d, "victim.json")


def spawn(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    STARTED.append(p)
    return p


def first_line(proc, timeout=20):
    import select

    r, _, _ = select.select([proc.stdout], [], [], timeout)
    if not r:
        raise RuntimeError(f"{proc.args}: no output within {timeout} s")
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{proc.args}: exited: {proc.stderr.read()}")
    return json.loads(line)


def policy(tid):
    try:
        return os.sched_getscheduler(tid)
    except OSError:
        return None


def never(window, bad):
    """True if `bad()` stays false for the whole window (the attack had no effect)."""
    end = time.monotonic() + window
    while time.monotonic() < end:
        if bad():
            return False
        time.sleep(0.02)
    return True


def eventually(timeout, good):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if good():
            return True
        time.sleep(0.02)
    return False


def read_status(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def nice_of(pid):
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def spawn_at_binary():
    """spawn_at.c, compiled once per run."""
    if not SPAWN_AT:
        d = tempfile.mkdtemp(prefix="morpheus-trust-spawn-")
        os.chmod(d, 0o755)
        out = os.path.join(d, "spawn_at")
        subprocess.run(["cc", "-O2", "-Wall", "-o", out, os.path.join(HERE, "spawn_at.c")], check=True)
        SPAWN_AT.append(out)
    return SPAWN_AT[0]


SPAWN_AT = []


def spawn_at(pid, user, args, cgroup=None):
    """Creates a process of `user` with exactly `pid` running `args`; returns its spawn_at parent
    once the process runs `args` (its uid is the user's and it has exec'd)."""
    helper = subprocess.Popen([spawn_at_binary(), str(pid), user] + ([cgroup] if cgroup else []) + ["--"] + args,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    PLACED.append((helper, pid))

    def running():
        try:
            with open(f"/proc/{pid}/status") as f:
                uids = next(l for l in f if l.startswith("Uid:")).split()
            return int(uids[1]) == uid(user) and os.readlink(f"/proc/{pid}/exe") != os.path.realpath(spawn_at_binary())
        except (OSError, StopIteration):
            return False

    if not eventually(10.0, running):
        helper.kill()
        raise RuntimeError(f"spawn_at {pid} {user}: the process did not start: {helper.stderr.read() if helper.poll() is not None else ''}")
    return helper


def gone(pid):
    return not os.path.exists(f"/proc/{pid}")


def stop_all(*procs):
    for p in procs:
        if p and p.poll() is None:
            p.kill()
            p.wait()


class Suite:
    def __init__(self, binary, old):
        self.bin, self.old = binary, old

    def agent(self, directory=None, extra=(), region_dir=None, verbose=True, popen=None):
        d = directory or private_dir()
        a = Agent(self.bin, self.old, d, extra, region_dir, verbose=verbose, popen=popen)
        if not a.wait_ready():
            log = a.log()
            a.stop()
            raise RuntimeError(f"agent did not start: {log}")
        return a

    def region_paths(self, agent):
        """Paths through which an attacker might reach regions it was not given."""
        paths = [os.path.join(agent.dir, "region")]
        try:
            paths += [f"/proc/{agent.proc.pid}/fd/{n}" for n in os.listdir(f"/proc/{agent.proc.pid}/fd")]
        except OSError:
            pass
        return paths

    def victim_spinner(self, agent, escapable, status):
        args = ["spin-registered", "--socket", agent.socket, "--status", status, "--seconds", "60"]
        if escapable:
            args.append("--escapable")
        p = spawn(client(VICTIM, *args))
        info = first_line(p)
        if info.get("status") != 0:
            raise RuntimeError(f"victim could not register: {info}")
        return p, info

    # --- the attacks --------------------------------------------------------------------------------

    def s1_symlink_clobber(self):
        """S1: a symlink planted where the agent creates its lock/journal must not clobber a root file."""
        base = tempfile.mkdtemp(prefix="morpheus-trust-s1-")
        CREATED.append(base)
        os.chmod(base, 0o755)
        precious = os.path.join(base, "precious")
        with open(precious, "w") as f:
            f.write("precious root data\n")
        attacker_dir = os.path.join("/tmp", f"morpheus-trust-s1-atk-{os.getpid()}")
        CREATED.append(attacker_dir)
        subprocess.run(as_user(ATTACKER, ["mkdir", "-m", "0777", attacker_dir]), check=True)
        for name in ("agent.sock.lock", "agent.sock.journal", "region.lock"):
            subprocess.run(as_user(ATTACKER, ["ln", "-s", precious, os.path.join(attacker_dir, name)]), check=True)
        a = Agent(self.bin, self.old, attacker_dir)
        a.wait_ready(5)
        log = a.log()
        a.stop()
        with open(precious) as f:
            intact = f.read() == "precious root data\n"
        shutil.rmtree(attacker_dir, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
        return intact, "root file intact" if intact else f"root file clobbered through the planted symlink; agent log: {log[-300:]}"

    def s10_directory_owner(self):
        """S10: a directory another user owns must be refused, not obeyed (a held lock, a swapped file)."""
        attacker_dir = os.path.join("/tmp", f"morpheus-trust-s10-atk-{os.getpid()}")
        CREATED.append(attacker_dir)
        subprocess.run(as_user(ATTACKER, ["mkdir", "-m", "0755", attacker_dir]), check=True)
        holders = []
        for name in ("agent.sock.lock", "region.lock"):
            path = os.path.join(attacker_dir, name)
            subprocess.run(as_user(ATTACKER, ["touch", path]), check=True)
            holders.append(subprocess.Popen(as_user(ATTACKER, ["flock", "-n", path, "sleep", "30"])))
            STARTED.append(holders[-1])
        time.sleep(0.3)
        a = Agent(self.bin, self.old, attacker_dir)
        started = a.wait_ready(5)
        log = a.log()
        a.stop()
        stop_all(*holders)
        shutil.rmtree(attacker_dir, ignore_errors=True)
        refused_by_owner = (not started) and f"belongs to uid {uid(ATTACKER)}" in log
        # In a root-owned directory the attacker cannot create the lock at all.
        d = private_dir()
        cannot_plant = run(as_user(ATTACKER, ["touch", os.path.join(d, "agent.sock.lock")])).returncode != 0
        shutil.rmtree(d, ignore_errors=True)
        ok = refused_by_owner and cannot_plant
        return ok, "agent refuses a directory it does not own, naming the owner" if ok else f"attacker-owned directory controls the agent: {log.strip()[-200:]}"

    def s2_truncate(self):
        """S2: truncating the region must not kill the agent or other users' workers."""
        a = self.agent()
        status = status_file()
        victim, _ = self.victim_spinner(a, False, status)
        out = first_line(spawn(client(ATTACKER, "attack", "--kind", "truncate", "--socket", a.socket, "--seconds", "0", "--paths", *self.region_paths(a))))
        time.sleep(1.0)
        agent_alive, victim_alive = a.alive(), victim.poll() is None
        ok = agent_alive and victim_alive
        stop_all(victim)
        a.stop()
        did = [r["did"] for r in out["results"] if "did" in r]
        return ok, f"agent and victim alive; attacker: {did}" if ok else f"agent alive={agent_alive} victim alive={victim_alive}; attacker: {did}"

    def s3_fake_slot(self):
        """S3: a slot forged to name another user's process must not get that process demoted."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        victim = spawn(client(VICTIM, "busy", "--socket", a.socket, "--seconds", "60"))
        v = first_line(victim)
        attacker = spawn(client(ATTACKER, "attack", "--kind", "fake-slot", "--socket", a.socket, "--seconds", "10",
                                "--victim-pid", str(v["pid"]), "--victim-tid", str(v["tid"]), "--paths", *self.region_paths(a)))
        first_line(attacker)
        ok = never(4.0, lambda: policy(v["tid"]) == SCHED_IDLE)
        stop_all(victim, attacker)
        a.stop()
        return ok, "victim never demoted" if ok else "victim demoted to SCHED_IDLE through a forged slot"

    def s4_config_readback(self):
        """S4: an observer-mode agent must stay observer whatever the header says."""
        a = self.agent()
        status = status_file()
        victim, info = self.victim_spinner(a, True, status)
        attacker = spawn(client(ATTACKER, "attack", "--kind", "mode", "--socket", a.socket, "--seconds", "10", "--paths", *self.region_paths(a)))
        first_line(attacker)
        ok = never(4.0, lambda: policy(info["tid"]) == SCHED_IDLE)
        stop_all(victim, attacker)
        a.stop()
        return ok, "observer agent never escalated" if ok else "observer agent switched to enforced by a header write; victim demoted"

    def s5_odd_seq(self):
        """S5: an odd pressure seq must not freeze the agent (hints keep coming)."""
        a = self.agent()
        status = status_file()
        victim, _ = self.victim_spinner(a, False, status)
        attacker = spawn(client(ATTACKER, "attack", "--kind", "odd-seq", "--socket", a.socket, "--seconds", "10", "--paths", *self.region_paths(a)))
        first_line(attacker)  # printed after 2 s of keeping seq odd
        before = read_status(status).get("preempt_seq", 0)
        ok = eventually(5.0, lambda: read_status(status).get("preempt_seq", 0) > before)
        stop_all(victim, attacker)
        a.stop()
        return ok, "hints keep flowing" if ok else "agent froze: no hint after the odd seq"

    def s6_hostile_writes(self):
        """S6: generation := 0 and free slots marked REGISTERED must not reach another user."""
        a = self.agent()
        status = status_file()
        victim, _ = self.victim_spinner(a, False, status)
        attacker = spawn(client(ATTACKER, "attack", "--kind", "gen0", "--socket", a.socket, "--seconds", "5", "--paths", *self.region_paths(a)))
        first_line(attacker)
        time.sleep(0.3)
        generation_kept = never(1.0, lambda: read_status(status).get("generation", 1) == 0)
        filler = spawn(client(ATTACKER, "attack", "--kind", "fill-slots", "--socket", a.socket, "--seconds", "5", "--paths", *self.region_paths(a)))
        first_line(filler)
        reg = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket)))
        can_register = reg["results"] == [0]
        stop_all(victim, attacker, filler)
        a.stop()
        ok = generation_kept and can_register
        return ok, "victim kept its generation and could register" if ok else f"generation kept={generation_kept}, victim registration={reg['results']}"

    def s7_kill9_restores(self):
        """S7: after kill -9 mid-escalation the next start restores the victim and retires the old region."""
        d = private_dir()
        a = self.agent(d, extra=["--mode", "enforced", "--policy", "kick"])
        status = status_file()
        victim, info = self.victim_spinner(a, True, status)
        demoted = eventually(20.0, lambda: policy(info["tid"]) == SCHED_IDLE)
        if not demoted:
            stop_all(victim)
            a.stop()
            return False, "set-up failed: the victim was never demoted (escalation did not happen)"
        a.kill9()
        a.stop()
        b = self.agent(d, extra=["--mode", "observer"])
        restored = eventually(10.0, lambda: policy(info["tid"]) == os.SCHED_OTHER)
        retired = eventually(10.0, lambda: read_status(status).get("generation", 1) == 0)
        log = b.log()
        stop_all(victim)
        b.stop()
        ok = restored and retired
        return ok, "demotion undone and old region retired by the next start" if ok else f"restored={restored} retired={retired}: {log[-300:]}"

    def s8_dos(self):
        """S8: one user can neither take every slot nor lock others out with trickling connections."""
        a = self.agent(extra=["--max-workers", "8"])
        hogs = [spawn(client(ATTACKER, "hog-slots", "--socket", a.socket, "--count", "8", "--seconds", "20")) for _ in range(2)]
        for h in hogs:
            first_line(h)
        slots = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket)))["results"]
        stop_all(*hogs)
        flood = spawn(client(ATTACKER, "flood-conns", "--socket", a.socket, "--count", "70", "--seconds", "8"))
        first_line(flood)
        time.sleep(1.5)
        conns = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket, "--count", "10")))["results"]
        stop_all(flood)
        a.stop()
        ok = slots == [0] and conns == [0] * 10
        return ok, "victim registers despite slot hogging and a connection flood" if ok else f"victim after hogging: {slots}; during flood: {conns}"

    def s9_small_tmpfs(self):
        """S9: on a too-small tmpfs the agent must not die of SIGBUS later."""
        mnt = tempfile.mkdtemp(prefix="morpheus-trust-s9-")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", mnt], check=True)
        try:
            a = Agent(self.bin, self.old, mnt, ["--max-workers", "16384"])
            started = a.wait_ready(10)
            reg = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket))) if started else {"results": []}
            time.sleep(0.5)
            ok = started and a.alive() and reg["results"] == [0]
            died = a.proc.poll()
            a.stop()
        finally:
            run(["umount", mnt])
            os.rmdir(mnt)
        return ok, "agent serves (its regions are preallocated memfds, not tmpfs files)" if ok else f"agent exit status {died}"

    def s11_slot_generation(self):
        """S11: slot_generation at 0xffffffff must not wrap to 0 when the slot is reassigned."""
        a = self.agent()
        out = first_line(spawn(client(ATTACKER, "attack", "--kind", "slotgen-max", "--socket", a.socket, "--seconds", "0", "--paths", *self.region_paths(a))))
        a.stop()
        after = out.get("slot_generation_after")
        ok = out.get("again_status") == 0 and after not in (0, None)
        return ok, f"slot_generation after 0xffffffff is {after}" if ok else f"slot_generation wrapped to {after}"

    def s12_pid_namespace(self):
        """S12: a client in its own pid namespace registers its thread."""
        a = self.agent()
        p = spawn(["unshare", "--pid", "--fork", PYTHON, CLIENT, "register-once", "--socket", a.socket])
        out = first_line(p)
        a.stop()
        ok = out["results"] == [0] and out["tid"] == 1
        return ok, "a namespaced client (tid 1 in its namespace) registered" if ok else f"refused: {out}"

    # --- bounded work and state per user (review 2: A03, A04, A05, A07, A12, A15) -------------------

    def a03_subuid_domains(self):
        """A03: a user's subordinate uids (newuidmap) count as one user: they take no more slots, connections or descriptors."""
        # A temporary /etc/subuid range for the attacker beyond every range there, restored after.
        path = "/etc/subuid"
        saved = open(path).read() if os.path.exists(path) else None
        ends = [int(f[1]) + int(f[2]) for f in (l.split(":") for l in (saved or "").splitlines()) if len(f) == 3 and f[1].isdigit() and f[2].isdigit()]
        start, count = max([200_000_000] + ends), 4096
        with open(path, "a") as f:
            f.write(f"{'' if not saved or saved.endswith(chr(10)) else chr(10)}{ATTACKER}:{start}:{count}\n")
        try:
            return self._a03(start, count)
        finally:
            if saved is None:
                os.unlink(path)
            else:
                with open(path, "w") as f:
                    f.write(saved)

    def _a03(self, start, count):
        import resource

        # systemd's soft limit for a service without LimitNOFILE=, here as the hard limit too (the
        # agent may only raise its soft limit to the hard one): descriptors are bounded by the caps.
        limit = {"preexec_fn": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))}
        a = self.agent(extra=["--max-workers", "64"], popen=limit)

        def attacker(phase, n, seconds=60):
            p = subprocess.Popen(abuse(ATTACKER, "subuid", "--socket", a.socket, "--phase", phase, "--count", str(n), "--seconds", str(seconds)),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            STARTED.append(p)
            GROUPS.append(p.pid)
            pid = first_line(p)["pid"]
            # As newuidmap writes it: the user itself as 0, its subordinate range from 1. No gid_map:
            # the process keeps its supplementary groups, the socket group too.
            with open(f"/proc/{pid}/uid_map", "w") as f:
                f.write(f"0 {uid(ATTACKER)} 1\n1 {start} {count}\n")
            p.stdin.write("mapped\n")
            p.stdin.flush()
            return p, first_line(p, timeout=120)

        def victim(n=1):
            return first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket, "--count", str(n))))["results"]

        notes = []
        # (a) slots: two processes, as two subordinate uids, 32 slots each (each uid's own cap).
        p, held = attacker("slots", 32)
        slots = victim()
        notes.append(f"slots: attacker {held['processes']}, victim {slots}")
        kill_group(p)
        time.sleep(0.5)  # the attacker's threads are gone; the next reclaim frees their slots
        # (b) connections: 64 trickling connections from four subordinate uids.
        p, opened = attacker("conns", 64, seconds=8)
        time.sleep(1.0)
        conns = victim(10)
        notes.append(f"connections: attacker opened {opened['opened']}, victim {conns}")
        kill_group(p)
        # (c) descriptors: one registration from each of 1100 subordinate uids.
        p, dom = attacker("domains", 1100)
        fds = len(os.listdir(f"/proc/{a.proc.pid}/fd")) if a.alive() else -1
        last = victim()
        notes.append(f"domains: attacker {dom['results']}, agent descriptors {fds}, victim {last}")
        kill_group(p)
        log = a.log()
        alive = a.alive()
        a.stop()
        ok = alive and slots == [0] and conns == [0] * 10 and last == [0] and 0 <= fds < 256
        return ok, "; ".join(notes) + ("" if ok else f"; agent alive={alive}; log tail: {log[-400:]}")

    def a04_slow_metrics_client(self):
        """A04: a client trickling its request to the OpenMetrics endpoint does not block root's scrapes."""
        import urllib.request

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        a = self.agent(extra=["--metrics", f"127.0.0.1:{port}"])
        slow = spawn(abuse(ATTACKER, "trickle-http", "--address", f"127.0.0.1:{port}", "--every", "0.5", "--seconds", "60"))
        first_line(slow)
        time.sleep(1.0)
        answered = []
        for _ in range(3):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    answered.append(r.status == 200 and b"# EOF" in r.read())
            except OSError as e:
                answered.append(f"error: {e}")
        stop_all(slow)
        a.stop()
        ok = answered == [True] * 3
        return ok, f"3 scrapes beside a trickling client: {answered}"

    def a05_log_flood(self):
        """A05: a flood of refused requests is neither logged line by line at default verbosity nor served faster than a bounded rate."""
        a = self.agent(verbose=False)
        idle0 = agent_cpu(a)
        time.sleep(2.0)
        idle = (agent_cpu(a) - idle0) / 2.0  # the agent's own CPU per second without the flood
        before = a.log().count("\n")
        cpu0 = agent_cpu(a)
        t0 = time.monotonic()
        out = first_line(spawn(abuse(ATTACKER, "refusal-flood", "--socket", a.socket, "--count", "16", "--seconds", "4")), timeout=60)
        elapsed = time.monotonic() - t0
        cpu = agent_cpu(a) - cpu0
        during = a.log().count("\n") - before
        # The refusals are still reported: one summary within the interval after the flood.
        summarised = eventually(15.0, lambda: "refused" in a.log() and "NOT_CALLER_TID from uid %d" % uid(ATTACKER) in a.log())
        lines = [l for l in a.log().splitlines()[before:]]
        a.stop()
        # The agent's budget: 50 refusals at once, then 50 a second, per user (one in flight per connection).
        allowed = 50 + 50 * elapsed + 16
        per = max(cpu - idle * elapsed, 0.0) / max(out["refusals"], 1) * 1000
        ok = during <= 2 and summarised and out["refusals"] <= allowed
        detail = (f"{out['refusals']} refusals answered in {elapsed:.1f} s (budget {allowed:.0f}), {out['closed']} closed; "
                  f"{during} log line(s) during the flood; agent CPU {cpu:.2f} s ({idle * elapsed:.2f} s of it idle ticks; {per:.2f} ms per answered refusal); summary: "
                  f"{next((l for l in lines if 'refused' in l), 'none')[:300]}")
        return ok, detail

    def a07_journal_bounded(self):
        """A07: the effect journal stays bounded under registrations from new processes, and recovery restores an effect past 64 MiB."""
        n = int(os.environ.get("A07_REGISTRATIONS", "4000"))
        d = private_dir()
        a = self.agent(d)
        journal = os.path.join(d, "agent.sock.journal")
        out = first_line(spawn(abuse(ATTACKER, "many-clients", "--socket", a.socket, "--count", str(n), "--parallel", "4")), timeout=max(600, n // 10))
        size = os.path.getsize(journal)
        a.stop()
        grew_bounded = out["ok"] == n and size <= (64 << 10) + 256
        # A journal a long-running agent could leave: 70 MiB of client lines, then the demotion of a
        # victim thread that is in force (SCHED_IDLE, set here as the killed agent would have).
        v = first_line(spawn(client(VICTIM, "busy", "--socket", "-", "--seconds", "60")))
        tid = v["tid"]
        os.sched_setscheduler(tid, SCHED_IDLE, os.sched_param(0))
        with open(f"/proc/{tid}/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        line = b"client 4999999 1234567890\n"
        with open(journal, "wb") as f:
            f.write(b"instance 1\n")
            chunk = line * ((1 << 20) // len(line))
            for _ in range(70):
                f.write(chunk)
            f.write(f"demote {tid} {start} {os.SCHED_OTHER} 0 0\n".encode())
        b = Agent(self.bin, self.old, d)
        started = b.wait_ready(120)
        restored = policy(tid) == os.SCHED_OTHER
        log = b.log()
        b.stop()
        refused_naming = (not started) and "journal" in log
        recovered = restored or refused_naming
        ok = grew_bounded and recovered
        return ok, (f"{n} registrations from new processes ({out}): journal {size} bytes ({size / n:.1f} per registration); "
                    f"a demotion after 70 MiB: {'restored' if restored else 'start refused naming the journal' if refused_naming else 'NOT restored'}")

    def a12_counter_overflow(self):
        """A12: counters overflowed from the SCB (yield_count MAX, 0, MAX; preempt_seq MAX) do not crash a debug-build agent."""
        a = self.agent()
        out = first_line(spawn(abuse(ATTACKER, "yield-overflow", "--socket", a.socket, "--seconds", "10")), timeout=60)
        time.sleep(0.5)
        alive = a.alive()
        reg = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket)))["results"] if alive else None
        log = a.log()
        a.stop()
        hinted = out.get("hinted_past_max")
        ok = alive and reg == [0] and hinted is True
        return ok, (f"agent alive after the overflow; the hint past preempt_seq MAX came ({out.get('preempt_seq')}); victim registers"
                    if ok else f"agent alive={alive}, hint past MAX={hinted}, victim={reg}; log: {log[-300:]}")

    def a15_umask_race(self):
        """A15: under umask 000 a non-member never connects to the registration socket, not even between its bind and its chmod."""
        # The agent's chmod of the socket is held back 3 s (strace fault injection), so the window
        # between bind and chmod is wide open every time: only the mode the socket was bound with
        # decides whether the outsider gets in.
        d = private_dir()
        sock = os.path.join(d, "agent.sock")
        spinner = subprocess.Popen(outsider([PYTHON, ABUSE, "connect-early", "--socket", sock, "--seconds", "30"]),
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        STARTED.append(spinner)
        wrap = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=fchmodat,chmod", "-e", "inject=fchmodat,chmod:delay_enter=3000000"]
        a = Agent(self.bin, self.old, d, wrap=wrap, popen={"umask": 0})
        ready = a.wait_ready(60)
        got = first_line(spinner, timeout=40)
        status = None
        if got["connected"]:
            spinner.stdin.write("go\n")
            spinner.stdin.flush()
            status = first_line(spinner, timeout=30).get("status")
        log = a.log()
        # Stop the agent itself (strace's child; stopping strace alone would leave it running).
        for child in children(a.proc.pid):
            os.kill(child, signal.SIGTERM)
        a.stop()
        ok = ready and not got["connected"]
        return ok, (f"the outsider never connected ({got['failed_connects']} attempts refused)" if ok
                    else f"agent ready={ready}; outsider connected={got['connected']}, its REGISTER: {status}; {log[-200:]}")

    # --- what held in the second review (A09, A10, A14) ---------------------------------------------------

    def a09_protocol_abuse(self):
        """A09: pipelined, garbage, descriptor-laden, idle and never-reading connections are answered or closed, and leave the agent as it was."""
        a = self.agent()

        def held():
            """The agent's descriptors by what each names (a socket's inode, a file's path), and its
            threads by name, but for the stats server's. Those are scx_stats' (named "stats-server"
            by the agent): its listener spawns its proxy thread whenever it first runs, which on a
            loaded machine can be after the baseline, and the abuse never reaches the stats socket."""
            names, fds = [], collections.Counter()
            for t in os.listdir(f"/proc/{a.proc.pid}/task"):
                try:
                    names.append(open(f"/proc/{a.proc.pid}/task/{t}/comm").read().strip())
                except OSError:
                    pass
            for fd in os.listdir(f"/proc/{a.proc.pid}/fd"):
                try:
                    fds[os.readlink(f"/proc/{a.proc.pid}/fd/{fd}")] += 1
                except OSError:
                    pass
            return fds, sorted(n for n in names if n != "stats-server")

        def left_by(base):
            """What the agent holds now that it did not hold at `base`: the descriptors and threads it
            gained. One it has since let go of is not the abuse's doing: the baseline can hold a
            connection the agent was still serving (wait_ready's, queued until the accept thread takes
            it: its thread, socket, peer pidfd and /proc directory), which the settling below cannot
            rule out. One it gained and kept is (a connection, a passed descriptor)."""
            fds, names = held()
            return fds - base[0], collections.Counter(names) - collections.Counter(base[1])

        # The baseline once start-up is over (the agent logs "listening" after its last start-up step)
        # and no connection thread is seen, i.e. only the accept thread is named "registry". That does
        # not prove wait_ready's connection was served: it can wait in the listen queue and be taken
        # just after, so left_by counts only what the agent gained. A connection thread names itself "registry-conn"
        # once it runs; until then it carries the accept thread's name, which Linux copies to a new
        # thread, so on a loaded machine it can be seen as a second "registry".
        def no_connection_thread():
            names = held()[1]
            return names.count("registry") == 1 and "registry-conn" not in names

        settled = eventually(15.0, lambda: "listening for registrations" in a.log() and no_connection_thread())
        before = held()
        out = first_line(spawn(abuse(ATTACKER, "protocol-abuse", "--socket", a.socket)), timeout=120)
        back = eventually(15.0, lambda: left_by(before) == (collections.Counter(), collections.Counter()))
        after = held()
        gained, gained_threads = left_by(before)
        alive = a.alive()
        reg = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket)))["results"] if alive else None
        log = a.log()
        a.stop()
        answered = (morpheus_abi.RegStatus.OK, morpheus_abi.RegStatus.NOT_OWNER)
        ok = (out.get("pipelined") == [morpheus_abi.RegStatus.OK, morpheus_abi.RegStatus.ALREADY_REGISTERED]
              and out.get("fds_passed") in answered and out.get("own_socket_passed") in answered
              and out.get("garbage_closed") is True and out.get("idle_closed") is True and out.get("never_reading_cut_off") is True
              and settled and back and alive and reg == [0])
        summary = (f"agent descriptors {sum(before[0].values())} -> {sum(after[0].values())}, threads {before[1]} -> {after[1]}"
                   + (f", gained {dict(gained)}" if gained else "") + (f", gained threads {dict(gained_threads)}" if gained_threads else "")
                   + (f", closed since the baseline {dict(before[0] - after[0])}" if before[0] - after[0] else ""))
        return ok, (f"{out}; {summary}; victim registers: {reg}"
                    + ("" if ok else f"; agent alive={alive}; log: {log[-300:]}"))

    def a10_escape_own_demotion(self):
        """A10: a worker demoted by enforcement cannot set itself back to SCHED_OTHER; a critical section or leaving RUNNING lifts it, as designed."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        out = first_line(spawn(client(ATTACKER, "escape-demotion", "--socket", a.socket, "--seconds", "20")), timeout=90)
        log = a.log()
        a.stop()
        if out.get("status") != 0 or not out.get("demoted"):
            return False, f"set-up failed: the attacker was not registered and demoted: {out}; agent: {log[-300:]}"
        ok = (out["demoted_to"] == SCHED_IDLE and out["escape"] == "EPERM" and out["policy_after_escape"] == SCHED_IDLE and out["lifted_by_critical"]
              and out["demoted_again"] and out["lifted_by_leaving_running"])
        return ok, (f"demoted to policy {out['demoted_to']}; SCHED_OTHER from there: {out['escape']}, policy after: {out['policy_after_escape']}; lifted by a critical section: {out['lifted_by_critical']}, "
                    f"demoted again: {out['demoted_again']}, lifted by leaving RUNNING: {out['lifted_by_leaving_running']}")

    def a14_private_state_out_of_reach(self):
        """A14: neither a member nor a non-member reaches the stats socket, the journal, the agent's or another user's /proc descriptors and mappings; a non-member cannot register."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        status = status_file()
        victim, info = self.victim_spinner(a, False, status)
        journal = a.socket + ".journal"
        present = os.path.exists(a.socket + ".stats") and os.path.getsize(journal) > 0
        pids = ["--pids", str(a.proc.pid), str(info["pid"])]
        member = first_line(spawn(abuse(ATTACKER, "probe", "--socket", a.socket, *pids)))
        outside = first_line(spawn(outsider([PYTHON, ABUSE, "probe", "--socket", a.socket, "--register", *pids])))
        # The same probes as root reach everything: each path exists and holds what is protected.
        as_root = first_line(spawn([PYTHON, ABUSE, "probe", "--socket", a.socket, "--register", *pids]))
        alive, victim_alive = a.alive(), victim.poll() is None
        reg = first_line(spawn(client(VICTIM, "register-once", "--socket", a.socket)))["results"]
        stop_all(victim)
        a.stop()
        refused = ("EACCES", "EPERM")
        reached = {f"member {k}": v for k, v in member.items() if v not in refused}
        reached.update({f"non-member {k}": v for k, v in outside.items() if v not in refused})
        ok = present and all(v == "ok" for v in as_root.values()) and not reached and len(outside) == len(as_root) and alive and victim_alive and reg == [0]
        return ok, (f"member: {member}; non-member: {outside}; agent serves, victim registers" if ok
                    else f"reached: {reached}; root's probes: {as_root}; stats/journal present: {present}; agent alive={alive}, victim alive={victim_alive}, victim registers: {reg}")

    # --- identity (the second review) ----------------------------------------------------------------

    def kept_connection_attack(self, agent, victim_args, orders_for, cgroup=None):
        """A01/A08/A11: secA keeps a connection whose process exited; the victim gets exactly that pid;
        secA then sends `orders_for(victim_pid)` on the old connection. Returns (results, victim_pid)."""
        attacker = subprocess.Popen(client(ATTACKER, "keep-conn", "--socket", agent.socket, "--seconds", "30"),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        STARTED.append(attacker)
        dead = first_line(attacker)["dead_pid"]
        if not eventually(5.0, lambda: gone(dead)):
            raise RuntimeError(f"pid {dead} was not freed")
        spawn_at(dead, VICTIM, victim_args(dead), cgroup)
        attacker.stdin.write(json.dumps(orders_for(dead)) + "\n")
        attacker.stdin.flush()
        return first_line(attacker)["results"], dead

    def a01_pid_reuse_on_a_kept_connection(self):
        """A01: a connection whose process exited cannot register the threads of the process that gets its pid."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        busy = [PYTHON, CLIENT, "busy", "--socket", a.socket, "--seconds", "60"]
        results, victim = self.kept_connection_attack(a, lambda pid: busy, lambda pid: {"register": [int(t) for t in os.listdir(f"/proc/{pid}/task")]})
        untouched = never(3.0, lambda: policy(victim) == SCHED_IDLE)
        log = a.log()
        a.stop()
        refused = bool(results) and all(r != 0 for r in results)
        ok = refused and untouched
        return ok, f"REGISTERs on the old connection: {results}; victim never demoted" if ok else f"REGISTERs: {results}, victim demoted: {not untouched}; agent: {log[-300:]}"

    def a08_unregister_through_a_reused_pid(self):
        """A08: a connection whose process exited cannot UNREGISTER the worker of the process that gets its pid."""
        a = self.agent()
        status = status_file()
        worker = [PYTHON, CLIENT, "spin-registered", "--socket", a.socket, "--status", status, "--seconds", "60"]

        def orders(pid):
            eventually(10.0, lambda: "slot" in read_status(status))  # the victim holds its slot
            return {"unregister": list(range(8))}

        results, victim = self.kept_connection_attack(a, lambda pid: worker, orders)
        registered = "slot" in read_status(status)
        time.sleep(0.3)
        log = a.log()
        a.stop()
        released = f"(pid {victim})" in log and "unregistered tid" in log
        ok = registered and all(r != 0 for r in results) and not released
        return ok, f"UNREGISTERs on the old connection: {results}; the victim's slot kept" if ok else f"victim registered={registered}, UNREGISTERs: {results}, released: {released}"

    def a11_throttle_through_a_reused_pid(self):
        """A11: throttle never caps the cgroup of a process that got a dead caller's pid."""
        root = next((line.split()[4] for line in open("/proc/self/mountinfo") if line.split(" - ")[1].split()[0] == "cgroup2"), None)
        if root is None:
            return False, "set-up failed: no cgroup v2 mounted"
        group = os.path.join(root, f"morpheus-a11-victim-{os.getpid()}")
        os.mkdir(group)
        CGROUPS.append(group)
        has_cpu = "cpu" in open(os.path.join(root, "cgroup.controllers")).read().split()
        wrap = ()
        if not has_cpu:
            # No cpu controller in this cgroup v2: the agent runs in a private mount namespace in which
            # the victim's (real) cgroup directory is overlaid by a tmpfs holding a cpu.max file.
            wrap = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    'mount -t tmpfs -o size=64k tmpfs "$0" && printf "max 100000\\n" > "$0/cpu.max" && exec "$@"', group]
        a = Agent(self.bin, self.old, private_dir(), ["--mode", "enforced", "--policy", "throttle"], wrap=wrap)
        if not a.wait_ready():
            log = a.log()
            a.stop()
            return False, f"agent did not start: {log[-300:]}"

        def cpu_max():
            return run(["nsenter", "-t", str(a.proc.pid), "-m", "cat", os.path.join(group, "cpu.max")]).stdout.strip()

        before = cpu_max()
        busy = [PYTHON, CLIENT, "busy", "--socket", a.socket, "--seconds", "60"]
        results, victim = self.kept_connection_attack(a, lambda pid: busy, lambda pid: {"register": [pid]}, cgroup=group)
        member = open(os.path.join(group, "cgroup.procs")).read().split()
        untouched = never(3.0, lambda: cpu_max() != before)
        after = cpu_max()
        a.stop()
        ok = str(victim) in member and before.startswith("max") and untouched and all(r != 0 for r in results)
        return ok, f"REGISTERs: {results}; the victim's cgroup kept cpu.max '{after}'" if ok else f"victim in its cgroup: {str(victim) in member}, REGISTERs: {results}, cpu.max '{before}' -> '{after}'"

    def a13_registration_outlives_its_process(self):
        """A13: a registration dies with its process; a process that gets its pid is never treated as the worker."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        attacker = subprocess.Popen(client(ATTACKER, "register-then-exit", "--socket", a.socket, "--critical"),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        STARTED.append(attacker)
        info = first_line(attacker)
        if info.get("status") != 0:
            a.stop()
            return False, f"set-up failed: the attacker could not register: {info}"
        pid = info["pid"]
        time.sleep(0.2)  # a few ticks: the agent tracks the worker
        a.pause()
        attacker.stdin.write("exit\n")
        attacker.stdin.flush()
        attacker.wait(30)
        spawn_at(pid, VICTIM, [PYTHON, CLIENT, "busy", "--socket", a.socket, "--seconds", "60"])
        a.resume()
        untouched = never(3.0, lambda: policy(pid) == SCHED_IDLE)
        log = a.log()
        a.stop()
        return untouched, f"pid {pid} reused by another user's process, never demoted" if untouched else f"the new process at pid {pid} was demoted: {log[-300:]}"

    def a02_lift_of_a_reused_tid(self):
        """A02: lifting a demotion never restores a thread id that another user's thread now has."""
        a = self.agent(extra=["--mode", "enforced", "--policy", "kick"])
        attacker = subprocess.Popen(client(ATTACKER, "register-then-exit", "--socket", a.socket, "--batch-nice", "--until-demoted", "--seconds", "20"),
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        STARTED.append(attacker)
        info = first_line(attacker)
        if info.get("status") != 0 or not first_line(attacker, 30).get("demoted"):
            a.stop()
            return False, f"set-up failed: the attacker was not registered and demoted: {info}"
        tid = info["tid"]
        a.pause()
        attacker.stdin.write("exit\n")
        attacker.stdin.flush()
        attacker.wait(60)
        spawn_at(tid, VICTIM, [PYTHON, CLIENT, "busy", "--socket", a.socket, "--seconds", "60"])
        own = (policy(tid), nice_of(tid))
        a.resume()
        kept = never(3.0, lambda: (policy(tid), nice_of(tid)) != own)
        now = (policy(tid), nice_of(tid))
        a.stop()
        # The new thread starts as this suite does (a test runner may run niced): never as the attacker.
        ok = own == (os.SCHED_OTHER, os.getpriority(os.PRIO_PROCESS, 0)) and kept
        return ok, f"the new thread {tid} kept policy {own[0]} nice {own[1]}" if ok else f"thread {tid}: policy/nice {own} -> {now} (the attacker's SCHED_BATCH is 3, nice 19)"

    def a06_thread_scan_amplification(self):
        """A06: a refused REGISTER costs the agent about the same whatever the caller's thread count."""
        a = self.agent()

        def serving_ns():
            """CPU time (ns, schedstat) of the agent's connection threads: the work of serving them."""
            total = 0
            for t in os.listdir(f"/proc/{a.proc.pid}/task"):
                try:
                    if open(f"/proc/{a.proc.pid}/task/{t}/comm").read().strip() == "registry-conn":
                        total += int(open(f"/proc/{a.proc.pid}/task/{t}/schedstat").read().split()[0])
                except OSError:
                    pass
            return total

        cost = {}
        for threads in (1, 3000):
            flood = subprocess.Popen(client(ATTACKER, "refusal-flood", "--socket", a.socket, "--count", str(threads), "--seconds", "3"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            STARTED.append(flood)
            ready = first_line(flood, 60)
            before = serving_ns()
            flood.stdin.write("go\n")
            flood.stdin.flush()
            out = first_line(flood, 120)
            spent = serving_ns() - before  # the connection is still open: its thread is still there
            flood.stdin.write("close\n")
            flood.stdin.flush()
            flood.wait(30)
            if out.get("statuses") != [morpheus_abi.RegStatus.NOT_CALLER_TID] or not out.get("requests"):
                a.stop()
                return False, f"set-up failed: {threads}-thread caller ({ready}): {out}"
            cost[threads] = spent / 1e6 / out["requests"]
        a.stop()
        ratio = cost[3000] / max(cost[1], 1e-6)
        detail = f"agent CPU per refused REGISTER: {cost[1]:.3f} ms (1 thread), {cost[3000]:.3f} ms (3000 threads), x{ratio:.1f}"
        return ratio <= 5.0, detail


def children(pid):
    """The child processes of `pid`."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def agent_cpu(a):
    """CPU seconds (user + system) the agent process has used."""
    with open(f"/proc/{a.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


TESTS = {
    "S1": Suite.s1_symlink_clobber,
    "S2": Suite.s2_truncate,
    "S3": Suite.s3_fake_slot,
    "S4": Suite.s4_config_readback,
    "S5": Suite.s5_odd_seq,
    "S6": Suite.s6_hostile_writes,
    "S7": Suite.s7_kill9_restores,
    "S8": Suite.s8_dos,
    "S9": Suite.s9_small_tmpfs,
    "S10": Suite.s10_directory_owner,
    "S11": Suite.s11_slot_generation,
    "S12": Suite.s12_pid_namespace,
    "A03": Suite.a03_subuid_domains,
    "A04": Suite.a04_slow_metrics_client,
    "A05": Suite.a05_log_flood,
    "A07": Suite.a07_journal_bounded,
    "A12": Suite.a12_counter_overflow,
    "A15": Suite.a15_umask_race,
    "A01": Suite.a01_pid_reuse_on_a_kept_connection,
    "A02": Suite.a02_lift_of_a_reused_tid,
    "A06": Suite.a06_thread_scan_amplification,
    "A08": Suite.a08_unregister_through_a_reused_pid,
    "A11": Suite.a11_throttle_through_a_reused_pid,
    "A13": Suite.a13_registration_outlives_its_process,
    "A09": Suite.a09_protocol_abuse,
    "A10": Suite.a10_escape_own_demotion,
    "A14": Suite.a14_private_state_out_of_reach,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the scx_morpheus binary")
    p.add_argument("--old", action="store_true", help="start it as a 1.2-era agent (--region file)")
    p.add_argument("--keep-users", action="store_true")
    p.add_argument("only", nargs="*", help="S1 ... S12, A01 ... (default: all)")
    a = p.parse_args()
    if os.geteuid() != 0:
        print("attacks.py: needs root (it creates the attacker and victim users)", file=sys.stderr)
        return 2
    ensure_users()
    suite = Suite(os.path.abspath(a.bin), a.old)
    failed = []
    try:
        for name in a.only or TESTS:
            try:
                ok, detail = TESTS[name](suite)
            except Exception as e:  # a broken set-up is a failure, named
                ok, detail = False, f"error: {e}"
            finally:
                cleanup()
            print(f"{name:4} {'PASS' if ok else 'FAIL'}  {TESTS[name].__doc__.splitlines()[0]}  -- {detail}", flush=True)
            if not ok:
                failed.append(name)
    finally:
        if not a.keep_users:
            remove_users()
    print(f"{len(failed)} attack(s) had an effect: {' '.join(failed)}" if failed else "no attack had an effect")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
