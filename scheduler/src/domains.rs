// SPDX-License-Identifier: GPL-2.0-only
//! Trust domains and the agent's own record of who holds which slot (spec/SCB.md §10).
//!
//! Memory a runtime can write must affect only its owner, so every uid gets its own region, created
//! at that uid's first registration and handed to its processes over the socket (SCM_RIGHTS); no
//! other user can map it. The sim backend makes it a sealed, preallocated memfd; the kernel backend a
//! `BPF_F_MMAPABLE` array map that its BPF program reaches through an array of maps, by the domain's
//! index ([`RegionMaker`], src/kernel.rs).
//!
//! [`Workers`] is the only source of a worker's identity the backends use: the thread the agent pinned
//! at registration (src/identity.rs), never the tid and pid stored in an SCB (S3).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::identity::Thread;
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

    /// How many domains this maker can hold at once (the kernel backend's array of maps).
    fn capacity(&self) -> u32 {
        u32::MAX
    }

    /// Lets go of domain `index`'s region (already retired, no worker left in it): it is no longer
    /// reachable by its name `pin` or by the scheduler, and `index` may be given to a new domain.
    fn release(&self, _uid: u32, _index: u32, _pin: Option<&std::path::Path>) {}
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
    /// The thread, in the agent's pid namespace (translated at registration). A number, for logs and
    /// keys: whoever acts on the thread or reads about it goes through `thread`.
    pub tid: u32,
    pub pid: u32,
    /// The thread pinned at registration (src/identity.rs): liveness, /proc reads and every effect go
    /// through it, never through the numbers, which a later thread may carry.
    pub thread: Arc<Thread>,
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

/// How many trust domains may be live at once: in all, and per owning user (a user and its
/// subordinate uids, src/subuid.rs). Each live domain holds a region (the sim backend: one memfd
/// descriptor; the kernel backend: a BPF map, two descriptors, and a slot of the program's array of
/// maps), so without a cap one user with 65,536 subordinate uids exhausts the agent's descriptors.
#[derive(Clone, Copy, Debug)]
pub struct DomainLimits {
    pub total: u32,
    pub per_user: u32,
}

/// Why no domain could be given.
#[derive(Debug)]
pub enum DomainError {
    /// `total` domains are live (every user's).
    Full { total: u32 },
    /// The owning user already has `live` domains (its own uid and its subordinate uids).
    UserFull { owner: u32, live: u32 },
    /// Creating the region failed (e.g. EMFILE: the agent is at its descriptor limit).
    Create(anyhow::Error),
}

impl std::fmt::Display for DomainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DomainError::Full { total } => write!(f, "all {total} trust domains are in use (--max-domains)"),
            DomainError::UserFull { owner, live } => {
                write!(f, "user {owner} already has {live} trust domains (its uid and subordinate uids; --max-domains-per-user)")
            }
            DomainError::Create(e) => write!(f, "{e:#}"),
        }
    }
}

/// The live domains, by uid, with the owner each one is charged to.
struct Live {
    by_uid: HashMap<u32, (Arc<Domain>, u32)>,
    /// A uid whose domain is never freed ([`Domains::keep`]).
    kept: Option<u32>,
}

/// The regions of one agent instance, by trust domain. A domain lives while a worker of its uid
/// holds a slot: the registry frees it with its last worker ([`Domains::release`]), and its index is
/// reused by the next domain created.
pub struct Domains {
    /// What every region's header says (`scb_count` SCBs each), published with `generation`.
    params: RegionParams,
    generation: u64,
    maker: Arc<dyn RegionMaker>,
    limits: DomainLimits,
    live: Mutex<Live>,
}

impl Domains {
    /// Regions made by `maker`, or (None) the sim backend's memfds, at most `limits` live at once.
    /// (`limits.total` is lowered to what the maker can hold.)
    pub fn new(params: RegionParams, generation: u64, maker: Option<Arc<dyn RegionMaker>>, limits: DomainLimits) -> Domains {
        let maker = maker.unwrap_or_else(|| Arc::new(MemfdRegions));
        let limits = DomainLimits { total: limits.total.min(maker.capacity()), ..limits };
        Domains { params, generation, maker, limits, live: Mutex::new(Live { by_uid: HashMap::new(), kept: None }) }
    }

    /// The caps in force.
    pub fn limits(&self) -> DomainLimits {
        self.limits
    }

    /// The domain of `uid`, made now and never freed (the agent's own uid's under the kernel backend:
    /// the region pinned at PINNED_REGION_PATH, which checks map without registering).
    pub fn keep(&self, uid: u32) -> std::result::Result<Arc<Domain>, DomainError> {
        let domain = self.for_uid(uid, uid)?;
        self.lock().kept = Some(uid);
        Ok(domain)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The domain of `uid` (charged to user `owner`), created (allocated, published, handed to the
    /// backend) if it is not live, unless the caps refuse it. Its index is the lowest one free.
    pub fn for_uid(&self, uid: u32, owner: u32) -> std::result::Result<Arc<Domain>, DomainError> {
        let mut live = self.lock();
        if let Some((domain, _)) = live.by_uid.get(&uid) {
            return Ok(Arc::clone(domain));
        }
        if live.by_uid.len() as u32 >= self.limits.total {
            return Err(DomainError::Full { total: self.limits.total });
        }
        let mine = live.by_uid.values().filter(|(_, o)| *o == owner).count() as u32;
        if mine >= self.limits.per_user {
            return Err(DomainError::UserFull { owner, live: mine });
        }
        let used: Vec<u32> = live.by_uid.values().map(|(d, _)| d.index).collect();
        let index = (0..).find(|i| !used.contains(i)).expect("fewer than u32::MAX domains");
        let new = self
            .maker
            .create(uid, index, self.params.scb_count)
            .with_context(|| format!("cannot create the region of uid {uid}"))
            .map_err(DomainError::Create)?;
        new.region.publish_pressure(&crate::pressure::PressureFeed::new().sample(crate::monotonic_ns()));
        new.region.publish(&self.params, self.generation);
        // Named only now, after the header's release of generation (never a zeroed header by name).
        let pin = match self.maker.name(uid, &new) {
            Ok(pin) => pin,
            Err(e) => {
                new.region.retire();
                self.maker.release(uid, index, None);
                return Err(DomainError::Create(e.context(format!("cannot name the region of uid {uid}"))));
            }
        };
        let domain = Arc::new(Domain { index, region: Arc::new(new.region), fd: new.fd, pin });
        live.by_uid.insert(uid, (Arc::clone(&domain), owner));
        log::debug!("created the region of uid {uid} (user {owner}, domain {index}, {} slots)", self.params.scb_count);
        Ok(domain)
    }

    /// Frees `domain` (the domain of `uid`) once no worker holds a slot in it: the caller holds the
    /// slot table's lock and has checked that. The region is retired first (generation 0, so a
    /// runtime still mapping it detaches, spec/SCB.md §6), then the backend lets go of it (its map
    /// slot and pin); the memfd or map is closed when the last reference goes, and the index is free.
    pub fn release(&self, uid: u32, domain: &Arc<Domain>) {
        let mut live = self.lock();
        if live.kept == Some(uid) || !live.by_uid.get(&uid).is_some_and(|(d, _)| Arc::ptr_eq(d, domain)) {
            return;
        }
        live.by_uid.remove(&uid);
        domain.region.retire();
        self.maker.release(uid, domain.index, domain.pin.as_deref());
        log::debug!("freed the region of uid {uid} (domain {}): its last worker is gone", domain.index);
    }

    /// Domains live now.
    pub fn live(&self) -> usize {
        self.lock().by_uid.len()
    }

    /// Every region published so far (pressure updates, retirement).
    pub fn regions(&self) -> Vec<Arc<Region>> {
        self.lock().by_uid.values().map(|(d, _)| Arc::clone(&d.region)).collect()
    }
}
