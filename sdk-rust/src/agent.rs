// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Client side of the agent's registration channel (spec/SCB.md §4.1): one sized `reg_request` out,
//! one `reg_reply` back, on a Unix stream socket. A successful REGISTER reply of a 1.3 agent carries the
//! descriptor of the caller's region (SCM_RIGHTS), which the SDK maps instead of any path.

use std::{
    io::Write,
    mem::size_of,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use morpheus_abi::{
    RegEscapable, RegOp, RegReply, RegRequest, RegStatus, RuntimeKind, ABI_MAJOR, ABI_MINOR, DEFAULT_SOCKET_PATH,
    ENV_SOCKET, REG_MAGIC, REG_MESSAGE_MAX,
};

use crate::error::{Error, Result};

/// How long a registration may wait on a running agent before failing with `IO`.
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a waiting client checks whether the agent is stopped (S12: say so at once).
const STOPPED_CHECK: Duration = Duration::from_millis(100);

/// The agent socket path: `MORPHEUS_SOCKET` if set, else `DEFAULT_SOCKET_PATH`.
pub fn socket_path() -> PathBuf {
    std::env::var_os(ENV_SOCKET).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| DEFAULT_SOCKET_PATH.into())
}

/// What a successful REGISTER returned.
#[derive(Debug)]
pub struct Assignment {
    /// Slot index in the region.
    pub slot: u32,
    /// The region's generation at assignment.
    pub generation: u64,
    /// The slot's `slot_generation` after assignment.
    pub slot_generation: u32,
    /// Region the agent says to map; `None` if it sent an empty path.
    pub region_path: Option<PathBuf>,
    /// The region's descriptor, if the agent sent one (1.3 agents always do on OK).
    pub region_fd: Option<OwnedFd>,
}

/// A connection to the agent, kept for the worker's UNREGISTER.
#[derive(Debug)]
pub struct AgentConnection {
    stream: UnixStream,
    path: PathBuf,
}

fn as_bytes<T: Copy>(value: &T) -> &[u8] {
    // SAFETY: the ABI records are plain integers with explicit padding (no uninitialised bytes).
    unsafe { std::slice::from_raw_parts(value as *const T as *const u8, size_of::<T>()) }
}

/// The state letter of /proc/<pid>/stat ('T': stopped, 't': traced).
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().next()?.chars().next()
}

/// One `recvmsg` on a registration connection into `buf`: the bytes read (0: the agent closed the
/// connection) and the descriptor sent with them (SCM_RIGHTS: the region of an OK REGISTER reply,
/// spec/SCB.md §4.1), received close-on-exec. Any further descriptor (an agent sends one at most)
/// is closed. Errors are the socket's own (a read timeout is `WouldBlock`). This is the SDK's one
/// receive step, public for clients that speak the protocol byte by byte (the agent's tests).
pub fn receive_with_fd(stream: &UnixStream, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; the buffers outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; 8]>() as _;
    // SAFETY: valid socket and message; MSG_CMSG_CLOEXEC: a received fd is not inherited.
    let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel wrote into `control`; each descriptor in an
    // SCM_RIGHTS message is ours to own (and closed on drop if not kept).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<libc::c_int>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>().add(i));
                    let owned = OwnedFd::from_raw_fd(raw);
                    if fd.is_none() {
                        fd = Some(owned);
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, fd))
}

impl AgentConnection {
    /// Connect to the agent at `path`.
    pub fn connect(path: &Path) -> Result<AgentConnection> {
        let stream = UnixStream::connect(path).map_err(|e| {
            let hint = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => " (no agent is running there: start scx_morpheus)",
                std::io::ErrorKind::PermissionDenied => " (the socket's group may register: ask for membership)",
                _ => "",
            };
            Error::io(format!("connecting to the agent at {}{hint}", path.display()), e)
        })?;
        for result in [stream.set_read_timeout(Some(STOPPED_CHECK)), stream.set_write_timeout(Some(AGENT_TIMEOUT))] {
            result.map_err(|e| Error::io(format!("setting timeouts on {}", path.display()), e))?;
        }
        Ok(AgentConnection { stream, path: path.into() })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The agent's pid (SO_PEERCRED on our side of the socket).
    pub(crate) fn agent_pid(&self) -> Option<i32> {
        let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: valid out-pointers of the right size.
        let rc = unsafe {
            libc::getsockopt(
                self.stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        (rc == 0 && cred.pid > 0).then_some(cred.pid)
    }

    /// One recvmsg into `buf`, keeping a descriptor sent with it. Waits in short steps so that a
    /// stopped agent is reported at once and a silent one after AGENT_TIMEOUT, each with a clear error.
    fn receive(&mut self, buf: &mut [u8], fd: &mut Option<OwnedFd>, what: &str) -> Result<usize> {
        let waited_since = std::time::Instant::now();
        loop {
            let err = match receive_with_fd(&self.stream, buf) {
                Ok((n, received)) => {
                    if fd.is_none() {
                        *fd = received; // a later one (never sent by an agent) is closed
                    }
                    return Ok(n);
                }
                Err(err) => err,
            };
            match err.kind() {
                std::io::ErrorKind::Interrupted => continue,
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    if let Some(pid) = self.agent_pid().filter(|&p| matches!(process_state(p), Some('T' | 't'))) {
                        return Err(Error::io(
                            format!("the agent at {} (pid {pid}) is stopped (SIGSTOP or a debugger); {what} got no reply", self.path.display()),
                            std::io::Error::from(std::io::ErrorKind::TimedOut),
                        ));
                    }
                    if waited_since.elapsed() >= AGENT_TIMEOUT {
                        return Err(Error::io(
                            format!("the agent at {} did not answer {what} within {} s", self.path.display(), AGENT_TIMEOUT.as_secs()),
                            std::io::Error::from(std::io::ErrorKind::TimedOut),
                        ));
                    }
                }
                _ => return Err(Error::io(format!("reading the reply to {what} from the agent at {}", self.path.display()), err)),
            }
        }
    }

    fn exchange(&mut self, request: &RegRequest) -> Result<(RegReply, Option<OwnedFd>)> {
        let what = RegOp::try_from(request.op).map(|op| op.name()).unwrap_or("request");
        self.stream
            .write_all(as_bytes(request))
            .map_err(|e| Error::io(format!("sending {what} to the agent at {}", self.path.display()), e))?;
        let mut buf = [0u8; size_of::<RegReply>()];
        let mut fd = None;
        let mut got = 0;
        while got < buf.len() {
            let n = self.receive(&mut buf[got..], &mut fd, what)?;
            if n == 0 {
                return Err(Error::io(
                    format!(
                        "the agent at {} closed the connection after {got} of the {}-byte reply to {what}",
                        self.path.display(),
                        size_of::<RegReply>()
                    ),
                    std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                ));
            }
            got += n;
        }
        // SAFETY: RegReply is plain integers; any bit pattern is valid.
        let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const RegReply) };
        if reply.magic != REG_MAGIC {
            return Err(Error::io(
                format!("reply from the agent at {}: expected magic {REG_MAGIC:#010x}, found {:#010x}", self.path.display(), reply.magic),
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            ));
        }
        // A newer agent's longer reply: read past what this SDK knows (bounded), so the stream stays in step.
        let size = reply.message_size as usize;
        if size > REG_MESSAGE_MAX as usize {
            return Err(Error::io(
                format!("reply from the agent at {}: size {size} exceeds REG_MESSAGE_MAX", self.path.display()),
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            ));
        }
        let mut rest = size.saturating_sub(size_of::<RegReply>());
        let mut sink = [0u8; 256];
        while rest > 0 {
            let n = self.receive(&mut sink[..rest.min(256)], &mut fd, what)?;
            if n == 0 {
                break;
            }
            rest -= n;
        }
        Ok((reply, fd))
    }

    fn request(op: RegOp, tid: u32, slot: u32, kind: RuntimeKind, escapable: Option<bool>, priority: i32) -> RegRequest {
        RegRequest {
            magic: REG_MAGIC,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            op: op.raw(),
            tid,
            slot,
            runtime_kind: kind.raw(),
            message_size: size_of::<RegRequest>() as u32,
            escapable: match escapable {
                None => RegEscapable::Default.raw(),
                Some(false) => RegEscapable::No.raw(),
                Some(true) => RegEscapable::Yes.raw(),
            },
            priority,
            ..Default::default()
        }
    }

    fn refused(reply: &RegReply) -> Error {
        let detail = if reply.status == RegStatus::AbiMajorMismatch.raw() {
            format!(" (the agent speaks ABI {}.{}, this SDK {ABI_MAJOR}.{ABI_MINOR})", reply.abi_major, reply.abi_minor)
        } else {
            String::new()
        };
        Error::RegistrationRefused { status: reply.status, detail }
    }

    /// REGISTER thread `tid`, asking for `escapable` (`None`: the kind's default) and `priority`.
    pub fn register(&mut self, tid: u32, kind: RuntimeKind, escapable: Option<bool>, priority: i32) -> Result<Assignment> {
        let (reply, region_fd) = self.exchange(&Self::request(RegOp::Register, tid, 0, kind, escapable, priority))?;
        if reply.status != RegStatus::Ok.raw() {
            return Err(Self::refused(&reply));
        }
        let raw = &reply.region_path;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let region_path = (end > 0).then(|| {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(&raw[..end]))
        });
        Ok(Assignment {
            slot: reply.slot,
            generation: reply.generation,
            slot_generation: reply.slot_generation,
            region_path,
            region_fd,
        })
    }

    /// UNREGISTER `slot`.
    ///
    /// A worker usually outlives the agent's patience with an idle connection (spec/SCB.md §4.1: the
    /// agent may close it), so a failed exchange is retried once on a new connection; the agent
    /// identifies the caller by `SO_PEERCRED`, not by connection.
    pub fn unregister(&mut self, slot: u32, kind: RuntimeKind) -> Result<()> {
        let request = Self::request(RegOp::Unregister, 0, slot, kind, None, 0);
        let reply = match self.exchange(&request) {
            Ok((reply, _)) => reply,
            Err(_) => {
                *self = AgentConnection::connect(&self.path)?;
                self.exchange(&request)?.0
            }
        };
        if reply.status != RegStatus::Ok.raw() {
            return Err(Self::refused(&reply));
        }
        Ok(())
    }
}
