// SPDX-License-Identifier: Apache-2.0 OR MIT
//! tokio integration: the threads that run tokio's scheduler are registered by the runtime's hooks and
//! blocking-pool threads are not; checkpoints yield through tokio.
#![cfg(feature = "tokio")]

use std::future::Future;
use std::pin::pin;
use std::sync::{
    atomic::{AtomicUsize, Ordering},
    mpsc, Arc,
};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use morpheus::testing::{AgentBehaviour, FakeAgent, SimRegion};
use morpheus_abi::WorkerState;

/// How long the calling thread may take to register; generous, since other builds share the CPUs.
/// Only a failure waits this long.
const PATIENCE: Duration = Duration::from_secs(60);

fn tid() -> u32 {
    unsafe { libc::gettid() as u32 }
}

/// The calling thread's slot, once a park hook has registered it: the task sleeps (so the thread runs
/// out of tasks and parks) until it has one.
async fn wait_for_slot() -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(Some(slot)) = unsafe { morpheus::with_current_worker(|w| w.slot()) } {
            return slot;
        }
        assert!(start.elapsed() < PATIENCE, "the scheduler thread never registered");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Every slot of `region` that holds thread `tid`, in any state but INIT.
fn slots_of(region: &SimRegion, scb_count: u32, tid: u32) -> Vec<(u32, morpheus::testing::ScbSnapshot)> {
    (0..scb_count)
        .map(|slot| (slot, region.snapshot(slot)))
        .filter(|(_, s)| s.tid == tid && s.worker_state != WorkerState::Init.raw())
        .collect()
}

/// A multi-thread runtime with one worker thread and the timer, its threads registered by
/// `morpheus::tokio::register_workers` with a fresh region of `slots` slots and a normal fake agent;
/// every error the hooks report is printed and counted in the returned counter.
fn one_worker_runtime(slots: u32) -> (Arc<SimRegion>, FakeAgent, tokio::runtime::Runtime, Arc<AtomicUsize>) {
    let region = Arc::new(SimRegion::temp(slots));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let errors = Arc::new(AtomicUsize::new(0));
    let errors2 = errors.clone();
    let config = morpheus::Config::default().region_path(region.path()).agent_socket(agent.path());
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(1).enable_time();
    let runtime = morpheus::tokio::register_workers(builder, config, move |e| {
        eprintln!("{e}");
        errors2.fetch_add(1, Ordering::Relaxed);
    })
    .build()
    .unwrap();
    (region, agent, runtime, errors)
}

#[test]
fn tokio_workers_register_checkpoint_and_release_their_slots() {
    // One worker thread: the spawned task cannot move between threads, so the ack is deterministic.
    let (region, agent, runtime, errors) = one_worker_runtime(8);
    let r = region.clone();
    let yielded = runtime.block_on(async move {
        tokio::spawn(async move {
            let slot = wait_for_slot().await;
            assert_eq!(r.snapshot(slot).escapable, 1, "a worker thread keeps Rust's escapable default");
            assert!(!morpheus::tokio::checkpoint().await, "nothing pending");
            r.request_yield(slot);
            let yielded = morpheus::tokio::checkpoint().await;
            (slot, yielded, r.snapshot(slot).last_ack_seq)
        })
        .await
        .unwrap()
    });
    assert_eq!(yielded, (yielded.0, true, 1), "the checkpoint yielded to tokio and acknowledged");
    drop(runtime);
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    for slot in 0..8 {
        assert_eq!(region.snapshot(slot).worker_state, WorkerState::Init.raw(), "slot {slot} released on thread stop");
    }
    assert!(agent.requests().len() >= 2, "the worker registered and unregistered");
}

/// A `spawn_blocking` job runs long and never checkpoints, so its thread must never be escalated:
/// the escalation gate (spec/SCB.md §5.6) judges only a slot in RUNNING with `escapable == 1`, and
/// the job's thread holds no slot at all (so it is not hinted either), while the runtime's worker
/// thread holds one with Rust's default `escapable = 1`. The job stays running, ignoring the
/// requests made of every registered slot, until the checks are done (a channel, not a clock).
#[test]
fn spawn_blocking_threads_are_never_registered() {
    const SLOTS: u32 = 8;
    let (region, _agent, runtime, errors) = one_worker_runtime(SLOTS);
    let (job_tid_tx, job_tid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let (worker_tid, job) = runtime.block_on(async {
        let worker_tid = tokio::spawn(async {
            wait_for_slot().await;
            tid()
        })
        .await
        .unwrap();
        let job = tokio::task::spawn_blocking(move || {
            job_tid_tx.send(tid()).unwrap();
            // The long job: it runs until the test has looked, and never checkpoints.
            done_rx.recv().unwrap();
            unsafe { morpheus::with_current_worker(|w| w.slot()) }.is_ok()
        });
        (worker_tid, job)
    });
    let job_tid = job_tid_rx.recv().unwrap();
    assert_ne!(job_tid, worker_tid);
    let worker_slots = slots_of(&region, SLOTS, worker_tid);
    assert_eq!(worker_slots.len(), 1, "the worker thread holds one slot");
    let (slot, s) = worker_slots[0];
    assert_eq!((s.worker_state, s.escapable), (WorkerState::Running.raw(), 1), "the worker thread is escalatable");
    // The scheduler asks every registered slot to yield; none of them is the job's.
    for slot in 0..SLOTS {
        if region.snapshot(slot).worker_state == WorkerState::Running.raw() {
            region.request_yield(slot);
        }
    }
    assert_eq!(slots_of(&region, SLOTS, job_tid), vec![], "a blocking-pool thread holds no slot: never hinted, never escalated");
    done_tx.send(()).unwrap();
    let job_registered = runtime.block_on(job).unwrap();
    assert!(!job_registered, "the blocking job's thread held no worker");
    assert_eq!(region.snapshot(slot).last_ack_seq, 0, "nothing checkpointed the worker's request");
    drop(runtime);
    assert_eq!(errors.load(Ordering::Relaxed), 0);
}

/// On a current-thread runtime the thread that drives `block_on` runs every task, so it is the one
/// registered (tokio never calls `on_thread_start` for it); the blocking pool's threads are not.
#[test]
fn current_thread_runtime_registers_the_block_on_thread_only() {
    const SLOTS: u32 = 4;
    let region = Arc::new(SimRegion::temp(SLOTS));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let config = morpheus::Config::default().region_path(region.path()).agent_socket(agent.path());
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time();
    let runtime = morpheus::tokio::register_workers(builder, config, |e| panic!("{e}")).build().unwrap();
    std::thread::spawn(move || {
        let r = region.clone();
        runtime.block_on(async move {
            let slot = wait_for_slot().await;
            assert_eq!(r.snapshot(slot).tid, tid());
            let job_tid = tokio::task::spawn_blocking(tid).await.unwrap();
            assert_eq!(slots_of(&r, SLOTS, job_tid), vec![], "the blocking-pool thread holds no slot");
        });
        drop(runtime);
        // The block_on thread is the caller's: it keeps its worker until it lets it go.
        morpheus::unregister_current_thread().unwrap();
    })
    .join()
    .unwrap();
    drop(agent);
}

/// A waker that counts its wake-ups.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// With the `tokio` feature, `checkpoint!()` yields through `tokio::task::yield_now`: inside the
/// runtime the wake-up is deferred until the runtime has polled its driver (so the waker has not run
/// when the checkpoint returns `Pending`), where `morpheus::checkpoint()` wakes itself at once.
#[test]
fn checkpoint_macro_defers_to_tokio_under_the_tokio_feature() {
    let region = SimRegion::temp(1);
    let worker = morpheus::Config::default().region_path(region.path()).direct_slot(0).register().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let (macro_wakes, plain_wakes) = runtime.block_on(async {
        let mut wakes = Vec::new();
        for use_macro in [true, false] {
            region.request_yield(0);
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            let mut cx = Context::from_waker(&waker);
            let poll = if use_macro {
                pin!(async { morpheus::checkpoint!() }).as_mut().poll(&mut cx)
            } else {
                pin!(morpheus::checkpoint()).as_mut().poll(&mut cx)
            };
            assert_eq!(poll, Poll::Pending, "a pending request suspends the task");
            wakes.push(count.0.load(Ordering::Relaxed));
            // Let tokio run the deferred wake-up before the next round.
            tokio::task::yield_now().await;
        }
        (wakes[0], wakes[1])
    });
    assert_eq!((macro_wakes, plain_wakes), (0, 1), "checkpoint!() deferred its wake-up to tokio; checkpoint() woke itself");
    drop(worker);
}
