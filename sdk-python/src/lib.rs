// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `morpheus._morpheus`: the Python face of the Rust SDK (`sdk-rust`, crate `morpheus`).
//!
//! Nothing of the protocol is re-implemented here: checkpoints, critical sections, registration and
//! attaching are the core's. This crate adds what Python needs around them:
//!
//! * an awaitable checkpoint that costs no allocation and no event-loop round trip when nothing is
//!   pending: [`checkpoint_async`] polls the core's `Checkpoint` future once, right away, and on the
//!   fast path hands back one pre-built, immutable [`Checkpoint`] object whose `__next__` finishes at
//!   once (StopIteration(None) without building it; the result is None, True after a yield). Only
//!   when the scheduler asked does it allocate a [`PendingCheckpoint`]: the task steps aside for its
//!   turn in the loop's rotation (spec/SCB.md §5.7, see `Rotation`);
//! * exception classes, one per ABI `error_code`, built from the generated ABI at import;
//! * handles for workers and regions that are safe to hold from any thread.

use std::{
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{
        atomic::{AtomicU32, AtomicU64, Ordering},
        Arc,
    },
    task::{Context, Poll, Waker},
};

use morpheus::{Config, Error, ErrorCode, RuntimeKind, YieldReason};
use pyo3::{
    create_exception,
    exceptions::{PyException, PyTypeError, PyValueError},
    prelude::*,
    sync::PyOnceLock,
    types::{PyDict, PyType},
};

create_exception!(
    morpheus,
    MorpheusError,
    PyException,
    "Base class of every Morpheus error. `code` is the ABI error_code (a `morpheus.ErrorCode`)."
);

/// Everything built once at import.
struct Statics {
    /// Exception class per `ErrorCode`, indexed by `code.raw() - 1`.
    error_classes: Vec<Py<PyType>>,
    /// `StopIteration(True)`: raised, never built, when a pending checkpoint finishes.
    stop_true: Py<PyAny>,
    /// The completed checkpoint every fast-path `checkpoint_async()` returns.
    ready: Py<Checkpoint>,
    /// `asyncio._get_running_loop` (None outside a loop, no exception), imported at the first yield.
    running_loop: PyOnceLock<Py<PyAny>>,
    /// `asyncio.current_task`, imported at the first yield.
    current_task: PyOnceLock<Py<PyAny>>,
    /// `_morpheus._pass` and `_morpheus._keeper`, the loop callbacks of the rotation (see `Rotation`).
    pass_callback: PyOnceLock<Py<PyAny>>,
    keeper_callback: PyOnceLock<Py<PyAny>>,
}

static STATICS: PyOnceLock<Statics> = PyOnceLock::new();

fn statics(py: Python<'_>) -> &Statics {
    STATICS.get(py).expect("morpheus._morpheus is initialised at import")
}

/// `BAD_MAGIC` -> `BadMagicError`.
fn class_name(code: ErrorCode) -> String {
    let mut out = String::new();
    for word in code.name().split('_') {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first);
            out.extend(chars.map(|c| c.to_ascii_lowercase()));
        }
    }
    out + "Error"
}

/// A core error as the Python exception of its `error_code`.
fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let code = err.code();
    let class = statics(py).error_classes[code.raw() as usize - 1].bind(py);
    match class.call1((err.to_string(),)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

fn py_result<T>(py: Python<'_>, result: morpheus::Result<T>) -> PyResult<T> {
    result.map_err(|e| to_py(py, e))
}

// ------------------------------------------------------------------------------------------------
// Checkpoints

/// The synchronous checkpoint of the calling thread's worker.
///
/// Returns True when the scheduler asked this worker to yield: the request is acknowledged and the
/// caller must yield now (return to its loop, `time.sleep(0)`, ...). False otherwise, and always on
/// a thread without a worker, in a critical section, or after the scheduler restarted. One load of
/// shared memory when nothing is pending.
#[pyfunction]
fn checkpoint() -> bool {
    morpheus::checkpoint_sync()
}

/// The asynchronous checkpoint: ``await morpheus.checkpoint_async()``.
///
/// When nothing is pending it returns a pre-built awaitable that finishes at once with None (no
/// allocation, no trip through the event loop). When the scheduler asked (and no critical section
/// is held) the awaitable yields to the event loop exactly once, then acknowledges and finishes
/// with True. So ``if await morpheus.checkpoint_async():`` reads "if it yielded".
#[pyfunction]
fn checkpoint_async(py: Python<'_>) -> PyResult<Py<PyAny>> {
    checkpoint_awaitable(py)
}

#[inline(always)]
fn checkpoint_awaitable(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let mut future = morpheus::checkpoint();
    // The core's future decides on its first poll (one load when nothing is pending) and wakes
    // itself when it wants a yield: the event loop does the waking here, so a no-op waker suffices.
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut future).poll(&mut cx) {
        // During a yield's passes a CPU-bound task's first step ends at its first checkpoint (one
        // thread-local flag, read only here in the binding; the core's fast path is unchanged).
        Poll::Ready(_) if PASSING.get() => step_aside(py, false),
        // A turn the rotation gave has lasted a slice of wall time without a request (§5.7's cap):
        // one thread-local load while no turn is timed, a clock read while one is.
        Poll::Ready(_) if turn_expired() => step_aside(py, true),
        Poll::Ready(_) => Ok(statics(py).ready.clone_ref(py).into_any()),
        Poll::Pending => take_turn(py, future),
    }
}

// ------------------------------------------------------------------------------------------------
// The rotation (spec/SCB.md §5.7): one task steps aside per request, the yielder goes to the back of
// a FIFO, each yield lasts YIELD_PASSES passes of the loop and then resumes the FIFO's head.

/// Passes of the event loop a yield lasts before the next CPU-bound task resumes: enough for a
/// connection accepted in the first pass to be read, dispatched and take its first step (accept,
/// connection_made, data_received, the handler task's first step: four in asyncio and uvloop), with
/// room to spare. Each pass is one `call_soon` hop and one poll of the loop: a few microseconds.
const YIELD_PASSES: u32 = 8;

/// Per thread (one event loop runs on it at a time): the tasks suspended at a checkpoint, and the
/// request the last yielder has not acknowledged yet.
struct Rotation {
    /// The loop the state belongs to (a new loop on the thread starts afresh).
    event_loop: Option<Py<PyAny>>,
    /// Tasks suspended at a checkpoint, oldest first.
    waiting: std::collections::VecDeque<Waiter>,
    /// The task resumed last, while it has its turn: its identity and its run time before the turn.
    running: Option<(usize, u64)>,
    /// When the running CPU-bound task's turn began: at its resumption, or for a task that was not
    /// waiting (it joins), at the last callback of the rotation before it ran.
    turn_started: Option<u64>,
    /// The length of the last turn measured (CPU time): the tolerance of the choice of the next.
    last_turn_ns: u64,
    /// The core's checkpoint of the last yielder: polling it again acknowledges (on this thread).
    unacknowledged: Option<morpheus::Checkpoint>,
    /// Yields so far: the keeper compares it to know whether the resumed task yielded again.
    turns: u64,
    /// Passes left before the head of `waiting` is resumed; a yield during the passes starts them
    /// afresh (one task is resumed per run of passes, however many yielded in it: a task that ran
    /// during the passes, a newcomer, had the turn).
    passes_left: u32,
    /// Whether a `_pass` callback is queued.
    passing: bool,
    /// asyncio's ready queue (`BaseEventLoop._ready`), where the loop exposes it: a pass that finds
    /// it empty ends the passes (see `_pass`). None for other loops (uvloop): every pass is run.
    ready_queue: Option<Py<PyAny>>,
}

/// CPU time of the calling (loop) thread: the measure of a turn. The scheduler's slices are CPU time
/// too, so turns cut short by a wall clock (a runtime mode's, §5.4) or stretched by the thread being
/// preempted count for what they were. One clock read per yield, off the fast path.
fn thread_cpu_ns() -> u64 {
    if let Some(ns) = TURN_CLOCK.get() {
        return ns;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

thread_local! {
    /// A clock the tests set and advance in place of the thread's CPU time and of the wall clock
    /// that times a turn (`_set_turn_clock`), so a verdict that depends on which task is resumed, or
    /// on when a turn ends, never depends on how fast the machine ran.
    static TURN_CLOCK: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
    /// When the running task's turn ends by the clock (CLOCK_MONOTONIC ns; 0: no turn is timed).
    static TURN_DEADLINE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Wall time (CLOCK_MONOTONIC) of the calling thread, or the tests' turn clock.
fn wall_ns() -> u64 {
    if let Some(ns) = TURN_CLOCK.get() {
        return ns;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Whether the running task's timed turn is over: a load of a thread-local when no turn is timed.
#[inline(always)]
fn turn_expired() -> bool {
    let deadline = TURN_DEADLINE.get();
    deadline != 0 && wall_ns() >= deadline
}

/// Time the turn that starts now: it ends at the first checkpoint one `slice_ns` (the scheduler's
/// slice, from the region header) of wall time from now. Only while the thread's worker is attached:
/// detached there is no slice, and nothing yields.
fn time_turn() {
    let slice = HELD.with(|held| {
        let held = held.borrow();
        let (_, worker) = held.as_ref()?;
        // Registered and not waiting for a scheduler (read without looking for the scheduler's life,
        // which `is_attached` would do, a poll per turn).
        if worker.slot().is_none() || worker.is_waiting_for_scheduler() {
            return None;
        }
        worker.region().map(|region| region.slice_ns())
    });
    // Where the loop can be looked at for a few microseconds (asyncio, `loop_has_work`), it is looked
    // at LOOKS_PER_SLICE times per slice and the turn ends at the first look that finds work; where
    // it cannot, the turn ends once, after the slice.
    let looks = if ROTATION.with(|r| r.borrow().ready_queue.is_some()) { LOOKS_PER_SLICE } else { 1 };
    TURN_DEADLINE.set(match slice {
        Some(slice) if slice > 0 => wall_ns().saturating_add(slice / looks).max(1),
        _ => 0,
    });
}

/// How often per slice of wall time a timed turn on asyncio looks whether the loop has work (each look
/// a few microseconds): a light request waits about a quarter of a slice, not a whole one.
const LOOKS_PER_SLICE: u64 = 4;

/// Tests only: measure this thread's turns with a clock the caller sets (ns), or with the thread's
/// CPU time again (None).
#[pyfunction]
fn _set_turn_clock(ns: Option<u64>) {
    TURN_CLOCK.set(ns);
}

/// Tests only: what the calling thread's next checkpoint compares, `(loaded, cached)`: the sequence
/// its fast path loads (the SCB's `preempt_seq`, or the SDK's wake sequence while the worker waits for
/// a scheduler, §6.1) and the value it compares it with. The checkpoint takes the slow path when they
/// differ; a test orders its events by this, not by time.
#[pyfunction]
fn _fast_path_view() -> (u64, u64) {
    // SAFETY: the calling thread's own state; preempt_seq points at a live u64 that others only
    // change atomically (the SCB, the static detached SCB or the wake sequence).
    unsafe {
        let raw = morpheus::raw::current_raw();
        let loaded = (*((*raw).preempt_seq as *const AtomicU64)).load(Ordering::Acquire);
        (loaded, (*raw).cached_ack)
    }
}

/// A task suspended at a checkpoint: the future its turn resolves, and its run time so far.
struct Waiter {
    future: Py<PyAny>,
    task: usize,
    run_ns: u64,
}

impl Rotation {
    /// Account the yielder's turn and put it in the queue: its run time grows by the turn it just
    /// had (the loop thread's CPU time), so turns cut short by anything (a mode's clock, a double request)
    /// are made up at the next choice. A task that was not waiting joins at the least run time of
    /// the queue, so it neither jumps the queue for ever nor starts behind (CFS's min_vruntime).
    fn enqueue(&mut self, future: Py<PyAny>, task: usize) {
        let ran = self.turn_started.map_or(0, |t| thread_cpu_ns().saturating_sub(t));
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
        TURN_DEADLINE.set(0);
        self.waiting.push_back(Waiter { future, task, run_ns: base.saturating_add(ran) });
    }

    /// Remove and return the task to resume: the oldest waiter among those within half a turn of the
    /// least run time. With turns of equal length this is the FIFO's head (a strict rotation); a task
    /// whose turns were cut short is resumed earlier, until it has caught up.
    fn take_least_run(&mut self) -> Option<Waiter> {
        let least = self.waiting.iter().map(|w| w.run_ns).min()?;
        let within = least.saturating_add(self.last_turn_ns / 2);
        let index = self.waiting.iter().position(|w| w.run_ns <= within)?;
        self.waiting.remove(index)
    }
}

thread_local! {
    /// Whether a yield's passes are under way on this thread (a copy of `Rotation::passing` that
    /// the fast path can read without borrowing the rotation).
    static PASSING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static ROTATION: std::cell::RefCell<Rotation> = const {
        std::cell::RefCell::new(Rotation {
            event_loop: None,
            waiting: std::collections::VecDeque::new(),
            running: None,
            turn_started: None,
            last_turn_ns: 0,
            unacknowledged: None,
            turns: 0,
            passes_left: 0,
            passing: false,
            ready_queue: None,
        })
    };
}

/// Acknowledge the last yielder's request now, if it is not yet: the loop has had control since.
fn acknowledge_pending(rotation: &mut Rotation) {
    if let Some(mut yielder) = rotation.unacknowledged.take() {
        let mut cx = Context::from_waker(Waker::noop());
        // Ready(true): acknowledged; Ready(false): a restart meanwhile, nothing to acknowledge.
        let _ = Pin::new(&mut yielder).poll(&mut cx);
    }
}

/// The ready queue of an asyncio loop (a `BaseEventLoop`, whose `_run_once` polls, queues the I/O and
/// timer callbacks due, then runs the queue), or None for any other loop.
fn asyncio_ready_queue(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Option<Py<PyAny>>> {
    let base = py.import("asyncio")?.getattr("BaseEventLoop")?;
    if !event_loop.is_instance(&base)? {
        return Ok(None);
    }
    Ok(event_loop.getattr("_ready").ok().map(Bound::unbind))
}

/// Whether ending a timed turn would let anything else run: on asyncio, a callback queued, a timer
/// due or an event the loop's poll would return (the selector asked with timeout 0; it is level
/// triggered, so the loop's own poll still sees it). A few microseconds, once per slice of wall time,
/// against the tens a yield costs: on a loaded host the slice of wall time holds little CPU, and a
/// turn ended for nothing would make yields as frequent, per unit of work, as that host is loaded.
/// Other loops (uvloop) show none of this: their timed turns always end. Anything unexpected counts
/// as work.
fn loop_has_work(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> bool {
    let ready_queue = ROTATION.with(|r| r.borrow().ready_queue.as_ref().map(|q| q.clone_ref(py)));
    let Some(ready_queue) = ready_queue else { return true };
    let look = || -> PyResult<bool> {
        // The rotation's own keeper waits there for the end of this task's step: it is not work.
        let keeper = callback(py, &statics(py).keeper_callback, "_keeper")?;
        for handle in ready_queue.bind(py).try_iter()? {
            if !handle?.getattr("_callback")?.is(keeper.bind(py)) {
                return Ok(true);
            }
        }
        let scheduled = event_loop.getattr("_scheduled")?;
        if scheduled.len()? > 0 {
            let when: f64 = scheduled.get_item(0)?.getattr("_when")?.extract()?;
            let now: f64 = event_loop.call_method0("time")?.extract()?;
            if when <= now {
                return Ok(true);
            }
        }
        let events = event_loop.getattr("_selector")?.call_method1("select", (0,))?;
        Ok(events.len()? > 0)
    };
    look().unwrap_or(true)
}

fn callback(py: Python<'_>, cell: &PyOnceLock<Py<PyAny>>, name: &str) -> PyResult<Py<PyAny>> {
    cell.get_or_try_init(py, || py.import("morpheus._morpheus")?.getattr(name).map(Bound::unbind)).map(|c| c.clone_ref(py))
}

/// A checkpoint saw a request (`future` holds it, not yet acknowledged). Either another task already
/// stepped aside for a request the loop has not acknowledged (then acknowledge it, and yield only if
/// a newer request is pending), or this task is the request's yielder: it joins the back of the FIFO.
fn take_turn(py: Python<'_>, mut future: morpheus::Checkpoint) -> PyResult<Py<PyAny>> {
    let statics = statics(py);
    let get_loop = statics
        .running_loop
        .get_or_try_init(py, || py.import("asyncio")?.getattr("_get_running_loop").map(Bound::unbind))?;
    let event_loop = get_loop.bind(py).call0()?;
    if event_loop.is_none() {
        // A coroutine driven by hand: yield a bare None once, acknowledge on resumption.
        return Ok(Py::new(py, PendingCheckpoint { future: Some(future), waiter: None, suspended: false, result: true })?.into_any());
    }
    let same_loop = ROTATION.with(|r| r.borrow().event_loop.as_ref().is_some_and(|l| l.bind(py).is(&event_loop)));
    let ready_queue = if same_loop { None } else { asyncio_ready_queue(py, &event_loop)? };
    let had_unacknowledged = ROTATION.with(|r| {
        let mut rotation = r.borrow_mut();
        if !same_loop {
            *rotation = Rotation {
                event_loop: Some(event_loop.clone().unbind()),
                waiting: Default::default(),
                running: None,
                turn_started: None,
                last_turn_ns: 0,
                unacknowledged: None,
                turns: rotation.turns,
                passes_left: 0,
                passing: false,
                ready_queue,
            };
        }
        let had = rotation.unacknowledged.is_some();
        acknowledge_pending(&mut rotation);
        had
    });
    if had_unacknowledged {
        // This task runs during another's yield: it does not step aside for that request. A request
        // that came after it is a new one, and this task is its yielder.
        drop(future);
        future = morpheus::checkpoint();
        let mut cx = Context::from_waker(Waker::noop());
        if Pin::new(&mut future).poll(&mut cx).is_ready() {
            return if PASSING.get() { step_aside(py, false) } else { Ok(statics.ready.clone_ref(py).into_any()) };
        }
    }
    let waiter = event_loop.call_method0("create_future")?;
    let first_pass = callback(py, &statics.pass_callback, "_pass")?;
    let current_task = statics
        .current_task
        .get_or_try_init(py, || py.import("asyncio")?.getattr("current_task").map(Bound::unbind))?;
    let task = current_task.bind(py).call0()?.as_ptr() as usize;
    let start_passes = ROTATION.with(|r| {
        let mut rotation = r.borrow_mut();
        rotation.enqueue(waiter.clone().unbind(), task);
        rotation.unacknowledged = Some(future);
        rotation.turns += 1;
        rotation.passes_left = YIELD_PASSES;
        PASSING.set(true);
        !std::mem::replace(&mut rotation.passing, true)
    });
    if start_passes {
        event_loop.call_method1("call_soon", (first_pass, &event_loop))?;
    }
    Ok(Py::new(py, PendingCheckpoint { future: None, waiter: Some(waiter.unbind()), suspended: false, result: true })?.into_any())
}

/// A task reached a checkpoint with nothing pending, but its step is over: either it computes during
/// a yield's passes (its first step is over), or its timed turn lasted a slice of wall time
/// (`turn_over`: then this starts the passes, as a yield does). It joins the queue like a yielder
/// (without a request to acknowledge), so that the tasks made ready take their first steps before a
/// CPU-bound one has a whole turn; it evaluates to None when its turn comes.
fn step_aside(py: Python<'_>, turn_over: bool) -> PyResult<Py<PyAny>> {
    let statics = statics(py);
    let get_loop = statics
        .running_loop
        .get_or_try_init(py, || py.import("asyncio")?.getattr("_get_running_loop").map(Bound::unbind))?;
    let event_loop = get_loop.bind(py).call0()?;
    let current_task = statics
        .current_task
        .get_or_try_init(py, || py.import("asyncio")?.getattr("current_task").map(Bound::unbind))?;
    let task = if event_loop.is_none() { event_loop.clone() } else { current_task.bind(py).call0()? };
    let same_loop = ROTATION.with(|r| r.borrow().event_loop.as_ref().is_some_and(|l| l.bind(py).is(&event_loop)));
    if task.is_none() || !same_loop {
        // Another loop (or no task): the passes and the timed turn are not this code's.
        PASSING.set(false);
        TURN_DEADLINE.set(0);
        return Ok(statics.ready.clone_ref(py).into_any());
    }
    if critical_depth() > 0 {
        // A critical section holds every yield (§5.3), a step aside too, whether the turn is over or
        // another task's yield is passing: it happens at the first checkpoint after the section.
        return Ok(statics.ready.clone_ref(py).into_any());
    }
    if turn_over && !loop_has_work(py, &event_loop) {
        // Nothing for the loop to run: the turn carries on, timed afresh (a look, not a yield).
        time_turn();
        return Ok(statics.ready.clone_ref(py).into_any());
    }
    let waiter = event_loop.call_method0("create_future")?;
    let start_passes = ROTATION.with(|r| {
        let mut rotation = r.borrow_mut();
        rotation.enqueue(waiter.clone().unbind(), task.as_ptr() as usize);
        rotation.turns += 1;
        // Whoever computes next starts its turn now.
        rotation.turn_started = Some(thread_cpu_ns());
        if !turn_over {
            return false;
        }
        rotation.passes_left = YIELD_PASSES;
        PASSING.set(true);
        !std::mem::replace(&mut rotation.passing, true)
    });
    if start_passes {
        let first_pass = callback(py, &statics.pass_callback, "_pass")?;
        event_loop.call_method1("call_soon", (first_pass, &event_loop))?;
    }
    Ok(Py::new(py, PendingCheckpoint { future: None, waiter: Some(waiter.unbind()), suspended: false, result: false })?.into_any())
}

/// One pass of a yield (a loop callback): acknowledges the last yielder's request if no one did yet
/// (the loop has control), then queues the next pass behind the callbacks the loop's poll made ready,
/// so the tasks woken during the yield take their first steps before it ends; the last pass resumes
/// the FIFO's head.
#[pyfunction]
fn _pass(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
    // asyncio: this pass runs first in its iteration (it was queued in the previous one, before that
    // iteration's poll). If nothing is queued behind it, the poll brought no I/O, no timer was due and
    // no task was made ready: the loop is idle but for the rotation, and further passes would only
    // poll it again (their cost, ~3 µs each, is what a yield on a loaded host spends most often).
    let ready_queue = ROTATION.with(|r| r.borrow().ready_queue.as_ref().map(|q| q.clone_ref(py)));
    let idle = match ready_queue {
        Some(queue) => queue.bind(py).len()? == 0,
        None => false,
    };
    let more = ROTATION.with(|r| {
        let mut rotation = r.borrow_mut();
        acknowledge_pending(&mut rotation);
        if rotation.running.is_none() {
            // Whoever computes next (a task made ready) starts its turn after this callback.
            rotation.turn_started = Some(thread_cpu_ns());
        }
        rotation.passes_left = if idle { 0 } else { rotation.passes_left.saturating_sub(1) };
        rotation.passing = rotation.passes_left > 0;
        PASSING.set(rotation.passing);
        rotation.passing
    });
    if more {
        let next = callback(py, &statics(py).pass_callback, "_pass")?;
        event_loop.call_method1("call_soon", (next, event_loop))?;
        return Ok(());
    }
    resume_head(py, event_loop)
}

/// Resume the oldest waiting task (skipping cancelled ones), then look, once it gave control back,
/// whether it yielded again; if not, the next one is resumed (nobody waits forever, §5.7).
fn resume_head(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
    loop {
        let (next, turns) = ROTATION.with(|r| {
            let mut rotation = r.borrow_mut();
            let same_loop = rotation.event_loop.as_ref().is_some_and(|l| l.bind(py).is(event_loop));
            (if same_loop { rotation.take_least_run() } else { None }, rotation.turns)
        });
        let Some(next) = next else {
            TURN_DEADLINE.set(0);
            return Ok(());
        };
        let future = next.future.bind(py);
        if future.call_method0("done")?.is_truthy()? {
            continue; // cancelled meanwhile
        }
        future.call_method1("set_result", (true,))?;
        ROTATION.with(|r| {
            let mut rotation = r.borrow_mut();
            rotation.running = Some((next.task, next.run_ns));
            rotation.turn_started = Some(thread_cpu_ns());
        });
        time_turn();
        // Queued behind the resumed task's step, so it runs once that step gave control back.
        let keeper = callback(py, &statics(py).keeper_callback, "_keeper")?;
        event_loop.call_method1("call_soon", (keeper, event_loop, turns))?;
        return Ok(());
    }
}

/// Runs after a resumed task's step: if no yield happened since (the task awaited something else or
/// ended), the next waiting task is resumed.
#[pyfunction]
fn _keeper(py: Python<'_>, event_loop: &Bound<'_, PyAny>, turns: u64) -> PyResult<()> {
    let idle = ROTATION.with(|r| r.borrow().turns == turns);
    if idle {
        resume_head(py, event_loop)?;
    }
    Ok(())
}

/// A checkpoint that found nothing to do: awaiting it finishes at once with None. One immutable
/// instance serves every such checkpoint of the process.
#[pyclass(module = "morpheus", frozen)]
struct Checkpoint;

#[pymethods]
impl Checkpoint {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> Option<()> {
        // Exhausted at once: NULL without an exception is a StopIteration(None) that CPython never
        // has to build, which is what makes the fast path cheap (a StopIteration(False) costs ~3x).
        None
    }

    fn __repr__(&self) -> &'static str {
        "<morpheus.Checkpoint: nothing pending>"
    }
}

/// A checkpoint that found a pending request: the task steps aside for its turn (spec/SCB.md §5.7:
/// to the back of the loop's FIFO of waiting tasks; the request is acknowledged as soon as the loop
/// has control) and the awaitable finishes with True when the task's turn comes round again.
#[pyclass(module = "morpheus")]
struct PendingCheckpoint {
    /// Outside a running loop only: the core's checkpoint, acknowledged on resumption.
    future: Option<morpheus::Checkpoint>,
    /// In a loop: the future the rotation resolves when this task's turn comes.
    waiter: Option<Py<PyAny>>,
    suspended: bool,
    /// What awaiting it evaluates to when the turn comes: True after a yield for the scheduler,
    /// None after a step aside during another's yield.
    result: bool,
}

#[pymethods]
impl PendingCheckpoint {
    fn __await__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.suspended {
            self.suspended = true;
            return Ok(Some(match &self.waiter {
                Some(waiter) => {
                    // The Task waits on it as on any future it is handed.
                    waiter.bind(py).setattr("_asyncio_future_blocking", true)?;
                    waiter.clone_ref(py)
                }
                None => py.None(),
            }));
        }
        let Some(mut future) = self.future.take() else {
            if !self.result {
                return Ok(None);
            }
            return Err(PyErr::from_value(statics(py).stop_true.bind(py).clone()));
        };
        let mut cx = Context::from_waker(Waker::noop());
        match Pin::new(&mut future).poll(&mut cx) {
            Poll::Ready(true) => Err(PyErr::from_value(statics(py).stop_true.bind(py).clone())),
            // The scheduler restarted during the yield: nothing was acknowledged.
            Poll::Ready(false) | Poll::Pending => Ok(None),
        }
    }

    fn send(&mut self, py: Python<'_>, _value: Py<PyAny>) -> PyResult<Option<Py<PyAny>>> {
        self.__next__(py)
    }

    fn __repr__(&self) -> &'static str {
        if self.suspended {
            "<morpheus.PendingCheckpoint: stepped aside, resumes at its turn>"
        } else {
            "<morpheus.PendingCheckpoint: steps aside for the scheduler's request>"
        }
    }
}

/// Checkpoint every ``every``-th time: ``await ticker`` in a hot loop costs a counter increment
/// between real checkpoints. ``ticker.tick()`` is the synchronous form. One per task (or loop).
#[pyclass(module = "morpheus", frozen)]
struct Ticker {
    every: u32,
    count: AtomicU32,
}

#[pymethods]
impl Ticker {
    #[new]
    #[pyo3(signature = (every = 1000))]
    fn new(every: i64) -> PyResult<Ticker> {
        if every < 1 || every > i64::from(u32::MAX) {
            return Err(PyValueError::new_err(format!(
                "Ticker(every=...): expected an integer from 1 to {}, got {every}",
                u32::MAX
            )));
        }
        Ok(Ticker { every: every as u32, count: AtomicU32::new(0) })
    }

    /// How many calls make one real checkpoint.
    #[getter]
    fn every(&self) -> u32 {
        self.every
    }

    #[inline(always)]
    fn __await__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.due() {
            checkpoint_awaitable(py)
        } else {
            Ok(statics(py).ready.clone_ref(py).into_any())
        }
    }

    /// Synchronous form: True when this call's checkpoint says "yield now".
    fn tick(&self) -> bool {
        self.due() && morpheus::checkpoint_sync()
    }

    fn __repr__(&self) -> String {
        format!("morpheus.Ticker(every={})", self.every)
    }
}

impl Ticker {
    #[inline(always)]
    fn due(&self) -> bool {
        // Relaxed: a Ticker belongs to one task; the atomic only makes the frozen class Sync.
        let next = self.count.load(Ordering::Relaxed) + 1;
        if next >= self.every {
            self.count.store(0, Ordering::Relaxed);
            true
        } else {
            self.count.store(next, Ordering::Relaxed);
            false
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Critical sections

/// Enter a critical section on the calling thread (prefer ``with morpheus.critical():``).
#[pyfunction]
fn critical_enter() {
    // SAFETY: current_raw() is the calling thread's own state.
    unsafe { morpheus::raw::critical_enter_raw(morpheus::raw::current_raw()) }
}

/// Exit a critical section; ``NotInCriticalError`` without a matching enter (nothing is written).
#[pyfunction]
fn critical_exit(py: Python<'_>) -> PyResult<()> {
    // SAFETY: as in critical_enter.
    py_result(py, unsafe { morpheus::raw::critical_exit_raw(morpheus::raw::current_raw()) })
}

/// The calling thread's critical-section nesting depth.
#[pyfunction]
fn critical_depth() -> u32 {
    // SAFETY: as in critical_enter; a plain read of our own thread's state.
    unsafe { (*morpheus::raw::current_raw()).critical_depth }
}

// ------------------------------------------------------------------------------------------------
// Regions

/// A validated, mapped region (spec/SCB.md §1). Get one with :func:`morpheus.attach`.
#[pyclass(module = "morpheus", frozen)]
struct Region {
    inner: Arc<morpheus::Region>,
}

#[pymethods]
impl Region {
    /// Where the region was mapped from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.inner.path().to_path_buf()
    }

    /// ``"PINNED_MAP"`` (kernel backend, bpffs), ``"FILE"`` (a region file) or ``"AGENT_FD"`` (handed over by the agent).
    #[getter]
    fn backing(&self) -> &'static str {
        match self.inner.backing() {
            morpheus::Backing::PinnedMap => "PINNED_MAP",
            morpheus::Backing::File => "FILE",
            morpheus::Backing::AgentFd => "AGENT_FD",
        }
    }

    /// The generation seen at attach.
    #[getter]
    fn attached_generation(&self) -> u64 {
        self.inner.attached_generation()
    }

    /// The generation stored now (0 once the scheduler retired the region).
    #[getter]
    fn current_generation(&self) -> u64 {
        self.inner.current_generation()
    }

    /// Whether the scheduler that published the region is still the one attached to.
    #[getter]
    fn is_current(&self) -> bool {
        self.inner.is_current()
    }

    /// Number of SCB slots.
    #[getter]
    fn scb_count(&self) -> u32 {
        self.inner.scb_count()
    }

    /// The scheduler's slice in nanoseconds (may change at run time).
    #[getter]
    fn slice_ns(&self) -> u64 {
        self.inner.slice_ns()
    }

    /// The scheduler's grace period in nanoseconds.
    #[getter]
    fn grace_ns(&self) -> u64 {
        self.inner.grace_ns()
    }

    /// The pressure record, read consistently under its seqlock (a bounded number of attempts, then
    /// the last consistent snapshot), or None while none could be read. The GIL is released while
    /// reading, so a writer parked mid-update cannot freeze the interpreter.
    fn pressure<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let region = self.inner.clone();
        let Some(p) = py.detach(move || region.pressure()) else { return Ok(None) };
        let out = PyDict::new(py);
        out.set_item("level", p.level.map(|l| l.name()))?;
        out.set_item("cpu_some_avg10", p.cpu_some_avg10)?;
        out.set_item("io_some_avg10", p.io_some_avg10)?;
        out.set_item("memory_some_avg10", p.memory_some_avg10)?;
        out.set_item("runqueue_depth", p.runqueue_depth)?;
        out.set_item("updated_ns", p.updated_ns)?;
        Ok(Some(out))
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<morpheus.Region {} ({}, generation {}, {} slots)>",
            self.inner.path().display(),
            self.backing(),
            self.inner.attached_generation(),
            self.inner.scb_count()
        )
    }
}

/// Attach to a region as spec/SCB.md §1.2 says.
///
/// With no ``path``: ``MORPHEUS_REGION`` (the empty string means detached), then the pinned map, then
/// the simulation file; None when there is no scheduler (detached mode). With a ``path``: that
/// region, or an error (an explicit path is never silently ignored). Raises the ``MorpheusError``
/// subclass of the failed check (``BadMagicError``, ``AbiMajorMismatchError``, ...).
#[pyfunction]
#[pyo3(signature = (path = None))]
fn attach(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Option<Region>> {
    let found = py.detach(|| match path {
        Some(path) => morpheus::Region::open(path).map(Some),
        None => morpheus::region::discover().map(|d| match d {
            morpheus::Discovered::Attached(region) => Some(region),
            morpheus::Discovered::Detached(_) => None,
        }),
    });
    Ok(py_result(py, found)?.map(|inner| Region { inner }))
}

// ------------------------------------------------------------------------------------------------
// Workers

/// Hands out the token that ties a Python handle to one registration of one thread.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The calling thread's worker as registered through Python, with its token. Dropped (which
    /// shuts the worker down) by `close()`, or by the thread's exit.
    static HELD: std::cell::RefCell<Option<(u64, morpheus::Worker)>> = const { std::cell::RefCell::new(None) };
}

fn with_held<T>(py: Python<'_>, token: u64, operation: &'static str, f: impl FnOnce(&morpheus::Worker) -> PyResult<T>) -> PyResult<T> {
    HELD.with(|held| {
        let held = held.borrow();
        match &*held {
            Some((t, worker)) if *t == token => f(worker),
            _ => Err(to_py(py, Error::NotRegistered { operation })),
        }
    })
}

fn detach_reason_name(reason: morpheus::DetachReason) -> &'static str {
    match reason {
        morpheus::DetachReason::ForcedByEnvironment => "FORCED_BY_ENVIRONMENT",
        morpheus::DetachReason::NoScheduler => "NO_SCHEDULER",
        morpheus::DetachReason::Requested => "REQUESTED",
    }
}

/// The calling thread as a Morpheus worker.
///
/// ``Worker()`` registers the calling thread at once: it finds the region (``MORPHEUS_REGION``, the
/// pinned map, the simulation file) and registers through the scheduler's agent, or runs detached
/// when there is no scheduler. Use it as a context manager (``with morpheus.Worker():``) or call
/// :meth:`close`; a thread that exits, and the main thread at interpreter exit, release their worker.
///
/// Arguments (all keyword-only):
///   region: a path or a :class:`Region` to attach to instead of discovering one.
///   slot: register this slot directly, without the agent (tests and harnesses that play the
///     scheduler).
///   socket: the agent's socket, instead of ``MORPHEUS_SOCKET`` or the default path.
///   detached: run detached (no region) whatever is available.
///   escapable: whether the scheduler may escalate this worker; by default the ABI's default for
///     Python (False: the worker holds the GIL, throttling it would stall every Python thread).
///   priority: advisory, -20 (most important) to 19.
///
/// One worker per thread: a second registration raises ``AlreadyRegisteredError``. The handle may be
/// passed around, but its methods act only on the thread that registered it.
#[pyclass(module = "morpheus", frozen)]
struct Worker {
    token: u64,
    thread_name: String,
}

#[pymethods]
impl Worker {
    #[new]
    #[pyo3(signature = (*, region = None, slot = None, socket = None, detached = false, escapable = None, priority = 0))]
    fn new(
        py: Python<'_>,
        region: Option<&Bound<'_, PyAny>>,
        slot: Option<i64>,
        socket: Option<PathBuf>,
        detached: bool,
        escapable: Option<bool>,
        priority: i64,
    ) -> PyResult<Worker> {
        let mut config = Config::default().runtime_kind(RuntimeKind::Python);
        match (region, detached) {
            (Some(_), true) => {
                return Err(PyValueError::new_err("Worker(): give region= or detached=True, not both"))
            }
            (None, true) => config = config.detached(),
            (Some(region), false) => {
                if let Ok(region) = region.cast::<Region>() {
                    config = config.region(region.get().inner.clone());
                } else if let Ok(path) = region.extract::<PathBuf>() {
                    config = config.region_path(path);
                } else {
                    return Err(PyTypeError::new_err(format!(
                        "Worker(region=...): expected a path or a morpheus.Region, got {}",
                        region.get_type().name()?
                    )));
                }
            }
            (None, false) => {}
        }
        match (slot, socket) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "Worker(): give slot= (direct registration) or socket= (through the agent), not both",
                ))
            }
            (Some(slot), None) => {
                let slot = u32::try_from(slot).map_err(|_| {
                    PyValueError::new_err(format!("Worker(slot=...): expected a slot index >= 0, got {slot}"))
                })?;
                config = config.direct_slot(slot);
            }
            (None, Some(socket)) => config = config.agent_socket(socket),
            (None, None) => {}
        }
        config = config.priority(py_result(py, morpheus::validate_priority(priority))?);
        if let Some(escapable) = escapable {
            config = config.escapable(escapable);
        }
        // Registration may wait on the agent's socket: let other Python threads run meanwhile. The
        // closure runs on this thread, which is the one registered.
        let worker = py.detach(|| config.register().map(SendWorker));
        let worker = py_result(py, worker)?.0;
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        HELD.with(|held| *held.borrow_mut() = Some((token, worker)));
        Ok(Worker { token, thread_name: python_thread_name(py) })
    }

    /// Shut the worker down and free its slot (QUIESCING, DEAD, then the slot is released).
    /// Idempotent on its own thread; ``MorpheusError`` if the scheduler restarted meanwhile.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let worker = HELD.with(|held| {
            let mut held = held.borrow_mut();
            match &*held {
                Some((t, _)) if *t == self.token => held.take().map(|(_, w)| w),
                _ => None,
            }
        });
        match worker {
            Some(worker) => {
                let worker = SendWorker(worker);
                py_result(py, py.detach(move || worker.shutdown()))
            }
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc_info))]
    fn __exit__(&self, py: Python<'_>, _exc_info: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Whether this handle's registration is live on the calling thread.
    #[getter]
    fn registered(&self) -> bool {
        HELD.with(|held| matches!(&*held.borrow(), Some((t, _)) if *t == self.token))
    }

    /// Whether the worker drives an SCB of a live scheduler (False when detached, or once the
    /// scheduler stopped or was killed; True again once it registered with a new instance).
    #[getter]
    fn attached(&self, py: Python<'_>) -> PyResult<bool> {
        with_held(py, self.token, "attached", |w| Ok(w.is_attached()))
    }

    /// The slot index, or None when detached.
    #[getter]
    fn slot(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        with_held(py, self.token, "slot", |w| Ok(w.slot()))
    }

    /// The slot's ``slot_generation`` at registration.
    #[getter]
    fn slot_generation(&self, py: Python<'_>) -> PyResult<u32> {
        with_held(py, self.token, "slot_generation", |w| Ok(w.slot_generation()))
    }

    /// Why the worker runs detached from the start (``"NO_SCHEDULER"``, ``"FORCED_BY_ENVIRONMENT"``,
    /// ``"REQUESTED"``), or None.
    #[getter]
    fn detach_reason(&self, py: Python<'_>) -> PyResult<Option<&'static str>> {
        with_held(py, self.token, "detach_reason", |w| Ok(w.detach_reason().map(detach_reason_name)))
    }

    /// What exactly keeps the worker detached, when more than ``detach_reason`` says: a socket
    /// nobody accepts on, a retired region, a re-registration that failed. None otherwise.
    #[getter]
    fn detach_detail(&self, py: Python<'_>) -> PyResult<Option<String>> {
        with_held(py, self.token, "detach_detail", |w| Ok(w.detach_detail().map(str::to_owned)))
    }

    /// How many times the worker registered again on its own after the scheduler restarted.
    #[getter]
    fn reattachments(&self, py: Python<'_>) -> PyResult<u64> {
        with_held(py, self.token, "reattachments", |w| Ok(w.reattachments()))
    }

    /// Whether the worker waits for a scheduler (it stopped or restarted, or was not running at
    /// start-up): it registers again on its own at a checkpoint once a new instance is up.
    #[getter]
    fn waiting_for_scheduler(&self, py: Python<'_>) -> PyResult<bool> {
        with_held(py, self.token, "waiting_for_scheduler", |w| Ok(w.is_waiting_for_scheduler()))
    }

    /// The region, or None when detached.
    #[getter]
    fn region(&self, py: Python<'_>) -> PyResult<Option<Region>> {
        with_held(py, self.token, "region", |w| Ok(w.region().map(|r| Region { inner: r.clone() })))
    }

    /// Whether the scheduler may escalate this worker. Settable.
    #[getter]
    fn get_escapable(&self, py: Python<'_>) -> PyResult<bool> {
        with_held(py, self.token, "escapable", |w| Ok(w.escapable()))
    }

    #[setter]
    fn set_escapable(&self, py: Python<'_>, value: bool) -> PyResult<()> {
        with_held(py, self.token, "set_escapable", |w| match w.set_escapable(value) {
            // Detached: remembered, nothing to write (spec/SCB.md §7).
            Err(Error::Detached { .. }) => Ok(()),
            other => py_result(py, other),
        })
    }

    /// Advisory priority, -20 (most important) to 19. Settable.
    #[getter]
    fn get_priority(&self, py: Python<'_>) -> PyResult<i32> {
        with_held(py, self.token, "priority", |w| Ok(w.priority()))
    }

    #[setter]
    fn set_priority(&self, py: Python<'_>, value: i64) -> PyResult<()> {
        let value = py_result(py, morpheus::validate_priority(value))?;
        with_held(py, self.token, "set_priority", |w| match w.set_priority(value) {
            Err(Error::Detached { .. }) => Ok(()),
            other => py_result(py, other),
        })
    }

    /// The runtime mode: ``"DETERMINISTIC"``, ``"PRESSURED"`` or ``"DEFENSIVE"``.
    #[getter]
    fn runtime_mode(&self, py: Python<'_>) -> PyResult<&'static str> {
        with_held(py, self.token, "runtime_mode", |w| Ok(w.runtime_mode().name()))
    }

    /// The last acknowledged ``preempt_seq``.
    #[getter]
    fn acknowledged_seq(&self, py: Python<'_>) -> PyResult<u64> {
        with_held(py, self.token, "acknowledged_seq", |w| Ok(w.acknowledged_seq()))
    }

    /// The critical-section nesting depth of the worker's thread.
    #[getter]
    fn critical_depth(&self, py: Python<'_>) -> PyResult<u32> {
        with_held(py, self.token, "critical_depth", |w| Ok(w.critical_depth()))
    }

    /// Yields per reason (``{"PREEMPT_REQUEST": 3, ...}``), counted in the SDK's own memory.
    fn yield_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counts = with_held(py, self.token, "yield_counts", |w| Ok(w.yield_counts()))?;
        let out = PyDict::new(py);
        for reason in YieldReason::ALL.iter().copied().filter(|r| *r != YieldReason::None) {
            out.set_item(reason.name(), counts.get(reason))?;
        }
        Ok(out)
    }

    /// Raise if the worker lost its region: ``GenerationChangedError`` after a scheduler restart,
    /// ``DetachedError`` for a worker that never had one.
    fn status(&self, py: Python<'_>) -> PyResult<()> {
        with_held(py, self.token, "status", |w| py_result(py, w.status()))
    }

    /// The synchronous checkpoint, raising ``GenerationChangedError`` while a scheduler restart keeps
    /// the worker lost (``morpheus.checkpoint()`` returns False instead). Never raises for a worker
    /// that is detached (spec/SCB.md §7).
    fn checkpoint(&self, py: Python<'_>) -> PyResult<bool> {
        with_held(py, self.token, "checkpoint", |w| py_result(py, w.try_checkpoint()))
    }

    /// Record a yield the application made on its own (reason ``EXPLICIT``), acknowledging any
    /// pending request.
    fn record_explicit_yield(&self, py: Python<'_>) -> PyResult<()> {
        with_held(py, self.token, "record_explicit_yield", |w| py_result(py, w.record_explicit_yield()))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = HELD.with(|held| match &*held.borrow() {
            Some((t, w)) if *t == self.token => match (w.slot(), w.detach_reason()) {
                (Some(slot), _) => format!("slot {slot}"),
                (None, Some(reason)) => format!("detached: {}", detach_reason_name(reason)),
                (None, None) => "detached".to_owned(),
            },
            _ => "not registered on this thread".to_owned(),
        });
        let _ = py;
        format!("<morpheus.Worker of thread {:?}: {state}>", self.thread_name)
    }
}

/// Carries a worker into `py.detach` (which runs the closure on this same thread: the worker never
/// changes threads).
struct SendWorker(morpheus::Worker);
// SAFETY: only ever moved into a closure that `Python::detach` runs synchronously on the calling
// thread, the worker's own.
unsafe impl Send for SendWorker {}

impl SendWorker {
    fn shutdown(self) -> morpheus::Result<()> {
        self.0.shutdown()
    }
}

fn python_thread_name(py: Python<'_>) -> String {
    py.import("threading")
        .and_then(|t| t.call_method0("current_thread"))
        .and_then(|t| t.getattr("name"))
        .and_then(|n| n.extract())
        .unwrap_or_default()
}

/// The calling thread's worker registered through this module, or None.
#[pyfunction]
fn current_worker(py: Python<'_>) -> Option<Worker> {
    let token = HELD.with(|held| held.borrow().as_ref().map(|(token, _)| *token))?;
    Some(Worker { token, thread_name: python_thread_name(py) })
}

/// The ABI's default for ``escapable`` of a Python worker (False).
#[pyfunction]
fn escapable_default() -> bool {
    morpheus_abi::escapable_default(RuntimeKind::Python)
}

/// Where the core's notices about the scheduler's life go: the ``morpheus`` logger (INFO for "no
/// scheduler", WARNING for a dead socket, a lost worker, a re-registration).
fn python_notice(level: morpheus::NoticeLevel, message: &str) {
    Python::attach(|py| {
        let level = match level {
            morpheus::NoticeLevel::Info => 20,
            morpheus::NoticeLevel::Warning => 30,
        };
        let logged = py
            .import("logging")
            .and_then(|logging| logging.call_method1("getLogger", ("morpheus",)))
            .and_then(|logger| logger.call_method1("log", (level, message)));
        if let Err(err) = logged {
            err.write_unraisable(py, None);
        }
    });
}

/// Called by ``atexit``: the main thread's worker is released before the interpreter goes away
/// (thread-local destructors do not run for the main thread at process exit).
#[pyfunction]
fn _at_exit(py: Python<'_>) {
    let worker = HELD.with(|held| held.borrow_mut().take());
    if let Some((_, worker)) = worker {
        let worker = SendWorker(worker);
        let _ = py.detach(move || worker.shutdown());
    }
}

// ------------------------------------------------------------------------------------------------

#[pymodule]
fn _morpheus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("ABI_MAJOR", morpheus_abi::ABI_MAJOR)?;
    m.add("ABI_MINOR", morpheus_abi::ABI_MINOR)?;
    m.add("MorpheusError", py.get_type::<MorpheusError>())?;

    // ErrorCode: an IntEnum of the ABI's error codes, from the generated list.
    let members: Vec<(&str, u32)> = ErrorCode::ALL.iter().map(|c| (c.name(), c.raw())).collect();
    let enum_mod = py.import("enum")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("module", "morpheus")?;
    let error_code = enum_mod.getattr("IntEnum")?.call(("ErrorCode", members), Some(&kwargs))?;
    m.add("ErrorCode", &error_code)?;
    py.get_type::<MorpheusError>().setattr("code", py.None())?;

    let classes = PyDict::new(py);
    let mut error_classes = Vec::with_capacity(ErrorCode::ALL.len());
    for (index, code) in ErrorCode::ALL.iter().enumerate() {
        // Indexing by raw value - 1 relies on the ABI numbering codes 1, 2, 3, ... in order.
        assert_eq!(code.raw() as usize, index + 1, "error_code values are consecutive from 1");
        let name = class_name(*code);
        let dict = PyDict::new(py);
        dict.set_item("code", error_code.getattr(code.name())?)?;
        dict.set_item("__doc__", format!("{} (error_code {}): {}", code.name(), code.raw(), code.doc()))?;
        let qualified = std::ffi::CString::new(format!("morpheus.{name}")).expect("no NUL in a class name");
        // pyo3's new_type drops the Py it is given before the call: pass a second reference and keep
        // `dict` alive until the class exists.
        let class = PyErr::new_type(
            py,
            &qualified,
            None,
            Some(&py.get_type::<MorpheusError>()),
            Some(dict.clone().into_any().unbind()),
        )?;
        drop(dict);
        classes.set_item(&name, class.bind(py))?;
        m.add(name.as_str(), class.bind(py))?;
        error_classes.push(class);
    }
    m.add("ERROR_CLASSES", classes)?;

    let stop = py.get_type::<pyo3::exceptions::PyStopIteration>();
    let ready = Py::new(py, Checkpoint)?;
    let _ = STATICS.set(
        py,
        Statics {
            error_classes,
            stop_true: stop.call1((true,))?.unbind(),
            ready,
            running_loop: PyOnceLock::new(),
            current_task: PyOnceLock::new(),
            pass_callback: PyOnceLock::new(),
            keeper_callback: PyOnceLock::new(),
        },
    );

    m.add_class::<Checkpoint>()?;
    m.add_class::<PendingCheckpoint>()?;
    m.add_class::<Ticker>()?;
    m.add_class::<Region>()?;
    m.add_class::<Worker>()?;
    m.add_function(wrap_pyfunction!(checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_async, m)?)?;
    m.add_function(wrap_pyfunction!(critical_enter, m)?)?;
    m.add_function(wrap_pyfunction!(critical_exit, m)?)?;
    m.add_function(wrap_pyfunction!(critical_depth, m)?)?;
    m.add_function(wrap_pyfunction!(attach, m)?)?;
    m.add_function(wrap_pyfunction!(current_worker, m)?)?;
    m.add_function(wrap_pyfunction!(escapable_default, m)?)?;
    m.add_function(wrap_pyfunction!(_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(_pass, m)?)?;
    m.add_function(wrap_pyfunction!(_keeper, m)?)?;
    m.add_function(wrap_pyfunction!(_set_turn_clock, m)?)?;
    m.add_function(wrap_pyfunction!(_fast_path_view, m)?)?;
    m.add("YIELD_PASSES", YIELD_PASSES)?;
    m.add("LOOKS_PER_SLICE", LOOKS_PER_SLICE)?;
    py.import("atexit")?.call_method1("register", (m.getattr("_at_exit")?,))?;
    morpheus::set_notice_hook(Some(python_notice));
    Ok(())
}
