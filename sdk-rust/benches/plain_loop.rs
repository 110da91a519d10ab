// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The same measurements as benches/checkpoint.rs with the method of sdk-c's bench_checkpoint.c
//! (best of 7 timed loops of N iterations, result folded into an accumulator), so that the Rust and
//! the C inline fast paths are compared like for like. `cargo bench -p morpheus --bench plain_loop`.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use morpheus::{testing::SimRegion, Config, Worker};

const ITERATIONS: u64 = 50_000_000;
const RUNS: usize = 7;

fn measure(mut body: impl FnMut() -> u64) -> f64 {
    (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            let mut acc = 0u64;
            for _ in 0..ITERATIONS {
                acc = acc.wrapping_add(body());
            }
            black_box(acc);
            start.elapsed().as_nanos() as f64 / ITERATIONS as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    // `cargo test --benches` runs bench targets in test mode: skip the long measurement there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("plain_loop: run with `cargo bench` to measure");
        return;
    }
    // Warm up: let the CPU reach its steady clock before the first measurement.
    let until = Instant::now() + std::time::Duration::from_millis(300);
    while Instant::now() < until {}
    let cell: &AtomicU64 = black_box(Box::leak(Box::new(AtomicU64::new(0))));
    let acquire = measure(|| cell.load(Ordering::Acquire));
    let relaxed = measure(|| cell.load(Ordering::Relaxed));

    let worker = Worker::detached().unwrap();
    let detached = measure(|| worker.checkpoint_sync() as u64);
    drop(worker);

    let region = SimRegion::temp(1);
    let worker = Config::default().region_path(region.path()).direct_slot(0).register().unwrap();
    let attached = measure(|| worker.checkpoint_sync() as u64);
    // What the C inline function and the bindings do: the RawWorker pointer held in a register.
    let raw = black_box(worker.as_raw());
    // SAFETY: this thread's worker.
    let attached_raw = measure(move || unsafe { morpheus::checkpoint_sync_raw(raw) } as u64);
    let critical = measure(|| {
        let guard = worker.critical_section();
        drop(guard);
        1
    });
    let pending = measure(|| {
        region.request_yield(0);
        worker.checkpoint_sync() as u64
    });
    drop(worker);

    println!("rust plain_loop ({ITERATIONS} iterations, best of {RUNS}), ns/op and ratio to the acquire load:");
    for (name, ns) in [
        ("baseline_acquire_load", acquire),
        ("baseline_relaxed_load", relaxed),
        ("checkpoint_detached", detached),
        ("checkpoint_attached_idle", attached),
        ("checkpoint_attached_idle_raw_ptr", attached_raw),
        ("checkpoint_attached_pending", pending),
        ("critical_enter_exit_attached", critical),
    ] {
        println!("  {name:<30} {ns:8.3} ns  {:6.2}x", ns / acquire);
    }
    println!("  detached / relaxed load: {:.2}x", detached / relaxed);
}
