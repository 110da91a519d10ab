// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The native half of `@morpheus-sched/node`: the Node face of the Rust SDK (`sdk-rust`, crate
//! `morpheus`), built with napi-rs.
//!
//! Nothing of the protocol is re-implemented here: registration, checkpoints, critical sections and
//! attaching are the core's, reached through its safe API only. This addon adds what Node needs
//! around them:
//!
//! * the **fast-path view** ([`scb_view`], [`fast_state`]): the SCB's scheduler-written line as an
//!   external `ArrayBuffer` over the mapped slot, and the value the JS fast path compares
//!   `preempt_seq` with. The buffer holds the region (`Arc<Region>`) until V8 collects it, so it can
//!   never outlive the mapping. JS calls into this addon only when the view shows something new;
//! * the slow paths: the synchronous checkpoint ([`checkpoint_sync`]), and the asynchronous one, which
//!   is the binding kit's §5.7 rotation driven from JS's `setImmediate` callbacks ([`rotation`]);
//! * workers held per OS thread by the binding kit (`morpheus::kit::thread`: the event-loop thread and
//!   each `worker_threads` thread register on their own), released when the thread's Node environment
//!   is torn down; the registration options' conflicts and ranges are the kit's too
//!   (`morpheus::kit::options`);
//! * errors thrown with `code` = the ABI `error_code` name (the JS side turns them into classes).

use std::{
    cell::{Cell, RefCell},
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::Arc,
    task::{Context, Waker},
};

use morpheus::{
    kit::{
        options::{Options, RegionChoice},
        thread,
    },
    CriticalSection, DetachReason, Discovered, Error, NoticeLevel, RuntimeKind, RuntimeMode, Worker, YieldReason,
};
use morpheus_abi::CACHE_LINE_SIZE;
use napi::{bindgen_prelude::*, Env};
use napi_derive::napi;

mod rotation;

// ------------------------------------------------------------------------------------------------
// Errors

/// The `code` of a thrown error: an ABI `error_code` name, or `INVALID_ARGUMENT` for bad input that
/// the JS wrapper did not already refuse.
pub struct Code(&'static str);

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        self.0
    }
}

/// What fallible functions return: thrown as a JS `Error` whose `code` is the [`Code`].
type Fallible<T> = Result<T, Code>;

fn to_js(err: Error) -> napi::Error<Code> {
    napi::Error::new(Code(err.code().name()), err.to_string())
}

fn invalid(message: String) -> napi::Error<Code> {
    napi::Error::new(Code(morpheus::ErrorCode::InvalidArgument.name()), message)
}

fn not_registered(operation: &str) -> napi::Error<Code> {
    napi::Error::new(
        Code(morpheus::ErrorCode::NotRegistered.name()),
        format!("{operation}: this thread holds no worker registered through @morpheus-sched/node"),
    )
}

// ------------------------------------------------------------------------------------------------
// Per-thread state

// The worker this thread registered is the binding kit's (`kit::thread`), named by the token its JS
// handle carries (a JS number: tokens count registrations of the process, far below 2^53).

thread_local! {
    /// Whether [`scb_view`] handed out a live view of the mapped slot of this thread's registration
    /// (false when the runtime copied the bytes instead: then every check goes to the native side).
    static VIEW_LIVE: Cell<bool> = const { Cell::new(false) };
    /// Open critical sections of this thread, innermost last. The core counts the depth per thread;
    /// these guards are how JS holds them (exit = drop the innermost).
    static CRITICAL: RefCell<Vec<CriticalSection<'static>>> = const { RefCell::new(Vec::new()) };
    /// The core's notices on this thread not yet handed to JS ([`take_notices`]), oldest first.
    static NOTICES: RefCell<Vec<(NoticeLevel, String)>> = const { RefCell::new(Vec::new()) };
}

/// How many notices a thread keeps for JS; older ones are dropped (a thread that never lets JS drain
/// them must not grow without bound).
const NOTICES_KEPT: usize = 64;

/// The core's notice hook: the core calls it on the worker's own thread, inside a call from JS, so
/// the notice waits in that thread's queue until the JS wrapper takes it (right after the call).
fn queue_notice(level: NoticeLevel, message: &str) {
    NOTICES.with(|queue| {
        let mut queue = queue.borrow_mut();
        if queue.len() == NOTICES_KEPT {
            queue.remove(0);
        }
        queue.push((level, message.to_owned()));
    });
}

/// The core's notices queued on this thread since the last call, as `[level, message]` pairs
/// (`"info"` or `"warning"`), oldest first.
#[napi]
pub fn take_notices() -> Vec<Vec<String>> {
    NOTICES.with(|queue| {
        queue
            .borrow_mut()
            .drain(..)
            .map(|(level, message)| {
                let level = if level == NoticeLevel::Warning { "warning" } else { "info" };
                vec![level.to_owned(), message]
            })
            .collect()
    })
}

/// Whether notices wait in this thread's queue.
fn notices_pending() -> bool {
    NOTICES.with(|queue| !queue.borrow().is_empty())
}

/// Run `f` with the worker of registration `token` if it is this thread's live one (the kit's tokens
/// tell a stale JS handle, its worker shut down or the thread registered again, from the live one).
fn with_held<T>(token: i64, operation: &'static str, f: impl FnOnce(&Worker) -> Fallible<T>) -> Fallible<T> {
    let token = u64::try_from(token).map_err(|_| not_registered(operation))?;
    thread::with(token, operation, f).unwrap_or_else(|_| Err(not_registered(operation)))
}

/// Shut the thread's worker down, if any. Called by `Worker.close()`, and by the environment's
/// cleanup hook when the event loop's thread or a `worker_threads` thread ends.
fn release(token: Option<i64>) -> Result<bool, Code> {
    let closed = match token.map(u64::try_from) {
        Some(Ok(token)) => thread::close(token),
        Some(Err(_)) => Ok(false),
        None => thread::close_current(),
    };
    match closed {
        // A worker lost to a scheduler restart shuts down without error, writing nothing (spec/SCB.md
        // §6); the core reports the restart it finds at shutdown after having written nothing.
        Ok(released) => Ok(released),
        Err(Error::GenerationChanged { .. }) => Ok(true),
        Err(e) => Err(to_js(e)),
    }
}

#[napi(module_exports)]
pub fn module_init(_exports: Object, env: Env) -> Result<()> {
    // The core's notices (running detached, lost, registered again) go to JS, which emits them
    // (lib/index.js: process.emitWarning and the `notices` emitter) instead of the core's stderr line.
    morpheus::set_notice_hook(Some(queue_notice));
    // At environment teardown (process exit, a worker thread ending, even without close()), release
    // the worker this thread holds: its slot is freed (thread-local destructors do not run for the
    // main thread at exit, and a worker thread's may run after its isolate is gone).
    env.add_env_cleanup_hook((), |()| {
        let _ = release(None);
    })?;
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Regions

/// A validated, mapped region (spec/SCB.md §1): the header checks of §1.3 passed, nothing written.
#[napi]
pub struct Region {
    inner: Arc<morpheus::Region>,
}

#[napi]
impl Region {
    /// Where the region was mapped from.
    #[napi(getter)]
    pub fn path(&self) -> String {
        self.inner.path().to_string_lossy().into_owned()
    }

    /// `"PINNED_MAP"` (kernel backend, bpffs), `"FILE"` (a region file), or `"AGENT_FD"` (a descriptor
    /// the agent handed over with the registration reply).
    #[napi(getter)]
    pub fn backing(&self) -> &'static str {
        match self.inner.backing() {
            morpheus::Backing::PinnedMap => "PINNED_MAP",
            morpheus::Backing::File => "FILE",
            morpheus::Backing::AgentFd => "AGENT_FD",
        }
    }

    /// The generation seen at attach.
    #[napi(getter)]
    pub fn attached_generation(&self) -> BigInt {
        BigInt::from(self.inner.attached_generation())
    }

    /// The generation stored now (0 once the scheduler retired the region).
    #[napi(getter)]
    pub fn current_generation(&self) -> BigInt {
        BigInt::from(self.inner.current_generation())
    }

    /// Whether the scheduler that published the region is still the one attached to.
    #[napi(getter)]
    pub fn is_current(&self) -> bool {
        self.inner.is_current()
    }

    /// Number of SCB slots.
    #[napi(getter)]
    pub fn scb_count(&self) -> u32 {
        self.inner.scb_count()
    }

    /// The scheduler's slice in nanoseconds (may change at run time).
    #[napi(getter)]
    pub fn slice_ns(&self) -> BigInt {
        BigInt::from(self.inner.slice_ns())
    }
}

/// Map and validate a region. `path` given: that file or pinned map (an error if it cannot be
/// mapped); `""`: detached mode (null); absent: discovery (spec/SCB.md §1.2), null when no scheduler.
#[napi]
pub fn attach(path: Option<String>) -> Result<Option<Region>, Code> {
    let region = match path {
        Some(path) if path.is_empty() => None,
        Some(path) => Some(morpheus::Region::open(PathBuf::from(path)).map_err(to_js)?),
        None => match morpheus::region::discover().map_err(to_js)? {
            Discovered::Attached(region) => Some(region),
            Discovered::Detached(_) => None,
        },
    };
    Ok(region.map(|inner| Region { inner }))
}

// ------------------------------------------------------------------------------------------------
// Registration

/// Registration options as JS gave them, already checked for type by the JS wrapper (an unknown name,
/// a value of the wrong JS type); their conflicts and ranges are the binding kit's
/// ([`kit::options::Options::config`]), checked here before anything is mapped or written.
#[napi(object)]
pub struct RegisterOptions {
    /// Region file or pinned map; `""` forces detached mode. Absent: discovery.
    pub region_path: Option<String>,
    /// Run detached whatever is available.
    pub detached: Option<bool>,
    /// Direct registration of this slot (no agent).
    pub slot: Option<i64>,
    /// Register through the agent listening at this socket.
    pub socket: Option<String>,
    /// Whether the scheduler may escalate the worker (default: the ABI's default for Node, false).
    pub escapable: Option<bool>,
    /// Advisory priority, PRIORITY_MIN..PRIORITY_MAX.
    pub priority: Option<i64>,
}

/// Register the calling thread (written into the registration, so the SCB is right before RUNNING).
/// Returns the token of the new worker. `region` is an attached [`Region`] given as `region`, instead
/// of `region_path`. A rule of [`kit::options`] the options break (region and detached, slot and
/// socket, the slot's or the priority's range) throws its error, prefixed `initWorker(options)`,
/// before anything is mapped or written.
#[napi]
pub fn register(options: RegisterOptions, region: Option<&Region>) -> Result<i64, Code> {
    let detached = options.detached == Some(true);
    let empty = options.region_path.as_deref() == Some("");
    // `region: ''` means detached; given with `detached: true` it is still the region option, so the
    // kit reports the pair.
    let region = match (region, options.region_path) {
        (Some(region), _) => Some(RegionChoice::Region(region.inner.clone())),
        (None, Some(_)) if empty && !detached => None,
        (None, Some(path)) => Some(RegionChoice::Path(PathBuf::from(path))),
        (None, None) => None,
    };
    let options = Options {
        detached: detached || empty,
        region,
        slot: options.slot,
        socket: options.socket.map(PathBuf::from),
        escapable: options.escapable,
        priority: options.priority,
    };
    let config = options.config(RuntimeKind::Node).map_err(|err| {
        napi::Error::new(Code(err.code().name()), format!("initWorker(options): {err}"))
    })?;
    let token = thread::register(&config).map_err(to_js)?;
    VIEW_LIVE.set(false);
    Ok(token as i64)
}

/// Shut the worker with this token down and free its slot. False if it was already released.
#[napi]
pub fn unregister(token: i64) -> Result<bool, Code> {
    // A turn timed by this worker's slice is no longer timed (the next worker's turns are).
    rotation::stop_timing();
    release(Some(token))
}

/// The token of the worker this thread holds, if any.
#[napi]
pub fn current_token() -> Option<i64> {
    thread::current().map(|token| token as i64)
}

// ------------------------------------------------------------------------------------------------
// The fast path's view

/// `kind` values of [`fast_state`].
const VIEW: i32 = 0;
const ALWAYS_SLOW: i32 = 1;
const ZEROES: i32 = 2;
const WAKE: i32 = 3;
const MODE_QUIET: i32 = 4;

/// What the JS fast path compares with, as `[ack_low, ack_high, kind, registration, notices,
/// until_low, until_high]`:
///
/// * `kind` 0 compares the SCB view's `preempt_seq` with the acknowledged sequence; 1 goes to the
///   native side on every check (PRESSURED and DEFENSIVE modes disable the fast path, spec/SCB.md
///   §5.4; also when no live view exists); 2 reads zeroes (no worker, or one that never registers
///   again: detached on request or by the environment, or registered directly, §7); 3 compares the
///   wake view ([`wake_view`]) with the ack: the worker waits for a scheduler (lost, or detached
///   because the agent was not running) and the core's watcher bumps that word when a new instance
///   accepts, so the next checkpoint takes the slow path and registers again (§6.1); 4 is 1 in the
///   PRESSURED and DEFENSIVE modes with a live view, with the acknowledged sequence and the core's
///   [`morpheus::Worker::mode_quiet_until_ns`] (`until`, `CLOCK_MONOTONIC` ns, two halves): until
///   then a check that finds `preempt_seq` equal to the acknowledged sequence is answered "no yield"
///   by JS without calling the core, which would decide nothing and write nothing (§5.4); from then
///   on every check goes to the native side, as in kind 1.
/// * `registration` counts the worker's registrations (the core's re-registrations): when it moved
///   since JS took its SCB view, JS takes a new one ([`scb_view`]) before comparing.
/// * `notices` is 1 when the core left notices for [`take_notices`].
///
/// Which kind is the core's answer, never a rule of this addon: attached or not, and waiting for a
/// scheduler or not, are what the core reports (the same state its own fast path follows). Called at
/// registration and after every slow path, so it makes no system call: a pending wake-up registers
/// the worker again in the core's slow path (§6.1), which the wake view sends the next check to.
///
/// Written into `out` (an `Int32Array` of at least [`FAST_STATE_LEN`] elements, JS's own, allocated
/// once), element `i` the `i`-th value above: JS reads it by constant index, and neither side
/// allocates an array per call.
#[napi]
pub fn fast_state(mut out: Int32ArraySlice) -> Result<(), Code> {
    fast_state_out(&mut out, "fastState")?.copy_from_slice(&fast_state_now());
    Ok(())
}

/// How many elements [`fast_state`] writes.
const FAST_STATE_LEN: usize = 7;

/// The elements of JS's array that receive the fast state; INVALID_ARGUMENT naming `operation` and the
/// length when it is too short (checked before the call does anything, so nothing is done then).
fn fast_state_out<'a>(out: &'a mut Int32ArraySlice, operation: &str) -> Result<&'a mut [i32], Code> {
    // SAFETY: the typed array's elements, which nothing else reads or writes during this call (JS
    // runs on this thread only, and no JS runs during it).
    let out = unsafe { out.as_mut() };
    let len = out.len();
    out.get_mut(..FAST_STATE_LEN)
        .ok_or_else(|| invalid(format!("{operation}(out): expected an Int32Array of at least {FAST_STATE_LEN} elements, got {len}")))
}

fn fast_state_now() -> [i32; FAST_STATE_LEN] {
    let held = thread::current().and_then(|token| thread::with(token, "fastState", fast_state_of).ok());
    let state = held.unwrap_or([0, 0, ZEROES, 0, 0, 0]);
    [state[0], state[1], state[2], state[3], i32::from(notices_pending()), state[4], state[5]]
}

/// The fast state of this thread's registered `worker`, without the notices flag.
fn fast_state_of(worker: &Worker) -> [i32; 6] {
    let registration = worker.reattachments() as u32 as i32;
    // Attached as the core's own fast path sees it (RawWorker: `in_critical` is NULL exactly
    // when detached). Not `Worker::is_attached`, which also asks the agent's process handle
    // and socket (two system calls) and would cost every slow path that much; a gone agent
    // reaches the fast path anyway, through the core's watcher (its retired view, §6.1).
    // SAFETY: this thread's worker state, read on its own thread.
    let attached = unsafe { !(*worker.as_raw()).in_critical.is_null() };
    if !attached {
        if worker.is_waiting_for_scheduler() {
            // SAFETY: this thread's worker state, read on its own thread.
            let ack = unsafe { (*worker.as_raw()).cached_ack };
            [ack as u32 as i32, (ack >> 32) as u32 as i32, WAKE, registration, 0, 0]
        } else {
            [0, 0, ZEROES, registration, 0, 0]
        }
    } else if !VIEW_LIVE.get() {
        [0, 0, ALWAYS_SLOW, registration, 0, 0]
    } else if worker.runtime_mode() != RuntimeMode::Deterministic {
        let ack = worker.acknowledged_seq();
        let until = worker.mode_quiet_until_ns().unwrap_or(0);
        [ack as u32 as i32, (ack >> 32) as u32 as i32, MODE_QUIET, registration, until as u32 as i32, (until >> 32) as u32 as i32]
    } else {
        let ack = worker.acknowledged_seq();
        [ack as u32 as i32, (ack >> 32) as u32 as i32, VIEW, registration, 0, 0]
    }
}

/// The scheduler-written line (bytes 0..CACHE_LINE_SIZE) of this thread's SCB as an external
/// `ArrayBuffer` over the mapping, for `Atomics.load` at the generated offsets. Null when the worker
/// has no SCB, or when the runtime refuses external buffers (it would hand back a copy, which never
/// changes: the fast path then always asks the native side).
#[napi]
pub fn scb_view<'env>(env: &'env Env, token: i64) -> Result<Option<ArrayBuffer<'env>>, Code> {
    let target = with_held(token, "scbView", |h| {
        let (Some(region), Some(slot)) = (h.region(), h.slot()) else { return Ok(None) };
        if !h.is_attached() {
            return Ok(None);
        }
        let scb = region.scb_ptr(slot).map_err(to_js)?;
        Ok(Some((region.clone(), scb.cast::<u8>())))
    })?;
    let Some((region, data)) = target else {
        set_view_live(false);
        return Ok(None);
    };
    let len = CACHE_LINE_SIZE as usize;
    // SAFETY: `data` points at `len` bytes of the mapping that `region` keeps alive; the hint moves a
    // clone of the Arc into the buffer, dropped only by the finalizer, so the mapping outlives every
    // JS view of it. JS may write into it: the bytes are atomics the scheduler writes, and the JS
    // wrapper only ever loads them.
    let buffer = unsafe { ArrayBuffer::from_external(env, data, len, region, |_, region| drop(region)) }
        .map_err(|e| napi::Error::new(Code(morpheus::ErrorCode::Io.name()), e.reason.clone()))?;
    let live = buffer.as_ptr() == data.cast_const();
    set_view_live(live);
    Ok(live.then_some(buffer))
}

fn set_view_live(live: bool) {
    VIEW_LIVE.set(live);
}

/// The word the core's fast path reads while the worker waits for a scheduler (kind 3 of
/// [`fast_state`]): 8 bytes as an external `ArrayBuffer`, read by the JS fast path as it reads
/// `preempt_seq`. Null when the worker does not wait, or when the runtime refuses external buffers
/// (then JS asks the native side on every check while waiting).
///
/// The pointer is the core's own (`RawWorker::preempt_seq` while waiting, spec/SCB.md §6.1: "a wake
/// sequence in the SDK's own memory"): the core's process-wide wake sequence, a static that lives as
/// long as the process, so the buffer needs no owner and its finalizer frees nothing. JS takes it
/// once per thread and keeps it.
#[napi]
pub fn wake_view<'env>(env: &'env Env, token: i64) -> Result<Option<ArrayBuffer<'env>>, Code> {
    let word = with_held(token, "wakeView", |h| {
        if h.is_attached() || !h.is_waiting_for_scheduler() {
            return Ok(None);
        }
        // SAFETY: this thread's worker state, read on its own thread.
        Ok(Some(unsafe { (*h.as_raw()).preempt_seq }.cast::<u8>().cast_mut()))
    })?;
    let Some(data) = word else { return Ok(None) };
    // SAFETY: while the worker waits, `data` is the core's static wake sequence (8 bytes, aligned,
    // never freed); JS only loads it.
    let buffer = unsafe { ArrayBuffer::from_external(env, data, std::mem::size_of::<u64>(), (), |_, ()| {}) }
        .map_err(|e| napi::Error::new(Code(morpheus::ErrorCode::Io.name()), e.reason.clone()))?;
    let live = buffer.as_ptr() == data.cast_const();
    Ok(live.then_some(buffer))
}

/// How many times the worker registered again on its own after the scheduler restarted or came up
/// (spec/SCB.md §6.1).
#[napi]
pub fn worker_reattachments(token: i64) -> Result<i64, Code> {
    with_held(token, "reattachments", |h| Ok(h.reattachments() as i64))
}

/// What exactly keeps the worker detached (a dead socket, a failed re-registration), or null.
#[napi]
pub fn worker_detach_detail(token: i64) -> Result<Option<String>, Code> {
    with_held(token, "detachDetail", |h| Ok(h.detach_detail().map(str::to_owned)))
}

/// Whether the worker waits for a scheduler to register with (lost, or detached by a stopped agent).
#[napi]
pub fn worker_waiting_for_scheduler(token: i64) -> Result<bool, Code> {
    with_held(token, "waitingForScheduler", |h| Ok(h.is_waiting_for_scheduler()))
}

// ------------------------------------------------------------------------------------------------
// Checkpoints (slow paths; the JS fast path decides when to call them)

/// [`checkpoint_sync`]'s answers when it did not yield: whether [`fast_state`] changed meanwhile
/// (then JS reads it again; otherwise it keeps what it compares with and saves that call: outside
/// the DETERMINISTIC mode every check comes here, spec/SCB.md §5.4).
const NO_YIELD: u32 = 0;
const NO_YIELD_STATE_CHANGED: u32 = 1;
/// The scheduler asked: the request is acknowledged, yield now (the fast state changed: the ack).
const YIELDED: u32 = 2;

/// The synchronous checkpoint: YIELDED (2) when the scheduler asked (acknowledged: yield now),
/// otherwise NO_YIELD (0) or NO_YIELD_STATE_CHANGED (1).
#[napi]
pub fn checkpoint_sync() -> u32 {
    let before = fast_state_now();
    outcome(morpheus::checkpoint_sync(), before)
}

/// The three-way answer of the synchronous checks: YIELDED, or whether the fast state moved since
/// `before` (so JS re-reads it only then).
fn outcome(yielded: bool, before: [i32; FAST_STATE_LEN]) -> u32 {
    if yielded {
        YIELDED
    } else if fast_state_now() != before {
        NO_YIELD_STATE_CHANGED
    } else {
        NO_YIELD
    }
}

/// Whether a checkpoint would yield now, deciding nothing and acknowledging nothing: the core's
/// decision, its future dropped unpolled again (it writes nothing before its second poll). WOULD_YIELD
/// (2), otherwise NO_YIELD (0) or NO_YIELD_STATE_CHANGED (1). For `yieldRequested()` outside the
/// DETERMINISTIC mode (spec/SCB.md §5.4), where every check reaches the addon: a hot loop then leaves
/// only for a yield, not at every check.
#[napi]
pub fn checkpoint_would_yield() -> u32 {
    let before = fast_state_now();
    let mut future = morpheus::checkpoint();
    let mut cx = Context::from_waker(Waker::noop());
    let would_yield = Pin::new(&mut future).poll(&mut cx).is_pending();
    drop(future);
    outcome(would_yield, before)
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of `until` in [`fast_state`] (JS takes the offset of
/// its `performance.now()`, which reads the same clock from another origin, once per thread).
#[napi]
pub fn monotonic_ns() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// libuv's `uv_metrics_t` (uv.h, libuv 1.45 and later): `events` counts the events the loop's poll
/// processed, whatever their kind (I/O, a thread pool completion or cross-thread wake-up through an
/// async handle, a signal); `loop_count` the iterations. The other fields are there for the layout.
#[repr(C)]
#[allow(dead_code)]
struct UvMetrics {
    loop_count: u64,
    events: u64,
    events_waiting: u64,
    reserved: [*mut u64; 13],
}

/// `uv_metrics_info` and `uv_backend_fd`, as exported by the node binary that loaded this addon.
type UvMetricsInfo = unsafe extern "C" fn(*mut std::ffi::c_void, *mut UvMetrics) -> libc::c_int;
type UvBackendFd = unsafe extern "C" fn(*const std::ffi::c_void) -> libc::c_int;

/// What [`loop_idle`] looks at on this thread's event loop: libuv's event counter and the loop's poll
/// descriptor (epoll), with the counter as the last look saw it.
struct LoopPeek {
    uv_loop: *mut std::ffi::c_void,
    metrics_info: UvMetricsInfo,
    backend_fd: libc::c_int,
    events_seen: u64,
}

thread_local! {
    /// This thread's [`LoopPeek`], found at the first look; `Some(None)` when the runtime does not
    /// offer what it needs (a libuv before 1.45: Node 18), and then the loop is never taken for idle.
    static LOOP_PEEK: RefCell<Option<Option<LoopPeek>>> = const { RefCell::new(None) };
}

impl LoopPeek {
    fn find(env: &Env) -> Option<LoopPeek> {
        // SAFETY: dlsym with NUL-terminated names; the symbols, when present, are libuv's functions of
        // these signatures (uv.h), exported by the node binary for addons.
        let (metrics_info, backend_fd) = unsafe {
            let metrics_info = libc::dlsym(libc::RTLD_DEFAULT, c"uv_metrics_info".as_ptr());
            let backend_fd = libc::dlsym(libc::RTLD_DEFAULT, c"uv_backend_fd".as_ptr());
            if metrics_info.is_null() || backend_fd.is_null() {
                return None;
            }
            (
                std::mem::transmute::<*mut std::ffi::c_void, UvMetricsInfo>(metrics_info),
                std::mem::transmute::<*mut std::ffi::c_void, UvBackendFd>(backend_fd),
            )
        };
        let uv_loop = env.get_uv_event_loop().ok()?.cast::<std::ffi::c_void>();
        // SAFETY: the loop of this thread's Node environment, alive while JS runs on it.
        let backend_fd = unsafe { backend_fd(uv_loop) };
        (backend_fd >= 0).then_some(LoopPeek { uv_loop, metrics_info, backend_fd, events_seen: u64::MAX })
    }

    /// libuv's counters of the loop now.
    fn metrics(&self) -> Option<UvMetrics> {
        let mut metrics = UvMetrics { loop_count: 0, events: 0, events_waiting: 0, reserved: [std::ptr::null_mut(); 13] };
        // SAFETY: this thread's loop (uv_metrics_info only reads it) and a metrics struct of libuv's layout.
        (unsafe { (self.metrics_info)(self.uv_loop, &mut metrics) } == 0).then_some(metrics)
    }
}

/// The iterations this thread's event loop has run (libuv's `loop_count`), or -1 where libuv lacks
/// `uv_metrics_info`: what the tests count a yield's passes by (each pass is one iteration).
#[napi]
pub fn loop_iterations(env: &Env) -> f64 {
    LOOP_PEEK.with(|peek| {
        let mut peek = peek.borrow_mut();
        let Some(p) = peek.get_or_insert_with(|| LoopPeek::find(env)).as_ref() else { return -1.0 };
        p.metrics().map_or(-1.0, |m| m.loop_count as f64)
    })
}

/// Whether this thread's event loop has nothing else to run, as far as one cheap look can tell: its
/// poll processed no event since the previous look, and no I/O is ready on its poll descriptor now
/// (`poll` of the epoll descriptor with a zero timeout: one system call). The first look on a thread
/// answers false. It does not see timers that fell due (Node shows them to no addon: they run at the
/// next pass, which the scheduler's next request brings within a slice of CPU time), nor Node's queue
/// of immediates, which the JS side looks at itself. False where libuv lacks
/// `uv_metrics_info` (before 1.45). Asked by the rotation (spec/SCB.md §5.7) when a yield's pass
/// decides whether to end the passes, and when a timed turn is over, never on the fast path.
fn loop_idle(env: &Env) -> bool {
    LOOP_PEEK.with(|peek| {
        let mut peek = peek.borrow_mut();
        let Some(p) = peek.get_or_insert_with(|| LoopPeek::find(env)).as_mut() else { return false };
        let Some(metrics) = p.metrics() else { return false };
        let quiet = metrics.events == p.events_seen;
        p.events_seen = metrics.events;
        let mut fd = libc::pollfd { fd: p.backend_fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; a zero timeout never blocks.
        let ready = unsafe { libc::poll(&mut fd, 1, 0) };
        quiet && ready == 0
    })
}

// ------------------------------------------------------------------------------------------------
// Critical sections

/// Enter a critical section on the calling thread (counted even without a worker). Returns the depth.
#[napi]
pub fn critical_enter() -> u32 {
    CRITICAL.with(|stack| {
        let mut stack = stack.borrow_mut();
        stack.push(morpheus::critical_section());
        stack.len() as u32
    })
}

/// Exit the innermost critical section; `NOT_IN_CRITICAL` (writing nothing) without one. Returns the depth.
#[napi]
pub fn critical_exit() -> Result<u32, Code> {
    CRITICAL.with(|stack| {
        let mut stack = stack.borrow_mut();
        match stack.pop() {
            Some(guard) => {
                drop(guard);
                Ok(stack.len() as u32)
            }
            None => Err(to_js(Error::NotInCritical)),
        }
    })
}

/// The calling thread's critical-section nesting depth.
#[napi]
pub fn critical_depth() -> u32 {
    CRITICAL.with(|stack| stack.borrow().len() as u32)
}

// ------------------------------------------------------------------------------------------------
// The worker's state and settings

/// Whether the worker drives an SCB (false when detached, or after a scheduler restart).
#[napi]
pub fn worker_attached(token: i64) -> Result<bool, Code> {
    with_held(token, "attached", |h| Ok(h.is_attached()))
}

/// The slot index, or null when detached.
#[napi]
pub fn worker_slot(token: i64) -> Result<Option<u32>, Code> {
    with_held(token, "slot", |h| Ok(h.slot()))
}

/// The slot's `slot_generation` at registration.
#[napi]
pub fn worker_slot_generation(token: i64) -> Result<u32, Code> {
    with_held(token, "slotGeneration", |h| Ok(h.slot_generation()))
}

/// Why the worker runs detached from the start, or null.
#[napi]
pub fn worker_detach_reason(token: i64) -> Result<Option<&'static str>, Code> {
    with_held(token, "detachReason", |h| {
        Ok(h.detach_reason().map(|reason| match reason {
            DetachReason::NoScheduler => "NO_SCHEDULER",
            DetachReason::ForcedByEnvironment => "FORCED_BY_ENVIRONMENT",
            DetachReason::Requested => "REQUESTED",
        }))
    })
}

/// Whether the scheduler may escalate this worker.
#[napi]
pub fn worker_escapable(token: i64) -> Result<bool, Code> {
    with_held(token, "escapable", |h| Ok(h.escapable()))
}

/// Opt in to or out of escalation. Detached: remembered only (spec/SCB.md §7); after a scheduler
/// restart: `GENERATION_CHANGED`, nothing written (§6).
#[napi]
pub fn worker_set_escapable(token: i64, value: bool) -> Result<(), Code> {
    with_held(token, "setEscapable", |h| match h.set_escapable(value) {
        Err(Error::Detached { .. }) => Ok(()),
        other => other.map_err(to_js),
    })
}

/// The advisory priority.
#[napi]
pub fn worker_priority(token: i64) -> Result<i32, Code> {
    with_held(token, "priority", |h| Ok(h.priority()))
}

/// Set the advisory priority (the core's range, PRIORITY_MIN..PRIORITY_MAX, else `INVALID_ARGUMENT`,
/// nothing written; checked before the worker is looked up).
#[napi]
pub fn worker_set_priority(token: i64, value: i64) -> Result<(), Code> {
    let value = morpheus::validate_priority(value).map_err(|e| napi::Error::new(Code(e.code().name()), format!("setPriority: {e}")))?;
    with_held(token, "setPriority", |h| match h.set_priority(value) {
        Err(Error::Detached { .. }) => Ok(()),
        other => other.map_err(to_js),
    })
}

/// The runtime mode name (`DETERMINISTIC`, `PRESSURED`, `DEFENSIVE`).
#[napi]
pub fn worker_runtime_mode(token: i64) -> Result<&'static str, Code> {
    with_held(token, "runtimeMode", |h| Ok(h.runtime_mode().name()))
}

/// The last acknowledged `preempt_seq`.
#[napi]
pub fn worker_acknowledged_seq(token: i64) -> Result<BigInt, Code> {
    with_held(token, "acknowledgedSeq", |h| Ok(BigInt::from(h.acknowledged_seq())))
}

/// Yields per reason name, counted in the SDK's own memory.
#[napi]
pub fn worker_yield_counts(token: i64) -> Result<Vec<(String, i64)>, Code> {
    with_held(token, "yieldCounts", |h| {
        let counts = h.yield_counts();
        Ok(YieldReason::ALL
            .iter()
            .filter(|r| **r != YieldReason::None)
            .map(|r| (r.name().to_owned(), counts.get(*r) as i64))
            .collect())
    })
}

/// Throws `GENERATION_CHANGED` after a scheduler restart, `DETACHED` for a worker without a region.
#[napi]
pub fn worker_status(token: i64) -> Result<(), Code> {
    with_held(token, "status", |h| h.status().map_err(to_js))
}

/// Record a yield the application made on its own (`EXPLICIT`), acknowledging any pending request.
#[napi]
pub fn worker_record_explicit_yield(token: i64) -> Result<(), Code> {
    // Detached: nothing to acknowledge, and an explicit yield never reports DETACHED (spec/SCB.md §7).
    with_held(token, "recordExplicitYield", |h| match h.record_explicit_yield() {
        Err(Error::Detached { .. }) => Ok(()),
        other => other.map_err(to_js),
    })
}

/// The ABI's default for `escapable` of a Node worker (false, spec/SCB.md §5.5).
#[napi]
pub fn escapable_default() -> bool {
    morpheus_abi::escapable_default(RuntimeKind::Node)
}

/// The ABI version this addon was built with, `[major, minor]`.
#[napi]
pub fn abi_version() -> Vec<u32> {
    vec![u32::from(morpheus_abi::ABI_MAJOR), u32::from(morpheus_abi::ABI_MINOR)]
}
