// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The binding kit: what every language binding of this SDK needs beyond the core's checkpoint, in
//! one place, so that a binding (pyo3, napi, JNI) only translates types and drives its loop.
//!
//! The kit is to the bindings what `scheduler/src/policy/morpheus_policy.h` is to the scheduler's
//! backends: each rule is written here once, and a binding that needs it calls it.
//!
//! * [`FastPath`]: the handshake a binding's inline fast path reads: which word it loads and what it
//!   compares it with (the SCB's `preempt_seq`, the wake word while the worker waits for a scheduler,
//!   nothing while detached), or "always take the slow path" (PRESSURED and DEFENSIVE modes, §5.4).
//!   A binding keeps its own one-load inline check of it (one load in each language is the point of
//!   the fast path); the kit says what that load reads ([`FastPath::word`], [`FastPath::expected`]).
//!   [`checkpoint_slow`] is the synchronous slow path behind it: a [`SlowPath`] says whether to yield
//!   and whether the word moved.
//! * [`fast_state`]: the same handshake for an event-loop binding that keeps its checks cheap in every
//!   mode: [`FastPath`] widened with the mode's quiet window (§5.4) and the rotation's turn (§5.7).
//! * [`critical_enter`], [`critical_exit`], [`critical_depth`]: the thread's critical sections, with
//!   or without a worker (spec/SCB.md §5.3).
//! * [`thread`]: the calling thread's worker, owned by the kit and named by a token, so that a
//!   binding's handle object never holds the thread-bound [`Worker`](crate::Worker) itself.
//! * [`options`]: the options a binding's caller gives, validated with one set of conflict rules and
//!   errors that name what is wrong, into a [`Config`](crate::Config).
//! * [`set_mode_clock`]: a clock a test controls for the §5.4 mode rules of the calling thread.
//! * [`rotation`]: the §5.7 rotation of spec/SCB.md as one loop-agnostic state machine, with the one
//!   [`YIELD_PASSES`](rotation::YIELD_PASSES) every event-loop binding uses.
//!
//! # How an event-loop binding drives the rotation
//!
//! A binding keeps one [`Rotation<W>`](rotation::Rotation) per thread (a `thread_local!` `RefCell`),
//! where `W` is what its loop resumes a suspended task by (Python: the `asyncio.Future` the task
//! awaits; Node: a token that JavaScript maps to a promise's `resolve`). Every call is short and
//! never calls back into the binding; the binding acts on what it returns, with no borrow held:
//!
//! 1. **At an async checkpoint**, [`Rotation::checkpoint`](rotation::Rotation::checkpoint) returns a
//!    [`Step`](rotation::Step): `Continue` (the fast path: nothing to do, no allocation), `StepAside`
//!    (no request, but this task's step is over: it waits for its turn like a yielder) or
//!    `Request` (the scheduler asked). For a request, the binding first calls
//!    [`reset`](rotation::Rotation::reset) if its loop changed, then
//!    [`see_request`](rotation::Rotation::see_request): either the request is one another task is
//!    already serving (it is acknowledged now, [`Seen::Served`](rotation::Seen::Served)), or this
//!    task is its yielder ([`Seen::Yielder`](rotation::Seen::Yielder)): the binding creates the `W` the
//!    task will wait on and hands it to [`push_yielder`](rotation::Rotation::push_yielder). For a step
//!    aside, it checks [`may_step_aside`](rotation::Rotation::may_step_aside) (a critical section holds
//!    it), and when the turn is over tells [`carry_on`](rotation::Rotation::carry_on) whether its
//!    loop has other work (the kit adds its own waiters): unless the turn carries on, it hands the
//!    `W` to [`push_aside`](rotation::Rotation::push_aside). Both pushes return whether the binding must
//!    queue the first pass.
//! 2. **A pass** is one loop callback queued behind the loop's poll (Python `call_soon`, Node
//!    `setImmediate`). It calls [`pass`](rotation::Rotation::pass) with whether the loop was idle (its
//!    queue empty behind the pass); [`Pass::Again`](rotation::Pass::Again) queues the next pass,
//!    [`Pass::Resume`](rotation::Pass::Resume) resumes the next task.
//! 3. **Resuming**: [`take_next`](rotation::Rotation::take_next) gives the waiter to resume; the
//!    binding skips one that was cancelled, resumes the other with
//!    [`resumed`](rotation::Rotation::resumed), and queues a keeper callback behind the resumed step
//!    with the count `resumed` returned.
//! 4. **The keeper** calls [`idle_since`](rotation::Rotation::idle_since) with that count: true means
//!    the resumed task gave control back without a checkpoint yield, and the binding resumes the next.
//!
//! Node drives the same calls from `setImmediate` callbacks through napi (one call per pass, resume
//! and keeper: slow path only, next to a `setImmediate` a napi call costs nothing measurable), with
//! `W = u64` tokens; its JavaScript keeps only the inline fast-path compare and the promise map.

pub mod fast_state;
pub mod options;
pub mod rotation;
pub mod thread;

use std::sync::atomic::{AtomicU64, Ordering};

use morpheus_abi::RuntimeMode;

use crate::raw::{current_raw, FORCE_SLOW_PATH};

/// Sets the calling thread's mode clock: from now on the runtime-mode rules of spec/SCB.md §5.4 (a
/// slice since the worker's last yield of any reason, a slice since its last mode evaluation) read
/// `ns` where they read CLOCK_MONOTONIC, until the next call; None gives them CLOCK_MONOTONIC back.
/// For tests and conformance agents (CONFORMANCE.md §2.3, `mode_clock`), so a rule of wall time is
/// judged by a clock the test controls. While it is set, [`fast_state`]'s quiet window is closed
/// (every check looks), since its times are no span of the wall clock.
pub fn set_mode_clock(ns: Option<u64>) {
    crate::sys::set_mode_clock(ns);
}

/// What the calling thread's inline fast path compares, as the core sees it now. A binding reads it
/// at registration and after every slow path (it makes no system call) and keeps its own one-load
/// check of it; the pointers stay valid until the next slow path of the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastPath {
    /// Compare the SCB's `preempt_seq` (load-acquire of `seq`) with `ack`; a difference is a request.
    View {
        /// The SCB's `preempt_seq`.
        seq: *const u64,
        /// The last acknowledged sequence.
        ack: u64,
    },
    /// Every checkpoint takes the slow path: the PRESSURED and DEFENSIVE modes also yield on the
    /// budget or the SDK's own clock (spec/SCB.md §5.4).
    AlwaysSlow,
    /// The worker waits for a scheduler (§6.1): the core's watcher bumps `wake` when a new instance
    /// accepts, so comparing it with `ack` sends the next checkpoint to the slow path, which registers
    /// again.
    Waiting {
        /// The wake word.
        wake: *const u64,
        /// The value the wake word held when the wait began.
        ack: u64,
    },
    /// Checkpoints never yield: no worker, or one that never registers again (detached on request or
    /// by the environment, or registered directly, §7).
    Detached,
}

impl FastPath {
    /// The calling thread's fast path now.
    pub fn current() -> FastPath {
        let raw = current_raw();
        // SAFETY: this thread's own state; `with_current_worker` does not outlive the closure.
        unsafe {
            if (*raw).inner.is_null() {
                return FastPath::Detached;
            }
            let (seq, ack) = ((*raw).preempt_seq, (*raw).cached_ack);
            if (*raw).in_critical.is_null() {
                let waiting = crate::with_current_worker(|w| w.is_waiting_for_scheduler()).unwrap_or(false);
                return if waiting { FastPath::Waiting { wake: seq, ack } } else { FastPath::Detached };
            }
            let mode = crate::with_current_worker(|w| w.runtime_mode()).unwrap_or(RuntimeMode::Deterministic);
            if ack == FORCE_SLOW_PATH || mode != RuntimeMode::Deterministic {
                return FastPath::AlwaysSlow;
            }
            FastPath::View { seq, ack }
        }
    }

    /// The word the inline check loads (the SCB's `preempt_seq` or the wake word), or None when it
    /// loads nothing of the core's ([`AlwaysSlow`](FastPath::AlwaysSlow),
    /// [`Detached`](FastPath::Detached)): a binding that keeps the one load everywhere then loads a
    /// zero word of its own, never written, and compares it with [`expected`](FastPath::expected).
    pub fn word(&self) -> Option<*const u64> {
        match *self {
            FastPath::View { seq, .. } => Some(seq),
            FastPath::Waiting { wake, .. } => Some(wake),
            FastPath::AlwaysSlow | FastPath::Detached => None,
        }
    }

    /// The value the inline check compares its load with: the acknowledged sequence (or the wake
    /// word's value when the wait began); `FORCE_SLOW_PATH` (2^64 - 1, which no word reaches) for
    /// [`AlwaysSlow`](FastPath::AlwaysSlow), so a zero word always differs; 0 for
    /// [`Detached`](FastPath::Detached), so a zero word never does.
    pub fn expected(&self) -> u64 {
        match *self {
            FastPath::View { ack, .. } | FastPath::Waiting { ack, .. } => ack,
            FastPath::AlwaysSlow => FORCE_SLOW_PATH,
            FastPath::Detached => 0,
        }
    }
}

/// What a synchronous checkpoint's slow path did, for a binding whose inline check found a difference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowPath {
    /// The scheduler asked and the request is acknowledged: the caller yields now.
    pub yield_now: bool,
    /// The fast path from now on (the checkpoint may have detached the worker, begun a wait for a
    /// scheduler, registered again or changed the mode).
    pub fast_path: FastPath,
    /// Whether [`FastPath::word`] is another word than before the checkpoint: a binding that holds a
    /// view of the word (a Java `ByteBuffer`) takes a new one; otherwise it keeps its view and only
    /// takes the new [`FastPath::expected`].
    pub word_moved: bool,
}

/// The calling thread's synchronous checkpoint, taken because the inline check found a difference:
/// the core's checkpoint of the thread's worker (none: never yields), and the fast path after it.
pub fn checkpoint_slow() -> SlowPath {
    let before = FastPath::current().word();
    let yield_now = crate::checkpoint_sync();
    let fast_path = FastPath::current();
    SlowPath { yield_now, fast_path, word_moved: fast_path.word() != before }
}

/// What the calling thread's next checkpoint compares, `(loaded, cached)`: the sequence its fast
/// path loads (the SCB's `preempt_seq`, the wake word while the worker waits for a scheduler, or a
/// static zero) and the value it compares it with. The checkpoint takes the slow path when they
/// differ; a test orders its events by this, never by time.
pub fn fast_path_view() -> (u64, u64) {
    let raw = current_raw();
    // SAFETY: this thread's state; preempt_seq points at a live u64 that others only change
    // atomically (the SCB, the static detached SCB or the wake word).
    unsafe { ((*((*raw).preempt_seq as *const AtomicU64)).load(Ordering::Acquire), (*raw).cached_ack) }
}

/// Whether the calling thread's one-load fast path is on (the DETERMINISTIC mode, or a wait for a
/// scheduler: `cached` is not `FORCE_SLOW_PATH`) and its word differs from what it compares: a
/// request, a critical section's deferred one included, that the inline check would send to the slow
/// path. Reads only: nothing is decided, counted or acknowledged.
pub fn one_load_differs() -> bool {
    let (loaded, cached) = fast_path_view();
    cached != FORCE_SLOW_PATH && loaded != cached
}

/// Enter a critical section on the calling thread, with or without a worker (the depth is the
/// thread's, §5.3: a section entered before registration covers the worker). Returns the new depth.
pub fn critical_enter() -> u32 {
    let raw = current_raw();
    // SAFETY: this thread's own state.
    unsafe {
        crate::raw::critical_enter_raw(raw);
        (*raw).critical_depth
    }
}

/// Exit a critical section on the calling thread; returns the new depth, or `NOT_IN_CRITICAL` at
/// depth 0 (writing nothing).
pub fn critical_exit() -> crate::Result<u32> {
    let raw = current_raw();
    // SAFETY: this thread's own state.
    unsafe { crate::raw::critical_exit_raw(raw).map(|()| (*raw).critical_depth) }
}

/// The calling thread's critical-section nesting depth (counted with or without a worker, §5.3).
#[inline]
pub fn critical_depth() -> u32 {
    // SAFETY: a plain read of this thread's own state.
    unsafe { (*current_raw()).critical_depth }
}
