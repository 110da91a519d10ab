// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Registration through the agent's socket (spec/SCB.md §4.1), against the fake agent of
//! `morpheus::testing`, which drives a sim region as the real agent does.

use std::sync::Arc;

use morpheus::{
    testing::{AgentBehaviour, FakeAgent, SimRegion},
    Config, ErrorCode,
};
use morpheus_abi::{RegEscapable, RegOp, RegStatus, RuntimeKind, WorkerState, ABI_MAJOR, ABI_MINOR, REG_MAGIC};

fn config(region: &SimRegion, agent: &FakeAgent) -> Config {
    Config::default().region_path(region.path()).agent_socket(agent.path())
}

#[test]
fn register_and_unregister_through_the_agent() {
    let region = Arc::new(SimRegion::temp(4));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let worker = config(&region, &agent).register().unwrap();
    let slot = worker.slot().unwrap();
    let s = region.snapshot(slot);
    assert_eq!(s.worker_state, WorkerState::Running.raw());
    assert_eq!(s.tid, unsafe { libc::gettid() } as u32);
    assert_eq!(worker.slot_generation(), s.slot_generation);

    region.request_yield(slot);
    assert!(worker.checkpoint_sync());
    assert_eq!(region.snapshot(slot).last_ack_seq, 1);

    drop(worker);
    assert_eq!(region.snapshot(slot).worker_state, WorkerState::Init.raw(), "the agent reclaimed the slot");
    let requests = agent.requests();
    assert_eq!(requests.len(), 2);
    let (reg, unreg) = (requests[0], requests[1]);
    assert_eq!((reg.magic, reg.abi_major, reg.abi_minor), (REG_MAGIC, ABI_MAJOR, ABI_MINOR));
    assert_eq!(reg.op, RegOp::Register.raw());
    assert_eq!(reg.tid, unsafe { libc::gettid() } as u32);
    assert_eq!(reg.runtime_kind, RuntimeKind::Rust.raw());
    assert_eq!((unreg.op, unreg.slot), (RegOp::Unregister.raw(), slot));
}

/// `Config::escapable` and `priority` travel in the REGISTER request (1.3, §4.1) and the registrar
/// writes them before REGISTERED: the worker is never escapable for an instant on the agent path either.
#[test]
fn escapable_and_priority_reach_the_agent_in_the_request() {
    let region = Arc::new(SimRegion::temp(2));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let worker = config(&region, &agent).escapable(false).priority(5).register().unwrap();
    let request = agent.requests()[0];
    assert_eq!((request.escapable, request.priority), (RegEscapable::No.raw(), 5));
    let s = region.snapshot(worker.slot().unwrap());
    assert_eq!((s.escapable, s.priority), (0, 5));
    drop(worker);
    let worker = config(&region, &agent).escapable(true).register().unwrap();
    let request = agent.requests()[2];
    assert_eq!((request.op, request.escapable, request.priority), (RegOp::Register.raw(), RegEscapable::Yes.raw(), 0));
    assert_eq!(region.snapshot(worker.slot().unwrap()).escapable, 1);
}

#[test]
fn a_refusal_is_registration_refused_naming_the_status() {
    let region = Arc::new(SimRegion::temp(1));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Refuse(RegStatus::NoFreeSlot));
    let err = config(&region, &agent).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::RegistrationRefused);
    assert!(err.to_string().contains("NO_FREE_SLOT"), "{err}");
    // The thread is still free to register (detached here).
    Config::default().detached().register().unwrap();
}

#[test]
fn no_free_slot_from_a_full_region() {
    let region = Arc::new(SimRegion::temp(1));
    region.set_worker_state(0, WorkerState::Running);
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::Normal);
    let err = config(&region, &agent).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::RegistrationRefused);
    assert!(err.to_string().contains("NO_FREE_SLOT"), "{err}");
}

#[test]
fn a_reply_for_another_generation_is_generation_changed_and_releases_the_slot() {
    let region = Arc::new(SimRegion::temp(1));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::WrongGeneration(99));
    let err = config(&region, &agent).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::GenerationChanged);
    assert_eq!(region.snapshot(0).worker_state, WorkerState::Init.raw(), "the SDK sent UNREGISTER");
}

#[test]
fn a_malformed_reply_is_io() {
    let region = Arc::new(SimRegion::temp(1));
    let agent = FakeAgent::start(region.clone(), AgentBehaviour::BadMagic);
    let err = config(&region, &agent).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("expected magic"), "{err}");
}

#[test]
fn no_agent_is_io_naming_the_socket() {
    let region = SimRegion::temp(1);
    let err = Config::default()
        .region_path(region.path())
        .agent_socket("/nonexistent/agent.sock")
        .register()
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Io);
    assert!(err.to_string().contains("/nonexistent/agent.sock"), "{err}");
}
