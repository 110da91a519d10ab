// SPDX-License-Identifier: GPL-2.0-only
//! The comparison's workloads besides starvation (which is morpheus_starvation's scenario):
//! - latency (reference Table 1): closed-loop request workers, each op a think time then CPU work,
//!   with or without checkpoints between pieces of work, with or without CPU hogs beside them;
//! - liar (reference Table 3): a worker that holds a critical section of 100 or 500 ms of CPU and
//!   never checkpoints inside it; the cost to it (wall time over the CPU time it asked for) and the
//!   escalations it took inside sections;
//! - checkpoint cost: Table 1's shape, each worker alternating ops with and without checkpoints, so
//!   both kinds of op meet the same load at the same moments and their ratio is not the host's noise;
//! - batch: CPU-bound threads with no worker registered, wall time of a fixed amount of work.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use morpheus_starvation::{monotonic_ns, pin_to, sleep_until, thread_cpu_ns, Target};

/// Samples excluded at the start of a cell (registration, scheduler settling).
const WARMUP_NS: u64 = 300_000_000;

/// A worker for the calling thread: registered through scx_morpheus's agent when it runs, else a
/// detached one (checkpoints are the same call and never ask to yield), so "checkpoints on" costs
/// the same code under every scheduler.
fn worker_for(socket: Option<&Path>) -> Result<morpheus::Worker> {
    match socket {
        Some(socket) => {
            let w = morpheus::Worker::builder()
                .agent_socket(socket)
                .escapable(true)
                .register()
                .with_context(|| format!("registration with {}", socket.display()))?;
            if !w.is_attached() {
                return Err(anyhow!("the worker registered with {} is detached", socket.display()));
            }
            Ok(w)
        }
        None => Ok(morpheus::Worker::detached()?),
    }
}

/// `work_ns` of CPU (thread clock) in `chunk_ns` pieces, with a checkpoint between pieces when a
/// worker is given (yielding when it asks).
fn cpu_work(work_ns: u64, chunk_ns: u64, worker: Option<&morpheus::Worker>) {
    let start = thread_cpu_ns();
    while thread_cpu_ns() - start < work_ns {
        let piece = thread_cpu_ns();
        while thread_cpu_ns() - piece < chunk_ns {
            std::hint::spin_loop();
        }
        if let Some(w) = worker {
            if w.checkpoint_sync() {
                std::thread::yield_now();
            }
        }
    }
}

/// Unregistered CPU hogs, one per CPU (the "pressure" of Table 1), until `stop`.
fn spawn_hogs(n: usize, stop: &Arc<AtomicBool>) -> Result<Vec<std::thread::JoinHandle<()>>> {
    (0..n)
        .map(|i| {
            let stop = Arc::clone(stop);
            std::thread::Builder::new()
                .name(format!("hog-{i}"))
                .spawn(move || {
                    let mut x = 1u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
                .map_err(Into::into)
        })
        .collect()
}

/// Which ops of a latency cell reach checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpoints {
    Off,
    On,
    /// Every other op of each worker (worker i starts with checkpoints when i is even); the worker
    /// stays registered throughout, so requests raised during an op without checkpoints wait for the
    /// next op with them.
    Alternating,
}

#[derive(Clone, Copy, Debug)]
pub struct LatencyShape {
    pub workers: usize,
    pub pressure: bool,
    pub checkpoints: Checkpoints,
    pub think_us: u64,
    pub work_us: u64,
    pub chunk_us: u64,
}

/// Per-op latencies (ns) after the warm-up, split by whether the op reached checkpoints, over
/// `seconds - warm-up`.
pub struct LatencyResult {
    pub with_checkpoints_ns: Vec<u64>,
    pub without_checkpoints_ns: Vec<u64>,
    pub measured_s: f64,
}

impl LatencyResult {
    pub fn ops(&self) -> u64 {
        (self.with_checkpoints_ns.len() + self.without_checkpoints_ns.len()) as u64
    }

    pub fn all_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.with_checkpoints_ns.iter().chain(&self.without_checkpoints_ns).copied()
    }
}

/// Table 1: each worker loops { sleep think; CPU work }; an op's latency is from the end of its
/// think time (when it should start) to the end of its work, so it counts the wake-up delay and
/// every preemption during the work.
pub fn latency(shape: LatencyShape, socket: Option<&Path>, ncpu: usize, seconds: f64) -> Result<LatencyResult> {
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(shape.workers + 1));
    let hogs = if shape.pressure { spawn_hogs(ncpu, &stop)? } else { Vec::new() };
    let mut handles = Vec::new();
    for i in 0..shape.workers {
        let (stop, barrier) = (Arc::clone(&stop), Arc::clone(&barrier));
        let registered = shape.checkpoints != Checkpoints::Off;
        let socket = if registered { socket.map(Path::to_path_buf) } else { None };
        handles.push(std::thread::Builder::new().name(format!("req-{i}")).spawn(move || -> Result<(Vec<u64>, Vec<u64>)> {
            let worker = if registered { Some(worker_for(socket.as_deref())?) } else { None };
            barrier.wait();
            let start = monotonic_ns();
            let (think, work, chunk) = (shape.think_us * 1000, shape.work_us * 1000, shape.chunk_us * 1000);
            let (mut with, mut without) = (Vec::new(), Vec::new());
            let mut due = start + think;
            let mut op = i;
            while !stop.load(Ordering::Relaxed) {
                let checkpointed = match shape.checkpoints {
                    Checkpoints::Off => false,
                    Checkpoints::On => true,
                    Checkpoints::Alternating => op % 2 == 0,
                };
                sleep_until(due);
                cpu_work(work, chunk, worker.as_ref().filter(|_| checkpointed));
                let done = monotonic_ns();
                if due >= start + WARMUP_NS && !stop.load(Ordering::Relaxed) {
                    if checkpointed { &mut with } else { &mut without }.push(done.saturating_sub(due));
                }
                due = done + think;
                op += 1;
            }
            Ok((with, without))
        })?);
    }
    barrier.wait();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut result = LatencyResult {
        with_checkpoints_ns: Vec::new(),
        without_checkpoints_ns: Vec::new(),
        measured_s: seconds - WARMUP_NS as f64 / 1e9,
    };
    for h in handles {
        let (with, without) = h.join().map_err(|_| anyhow!("a request worker panicked"))??;
        result.with_checkpoints_ns.extend(with);
        result.without_checkpoints_ns.extend(without);
    }
    for h in hogs {
        h.join().map_err(|_| anyhow!("a hog thread panicked"))?;
    }
    Ok(result)
}

/// Per section: wall time over the CPU time it asked for, minus 1 (parts per million), and the
/// escalations the worker took while inside it.
pub struct LiarResult {
    pub overhead_ppm: Vec<u64>,
    pub escalations_inside: u64,
}

/// The worker's SCB escalation counter (0 when detached).
fn escalations_of(worker: &morpheus::Worker) -> u64 {
    let (Some(region), Some(slot)) = (worker.region(), worker.slot()) else { return 0 };
    match region.scb_ptr(slot) {
        // SAFETY: the SCB of our own live registration; the field is read with a volatile load
        // (the scheduler updates it with atomics).
        Ok(scb) => unsafe { u64::from(std::ptr::read_volatile(std::ptr::addr_of!((*scb).escalations))) },
        Err(_) => 0,
    }
}

/// The calling thread's context switches, voluntary and involuntary, and its kernel time (diagnostics).
struct ThreadUsage {
    switches: u64,
    involuntary: u64,
    stime_us: u64,
}

fn thread_usage() -> ThreadUsage {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; RUSAGE_THREAD is Linux's.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ThreadUsage {
        switches: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
        involuntary: ru.ru_nivcsw as u64,
        stime_us: ru.ru_stime.tv_sec as u64 * 1_000_000 + ru.ru_stime.tv_usec as u64,
    }
}

/// Idle + iowait time (ms) of the /proc/stat line `name` ("cpu": all CPUs, "cpuN": one) in `stat`.
fn idle_ms_of(stat: &str, name: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.split_ascii_whitespace().next() == Some(name))?;
    let ticks: u64 = line.split_ascii_whitespace().skip(4).take(2).filter_map(|v| v.parse::<u64>().ok()).sum();
    // SAFETY: sysconf has no preconditions.
    Some(ticks * 1000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64)
}

/// Idle time of `cpu` so far (ms), from /proc/stat (diagnostics).
fn idle_ms(cpu: usize) -> u64 {
    idle_ms_of(&std::fs::read_to_string("/proc/stat").unwrap_or_default(), &format!("cpu{cpu}")).unwrap_or(0)
}

/// Table 3: the liar, pinned to `cpu`, loops { critical section of `section_ms` of CPU without a
/// checkpoint; checkpoint (yield if asked); sleep `rest_ms` }.
pub fn liar(section_ms: u64, rest_ms: u64, cpu: usize, socket: Option<&Path>, seconds: f64) -> Result<LiarResult> {
    let socket = socket.map(Path::to_path_buf);
    let handle = std::thread::Builder::new().name("liar".into()).spawn(move || -> Result<LiarResult> {
        pin_to(cpu)?;
        let worker = worker_for(socket.as_deref())?;
        let section = section_ms * 1_000_000;
        let start = monotonic_ns();
        let end = start + (seconds * 1e9) as u64;
        let mut result = LiarResult { overhead_ppm: Vec::new(), escalations_inside: 0 };
        // A section is only started when it can end inside the cell's time at no overhead.
        while monotonic_ns() + section < end {
            let sw0 = thread_usage().involuntary;
            let idle0 = idle_ms(cpu);
            let guard = worker.critical_section();
            // Read inside the section at both ends: an escalation between the exit and the
            // acknowledgement below is of a worker outside its section, ignoring a request.
            let esc0 = escalations_of(&worker);
            let (wall0, cpu0) = (monotonic_ns(), thread_cpu_ns());
            while thread_cpu_ns() - cpu0 < section {
                std::hint::spin_loop();
            }
            let (wall, used) = (monotonic_ns() - wall0, thread_cpu_ns() - cpu0);
            let esc1 = escalations_of(&worker);
            drop(guard);
            if std::env::var_os("COMPARE_DEBUG").is_some() {
                eprintln!(
                    "liar: section wall {} µs cpu {} µs switches {} cpu{cpu} idle {} ms escalations {}",
                    wall / 1000,
                    used / 1000,
                    thread_usage().involuntary - sw0,
                    idle_ms(cpu).saturating_sub(idle0),
                    esc1.wrapping_sub(esc0)
                );
            }
            result.escalations_inside += esc1.wrapping_sub(esc0) & u64::from(u32::MAX);
            if wall0 >= start + WARMUP_NS {
                result.overhead_ppm.push((wall.saturating_sub(used)) * 1_000_000 / used.max(1));
            }
            if worker.checkpoint_sync() {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(rest_ms));
        }
        Ok(result)
    })?;
    handle.join().map_err(|_| anyhow!("the liar thread panicked"))?
}

/// One run of the batch: its wall time, and where the machine's time went meanwhile (what the batch's
/// cost over EEVDF is made of; measurement only, the verdict reads `wall_ns`).
pub struct BatchRun {
    pub wall_ns: u64,
    /// Context switches on the whole machine (/proc/stat `ctxt`).
    pub ctxt: u64,
    /// Idle time summed over the CPUs (/proc/stat `idle` + `iowait`), ms: a CPU idle
    /// while the batch ran, because a thread waited elsewhere or finished before the other.
    pub idle_ms: u64,
    /// The batch threads' own switches (getrusage RUSAGE_THREAD, voluntary + involuntary).
    pub thread_switches: u64,
    /// Kernel time charged to the batch threads (ru_stime, as the tick samples it), µs.
    pub thread_stime_us: u64,
}

/// /proc/stat's `ctxt` and the idle time of all CPUs (ms).
fn proc_stat() -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let ctxt = stat.lines().find_map(|l| l.strip_prefix("ctxt ")).and_then(|v| v.trim().parse().ok());
    match (ctxt, idle_ms_of(&stat, "cpu")) {
        (Some(c), Some(i)) => Ok((c, i)),
        _ => Err(anyhow!("/proc/stat has no `cpu` or `ctxt` line")),
    }
}

/// BPF programs' run time so far (with `kernel.bpf_stats_enabled`; COMPARE_DEBUG turns it on): by
/// program id, (tag, run_time_ns, run_cnt), read from the fdinfo of every process that holds one.
pub fn bpf_prog_stats() -> std::collections::BTreeMap<u64, (String, u64, u64)> {
    let mut progs = std::collections::BTreeMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return progs };
    for pid in procs.flatten() {
        let Ok(fds) = std::fs::read_dir(pid.path().join("fdinfo")) else { continue };
        for fd in fds.flatten() {
            let Ok(text) = std::fs::read_to_string(fd.path()) else { continue };
            if !text.contains("run_time_ns:") {
                continue;
            }
            let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
            let num = |name: &str| field(name).and_then(|v| v.parse::<u64>().ok());
            if let (Some(id), Some(ns), Some(cnt)) = (num("prog_id:"), num("run_time_ns:"), num("run_cnt:")) {
                let name = format!("{} ({} insns)", field("prog_tag:").unwrap_or(""), field("verified_insns:").unwrap_or("?"));
                progs.insert(id, (name, ns, cnt));
            }
        }
    }
    progs
}

/// The batch: `threads` threads of `iterations` multiply-adds each, no worker.
pub fn batch(threads: usize, iterations: u64) -> Result<BatchRun> {
    // Before the threads start: an error here leaves none waiting at the barrier.
    let (ctxt0, idle0) = proc_stat()?;
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let before = thread_usage();
                let mut x = 1u64;
                for _ in 0..iterations {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
                std::hint::black_box(x);
                let after = thread_usage();
                (after.switches - before.switches, after.stime_us - before.stime_us)
            })
        })
        .collect();
    barrier.wait();
    let t0 = monotonic_ns();
    let mut run = BatchRun { wall_ns: 0, ctxt: 0, idle_ms: 0, thread_switches: 0, thread_stime_us: 0 };
    for h in handles {
        let (switches, stime) = h.join().map_err(|_| anyhow!("a batch thread panicked"))?;
        run.thread_switches += switches;
        run.thread_stime_us += stime;
    }
    run.wall_ns = monotonic_ns() - t0;
    let (ctxt1, idle1) = proc_stat()?;
    run.ctxt = ctxt1.saturating_sub(ctxt0);
    run.idle_ms = idle1.saturating_sub(idle0);
    Ok(run)
}

/// The starvation cell's target: scx_morpheus's socket, when it runs.
pub fn target(socket: Option<&Path>) -> Option<Target> {
    socket.map(|s| Target { socket: s.to_path_buf() })
}
