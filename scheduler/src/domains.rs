// SPDX-License-Identifier: GPL-2.0-only
//! Trust domains and the agent's own record of who holds which slot (spec/SCB.md §10).
//!
//! Memory a runtime can write must affect only its owner. The sim backend therefore gives every uid
//! its own region: a sealed, preallocated memfd created at that uid's first registration and handed
//! to its processes over the socket (SCM_RIGHTS); no other user can map it. The kernel backend has one
//! BPF region map for everyone ([`Placement::Shared`]; §10 says what that leaves open).
//!
//! [`Workers`] is the only source of a worker's identity the backends use: the tid and pid the agent
//! checked at registration, never the ones stored in an SCB (S3).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::region::{Region, RegionParams};

/// One region and the descriptor handed to the clients that register in it.
pub struct Domain {
    pub region: Arc<Region>,
    pub fd: OwnedFd,
}

/// Where registrations are placed.
pub enum Placement {
    /// One region for every client (the kernel backend's BPF map; its map fd is handed out).
    Shared(Arc<Domain>),
    /// One memfd region per uid, `params.scb_count` slots each, all published with `generation`.
    PerUid { params: RegionParams, generation: u64 },
}

/// A slot the agent assigned: everything a backend may believe about its worker.
#[derive(Clone)]
pub struct Assigned {
    /// The thread, in the agent's pid namespace (translated through NSpid at registration).
    pub tid: u32,
    pub pid: u32,
    pub uid: u32,
    /// The region and the slot index in it (what the client was told).
    pub domain: Arc<Domain>,
    pub local: u32,
}

/// The trusted slot table, indexed by the agent's global slot number (`0..max_workers`). For a shared
/// placement the global number is the slot index in the one region.
pub struct Workers {
    slots: Mutex<Vec<Option<Assigned>>>,
}

impl Workers {
    pub fn new(max_workers: u32) -> Arc<Workers> {
        Arc::new(Workers { slots: Mutex::new(vec![None; max_workers as usize]) })
    }

    pub fn capacity(&self) -> u32 {
        self.lock().len() as u32
    }

    /// A copy of one entry (the backend's view at this tick).
    pub fn get(&self, global: u32) -> Option<Assigned> {
        self.lock().get(global as usize).cloned().flatten()
    }

    /// Every assigned slot, with its global number (one lock for the whole table).
    pub fn assigned(&self) -> Vec<(u32, Assigned)> {
        self.lock().iter().enumerate().filter_map(|(i, a)| a.clone().map(|a| (i as u32, a))).collect()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<Assigned>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The regions of one agent instance, by trust domain.
pub struct Domains {
    placement: Placement,
    by_uid: Mutex<HashMap<u32, Arc<Domain>>>,
}

impl Domains {
    pub fn new(placement: Placement) -> Domains {
        Domains { placement, by_uid: Mutex::new(HashMap::new()) }
    }

    pub fn is_shared(&self) -> bool {
        matches!(self.placement, Placement::Shared(_))
    }

    /// The domain of `uid`, created (memfd, sealed, preallocated, published) on first use.
    pub fn for_uid(&self, uid: u32) -> Result<Arc<Domain>> {
        let (params, generation) = match &self.placement {
            Placement::Shared(domain) => return Ok(Arc::clone(domain)),
            Placement::PerUid { params, generation } => (params, *generation),
        };
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(domain) = by_uid.get(&uid) {
            return Ok(Arc::clone(domain));
        }
        let (region, fd) = Region::create_memfd(&format!("morpheus-region-uid{uid}"), params.scb_count)
            .with_context(|| format!("cannot create the region of uid {uid}"))?;
        region.publish_pressure(&crate::pressure::PressureFeed::new().sample(crate::monotonic_ns()));
        region.publish(params, generation);
        let domain = Arc::new(Domain { region: Arc::new(region), fd });
        by_uid.insert(uid, Arc::clone(&domain));
        log::debug!("created the region of uid {uid} ({} slots)", params.scb_count);
        Ok(domain)
    }

    /// Every region published so far (pressure updates, retirement).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        match &self.placement {
            Placement::Shared(domain) => vec![Arc::clone(&domain.region)],
            Placement::PerUid { .. } => {
                self.by_uid.lock().unwrap_or_else(|p| p.into_inner()).values().map(|d| Arc::clone(&d.region)).collect()
            }
        }
    }
}
