// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Registration and shutdown of the calling thread's worker (spec/SCB.md §4): resolving the region,
//! obtaining a slot (through the agent or directly), REGISTERED -> RUNNING, and the way back to INIT.

use std::{
    ffi::c_void,
    path::Path,
    ptr::{addr_of, addr_of_mut},
    sync::{atomic::Ordering, Arc},
};

use morpheus_abi::{escapable_default, RuntimeMode, Scb, WorkerState};

use crate::{
    agent::{self, AgentConnection},
    config::{validate_priority, Config, RegionSource, Registration},
    error::{Error, Result},
    protocol,
    raw::{current_raw, inner, make_detached, next_epoch, touch_exit_guard, RawWorker},
    region::{discover, DetachReason, Discovered, Region},
    slow_path::{Channel, Inner, YieldCounts},
    sys::{self, a32, a64},
};

/// Where the worker's region comes from, before any slot is asked for.
enum Resolved {
    /// A region mapped already (a path, an attached region, or found by discovery).
    Region(Arc<Region>),
    /// The agent hands the region over with its reply (spec/SCB.md §1.2: its socket exists).
    FromAgent,
    Detached(DetachReason),
}

fn resolve_region(config: &Config) -> Result<Resolved> {
    Ok(match &config.region {
        RegionSource::Discover => {
            // §1.2: MORPHEUS_REGION first; then, registering through an agent whose socket exists, the
            // region the agent sends; then the default paths (1.2 agents); else detached.
            let via_agent = match &config.registration {
                Registration::Agent => Some(agent::socket_path()),
                Registration::AgentAt(path) => Some(path.clone()),
                Registration::Direct { .. } => None,
            };
            let env_set = std::env::var_os(morpheus_abi::ENV_REGION).is_some();
            match via_agent {
                Some(socket) if !env_set && socket.exists() => Resolved::FromAgent,
                _ => match discover()? {
                    Discovered::Attached(region) => Resolved::Region(region),
                    Discovered::Detached(reason) => Resolved::Detached(reason),
                },
            }
        }
        RegionSource::Path(path) => Resolved::Region(Region::open(path)?),
        RegionSource::Region(region) => Resolved::Region(region.clone()),
        RegionSource::Detached => Resolved::Detached(DetachReason::Requested),
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
        a32(addr_of!((*scb).tid)).store(sys::gettid(), Ordering::Relaxed);
        a32(addr_of!((*scb).pid)).store(sys::getpid(), Ordering::Relaxed);
        let slot_generation_field = a32(addr_of!((*scb).slot_generation));
        let slot_generation = protocol::next_slot_generation(slot_generation_field.load(Ordering::Relaxed));
        slot_generation_field.store(slot_generation, Ordering::Relaxed);
        let seq = a64(addr_of!((*scb).preempt_seq)).load(Ordering::Acquire);
        a64(addr_of!((*scb).last_ack_seq)).store(seq, Ordering::Relaxed);
        a32(addr_of!((*scb).escapable)).store(escapable as u32, Ordering::Relaxed);
        a32(addr_of!((*scb).priority) as *const u32).store(priority as u32, Ordering::Relaxed);
        protocol::publish_state(state, WorkerState::Registered);
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
    protocol::claim(state, observed).map_err(|found| Error::SlotBusy { slot, state: found })?;
    morpheus_abi::scb_clear_for_reuse(scb as *mut u8, region.scb_stride() as usize);
    protocol::publish_state(state, WorkerState::Init);
    Ok(())
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

/// Register the calling thread; the worker stays with the thread until [`unregister_current_thread`]
/// or the thread exits. Returns the thread's [`RawWorker`].
pub fn register_current_thread(config: &Config) -> Result<*mut RawWorker> {
    let raw = current_raw();
    // SAFETY: our own thread's state.
    if let Some(existing) = unsafe { inner(raw) } {
        return Err(Error::AlreadyRegistered { slot: existing.slot });
    }
    let epoch = next_epoch();
    let escapable = config.escapable.unwrap_or_else(|| escapable_default(config.runtime_kind));
    let priority = validate_priority(config.priority.into())?;
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

    let resolved = resolve_region(config)?;
    match resolved {
        Resolved::Detached(reason) => inner.detach_reason = Some(reason),
        Resolved::Region(_) | Resolved::FromAgent => {
            let premapped = match resolved {
                Resolved::Region(region) => Some(region),
                _ => None,
            };
            let (region, scb, slot, slot_generation, channel) = match (&config.registration, premapped) {
                (Registration::Direct { slot }, Some(region)) => {
                    let (scb, slot_generation) = direct_assign(&region, *slot, escapable, priority)?;
                    (region, scb, *slot, slot_generation, Channel::Direct)
                }
                (Registration::Direct { .. }, None) => unreachable!("direct registration never resolves to the agent"),
                (Registration::Agent | Registration::AgentAt(_), premapped) => {
                    let socket = match &config.registration {
                        Registration::AgentAt(path) => path.clone(),
                        _ => agent::socket_path(),
                    };
                    let (region, scb, slot, slot_generation, conn) = agent_assign(config, premapped, &socket, priority)?;
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
                check_generation(&region)?;
                a32(addr_of!((*scb).runtime_kind)).store(config.runtime_kind.raw(), Ordering::Relaxed);
                // The registrar wrote escapable and priority before REGISTERED (from this config); they
                // are not overwritten. Only a registrar that did not know them (an agent older than
                // 1.3) left other values, which are corrected here, still before RUNNING.
                let escapable_field = a32(addr_of!((*scb).escapable));
                if escapable_field.load(Ordering::Relaxed) != escapable as u32 {
                    escapable_field.store(escapable as u32, Ordering::Release);
                }
                let priority_field = a32(addr_of!((*scb).priority) as *const u32);
                if priority_field.load(Ordering::Relaxed) != priority as u32 {
                    priority_field.store(priority as u32, Ordering::Relaxed);
                }
                a32(addr_of!((*scb).runtime_mode)).store(RuntimeMode::Deterministic.raw(), Ordering::Relaxed);
                // Critical depth is per thread and survives registration: a section opened before it
                // (e.g. under the thread's previous worker) is still open, and the SCB says so before
                // the worker is RUNNING.
                a32(addr_of!((*scb).in_critical)).store(((*raw).critical_depth > 0) as u32, Ordering::Relaxed);
                protocol::publish_state(a32(addr_of!((*scb).worker_state)), WorkerState::Running);
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
    touch_exit_guard();
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

pub(crate) unsafe fn shutdown(raw: *mut RawWorker) -> Result<()> {
    let inner = Box::from_raw((*raw).inner as *mut Inner);
    make_detached(raw);
    (*raw).inner = std::ptr::null_mut();
    let Inner { region, scb, slot, channel, kind, lost, .. } = *inner;
    let (Some(region), Some(slot)) = (region, slot) else { return Ok(()) };
    // A lost worker's shutdown succeeds and writes nothing, whether or not the loss was noticed
    // before (SCB.md §6): the region belongs to a scheduler instance that no longer reads it.
    if lost.is_some() || scb.is_null() || check_generation(&region).is_err() {
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
