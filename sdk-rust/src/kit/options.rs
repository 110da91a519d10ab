// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The options a binding's caller gives to register a worker, validated once for every binding.
//!
//! [`Config`]'s builder lets the last call win (`region_path` then `detached` is detached); a binding's
//! caller gives all options at once, and two that contradict each other are a mistake to report,
//! never to resolve silently. [`Options::config`] applies one set of rules, in this order, and stops at
//! the first broken one:
//!
//! 1. `region` and `detached` conflict ([`OptionError::Conflict`]);
//! 2. `slot` (direct registration) and `socket` (through the agent) conflict;
//! 3. `slot` is a slot index, `0..=u32::MAX` ([`OptionError::SlotOutOfRange`]);
//! 4. `priority` is in `PRIORITY_MIN..=PRIORITY_MAX`, never clamped: the core's `INVALID_ARGUMENT`
//!    ([`OptionError::Core`]).
//!
//! A binding maps [`OptionError::Conflict`] and [`OptionError::SlotOutOfRange`] to its language's
//! argument error, [`OptionError::Core`] to the exception of the error's ABI code, and prefixes the
//! message with its call's name. A binding that reports ABI codes (libmorpheus, the JNI library) takes
//! [`OptionError::code`].

use std::{fmt, path::PathBuf, sync::Arc};

use morpheus_abi::{ErrorCode, RuntimeKind};

use crate::{
    config::{validate_priority, Config},
    error::Error,
    region::Region,
};

/// A region the caller named.
#[derive(Clone, Debug)]
pub enum RegionChoice {
    /// A region file or pinned map to map.
    Path(PathBuf),
    /// A region already mapped.
    Region(Arc<Region>),
}

/// A registration's options as the caller gave them (`None` / `false`: not given).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Attach to this region instead of discovering one.
    pub region: Option<RegionChoice>,
    /// Run detached whatever is available.
    pub detached: bool,
    /// Register this slot directly, without the agent (tests and harnesses that play the scheduler).
    pub slot: Option<i64>,
    /// The agent's socket, instead of `MORPHEUS_SOCKET` or the default path.
    pub socket: Option<PathBuf>,
    /// Whether the scheduler may escalate the worker; `None` takes the ABI's default for the runtime kind.
    pub escapable: Option<bool>,
    /// Advisory priority, -20 (most important) to 19; `None` is 0.
    pub priority: Option<i64>,
}

/// What is wrong with a set of [`Options`]. Its `Display` names the options and the value.
#[derive(Clone, Debug)]
pub enum OptionError {
    /// Two options given together that exclude each other.
    Conflict {
        /// The first option's name.
        first: &'static str,
        /// The option it excludes.
        second: &'static str,
    },
    /// `slot` is not a slot index.
    SlotOutOfRange {
        /// The value given.
        found: i64,
    },
    /// A rule of the core (the priority's range): the error carries its ABI code.
    Core(Error),
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Conflict { first, second } => write!(f, "give {first} or {second}, not both"),
            OptionError::SlotOutOfRange { found } if *found < 0 => write!(f, "expected a slot index >= 0, got {found}"),
            OptionError::SlotOutOfRange { found } => write!(f, "expected a slot index <= {}, got {found}", u32::MAX),
            OptionError::Core(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for OptionError {}

impl OptionError {
    /// The ABI error code of this error: `INVALID_ARGUMENT` for a conflict or a slot out of range (the
    /// caller's arguments), the core error's own code for [`OptionError::Core`].
    pub fn code(&self) -> ErrorCode {
        match self {
            OptionError::Conflict { .. } | OptionError::SlotOutOfRange { .. } => ErrorCode::InvalidArgument,
            OptionError::Core(err) => err.code(),
        }
    }
}

impl Options {
    /// The [`Config`] these options ask for, for a worker of `kind`, or the first rule they break
    /// (see the module's documentation for the rules and their order).
    pub fn config(&self, kind: RuntimeKind) -> Result<Config, OptionError> {
        let mut config = Config::default().runtime_kind(kind);
        match (&self.region, self.detached) {
            (Some(_), true) => return Err(OptionError::Conflict { first: "region", second: "detached" }),
            (None, true) => config = config.detached(),
            (Some(RegionChoice::Path(path)), false) => config = config.region_path(path.clone()),
            (Some(RegionChoice::Region(region)), false) => config = config.region(region.clone()),
            (None, false) => {}
        }
        match (self.slot, &self.socket) {
            (Some(_), Some(_)) => return Err(OptionError::Conflict { first: "slot", second: "socket" }),
            (Some(slot), None) => {
                let slot = u32::try_from(slot).map_err(|_| OptionError::SlotOutOfRange { found: slot })?;
                config = config.direct_slot(slot);
            }
            (None, Some(socket)) => config = config.agent_socket(socket.clone()),
            (None, None) => {}
        }
        config = config.priority(validate_priority(self.priority.unwrap_or(0)).map_err(OptionError::Core)?);
        if let Some(escapable) = self.escapable {
            config = config.escapable(escapable);
        }
        Ok(config)
    }
}
