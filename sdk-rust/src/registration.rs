// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Registration and shutdown of the calling thread's worker (spec/SCB.md §4): resolving the region,
//! obtaining a slot (through the agent or directly), REGISTERED -> RUNNING, and the way back to INIT.

use std::{
    ffi::c_void,
    path::{Path, PathBuf},
    time::Duration,
    ptr::{addr_of, addr_of_mut},
    sync::{atomic::Ordering, Arc},
};

use morpheus_abi::{escapable_default, RuntimeMode, Scb, WorkerState};

use crate::{
    agent::{self, AgentConnection},
    config::{validate_priority, Config, RegionSource, Registration},
    error::{Error, Result},
    lifeline::{self, Instance, NoticeLevel},
    protocol,
    raw::{current_raw, inner, make_detached, next_epoch, touch_exit_guard, RawWorker},
    region::{discover, DetachReason, Discovered, Region},
    slow_path::{Channel, Inner, YieldCounts},
    sys::{self, a32, a64, ai32},
};

/// Where the worker's region comes from, before any slot is asked for.
enum Resolved {
    /// A region mapped already (a path, an attached region, or found by discovery).
    Region(Arc<Region>),
    /// The agent hands the region over with its reply (spec/SCB.md §1.2: its socket exists).
    FromAgent,
    Detached(Absent),
}

/// Why a registration found no scheduler (spec/SCB.md §6.1, §7), and where a new one may appear.
pub(crate) struct Absent {
    pub(crate) reason: DetachReason,
    /// What exactly was found, for the log line and `detach_detail` (None: nothing to add).
    pub(crate) detail: Option<String>,
    /// A socket on which a new instance would end the absence, and the old socket's identity.
    pub(crate) awaits: Option<(PathBuf, Option<lifeline::SocketId>)>,
}

impl Absent {
    fn plain(reason: DetachReason) -> Absent {
        Absent { reason, detail: None, awaits: None }
    }
}

/// The agent socket a configuration registers through, if it does.
pub(crate) fn agent_socket(config: &Config) -> Option<PathBuf> {
    match &config.registration {
        Registration::Agent => Some(agent::socket_path()),
        Registration::AgentAt(path) => Some(path.clone()),
        Registration::Direct { .. } => None,
    }
}

fn resolve_region(config: &Config) -> Result<Resolved> {
    Ok(match &config.region {
        RegionSource::Discover => {
            // §1.2: MORPHEUS_REGION first; then, registering through an agent whose socket exists, the
            // region the agent sends; then the default paths (1.2 agents); else detached.
            let via_agent = agent_socket(config);
            let env_set = std::env::var_os(morpheus_abi::ENV_REGION).is_some();
            if let (Registration::AgentAt(path), false) = (&config.registration, env_set) {
                // A socket the application named and that does not exist is a mistake, not an absence.
                if !path.exists() {
                    return Err(Error::io(
                        format!("no agent socket at {} (the path given as the agent's socket)", path.display()),
                        std::io::Error::from(std::io::ErrorKind::NotFound),
                    ));
                }
            }
            match via_agent {
                Some(socket) if !env_set && socket.exists() => Resolved::FromAgent,
                _ => match discover() {
                    Ok(Discovered::Attached(region)) => Resolved::Region(region),
                    Ok(Discovered::Detached(reason)) => Resolved::Detached(Absent::plain(reason)),
                    // §6.1: a retired region at a default path is a stopped scheduler, not an error.
                    Err(Error::NotReady { path }) if !env_set => Resolved::Detached(Absent {
                        reason: DetachReason::NoScheduler,
                        detail: Some(format!(
                            "the region at {} is retired (generation 0): its scheduler stopped",
                            path.display()
                        )),
                        awaits: via_agent.map(|socket| (socket, None)),
                    }),
                    Err(other) => return Err(other),
                },
            }
        }
        RegionSource::Path(path) => Resolved::Region(Region::open(path)?),
        RegionSource::Region(region) => Resolved::Region(region.clone()),
        RegionSource::Detached => Resolved::Detached(Absent::plain(DetachReason::Requested)),
    })
}

/// The registrar's half of INIT -> CLAIMED -> REGISTERED, done by the SDK itself (direct
/// registration, §4): the claim CAS, the slot's data, then REGISTERED with release, so whoever
/// acquires REGISTERED sees the data, and no other registrar can assign the slot meanwhile.
fn direct_assign(region: &Region, slot: u32, escapable: bool, priority: i32) -> Result<(*mut Scb, u32)> {
    let scb = region.scb_ptr(slot)?;
    check_generation(region)?;
    // SAFETY: scb points into the validated, mapped region; every access is atomic.
    unsafe {
        let state = a32(addr_of!((*scb).worker_state));
        protocol::claim(state, WorkerState::Init).map_err(|found| Error::SlotBusy { slot, state: found })?;
        let fields = protocol::SlotFields {
            worker_state: state,
            tid: a32(addr_of!((*scb).tid)),
            pid: a32(addr_of!((*scb).pid)),
            slot_generation: a32(addr_of!((*scb).slot_generation)),
            escapable: a32(addr_of!((*scb).escapable)),
            priority: ai32(addr_of!((*scb).priority)),
            preempt_seq: a64(addr_of!((*scb).preempt_seq)),
            last_ack_seq: a64(addr_of!((*scb).last_ack_seq)),
            budget_remaining_ns: a64(addr_of!((*scb).budget_remaining_ns)),
            escalated: a32(addr_of!((*scb).escalated)),
        };
        let who = protocol::Assignee {
            tid: sys::gettid(),
            pid: sys::getpid(),
            escapable,
            priority,
            scheduler_slice_ns: None,
        };
        let slot_generation = protocol::assign_claimed(&fields, &who);
        Ok((scb, slot_generation))
    }
}

/// The registrar's DEAD -> CLAIMED -> INIT (§4): the claim CAS from the state observed, the reclaim
/// clear over the whole stride (generated from spec/abi.toml, one source for every language), then
/// INIT with release. `SLOT_BUSY` (writing nothing) if another registrar took the slot meanwhile.
///
/// # Safety
/// `scb` is slot `slot` of `region`.
pub(crate) unsafe fn reclaim(region: &Region, scb: *mut Scb, slot: u32, observed: WorkerState) -> Result<()> {
    let state = a32(addr_of!((*scb).worker_state));
    let stride = region.scb_stride() as usize;
    protocol::reclaim(state, observed.raw(), || morpheus_abi::scb_clear_for_reuse(scb as *mut u8, stride))
        .map_err(|found| Error::SlotBusy { slot, state: found })
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
    region: Option<Arc<Region>>,
    socket: &Path,
    priority: i32,
) -> Result<(Arc<Region>, *mut Scb, u32, u32, AgentConnection)> {
    let mut conn = AgentConnection::connect(socket)?;
    let mut assignment = conn.register(sys::gettid(), config.runtime_kind, config.escapable, priority)?;
    let slot = assignment.slot;
    let release = |conn: &mut AgentConnection, err: Error| {
        let _ = conn.unregister(slot, config.runtime_kind);
        err
    };
    // The slot is in the region the agent sent (1.3: its descriptor, the only way to reach a sim
    // region); a 1.2 agent names a path instead, followed unless the application chose a region.
    let region = match (assignment.region_fd.take(), &assignment.region_path, region) {
        (Some(fd), _, _) => Region::from_agent_fd(fd, socket).map_err(|e| release(&mut conn, e))?,
        (None, Some(path), Some(region)) if matches!(config.region, RegionSource::Discover) && path != region.path() => {
            Region::open(path).map_err(|e| release(&mut conn, e))?
        }
        (None, _, Some(region)) => region,
        (None, Some(path), None) => Region::open(path).map_err(|e| release(&mut conn, e))?,
        (None, None, None) => {
            let err = Error::io(
                format!("the agent at {} assigned slot {slot} but sent neither a region descriptor nor a path", socket.display()),
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            );
            return Err(release(&mut conn, err));
        }
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

/// A slot obtained and its region, before the worker is RUNNING.
struct Attachment {
    region: Arc<Region>,
    scb: *mut Scb,
    slot: u32,
    slot_generation: u32,
    channel: Channel,
    instance: Option<Arc<Instance>>,
}

/// Resolve the region and obtain a slot (through the agent or directly), or find no scheduler. A
/// socket that exists but accepts nothing is a stopped or killed agent's leftover: detached (§6.1).
fn obtain(config: &Config, escapable: bool, priority: i32) -> Result<std::result::Result<Attachment, Absent>> {
    let resolved = resolve_region(config)?;
    let premapped = match resolved {
        Resolved::Detached(absent) => return Ok(Err(absent)),
        Resolved::Region(region) => Some(region),
        Resolved::FromAgent => None,
    };
    Ok(Ok(match (&config.registration, premapped) {
        (Registration::Direct { slot }, Some(region)) => {
            let (scb, slot_generation) = direct_assign(&region, *slot, escapable, priority)?;
            Attachment { region, scb, slot: *slot, slot_generation, channel: Channel::Direct, instance: None }
        }
        (Registration::Direct { .. }, None) => unreachable!("direct registration never resolves to the agent"),
        (Registration::Agent | Registration::AgentAt(_), premapped) => {
            let socket = agent_socket(config).expect("registration through the agent");
            let (region, scb, slot, slot_generation, conn) = match agent_assign(config, premapped, &socket, priority) {
                Ok(assigned) => assigned,
                // Refused: the socket is a leftover. Gone meanwhile: the same, unless the application
                // named the socket (then a missing one is its mistake, §1.2).
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::ConnectionRefused
                        || (source.kind() == std::io::ErrorKind::NotFound
                            && matches!(config.registration, Registration::Agent)) =>
                {
                    return Ok(Err(Absent {
                        reason: DetachReason::NoScheduler,
                        detail: Some(format!(
                            "the socket {} exists but no agent accepts on it (a stopped or killed scheduler's leftover)",
                            socket.display()
                        )),
                        awaits: Some((socket.clone(), lifeline::socket_identity(&socket))),
                    }))
                }
                Err(other) => return Err(other),
            };
            let instance = lifeline::instance_for(&socket, conn.agent_pid(), &region);
            Attachment { region, scb, slot, slot_generation, channel: Channel::Agent(conn), instance }
        }
    }))
}

/// REGISTERED -> RUNNING (§4) on the slot just obtained, recording it in `inner`.
unsafe fn start_running(raw: *mut RawWorker, inner: &mut Inner, attachment: Attachment) -> Result<()> {
    let Attachment { region, scb, slot, slot_generation, channel, instance } = attachment;
    inner.scb = scb;
    inner.slot = Some(slot);
    inner.slot_generation = slot_generation;
    inner.channel = channel;
    inner.instance = instance;
    let (escapable, priority) = (inner.escapable, inner.priority);
    inner.acked = a64(addr_of!((*scb).last_ack_seq)).load(Ordering::Acquire);
    inner.last_hints_dropped = a32(addr_of!((*scb).hints_dropped)).load(Ordering::Relaxed);
    // Generation checked just before the writes.
    check_generation(&region)?;
    a32(addr_of!((*scb).runtime_kind)).store(inner.kind.raw(), Ordering::Relaxed);
    // The registrar wrote escapable and priority before REGISTERED (from this config); they are not
    // overwritten. Only a registrar that did not know them (an agent older than 1.3) left other
    // values, which are corrected here, still before RUNNING.
    let escapable_field = a32(addr_of!((*scb).escapable));
    if escapable_field.load(Ordering::Relaxed) != escapable as u32 {
        escapable_field.store(escapable as u32, Ordering::Release);
    }
    let priority_field = a32(addr_of!((*scb).priority) as *const u32);
    if priority_field.load(Ordering::Relaxed) != priority as u32 {
        priority_field.store(priority as u32, Ordering::Relaxed);
    }
    a32(addr_of!((*scb).runtime_mode)).store(RuntimeMode::Deterministic.raw(), Ordering::Relaxed);
    // Critical depth is per thread and survives registration: a section opened before it (e.g. under
    // the thread's previous worker) is still open, and the SCB says so before the worker is RUNNING.
    a32(addr_of!((*scb).in_critical)).store(((*raw).critical_depth > 0) as u32, Ordering::Relaxed);
    protocol::publish_state(a32(addr_of!((*scb).worker_state)), WorkerState::Running);
    inner.mode = RuntimeMode::Deterministic;
    inner.region = Some(region);
    Ok(())
}

/// Point the fast-path state at what `inner` holds: its SCB, or (waiting for a scheduler) the wake
/// sequence, or the detached statics.
unsafe fn install(raw: *mut RawWorker, inner: &Inner) {
    let depth = (*raw).critical_depth;
    let owner = (*raw).inner;
    *raw = match (&inner.region, inner.scb) {
        (Some(region), scb) if !scb.is_null() && inner.lost.is_none() => RawWorker {
            preempt_seq: addr_of!((*scb).preempt_seq),
            cached_ack: inner.acked,
            critical_depth: depth,
            reserved: 0,
            in_critical: addr_of_mut!((*scb).in_critical),
            generation: region.generation_ptr(),
            attached_generation: region.attached_generation(),
            inner: owner,
        },
        _ => RawWorker { critical_depth: depth, inner: owner, ..RawWorker::DETACHED },
    };
}

/// Register the calling thread; the worker stays with the thread until [`unregister_current_thread`]
/// or the thread exits. Returns the thread's [`RawWorker`].
pub fn register_current_thread(config: &Config) -> Result<*mut RawWorker> {
    // The refusals in spec/SCB.md §4's order: the SDK's own arguments (INVALID_ARGUMENT), then a
    // thread that holds a worker (ALREADY_REGISTERED), then the slot (direct_assign) or the agent.
    let priority = validate_priority(config.priority.into())?;
    let raw = current_raw();
    // SAFETY: our own thread's state.
    if let Some(existing) = unsafe { inner(raw) } {
        return Err(Error::AlreadyRegistered { slot: existing.slot });
    }
    let epoch = next_epoch();
    let escapable = config.escapable.unwrap_or_else(|| escapable_default(config.runtime_kind));
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
        detach_detail: None,
        mode: RuntimeMode::Deterministic,
        last_hints_dropped: 0,
        last_yield_ns: sys::mode_now_ns(),
        last_mode_eval_ns: 0,
        counts: YieldCounts::default(),
        escapable,
        priority,
        config: config.clone(),
        instance: None,
        awaiting: None,
        reattachments: 0,
        deferred: 0,
        deferred_since_ns: 0,
        leak_noticed: false,
    });

    let wake = lifeline::WAKE_SEQ.load(Ordering::Acquire);
    match obtain(config, escapable, priority)? {
        Err(absent) => {
            inner.detach_reason = Some(absent.reason);
            if let Some(detail) = &absent.detail {
                lifeline::notice(NoticeLevel::Warning, &format!("running detached: {detail}"));
            } else if absent.reason == DetachReason::NoScheduler {
                lifeline::notice(NoticeLevel::Info, "running detached: no scheduler found (spec/SCB.md §1.2)");
            }
            inner.detach_detail = absent.detail;
            if let Some((socket, old_id)) = absent.awaits {
                lifeline::await_instance(&socket, old_id, Duration::ZERO);
                inner.awaiting = Some(socket);
            }
        }
        // SAFETY: our slot in the mapped region, REGISTERED for this thread.
        Ok(attachment) => unsafe { start_running(raw, &mut inner, attachment)? },
    }

    // SAFETY: our own thread's state; no borrows of it are live.
    unsafe {
        (*raw).inner = Box::into_raw(inner) as *mut c_void;
        let inner = &*((*raw).inner as *const Inner);
        install(raw, inner);
        if inner.awaiting.is_some() {
            await_wake(raw, wake);
        }
    }
    touch_exit_guard();
    Ok(raw)
}

/// Make the fast path read the wake sequence, with `seen` as the value already seen: a bump after it
/// sends the next checkpoint to the slow path, which registers again (§6.1).
pub(crate) unsafe fn await_wake(raw: *mut RawWorker, seen: u64) {
    let depth = (*raw).critical_depth;
    let owner = (*raw).inner;
    *raw = RawWorker {
        preempt_seq: lifeline::WAKE_SEQ.as_ptr(),
        cached_ack: seen,
        critical_depth: depth,
        inner: owner,
        ..RawWorker::DETACHED
    };
}

/// A worker waiting for a scheduler (lost, or detached at start by a stopped agent): outside a
/// critical section, shut the old registration down (writing nothing, §6) and register again with the
/// original options. Returns whether the worker is attached again. A failure is logged once and waits
/// for the watcher's next wake-up (never a retry per checkpoint).
pub(crate) unsafe fn reattach(raw: *mut RawWorker) -> bool {
    if (*raw).critical_depth > 0 {
        return false; // the wake-up stays pending until the section ends
    }
    let Some(inner) = inner(raw) else { return false };
    let Some(socket) = inner.awaiting.clone() else { return false };
    let wake = lifeline::WAKE_SEQ.load(Ordering::Acquire);
    // The lost registration is dropped without a write: its instance is gone (§6). Its region stays
    // known until a new one replaces it, so that status still names the generations.
    let old_region = inner.region.take();
    inner.scb = std::ptr::null_mut();
    inner.slot = None;
    inner.channel = Channel::None;
    inner.instance = None;
    let (escapable, priority) = (inner.escapable, inner.priority);
    let outcome = obtain(&inner.config, escapable, priority);
    // No agent there: wait for a new socket at once. An agent that refused: try again later.
    let mut retry_after = lifeline::RETRY_AFTER_FAILURE;
    let failure = match outcome {
        Ok(Ok(attachment)) => match start_running(raw, inner, attachment) {
            Ok(()) => None,
            Err(e) => Some(e.to_string()),
        },
        Ok(Err(absent)) => {
            retry_after = Duration::ZERO;
            Some(absent.detail.unwrap_or_else(|| "no scheduler found".into()))
        }
        Err(Error::Io { context, source }) if source.kind() == std::io::ErrorKind::NotFound => {
            retry_after = Duration::ZERO;
            Some(Error::Io { context, source }.to_string())
        }
        Err(e) => Some(e.to_string()),
    };
    match failure {
        None => {
            inner.lost = None;
            inner.awaiting = None;
            inner.detach_reason = None;
            inner.detach_detail = None;
            inner.reattachments += 1;
            let pid = inner.instance.as_ref().map(|i| i.pid().to_string()).unwrap_or_else(|| "unknown".into());
            lifeline::notice(
                NoticeLevel::Warning,
                &format!(
                    "registered again with the scheduler at {} (agent pid {pid}, slot {}, re-registration {})",
                    socket.display(),
                    inner.slot.unwrap_or_default(),
                    inner.reattachments
                ),
            );
            install(raw, inner);
            true
        }
        Some(why) => {
            if inner.slot.is_some() {
                // Registered, then refused before RUNNING (the generation moved): give the slot back.
                if let Channel::Agent(conn) = &mut inner.channel {
                    let _ = conn.unregister(inner.slot.unwrap(), inner.kind);
                }
                inner.scb = std::ptr::null_mut();
                inner.slot = None;
                inner.channel = Channel::None;
                inner.instance = None;
            }
            inner.region = old_region;
            inner.detach_detail = Some(why.clone());
            lifeline::notice(NoticeLevel::Warning, &format!("could not register again at {}: {why}; waiting for the next scheduler instance", socket.display()));
            let old_id = if retry_after.is_zero() { lifeline::socket_identity(&socket) } else { None };
            lifeline::await_instance(&socket, old_id, retry_after);
            await_wake(raw, wake);
            false
        }
    }
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

pub(crate) unsafe fn shutdown(raw: *mut RawWorker) -> Result<()> {
    let inner = Box::from_raw((*raw).inner as *mut Inner);
    make_detached(raw);
    (*raw).inner = std::ptr::null_mut();
    let Inner { region, scb, slot, channel, kind, lost, instance, .. } = *inner;
    let (Some(region), Some(slot)) = (region, slot) else { return Ok(()) };
    // A lost worker's shutdown succeeds and writes nothing, whether or not the loss was noticed
    // before (SCB.md §6): the region belongs to a scheduler instance that no longer reads it. So
    // does one whose agent is gone (§6.1: killed, nothing retired; no UNREGISTER to send).
    if lost.is_some() || scb.is_null() || check_generation(&region).is_err() || instance.is_some_and(|i| i.is_gone()) {
        return Ok(());
    }
    let state = a32(addr_of!((*scb).worker_state));
    protocol::critical_exit(a32(addr_of!((*scb).in_critical)));
    protocol::publish_state(state, WorkerState::Quiescing);
    protocol::publish_state(state, WorkerState::Dead);
    match channel {
        Channel::Agent(mut conn) => conn.unregister(slot, kind),
        // Direct registration: the registrar's DEAD -> CLAIMED -> INIT, done by the SDK itself.
        Channel::Direct => reclaim(&region, scb, slot, WorkerState::Dead),
        Channel::None => Ok(()),
    }
}
