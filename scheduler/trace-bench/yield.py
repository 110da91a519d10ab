#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Time to yield per SDK on the tracing backend: from the request (the scheduler's increment of
preempt_seq) to the acknowledgement (the runtime's store to last_ack_seq), p50/p99, with the checkpoint
density stated.

One scx_morpheus --backend trace (observer, --slice-us, --hint-interval-us; a mount namespace of its own
with a private bpffs on /sys/fs/bpf). Per round, per SDK, one process of that SDK's e2e worker
(scheduler/e2e/: `--seconds S cooperative`: a checkpoint between pieces of busy work, a yield when it
says so) registers with it, and this script, as root, finds the worker's SCB in the worker's own
mapping of its region (/proc/PID/maps and /proc/PID/mem: the mapping whose first bytes are
REGION_MAGIC, the slot whose pid is the worker's and whose worker_state is RUNNING; offsets from the
generated ABI module abi/python/morpheus_abi) and then:

  1. Checkpoint density, for --calibrate seconds: a hardware read/write breakpoint (perf_event_open,
     PERF_TYPE_BREAKPOINT, counting only) on the slot's preempt_seq counts the worker's loads of it, one
     per checkpoint, over the thread's on-CPU time (/proc/PID/task/TID/schedstat): "a checkpoint every
     N µs of CPU". Each load then traps, so this is an upper bound on the interval.
  2. Time to yield, for the rest of the run: a hardware write breakpoint on last_ack_seq, sampled at
     every write with a CLOCK_MONOTONIC timestamp (the acknowledgement's time, taken in the worker's
     context right after its store). After each wake-up the SCB is read: when preempt_seq ==
     last_ack_seq (nothing pending), last_hint_ns is the CLOCK_MONOTONIC time at which that request was
     published (SCB.md: stored before the increment), and the sample is ack time - last_hint_ns. A
     wake-up that finds a newer request already pending is not paired (counted as unpaired): no time
     is guessed.

Each SDK's figures are pooled over the rounds and the spread of the per-round p99 is printed.
Needs root and a kernel with BPF, BTF and hardware breakpoints (perf's `breakpoint` PMU).
"""
import argparse
import ctypes
import mmap
import os
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "abi", "python"))
import morpheus_abi as abi  # noqa: E402

# perf_event_open(2) on x86-64 and include/uapi/linux/perf_event.h, hw_breakpoint.h.
SYS_PERF_EVENT_OPEN = 298
PERF_TYPE_BREAKPOINT = 5
HW_BREAKPOINT_W = 2
HW_BREAKPOINT_RW = 3
HW_BREAKPOINT_LEN_8 = 8
PERF_SAMPLE_TIME = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3
ATTR_EXCLUDE_KERNEL = 1 << 5
ATTR_USE_CLOCKID = 1 << 25
CLOCK_MONOTONIC = 1
PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
PERF_EVENT_IOC_ENABLE = 0x2400
# struct perf_event_mmap_page: data_head, data_tail, data_offset, data_size.
MMAP_DATA_HEAD, MMAP_DATA_TAIL, MMAP_DATA_OFFSET, MMAP_DATA_SIZE = 1024, 1032, 1040, 1048
RING_PAGES = 64

libc = ctypes.CDLL(None, use_errno=True)


def perf_breakpoint(tid, addr, bp_type, sample):
    """A perf event on one thread: a hardware breakpoint on the 8 bytes at `addr` in its address space;
    with `sample`, a CLOCK_MONOTONIC-stamped sample at every hit, else counting only."""
    # PERF_ATTR_SIZE_VER5 (112 bytes): type, size, config, sample_period, sample_type, read_format,
    # flags, wakeup_events, bp_type, bp_addr, bp_len, branch_sample_type, sample_regs_user,
    # sample_stack_user, clockid, sample_regs_intr, aux_watermark, sample_max_stack, reserved.
    flags = ATTR_EXCLUDE_KERNEL | (ATTR_USE_CLOCKID if sample else 0)
    attr = struct.pack("<IIQQQQQIIQQQQIiQIHH", PERF_TYPE_BREAKPOINT, 112, 0, 1 if sample else 0,
                       PERF_SAMPLE_TIME if sample else 0, 0, flags, 1 if sample else 0, bp_type, addr,
                       HW_BREAKPOINT_LEN_8, 0, 0, 0, CLOCK_MONOTONIC if sample else 0, 0, 0, 0, 0)
    assert len(attr) == 112
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(SYS_PERF_EVENT_OPEN, buf, tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"perf_event_open (hardware breakpoint on tid {tid} at {addr:#x}): {os.strerror(err)}")
    return fd


class Ring:
    """The sample ring of a sampling perf event: yields the timestamps of its samples."""

    def __init__(self, fd):
        self.map = mmap.mmap(fd, (1 + RING_PAGES) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.offset, self.size = struct.unpack_from("<QQ", self.map, MMAP_DATA_OFFSET)
        self.lost = 0

    def drain(self):
        head = struct.unpack_from("<Q", self.map, MMAP_DATA_HEAD)[0]
        tail = struct.unpack_from("<Q", self.map, MMAP_DATA_TAIL)[0]
        times = []
        while tail < head:
            pos = self.offset + tail % self.size
            rtype, _misc, rsize = struct.unpack_from("<IHH", self.read(pos, 8))
            body = self.read(self.offset + (tail + 8) % self.size, rsize - 8)
            if rtype == PERF_RECORD_SAMPLE:
                times.append(struct.unpack_from("<Q", body)[0])
            elif rtype == PERF_RECORD_LOST:
                self.lost += struct.unpack_from("<QQ", body)[1]
            tail += rsize
        struct.pack_into("<Q", self.map, MMAP_DATA_TAIL, tail)
        return times

    def read(self, pos, n):
        end = self.offset + self.size
        if pos + n <= end:
            return self.map[pos:pos + n]
        return self.map[pos:end] + self.map[self.offset:self.offset + n - (end - pos)]


class Scb:
    """One worker's SCB as its own process maps it, read through /proc/PID/mem."""

    def __init__(self, proc, deadline):
        self.pid = pid = proc.pid
        self.mem = None
        while True:
            found = self.find()
            if found:
                self.base, self.tid = found
                return
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise SystemExit(f"yield.py: worker {pid} exited ({proc.returncode}) before it was found registered:\n{out}{err}")
            if time.monotonic() > deadline:
                raise SystemExit(f"yield.py: worker {pid} shows no RUNNING slot of its own in any mapped region")
            time.sleep(0.05)

    def find(self):
        # Opened afresh on every look: a descriptor of /proc/PID/mem keeps the address space it was
        # opened on, and the process starts as `sh` before it execs the worker.
        if self.mem is not None:
            os.close(self.mem)
        try:
            self.mem = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
            maps = open(f"/proc/{self.pid}/maps").read().splitlines()
        except FileNotFoundError:
            raise SystemExit(f"yield.py: worker {self.pid} exited before it registered")
        for line in maps:
            parts = line.split()
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if parts[1][3] != "s" or end - start < abi.RegionHeader.SIZE:
                continue
            try:
                head = os.pread(self.mem, abi.RegionHeader.SIZE, start)
            except OSError:
                continue
            if len(head) < abi.RegionHeader.SIZE:
                continue  # e.g. a shared file mapping past its file's end
            H = abi.RegionHeader
            if struct.unpack_from(H.MAGIC.struct_format, head, H.MAGIC.offset)[0] != abi.REGION_MAGIC:
                continue
            header_size = struct.unpack_from(H.HEADER_SIZE.struct_format, head, H.HEADER_SIZE.offset)[0]
            stride = struct.unpack_from(H.SCB_STRIDE.struct_format, head, H.SCB_STRIDE.offset)[0]
            count = struct.unpack_from(H.SCB_COUNT.struct_format, head, H.SCB_COUNT.offset)[0]
            for i in range(count):
                base = start + header_size + i * stride
                if base + abi.Scb.SIZE > end:
                    break
                scb = os.pread(self.mem, abi.Scb.SIZE, base)
                if len(scb) < abi.Scb.SIZE:
                    break
                get = lambda f: struct.unpack_from(f.struct_format, scb, f.offset)[0]  # noqa: E731
                if get(abi.Scb.PID) == self.pid and get(abi.Scb.WORKER_STATE) == abi.WorkerState.RUNNING:
                    return base, get(abi.Scb.TID)
        return None

    def read(self):
        """(preempt_seq, last_hint_ns, last_ack_seq) now."""
        raw = os.pread(self.mem, abi.Scb.SIZE, self.base)
        return tuple(struct.unpack_from(f.struct_format, raw, f.offset)[0] for f in (abi.Scb.PREEMPT_SEQ, abi.Scb.LAST_HINT_NS, abi.Scb.LAST_ACK_SEQ))

    def addr(self, f):
        return self.base + f.offset


def on_cpu_ns(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def measure(sdk, command, sock, seconds, calibrate):
    """One worker run: (density: checkpoints per CPU-µs, samples in µs, unpaired, lost)."""
    proc = subprocess.Popen(["sh", "-c", f"exec {command} --seconds {seconds:g} cooperative"],
                            env=dict(os.environ, **{abi.ENV_SOCKET: sock}), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        scb = Scb(proc, time.monotonic() + 120)
        # 1. Density: loads of preempt_seq (one per checkpoint) per CPU-µs of the registered thread.
        fd = perf_breakpoint(scb.tid, scb.addr(abi.Scb.PREEMPT_SEQ), HW_BREAKPOINT_RW, sample=False)
        cpu0 = on_cpu_ns(proc.pid, scb.tid)
        time.sleep(calibrate)
        loads = struct.unpack("<Q", os.read(fd, 8))[0]
        cpu1 = on_cpu_ns(proc.pid, scb.tid)
        os.close(fd)
        density_us = (cpu1 - cpu0) / 1e3 / loads if loads else float("nan")
        # 2. Time to yield.
        fd = perf_breakpoint(scb.tid, scb.addr(abi.Scb.LAST_ACK_SEQ), HW_BREAKPOINT_W, sample=True)
        ring = Ring(fd)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        samples, unpaired, last_ack = [], 0, scb.read()[2]
        while proc.poll() is None:
            poller.poll(100)
            times = ring.drain()
            if not times:
                continue
            try:
                seq, hint_ns, ack = scb.read()
            except OSError:
                break  # the worker is gone
            if ack == seq and ack > last_ack and hint_ns and times[-1] >= hint_ns:
                samples.append((times[-1] - hint_ns) / 1e3)
                unpaired += ack - last_ack - 1
            else:
                unpaired += max(ack - last_ack, 1)
            last_ack = ack
        lost = ring.lost
        os.close(fd)
    finally:
        try:
            out, err = proc.communicate(timeout=seconds + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"yield.py: the {sdk} worker exited with {proc.returncode}:\n{out}{err}")
    return density_us, samples, unpaired, lost


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True, help="where scx_morpheus is")
    ap.add_argument("--worker", action="append", required=True, metavar="SDK=COMMAND",
                    help="an SDK's e2e worker command (shell words; `--seconds S cooperative` is appended)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--calibrate", type=float, default=1, help="seconds of the density count at the start of each run")
    ap.add_argument("--slice-us", type=int, default=1000)
    ap.add_argument("--hint-interval-us", type=int, default=100)
    args = ap.parse_args()
    if args.calibrate >= args.seconds:
        ap.error("--calibrate must be shorter than --seconds")
    workers = {}
    for spec in args.worker:
        sdk, sep, command = spec.partition("=")
        if not sep or not sdk or not command.strip():
            ap.error(f"--worker {spec!r}: expected SDK=COMMAND")
        workers[sdk] = command
    if os.geteuid() != 0:
        raise SystemExit("yield.py: needs root (the tracing backend's BPF programs, /proc/PID/mem of the workers)")
    if not os.path.exists("/sys/bus/event_source/devices/breakpoint"):
        raise SystemExit("yield.py: this kernel has no hardware breakpoint PMU (/sys/bus/event_source/devices/breakpoint)")
    results = {sdk: {"density": [], "samples": [], "p99": [], "unpaired": 0, "lost": 0} for sdk in workers}
    with tempfile.TemporaryDirectory(prefix="morpheus-yield-") as workdir:
        sock = os.path.join(workdir, "trace.sock")
        log = open(os.path.join(workdir, "trace.log"), "w")
        agent = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                                  'mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@"', os.path.join(args.bin_dir, "scx_morpheus"),
                                  "--backend", "trace", "--socket", sock, "--mode", "observer", "--slice-us", str(args.slice_us),
                                  "--hint-interval-us", str(args.hint_interval_us)], stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 120
            while not os.path.exists(sock):
                if agent.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    raise SystemExit("yield.py: scx_morpheus --backend trace did not start:\n" + open(log.name).read()[-2000:])
                time.sleep(0.05)
            for r in range(1, args.rounds + 1):
                order = list(workers)[(r - 1) % len(workers):] + list(workers)[:(r - 1) % len(workers)]
                line = []
                for sdk in order:
                    density, samples, unpaired, lost = measure(sdk, workers[sdk], sock, args.seconds, args.calibrate)
                    res = results[sdk]
                    res["density"].append(density)
                    res["samples"] += samples
                    res["p99"].append(pct(samples, 0.99))
                    res["unpaired"] += unpaired
                    res["lost"] += lost
                    line.append(f"{sdk} p50/p99 {pct(samples, 0.5):.0f}/{pct(samples, 0.99):.0f} us ({len(samples)} acks, "
                                f"a checkpoint every {density:.1f} us of CPU)")
                print(f"round {r}: " + "; ".join(line), flush=True)
        finally:
            agent.terminate()
            agent.wait(timeout=60)
    print()
    print(f"time to yield on the tracing backend (request: preempt_seq published, last_hint_ns; acknowledgement: the "
          f"worker's store to last_ack_seq), slice {args.slice_us} us, hint interval {args.hint_interval_us} us, "
          f"observer; {args.rounds} rounds x {args.seconds:g} s per SDK ({args.calibrate:g} s of it counting checkpoints); "
          f"load average {os.getloadavg()[0]:.1f}")
    print()
    print("| SDK | checkpoint every (µs of CPU), median [min–max] | acks | p50 µs | p99 µs | p99 per round, median [min–max] | unpaired | lost |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for sdk, res in results.items():
        d, p = res["density"], res["p99"]
        print(f"| {sdk} | {statistics.median(d):.1f} [{min(d):.1f}–{max(d):.1f}] | {len(res['samples'])} | "
              f"{pct(res['samples'], 0.5):.0f} | {pct(res['samples'], 0.99):.0f} | "
              f"{statistics.median(p):.0f} [{min(p):.0f}–{max(p):.0f}] | {res['unpaired']} | {res['lost']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
