// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's life as a worker sees it (spec/SCB.md §6.1), against the fake agent: a socket
//! nobody accepts on is detached mode with a reason, and a new agent instance on the same socket is
//! registered with again, counted, without the application doing anything.

use std::{
    os::unix::net::UnixListener,
    sync::Arc,
    time::{Duration, Instant},
};

use morpheus_abi::WorkerState;
use morpheus::{
    testing::{unique_path, AgentBehaviour, FakeAgent, SimRegion},
    Config, DetachReason, ErrorCode,
};

/// Liveness bound for what the watcher thread does on its own (never a verdict on speed).
const PATIENCE: Duration = Duration::from_secs(30);

#[test]
fn a_socket_nobody_accepts_on_is_detached_mode_with_a_reason_then_a_new_agent_is_joined() {
    let path = unique_path("dead.sock");
    drop(UnixListener::bind(&path).unwrap()); // the file stays, nobody listens: a killed agent's leftover
    let worker = Config::default().agent_socket(&path).register().expect("a dead socket is not an error");
    assert!(!worker.is_attached());
    assert_eq!(worker.detach_reason(), Some(DetachReason::NoScheduler));
    assert!(worker.detach_detail().unwrap().contains("no agent accepts"), "{:?}", worker.detach_detail());
    assert!(worker.is_waiting_for_scheduler());
    assert!(!worker.checkpoint_sync());

    let region = Arc::new(SimRegion::temp(2));
    let agent = FakeAgent::start_at(path.clone(), region.clone(), AgentBehaviour::Normal);
    // The watcher sees the new socket and wakes the worker; its checkpoints (the only thing it does)
    // register it again.
    let deadline = Instant::now() + PATIENCE;
    while worker.reattachments() == 0 && Instant::now() < deadline {
        assert!(!worker.checkpoint_sync());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(worker.reattachments(), 1, "not registered with the new agent within {PATIENCE:?}");
    assert!(worker.is_attached());
    worker.status().unwrap();
    let slot = worker.slot().unwrap();
    assert_eq!(region.snapshot(slot).worker_state, WorkerState::Running.raw());
    region.request_yield(slot);
    assert!(worker.checkpoint_sync(), "yields again under the new agent");
    drop(worker);
    drop(agent);
}

#[test]
fn a_restarted_agent_is_noticed_at_status_and_registered_with_again_at_the_next_checkpoint() {
    let path = unique_path("restart.sock");
    let first = Arc::new(SimRegion::temp(2));
    let agent = FakeAgent::start_at(path.clone(), first.clone(), AgentBehaviour::Normal);
    let worker = Config::default().agent_socket(&path).register().unwrap();
    let old_slot = worker.slot().unwrap();
    assert!(worker.is_attached());
    worker.status().unwrap();

    drop(agent); // the socket goes away with it
    let builder = morpheus::testing::SimRegionBuilder { generation: first.generation() + 1, scb_count: 2, ..Default::default() };
    let second = Arc::new(builder.create(unique_path("second")).unwrap());
    let _agent = FakeAgent::start_at(path.clone(), second.clone(), AgentBehaviour::Normal);
    let before = first.snapshot(old_slot);

    // One status call notices (the generation and the socket are other ones) and reports the loss,
    // although the new instance already accepts: status never registers (SCB.md §6, §6.1).
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::GenerationChanged);
    assert!(!worker.is_attached());
    assert_eq!(worker.set_priority(worker.priority()).unwrap_err().code(), ErrorCode::GenerationChanged);
    assert_eq!(worker.reattachments(), 0, "status, is_attached and a setter registered again");
    assert!(worker.is_waiting_for_scheduler());
    // The next checkpoint registers with the new instance (the loss latched the wake-up).
    assert!(!worker.checkpoint_sync());
    assert_eq!(worker.reattachments(), 1);
    worker.status().unwrap();
    assert!(worker.is_attached());
    let slot = worker.slot().unwrap();
    assert_eq!(second.snapshot(slot).worker_state, WorkerState::Running.raw());
    assert_eq!(first.snapshot(old_slot), before, "nothing written to the old instance's region");
    second.request_yield(slot);
    assert!(worker.checkpoint_sync());
    drop(worker);
    assert_eq!(second.snapshot(slot).worker_state, WorkerState::Init.raw(), "the new slot is released");
}

#[test]
fn an_explicit_socket_that_does_not_exist_is_an_error_naming_it() {
    let err = Config::default().agent_socket("/nonexistent/morpheus.sock").register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("/nonexistent/morpheus.sock"), "{err}");
}

#[test]
fn explicit_yield_and_try_checkpoint_on_a_detached_worker_are_not_errors() {
    let worker = Config::default().detached().register().unwrap();
    worker.record_explicit_yield().unwrap();
    assert!(!worker.try_checkpoint().unwrap());
}
