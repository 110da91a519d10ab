// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Workers: registration and lifecycle (spec/SCB.md §4), the checkpoint (§5.1), critical sections
//! (§5.3), runtime modes (§5.4) and scheduler restarts (§6).
//!
//! Each OS thread has one [`RawWorker`] in thread-local storage. It is `#[repr(C)]` and holds exactly
//! what the fast paths need (a pointer to `preempt_seq`, the cached acknowledgement, the nesting depth,
//! the critical flag and the generation to check), so Rust, the C SDK's `static inline` functions and the
//! bindings all run the same one-load checkpoint on the same state. Everything else (the region, the
//! agent connection, counters) lives in a boxed [`Inner`] reached through `RawWorker::inner`.

use std::{
    cell::{Cell, UnsafeCell},
    ffi::c_void,
    marker::PhantomData,
    path::{Path, PathBuf},
    ptr::{addr_of, addr_of_mut},
    sync::{atomic::Ordering, Arc},
};

use morpheus_abi::{
    escapable_default, PressureLevel, RuntimeKind, RuntimeMode, Scb, WorkerState, YieldReason,
};

use crate::{
    agent::{self, AgentConnection},
    error::{Error, Result},
    region::{discover, DetachReason, Discovered, Region},
    sys::{self, a32, a64},
};

/// The zeroed SCB a detached worker's checkpoint reads (spec/SCB.md §7).
static DETACHED_SCB: Scb = unsafe { std::mem::zeroed() };
/// The generation a detached worker "attached" to; never written.
static DETACHED_GENERATION: u64 = 0;

/// `cached_ack` value that sends every checkpoint to the slow path: used in the PRESSURED and
/// DEFENSIVE modes, where a checkpoint also yields on the budget or the SDK's own clock (§5.4).
/// `preempt_seq` cannot reach it (2^64 - 1 increments).
pub const FORCE_SLOW_PATH: u64 = u64::MAX;

/// The per-thread fast-path state, shared with C through cbindgen as `struct morpheus_worker`.
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

impl RawWorker {
    const DETACHED: RawWorker = RawWorker {
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

thread_local! {
    // Const-initialised and without Drop: access is a plain TLS offset, no lazy-init check.
    static CURRENT: UnsafeCell<RawWorker> = const { UnsafeCell::new(RawWorker::DETACHED) };
    // Touched at registration so that a thread that exits holding a worker releases its slot.
    static EXIT_GUARD: ExitGuard = const { ExitGuard };
    // Distinguishes successive registrations of one thread (for suspended async checkpoints).
    static EPOCH: Cell<u64> = const { Cell::new(0) };
}

struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let raw = current_raw();
        // SAFETY: our own thread's state; a thread exiting holds no borrows of it.
        unsafe {
            if !(*raw).inner.is_null() {
                let _ = shutdown(raw);
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

/// Where a worker's region comes from.
#[derive(Clone, Debug, Default)]
pub enum RegionSource {
    /// spec/SCB.md §1.2: `MORPHEUS_REGION`, the pinned map, the sim file, else detached.
    #[default]
    Discover,
    /// This region file or pinned map (an error if it cannot be mapped).
    Path(PathBuf),
    /// An already attached region.
    Region(Arc<Region>),
    /// No region: detached mode.
    Detached,
}

/// How the slot is obtained.
#[derive(Clone, Debug, Default)]
pub enum Registration {
    /// Through the agent at `MORPHEUS_SOCKET` or `DEFAULT_SOCKET_PATH`.
    #[default]
    Agent,
    /// Through the agent listening at this path.
    AgentAt(PathBuf),
    /// Direct registration of this slot (no agent: tests and harnesses that play the scheduler).
    Direct {
        /// Slot index.
        slot: u32,
    },
}

/// Options of a registration. `Config::default()` discovers the region and registers through the agent.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the region comes from.
    pub region: RegionSource,
    /// How the slot is obtained.
    pub registration: Registration,
    /// Whether the scheduler may escalate this worker; `None` takes the spec's default for `runtime_kind`.
    pub escapable: Option<bool>,
    /// Advisory priority, -20 (most important) to 19; clamped to that range.
    pub priority: i32,
    /// Which SDK drives the worker (bindings set their own kind).
    pub runtime_kind: RuntimeKind,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            region: RegionSource::Discover,
            registration: Registration::Agent,
            escapable: None,
            priority: 0,
            runtime_kind: RuntimeKind::Rust,
        }
    }
}

impl Config {
    /// Attach to the region at `path`.
    pub fn region_path(mut self, path: impl Into<PathBuf>) -> Config {
        self.region = RegionSource::Path(path.into());
        self
    }

    /// Attach to an already mapped region.
    pub fn region(mut self, region: Arc<Region>) -> Config {
        self.region = RegionSource::Region(region);
        self
    }

    /// Run detached.
    pub fn detached(mut self) -> Config {
        self.region = RegionSource::Detached;
        self
    }

    /// Register slot `slot` directly, without an agent.
    pub fn direct_slot(mut self, slot: u32) -> Config {
        self.registration = Registration::Direct { slot };
        self
    }

    /// Register through the agent listening at `path`.
    pub fn agent_socket(mut self, path: impl Into<PathBuf>) -> Config {
        self.registration = Registration::AgentAt(path.into());
        self
    }

    /// Opt in to (true) or out of (false) escalation.
    pub fn escapable(mut self, escapable: bool) -> Config {
        self.escapable = Some(escapable);
        self
    }

    /// Advisory priority.
    pub fn priority(mut self, priority: i32) -> Config {
        self.priority = priority;
        self
    }

    /// The SDK kind stored in the SCB (and keying the escapable default).
    pub fn runtime_kind(mut self, kind: RuntimeKind) -> Config {
        self.runtime_kind = kind;
        self
    }

    /// Register the calling thread and return its handle.
    pub fn register(&self) -> Result<Worker> {
        Worker::register_with(self)
    }
}

/// Per-reason yield counters of one worker (the SDK's own memory, §5.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct YieldCounts([u64; YIELD_REASONS]);

const YIELD_REASONS: usize = YieldReason::ALL.len();

impl YieldCounts {
    /// Yields for `reason`.
    pub fn get(&self, reason: YieldReason) -> u64 {
        self.0[reason.raw() as usize]
    }

    /// Yields for any reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

enum Channel {
    Agent(AgentConnection),
    Direct,
    None,
}

/// Slow-path state of a worker.
pub(crate) struct Inner {
    region: Option<Arc<Region>>,
    scb: *mut Scb,
    slot: Option<u32>,
    slot_generation: u32,
    channel: Channel,
    kind: RuntimeKind,
    epoch: u64,
    /// The last acknowledged `preempt_seq` (also in `cached_ack` in DETERMINISTIC mode).
    acked: u64,
    /// The generation found when a restart detached the worker.
    lost: Option<u64>,
    detach_reason: Option<DetachReason>,
    mode: RuntimeMode,
    last_hints_dropped: u32,
    last_yield_ns: u64,
    last_mode_eval_ns: u64,
    counts: YieldCounts,
    escapable: bool,
    priority: i32,
}

/// Why a checkpoint decided to yield, and what it saw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    raw: usize,
    epoch: u64,
    seq: u64,
    reason: YieldReason,
}

#[inline(always)]
unsafe fn inner<'a>(raw: *mut RawWorker) -> Option<&'a mut Inner> {
    ((*raw).inner as *mut Inner).as_mut()
}

#[inline(always)]
unsafe fn generation_ok(raw: *mut RawWorker) -> bool {
    a64((*raw).generation).load(Ordering::Acquire) == (*raw).attached_generation
}

/// Point the fast-path state at the detached statics, keeping the nesting depth.
unsafe fn make_detached(raw: *mut RawWorker) {
    let depth = (*raw).critical_depth;
    let inner = (*raw).inner;
    *raw = RawWorker { critical_depth: depth, inner, ..RawWorker::DETACHED };
}

/// The scheduler restarted under this worker: detach it and remember why (§6). Writes nothing.
#[cold]
#[inline(never)]
pub(crate) unsafe fn lose(raw: *mut RawWorker) {
    let found = a64((*raw).generation).load(Ordering::Acquire);
    if let Some(inner) = inner(raw) {
        if inner.region.is_some() && inner.lost.is_none() {
            inner.lost = Some(found);
        }
    }
    make_detached(raw);
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
    let seq = a64((*raw).preempt_seq).load(Ordering::Acquire);
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

/// Decide whether a checkpoint that saw `seq` yields. Writes nothing to the SCB.
pub(crate) unsafe fn prepare(raw: *mut RawWorker, seq: u64) -> Option<Ticket> {
    if (*raw).critical_depth > 0 {
        return None;
    }
    if !generation_ok(raw) {
        lose(raw);
        return None;
    }
    let inner = inner(raw)?;
    let reason = if seq != inner.acked {
        YieldReason::PreemptRequest
    } else {
        inner.mode_yield(raw)?
    };
    Some(Ticket { raw: raw as usize, epoch: inner.epoch, seq, reason })
}

/// Record a yield decided by [`prepare`]: reason, count, then the acknowledging CAS (§5.1).
/// Returns false (writing nothing) if the worker changed or the scheduler restarted meanwhile.
pub(crate) unsafe fn commit(raw: *mut RawWorker, ticket: Ticket) -> bool {
    if ticket.raw != raw as usize {
        return false;
    }
    let Some(inner) = inner(raw) else { return false };
    if inner.epoch != ticket.epoch || inner.scb.is_null() {
        return false;
    }
    if !generation_ok(raw) {
        lose(raw);
        return false;
    }
    let scb = inner.scb;
    a32(addr_of!((*scb).last_yield_reason)).store(ticket.reason.raw(), Ordering::Relaxed);
    a64(addr_of!((*scb).yield_count)).fetch_add(1, Ordering::Relaxed);
    if ticket.seq > inner.acked {
        let ack = a64(addr_of!((*scb).last_ack_seq));
        let mut current = ack.load(Ordering::Acquire);
        // Up only, and only to a value read from preempt_seq.
        while current < ticket.seq {
            match ack.compare_exchange_weak(current, ticket.seq, Ordering::Release, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        inner.acked = ticket.seq;
    }
    inner.counts.0[ticket.reason.raw() as usize] += 1;
    let now = sys::monotonic_ns();
    inner.last_yield_ns = now;
    inner.evaluate_mode(raw, now);
    true
}

impl Inner {
    /// In PRESSURED / DEFENSIVE mode, whether the SDK yields on its own (§5.4).
    unsafe fn mode_yield(&mut self, raw: *mut RawWorker) -> Option<YieldReason> {
        let region = self.region.as_ref()?;
        let now = sys::monotonic_ns();
        let slice = region.slice_ns();
        let ran_a_slice = now.saturating_sub(self.last_yield_ns) >= slice;
        let reason = match self.mode {
            RuntimeMode::Deterministic => None,
            RuntimeMode::Pressured => {
                let budget = a64(addr_of!((*self.scb).budget_remaining_ns)).load(Ordering::Relaxed);
                (budget == 0 && ran_a_slice).then_some(YieldReason::Budget)
            }
            RuntimeMode::Defensive => ran_a_slice.then_some(YieldReason::Defensive),
        };
        // A yield re-evaluates the mode in commit; otherwise at most once per slice (§5.4).
        if reason.is_none() && now.saturating_sub(self.last_mode_eval_ns) >= slice {
            self.evaluate_mode(raw, now);
        }
        reason
    }

    /// Re-evaluate the runtime mode and publish it; sets `cached_ack` so that only DETERMINISTIC
    /// mode keeps the one-load fast path. Caller has checked the generation.
    unsafe fn evaluate_mode(&mut self, raw: *mut RawWorker, now: u64) {
        let Some(region) = self.region.as_ref() else { return };
        self.last_mode_eval_ns = now;
        let dropped = a32(addr_of!((*self.scb).hints_dropped)).load(Ordering::Relaxed);
        let mode = if dropped != self.last_hints_dropped {
            RuntimeMode::Defensive
        } else if region.pressure().level == Some(PressureLevel::High) {
            RuntimeMode::Pressured
        } else {
            RuntimeMode::Deterministic
        };
        self.last_hints_dropped = dropped;
        if mode != self.mode {
            self.mode = mode;
            a32(addr_of!((*self.scb).runtime_mode)).store(mode.raw(), Ordering::Relaxed);
        }
        (*raw).cached_ack = if mode == RuntimeMode::Deterministic { self.acked } else { FORCE_SLOW_PATH };
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
            a32((*raw).in_critical).store(1, Ordering::SeqCst);
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
unsafe fn critical_exit_fast(raw: *mut RawWorker) -> bool {
    let depth = (*raw).critical_depth;
    if depth == 0 {
        return false;
    }
    (*raw).critical_depth = depth - 1;
    if depth == 1 && !(*raw).in_critical.is_null() {
        if generation_ok(raw) {
            a32((*raw).in_critical).store(0, Ordering::Release);
        } else {
            lose(raw);
        }
    }
    true
}

fn resolve_region(source: &RegionSource) -> Result<std::result::Result<Arc<Region>, DetachReason>> {
    Ok(match source {
        RegionSource::Discover => match discover()? {
            Discovered::Attached(region) => Ok(region),
            Discovered::Detached(reason) => Err(reason),
        },
        RegionSource::Path(path) => Ok(Region::open(path)?),
        RegionSource::Region(region) => Ok(region.clone()),
        RegionSource::Detached => Err(DetachReason::Requested),
    })
}

/// The scheduler's half of INIT -> REGISTERED, done by the SDK itself (direct registration, §4).
fn direct_assign(region: &Region, slot: u32) -> Result<(*mut Scb, u32)> {
    let scb = region.scb_ptr(slot)?;
    check_generation(region)?;
    // SAFETY: scb points into the validated, mapped region.
    unsafe {
        let state = a32(addr_of!((*scb).worker_state));
        if let Err(found) = state.compare_exchange(
            WorkerState::Init.raw(),
            WorkerState::Registered.raw(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            return Err(Error::SlotBusy { slot, state: found });
        }
        a32(addr_of!((*scb).tid)).store(sys::gettid(), Ordering::Relaxed);
        a32(addr_of!((*scb).pid)).store(sys::getpid(), Ordering::Relaxed);
        let slot_generation = a32(addr_of!((*scb).slot_generation)).fetch_add(1, Ordering::Release) + 1;
        let seq = a64(addr_of!((*scb).preempt_seq)).load(Ordering::Acquire);
        a64(addr_of!((*scb).last_ack_seq)).store(seq, Ordering::Release);
        Ok((scb, slot_generation))
    }
}

fn check_generation(region: &Region) -> Result<()> {
    let found = region.current_generation();
    if found != region.attached_generation() {
        return Err(Error::GenerationChanged { attached: region.attached_generation(), found });
    }
    Ok(())
}

fn agent_assign(
    config: &Config,
    region: Arc<Region>,
    socket: &Path,
) -> Result<(Arc<Region>, *mut Scb, u32, u32, AgentConnection)> {
    let mut conn = AgentConnection::connect(socket)?;
    let assignment = conn.register(sys::gettid(), config.runtime_kind)?;
    let slot = assignment.slot;
    let release = |conn: &mut AgentConnection, err: Error| {
        let _ = conn.unregister(slot, config.runtime_kind);
        err
    };
    // The agent names the region it assigned in; follow it unless the application chose one.
    let region = match (&assignment.region_path, &config.region) {
        (Some(path), RegionSource::Discover) if path != region.path() => {
            Region::open(path).map_err(|e| release(&mut conn, e))?
        }
        _ => region,
    };
    if assignment.generation != region.attached_generation() {
        let err = Error::GenerationChanged { attached: region.attached_generation(), found: assignment.generation };
        return Err(release(&mut conn, err));
    }
    let scb = region.scb_ptr(slot).map_err(|e| release(&mut conn, e))?;
    // SAFETY: scb points into the mapped region.
    let state = unsafe { a32(addr_of!((*scb).worker_state)).load(Ordering::Acquire) };
    if state != WorkerState::Registered.raw() {
        let err = Error::SlotBusy { slot, state };
        return Err(release(&mut conn, err));
    }
    Ok((region, scb, slot, assignment.slot_generation, conn))
}

/// Register the calling thread; the worker stays with the thread until [`unregister_current_thread`]
/// or the thread exits. Returns the thread's [`RawWorker`].
pub fn register_current_thread(config: &Config) -> Result<*mut RawWorker> {
    let raw = current_raw();
    // SAFETY: our own thread's state.
    if let Some(existing) = unsafe { inner(raw) } {
        return Err(Error::AlreadyRegistered { slot: existing.slot });
    }
    let epoch = EPOCH.with(|e| {
        e.set(e.get() + 1);
        e.get()
    });
    let escapable = config.escapable.unwrap_or_else(|| escapable_default(config.runtime_kind));
    let priority = config.priority.clamp(-20, 19);
    let mut inner = Box::new(Inner {
        region: None,
        scb: std::ptr::null_mut(),
        slot: None,
        slot_generation: 0,
        channel: Channel::None,
        kind: config.runtime_kind,
        epoch,
        acked: 0,
        lost: None,
        detach_reason: None,
        mode: RuntimeMode::Deterministic,
        last_hints_dropped: 0,
        last_yield_ns: sys::monotonic_ns(),
        last_mode_eval_ns: 0,
        counts: YieldCounts::default(),
        escapable,
        priority,
    });

    match resolve_region(&config.region)? {
        Err(reason) => inner.detach_reason = Some(reason),
        Ok(region) => {
            let (region, scb, slot, slot_generation, channel) = match &config.registration {
                Registration::Direct { slot } => {
                    let (scb, slot_generation) = direct_assign(&region, *slot)?;
                    (region, scb, *slot, slot_generation, Channel::Direct)
                }
                Registration::Agent | Registration::AgentAt(_) => {
                    let socket = match &config.registration {
                        Registration::AgentAt(path) => path.clone(),
                        _ => agent::socket_path(),
                    };
                    let (region, scb, slot, slot_generation, conn) = agent_assign(config, region, &socket)?;
                    (region, scb, slot, slot_generation, Channel::Agent(conn))
                }
            };
            inner.scb = scb;
            inner.slot = Some(slot);
            inner.slot_generation = slot_generation;
            inner.channel = channel;
            // SAFETY: scb is our slot in the mapped region, REGISTERED for this thread.
            unsafe {
                inner.acked = a64(addr_of!((*scb).last_ack_seq)).load(Ordering::Acquire);
                inner.last_hints_dropped = a32(addr_of!((*scb).hints_dropped)).load(Ordering::Relaxed);
                // REGISTERED -> RUNNING (§4); generation checked just before the writes.
                if let Err(err) = check_generation(&region) {
                    return Err(err);
                }
                a32(addr_of!((*scb).runtime_kind)).store(config.runtime_kind.raw(), Ordering::Relaxed);
                a32(addr_of!((*scb).escapable)).store(escapable as u32, Ordering::Release);
                a32(addr_of!((*scb).priority) as *const u32).store(priority as u32, Ordering::Relaxed);
                a32(addr_of!((*scb).runtime_mode)).store(RuntimeMode::Deterministic.raw(), Ordering::Relaxed);
                a32(addr_of!((*scb).in_critical)).store(0, Ordering::Relaxed);
                a32(addr_of!((*scb).worker_state)).store(WorkerState::Running.raw(), Ordering::Release);
                // A critical section entered before registration (e.g. a guard of the thread's previous
                // worker) is still open: show it.
                if (*raw).critical_depth > 0 {
                    a32(addr_of!((*scb).in_critical)).store(1, Ordering::SeqCst);
                }
            }
            inner.region = Some(region);
        }
    }

    // SAFETY: our own thread's state; no borrows of it are live.
    unsafe {
        let depth = (*raw).critical_depth;
        *raw = match (&inner.region, inner.scb) {
            (Some(region), scb) if !scb.is_null() => RawWorker {
                preempt_seq: addr_of!((*scb).preempt_seq),
                cached_ack: inner.acked,
                critical_depth: depth,
                reserved: 0,
                in_critical: addr_of_mut!((*scb).in_critical),
                generation: region.generation_ptr(),
                attached_generation: region.attached_generation(),
                inner: std::ptr::null_mut(),
            },
            _ => RawWorker { critical_depth: depth, ..RawWorker::DETACHED },
        };
        (*raw).inner = Box::into_raw(inner) as *mut c_void;
    }
    EXIT_GUARD.with(|_| {});
    Ok(raw)
}

/// Shut the calling thread's worker down (§4): QUIESCING, DEAD, then UNREGISTER (agent) or the
/// scheduler's DEAD -> INIT writes (direct). Writes nothing if the scheduler restarted meanwhile.
pub fn unregister_current_thread() -> Result<()> {
    let raw = current_raw();
    // SAFETY: our own thread's state.
    unsafe {
        if (*raw).inner.is_null() {
            return Err(Error::NotRegistered { operation: "unregister" });
        }
        shutdown(raw)
    }
}

unsafe fn shutdown(raw: *mut RawWorker) -> Result<()> {
    let inner = Box::from_raw((*raw).inner as *mut Inner);
    make_detached(raw);
    (*raw).inner = std::ptr::null_mut();
    let Inner { region, scb, slot, channel, kind, lost, .. } = *inner;
    let (Some(region), Some(slot)) = (region, slot) else { return Ok(()) };
    if lost.is_some() || scb.is_null() {
        return Ok(());
    }
    check_generation(&region)?;
    let state = a32(addr_of!((*scb).worker_state));
    a32(addr_of!((*scb).in_critical)).store(0, Ordering::Release);
    state.store(WorkerState::Quiescing.raw(), Ordering::Release);
    state.store(WorkerState::Dead.raw(), Ordering::Release);
    match channel {
        Channel::Agent(mut conn) => conn.unregister(slot, kind),
        Channel::Direct => {
            // The scheduler's DEAD -> INIT: line 1 zeroed except last_ack_seq; tid, pid 0.
            a64(addr_of!((*scb).yield_count)).store(0, Ordering::Relaxed);
            for field in [
                addr_of!((*scb).escapable),
                addr_of!((*scb).last_yield_reason),
                addr_of!((*scb).runtime_mode),
                addr_of!((*scb).runtime_kind),
                addr_of!((*scb).priority) as *const u32,
                addr_of!((*scb).tid),
                addr_of!((*scb).pid),
            ] {
                a32(field).store(0, Ordering::Relaxed);
            }
            state.store(WorkerState::Init.raw(), Ordering::Release);
            Ok(())
        }
        Channel::None => Ok(()),
    }
}

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
    /// was released behind its back with [`unregister_current_thread`].
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
        self.status()?;
        Ok(yielded)
    }

    /// Ok while attached to a live region; `GENERATION_CHANGED` once a restart detached the worker;
    /// `DETACHED` for a worker that never had a region.
    pub fn status(&self) -> Result<()> {
        if self.owned_inner().is_none() {
            return Err(Error::NotRegistered { operation: "status" });
        }
        // The fast path only reads; here the restart is looked for even when nothing was pending.
        // SAFETY: this thread's state.
        unsafe {
            if self.is_attached() {
                check_generation_raw(self.raw);
            }
        }
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

    /// Whether the worker drives an SCB (false when detached, or after a scheduler restart).
    pub fn is_attached(&self) -> bool {
        // SAFETY: this thread's state.
        unsafe { !(*self.raw).in_critical.is_null() }
    }

    /// Why the worker is detached from the start, if it is.
    pub fn detach_reason(&self) -> Option<DetachReason> {
        self.inner().detach_reason
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

    /// Opt in to or out of escalation (store-release). In detached mode only remembered.
    pub fn set_escapable(&self, escapable: bool) -> Result<()> {
        // SAFETY: no other reference into Inner is held in this method.
        unsafe { self.inner_mut() }.escapable = escapable;
        let scb = self.write_checked("set_escapable")?;
        // SAFETY: our slot.
        unsafe { a32(addr_of!((*scb).escapable)).store(escapable as u32, Ordering::Release) };
        Ok(())
    }

    /// Whether the worker accepts escalation.
    pub fn escapable(&self) -> bool {
        self.inner().escapable
    }

    /// Set the advisory priority (-20 most important .. 19; clamped).
    pub fn set_priority(&self, priority: i32) -> Result<()> {
        let priority = priority.clamp(-20, 19);
        // SAFETY: no other reference into Inner is held in this method.
        unsafe { self.inner_mut() }.priority = priority;
        let scb = self.write_checked("set_priority")?;
        // SAFETY: our slot.
        unsafe { a32(addr_of!((*scb).priority) as *const u32).store(priority as u32, Ordering::Relaxed) };
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

    /// Global pressure from the region header.
    pub fn pressure(&self) -> Result<crate::region::PressureSnapshot> {
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

    /// Re-evaluate the runtime mode now (§5.4) and return it. Checkpoints do this on every yield and,
    /// outside DETERMINISTIC mode, once per slice.
    pub fn refresh_mode(&self) -> Result<RuntimeMode> {
        self.write_checked("refresh_mode")?;
        // SAFETY: the only reference into Inner in this method.
        let inner = unsafe { self.inner_mut() };
        // SAFETY: this thread's state, generation checked.
        unsafe { inner.evaluate_mode(self.raw, sys::monotonic_ns()) };
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
    pub fn record_explicit_yield(&self) -> Result<()> {
        let scb = self.write_checked("record_explicit_yield")?;
        // SAFETY: this thread's state; our slot.
        unsafe {
            let seq = a64(addr_of!((*scb).preempt_seq)).load(Ordering::Acquire);
            let ticket = Ticket { raw: self.raw as usize, epoch: self.epoch, seq, reason: YieldReason::Explicit };
            commit(self.raw, ticket);
        }
        self.status()
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
/// `f` must not unregister the thread's worker (through [`unregister_current_thread`] or a C call)
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

/// The pieces async checkpoints need: decide on a yield, then commit it after resuming.
pub(crate) fn prepare_current() -> Option<Ticket> {
    let raw = current_raw();
    // SAFETY: this thread's state.
    unsafe {
        let seq = a64((*raw).preempt_seq).load(Ordering::Acquire);
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
