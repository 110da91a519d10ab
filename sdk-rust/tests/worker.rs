// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Worker lifecycle, checkpoints, critical sections, modes and scheduler restarts, on a sim region with
//! direct registration (the test plays the scheduler).

use std::sync::Arc;

use morpheus::{testing::SimRegion, Config, ErrorCode, RuntimeKind, RuntimeMode, Worker, YieldReason};
use morpheus_abi::{escapable_default, WorkerState};

fn direct(region: &SimRegion, slot: u32) -> Worker {
    Config::default().region_path(region.path()).direct_slot(slot).register().unwrap()
}

#[test]
fn registration_writes_the_lifecycle_and_drop_frees_the_slot() {
    let region = SimRegion::temp(4);
    region.request_yield(1); // an old request on the slot must not be pending after assignment
    let worker = direct(&region, 1);
    let s = region.snapshot(1);
    assert_eq!(s.worker_state, WorkerState::Running.raw());
    assert_eq!(s.tid, unsafe { libc::gettid() } as u32);
    assert_eq!(s.pid, std::process::id());
    assert_eq!(s.slot_generation, 1);
    assert_eq!(s.last_ack_seq, 1, "last_ack_seq := preempt_seq at assignment");
    assert_eq!(s.runtime_kind, RuntimeKind::Rust.raw());
    assert_eq!(s.escapable, escapable_default(RuntimeKind::Rust) as u32);
    assert_eq!((s.priority, s.runtime_mode, s.in_critical), (0, RuntimeMode::Deterministic.raw(), 0));
    assert!(!worker.checkpoint_sync(), "the old request is not pending");
    assert_eq!(worker.slot(), Some(1));
    drop(worker);
    let s = region.snapshot(1);
    assert_eq!(s.worker_state, WorkerState::Init.raw());
    assert_eq!((s.tid, s.pid, s.yield_count, s.escapable, s.runtime_kind), (0, 0, 0, 0, 0));
    assert_eq!(s.last_ack_seq, 1, "last_ack_seq survives the reclaim");
    // The slot can be taken again; slot_generation moves on.
    let again = direct(&region, 1);
    assert_eq!(region.snapshot(1).slot_generation, 2);
    again.shutdown().unwrap();
}

#[test]
fn checkpoint_acknowledges_the_observed_request_once() {
    let region = SimRegion::temp(2);
    let worker = direct(&region, 0);
    assert!(!worker.checkpoint_sync());
    region.request_yield(0);
    region.request_yield(0);
    assert!(worker.checkpoint_sync(), "a pending request makes the checkpoint yield");
    let s = region.snapshot(0);
    assert_eq!(s.last_ack_seq, 2, "acknowledges the value it observed, covering both increments");
    assert_eq!(s.yield_count, 1);
    assert_eq!(s.last_yield_reason, YieldReason::PreemptRequest.raw());
    assert!(!worker.checkpoint_sync(), "nothing pending any more");
    assert_eq!(worker.yield_counts().get(YieldReason::PreemptRequest), 1);
    assert_eq!(worker.acknowledged_seq(), 2);
    assert!(region.snapshot(0).last_ack_seq <= region.snapshot(0).preempt_seq);
}

#[test]
fn free_functions_use_the_threads_worker() {
    let region = SimRegion::temp(1);
    assert!(!morpheus::checkpoint_sync(), "an unregistered thread reads the detached SCB");
    let _worker = direct(&region, 0);
    region.request_yield(0);
    assert!(morpheus::checkpoint!(sync));
    assert_eq!(region.snapshot(0).last_ack_seq, 1);
}

#[test]
fn a_critical_section_defers_the_request_to_the_first_checkpoint_after_it() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    {
        let _outer = worker.critical_section();
        assert_eq!(region.snapshot(0).in_critical, 1);
        {
            let _inner = worker.critical_section();
            assert_eq!(worker.critical_depth(), 2);
        }
        assert_eq!(region.snapshot(0).in_critical, 1, "only the outermost exit clears the flag");
        region.request_yield(0);
        assert!(!worker.checkpoint_sync(), "never yields inside a critical section");
        assert_eq!(region.snapshot(0).last_ack_seq, 0, "the request stays pending");
    }
    assert_eq!(region.snapshot(0).in_critical, 0);
    assert!(worker.checkpoint_sync(), "honoured at the first checkpoint after the outermost exit");
    assert_eq!(region.snapshot(0).last_ack_seq, 1);
}

#[test]
fn exiting_a_critical_section_never_entered_is_not_in_critical() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    let err = worker.critical_exit().unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotInCritical);
    assert_eq!(worker.critical_depth(), 0);
    assert_eq!(region.snapshot(0).in_critical, 0, "nothing written");
    worker.critical_enter();
    worker.critical_exit().unwrap();
    assert_eq!(worker.critical_exit().unwrap_err().code(), ErrorCode::NotInCritical);
}

#[test]
fn a_panic_inside_a_critical_section_exits_it() {
    let region = Arc::new(SimRegion::temp(1));
    let r = region.clone();
    std::thread::spawn(move || {
        let worker = direct(&r, 0);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = worker.critical_section();
            assert_eq!(r.snapshot(0).in_critical, 1);
            panic!("boom");
        }));
        assert!(result.is_err());
        assert_eq!(worker.critical_depth(), 0);
        assert_eq!(r.snapshot(0).in_critical, 0);
    })
    .join()
    .unwrap();
}

#[test]
fn registering_twice_on_one_thread_is_already_registered() {
    let region = SimRegion::temp(2);
    let worker = direct(&region, 0);
    let err = Config::default().region_path(region.path()).direct_slot(1).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyRegistered);
    assert!(err.to_string().contains("slot 0"), "{err}");
    assert_eq!(region.snapshot(1).worker_state, WorkerState::Init.raw(), "the second slot was not touched");
    let err = Worker::detached().unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyRegistered);
    drop(worker);
    Worker::detached().unwrap();
}

#[test]
fn a_slot_out_of_range_or_busy_is_refused() {
    let region = SimRegion::temp(2);
    let err = Config::default().region_path(region.path()).direct_slot(2).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::SlotOutOfRange);
    assert!(err.to_string().contains("scb_count 2") && err.to_string().contains("slot 2"), "{err}");
    region.set_worker_state(1, WorkerState::Running);
    let err = Config::default().region_path(region.path()).direct_slot(1).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::SlotBusy);
    assert!(err.to_string().contains("expected state INIT, found RUNNING"), "{err}");
    // A failed registration leaves the thread free to register.
    direct(&region, 0);
}

#[test]
fn detached_mode_never_yields_and_counts_nesting() {
    let worker = Config::default().detached().register().unwrap();
    assert!(!worker.is_attached());
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::Detached);
    assert!(!worker.checkpoint_sync());
    let guard = worker.critical_section();
    assert_eq!(worker.critical_depth(), 1);
    drop(guard);
    assert_eq!(worker.critical_exit().unwrap_err().code(), ErrorCode::NotInCritical);
    assert_eq!(worker.budget_remaining_ns().unwrap_err().code(), ErrorCode::Detached);
    worker.set_escapable(false).unwrap();
    assert!(!worker.escapable(), "remembered even when detached");
    worker.set_priority(5).unwrap();
    assert_eq!(worker.priority(), 5, "remembered even when detached");
    worker.record_explicit_yield().unwrap();
}

#[test]
fn escapable_priority_and_budget() {
    let region = SimRegion::temp(1);
    let worker = Config::default().region_path(region.path()).direct_slot(0).escapable(false).register().unwrap();
    assert_eq!(region.snapshot(0).escapable, 0);
    worker.set_escapable(true).unwrap();
    assert_eq!(region.snapshot(0).escapable, 1);
    worker.set_priority(-20).unwrap();
    assert_eq!(region.snapshot(0).priority, -20);
    let err = worker.set_priority(-40).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "never clamped");
    assert!(err.to_string().contains("expected priority in -20..=19, found -40"), "{err}");
    assert_eq!((region.snapshot(0).priority, worker.priority()), (-20, -20), "a refused priority writes nothing");
    region.set_budget(0, 1234);
    assert_eq!(worker.budget_remaining_ns().unwrap(), 1234);
}

#[test]
fn a_scheduler_restart_detaches_the_worker_and_writes_nothing() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    let before = region.snapshot(0);
    region.set_generation(2); // another scheduler instance took over
    region.request_yield(0);
    assert!(!worker.checkpoint_sync(), "no yield after a restart");
    assert_eq!(worker.try_checkpoint().unwrap_err().code(), ErrorCode::GenerationChanged);
    let err = worker.status().unwrap_err();
    assert_eq!(err.code(), ErrorCode::GenerationChanged);
    assert!(err.to_string().contains("generation 1") && err.to_string().contains("generation 2"), "{err}");
    assert!(!worker.is_attached());
    {
        let _g = worker.critical_section();
    }
    assert_eq!(worker.set_priority(3).unwrap_err().code(), ErrorCode::GenerationChanged);
    drop(worker);
    let after = region.snapshot(0);
    assert_eq!(after.last_ack_seq, before.last_ack_seq);
    assert_eq!(after.worker_state, WorkerState::Running.raw(), "shutdown wrote nothing to the old region");
    assert_eq!(after.in_critical, 0);
    assert_eq!(after.yield_count, 0);
}

#[test]
fn a_restart_seen_by_a_critical_enter_detaches_without_writing() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    region.set_generation(0); // clean scheduler exit retires the region
    let guard = worker.critical_section();
    assert_eq!(region.snapshot(0).in_critical, 0);
    drop(guard);
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::GenerationChanged);
    // The thread can register again once the old worker is gone.
    drop(worker);
    let fresh = SimRegion::temp(1);
    direct(&fresh, 0);
}

#[test]
fn pressured_mode_yields_on_an_exhausted_budget() {
    let region = SimRegion::temp(1);
    region.set_slice_ns(1); // every check has "run a slice"
    let worker = direct(&region, 0);
    region.set_pressure_level(morpheus::PressureLevel::High);
    assert_eq!(worker.refresh_mode().unwrap(), RuntimeMode::Pressured);
    assert_eq!(region.snapshot(0).runtime_mode, RuntimeMode::Pressured.raw());
    region.set_budget(0, 1_000_000);
    assert!(!worker.checkpoint_sync(), "budget left: no yield");
    region.set_budget(0, 0);
    assert!(worker.checkpoint_sync(), "budget exhausted in PRESSURED mode: yield");
    assert_eq!(region.snapshot(0).last_yield_reason, YieldReason::Budget.raw());
    assert_eq!(region.snapshot(0).last_ack_seq, 0, "no request: nothing acknowledged");
    region.set_pressure_level(morpheus::PressureLevel::Low);
    assert_eq!(worker.refresh_mode().unwrap(), RuntimeMode::Deterministic);
    assert!(!worker.checkpoint_sync());
}

#[test]
fn hint_loss_enters_defensive_mode() {
    let region = SimRegion::temp(1);
    region.set_slice_ns(1);
    let worker = direct(&region, 0);
    region.drop_hints(0, 3);
    assert_eq!(worker.refresh_mode().unwrap(), RuntimeMode::Defensive);
    assert!(worker.checkpoint_sync(), "DEFENSIVE yields on the SDK's own clock");
    assert_eq!(worker.yield_counts().get(YieldReason::Defensive), 1);
    // No further loss: the next evaluation goes back to DETERMINISTIC.
    assert_eq!(worker.refresh_mode().unwrap(), RuntimeMode::Deterministic);
}

/// SCB.md §5.8 (Appendix A 17d), on the thread's mode clock: an explicit yield is a yield of any
/// reason, so DEFENSIVE's next yield on the SDK's own clock waits a slice from it, not from the
/// yield before it. Without the reset the check at 1.2 slices would yield.
#[test]
fn an_explicit_yield_restarts_the_mode_clocks() {
    const SLICE: u64 = 1_000_000;
    let region = SimRegion::temp(1);
    region.set_slice_ns(SLICE);
    morpheus::kit::set_mode_clock(Some(0));
    let worker = direct(&region, 0);
    region.drop_hints(0, 1);
    region.request_yield(0);
    assert!(worker.checkpoint_sync(), "the request, at 0");
    assert_eq!(worker.runtime_mode(), RuntimeMode::Defensive);
    region.drop_hints(0, 1);
    morpheus::kit::set_mode_clock(Some(SLICE * 6 / 10));
    worker.record_explicit_yield().unwrap();
    assert_eq!(worker.runtime_mode(), RuntimeMode::Defensive, "hints lost again: still DEFENSIVE");
    assert_eq!(worker.mode_quiet_until_ns(), Some(SLICE * 16 / 10), "a slice after the explicit yield");
    morpheus::kit::set_mode_clock(Some(SLICE * 12 / 10));
    let before = region.snapshot(0);
    assert!(!worker.checkpoint_sync(), "1.2 slices after the request's yield, 0.6 after the explicit one");
    assert_eq!(region.snapshot(0), before, "nothing written");
    region.drop_hints(0, 1);
    morpheus::kit::set_mode_clock(Some(SLICE * 16 / 10));
    assert!(worker.checkpoint_sync(), "a slice after the explicit yield: DEFENSIVE yields");
    assert_eq!(region.snapshot(0).last_yield_reason, YieldReason::Defensive.raw());
    morpheus::kit::set_mode_clock(None);
}

#[test]
fn an_explicit_yield_acknowledges_what_is_pending() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    region.request_yield(0);
    worker.record_explicit_yield().unwrap();
    let s = region.snapshot(0);
    assert_eq!((s.last_ack_seq, s.last_yield_reason), (1, YieldReason::Explicit.raw()));
    assert!(!worker.checkpoint_sync());
}

#[test]
fn a_thread_that_exits_holding_a_worker_releases_its_slot() {
    let region = Arc::new(SimRegion::temp(1));
    let r = region.clone();
    std::thread::spawn(move || {
        morpheus::raw::register_current_thread(&Config::default().region_path(r.path()).direct_slot(0)).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(region.snapshot(0).worker_state, WorkerState::Init.raw());
}

#[test]
fn async_checkpoint_yields_before_acknowledging() {
    use std::{
        future::Future,
        pin::pin,
        task::{Context, Poll, Waker},
    };
    let region = SimRegion::temp(1);
    let _worker = direct(&region, 0);
    let mut cx = Context::from_waker(Waker::noop());
    assert_eq!(pin!(morpheus::checkpoint()).poll(&mut cx), Poll::Ready(false));
    region.request_yield(0);
    let mut fut = pin!(morpheus::checkpoint());
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending, "yields to the executor first");
    assert_eq!(region.snapshot(0).last_ack_seq, 0, "not acknowledged while suspended");
    region.request_yield(0); // arrives during the yield: stays pending
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(true));
    assert_eq!(region.snapshot(0).last_ack_seq, 1, "acknowledges the value it observed");
    assert!(morpheus::checkpoint_sync(), "the later request is still pending");
    assert_eq!(region.snapshot(0).last_ack_seq, 2);
}

#[test]
fn a_handle_whose_registration_was_released_elsewhere_is_stale_not_ub() {
    let region = SimRegion::temp(2);
    let worker = direct(&region, 0);
    morpheus::unregister_current_thread().unwrap();
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::NotRegistered);
    // The thread registers again; the stale handle must not release the new registration.
    let fresh = direct(&region, 1);
    assert_eq!(worker.status().unwrap_err().code(), ErrorCode::NotRegistered);
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.slot())).is_err());
    drop(worker);
    assert_eq!(region.snapshot(1).worker_state, WorkerState::Running.raw(), "the new worker is untouched");
    assert_eq!(fresh.slot(), Some(1));
}

#[test]
fn a_restart_is_reported_even_when_nothing_was_pending() {
    let region = SimRegion::temp(1);
    let worker = direct(&region, 0);
    region.set_generation(0);
    assert!(!worker.checkpoint_sync(), "the fast path only reads");
    assert_eq!(worker.try_checkpoint().unwrap_err().code(), ErrorCode::GenerationChanged);
    assert!(!worker.is_attached());
}

#[test]
fn an_out_of_range_priority_refuses_registration_and_claims_nothing() {
    let region = SimRegion::temp(1);
    for priority in [-21, 20, i32::MIN, i32::MAX] {
        let err = Config::default().region_path(region.path()).direct_slot(0).priority(priority).register().unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "priority {priority}");
        assert_eq!(region.snapshot(0).worker_state, WorkerState::Init.raw(), "the slot stays free");
    }
    let worker = Config::default().region_path(region.path()).direct_slot(0).priority(19).register().unwrap();
    assert_eq!((region.snapshot(0).priority, worker.priority()), (19, 19));
}

#[test]
fn direct_registration_writes_escapable_and_priority_before_the_worker_runs() {
    let region = SimRegion::temp(1);
    let worker =
        Config::default().region_path(region.path()).direct_slot(0).escapable(false).priority(-7).register().unwrap();
    let snap = region.snapshot(0);
    assert_eq!((snap.escapable, snap.priority, snap.worker_state), (0, -7, WorkerState::Running.raw()));
    drop(worker);
}

#[test]
fn slots_in_claimed_or_unknown_states_are_busy_not_free() {
    let region = SimRegion::temp(2);
    region.set_worker_state(0, WorkerState::Claimed);
    let err = Config::default().region_path(region.path()).direct_slot(0).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::SlotBusy);
    assert!(err.to_string().contains("found CLAIMED"), "{err}");
    // A value no ABI version defines (a newer scheduler, or a hostile mapper): busy, never a crash.
    region.set_worker_state_raw(1, 9);
    let err = Config::default().region_path(region.path()).direct_slot(1).register().unwrap_err();
    assert_eq!(err.code(), ErrorCode::SlotBusy);
    assert!(err.to_string().contains("unknown state 9"), "{err}");
    assert_eq!(region.snapshot(1).worker_state, 9, "nothing written");
    assert!(!region.reclaim(1), "the fake registrar does not reclaim a state it does not know either");
}

#[test]
fn slot_generation_wraps_past_zero_without_panicking() {
    let region = SimRegion::temp(1);
    region.set_slot_generation(0, u32::MAX);
    let worker = direct(&region, 0);
    assert_eq!((worker.slot_generation(), region.snapshot(0).slot_generation), (1, 1), "0 is skipped");
}

#[test]
fn registering_inside_an_open_critical_section_publishes_in_critical() {
    let region = SimRegion::temp(1);
    let guard = morpheus::critical_section(); // no worker yet: only the per-thread depth counts
    let worker = direct(&region, 0);
    assert_eq!(worker.critical_depth(), 1, "depth is per thread, kept across registration");
    assert_eq!(region.snapshot(0).in_critical, 1, "the SCB says critical before the worker is RUNNING");
    region.request_yield(0);
    assert!(!worker.checkpoint_sync(), "never yields inside the section");
    drop(guard);
    assert_eq!(region.snapshot(0).in_critical, 0);
    assert!(worker.checkpoint_sync());
}

#[test]
fn a_later_acknowledgement_by_another_path_is_cached_not_undone() {
    use std::{
        future::Future,
        pin::pin,
        task::{Context, Poll, Waker},
    };
    let region = SimRegion::temp(1);
    let _worker = direct(&region, 0);
    let mut cx = Context::from_waker(Waker::noop());
    region.request_yield(0);
    let mut fut = pin!(morpheus::checkpoint());
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Pending, "saw request 1, yielding");
    region.request_yield(0);
    region.set_last_ack_seq(0, 2); // another path of the runtime acknowledged request 2 meanwhile
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(true));
    assert_eq!(region.snapshot(0).last_ack_seq, 2, "never decreases");
    assert!(!morpheus::checkpoint_sync(), "cached_ack is 2, not 1: no yield for nothing");
}

#[test]
fn shutdown_of_a_direct_registration_clears_the_whole_stride() {
    let region = morpheus::testing::SimRegionBuilder { scb_count: 2, scb_stride: 256, ..Default::default() }
        .create(morpheus::testing::unique_path("stride"))
        .unwrap();
    let worker = direct(&region, 1);
    region.request_yield(1);
    assert!(worker.checkpoint_sync());
    // Bytes past the 128 this version knows, as a newer runtime of the same slot would leave them.
    let tail = unsafe { std::slice::from_raw_parts_mut((region.scb(1) as *mut u8).add(128), 128) };
    tail.fill(0xAB);
    let before = region.snapshot(1);
    drop(worker);
    let after = region.snapshot(1);
    assert_eq!(after.worker_state, WorkerState::Init.raw());
    assert!(tail.iter().all(|&b| b == 0), "bytes a newer version defined must not leak to the next occupant");
    assert_eq!((after.preempt_seq, after.last_ack_seq, after.slot_generation), (1, 1, before.slot_generation), "kept");
    assert_eq!((after.tid, after.pid, after.yield_count, after.escapable, after.runtime_kind), (0, 0, 0, 0, 0));
    let slot0 = unsafe { std::slice::from_raw_parts((region.scb(0) as *const u8).add(128), 128) };
    assert!(slot0.iter().all(|&b| b == 0), "the neighbour is untouched");
}

#[test]
fn a_parked_pressure_seqlock_cannot_stall_a_reader() {
    let region = SimRegion::temp(1);
    let attached = morpheus::Region::open(region.path()).unwrap();
    region.set_pressure_seq(1); // a writer killed mid-update, before any good snapshot
    assert_eq!(attached.pressure(), None, "unavailable, and returned (bounded retries)");
    region.set_pressure_seq(2);
    region.set_pressure_level(morpheus::PressureLevel::High);
    let good = attached.pressure().expect("a consistent snapshot");
    assert_eq!(good.level, Some(morpheus::PressureLevel::High));
    region.set_pressure_seq(5);
    assert_eq!(attached.pressure(), Some(good), "the last good snapshot");
}

/// CLOCK_MONOTONIC in ns, the clock of `Worker::mode_quiet_until_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn outside_deterministic_the_quiet_time_is_a_slice_after_the_last_yield_and_checks_before_it_decide_nothing() {
    const SLICE: u64 = 10_000_000_000;
    let region = SimRegion::temp(1);
    region.set_slice_ns(SLICE);
    let worker = direct(&region, 0);
    assert_eq!(worker.mode_quiet_until_ns(), None, "DETERMINISTIC: the fast path's load decides");
    region.drop_hints(0, 1);
    region.request_yield(0);
    let before = monotonic_ns();
    assert!(worker.checkpoint_sync());
    let after = monotonic_ns();
    assert_eq!(worker.runtime_mode(), RuntimeMode::Defensive);
    let quiet = worker.mode_quiet_until_ns().expect("DEFENSIVE has a quiet time");
    assert!((before + SLICE..=after + SLICE).contains(&quiet), "{quiet} not a slice after the yield ({before}..{after})");
    // Within it a check with nothing pending yields not, writes nothing, and moves nothing.
    let snapshot = region.snapshot(0);
    for _ in 0..100 {
        assert!(!worker.checkpoint_sync());
    }
    assert_eq!(region.snapshot(0), snapshot);
    assert_eq!(worker.mode_quiet_until_ns(), Some(quiet));
}
