// SPDX-License-Identifier: GPL-2.0-only
//! The registration channel (spec/SCB.md, "Registration"): a Unix stream socket on which a runtime
//! sends reg_request messages and reads one reg_reply per request.
//!
//! The agent checks the caller with SO_PEERCRED (the tid must be a thread of the calling process),
//! assigns a free slot (CAS INIT -> CLAIMED; tid, pid, slot_generation + 1, last_ack_seq := preempt_seq,
//! escapable, priority; then REGISTERED, release), releases slots on UNREGISTER and reclaims those of dead threads. Every
//! refusal is a reg_status reply; nothing a client sends can crash the agent or leak a slot.

use std::io::{self, Read, Write};
use std::mem::size_of;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegStatus, WorkerState};

use crate::backend::{Config, SlotObserver};
use crate::region::{self, Region};

/// Connections served at once; more are closed at once (a flood cannot exhaust threads).
const MAX_CONNECTIONS: usize = 64;
/// A client that starts a request must finish it within this time.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often slots of dead threads are looked for.
const RECLAIM_INTERVAL: Duration = Duration::from_millis(200);
/// `sun_path` of struct sockaddr_un, including the NUL.
const SUN_PATH_MAX: usize = 108;

/// Refuses a socket path that cannot be bound, before anything is created.
pub fn check_socket_path(path: &Path) -> Result<()> {
    let len = path.as_os_str().len();
    if len == 0 {
        bail!("--socket: the path is empty");
    }
    if len >= SUN_PATH_MAX {
        bail!("--socket {}: the path is {len} bytes; a Unix socket path must be shorter than {SUN_PATH_MAX}", path.display());
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner {
    tid: u32,
    pid: u32,
}

struct Shared {
    region: Arc<Region>,
    observer: Option<Arc<dyn SlotObserver>>,
    /// Agent-private record of who holds each slot (the SCB says the same; this is what we trust).
    owners: Mutex<Vec<Option<Owner>>>,
    max_per_process: u32,
    region_path: [u8; abi::REGION_PATH_MAX as usize],
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// The running registration service (a thread accepting connections).
pub struct Registry {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    socket_path: PathBuf,
}

fn thread_exists(pid: u32, tid: u32) -> bool {
    pid != 0 && tid != 0 && Path::new(&format!("/proc/{pid}/task/{tid}")).exists()
}

impl Registry {
    /// Binds the socket (replacing a stale one left by a killed instance) and starts serving.
    pub fn start(config: &Config, region: Arc<Region>, observer: Option<Arc<dyn SlotObserver>>) -> Result<Registry> {
        let path = &config.socket_path;
        let region_path = region::path_for_reply(region.path()).with_context(|| {
            format!("region path {} does not fit a registration reply ({} bytes)", region.path().display(), abi::REGION_PATH_MAX)
        })?;
        let listener = bind(path)?;
        listener.set_nonblocking(true).context("cannot make the registration socket non-blocking")?;
        let shared = Arc::new(Shared {
            owners: Mutex::new(vec![None; region.scb_count() as usize]),
            region,
            observer,
            max_per_process: config.max_workers_per_process,
            region_path,
            connections: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("registry".into())
            .spawn(move || accept_loop(listener, worker))
            .context("cannot start the registry thread")?;
        Ok(Registry { shared, thread: Some(thread), socket_path: path.clone() })
    }

    /// Workers holding a slot now.
    pub fn registered(&self) -> usize {
        self.shared.owners.lock().map(|o| o.iter().filter(|s| s.is_some()).count()).unwrap_or(0)
    }

    /// Stops accepting, waits for the accept thread, removes the socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
            let _ = std::fs::remove_file(&self.socket_path);
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn bind(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create socket directory {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            // Held by a live server? The instance lock makes this unlikely, but a server started
            // without it (an older agent, another program) must not lose its socket to us.
            match UnixStream::connect(path) {
                Ok(_) => bail!("--socket {}: another process is accepting connections on it; stop it first", path.display()),
                Err(_) => {
                    log::info!("removing stale socket {} left by an earlier instance", path.display());
                    std::fs::remove_file(path).with_context(|| format!("cannot remove stale socket {}", path.display()))?;
                }
            }
        }
        Ok(_) => bail!("--socket {}: the path exists and is not a socket; refusing to replace it", path.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot inspect socket path {}", path.display())),
    }
    let listener = UnixListener::bind(path).with_context(|| format!("cannot bind registration socket {}", path.display()))?;
    // Runtimes of any user register; SO_PEERCRED is what authenticates them.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot chmod {}", path.display()))?;
    Ok(listener)
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut last_reclaim = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, 100) };
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    if shared.connections.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                        log::warn!("registration: {MAX_CONNECTIONS} connections open; closing a new one");
                        continue;
                    }
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    let conn_shared = Arc::clone(&shared);
                    let spawned = std::thread::Builder::new().name("registry-conn".into()).spawn(move || {
                        serve_connection(stream, &conn_shared);
                        conn_shared.connections.fetch_sub(1, Ordering::SeqCst);
                    });
                    if let Err(e) = spawned {
                        shared.connections.fetch_sub(1, Ordering::SeqCst);
                        log::warn!("registration: cannot start a connection thread: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::warn!("registration: accept failed: {e}");
                    break;
                }
            }
        }
        if last_reclaim.elapsed() >= RECLAIM_INTERVAL {
            reclaim_dead(&shared);
            last_reclaim = Instant::now();
        }
    }
}

fn peer_pid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the right size.
    let rc = unsafe {
        libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.pid as u32)
}

/// Reads exactly `buf.len()` bytes; Ok(false) on a clean EOF before the first byte.
fn read_message(stream: &mut UnixStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("request cut short after {got} bytes"))),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn reply_bytes(reply: &RegReply) -> &[u8] {
    // SAFETY: RegReply is repr(C) with explicit padding fields (no implicit padding: spec rule).
    unsafe { std::slice::from_raw_parts((reply as *const RegReply).cast::<u8>(), size_of::<RegReply>()) }
}

fn refusal(status: RegStatus) -> RegReply {
    RegReply {
        magic: abi::REG_MAGIC,
        status: status.raw(),
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        ..Default::default()
    }
}

fn serve_connection(mut stream: UnixStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let pid = match peer_pid(&stream) {
        Ok(pid) => pid,
        Err(e) => {
            log::warn!("registration: SO_PEERCRED failed: {e}");
            let _ = stream.write_all(reply_bytes(&refusal(RegStatus::Internal)));
            return;
        }
    };
    let mut buf = [0u8; size_of::<RegRequest>()];
    loop {
        match read_message(&mut stream, &mut buf) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                log::debug!("registration from pid {pid}: {e}");
                let _ = stream.write_all(reply_bytes(&refusal(RegStatus::Malformed)));
                return;
            }
        }
        // SAFETY: RegRequest is plain old data; any byte pattern is a value.
        let request: RegRequest = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(shared, pid, &request)))
            .unwrap_or_else(|_| {
                log::error!("registration from pid {pid}: internal error (panic); request had no effect");
                refusal(RegStatus::Internal)
            });
        if stream.write_all(reply_bytes(&reply)).is_err() {
            return;
        }
    }
}

fn handle(shared: &Shared, pid: u32, request: &RegRequest) -> RegReply {
    if request.magic != abi::REG_MAGIC {
        log::debug!("registration from pid {pid}: bad magic {:#x}", request.magic);
        return refusal(RegStatus::Malformed);
    }
    if request.abi_major != abi::ABI_MAJOR {
        log::info!(
            "registration from pid {pid}: client ABI major {} differs from the scheduler's {}",
            request.abi_major,
            abi::ABI_MAJOR
        );
        return refusal(RegStatus::AbiMajorMismatch);
    }
    if request._reserved0 != [0; 4] {
        return refusal(RegStatus::Malformed);
    }
    match abi::RegOp::try_from(request.op) {
        Ok(abi::RegOp::Register) => register(shared, pid, request),
        Ok(abi::RegOp::Unregister) => unregister(shared, pid, request.slot),
        Err(op) => {
            log::debug!("registration from pid {pid}: unknown op {op}");
            refusal(RegStatus::Malformed)
        }
    }
}

fn register(shared: &Shared, pid: u32, request: &RegRequest) -> RegReply {
    let tid = request.tid;
    // escapable and priority are written into the SCB before REGISTERED (spec/SCB.md §4), so the worker
    // is never escalatable against its wish, from its first instruction.
    let kind = abi::RuntimeKind::try_from(request.runtime_kind).unwrap_or(abi::RuntimeKind::Unknown);
    let escapable = match abi::RegEscapable::try_from(request.escapable) {
        Ok(abi::RegEscapable::Default) => abi::escapable_default(kind),
        Ok(abi::RegEscapable::No) => false,
        Ok(abi::RegEscapable::Yes) => true,
        Err(value) => {
            log::info!("registration from pid {pid}: escapable {value} is not a reg_escapable");
            return refusal(RegStatus::InvalidArgument);
        }
    };
    if !(abi::PRIORITY_MIN..=abi::PRIORITY_MAX).contains(&request.priority) {
        log::info!("registration from pid {pid}: priority {} is outside -20..19", request.priority);
        return refusal(RegStatus::InvalidArgument);
    }
    if !thread_exists(pid, tid) {
        log::info!("registration from pid {pid}: tid {tid} is not a thread of the caller");
        return refusal(RegStatus::NotCallerTid);
    }
    let mut owners = shared.owners.lock().unwrap_or_else(|p| p.into_inner());
    if owners.iter().flatten().any(|o| o.tid == tid && o.pid == pid) {
        return refusal(RegStatus::AlreadyRegistered);
    }
    let held = owners.iter().flatten().filter(|o| o.pid == pid).count() as u32;
    if held >= shared.max_per_process {
        log::warn!(
            "registration from pid {pid}: refused, it already holds {held} slots (per-process cap {})",
            shared.max_per_process
        );
        return refusal(RegStatus::ProcessLimit);
    }
    let region = &shared.region;
    for slot in 0..region.scb_count() {
        if owners[slot as usize].is_some() {
            continue;
        }
        let scb = region.scb(slot);
        // The hand-off is a CAS into CLAIMED: a direct registration (a harness playing the scheduler)
        // that won the slot keeps it, and a slot in a state this ABI does not know is not free.
        if scb
            .worker_state()
            .compare_exchange(WorkerState::Init.raw(), WorkerState::Claimed.raw(), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        // The slot's data, published by the release store of REGISTERED below.
        scb.tid().store(tid, Ordering::Relaxed);
        scb.pid().store(pid, Ordering::Relaxed);
        let slot_generation = match scb.slot_generation().load(Ordering::Relaxed).wrapping_add(1) {
            0 => 1, // 0 never names an assignment
            next => next,
        };
        scb.slot_generation().store(slot_generation, Ordering::Relaxed);
        scb.last_ack_seq().store(scb.preempt_seq().load(Ordering::Acquire), Ordering::Relaxed);
        scb.budget_remaining_ns().store(region.slice_ns(), Ordering::Relaxed);
        scb.escalated().store(0, Ordering::Relaxed);
        scb.escapable().store(escapable as u32, Ordering::Relaxed);
        scb.priority().store(request.priority, Ordering::Relaxed);
        scb.worker_state().store(WorkerState::Registered.raw(), Ordering::Release);
        if let Some(observer) = &shared.observer {
            if let Err(e) = observer.assigned(slot, tid, pid) {
                log::error!("registration of tid {tid} (pid {pid}) in slot {slot}: backend refused: {e:#}");
                clear_slot(region, slot);
                return refusal(RegStatus::Internal);
            }
        }
        owners[slot as usize] = Some(Owner { tid, pid });
        log::debug!("registered tid {tid} (pid {pid}) in slot {slot}, slot generation {slot_generation}");
        return RegReply {
            magic: abi::REG_MAGIC,
            status: RegStatus::Ok.raw(),
            slot,
            abi_major: abi::ABI_MAJOR,
            abi_minor: abi::ABI_MINOR,
            generation: region.generation(),
            slot_generation,
            region_path: shared.region_path,
            ..Default::default()
        };
    }
    log::warn!("registration of tid {tid} (pid {pid}): all {} slots are in use", region.scb_count());
    refusal(RegStatus::NoFreeSlot)
}

fn unregister(shared: &Shared, pid: u32, slot: u32) -> RegReply {
    let mut owners = shared.owners.lock().unwrap_or_else(|p| p.into_inner());
    let owner = match owners.get(slot as usize).copied().flatten() {
        Some(owner) if owner.pid == pid => owner,
        _ => {
            log::info!("unregister of slot {slot} by pid {pid}: not a slot it holds");
            return refusal(RegStatus::NotOwner);
        }
    };
    release(shared, &mut owners, slot, owner);
    log::debug!("unregistered tid {} (pid {pid}) from slot {slot}", owner.tid);
    RegReply { magic: abi::REG_MAGIC, status: RegStatus::Ok.raw(), slot, abi_major: abi::ABI_MAJOR, abi_minor: abi::ABI_MINOR, ..Default::default() }
}

/// Lifts the backend's escalations for the slot, then frees it: tid/pid cleared, state INIT (release).
fn release(shared: &Shared, owners: &mut [Option<Owner>], slot: u32, owner: Owner) {
    if let Some(observer) = &shared.observer {
        observer.released(slot, owner.tid, owner.pid);
    }
    clear_slot(&shared.region, slot);
    owners[slot as usize] = None;
}

/// The registrar's reclaim (spec/SCB.md §4): CAS the state it finds (DEAD, or whatever a gone thread
/// left) to CLAIMED, the generated reclaim clear over the whole stride, then INIT with release so the
/// next owner sees a clean slot. A slot whose state changes under the CAS is retried with the new one.
fn clear_slot(region: &Region, slot: u32) {
    let scb = region.scb(slot);
    let state = scb.worker_state();
    let mut observed = state.load(Ordering::Acquire);
    loop {
        if observed == WorkerState::Init.raw() || observed == WorkerState::Claimed.raw() {
            return; // already free, or another registrar holds the hand-off
        }
        match state.compare_exchange(observed, WorkerState::Claimed.raw(), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(now) => observed = now,
        }
    }
    scb.clear_for_reuse();
    state.store(WorkerState::Init.raw(), Ordering::Release);
}

/// Frees the slots of threads that exited without unregistering (crash, kill, forgotten shutdown).
fn reclaim_dead(shared: &Shared) {
    let mut owners = shared.owners.lock().unwrap_or_else(|p| p.into_inner());
    for slot in 0..owners.len() {
        if let Some(owner) = owners[slot] {
            if !thread_exists(owner.pid, owner.tid) {
                log::info!("reclaimed slot {slot}: thread {} of pid {} is gone", owner.tid, owner.pid);
                release(shared, &mut owners, slot as u32, owner);
            }
        }
    }
}
