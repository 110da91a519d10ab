// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Regions and workers: handles that are safe to hold from any thread. The worker itself is the
//! kit's (`morpheus::kit::thread`), named by a token; the options are validated by the kit
//! (`morpheus::kit::options`). This file translates types.

use std::{path::PathBuf, sync::Arc};

use morpheus::{
    kit::{
        options::{OptionError, Options, RegionChoice},
        thread,
    },
    Error, RuntimeKind, YieldReason,
};
use pyo3::{
    exceptions::{PyTypeError, PyValueError},
    prelude::*,
    types::PyDict,
};

use crate::{py_result, to_py};

// ------------------------------------------------------------------------------------------------
// Regions

/// A validated, mapped region (spec/SCB.md §1). Get one with :func:`morpheus.attach`.
#[pyclass(module = "morpheus", frozen)]
pub(crate) struct Region {
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
pub(crate) fn attach(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Option<Region>> {
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

fn with_held<T>(py: Python<'_>, token: u64, operation: &'static str, f: impl FnOnce(&morpheus::Worker) -> PyResult<T>) -> PyResult<T> {
    py_result(py, thread::with(token, operation, f))?
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
pub(crate) struct Worker {
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
        let region = match region {
            None => None,
            Some(region) => Some(if let Ok(region) = region.cast::<Region>() {
                RegionChoice::Region(region.get().inner.clone())
            } else if let Ok(path) = region.extract::<PathBuf>() {
                RegionChoice::Path(path)
            } else {
                let kind = region.get_type().name()?;
                return Err(PyTypeError::new_err(format!("Worker(region=...): expected a path or a morpheus.Region, got {kind}")));
            }),
        };
        let options = Options { region, detached, slot, socket, escapable, priority: Some(priority) };
        let config = options.config(RuntimeKind::Python).map_err(|err| match err {
            OptionError::Core(err) => to_py(py, err),
            OptionError::SlotOutOfRange { .. } => PyValueError::new_err(format!("Worker(slot=...): {err}")),
            OptionError::Conflict { .. } => PyValueError::new_err(format!("Worker(): {err}")),
        })?;
        // Registration may wait on the agent's socket: let other Python threads run meanwhile. The
        // closure runs on this thread, which is the one registered.
        let token = py_result(py, py.detach(|| thread::register(&config)))?;
        Ok(Worker { token, thread_name: python_thread_name(py) })
    }

    /// Shut the worker down and free its slot (QUIESCING, DEAD, then the slot is released).
    /// Idempotent on its own thread; ``MorpheusError`` if the scheduler restarted meanwhile.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py_result(py, py.detach(|| thread::close(self.token))).map(drop)
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
        thread::holds(self.token)
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
        let state = thread::with(self.token, "repr", |w| match (w.slot(), w.detach_reason()) {
            (Some(slot), _) => format!("slot {slot}"),
            (None, Some(reason)) => format!("detached: {}", detach_reason_name(reason)),
            (None, None) => "detached".to_owned(),
        });
        let state = state.unwrap_or_else(|_| "not registered on this thread".to_owned());
        let _ = py;
        format!("<morpheus.Worker of thread {:?}: {state}>", self.thread_name)
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
pub(crate) fn current_worker(py: Python<'_>) -> Option<Worker> {
    let token = thread::current()?;
    Some(Worker { token, thread_name: python_thread_name(py) })
}
