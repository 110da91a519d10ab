// SPDX-License-Identifier: Apache-2.0 OR MIT
//! tokio integration: worker threads registered by the runtime's hooks; checkpoints that yield to tokio.
#![cfg(feature = "tokio")]

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};

use morpheus::testing::{AgentBehaviour, FakeAgent, SimRegion};
use morpheus_abi::WorkerState;

#[test]
fn tokio_workers_register_checkpoint_and_release_their_slots() {
    let region = Arc::new(SimRegion::temp(8));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let errors = Arc::new(AtomicUsize::new(0));
    let errors2 = errors.clone();
    let config = morpheus::Config::default().region_path(region.path()).agent_socket(agent.path());
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    // One worker thread: the spawned task cannot move between threads, so the ack is deterministic.
    builder.worker_threads(1);
    let runtime = morpheus::tokio::register_workers(builder, config, move |e| {
        eprintln!("{e}");
        errors2.fetch_add(1, Ordering::Relaxed);
    })
    .build()
    .unwrap();
    let r = region.clone();
    let yielded = runtime.block_on(async move {
        tokio::spawn(async move {
            let slot = unsafe { morpheus::with_current_worker(|w| w.slot()) }.unwrap();
            let slot = slot.expect("tokio worker threads are registered");
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
