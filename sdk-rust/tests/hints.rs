// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Parsing of the hint ring buffer, on memory laid out as the kernel lays out a BPF ring buffer.
//! tests/pinned_map.rs maps a real ring buffer that a BPF program fills.

use std::{mem::size_of, sync::atomic::AtomicU64};

use morpheus::hints::{consume, parse_hint, RingView, RINGBUF_BUSY_BIT, RINGBUF_DISCARD_BIT, RINGBUF_HEADER_SIZE};
use morpheus_abi::{Hint, HintReason};

struct FakeRing {
    consumer: AtomicU64,
    producer: AtomicU64,
    data: Vec<u8>,
}

impl FakeRing {
    fn new(size: usize) -> FakeRing {
        FakeRing { consumer: AtomicU64::new(0), producer: AtomicU64::new(0), data: vec![0; size] }
    }

    /// Append a record as bpf_ringbuf_output does: header (len | flags, pg_off), sample, 8-byte padding.
    fn push(&mut self, sample: &[u8], flags: u32) {
        let mask = self.data.len() as u64 - 1;
        let pos = self.producer.load(std::sync::atomic::Ordering::Relaxed);
        let header = ((sample.len() as u32) | flags).to_le_bytes();
        for (i, b) in header.iter().chain(0u32.to_le_bytes().iter()).chain(sample).enumerate() {
            self.data[((pos + i as u64) & mask) as usize] = *b;
        }
        let step = (sample.len() + RINGBUF_HEADER_SIZE + 7) & !7;
        self.producer.store(pos + step as u64, std::sync::atomic::Ordering::Release);
    }

    fn view(&self) -> RingView<'_> {
        RingView { consumer_pos: &self.consumer, producer_pos: &self.producer, data: self.data.as_ptr(), size: self.data.len() }
    }
}

fn hint(seq: u64, slot: u32) -> Vec<u8> {
    let h = Hint {
        timestamp_ns: 1000 + seq,
        preempt_seq: seq,
        slot,
        tid: 4242,
        reason: HintReason::SliceOverrun.raw(),
        overrun_ns: 77,
        ..Default::default()
    };
    unsafe { std::slice::from_raw_parts(&h as *const Hint as *const u8, size_of::<Hint>()) }.to_vec()
}

#[test]
fn hints_are_consumed_in_order_and_the_position_published() {
    let mut ring = FakeRing::new(256);
    ring.push(&hint(1, 3), 0);
    ring.push(&hint(2, 3), 0);
    let mut seen = Vec::new();
    let stats = unsafe { consume(&ring.view(), |h| seen.push((h.preempt_seq, h.slot, h.overrun_ns))) };
    assert_eq!(stats.hints, 2);
    assert_eq!(seen, vec![(1, 3, 77), (2, 3, 77)]);
    assert_eq!(ring.consumer.load(std::sync::atomic::Ordering::Relaxed), 2 * 48);
    // Nothing new: nothing consumed.
    assert_eq!(unsafe { consume(&ring.view(), |_| panic!("no hint expected")) }.hints, 0);
}

#[test]
fn discarded_busy_and_short_records() {
    let mut ring = FakeRing::new(256);
    ring.push(&hint(1, 0), RINGBUF_DISCARD_BIT);
    ring.push(&[1, 2, 3], 0); // too short for a hint
    ring.push(&hint(2, 0), 0);
    ring.push(&hint(3, 0), RINGBUF_BUSY_BIT); // reserved, not committed: consumption stops here
    let mut seen = Vec::new();
    let stats = unsafe { consume(&ring.view(), |h| seen.push(h.preempt_seq)) };
    assert_eq!((stats.hints, stats.discarded, stats.malformed), (1, 1, 1));
    assert_eq!(seen, vec![2]);
    assert_eq!(ring.consumer.load(std::sync::atomic::Ordering::Relaxed), 48 + 16 + 48, "stopped before the busy record");
}

#[test]
fn records_that_wrap_around_the_end_are_reassembled() {
    let mut ring = FakeRing::new(64);
    // Move both positions so the next 48-byte record starts 16 bytes before the end.
    ring.producer.store(48, std::sync::atomic::Ordering::Relaxed);
    ring.consumer.store(48, std::sync::atomic::Ordering::Relaxed);
    ring.push(&hint(9, 5), 0);
    let mut seen = Vec::new();
    unsafe { consume(&ring.view(), |h| seen.push((h.preempt_seq, h.slot, h.tid))) };
    assert_eq!(seen, vec![(9, 5, 4242)]);
}

#[test]
fn parse_hint_refuses_short_samples() {
    assert!(parse_hint(&[0u8; 39]).is_none());
    let parsed = parse_hint(&hint(5, 1)).unwrap();
    assert_eq!((parsed.preempt_seq, morpheus::hints::hint_reason(&parsed)), (5, Some(HintReason::SliceOverrun)));
}
