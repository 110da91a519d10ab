// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Attaching to a region (spec/SCB.md §1): discovery, the one mmap path for both backings, and header
//! validation.

use std::{
    ffi::OsString,
    fs::OpenOptions,
    io,
    mem::size_of,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    ptr::addr_of,
    sync::{Arc, Mutex, PoisonError},
};

use morpheus_abi::{
    feature, PressureLevel, RegionHeader, SchedulerMode, Scb, ABI_MAJOR, CACHE_LINE_SIZE, ENV_REGION,
    PINNED_REGION_PATH, SEQLOCK_MAX_RETRIES, SIM_REGION_PATH,
};

use crate::{
    error::{Error, Result},
    protocol,
    sys::{self, a32, a64, Mapping},
};

/// `preempt_seq` of every slot in a retired view (§6.1): a value no `cached_ack` holds (acknowledgements
/// are values the scheduler wrote, far below it; `FORCE_SLOW_PATH` is `u64::MAX`).
const RETIRED_VIEW_SEQ: u64 = u64::MAX - 1;

/// Which backing a region was mapped from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A pinned `BPF_F_MMAPABLE` array map on bpffs (kernel backend).
    PinnedMap,
    /// A shared-memory (or any) file: a harness's region for direct registration, or a 1.2 agent's.
    File,
    /// A descriptor the agent handed over with the registration reply (since 1.3): the sim backend's
    /// sealed memfd of the caller's user, or the kernel backend's region map.
    AgentFd,
}

/// A validated, mapped region. Shared by every worker of the process that attached to it; the
/// mapping lives as long as the last `Arc`, so a scheduler restart never unmaps memory a worker uses.
#[derive(Debug)]
pub struct Region {
    map: Mapping,
    path: PathBuf,
    backing: Backing,
    generation: u64,
    header_size: u32,
    scb_stride: u32,
    scb_count: u32,
    /// The last consistent pressure snapshot, kept for when the seqlock cannot be read (§2.1).
    last_pressure: Mutex<Option<PressureSnapshot>>,
}

/// A consistent copy of the header's pressure record (read under its seqlock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PressureSnapshot {
    /// Coarse level (`pressure_level`); `None` if the stored value is unknown to this SDK.
    pub level: Option<PressureLevel>,
    /// PSI cpu some avg10, hundredths of a percent.
    pub cpu_some_avg10: u32,
    /// PSI io some avg10, hundredths of a percent.
    pub io_some_avg10: u32,
    /// PSI memory some avg10, hundredths of a percent.
    pub memory_some_avg10: u32,
    /// Runnable tasks beyond one per CPU.
    pub runqueue_depth: u32,
    /// CLOCK_MONOTONIC time of the last update.
    pub updated_ns: u64,
}

impl Region {
    /// Map and validate the region at `path`: a pinned map if `path` is on bpffs, else a file.
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Region>> {
        let path = path.as_ref();
        let (fd, len, backing) = if sys::is_on_bpffs(path) {
            let (fd, value_size) = sys::open_pinned_array(path)?;
            (fd, value_size, Backing::PinnedMap)
        } else {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| Error::io(format!("opening region {}", path.display()), e))?;
            let len = file
                .metadata()
                .map_err(|e| Error::io(format!("fstat of region {}", path.display()), e))?
                .len();
            (OwnedFd::from(file), len as usize, Backing::File)
        };
        Self::map_fd(&fd, len, path, backing).map(Arc::new)
    }

    /// Map and validate the region descriptor the agent sent with a registration reply (§1.1): a
    /// regular file (the sim backend's sealed memfd, sized by fstat) or a BPF array map (sized by its
    /// value size). `what` names it in errors (the socket it came from).
    pub fn from_agent_fd(fd: OwnedFd, what: &Path) -> Result<Arc<Region>> {
        let file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(|e| Error::io(format!("fstat of the region from {}", what.display()), e))?;
        let fd = OwnedFd::from(file);
        let len = if meta.file_type().is_file() {
            meta.len() as usize
        } else {
            sys::bpf_map_info(&fd, what)?.value_size as usize
        };
        Self::map_fd(&fd, len, what, Backing::AgentFd).map(Arc::new)
    }

    /// The one mmap path of both backings, then validation (§1.3). Nothing is written.
    fn map_fd(fd: &OwnedFd, len: usize, path: &Path, backing: Backing) -> Result<Region> {
        let header_len = size_of::<RegionHeader>();
        if len < header_len {
            // mmap of an empty file fails; report the size problem instead.
            return Err(Error::RegionTruncated { path: path.into(), needed: header_len as u64, found: len as u64 });
        }
        let map = Mapping::new(fd, len, libc::PROT_READ | libc::PROT_WRITE, 0, path)?;
        let checked = validate(map.base() as *const RegionHeader, map.len(), path)?;
        Ok(Region {
            map,
            path: path.into(),
            backing,
            generation: checked.generation,
            header_size: checked.header_size,
            scb_stride: checked.scb_stride,
            scb_count: checked.scb_count,
            last_pressure: Mutex::new(None),
        })
    }

    /// The instance that published the region is gone (spec/SCB.md §6.1): replace this process's view
    /// of it with a private retired copy (`generation` 0, every slot's `preempt_seq` moved), so each
    /// worker's next checkpoint takes the slow path and finds itself lost. Nothing shared is written.
    pub(crate) fn retire_own_view(&self) -> io::Result<()> {
        let (header_size, stride, count) = (self.header_size as usize, self.scb_stride as usize, self.scb_count);
        self.map.replace_with_private_copy(|copy| {
            // SAFETY: the copy has the validated layout of the region; nobody else sees it yet.
            unsafe {
                let header = copy as *mut RegionHeader;
                std::ptr::addr_of_mut!((*header).generation).write(0);
                for slot in 0..count as usize {
                    let scb = copy.add(header_size + slot * stride) as *mut Scb;
                    std::ptr::addr_of_mut!((*scb).preempt_seq).write(RETIRED_VIEW_SEQ);
                }
            }
        })
    }

    /// Where the region was mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Which backing the region was mapped from.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// The generation seen when the region was attached.
    pub fn attached_generation(&self) -> u64 {
        self.generation
    }

    /// The generation stored now (load-acquire). Differs from [`attached_generation`] once the
    /// scheduler retired the region (0) or another instance took it over.
    ///
    /// [`attached_generation`]: Region::attached_generation
    pub fn current_generation(&self) -> u64 {
        // SAFETY: the header is mapped for our lifetime; generation is 8-byte aligned.
        unsafe { a64(self.generation_ptr()).load(std::sync::atomic::Ordering::Acquire) }
    }

    /// Whether the scheduler that published the region is still the one we attached to.
    pub fn is_current(&self) -> bool {
        self.current_generation() == self.generation
    }

    /// Number of SCB slots.
    pub fn scb_count(&self) -> u32 {
        self.scb_count
    }

    /// Distance between SCBs.
    pub fn scb_stride(&self) -> u32 {
        self.scb_stride
    }

    /// Size of the mapping in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a validated region holds at least a header.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub(crate) fn header(&self) -> *const RegionHeader {
        self.map.base() as *const RegionHeader
    }

    pub(crate) fn generation_ptr(&self) -> *const u64 {
        // SAFETY: in bounds of the mapping (validated >= header size).
        unsafe { addr_of!((*self.header()).generation) }
    }

    /// Pointer to SCB `slot`, or `SLOT_OUT_OF_RANGE`.
    pub fn scb_ptr(&self, slot: u32) -> Result<*mut Scb> {
        if slot >= self.scb_count {
            return Err(Error::SlotOutOfRange { slot, scb_count: self.scb_count });
        }
        let offset = self.header_size as usize + slot as usize * self.scb_stride as usize;
        // SAFETY: validation guaranteed header_size + scb_count * stride <= len.
        Ok(unsafe { self.map.base().add(offset) } as *mut Scb)
    }

    /// The scheduler's slice (relaxed; it may change at run time).
    pub fn slice_ns(&self) -> u64 {
        // SAFETY: mapped header field.
        unsafe { a64(addr_of!((*self.header()).slice_ns)).load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// The scheduler's grace period (relaxed).
    pub fn grace_ns(&self) -> u64 {
        // SAFETY: mapped header field.
        unsafe { a64(addr_of!((*self.header()).grace_ns)).load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// The scheduler mode (relaxed); `Err(raw)` for a value this SDK does not know.
    pub fn scheduler_mode(&self) -> Result<SchedulerMode, u32> {
        // SAFETY: mapped header field.
        let raw = unsafe { a32(addr_of!((*self.header()).scheduler_mode)).load(std::sync::atomic::Ordering::Relaxed) };
        SchedulerMode::try_from(raw)
    }

    /// Read the pressure record under its seqlock (spec/SCB.md §2.1), at most `SEQLOCK_MAX_RETRIES`
    /// attempts: then the last consistent snapshot, or `None` ("unavailable") if there was none yet. A
    /// writer that leaves `seq` odd (killed mid-update, or hostile) cannot stall the caller.
    pub fn pressure(&self) -> Option<PressureSnapshot> {
        use std::sync::atomic::Ordering::Relaxed;
        // SAFETY: the pressure record is inside the mapped header; every field is read atomically.
        let fresh = unsafe {
            let p = addr_of!((*self.header()).pressure);
            protocol::read_seqlock(a32(addr_of!((*p).seq)), SEQLOCK_MAX_RETRIES, || PressureSnapshot {
                level: PressureLevel::try_from(a32(addr_of!((*p).level)).load(Relaxed)).ok(),
                cpu_some_avg10: a32(addr_of!((*p).cpu_some_avg10)).load(Relaxed),
                io_some_avg10: a32(addr_of!((*p).io_some_avg10)).load(Relaxed),
                memory_some_avg10: a32(addr_of!((*p).memory_some_avg10)).load(Relaxed),
                runqueue_depth: a32(addr_of!((*p).runqueue_depth)).load(Relaxed),
                updated_ns: a64(addr_of!((*p).updated_ns)).load(Relaxed),
            })
        };
        let mut last = self.last_pressure.lock().unwrap_or_else(PoisonError::into_inner);
        if fresh.is_some() {
            *last = fresh;
        }
        *last
    }
}

struct Checked {
    generation: u64,
    header_size: u32,
    scb_stride: u32,
    scb_count: u32,
}

/// Header checks in the order spec/SCB.md §1.3 gives; the first failure wins. Reads only.
fn validate(header: *const RegionHeader, len: usize, path: &Path) -> Result<Checked> {
    use std::sync::atomic::Ordering;
    let header_len = size_of::<RegionHeader>();
    if len < header_len {
        return Err(Error::RegionTruncated { path: path.into(), needed: header_len as u64, found: len as u64 });
    }
    // SAFETY: len >= header size, the mapping is page aligned. `generation` is loaded first, with
    // acquire: it orders the layout fields read after it (the scheduler stores them before its release
    // of generation); it is checked last, so the error precedence of §1.3 is unchanged. The other
    // fields are read with relaxed atomic loads: a scheduler may still be writing them (then
    // generation is 0, reported last).
    let (generation, magic, major, header_size, scb_stride, scb_count, required) = unsafe {
        let generation = a64(addr_of!((*header).generation)).load(Ordering::Acquire);
        (
            generation,
            a64(addr_of!((*header).magic)).load(Ordering::Relaxed),
            std::ptr::read_volatile(addr_of!((*header).abi_major)),
            a32(addr_of!((*header).header_size)).load(Ordering::Relaxed),
            a32(addr_of!((*header).scb_stride)).load(Ordering::Relaxed),
            a32(addr_of!((*header).scb_count)).load(Ordering::Relaxed),
            a64(addr_of!((*header).required_features)).load(Ordering::Relaxed),
        )
    };
    if magic != morpheus_abi::REGION_MAGIC {
        return Err(Error::BadMagic { path: path.into(), expected: morpheus_abi::REGION_MAGIC, found: magic });
    }
    if major != ABI_MAJOR {
        return Err(Error::AbiMajorMismatch { path: path.into(), expected: ABI_MAJOR, found: major });
    }
    for (field, value, minimum) in [
        ("header_size", header_size, header_len as u32),
        ("scb_stride", scb_stride, size_of::<Scb>() as u32),
    ] {
        if value < minimum || value % CACHE_LINE_SIZE != 0 {
            return Err(Error::BadLayout {
                path: path.into(),
                field,
                minimum,
                multiple_of: CACHE_LINE_SIZE,
                found: value,
            });
        }
    }
    // 64-bit checked arithmetic: an overflowing layout is a truncated region, never a wrapped size.
    let needed = (scb_count as u64)
        .checked_mul(scb_stride as u64)
        .and_then(|scbs| scbs.checked_add(header_size as u64))
        .unwrap_or(u64::MAX);
    if (len as u64) < needed {
        return Err(Error::RegionTruncated { path: path.into(), needed, found: len as u64 });
    }
    // One namespace for both fields: every required bit must be one this ABI defines (KNOWN);
    // optional bits are never looked at.
    let unknown = required & !feature::KNOWN;
    if unknown != 0 {
        return Err(Error::UnknownRequiredFeature { path: path.into(), unknown_bits: unknown, known: feature::KNOWN });
    }
    if generation == 0 {
        return Err(Error::NotReady { path: path.into() });
    }
    Ok(Checked { generation, header_size, scb_stride, scb_count })
}

/// Where discovery found a region, or why it found none.
#[derive(Debug)]
pub enum Discovered {
    /// A region was found and validated.
    Attached(Arc<Region>),
    /// No region: `ENV_REGION` was empty, or no default path exists.
    Detached(DetachReason),
}

/// Why discovery chose detached mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DetachReason {
    /// `MORPHEUS_REGION` was set to the empty string.
    ForcedByEnvironment,
    /// Neither `PINNED_REGION_PATH` nor `SIM_REGION_PATH` exists.
    NoScheduler,
    /// The application asked for detached mode.
    Requested,
}

/// Find the region as spec/SCB.md §1.2 says: `MORPHEUS_REGION`, then the pinned map, then the sim file.
pub fn discover() -> Result<Discovered> {
    discover_with(std::env::var_os(ENV_REGION), Path::new(PINNED_REGION_PATH), Path::new(SIM_REGION_PATH))
}

/// [`discover`] with the environment value and default paths given (for tests and harnesses).
pub fn discover_with(env_region: Option<OsString>, pinned: &Path, sim: &Path) -> Result<Discovered> {
    match env_region {
        Some(value) if value.is_empty() => return Ok(Discovered::Detached(DetachReason::ForcedByEnvironment)),
        // An explicit path that cannot be opened is an error, never a silent detach.
        Some(value) => return Region::open(PathBuf::from(value)).map(Discovered::Attached),
        None => {}
    }
    for path in [pinned, sim] {
        match path.try_exists() {
            Ok(true) => return Region::open(path).map(Discovered::Attached),
            Ok(false) => {}
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(Error::io(format!("checking for region {}", path.display()), e))
            }
            Err(_) => {}
        }
    }
    Ok(Discovered::Detached(DetachReason::NoScheduler))
}
