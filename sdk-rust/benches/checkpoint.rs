// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Checkpoint and critical-section costs beside raw atomic loads measured in the same run.
//! `cargo bench -p morpheus --bench checkpoint`; `benches/ratios.py` turns criterion's estimates into
//! the ratio table of BENCHMARKS.md.

use std::{
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use criterion::{criterion_group, Criterion};
use morpheus::{testing::SimRegion, Config, Worker};

fn config(c: &mut Criterion) -> &mut Criterion {
    c
}

fn baselines(c: &mut Criterion) {
    let mut group = config(c).benchmark_group("baseline");
    // The value sits in an SCB-like cache line of its own, as preempt_seq does.
    let cell = Box::new(AtomicU64::new(0));
    group.bench_function("atomic_load_acquire", |b| b.iter(|| black_box(&*cell).load(Ordering::Acquire)));
    group.bench_function("atomic_load_relaxed", |b| b.iter(|| black_box(&*cell).load(Ordering::Relaxed)));
    // What a critical enter+exit must at least do: a seq_cst store and a release store.
    group.bench_function("store_seqcst_then_release", |b| {
        b.iter(|| {
            let cell = black_box(&*cell);
            cell.store(1, Ordering::SeqCst);
            cell.store(0, Ordering::Release);
        })
    });
    group.finish();
}

fn detached(c: &mut Criterion) {
    let worker = Worker::detached().unwrap();
    let mut group = config(c).benchmark_group("detached");
    group.bench_function("checkpoint_sync", |b| b.iter(|| black_box(&worker).checkpoint_sync()));
    group.bench_function("critical_enter_exit", |b| b.iter(|| drop(black_box(&worker).critical_section())));
    group.finish();
    drop(worker);
    // A thread that never registered: the free function reads the detached SCB through TLS.
    let mut group = c.benchmark_group("unregistered_thread");
    group.bench_function("checkpoint_sync", |b| b.iter(morpheus::checkpoint_sync));
    group.finish();
}

fn attached(c: &mut Criterion) {
    let region = SimRegion::temp(4);
    let worker = Config::default().region_path(region.path()).direct_slot(0).register().unwrap();
    let mut group = config(c).benchmark_group("attached");
    group.bench_function("checkpoint_sync", |b| b.iter(|| black_box(&worker).checkpoint_sync()));
    group.bench_function("free_checkpoint_sync", |b| b.iter(morpheus::checkpoint_sync));
    group.bench_function("critical_enter_exit", |b| b.iter(|| drop(black_box(&worker).critical_section())));
    group.bench_function("critical_nested_enter_exit", |b| {
        let _outer = worker.critical_section();
        b.iter(|| drop(black_box(&worker).critical_section()))
    });
    // Every iteration the "scheduler" asks once and the checkpoint yields and acknowledges.
    group.bench_function("request_then_checkpoint_yield", |b| {
        b.iter(|| {
            region.request_yield(0);
            assert!(black_box(&worker).checkpoint_sync());
        })
    });
    // The request alone, to subtract from the line above.
    let spare = SimRegion::temp(1);
    group.bench_function("request_only", |b| b.iter(|| spare.request_yield(0)));
    group.finish();
    drop(worker);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = baselines, detached, attached
}
criterion::criterion_main!(benches);
