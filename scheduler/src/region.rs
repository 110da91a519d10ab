// SPDX-License-Identifier: GPL-2.0-only
//! The shared region: a header followed by `scb_count` SCBs (spec/SCB.md, "Region").
//!
//! The simulation backend backs it with a shared-memory file it creates here; the kernel backend
//! mmaps its pinned BPF_F_MMAPABLE map and wraps the mapping with [`Region::from_mapping`]. Either way
//! the bytes are the same and [`Region::publish`] writes the header the same way: every field first,
//! `generation` last with release order.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::mem::{offset_of, size_of};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus_abi::{Pressure, RegionHeader, Scb};

/// Bytes of the header as this build lays it out.
pub const HEADER_SIZE: usize = size_of::<RegionHeader>();
/// Distance between two SCBs as this build lays them out.
pub const SCB_STRIDE: usize = size_of::<Scb>();

/// Bytes a region with `scb_count` slots needs (also the BPF map's value size).
pub fn region_size(scb_count: u32) -> usize {
    HEADER_SIZE + scb_count as usize * SCB_STRIDE
}

/// What the scheduler writes into the header at start-up.
#[derive(Clone, Debug)]
pub struct RegionParams {
    pub scb_count: u32,
    pub mode: abi::SchedulerMode,
    pub policy: abi::EscalationPolicy,
    pub slice_ns: u64,
    pub grace_ns: u64,
    pub hint_min_interval_ns: u64,
    pub backend: abi::Backend,
    pub optional_features: u64,
}

/// Who unmaps the memory when the region is dropped.
#[cfg_attr(not(feature = "kernel"), allow(dead_code))] // Borrowed: the kernel backend's map
enum Mapping {
    /// We mmapped it (sim): munmap on drop.
    Owned,
    /// Someone else's mapping (the kernel backend's map); it is kept alive by this value.
    Borrowed(#[allow(dead_code)] Box<dyn Send + Sync>),
}

/// A mapped region. Shared between threads (registry, backend, stats): every access to a field that
/// the other side may write goes through an atomic.
pub struct Region {
    base: NonNull<u8>,
    len: usize,
    path: PathBuf,
    scb_count: u32,
    mapping: Mapping,
}

// SAFETY: the mapping is process-wide shared memory; all mutable access goes through atomics.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

/// Why an existing path cannot be replaced by a new region.
pub fn check_replaceable(path: &Path) -> Result<Option<u64>> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot inspect region path {}", path.display())),
    };
    let kind = meta.file_type();
    if kind.is_dir() {
        bail!("region path {} is a directory, not a Morpheus region; give a file path", path.display());
    }
    if !kind.is_file() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_fifo() {
            "a FIFO"
        } else {
            "not a regular file"
        };
        bail!("region path {} is {what}, not a Morpheus region; refusing to replace it", path.display());
    }
    let mut head = [0u8; HEADER_SIZE];
    let mut file = File::open(path).with_context(|| format!("cannot read region path {}", path.display()))?;
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("cannot read region path {}", path.display())),
        }
    }
    let magic = u64::from_le_bytes(head[..8].try_into().unwrap());
    if got < 8 || magic != abi::REGION_MAGIC {
        bail!(
            "region path {} exists but is not a Morpheus region (it does not start with the MORPHEUS magic); \
             refusing to replace it. Remove it or choose another --region",
            path.display()
        );
    }
    let generation = if got >= offset_of!(RegionHeader, generation) + 8 {
        let at = offset_of!(RegionHeader, generation);
        u64::from_le_bytes(head[at..at + 8].try_into().unwrap())
    } else {
        0
    };
    Ok(Some(generation))
}

/// A generation that is nonzero and differs from `previous` (the one found in the old region, if
/// any): the wall clock in nanoseconds, so it also differs from any earlier instance's.
pub fn new_generation(previous: u64) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let mut generation = (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64);
    if generation == previous {
        generation = generation.wrapping_add(1);
    }
    if generation == 0 {
        generation = 1;
    }
    generation
}

impl Region {
    /// Creates a fresh shared-memory region file at `path` (simulation backend).
    ///
    /// An existing region there is unlinked, never truncated: processes still mapping it keep their
    /// (now orphaned) bytes. A path that exists but is not a region is refused. Returns the region with
    /// a zeroed header; call [`Region::publish`] to make it ready.
    pub fn create_file(path: &Path, scb_count: u32) -> Result<(Region, u64)> {
        if scb_count == 0 {
            bail!("a region needs at least one SCB slot");
        }
        let previous_generation = check_replaceable(path)?.unwrap_or(0);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the directory {} for the region", dir.display()))?;
        }
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot unlink the old region {}", path.display())),
        }
        let len = region_size(scb_count);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(path)
            .with_context(|| format!("cannot create region file {}", path.display()))?;
        // Workers of any user map the region read-write (they own the SCB's runtime line).
        file.set_permissions(fs::Permissions::from_mode(0o666))
            .with_context(|| format!("cannot chmod region file {}", path.display()))?;
        // A new file: growing it from 0 is not a truncation anyone could observe.
        file.set_len(len as u64).with_context(|| format!("cannot size region file {} to {len} bytes", path.display()))?;
        // SAFETY: mapping a file we just sized; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error()).with_context(|| format!("cannot mmap region file {}", path.display()));
        }
        let region = Region {
            base: NonNull::new(ptr.cast()).expect("mmap returned NULL"),
            len,
            path: path.to_owned(),
            scb_count,
            mapping: Mapping::Owned,
        };
        Ok((region, previous_generation))
    }

    /// Wraps memory someone else mapped (the kernel backend's BPF_F_MMAPABLE map value). `keep_alive`
    /// is dropped (and may unmap) after the region is.
    ///
    /// # Safety
    /// `base` must point to `len` bytes of writable shared memory, 64-byte aligned, that stay mapped
    /// while `keep_alive` lives.
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))]
    pub unsafe fn from_mapping(
        base: NonNull<u8>,
        len: usize,
        path: PathBuf,
        scb_count: u32,
        keep_alive: Box<dyn Send + Sync>,
    ) -> Result<Region> {
        if len < region_size(scb_count) {
            bail!("mapping of {len} bytes is too small for {scb_count} SCBs ({} bytes)", region_size(scb_count));
        }
        if base.as_ptr() as usize % abi::CACHE_LINE_SIZE as usize != 0 {
            bail!("region mapping is not cache-line aligned");
        }
        Ok(Region { base, len, path, scb_count, mapping: Mapping::Borrowed(keep_alive) })
    }

    /// Writes the header from `params` and publishes `generation` last (release): the region is ready.
    pub fn publish(&self, params: &RegionParams, generation: u64) {
        assert!(generation != 0, "generation 0 means not ready");
        assert_eq!(params.scb_count, self.scb_count);
        let h = self.header_ptr();
        // SAFETY: plain stores to header fields no reader trusts before generation is published.
        unsafe {
            (*h).magic = abi::REGION_MAGIC;
            (*h).abi_major = abi::ABI_MAJOR;
            (*h).abi_minor = abi::ABI_MINOR;
            (*h).header_size = HEADER_SIZE as u32;
            (*h).scb_stride = SCB_STRIDE as u32;
            (*h).scb_count = params.scb_count;
            (*h).required_features = 0;
            (*h).optional_features = params.optional_features;
            (*h).scheduler_pid = std::process::id();
            (*h).backend = params.backend.raw();
        }
        self.set_mode(params.mode);
        self.set_policy(params.policy);
        self.hdr_u64(offset_of!(RegionHeader, slice_ns)).store(params.slice_ns, Ordering::Relaxed);
        self.hdr_u64(offset_of!(RegionHeader, grace_ns)).store(params.grace_ns, Ordering::Relaxed);
        self.hdr_u64(offset_of!(RegionHeader, hint_min_interval_ns)).store(params.hint_min_interval_ns, Ordering::Relaxed);
        self.hdr_u64(offset_of!(RegionHeader, generation)).store(generation, Ordering::Release);
    }

    /// Marks the region as no longer served (clean exit): generation = 0.
    pub fn retire(&self) {
        self.hdr_u64(offset_of!(RegionHeader, generation)).store(0, Ordering::Release);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    #[allow(dead_code)] // for backends and tests
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn scb_count(&self) -> u32 {
        self.scb_count
    }

    pub fn generation(&self) -> u64 {
        self.hdr_u64(offset_of!(RegionHeader, generation)).load(Ordering::Acquire)
    }

    pub fn mode(&self) -> u32 {
        self.hdr_u32(offset_of!(RegionHeader, scheduler_mode)).load(Ordering::Relaxed)
    }

    pub fn set_mode(&self, mode: abi::SchedulerMode) {
        self.hdr_u32(offset_of!(RegionHeader, scheduler_mode)).store(mode.raw(), Ordering::Relaxed);
    }

    pub fn policy(&self) -> u32 {
        self.hdr_u32(offset_of!(RegionHeader, escalation_policy)).load(Ordering::Relaxed)
    }

    pub fn set_policy(&self, policy: abi::EscalationPolicy) {
        self.hdr_u32(offset_of!(RegionHeader, escalation_policy)).store(policy.raw(), Ordering::Relaxed);
    }

    pub fn slice_ns(&self) -> u64 {
        self.hdr_u64(offset_of!(RegionHeader, slice_ns)).load(Ordering::Relaxed)
    }

    pub fn hint_min_interval_ns(&self) -> u64 {
        self.hdr_u64(offset_of!(RegionHeader, hint_min_interval_ns)).load(Ordering::Relaxed)
    }

    /// Publishes a pressure sample under the header's seqlock (odd while writing).
    pub fn publish_pressure(&self, sample: &Pressure) {
        let base = offset_of!(RegionHeader, pressure);
        let seq = self.hdr_u32(base + offset_of!(Pressure, seq));
        let start = seq.load(Ordering::Relaxed).wrapping_add(1) | 1;
        seq.store(start, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        // Readers retry while seq is odd or changed, so relaxed stores of the payload suffice.
        let put = |field: usize, v: u32| self.hdr_u32(base + field).store(v, Ordering::Relaxed);
        put(offset_of!(Pressure, level), sample.level);
        put(offset_of!(Pressure, cpu_some_avg10), sample.cpu_some_avg10);
        put(offset_of!(Pressure, io_some_avg10), sample.io_some_avg10);
        put(offset_of!(Pressure, memory_some_avg10), sample.memory_some_avg10);
        put(offset_of!(Pressure, runqueue_depth), sample.runqueue_depth);
        self.hdr_u64(base + offset_of!(Pressure, updated_ns)).store(sample.updated_ns, Ordering::Relaxed);
        seq.store(start.wrapping_add(1), Ordering::Release);
    }

    /// Reads the pressure record consistently (seqlock reader).
    pub fn read_pressure(&self) -> Pressure {
        let base = offset_of!(RegionHeader, pressure);
        let seq = self.hdr_u32(base + offset_of!(Pressure, seq));
        loop {
            let before = seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let get = |field: usize| self.hdr_u32(base + field).load(Ordering::Relaxed);
            let sample = Pressure {
                seq: before,
                level: get(offset_of!(Pressure, level)),
                cpu_some_avg10: get(offset_of!(Pressure, cpu_some_avg10)),
                io_some_avg10: get(offset_of!(Pressure, io_some_avg10)),
                memory_some_avg10: get(offset_of!(Pressure, memory_some_avg10)),
                runqueue_depth: get(offset_of!(Pressure, runqueue_depth)),
                updated_ns: self.hdr_u64(base + offset_of!(Pressure, updated_ns)).load(Ordering::Relaxed),
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == before {
                return sample;
            }
        }
    }

    /// The SCB of `slot` (panics if out of range: slots come from the registry, which checks).
    pub fn scb(&self, slot: u32) -> ScbRef<'_> {
        assert!(slot < self.scb_count, "slot {slot} out of range (scb_count {})", self.scb_count);
        // SAFETY: in bounds (checked above and in the constructors).
        let ptr = unsafe { self.base.as_ptr().add(HEADER_SIZE + slot as usize * SCB_STRIDE) };
        ScbRef { base: ptr, _region: std::marker::PhantomData }
    }

    /// The header's address, for the shared policy code that loads the gate's inputs itself.
    pub fn header_ptr(&self) -> *mut RegionHeader {
        self.base.as_ptr().cast()
    }

    fn hdr_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: offset comes from offset_of! on the header; 8-byte aligned by the ABI.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn hdr_u32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as above, 4-byte aligned.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Mapping::Owned = self.mapping {
            // SAFETY: we mapped exactly this range in create_file.
            unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
        }
    }
}

/// Atomic access to the fields of one SCB.
#[derive(Clone, Copy)]
pub struct ScbRef<'a> {
    base: *mut u8,
    _region: std::marker::PhantomData<&'a Region>,
}

macro_rules! scb_field {
    ($name:ident, $atomic:ty) => {
        pub fn $name(&self) -> &'a $atomic {
            // SAFETY: the field's offset inside an SCB that lives as long as 'a; aligned by the ABI.
            unsafe { &*self.base.add(offset_of!(Scb, $name)).cast::<$atomic>() }
        }
    };
}

impl<'a> ScbRef<'a> {
    /// The SCB's address, for the shared policy code that loads the gate's inputs itself.
    pub fn as_ptr(&self) -> *const Scb {
        self.base.cast()
    }

    scb_field!(preempt_seq, AtomicU64);
    scb_field!(budget_remaining_ns, AtomicU64);
    scb_field!(last_hint_ns, AtomicU64);
    scb_field!(slot_generation, AtomicU32);
    scb_field!(tid, AtomicU32);
    scb_field!(pid, AtomicU32);
    scb_field!(kernel_pressure_level, AtomicU32);
    scb_field!(hints_dropped, AtomicU32);
    scb_field!(escalations, AtomicU32);
    scb_field!(escalated, AtomicU32);
    scb_field!(last_ack_seq, AtomicU64);
    scb_field!(yield_count, AtomicU64);
    scb_field!(worker_state, AtomicU32);
    scb_field!(in_critical, AtomicU32);
    scb_field!(escapable, AtomicU32);
    scb_field!(priority, AtomicI32);
    scb_field!(last_yield_reason, AtomicU32);
    scb_field!(runtime_mode, AtomicU32);
    scb_field!(runtime_kind, AtomicU32);
}

/// NUL-terminated copy of `path` for a reg_reply, or None if it does not fit REGION_PATH_MAX.
pub fn path_for_reply(path: &Path) -> Option<[u8; abi::REGION_PATH_MAX as usize]> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= abi::REGION_PATH_MAX as usize || CString::new(bytes).is_err() {
        return None;
    }
    let mut out = [0u8; abi::REGION_PATH_MAX as usize];
    out[..bytes.len()].copy_from_slice(bytes);
    Some(out)
}
