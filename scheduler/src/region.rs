// SPDX-License-Identifier: GPL-2.0-only
//! The shared region: a header followed by `scb_count` SCBs (spec/SCB.md, "Region").
//!
//! The simulation backend backs it with a shared-memory file it creates here; the kernel backend
//! mmaps its pinned BPF_F_MMAPABLE map and wraps the mapping with [`Region::from_mapping`]. Either way
//! the bytes are the same and [`Region::publish`] writes the header the same way: every field first,
//! `generation` last with release order.

use std::ffi::CString;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::unix::ffi::OsStrExt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus::protocol;
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

impl RegionParams {
    /// `scb_count` slots on `backend`, enforced with the thread-kick policy, the ABI's default slice,
    /// grace and hint interval, and no optional feature: the fuzz harness's and the tests' region.
    pub fn enforced_with_defaults(scb_count: u32, backend: abi::Backend) -> RegionParams {
        RegionParams {
            scb_count,
            mode: abi::SchedulerMode::Enforced,
            policy: abi::EscalationPolicy::ThreadKick,
            slice_ns: abi::DEFAULT_SLICE_NS,
            grace_ns: abi::DEFAULT_GRACE_NS,
            hint_min_interval_ns: abi::DEFAULT_HINT_MIN_INTERVAL_NS,
            backend,
            optional_features: 0,
        }
    }
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
    /// What we published: the agent never reads its own values back from memory runtimes can write.
    published_generation: AtomicU64,
    pressure_seq: AtomicU32,
}

// SAFETY: the mapping is process-wide shared memory; all mutable access goes through atomics.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

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
    /// Creates a region in a new memfd (simulation backend): sized and preallocated with fallocate,
    /// so no page can be missing later (no SIGBUS on a full tmpfs or memory limit: it fails here, with
    /// an error), then sealed against shrinking, growing and further sealing, so no process that is
    /// handed the descriptor can truncate it under anyone's feet. Returns the mapping (header zeroed;
    /// call [`Region::publish`]) and the descriptor to hand to clients.
    pub fn create_memfd(name: &str, scb_count: u32) -> Result<(Region, OwnedFd)> {
        if scb_count == 0 {
            bail!("a region needs at least one SCB slot");
        }
        let len = region_size(scb_count);
        let cname = CString::new(name).context("memfd name")?;
        // SAFETY: a valid NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error()).context("memfd_create for the region");
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fallocate on our memfd.
        if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error()).with_context(|| {
                format!("cannot preallocate the {len}-byte region (shared memory is full or limited by the memory cgroup)")
            });
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our memfd.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error()).context("cannot seal the region memfd");
        }
        // SAFETY: mapping a sealed memfd of exactly `len` bytes; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error()).context("cannot mmap the region memfd");
        }
        let region = Region {
            base: NonNull::new(ptr.cast()).expect("mmap returned NULL"),
            len,
            path: PathBuf::from(format!("memfd:{name}")),
            scb_count,
            mapping: Mapping::Owned,
            published_generation: AtomicU64::new(0),
            pressure_seq: AtomicU32::new(0),
        };
        Ok((region, fd))
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
        Ok(Region {
            base,
            len,
            path,
            scb_count,
            mapping: Mapping::Borrowed(keep_alive),
            published_generation: AtomicU64::new(0),
            pressure_seq: AtomicU32::new(0),
        })
    }

    /// Writes the header from `params` and publishes `generation` last (release): the region is ready.
    /// The order is `morpheus::protocol::publish_region`'s, the step loom checks.
    pub fn publish(&self, params: &RegionParams, generation: u64) {
        assert!(generation != 0, "generation 0 means not ready");
        assert_eq!(params.scb_count, self.scb_count);
        let h = self.header_ptr();
        self.published_generation.store(generation, Ordering::Relaxed);
        protocol::publish_region(self.hdr_u64(offset_of!(RegionHeader, generation)), generation, || {
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
        });
    }

    /// Marks the region as no longer served (clean exit): generation = 0.
    pub fn retire(&self) {
        self.published_generation.store(0, Ordering::Relaxed);
        self.hdr_u64(offset_of!(RegionHeader, generation)).store(0, Ordering::Release);
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    #[allow(dead_code)] // for backends and tests
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region maps at least its header.
    #[allow(dead_code)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn scb_count(&self) -> u32 {
        self.scb_count
    }

    /// The generation this agent published (its own copy, not the header's).
    pub fn generation(&self) -> u64 {
        self.published_generation.load(Ordering::Relaxed)
    }


    pub fn set_mode(&self, mode: abi::SchedulerMode) {
        self.hdr_u32(offset_of!(RegionHeader, scheduler_mode)).store(mode.raw(), Ordering::Relaxed);
    }


    pub fn set_policy(&self, policy: abi::EscalationPolicy) {
        self.hdr_u32(offset_of!(RegionHeader, escalation_policy)).store(policy.raw(), Ordering::Relaxed);
    }



    /// Publishes a pressure sample under the header's seqlock (odd while writing), through
    /// `morpheus::protocol::write_seqlock`, the writer loom checks.
    pub fn publish_pressure(&self, sample: &Pressure) {
        let base = offset_of!(RegionHeader, pressure);
        let seq = self.hdr_u32(base + offset_of!(Pressure, seq));
        // Our own counter: a runtime that scribbles on the header's seq cannot steer the writer.
        let previous = self.pressure_seq.fetch_add(2, Ordering::Relaxed);
        protocol::write_seqlock(seq, previous, || {
            // Readers retry while seq is odd or changed, so relaxed stores of the payload suffice.
            let put = |field: usize, v: u32| self.hdr_u32(base + field).store(v, Ordering::Relaxed);
            put(offset_of!(Pressure, level), sample.level);
            put(offset_of!(Pressure, cpu_some_avg10), sample.cpu_some_avg10);
            put(offset_of!(Pressure, io_some_avg10), sample.io_some_avg10);
            put(offset_of!(Pressure, memory_some_avg10), sample.memory_some_avg10);
            put(offset_of!(Pressure, runqueue_depth), sample.runqueue_depth);
            self.hdr_u64(base + offset_of!(Pressure, updated_ns)).store(sample.updated_ns, Ordering::Relaxed);
        });
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

    /// The registrar's reclaim clear (spec/SCB.md §4), generated from spec/abi.toml: every byte of the
    /// slot's stride zeroed except the fields marked `reclaim = "keep"`. Call only while the slot is
    /// CLAIMED; publish INIT (release) afterwards.
    pub fn clear_for_reuse(&self) {
        // SAFETY: the slot's SCB_STRIDE bytes live as long as 'a; every party accesses them atomically.
        unsafe { abi::scb_clear_for_reuse(self.base, SCB_STRIDE) }
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
