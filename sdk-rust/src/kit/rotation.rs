// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The §5.7 rotation of spec/SCB.md: on an event loop one thread is one worker shared by many tasks,
//! so one task steps aside per request, the request is acknowledged as soon as the loop has control,
//! the yielder joins the back of a queue with the CPU time it has run in its turns, and each yield
//! resumes, after [`YIELD_PASSES`] passes of the loop, the oldest waiting task within half a turn of
//! the least run time. A turn the rotation gives ends at the first checkpoint one `slice_ns` of wall
//! time after it began, even without a request; a binding that can look at its loop may let it carry
//! on ([`Rotation::carry_on`]): at a look within the slice only the loop's own work ends it, once the
//! slice is over a task waiting in the rotation ends it too.
//!
//! [`Rotation`] is the state machine alone: it never touches a loop. The binding drives it as the
//! [kit's documentation](super) describes, and owns the loop's side: creating what a task waits on
//! (`W`), queuing callbacks, telling whether its loop is idle. It holds one per thread.
//!
//! Invariants:
//! * at most one request is unacknowledged, the last yielder's; it is acknowledged (with the
//!   `preempt_seq` its checkpoint observed, §5.1) by the first pass, or by the first other task's
//!   checkpoint that sees a request, whichever comes first;
//! * one task is resumed per run of passes, and a yield or turn-ending step aside during the passes
//!   starts them afresh;
//! * a waiter leaves the queue only through [`Rotation::take_next`] or [`Rotation::reset`].

use std::{
    cell::Cell,
    collections::VecDeque,
    future::Future,
    pin::Pin,
    task::{Context, Poll, Waker},
};

use crate::Checkpoint;

/// Passes of the event loop a yield lasts before the next task is resumed, for every event-loop
/// binding. Enough for a connection accepted in the first pass to be read, dispatched and take its
/// first step: asyncio and uvloop need four (accept, `connection_made`, `data_received`, the handler
/// task's first step), Node two polls (accept, then read, parse and dispatch); eight leave room to
/// spare. A pass that finds the loop idle ends the passes ([`Rotation::pass`]), so on a loop with
/// nothing else to run a yield costs one pass, not eight.
pub const YIELD_PASSES: u32 = 8;

/// How often per slice of wall time a timed turn looks whether the loop has other work, in a binding
/// that can look cheaply ([`Rotation::reset`]'s `can_look`): a light request then waits about a
/// quarter of a slice, not a whole one. The looks within the slice end the turn only for the loop's
/// own work, never for a task waiting in the rotation ([`Rotation::carry_on`]), so a contended turn
/// still lasts its whole slice. A binding that cannot look ends its timed turns after a slice.
pub const LOOKS_PER_SLICE: u64 = 4;

/// What an asynchronous checkpoint does ([`Rotation::checkpoint`]).
#[derive(Debug)]
#[must_use]
pub enum Step {
    /// Nothing pending and the task's turn goes on: finish at once (the fast path).
    Continue,
    /// No request, but this task's step is over: during a yield's passes its first step ended
    /// (`turn_over` false), or its timed turn lasted a slice of wall time (`turn_over` true).
    StepAside {
        /// The timed turn is over (this starts a yield's passes).
        turn_over: bool,
    },
    /// The scheduler asked this thread to yield: the core's checkpoint holding the request, not yet
    /// acknowledged. Give it to [`Rotation::see_request`].
    Request(Checkpoint),
}

/// Who serves a request a checkpoint saw ([`Rotation::see_request`]).
#[derive(Debug)]
#[must_use]
pub enum Seen {
    /// This task is the request's yielder: give the request to [`Rotation::push_yielder`].
    Yielder(Checkpoint),
    /// Another task already stepped aside for it: it is acknowledged now and this task does not step
    /// aside for it. `step_aside`: a yield's passes are under way, so this task's first step is over
    /// all the same (treat it as [`Step::StepAside`] with `turn_over` false).
    Served {
        /// Step aside as during a yield's passes.
        step_aside: bool,
    },
}

/// What a pass found ([`Rotation::pass`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Pass {
    /// Queue the next pass behind the loop's next poll.
    Again,
    /// The passes are over: resume the next task ([`Rotation::take_next`]).
    Resume,
}

/// A task suspended at a checkpoint. `waiter` is what the binding resumes it by.
#[derive(Debug)]
pub struct Waiter<W> {
    /// What the binding resumes the task by.
    pub waiter: W,
    task: usize,
    run_ns: u64,
}

/// The rotation of one thread's event loop. See the module documentation for its invariants.
#[derive(Debug)]
pub struct Rotation<W> {
    /// Tasks suspended at a checkpoint, oldest first.
    waiting: VecDeque<Waiter<W>>,
    /// The task resumed last, while it has its turn: its identity and its run time before the turn.
    running: Option<(usize, u64)>,
    /// When the running task's turn began (CPU time): at its resumption, or for a task that was not
    /// waiting, at the last callback of the rotation before it ran.
    turn_started: Option<u64>,
    /// The length of the last turn measured: the tolerance of the choice of the next.
    last_turn_ns: u64,
    /// The core's checkpoint of the last yielder: polling it again acknowledges (on this thread).
    unacknowledged: Option<Checkpoint>,
    /// Yields and steps aside so far: the keeper compares it to see whether the resumed task yielded.
    turns: u64,
    /// Passes left before the next task is resumed.
    passes_left: u32,
    /// Whether a pass callback is queued.
    pass_queued: bool,
    /// Whether a yield's passes are under way: a task that computes now steps aside at its first
    /// checkpoint. Cleared alone when a task of another loop reaches a checkpoint.
    passing: bool,
    /// When the running task's turn ends by the wall clock (ns; 0: no turn is timed). A cell: the
    /// asynchronous checkpoint, which only reads the rotation otherwise, drops the deadline of a turn
    /// whose worker has no slice any more ([`Rotation::turn_due`]).
    turn_deadline: Cell<u64>,
    /// When the running task's slice of wall time ends (ns; meaningful while a turn is timed): the
    /// last look of the slice falls on it, and from it on a waiting task ends the turn.
    slice_end: u64,
    /// Looks per slice of a timed turn: [`LOOKS_PER_SLICE`] or 1.
    looks: u64,
    /// A clock the tests set in place of both the thread's CPU time and the wall clock.
    clock: Option<u64>,
}

impl<W> Default for Rotation<W> {
    fn default() -> Self {
        Rotation::new()
    }
}

fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Poll the core's checkpoint once: the loop does the waking, so a no-op waker suffices.
fn poll_once(checkpoint: &mut Checkpoint) -> Poll<bool> {
    Pin::new(checkpoint).poll(&mut Context::from_waker(Waker::noop()))
}

impl<W> Rotation<W> {
    /// An empty rotation for a binding that cannot look at its loop (see [`Rotation::reset`]).
    pub const fn new() -> Rotation<W> {
        Rotation {
            waiting: VecDeque::new(),
            running: None,
            turn_started: None,
            last_turn_ns: 0,
            unacknowledged: None,
            turns: 0,
            passes_left: 0,
            pass_queued: false,
            passing: false,
            turn_deadline: Cell::new(0),
            slice_end: 0,
            looks: 1,
            clock: None,
        }
    }

    /// Start afresh for a new loop on the thread: the waiters of the old one are dropped and its
    /// unacknowledged request with them (nothing is written for it). `can_look`: the binding can see
    /// cheaply whether this loop has other work ([`Rotation::carry_on`]). The yield count, the test
    /// clock and the flags the fast path reads are the thread's and stay.
    pub fn reset(&mut self, can_look: bool) {
        self.waiting.clear();
        self.running = None;
        self.turn_started = None;
        self.last_turn_ns = 0;
        self.unacknowledged = None;
        self.passes_left = 0;
        self.pass_queued = false;
        self.looks = if can_look { LOOKS_PER_SLICE } else { 1 };
    }

    /// Tests only: measure turns with this clock (ns) instead of the thread's CPU time and the wall
    /// clock, so which task is resumed, and when a turn ends, never depend on the machine's speed.
    /// `None` restores both clocks.
    pub fn set_clock(&mut self, ns: Option<u64>) {
        self.clock = ns;
    }

    /// CPU time of the calling (loop) thread: the measure of a turn, like the scheduler's slices.
    fn cpu_ns(&self) -> u64 {
        self.clock.unwrap_or_else(|| clock_ns(libc::CLOCK_THREAD_CPUTIME_ID))
    }

    /// `CLOCK_MONOTONIC`: what times a turn (§5.7: a slice of wall time at most).
    fn wall_ns(&self) -> u64 {
        self.clock.unwrap_or_else(|| clock_ns(libc::CLOCK_MONOTONIC))
    }

    /// The asynchronous checkpoint of the calling thread: one load and two reads of this state when
    /// nothing is pending and no turn is timed; a clock read while one is.
    #[inline(always)]
    pub fn checkpoint(&self) -> Step {
        let mut request = crate::checkpoint();
        match poll_once(&mut request) {
            Poll::Pending => Step::Request(request),
            Poll::Ready(_) if self.passing => Step::StepAside { turn_over: false },
            Poll::Ready(_) if self.turn_due() => Step::StepAside { turn_over: true },
            Poll::Ready(_) => Step::Continue,
        }
    }

    /// Whether the running task's timed turn is over: its deadline has passed. A turn is timed only
    /// while the thread's worker has a slice ([`Rotation::time_turn`]): if the worker was lost,
    /// detached or closed during the turn, the turn is not over but no longer timed, and its deadline
    /// is dropped, so a worker waiting for a scheduler never steps aside for a turn (§5.7, §6.1).
    fn turn_due(&self) -> bool {
        let deadline = self.turn_deadline.get();
        if deadline == 0 || self.wall_ns() < deadline {
            return false;
        }
        if super::thread::turn_slice_ns() == 0 {
            self.turn_deadline.set(0);
            return false;
        }
        true
    }

    /// Acknowledge the last yielder's request now, if it is not yet: the loop has had control since.
    /// Returns whether one was pending.
    fn acknowledge_pending(&mut self) -> bool {
        match self.unacknowledged.take() {
            // Ready(true): acknowledged; Ready(false): a restart meanwhile, nothing to acknowledge.
            Some(mut yielder) => {
                let _ = poll_once(&mut yielder);
                true
            }
            None => false,
        }
    }

    /// A synchronous checkpoint of the loop's thread (outside the rotation, §5.7: its caller owns the
    /// yield) is about to ask the core: the last yielder's request, if not yet acknowledged, is
    /// acknowledged first, as another task's checkpoint would ([`Rotation::see_request`]), so the
    /// synchronous checkpoint yields only for a newer request. Returns whether one was pending.
    pub fn acknowledge(&mut self) -> bool {
        self.acknowledge_pending()
    }

    /// A checkpoint saw `request`. If another task stepped aside for a request the loop has not
    /// acknowledged, that one is acknowledged now and this task yields only for a newer request
    /// (one that arrived after the acknowledged `preempt_seq`); otherwise it is the yielder.
    pub fn see_request(&mut self, request: Checkpoint) -> Seen {
        if !self.acknowledge_pending() {
            return Seen::Yielder(request);
        }
        drop(request);
        let mut fresh = crate::checkpoint();
        match poll_once(&mut fresh) {
            Poll::Pending => Seen::Yielder(fresh),
            Poll::Ready(_) => Seen::Served { step_aside: self.passing },
        }
    }

    /// The yielder of `request` (task `task`, waiting on `waiter`) joins the back of the queue and the
    /// yield's passes start afresh. Returns whether the binding must queue the first pass (none is).
    pub fn push_yielder(&mut self, waiter: W, task: usize, request: Checkpoint) -> bool {
        self.enqueue(waiter, task);
        self.unacknowledged = Some(request);
        self.turns += 1;
        self.start_passes()
    }

    fn start_passes(&mut self) -> bool {
        self.passes_left = YIELD_PASSES;
        self.passing = true;
        !std::mem::replace(&mut self.pass_queued, true)
    }

    /// A task of another loop (or no task) reached a checkpoint: the passes and the timed turn are
    /// not this rotation's to impose on it.
    pub fn leave(&mut self) {
        self.passing = false;
        self.turn_deadline.set(0);
    }

    /// Whether a step aside may happen now: never inside a critical section, which holds every
    /// yield (§5.3) and so every step aside; it happens at the first checkpoint after the section.
    pub fn may_step_aside(&self) -> bool {
        super::critical_depth() == 0
    }

    /// A checkpoint found the timed turn's deadline passed ([`Step::StepAside`] with `turn_over`):
    /// whether the turn carries on (a look, not a yield). `loop_has_work`: the binding saw that its
    /// loop has something else to run (a callback, a timer due, an event its poll would return; true
    /// when it cannot tell). The loop's work always ends the turn; a task waiting in the rotation
    /// ends it only once the turn's slice of wall time is over, not at an earlier look, so looking
    /// more often never shortens a contended turn (§5.7: a turn lasts one slice at most, and the
    /// rotation serves its waiters). When the turn carries on it is timed to its next look: within
    /// the slice at most one look's share later and never past the slice's end; after the slice, a
    /// slice afresh. When it does not, the binding steps aside with `turn_over` ([`Rotation::push_aside`]).
    pub fn carry_on(&mut self, loop_has_work: bool) -> bool {
        let slice_over = self.wall_ns() >= self.slice_end;
        if loop_has_work || (slice_over && !self.waiting.is_empty()) {
            return false;
        }
        if slice_over {
            self.time_turn();
        } else {
            let look = super::thread::turn_slice_ns() / self.looks;
            self.turn_deadline.set(self.wall_ns().saturating_add(look).min(self.slice_end).max(1));
        }
        true
    }

    /// Task `task`, waiting on `waiter`, steps aside with no request to acknowledge (see
    /// [`Step::StepAside`]). Whoever computes next starts its turn now. Returns whether the binding
    /// must queue the first pass: only when `turn_over` starts the passes and none is queued.
    pub fn push_aside(&mut self, waiter: W, task: usize, turn_over: bool) -> bool {
        self.enqueue(waiter, task);
        self.turns += 1;
        self.turn_started = Some(self.cpu_ns());
        turn_over && self.start_passes()
    }

    /// Account the yielder's turn and queue it: its run time grows by the turn it just had (the loop
    /// thread's CPU time), so a turn cut short (a mode's clock, a repeated request) is made up at the
    /// next choice. A task that was not the running one joins at the least run time of the queue, so
    /// it neither jumps the queue for ever nor starts behind (CFS's min_vruntime). A binding that
    /// cannot tell tasks apart passes one constant `task`: every yield during a turn is then taken to
    /// be the running task's.
    fn enqueue(&mut self, waiter: W, task: usize) {
        let ran = self.turn_started.map_or(0, |t| self.cpu_ns().saturating_sub(t));
        if ran > 0 {
            self.last_turn_ns = ran;
        }
        let floor = self.waiting.iter().map(|w| w.run_ns).min();
        let base = match self.running.take() {
            Some((running, run_ns)) if running == task => run_ns,
            Some((_, run_ns)) => floor.map_or(run_ns, |f| f.min(run_ns)),
            None => floor.unwrap_or(0),
        };
        self.turn_started = None;
        self.turn_deadline.set(0);
        self.waiting.push_back(Waiter { waiter, task, run_ns: base.saturating_add(ran) });
    }

    /// One pass of a yield (a loop callback behind the loop's poll): acknowledges the last yielder's
    /// request if no one did yet, then says whether to queue the next pass or resume the next task.
    /// `idle`: nothing is queued behind this pass (no I/O, no timer, no task made ready): further
    /// passes would only poll an idle loop again, so the passes end here.
    pub fn pass(&mut self, idle: bool) -> Pass {
        self.acknowledge_pending();
        if self.running.is_none() {
            // Whoever computes next (a task made ready) starts its turn after this callback.
            self.turn_started = Some(self.cpu_ns());
        }
        self.passes_left = if idle { 0 } else { self.passes_left.saturating_sub(1) };
        self.pass_queued = self.passes_left > 0;
        self.passing = self.pass_queued;
        if self.pass_queued {
            Pass::Again
        } else {
            Pass::Resume
        }
    }

    /// Remove and return the task to resume: the oldest waiter among those within half a turn of the
    /// least run time. With turns of equal length this is the queue's head (a strict rotation); a
    /// task whose turns were cut short is resumed earlier, until it has caught up. None when nobody
    /// waits: then no turn is timed. A binding that finds the waiter cancelled calls this again.
    pub fn take_next(&mut self) -> Option<Waiter<W>> {
        let least = self.waiting.iter().map(|w| w.run_ns).min();
        let next = least.and_then(|least| {
            let within = least.saturating_add(self.last_turn_ns / 2);
            let index = self.waiting.iter().position(|w| w.run_ns <= within)?;
            self.waiting.remove(index)
        });
        if next.is_none() {
            self.turn_deadline.set(0);
        }
        next
    }

    /// The binding resumed `next` (taken by [`Rotation::take_next`]): its turn starts now, timed by
    /// the thread's slice. Returns the count to give [`Rotation::idle_since`] from a keeper callback
    /// queued behind the resumed task's step.
    pub fn resumed(&mut self, next: &Waiter<W>) -> u64 {
        self.running = Some((next.task, next.run_ns));
        self.turn_started = Some(self.cpu_ns());
        self.time_turn();
        self.turns
    }

    /// Whether no yield or step aside happened since [`Rotation::resumed`] returned `turns`: the
    /// resumed task gave control back otherwise (it awaits something else, or ended), so the next
    /// one must be resumed (nobody waits forever, §5.7).
    pub fn idle_since(&self, turns: u64) -> bool {
        self.turns == turns
    }

    /// No turn is timed any more (the loop the rotation belonged to is gone from this thread).
    pub fn stop_timing(&mut self) {
        self.turn_deadline.set(0);
    }

    /// Time the turn that starts now: its slice (the region's `slice_ns`) of wall time ends one slice
    /// from now, and its first look is due one look's share of it (the slice divided by the looks per
    /// slice) from now; not timed at all while the thread's worker is detached or waits for a scheduler.
    fn time_turn(&mut self) {
        let slice = super::thread::turn_slice_ns();
        let now = self.wall_ns();
        self.slice_end = now.saturating_add(slice);
        self.turn_deadline.set(if slice > 0 { now.saturating_add(slice / self.looks).max(1) } else { 0 });
    }

    /// How many tasks wait for their turn.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a request is stepped aside for and not yet acknowledged.
    pub fn unacknowledged(&self) -> bool {
        self.unacknowledged.is_some()
    }

    /// Whether a yield's passes are under way.
    pub fn passing(&self) -> bool {
        self.passing
    }

    /// When the running task's timed turn ends (ns of the rotation's wall clock; 0: not timed).
    pub fn turn_deadline(&self) -> u64 {
        self.turn_deadline.get()
    }

    /// How long the running task's timed turn lasts from now (ns of the rotation's wall clock, 0 once
    /// its deadline passed), or None when no turn is timed.
    pub fn turn_left_ns(&self) -> Option<u64> {
        let deadline = self.turn_deadline.get();
        (deadline != 0).then(|| deadline.saturating_sub(self.wall_ns()))
    }
}
