// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The safe face of a worker: the thread-bound [`Worker`] handle and the [`CriticalSection`] guard.
//! Registration lives in `registration`, the fast paths in `raw`, the slow path in `slow_path`.

use std::{marker::PhantomData, ptr::addr_of, sync::atomic::Ordering, sync::Arc};

use morpheus_abi::{PressureLevel, RuntimeMode, Scb, YieldReason};

use crate::{
    config::{validate_priority, Config},
    error::{Error, Result},
    raw::{
        check_generation_raw, checkpoint_sync_raw, critical_enter_raw, critical_exit_fast, critical_exit_raw, current_raw,
        generation_ok, lose, RawWorker,
    },
    region::{DetachReason, Region},
    registration::{register_current_thread, shutdown},
    slow_path::{commit, Inner, Ticket, YieldCounts},
    sys::{self, a32, a64},
};

/// The calling thread's worker: an RAII handle, bound to the thread (`!Send`). Dropping it shuts the
/// worker down and frees its slot.
///
/// ```no_run
/// let worker = morpheus::Worker::register()?;
/// loop {
///     // ... a unit of work ...
///     if worker.checkpoint_sync() {
///         std::thread::yield_now(); // the scheduler asked: yield now
///     }
///     let _guard = worker.critical_section(); // not interrupted until the guard drops
/// }
/// # Ok::<(), morpheus::Error>(())
/// ```
#[derive(Debug)]
pub struct Worker {
    raw: *mut RawWorker,
    /// The registration this handle owns (a thread can register again after releasing one).
    epoch: u64,
    _not_send: PhantomData<*mut ()>,
}

impl Worker {
    /// Register the calling thread with the default [`Config`]: discover the region, register
    /// through the agent, or run detached when there is no scheduler.
    pub fn register() -> Result<Worker> {
        Worker::register_with(&Config::default())
    }

    /// Register the calling thread with `config`.
    pub fn register_with(config: &Config) -> Result<Worker> {
        let raw = register_current_thread(config)?;
        // SAFETY: just registered: inner is set.
        let epoch = unsafe { (*((*raw).inner as *const Inner)).epoch };
        Ok(Worker { raw, epoch, _not_send: PhantomData })
    }

    /// A detached worker: checkpoints never yield, critical sections only count (spec/SCB.md §7).
    pub fn detached() -> Result<Worker> {
        Worker::register_with(&Config::default().detached())
    }

    /// Options for [`Config::register`].
    pub fn builder() -> Config {
        Config::default()
    }

    /// The registration this handle owns, unless `unregister_current_thread` released it.
    fn owned_inner(&self) -> Option<*mut Inner> {
        // SAFETY: this thread's state.
        let inner = unsafe { (*self.raw).inner as *mut Inner };
        // SAFETY: non-null inner is a live Box owned by this thread's registration.
        (!inner.is_null() && unsafe { (*inner).epoch } == self.epoch).then_some(inner)
    }

    /// The registration's slow-path state. Panics (never UB) if the handle is stale: its registration
    /// was released behind its back with [`unregister_current_thread`](crate::unregister_current_thread).
    #[inline]
    fn inner(&self) -> &Inner {
        let inner = self.owned_inner().expect(
            "morpheus: this Worker's registration was released by unregister_current_thread(); the handle is stale",
        );
        // SAFETY: owned and live (checked above); only shared access while no &mut exists.
        unsafe { &*inner }
    }

    /// Mutable access through `&self`: a `Worker` is `!Send` and its `Inner` is reached only by this
    /// thread, so exclusivity is a matter of call discipline, which the compiler cannot check here.
    ///
    /// # Safety
    /// The caller must hold no other reference into the same `Inner` (from [`Self::inner`] or an
    /// earlier `inner_mut`) while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn inner_mut(&self) -> &mut Inner {
        let _ = self.inner();
        // SAFETY: owned and live (checked by inner()); exclusivity is the caller's contract.
        unsafe { &mut *self.owned_inner().unwrap() }
    }

    /// The fast-path state (for bindings and the C SDK).
    pub fn as_raw(&self) -> *mut RawWorker {
        self.raw
    }

    /// The checkpoint: true means "the scheduler asked, yield now" (the acknowledgement is already
    /// written; returning true is the yield point). One acquire load when nothing is pending.
    #[inline(always)]
    pub fn checkpoint_sync(&self) -> bool {
        // The handle is bound to this thread, so its state is the thread-local one: reaching it through
        // TLS (an fs-relative load in an executable) saves the load of `self.raw` in hot loops.
        debug_assert_eq!(self.raw, current_raw());
        // SAFETY: this thread's state.
        unsafe { checkpoint_sync_raw(current_raw()) }
    }

    /// [`checkpoint_sync`](Worker::checkpoint_sync), reporting `GENERATION_CHANGED` if the scheduler
    /// restarted under the worker.
    pub fn try_checkpoint(&self) -> Result<bool> {
        let yielded = self.checkpoint_sync();
        match self.status() {
            // A checkpoint never reports DETACHED (spec/SCB.md §7).
            Ok(()) | Err(Error::Detached { .. }) => Ok(yielded),
            Err(other) => Err(other),
        }
    }

    /// Look for the scheduler's life off the fast path (spec/SCB.md §6.1): a restart or a stop the
    /// checkpoints have not seen makes the worker lost (the latch of §6). It never registers again:
    /// status and "is it attached" report the loss (§6), and only the next checkpoint registers a
    /// waiting worker again (§6.1), so a setter or status call after a restart is `GENERATION_CHANGED`
    /// even when a new instance already accepts.
    fn refresh(&self) {
        let Some(inner) = self.owned_inner() else { return };
        // SAFETY: this thread's state; no reference into Inner is held across these calls.
        unsafe {
            if self.is_attached_now() {
                // A changed generation is handled (lost) by the check itself; a gone agent here.
                if check_generation_raw(self.raw) && (*inner).instance.as_ref().is_some_and(|i| i.is_gone()) {
                    crate::raw::lose(self.raw);
                }
            }
        }
    }

    fn is_attached_now(&self) -> bool {
        // SAFETY: this thread's state.
        unsafe { !(*self.raw).in_critical.is_null() }
    }

    /// Ok while attached to a live region; `GENERATION_CHANGED` once a restart detached the worker
    /// (until a checkpoint registers it again, spec/SCB.md §6.1: status itself never registers);
    /// `DETACHED` for a worker that never had a region.
    pub fn status(&self) -> Result<()> {
        if self.owned_inner().is_none() {
            return Err(Error::NotRegistered { operation: "status" });
        }
        // The fast path only reads; here the restart is looked for even when nothing was pending.
        self.refresh();
        let inner = self.inner();
        if let (Some(found), Some(region)) = (inner.lost, &inner.region) {
            return Err(Error::GenerationChanged { attached: region.attached_generation(), found });
        }
        if inner.region.is_none() {
            return Err(Error::Detached { operation: "status" });
        }
        Ok(())
    }

    /// Enter a critical section until the guard drops (also on panic).
    #[inline(always)]
    pub fn critical_section(&self) -> CriticalSection<'_> {
        let raw = current_raw(); // == self.raw, see checkpoint_sync
        // SAFETY: this thread's state.
        unsafe { critical_enter_raw(raw) };
        CriticalSection { raw, _worker: PhantomData }
    }

    /// Enter a critical section without a guard; pair with [`critical_exit`](Worker::critical_exit).
    #[inline(always)]
    pub fn critical_enter(&self) {
        // SAFETY: this thread's state.
        unsafe { critical_enter_raw(current_raw()) }
    }

    /// Exit a critical section; `NOT_IN_CRITICAL` without a matching enter.
    #[inline(always)]
    pub fn critical_exit(&self) -> Result<()> {
        // SAFETY: this thread's state.
        unsafe { critical_exit_raw(self.raw) }
    }

    /// Current nesting depth.
    pub fn critical_depth(&self) -> u32 {
        // SAFETY: this thread's state.
        unsafe { (*self.raw).critical_depth }
    }

    /// Whether the worker drives an SCB of a live scheduler (false when detached, or once the
    /// scheduler stopped or restarted; true again once a checkpoint registered it again, §6.1). At
    /// most a `poll` and a `stat` (spec/SCB.md §6.1); never registers.
    pub fn is_attached(&self) -> bool {
        self.refresh();
        self.is_attached_now()
    }

    /// Why the worker is detached from the start, if it is.
    pub fn detach_reason(&self) -> Option<DetachReason> {
        self.inner().detach_reason
    }

    /// What exactly kept the worker detached (a dead socket, a retired region, a failed
    /// re-registration), if anything more than [`detach_reason`](Worker::detach_reason) says.
    pub fn detach_detail(&self) -> Option<&str> {
        self.inner().detach_detail.as_deref()
    }

    /// How many times the worker registered again on its own after the scheduler restarted (§6.1).
    pub fn reattachments(&self) -> u64 {
        self.inner().reattachments
    }

    /// Whether the worker waits for a scheduler to register with (lost, or detached by a stopped one).
    pub fn is_waiting_for_scheduler(&self) -> bool {
        self.inner().awaiting.is_some()
    }

    /// Slot index, if attached at registration.
    pub fn slot(&self) -> Option<u32> {
        self.inner().slot
    }

    /// The slot's `slot_generation` at registration.
    pub fn slot_generation(&self) -> u32 {
        self.inner().slot_generation
    }

    /// The region, if attached at registration.
    pub fn region(&self) -> Option<&Arc<Region>> {
        self.inner().region.as_ref()
    }

    fn scb_checked(&self, operation: &'static str) -> Result<*mut Scb> {
        self.status().map_err(|e| match e {
            Error::Detached { .. } => Error::Detached { operation },
            other => other,
        })?;
        if !self.is_attached() {
            return Err(Error::Detached { operation });
        }
        Ok(self.inner().scb)
    }

    fn write_checked(&self, operation: &'static str) -> Result<*mut Scb> {
        let scb = self.scb_checked(operation)?;
        // SAFETY: this thread's state.
        unsafe {
            if !generation_ok(self.raw) {
                lose(self.raw);
                self.status()?;
            }
        }
        Ok(scb)
    }

    /// The SCB a setter writes: `None` for a worker that never had a region (SCB.md §7: the value is
    /// only remembered, and that is not an error), `GENERATION_CHANGED` for a lost one (§6).
    fn setter_target(&self, operation: &'static str) -> Result<Option<*mut Scb>> {
        if self.owned_inner().is_some() && self.inner().region.is_none() {
            return Ok(None);
        }
        self.write_checked(operation).map(Some)
    }

    /// Opt in to or out of escalation (store-release). In detached mode only remembered.
    pub fn set_escapable(&self, escapable: bool) -> Result<()> {
        // SAFETY: no other reference into Inner is held in this method.
        unsafe { self.inner_mut() }.escapable = escapable;
        if let Some(scb) = self.setter_target("set_escapable")? {
            // SAFETY: our slot.
            unsafe { a32(addr_of!((*scb).escapable)).store(escapable as u32, Ordering::Release) };
        }
        Ok(())
    }

    /// Whether the worker accepts escalation.
    pub fn escapable(&self) -> bool {
        self.inner().escapable
    }

    /// Set the advisory priority (-20 most important .. 19); `INVALID_ARGUMENT` outside that range,
    /// writing nothing (never clamped).
    pub fn set_priority(&self, priority: i32) -> Result<()> {
        let priority = validate_priority(priority.into())?;
        // SAFETY: no other reference into Inner is held in this method.
        unsafe { self.inner_mut() }.priority = priority;
        if let Some(scb) = self.setter_target("set_priority")? {
            // SAFETY: our slot.
            unsafe { a32(addr_of!((*scb).priority) as *const u32).store(priority as u32, Ordering::Relaxed) };
        }
        Ok(())
    }

    /// The advisory priority.
    pub fn priority(&self) -> i32 {
        self.inner().priority
    }

    /// CPU time left in the slice, as the scheduler last wrote it (advisory).
    pub fn budget_remaining_ns(&self) -> Result<u64> {
        let scb = self.scb_checked("budget_remaining_ns")?;
        // SAFETY: our slot.
        Ok(unsafe { a64(addr_of!((*scb).budget_remaining_ns)).load(Ordering::Relaxed) })
    }

    /// Pressure level of the worker's CPU as the scheduler sees it.
    pub fn kernel_pressure_level(&self) -> Result<Option<PressureLevel>> {
        let scb = self.scb_checked("kernel_pressure_level")?;
        // SAFETY: our slot.
        let raw = unsafe { a32(addr_of!((*scb).kernel_pressure_level)).load(Ordering::Relaxed) };
        Ok(PressureLevel::try_from(raw).ok())
    }

    /// Global pressure from the region header; `None` while no consistent snapshot could be read
    /// (spec/SCB.md §2.1: the read is bounded).
    pub fn pressure(&self) -> Result<Option<crate::region::PressureSnapshot>> {
        self.scb_checked("pressure")?;
        Ok(self.inner().region.as_ref().expect("attached").pressure())
    }

    /// Hints the scheduler could not deliver to this worker.
    pub fn hints_dropped(&self) -> Result<u32> {
        let scb = self.scb_checked("hints_dropped")?;
        // SAFETY: our slot.
        Ok(unsafe { a32(addr_of!((*scb).hints_dropped)).load(Ordering::Relaxed) })
    }

    /// The current runtime mode.
    pub fn runtime_mode(&self) -> RuntimeMode {
        self.inner().mode
    }

    /// Outside DETERMINISTIC (spec/SCB.md §5.4), the `CLOCK_MONOTONIC` time (ns; the thread's mode
    /// clock while a test sets one, [`kit::set_mode_clock`](crate::kit::set_mode_clock)) before which a
    /// checkpoint of this worker that finds `preempt_seq` equal to [`acknowledged_seq`](Self::acknowledged_seq)
    /// decides nothing and writes nothing: its mode yield needs a slice since the last yield, and its
    /// mode evaluation a slice since the last one. A runtime whose checks cross into this SDK at a cost
    /// (a JavaScript fast path) may answer "no yield" on its own until then, comparing the sequence
    /// with the acknowledged one and the clock with this time. None in DETERMINISTIC (the fast path's
    /// one load decides) and while detached.
    pub fn mode_quiet_until_ns(&self) -> Option<u64> {
        self.inner().mode_quiet_until_ns()
    }

    /// Re-evaluate the runtime mode now (§5.4) and return it. Checkpoints do this on every yield and,
    /// outside DETERMINISTIC mode, once per slice.
    pub fn refresh_mode(&self) -> Result<RuntimeMode> {
        self.write_checked("refresh_mode")?;
        // SAFETY: the only reference into Inner in this method.
        let inner = unsafe { self.inner_mut() };
        // SAFETY: this thread's state, generation checked.
        unsafe { inner.evaluate_mode(self.raw, sys::mode_now_ns()) };
        Ok(inner.mode)
    }

    /// Per-reason yield counters.
    pub fn yield_counts(&self) -> YieldCounts {
        self.inner().counts
    }

    /// The last acknowledged `preempt_seq`.
    pub fn acknowledged_seq(&self) -> u64 {
        self.inner().acked
    }

    /// Record a yield the application made on its own (`EXPLICIT`), acknowledging any pending request.
    /// On a detached or lost worker it writes nothing and is not an error (SCB.md §6, §7).
    pub fn record_explicit_yield(&self) -> Result<()> {
        let scb = match self.write_checked("record_explicit_yield") {
            Ok(scb) => scb,
            Err(Error::Detached { .. } | Error::GenerationChanged { .. }) => return Ok(()),
            Err(other) => return Err(other),
        };
        // SAFETY: this thread's state; our slot.
        unsafe {
            let seq = crate::protocol::load_request(a64(addr_of!((*scb).preempt_seq)));
            let ticket = Ticket { raw: self.raw as usize, epoch: self.epoch, seq, reason: YieldReason::Explicit };
            commit(self.raw, ticket);
        }
        // Never an error on a detached or lost worker (SCB.md §6, §7); the write above was checked.
        Ok(())
    }

    /// Shut the worker down now, reporting what went wrong (dropping does the same, silently).
    pub fn shutdown(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        if this.owned_inner().is_none() {
            return Err(Error::NotRegistered { operation: "shutdown" });
        }
        // SAFETY: this thread's state, registered by this handle.
        unsafe { shutdown(this.raw) }
    }
}

/// Run `f` with a handle to the calling thread's worker, registered by [`register_current_thread`]
/// (for example by the C SDK or a tokio hook); `NOT_REGISTERED` if the thread holds none.
///
/// # Safety
/// `f` must not unregister the thread's worker (through [`unregister_current_thread`](crate::unregister_current_thread) or a C call)
/// while it uses the handle.
pub unsafe fn with_current_worker<R>(f: impl FnOnce(&Worker) -> R) -> Result<R> {
    let raw = current_raw();
    // SAFETY: this thread's state.
    if unsafe { (*raw).inner.is_null() } {
        return Err(Error::NotRegistered { operation: "with_current_worker" });
    }
    // SAFETY: checked non-null above.
    let epoch = unsafe { (*((*raw).inner as *const Inner)).epoch };
    let worker = std::mem::ManuallyDrop::new(Worker { raw, epoch, _not_send: PhantomData });
    Ok(f(&worker))
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.owned_inner().is_some() {
            // SAFETY: this thread's state, registered by this handle.
            let _ = unsafe { shutdown(self.raw) };
        }
    }
}

/// A critical section, exited when dropped (also during a panic's unwinding). `!Send`.
#[derive(Debug)]
#[must_use = "the critical section ends when this guard is dropped"]
pub struct CriticalSection<'a> {
    raw: *mut RawWorker,
    _worker: PhantomData<&'a ()>,
}

impl CriticalSection<'static> {
    /// Enter a critical section on the calling thread's worker (or only count it, if detached).
    #[inline(always)]
    pub fn enter() -> CriticalSection<'static> {
        let raw = current_raw();
        // SAFETY: this thread's state.
        unsafe { critical_enter_raw(raw) };
        CriticalSection { raw, _worker: PhantomData }
    }
}

impl Drop for CriticalSection<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the guard never leaves its thread; its enter guarantees depth >= 1.
        unsafe { critical_exit_fast(self.raw) };
    }
}
