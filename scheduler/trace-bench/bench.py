#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""The tracing backend against the simulation backend, on the host kernel, in the same run.

Per round (default 5), in this order:
  1. Context-switch cost without any Morpheus program: `perf bench sched pipe` (two processes
     passing a byte through pipes, both on CPU 0; usecs per round trip, i.e. two context switches and
     two wake-ups there).
  2. scx_morpheus --backend trace starts (its BPF programs attached, no worker registered), the same
     ping-pong runs again (the cost of tp_btf/sched_switch on every switch of the machine), with the
     kernel's BPF run-time statistics on (BPF_ENABLE_STATS, only while the ping-pong runs): the
     program's own mean time per run, which a loaded machine does not blur as it does the
     ping-pong's, then a
     cooperative worker (morpheus-e2e-worker `cooperative`: checkpoint_sync between 20k-iteration
     pieces of work) runs for --seconds, and the agent's stats give the detection latency: CPU time
     past the slice end when preempt_seq was published (the first hint after each acknowledgement,
     `reactions/hint`: p50, p99, max).
  3. The same worker against scx_morpheus --backend sim (its /proc sampler on its 1 ms tick).
  4. The ping-pong without any program again: "without" is the mean of 1 and 4, so a drift of the
     machine's load during the round weighs on both sides.
Each ratio is taken within a round (trace/sim, with/without), and the table shows the median and the
range over the rounds. The trace agent runs in a mount namespace of its own with a private bpffs on
/sys/fs/bpf. Needs root and a kernel with BPF and BTF; prints one line per round and a summary.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def pipe_usecs(loops):
    # Both processes on one CPU: each round trip is two context switches there, not a cross-CPU wake-up.
    out = subprocess.run(["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(loops)],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "usecs/op" in line:
            return float(line.split()[0])
    raise SystemExit(f"bench.py: no usecs/op in perf's output:\n{out}")


# bpf(2) on x86-64, and its BPF_ENABLE_STATS command with BPF_STATS_RUN_TIME (include/uapi/linux/bpf.h).
SYS_BPF = 321
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0


def enable_bpf_stats():
    """The kernel counts every BPF program's run time while the returned descriptor is open."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = (ctypes.c_uint32 * 32)(BPF_STATS_RUN_TIME)
    fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        raise SystemExit(f"bench.py: BPF_ENABLE_STATS failed: {os.strerror(ctypes.get_errno())}")
    return fd


def prog_run_time(name):
    """(run_time_ns, run_cnt) of the newest loaded BPF program called `name`."""
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "--json"], check=True, capture_output=True, text=True).stdout)
    mine = [p for p in progs if p.get("name") == name]
    if not mine:
        raise SystemExit(f"bench.py: no BPF program {name} is loaded")
    p = max(mine, key=lambda p: p["id"])
    return p.get("run_time_ns", 0), p.get("run_cnt", 0)


class Agent:
    def __init__(self, bin_dir, backend, slice_us, hint_interval_us, workdir):
        self.sock = os.path.join(workdir, f"{backend}.sock")
        self.log = open(os.path.join(workdir, f"{backend}.log"), "w")
        cmd = [os.path.join(bin_dir, "scx_morpheus"), "--backend", backend, "--socket", self.sock,
               "--mode", "observer", "--slice-us", str(slice_us), "--hint-interval-us", str(hint_interval_us)]
        if backend == "trace":
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@"'] + cmd
        self.bin_dir = bin_dir
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench.py: scx_morpheus --backend {backend} did not start; see {self.log.name}")
            time.sleep(0.05)

    def stat(self, pointer):
        out = subprocess.run([os.path.join(self.bin_dir, "morpheus"), "stats", "--socket", self.sock, "--get", pointer],
                             check=True, capture_output=True, text=True, timeout=60).stdout
        return float(out.strip())

    def stop(self):
        self.proc.terminate()
        if self.proc.wait(timeout=60) != 0:
            raise SystemExit(f"bench.py: scx_morpheus exited with {self.proc.returncode}; see {self.log.name}")


def detection(agent, bin_dir, seconds):
    subprocess.run([os.path.join(bin_dir, "morpheus-e2e-worker"), "--seconds", str(seconds), "cooperative"],
                   check=True, capture_output=True, env=dict(os.environ, MORPHEUS_SOCKET=agent.sock), timeout=seconds + 120)
    return {k: agent.stat(f"/reactions/hint/{k}") for k in ("count", "p50_us", "p99_us", "max_us")}


def spread(values):
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--slice-us", type=int, default=1000)
    # The hint rate limit (--hint-interval-us) well under the slice: at its default (1 ms) and a 1 ms
    # slice, a slice that ends under 1 ms after the previous hint has its hint held back to the next
    # check, which is the policy's rate limit, not the detection this measures.
    ap.add_argument("--hint-interval-us", type=int, default=100)
    ap.add_argument("--pipe-loops", type=int, default=200000)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="morpheus-trace-bench-") as workdir:
        for r in range(1, args.rounds + 1):
            without_before = pipe_usecs(args.pipe_loops)
            trace = Agent(args.bin_dir, "trace", args.slice_us, args.hint_interval_us, workdir)
            try:
                stats_fd = enable_bpf_stats()
                try:
                    ns0, cnt0 = prog_run_time("morpheus_switch")
                    with_progs = pipe_usecs(args.pipe_loops)
                    ns1, cnt1 = prog_run_time("morpheus_switch")
                finally:
                    os.close(stats_fd)
                switch_ns = (ns1 - ns0) / max(cnt1 - cnt0, 1)
                t = detection(trace, args.bin_dir, args.seconds)
            finally:
                trace.stop()
            sim = Agent(args.bin_dir, "sim", args.slice_us, args.hint_interval_us, workdir)
            try:
                s = detection(sim, args.bin_dir, args.seconds)
            finally:
                sim.stop()
            without = (without_before + pipe_usecs(args.pipe_loops)) / 2
            row = dict(round=r, pipe_without=without, pipe_with=with_progs, switch_ns=switch_ns, trace=t, sim=s)
            rows.append(row)
            print(f"round {r}: pipe round trip {without:.2f} us without, {with_progs:.2f} us with the trace programs "
                  f"({with_progs / without:.3f}x), sched_switch program {switch_ns:.0f} ns a run; detection trace p50/p99/max {t['p50_us']:.0f}/{t['p99_us']:.0f}/{t['max_us']:.0f} us "
                  f"({t['count']:.0f} hints), sim {s['p50_us']:.0f}/{s['p99_us']:.0f}/{s['max_us']:.0f} us ({s['count']:.0f} hints)", flush=True)
    print()
    print(f"summary over {args.rounds} rounds (median (min-max)), slice {args.slice_us} us, hint interval {args.hint_interval_us} us, "
          f"{args.seconds:g} s of cooperative worker per backend:")
    for k in ("p50_us", "p99_us", "max_us"):
        print(f"  detection {k[:-3]:>3}: trace {spread([row['trace'][k] for row in rows])} us, "
              f"sim {spread([row['sim'][k] for row in rows])} us, trace/sim {spread([row['trace'][k] / max(row['sim'][k], 1e-9) for row in rows])}")
    print(f"  context switch (perf bench sched pipe, {args.pipe_loops} round trips): with/without the trace programs "
          f"{spread([row['pipe_with'] / row['pipe_without'] for row in rows])}")
    print(f"  tp_btf/sched_switch program (no worker registered): {spread([row['switch_ns'] for row in rows])} ns a run "
          f"(kernel BPF run-time stats during the ping-pong); two runs a round trip, so the round trip without "
          f"the programs plus them: {spread([1 + 2 * row['switch_ns'] / 1000 / row['pipe_without'] for row in rows])}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
