// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Test helpers (feature `testing`): a region file written as a scheduler writes it, tools to play the
//! scheduler's side of the protocol on it, and a fake agent speaking the registration channel.
//!
//! Every byte of the region comes from `morpheus-abi`: the header is a `RegionHeader` value built from
//! the ABI constants, each SCB a `Scb`. Used by this crate's tests, the conformance suite and bindings.

use std::{
    fs::{File, OpenOptions},
    io::{Read, Write},
    mem::size_of,
    os::{fd::OwnedFd, unix::net::UnixListener},
    path::{Path, PathBuf},
    ptr::addr_of,
    sync::{
        atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
};

use morpheus_abi::{
    escapable_default, Backend, EscalationPolicy, RegEscapable, RegOp, RegReply, RegRequest, RegStatus, RegionHeader, RuntimeKind, SchedulerMode, Scb, WorkerState,
    ABI_MAJOR, ABI_MINOR, DEFAULT_GRACE_NS, DEFAULT_HINT_MIN_INTERVAL_NS, DEFAULT_SLICE_NS, REGION_MAGIC,
    REGION_PATH_MAX, REG_MAGIC,
};

use crate::{
    protocol,
    sys::{a32, a64, ai32, Mapping},
};

static UNIQUE: AtomicUsize = AtomicUsize::new(0);

/// A fresh path for a test region (under `/dev/shm` when it exists, else the temp directory).
pub fn unique_path(tag: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let n = UNIQUE.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("morpheus-test-{tag}-{}-{n}", std::process::id()))
}

/// How to write a region; the defaults are what a scheduler writes. The overrides make bad regions.
#[derive(Clone, Debug)]
pub struct SimRegionBuilder {
    /// Number of SCB slots.
    pub scb_count: u32,
    /// `header_size`.
    pub header_size: u32,
    /// `scb_stride`.
    pub scb_stride: u32,
    /// `magic`.
    pub magic: u64,
    /// `abi_major`.
    pub abi_major: u16,
    /// `abi_minor`.
    pub abi_minor: u16,
    /// `required_features`.
    pub required_features: u64,
    /// `optional_features`.
    pub optional_features: u64,
    /// `generation` published last; 0 leaves the region "not ready".
    pub generation: u64,
    /// File size override (for truncated regions); `None` = exactly header + count * stride.
    pub file_len: Option<u64>,
}

impl Default for SimRegionBuilder {
    fn default() -> Self {
        SimRegionBuilder {
            scb_count: 8,
            header_size: size_of::<RegionHeader>() as u32,
            scb_stride: size_of::<Scb>() as u32,
            magic: REGION_MAGIC,
            abi_major: ABI_MAJOR,
            abi_minor: ABI_MINOR,
            required_features: 0,
            optional_features: 0,
            generation: 1,
            file_len: None,
        }
    }
}

impl SimRegionBuilder {
    fn len(&self) -> u64 {
        let layout_len = self.header_size as u64 + self.scb_count as u64 * self.scb_stride as u64;
        self.file_len.unwrap_or(layout_len)
    }

    fn header(&self) -> RegionHeader {
        RegionHeader {
            magic: self.magic,
            abi_major: self.abi_major,
            abi_minor: self.abi_minor,
            header_size: self.header_size,
            scb_stride: self.scb_stride,
            scb_count: self.scb_count,
            generation: 0,
            required_features: self.required_features,
            optional_features: self.optional_features,
            scheduler_mode: SchedulerMode::Observer.raw(),
            escalation_policy: EscalationPolicy::None.raw(),
            slice_ns: DEFAULT_SLICE_NS,
            grace_ns: DEFAULT_GRACE_NS,
            hint_min_interval_ns: DEFAULT_HINT_MIN_INTERVAL_NS,
            scheduler_pid: std::process::id(),
            backend: Backend::Sim.raw(),
            ..Default::default()
        }
    }

    /// Write the header (all but generation) into a fresh mapping, then publish generation.
    fn finish(&self, path: PathBuf, map: Option<Mapping>, backing: Owned) -> SimRegion {
        let region = SimRegion {
            path,
            map,
            scb_count: self.scb_count,
            header_size: self.header_size,
            scb_stride: self.scb_stride,
            backing,
        };
        if let Some(map) = &region.map {
            let header = self.header();
            let n = size_of::<RegionHeader>().min(map.len());
            // SAFETY: nobody else maps the region yet; the header is plain integers.
            let write = || unsafe { std::ptr::copy_nonoverlapping(&header as *const RegionHeader as *const u8, map.base(), n) };
            if self.generation != 0 && n == size_of::<RegionHeader>() {
                // SAFETY: the whole header is mapped (n is its size).
                let generation = unsafe { a64(addr_of!((*(map.base() as *const RegionHeader)).generation)) };
                protocol::publish_region(generation, self.generation, write);
            } else {
                write();
            }
        }
        region
    }

    /// Write the region at `path` (replacing an existing file by unlink, as a scheduler does).
    pub fn create(&self, path: impl AsRef<Path>) -> std::io::Result<SimRegion> {
        let path = path.as_ref();
        let _ = std::fs::remove_file(path);
        let len = self.len();
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        file.set_len(len)?;
        let map = if len > 0 {
            let fd = OwnedFd::from(file.try_clone()?);
            Some(Mapping::new(&fd, len as usize, libc::PROT_READ | libc::PROT_WRITE, 0, path).map_err(std::io::Error::other)?)
        } else {
            None
        };
        Ok(self.finish(path.into(), map, Owned::File(file)))
    }

    /// Write the region into a `BPF_F_MMAPABLE` one-element array map pinned on a private bpffs
    /// mount, as the kernel backend publishes it. Needs root (bpf(2), mount(2)).
    pub fn create_pinned(&self) -> std::io::Result<SimRegion> {
        let len = self.len() as u32;
        let fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, 4, len, 1, BPF_F_MMAPABLE)?;
        let mount = BpfMount::new()?;
        let pin = mount.dir.join("region");
        bpf_obj_pin(&fd, &pin)?;
        let map = Mapping::new(&fd, len as usize, libc::PROT_READ | libc::PROT_WRITE, 0, &pin).map_err(std::io::Error::other)?;
        Ok(self.finish(pin, Some(map), Owned::Pinned { _fd: fd, mount }))
    }
}

/// A private bpffs mount under the temp directory, unmounted on drop.
#[derive(Debug)]
pub struct BpfMount {
    /// The mount point.
    pub dir: PathBuf,
}

impl BpfMount {
    /// Mount a bpffs at a fresh directory.
    pub fn new() -> std::io::Result<BpfMount> {
        let dir = std::env::temp_dir().join(format!("morpheus-bpffs-{}-{}", std::process::id(), UNIQUE.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir)?;
        let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid NUL-terminated strings.
        let rc = unsafe { libc::mount(BPF_FS.as_ptr().cast(), target.as_ptr(), BPF_FS.as_ptr().cast(), 0, std::ptr::null()) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            return Err(std::io::Error::new(err.kind(), format!("mounting a bpffs at {}: {err}", dir.display())));
        }
        Ok(BpfMount { dir })
    }
}

impl Drop for BpfMount {
    fn drop(&mut self) {
        let target = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid NUL-terminated string; MNT_DETACH so open pins never block the unmount.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Source and type of a bpffs mount (a byte string: cbindgen's parser predates C-string literals).
const BPF_FS: &[u8] = b"bpf\0";

// Linux UAPI (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_OBJ_PIN: libc::c_long = 6;
/// `BPF_MAP_TYPE_ARRAY`.
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// `BPF_MAP_TYPE_HASH`.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_F_MMAPABLE`.
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// `BPF_MAP_CREATE` (needs CAP_BPF).
pub fn bpf_map_create(map_type: u32, key_size: u32, value_size: u32, max_entries: u32, flags: u32) -> std::io::Result<OwnedFd> {
    let mut attr = [0u32; 32];
    attr[..5].copy_from_slice(&[map_type, key_size, value_size, max_entries, flags]);
    // SAFETY: a zeroed bpf_attr-sized buffer with the map-create fields set.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_mut_ptr(), std::mem::size_of_val(&attr)) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return Err(std::io::Error::new(err.kind(), format!("BPF_MAP_CREATE (type {map_type}, value size {value_size}): {err}")));
    }
    // SAFETY: a new fd we own.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// `BPF_OBJ_PIN` of `fd` at `path` (on a bpffs).
pub fn bpf_obj_pin(fd: &OwnedFd, path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut attr = [0u64; 16];
    attr[0] = c.as_ptr() as u64;
    attr[1] = fd.as_raw_fd() as u64;
    // SAFETY: pathname and bpf_fd set in a zeroed bpf_attr-sized buffer.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_PIN, attr.as_mut_ptr(), std::mem::size_of_val(&attr)) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        return Err(std::io::Error::new(err.kind(), format!("BPF_OBJ_PIN at {}: {err}", path.display())));
    }
    Ok(())
}

// Fields are held for their Drop only.
#[allow(dead_code)]
#[derive(Debug)]
enum Owned {
    File(File),
    Pinned { _fd: OwnedFd, mount: BpfMount },
}

/// A region file the test owns, removed on drop. Plays the scheduler's side of the protocol.
#[derive(Debug)]
pub struct SimRegion {
    path: PathBuf,
    map: Option<Mapping>,
    scb_count: u32,
    header_size: u32,
    scb_stride: u32,
    // Held for its Drop: the file, or the map fd and the private bpffs mount.
    #[allow(dead_code)]
    backing: Owned,
}

/// A snapshot of one SCB (every field loaded atomically, one by one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct ScbSnapshot {
    pub preempt_seq: u64,
    pub budget_remaining_ns: u64,
    pub slot_generation: u32,
    pub tid: u32,
    pub pid: u32,
    pub hints_dropped: u32,
    pub last_ack_seq: u64,
    pub yield_count: u64,
    pub worker_state: u32,
    pub in_critical: u32,
    pub escapable: u32,
    pub priority: i32,
    pub last_yield_reason: u32,
    pub runtime_mode: u32,
    pub runtime_kind: u32,
}

impl SimRegion {
    /// Options for a region.
    pub fn builder() -> SimRegionBuilder {
        SimRegionBuilder::default()
    }

    /// A valid region with `scb_count` slots at a fresh path.
    pub fn temp(scb_count: u32) -> SimRegion {
        SimRegionBuilder { scb_count, ..Default::default() }
            .create(unique_path("region"))
            .expect("creating a test region")
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn header(&self) -> *const RegionHeader {
        self.map.as_ref().expect("region file is empty").base() as *const RegionHeader
    }

    /// SCB `slot`. Panics if out of range.
    pub fn scb(&self, slot: u32) -> *mut Scb {
        assert!(slot < self.scb_count, "slot {slot} >= scb_count {}", self.scb_count);
        let offset = self.header_size as usize + slot as usize * self.scb_stride as usize;
        // SAFETY: inside the file we sized.
        unsafe { self.map.as_ref().unwrap().base().add(offset) as *mut Scb }
    }

    fn u64_at(&self, slot: u32, f: impl Fn(*const Scb) -> *const u64) -> &AtomicU64 {
        // SAFETY: a field of an SCB inside our mapping.
        unsafe { a64(f(self.scb(slot))) }
    }

    fn u32_at(&self, slot: u32, f: impl Fn(*const Scb) -> *const u32) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { a32(f(self.scb(slot))) }
    }

    /// Store `generation` (release), as a scheduler does last at start-up; 0 retires the region.
    pub fn set_generation(&self, generation: u64) {
        // SAFETY: header field in our mapping.
        unsafe { a64(addr_of!((*self.header()).generation)).store(generation, Ordering::Release) }
    }

    /// The header's generation.
    pub fn generation(&self) -> u64 {
        // SAFETY: as above.
        unsafe { a64(addr_of!((*self.header()).generation)).load(Ordering::Acquire) }
    }

    /// Store `slice_ns` (relaxed).
    pub fn set_slice_ns(&self, ns: u64) {
        // SAFETY: as above.
        unsafe { a64(addr_of!((*self.header()).slice_ns)).store(ns, Ordering::Relaxed) }
    }

    /// Publish a pressure level under the seqlock with the agent's writer, `protocol::write_seqlock`.
    pub fn set_pressure_level(&self, level: morpheus_abi::PressureLevel) {
        // SAFETY: header fields in our mapping.
        unsafe {
            let p = addr_of!((*self.header()).pressure);
            let seq = a32(addr_of!((*p).seq));
            protocol::write_seqlock(seq, seq.load(Ordering::Relaxed), || a32(addr_of!((*p).level)).store(level.raw(), Ordering::Relaxed));
        }
    }

    /// Store the pressure record's `seq` as is (an odd value parks readers, as an agent killed
    /// mid-update or a hostile mapper would).
    pub fn set_pressure_seq(&self, seq: u32) {
        // SAFETY: header field in our mapping.
        unsafe { a32(addr_of!((*self.header()).pressure.seq)).store(seq, Ordering::Release) }
    }

    /// Store `slot_generation` (relaxed), e.g. to test its wrap.
    pub fn set_slot_generation(&self, slot: u32, value: u32) {
        self.u32_at(slot, |s| unsafe { addr_of!((*s).slot_generation) }).store(value, Ordering::Relaxed)
    }

    /// Store `last_ack_seq` (release), as another acknowledging path of the runtime would.
    pub fn set_last_ack_seq(&self, slot: u32, value: u64) {
        self.u64_at(slot, |s| unsafe { addr_of!((*s).last_ack_seq) }).store(value, Ordering::Release)
    }

    /// The scheduler asks slot `slot` to yield, the generated publication (spec/abi.toml `[[publication]]`
    /// request): `last_hint_ns := now`, `budget_remaining_ns := 0`, then `preempt_seq += 1` (release).
    /// Returns the new `preempt_seq`.
    pub fn request_yield(&self, slot: u32) -> u64 {
        let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the timespec it is given.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let now_ns = now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64;
        // SAFETY: SCB `slot` of our mapping (scb() checks the index), which every party accesses atomically.
        unsafe { morpheus_abi::test_region::publish_request(self.scb(slot) as *mut u8, now_ns) }
    }

    /// Store `budget_remaining_ns`.
    pub fn set_budget(&self, slot: u32, ns: u64) {
        self.u64_at(slot, |s| unsafe { addr_of!((*s).budget_remaining_ns) }).store(ns, Ordering::Relaxed)
    }

    /// `hints_dropped += n`.
    pub fn drop_hints(&self, slot: u32, n: u32) {
        self.u32_at(slot, |s| unsafe { addr_of!((*s).hints_dropped) }).fetch_add(n, Ordering::Relaxed);
    }

    /// Store `worker_state` (release): lets a test make a slot busy.
    pub fn set_worker_state(&self, slot: u32, state: WorkerState) {
        self.set_worker_state_raw(slot, state.raw())
    }

    /// Store any `worker_state` value, also one no ABI version defines.
    pub fn set_worker_state_raw(&self, slot: u32, raw: u32) {
        self.u32_at(slot, |s| unsafe { addr_of!((*s).worker_state) }).store(raw, Ordering::Release)
    }

    /// The registrar's INIT -> CLAIMED -> REGISTERED hand-off (§4): the claim CAS, tid, pid,
    /// slot_generation + 1 (skipping 0), last_ack_seq := preempt_seq, escapable and priority, then
    /// REGISTERED (release). Returns the new slot_generation, or None if the slot was not INIT.
    pub fn assign(&self, slot: u32, tid: u32, pid: u32, escapable: bool, priority: i32) -> Option<u32> {
        let state = self.u32_at(slot, |s| unsafe { addr_of!((*s).worker_state) });
        protocol::claim(state, WorkerState::Init).ok()?;
        let fields = protocol::SlotFields {
            worker_state: state,
            tid: self.u32_at(slot, |s| unsafe { addr_of!((*s).tid) }),
            pid: self.u32_at(slot, |s| unsafe { addr_of!((*s).pid) }),
            slot_generation: self.u32_at(slot, |s| unsafe { addr_of!((*s).slot_generation) }),
            escapable: self.u32_at(slot, |s| unsafe { addr_of!((*s).escapable) }),
            // SAFETY: a field of an SCB inside our mapping.
            priority: unsafe { ai32(addr_of!((*self.scb(slot)).priority)) },
            preempt_seq: self.u64_at(slot, |s| unsafe { addr_of!((*s).preempt_seq) }),
            last_ack_seq: self.u64_at(slot, |s| unsafe { addr_of!((*s).last_ack_seq) }),
            budget_remaining_ns: self.u64_at(slot, |s| unsafe { addr_of!((*s).budget_remaining_ns) }),
            escalated: self.u32_at(slot, |s| unsafe { addr_of!((*s).escalated) }),
        };
        let who = protocol::Assignee { tid, pid, escapable, priority, scheduler_slice_ns: None };
        let generation = protocol::assign_claimed(&fields, &who);
        Some(generation)
    }

    /// The registrar's reclaim (§4): CAS from the state found to CLAIMED, the generated reclaim clear
    /// over the whole stride, then INIT (release). False if the slot changed under the CAS.
    pub fn reclaim(&self, slot: u32) -> bool {
        let state = self.u32_at(slot, |s| unsafe { addr_of!((*s).worker_state) });
        let Ok(observed) = WorkerState::try_from(state.load(Ordering::Acquire)) else { return false };
        // SAFETY: slot `slot` of our mapping, scb_stride bytes, accessed atomically by everyone.
        let clear = || unsafe { morpheus_abi::scb_clear_for_reuse(self.scb(slot) as *mut u8, self.scb_stride as usize) };
        protocol::reclaim(state, observed.raw(), clear).is_ok()
    }

    /// Every field of SCB `slot`.
    pub fn snapshot(&self, slot: u32) -> ScbSnapshot {
        macro_rules! u64f { ($f:ident) => { self.u64_at(slot, |s| unsafe { addr_of!((*s).$f) }).load(Ordering::Acquire) } }
        macro_rules! u32f { ($f:ident) => { self.u32_at(slot, |s| unsafe { addr_of!((*s).$f) as *const u32 }).load(Ordering::Acquire) } }
        ScbSnapshot {
            preempt_seq: u64f!(preempt_seq),
            budget_remaining_ns: u64f!(budget_remaining_ns),
            slot_generation: u32f!(slot_generation),
            tid: u32f!(tid),
            pid: u32f!(pid),
            hints_dropped: u32f!(hints_dropped),
            last_ack_seq: u64f!(last_ack_seq),
            yield_count: u64f!(yield_count),
            worker_state: u32f!(worker_state),
            in_critical: u32f!(in_critical),
            escapable: u32f!(escapable),
            priority: u32f!(priority) as i32,
            last_yield_reason: u32f!(last_yield_reason),
            runtime_mode: u32f!(runtime_mode),
            runtime_kind: u32f!(runtime_kind),
        }
    }
}

impl Drop for SimRegion {
    fn drop(&mut self) {
        // Unpinning / unlinking leaves mappings others hold valid, as a scheduler's restart does.
        // For a pinned map, the private bpffs is unmounted when `backing` drops, after the mapping.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How the fake agent answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentBehaviour {
    /// Assign free slots, as the real agent does.
    Normal,
    /// Refuse every REGISTER with this status.
    Refuse(RegStatus),
    /// Reply OK with this generation instead of the region's.
    WrongGeneration(u64),
    /// Reply with a wrong magic.
    BadMagic,
}

/// A registration agent on a Unix socket, driving a [`SimRegion`]: the client side's test partner.
/// It agrees to every well-formed request (or misbehaves as told): which requests an agent refuses,
/// and in what order, is written once, in the real agent (scheduler/src/registry.rs), and tested
/// there; a second copy here could only drift from it. Refusals are played with
/// [`AgentBehaviour::Refuse`].
pub struct FakeAgent {
    path: PathBuf,
    requests: Arc<Mutex<Vec<RegRequest>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeAgent {
    /// Start an agent for `region` at a fresh socket path.
    pub fn start(region: Arc<SimRegion>, behaviour: AgentBehaviour) -> FakeAgent {
        FakeAgent::start_at(unique_path("agent.sock"), region, behaviour)
    }

    /// Start an agent at `path` (a new socket there, as a restarted agent binds; a leftover file is
    /// replaced).
    pub fn start_at(path: PathBuf, region: Arc<SimRegion>, behaviour: AgentBehaviour) -> FakeAgent {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("binding the fake agent socket");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (log, stopping) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::Acquire) {
                    break;
                }
                let Ok(mut stream) = stream else { break };
                let region = region.clone();
                let log = log.clone();
                // One thread per connection; it ends when the client (a worker) closes it.
                std::thread::spawn(move || {
                    let mut buf = [0u8; size_of::<RegRequest>()];
                    while stream.read_exact(&mut buf).is_ok() {
                        // SAFETY: plain integers.
                        let request: RegRequest = unsafe { std::ptr::read_unaligned(buf.as_ptr() as *const _) };
                        log.lock().unwrap().push(request);
                        let reply = answer(&region, &request, behaviour);
                        // SAFETY: plain integers.
                        let bytes = unsafe {
                            std::slice::from_raw_parts(&reply as *const RegReply as *const u8, size_of::<RegReply>())
                        };
                        if stream.write_all(bytes).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeAgent { path, requests, stop, thread: Some(thread) }
    }

    /// The socket path (pass it as `Config::agent_socket` or `MORPHEUS_SOCKET`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<RegRequest> {
        self.requests.lock().unwrap().clone()
    }
}

fn answer(region: &SimRegion, request: &RegRequest, behaviour: AgentBehaviour) -> RegReply {
    let mut reply = RegReply { magic: REG_MAGIC, abi_major: ABI_MAJOR, abi_minor: ABI_MINOR, ..Default::default() };
    let status = |s: RegStatus| s.raw();
    match (behaviour, RegOp::try_from(request.op)) {
        (AgentBehaviour::BadMagic, _) => reply.magic = !REG_MAGIC,
        (AgentBehaviour::Refuse(s), Ok(RegOp::Register)) => reply.status = status(s),
        (_, Ok(RegOp::Register)) => {
            let pid = std::process::id();
            // The registrar's writes (§4): what the request asked for, the kind's default when absent.
            let escapable = match RegEscapable::try_from(request.escapable) {
                Ok(RegEscapable::Yes) => true,
                Ok(RegEscapable::No) => false,
                _ => escapable_default(RuntimeKind::try_from(request.runtime_kind).unwrap_or(RuntimeKind::Unknown)),
            };
            let assigned = (0..region.scb_count)
                .find_map(|slot| region.assign(slot, request.tid, pid, escapable, request.priority).map(|g| (slot, g)));
            match assigned {
                None => reply.status = status(RegStatus::NoFreeSlot),
                Some((slot, slot_generation)) => {
                    reply.status = status(RegStatus::Ok);
                    reply.slot = slot;
                    reply.slot_generation = slot_generation;
                    reply.generation = match behaviour {
                        AgentBehaviour::WrongGeneration(g) => g,
                        _ => region.generation(),
                    };
                    let path = region.path().as_os_str().as_encoded_bytes();
                    let n = path.len().min(REGION_PATH_MAX as usize - 1);
                    reply.region_path[..n].copy_from_slice(&path[..n]);
                }
            }
        }
        (_, Ok(RegOp::Unregister)) => {
            // Bounds only, for memory safety; ownership is the real agent's rule.
            if request.slot < region.scb_count {
                region.reclaim(request.slot);
            }
            reply.status = status(RegStatus::Ok);
        }
        (_, Err(_)) => reply.status = status(RegStatus::Malformed),
    }
    reply
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        // Stop accepting: set the flag, then wake the accept loop with a connection of our own.
        self.stop.store(true, Ordering::Release);
        let _ = std::os::unix::net::UnixStream::connect(&self.path);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
