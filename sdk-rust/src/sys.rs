// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Thin wrappers over the system calls the SDK needs: mmap, bpf(2), statfs, gettid.
//!
//! The bpf(2) numbers below are Linux UAPI (`linux/bpf.h`, `linux/magic.h`), not Morpheus ABI.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    os::unix::ffi::OsStrExt,
    path::Path,
    ptr::NonNull,
    sync::atomic::{AtomicI32, AtomicU32, AtomicU64},
};

use crate::error::{Error, Result};

/// `BPF_FS_MAGIC` from linux/magic.h: the statfs type of a bpffs mount.
const BPF_FS_MAGIC: i64 = 0xcafe4a11;
/// bpf(2) commands (linux/bpf.h `enum bpf_cmd`).
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `BPF_F_MMAPABLE` map flag.
const BPF_F_MMAPABLE: u32 = 1 << 10;
/// `BPF_MAP_TYPE_ARRAY`.
const BPF_MAP_TYPE_ARRAY: u32 = 2;

/// An atomic view of a `u64` in shared memory.
///
/// # Safety
/// `p` must be valid, 8-byte aligned and live for `'a`; every concurrent access must be atomic.
#[inline(always)]
pub(crate) unsafe fn a64<'a>(p: *const u64) -> &'a AtomicU64 {
    AtomicU64::from_ptr(p as *mut u64)
}

/// An atomic view of a `u32` in shared memory. Same contract as [`a64`].
#[inline(always)]
pub(crate) unsafe fn a32<'a>(p: *const u32) -> &'a AtomicU32 {
    AtomicU32::from_ptr(p as *mut u32)
}

/// An atomic view of an `i32` in shared memory. Same contract as [`a64`].
#[inline(always)]
pub(crate) unsafe fn ai32<'a>(p: *const i32) -> &'a AtomicI32 {
    AtomicI32::from_ptr(p as *mut i32)
}

/// The kernel thread id of the calling thread.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The process id.
pub(crate) fn getpid() -> u32 {
    std::process::id()
}

/// A `MAP_SHARED` read-write mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access to it goes through atomics or is done by
// one owner before publication.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn new(fd: &OwnedFd, len: usize, prot: libc::c_int, offset: i64, what: &Path) -> Result<Mapping> {
        // SAFETY: a fresh mapping chosen by the kernel; the fd is valid.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), offset) };
        if ptr == libc::MAP_FAILED {
            return Err(Error::last_os(format!("mmap of {} ({len} bytes)", what.display())));
        }
        Ok(Mapping { base: NonNull::new(ptr.cast()).expect("mmap never returns NULL on success"), len })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Put a private copy of the mapping over it in one step (spec/SCB.md §6.1), after `edit` has
    /// changed the copy: every later load through the same addresses reads the copy, and nothing is
    /// written to the shared memory. The copy is prepared elsewhere and moved into place with
    /// `mremap(MREMAP_FIXED)`, which replaces the old pages atomically for every thread.
    pub(crate) fn replace_with_private_copy(&self, edit: impl FnOnce(*mut u8)) -> io::Result<()> {
        // SAFETY: a fresh anonymous mapping of the same length, filled from the live one, then moved
        // over it; the range stays mapped throughout and is still owned (and unmapped) by `self`.
        unsafe {
            let copy = libc::mmap(
                std::ptr::null_mut(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if copy == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            std::ptr::copy_nonoverlapping(self.base.as_ptr(), copy.cast::<u8>(), self.len);
            edit(copy.cast());
            let moved = libc::mremap(
                copy,
                self.len,
                self.len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                self.base.as_ptr().cast::<libc::c_void>(),
            );
            if moved == libc::MAP_FAILED {
                let err = io::Error::last_os_error();
                libc::munmap(copy, self.len);
                return Err(err);
            }
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping and nobody holds a pointer into it past the owner's lifetime.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

fn cpath(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::io(format!("path {}", path.display()), io::Error::from(io::ErrorKind::InvalidInput)))
}

/// Whether `path` lies on a bpffs mount.
pub(crate) fn is_on_bpffs(path: &Path) -> bool {
    let Ok(c) = cpath(path) else { return false };
    // SAFETY: statfs writes into the zeroed struct we pass.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC
    }
}

/// The first fields of `struct bpf_map_info` (the kernel fills as much as `info_len` allows).
#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub(crate) struct BpfMapInfo {
    pub map_type: u32,
    pub id: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
}

fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> libc::c_long {
    // SAFETY: attr is a zero-initialised bpf_attr-sized buffer; the kernel reads what the command needs.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) }
}

/// `BPF_OBJ_GET`: open a pinned BPF object.
pub(crate) fn bpf_obj_get(path: &Path) -> Result<OwnedFd> {
    let c = cpath(path)?;
    let mut attr = [0u64; 16];
    attr[0] = c.as_ptr() as u64; // pathname
    let fd = bpf(BPF_OBJ_GET, &mut attr);
    if fd < 0 {
        return Err(Error::last_os(format!("BPF_OBJ_GET {}", path.display())));
    }
    // SAFETY: the kernel returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `BPF_OBJ_GET_INFO_BY_FD` for a map.
pub(crate) fn bpf_map_info(fd: &OwnedFd, path: &Path) -> Result<BpfMapInfo> {
    let mut info = BpfMapInfo::default();
    let mut attr = [0u64; 16];
    attr[0] = fd.as_raw_fd() as u64 | ((std::mem::size_of::<BpfMapInfo>() as u64) << 32); // bpf_fd, info_len
    attr[1] = &mut info as *mut BpfMapInfo as u64; // info
    if bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) < 0 {
        return Err(Error::last_os(format!("BPF_OBJ_GET_INFO_BY_FD on {}", path.display())));
    }
    Ok(info)
}

/// Open a pinned `BPF_F_MMAPABLE` one-element array map and return its fd and value size.
pub(crate) fn open_pinned_array(path: &Path) -> Result<(OwnedFd, usize)> {
    let fd = bpf_obj_get(path)?;
    let info = bpf_map_info(&fd, path)?;
    if info.map_type != BPF_MAP_TYPE_ARRAY || info.map_flags & BPF_F_MMAPABLE == 0 || info.max_entries != 1 {
        return Err(Error::io(
            format!(
                "pinned map {}: expected a BPF_F_MMAPABLE array map with 1 entry, found map type {} flags {:#x} \
                 with {} entries",
                path.display(),
                info.map_type,
                info.map_flags,
                info.max_entries
            ),
            io::Error::from(io::ErrorKind::InvalidData),
        ));
    }
    Ok((fd, info.value_size as usize))
}

/// CLOCK_MONOTONIC in nanoseconds (the scheduler's clock for last_hint_ns).
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into ts.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

std::thread_local! {
    /// The calling thread's mode clock while a test sets one (`kit::set_mode_clock`), else None.
    static MODE_CLOCK: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// The clock the runtime-mode rules of spec/SCB.md §5.4 are timed by (a slice since the last yield
/// of any reason, a slice since the last mode evaluation): CLOCK_MONOTONIC, or the calling thread's
/// mode clock while one is set. Every reading of those two clocks goes through here.
pub(crate) fn mode_now_ns() -> u64 {
    MODE_CLOCK.with(|c| c.get()).unwrap_or_else(monotonic_ns)
}

/// Whether the calling thread's mode clock is set: its times are then not CLOCK_MONOTONIC's, so no
/// window of them can be measured with the wall clock.
pub(crate) fn mode_clock_set() -> bool {
    MODE_CLOCK.with(|c| c.get()).is_some()
}

pub(crate) fn set_mode_clock(ns: Option<u64>) {
    MODE_CLOCK.with(|c| c.set(ns));
}
