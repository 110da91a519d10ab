// SPDX-License-Identifier: Apache-2.0 OR MIT
//! Model checks of the SCB protocol under loom (every interleaving and every weak-memory outcome of the
//! C11 model that loom explores). Built only with `RUSTFLAGS="--cfg loom"` (`//sdk-rust:loom_test`):
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p morpheus --test loom
//! ```
//!
//! The runtime's side is the SDK's own code (`morpheus::protocol`, which the real fast and slow paths
//! call), and so are the pressure seqlock writer and the region publication (`protocol::write_seqlock`,
//! `protocol::publish_region`, which the agent's `scheduler/src/region.rs` and the test fixtures call);
//! the scheduler's other steps and the registrars' sides are written here as spec/SCB.md §2.1, §3.1
//! and §4 describe them. Each test names the property it protects. `tests/loom_mutations.sh`
//! (`bazel run //sdk-rust:loom_mutations`) weakens each documented order, one at a time, in a scratch
//! copy and checks that the test protecting it fails.
#![cfg(loom)]

use loom::{
    sync::{
        atomic::{fence, AtomicI32, AtomicU32, AtomicU64},
        Arc,
    },
    thread,
};
use morpheus::protocol::{self, read_seqlock};
use morpheus_abi::WorkerState;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// The model with a preemption bound of 5 (`LOOM_MAX_PREEMPTIONS` overrides it): about 20 s for the
/// suite on a loaded 2-core machine, against about 160 s unbounded. Every weakening recorded in the
/// 1.3 issue note is already caught at a bound of 3.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(5);
    }
    builder.check(f);
}

/// The fields of one SCB the models touch.
#[derive(Default)]
struct Scb {
    preempt_seq: AtomicU64,
    last_hint_ns: AtomicU64,
    budget_remaining_ns: AtomicU64,
    last_ack_seq: AtomicU64,
    escalated: AtomicU32,
    worker_state: AtomicU32,
    in_critical: AtomicU32,
    tid: AtomicU32,
    pid: AtomicU32,
    slot_generation: AtomicU32,
    escapable: AtomicU32,
    priority: AtomicI32,
}

impl Scb {
    /// The fields a registrar writes while CLAIMED, for `protocol::assign_claimed`.
    fn slot_fields(&self) -> protocol::SlotFields<'_, AtomicU32, AtomicI32, AtomicU64> {
        protocol::SlotFields {
            worker_state: &self.worker_state,
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

/// What registrar `tid` assigns: the agent (odd tids here) as the scheduler also starts the budget.
fn assignee(tid: u32) -> protocol::Assignee {
    protocol::Assignee {
        tid,
        pid: 1,
        escapable: tid % 2 == 1,
        priority: 0,
        scheduler_slice_ns: (tid % 2 == 1).then_some(1_000),
    }
}

/// The scheduler's request (§3.1 row 1): the hint's fields first, then the release increment.
fn scheduler_request(scb: &Scb, hint_ns: u64) -> u64 {
    scb.last_hint_ns.store(hint_ns, Relaxed);
    scb.budget_remaining_ns.store(0, Relaxed);
    scb.preempt_seq.fetch_add(1, Release) + 1
}

/// (a) A checkpoint that sees request n sees request n's hint fields; the acknowledgement is never
/// ahead of preempt_seq and never decreases, also when another path of the runtime acknowledges.
#[test]
fn checkpoint_sees_the_hint_of_the_request_it_acknowledges() {
    model(|| {
        let scb = Arc::new(Scb::default());
        scb.budget_remaining_ns.store(5_000_000, Relaxed);
        let scheduler = {
            let scb = scb.clone();
            thread::spawn(move || {
                for n in 1..=2u64 {
                    let seq = scheduler_request(&scb, 100 * n);
                    // The scheduler reads the acknowledgement (acquire): never ahead of what it asked.
                    let ack = scb.last_ack_seq.load(Acquire);
                    assert!(ack <= seq, "last_ack_seq {ack} ran ahead of preempt_seq {seq}");
                }
            })
        };
        let other_path = {
            let scb = scb.clone();
            thread::spawn(move || {
                let seq = protocol::load_request(&scb.preempt_seq);
                if seq != 0 {
                    let cached = protocol::acknowledge(&scb.last_ack_seq, seq);
                    assert!(cached >= seq);
                }
            })
        };
        let seq = protocol::load_request(&scb.preempt_seq);
        if seq != 0 {
            let hint = scb.last_hint_ns.load(Relaxed);
            assert!(hint >= 100 * seq, "saw request {seq} but its hint field was stale ({hint})");
            assert_eq!(scb.budget_remaining_ns.load(Relaxed), 0, "saw request {seq} with a stale budget");
            let before = scb.last_ack_seq.load(Relaxed);
            let cached = protocol::acknowledge(&scb.last_ack_seq, seq);
            assert!(cached >= seq && cached >= before, "cached_ack {cached} below {seq} or below {before}");
            assert!(cached <= scb.preempt_seq.load(Relaxed), "cached_ack {cached} ahead of preempt_seq");
        }
        scheduler.join().unwrap();
        other_path.join().unwrap();
        let (ack, seq) = (scb.last_ack_seq.load(Relaxed), scb.preempt_seq.load(Relaxed));
        assert!(ack <= seq, "final last_ack_seq {ack} ahead of preempt_seq {seq}");
    });
}

/// (a') The acknowledgement's release half: the runtime's stores before it (the yield's record,
/// `last_yield_reason` here) are visible to a scheduler that acquires the acknowledgement.
#[test]
fn the_scheduler_that_sees_an_acknowledgement_sees_the_yield_before_it() {
    model(|| {
        let scb = Arc::new(Scb::default());
        let last_yield_reason = Arc::new(AtomicU32::new(0));
        scb.preempt_seq.store(1, Relaxed);
        let scheduler = {
            let (scb, reason) = (scb.clone(), last_yield_reason.clone());
            thread::spawn(move || {
                if scb.last_ack_seq.load(Acquire) == 1 {
                    assert_eq!(reason.load(Relaxed), 1, "acknowledged, but the yield's record is not visible");
                }
            })
        };
        let seq = protocol::load_request(&scb.preempt_seq);
        last_yield_reason.store(1, Relaxed); // PREEMPT_REQUEST, stored before the acknowledging CAS
        protocol::acknowledge(&scb.last_ack_seq, seq);
        scheduler.join().unwrap();
    });
}

/// (a'') The acknowledgement's acquire half: a checkpoint whose acknowledgement finds that another
/// path of the runtime already acknowledged a later request (by its first load or by a failed CAS)
/// caches that value, and its next load of `preempt_seq` is never below it: a cache ahead of what
/// the thread can see would make its next checkpoint yield for nothing (review B, "cached_ack := seq").
#[test]
fn a_checkpoint_that_takes_another_paths_acknowledgement_never_sees_preempt_seq_below_it() {
    model(|| {
        let scb = Arc::new(Scb::default());
        let scheduler = {
            let scb = scb.clone();
            thread::spawn(move || {
                scheduler_request(&scb, 100);
                scheduler_request(&scb, 200);
            })
        };
        let other_path = {
            let scb = scb.clone();
            thread::spawn(move || {
                let seq = protocol::load_request(&scb.preempt_seq);
                if seq != 0 {
                    protocol::acknowledge(&scb.last_ack_seq, seq);
                }
            })
        };
        let seq = protocol::load_request(&scb.preempt_seq);
        if seq != 0 {
            let cached = protocol::acknowledge(&scb.last_ack_seq, seq);
            let next = protocol::load_request(&scb.preempt_seq);
            assert!(next >= cached, "cached_ack {cached} but the next checkpoint loads preempt_seq {next}");
        }
        scheduler.join().unwrap();
        other_path.join().unwrap();
    });
}

/// (b) Critical enter against the gate (Dekker, §3.1 and §5.6): the scheduler stores its decision
/// (here `escalated := 1`), issues a full barrier and loads `in_critical`; the runtime stores
/// `in_critical := 1`, issues the seq_cst fence, and its section loads the scheduler's line. Either
/// the gate sees the section, or the section sees the escalation: never neither.
#[test]
fn a_gate_that_reads_not_critical_is_seen_by_the_section_that_follows() {
    model(|| {
        let scb = Arc::new(Scb::default());
        let gate = {
            let scb = scb.clone();
            thread::spawn(move || {
                scb.escalated.store(1, Relaxed);
                fence(SeqCst); // the kernel side's full barrier before the gate's load
                scb.in_critical.load(Acquire)
            })
        };
        protocol::critical_enter(&scb.in_critical);
        let section_saw_escalation = scb.escalated.load(Relaxed);
        let gate_saw_critical = gate.join().unwrap();
        assert!(
            gate_saw_critical == 1 || section_saw_escalation == 1,
            "the gate read in_critical == 0 and the section that had already begun missed the escalation"
        );
    });
}

/// (b') Critical exit: a gate that saw the section and then sees `in_critical == 0` sees the
/// section's work complete.
#[test]
fn a_gate_that_sees_the_section_end_sees_its_work() {
    model(|| {
        let scb = Arc::new(Scb::default());
        let work = Arc::new(AtomicU32::new(0));
        let runtime = {
            let (scb, work) = (scb.clone(), work.clone());
            thread::spawn(move || {
                protocol::critical_enter(&scb.in_critical);
                work.store(1, Relaxed);
                protocol::critical_exit(&scb.in_critical);
            })
        };
        let first = scb.in_critical.load(Acquire);
        let second = scb.in_critical.load(Acquire);
        if first == 1 && second == 0 {
            assert_eq!(work.load(Relaxed), 1, "saw the section end before its work");
        }
        runtime.join().unwrap();
    });
}

/// (b'') REGISTERED -> RUNNING (§4, §5.3): a thread that registers inside an open critical section
/// stores `in_critical := 1` before its release store of RUNNING; a gate that acquire-loads RUNNING
/// sees it, so it never judges a RUNNING worker "not critical" while the SDK's depth is 1.
#[test]
fn a_gate_that_sees_running_sees_the_fields_published_before_it() {
    model(|| {
        let scb = Arc::new(Scb::default());
        scb.worker_state.store(WorkerState::Registered.raw(), Relaxed);
        let runtime = {
            let scb = scb.clone();
            thread::spawn(move || {
                scb.in_critical.store(1, Relaxed); // the thread's depth is 1 (§4, the RUNNING row)
                protocol::publish_state(&scb.worker_state, WorkerState::Running);
            })
        };
        if scb.worker_state.load(Acquire) == WorkerState::Running.raw() {
            assert_eq!(scb.in_critical.load(Acquire), 1, "the gate saw RUNNING with a stale in_critical");
        }
        runtime.join().unwrap();
    });
}

/// A registrar's assignment (§4), the code the agent and the SDK's direct registration run: claim
/// INIT, then `protocol::assign_claimed` (the slot's data, REGISTERED with release).
fn register(scb: &Scb, tid: u32) -> bool {
    if protocol::claim(&scb.worker_state, WorkerState::Init).is_err() {
        return false;
    }
    protocol::assign_claimed(&scb.slot_fields(), &assignee(tid));
    true
}

/// (c) Two registrars (an agent and a direct registration) race for one free slot: at most one wins,
/// and whoever acquires REGISTERED sees the winner's data, never a mix.
#[test]
fn a_free_slot_is_assigned_once_and_published_whole() {
    model(|| {
        let scb = Arc::new(Scb::default());
        let agent = {
            let scb = scb.clone();
            thread::spawn(move || register(&scb, 7))
        };
        let direct = {
            let scb = scb.clone();
            thread::spawn(move || register(&scb, 8))
        };
        // The scheduler (or the runtime) looking at the slot.
        if scb.worker_state.load(Acquire) == WorkerState::Registered.raw() {
            let tid = scb.tid.load(Relaxed);
            assert!(tid == 7 || tid == 8, "REGISTERED seen before its tid ({tid})");
            assert_eq!(scb.slot_generation.load(Relaxed), 1, "REGISTERED seen before its slot_generation");
            assert_eq!(scb.escapable.load(Relaxed), tid % 2, "REGISTERED seen with another registrar's escapable");
        }
        let wins = agent.join().unwrap() as u32 + direct.join().unwrap() as u32;
        assert_eq!(wins, 1, "a slot was assigned {wins} times");
        let tid = scb.tid.load(Relaxed);
        assert_eq!(scb.escapable.load(Relaxed), tid % 2, "the loser wrote into the winner's slot");
    });
}

/// (c') Reclaim against a new registration: the reclaimer claims the DEAD slot, clears it and
/// publishes INIT; a registrar that then wins the slot sees it clear, and the clear never lands on
/// the new occupant's data.
#[test]
fn a_reclaimed_slot_is_reused_clean_and_never_cleared_under_its_new_owner() {
    model(|| {
        let scb = Arc::new(Scb::default());
        scb.worker_state.store(WorkerState::Dead.raw(), Relaxed);
        scb.tid.store(5, Relaxed);
        scb.escapable.store(1, Relaxed);
        scb.slot_generation.store(u32::MAX, Relaxed);
        let reclaimer = {
            let scb = scb.clone();
            thread::spawn(move || {
                // The reclaim clear (generated from abi.toml), modelled as relaxed stores while CLAIMED.
                let clear = || {
                    scb.tid.store(0, Relaxed);
                    scb.escapable.store(0, Relaxed);
                };
                protocol::reclaim(&scb.worker_state, WorkerState::Dead.raw(), clear).is_ok()
            })
        };
        let registrar = {
            let scb = scb.clone();
            thread::spawn(move || {
                // Only the claim orders this registrar after the reclaim: no other load of the state.
                if protocol::claim(&scb.worker_state, WorkerState::Init).is_err() {
                    return false;
                }
                assert_eq!(scb.tid.load(Relaxed), 0, "the claim won INIT but the clear was not visible");
                let who = protocol::Assignee { escapable: true, ..assignee(8) }; // escapable from its request
                protocol::assign_claimed(&scb.slot_fields(), &who);
                true
            })
        };
        assert!(reclaimer.join().unwrap(), "only the reclaimer claims a DEAD slot");
        if registrar.join().unwrap() {
            assert_eq!(scb.tid.load(Relaxed), 8, "the clear landed on the new owner's tid");
            assert_eq!(scb.escapable.load(Relaxed), 1, "the clear landed on the new owner's escapable");
            assert_eq!(scb.slot_generation.load(Relaxed), 1, "slot_generation wraps past 0 to 1");
            assert_eq!(scb.worker_state.load(Relaxed), WorkerState::Registered.raw());
        } else {
            assert_eq!(scb.worker_state.load(Relaxed), WorkerState::Init.raw());
        }
    });
}

/// The pressure record's writer: the agent's own, `protocol::write_seqlock` (§2.1), over two fields.
fn seqlock_write(seq: &AtomicU32, a: &AtomicU32, b: &AtomicU32, value: u32) {
    protocol::write_seqlock(seq, seq.load(Relaxed), || {
        a.store(value, Relaxed);
        b.store(value, Relaxed);
    });
}

/// (c'') A runtime that sees a published generation sees the whole header written before it: the
/// agent's and the fixtures' publication step, `protocol::publish_region` (§2).
#[test]
fn a_runtime_that_sees_the_generation_sees_the_whole_header() {
    model(|| {
        let header = Arc::new((AtomicU64::new(0), AtomicU64::new(0), AtomicU32::new(0)));
        let agent = {
            let header = header.clone();
            thread::spawn(move || {
                let (generation, slice_ns, scb_count) = &*header;
                protocol::publish_region(generation, 7, || {
                    slice_ns.store(500, Relaxed);
                    scb_count.store(4, Relaxed);
                });
            })
        };
        let (generation, slice_ns, scb_count) = &*header;
        if generation.load(Acquire) == 7 {
            assert_eq!(slice_ns.load(Relaxed), 500, "generation published before slice_ns");
            assert_eq!(scb_count.load(Relaxed), 4, "generation published before scb_count");
        }
        agent.join().unwrap();
    });
}

/// (d) The bounded seqlock reader never returns a torn snapshot (fields from two different writes),
/// and it returns (bounded) while a writer is active.
#[test]
fn the_seqlock_reader_never_returns_a_torn_snapshot() {
    model(|| {
        let record = Arc::new((AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)));
        let writer = {
            let record = record.clone();
            thread::spawn(move || {
                let (seq, a, b) = &*record;
                seqlock_write(seq, a, b, 1);
                seqlock_write(seq, a, b, 2);
            })
        };
        let (seq, a, b) = &*record;
        if let Some((x, y)) = read_seqlock(seq, 2, || (a.load(Relaxed), b.load(Relaxed))) {
            assert_eq!(x, y, "torn snapshot: level from one write, cpu_some_avg10 from another");
        }
        writer.join().unwrap();
    });
}

/// (d') A writer that stays odd (killed mid-update) cannot stall the reader: it gives up.
#[test]
fn the_seqlock_reader_gives_up_on_a_parked_writer() {
    model(|| {
        let seq = AtomicU32::new(3);
        let data = AtomicU32::new(0);
        assert_eq!(read_seqlock(&seq, morpheus_abi::SEQLOCK_MAX_RETRIES, || data.load(Relaxed)), None);
    });
}
