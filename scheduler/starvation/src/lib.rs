// SPDX-License-Identifier: GPL-2.0-only
//! The starvation scenario (scheduler/BENCHMARKS.md), shared by the `starvation` benchmark and the
//! scheduler comparison (scheduler/compare): one "zombie" worker that never reaches a checkpoint
//! beside cooperative workers, all pinned to one CPU, and the helpers both use (clocks, pinning,
//! registration through the agent's socket, the SDK's yield counters).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use morpheus::YieldReason;
use scx_morpheus::stats_socket;

/// The scenario's shape (the benchmark's command line, or the comparison's fixed table).
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Cooperative workers.
    pub workers: usize,
    /// Release period of each cooperative worker, in milliseconds.
    pub period_ms: u64,
    /// CPU work per release, in microseconds.
    pub work_us: u64,
    /// Work between two checkpoints, in microseconds.
    pub chunk_us: u64,
}

pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec { tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t, tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long };
    // SAFETY: valid timespec; EINTR just ends the sleep early and the caller measures from the deadline.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

pub fn pin_to(cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("cannot pin to CPU {cpu}"));
        }
    }
    Ok(())
}

/// Where a phase's workers register (None: Morpheus off).
#[derive(Clone)]
pub struct Target {
    /// The agent's socket; the region comes with its registration reply (both backends, ABI 1.3).
    pub socket: PathBuf,
}

/// Registers the calling thread through the agent, as an application would; escapable is the Rust
/// SDK's default (true) and stated only so the scenario does not change if the default does.
pub fn register(target: &Option<Target>) -> Result<Option<morpheus::Worker>> {
    let Some(t) = target else { return Ok(None) };
    let config = morpheus::Worker::builder().agent_socket(&t.socket).escapable(true);
    let worker = config.register().with_context(|| format!("registration with {}", t.socket.display()))?;
    if !worker.is_attached() {
        bail!("the worker registered with {} is detached", t.socket.display());
    }
    Ok(Some(worker))
}

/// Cooperative workers' yields, by reason (the SDK's own counters).
#[derive(Clone, Copy, Default)]
pub struct Yields {
    pub preempt: u64,
    pub budget: u64,
    pub defensive: u64,
}

impl Yields {
    pub fn of(worker: &morpheus::Worker) -> Yields {
        let counts = worker.yield_counts();
        Yields {
            preempt: counts.get(YieldReason::PreemptRequest),
            budget: counts.get(YieldReason::Budget),
            defensive: counts.get(YieldReason::Defensive),
        }
    }

    pub fn add(&mut self, other: Yields) {
        self.preempt += other.preempt;
        self.budget += other.budget;
        self.defensive += other.defensive;
    }

    pub fn total(&self) -> u64 {
        self.preempt + self.budget + self.defensive
    }
}

/// A phase's results: latencies, the zombie's CPU share, cooperative yields, slice + grace.
pub type Phase = (Vec<u64>, f64, Yields, Option<u64>);

pub fn run_phase(opts: &Scenario, cpu: usize, target: Option<Target>, seconds: f64) -> Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(opts.workers + 2));
    let mut handles = Vec::new();

    // The zombie: registered like the others, but never reaches a checkpoint.
    let zombie = {
        let (stop, barrier, target) = (Arc::clone(&stop), Arc::clone(&barrier), target.clone());
        std::thread::Builder::new().name("zombie".into()).spawn(move || -> Result<f64> {
            pin_to(cpu)?;
            let _worker = register(&target)?;
            barrier.wait();
            let (wall0, cpu0) = (monotonic_ns(), thread_cpu_ns());
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            Ok((thread_cpu_ns() - cpu0) as f64 / (monotonic_ns() - wall0).max(1) as f64)
        })?
    };

    let period = opts.period_ms * 1_000_000;
    let warmup_ns = 500_000_000;
    // The releases' common origin, set by the first worker past the barrier. Each worker's own clock
    // read would not do: the threads share one CPU with the zombie, so they run after the barrier up
    // to a tick apart, and the stagger (hence whether two workers' releases coincide) would change
    // from phase to phase.
    let origin = Arc::new(AtomicU64::new(0));
    for i in 0..opts.workers {
        let (stop, barrier, target, origin) = (Arc::clone(&stop), Arc::clone(&barrier), target.clone(), Arc::clone(&origin));
        let (work, chunk, workers) = (opts.work_us * 1000, opts.chunk_us * 1000, opts.workers as u64);
        handles.push(std::thread::Builder::new().name(format!("coop-{i}")).spawn(move || -> Result<(Vec<u64>, Yields, Option<u64>)> {
            pin_to(cpu)?;
            let worker = register(&target)?;
            barrier.wait();
            let now = monotonic_ns();
            let start = origin.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire).err().unwrap_or(now);
            // Stagger releases evenly over the period so the workers do not all wake at once. A worker
            // that first runs after its first release makes it late, within the warm-up, and keeps
            // its phase.
            let mut release = start + period * (i as u64 + 1) / workers;
            let mut latencies = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                sleep_until(release);
                let woke = monotonic_ns();
                if release >= start + warmup_ns {
                    latencies.push(woke.saturating_sub(release));
                }
                let cpu_start = thread_cpu_ns();
                while thread_cpu_ns() - cpu_start < work {
                    let piece = thread_cpu_ns();
                    while thread_cpu_ns() - piece < chunk {
                        std::hint::spin_loop();
                    }
                    if let Some(w) = &worker {
                        if w.checkpoint_sync() {
                            std::thread::yield_now();
                        }
                    }
                }
                release += period;
                // A release missed by more than a period is skipped, not queued: latency stays a
                // per-release figure instead of an ever-growing backlog.
                let now = monotonic_ns();
                if now > release + period {
                    release = now - (now - release) % period;
                }
            }
            let bound = worker.as_ref().and_then(|w| w.region()).map(|r| r.slice_ns() + r.grace_ns());
            Ok((latencies, worker.as_ref().map(Yields::of).unwrap_or_default(), bound))
        })?);
    }
    barrier.wait();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut yields = Yields::default();
    let mut bound = None;
    for h in handles {
        let (lat, y, b) = h.join().map_err(|_| anyhow::anyhow!("a worker thread panicked"))??;
        all.extend(lat);
        yields.add(y);
        bound = bound.or(b);
    }
    let zombie_share = zombie.join().map_err(|_| anyhow::anyhow!("the zombie thread panicked"))??;
    Ok((all, zombie_share, yields, bound))
}


/// scx_morpheus's stats snapshot as JSON (its `Metrics`), read through the agent's own stats client
/// from its stats socket. The request may take 30 s: under qemu TCG the agent answers at its next tick.
pub fn read_stats(socket: &Path) -> Result<serde_json::Value> {
    let path = stats_socket::path_for(socket);
    let metrics = stats_socket::Reader::connect_with_timeout(&path, Duration::from_secs(30))?.fetch()?;
    Ok(serde_json::to_value(metrics)?)
}

