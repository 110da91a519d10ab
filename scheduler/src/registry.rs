// SPDX-License-Identifier: GPL-2.0-only
//! The registration channel (spec/SCB.md §4.1): a Unix stream socket on which a runtime sends
//! reg_request messages and reads one reg_reply per request; a successful REGISTER reply carries the
//! descriptor of the caller's region (SCM_RIGHTS).
//!
//! Trust (§10): the caller is the process that connected, pinned at accept by a pidfd and its /proc
//! directory (src/identity.rs), with the uid SO_PEERCRED says; once that process is gone the
//! connection is closed before any further request is answered. The tid it names is looked up
//! relative to its own /proc directory (translated through its pid namespace if it is not the
//! agent's) and pinned for as long as the slot is held; the slot is freed as soon as that thread's
//! descriptor says it exited. Slots are placed in the caller's
//! trust domain (src/domains.rs) and recorded in the agent's own table, which is all the backends
//! believe. Quotas are per process and per uid, connections are limited per uid, and every request has
//! a whole-request deadline, so one user cannot starve another's registrations (S8). Every refusal is
//! a reg_status reply; nothing a client sends can crash the agent or leak a slot.

use std::collections::HashMap;
use std::io::{self, Read};
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegStatus, WorkerState};

use crate::backend::SlotObserver;
use crate::domains::{Assigned, Domain, DomainError, Domains, Workers};
use crate::identity::{Peer, Refused};
use crate::journal::Journal;
use crate::region::{self, Region, ScbRef};
use morpheus::protocol;
use crate::rundir::RuntimeDir;
use crate::subuid::{Owners, SubuidMap};

/// Connections served at once, and by one uid; more are closed at once (a flood cannot exhaust
/// threads, and one user's flood cannot lock another out).
const MAX_CONNECTIONS: usize = 64;
const MAX_CONNECTIONS_PER_UID: usize = 16;
/// A connection may stay idle between requests this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// A request must be complete this long after its first byte (a client trickling bytes is cut off).
const REQUEST_DEADLINE: Duration = Duration::from_secs(1);
/// How often the subordinate uid file is checked for a change, and the slots of threads without a
/// thread pidfd (kernels before 6.9) are checked through their /proc directory; a thread with one is
/// released as soon as its pidfd polls readable.
const RECLAIM_INTERVAL: Duration = Duration::from_millis(200);
/// Refusals are logged one by one only at debug level; at the default level, at most one summary
/// line per this interval says how many there were, of what, and from whom (A05: one member
/// pipelining refusals produced 3,000 lines a second, and journald's rate limit then dropped the
/// agent's real messages).
const REFUSAL_SUMMARY_INTERVAL: Duration = Duration::from_secs(10);
/// Refused requests a user (with its subordinate uids) may cause per second, over all its
/// connections, after a burst of as many: past that, each refusal is answered only after a delay
/// (the connection's thread sleeps), and a connection that would wait longer than
/// [`REFUSAL_MAX_WAIT`] is closed. A member cannot make the root agent do more than this much
/// refused work per second, whatever the number of its connections.
const REFUSALS_PER_SECOND: u32 = 50;
const REFUSAL_MAX_WAIT: Duration = Duration::from_secs(1);
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
    if path.file_name().is_none() {
        bail!("--socket {}: the path names no file", path.display());
    }
    Ok(())
}

/// Limits of the registration service, and the slice a new slot starts with.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub per_process: u32,
    pub per_uid: u32,
    pub slice_ns: u64,
}

pub struct Shared {
    domains: Arc<Domains>,
    workers: Arc<Workers>,
    observer: Option<Arc<dyn SlotObserver>>,
    journal: Option<Arc<Journal>>,
    limits: Limits,
    /// Who each uid is charged to (subordinate uids: their owner).
    owners: Arc<Owners>,
    /// Open connections by owning user.
    connections: Mutex<HashMap<u32, usize>>,
    refusals: Refusals,
    stop: AtomicBool,
    /// An epoll set of the registered threads' pidfds (one-shot): readable once one of them exited.
    /// None if it could not be created: every thread is then checked every RECLAIM_INTERVAL.
    exits: Option<OwnedFd>,
}

/// Refusals since the last summary, by (status, uid), and each user's refusal budget.
#[derive(Default)]
struct Refusals {
    state: Mutex<RefusalState>,
}

#[derive(Default)]
struct RefusalState {
    since: Option<Instant>,
    counts: HashMap<(&'static str, u32), u64>,
    /// The latest reason given for each kind of refusal, shown with the summary.
    details: HashMap<&'static str, String>,
    /// Per owning user: when its budget is next whole (a token bucket kept as a theoretical
    /// arrival time: each refusal moves it 1/REFUSALS_PER_SECOND later).
    budget: HashMap<u32, Instant>,
}

impl Refusals {
    /// Counts one refusal of `what` for `uid` (charged to `owner`); returns how long to hold the
    /// reply back, or None: the connection is to be closed (its user is far over its rate; counted
    /// as CONNECTION_CLOSED_RATE).
    fn note(&self, what: &'static str, uid: u32, owner: u32) -> Option<Duration> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.since.get_or_insert(now);
        let step = Duration::from_secs(1) / REFUSALS_PER_SECOND;
        let burst = step * REFUSALS_PER_SECOND;
        let at = state.budget.get(&owner).copied().filter(|&t| t > now).unwrap_or(now) + step;
        let wait = at.saturating_duration_since(now).saturating_sub(burst);
        if wait > REFUSAL_MAX_WAIT {
            *state.counts.entry(("CONNECTION_CLOSED_RATE", uid)).or_insert(0) += 1;
            return None;
        }
        *state.counts.entry((what, uid)).or_insert(0) += 1;
        state.budget.insert(owner, at);
        Some(wait)
    }

    /// Records why the latest refusal of kind `what` was made (logged with the next summary).
    fn detail(&self, what: &'static str, why: String) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).details.insert(what, why);
    }

    /// The summary line of the refusals since the last one, once per interval (None: nothing to say
    /// yet). Users whose budget is whole again are forgotten.
    fn summary(&self) -> Option<String> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.budget.retain(|_, at| *at > now);
        let since = state.since?;
        let elapsed = now.saturating_duration_since(since);
        if elapsed < REFUSAL_SUMMARY_INTERVAL {
            return None;
        }
        let mut counts: Vec<((&'static str, u32), u64)> = state.counts.drain().collect();
        state.since = None;
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let total: u64 = counts.iter().map(|c| c.1).sum();
        const SHOWN: usize = 8;
        let mut parts: Vec<String> = counts.iter().take(SHOWN).map(|((what, uid), n)| format!("{n} {what} from uid {uid}")).collect();
        if counts.len() > SHOWN {
            parts.push(format!("{} more kinds", counts.len() - SHOWN));
        }
        let mut details: Vec<(&'static str, String)> = state.details.drain().collect();
        details.sort();
        let details: Vec<String> = details.into_iter().map(|(what, why)| format!("{what}: {why}")).collect();
        let latest = if details.is_empty() { String::new() } else { format!(" (latest reasons: {})", details.join("; ")) };
        Some(format!("registration: refused {total} request(s) in the last {} s: {}{latest}", elapsed.as_secs(), parts.join(", ")))
    }
}

/// What a reply carries as `region_path`: the domain's pin (kernel backend, for 1.2 clients; it lies
/// in the root-only pin directory); none (all zero) for a memfd.
fn reply_path(domain: &Domain) -> [u8; abi::REGION_PATH_MAX as usize] {
    domain.pin.as_deref().and_then(region::path_for_reply).unwrap_or([0; abi::REGION_PATH_MAX as usize])
}

impl Shared {
    /// The service's state.
    pub fn new(
        domains: Arc<Domains>,
        workers: Arc<Workers>,
        observer: Option<Arc<dyn SlotObserver>>,
        journal: Option<Arc<Journal>>,
        limits: Limits,
    ) -> Shared {
        Shared {
            domains,
            workers,
            observer,
            journal,
            limits,
            owners: Arc::new(Owners::fixed(SubuidMap::default())),
            connections: Mutex::new(HashMap::new()),
            refusals: Refusals::default(),
            stop: AtomicBool::new(false),
            exits: epoll_set(),
        }
    }

    /// Charges subordinate uids to their owners (`owners`) for every quota and limit.
    pub fn with_owners(mut self, owners: Arc<Owners>) -> Shared {
        self.owners = owners;
        self
    }
}

/// Whether `e` is the process (EMFILE) or the system (ENFILE) being out of descriptors.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Whether an error chain has descriptor exhaustion at its root.
fn chain_out_of_descriptors(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(out_of_descriptors))
}

/// The error logged when registration fails for want of descriptors (it names the limit, so the
/// operator raises LimitNOFILE= rather than chasing a client).
fn log_descriptor_exhaustion(what: &str, e: &dyn std::fmt::Display) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    log::error!(
        "{what}: out of file descriptors ({e}); the agent's descriptor limit RLIMIT_NOFILE is {} (hard {}): raise LimitNOFILE= in its unit, or lower --max-domains",
        limit.rlim_cur,
        limit.rlim_max
    );
}

/// A new epoll set, or None (logged) if the kernel refuses one.
fn epoll_set() -> Option<OwnedFd> {
    // SAFETY: a plain syscall; a non-negative result is a descriptor we own.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        log::warn!("registration: cannot create an epoll set ({}); exited workers are found every {RECLAIM_INTERVAL:?}", io::Error::last_os_error());
        return None;
    }
    // SAFETY: as above.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The running registration service (a thread accepting connections).
pub struct Registry {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Registry {
    /// Binds the socket `name` in `dir` (replacing a stale one left by a killed instance), mode 0660
    /// with `group` (0600 without), and serves `shared`.
    pub fn start(dir: &RuntimeDir, name: &str, group: Option<u32>, shared: Shared) -> Result<Registry> {
        let listener = dir.bind_socket(name, group)?;
        listener.set_nonblocking(true).context("cannot make the registration socket non-blocking")?;
        let shared = Arc::new(shared);
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("registry".into())
            .spawn(move || accept_loop(listener, worker))
            .context("cannot start the registry thread")?;
        Ok(Registry { shared, thread: Some(thread) })
    }

    /// Workers holding a slot now.
    pub fn registered(&self) -> usize {
        self.shared.workers.lock().iter().filter(|s| s.is_some()).count()
    }

    /// Stops accepting and waits for the accept thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    let mut last_reclaim = Instant::now();
    while !shared.stop.load(Ordering::SeqCst) {
        let mut pfds = [
            libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: shared.exits.as_ref().map_or(-1, |e| e.as_raw_fd()), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds.
        unsafe { libc::poll(pfds.as_mut_ptr(), 2, 100) };
        if pfds[1].revents & libc::POLLIN != 0 {
            // A registered thread exited: consume the one-shot events, free its slot now.
            let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
            // SAFETY: a valid epoll set and buffer; timeout 0.
            unsafe { libc::epoll_wait(pfds[1].fd, events.as_mut_ptr(), events.len() as i32, 0) };
            reclaim_dead(&shared);
        }
        loop {
            match listener.accept() {
                Ok((stream, _)) => admit(stream, &shared),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if out_of_descriptors(&e) => {
                    // The pending connection stays queued: wait for descriptors to come back
                    // (a reclaim may free some) rather than spinning on a readable listener.
                    log_descriptor_exhaustion("registration: cannot accept a connection", &e);
                    std::thread::sleep(RECLAIM_INTERVAL);
                    break;
                }
                Err(e) => {
                    log::warn!("registration: accept failed: {e}");
                    break;
                }
            }
        }
        if last_reclaim.elapsed() >= RECLAIM_INTERVAL {
            reclaim_dead(&shared);
            shared.owners.refresh();
            if let Some(line) = shared.refusals.summary() {
                log::warn!("{line}");
            }
            last_reclaim = Instant::now();
        }
    }
}

/// Starts serving a new connection unless its uid, or everyone, is at the connection limit. The
/// connection is bound to the process that connected (a caller already gone is closed at once).
fn admit(stream: UnixStream, shared: &Arc<Shared>) {
    let caller = match Peer::of_connection(&stream) {
        Ok(peer) => peer,
        Err(e) if out_of_descriptors(&e) => {
            log_descriptor_exhaustion("registration: cannot pin a connecting process", &e);
            return;
        }
        Err(e) => {
            log::debug!("registration: closing a connection whose process cannot be pinned: {e}");
            return;
        }
    };
    // Connections are charged to the owning user: its subordinate uids share its limit (A03).
    let owner = shared.owners.owner(caller.uid);
    {
        let mut conns = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = conns.values().sum();
        let mine = conns.get(&owner).copied().unwrap_or(0);
        if total >= MAX_CONNECTIONS || mine >= MAX_CONNECTIONS_PER_UID {
            log::debug!(
                "registration: closing a connection of uid {} (user {owner}: {mine} open for it, {total} in all; limits {MAX_CONNECTIONS_PER_UID} and {MAX_CONNECTIONS})",
                caller.uid
            );
            let _ = shared.refusals.note("CONNECTION_LIMIT", caller.uid, owner);
            return;
        }
        *conns.entry(owner).or_insert(0) += 1;
    }
    let conn_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new().name("registry-conn".into()).spawn(move || {
        serve_connection(stream, &caller, &conn_shared);
        let mut conns = conn_shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = conns.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                conns.remove(&owner);
            }
        }
    });
    if let Err(e) = spawned {
        let mut conns = shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = conns.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                conns.remove(&owner);
            }
        }
        log::warn!("registration: cannot start a connection thread: {e}");
    }
}

/// Reads exactly `buf.len()` bytes: the first within IDLE_TIMEOUT (Ok(false) on a clean EOF or an
/// idle connection), the rest before the request's deadline.
fn read_message(stream: &mut UnixStream, buf: &mut [u8], deadline: &mut Option<Instant>) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let timeout = match deadline {
            None => IDLE_TIMEOUT,
            Some(at) => at.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).ok_or_else(|| {
                io::Error::new(io::ErrorKind::TimedOut, format!("request not complete within {REQUEST_DEADLINE:?}"))
            })?,
        };
        stream.set_read_timeout(Some(timeout))?;
        match stream.read(&mut buf[got..]) {
            Ok(0) if got == 0 && deadline.is_none() => return Ok(false),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("request cut short after {got} bytes"))),
            Ok(n) => {
                got += n;
                deadline.get_or_insert_with(|| Instant::now() + REQUEST_DEADLINE);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if deadline.is_none() && matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Ok(false); // idle: close (spec/SCB.md §4.1 allows it)
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn reply_bytes(reply: &RegReply) -> &[u8] {
    // SAFETY: RegReply is repr(C) with explicit padding fields (no implicit padding: spec rule).
    unsafe { std::slice::from_raw_parts((reply as *const RegReply).cast::<u8>(), size_of::<RegReply>()) }
}

/// Sends the reply, with `fd` attached (SCM_RIGHTS) if given. Returns false if the client is gone.
fn send_reply(stream: &UnixStream, reply: &RegReply, len: usize, fd: Option<BorrowedFd<'_>>) -> bool {
    let bytes = &reply_bytes(reply)[..len];
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: CMSG_SPACE of one int.
    let space = unsafe { libc::CMSG_SPACE(size_of::<libc::c_int>() as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is valid; fields are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds one cmsg with one int, as sized above.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
        }
    }
    let _ = stream.set_write_timeout(Some(IDLE_TIMEOUT));
    // SAFETY: valid socket and message; MSG_NOSIGNAL: a client that hung up is not a SIGPIPE.
    let sent = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent == bytes.len() as isize {
        return true;
    }
    if sent <= 0 {
        return false;
    }
    // A partial send of a 128-byte reply on a Unix socket only happens on a full buffer: finish it.
    let mut s = stream;
    std::io::Write::write_all(&mut s, &bytes[sent as usize..]).is_ok()
}

/// Bytes of a 1.0-1.2 reply: all a client that sent `size` 0 reads.
const REPLY_V1_2: usize = offset_of!(RegReply, region_path) + abi::REGION_PATH_MAX as usize;

fn refusal(status: RegStatus) -> RegReply {
    RegReply {
        magic: abi::REG_MAGIC,
        status: status.raw(),
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        ..Default::default()
    }
}

/// Bytes of a 1.0-1.2 request (size 0): everything before the first 1.3 field.
pub const REQUEST_PREFIX: usize = offset_of!(RegRequest, escapable);

/// Reads one whole request: the 1.2 prefix, then the rest its `size` announces (bounded by
/// REG_MESSAGE_MAX). Ok(None): the client closed or stayed idle. Err: a refusal, after which the
/// connection is closed (the stream cannot be resynchronised).
fn read_request(stream: &mut UnixStream) -> std::result::Result<Option<Vec<u8>>, (RegStatus, String)> {
    let mut deadline = None;
    let mut buf = vec![0u8; REQUEST_PREFIX];
    match read_message(stream, &mut buf, &mut deadline) {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(e) => return Err((RegStatus::Malformed, e.to_string())),
    }
    let size = request_size(&buf).map_err(|why| (RegStatus::Malformed, why))?;
    if size > REQUEST_PREFIX {
        buf.resize(size, 0);
        if let Err(e) = read_message(stream, &mut buf[REQUEST_PREFIX..], &mut deadline) {
            return Err((RegStatus::Malformed, e.to_string()));
        }
    }
    Ok(Some(buf))
}

/// The whole request's length from its prefix's `size` field (0: a 1.0-1.2 client, REQUEST_PREFIX).
pub fn request_size(prefix: &[u8]) -> std::result::Result<usize, String> {
    let at = offset_of!(RegRequest, message_size);
    let raw = prefix.get(at..at + 4).ok_or("request shorter than its prefix")?;
    let size = u32::from_le_bytes(raw.try_into().expect("4 bytes")) as usize;
    match size {
        0 => Ok(REQUEST_PREFIX),
        s if s < REQUEST_PREFIX => Err(format!("size {s} is smaller than the {REQUEST_PREFIX}-byte prefix")),
        s if s > abi::REG_MESSAGE_MAX as usize => Err(format!("size {s} exceeds REG_MESSAGE_MAX ({})", abi::REG_MESSAGE_MAX)),
        s => Ok(s),
    }
}

/// Serves one connection's requests in turn. Before each one the connecting process must still be
/// alive: once it is gone the connection is closed unanswered (spec/SCB.md §10), whoever now holds it.
fn serve_connection(mut stream: UnixStream, caller: &Peer, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    loop {
        let bytes = match read_request(&mut stream) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return,
            Err((status, why)) => {
                log::debug!("registration from pid {}: {why}", caller.pid);
                send_reply(&stream, &refusal(status), REPLY_V1_2, None);
                return;
            }
        };
        if !caller.alive() {
            log::debug!("registration: closing a connection of pid {}, which has exited", caller.pid);
            return;
        }
        // A 1.0-1.2 client reads exactly the 1.2 reply; a sized client is told the reply's size.
        let sized = bytes.len() > REQUEST_PREFIX;
        let reply_len = if sized { size_of::<RegReply>() } else { REPLY_V1_2 };
        let (mut reply, domain) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle(shared, caller, &bytes)))
            .unwrap_or_else(|_| {
                log::error!("registration from pid {}: internal error (panic); request had no effect", caller.pid);
                (refusal(RegStatus::Internal), None)
            });
        if sized {
            reply.message_size = reply_len as u32;
        }
        if reply.status != RegStatus::Ok.raw() {
            let what = RegStatus::try_from(reply.status).map(|s| s.name()).unwrap_or("UNKNOWN");
            match shared.refusals.note(what, caller.uid, shared.owners.owner(caller.uid)) {
                Some(wait) if !wait.is_zero() => std::thread::sleep(wait),
                Some(_) => {}
                None => {
                    log::debug!("registration from pid {}: closing the connection, its user is past {REFUSALS_PER_SECOND} refusals/s", caller.pid);
                    return;
                }
            }
        }
        let fd = domain.as_ref().map(|d| {
            use std::os::fd::AsFd;
            d.fd.as_fd()
        });
        if !send_reply(&stream, &reply, reply_len, fd) {
            return;
        }
    }
}

/// A request, checked: the 1.3 fields are zero-filled for a 1.0-1.2 client.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub fields: RegRequest,
    pub escapable: abi::RegEscapable,
}

/// Checks a whole request (the parser the fuzz target drives): prefix, size, reserved and unknown
/// trailing bytes zero, known op, escapable and priority in range. Any byte pattern is an input.
pub fn parse_request(bytes: &[u8]) -> std::result::Result<Request, RegStatus> {
    if bytes.len() < REQUEST_PREFIX {
        return Err(RegStatus::Malformed);
    }
    match request_size(bytes) {
        Ok(size) if size == bytes.len() => {}
        _ => return Err(RegStatus::Malformed),
    }
    let mut known = [0u8; size_of::<RegRequest>()];
    let n = bytes.len().min(known.len());
    known[..n].copy_from_slice(&bytes[..n]);
    // Bytes past the fields this agent knows must be zero: the sender asked for something we lack.
    if bytes[n..].iter().any(|&b| b != 0) {
        return Err(RegStatus::Malformed);
    }
    // SAFETY: RegRequest is plain old data; any byte pattern is a value.
    let fields: RegRequest = unsafe { std::ptr::read_unaligned(known.as_ptr().cast()) };
    if fields.magic != abi::REG_MAGIC {
        return Err(RegStatus::Malformed);
    }
    if fields.abi_major != abi::ABI_MAJOR {
        return Err(RegStatus::AbiMajorMismatch);
    }
    if fields._reserved0 != [0; 4] {
        return Err(RegStatus::Malformed);
    }
    if abi::RegOp::try_from(fields.op).is_err() {
        return Err(RegStatus::Malformed);
    }
    let escapable = abi::RegEscapable::try_from(fields.escapable).map_err(|_| RegStatus::InvalidArgument)?;
    if !(abi::PRIORITY_MIN..=abi::PRIORITY_MAX).contains(&fields.priority) {
        return Err(RegStatus::InvalidArgument);
    }
    Ok(Request { fields, escapable })
}

/// Answers one request; an OK REGISTER also names the domain whose descriptor goes with the reply.
pub fn handle(shared: &Shared, caller: &Peer, bytes: &[u8]) -> (RegReply, Option<Arc<Domain>>) {
    let request = match parse_request(bytes) {
        Ok(request) => request,
        Err(status) => {
            log::debug!("registration from pid {}: refused ({})", caller.pid, status.name());
            return (refusal(status), None);
        }
    };
    match abi::RegOp::try_from(request.fields.op) {
        Ok(abi::RegOp::Register) => register(shared, caller, &request),
        Ok(abi::RegOp::Unregister) => (unregister(shared, caller, request.fields.slot), None),
        Err(_) => (refusal(RegStatus::Malformed), None),
    }
}

fn register(shared: &Shared, caller: &Peer, request: &Request) -> (RegReply, Option<Arc<Domain>>) {
    let pid = caller.pid;
    let client_tid = request.fields.tid;
    let thread = match caller.thread(client_tid) {
        Ok(thread) => Arc::new(thread),
        Err(Refused::NotCallerThread) => {
            shared.refusals.detail("NOT_CALLER_TID", format!("tid {client_tid} is not a thread of pid {pid}"));
            log::debug!("registration from pid {pid}: tid {client_tid} is not a thread of the caller");
            return (refusal(RegStatus::NotCallerTid), None);
        }
        Err(Refused::Resources(e)) if out_of_descriptors(&e) => {
            log_descriptor_exhaustion(&format!("registration from pid {pid}"), &e);
            return (refusal(RegStatus::Internal), None);
        }
        Err(Refused::Resources(e)) => {
            log::error!("registration from pid {pid}: cannot look up tid {client_tid}: {e}");
            return (refusal(RegStatus::Internal), None);
        }
    };
    let tid = thread.tid;
    // Slots and domains are charged to the user owning the caller's uid (A03).
    let owner = shared.owners.owner(caller.uid);
    let mut workers = shared.workers.lock();
    // Two live threads never share an id: a live holder of this id is this thread.
    if workers.iter().flatten().any(|w| w.tid == tid && w.thread.alive()) {
        return (refusal(RegStatus::AlreadyRegistered), None);
    }
    let held = workers.iter().flatten().filter(|w| w.thread.process == caller.key()).count() as u32;
    if held >= shared.limits.per_process {
        let why = format!("pid {pid} already holds {held} slots (per-process cap {})", shared.limits.per_process);
        log::debug!("registration from pid {pid}: refused, {why}");
        shared.refusals.detail("PROCESS_LIMIT", why);
        return (refusal(RegStatus::ProcessLimit), None);
    }
    let held_by_owner = workers.iter().flatten().filter(|w| shared.owners.owner(w.uid) == owner).count() as u32;
    if held_by_owner >= shared.limits.per_uid {
        let why = format!(
            "user {owner} (uid {}) already holds {held_by_owner} slots with its subordinate uids (per-user cap {})",
            caller.uid, shared.limits.per_uid
        );
        log::debug!("registration from pid {pid}: refused, {why}");
        shared.refusals.detail("PROCESS_LIMIT", why);
        return (refusal(RegStatus::ProcessLimit), None);
    }
    // The domain is found or made under the table's lock, which its release also holds: a domain is
    // never freed between here and its first worker's entry in the table.
    let domain = match shared.domains.for_uid(caller.uid, owner) {
        Ok(domain) => domain,
        Err(e @ (DomainError::Full { .. } | DomainError::UserFull { .. })) => {
            let (status, what) = match e {
                DomainError::Full { .. } => (RegStatus::NoFreeSlot, "NO_FREE_SLOT"),
                _ => (RegStatus::ProcessLimit, "PROCESS_LIMIT"),
            };
            log::debug!("registration from pid {pid} (uid {}): refused, {e}", caller.uid);
            shared.refusals.detail(what, format!("uid {}: {e}", caller.uid));
            return (refusal(status), None);
        }
        Err(DomainError::Create(e)) => {
            if chain_out_of_descriptors(&e) {
                log_descriptor_exhaustion(&format!("registration from pid {pid} (uid {})", caller.uid), &format!("{e:#}"));
            } else {
                log::error!("registration from pid {pid} (uid {}): {e:#}", caller.uid);
            }
            return (refusal(RegStatus::Internal), None);
        }
    };
    let used_local: Vec<u32> =
        workers.iter().flatten().filter(|w| Arc::ptr_eq(&w.domain, &domain)).map(|w| w.local).collect();
    let region = &domain.region;
    // INIT -> CLAIMED by CAS (§4): a slot a direct registrant of this domain took is skipped.
    let claim = |l: u32| protocol::claim(region.scb(l).worker_state(), WorkerState::Init).is_ok();
    let Some(local) = (0..region.scb_count()).find(|&l| !used_local.contains(&l) && claim(l)) else {
        let why = format!("all {} slots of the region of uid {} are in use", domain.region.scb_count(), caller.uid);
        log::debug!("registration of tid {tid} (pid {pid}): {why}");
        shared.refusals.detail("NO_FREE_SLOT", why);
        free_if_unused(shared, &workers, caller.uid, &domain);
        return (refusal(RegStatus::NoFreeSlot), None);
    };
    let Some(global) = (0..workers.len() as u32).find(|&g| workers[g as usize].is_none()) else {
        protocol::abandon_claim(region.scb(local).worker_state());
        let why = format!("all {} slots are in use", workers.len());
        log::debug!("registration of tid {tid} (pid {pid}): {why}");
        shared.refusals.detail("NO_FREE_SLOT", why);
        free_if_unused(shared, &workers, caller.uid, &domain);
        return (refusal(RegStatus::NoFreeSlot), None);
    };
    if let Some(journal) = &shared.journal {
        if let Err(e) = journal.client(pid) {
            if chain_out_of_descriptors(&e) {
                log_descriptor_exhaustion(&format!("registration of tid {tid} (pid {pid})"), &format!("{e:#}"));
            } else {
                log::error!("registration of tid {tid} (pid {pid}): {e:#}");
            }
            protocol::abandon_claim(region.scb(local).worker_state());
            free_if_unused(shared, &workers, caller.uid, &domain);
            return (refusal(RegStatus::Internal), None);
        }
    }
    // CLAIMED -> REGISTERED (§4), the one implementation the SDK's direct registration also uses:
    // everything the runtime reads is written first, including the escapable flag and priority it
    // asked for, so it is right before the worker exists; as the scheduler, the agent also starts
    // the budget at the slice and closes any episode.
    let kind = abi::RuntimeKind::try_from(request.fields.runtime_kind).ok();
    let escapable = match request.escapable {
        abi::RegEscapable::Default => kind.is_some_and(abi::escapable_default),
        abi::RegEscapable::No => false,
        abi::RegEscapable::Yes => true,
    };
    let slot_generation = protocol::assign_claimed(
        &slot_fields(&region.scb(local)),
        &protocol::Assignee {
            tid: client_tid,
            pid,
            escapable,
            priority: request.fields.priority,
            scheduler_slice_ns: Some(shared.limits.slice_ns),
        },
    );
    let assigned = Assigned { tid, pid, uid: caller.uid, thread: Arc::clone(&thread), domain: Arc::clone(&domain), local };
    if let Some(observer) = &shared.observer {
        if let Err(e) = observer.assigned(global, &assigned) {
            log::error!("registration of tid {tid} (pid {pid}) in slot {global}: backend refused: {e:#}");
            clear_slot(region, local, WorkerState::Registered.raw());
            free_if_unused(shared, &workers, caller.uid, &domain);
            return (refusal(RegStatus::Internal), None);
        }
    }
    workers[global as usize] = Some(assigned);
    watch_exit(shared, &thread);
    log::debug!("registered tid {tid} (pid {pid}, uid {}) in slot {local} of its region, slot generation {slot_generation}", caller.uid);
    let reply = RegReply {
        magic: abi::REG_MAGIC,
        status: RegStatus::Ok.raw(),
        slot: local,
        abi_major: abi::ABI_MAJOR,
        abi_minor: abi::ABI_MINOR,
        generation: region.generation(),
        slot_generation,
        region_path: reply_path(&domain),
        ..Default::default()
    };
    (reply, Some(domain))
}

/// The fields of `scb` the registrar writes while the slot is CLAIMED (spec/SCB.md §4).
fn slot_fields<'a>(scb: &ScbRef<'a>) -> protocol::SlotFields<'a, AtomicU32, AtomicI32, AtomicU64> {
    protocol::SlotFields {
        worker_state: scb.worker_state(),
        tid: scb.tid(),
        pid: scb.pid(),
        slot_generation: scb.slot_generation(),
        escapable: scb.escapable(),
        priority: scb.priority(),
        preempt_seq: scb.preempt_seq(),
        last_ack_seq: scb.last_ack_seq(),
        budget_remaining_ns: scb.budget_remaining_ns(),
        escalated: scb.escalated(),
    }
}

/// Frees `slot` if a thread of the calling process holds it: the process as pinned (pid and start
/// time), not a pid number another process may now carry.
fn unregister(shared: &Shared, caller: &Peer, slot: u32) -> RegReply {
    let mut workers = shared.workers.lock();
    let found = workers
        .iter()
        .enumerate()
        .find_map(|(g, w)| w.as_ref().filter(|w| w.thread.process == caller.key() && w.local == slot).map(|_| g as u32));
    let Some(global) = found else {
        log::debug!("unregister of slot {slot} by pid {}: not a slot it holds", caller.pid);
        shared.refusals.detail("NOT_OWNER", format!("pid {} does not hold slot {slot}", caller.pid));
        return refusal(RegStatus::NotOwner);
    };
    let tid = workers[global as usize].as_ref().map(|w| w.tid).unwrap_or(0);
    release(shared, &mut workers, global);
    log::debug!("unregistered tid {tid} (pid {}) from slot {slot}", caller.pid);
    RegReply { magic: abi::REG_MAGIC, status: RegStatus::Ok.raw(), slot, abi_major: abi::ABI_MAJOR, abi_minor: abi::ABI_MINOR, ..Default::default() }
}

/// Lifts the backend's escalations for the slot, then frees it: tid/pid cleared, state INIT (release).
fn release(shared: &Shared, workers: &mut [Option<Assigned>], global: u32) {
    let Some(worker) = workers[global as usize].take() else { return };
    if let Some(observer) = &shared.observer {
        observer.released(global, &worker);
    }
    let state = worker.domain.region.scb(worker.local).worker_state().load(Ordering::Acquire);
    clear_slot(&worker.domain.region, worker.local, state);
    free_if_unused(shared, workers, worker.uid, &worker.domain);
}

/// Frees `domain` (of `uid`) if no slot of the table (whose lock the caller holds) is in it: a
/// domain lives exactly as long as a worker of its uid holds a slot (A03).
fn free_if_unused(shared: &Shared, workers: &[Option<Assigned>], uid: u32, domain: &Arc<Domain>) {
    if !workers.iter().flatten().any(|w| Arc::ptr_eq(&w.domain, domain)) {
        shared.domains.release(uid, domain);
    }
}

/// The registrar's reclaim (spec/SCB.md §4): CAS the state found to CLAIMED (the agent's table, not
/// the SCB, says the slot is being released; `seen` is the state expected), the generated reclaim clear
/// over the whole stride, then INIT with release so the next owner sees a clean slot. A runtime of the
/// domain that keeps changing the state under the CAS gets a bounded number of retries, after which the
/// slot is left as it is (busy to the agent's claim CAS: only that domain loses it).
fn clear_slot(region: &Region, slot: u32, seen: u32) {
    const CAS_ATTEMPTS: usize = 16;
    let scb = region.scb(slot);
    let state = scb.worker_state();
    let mut observed = seen;
    for _ in 0..CAS_ATTEMPTS {
        if observed == WorkerState::Claimed.raw() && observed != seen {
            break; // another registrar (a direct registration of this domain) holds the hand-off
        }
        match protocol::reclaim(state, observed, || scb.clear_for_reuse()) {
            Ok(()) => return,
            Err(now) => observed = now,
        }
    }
    log::warn!("slot {slot} of {}: its state kept changing under the reclaim; left as it is", region.path().display());
}

/// Asks for `thread`'s exit to wake the registry thread (one-shot: it fires once). A thread without a
/// pidfd (kernels before 6.9) is checked every RECLAIM_INTERVAL instead.
fn watch_exit(shared: &Shared, thread: &crate::identity::Thread) {
    let (Some(fd), Some(exits)) = (thread.exit_fd(), &shared.exits) else { return };
    let mut event = libc::epoll_event { events: (libc::EPOLLIN | libc::EPOLLONESHOT) as u32, u64: 0 };
    // SAFETY: a valid epoll set and descriptor; the kernel drops the entry when the descriptor closes.
    if unsafe { libc::epoll_ctl(exits.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut event) } != 0 {
        log::warn!("registration: cannot watch tid {} for its exit ({}); it is checked every {RECLAIM_INTERVAL:?}", thread.tid, io::Error::last_os_error());
    }
}

/// Frees the slots of threads that exited without unregistering (crash, kill, forgotten shutdown), as
/// their descriptors say: a later thread with the same id is never taken for the worker.
fn reclaim_dead(shared: &Shared) {
    let mut workers = shared.workers.lock();
    for global in 0..workers.len() as u32 {
        if let Some(w) = &workers[global as usize] {
            if !w.thread.alive() {
                log::debug!("reclaimed slot {global}: thread {} of pid {} is gone", w.tid, w.pid);
                release(shared, &mut workers, global);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review F ("registration written twice"): the registrar's steps on shared memory (the claim
    /// CAS, the data written while CLAIMED, the publish, the reclaim, slot_generation's increment)
    /// are morpheus::protocol's, the code loom checks and the SDK's direct registration runs. This
    /// file (outside its tests) must not carry a second copy of any of them.
    #[test]
    fn the_agents_registrar_is_the_sdks_protocol_not_a_copy() {
        let source = include_str!("registry.rs");
        let code = &source[..source.find("#[cfg(test)]").expect("this test module")];
        let copies: Vec<&str> = [
            "compare_exchange(",
            "worker_state().store(",
            "tid().store(",
            "pid().store(",
            "slot_generation().store(",
            "last_ack_seq().store(",
            "escapable().store(",
            "priority().store(",
            "fn next_slot_generation",
        ]
        .into_iter()
        .filter(|step| code.contains(step))
        .collect();
        assert!(copies.is_empty(), "registry.rs does these registrar steps itself, not through morpheus::protocol: {copies:?}");
    }

    /// A05: a flood of refusals is one summary line per interval, naming counts, kinds, uids and
    /// the latest reason; past its burst a user's refusals are held back at REFUSALS_PER_SECOND
    /// (over all its uids and connections), and a connection far past it is closed.
    #[test]
    fn refusals_are_summarised_and_rate_limited_per_user() {
        let refusals = Refusals::default();
        let mut waited = Duration::ZERO;
        let mut closed = 0;
        for i in 0..1000u32 {
            // Two subordinate uids of user 1001, charged together.
            match refusals.note("NOT_CALLER_TID", 100000 + i % 2, 1001) {
                Some(wait) => waited = waited.max(wait),
                None => closed += 1,
            }
        }
        refusals.detail("NOT_CALLER_TID", "tid 1 is not a thread of pid 9".into());
        assert!(closed > 0, "a user 20 s past its budget keeps its connection");
        assert!(waited > Duration::ZERO && waited <= REFUSAL_MAX_WAIT, "waited {waited:?}");
        assert_eq!(refusals.note("NOT_OWNER", 1002, 1002), Some(Duration::ZERO), "another user's budget is its own");
        assert_eq!(refusals.summary(), None, "no summary before the interval is over");
        refusals.state.lock().unwrap().since = Some(Instant::now() - REFUSAL_SUMMARY_INTERVAL);
        let line = refusals.summary().expect("a summary once the interval is over");
        assert!(line.starts_with("registration: refused 1001 request(s) in the last 10 s: "), "{line}");
        for part in ["CONNECTION_CLOSED_RATE from uid 100000", "NOT_CALLER_TID from uid 100001", "1 NOT_OWNER from uid 1002"] {
            assert!(line.contains(part), "{part:?} missing: {line}");
        }
        assert!(line.ends_with("(latest reasons: NOT_CALLER_TID: tid 1 is not a thread of pid 9)"), "{line}");
        assert_eq!(refusals.summary(), None, "counted afresh");
    }

    /// A03: a registration that finds the agent out of descriptors is INTERNAL (the agent's fault),
    /// not NOT_CALLER_TID (which blamed the caller and hid the cause). Run in a forked child whose
    /// descriptor limit is its lowest free descriptor, so every open fails with EMFILE.
    #[test]
    fn out_of_descriptors_is_internal_not_the_callers_fault() {
        let mut fds = [0i32; 2];
        // SAFETY: a pipe for the child's answer.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        // SAFETY: the child only builds the service, calls handle() and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let answer = std::panic::catch_unwind(|| {
                let params = crate::region::RegionParams::enforced_with_defaults(4, abi::Backend::Sim);
                let domains = Arc::new(Domains::new(params, 1, None, crate::domains::DomainLimits { total: 4, per_user: 4 }));
                let limits = Limits { per_process: 3, per_uid: 4, slice_ns: abi::DEFAULT_SLICE_NS };
                let shared = Shared::new(domains, Workers::new(8), None, None, limits);
                // SAFETY: no preconditions.
                let tid = unsafe { libc::gettid() as u32 };
                // The connection's process is pinned before the descriptors run out (as at accept).
                let me = Peer::this_process().expect("pin this process");
                let request = RegRequest {
                    magic: abi::REG_MAGIC,
                    abi_major: abi::ABI_MAJOR,
                    abi_minor: abi::ABI_MINOR,
                    op: abi::RegOp::Register.raw(),
                    tid,
                    message_size: size_of::<RegRequest>() as u32,
                    ..Default::default()
                };
                // SAFETY: plain old data.
                let bytes = unsafe { std::slice::from_raw_parts((&request as *const RegRequest).cast::<u8>(), size_of::<RegRequest>()) };
                // SAFETY: dup of stdin gives the lowest free descriptor; a limit there makes every
                // later open fail with EMFILE.
                let free = unsafe { libc::dup(0) };
                unsafe { libc::close(free) };
                let limit = libc::rlimit { rlim_cur: free as libc::rlim_t, rlim_max: free as libc::rlim_t };
                // SAFETY: valid pointer.
                unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
                handle(&shared, &me, bytes).0.status
            });
            let status = answer.unwrap_or(u32::MAX);
            // SAFETY: writing 4 bytes to our pipe, then leaving without running the harness's exit.
            unsafe {
                libc::write(wr, (&status as *const u32).cast(), 4);
                libc::_exit(0);
            }
        }
        // SAFETY: closing our copy of the write end; reading the child's 4 bytes; reaping it.
        let mut status = 0u32;
        unsafe {
            libc::close(wr);
            assert_eq!(libc::read(rd, (&mut status as *mut u32).cast(), 4), 4);
            libc::close(rd);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        assert_eq!(RegStatus::try_from(status).map(|s| s.name()), Ok(RegStatus::Internal.name()), "status {status}");
    }

    fn shared(per_process: u32) -> Shared {
        let params = crate::region::RegionParams::enforced_with_defaults(4, abi::Backend::Sim);
        let domains = Arc::new(Domains::new(params, 1, None, crate::domains::DomainLimits { total: 4, per_user: 4 }));
        Shared::new(domains, Workers::new(8), None, None, Limits { per_process, per_uid: 8, slice_ns: abi::DEFAULT_SLICE_NS })
    }

    fn request(op: abi::RegOp, tid: u32, slot: u32) -> Vec<u8> {
        let r = RegRequest { magic: abi::REG_MAGIC, abi_major: abi::ABI_MAJOR, abi_minor: abi::ABI_MINOR, op: op.raw(), tid, slot, ..Default::default() };
        // SAFETY: plain old data.
        unsafe { std::slice::from_raw_parts((&r as *const RegRequest).cast::<u8>(), REQUEST_PREFIX) }.to_vec()
    }

    fn gettid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::gettid() as u32 }
    }

    /// A13: a slot is freed when its thread's descriptor says the thread exited, and its id is then
    /// no thread of the caller's.
    #[test]
    fn a_slot_is_freed_when_its_thread_exits_and_never_by_number() {
        let shared = shared(4);
        let me = Peer::this_process().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            wait.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let (reply, _) = handle(&shared, &me, &request(abi::RegOp::Register, tid, 0));
        assert_eq!(reply.status, RegStatus::Ok.raw());
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Register, tid, 0)).0.status, RegStatus::AlreadyRegistered.raw());
        go.send(()).unwrap();
        h.join().unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while shared.workers.lock().iter().flatten().count() > 0 && Instant::now() < end {
            reclaim_dead(&shared);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(shared.workers.lock().iter().flatten().count(), 0, "the dead thread's slot was not freed");
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Register, tid, 0)).0.status, RegStatus::NotCallerTid.raw(), "a dead tid");
    }

    #[test]
    fn own_threads_register_and_other_processes_threads_do_not() {
        let shared = shared(4);
        let me = Peer::this_process().unwrap();
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Register, 1, 0)).0.status, RegStatus::NotCallerTid.raw());
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Register, 0, 0)).0.status, RegStatus::NotCallerTid.raw());
        let (reply, domain) = handle(&shared, &me, &request(abi::RegOp::Register, gettid(), 0));
        assert_eq!(reply.status, RegStatus::Ok.raw());
        assert!(domain.is_some());
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Unregister, 0, reply.slot)).0.status, RegStatus::Ok.raw());
        assert_eq!(handle(&shared, &me, &request(abi::RegOp::Unregister, 0, reply.slot)).0.status, RegStatus::NotOwner.raw());
    }

    #[test]
    fn parse_request_refuses_what_the_spec_refuses() {
        let good = RegRequest {
            magic: abi::REG_MAGIC,
            abi_major: abi::ABI_MAJOR,
            abi_minor: abi::ABI_MINOR,
            op: abi::RegOp::Register.raw(),
            message_size: size_of::<RegRequest>() as u32,
            ..Default::default()
        };
        // SAFETY: plain old data.
        let bytes = |r: &RegRequest| unsafe { std::slice::from_raw_parts((r as *const RegRequest).cast::<u8>(), size_of::<RegRequest>()) }.to_vec();
        assert!(parse_request(&bytes(&good)).is_ok());
        let v12 = RegRequest { message_size: 0, ..good };
        assert!(parse_request(&bytes(&v12)[..REQUEST_PREFIX]).is_ok(), "a 1.2 request is the 32-byte prefix");
        assert_eq!(parse_request(&bytes(&good)[..REQUEST_PREFIX]).unwrap_err(), RegStatus::Malformed, "size says 40");
        assert_eq!(parse_request(&bytes(&RegRequest { magic: 1, ..good })).unwrap_err(), RegStatus::Malformed);
        assert_eq!(parse_request(&bytes(&RegRequest { abi_major: 9, ..good })).unwrap_err(), RegStatus::AbiMajorMismatch);
        assert_eq!(parse_request(&bytes(&RegRequest { op: 77, ..good })).unwrap_err(), RegStatus::Malformed);
        assert_eq!(parse_request(&bytes(&RegRequest { _reserved0: [1; 4], ..good })).unwrap_err(), RegStatus::Malformed);
        assert_eq!(parse_request(&bytes(&RegRequest { escapable: 3, ..good })).unwrap_err(), RegStatus::InvalidArgument);
        assert_eq!(parse_request(&bytes(&RegRequest { priority: 20, ..good })).unwrap_err(), RegStatus::InvalidArgument);
        assert_eq!(parse_request(&bytes(&RegRequest { priority: -21, ..good })).unwrap_err(), RegStatus::InvalidArgument);
        // A longer request from a newer client: trailing zeros are fine, anything else is not.
        let mut longer = bytes(&RegRequest { message_size: 48, ..good });
        longer.extend_from_slice(&[0; 8]);
        assert!(parse_request(&longer).is_ok());
        longer[44] = 1;
        assert_eq!(parse_request(&longer).unwrap_err(), RegStatus::Malformed);
        assert_eq!(request_size(&bytes(&RegRequest { message_size: 8, ..good })).is_err(), true);
        assert_eq!(request_size(&bytes(&RegRequest { message_size: abi::REG_MESSAGE_MAX + 1, ..good })).is_err(), true);
    }
}
