// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The SDK's error type: one variant per `error_code` of the ABI, each message naming what was expected
//! and what was found.

use std::{fmt, io, path::PathBuf, sync::Arc};

use morpheus_abi::{ErrorCode, RegStatus, WorkerState};

/// Result type of the SDK.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, named as in `spec/abi.toml`'s `error_code` (see [`Error::code`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
// Field names say what they hold; Display turns them into "expected ..., found ...".
#[allow(missing_docs)]
pub enum Error {
    /// The region does not start with `REGION_MAGIC`.
    BadMagic { path: PathBuf, expected: u64, found: u64 },
    /// The region's ABI major differs from the SDK's.
    AbiMajorMismatch { path: PathBuf, expected: u16, found: u16 },
    /// The region is smaller than a header, or than its header says.
    RegionTruncated { path: PathBuf, needed: u64, found: u64 },
    /// `header_size` or `scb_stride` is too small or not a multiple of `CACHE_LINE_SIZE`.
    BadLayout { path: PathBuf, field: &'static str, minimum: u32, multiple_of: u32, found: u32 },
    /// The region sets required feature bits this SDK does not know.
    UnknownRequiredFeature { path: PathBuf, unknown_bits: u64, known: u64 },
    /// The region's generation is 0: its scheduler has not finished writing it, or has retired it.
    NotReady { path: PathBuf },
    /// The scheduler restarted (generation changed); the worker is detached and must register again.
    GenerationChanged { attached: u64, found: u64 },
    /// A worker index is `>= scb_count`.
    SlotOutOfRange { slot: u32, scb_count: u32 },
    /// The calling thread already holds a worker.
    AlreadyRegistered { slot: Option<u32> },
    /// A critical-section exit without a matching enter.
    NotInCritical,
    /// An operating-system call failed.
    Io { context: String, source: Arc<io::Error> },
    /// The agent answered a registration request with a status other than `OK`.
    RegistrationRefused { status: u32, detail: String },
    /// The operation needs a region and the worker is detached.
    Detached { operation: &'static str },
    /// Direct registration found the slot in a state other than `INIT`.
    SlotBusy { slot: u32, state: u32 },
    /// The calling thread holds no worker.
    NotRegistered { operation: &'static str },
    /// The host or the program cannot use the ABI (for example a C program compiled against another
    /// `struct morpheus_worker` layout).
    UnsupportedPlatform { detail: String },
    /// An argument is outside its range (never clamped).
    InvalidArgument { argument: &'static str, found: i64, minimum: i64, maximum: i64 },
}

impl Error {
    /// The ABI `error_code` of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadMagic { .. } => ErrorCode::BadMagic,
            Error::AbiMajorMismatch { .. } => ErrorCode::AbiMajorMismatch,
            Error::RegionTruncated { .. } => ErrorCode::RegionTruncated,
            Error::BadLayout { .. } => ErrorCode::BadLayout,
            Error::UnknownRequiredFeature { .. } => ErrorCode::UnknownRequiredFeature,
            Error::NotReady { .. } => ErrorCode::NotReady,
            Error::GenerationChanged { .. } => ErrorCode::GenerationChanged,
            Error::SlotOutOfRange { .. } => ErrorCode::SlotOutOfRange,
            Error::AlreadyRegistered { .. } => ErrorCode::AlreadyRegistered,
            Error::NotInCritical => ErrorCode::NotInCritical,
            Error::Io { .. } => ErrorCode::Io,
            Error::RegistrationRefused { .. } => ErrorCode::RegistrationRefused,
            Error::Detached { .. } => ErrorCode::Detached,
            Error::SlotBusy { .. } => ErrorCode::SlotBusy,
            Error::NotRegistered { .. } => ErrorCode::NotRegistered,
            Error::InvalidArgument { .. } => ErrorCode::InvalidArgument,
            Error::UnsupportedPlatform { .. } => ErrorCode::UnsupportedPlatform,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Error {
        Error::Io { context: context.into(), source: Arc::new(source) }
    }

    pub(crate) fn last_os(context: impl Into<String>) -> Error {
        Error::io(context, io::Error::last_os_error())
    }
}

fn state_name(raw: u32) -> String {
    match WorkerState::try_from(raw) {
        Ok(state) => state.name().to_owned(),
        Err(other) => format!("unknown state {other}"),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.code().name())?;
        match self {
            Error::BadMagic { path, expected, found } => write!(
                f,
                "region {}: expected magic {expected:#018x} (\"MORPHEUS\"), found {found:#018x}",
                path.display()
            ),
            Error::AbiMajorMismatch { path, expected, found } => write!(
                f,
                "region {}: this SDK speaks ABI major {expected}, the region has ABI major {found}",
                path.display()
            ),
            Error::RegionTruncated { path, needed, found } => write!(
                f,
                "region {}: needed at least {needed} bytes, found {found}",
                path.display()
            ),
            Error::BadLayout { path, field, minimum, multiple_of, found } => write!(
                f,
                "region {}: expected {field} >= {minimum} and a multiple of {multiple_of}, found {found}",
                path.display()
            ),
            Error::UnknownRequiredFeature { path, unknown_bits, known } => write!(
                f,
                "region {}: required feature bits {unknown_bits:#x} are unknown to this SDK (it knows {known:#x})",
                path.display()
            ),
            Error::NotReady { path } => write!(
                f,
                "region {}: expected a nonzero generation, found 0 (the scheduler has not published it, or retired it)",
                path.display()
            ),
            Error::GenerationChanged { attached, found } => write!(
                f,
                "the worker attached to generation {attached}, the region now has generation {found}: the scheduler \
                 restarted; the worker is detached and must register again"
            ),
            Error::SlotOutOfRange { slot, scb_count } => {
                write!(f, "expected a slot below scb_count {scb_count}, found slot {slot}")
            }
            Error::AlreadyRegistered { slot: Some(slot) } => {
                write!(f, "this thread already holds a worker (slot {slot}); drop it before registering again")
            }
            Error::AlreadyRegistered { slot: None } => {
                write!(f, "this thread already holds a (detached) worker; drop it before registering again")
            }
            Error::NotInCritical => write!(f, "critical-section exit at depth 0: expected a matching enter, found none"),
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::RegistrationRefused { status, detail } => {
                let name = RegStatus::try_from(*status).map(|s| s.name()).unwrap_or("an unknown status");
                write!(f, "the agent refused the registration: expected status OK, found {name} ({status}){detail}")
            }
            Error::Detached { operation } => {
                write!(f, "{operation} needs an attached region, and this worker is detached")
            }
            Error::SlotBusy { slot, state } => write!(
                f,
                "direct registration of slot {slot}: expected state INIT, found {}",
                state_name(*state)
            ),
            Error::NotRegistered { operation } => {
                write!(f, "{operation} needs a worker, and this thread holds none")
            }
            Error::UnsupportedPlatform { detail } => f.write_str(detail),
            Error::InvalidArgument { argument, found, minimum, maximum } => {
                write!(f, "expected {argument} in {minimum}..={maximum}, found {found}; nothing was written")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}
