// SPDX-License-Identifier: Apache-2.0 OR MIT
//! libmorpheus: the C face of the Morpheus runtime SDK.
//!
//! Every function here is a thin wrapper over the Rust crate `morpheus`: the option rules and the
//! thread's worker are the binding kit's (`morpheus::kit::options`, `morpheus::kit::thread`), as they
//! are for every other binding, and this library translates C types to the kit's and its results back;
//! `morpheus::raw` gives the per-thread struct the inline fast paths read. `include/morpheus.h` is
//! generated from this file (and the `RawWorker` struct of `morpheus`) by cbindgen; the fast paths
//! (checkpoint, critical enter/exit) are `static inline` in `include/morpheus_inline.h` and call into
//! this library only on their slow paths.
//!
//! Conventions: functions returning `int` return 0 (or a non-negative value they document) on success
//! and a negated `MORPHEUS_E_*` code on failure; `morpheus_last_error()` then describes the failure.

#![allow(clippy::missing_safety_doc)]

use std::{
    cell::RefCell,
    ffi::{c_char, CStr, CString},
    os::unix::ffi::OsStrExt,
    path::PathBuf,
    sync::atomic::{AtomicU32, Ordering},
};

use morpheus::{
    kit::{
        options::{Options, RegionChoice},
        thread,
    },
    raw::{check_generation_raw, checkpoint_slow, critical_enter_raw, critical_exit_raw, current_raw, RawWorker},
    region::discover,
    Discovered, Error, ErrorCode, Region, RuntimeKind, YieldReason,
};

/// Options of `morpheus_worker_register()`. Initialise with `morpheus_options_init()`, then change
/// what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MorpheusOptions {
    /// `sizeof(struct morpheus_options)` of the caller, so the struct can grow (set by
    /// `morpheus_options_init`).
    pub size: u32,
    /// A slot to register directly (no agent: tests and harnesses), or -1 to use the agent. A slot with
    /// a `socket_path` is refused with -MORPHEUS_E_INVALID_ARGUMENT naming both (nothing is written).
    pub direct_slot: i32,
    /// Region to map; NULL discovers it (MORPHEUS_REGION, pinned map, sim file); "" runs detached.
    pub region_path: *const c_char,
    /// Agent socket; NULL uses MORPHEUS_SOCKET or the default path.
    pub socket_path: *const c_char,
    /// 1 lets the scheduler escalate the worker, 0 forbids it, -1 takes the C default.
    pub escapable: i32,
    /// Advisory priority, -20 (most important) to 19; outside that range registration fails with
    /// -MORPHEUS_E_INVALID_ARGUMENT (never clamped).
    pub priority: i32,
    /// `MORPHEUS_RUNTIME_KIND_*` stored in the SCB and keying the `escapable` default; 0 (or a caller
    /// whose `size` ends before this field) means C. Bindings built on libmorpheus (Java's FFM) set theirs.
    pub runtime_kind: u32,
}

/// Version of `struct morpheus_worker`'s layout this library was built with: the spec's (record `worker`
/// of spec/abi.toml), which `morpheus_abi.h` defines as `MORPHEUS_WORKER_LAYOUT_VERSION` and
/// `morpheus_inline.h` reports to the library at load time (`morpheus_worker_layout_check`).
const WORKER_LAYOUT_VERSION: u32 = morpheus::raw::WORKER_LAYOUT_VERSION;

/// The layout version a program compiled against another `morpheus.h` reported, 0 if none did.
static FOREIGN_LAYOUT: AtomicU32 = AtomicU32::new(0);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail_with(code: ErrorCode, text: String) -> i32 {
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    -(code.raw() as i32)
}

fn fail(err: Error) -> i32 {
    fail_with(err.code(), err.to_string())
}

fn status(result: Result<(), Error>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(err) => fail(err),
    }
}

/// Check that `w` is the calling thread's state and the thread holds a worker registered here (the
/// kit's); returns that registration's token.
fn own(w: *mut RawWorker, operation: &'static str) -> Result<u64, Error> {
    match thread::current() {
        Some(token) if !w.is_null() && w == current_raw() => Ok(token),
        _ => Err(Error::NotRegistered { operation }),
    }
}

/// Check `w` is the calling thread's state, worker or not (what critical sections need, §5.3).
unsafe fn own_thread(w: *mut RawWorker, operation: &'static str) -> Result<(), Error> {
    if w.is_null() || w != current_raw() {
        return Err(Error::NotRegistered { operation });
    }
    Ok(())
}

/// Run `f` on the calling thread's worker after checking `w` is it.
fn with_worker<R>(w: *mut RawWorker, operation: &'static str, f: impl FnOnce(&morpheus::Worker) -> R) -> Result<R, Error> {
    thread::with(own(w, operation)?, operation, f)
}

fn c_path(ptr: *const c_char) -> Option<PathBuf> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

/// Fill `opts` with the defaults: discover the region, register through the agent, the C default for
/// `escapable`, priority 0.
#[no_mangle]
pub unsafe extern "C" fn morpheus_options_init(opts: *mut MorpheusOptions) {
    if opts.is_null() {
        return;
    }
    *opts = MorpheusOptions {
        size: std::mem::size_of::<MorpheusOptions>() as u32,
        direct_slot: -1,
        region_path: std::ptr::null(),
        socket_path: std::ptr::null(),
        escapable: -1,
        priority: 0,
        runtime_kind: RuntimeKind::C.raw(),
    };
}

/// Byte offset of a field of `struct morpheus_worker` or `struct morpheus_options`, named
/// `"morpheus_worker.cached_ack"`, or the size of the struct, named `"morpheus_worker"`; -1 for an
/// unknown name. For bindings that reach these structs without a C compiler (the JVM's FFM), so that
/// they ask the library for its layout instead of copying it. The worker's fields are the spec's
/// (record `worker`, `morpheus_abi::FIELD_LAYOUT`), which `RawWorker` is asserted to match.
#[no_mangle]
pub unsafe extern "C" fn morpheus_layout_offset(name: *const c_char) -> i64 {
    use std::mem::{offset_of, size_of};
    if name.is_null() {
        return -1;
    }
    let name = CStr::from_ptr(name).to_bytes();
    if let Some(field) = name.strip_prefix(b"morpheus_worker.") {
        return morpheus_abi::FIELD_LAYOUT
            .iter()
            .find(|f| f.record == "worker" && f.field.as_bytes() == field)
            .map_or(-1, |f| f.offset as i64);
    }
    let offset = match name {
        b"morpheus_worker" => size_of::<RawWorker>(),
        b"morpheus_options" => size_of::<MorpheusOptions>(),
        b"morpheus_options.size" => offset_of!(MorpheusOptions, size),
        b"morpheus_options.direct_slot" => offset_of!(MorpheusOptions, direct_slot),
        b"morpheus_options.region_path" => offset_of!(MorpheusOptions, region_path),
        b"morpheus_options.socket_path" => offset_of!(MorpheusOptions, socket_path),
        b"morpheus_options.escapable" => offset_of!(MorpheusOptions, escapable),
        b"morpheus_options.priority" => offset_of!(MorpheusOptions, priority),
        b"morpheus_options.runtime_kind" => offset_of!(MorpheusOptions, runtime_kind),
        _ => return -1,
    };
    offset as i64
}

/// Validate a region without registering: map it as `morpheus_worker_register()` would, run the
/// header checks of spec/SCB.md §1.3 in their order, and unmap it. Writes nothing to the region.
///
/// `path` is a region file or a pinned map on bpffs; NULL discovers the region as registration does
/// (MORPHEUS_REGION, the pinned map, the sim file); "" is detached mode.
/// Returns 0 for a region a worker can attach to; 1 when there is no region (`path` is "", or
/// discovery found none or was told "" by MORPHEUS_REGION): a worker would run detached; or the first
/// failed check as a negated `MORPHEUS_E_*` (`BAD_MAGIC`, `ABI_MAJOR_MISMATCH`, `BAD_LAYOUT`,
/// `REGION_TRUNCATED`, `UNKNOWN_REQUIRED_FEATURE`, `NOT_READY`; `IO` if it cannot be opened), with
/// `morpheus_last_error()` naming what was expected and what was found.
#[no_mangle]
pub unsafe extern "C" fn morpheus_region_check(path: *const c_char) -> i32 {
    let checked = match c_path(path) {
        Some(path) if path.as_os_str().is_empty() => return 1,
        Some(path) => Region::open(path).map(|_| 0),
        None => discover().map(|found| match found {
            Discovered::Attached(_) => 0,
            Discovered::Detached(_) => 1,
        }),
    };
    // The mapping is dropped here: nothing of the region stays mapped by a check.
    checked.unwrap_or_else(fail)
}

/// Called by `morpheus_inline.h` when a program that includes it is loaded, with the
/// `MORPHEUS_WORKER_LAYOUT_VERSION` the program was compiled with. Returns 0 if this library lays out
/// `struct morpheus_worker` the same way; otherwise -MORPHEUS_E_UNSUPPORTED_PLATFORM, and every later
/// `morpheus_worker_register()` fails the same way (the program's inline fast paths would read the
/// library's worker at the wrong offsets).
#[no_mangle]
pub extern "C" fn morpheus_worker_layout_check(program_layout_version: u32) -> i32 {
    if program_layout_version == WORKER_LAYOUT_VERSION {
        return 0;
    }
    FOREIGN_LAYOUT.store(program_layout_version, Ordering::Relaxed);
    fail(layout_mismatch(program_layout_version))
}

fn layout_mismatch(program: u32) -> Error {
    Error::UnsupportedPlatform {
        detail: format!(
            "the program was compiled with struct morpheus_worker layout {program}, this libmorpheus has layout \
             {WORKER_LAYOUT_VERSION}: rebuild the program against this library's morpheus.h"
        ),
    }
}

/// Register the calling thread as a worker and store its handle in `*out`. `opts` may be NULL
/// (defaults). With no scheduler running, the worker is detached: checkpoints never yield.
/// Returns 0, or a negated `MORPHEUS_E_*`: `INVALID_ARGUMENT` for options that break the SDK's option
/// rules (a `direct_slot` with a `socket_path`, a priority out of range; nothing is written),
/// `ALREADY_REGISTERED` if the thread holds a worker.
/// The handle belongs to the calling thread; release it with `morpheus_worker_unregister()` (a
/// thread that exits without doing so releases it on exit).
#[no_mangle]
pub unsafe extern "C" fn morpheus_worker_register(opts: *const MorpheusOptions, out: *mut *mut RawWorker) -> i32 {
    match FOREIGN_LAYOUT.load(Ordering::Relaxed) {
        0 => {}
        program => return fail(layout_mismatch(program)),
    }
    let mut defaults = std::mem::zeroed::<MorpheusOptions>();
    morpheus_options_init(&mut defaults);
    let opts = if opts.is_null() {
        defaults
    } else {
        // Only the bytes the caller's struct has (its `size`); later fields keep their defaults.
        let known = ((*opts).size as usize).min(std::mem::size_of::<MorpheusOptions>());
        std::ptr::copy_nonoverlapping(opts as *const u8, &mut defaults as *mut MorpheusOptions as *mut u8, known);
        defaults.size = std::mem::size_of::<MorpheusOptions>() as u32;
        defaults
    };
    let kind = match opts.runtime_kind {
        0 => RuntimeKind::C,
        raw => match RuntimeKind::try_from(raw) {
            Ok(kind) => kind,
            Err(_) => {
                let text = format!("morpheus_options.runtime_kind: expected a MORPHEUS_RUNTIME_KIND_* value, found {raw}");
                return fail_with(ErrorCode::InvalidArgument, text);
            }
        },
    };
    // C's encodings to the kit's options; the kit's rules decide what they mean together.
    let region = c_path(opts.region_path);
    let options = Options {
        detached: region.as_ref().is_some_and(|path| path.as_os_str().is_empty()),
        region: region.filter(|path| !path.as_os_str().is_empty()).map(RegionChoice::Path),
        slot: (opts.direct_slot >= 0).then_some(i64::from(opts.direct_slot)),
        socket: c_path(opts.socket_path),
        escapable: match opts.escapable {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        },
        priority: Some(i64::from(opts.priority)),
    };
    let config = match options.config(kind) {
        Ok(config) => config,
        Err(err) => return fail_with(err.code(), format!("morpheus_worker_register: {err}")),
    };
    match thread::register(&config) {
        Ok(_) => {
            if !out.is_null() {
                *out = current_raw();
            }
            0
        }
        Err(err) => fail(err),
    }
}

/// Shut the worker down (QUIESCING, DEAD, release the slot). `w` must be the calling thread's.
#[no_mangle]
pub unsafe extern "C" fn morpheus_worker_unregister(w: *mut RawWorker) -> i32 {
    match own(w, "morpheus_worker_unregister").and_then(thread::close) {
        Ok(_) => 0,
        Err(err) => fail(err),
    }
}

/// The calling thread's fast-path state, never NULL: its worker once registered, and before that the
/// detached state that only counts critical-section depth. The depth belongs to the thread (SCB.md
/// §5.3): `morpheus_critical_enter(morpheus_thread())` before registering carries into the worker,
/// which then starts with `in_critical = 1`. Other calls that need a worker report NOT_REGISTERED on it.
#[no_mangle]
pub extern "C" fn morpheus_thread() -> *mut RawWorker {
    current_raw()
}

/// The calling thread's worker, or NULL if it holds none.
#[no_mangle]
pub extern "C" fn morpheus_worker_current() -> *mut RawWorker {
    match thread::current() {
        Some(_) => current_raw(),
        None => std::ptr::null_mut(),
    }
}

/// Slow path of the inline checkpoint (`morpheus_checkpoint`): called when `preempt_seq` (read as
/// `seq`) differs from `cached_ack`. Returns true when the caller must yield now.
#[no_mangle]
pub unsafe extern "C" fn morpheus_checkpoint_slow(w: *mut RawWorker, seq: u64) -> bool {
    if own(w, "morpheus_checkpoint_slow").is_err() {
        return false;
    }
    checkpoint_slow(w, seq)
}

/// Out-of-line checkpoint: 1 = yield now, 0 = carry on, `-MORPHEUS_E_GENERATION_CHANGED` once a
/// scheduler restart has detached the worker, `-MORPHEUS_E_NOT_REGISTERED` for a foreign handle.
#[no_mangle]
pub unsafe extern "C" fn morpheus_checkpoint_call(w: *mut RawWorker) -> i32 {
    match with_worker(w, "morpheus_checkpoint_call", |worker| worker.try_checkpoint()) {
        Ok(Ok(yielded)) => yielded as i32,
        Ok(Err(Error::Detached { .. })) => 0,
        Ok(Err(err)) | Err(err) => fail(err),
    }
}

/// Called by the inline critical-section functions when they find the generation changed: checks
/// again and detaches the worker (writing nothing) if it did change.
#[no_mangle]
pub unsafe extern "C" fn morpheus_worker_lost(w: *mut RawWorker) {
    if own(w, "morpheus_worker_lost").is_ok() {
        check_generation_raw(w);
    }
}

/// Out-of-line critical enter (same effect as the inline `morpheus_critical_enter`).
#[no_mangle]
pub unsafe extern "C" fn morpheus_critical_enter_call(w: *mut RawWorker) -> i32 {
    if let Err(err) = own_thread(w, "morpheus_critical_enter_call") {
        return fail(err);
    }
    critical_enter_raw(w);
    0
}

/// Out-of-line critical exit: `-MORPHEUS_E_NOT_IN_CRITICAL` (writing nothing) without a matching enter.
#[no_mangle]
pub unsafe extern "C" fn morpheus_critical_exit_call(w: *mut RawWorker) -> i32 {
    if let Err(err) = own_thread(w, "morpheus_critical_exit_call") {
        return fail(err);
    }
    status(critical_exit_raw(w))
}

/// 0 while attached to a live region; `-MORPHEUS_E_DETACHED` for a worker without a region;
/// `-MORPHEUS_E_GENERATION_CHANGED` once a scheduler restart detached it.
#[no_mangle]
pub unsafe extern "C" fn morpheus_worker_status(w: *mut RawWorker) -> i32 {
    match with_worker(w, "morpheus_worker_status", |worker| worker.status()) {
        Ok(result) => status(result),
        Err(err) => fail(err),
    }
}

/// Slot index, or -1 when detached (or `w` is not the calling thread's worker).
#[no_mangle]
pub unsafe extern "C" fn morpheus_worker_slot(w: *mut RawWorker) -> i64 {
    with_worker(w, "morpheus_worker_slot", |worker| worker.slot().map_or(-1, i64::from)).unwrap_or(-1)
}

/// Opt in to (true) or out of (false) escalation.
#[no_mangle]
pub unsafe extern "C" fn morpheus_set_escapable(w: *mut RawWorker, escapable: bool) -> i32 {
    match with_worker(w, "morpheus_set_escapable", |worker| worker.set_escapable(escapable)) {
        Ok(result) => status(result),
        Err(err) => fail(err),
    }
}

/// Whether the worker accepts escalation, as the SDK believes it: the value it stored in the SCB (the
/// C default `MORPHEUS_ESCAPABLE_DEFAULT_C` unless `morpheus_options.escapable` or
/// `morpheus_set_escapable()` changed it); for a detached worker, the configured value.
/// Returns 1 or 0, or `-MORPHEUS_E_NOT_REGISTERED` if `w` is not the calling thread's worker.
#[no_mangle]
pub unsafe extern "C" fn morpheus_escapable(w: *const RawWorker) -> i32 {
    match with_worker(w as *mut RawWorker, "morpheus_escapable", |worker| worker.escapable()) {
        Ok(escapable) => escapable as i32,
        Err(err) => fail(err),
    }
}

/// Store the worker's advisory priority in `*out`, as the SDK believes it (the value it stored in the
/// SCB; for a detached worker, the configured value). Returns 0, or
/// `-MORPHEUS_E_NOT_REGISTERED` if `w` is not the calling thread's worker. (The priority itself can be
/// negative, hence the out parameter.)
#[no_mangle]
pub unsafe extern "C" fn morpheus_priority(w: *const RawWorker, out: *mut i32) -> i32 {
    match with_worker(w as *mut RawWorker, "morpheus_priority", |worker| worker.priority()) {
        Ok(priority) => {
            if !out.is_null() {
                *out = priority;
            }
            0
        }
        Err(err) => fail(err),
    }
}

/// Set the advisory priority (-20 .. 19). Outside that range: -MORPHEUS_E_INVALID_ARGUMENT, writing
/// nothing (never clamped).
#[no_mangle]
pub unsafe extern "C" fn morpheus_set_priority(w: *mut RawWorker, priority: i32) -> i32 {
    match with_worker(w, "morpheus_set_priority", |worker| worker.set_priority(priority)) {
        Ok(result) => status(result),
        Err(err) => fail(err),
    }
}

/// Store the scheduler's `budget_remaining_ns` in `*out`.
#[no_mangle]
pub unsafe extern "C" fn morpheus_budget_remaining_ns(w: *mut RawWorker, out: *mut u64) -> i32 {
    match with_worker(w, "morpheus_budget_remaining_ns", |worker| worker.budget_remaining_ns()) {
        Ok(Ok(ns)) => {
            if !out.is_null() {
                *out = ns;
            }
            0
        }
        Ok(Err(err)) | Err(err) => fail(err),
    }
}

/// The worker's `runtime_mode` (`MORPHEUS_RUNTIME_MODE_*`), or a negated error.
#[no_mangle]
pub unsafe extern "C" fn morpheus_runtime_mode(w: *mut RawWorker) -> i32 {
    match with_worker(w, "morpheus_runtime_mode", |worker| worker.runtime_mode()) {
        Ok(mode) => mode.raw() as i32,
        Err(err) => fail(err),
    }
}

/// Yields counted for `reason` (`MORPHEUS_YIELD_REASON_*`); 0 for an unknown reason or foreign handle.
#[no_mangle]
pub unsafe extern "C" fn morpheus_yield_count(w: *mut RawWorker, reason: u32) -> u64 {
    let Ok(reason) = YieldReason::try_from(reason) else { return 0 };
    with_worker(w, "morpheus_yield_count", |worker| worker.yield_counts().get(reason)).unwrap_or(0)
}

/// Record a yield the application made on its own (spec/SCB.md §5.8, the explicit yield): it returned
/// to its scheduler loop, slept, or called `sched_yield()`. Acknowledges any pending request, counts
/// the yield with reason `MORPHEUS_YIELD_REASON_EXPLICIT` and restarts the runtime modes' clocks; it
/// suspends nothing. Allowed inside a critical section. Returns 0, also for a detached worker or one a
/// scheduler restart detached (it then writes nothing), or `-MORPHEUS_E_NOT_REGISTERED` if `w` is not
/// the calling thread's worker.
#[no_mangle]
pub unsafe extern "C" fn morpheus_record_explicit_yield(w: *mut RawWorker) -> i32 {
    match with_worker(w, "morpheus_record_explicit_yield", |worker| worker.record_explicit_yield()) {
        Ok(result) => status(result),
        Err(err) => fail(err),
    }
}

/// For tests and conformance agents only (spec/CONFORMANCE.md §2.3, `mode_clock`): from now on the
/// calling thread's runtime-mode rules (spec/SCB.md §5.4: a slice since the worker's last yield, a slice
/// since its last mode evaluation) read `ns` where they read `CLOCK_MONOTONIC`, until the next call; a
/// negative `ns` gives them `CLOCK_MONOTONIC` back. The clock never moves on its own.
#[no_mangle]
pub extern "C" fn morpheus_testing_set_mode_clock(ns: i64) {
    morpheus::kit::set_mode_clock(u64::try_from(ns).ok());
}

/// A description of the calling thread's last failure (valid until its next failing call).
#[no_mangle]
pub extern "C" fn morpheus_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}
