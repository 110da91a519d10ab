# SPDX-License-Identifier: GPL-2.0-only
"""Attack tests of the security review (S1-S12 and A01-A15, defined in scheduler/SECURITY.md): each one
reproduces an attack with real unprivileged users against the real agent and checks it has no effect.

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
CLIENT = os.path.join(HERE, "client.py")
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


def uid(user):
    return pwd.getpwnam(user).pw_uid


class Agent:
    def __init__(self, binary, old, directory, extra=(), region_dir=None):
        self.dir = directory
        self.socket = os.path.join(directory, "agent.sock")
        args = [binary, "--backend", "sim", "--socket", self.socket, "--slice-us", "2000", "--grace-us", "2000", "-v"]
        if old:
            args += ["--region", os.path.join(region_dir or directory, "region")]
        else:
            args += ["--socket-group", GROUP]
        self.stderr_path = os.path.join(tempfile.gettempdir(), f"trust-agent-{os.getpid()}-{time.monotonic_ns()}.log")
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(args + list(extra), stdout=subprocess.DEVNULL, stderr=self.stderr)
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

    def stop(self):
        if self.alive():
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


def private_dir():
    """A root-owned 0755 runtime directory (systemd's RuntimeDirectory= style)."""
    d = tempfile.mkdtemp(prefix="morpheus-trust-")
    os.chmod(d, 0o755)
    CREATED.append(d)
    return d


def cleanup():
    while STARTED:
        p = STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.wait()
    while CREATED:
        shutil.rmtree(CREATED.pop(), ignore_errors=True)


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


def stop_all(*procs):
    for p in procs:
        if p and p.poll() is None:
            p.kill()
            p.wait()


class Suite:
    def __init__(self, binary, old):
        self.bin, self.old = binary, old

    def agent(self, directory=None, extra=(), region_dir=None):
        d = directory or private_dir()
        a = Agent(self.bin, self.old, d, extra, region_dir)
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
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the scx_morpheus binary")
    p.add_argument("--old", action="store_true", help="start it as a 1.2-era agent (--region file)")
    p.add_argument("--keep-users", action="store_true")
    p.add_argument("only", nargs="*", help="S1 ... S12 (default: all)")
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
