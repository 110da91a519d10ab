// SPDX-License-Identifier: GPL-2.0-only
//! Identity by process (spec/SCB.md §10): who a connection and a worker are, held by descriptors the
//! kernel pins, never by a pid or tid number, which the kernel hands to a new process or thread once
//! the old one is gone.
//!
//! * A connection's [`Peer`] is the connecting process: a pidfd taken at accept (`SO_PEERPIDFD`; on
//!   kernels before 6.5, `pidfd_open` of the `SO_PEERCRED` pid) and its `/proc/<pid>` directory,
//!   opened once and checked to be that process (the pidfd is still alive after the open, so the
//!   number named it). Once the process has exited the pidfd says so, and every lookup through the
//!   directory fails, even after the number has been reused.
//! * A thread the caller names is found with one lookup relative to that directory (`task/<tid>`);
//!   a caller in another pid namespace (a container, S12) has its tid translated by the kernel through
//!   its pid namespace (`NS_GET_PID_FROM_PIDNS`, one ioctl; before Linux 6.11 only its main thread,
//!   whose id there is read once at accept). No request scans the caller's threads, so its cost does
//!   not grow with them.
//! * A registered worker is a [`Thread`]: its `/proc/<pid>/task/<tid>` directory, opened relative to
//!   the caller's directory, and a pidfd of the thread (`PIDFD_THREAD`, Linux 6.9+). Its liveness is
//!   asked of them; everything read about it (schedstat, status, cgroup) is read through the
//!   directory; and an effect that must name the tid (sched_setscheduler, setpriority) is applied only
//!   between two liveness checks ([`Thread::act`]): a thread alive after the call was alive during
//!   it, so the number named it.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

/// `getsockopt(SOL_SOCKET, SO_PEERPIDFD)` (Linux 6.5): a pidfd of the process that connected.
const SO_PEERPIDFD: libc::c_int = 77;
/// `pidfd_open` flag (Linux 6.9): a pidfd of one thread, which reports that thread's exit.
const PIDFD_THREAD: libc::c_uint = libc::O_EXCL as libc::c_uint;
/// `ioctl(pid namespace fd, NS_GET_PID_FROM_PIDNS, pid)` (Linux 6.11): the id, in the caller's pid
/// namespace, of the task that is `pid` in the given namespace (`_IOR(0xb7, 0x6, int)`).
const NS_GET_PID_FROM_PIDNS: libc::c_ulong = 0x8004_b706;

/// A process, told apart from every later one with its number: pid and start time (clock ticks since
/// boot, field 22 of `stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessKey {
    pub pid: u32,
    pub start: u64,
}

/// Why a tid the caller named is not registrable.
#[derive(Debug)]
pub enum Refused {
    /// No thread of the caller has that id (or the caller is gone).
    NotCallerThread,
    /// The agent could not look (descriptors or memory exhausted): not the caller's fault.
    Resources(io::Error),
}

fn pidfd_open(pid: u32, flags: libc::c_uint) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Whether the process or thread of `pidfd` has exited (a pidfd polls readable from then on; a zombie
/// counts as exited). An error counts as exited: the caller then refuses or releases, never acts.
fn exited(pidfd: BorrowedFd<'_>) -> bool {
    let mut pfd = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: one valid pollfd; timeout 0 never blocks.
        let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
        if rc >= 0 {
            return pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return true;
        }
    }
}

/// `openat(dir, name)` with `O_CLOEXEC` (the names are fixed /proc entries; `ns/pid` is a magic link).
fn open_at(dir: BorrowedFd<'_>, name: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid directory descriptor and NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A small /proc file under `dir`, read whole.
fn read_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<String> {
    let mut text = String::new();
    File::from(open_at(dir, name, libc::O_RDONLY)?).read_to_string(&mut text)?;
    Ok(text)
}

/// Field 22 of a `stat` line: the start time (clock ticks since boot).
pub fn start_time_of(stat: &str) -> Option<u64> {
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(19)?.parse().ok()
}

/// The last NSpid entry of a `status` file: the id in the task's own pid namespace.
fn last_nspid(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

/// Descriptors or memory ran out: the agent's own trouble, reported as such (never as the caller's).
fn is_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM))
}

/// The process at the other end of a registration connection, bound at accept.
pub struct Peer {
    /// `SO_PEERCRED`, in the agent's namespaces (informational once the descriptors are held).
    pub pid: u32,
    pub uid: u32,
    /// The process's start time, read through its directory.
    pub start: u64,
    pidfd: OwnedFd,
    /// `/proc/<pid>`, checked to be the process of `pidfd`.
    dir: OwnedFd,
    /// The caller's pid namespace, when it is not the agent's: tids are translated through it.
    foreign_ns: Option<OwnedFd>,
    /// The process's id in its own pid namespace (the last NSpid entry): its main thread's tid there,
    /// the one tid translatable on kernels without NS_GET_PID_FROM_PIDNS.
    inner_pid: u32,
}

impl Peer {
    /// The process that connected `stream`. Err: it is already gone, or it cannot be pinned.
    pub fn of_connection(stream: &UnixStream) -> io::Result<Peer> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: valid out-pointers of the right size.
        let rc = unsafe {
            libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut raw: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid out-pointers of the right size; a descriptor returned is ours.
        let rc = unsafe { libc::getsockopt(stream.as_raw_fd(), libc::SOL_SOCKET, SO_PEERPIDFD, (&mut raw as *mut libc::c_int).cast(), &mut len) };
        let pidfd = if rc == 0 && raw >= 0 {
            // SAFETY: as above.
            unsafe { OwnedFd::from_raw_fd(raw) }
        } else {
            match io::Error::last_os_error().raw_os_error() {
                // Before Linux 6.5: the number, which names the peer unless it was reused between
                // the peer's connect and this accept (spec/SCB.md §10).
                Some(libc::ENOPROTOOPT | libc::EINVAL) => pidfd_open(cred.pid as u32, 0)?,
                _ => return Err(io::Error::last_os_error()),
            }
        };
        Peer::pin(cred.pid as u32, cred.uid, pidfd)
    }

    /// This process, as a caller of its own agent (the request handler's tests and fuzz target).
    pub fn this_process() -> io::Result<Peer> {
        let pid = std::process::id();
        // SAFETY: no preconditions.
        Peer::pin(pid, unsafe { libc::getuid() }, pidfd_open(pid, 0)?)
    }

    /// Opens `/proc/<pid>` and checks it is the process of `pidfd`: that process is still alive
    /// after the open, so the number named it during the open.
    fn pin(pid: u32, uid: u32, pidfd: OwnedFd) -> io::Result<Peer> {
        let gone = || io::Error::new(io::ErrorKind::NotFound, format!("process {pid} has exited"));
        if exited(pidfd.as_fd()) {
            return Err(gone());
        }
        let proc_root = File::open("/proc")?;
        let dir = open_at(proc_root.as_fd(), &pid.to_string(), libc::O_RDONLY | libc::O_DIRECTORY)?;
        if exited(pidfd.as_fd()) {
            return Err(gone());
        }
        // The main thread's stat (its start time is the process's): /proc/<pid>/stat would sum over every
        // thread, work that grows with the caller's thread count.
        let start = read_at(dir.as_fd(), &format!("task/{pid}/stat")).ok().as_deref().and_then(start_time_of).ok_or_else(gone)?;
        let theirs = File::from(open_at(dir.as_fd(), "ns/pid", libc::O_RDONLY)?);
        let ours = std::fs::metadata("/proc/self/ns/pid")?;
        let (theirs_meta, ours_dev) = (theirs.metadata()?, ours.dev());
        let foreign_ns = (theirs_meta.ino() != ours.ino() || theirs_meta.dev() != ours_dev).then(|| OwnedFd::from(theirs));
        let inner_pid = if foreign_ns.is_some() { last_nspid(&read_at(dir.as_fd(), "status")?).unwrap_or(0) } else { pid };
        Ok(Peer { pid, uid, start, pidfd, dir, foreign_ns, inner_pid })
    }

    /// The process's identity, to compare with the one a worker was registered by.
    pub fn key(&self) -> ProcessKey {
        ProcessKey { pid: self.pid, start: self.start }
    }

    /// Whether the process that connected still runs (checked before every request).
    pub fn alive(&self) -> bool {
        !exited(self.pidfd.as_fd())
    }

    /// The caller's thread whose id in the caller's own pid namespace is `tid`, pinned. Bounded work
    /// whatever the caller's thread count: at most one ioctl, one lookup, one pidfd and two small reads.
    pub fn thread(&self, tid: u32) -> Result<Thread, Refused> {
        let refuse = |e: io::Error| if is_resources(&e) { Refused::Resources(e) } else { Refused::NotCallerThread };
        if tid == 0 || tid > i32::MAX as u32 {
            return Err(Refused::NotCallerThread);
        }
        let global = match &self.foreign_ns {
            None => tid,
            Some(ns) => {
                // SAFETY: an ioctl on our namespace descriptor with an integer argument.
                let rc = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_PID_FROM_PIDNS, tid as libc::c_ulong) };
                if rc > 0 {
                    rc as u32
                } else if io::Error::last_os_error().raw_os_error() == Some(libc::ENOTTY) && tid == self.inner_pid {
                    // Before Linux 6.11: only the main thread's translation is known (NSpid at accept).
                    self.pid
                } else {
                    return Err(refuse(io::Error::last_os_error()));
                }
            }
        };
        let dir = open_at(self.dir.as_fd(), &format!("task/{global}"), libc::O_RDONLY | libc::O_DIRECTORY).map_err(refuse)?;
        // The pidfd by number, then a read through the directory: that thread is still alive after the
        // pidfd was taken, so the number named it. Kernels before 6.9 have no thread pidfd (EINVAL).
        let pidfd = match pidfd_open(global, PIDFD_THREAD) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(refuse(e)),
        };
        let start = read_at(dir.as_fd(), "stat").map_err(refuse)?;
        let start = start_time_of(&start).ok_or(Refused::NotCallerThread)?;
        if self.foreign_ns.is_some() {
            // The translation and the lookup are two steps: the thread found must still carry `tid`
            // in the caller's namespace (the last NSpid entry).
            if last_nspid(&read_at(dir.as_fd(), "status").map_err(refuse)?) != Some(tid) {
                return Err(Refused::NotCallerThread);
            }
        }
        Ok(Thread { tid: global, start, process: self.key(), dir, pidfd })
    }
}

/// A registered worker's thread, pinned from registration on. Shared (`Arc`) by the agent's table and
/// the backends; its descriptors close with the last holder.
#[derive(Debug)]
pub struct Thread {
    /// Its id in the agent's pid namespace (for logs, and for the calls that take a number).
    pub tid: u32,
    /// Its start time: what the journal records, to tell it from a later thread with its id.
    pub start: u64,
    /// The process that registered it.
    pub process: ProcessKey,
    /// `/proc/<pid>/task/<tid>`.
    dir: OwnedFd,
    /// A pidfd of the thread (Linux 6.9+), which polls readable when the thread exits.
    pidfd: Option<OwnedFd>,
}

impl Thread {
    /// Whether the thread still runs: its pidfd, or (before 6.9) a read through its directory, which
    /// fails once the thread is gone even if its id has been reused.
    pub fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => !exited(fd.as_fd()),
            None => read_at(self.dir.as_fd(), "stat").ok().as_deref().and_then(start_time_of) == Some(self.start),
        }
    }

    /// The pidfd to wait on for the thread's exit, if the kernel gave one.
    pub fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|fd| fd.as_fd())
    }

    /// One of the thread's /proc files (`schedstat`, `status`, `cgroup`), opened through its directory.
    pub fn open(&self, name: &str) -> io::Result<File> {
        open_at(self.dir.as_fd(), name, libc::O_RDONLY).map(File::from)
    }

    /// One of the thread's /proc files, read whole through its directory.
    pub fn read(&self, name: &str) -> io::Result<String> {
        read_at(self.dir.as_fd(), name)
    }

    /// Runs `f` with the thread's id if the thread is alive, and checks it again afterwards: alive
    /// then, it was alive throughout, so the id named this thread. None: it is gone, `f` never ran.
    /// Some((result, false)): it exited while `f` ran (the id was used in a window of a few system
    /// calls; the caller logs it).
    pub fn act<R>(&self, f: impl FnOnce(libc::pid_t) -> R) -> Option<(R, bool)> {
        if !self.alive() {
            return None;
        }
        let result = f(self.tid as libc::pid_t);
        Some((result, self.alive()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gettid() -> u32 {
        // SAFETY: no preconditions.
        unsafe { libc::gettid() as u32 }
    }

    #[test]
    fn own_threads_resolve_and_others_do_not() {
        let me = Peer::this_process().expect("pin this process");
        assert!(me.alive());
        let t = me.thread(gettid()).expect("this thread");
        assert_eq!(t.tid, gettid());
        assert_eq!(t.process, me.key());
        assert!(t.alive());
        assert!(t.read("schedstat").is_ok());
        assert!(matches!(me.thread(0), Err(Refused::NotCallerThread)));
        assert!(matches!(me.thread(1), Err(Refused::NotCallerThread)), "pid 1 is not a thread of this process");
        assert!(matches!(me.thread(u32::MAX), Err(Refused::NotCallerThread)));
    }

    #[test]
    fn a_thread_is_gone_when_it_exits_and_its_descriptor_says_so() {
        let me = Peer::this_process().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            wait.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let t = me.thread(tid).expect("a live thread of this process");
        // The fallback (no thread pidfd, kernels before 6.9) judges by the directory.
        let dir_only = Thread { pidfd: None, ..me.thread(tid).unwrap() };
        assert!(t.alive() && dir_only.alive());
        go.send(()).unwrap();
        h.join().unwrap();
        // A joined thread may still be tearing down for a moment: wait for the kernel to say so.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while (t.alive() || dir_only.alive()) && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(!t.alive(), "the thread pidfd still says alive");
        assert!(!dir_only.alive(), "the task directory still reads");
        assert!(t.read("schedstat").is_err(), "a read through a dead thread's directory must fail");
        assert!(t.act(|_| ()).is_none(), "no effect on a thread that is gone");
        assert!(matches!(me.thread(tid), Err(Refused::NotCallerThread)));
    }

    #[test]
    fn another_process_is_gone_for_good_after_it_exits() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let peer = Peer::pin(pid, 0, pidfd_open(pid, 0).unwrap()).expect("pin the child");
        assert!(peer.alive());
        assert!(peer.thread(pid).is_ok(), "its main thread");
        assert!(matches!(peer.thread(gettid()), Err(Refused::NotCallerThread)), "not its thread");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!peer.alive());
        assert!(matches!(peer.thread(pid), Err(Refused::NotCallerThread)), "lookups through a dead process's directory fail");
    }

    #[test]
    fn a_caller_in_its_own_pid_namespace_names_its_namespace_tid() {
        // unshare --pid --fork: the child is pid 1 in its namespace (needs root, as the agent).
        let Ok(mut child) = std::process::Command::new("unshare").args(["--pid", "--fork", "--kill-child", "sleep", "30"]).spawn() else { return };
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let inner = loop {
            let kids = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id())).unwrap_or_default();
            if let Some(k) = kids.split_whitespace().next() {
                break k.parse::<u32>().unwrap();
            }
            assert!(std::time::Instant::now() < end, "unshare started no child");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let peer = Peer::pin(inner, 0, pidfd_open(inner, 0).unwrap()).unwrap();
        assert!(peer.foreign_ns.is_some());
        let t = peer.thread(1).expect("tid 1 in its namespace");
        assert_eq!(t.tid, inner);
        assert!(matches!(peer.thread(inner), Err(Refused::NotCallerThread)), "its global id is not a tid in its namespace");
        child.kill().unwrap();
        let _ = child.wait();
    }
}
