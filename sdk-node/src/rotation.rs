// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The loop side of the §5.7 rotation of spec/SCB.md on Node's event loop.
//!
//! The rule is the binding kit's (`morpheus::kit::rotation::Rotation`, one per OS thread, driven as
//! the kit's documentation describes): which task is the yielder, when a request is acknowledged,
//! how many passes a yield lasts, which task is resumed and when a turn ends. This module only
//! translates: a task waits on a token (`W = u64`) that JavaScript maps to its promise's `resolve`,
//! JavaScript queues the `setImmediate` passes and keepers these calls ask for, and tells the kit what
//! it sees of the loop (its own immediates' neighbours; [`crate::loop_idle`] for libuv's poll). The
//! inline fast path stays in JavaScript (one load in each language is the point): it calls here only
//! when the kit's fast state sends it (a request, a yield's passes, a timed turn at its deadline).
//!
//! Every call writes the thread's fast state into JS's `Float64Array` (the kit's `FastState`, with
//! the rotation's passes and timed turn in it, and the count a keeper hands back: [`crate::write_state`]);
//! it is checked for length before the call does anything, so a refused call acknowledges nothing.
//! `clock`: the tests' clock (ns) in place of the thread's CPU time and the wall clock
//! (`Rotation::set_clock`), or negative for both clocks.

use std::cell::{Cell, RefCell};

use morpheus::{
    kit::{
        self,
        fast_state::FastState,
        rotation::{Pass, Rotation, Seen, Step, YIELD_PASSES},
    },
};
use napi::{bindgen_prelude::*, Env};
use napi_derive::napi;

use crate::{loop_idle, state_out, write_state, Code};

/// Node has no current task: every task is this one, so a yield during a resumed task's turn is taken
/// to be that task's (the kit's rule for a binding that cannot tell tasks apart).
const TASK: usize = 0;

thread_local! {
    /// The rotation of this thread's event loop (Node runs one loop per thread, for its lifetime, so
    /// it is never reset: the kit's `reset(false)` state, one look per slice, at the slice's end).
    static ROTATION: RefCell<Rotation<u64>> = const { RefCell::new(Rotation::new()) };
    /// The next waiter token (from 1: 0 means "none" to JS).
    static NEXT_WAITER: Cell<u64> = const { Cell::new(1) };
    /// What the kit's `resumed` returned at the last resume: the count JS's keeper hands back.
    static KEEPER_TURNS: Cell<u64> = const { Cell::new(0) };
}

/// The yield passes of every event-loop binding (the kit's `YIELD_PASSES`), for JS's export.
#[napi]
pub fn yield_passes() -> u32 {
    YIELD_PASSES
}

/// Run `f` on this thread's rotation with `clock`, then write the fast state into `state` (checked
/// first: nothing is done when it is too short).
fn drive<T>(state: &mut Float64ArraySlice, clock: f64, operation: &str, f: impl FnOnce(&mut Rotation<u64>) -> T) -> Result<T, Code> {
    let out = state_out(state, operation)?;
    set_clock(clock);
    let value = ROTATION.with(|r| f(&mut r.borrow_mut()));
    write_state(out);
    Ok(value)
}

/// Measure turns with the tests' `clock` (ns), or with the kit's clocks when it is negative.
pub(crate) fn set_clock(clock: f64) {
    ROTATION.with(|r| r.borrow_mut().set_clock((clock >= 0.0).then_some(clock as u64)));
}

/// The thread's fast state, with its rotation.
pub(crate) fn fast_state() -> FastState {
    ROTATION.with(|r| FastState::current(&r.borrow()))
}

/// What the kit's `resumed` returned at the last resume.
pub(crate) fn keeper_turns() -> u64 {
    KEEPER_TURNS.get()
}

/// Acknowledge the last yielder's request now if it is not yet (the kit's `acknowledge`: a
/// synchronous checkpoint is about to ask the core).
pub(crate) fn acknowledge() {
    ROTATION.with(|r| r.borrow_mut().acknowledge());
}

/// A new waiter token, encoded for JS with what the task resolves to (`yielded`: true after a yield
/// for a request, false after a step aside) and whether JS must queue the first pass:
/// `token * 4 + yielded * 2 + first_pass`, never 0.
fn wait(yielded: bool, push: impl FnOnce(u64) -> bool) -> f64 {
    let token = NEXT_WAITER.get();
    NEXT_WAITER.set(token + 1);
    let first_pass = push(token);
    (token * 4 + u64::from(yielded) * 2 + u64::from(first_pass)) as f64
}

/// The asynchronous checkpoint's slow path (the JS fast path found something to look at): 0 when the
/// task carries on (its promise resolves false at once), otherwise a waiter ([`wait`]).
/// `others_queued`: JS saw an immediate of other code next to the rotation's own.
#[napi]
pub fn rotation_checkpoint(
    env: &Env,
    mut state: Float64ArraySlice,
    others_queued: bool,
    clock: f64,
) -> Result<f64, Code> {
    drive(&mut state, clock, "rotationCheckpoint", |r| match r.checkpoint() {
        Step::Continue => 0.0,
        Step::StepAside { turn_over } => step_aside(env, r, turn_over, others_queued),
        Step::Request(request) => match r.see_request(request) {
            Seen::Yielder(request) => wait(true, |token| r.push_yielder(token, TASK, request)),
            Seen::Served { step_aside: true } => step_aside(env, r, false, others_queued),
            Seen::Served { step_aside: false } => 0.0,
        },
    })
}

/// A step aside without a request, unless a critical section holds it, or the timed turn is over and
/// the kit lets it carry on ([`carries_on`]).
fn step_aside(env: &Env, r: &mut Rotation<u64>, turn_over: bool, others_queued: bool) -> f64 {
    if !r.may_step_aside() {
        return 0.0;
    }
    if turn_over && carries_on(env, r, others_queued) {
        return 0.0;
    }
    wait(false, |token| r.push_aside(token, TASK, turn_over))
}

/// A timed turn is over: whether it carries on is the kit's rule (`Rotation::carry_on`, which
/// weighs the tasks waiting in the rotation itself); the loop has other work when an immediate of
/// other code is queued or libuv's poll saw something ([`loop_idle`]).
fn carries_on(env: &Env, r: &mut Rotation<u64>, others_queued: bool) -> bool {
    r.carry_on(others_queued || !loop_idle(env))
}

/// `yieldRequested()` when the JS check could not answer: whether the caller should await
/// `checkpoint()` now, deciding nothing and acknowledging nothing. True during a yield's passes and
/// while a request is stepped aside for; while the one-load fast path is on (DETERMINISTIC, or
/// waiting for a scheduler) whenever its word differs, a request a critical section defers included
/// (the core's checkpoint is not polled then: it would count the deferral); at a timed turn's deadline, whether the turn is over, or it
/// carries on as [`step_aside`] would let it (timed afresh, so a hot loop leaves only to step aside or
/// yield); otherwise whether the core's checkpoint would yield now (its future polled once and
/// dropped: it writes nothing before its second poll), a request or, outside the DETERMINISTIC mode,
/// the mode's own yield (spec/SCB.md §5.4).
#[napi]
pub fn checkpoint_would_yield(env: &Env, mut state: Float64ArraySlice, others_queued: bool, clock: f64) -> Result<bool, Code> {
    drive(&mut state, clock, "checkpointWouldYield", |r| {
        if r.passing() || r.unacknowledged() {
            return true;
        }
        if kit::one_load_differs() {
            return true;
        }
        match r.checkpoint() {
            Step::Continue => false,
            Step::StepAside { turn_over: true } => !carries_on(env, r, others_queued),
            Step::StepAside { turn_over: false } | Step::Request(_) => true,
        }
    })
}

/// Resume the task the kit chooses: its token (JS resolves its promise and queues a keeper with the
/// count written to the rotation's state), or 0 when nobody waits. JS's promises cannot be
/// cancelled, so no waiter is skipped.
fn resume(r: &mut Rotation<u64>) -> f64 {
    match r.take_next() {
        Some(next) => {
            KEEPER_TURNS.set(r.resumed(&next));
            next.waiter as f64
        }
        None => 0.0,
    }
}

/// One pass of a yield (JS's `setImmediate` callback, which queued the next pass before calling):
/// -1 to keep that next pass, otherwise (JS clears it) the token to resume or 0 ([`resume`]). The
/// loop is idle when JS saw no immediate of other code (`others_queued` false) and libuv's poll saw
/// nothing.
#[napi]
pub fn rotation_pass(
    env: &Env,
    mut state: Float64ArraySlice,
    others_queued: bool,
    clock: f64,
) -> Result<f64, Code> {
    drive(&mut state, clock, "rotationPass", |r| {
        let idle = !others_queued && loop_idle(env);
        match r.pass(idle) {
            Pass::Again => -1.0,
            Pass::Resume => resume(r),
        }
    })
}

/// The keeper behind a resumed task's step, with the count the resume wrote: if the task gave control
/// back without a yield, the next task's token (or 0), else 0.
#[napi]
pub fn rotation_keeper(mut state: Float64ArraySlice, turns: f64, clock: f64) -> Result<f64, Code> {
    drive(&mut state, clock, "rotationKeeper", |r| if r.idle_since(turns as u64) { resume(r) } else { 0.0 })
}

/// No turn is timed any more: the thread's worker is closed.
pub(crate) fn stop_timing() {
    ROTATION.with(|r| r.borrow_mut().stop_timing());
}
