// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Options of a registration: where the region comes from, how the slot is obtained, and the
//! worker's initial escapable flag, priority and runtime kind.

use std::{path::PathBuf, sync::Arc};

use morpheus_abi::RuntimeKind;

use crate::{
    error::{Error, Result},
    region::Region,
    worker::Worker,
};

/// Where a worker's region comes from.
#[derive(Clone, Debug, Default)]
pub enum RegionSource {
    /// spec/SCB.md §1.2: `MORPHEUS_REGION`; else, registering through the agent, the region its reply
    /// carries (its socket exists); else the pinned map, the 1.2 sim file; else detached.
    #[default]
    Discover,
    /// This region file or pinned map (an error if it cannot be mapped).
    Path(PathBuf),
    /// An already attached region.
    Region(Arc<Region>),
    /// No region: detached mode.
    Detached,
}

/// How the slot is obtained.
#[derive(Clone, Debug, Default)]
pub enum Registration {
    /// Through the agent at `MORPHEUS_SOCKET` or `DEFAULT_SOCKET_PATH`.
    #[default]
    Agent,
    /// Through the agent listening at this path.
    AgentAt(PathBuf),
    /// Direct registration of this slot (no agent: tests and harnesses that play the scheduler).
    Direct {
        /// Slot index.
        slot: u32,
    },
}

/// Options of a registration. `Config::default()` discovers the region and registers through the agent.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the region comes from.
    pub region: RegionSource,
    /// How the slot is obtained.
    pub registration: Registration,
    /// Whether the scheduler may escalate this worker; `None` takes the spec's default for `runtime_kind`.
    pub escapable: Option<bool>,
    /// Advisory priority, -20 (most important) to 19; outside that range registration fails with
    /// `INVALID_ARGUMENT` (never clamped).
    pub priority: i32,
    /// Which SDK drives the worker (bindings set their own kind).
    pub runtime_kind: RuntimeKind,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            region: RegionSource::Discover,
            registration: Registration::Agent,
            escapable: None,
            priority: 0,
            runtime_kind: RuntimeKind::Rust,
        }
    }
}

impl Config {
    /// Attach to the region at `path`.
    pub fn region_path(mut self, path: impl Into<PathBuf>) -> Config {
        self.region = RegionSource::Path(path.into());
        self
    }

    /// Attach to an already mapped region.
    pub fn region(mut self, region: Arc<Region>) -> Config {
        self.region = RegionSource::Region(region);
        self
    }

    /// Run detached.
    pub fn detached(mut self) -> Config {
        self.region = RegionSource::Detached;
        self
    }

    /// Register slot `slot` directly, without an agent.
    pub fn direct_slot(mut self, slot: u32) -> Config {
        self.registration = Registration::Direct { slot };
        self
    }

    /// Register through the agent listening at `path`.
    pub fn agent_socket(mut self, path: impl Into<PathBuf>) -> Config {
        self.registration = Registration::AgentAt(path.into());
        self
    }

    /// Opt in to (true) or out of (false) escalation.
    pub fn escapable(mut self, escapable: bool) -> Config {
        self.escapable = Some(escapable);
        self
    }

    /// Advisory priority.
    pub fn priority(mut self, priority: i32) -> Config {
        self.priority = priority;
        self
    }

    /// The SDK kind stored in the SCB (and keying the escapable default).
    pub fn runtime_kind(mut self, kind: RuntimeKind) -> Config {
        self.runtime_kind = kind;
        self
    }

    /// Register the calling thread and return its handle.
    pub fn register(&self) -> Result<Worker> {
        Worker::register_with(self)
    }
}

/// `priority` as stored, or `INVALID_ARGUMENT` unless it is in `PRIORITY_MIN..=PRIORITY_MAX`
/// (spec/SCB.md §3: never clamped). Takes an `i64` so bindings can pass what their caller gave.
pub fn validate_priority(priority: i64) -> Result<i32> {
    use morpheus_abi::{PRIORITY_MAX, PRIORITY_MIN};
    if (i64::from(PRIORITY_MIN)..=i64::from(PRIORITY_MAX)).contains(&priority) {
        return Ok(priority as i32);
    }
    Err(Error::InvalidArgument {
        argument: "priority",
        found: priority,
        minimum: PRIORITY_MIN.into(),
        maximum: PRIORITY_MAX.into(),
    })
}
