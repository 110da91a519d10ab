// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The fast state of an event-loop binding whose inline checks cost little in every mode, not only
//! in DETERMINISTIC: the kit's [`FastPath`] (the word the one load reads) widened with the two rules
//! that let the binding answer more checks without crossing into the core.
//!
//! * **The mode's quiet window** (spec/SCB.md §5.4). Outside DETERMINISTIC every check takes the slow
//!   path, but until the core's next mode decision ([`Worker::mode_quiet_until_ns`](crate::Worker::mode_quiet_until_ns))
//!   a check that finds the SCB's `preempt_seq` equal to the acknowledged sequence is the core's own
//!   "no yield": the core would decide nothing and write nothing then.
//! * **The rotation's turn** (§5.7). During a yield's passes every asynchronous check goes to the
//!   rotation (a task computing then steps aside); during a timed turn, every asynchronous check past
//!   the turn's deadline does (the turn may be over). Synchronous checks are outside the rotation.
//!
//! A binding keeps the word and the four values of a [`FastState`], read at registration and after
//! every slow path, and checks in this order, each step only when the one before did not decide:
//!
//! 1. one load of [`word`](FastState::word) (a zero word of the binding's own when None), equal to
//!    [`expected`](FastState::expected): nothing to do (the one-load fast path, kept inline in each
//!    language);
//! 2. the load equal to [`settled`](FastState::settled) while the [`quiet`](FastState::quiet) window
//!    lasts: no request, and the core would decide nothing; a synchronous check answers "no yield";
//! 3. an asynchronous check answers "no yield" too while the [`turn`](FastState::turn) lasts;
//! 4. otherwise the slow path: the core's checkpoint (synchronous), or the rotation's (asynchronous).
//!
//! Windows are durations from the time of the reading, so a binding measures them with a clock of any
//! origin (the wall clock, or the rotation's test clock for [`turn`](FastState::turn)); a window read
//! a little late ends a little early, which costs a slow path and never hides a decision.

use super::{rotation::Rotation, FastPath};
use crate::raw::current_raw;
/// The word no sequence reaches (2^64 - 1): an `expected` of this value makes every inline check take
/// the slow path, and a binding that must put a `settled` of None into a word writes it.
pub use crate::raw::FORCE_SLOW_PATH;

/// How long a window of the fast state lasts from the time it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lasts {
    /// Closed: the step it guards never answers.
    Never,
    /// Open for this many nanoseconds more (0: closed already, the next check looks again).
    For(u64),
    /// Open until the next slow path.
    Always,
}

/// What a binding's inline checks hold between two slow paths, in the order they use it (module
/// documentation). Read with [`FastState::current`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastState {
    /// The word the one load reads: the SCB's `preempt_seq` while the worker is attached, in every
    /// mode (so a binding keeps one view of it per registration), the wake word while it waits for a
    /// scheduler (§6.1), None when it loads nothing of the core's (detached: a zero word of the
    /// binding's own). Valid until the next slow path of the thread; a binding that holds a view of
    /// it takes a new one when the address changes.
    pub word: Option<*const u64>,
    /// The value the one load is compared with: equal means nothing to do at any check.
    /// [`FastPath::expected`] when both windows are [`Lasts::Always`]; otherwise `FORCE_SLOW_PATH`
    /// (2^64 - 1, which no word reaches), so every check looks further.
    pub expected: u64,
    /// The word's value that means no request is pending: the acknowledged sequence (outside
    /// DETERMINISTIC too, while the quiet window is open), the wake word's value when the wait began,
    /// 0 for the zero word; None when no value does (every check that looks further is a slow path).
    pub settled: Option<u64>,
    /// How long a load equal to `settled` is the core's own "no yield": [`Lasts::Always`] in
    /// DETERMINISTIC, while waiting and while detached; the time to the core's next mode decision
    /// outside DETERMINISTIC; [`Lasts::Never`] when `settled` is None.
    pub quiet: Lasts,
    /// How long an asynchronous check whose load equals `settled` needs not ask the rotation:
    /// [`Lasts::Never`] during a yield's passes, the time to the deadline of a timed turn,
    /// [`Lasts::Always`] when no turn is timed.
    pub turn: Lasts,
}

impl FastState {
    /// The calling thread's fast state now, with `rotation` the thread's (§5.7). Makes no system call
    /// beyond reading the clock while a window is timed.
    pub fn current<W>(rotation: &Rotation<W>) -> FastState {
        let path = FastPath::current();
        let (word, settled, quiet) = match path {
            FastPath::View { seq, ack } => (Some(seq), Some(ack), Lasts::Always),
            FastPath::Waiting { wake, ack } => (Some(wake), Some(ack), Lasts::Always),
            FastPath::Detached => (None, Some(0), Lasts::Always),
            FastPath::AlwaysSlow => mode_window(),
        };
        let turn = if rotation.passing() {
            Lasts::Never
        } else {
            rotation.turn_left_ns().map_or(Lasts::Always, Lasts::For)
        };
        let expected = if quiet == Lasts::Always && turn == Lasts::Always { path.expected() } else { FORCE_SLOW_PATH };
        FastState { word, expected, settled, quiet, turn }
    }

    /// The same state, with every check that looks past the one load sent to the slow path: for a
    /// binding that cannot load [`word`](FastState::word) (its runtime refused a view of it).
    pub fn always_slow(self) -> FastState {
        FastState { expected: FORCE_SLOW_PATH, settled: None, quiet: Lasts::Never, ..self }
    }
}

/// An attached worker whose checks all take the slow path ([`FastPath::AlwaysSlow`]): its word, and
/// outside DETERMINISTIC the acknowledged sequence with the time to the core's next mode decision.
fn mode_window() -> (Option<*const u64>, Option<u64>, Lasts) {
    let raw = current_raw();
    // SAFETY: this thread's own state: `preempt_seq` is the SCB's while the worker is attached
    // (`in_critical` non-null), which FastPath::AlwaysSlow implies.
    let word = unsafe { (!(*raw).in_critical.is_null()).then(|| (*raw).preempt_seq) };
    // SAFETY: the closure neither registers nor unregisters.
    let quiet = unsafe { crate::with_current_worker(|w| w.mode_quiet_until_ns().map(|until| (w.acknowledged_seq(), until))) };
    match quiet.ok().flatten() {
        // On a mode clock a test sets, the window is no span of the wall clock: every check looks.
        Some((ack, _)) if crate::sys::mode_clock_set() => (word, Some(ack), Lasts::For(0)),
        Some((ack, until)) => (word, Some(ack), Lasts::For(until.saturating_sub(crate::sys::monotonic_ns()))),
        None => (word, None, Lasts::Never),
    }
}
