// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The binding kit (`morpheus::kit`): each rule a binding now takes from the core instead of writing
//! it again: option validation, the thread's worker, the fast-path handshake and the §5.7 rotation,
//! driven here as an event-loop binding drives it, against a sim region, with the test clock.

use morpheus::{
    kit::{
        self,
        options::{OptionError, Options, RegionChoice},
        rotation::{Pass, Rotation, Seen, Step, LOOKS_PER_SLICE, YIELD_PASSES},
        thread, FastPath,
    },
    testing::SimRegion,
    Config, Error, ErrorCode, RuntimeKind,
};

const SLICE_NS: u64 = 1_000_000;

/// A sim region with the calling thread registered on slot 0 through the kit.
fn registered() -> (SimRegion, u64) {
    let region = SimRegion::temp(2);
    region.set_slice_ns(SLICE_NS);
    let token = thread::register(&Config::default().region_path(region.path()).direct_slot(0)).unwrap();
    (region, token)
}

fn last_ack(region: &SimRegion) -> u64 {
    region.snapshot(0).last_ack_seq
}

// ------------------------------------------------------------------------------------------------
// Options

fn opts() -> Options {
    Options::default()
}

#[test]
fn options_refuse_region_with_detached() {
    let o = Options { region: Some(RegionChoice::Path("/r".into())), detached: true, ..opts() };
    let err = o.config(RuntimeKind::Python).unwrap_err();
    assert!(matches!(err, OptionError::Conflict { first: "region", second: "detached" }), "{err:?}");
    assert_eq!(err.to_string(), "give region or detached, not both");
}

#[test]
fn options_refuse_slot_with_socket() {
    let o = Options { slot: Some(1), socket: Some("/s".into()), ..opts() };
    let err = o.config(RuntimeKind::Node).unwrap_err();
    assert!(matches!(err, OptionError::Conflict { first: "slot", second: "socket" }), "{err:?}");
    assert_eq!(err.to_string(), "give slot or socket, not both");
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "a conflict is the caller's argument error");
}

#[test]
fn options_refuse_a_slot_outside_u32_naming_the_value() {
    let err = Options { slot: Some(-1), ..opts() }.config(RuntimeKind::Python).unwrap_err();
    assert_eq!(err.to_string(), "expected a slot index >= 0, got -1");
    let err = Options { slot: Some(1 << 32), ..opts() }.config(RuntimeKind::Python).unwrap_err();
    assert_eq!(err.to_string(), "expected a slot index <= 4294967295, got 4294967296");
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
}

#[test]
fn options_refuse_a_priority_out_of_range_with_the_core_error_never_clamping() {
    for bad in [20, -21, i64::MAX] {
        let err = Options { priority: Some(bad), ..opts() }.config(RuntimeKind::Python).unwrap_err();
        let OptionError::Core(core) = &err else { panic!("{err:?}") };
        assert_eq!((core.code(), err.code()), (ErrorCode::InvalidArgument, ErrorCode::InvalidArgument));
        assert!(err.to_string().contains(&format!("expected priority in -20..=19, found {bad}")), "{err}");
    }
}

#[test]
fn options_check_conflicts_before_ranges() {
    // Several broken rules: the first in the documented order is reported.
    let o = Options { region: Some(RegionChoice::Path("/r".into())), detached: true, slot: Some(-1), priority: Some(99), ..opts() };
    assert!(matches!(o.config(RuntimeKind::Python).unwrap_err(), OptionError::Conflict { first: "region", .. }));
    let o = Options { slot: Some(-1), priority: Some(99), ..opts() };
    assert!(matches!(o.config(RuntimeKind::Python).unwrap_err(), OptionError::SlotOutOfRange { found: -1 }));
}

#[test]
fn options_make_the_config_they_name() {
    let o = Options { region: Some(RegionChoice::Path("/r".into())), slot: Some(3), escapable: Some(true), priority: Some(-20), ..opts() };
    let c = o.config(RuntimeKind::Python).unwrap();
    assert!(matches!(c.region, morpheus::RegionSource::Path(ref p) if p.as_os_str() == "/r"));
    assert!(matches!(c.registration, morpheus::Registration::Direct { slot: 3 }));
    assert_eq!((c.escapable, c.priority, c.runtime_kind), (Some(true), -20, RuntimeKind::Python));
    let c = Options { detached: true, socket: Some("/s".into()), ..opts() }.config(RuntimeKind::Node).unwrap();
    assert!(matches!(c.region, morpheus::RegionSource::Detached));
    assert!(matches!(c.registration, morpheus::Registration::AgentAt(ref p) if p.as_os_str() == "/s"));
    assert_eq!((c.escapable, c.priority), (None, 0), "not given: the runtime kind's default, priority 0");
}

// ------------------------------------------------------------------------------------------------
// The thread's worker

#[test]
fn a_token_reaches_its_own_registration_only() {
    let (region, token) = registered();
    assert_eq!(thread::current(), Some(token));
    assert_eq!(thread::with(token, "slot", |w| w.slot()).unwrap(), Some(0));
    let err = thread::with(token + 1_000_000, "slot", |w| w.slot()).unwrap_err();
    assert!(matches!(err, Error::NotRegistered { operation: "slot" }), "{err:?}");
    // Another thread never reaches this thread's worker through the token.
    let elsewhere = std::thread::spawn(move || (thread::holds(token), thread::close(token).unwrap())).join().unwrap();
    assert_eq!(elsewhere, (false, false));
    assert!(thread::holds(token));
    drop(region);
}

#[test]
fn a_second_registration_fails_and_keeps_the_first() {
    let (region, token) = registered();
    let err = thread::register(&Config::default().region_path(region.path()).direct_slot(1)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AlreadyRegistered);
    assert_eq!(thread::current(), Some(token));
    assert_eq!(region.snapshot(1).worker_state, morpheus_abi::WorkerState::Init.raw(), "nothing written to slot 1");
}

#[test]
fn close_releases_once_and_the_token_is_never_reused() {
    let (region, token) = registered();
    assert!(thread::close(token).unwrap());
    assert_eq!(region.snapshot(0).worker_state, morpheus_abi::WorkerState::Init.raw(), "slot released");
    assert!(!thread::close(token).unwrap(), "closing twice does nothing");
    assert!(matches!(thread::with(token, "priority", |w| w.priority()), Err(Error::NotRegistered { operation: "priority" })));
    let again = thread::register(&Config::default().region_path(region.path()).direct_slot(0)).unwrap();
    assert_ne!(again, token);
    assert!(!thread::holds(token) && thread::holds(again));
    assert!(thread::close_current().unwrap());
    assert!(!thread::close_current().unwrap());
}

#[test]
fn a_turn_is_timed_by_the_slice_only_while_registered() {
    assert_eq!(thread::turn_slice_ns(), 0, "no worker");
    let (_region, token) = registered();
    assert_eq!(thread::turn_slice_ns(), SLICE_NS);
    thread::close(token).unwrap();
    thread::register(&Config::default().detached()).unwrap();
    assert_eq!(thread::turn_slice_ns(), 0, "detached");
}

// ------------------------------------------------------------------------------------------------
// The fast-path handshake

#[test]
fn the_fast_path_names_what_it_compares() {
    assert_eq!(FastPath::current(), FastPath::Detached, "no worker");
    let (region, token) = registered();
    let FastPath::View { seq, ack } = FastPath::current() else { panic!("{:?}", FastPath::current()) };
    assert_eq!(ack, 0);
    assert_eq!(kit::fast_path_view(), (0, 0));
    region.request_yield(0);
    // SAFETY: the worker's own mapping of slot 0's preempt_seq, live while it is registered.
    assert_eq!(unsafe { std::ptr::read_volatile(seq) }, 1, "the word the view names is the slot's preempt_seq");
    assert_eq!(kit::fast_path_view(), (1, 0), "a request: the next checkpoint takes the slow path");
    assert!(morpheus::checkpoint_sync());
    assert_eq!(FastPath::current(), FastPath::View { seq, ack: 1 });
    thread::close(token).unwrap();
    thread::register(&Config::default().detached()).unwrap();
    assert_eq!(FastPath::current(), FastPath::Detached, "detached on request");
}

#[test]
fn a_pressured_worker_always_takes_the_slow_path() {
    let (region, token) = registered();
    region.set_pressure_level(morpheus::PressureLevel::High);
    let mode = thread::with(token, "refresh_mode", |w| w.refresh_mode()).unwrap().unwrap();
    assert_eq!(mode, morpheus::RuntimeMode::Pressured);
    assert_eq!(FastPath::current(), FastPath::AlwaysSlow, "§5.4: the budget and the SDK's clock also yield");
}

#[test]
fn a_zero_word_of_the_bindings_own_differs_from_the_expected_value_only_when_always_slow() {
    assert_eq!((FastPath::Detached.word(), FastPath::Detached.expected()), (None, 0), "a zero word never differs from 0");
    assert_eq!(FastPath::AlwaysSlow.word(), None);
    assert_eq!(FastPath::AlwaysSlow.expected(), morpheus::raw::FORCE_SLOW_PATH, "a zero word always differs");
    let (region, _token) = registered();
    region.request_yield(0);
    assert!(morpheus::checkpoint_sync());
    let view = FastPath::current();
    let FastPath::View { seq, ack } = view else { panic!("{view:?}") };
    assert_eq!((view.word(), view.expected()), (Some(seq), ack));
    assert_eq!(ack, 1);
}

#[test]
fn the_slow_path_says_whether_to_yield_and_whether_the_word_moved() {
    let (region, _token) = registered();
    let FastPath::View { seq, .. } = FastPath::current() else { panic!("{:?}", FastPath::current()) };
    let nothing = kit::checkpoint_slow();
    assert_eq!(nothing, kit::SlowPath { yield_now: false, fast_path: FastPath::View { seq, ack: 0 }, word_moved: false });
    let asked = region.request_yield(0);
    let served = kit::checkpoint_slow();
    assert_eq!(served, kit::SlowPath { yield_now: true, fast_path: FastPath::View { seq, ack: asked }, word_moved: false });
    assert_eq!(last_ack(&region), asked, "acknowledged by the core's checkpoint");
    // A yield re-evaluates the mode (§5.4): under high pressure every checkpoint takes the slow path,
    // so the inline check stops loading the slot's word.
    region.set_pressure_level(morpheus::PressureLevel::High);
    region.request_yield(0);
    let pressured = kit::checkpoint_slow();
    assert_eq!(pressured, kit::SlowPath { yield_now: true, fast_path: FastPath::AlwaysSlow, word_moved: true });
    // A scheduler restart (a new generation) loses a directly registered worker for good: detached.
    region.set_pressure_level(morpheus::PressureLevel::None);
    region.set_generation(region.generation() + 1);
    let lost = kit::checkpoint_slow();
    assert_eq!(lost, kit::SlowPath { yield_now: false, fast_path: FastPath::Detached, word_moved: false }, "None to None");
}

#[test]
fn a_lost_worker_moves_the_word_away_from_the_slot() {
    let (region, _token) = registered();
    assert!(FastPath::current().word().is_some());
    region.set_generation(region.generation() + 1);
    region.request_yield(0);
    let lost = kit::checkpoint_slow();
    assert!(!lost.yield_now, "nothing is acknowledged for a scheduler that is gone (§6)");
    assert_eq!(lost.fast_path, FastPath::Detached);
    assert!(lost.word_moved, "the binding drops its view of the old slot's word");
}

#[test]
fn thread_critical_sections_count_with_or_without_a_worker() {
    assert_eq!(kit::critical_enter(), 1, "no worker: only the thread's depth");
    assert_eq!(kit::critical_enter(), 2);
    assert_eq!(kit::critical_exit().unwrap(), 1);
    let (region, token) = registered();
    assert_eq!(region.snapshot(0).in_critical, 1, "a section entered before registration covers the worker");
    assert_eq!(kit::critical_depth(), 1);
    assert_eq!(kit::critical_exit().unwrap(), 0);
    assert_eq!(region.snapshot(0).in_critical, 0);
    let before = region.snapshot(0);
    let err = kit::critical_exit().unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotInCritical);
    assert_eq!((kit::critical_depth(), region.snapshot(0).in_critical), (0, before.in_critical), "nothing written");
    assert_eq!(kit::critical_enter(), 1);
    assert_eq!(region.snapshot(0).in_critical, 1);
    assert_eq!(kit::critical_exit().unwrap(), 0);
    thread::close(token).unwrap();
}

// ------------------------------------------------------------------------------------------------
// The rotation (spec/SCB.md §5.7)

/// Task ids of the tests.
const A: usize = 1;
const B: usize = 2;
const C: usize = 3;

fn request(rotation: &Rotation<usize>) -> morpheus::Checkpoint {
    match rotation.checkpoint() {
        Step::Request(request) => request,
        other => panic!("expected a request, got {other:?}"),
    }
}

fn yielder(rotation: &mut Rotation<usize>) -> morpheus::Checkpoint {
    let seen = request(rotation);
    match rotation.see_request(seen) {
        Seen::Yielder(request) => request,
        other => panic!("expected the yielder, got {other:?}"),
    }
}

/// Run the passes to their end on a busy loop; returns how many ran.
fn run_passes(rotation: &mut Rotation<usize>) -> u32 {
    let mut passes = 1;
    while rotation.pass(false) == Pass::Again {
        passes += 1;
    }
    passes
}

#[test]
fn nothing_pending_continues() {
    let (_region, _token) = registered();
    let rotation = Rotation::<usize>::new();
    assert!(matches!(rotation.checkpoint(), Step::Continue));
}

#[test]
fn the_yielder_is_acknowledged_by_the_first_pass_with_the_seq_it_observed() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    assert!(rotation.push_yielder(A, A, req), "the first pass is queued");
    assert_eq!(last_ack(&region), 0, "not acknowledged before the loop has control");
    region.request_yield(0); // arrives during the suspension
    assert_eq!(rotation.pass(false), Pass::Again);
    assert_eq!(last_ack(&region), 1, "the preempt_seq observed before the yield, not the one read now");
    // The increment during the suspension stays pending: the next checkpoint yields for it.
    assert!(matches!(rotation.checkpoint(), Step::Request(_)));
}

#[test]
fn another_task_seeing_the_served_request_acknowledges_it_and_does_not_step_aside_for_it() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    assert!(rotation.push_yielder(A, A, req));
    // B runs before the first pass and sees the same request.
    let seen = request(&rotation);
    assert!(matches!(rotation.see_request(seen), Seen::Served { step_aside: true }));
    assert_eq!(last_ack(&region), 1);
    assert!(!rotation.unacknowledged());
    assert_eq!(rotation.waiting(), 1, "B did not join the queue for it");
}

#[test]
fn a_synchronous_checkpoint_during_a_yield_acknowledges_the_yielders_request_first() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    assert!(rotation.push_yielder(A, A, req));
    assert!(rotation.acknowledge(), "the yielder's request was pending");
    assert_eq!(last_ack(&region), 1);
    assert!(!rotation.unacknowledged());
    assert!(!morpheus::checkpoint_sync(), "the synchronous checkpoint does not yield for the served request");
    assert!(!rotation.acknowledge(), "nothing left to acknowledge");
    assert_eq!(rotation.pass(false), Pass::Again, "the passes go on; the first pass acknowledges nothing more");
    assert_eq!(last_ack(&region), 1);
}

#[test]
fn a_newer_request_seen_by_another_task_makes_it_the_next_yielder() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    assert!(rotation.push_yielder(A, A, req));
    region.request_yield(0);
    let seen = request(&rotation);
    let Seen::Yielder(req) = rotation.see_request(seen) else { panic!("B yields for the newer request") };
    assert_eq!(last_ack(&region), 1, "A's request acknowledged first");
    assert!(!rotation.push_yielder(B, B, req), "a pass is already queued");
    assert_eq!(rotation.pass(false), Pass::Again);
    assert_eq!(last_ack(&region), 2);
}

#[test]
fn a_yield_lasts_yield_passes_on_a_busy_loop_and_one_pass_on_an_idle_one() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req);
    assert_eq!(run_passes(&mut rotation), YIELD_PASSES);
    assert!(!rotation.passing());
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(B, B, req);
    assert_eq!(rotation.pass(true), Pass::Resume, "an idle pass ends the passes");
    assert_eq!(YIELD_PASSES, 8, "one value for every event-loop binding");
}

#[test]
fn a_task_computing_during_the_passes_steps_aside_at_its_first_checkpoint_without_a_request() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req);
    assert_eq!(rotation.pass(false), Pass::Again);
    assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: false }));
    assert!(rotation.may_step_aside());
    assert!(!rotation.push_aside(B, B, false), "a step aside during the passes queues no pass");
    assert_eq!(rotation.waiting(), 2);
    assert_eq!(last_ack(&region), 1, "a step aside writes nothing");
}

#[test]
fn a_critical_section_holds_a_step_aside() {
    let (_region, _token) = registered();
    let rotation = Rotation::<usize>::new();
    let section = morpheus::critical_section();
    assert!(!rotation.may_step_aside());
    drop(section);
    assert!(rotation.may_step_aside());
}

#[test]
fn equal_turns_rotate_in_fifo_order() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    rotation.set_clock(Some(0));
    for task in [A, B, C] {
        let _ = rotation.push_aside(task, task, false);
    }
    // Each resumed task runs a turn of 10 and yields: a strict rotation.
    let mut now = 0;
    let mut order = vec![];
    for _ in 0..6 {
        let next = rotation.take_next().unwrap();
        let _ = rotation.resumed(&next);
        order.push(next.waiter);
        now += 10;
        rotation.set_clock(Some(now));
        region.request_yield(0);
        let req = yielder(&mut rotation);
        let _ = rotation.push_yielder(next.waiter, next.waiter, req);
        let _ = run_passes(&mut rotation);
    }
    assert_eq!(order, [A, B, C, A, B, C]);
}

#[test]
fn a_task_whose_turn_was_cut_short_is_resumed_first_until_it_caught_up() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    rotation.set_clock(Some(0));
    let turn = |rotation: &mut Rotation<usize>, task: usize, ran: u64, now: &mut u64| {
        *now += ran;
        rotation.set_clock(Some(*now));
        region.request_yield(0);
        let req = yielder(rotation);
        let _ = rotation.push_yielder(task, task, req);
        let _ = run_passes(rotation);
    };
    let mut now = 0;
    turn(&mut rotation, A, 10, &mut now); // A: 0 (no turn measured before its first yield)
    turn(&mut rotation, B, 10, &mut now); // B, made ready during the passes: the least (0) + 10
    let next = rotation.take_next().unwrap();
    assert_eq!(next.waiter, A, "equal turns: the head");
    let _ = rotation.resumed(&next);
    turn(&mut rotation, A, 2, &mut now); // A's turn cut short: 2, last turn 2 (tolerance 1)
    let next = rotation.take_next().unwrap();
    assert_eq!(next.waiter, A, "A (2) is resumed before B (10): it is behind by more than half a turn");
    let _ = rotation.resumed(&next);
    turn(&mut rotation, A, 10, &mut now); // A: 12, last turn 10 (tolerance 5)
    let next = rotation.take_next().unwrap();
    assert_eq!(next.waiter, B, "caught up: B (10) is the oldest within half a turn of the least");
}

#[test]
fn a_newcomer_joins_at_the_least_run_time() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    rotation.set_clock(Some(0));
    let mut now = 100;
    rotation.set_clock(Some(now));
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req); // A waits with 0 (never had a timed turn)
    let _ = run_passes(&mut rotation);
    let next = rotation.take_next().unwrap();
    let _ = rotation.resumed(&next); // A runs from 100
    now += 50;
    rotation.set_clock(Some(now));
    // B (not the running task) yields: it joins at min(the queue's least, A's run time before its
    // turn) = 0, plus the 50 it ran.
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(B, B, req);
    // C, another newcomer, steps aside with no turn measured: it joins at the least, 50.
    let _ = rotation.push_aside(C, C, false);
    let _ = run_passes(&mut rotation);
    assert_eq!(rotation.take_next().unwrap().waiter, B);
    assert_eq!(rotation.take_next().unwrap().waiter, C, "neither ahead of B for ever nor behind");
    assert!(rotation.take_next().is_none());
}

#[test]
fn the_keeper_resumes_the_next_when_the_resumed_task_gave_control_back_otherwise() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    for task in [A, B] {
        region.request_yield(0);
        let req = yielder(&mut rotation);
        let _ = rotation.push_yielder(task, task, req);
    }
    let _ = run_passes(&mut rotation);
    let next = rotation.take_next().unwrap();
    let turns = rotation.resumed(&next);
    assert!(rotation.idle_since(turns), "A awaited something else: resume the next");
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req);
    assert!(!rotation.idle_since(turns), "A yielded again: its yield resumes the next");
}

/// A rotation on the test clock at 1,000 ns (`reset(can_look)`) whose task A yielded for a request on
/// `region` while the tasks `aside` stepped aside, and was resumed first after the passes: A's turn is
/// timed from now, and `aside` wait in the rotation.
fn resumed_at_1000(region: &SimRegion, can_look: bool, aside: &[usize]) -> Rotation<usize> {
    let mut rotation = Rotation::new();
    rotation.reset(can_look);
    rotation.set_clock(Some(1_000));
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req);
    for &task in aside {
        let _ = rotation.push_aside(task, task, false);
    }
    let _ = run_passes(&mut rotation);
    let next = rotation.take_next().unwrap();
    assert_eq!(next.waiter, A, "the yielder is resumed first");
    let _ = rotation.resumed(&next);
    rotation
}

/// A turn is timed only while the thread's worker has a slice: when the worker goes during its turn
/// (here closed; lost while it waits for the next scheduler is the same, turn_slice_ns 0), the turn is
/// not stepped aside when the old deadline passes, and the deadline is dropped, so a binding's fast
/// path stops sending checks to the rotation (§5.7, §6.1).
#[test]
fn a_turn_whose_worker_goes_is_no_longer_timed() {
    let (region, token) = registered();
    let mut rotation = resumed_at_1000(&region, false, &[]);
    assert_eq!(rotation.turn_deadline(), 1_000 + SLICE_NS);
    thread::close(token).unwrap();
    assert_eq!(thread::turn_slice_ns(), 0, "no worker, no slice");
    rotation.set_clock(Some(1_000 + SLICE_NS - 1));
    assert!(matches!(rotation.checkpoint(), Step::Continue));
    rotation.set_clock(Some(1_000 + SLICE_NS));
    assert!(matches!(rotation.checkpoint(), Step::Continue), "the turn of a worker that is gone was stepped aside at its old deadline");
    assert_eq!(rotation.turn_deadline(), 0, "the turn of a worker that is gone is still timed");
    assert!(!rotation.passing() && rotation.waiting() == 0);
}

#[test]
fn a_timed_turn_ends_one_slice_of_wall_time_after_it_began() {
    let (region, _token) = registered();
    let mut rotation = resumed_at_1000(&region, false, &[]);
    assert_eq!(rotation.turn_deadline(), 1_000 + SLICE_NS, "a loop that cannot look: one slice");
    rotation.set_clock(Some(1_000 + SLICE_NS - 1));
    assert!(matches!(rotation.checkpoint(), Step::Continue));
    rotation.set_clock(Some(1_000 + SLICE_NS));
    assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: true }));
    // Nothing else to run: the turn carries on, timed afresh.
    assert!(rotation.carry_on(false));
    assert_eq!(rotation.turn_deadline(), 1_000 + 2 * SLICE_NS);
    assert!(matches!(rotation.checkpoint(), Step::Continue));
    // A loop that can look does so LOOKS_PER_SLICE times per slice.
    rotation.reset(true);
    assert!(rotation.carry_on(false));
    assert_eq!(rotation.turn_deadline(), 1_000 + SLICE_NS + SLICE_NS / LOOKS_PER_SLICE);
    // The loop has work: the turn does not carry on; the task steps aside and the passes start.
    assert!(!rotation.carry_on(true));
    assert!(rotation.push_aside(A, A, true));
    assert!(rotation.passing() && rotation.turn_deadline() == 0);
    assert_eq!(last_ack(&region), 1, "a step aside writes nothing to the SCB");
}

/// The one rule of every binding for a timed turn's looks (§5.7): at a look within the slice only
/// the loop's own work ends the turn, so a task waiting in the rotation never shortens it; once the
/// slice of wall time is over, that waiting task ends it too, whether the binding looks once per slice
/// or LOOKS_PER_SLICE times.
#[test]
fn a_waiting_task_ends_a_timed_turn_only_once_its_slice_is_over() {
    let (region, _token) = registered();
    for can_look in [true, false] {
        let mut rotation = resumed_at_1000(&region, can_look, &[B]);
        assert_eq!(rotation.waiting(), 1, "B waits in the rotation during A's turn");
        let looks = if can_look { LOOKS_PER_SLICE } else { 1 };
        for look in 1..looks {
            let at = 1_000 + look * SLICE_NS / looks;
            assert_eq!(rotation.turn_deadline(), at, "look {look} of {looks}");
            rotation.set_clock(Some(at));
            assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: true }));
            assert!(rotation.carry_on(false), "look {look} within the slice ended the turn for the task waiting in the rotation");
        }
        assert_eq!(rotation.turn_deadline(), 1_000 + SLICE_NS, "the last look falls on the slice's end");
        rotation.set_clock(Some(1_000 + SLICE_NS));
        assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: true }));
        assert!(!rotation.carry_on(false), "the slice is over and B waits, yet A's turn carried on (can_look {can_look})");
        assert!(rotation.push_aside(A, A, true));
        assert_eq!(rotation.take_next().unwrap().waiter, B, "B has the next turn");
    }
}

/// At an early look the loop's own work ends the turn at once (a light request waits a quarter of a
/// slice, not a whole one), and a turn with nobody waiting and nothing else to run goes past its
/// slice, timed afresh from the look that found its slice over.
#[test]
fn loop_work_ends_a_timed_turn_at_any_look_and_an_idle_turn_outlasts_its_slice() {
    let (region, _token) = registered();
    let mut rotation = resumed_at_1000(&region, true, &[]);
    let look = SLICE_NS / LOOKS_PER_SLICE;
    for at in (1..=LOOKS_PER_SLICE).map(|n| 1_000 + n * look) {
        rotation.set_clock(Some(at));
        assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: true }));
        assert!(rotation.carry_on(false), "nobody waits and the loop is idle: the turn carries on");
    }
    assert_eq!(rotation.turn_deadline(), 1_000 + SLICE_NS + look, "past its slice the turn is timed afresh");
    rotation.set_clock(Some(1_000 + SLICE_NS + look));
    assert!(!rotation.carry_on(true), "an early look that sees the loop's work carried on");
}

#[test]
fn no_turn_is_timed_while_detached() {
    let token = thread::register(&Config::default().detached()).unwrap();
    let mut rotation = Rotation::<usize>::new();
    let _ = rotation.push_aside(A, A, true);
    let next = rotation.take_next().unwrap();
    let _ = rotation.resumed(&next);
    assert_eq!(rotation.turn_deadline(), 0);
    thread::close(token).unwrap();
}

#[test]
fn a_new_loop_starts_afresh_and_leave_frees_other_loops() {
    let (region, _token) = registered();
    let mut rotation = Rotation::new();
    region.request_yield(0);
    let req = yielder(&mut rotation);
    let _ = rotation.push_yielder(A, A, req);
    rotation.reset(false);
    assert_eq!((rotation.waiting(), rotation.unacknowledged()), (0, false));
    assert_eq!(last_ack(&region), 0, "the old loop's request is dropped, not acknowledged");
    assert!(rotation.passing(), "the fast path's flag is the thread's: the next checkpoint steps aside");
    rotation.leave();
    assert!(!rotation.passing() && rotation.turn_deadline() == 0);
    assert!(matches!(rotation.checkpoint(), Step::Request(_)), "the request is still pending");
}
