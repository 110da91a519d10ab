// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Consumer of the kernel backend's hint ring buffer (a `BPF_MAP_TYPE_RINGBUF` of `morpheus_hint`
//! records pinned under `PIN_DIR`).
//!
//! The ring is read the way libbpf's `ring_buffer__consume` does: the consumer page (read-write) holds
//! `consumer_pos`; the producer page (read-only) holds `producer_pos`, followed by the data area. Each
//! record starts with an 8-byte header (`u32 len` with the BUSY and DISCARD bits, `u32 pg_off`) and is
//! padded to 8 bytes. [`consume`] works on any memory laid out that way, so the parsing is tested
//! without a kernel; [`HintRing::open_pinned`] maps the real map (tests/pinned_map.rs fills one from a
//! BPF program).

use std::{
    mem::size_of,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, AtomicU64, Ordering},
};

use morpheus_abi::{Hint, HintReason};

use crate::{
    error::{Error, Result},
    sys::{self, Mapping},
};

/// Linux `BPF_RINGBUF_BUSY_BIT`: the producer has reserved but not committed the record.
pub const RINGBUF_BUSY_BIT: u32 = 1 << 31;
/// Linux `BPF_RINGBUF_DISCARD_BIT`: the producer discarded the record.
pub const RINGBUF_DISCARD_BIT: u32 = 1 << 30;
/// Linux `BPF_RINGBUF_HDR_SZ`.
pub const RINGBUF_HEADER_SIZE: usize = 8;

/// Where the kernel backend pins its hint ring (`PINNED_HINTS_PATH` of spec/abi.toml).
pub fn default_pinned_path() -> PathBuf {
    PathBuf::from(morpheus_abi::PINNED_HINTS_PATH)
}

/// What one [`consume`] pass saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsumeStats {
    /// Hints handed to the callback.
    pub hints: u64,
    /// Records the producer discarded.
    pub discarded: u64,
    /// Committed records too short to be a `morpheus_hint` (skipped).
    pub malformed: u64,
}

/// A ring buffer in memory: positions and a power-of-two data area.
#[derive(Clone, Copy, Debug)]
pub struct RingView<'a> {
    /// The consumer's position (written by us, release).
    pub consumer_pos: &'a AtomicU64,
    /// The producer's position (written by the kernel, release).
    pub producer_pos: &'a AtomicU64,
    /// Start of the data area.
    pub data: *const u8,
    /// Size of the data area (a power of two; `max_entries` of the map).
    pub size: usize,
}

/// Decode one sample as a hint; `None` if it is shorter than a `morpheus_hint`.
pub fn parse_hint(sample: &[u8]) -> Option<Hint> {
    if sample.len() < size_of::<Hint>() {
        return None;
    }
    // SAFETY: Hint is plain integers; the length was checked; read_unaligned copes with alignment.
    Some(unsafe { std::ptr::read_unaligned(sample.as_ptr() as *const Hint) })
}

/// The hint's reason, if this SDK knows it.
pub fn hint_reason(hint: &Hint) -> Option<HintReason> {
    HintReason::try_from(hint.reason).ok()
}

/// Consume every committed record, oldest first, calling `on_hint` for each hint, and publish the new
/// consumer position. Stops at the first record the producer has not committed yet.
///
/// # Safety
/// `view.data` must point to `view.size` readable bytes (`size` a power of two) that the producer
/// writes as a BPF ring buffer, for the duration of the call.
pub unsafe fn consume(view: &RingView<'_>, mut on_hint: impl FnMut(&Hint)) -> ConsumeStats {
    debug_assert!(view.size.is_power_of_two());
    let mask = view.size as u64 - 1;
    let mut stats = ConsumeStats::default();
    let mut cons = view.consumer_pos.load(Ordering::Acquire);
    let prod = view.producer_pos.load(Ordering::Acquire);
    let mut sample = [0u8; size_of::<Hint>()];
    while cons < prod {
        // Headers are 8-byte aligned, so they never wrap.
        let header = view.data.add((cons & mask) as usize);
        let len_word = AtomicU32::from_ptr(header as *mut u32).load(Ordering::Acquire);
        if len_word & RINGBUF_BUSY_BIT != 0 {
            break;
        }
        let len = (len_word & !(RINGBUF_BUSY_BIT | RINGBUF_DISCARD_BIT)) as usize;
        if len_word & RINGBUF_DISCARD_BIT != 0 {
            stats.discarded += 1;
        } else if len < size_of::<Hint>() {
            stats.malformed += 1;
        } else {
            // Copy with wrap-around, so a single mapping of the data area works too.
            let start = cons + RINGBUF_HEADER_SIZE as u64;
            for (i, byte) in sample.iter_mut().enumerate() {
                *byte = *view.data.add(((start + i as u64) & mask) as usize);
            }
            if let Some(hint) = parse_hint(&sample) {
                stats.hints += 1;
                on_hint(&hint);
            }
        }
        cons += ((len + RINGBUF_HEADER_SIZE + 7) & !7) as u64;
        view.consumer_pos.store(cons, Ordering::Release);
    }
    stats
}

/// The kernel backend's pinned hint ring, mapped.
#[derive(Debug)]
pub struct HintRing {
    consumer: Mapping,
    producer: Mapping,
    size: usize,
    page: usize,
}

impl HintRing {
    /// Map the ring buffer pinned at `path` (e.g. [`default_pinned_path`]).
    pub fn open_pinned(path: &Path) -> Result<HintRing> {
        let fd = sys::bpf_obj_get(path)?;
        let info = sys::bpf_map_info(&fd, path)?;
        if info.map_type != sys::BPF_MAP_TYPE_RINGBUF {
            return Err(Error::io(
                format!(
                    "pinned map {}: expected a ring buffer (map type {}), found map type {}",
                    path.display(),
                    sys::BPF_MAP_TYPE_RINGBUF,
                    info.map_type
                ),
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            ));
        }
        let page = sys::page_size();
        let size = info.max_entries as usize;
        let consumer = Mapping::new(&fd, page, libc::PROT_READ | libc::PROT_WRITE, 0, path)?;
        // The kernel maps the data area twice in a row after the producer page.
        let producer = Mapping::new(&fd, page + 2 * size, libc::PROT_READ, page as i64, path)?;
        Ok(HintRing { consumer, producer, size, page })
    }

    /// Consume every committed hint.
    pub fn poll(&mut self, on_hint: impl FnMut(&Hint)) -> ConsumeStats {
        // SAFETY: both mappings are live and laid out as the kernel documents.
        unsafe {
            let view = RingView {
                consumer_pos: AtomicU64::from_ptr(self.consumer.base() as *mut u64),
                producer_pos: AtomicU64::from_ptr(self.producer.base() as *mut u64),
                data: self.producer.base().add(self.page),
                size: self.size,
            };
            consume(&view, on_hint)
        }
    }
}
