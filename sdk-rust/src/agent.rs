// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Client side of the agent's registration channel (spec/SCB.md §4.1): one `reg_request` out, one
//! `reg_reply` back, on a Unix stream socket.

use std::{
    io::{Read, Write},
    mem::size_of,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    time::Duration,
};

use morpheus_abi::{
    RegEscapable, RegOp, RegReply, RegRequest, RegStatus, RuntimeKind, ABI_MAJOR, ABI_MINOR, DEFAULT_SOCKET_PATH, ENV_SOCKET,
    REG_MAGIC,
};

use crate::error::{Error, Result};

/// How long a registration may wait on the agent before failing with `IO`.
const AGENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The agent socket path: `MORPHEUS_SOCKET` if set, else `DEFAULT_SOCKET_PATH`.
pub fn socket_path() -> PathBuf {
    std::env::var_os(ENV_SOCKET).filter(|v| !v.is_empty()).map(PathBuf::from).unwrap_or_else(|| DEFAULT_SOCKET_PATH.into())
}

/// What a successful REGISTER returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Slot index in the region.
    pub slot: u32,
    /// The region's generation at assignment.
    pub generation: u64,
    /// The slot's `slot_generation` after assignment.
    pub slot_generation: u32,
    /// Region the agent says to map; `None` if it sent an empty path.
    pub region_path: Option<PathBuf>,
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

impl AgentConnection {
    /// Connect to the agent at `path`.
    pub fn connect(path: &Path) -> Result<AgentConnection> {
        let stream = UnixStream::connect(path)
            .map_err(|e| Error::io(format!("connecting to the agent at {}", path.display()), e))?;
        for result in [stream.set_read_timeout(Some(AGENT_TIMEOUT)), stream.set_write_timeout(Some(AGENT_TIMEOUT))] {
            result.map_err(|e| Error::io(format!("setting timeouts on {}", path.display()), e))?;
        }
        Ok(AgentConnection { stream, path: path.into() })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn exchange(&mut self, request: &RegRequest) -> Result<RegReply> {
        let what = RegOp::try_from(request.op).map(|op| op.name()).unwrap_or("request");
        self.stream
            .write_all(as_bytes(request))
            .map_err(|e| Error::io(format!("sending {what} to the agent at {}", self.path.display()), e))?;
        let mut buf = [0u8; size_of::<RegReply>()];
        self.stream.read_exact(&mut buf).map_err(|e| {
            Error::io(
                format!(
                    "reading the {}-byte reply to {what} from the agent at {}",
                    size_of::<RegReply>(),
                    self.path.display()
                ),
                e,
            )
        })?;
        // SAFETY: RegReply is plain integers; any bit pattern is valid.
        let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const RegReply) };
        if reply.magic != REG_MAGIC {
            return Err(Error::io(
                format!(
                    "reply from the agent at {}: expected magic {REG_MAGIC:#010x}, found {:#010x}",
                    self.path.display(),
                    reply.magic
                ),
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            ));
        }
        Ok(reply)
    }

    fn request(op: RegOp, tid: u32, slot: u32, kind: RuntimeKind) -> RegRequest {
        RegRequest {
            magic: REG_MAGIC,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            op: op.raw(),
            tid,
            slot,
            runtime_kind: kind.raw(),
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

    /// REGISTER thread `tid`; the agent writes `escapable` (`None`: the kind's default) and `priority`
    /// into the SCB before REGISTERED (ABI 1.3).
    pub fn register(&mut self, tid: u32, kind: RuntimeKind, escapable: Option<bool>, priority: i32) -> Result<Assignment> {
        let escapable = match escapable {
            None => RegEscapable::Default,
            Some(false) => RegEscapable::No,
            Some(true) => RegEscapable::Yes,
        };
        let request = RegRequest { escapable: escapable.raw(), priority, ..Self::request(RegOp::Register, tid, 0, kind) };
        let reply = self.exchange(&request)?;
        if reply.status != RegStatus::Ok.raw() {
            return Err(Self::refused(&reply));
        }
        let raw = &reply.region_path;
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let region_path = (end > 0).then(|| {
            use std::os::unix::ffi::OsStrExt;
            PathBuf::from(std::ffi::OsStr::from_bytes(&raw[..end]))
        });
        Ok(Assignment { slot: reply.slot, generation: reply.generation, slot_generation: reply.slot_generation, region_path })
    }

    /// UNREGISTER `slot`.
    ///
    /// A worker usually outlives the agent's patience with an idle connection (spec/SCB.md §4.1: the
    /// agent may close it), so a failed exchange is retried once on a new connection; the agent
    /// identifies the caller by `SO_PEERCRED`, not by connection.
    pub fn unregister(&mut self, slot: u32, kind: RuntimeKind) -> Result<()> {
        let request = Self::request(RegOp::Unregister, 0, slot, kind);
        let reply = match self.exchange(&request) {
            Ok(reply) => reply,
            Err(_) => {
                *self = AgentConnection::connect(&self.path)?;
                self.exchange(&request)?
            }
        };
        if reply.status != RegStatus::Ok.raw() {
            return Err(Self::refused(&reply));
        }
        Ok(())
    }
}
