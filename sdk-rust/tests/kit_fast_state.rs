// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The binding kit's fast state (`morpheus::kit::fast_state`): the word an event-loop binding's
//! inline checks load and the windows that let them answer without the core, read as the rules of
//! spec/SCB.md §5.4 (the mode's quiet window) and §5.7 (the rotation's passes and timed turn) decide
//! them, against a sim region, with the rotation's test clock.

use morpheus::{
    kit::{
        fast_state::{FastState, Lasts},
        rotation::{Pass, Rotation, Seen, Step},
        thread, FastPath,
    },
    raw::FORCE_SLOW_PATH,
    testing::SimRegion,
    Config, RuntimeMode,
};

/// A slice no step of these tests lasts, however loaded the machine.
const SLICE_NS: u64 = 60_000_000_000;

fn registered() -> (SimRegion, u64) {
    let region = SimRegion::temp(2);
    region.set_slice_ns(SLICE_NS);
    let token = thread::register(&Config::default().region_path(region.path()).direct_slot(0)).unwrap();
    (region, token)
}

/// The word of the slot's view, checked to be the SCB's `preempt_seq`.
fn slot_word() -> *const u64 {
    let FastPath::View { seq, .. } = FastPath::current() else { panic!("{:?}", FastPath::current()) };
    seq
}

/// A yielder of the pending request pushed into `rotation`, its passes run to their end on a busy loop.
fn yield_and_pass(rotation: &mut Rotation<u64>) {
    let Step::Request(request) = rotation.checkpoint() else { panic!("no request pending") };
    let Seen::Yielder(request) = rotation.see_request(request) else { panic!("not the yielder") };
    let _ = rotation.push_yielder(1, 0, request);
    while rotation.pass(false) == Pass::Again {}
}

#[test]
fn deterministic_one_load_decides_alone() {
    let (region, _token) = registered();
    let rotation = Rotation::<u64>::new();
    let seq = slot_word();
    let state = FastState::current(&rotation);
    assert_eq!(state, FastState { word: Some(seq), expected: 0, settled: Some(0), quiet: Lasts::Always, turn: Lasts::Always });
    let asked = region.request_yield(0);
    assert!(morpheus::checkpoint_sync());
    assert_eq!(FastState::current(&rotation).expected, asked, "the acknowledged sequence");
}

#[test]
fn no_worker_loads_a_zero_word_that_never_differs() {
    let rotation = Rotation::<u64>::new();
    assert_eq!(FastState::current(&rotation), FastState { word: None, expected: 0, settled: Some(0), quiet: Lasts::Always, turn: Lasts::Always });
    thread::register(&Config::default().detached()).unwrap();
    assert_eq!(FastState::current(&rotation).word, None, "detached on request");
}

#[test]
fn a_yields_passes_send_every_asynchronous_check_to_the_rotation_and_no_synchronous_one() {
    let (region, _token) = registered();
    let mut rotation = Rotation::<u64>::new();
    rotation.set_clock(Some(1_000));
    region.request_yield(0);
    let Step::Request(request) = rotation.checkpoint() else { panic!("no request pending") };
    let Seen::Yielder(request) = rotation.see_request(request) else { panic!("not the yielder") };
    let _ = rotation.push_yielder(1, 0, request);
    let passing = FastState::current(&rotation);
    assert_eq!(passing.turn, Lasts::Never, "a task computing during the passes steps aside");
    assert_eq!(passing.expected, FORCE_SLOW_PATH, "so the one load never decides alone");
    assert_eq!(passing.settled, Some(0), "the request is not acknowledged yet: a load of 1 differs");
    assert_eq!(passing.quiet, Lasts::Always, "a synchronous check sees only the request");
    while rotation.pass(false) == Pass::Again {}
    assert_eq!(FastState::current(&rotation), FastState { word: Some(slot_word()), expected: 1, settled: Some(1), quiet: Lasts::Always, turn: Lasts::Always });
}

#[test]
fn a_timed_turn_opens_the_turn_window_for_its_slice_and_closes_it_at_the_deadline() {
    let (region, _token) = registered();
    let mut rotation = Rotation::<u64>::new();
    rotation.set_clock(Some(1_000));
    region.request_yield(0);
    yield_and_pass(&mut rotation);
    let next = rotation.take_next().unwrap();
    let _ = rotation.resumed(&next);
    let timed = FastState::current(&rotation);
    assert_eq!(timed.turn, Lasts::For(SLICE_NS), "a slice of the rotation's clock (one look per slice)");
    assert_eq!((timed.expected, timed.settled, timed.quiet), (FORCE_SLOW_PATH, Some(1), Lasts::Always));
    rotation.set_clock(Some(1_000 + SLICE_NS - 10));
    assert_eq!(FastState::current(&rotation).turn, Lasts::For(10));
    rotation.set_clock(Some(1_000 + SLICE_NS + 5));
    assert_eq!(FastState::current(&rotation).turn, Lasts::For(0), "past the deadline: the next check asks the rotation");
    assert!(matches!(rotation.checkpoint(), Step::StepAside { turn_over: true }), "which ends the turn");
    rotation.stop_timing();
    assert_eq!(FastState::current(&rotation).expected, 1, "no turn timed: the one load decides again");
}

#[test]
fn outside_deterministic_the_word_stays_and_the_quiet_window_lasts_until_the_next_mode_decision() {
    let (region, token) = registered();
    let rotation = Rotation::<u64>::new();
    let seq = slot_word();
    region.drop_hints(0, 1);
    let asked = region.request_yield(0);
    assert!(morpheus::checkpoint_sync());
    assert_eq!(thread::with(token, "mode", |w| w.runtime_mode()).unwrap(), RuntimeMode::Defensive);
    assert_eq!(FastPath::current(), FastPath::AlwaysSlow);
    let state = FastState::current(&rotation);
    assert_eq!(state.word, Some(seq), "the binding keeps its view of the slot");
    assert_eq!((state.expected, state.settled), (FORCE_SLOW_PATH, Some(asked)));
    let Lasts::For(left) = state.quiet else { panic!("{state:?}") };
    assert!(left > 0 && left <= SLICE_NS, "until the next decision, a slice after the yield at most: {left}");
    // A slice of 0: the next decision is due now, and the window is closed.
    region.set_slice_ns(0);
    assert_eq!(FastState::current(&rotation).quiet, Lasts::For(0));
}

/// On a mode clock a test sets (`kit::set_mode_clock`) the quiet window is no span of the wall
/// clock, so it is closed: every check reaches the core, which reads the test's clock.
#[test]
fn on_a_mode_clock_the_quiet_window_is_closed() {
    let (region, _token) = registered();
    let rotation = Rotation::<u64>::new();
    region.drop_hints(0, 1);
    region.request_yield(0);
    assert!(morpheus::checkpoint_sync());
    assert!(matches!(FastState::current(&rotation).quiet, Lasts::For(left) if left > 0));
    morpheus::kit::set_mode_clock(Some(0));
    assert_eq!(FastState::current(&rotation).quiet, Lasts::For(0));
    morpheus::kit::set_mode_clock(None);
    assert!(matches!(FastState::current(&rotation).quiet, Lasts::For(left) if left > 0), "the wall clock's window again");
}

#[test]
fn a_refused_view_sends_every_further_look_to_the_slow_path() {
    let (_region, _token) = registered();
    let rotation = Rotation::<u64>::new();
    let state = FastState::current(&rotation).always_slow();
    assert_eq!(state, FastState { word: Some(slot_word()), expected: FORCE_SLOW_PATH, settled: None, quiet: Lasts::Never, turn: Lasts::Always });
}
