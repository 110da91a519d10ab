// SPDX-License-Identifier: GPL-2.0-only
//! The runtime side of the protocol, written against morpheus-abi (spec/SCB.md §4, §4.1, §5.1):
//! register through the agent's socket, map the region named in the reply, checkpoint, unregister.
//!
//! Interim: sdk-rust (crate `morpheus`) is being written alongside and did not build when this
//! benchmark was; once it does, this module is to be replaced by `morpheus::Worker`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use anyhow::{bail, Context, Result};
use morpheus_abi as abi;
use morpheus_abi::{RegReply, RegRequest, RegionHeader, Scb};

pub struct Worker {
    stream: UnixStream,
    base: *mut u8,
    len: usize,
    scb: *mut u8,
    slot: u32,
    generation: u64,
    cached_ack: u64,
}

fn u64_at(base: *mut u8, off: usize) -> &'static AtomicU64 {
    // SAFETY: offsets from offset_of! inside a live mapping; aligned by the ABI.
    unsafe { &*base.add(off).cast::<AtomicU64>() }
}

fn u32_at(base: *mut u8, off: usize) -> &'static AtomicU32 {
    // SAFETY: as above.
    unsafe { &*base.add(off).cast::<AtomicU32>() }
}

fn as_bytes<T>(v: &T) -> &[u8] {
    // SAFETY: ABI records are plain old data without implicit padding.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

impl Worker {
    /// Registers the calling thread with the agent at `socket` and marks it RUNNING, escapable.
    pub fn register(socket: &Path) -> Result<Worker> {
        let mut stream = UnixStream::connect(socket).with_context(|| format!("connect {}", socket.display()))?;
        let request = RegRequest {
            magic: abi::REG_MAGIC,
            abi_major: abi::ABI_MAJOR,
            abi_minor: abi::ABI_MINOR,
            op: abi::RegOp::Register.raw(),
            tid: gettid(),
            runtime_kind: abi::RuntimeKind::Rust.raw(),
            ..Default::default()
        };
        stream.write_all(as_bytes(&request))?;
        let mut buf = [0u8; size_of::<RegReply>()];
        stream.read_exact(&mut buf)?;
        // SAFETY: plain old data.
        let reply: RegReply = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
        if reply.status != abi::RegStatus::Ok.raw() {
            let status = abi::RegStatus::try_from(reply.status).map(|s| s.name()).unwrap_or("?");
            bail!("registration refused: {status}");
        }
        let end = reply.region_path.iter().position(|&b| b == 0).unwrap_or(reply.region_path.len());
        let path = std::str::from_utf8(&reply.region_path[..end]).context("region path")?;
        let file = OpenOptions::new().read(true).write(true).open(path).with_context(|| format!("open {path}"))?;
        let len = file.metadata()?.len() as usize;
        // SAFETY: mapping the region file; checked below.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0)
        };
        if base == libc::MAP_FAILED {
            bail!("mmap {path}: {}", std::io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        // SAFETY: the header is at offset 0 of a region the agent published.
        let header = unsafe { &*base.cast::<RegionHeader>() };
        let scb = unsafe { base.add(header.header_size as usize + reply.slot as usize * header.scb_stride as usize) };
        let generation = u64_at(base, offset_of!(RegionHeader, generation)).load(Ordering::Acquire);
        if generation != reply.generation {
            bail!("region generation changed during registration");
        }
        // REGISTERED -> RUNNING (spec §4).
        u32_at(scb, offset_of!(Scb, runtime_kind)).store(abi::RuntimeKind::Rust.raw(), Ordering::Relaxed);
        u32_at(scb, offset_of!(Scb, escapable)).store(1, Ordering::Release);
        u32_at(scb, offset_of!(Scb, priority)).store(0, Ordering::Relaxed);
        u32_at(scb, offset_of!(Scb, runtime_mode)).store(abi::RuntimeMode::Deterministic.raw(), Ordering::Relaxed);
        u32_at(scb, offset_of!(Scb, in_critical)).store(0, Ordering::Release);
        let cached_ack = u64_at(scb, offset_of!(Scb, last_ack_seq)).load(Ordering::Acquire);
        u32_at(scb, offset_of!(Scb, worker_state)).store(abi::WorkerState::Running.raw(), Ordering::Release);
        Ok(Worker { stream, base, len, scb, slot: reply.slot, generation, cached_ack })
    }

    /// Synchronous checkpoint: true means "yield now" (the acknowledgement is already stored).
    #[inline]
    pub fn checkpoint_sync(&mut self) -> bool {
        let seq = u64_at(self.scb, offset_of!(Scb, preempt_seq)).load(Ordering::Acquire);
        if seq == self.cached_ack {
            return false;
        }
        if u64_at(self.base, offset_of!(RegionHeader, generation)).load(Ordering::Acquire) != self.generation {
            self.cached_ack = seq; // detached: never yield, write nothing
            return false;
        }
        u32_at(self.scb, offset_of!(Scb, last_yield_reason)).store(abi::YieldReason::PreemptRequest.raw(), Ordering::Relaxed);
        u64_at(self.scb, offset_of!(Scb, yield_count)).fetch_add(1, Ordering::Relaxed);
        let ack = u64_at(self.scb, offset_of!(Scb, last_ack_seq));
        let mut current = ack.load(Ordering::Acquire);
        while current < seq {
            match ack.compare_exchange(current, seq, Ordering::Release, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        self.cached_ack = seq;
        true
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if u64_at(self.base, offset_of!(RegionHeader, generation)).load(Ordering::Acquire) == self.generation {
            let state = u32_at(self.scb, offset_of!(Scb, worker_state));
            state.store(abi::WorkerState::Quiescing.raw(), Ordering::Release);
            state.store(abi::WorkerState::Dead.raw(), Ordering::Release);
            let request = RegRequest {
                magic: abi::REG_MAGIC,
                abi_major: abi::ABI_MAJOR,
                abi_minor: abi::ABI_MINOR,
                op: abi::RegOp::Unregister.raw(),
                slot: self.slot,
                ..Default::default()
            };
            let mut buf = [0u8; size_of::<RegReply>()];
            let _ = self.stream.write_all(as_bytes(&request)).and_then(|_| self.stream.read_exact(&mut buf));
        }
        // SAFETY: our own mapping.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
