#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The tracing backend against the simulation backend, on the host kernel, in the same run.

Each round (default 5) has two parts; every ratio is taken within a round, and the tables show the
median and the range [min-max] over the rounds.

Detection (one cooperative worker: morpheus-e2e-worker `cooperative`, checkpoint_sync between
20k-iteration pieces of work, for --seconds against each backend in turn): the CPU time past the slice
end when preempt_seq was published, for the first hint after each acknowledgement (the agent's stats,
`reactions/hint`: p50, p99, max). The sim backend's granularity is its 1 ms tick.

Overhead, with 0, 8 and 64 registered workers (morpheus-e2e-worker `cooperative` threads, 16 a
process and user: the agent's connection limit per user; moved to CPU 1 once all are registered, busy
the whole time), for each backend in turn, and without any agent (`none`:
the same number of plain busy threads on CPU 1, not registered):
  - context switch: `perf bench sched pipe` on CPU 0 under SCHED_FIFO (two processes passing a byte
    through pipes on one CPU: each round trip is two context switches and two wake-ups there; as
    real-time tasks no other task of the machine runs on CPU 0 in the middle of a run), usecs per
    round trip, the median of --pipe-runs runs, as a ratio to `none`. --pipe-pairs pairs a round and
    worker count, the order reversed in every other pair (none, backends; backends, none), each ratio
    taken within its pair; a round's figure is the median of its pairs, and the table gives the
    rounds' spread and every pair's. The kernel's BPF run-time statistics are off while it runs: they
    time every program run themselves. `floor`, measured in the same pairs, is an empty BPF program on
    the same tracepoint with no agent (the plain busy threads of `none`): what attaching any program there
    costs a switch, which no tracing backend can go below; `trace / floor` is what the tracing programs'
    own work adds to it, taken within each pair.
  - agent CPU: the agent's CPU time (its process CPU clock, every thread's, in nanoseconds) over a
    --window of seconds (in the first pair) with the workers running and nothing else measured, as a share of one CPU.
  - BPF CPU (trace): the run time of the tracing programs (tp_btf/sched_switch, sched_process_free)
    over the same window, from the kernel's BPF run-time statistics (BPF_ENABLE_STATS, on only for the
    window), as a share of one CPU; and the sched_switch program's mean time a run. The check timer's
    callback is no program run of its own and is not in these statistics; its runs are counted (the
    agent's `ticks`).

--before-bin-dir: a second build of scx_morpheus (e.g. of the previous commit) measured as a third
column, `trace-before`, in the same rounds, so a change's effect is read from the same run.

The trace agent runs in a mount namespace of its own with a private bpffs on /sys/fs/bpf. Needs root,
perf and bpftool, and a kernel with BPF and BTF; prints one line per measurement and the tables.
"""
import argparse
import ctypes
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

# bpf(2) on x86-64, and its BPF_ENABLE_STATS command with BPF_STATS_RUN_TIME (include/uapi/linux/bpf.h).
SYS_BPF = 321
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
# For the floor's empty program: BPF_PROG_LOAD and BPF_RAW_TRACEPOINT_OPEN, BPF_PROG_TYPE_RAW_TRACEPOINT,
# and its two instructions, r0 = 0 (BPF_ALU64 | BPF_MOV | BPF_K) and exit (BPF_JMP | BPF_EXIT).
BPF_PROG_LOAD = 5
BPF_RAW_TRACEPOINT_OPEN = 17
BPF_PROG_TYPE_RAW_TRACEPOINT = 17
EMPTY_PROGRAM = bytes.fromhex("b700000000000000" "9500000000000000")
# The tracing backend's programs that run on the machine's events (src/bpf/trace.bpf.c). The kernel
# truncates names to 15 characters; bpftool may show the full name from BTF: the first 15 are compared.
TRACE_PROGS = ("morpheus_switch", "morpheus_task_free")
WORKER_COUNTS = (0, 8, 64)
# The agent's limit of connections per user (src/registry.rs, MAX_CONNECTIONS_PER_UID); workers past it
# run as users BENCH_UID + 1, ..., members of the socket's group (nogroup, --socket-group).
CONNECTIONS_PER_UID = 16
BENCH_UID = 40100
SOCKET_GROUP = "nogroup"
SOCKET_GID = 65534


def pipe_usecs(loops, runs):
    """The median of `runs` runs of the ping-pong, usecs per round trip."""
    # Both processes on CPU 0: each round trip is two context switches there, not a cross-CPU wake-up.
    # SCHED_FIFO: no other task of the machine (its builds, the agent, the workers) runs on CPU 0 in
    # the middle of a run, so what is measured is the switch path, not the share of CPU 0 that the
    # ping-pong got. A run is kept short (well under the kernel's RT limit of 0.95 s a second).
    usecs = []
    for _ in range(runs):
        out = subprocess.run(["chrt", "-f", "1", "taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(loops)],
                             check=True, capture_output=True, text=True).stdout
        found = [float(line.split()[0]) for line in out.splitlines() if "usecs/op" in line]
        if not found:
            raise SystemExit(f"bench.py: no usecs/op in perf's output:\n{out}")
        usecs.append(found[0])
    return statistics.median(usecs)


def bpf(cmd, attr):
    """bpf(2) with `attr` (bytes, zero-padded to 128); its result, or SystemExit naming the command."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, 128)
    fd = libc.syscall(SYS_BPF, cmd, buf, 128)
    if fd < 0:
        raise SystemExit(f"bench.py: bpf command {cmd} failed: {os.strerror(ctypes.get_errno())}")
    return fd


class EmptySwitchProgram:
    """An empty BPF program attached to the sched_switch tracepoint while the context is open. A raw
    tracepoint: the kernel runs it by the same path (bpf_trace_run) as the tracing backend's tp_btf program."""

    def __enter__(self):
        insns = ctypes.create_string_buffer(EMPTY_PROGRAM, len(EMPTY_PROGRAM))
        license = ctypes.create_string_buffer(b"GPL")
        # union bpf_attr for BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size,
        # log_buf, kern_version, prog_flags, prog_name.
        self.prog = bpf(BPF_PROG_LOAD, struct.pack("IIQQIIQII16s", BPF_PROG_TYPE_RAW_TRACEPOINT, len(EMPTY_PROGRAM) // 8,
                                                   ctypes.addressof(insns), ctypes.addressof(license), 0, 0, 0, 0, 0,
                                                   b"morpheus_floor"))
        name = ctypes.create_string_buffer(b"sched_switch")
        try:
            self.link = bpf(BPF_RAW_TRACEPOINT_OPEN, struct.pack("QI", ctypes.addressof(name), self.prog))
        except BaseException:
            os.close(self.prog)
            raise
        return self

    def __exit__(self, *exc):
        os.close(self.link)
        os.close(self.prog)


def enable_bpf_stats():
    """The kernel counts every BPF program's run time while the returned descriptor is open."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 32)(BPF_STATS_RUN_TIME)
    fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        raise SystemExit(f"bench.py: BPF_ENABLE_STATS failed: {os.strerror(ctypes.get_errno())}")
    return fd


def prog_run_times():
    """{name: (run_time_ns, run_cnt)} of the newest loaded BPF program of each name in TRACE_PROGS."""
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"], check=True, capture_output=True, text=True).stdout)
    out = {}
    for name in TRACE_PROGS:
        mine = [p for p in progs if p.get("name", "")[:15] == name[:15]]
        if not mine:
            raise SystemExit(f"bench.py: no BPF program {name} is loaded")
        p = max(mine, key=lambda p: p["id"])
        out[name] = (p.get("run_time_ns", 0), p.get("run_cnt", 0))
    return out


def cpu_ns(pid):
    """CPU time of process `pid` so far, every thread's, exited ones too (its process CPU clock, ns)."""
    # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) (include/linux/posix-timers_types.h).
    return time.clock_gettime_ns(((~pid) << 3) | 2)


class Agent:
    def __init__(self, bin_dir, backend, slice_us, hint_interval_us, workdir, label):
        self.label = label
        self.sock = os.path.join(workdir, f"{label}.sock")
        self.log = open(os.path.join(workdir, f"{label}.log"), "w")
        cmd = [os.path.join(bin_dir, "scx_morpheus"), "--backend", backend, "--socket", self.sock,
               "--mode", "observer", "--slice-us", str(slice_us), "--hint-interval-us", str(hint_interval_us),
               "--socket-group", SOCKET_GROUP]
        if backend == "trace":
            # unshare and sh exec in place: the process started here is the agent.
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@"'] + cmd
        self.bin_dir = bin_dir
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while not (os.path.exists(self.sock) and os.path.exists(self.sock + ".stats")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench.py: scx_morpheus ({label}) did not start; see {self.log.name}")
            time.sleep(0.05)

    def stat(self, pointer):
        # The agent answers at its next tick; on a saturated host a query can fail: asked again, 3 times.
        for attempt in range(3):
            done = subprocess.run([os.path.join(self.bin_dir, "morpheus"), "stats", "--socket", self.sock, "--get", pointer],
                                  capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                return float(done.stdout.strip())
            time.sleep(1)
        raise SystemExit(f"bench.py: morpheus stats --get {pointer} failed ({self.label}): {done.stderr.strip()}")

    def stop(self):
        self.proc.terminate()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"bench.py: scx_morpheus ({self.label}) exited with {self.proc.returncode}; see {self.log.name}")


def detection(agent, bin_dir, seconds):
    subprocess.run([os.path.join(bin_dir, "morpheus-e2e-worker"), "--seconds", str(seconds), "cooperative"],
                   check=True, capture_output=True, env=dict(os.environ, MORPHEUS_SOCKET=agent.sock), timeout=seconds + 120)
    return {k: agent.stat(f"/reactions/hint/{k}") for k in ("count", "p50_us", "p99_us", "max_us")}


class NotRegistered(Exception):
    """The workers of a cell could not all register: the cell is left out of the round, said why."""


class Load:
    """`n` busy threads on CPU 1: registered workers of `agent`, or (agent None) plain busy threads."""

    def __init__(self, bin_dir, n, agent, workdir):
        self.proc = None
        if n == 0:
            return
        worker = os.path.join(bin_dir, "morpheus-e2e-worker")
        if agent is None:
            cmd = ["taskset", "-c", "1", worker, "--bench-cpu", str(1 << 62), "--threads", str(n)]
            self.procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        else:
            self.until = os.path.join(workdir, "stop-workers")
            if os.path.exists(self.until):
                os.unlink(self.until)
            env = dict(os.environ, MORPHEUS_SOCKET=agent.sock)
            # The agent keeps at most CONNECTIONS_PER_UID connections (one a worker) per user: more
            # workers run as further users (each its own trust domain), beside the first as root.
            self.procs = []
            for k in range(0, n, CONNECTIONS_PER_UID):
                # Pinned to CPU 1 only once all are registered (below): a thread registering on a
                # CPU its busy siblings hold can miss the SDK's 5 s answer deadline on a loaded host.
                cmd = [worker, "--until", self.until] + ["cooperative"] * min(CONNECTIONS_PER_UID, n - k)
                if k:
                    uid = BENCH_UID + k // CONNECTIONS_PER_UID
                    cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={SOCKET_GID}"] + cmd
                self.log = os.path.join(workdir, f"workers-{agent.label}-{n}.log")
                with open(self.log, "a") as log:
                    self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env))
                # One process (16 registrations) at a time: the SDK waits 5 s for each answer.
                self.wait_registered(agent, min(n, k + CONNECTIONS_PER_UID))
        self.proc = self.procs[0]
        if agent is not None:
            for p in self.procs:
                subprocess.run(["taskset", "-a", "-p", "-c", "1", str(p.pid)], check=True, capture_output=True)

    def wait_registered(self, agent, n):
        deadline = time.monotonic() + 120
        while agent.stat("/nr_workers") < n:
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                self.proc = self.procs[0]
                self.stop()
                with open(self.log) as log:
                    why = log.read().strip().splitlines()[-1:] or ["(no error from the workers: timed out)"]
                raise NotRegistered(f"{n} workers did not register with {agent.label}: {why[0]}")
            time.sleep(0.1)

    def stop(self):
        if self.proc is None:
            return
        if getattr(self, "until", None):
            open(self.until, "w").close()
        for p in self.procs:
            try:
                p.wait(timeout=60 if getattr(self, "until", None) else 0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def overhead(agent, bin_dir, n, workdir, args, window=True):
    """Context switch, and (`window`) agent CPU and (trace) BPF CPU, with `n` registered busy workers."""
    load = Load(bin_dir, n, agent, workdir)
    try:
        pipe = pipe_usecs(args.pipe_loops, args.pipe_runs)
        if not window:
            return dict(pipe=pipe)
        ticks0 = agent.stat("/ticks")
        stats_fd = enable_bpf_stats() if agent.backend == "trace" else None
        try:
            progs0 = prog_run_times() if stats_fd is not None else None
            agent0, t0 = cpu_ns(agent.proc.pid), time.monotonic_ns()
            time.sleep(args.window)
            agent1, t1 = cpu_ns(agent.proc.pid), time.monotonic_ns()
            progs1 = prog_run_times() if stats_fd is not None else None
        finally:
            if stats_fd is not None:
                os.close(stats_fd)
        ticks = agent.stat("/ticks") - ticks0
    finally:
        load.stop()
    wall = t1 - t0
    row = dict(pipe=pipe, agent_pct=100 * (agent1 - agent0) / wall, ticks_per_s=ticks / (wall / 1e9))
    if progs0 is not None:
        ns = sum(progs1[p][0] - progs0[p][0] for p in TRACE_PROGS)
        sw_ns = progs1["morpheus_switch"][0] - progs0["morpheus_switch"][0]
        sw_cnt = progs1["morpheus_switch"][1] - progs0["morpheus_switch"][1]
        row.update(bpf_pct=100 * ns / wall, switch_ns=sw_ns / max(sw_cnt, 1), switches_per_s=sw_cnt / (wall / 1e9))
    return row


def spread(values, fmt="{:.3f}"):
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--before-bin-dir", help="another build, measured as the column trace-before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5, help="cooperative worker's run per backend (detection)")
    ap.add_argument("--window", type=float, default=3, help="seconds of agent and BPF CPU time per cell (overhead)")
    ap.add_argument("--slice-us", type=int, default=1000)
    # The hint rate limit (--hint-interval-us) well under the slice: at its default (1 ms) and a 1 ms
    # slice, a slice that ends under 1 ms after the previous hint has its hint held back to the next
    # check, which is the policy's rate limit, not the detection this measures.
    ap.add_argument("--hint-interval-us", type=int, default=100)
    # Round trips a ping-pong run (SCHED_FIFO on CPU 0: 50,000 take about 0.3 s), runs a measurement
    # (their median), and pairs of measurements (none, each backend) a round and worker count.
    ap.add_argument("--pipe-loops", type=int, default=50000)
    ap.add_argument("--pipe-runs", type=int, default=3)
    ap.add_argument("--pipe-pairs", type=int, default=3)
    args = ap.parse_args()
    if os.cpu_count() < 2:
        raise SystemExit("bench.py: needs 2 CPUs (the ping-pong on CPU 0, the workers on CPU 1)")
    columns = [("trace", "trace", args.bin_dir)]
    if args.before_bin_dir:
        columns.append(("trace-before", "trace", args.before_bin_dir))
    columns.append(("sim", "sim", args.bin_dir))
    # The floor: no agent, an empty program on the tracepoint (module doc); no detection of its own.
    floor = ("floor", None, None)
    over_columns = columns + [floor]
    det = {label: [] for label, _, _ in columns}
    over = {(label, n): [] for label, _, _ in over_columns for n in WORKER_COUNTS}
    # trace's pipe over the floor's, within each pair
    over_floor = {n: [] for n in WORKER_COUNTS}
    none = {n: [] for n in WORKER_COUNTS}

    def start(label, backend, bin_dir):
        agent = Agent(bin_dir, backend, args.slice_us, args.hint_interval_us, workdir, label)
        agent.backend = backend
        return agent

    with tempfile.TemporaryDirectory(prefix="morpheus-trace-bench-") as workdir:
        os.chmod(workdir, 0o755)  # the workers of other users reach the socket and the stop file
        for r in range(1, args.rounds + 1):
            for label, backend, bin_dir in columns:
                agent = start(label, backend, bin_dir)
                try:
                    d = detection(agent, bin_dir, args.seconds)
                finally:
                    agent.stop()
                det[label].append(d)
                print(f"round {r} detection {label}: p50/p99/max {d['p50_us']:.0f}/{d['p99_us']:.0f}/{d['max_us']:.0f} us ({d['count']:.0f} hints)", flush=True)
            for n in WORKER_COUNTS:
                # --pipe-pairs pairs: `none` and every backend, the order reversed in every other pair
                # (none first, then last), each backend's ratio taken to the `none` of its own pair.
                # The agent and BPF CPU window is measured in the first pair only.
                rows = {label: None for label, _, _ in over_columns}
                ratios = {label: [] for label, _, _ in over_columns}
                bases = []
                pair_floor = []
                for k in range(args.pipe_pairs):
                    order = [None] + over_columns if k % 2 == 0 else over_columns + [None]
                    pipes = {}
                    for col in order:
                        if col is None or col is floor:
                            load = Load(args.bin_dir, n, None, workdir)
                            try:
                                if col is None:
                                    base = pipe_usecs(args.pipe_loops, args.pipe_runs)
                                else:
                                    with EmptySwitchProgram():
                                        pipes["floor"] = pipe_usecs(args.pipe_loops, args.pipe_runs)
                                    if k == 0:
                                        rows["floor"] = dict(pipe=pipes["floor"])
                            finally:
                                load.stop()
                            continue
                        label, backend, bin_dir = col
                        agent = start(label, backend, bin_dir)
                        try:
                            row = overhead(agent, bin_dir, n, workdir, args, window=(k == 0))
                        except NotRegistered as e:
                            print(f"round {r} overhead {label} {n} workers: left out, {e}", flush=True)
                            row = None
                        finally:
                            agent.stop()
                        if k == 0:
                            rows[label] = row
                        if row is not None:
                            pipes[label] = row["pipe"]
                    bases.append(base)
                    for label, pipe in pipes.items():
                        ratios[label].append(pipe / base)
                    if "trace" in pipes:
                        pair_floor.append(pipes["trace"] / pipes["floor"])
                    print(f"round {r} pair {k + 1} {n} workers: pipe none {base:.2f} us, "
                          + ", ".join(f"{label} {pipe:.2f} us ({pipe / base:.3f}x)" for label, pipe in pipes.items()), flush=True)
                base = statistics.median(bases)
                none[n].append(base)
                if pair_floor:
                    over_floor[n].append(dict(ratio=statistics.median(pair_floor), pair_ratios=pair_floor))
                    print(f"round {r} overhead trace {n} workers: context switch {over_floor[n][-1]['ratio']:.3f}x floor "
                          f"(median of {len(pair_floor)} pairs)", flush=True)
                for label, _, _ in over_columns:
                    row = rows[label]
                    over[(label, n)].append(row)
                    if row is None:
                        continue
                    row["ratio"] = statistics.median(ratios[label]) if ratios[label] else float("nan")
                    row["pair_ratios"] = ratios[label]
                    if label == "floor":
                        print(f"round {r} overhead floor {n} workers: context switch {row['ratio']:.3f}x none "
                              f"(median of {len(ratios[label])} pairs)", flush=True)
                        continue
                    extra = ""
                    if "bpf_pct" in row:
                        extra = (f", BPF {row['bpf_pct']:.3f} % ({row['switch_ns']:.0f} ns a sched_switch run, "
                                 f"{row['switches_per_s']:.0f} runs/s)")
                    print(f"round {r} overhead {label} {n} workers: context switch {row['ratio']:.3f}x none (median of {len(ratios[label])} pairs), "
                          f"agent {row['agent_pct']:.3f} % of a CPU{extra}, {row['ticks_per_s']:.0f} ticks/s", flush=True)
    print()
    print(f"Detection over {args.rounds} rounds: median [min-max]; slice {args.slice_us} us, hint interval "
          f"{args.hint_interval_us} us, {args.seconds:g} s of one cooperative worker per backend; CPU time past the slice end, us")
    labels = [label for label, _, _ in columns]
    print("| | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for k in ("p50_us", "p99_us", "max_us"):
        print(f"| {k[:-3]} | " + " | ".join(spread([d[k] for d in det[label]], "{:.0f}") for label in labels) + " |")
    print(f"| trace p99 / sim p99 | " + " | ".join(
        spread([t["p99_us"] / max(s["p99_us"], 1e-9) for t, s in zip(det[label], det["sim"])]) if label != "sim" else "" for label in labels) + " |")
    print()
    print(f"Overhead over {args.rounds} rounds: median [min-max]; registered cooperative workers busy on CPU 1; "
          f"context switch = perf bench sched pipe (SCHED_FIFO, both on CPU 0, median of {args.pipe_runs} runs of {args.pipe_loops} round trips) "
          f"as a ratio to no agent with as many plain busy threads on CPU 1, in {args.pipe_pairs} alternating pairs a round: "
          f"the rounds' medians of their pairs, then every pair; CPU over {args.window:g} s windows, % of one CPU")
    print("| workers | backend | context switch / none (rounds) | every pair | agent CPU % | BPF CPU % | agent + BPF % | sched_switch ns a run | timer or tick runs/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in WORKER_COUNTS:
        for label in labels + ["floor"]:
            rows = [x for x in over[(label, n)] if x is not None]
            if not rows:
                print(f"| {n} | {label} | not measured (the workers did not register in any round) | | | | | | |")
                continue
            left_out = f" ({args.rounds - len(rows)} rounds left out)" if len(rows) < args.rounds else ""
            pairs = [q for x in rows for q in x["pair_ratios"]]
            if label == "floor":
                print(f"| {n} | floor (empty program, no agent){left_out} | {spread([x['ratio'] for x in rows])} | {spread(pairs)} ({len(pairs)}) "
                      f"| - | - | - | - | - |")
                if over_floor[n]:
                    fl = [q for x in over_floor[n] for q in x["pair_ratios"]]
                    print(f"| {n} | trace / floor | {spread([x['ratio'] for x in over_floor[n]])} | {spread(fl)} ({len(fl)}) | - | - | - | - | - |")
                continue
            has_bpf = "bpf_pct" in rows[0]
            bpf = spread([x["bpf_pct"] for x in rows]) if has_bpf else "-"
            both = spread([x["agent_pct"] + x.get("bpf_pct", 0) for x in rows])
            sw = spread([x["switch_ns"] for x in rows], "{:.0f}") if has_bpf else "-"
            print(f"| {n} | {label}{left_out} | {spread([x['ratio'] for x in rows])} | {spread(pairs)} ({len(pairs)}) | {spread([x['agent_pct'] for x in rows])} | {bpf} | {both} | {sw} | "
                  f"{spread([x['ticks_per_s'] for x in rows], '{:.0f}')} |")
    print(f"(none: pipe round trip {', '.join(f'{n} busy threads ' + spread(none[n], '{:.2f}') + ' us' for n in WORKER_COUNTS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
