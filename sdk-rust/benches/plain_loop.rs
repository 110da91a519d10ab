// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The checkpoint in a tight loop beside raw atomic loads, with the method of sdk-c's
//! bench_checkpoint.c, so that the Rust and the C inline fast paths are compared like for like:
//! each case is a timed loop of N iterations folding its result into an accumulator; the cases of a
//! phase are interleaved round by round (so clock drift hits them alike) and each keeps its best round.
//! `cargo bench -p morpheus --bench plain_loop`.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use morpheus::{testing::SimRegion, Config, Worker};

const ITERATIONS: u64 = 20_000_000;
const ROUNDS: usize = 9;

fn time_once(body: &mut impl FnMut() -> u64) -> f64 {
    let start = Instant::now();
    let mut acc = 0u64;
    for _ in 0..ITERATIONS {
        acc = acc.wrapping_add(body());
    }
    black_box(acc);
    start.elapsed().as_nanos() as f64 / ITERATIONS as f64
}

fn report(phase: &str, rows: &[(&str, f64)]) {
    let base = rows[0].1;
    println!("{phase}:");
    for (name, ns) in rows {
        println!("  {name:<34} {ns:8.3} ns  {:6.2}x", ns / base);
    }
}

fn main() {
    // `cargo test --benches` runs bench targets in test mode: skip the long measurement there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("plain_loop: run with `cargo bench` to measure");
        return;
    }
    // Warm up: let the CPU reach its steady clock before the first measurement.
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {}
    let cell: &AtomicU64 = black_box(Box::leak(Box::new(AtomicU64::new(0))));
    let mut acquire = || cell.load(Ordering::Acquire);
    let mut relaxed = || cell.load(Ordering::Relaxed);
    println!("rust plain_loop ({ITERATIONS} iterations per round, best of {ROUNDS} interleaved rounds)");

    let worker = Worker::detached().unwrap();
    let mut detached = || worker.checkpoint_sync() as u64;
    let mut best = [f64::INFINITY; 3];
    for _ in 0..ROUNDS {
        best[0] = best[0].min(time_once(&mut acquire));
        best[1] = best[1].min(time_once(&mut relaxed));
        best[2] = best[2].min(time_once(&mut detached));
    }
    drop(worker);
    report(
        "detached phase, ratio to the relaxed load",
        &[("baseline_relaxed_load", best[1]), ("baseline_acquire_load", best[0]), ("checkpoint_detached", best[2])],
    );

    let region = SimRegion::temp(1);
    let worker = Config::default().region_path(region.path()).direct_slot(0).register().unwrap();
    let raw = black_box(worker.as_raw());
    let mut attached = || worker.checkpoint_sync() as u64;
    // What the C inline function and the bindings do: the RawWorker pointer held in a register.
    // SAFETY: this thread's worker.
    let mut attached_raw = move || unsafe { morpheus::raw::checkpoint_sync_raw(raw) } as u64;
    let mut critical = || {
        drop(worker.critical_section());
        1
    };
    let mut pending = || {
        region.request_yield(0);
        worker.checkpoint_sync() as u64
    };
    let mut best = [f64::INFINITY; 5];
    for _ in 0..ROUNDS {
        best[0] = best[0].min(time_once(&mut acquire));
        best[1] = best[1].min(time_once(&mut attached));
        best[2] = best[2].min(time_once(&mut attached_raw));
        best[3] = best[3].min(time_once(&mut critical));
        best[4] = best[4].min(time_once(&mut pending));
    }
    report(
        "attached phase, ratio to the acquire load",
        &[
            ("baseline_acquire_load", best[0]),
            ("checkpoint_attached_idle", best[1]),
            ("checkpoint_attached_idle_raw_ptr", best[2]),
            ("critical_enter_exit_attached", best[3]),
            ("checkpoint_attached_pending", best[4]),
        ],
    );
    drop(worker);
}
