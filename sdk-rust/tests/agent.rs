// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Registration through the agent's socket (spec/SCB.md §4.1), against the fake agent of
//! `morpheus::testing`, which drives a sim region as the real agent does.

use std::sync::Arc;

use morpheus::{
    testing::{AgentBehaviour, FakeAgent, SimRegion},
    Config, ErrorCode,
};
use morpheus_abi::{RegOp, RegStatus, RuntimeKind, WorkerState, ABI_MAJOR, ABI_MINOR, REG_MAGIC};

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
