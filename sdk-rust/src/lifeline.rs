// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The scheduler's life as a client sees it (spec/SCB.md §6.1): which agent instance a worker
//! registered with, a watcher thread that notices when the instance is gone and when a new one accepts
//! on the same socket, and the wake sequence that waiting workers read instead of a `preempt_seq`.
//!
//! Nothing here is on the fast path. The watcher blocks in `poll` on the agents' pidfds while they
//! live; when one exits it retires the process's own view of that instance's regions (so each
//! worker's next checkpoint takes the slow path and finds itself lost), then waits for a new instance
//! (inotify on the socket's directory, with a bounded poll as a fallback) and bumps [`WAKE_SEQ`].

use std::{
    ffi::CString,
    os::{
        fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
        unix::{ffi::OsStrExt, fs::MetadataExt, net::UnixStream},
    },
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex, PoisonError, Weak,
    },
    time::{Duration, Instant},
};

use crate::region::Region;

/// What waiting workers' fast path loads instead of a `preempt_seq`: the watcher increments it when a
/// new instance accepts connections on a socket some worker waits for. Process memory, never shared.
pub(crate) static WAKE_SEQ: AtomicU64 = AtomicU64::new(0);

/// How often the watcher looks at an awaited socket when no directory watch tells it of changes.
const FALLBACK_POLL: Duration = Duration::from_millis(200);
/// How soon it tries again when a new socket exists but refuses (bound, not yet listening).
const RETRY_SOON: Duration = Duration::from_millis(2);
/// How long a worker whose re-registration failed waits before the watcher wakes it again.
pub(crate) const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Which file a socket path names: device, inode and change time (a new socket may get the inode
/// number of one just removed, never the same change time), or None if nothing is there.
pub(crate) type SocketId = (u64, u64, i64, i64);

pub(crate) fn socket_identity(path: &Path) -> Option<SocketId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// The agent instance a worker registered with: its process (a pidfd, which cannot name a later
/// process) and its socket.
#[derive(Debug)]
pub(crate) struct Instance {
    socket: PathBuf,
    socket_id: Option<SocketId>,
    pid: i32,
    pidfd: Option<OwnedFd>,
    gone: AtomicBool,
    regions: Mutex<Vec<Weak<Region>>>,
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a fresh descriptor we own.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether `fd` is readable now (a pidfd is once its process exited). One non-blocking poll.
fn readable_now(fd: &OwnedFd) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents != 0 }
}

impl Instance {
    /// The agent's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the instance is gone: marked by the watcher, its process exited, or its socket path now
    /// names another socket or none (§6.1). At most a poll and a stat.
    pub(crate) fn is_gone(&self) -> bool {
        if self.gone.load(Ordering::Acquire) {
            return true;
        }
        let exited = self.pidfd.as_ref().is_some_and(readable_now);
        if exited || socket_identity(&self.socket) != self.socket_id {
            self.gone.store(true, Ordering::Release);
            return true;
        }
        false
    }
}

/// A socket on which a new instance is awaited.
struct Awaited {
    socket: PathBuf,
    /// The socket of the instance that is gone (a new instance binds a new one).
    old_id: Option<SocketId>,
    not_before: Instant,
}

struct Watch {
    instances: Vec<Arc<Instance>>,
    awaited: Vec<Awaited>,
    /// Wakes the watcher when the sets above change (an eventfd).
    kick: OwnedFd,
    /// The process that started the watcher (a forked child starts its own).
    owner_pid: u32,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

fn with_watch<R>(f: impl FnOnce(&mut Watch) -> R) -> Option<R> {
    let mut guard = WATCH.lock().unwrap_or_else(PoisonError::into_inner);
    let pid = std::process::id();
    if guard.as_ref().is_none_or(|w| w.owner_pid != pid) {
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor we own.
        let kick = unsafe { OwnedFd::from_raw_fd(fd) };
        std::thread::Builder::new().name("morpheus-lifeline".into()).spawn(watch_loop).ok()?;
        *guard = Some(Watch { instances: Vec::new(), awaited: Vec::new(), kick, owner_pid: pid });
    }
    let watch = guard.as_mut()?;
    let result = f(watch);
    // SAFETY: writing 8 bytes to our eventfd.
    unsafe { libc::write(watch.kick.as_raw_fd(), (&1u64 as *const u64).cast(), 8) };
    Some(result)
}

/// The instance behind a successful registration on `socket` whose agent has pid `pid`, recording
/// `region` as one of its regions. None when the watcher cannot run (then only the generation and
/// the socket path tell a restart).
pub(crate) fn instance_for(socket: &Path, pid: Option<i32>, region: &Arc<Region>) -> Option<Arc<Instance>> {
    let pid = pid?;
    with_watch(|watch| {
        let found = watch.instances.iter().find(|i| i.pid == pid && i.socket == socket && !i.is_gone()).cloned();
        let instance = found.unwrap_or_else(|| {
            let instance = Arc::new(Instance {
                socket: socket.to_path_buf(),
                socket_id: socket_identity(socket),
                pid,
                pidfd: pidfd_open(pid),
                gone: AtomicBool::new(false),
                regions: Mutex::new(Vec::new()),
            });
            watch.instances.push(instance.clone());
            instance
        });
        let mut regions = instance.regions.lock().unwrap_or_else(PoisonError::into_inner);
        regions.retain(|r| r.strong_count() > 0);
        regions.push(Arc::downgrade(region));
        drop(regions);
        instance
    })
}

/// Wait for a new instance on `socket` (one whose socket is not `old_id`), and bump [`WAKE_SEQ`] when
/// it accepts connections, not before `delay` from now.
pub(crate) fn await_instance(socket: &Path, old_id: Option<SocketId>, delay: Duration) {
    with_watch(|watch| {
        let not_before = Instant::now() + delay;
        match watch.awaited.iter_mut().find(|a| a.socket == socket) {
            Some(existing) => {
                existing.not_before = existing.not_before.min(not_before);
                if old_id.is_some() {
                    existing.old_id = old_id;
                }
            }
            None => watch.awaited.push(Awaited { socket: socket.to_path_buf(), old_id, not_before }),
        }
    });
}

/// Watches the directory of `socket` (once per directory). False if it is not watched.
fn inotify_watch(inotify: &Option<OwnedFd>, dirs: &mut Vec<PathBuf>, socket: &Path) -> bool {
    let (Some(fd), Some(dir)) = (inotify, socket.parent()) else { return false };
    if dirs.iter().any(|d| d == dir) {
        return true;
    }
    let Ok(cdir) = CString::new(dir.as_os_str().as_bytes()) else { return false };
    let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_MOVED_FROM | libc::IN_ATTRIB | libc::IN_DELETE;
    // SAFETY: valid inotify descriptor and NUL-terminated path.
    if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), cdir.as_ptr(), mask) } >= 0 {
        dirs.push(dir.to_path_buf());
        return true;
    }
    false
}

fn drain(fd: RawFd) {
    let mut buf = [0u8; 4096];
    // SAFETY: reading into our buffer from a non-blocking descriptor until it is empty.
    while unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// The watcher: blocks on the pidfds (and the kick and directory watches); on an exit retires the
/// instance's regions in this process and awaits a new instance; on a new one, wakes the workers.
fn watch_loop() {
    // SAFETY: inotify_init1 returns a new descriptor or -1.
    let inotify = match unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) } {
        fd if fd >= 0 => Some(unsafe { OwnedFd::from_raw_fd(fd) }),
        _ => None,
    };
    let mut watched_dirs = Vec::new();
    let mut timeout: Option<Duration> = None;
    loop {
        let Some((mut fds, needs_polling)) = with_watch_quiet(|watch| {
            let mut fds = vec![libc::pollfd { fd: watch.kick.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            if let Some(fd) = &inotify {
                fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
            // An agent that restarts inside its own process (scx's restart) keeps its pid: its socket
            // being removed or replaced is the only sign, so the socket's directory is watched too.
            let mut unwatched = false;
            for instance in &watch.instances {
                if let Some(pidfd) = &instance.pidfd {
                    fds.push(libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
                }
                unwatched |= !inotify_watch(&inotify, &mut watched_dirs, &instance.socket);
            }
            (fds, unwatched)
        }) else {
            return;
        };
        // An instance whose socket's directory cannot be watched is told only by looking at the path.
        let wait = match (timeout, needs_polling) {
            (Some(t), _) => t.as_millis() as i32,
            (None, true) => FALLBACK_POLL.as_millis() as i32,
            (None, false) => -1,
        };
        // SAFETY: valid pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
        for pfd in &fds[..1 + inotify.is_some() as usize] {
            if pfd.revents != 0 {
                drain(pfd.fd);
            }
        }
        timeout = with_watch_quiet(|watch| {
            // Gone instances: retire this process's view of their regions, await a successor.
            let mut gone = Vec::new();
            watch.instances.retain(|instance| {
                let alive = instance.regions.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|r| r.strong_count() > 0);
                if instance.is_gone() {
                    gone.push(instance.clone());
                    return false;
                }
                alive
            });
            for instance in gone {
                for region in instance.regions.lock().unwrap_or_else(PoisonError::into_inner).drain(..) {
                    if let Some(region) = region.upgrade() {
                        let _ = region.retire_own_view();
                    }
                }
                if !watch.awaited.iter().any(|a| a.socket == instance.socket) {
                    watch.awaited.push(Awaited {
                        socket: instance.socket.clone(),
                        old_id: instance.socket_id,
                        not_before: Instant::now(),
                    });
                }
            }
            // Awaited sockets: wake the workers once a new instance accepts.
            let now = Instant::now();
            let mut next: Option<Duration> = None;
            let mut soonest = |d: Duration| next = Some(next.map_or(d, |n| n.min(d)));
            watch.awaited.retain(|awaited| {
                inotify_watch(&inotify, &mut watched_dirs, &awaited.socket);
                if now < awaited.not_before {
                    soonest(awaited.not_before - now);
                    return true;
                }
                let id = socket_identity(&awaited.socket);
                if id.is_some() && id != awaited.old_id {
                    if UnixStream::connect(&awaited.socket).is_ok() {
                        WAKE_SEQ.fetch_add(1, Ordering::Release);
                        return false;
                    }
                    soonest(RETRY_SOON); // bound, not yet listening
                } else if inotify.is_none() || !watched_dirs.iter().any(|d| Some(d.as_path()) == awaited.socket.parent()) {
                    soonest(FALLBACK_POLL);
                }
                true
            });
            next
        })
        .flatten();
    }
}

/// [`with_watch`] without the kick (the watcher's own bookkeeping), and without starting a watcher.
fn with_watch_quiet<R>(f: impl FnOnce(&mut Watch) -> R) -> Option<R> {
    let mut guard = WATCH.lock().unwrap_or_else(PoisonError::into_inner);
    guard.as_mut().filter(|w| w.owner_pid == std::process::id()).map(f)
}

// ------------------------------------------------------------------------------------------------
// Notices

/// How much a notice matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeLevel {
    /// Expected states (no scheduler installed).
    Info,
    /// The scheduler's life changed under the application (dead socket, lost, registered again).
    Warning,
}

/// Receives the SDK's notices about the scheduler's life (bindings route them to their logging).
pub type NoticeHook = fn(NoticeLevel, &str);

static HOOK: Mutex<Option<NoticeHook>> = Mutex::new(None);

/// Route notices to `hook`; `None` restores the default (warnings to stderr, prefixed `morpheus:`).
pub fn set_notice_hook(hook: Option<NoticeHook>) {
    *HOOK.lock().unwrap_or_else(PoisonError::into_inner) = hook;
}

/// Emit a notice. Called on the worker's own thread only (never by the watcher).
pub(crate) fn notice(level: NoticeLevel, message: &str) {
    let hook = *HOOK.lock().unwrap_or_else(PoisonError::into_inner);
    match hook {
        Some(hook) => hook(level, message),
        None if level == NoticeLevel::Warning => eprintln!("morpheus: {message}"),
        None => {}
    }
}
