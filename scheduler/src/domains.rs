// SPDX-License-Identifier: GPL-2.0-only
//! Trust domains and the agent's own record of who holds which slot (spec/SCB.md §10).
//!
//! Memory a runtime can write must affect only its owner, so every uid gets its own region, created
//! at that uid's first registration and handed to its processes over the socket (SCM_RIGHTS); no
//! other user can map it. The sim backend makes it a sealed, preallocated memfd; the kernel backend a
//! `BPF_F_MMAPABLE` array map that its BPF program reaches through an array of maps, by the domain's
//! index ([`RegionMaker`], src/kernel.rs).
//!
//! [`Workers`] is the only source of a worker's identity the backends use: the tid and pid the agent
//! checked at registration, never the ones stored in an SCB (S3).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::region::{Region, RegionParams};

/// One trust domain's region and the descriptor handed to the clients that register in it.
pub struct Domain {
    /// The domain's number, in creation order (the kernel backend's index in its array of maps).
    pub index: u32,
    pub region: Arc<Region>,
    pub fd: OwnedFd,
    /// Where the region is pinned (kernel backend: root-only, for 1.2 clients and for the next
    /// instance's retirement after a crash); None for a memfd, which has no path.
    pub pin: Option<PathBuf>,
}

/// A region freshly created for a domain: zeroed, not yet published, reachable by no name.
pub struct NewRegion {
    pub region: Region,
    pub fd: OwnedFd,
}

/// Creates the memory of a new trust domain (a backend whose scheduler must reach every domain's
/// region itself: the kernel backend's BPF maps).
pub trait RegionMaker: Send + Sync {
    /// The region of domain `index`, for `uid`, with `scb_count` SCBs. It MUST NOT be reachable by
    /// any name yet: its header is still zero, which a reader would refuse as BAD_MAGIC.
    fn create(&self, uid: u32, index: u32, scb_count: u32) -> Result<NewRegion>;

    /// Gives a region a name readers can find (the kernel backend's pin), returning it. Called only
    /// once its header is published, generation last, so whoever finds the name sees the whole
    /// header (spec/SCB.md §1.3). None: the region has no name (a memfd is reached only through
    /// the socket).
    fn name(&self, _uid: u32, _new: &NewRegion) -> Result<Option<PathBuf>> {
        Ok(None)
    }
}

/// The sim backend's regions: a sealed, preallocated memfd per uid.
struct MemfdRegions;

impl RegionMaker for MemfdRegions {
    fn create(&self, uid: u32, _index: u32, scb_count: u32) -> Result<NewRegion> {
        let (region, fd) = Region::create_memfd(&format!("morpheus-region-uid{uid}"), scb_count)?;
        Ok(NewRegion { region, fd })
    }
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

/// The trusted slot table, indexed by the agent's global slot number (`0..max_workers`), which is
/// also the slot number in hint and escalation records (they never leave the agent).
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
    /// What every region's header says (`scb_count` SCBs each), published with `generation`.
    params: RegionParams,
    generation: u64,
    maker: Arc<dyn RegionMaker>,
    by_uid: Mutex<HashMap<u32, Arc<Domain>>>,
}

impl Domains {
    /// Regions made by `maker`, or (None) the sim backend's memfds.
    pub fn new(params: RegionParams, generation: u64, maker: Option<Arc<dyn RegionMaker>>) -> Domains {
        Domains { params, generation, maker: maker.unwrap_or_else(|| Arc::new(MemfdRegions)), by_uid: Mutex::new(HashMap::new()) }
    }

    /// The domain of `uid`, created (allocated, published, handed to the backend) on first use.
    pub fn for_uid(&self, uid: u32) -> Result<Arc<Domain>> {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(domain) = by_uid.get(&uid) {
            return Ok(Arc::clone(domain));
        }
        let index = by_uid.len() as u32;
        let new = self
            .maker
            .create(uid, index, self.params.scb_count)
            .with_context(|| format!("cannot create the region of uid {uid}"))?;
        new.region.publish_pressure(&crate::pressure::PressureFeed::new().sample(crate::monotonic_ns()));
        new.region.publish(&self.params, self.generation);
        // Named only now, after the header's release of generation (never a zeroed header by name).
        let pin = self.maker.name(uid, &new).with_context(|| format!("cannot name the region of uid {uid}"))?;
        let domain = Arc::new(Domain { index, region: Arc::new(new.region), fd: new.fd, pin });
        by_uid.insert(uid, Arc::clone(&domain));
        log::debug!("created the region of uid {uid} (domain {index}, {} slots)", self.params.scb_count);
        Ok(domain)
    }

    /// Every region published so far (pressure updates, retirement).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.by_uid.lock().unwrap_or_else(|p| p.into_inner()).values().map(|d| Arc::clone(&d.region)).collect()
    }
}
