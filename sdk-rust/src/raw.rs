// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The per-thread fast-path state and the FFI entry points the C SDK calls.
//!
//! Each OS thread has one [`RawWorker`] in thread-local storage. It is `#[repr(C)]` and holds exactly
//! what the fast paths need (a pointer to `preempt_seq`, the cached acknowledgement, the nesting depth,
//! the critical flag and the generation to check), so Rust, the C SDK's `static inline` functions and the
//! bindings all run the same one-load checkpoint on the same state. Everything else (the region, the
//! agent connection, counters) lives in a boxed slow-path state reached through `RawWorker::inner`.
//!
//! Not part of the safe API: Rust code uses [`crate::Worker`] and the crate-root free functions, and the
//! language bindings (Python, Node, the JNI library) reach this state only through [`crate::kit`], which
//! translates it into typed values; sdk-c, whose inline functions read the struct itself, is the one
//! user of this module outside the crate.

use std::{
    cell::{Cell, UnsafeCell},
    ffi::c_void,
    ptr::addr_of,
    sync::atomic::Ordering,
};

use morpheus_abi::Scb;

use crate::{
    error::{Error, Result},
    protocol,
    slow_path::{commit, prepare, Inner, Ticket},
    sys::{a32, a64},
};

pub use crate::registration::register_current_thread;

/// The zeroed SCB a detached worker's checkpoint reads (spec/SCB.md §7).
static DETACHED_SCB: Scb = unsafe { std::mem::zeroed() };
/// The generation a detached worker "attached" to; never written.
static DETACHED_GENERATION: u64 = 0;

/// `cached_ack` value that sends every checkpoint to the slow path: used in the PRESSURED and
/// DEFENSIVE modes, where a checkpoint also yields on the budget or the SDK's own clock (§5.4).
/// `preempt_seq` cannot reach it (2^64 - 1 increments).
pub const FORCE_SLOW_PATH: u64 = u64::MAX;

/// Version of [`RawWorker`]'s layout, which compiled C programs bake in through `morpheus_inline.h`
/// (`MORPHEUS_WORKER_LAYOUT_VERSION`): the `layout_version` of record `worker` in `spec/abi.toml`. A
/// released layout is locked (`spec/locks/worker-layout-<N>.lock.json`) and never changed in place: any
/// change to the fields, their order or their types is a new `layout_version` with a new `soname` there,
/// which the ABI generator's compatibility gate enforces.
pub const WORKER_LAYOUT_VERSION: u32 = morpheus_abi::WORKER_LAYOUT_VERSION;

/// The per-thread fast-path state: record `worker` of `spec/abi.toml`, whose generated C definition
/// (`struct morpheus_worker` in `morpheus_abi.h`) the C SDK uses. `assert_worker_layout!` below proves at
/// compile time that this definition has the spec's size and every field at the spec's offset and size.
///
/// Only the owning thread touches it. The C SDK's `morpheus_inline.h` reads and writes these fields
/// directly; everything else goes through functions.
#[repr(C)]
#[derive(Debug)]
pub struct RawWorker {
    /// The SCB's `preempt_seq` (a static zero when detached). Load-acquire only.
    pub preempt_seq: *const u64,
    /// Value the fast path compares `preempt_seq` with: the last acknowledged sequence, or
    /// `FORCE_SLOW_PATH` in the PRESSURED / DEFENSIVE modes.
    pub cached_ack: u64,
    /// Critical-section nesting depth of this thread.
    pub critical_depth: u32,
    /// Zero.
    pub reserved: u32,
    /// The SCB's `in_critical`, or NULL when detached (then only the depth is tracked).
    pub in_critical: *mut u32,
    /// The region header's `generation` (a static zero when detached).
    pub generation: *const u64,
    /// Generation at attach; SCB writes happen only while `*generation` equals it.
    pub attached_generation: u64,
    /// Slow-path state owned by the SDK (opaque); NULL when the thread holds no worker.
    pub inner: *mut c_void,
}

morpheus_abi::assert_worker_layout!(RawWorker);

impl RawWorker {
    pub(crate) const DETACHED: RawWorker = RawWorker {
        preempt_seq: addr_of!(DETACHED_SCB.preempt_seq),
        cached_ack: 0,
        critical_depth: 0,
        reserved: 0,
        in_critical: std::ptr::null_mut(),
        generation: &DETACHED_GENERATION,
        attached_generation: 0,
        inner: std::ptr::null_mut(),
    };
}

impl RawWorker {
    /// A thread that never registered: detached, except that its first checkpoint takes the slow
    /// path once, which tells (once per process) that checkpoints on such a thread never yield.
    const UNREGISTERED: RawWorker = RawWorker { cached_ack: FORCE_SLOW_PATH, ..RawWorker::DETACHED };
}

thread_local! {
    // Const-initialised and without Drop: access is a plain TLS offset, no lazy-init check.
    static CURRENT: UnsafeCell<RawWorker> = const { UnsafeCell::new(RawWorker::UNREGISTERED) };
    // Touched at registration so that a thread that exits holding a worker releases its slot.
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
    // Distinguishes successive registrations of one thread (for suspended async checkpoints).
    static EPOCH: Cell<u64> = const { Cell::new(0) };
}

struct ExitGuard;

/// Arm the guard that releases the thread's worker when the thread exits.
pub(crate) fn touch_exit_guard() {
    EXIT_GUARD.with(|_| {});
}

/// A new registration epoch of the calling thread.
pub(crate) fn next_epoch() -> u64 {
    EPOCH.with(|e| {
        e.set(e.get() + 1);
        e.get()
    })
}

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let raw = current_raw();
        // SAFETY: our own thread's state; a thread exiting holds no borrows of it.
        unsafe {
            if !(*raw).inner.is_null() {
                let _ = crate::registration::shutdown(raw);
            }
        }
    }
}

/// The calling thread's [`RawWorker`] (detached state if it holds no worker). Valid until the thread
/// exits; only the calling thread may use it.
#[inline(always)]
pub fn current_raw() -> *mut RawWorker {
    CURRENT.with(|c| c.get())
}


#[inline(always)]
pub(crate) unsafe fn inner<'a>(raw: *mut RawWorker) -> Option<&'a mut Inner> {
    ((*raw).inner as *mut Inner).as_mut()
}

#[inline(always)]
pub(crate) unsafe fn generation_ok(raw: *mut RawWorker) -> bool {
    a64((*raw).generation).load(Ordering::Acquire) == (*raw).attached_generation
}

/// Point the fast-path state at the detached statics, keeping the nesting depth.
pub(crate) unsafe fn make_detached(raw: *mut RawWorker) {
    let depth = (*raw).critical_depth;
    let inner = (*raw).inner;
    *raw = RawWorker { critical_depth: depth, inner, ..RawWorker::DETACHED };
}

/// The scheduler restarted (or stopped) under this worker: detach it and remember why (§6). Writes
/// nothing. A worker registered through the agent then waits for a new instance (§6.1): its next
/// checkpoint tries to register again once, later ones only after the watcher's wake-up.
#[cold]
#[inline(never)]
pub(crate) unsafe fn lose(raw: *mut RawWorker) {
    let found = a64((*raw).generation).load(Ordering::Acquire);
    let mut awaits = false;
    if let Some(inner) = inner(raw) {
        if inner.region.is_some() && inner.lost.is_none() {
            inner.lost = Some(found);
        }
        if let (Some(socket), Some(_)) = (crate::registration::agent_socket(&inner.config), inner.region.as_ref()) {
            if matches!(inner.channel, crate::slow_path::Channel::Agent(_)) {
                inner.awaiting = Some(socket);
                awaits = true;
            }
        }
    }
    if awaits {
        let wake = crate::lifeline::WAKE_SEQ.load(Ordering::Acquire);
        crate::registration::await_wake(raw, wake.wrapping_sub(1));
    } else {
        make_detached(raw);
    }
}

/// Check the region's generation; on a change, detach the worker (writing nothing) and return false.
///
/// # Safety
/// `raw` must be the calling thread's [`current_raw`].
pub unsafe fn check_generation_raw(raw: *mut RawWorker) -> bool {
    if generation_ok(raw) {
        return true;
    }
    lose(raw);
    false
}

/// Fast path of the synchronous checkpoint: one acquire load and one comparison.
///
/// # Safety
/// `raw` must be the calling thread's [`current_raw`].
#[inline(always)]
pub unsafe fn checkpoint_sync_raw(raw: *mut RawWorker) -> bool {
    let seq = protocol::load_request(a64((*raw).preempt_seq));
    if seq == (*raw).cached_ack {
        return false;
    }
    checkpoint_slow(raw, seq)
}

/// Slow path of the synchronous checkpoint, entered when `preempt_seq` (read as `seq`) differs from
/// `cached_ack`. Returns true when the caller must yield now (the acknowledgement is written).
///
/// # Safety
/// `raw` must be the calling thread's [`current_raw`].
#[cold]
#[inline(never)]
pub unsafe fn checkpoint_slow(raw: *mut RawWorker, seq: u64) -> bool {
    match prepare(raw, seq) {
        Some(ticket) => commit(raw, ticket),
        None => false,
    }
}


/// Enter a critical section (fast path inline; only the outermost enter writes the flag).
///
/// # Safety
/// `raw` must be the calling thread's [`current_raw`].
#[inline(always)]
pub unsafe fn critical_enter_raw(raw: *mut RawWorker) {
    let depth = (*raw).critical_depth;
    (*raw).critical_depth = depth.wrapping_add(1);
    if depth == 0 && !(*raw).in_critical.is_null() {
        if generation_ok(raw) {
            protocol::critical_enter(a32((*raw).in_critical));
        } else {
            lose(raw);
        }
    }
}

/// Exit a critical section; `NOT_IN_CRITICAL` (writing nothing) at depth 0.
///
/// # Safety
/// `raw` must be the calling thread's [`current_raw`].
#[inline(always)]
pub unsafe fn critical_exit_raw(raw: *mut RawWorker) -> Result<()> {
    if critical_exit_fast(raw) {
        Ok(())
    } else {
        Err(Error::NotInCritical)
    }
}

/// [`critical_exit_raw`] returning false (writing nothing) at depth 0, so that guards carry no error.
#[inline(always)]
pub(crate) unsafe fn critical_exit_fast(raw: *mut RawWorker) -> bool {
    let depth = (*raw).critical_depth;
    if depth == 0 {
        return false;
    }
    (*raw).critical_depth = depth - 1;
    if depth == 1 && !(*raw).in_critical.is_null() {
        if generation_ok(raw) {
            protocol::critical_exit(a32((*raw).in_critical));
        } else {
            lose(raw);
        }
    }
    true
}


/// The pieces async checkpoints need: decide on a yield, then commit it after resuming.
pub(crate) fn prepare_current() -> Option<Ticket> {
    let raw = current_raw();
    // SAFETY: this thread's state.
    unsafe {
        let seq = protocol::load_request(a64((*raw).preempt_seq));
        if seq == (*raw).cached_ack {
            return None;
        }
        prepare(raw, seq)
    }
}

/// Commit a ticket on the thread that resumed; does nothing if the task moved to another thread
/// (that thread's worker was not the one asked) or the worker changed.
pub(crate) fn commit_current(ticket: Ticket) -> bool {
    // SAFETY: this thread's state; commit checks the ticket belongs to it.
    unsafe { commit(current_raw(), ticket) }
}
