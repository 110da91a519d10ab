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
impl_atomic!(std::sync::atomic::AtomicI32, i32, std::sync::atomic::fence);
#[cfg(loom)]
impl_atomic!(loom::sync::atomic::AtomicU32, u32, loom::sync::atomic::fence);
#[cfg(loom)]
impl_atomic!(loom::sync::atomic::AtomicI32, i32, loom::sync::atomic::fence);
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

/// The pressure record's writer (§2.1), the one every scheduler side uses (the agent's
/// `Region::publish_pressure`, the test fixtures, the loom model): `seq := odd` (relaxed), release
/// fence, `write()` (relaxed stores of the payload), `seq := odd + 1` (release). The release fence
/// pairs with the reader's acquire fence ([`read_seqlock`]): a reader whose data loads saw any store of
/// `write()` sees the odd (or a later) `seq` in its second load and retries; the even release store
/// pairs with the reader's first acquire load, so a reader that sees the new even value sees the data.
///
/// `previous` is the writer's own last even value (never re-read from `seq`, which a runtime can
/// scribble on); the odd value is `(previous + 1) | 1`, so any `previous` yields an odd value. Returns
/// the even value stored, which the caller keeps as its next `previous`.
#[inline]
pub fn write_seqlock<A: Atomic<Value = u32>>(seq: &A, previous: u32, write: impl FnOnce()) -> u32 {
    let odd = previous.wrapping_add(1) | 1;
    seq.store(odd, Relaxed);
    A::fence(Release);
    write();
    let even = odd.wrapping_add(1);
    seq.store(even, Release);
    even
}

/// Region publication (§2): `write_header()` stores every header field, then `generation` is stored
/// with release, last. Pairs with the runtime's acquire load of `generation` at attach: a runtime that
/// sees a non-zero generation sees the whole header written before it. The one publication step of the
/// agent's `Region::publish` and of the test fixtures (`testing::SimRegionBuilder`).
#[inline]
pub fn publish_region<A: Atomic<Value = u64>>(generation_field: &A, generation: u64, write_header: impl FnOnce()) {
    write_header();
    generation_field.store(generation, Release);
}

/// Claim a slot (§4): CAS `worker_state` from `expected` to CLAIMED (acq_rel, acquire on failure).
/// Exactly one registrar (agent or direct registration) wins a given hand-off; the acquire half makes
/// the previous owner's release of `expected` (INIT, or DEAD) happen before the claimer's writes.
/// `Err(found)` when the slot was not in `expected`.
#[inline]
pub fn claim<A: Atomic<Value = u32>>(worker_state: &A, expected: WorkerState) -> Result<(), u32> {
    claim_raw(worker_state, expected.raw())
}

/// [`claim`] from a raw state as read from shared memory (a reclaim CASes from whatever it observed,
/// an unknown value included).
#[inline]
pub fn claim_raw<A: Atomic<Value = u32>>(worker_state: &A, expected: u32) -> Result<(), u32> {
    worker_state
        .compare_exchange(expected, WorkerState::Claimed.raw(), AcqRel, Acquire)
        .map(|_| ())
}

/// End a hand-off or a runtime transition: `worker_state := state` with release, publishing every
/// field written before it (while CLAIMED: tid, pid, slot_generation, last_ack_seq, escapable,
/// priority) to whoever acquire-loads `state`.
#[inline(always)]
pub fn publish_state<A: Atomic<Value = u32>>(worker_state: &A, state: WorkerState) {
    worker_state.store(state.raw(), Release);
}

/// The SCB fields a registrar writes while it holds a slot CLAIMED (§4, the CLAIMED -> REGISTERED
/// row), borrowed from one SCB.
pub struct SlotFields<'a, U32, I32, U64> {
    pub worker_state: &'a U32,
    pub tid: &'a U32,
    pub pid: &'a U32,
    pub slot_generation: &'a U32,
    pub escapable: &'a U32,
    pub priority: &'a I32,
    pub preempt_seq: &'a U64,
    pub last_ack_seq: &'a U64,
    pub budget_remaining_ns: &'a U64,
    pub escalated: &'a U32,
}

/// Who a slot is assigned to, and what the request asked for.
#[derive(Clone, Copy, Debug)]
pub struct Assignee {
    /// `tid` and `pid` as the SCB carries them (§3).
    pub tid: u32,
    pub pid: u32,
    pub escapable: bool,
    /// Already checked against `PRIORITY_MIN`..`PRIORITY_MAX` by the caller.
    pub priority: i32,
    /// A registrar that is the scheduler (the agent) also starts the worker's budget at this slice
    /// and closes any escalation episode (`escalated := 0`): scheduler-line fields, which only a
    /// scheduler writes. None for a direct registration (an SDK never writes them).
    pub scheduler_slice_ns: Option<u64>,
}

/// The registrar's CLAIMED -> REGISTERED (§4), for a slot this registrar won with [`claim`]: the
/// assignment's data with relaxed stores (only the publish orders them), `slot_generation` advanced
/// ([`next_slot_generation`]), `last_ack_seq := preempt_seq` (loaded as a checkpoint does,
/// [`load_request`]: an old request on a reused slot is not pending), then REGISTERED with release ([`publish_state`]), which publishes them all.
/// Returns the new `slot_generation`. The agent and the SDK's direct registration both call this.
pub fn assign_claimed<U32, I32, U64>(fields: &SlotFields<'_, U32, I32, U64>, who: &Assignee) -> u32
where
    U32: Atomic<Value = u32>,
    I32: Atomic<Value = i32>,
    U64: Atomic<Value = u64>,
{
    fields.tid.store(who.tid, Relaxed);
    fields.pid.store(who.pid, Relaxed);
    let slot_generation = next_slot_generation(fields.slot_generation.load(Relaxed));
    fields.slot_generation.store(slot_generation, Relaxed);
    fields.last_ack_seq.store(load_request(fields.preempt_seq), Relaxed);
    fields.escapable.store(who.escapable as u32, Relaxed);
    fields.priority.store(who.priority, Relaxed);
    if let Some(slice_ns) = who.scheduler_slice_ns {
        fields.budget_remaining_ns.store(slice_ns, Relaxed);
        fields.escalated.store(0, Relaxed);
    }
    publish_state(fields.worker_state, WorkerState::Registered);
    slot_generation
}

/// Gives back a slot this registrar claimed but wrote nothing into (CLAIMED -> INIT, release): the
/// assignment failed after the claim for a reason of the registrar's own.
#[inline]
pub fn abandon_claim<A: Atomic<Value = u32>>(worker_state: &A) {
    publish_state(worker_state, WorkerState::Init);
}

/// The registrar's reclaim (§4, DEAD or any state of a gone thread -> CLAIMED -> INIT): the claim CAS
/// from the state it observed ([`claim_raw`]), `clear` (the generated reclaim clear over the whole
/// stride), then INIT with release, so the next claimer sees a clean slot. `Err(found)`, having
/// written nothing, when the state was no longer `observed` (another registrar took the slot, or
/// its runtime moved it).
pub fn reclaim<A: Atomic<Value = u32>>(worker_state: &A, observed: u32, clear: impl FnOnce()) -> Result<(), u32> {
    claim_raw(worker_state, observed)?;
    clear();
    publish_state(worker_state, WorkerState::Init);
    Ok(())
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
    use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

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

    /// One SCB's registrar fields, in a test.
    #[derive(Default)]
    struct Fields {
        state: AtomicU32,
        tid: AtomicU32,
        pid: AtomicU32,
        slot_generation: AtomicU32,
        escapable: AtomicU32,
        priority: AtomicI32,
        preempt_seq: AtomicU64,
        last_ack_seq: AtomicU64,
        budget_remaining_ns: AtomicU64,
        escalated: AtomicU32,
    }

    impl Fields {
        fn view(&self) -> SlotFields<'_, AtomicU32, AtomicI32, AtomicU64> {
            SlotFields {
                worker_state: &self.state,
                tid: &self.tid,
                pid: &self.pid,
                slot_generation: &self.slot_generation,
                escapable: &self.escapable,
                priority: &self.priority,
                preempt_seq: &self.preempt_seq,
                last_ack_seq: &self.last_ack_seq,
                budget_remaining_ns: &self.budget_remaining_ns,
                escalated: &self.escalated,
            }
        }
    }

    #[test]
    fn an_assignment_writes_the_rows_data_and_only_a_scheduler_writes_its_own_fields() {
        let direct = Fields::default();
        direct.slot_generation.store(u32::MAX, Relaxed);
        direct.preempt_seq.store(9, Relaxed);
        direct.escalated.store(1, Relaxed);
        direct.budget_remaining_ns.store(5, Relaxed);
        assert_eq!(claim(&direct.state, WorkerState::Init), Ok(()));
        let who = Assignee { tid: 11, pid: 10, escapable: true, priority: -20, scheduler_slice_ns: None };
        assert_eq!(assign_claimed(&direct.view(), &who), 1, "slot_generation skips 0");
        assert_eq!(direct.state.load(Relaxed), WorkerState::Registered.raw());
        assert_eq!((direct.tid.load(Relaxed), direct.pid.load(Relaxed)), (11, 10));
        assert_eq!((direct.escapable.load(Relaxed), direct.priority.load(Relaxed)), (1, -20));
        assert_eq!(direct.last_ack_seq.load(Relaxed), 9, "a request made before the assignment is not pending");
        assert_eq!((direct.budget_remaining_ns.load(Relaxed), direct.escalated.load(Relaxed)), (5, 1), "an SDK wrote scheduler fields");

        let agent = Fields::default();
        agent.escalated.store(1, Relaxed);
        assert_eq!(claim(&agent.state, WorkerState::Init), Ok(()));
        assign_claimed(&agent.view(), &Assignee { scheduler_slice_ns: Some(700), ..who });
        assert_eq!((agent.budget_remaining_ns.load(Relaxed), agent.escalated.load(Relaxed)), (700, 0));
    }

    #[test]
    fn a_reclaim_clears_only_the_state_it_observed() {
        let state = AtomicU32::new(WorkerState::Dead.raw());
        let mut cleared = false;
        assert_eq!(reclaim(&state, WorkerState::Running.raw(), || cleared = true), Err(WorkerState::Dead.raw()));
        assert!(!cleared, "the clear ran without the claim");
        assert_eq!(reclaim(&state, 77, || cleared = true), Err(WorkerState::Dead.raw()));
        assert_eq!(reclaim(&state, WorkerState::Dead.raw(), || cleared = true), Ok(()));
        assert!(cleared);
        assert_eq!(state.load(Relaxed), WorkerState::Init.raw());
        state.store(77, Relaxed);
        assert_eq!(reclaim(&state, 77, || ()), Ok(()), "an unknown state of a gone thread is reclaimed too");
    }

    #[test]
    fn unknown_states_are_neither_running_nor_free() {
        for raw in [9u32, 0xFFFF_FFFF, WorkerState::Claimed.raw()] {
            assert!(!is_running(raw) && !is_free(raw), "state {raw}");
        }
    }
}
