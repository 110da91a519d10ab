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
//! when the SCB's `preempt_seq` differs from the acknowledged sequence, during a yield's passes, or
//! once a timed turn reached the deadline this module hands it ([`ROTATION_LEN`]).
//!
//! Every call writes the thread's fast state into JS's `Int32Array` (as `fastState` does: an
//! acknowledgement changes it) and the rotation's state into JS's `Float64Array`
//! `[passing, unacknowledged, turn_deadline, keeper_turns]`; both are checked for length before the
//! call does anything, so a refused call acknowledges nothing. `clock`: the tests' clock (ns) in place
//! of the thread's CPU time and the wall clock (`Rotation::set_clock`), or negative for both clocks.

use std::cell::{Cell, RefCell};

use morpheus::kit::rotation::{Pass, Rotation, Seen, Step, YIELD_PASSES};
use napi::{bindgen_prelude::*, Env};
use napi_derive::napi;

use crate::{fast_state_now, fast_state_out, invalid, loop_idle, Code};

/// How many elements the rotation's state array receives.
const ROTATION_LEN: usize = 4;

/// Node has no current task: every task is this one, so a yield during a resumed task's turn is taken
/// to be that task's (the kit's rule for a binding that cannot tell tasks apart).
const TASK: usize = 0;

thread_local! {
    /// The rotation of this thread's event loop (Node runs one loop per thread, for its lifetime, so
    /// it is never reset: the kit's `reset(false)` state, one look per slice; see [`step_aside`]).
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

/// Run `f` on this thread's rotation with `clock`, then write the fast state into `state` and the
/// rotation's state into `rotation` (both checked first: nothing is done when one is too short).
fn drive<T>(
    state: &mut Int32ArraySlice,
    rotation: &mut Float64ArraySlice,
    clock: f64,
    operation: &str,
    f: impl FnOnce(&mut Rotation<u64>) -> T,
) -> Result<T, Code> {
    let state = fast_state_out(state, operation)?;
    // SAFETY: the typed array's elements, which nothing else reads or writes during this call (JS runs
    // on this thread only, and no JS runs during it).
    let rotation = unsafe { rotation.as_mut() };
    let len = rotation.len();
    let rotation = rotation.get_mut(..ROTATION_LEN).ok_or_else(|| {
        invalid(format!("{operation}(rotation): expected a Float64Array of at least {ROTATION_LEN} elements, got {len}"))
    })?;
    let out = ROTATION.with(|r| {
        let mut r = r.borrow_mut();
        r.set_clock((clock >= 0.0).then_some(clock as u64));
        f(&mut r)
    });
    state.copy_from_slice(&fast_state_now());
    ROTATION.with(|r| {
        let r = r.borrow();
        rotation[0] = f64::from(u8::from(r.passing()));
        rotation[1] = f64::from(u8::from(r.unacknowledged()));
        rotation[2] = r.turn_deadline() as f64;
    });
    rotation[3] = KEEPER_TURNS.get() as f64;
    Ok(out)
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
    mut state: Int32ArraySlice,
    mut rotation: Float64ArraySlice,
    others_queued: bool,
    clock: f64,
) -> Result<f64, Code> {
    drive(&mut state, &mut rotation, clock, "rotationCheckpoint", |r| match r.checkpoint() {
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
/// the loop has nothing else to run: no task waits in the rotation, no immediate of other code is
/// queued and libuv's poll saw nothing ([`loop_idle`]); the turn then carries on, timed afresh. Node
/// looks once per slice (the rotation is never reset to `can_look`): a task waiting in the rotation
/// counts as other work here, so more looks per slice would shorten every contended turn, not only
/// the uncontended ones.
fn step_aside(env: &Env, r: &mut Rotation<u64>, turn_over: bool, others_queued: bool) -> f64 {
    if !r.may_step_aside() {
        return 0.0;
    }
    if turn_over && carries_on(env, r, others_queued) {
        return 0.0;
    }
    wait(false, |token| r.push_aside(token, TASK, turn_over))
}

/** A timed turn is over: it carries on, timed afresh, if nothing else waits (see [`step_aside`]). */
fn carries_on(env: &Env, r: &mut Rotation<u64>, others_queued: bool) -> bool {
    let idle = r.waiting() == 0 && !others_queued && loop_idle(env);
    if idle {
        r.carry_on();
    }
    idle
}

/// `yieldRequested()` at a timed turn's deadline: whether the turn is over (the caller then awaits
/// `checkpoint()`, which steps aside), or carries on as [`step_aside`] would let it (timed afresh,
/// so a hot loop leaves only to step aside or yield). True also for a request or a yield's passes.
#[napi]
pub fn rotation_turn_over(
    env: &Env,
    mut state: Int32ArraySlice,
    mut rotation: Float64ArraySlice,
    others_queued: bool,
    clock: f64,
) -> Result<bool, Code> {
    drive(&mut state, &mut rotation, clock, "rotationTurnOver", |r| match r.checkpoint() {
        Step::Continue => false,
        Step::StepAside { turn_over: true } => !carries_on(env, r, others_queued),
        Step::StepAside { turn_over: false } | Step::Request(_) => true,
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
    mut state: Int32ArraySlice,
    mut rotation: Float64ArraySlice,
    others_queued: bool,
    clock: f64,
) -> Result<f64, Code> {
    drive(&mut state, &mut rotation, clock, "rotationPass", |r| {
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
pub fn rotation_keeper(mut state: Int32ArraySlice, mut rotation: Float64ArraySlice, turns: f64, clock: f64) -> Result<f64, Code> {
    drive(&mut state, &mut rotation, clock, "rotationKeeper", |r| if r.idle_since(turns as u64) { resume(r) } else { 0.0 })
}

/// Before a synchronous checkpoint asks the core: acknowledge the last yielder's request if it is not
/// yet (the kit's `acknowledge`). Whether one was pending.
#[napi]
pub fn rotation_acknowledge(mut state: Int32ArraySlice, mut rotation: Float64ArraySlice, clock: f64) -> Result<bool, Code> {
    drive(&mut state, &mut rotation, clock, "rotationAcknowledge", Rotation::acknowledge)
}

/// No turn is timed any more: the thread's worker is closed.
pub(crate) fn stop_timing() {
    ROTATION.with(|r| r.borrow_mut().stop_timing());
}
