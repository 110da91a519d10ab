// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Awaitable checkpoints on asyncio and uvloop, and the loop side of the §5.7 rotation.
//!
//! The fast path stays inline here, as in every binding (one load in each language is the point):
//! [`checkpoint_awaitable`] asks the kit's rotation (`morpheus::kit::rotation`), which polls the
//! core's checkpoint once, and on the fast path hands back one pre-built, immutable [`Checkpoint`]
//! whose `__next__` finishes at once. Which task yields, when a request is acknowledged, how many
//! passes a yield lasts, which task is resumed and when a turn ends are the kit's rules; this file
//! only creates the futures tasks wait on, queues the loop callbacks (`_pass`, `_keeper`) and tells
//! the kit what it can see of the loop (the current task, whether the loop has other work).

use std::{
    cell::RefCell,
    pin::Pin,
    future::Future,
    sync::atomic::{AtomicU32, Ordering},
    task::{Context, Poll, Waker},
};

use morpheus::kit::rotation::{Pass, Rotation, Seen, Step};
use pyo3::{exceptions::PyValueError, prelude::*, sync::PyOnceLock};

use crate::statics;

/// The loop a rotation belongs to, and its ready queue where the loop exposes it (asyncio's
/// `BaseEventLoop._ready`; None for other loops, uvloop).
type LoopSide = Option<(Py<PyAny>, Option<Py<PyAny>>)>;

thread_local! {
    /// The rotation of the loop running on this thread (one at a time).
    static ROTATION: RefCell<Rotation<Py<PyAny>>> = const { RefCell::new(Rotation::new()) };
    /// The loop the rotation belongs to, with its ready queue.
    static LOOP: RefCell<LoopSide> = const { RefCell::new(None) };
}

fn ready(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(statics(py).ready.clone_ref(py).into_any())
}

#[inline(always)]
pub(crate) fn checkpoint_awaitable(py: Python<'_>) -> PyResult<Py<PyAny>> {
    match ROTATION.with(|r| r.borrow().checkpoint()) {
        Step::Continue => ready(py),
        Step::StepAside { turn_over } => step_aside(py, turn_over),
        Step::Request(request) => take_turn(py, request),
    }
}

/// Tests only: measure this thread's turns with a clock the caller sets (ns), or with the thread's
/// CPU time and the wall clock again (None).
#[pyfunction]
pub(crate) fn _set_turn_clock(ns: Option<u64>) {
    ROTATION.with(|r| r.borrow_mut().set_clock(ns));
}

/// Tests only: what the calling thread's next checkpoint compares, `(loaded, cached)`
/// (`morpheus::kit::fast_path_view`): a test orders its events by this, not by time.
#[pyfunction]
pub(crate) fn _fast_path_view() -> (u64, u64) {
    morpheus::kit::fast_path_view()
}

fn running_loop<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let get = statics(py).running_loop.get_or_try_init(py, || py.import("asyncio")?.getattr("_get_running_loop").map(Bound::unbind))?;
    get.bind(py).call0()
}

fn current_task<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let get = statics(py).current_task.get_or_try_init(py, || py.import("asyncio")?.getattr("current_task").map(Bound::unbind))?;
    get.bind(py).call0()
}

fn same_loop(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> bool {
    LOOP.with(|l| l.borrow().as_ref().is_some_and(|(current, _)| current.bind(py).is(event_loop)))
}

fn ready_queue(py: Python<'_>) -> Option<Py<PyAny>> {
    LOOP.with(|l| l.borrow().as_ref().and_then(|(_, queue)| queue.as_ref().map(|q| q.clone_ref(py))))
}

fn queue_pass(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
    let pass = callback(py, &statics(py).pass_callback, "_pass")?;
    event_loop.call_method1("call_soon", (pass, event_loop)).map(drop)
}

fn pending(py: Python<'_>, future: Option<morpheus::Checkpoint>, waiter: Option<Bound<'_, PyAny>>, result: bool) -> PyResult<Py<PyAny>> {
    let waiter = waiter.map(Bound::unbind);
    Ok(Py::new(py, PendingCheckpoint { future, waiter, suspended: false, result })?.into_any())
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
/// triggered, so the loop's own poll still sees it). A few microseconds, a few times per slice of wall time,
/// against the tens a yield costs: on a loaded host the slice of wall time holds little CPU, and a
/// turn ended for nothing would make yields as frequent, per unit of work, as that host is loaded.
/// Other loops (uvloop) show none of this: their timed turns always end. Anything unexpected counts
/// as work.
fn loop_has_work(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> bool {
    let Some(ready_queue) = ready_queue(py) else { return true };
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


/// A checkpoint saw a request: the kit says whether this task is its yielder (then it waits on a new
/// future of the loop for its turn) or another task already serves it.
fn take_turn(py: Python<'_>, request: morpheus::Checkpoint) -> PyResult<Py<PyAny>> {
    let event_loop = running_loop(py)?;
    if event_loop.is_none() {
        // A coroutine driven by hand: yield a bare None once, acknowledge on resumption.
        return pending(py, Some(request), None, true);
    }
    if !same_loop(py, &event_loop) {
        let queue = asyncio_ready_queue(py, &event_loop)?;
        let can_look = queue.is_some();
        LOOP.with(|l| *l.borrow_mut() = Some((event_loop.clone().unbind(), queue)));
        ROTATION.with(|r| r.borrow_mut().reset(can_look));
    }
    let request = match ROTATION.with(|r| r.borrow_mut().see_request(request)) {
        Seen::Yielder(request) => request,
        Seen::Served { step_aside: true } => return step_aside(py, false),
        Seen::Served { step_aside: false } => return ready(py),
    };
    let waiter = event_loop.call_method0("create_future")?;
    let task = current_task(py)?.as_ptr() as usize;
    if ROTATION.with(|r| r.borrow_mut().push_yielder(waiter.clone().unbind(), task, request)) {
        queue_pass(py, &event_loop)?;
    }
    pending(py, None, Some(waiter), true)
}

/// A task's step is over without a request (`Step::StepAside`): it waits on a new future for its
/// turn and evaluates to None then, unless it is not this loop's, a critical section holds it, or its
/// timed turn is over and the kit lets it carry on (`Rotation::carry_on`: the loop has nothing else
/// to run and, once the slice is over, no task waits in the rotation).
fn step_aside(py: Python<'_>, turn_over: bool) -> PyResult<Py<PyAny>> {
    let event_loop = running_loop(py)?;
    let task = if event_loop.is_none() { event_loop.clone() } else { current_task(py)? };
    if task.is_none() || !same_loop(py, &event_loop) {
        ROTATION.with(|r| r.borrow_mut().leave());
        return ready(py);
    }
    if !ROTATION.with(|r| r.borrow().may_step_aside()) {
        return ready(py);
    }
    if turn_over && ROTATION.with(|r| r.borrow_mut().carry_on(loop_has_work(py, &event_loop))) {
        return ready(py);
    }
    let waiter = event_loop.call_method0("create_future")?;
    if ROTATION.with(|r| r.borrow_mut().push_aside(waiter.clone().unbind(), task.as_ptr() as usize, turn_over)) {
        queue_pass(py, &event_loop)?;
    }
    pending(py, None, Some(waiter), false)
}

/// One pass of a yield (a loop callback queued behind the loop's poll). On asyncio it runs first in
/// its iteration: nothing queued behind it means the loop is idle but for the rotation.
#[pyfunction]
pub(crate) fn _pass(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
    let idle = match ready_queue(py) {
        Some(queue) => queue.bind(py).len()? == 0,
        None => false,
    };
    match ROTATION.with(|r| r.borrow_mut().pass(idle)) {
        Pass::Again => queue_pass(py, event_loop),
        Pass::Resume => resume_head(py, event_loop),
    }
}

/// Resume the task the kit chooses (skipping cancelled ones), with a keeper queued behind its step.
fn resume_head(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<()> {
    if !same_loop(py, event_loop) {
        ROTATION.with(|r| r.borrow_mut().stop_timing());
        return Ok(());
    }
    while let Some(next) = ROTATION.with(|r| r.borrow_mut().take_next()) {
        let future = next.waiter.bind(py);
        if future.call_method0("done")?.is_truthy()? {
            continue; // cancelled meanwhile
        }
        future.call_method1("set_result", (true,))?;
        let turns = ROTATION.with(|r| r.borrow_mut().resumed(&next));
        let keeper = callback(py, &statics(py).keeper_callback, "_keeper")?;
        event_loop.call_method1("call_soon", (keeper, event_loop, turns))?;
        break;
    }
    Ok(())
}

/// Runs after a resumed task's step: if it gave control back other than by a yield, the next one is
/// resumed (nobody waits forever, §5.7).
#[pyfunction]
pub(crate) fn _keeper(py: Python<'_>, event_loop: &Bound<'_, PyAny>, turns: u64) -> PyResult<()> {
    if ROTATION.with(|r| r.borrow().idle_since(turns)) {
        resume_head(py, event_loop)?;
    }
    Ok(())
}

/// A checkpoint that found nothing to do: awaiting it finishes at once with None. One immutable
/// instance serves every such checkpoint of the process.
#[pyclass(module = "morpheus", frozen)]
pub(crate) struct Checkpoint;

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
pub(crate) struct PendingCheckpoint {
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
pub(crate) struct Ticker {
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
