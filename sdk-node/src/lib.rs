// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The native half of `@morpheus-sched/node`: the Node face of the Rust SDK (`sdk-rust`, crate
//! `morpheus`), built with napi-rs.
//!
//! Nothing of the protocol is re-implemented here: registration, checkpoints, critical sections and
//! attaching are the core's, reached through its safe API only. This addon adds what Node needs
//! around them:
//!
//! * the **fast state** ([`fast_state`], [`fast_word`]): the binding kit's typed
//!   `morpheus::kit::fast_state::FastState`, translated into JS's `Float64Array` by the indexes of
//!   [`FastStateField`], and an external `ArrayBuffer` over the word it names. The buffer holds the
//!   region (`Arc<Region>`) until V8 collects it, so it can never outlive the mapping. The rules of the
//!   state (what is compared, the mode's quiet window, the rotation's turn) are the kit's; JS keeps
//!   the one-load check inline and calls into this addon only when the state sends it here;
//! * the slow paths: the synchronous checkpoint ([`checkpoint_sync`]), and the asynchronous one, which
//!   is the binding kit's §5.7 rotation driven from JS's `setImmediate` callbacks ([`rotation`]);
//! * workers held per OS thread by the binding kit (`morpheus::kit::thread`: the event-loop thread and
//!   each `worker_threads` thread register on their own), released when the thread's Node environment
//!   is torn down; the registration options' conflicts and ranges are the kit's too
//!   (`morpheus::kit::options`);
//! * errors thrown with `code` = the ABI `error_code` name (the JS side turns them into classes).

use std::{
    cell::{Cell, RefCell},
    path::PathBuf,
    sync::Arc,
};

use morpheus::{
    kit::{
        fast_state::{Lasts, FORCE_SLOW_PATH},
        options::{Options, RegionChoice},
        thread,
    },
    CriticalSection, DetachReason, Discovered, Error, NoticeLevel, RuntimeKind, Worker, YieldReason,
};
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
// The fast state (the binding kit's `morpheus::kit::fast_state::FastState`, translated for JS)

/// Where each value of the kit's [`FastState`] goes in JS's state array: a `Float64Array` of at
/// least `Len` elements that JS allocates once, written by every call that may change the state (the
/// slow paths, the rotation's calls, [`fast_state`], [`fast_word`]), so neither side allocates per
/// call. JS takes these indexes from the addon (napi's exported enum): one source. What the values
/// mean, and the order a check uses them in, are the kit's; JS keeps the one-load check inline.
#[napi]
pub enum FastStateField {
    /// `expected`'s 64 bits as one double: JS compares the word's 8 bytes read as one `Float64Array`
    /// element with it (NaN patterns, `FORCE_SLOW_PATH`'s among them, equal nothing: every check
    /// looks further). Its low half is element `2 * Expected` of an `Int32Array` over the same buffer.
    Expected,
    /// `settled`'s 64 bits as one double; `FORCE_SLOW_PATH`'s (a NaN) when None.
    Settled,
    /// The quiet window, in ns from the time of the call: `Infinity` (always), a count, or
    /// `-Infinity` (never).
    Quiet,
    /// The turn window, the same way, in ns of the rotation's clock (the tests' clock when set).
    Turn,
    /// The word's address (0: none, JS loads a zero word of its own): when it changes JS takes a view
    /// of the new word ([`fast_word`]). An address is never reused while a view of it lives: the view
    /// keeps its mapping.
    Word,
    /// 1 when the core left notices for [`take_notices`].
    Notices,
    /// The count the rotation's keeper hands back (`rotation::rotation_keeper`).
    KeeperTurns,
    /// How many elements the array has at least.
    Len,
}

thread_local! {
    /// The address of a word whose view the runtime refused (it copies external buffers): its state
    /// is translated with [`always_slow`](morpheus::kit::fast_state::FastState::always_slow), so every check that looks further asks the core.
    static REFUSED_WORD: Cell<usize> = const { Cell::new(0) };
}

/// The elements of JS's state array; INVALID_ARGUMENT naming `operation` and the length when it is too
/// short (checked before the call does anything, so a refused call does nothing).
pub(crate) fn state_out<'a>(state: &'a mut Float64ArraySlice, operation: &str) -> Result<&'a mut [f64], Code> {
    // SAFETY: the typed array's elements, which nothing else reads or writes during this call (JS
    // runs on this thread only, and no JS runs during it).
    let state = unsafe { state.as_mut() };
    let len = state.len();
    let need = FastStateField::Len as usize;
    state.get_mut(..need).ok_or_else(|| invalid(format!("{operation}(state): expected a Float64Array of at least {need} elements, got {len}")))
}

/// A window in ns from now, as JS reads it (module doc of [`FastStateField`]).
fn window(lasts: Lasts) -> f64 {
    match lasts {
        Lasts::Never => f64::NEG_INFINITY,
        Lasts::For(ns) => ns as f64,
        Lasts::Always => f64::INFINITY,
    }
}

/// Write this thread's fast state into `out` (checked by [`state_out`]).
pub(crate) fn write_state(out: &mut [f64]) {
    let mut state = rotation::fast_state();
    let word = state.word.map_or(0, |w| w as usize);
    if word != 0 && word == REFUSED_WORD.get() {
        state = state.always_slow();
    }
    out[FastStateField::Expected as usize] = f64::from_bits(state.expected);
    out[FastStateField::Settled as usize] = f64::from_bits(state.settled.unwrap_or(FORCE_SLOW_PATH));
    out[FastStateField::Quiet as usize] = window(state.quiet);
    out[FastStateField::Turn as usize] = window(state.turn);
    out[FastStateField::Word as usize] = word as f64;
    out[FastStateField::Notices as usize] = f64::from(u8::from(notices_pending()));
    out[FastStateField::KeeperTurns as usize] = rotation::keeper_turns() as f64;
}

/// Write this thread's fast state into `state` (at registration, and after a call that may have
/// changed it outside the slow paths: the worker's status, an explicit yield, close). `clock`: the
/// tests' clock (ns) or negative, as for the rotation's calls.
#[napi]
pub fn fast_state(mut state: Float64ArraySlice, clock: f64) -> Result<(), Code> {
    let out = state_out(&mut state, "fastState")?;
    rotation::set_clock(clock);
    write_state(out);
    Ok(())
}

/// An external `ArrayBuffer` over the 8 bytes of the word the fast state names (`Word`), for the JS
/// check's one load, then the fast state written into `state`; null when it names none, or when the
/// runtime refuses external buffers (it would hand back a copy, which never changes: the fast state
/// then sends every further look to the core). The buffer keeps the worker's region (`Arc<Region>`)
/// until V8 collects it, so it never outlives the mapping that holds the SCB's word; the wake word is
/// the core's static, alive as long as the process. JS only loads it.
#[napi]
pub fn fast_word<'env>(env: &'env Env, mut state: Float64ArraySlice, clock: f64) -> Result<Option<ArrayBuffer<'env>>, Code> {
    let out = state_out(&mut state, "fastWord")?;
    rotation::set_clock(clock);
    let Some(word) = rotation::fast_state().word else {
        write_state(out);
        return Ok(None);
    };
    let owner = thread::current().and_then(|token| thread::with(token, "fastWord", |w| w.region().cloned()).ok().flatten());
    // SAFETY: `word` is 8 aligned bytes that live as long as the buffer: inside the mapping `owner`
    // keeps alive (the SCB's word), or the core's static wake word; the finalizer drops the owner.
    let buffer = unsafe { ArrayBuffer::from_external(env, word.cast::<u8>().cast_mut(), 8, owner, |_, owner| drop(owner)) }
        .map_err(|e| napi::Error::new(Code(morpheus::ErrorCode::Io.name()), e.reason.clone()))?;
    let live = buffer.as_ptr() == word.cast::<u8>();
    REFUSED_WORD.set(if live { 0 } else { word as usize });
    write_state(out);
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

/// The synchronous checkpoint (the JS check found something to look at): true when the scheduler
/// asked (acknowledged: yield now). The rotation's unacknowledged request, if any, is acknowledged
/// first (the kit's rule: a synchronous check yields only for a newer request, §5.7). The fast state
/// is written into `state`.
#[napi]
pub fn checkpoint_sync(mut state: Float64ArraySlice, clock: f64) -> Result<bool, Code> {
    let out = state_out(&mut state, "checkpointSync")?;
    rotation::set_clock(clock);
    rotation::acknowledge();
    let yielded = morpheus::checkpoint_sync();
    write_state(out);
    Ok(yielded)
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

/// Tests only: time this thread's runtime-mode rules (spec/SCB.md §5.4) by `ns`, or by
/// CLOCK_MONOTONIC again when `ns` is negative (morpheus::kit::set_mode_clock).
#[napi]
pub fn set_mode_clock(ns: f64) {
    morpheus::kit::set_mode_clock((ns >= 0.0).then_some(ns as u64));
}

/// The ABI version this addon was built with, `[major, minor]`.
#[napi]
pub fn abi_version() -> Vec<u32> {
    vec![u32::from(morpheus_abi::ABI_MAJOR), u32::from(morpheus_abi::ABI_MINOR)]
}
