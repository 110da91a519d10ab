// SPDX-License-Identifier: Apache-2.0 OR MIT
//! `morpheus._morpheus`: the Python face of the Rust SDK (`sdk-rust`, crate `morpheus`).
//!
//! Nothing of the protocol or of its policy is written here: checkpoints, critical sections,
//! registration and attaching are the core's; the §5.7 rotation, the thread's worker, the options'
//! rules and the fast-path view are the binding kit's (`morpheus::kit`). This crate translates types
//! and drives the event loop:
//!
//! * `aio`: an awaitable checkpoint that costs no allocation and no event-loop round trip when
//!   nothing is pending (one pre-built, immutable `Checkpoint` whose `__next__` finishes at once; the
//!   one load of the fast path stays inline, as in every binding), and the loop callbacks that drive
//!   the kit's rotation on asyncio and uvloop;
//! * `worker`: handles for workers and regions that are safe to hold from any thread;
//! * here: exception classes, one per ABI `error_code`, built from the generated ABI at import, and
//!   the module.

mod aio;
mod worker;

use morpheus::{Error, ErrorCode, RuntimeKind};
use pyo3::{
    create_exception,
    exceptions::PyException,
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
pub(crate) struct Statics {
    /// Exception class per `ErrorCode`, indexed by `code.raw() - 1`.
    pub(crate) error_classes: Vec<Py<PyType>>,
    /// `StopIteration(True)`: raised, never built, when a pending checkpoint finishes.
    pub(crate) stop_true: Py<PyAny>,
    /// The completed checkpoint every fast-path `checkpoint_async()` returns.
    pub(crate) ready: Py<aio::Checkpoint>,
    /// `asyncio._get_running_loop` (None outside a loop, no exception), imported at the first yield.
    pub(crate) running_loop: PyOnceLock<Py<PyAny>>,
    /// `asyncio.current_task`, imported at the first yield.
    pub(crate) current_task: PyOnceLock<Py<PyAny>>,
    /// `_morpheus._pass` and `_morpheus._keeper`, the loop callbacks of the rotation (see `aio`).
    pub(crate) pass_callback: PyOnceLock<Py<PyAny>>,
    pub(crate) keeper_callback: PyOnceLock<Py<PyAny>>,
}

static STATICS: PyOnceLock<Statics> = PyOnceLock::new();

pub(crate) fn statics(py: Python<'_>) -> &Statics {
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
pub(crate) fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let code = err.code();
    let class = statics(py).error_classes[code.raw() as usize - 1].bind(py);
    match class.call1((err.to_string(),)) {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}

pub(crate) fn py_result<T>(py: Python<'_>, result: morpheus::Result<T>) -> PyResult<T> {
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
    aio::checkpoint_awaitable(py)
}

// ------------------------------------------------------------------------------------------------
// Critical sections

/// Enter a critical section on the calling thread (prefer ``with morpheus.critical():``).
#[pyfunction]
fn critical_enter() {
    morpheus::kit::critical_enter();
}

/// Exit a critical section; ``NotInCriticalError`` without a matching enter (nothing is written).
#[pyfunction]
fn critical_exit(py: Python<'_>) -> PyResult<()> {
    py_result(py, morpheus::kit::critical_exit().map(|_depth| ()))
}

/// The calling thread's critical-section nesting depth.
#[pyfunction]
fn critical_depth() -> u32 {
    morpheus::kit::critical_depth()
}

/// Tests only: time the calling thread's runtime-mode rules (spec/SCB.md §5.4) by a clock the caller
/// sets (ns), or by CLOCK_MONOTONIC again (None).
#[pyfunction]
fn _set_mode_clock(ns: Option<u64>) {
    morpheus::kit::set_mode_clock(ns);
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
/// Called by ``atexit``: the main thread's worker is released before the interpreter goes away
/// (thread-local destructors do not run for the main thread at process exit).
#[pyfunction]
fn _at_exit(py: Python<'_>) {
    let _ = py.detach(morpheus::kit::thread::close_current);
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
    let ready = Py::new(py, aio::Checkpoint)?;
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

    m.add_class::<aio::Checkpoint>()?;
    m.add_class::<aio::PendingCheckpoint>()?;
    m.add_class::<aio::Ticker>()?;
    m.add_class::<worker::Region>()?;
    m.add_class::<worker::Worker>()?;
    m.add_function(wrap_pyfunction!(checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(checkpoint_async, m)?)?;
    m.add_function(wrap_pyfunction!(critical_enter, m)?)?;
    m.add_function(wrap_pyfunction!(critical_exit, m)?)?;
    m.add_function(wrap_pyfunction!(critical_depth, m)?)?;
    m.add_function(wrap_pyfunction!(worker::attach, m)?)?;
    m.add_function(wrap_pyfunction!(worker::current_worker, m)?)?;
    m.add_function(wrap_pyfunction!(escapable_default, m)?)?;
    m.add_function(wrap_pyfunction!(_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(aio::_pass, m)?)?;
    m.add_function(wrap_pyfunction!(aio::_keeper, m)?)?;
    m.add_function(wrap_pyfunction!(aio::_set_turn_clock, m)?)?;
    m.add_function(wrap_pyfunction!(_set_mode_clock, m)?)?;
    m.add_function(wrap_pyfunction!(aio::_fast_path_view, m)?)?;
    m.add("YIELD_PASSES", morpheus::kit::rotation::YIELD_PASSES)?;
    m.add("LOOKS_PER_SLICE", morpheus::kit::rotation::LOOKS_PER_SLICE)?;
    py.import("atexit")?.call_method1("register", (m.getattr("_at_exit")?,))?;
    morpheus::set_notice_hook(Some(python_notice));
    Ok(())
}
