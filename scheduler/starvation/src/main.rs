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
//! `--backend trace` runs its tracing backend (BPF programs at sched_switch and a BPF timer on the host
//! kernel, no sched_ext; root and a kernel with BPF and BTF) in a mount namespace of its own with a
//! private bpffs on /sys/fs/bpf, so its pins meet no other agent's;
//! `--backend kernel` runs the sched_ext BPF scheduler (a kernel with sched_ext, as root: the VM test
//! scheduler/e2e/starvation-vm.sh), whose region is the pinned map the workers find by discovery.
//! Several backends (`--backend sim,trace`) run side by side in the same rounds: each round runs `off`
//! once, then each backend's modes (the backends' order rotated by one each round), and every ratio to
//! `off` is also taken within its round, so the spread over the rounds is printed beside the pooled
//! figures.
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
    /// The tracing backend (BPF on the host kernel: needs root, BPF and BTF); private bpffs.
    Trace,
    /// The sched_ext BPF scheduler (needs sched_ext and root); region pinned on bpffs.
    Kernel,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Trace => "trace",
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
    /// scx_morpheus backends of the observer and enforced modes (several, comma-separated, run side by
    /// side in the same rounds).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![Backend::Sim])]
    backend: Vec<Backend>,
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
    /// Per round: that round's latencies' p50, p95, p99 and max (ns), for the spread over rounds.
    per_round: Vec<[u64; 4]>,
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
    let mut command = if backend == Backend::Trace {
        // Its own mount namespace with a private bpffs: exec keeps the pid, so the child is the agent.
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh", "-c", r#"mount -t bpf bpf /sys/fs/bpf && exec "$0" "$@""#]).arg(bin);
        c
    } else {
        Command::new(bin)
    };
    command.args(["--backend", backend.name(), "--mode", mode.name(), "--policy", "kick"]);
    let mut child = command
        .arg("--socket")
        .arg(&target.socket)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    // Loading and verifying BPF programs on a loaded 2-core host takes seconds, not milliseconds.
    let wait_s = if backend == Backend::Sim { 10 } else { 60 };
    let deadline = Instant::now() + Duration::from_secs(wait_s);
    while !target.socket.exists() {
        if let Some(status) = child.try_wait()? {
            bail!("{} --backend {} exited early ({status})", bin.display(), backend.name());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} --backend {} did not open {} within {wait_s} s", bin.display(), backend.name(), target.socket.display());
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

/// Runs one mode once on `backend` (starting and stopping scx_morpheus around it; `off` runs none) and
/// pools the results.
fn run_mode(opts: &Opts, mode: Mode, backend: Backend, cpu: usize, bin: &Path, seconds: f64, result: &mut PhaseResult) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("morpheus-starvation-{}-{}-{}", std::process::id(), backend.name(), mode.name()));
    std::fs::create_dir_all(&dir)?;
    let (child, target) = if mode == Mode::Off {
        (None, None)
    } else {
        let (child, target) = start_scheduler(bin, backend, mode, &dir, &opts.scheduler_args)?;
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
            if backend == Backend::Kernel {
                wait_sched_ext_disabled()?;
            }
            totals
        }
        None => None,
    };
    let _ = std::fs::remove_dir_all(&dir);
    let (mut latencies_ns, zombie_cpu_share, yields, bound) = phase?;
    latencies_ns.sort_unstable();
    result.per_round.push(quantiles(&latencies_ns));
    result.slice_plus_grace_ns = result.slice_plus_grace_ns.or(bound);
    result.latencies_ns.extend(latencies_ns);
    result.zombie_cpu_share += zombie_cpu_share;
    result.yields.add(yields);
    result.totals.extend(totals);
    Ok(())
}

/// p50, p95, p99 and max of sorted latencies.
fn quantiles(sorted: &[u64]) -> [u64; 4] {
    [percentile(sorted, 50.0), percentile(sorted, 95.0), percentile(sorted, 99.0), *sorted.last().unwrap_or(&0)]
}

/// `median [min–max]` of per-round values.
fn spread(mut values: Vec<f64>) -> String {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return "-".into();
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 };
    format!("{median:.3} [{:.3}–{:.3}]", values[0], values[n - 1])
}

/// What the tracing backend needs of this machine, or why it cannot run here.
fn check_trace_backend() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("--backend trace: loading its BPF programs needs root; use --backend sim");
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("--backend trace: this kernel has no BTF (/sys/kernel/btf/vmlinux is missing); use --backend sim");
    }
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
    if opts.backend.is_empty() {
        bail!("--backend: name at least one backend (sim, trace, kernel)");
    }
    if let Some(b) = opts.backend.iter().enumerate().find_map(|(i, b)| opts.backend[..i].contains(b).then_some(b)) {
        bail!("--backend: {} is named twice", b.name());
    }
    if opts.backend.contains(&Backend::Trace) {
        check_trace_backend()?;
    }
    if opts.backend.contains(&Backend::Kernel) {
        match std::fs::read_to_string(SCHED_EXT_STATE) {
            Ok(state) if state.trim() == "disabled" => {}
            Ok(state) => bail!("--backend kernel: a sched_ext scheduler is already loaded ({SCHED_EXT_STATE} is '{}')", state.trim()),
            Err(e) => bail!("--backend kernel: this kernel has no sched_ext ({SCHED_EXT_STATE}: {e}); use --backend sim"),
        }
    }
    let backends: Vec<&str> = opts.backend.iter().map(|b| b.name()).collect();
    println!(
        "starvation: 1 zombie + {} cooperative workers pinned to CPU {cpu} (of {ncpu}); release every {} ms, {} µs of work in {} µs pieces; {} s per mode in {} round(s); scx_morpheus backend {}",
        opts.workers, opts.period_ms, opts.work_us, opts.chunk_us, opts.seconds, opts.rounds, backends.join(",")
    );
    // The table's rows: `off` once (no scheduler: the same for every backend), then each backend's modes.
    let mut results: Vec<(Mode, Backend, PhaseResult)> = Vec::new();
    if opts.modes.contains(&Mode::Off) {
        results.push((Mode::Off, opts.backend[0], PhaseResult::default()));
    }
    for backend in &opts.backend {
        for mode in opts.modes.iter().filter(|m| **m != Mode::Off) {
            results.push((*mode, *backend, PhaseResult::default()));
        }
    }
    let label = |mode: Mode, backend: Backend| match mode {
        Mode::Off => "off".to_string(),
        _ if opts.backend.len() == 1 => mode.name().to_string(),
        _ => format!("{}/{}", backend.name(), mode.name()),
    };
    for round in 0..opts.rounds as usize {
        // Off first, then the backends in an order rotated by one each round.
        let order: Vec<Backend> = (0..opts.backend.len()).map(|i| opts.backend[(i + round) % opts.backend.len()]).collect();
        for (mode, backend, result) in results.iter_mut().filter(|(m, _, _)| *m == Mode::Off) {
            run_mode(&opts, *mode, *backend, cpu, &bin, seconds, result)?;
        }
        for b in &order {
            for (mode, backend, result) in results.iter_mut().filter(|(m, bk, _)| *m != Mode::Off && bk == b) {
                run_mode(&opts, *mode, *backend, cpu, &bin, seconds, result)?;
            }
        }
        let off_p99 = results.iter().find(|(m, _, _)| *m == Mode::Off).map(|(_, _, r)| r.per_round[round][2]);
        let cells: Vec<String> = results
            .iter()
            .map(|(m, b, r)| {
                let p99 = r.per_round[round][2];
                let vs_off = match off_p99 {
                    Some(base) if base != 0 && *m != Mode::Off => format!(" ({:.3}x off)", p99 as f64 / base as f64),
                    _ => String::new(),
                };
                format!("{} p99 {:.1} µs{vs_off}", label(*m, *b), p99 as f64 / 1e3)
            })
            .collect();
        println!("round {}: {}", round + 1, cells.join("; "));
    }
    for (_, _, r) in results.iter_mut() {
        r.latencies_ns.sort_unstable();
        r.zombie_cpu_share /= opts.rounds as f64;
    }

    let off = results.iter().find(|(m, _, _)| *m == Mode::Off).map(|(_, _, r)| quantiles(&r.latencies_ns));
    println!(
        "{:<16} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>11} {:>7}",
        "mode", "samples", "p50_us", "p95_us", "p99_us", "max_us", "p50/off", "p95/off", "p99/off", "max/off", "hints", "yields", "escalations", "zombie%"
    );
    for (mode, backend, r) in &results {
        let l = &r.latencies_ns;
        let q = quantiles(l);
        let ratio = |i: usize| match off {
            Some(base) if base[i] != 0 => format!("{:.3}", q[i] as f64 / base[i] as f64),
            _ => "-".to_string(),
        };
        println!(
            "{:<16} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>11} {:>7.1}",
            label(*mode, *backend),
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
    for (mode, backend, r) in &results {
        if let Some(bound) = r.slice_plus_grace_ns {
            let q = quantiles(&r.latencies_ns);
            let vs_off = off.filter(|b| b[2] != 0).map_or("-".to_string(), |b| format!("{:.3}", q[2] as f64 / b[2] as f64));
            println!(
                "{}: p99 {:.1} µs = {:.2} x (slice + grace = {:.1} µs); p99/off {vs_off}",
                label(*mode, *backend),
                q[2] as f64 / 1e3,
                q[2] as f64 / bound as f64,
                bound as f64 / 1e3
            );
        }
    }
    // The spread over the rounds: each ratio taken within its round.
    let off_rounds = results.iter().find(|(m, _, _)| *m == Mode::Off).map(|(_, _, r)| r.per_round.clone());
    for (mode, backend, r) in &results {
        let p99s: Vec<f64> = r.per_round.iter().map(|q| q[2] as f64 / 1e3).collect();
        let mut line = format!("{} over {} round(s), median [min–max]: p99 {} µs", label(*mode, *backend), r.per_round.len(), spread(p99s));
        if let (Some(off_rounds), true) = (&off_rounds, *mode != Mode::Off) {
            let ratios = r.per_round.iter().zip(off_rounds).map(|(q, o)| q[2] as f64 / o[2] as f64).collect();
            line += &format!(", p99/off {}", spread(ratios));
        }
        if let Some(bound) = r.slice_plus_grace_ns {
            line += &format!(", p99/(slice + grace) {}", spread(r.per_round.iter().map(|q| q[2] as f64 / bound as f64).collect()));
        }
        println!("{line}");
    }
    for (mode, backend, r) in &results {
        if *mode != Mode::Off {
            let y = r.yields;
            println!("{}: cooperative yields by reason: preempt_request={} budget={} defensive={}", label(*mode, *backend), y.preempt, y.budget, y.defensive);
        }
        if !r.totals.is_empty() {
            let sums: Vec<String> = TOTALS
                .iter()
                .map(|(k, _)| format!("{k}={}", field(&r.totals, k)))
                .collect();
            println!("{}: scx_morpheus totals over {} round(s): {}", label(*mode, *backend), r.totals.len(), sums.join(" "));
        }
    }
    Ok(())
}
