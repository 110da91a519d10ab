// SPDX-License-Identifier: Apache-2.0 OR MIT
//! The runtime's shared-memory operations, one function per rule of spec/SCB.md §3, each naming the
//! order on the other side it pairs with.
//!
//! They are generic over [`Atomic`] so that the same code runs on `std` atomics (the SDK, views of the
//! mapped region) and on `loom` atomics (`tests/loom.rs`, built with `RUSTFLAGS="--cfg loom"`), which
//! explores every interleaving and weak-memory outcome the C11 model allows. The production build
//! never sees loom.

use std::sync::atomic::Ordering::{self, AcqRel, Acquire, Relaxed, Release, SeqCst};

use morpheus_abi::WorkerState;

/// The atomic operations the protocol uses, on a 32- or 64-bit word.
pub trait Atomic {
    /// `u32` or `u64`.
    type Value: Copy + Ord;
    /// Atomic load.
    fn load(&self, order: Ordering) -> Self::Value;
    /// Atomic store.
    fn store(&self, value: Self::Value, order: Ordering);
    /// Strong compare-and-swap.
    fn compare_exchange(
        &self,
        current: Self::Value,
        new: Self::Value,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Value, Self::Value>;
    /// A fence of the memory model these atomics belong to.
    fn fence(order: Ordering);
}

macro_rules! impl_atomic {
    ($atomic:ty, $value:ty, $fence:path) => {
        impl Atomic for $atomic {
            type Value = $value;
            #[inline(always)]
            fn load(&self, order: Ordering) -> $value {
                <$atomic>::load(self, order)
            }
            #[inline(always)]
            fn store(&self, value: $value, order: Ordering) {
                <$atomic>::store(self, value, order)
            }
            #[inline(always)]
            fn compare_exchange(&self, c: $value, n: $value, s: Ordering, f: Ordering) -> Result<$value, $value> {
                <$atomic>::compare_exchange(self, c, n, s, f)
            }
            #[inline(always)]
            fn fence(order: Ordering) {
                $fence(order)
            }
        }
    };
}

impl_atomic!(std::sync::atomic::AtomicU32, u32, std::sync::atomic::fence);
impl_atomic!(std::sync::atomic::AtomicU64, u64, std::sync::atomic::fence);
#[cfg(loom)]
impl_atomic!(loom::sync::atomic::AtomicU32, u32, loom::sync::atomic::fence);
#[cfg(loom)]
impl_atomic!(loom::sync::atomic::AtomicU64, u64, loom::sync::atomic::fence);

/// The checkpoint's load of `preempt_seq` (§5.1): acquire, pairing with the scheduler's release
/// increment, which it makes after storing the hint's fields (`last_hint_ns`, `budget_remaining_ns`):
/// a checkpoint that sees a new request sees that request's fields.
#[inline(always)]
pub fn load_request<A: Atomic<Value = u64>>(preempt_seq: &A) -> u64 {
    preempt_seq.load(Acquire)
}

/// Outermost critical enter (§5.3): `in_critical := 1` (relaxed), then a seq_cst fence.
///
/// The fence, not the store's order, is what keeps the section's later loads after the store on
/// arm64. It pairs with the scheduler's seq_cst fence between its own store (the request or the
/// escalation mark) and its load of `in_critical` (Dekker): either the gate sees 1, or the section's
/// first loads see the scheduler's store.
#[inline(always)]
pub fn critical_enter<A: Atomic<Value = u32>>(in_critical: &A) {
    in_critical.store(1, Relaxed);
    A::fence(SeqCst);
}

/// Outermost critical exit (§5.3): `in_critical := 0` with release, so the section's accesses happen
/// before a scheduler that acquire-loads 0.
#[inline(always)]
pub fn critical_exit<A: Atomic<Value = u32>>(in_critical: &A) {
    in_critical.store(0, Release);
}

/// The acknowledging CAS (§5.1): raise `last_ack_seq` to `seq`, never lower it. The first load is an
/// acquire (it may read another path's acknowledgement); the CAS is acq_rel on success (release pairs
/// with the scheduler's acquire load of `last_ack_seq`), acquire on failure.
///
/// Returns the value `last_ack_seq` holds afterwards as far as this thread knows: `max(seq, found)`,
/// which is what the caller must cache, so a later acknowledgement by another path does not leave the
/// cache below the SCB (review B, "cached_ack := seq").
#[inline]
pub fn acknowledge<A: Atomic<Value = u64>>(last_ack_seq: &A, seq: u64) -> u64 {
    let mut current = last_ack_seq.load(Acquire);
    while current < seq {
        match last_ack_seq.compare_exchange(current, seq, AcqRel, Acquire) {
            Ok(_) => return seq,
            Err(now) => current = now,
        }
    }
    current
}

/// Bounded seqlock reader (§2.1): at most `attempts` tries of
/// `s1 = seq (acquire)`; odd: retry; `read()` (relaxed loads); acquire fence; `s2 = seq (relaxed)`;
/// equal: done. The acquire fence pairs with the writer's release fence after its odd store, so a
/// reader whose data loads saw any of the writer's stores sees the odd (or a later) `seq` in `s2`.
/// `None` when every attempt raced a writer (or `seq` stayed odd): the caller keeps its last good
/// snapshot, never spins forever (a writer may be hostile or dead mid-write).
#[inline]
pub fn read_seqlock<A: Atomic<Value = u32>, T>(seq: &A, attempts: u32, mut read: impl FnMut() -> T) -> Option<T> {
    for _ in 0..attempts {
        let before = seq.load(Acquire);
        if before & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let value = read();
        A::fence(Acquire);
        if seq.load(Relaxed) == before {
            return Some(value);
        }
    }
    None
}

/// Claim a slot (§4): CAS `worker_state` from `expected` to CLAIMED (acq_rel, acquire on failure).
/// Exactly one registrar (agent or direct registration) wins a given hand-off; the acquire half makes
/// the previous owner's release of `expected` (INIT, or DEAD) happen before the claimer's writes.
/// `Err(found)` when the slot was not in `expected`.
#[inline]
pub fn claim<A: Atomic<Value = u32>>(worker_state: &A, expected: WorkerState) -> Result<(), u32> {
    worker_state
        .compare_exchange(expected.raw(), WorkerState::Claimed.raw(), AcqRel, Acquire)
        .map(|_| ())
}

/// End a hand-off or a runtime transition: `worker_state := state` with release, publishing every
/// field written before it (while CLAIMED: tid, pid, slot_generation, last_ack_seq, escapable,
/// priority) to whoever acquire-loads `state`.
#[inline(always)]
pub fn publish_state<A: Atomic<Value = u32>>(worker_state: &A, state: WorkerState) {
    worker_state.store(state.raw(), Release);
}

/// The next `slot_generation` (§4): wrapping increment that skips 0, so 0 never names an assignment
/// (security review S11: no overflow panic, no silent reuse of 0).
#[inline(always)]
pub fn next_slot_generation(current: u32) -> u32 {
    match current.wrapping_add(1) {
        0 => 1,
        next => next,
    }
}

/// Whether a raw `worker_state` read from shared memory means RUNNING. An unknown value (a newer ABI,
/// or a hostile mapper) is neither RUNNING nor free (§3, unknown enum values).
#[inline(always)]
pub fn is_running(raw_state: u32) -> bool {
    raw_state == WorkerState::Running.raw()
}

/// Whether a raw `worker_state` means the slot is free (INIT). Unknown values are not free.
#[inline(always)]
pub fn is_free(raw_state: u32) -> bool {
    raw_state == WorkerState::Init.raw()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64};

    use super::*;

    #[test]
    fn acknowledge_returns_the_larger_of_seq_and_what_it_found() {
        let ack = AtomicU64::new(3);
        assert_eq!(acknowledge(&ack, 5), 5);
        assert_eq!(ack.load(Relaxed), 5);
        // Another path acknowledged 9 already: the SCB keeps 9 and the caller caches 9, not 7.
        ack.store(9, Relaxed);
        assert_eq!(acknowledge(&ack, 7), 9);
        assert_eq!(ack.load(Relaxed), 9);
    }

    #[test]
    fn seqlock_reader_gives_up_on_a_parked_odd_seq() {
        let seq = AtomicU32::new(7);
        let mut reads = 0;
        assert_eq!(read_seqlock(&seq, 16, || reads += 1), None);
        assert_eq!(reads, 0, "no data is read while the writer holds the lock");
        seq.store(8, Relaxed);
        assert_eq!(read_seqlock(&seq, 16, || 42), Some(42));
    }

    #[test]
    fn slot_generation_wraps_past_zero() {
        assert_eq!(next_slot_generation(0), 1);
        assert_eq!(next_slot_generation(41), 42);
        assert_eq!(next_slot_generation(u32::MAX), 1);
    }

    #[test]
    fn claim_is_won_once() {
        let state = AtomicU32::new(WorkerState::Init.raw());
        assert_eq!(claim(&state, WorkerState::Init), Ok(()));
        assert_eq!(claim(&state, WorkerState::Init), Err(WorkerState::Claimed.raw()));
        publish_state(&state, WorkerState::Registered);
        assert_eq!(state.load(Relaxed), WorkerState::Registered.raw());
    }

    #[test]
    fn unknown_states_are_neither_running_nor_free() {
        for raw in [9u32, 0xFFFF_FFFF, WorkerState::Claimed.raw()] {
            assert!(!is_running(raw) && !is_free(raw), "state {raw}");
        }
    }
}
