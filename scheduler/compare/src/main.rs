// SPDX-License-Identifier: GPL-2.0-only
//! scx_morpheus against the schedulers an operator would pick instead (scheduler/BENCHMARKS.md,
//! "Comparison"): EEVDF (no sched_ext scheduler), scx_bpfland, scx_lavd, scx_flash, scx_cosmos,
//! scx_pandemonium, and scx_morpheus's sched_ext backend in observer and enforced mode (and, when
//! asked, enforced on another of the base policy's orders, such as a former default), on the reference evaluation's
//! workloads:
//! - Table 1, latency: request workers (4 and 8), with and without CPU hogs beside them, with and
//!   without checkpoints: ops/s and op latency p50 to p99.9;
//! - Table 2, starvation: the starvation benchmark's scenario (morpheus_starvation);
//! - Table 3, liar: critical sections of 100 and 500 ms: cost against the CPU time asked for, and
//!   escalations inside sections;
//! - checkpoint cost: Table 1's shapes with each worker alternating ops with and without checkpoints
//!   (ops/s with ÷ without, measured on the same load at the same moments);
//! - a CPU-bound batch with no worker registered.
//!
//! Rounds interleave the schedulers (each round starts at the next one in the list), each scheduler
//! loaded once per round for all cells, so load from outside falls on every scheduler alike. Prints a
//! `round {json}` line per (cell, scheduler, round) as it goes, for ratios paired within a round, and
//! at the end a `result {json}` line per (cell, scheduler) with the samples pooled over the rounds.
//! Needs a kernel with sched_ext and root (the VM: scheduler/compare/run-vm.sh);
//! scheduler/compare/report.py makes the tables with ratios to EEVDF, the verdicts and the plots.

mod schedulers;
mod workloads;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Parser;
use morpheus_starvation::{run_phase, Scenario};
use serde_json::{json, Value};

use schedulers::{Binaries, Sched};
use workloads::{Checkpoints, LatencyShape};

const TABLES: [&str; 5] = ["latency", "checkpoint_cost", "starvation", "liar", "batch"];

#[derive(Debug, Parser)]
#[command(name = "compare", about = "scx_morpheus against EEVDF and the scx peers on the reference workloads")]
struct Opts {
    /// Schedulers, in the order of the first round (enforced-cputime, enforced-lag, enforced-burst,
    /// enforced-spare, enforced-recent and enforced-arrival, enforced on a named base order, and
    /// enforced-margin500, enforced with a 500 µs wake-up margin, only when named).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = vec![Sched::Eevdf, Sched::Bpfland, Sched::Lavd, Sched::Flash, Sched::Cosmos, Sched::Pandemonium, Sched::Observer, Sched::Enforced])]
    schedulers: Vec<Sched>,
    /// Rounds over all schedulers.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    /// Seconds of each latency and liar cell per round (and of the starvation cell, unless
    /// --starvation-seconds says otherwise).
    #[arg(long, default_value_t = 3.0)]
    cell_seconds: f64,
    /// Seconds of the starvation cell per round (default: --cell-seconds). Its three workers release
    /// every 10 ms each, so a 2 s cell gives ~450 latencies, and its p99 is the fifth largest.
    #[arg(long)]
    starvation_seconds: Option<f64>,
    /// Restart each scheduler before the starvation cell, so that the cell runs on a scheduler that
    /// served no other table in the round (by default one instance serves every table of a round).
    #[arg(long)]
    fresh_starvation: bool,
    /// Tables to run.
    #[arg(long, value_delimiter = ',', default_values_t = TABLES.map(String::from).to_vec())]
    tables: Vec<String>,
    /// Table 1: think time before each op, µs.
    #[arg(long, default_value_t = 1000)]
    think_us: u64,
    /// Table 1: CPU work per op, µs.
    #[arg(long, default_value_t = 500)]
    op_work_us: u64,
    /// Work between two checkpoints (Tables 1 and 2), µs.
    #[arg(long, default_value_t = 50)]
    chunk_us: u64,
    /// Batch: multiply-adds per thread (one thread per CPU).
    #[arg(long, default_value_t = 300_000_000)]
    batch_iterations: u64,
    /// Batch: runs per scheduler and round.
    #[arg(long, default_value_t = 2)]
    batch_repeats: u32,
    #[arg(long)]
    scx_morpheus: PathBuf,
    #[arg(long)]
    scx_bpfland: Option<PathBuf>,
    #[arg(long)]
    scx_lavd: Option<PathBuf>,
    #[arg(long)]
    scx_flash: Option<PathBuf>,
    #[arg(long)]
    scx_cosmos: Option<PathBuf>,
    #[arg(long)]
    scx_pandemonium: Option<PathBuf>,
}

/// One cell's pooled samples for one scheduler.
#[derive(Default)]
struct Pool {
    /// Latencies (Tables 1, 2; checkpoint cost: the ops with checkpoints) in ns; liar overheads in
    /// ppm; batch wall times in ns.
    samples: Vec<u64>,
    /// Checkpoint cost: the latencies of the ops without checkpoints, ns.
    samples_without: Vec<u64>,
    ops: u64,
    measured_s: f64,
    escalations_inside: u64,
    /// scx_morpheus's counters over the rounds (escalations, kicks, hints).
    escalations: u64,
    hints: u64,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mean(samples: &[u64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(|&x| x as f64).sum::<f64>() / samples.len() as f64
}

/// COMPARE_DEBUG: each BPF program's runs and run time since `before` (kernel.bpf_stats_enabled).
fn debug_bpf_delta(sched: Sched, cell: &str, round: u32, before: &BTreeMap<u64, (String, u64, u64)>) {
    for (id, (tag, ns, cnt)) in workloads::bpf_prog_stats() {
        let (ns0, cnt0) = before.get(&id).map_or((0, 0), |p| (p.1, p.2));
        if cnt > cnt0 {
            eprintln!("compare: bpf {} {cell} round {}: prog {id} {tag}: {} runs, {} µs", sched.name(), round + 1, cnt - cnt0, (ns - ns0) / 1000);
        }
    }
}

/// Order statistics of one sample set (sorted here).
fn summary(samples: &mut [u64]) -> Value {
    samples.sort_unstable();
    let s = &*samples;
    let q = |p: f64| percentile(s, p);
    json!({
        "samples": s.len(), "min": s.first().copied().unwrap_or(0), "p50": q(50.0), "p90": q(90.0), "p99": q(99.0),
        "p999": q(99.9), "max": s.last().copied().unwrap_or(0), "mean": mean(s),
    })
}

/// Table 1's cells (`checkpoints` Off or On), or the checkpoint-cost cells (Alternating), with the
/// per-op shape from the command line.
fn latency_cells(opts: &Opts, alternating: bool) -> Vec<(String, LatencyShape)> {
    let modes: &[Checkpoints] = if alternating { &[Checkpoints::Alternating] } else { &[Checkpoints::Off, Checkpoints::On] };
    let mut cells = Vec::new();
    for workers in [4, 8] {
        for pressure in [false, true] {
            for &checkpoints in modes {
                let suffix = if checkpoints == Checkpoints::On { "_ckpt" } else { "" };
                let name = format!("w{workers}{}{suffix}", if pressure { "_pressure" } else { "" });
                let (think_us, work_us, chunk_us) = (opts.think_us, opts.op_work_us, opts.chunk_us);
                cells.push((name, LatencyShape { workers, pressure, checkpoints, think_us, work_us, chunk_us }));
            }
        }
    }
    cells
}

/// A checkpoint-cost cell's figures: ops/s with checkpoints ÷ without. Each worker's ops/s is one
/// over (think time + mean op latency), so the ratio is of those cycle times, the other way up.
fn checkpoint_cost(think_us: u64, with_ns: &[u64], without_ns: &[u64]) -> Value {
    let think = think_us as f64 * 1000.0;
    let (with, without) = (mean(with_ns), mean(without_ns));
    let ratio = if with_ns.is_empty() || without_ns.is_empty() { Value::Null } else { json!((think + without) / (think + with)) };
    json!({
        "ops_with": with_ns.len(), "ops_without": without_ns.len(), "mean_with_ns": with, "mean_without_ns": without,
        "think_ns": think, "ops_ratio": ratio,
    })
}

/// One `round {json}` line: a (table, cell, scheduler)'s figures from one round alone.
fn print_round(table: &str, cell: &str, sched: Sched, round: u32, figures: Value) {
    let mut record = json!({"table": table, "cell": cell, "scheduler": sched.name(), "round": round + 1});
    if let (Some(r), Value::Object(f)) = (record.as_object_mut(), figures) {
        r.extend(f);
    }
    println!("round {record}");
}

fn main() -> Result<()> {
    let opts = Opts::parse();
    let starvation_seconds = opts.starvation_seconds.unwrap_or(opts.cell_seconds);
    if opts.rounds == 0 || opts.cell_seconds <= 0.6 || starvation_seconds <= 0.6 || opts.schedulers.is_empty() {
        bail!("--rounds must be positive, --cell-seconds and --starvation-seconds above 0.6 (0.3 s of warm-up) and --schedulers non-empty");
    }
    for table in &opts.tables {
        if !TABLES.contains(&table.as_str()) {
            bail!("--tables: unknown table '{table}' ({})", TABLES.join(", "));
        }
    }
    if std::env::var_os("COMPARE_DEBUG").is_some() {
        // BPF programs' run time, for the debug lines (costs two clock reads per program run).
        if let Err(e) = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1") {
            eprintln!("compare: could not enable kernel.bpf_stats_enabled: {e}");
        }
    }
    let need = |s: Sched, p: &Option<PathBuf>, flag: &str| -> Result<PathBuf> {
        match p {
            Some(p) if p.is_file() => Ok(p.clone()),
            Some(p) => bail!("{flag} {}: no such file", p.display()),
            None if opts.schedulers.contains(&s) => bail!("{} is in --schedulers but {flag} is not given", s.name()),
            None => Ok(PathBuf::new()),
        }
    };
    let bins = Binaries {
        morpheus: opts.scx_morpheus.clone(),
        bpfland: need(Sched::Bpfland, &opts.scx_bpfland, "--scx-bpfland")?,
        lavd: need(Sched::Lavd, &opts.scx_lavd, "--scx-lavd")?,
        flash: need(Sched::Flash, &opts.scx_flash, "--scx-flash")?,
        cosmos: need(Sched::Cosmos, &opts.scx_cosmos, "--scx-cosmos")?,
        pandemonium: need(Sched::Pandemonium, &opts.scx_pandemonium, "--scx-pandemonium")?,
    };
    if !bins.morpheus.is_file() {
        bail!("--scx-morpheus {}: no such file", bins.morpheus.display());
    }
    schedulers::check_sched_ext_disabled()?;
    // SAFETY: sysconf has no preconditions.
    let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let pinned_cpu = ncpu - 1;
    let has = |t: &str| opts.tables.iter().any(|x| x == t);
    let starvation = Scenario { workers: 3, period_ms: 10, work_us: 2000, chunk_us: opts.chunk_us };
    println!(
        "config {}",
        json!({
            "schedulers": opts.schedulers.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "rounds": opts.rounds, "cell_seconds": opts.cell_seconds, "cpus": ncpu,
            "think_us": opts.think_us, "op_work_us": opts.op_work_us, "chunk_us": opts.chunk_us,
            "starvation": {"workers": starvation.workers, "period_ms": starvation.period_ms, "work_us": starvation.work_us, "cpu": pinned_cpu, "seconds": starvation_seconds},
            "batch_iterations": opts.batch_iterations, "batch_threads": ncpu,
        })
    );

    // (table, cell, scheduler) -> pool
    let mut pools: BTreeMap<(String, String, &'static str), Pool> = BTreeMap::new();
    let mut bound_ns: Option<u64> = None;
    let mut unavailable: Vec<(Sched, String)> = Vec::new();
    for round in 0..opts.rounds {
        let n = opts.schedulers.len();
        for k in 0..n {
            let sched = opts.schedulers[(k + round as usize) % n];
            eprintln!("compare: round {}/{}: {}", round + 1, opts.rounds, sched.name());
            if unavailable.iter().any(|(s, _)| *s == sched) {
                continue;
            }
            let mut running = match schedulers::start(sched, &bins) {
                Ok(r) => r,
                // A peer that cannot load here is reported and left out; scx_morpheus must load.
                Err(e) if !sched.is_morpheus() => {
                    eprintln!("compare: {} could not be loaded, left out of the run: {e:#}", sched.name());
                    println!("unavailable {}", json!({"scheduler": sched.name(), "error": format!("{e:#}")}));
                    unavailable.push((sched, format!("{e:#}")));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let socket = running.socket.clone();
            let morpheus_socket = if sched.is_morpheus() { socket.as_deref() } else { None };
            let mut served_totals = None;
            let outcome = (|| -> Result<()> {
                if has("latency") {
                    let trace = std::env::var_os("COMPARE_DEBUG").is_some();
                    for (cell, shape) in latency_cells(&opts, false) {
                        let before = morpheus_socket.filter(|_| trace).map(morpheus_starvation::read_stats).transpose()?;
                        let r = workloads::latency(shape, morpheus_socket, ncpu, opts.cell_seconds)?;
                        if let (Some(before), Some(socket)) = (&before, morpheus_socket) {
                            let after = morpheus_starvation::read_stats(socket)?;
                            eprintln!("compare: counters {} {cell} round {}: {}", sched.name(), round + 1, schedulers::cell_counters_delta(before, &after));
                        }
                        let mut figures = summary(&mut r.all_ns().collect::<Vec<_>>());
                        figures["ops_per_s"] = json!(r.ops() as f64 / r.measured_s.max(1e-9));
                        print_round("latency", &cell, sched, round, figures);
                        let pool = pools.entry(("latency".into(), cell, sched.name())).or_default();
                        pool.samples.extend(r.all_ns());
                        pool.ops += r.ops();
                        pool.measured_s += r.measured_s;
                    }
                }
                if has("checkpoint_cost") {
                    for (cell, shape) in latency_cells(&opts, true) {
                        let r = workloads::latency(shape, morpheus_socket, ncpu, opts.cell_seconds)?;
                        let figures = checkpoint_cost(opts.think_us, &r.with_checkpoints_ns, &r.without_checkpoints_ns);
                        print_round("checkpoint_cost", &cell, sched, round, figures);
                        let pool = pools.entry(("checkpoint_cost".into(), cell, sched.name())).or_default();
                        pool.samples.extend(&r.with_checkpoints_ns);
                        pool.samples_without.extend(&r.without_checkpoints_ns);
                    }
                }
                if has("starvation") {
                    if opts.fresh_starvation && sched != Sched::Eevdf {
                        // The same socket path: the restarted scx_morpheus serves it again.
                        served_totals = schedulers::restart(&mut running, &bins)?;
                    }
                    let trace = std::env::var_os("COMPARE_DEBUG").is_some();
                    let before = morpheus_socket.filter(|_| trace).map(morpheus_starvation::read_stats).transpose()?;
                    let progs_before = if trace { workloads::bpf_prog_stats() } else { Default::default() };
                    let agent_cpu_before = running.cpu_ticks();
                    let (lat, _zombie, _yields, bound) = run_phase(&starvation, pinned_cpu, workloads::target(morpheus_socket), starvation_seconds)?;
                    if trace {
                        debug_bpf_delta(sched, "zombie+3", round, &progs_before);
                        if let (Some(t0), Some(t1)) = (agent_cpu_before, running.cpu_ticks()) {
                            eprintln!("compare: scheduler process {} zombie+3 round {}: {} clock ticks of CPU", sched.name(), round + 1, t1 - t0);
                        }
                    }
                    if let (Some(before), Some(socket)) = (&before, morpheus_socket) {
                        let after = morpheus_starvation::read_stats(socket)?;
                        eprintln!("compare: counters {} zombie+3 round {}: {}", sched.name(), round + 1, schedulers::cell_counters_delta(before, &after));
                    }
                    bound_ns = bound_ns.or(bound);
                    let mut figures = summary(&mut lat.clone());
                    figures["slice_plus_grace_ns"] = json!(bound);
                    print_round("starvation", "zombie+3", sched, round, figures);
                    let pool = pools.entry(("starvation".into(), "zombie+3".into(), sched.name())).or_default();
                    pool.samples.extend(lat);
                }
                if has("liar") {
                    for section_ms in [100u64, 500] {
                        // Long enough for at least three sections per round.
                        let seconds = opts.cell_seconds.max(0.3 + 3.2 * section_ms as f64 / 1000.0);
                        let r = workloads::liar(section_ms, 2, pinned_cpu, morpheus_socket, seconds)?;
                        let cell = format!("section_{section_ms}ms");
                        let mut figures = summary(&mut r.overhead_ppm.clone());
                        figures["escalations_inside"] = json!(r.escalations_inside);
                        print_round("liar", &cell, sched, round, figures);
                        let pool = pools.entry(("liar".into(), cell, sched.name())).or_default();
                        pool.samples.extend(r.overhead_ppm);
                        pool.escalations_inside += r.escalations_inside;
                    }
                }
                if has("batch") {
                    let cell = format!("{ncpu}_threads");
                    let progs_before = workloads::bpf_prog_stats();
                    let runs = (0..opts.batch_repeats).map(|_| workloads::batch(ncpu, opts.batch_iterations)).collect::<Result<Vec<_>>>()?;
                    if std::env::var_os("COMPARE_DEBUG").is_some() {
                        debug_bpf_delta(sched, "batch", round, &progs_before);
                    }
                    let walls: Vec<u64> = runs.iter().map(|r| r.wall_ns).collect();
                    let mut figures = summary(&mut walls.clone());
                    // Where the time went, summed over the round's runs (read by no verdict).
                    let sum = |f: fn(&workloads::BatchRun) -> u64| runs.iter().map(f).sum::<u64>();
                    figures["ctxt"] = json!(sum(|r| r.ctxt));
                    figures["idle_ms"] = json!(sum(|r| r.idle_ms));
                    figures["thread_switches"] = json!(sum(|r| r.thread_switches));
                    figures["thread_stime_us"] = json!(sum(|r| r.thread_stime_us));
                    print_round("batch", &cell, sched, round, figures);
                    pools.entry(("batch".into(), cell, sched.name())).or_default().samples.extend(walls);
                }
                Ok(())
            })();
            let totals = schedulers::stop(running)?;
            outcome?;
            for stats in [served_totals, totals].into_iter().flatten() {
                // Whole-round counters, kept on the starvation cell (the one that escalates).
                let pool = pools.entry(("starvation".into(), "zombie+3".into(), sched.name())).or_default();
                pool.escalations += schedulers::stats_counter(&stats, "/escalations");
                pool.hints += schedulers::stats_counter(&stats, "/hints_emitted");
            }
        }
    }

    for ((table, cell, sched), pool) in pools.iter_mut() {
        let mut record = json!({"table": table, "cell": cell, "scheduler": sched});
        if let (Some(r), Value::Object(f)) = (record.as_object_mut(), summary(&mut pool.samples)) {
            r.extend(f);
        }
        match table.as_str() {
            "latency" => record["ops_per_s"] = json!(pool.ops as f64 / pool.measured_s.max(1e-9)),
            "checkpoint_cost" => {
                // Pooled: the samples above are the ops with checkpoints.
                record["cost"] = checkpoint_cost(opts.think_us, &pool.samples, &pool.samples_without);
                record["without"] = summary(&mut pool.samples_without);
            }
            "liar" => record["escalations_inside"] = json!(pool.escalations_inside),
            "starvation" => {
                record["escalations_all_cells"] = json!(pool.escalations);
                record["hints_all_cells"] = json!(pool.hints);
                record["slice_plus_grace_ns"] = json!(bound_ns);
            }
            _ => {}
        }
        println!("result {record}");
    }
    Ok(())
}
