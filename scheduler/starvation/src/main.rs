// SPDX-License-Identifier: GPL-2.0-only
//! Starvation benchmark (scheduler/BENCHMARKS.md).
//!
//! One "zombie" worker that never reaches a checkpoint runs beside N cooperative workers, all pinned
//! to the same CPU. Each cooperative worker is released every `--period-ms`, does `--work-us` of CPU
//! work in `--chunk-us` pieces with a Morpheus checkpoint between pieces, and records its
//! scheduling latency: how late it started relative to its release. The same scenario runs with
//! Morpheus off (no scheduler, workers unregistered), observer and enforced (scx_morpheus started by
//! this program with a private socket), and the table compares them in the same run.
//!
//! `--backend sim` (the default) runs scx_morpheus's simulation backend in a private runtime directory (each user's region comes with the registration reply);
//! `--backend kernel` runs the sched_ext BPF scheduler (a kernel with sched_ext, as root: the VM test
//! scheduler/e2e/starvation-vm.sh), whose region is the pinned map the workers find by discovery.
//!
//! Workers are what an application gets: `morpheus::Worker` registered through the agent's socket,
//! `checkpoint_sync` between pieces of work, and the SDK's runtime modes (a PRESSURED or DEFENSIVE
//! worker also yields on its own budget; the per-reason yield counts are printed).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use morpheus_starvation::{read_stats, run_phase, Scenario, Target, Yields};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Off,
    Observer,
    Enforced,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Observer => "observer",
            Mode::Enforced => "enforced",
        }
    }
}

/// `--backend`: which scx_morpheus backend the observer and enforced modes run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    /// The simulation backend (any kernel), private runtime directory.
    Sim,
    /// The sched_ext BPF scheduler (needs sched_ext and root); region pinned on bpffs.
    Kernel,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Kernel => "kernel",
        }
    }
}

/// Where the running kernel reports whether a sched_ext scheduler is loaded.
const SCHED_EXT_STATE: &str = "/sys/kernel/sched_ext/state";

#[derive(Debug, Parser)]
#[command(name = "starvation", about = "Cooperative workers' scheduling latency beside a non-yielding worker")]
struct Opts {
    /// Cooperative workers.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// CPU every worker is pinned to (default: the last online CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// Seconds each mode runs (in total, over all rounds).
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Rounds: the modes run in turn this many times, each for --seconds / --rounds, and each mode's
    /// samples are pooled, so that load from outside the benchmark falls on every mode alike.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Release period of each cooperative worker, in milliseconds.
    #[arg(long, default_value_t = 10)]
    period_ms: u64,
    /// CPU work per release, in microseconds.
    #[arg(long, default_value_t = 2000)]
    work_us: u64,
    /// Work between two checkpoints, in microseconds.
    #[arg(long, default_value_t = 50)]
    chunk_us: u64,
    /// Modes to run, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![Mode::Off, Mode::Observer, Mode::Enforced])]
    modes: Vec<Mode>,
    /// scx_morpheus backend of the observer and enforced modes.
    #[arg(long, value_enum, default_value_t = Backend::Sim)]
    backend: Backend,
    /// The scx_morpheus binary (default: next to this one).
    #[arg(long)]
    scheduler: Option<PathBuf>,
    /// Extra arguments for scx_morpheus (e.g. --slice-us=2000).
    #[arg(long = "scheduler-arg", allow_hyphen_values = true)]
    scheduler_args: Vec<String>,
}

/// One mode's results, pooled over the rounds.
#[derive(Default)]
struct PhaseResult {
    latencies_ns: Vec<u64>,
    /// Sum over rounds of the zombie's CPU share (divide by the rounds).
    zombie_cpu_share: f64,
    yields: Yields,
    /// scx_morpheus's stats (its scx_stats snapshot, JSON) at the end of each round.
    totals: Vec<serde_json::Value>,
    /// slice_ns + grace_ns as the region header published them (a registered worker read it).
    slice_plus_grace_ns: Option<u64>,
}

impl Opts {
    fn scenario(&self) -> Scenario {
        Scenario { workers: self.workers, period_ms: self.period_ms, work_us: self.work_us, chunk_us: self.chunk_us }
    }
}

fn start_scheduler(bin: &Path, backend: Backend, mode: Mode, dir: &Path, extra: &[String]) -> Result<(Child, Target)> {
    let target = Target { socket: dir.join("agent.sock") };
    let mut command = Command::new(bin);
    command.args(["--backend", backend.name(), "--mode", mode.name(), "--policy", "kick"]);
    let mut child = command
        .arg("--socket")
        .arg(&target.socket)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !target.socket.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("{} exited early ({status})", bin.display());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} did not open {} within 10 s", bin.display(), target.socket.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok((child, target))
}

fn stop_scheduler(mut child: Child) -> Result<()> {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait()?;
    if !status.success() {
        bail!("scx_morpheus exited with {status}");
    }
    Ok(())
}

/// After the kernel backend exits, waits until the kernel is back on its default scheduler, so the
/// next mode (`off` in particular) does not run while sched_ext is still being disabled.
fn wait_sched_ext_disabled() -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(SCHED_EXT_STATE).with_context(|| format!("cannot read {SCHED_EXT_STATE}"))?;
        if state.trim() == "disabled" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{SCHED_EXT_STATE} is still '{}' 10 s after scx_morpheus exited", state.trim());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The stats counters the report sums over rounds: (label, JSON pointer into the snapshot).
const TOTALS: [(&str, &str); 10] = [
    ("ticks", "/ticks"),
    ("hints", "/hints_emitted"),
    ("dropped", "/hints_dropped"),
    ("escalations", "/escalations"),
    ("kick", "/actions/KICK"),
    ("throttle", "/actions/THROTTLE"),
    ("demote", "/actions/DEMOTE"),
    ("restore", "/actions/RESTORE"),
    ("blocked_within_grace", "/gate_verdicts/within_grace"),
    ("effect_errors", "/effect_errors"),
];

/// A counter of the stats snapshots (labelled as in TOTALS), summed over the rounds ("-" without a scheduler).
fn field(totals: &[serde_json::Value], label: &str) -> String {
    if totals.is_empty() {
        return "-".into();
    }
    let pointer = TOTALS.iter().find(|(l, _)| *l == label).map(|(_, p)| *p).expect("a label of TOTALS");
    totals.iter().map(|t| t.pointer(pointer).and_then(|v| v.as_u64()).unwrap_or(0)).sum::<u64>().to_string()
}

/// Runs one mode once (starting and stopping scx_morpheus around it) and pools the results.
fn run_mode(opts: &Opts, mode: Mode, cpu: usize, bin: &Path, seconds: f64, result: &mut PhaseResult) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("morpheus-starvation-{}-{}", std::process::id(), mode.name()));
    std::fs::create_dir_all(&dir)?;
    let (child, target) = if mode == Mode::Off {
        (None, None)
    } else {
        let (child, target) = start_scheduler(bin, opts.backend, mode, &dir, &opts.scheduler_args)?;
        (Some(child), Some(target))
    };
    let socket = target.as_ref().map(|t| t.socket.clone());
    let phase = run_phase(&opts.scenario(), cpu, target, seconds);
    let totals = match child {
        Some(child) => {
            // Read before stopping: the counters of the round, from the running scheduler.
            let totals = socket.as_deref().map(read_stats).transpose();
            stop_scheduler(child)?;
            let totals = totals?;
            if opts.backend == Backend::Kernel {
                wait_sched_ext_disabled()?;
            }
            totals
        }
        None => None,
    };
    let _ = std::fs::remove_dir_all(&dir);
    let (latencies_ns, zombie_cpu_share, yields, bound) = phase?;
    result.slice_plus_grace_ns = result.slice_plus_grace_ns.or(bound);
    result.latencies_ns.extend(latencies_ns);
    result.zombie_cpu_share += zombie_cpu_share;
    result.yields.add(yields);
    result.totals.extend(totals);
    Ok(())
}

fn main() -> Result<()> {
    let opts = Opts::parse();
    if opts.workers == 0 || opts.period_ms == 0 || opts.work_us == 0 || opts.chunk_us == 0 || opts.seconds <= 0.0 || opts.rounds == 0 {
        bail!("--workers, --period-ms, --work-us, --chunk-us, --seconds and --rounds must be positive");
    }
    let seconds = opts.seconds / opts.rounds as f64;
    if seconds <= 0.5 {
        bail!("--seconds {} / --rounds {}: each run must last longer than the 0.5 s warm-up", opts.seconds, opts.rounds);
    }
    // SAFETY: sysconf has no preconditions.
    let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let cpu = opts.cpu.unwrap_or(ncpu - 1);
    if cpu >= ncpu {
        bail!("--cpu {cpu}: this machine has CPUs 0..{}", ncpu - 1);
    }
    let bin = match &opts.scheduler {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("scx_morpheus"),
    };
    if opts.modes.iter().any(|m| *m != Mode::Off) && !bin.exists() {
        bail!("scx_morpheus not found at {} (build it, or pass --scheduler)", bin.display());
    }
    if opts.backend == Backend::Kernel {
        match std::fs::read_to_string(SCHED_EXT_STATE) {
            Ok(state) if state.trim() == "disabled" => {}
            Ok(state) => bail!("--backend kernel: a sched_ext scheduler is already loaded ({SCHED_EXT_STATE} is '{}')", state.trim()),
            Err(e) => bail!("--backend kernel: this kernel has no sched_ext ({SCHED_EXT_STATE}: {e}); use --backend sim"),
        }
    }
    println!(
        "starvation: 1 zombie + {} cooperative workers pinned to CPU {cpu} (of {ncpu}); release every {} ms, {} µs of work in {} µs pieces; {} s per mode in {} round(s); scx_morpheus backend {}",
        opts.workers, opts.period_ms, opts.work_us, opts.chunk_us, opts.seconds, opts.rounds, opts.backend.name()
    );
    let mut results: Vec<(Mode, PhaseResult)> = opts.modes.iter().map(|m| (*m, PhaseResult::default())).collect();
    for _round in 0..opts.rounds {
        for (mode, result) in results.iter_mut() {
            run_mode(&opts, *mode, cpu, &bin, seconds, result)?;
        }
    }
    for (_, r) in results.iter_mut() {
        r.latencies_ns.sort_unstable();
        r.zombie_cpu_share /= opts.rounds as f64;
    }

    let quantiles = |l: &[u64]| [percentile(l, 50.0), percentile(l, 95.0), percentile(l, 99.0), *l.last().unwrap_or(&0)];
    let off = results.iter().find(|(m, _)| *m == Mode::Off).map(|(_, r)| quantiles(&r.latencies_ns));
    println!(
        "{:<9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>11} {:>7}",
        "mode", "samples", "p50_us", "p95_us", "p99_us", "max_us", "p50/off", "p95/off", "p99/off", "max/off", "hints", "yields", "escalations", "zombie%"
    );
    for (mode, r) in &results {
        let l = &r.latencies_ns;
        let q = quantiles(l);
        let ratio = |i: usize| match off {
            Some(base) if base[i] != 0 => format!("{:.3}", q[i] as f64 / base[i] as f64),
            _ => "-".to_string(),
        };
        println!(
            "{:<9} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>11} {:>7.1}",
            mode.name(),
            l.len(),
            q[0] as f64 / 1e3,
            q[1] as f64 / 1e3,
            q[2] as f64 / 1e3,
            q[3] as f64 / 1e3,
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3),
            field(&r.totals, "hints"),
            r.yields.total(),
            field(&r.totals, "escalations"),
            r.zombie_cpu_share * 100.0
        );
    }
    for (mode, r) in &results {
        if let Some(bound) = r.slice_plus_grace_ns {
            let q = quantiles(&r.latencies_ns);
            let vs_off = off.filter(|b| b[2] != 0).map_or("-".to_string(), |b| format!("{:.3}", q[2] as f64 / b[2] as f64));
            println!(
                "{}: p99 {:.1} µs = {:.2} x (slice + grace = {:.1} µs); p99/off {vs_off}",
                mode.name(),
                q[2] as f64 / 1e3,
                q[2] as f64 / bound as f64,
                bound as f64 / 1e3
            );
        }
    }
    for (mode, r) in &results {
        if *mode != Mode::Off {
            let y = r.yields;
            println!("{}: cooperative yields by reason: preempt_request={} budget={} defensive={}", mode.name(), y.preempt, y.budget, y.defensive);
        }
        if !r.totals.is_empty() {
            let sums: Vec<String> = TOTALS
                .iter()
                .map(|(k, _)| format!("{k}={}", field(&r.totals, k)))
                .collect();
            println!("{}: scx_morpheus totals over {} round(s): {}", mode.name(), r.totals.len(), sums.join(" "));
        }
    }
    Ok(())
}
