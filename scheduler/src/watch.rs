// SPDX-License-Identifier: GPL-2.0-only
//! The agent's view of each registered worker, for the stats (`morpheus top`, `--monitor`).
//!
//! Who a worker is (slot, tid, pid, uid) comes from the agent's own table ([`Workers`], checked at
//! registration, S3); everything else is read from the worker's SCB. The runtime-written fields
//! (state, yields, in_critical, escapable, priority, runtime kind and mode) are what the runtime
//! claims: shown as such, never used to decide anything here.
//!
//! The SCB keeps only a total of yields and the reason of the latest one, so yields by reason are
//! sampled: at each agent tick, the yields counted since the previous tick are attributed to the
//! reason the SCB shows then. Several yields of different reasons between two ticks are all
//! attributed to the last one. Likewise the acknowledgement latency (hint -> acknowledgement) is seen
//! at tick resolution.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use morpheus_abi as abi;

use crate::domains::{Assigned, Workers};
use crate::stats::Samples;

/// What the agent remembers of one slot between two ticks.
struct Seen {
    /// The slot's owner and where its SCB is, as of the last scan of the table.
    assigned: Assigned,
    yield_count: u64,
    /// Yields by yield_reason value (index: the reason's raw value; out-of-range reasons go last).
    yields_by_reason: [u64; REASON_SLOTS],
    /// A request was pending at the previous tick (preempt_seq > last_ack_seq).
    pending: bool,
}

/// One slot per yield_reason value, plus one for values this agent does not know.
const REASON_SLOTS: usize = abi::YieldReason::ALL.len() + 1;

/// A worker as the stats show it.
#[derive(Clone, Debug)]
pub struct WorkerView {
    pub slot: u32,
    pub tid: u32,
    pub pid: u32,
    pub uid: u32,
    pub comm: String,
    pub runtime_kind: u32,
    pub worker_state: u32,
    pub runtime_mode: u32,
    pub preempt_seq: u64,
    pub last_ack_seq: u64,
    pub yield_count: u64,
    /// (reason name, yields) for every reason with at least one yield.
    pub yields_by_reason: Vec<(&'static str, u64)>,
    pub escalations: u32,
    pub escalated: u32,
    pub in_critical: u32,
    pub escapable: u32,
    pub priority: i32,
    pub hints_dropped: u32,
}

impl WorkerView {
    /// Yield requests the worker has not acknowledged yet.
    pub fn pending_requests(&self) -> u64 {
        self.preempt_seq.saturating_sub(self.last_ack_seq)
    }
}

/// How often the slot table is scanned for workers that came or went. Between scans only the known
/// workers' SCBs are read, so an agent with no worker does (almost) nothing per tick.
const SCAN_INTERVAL_NS: u64 = 20_000_000;

/// Samples every registered worker at the agent's tick.
#[derive(Default)]
pub struct WorkerWatch {
    seen: HashMap<u32, Seen>,
    next_scan_ns: u64,
    /// Hint -> acknowledgement, as seen at tick resolution.
    pub acknowledgement: Samples,
}

fn reason_index(raw: u32) -> usize {
    (raw as usize).min(REASON_SLOTS - 1)
}

fn same_owner(a: &Assigned, b: &Assigned) -> bool {
    std::sync::Arc::ptr_eq(&a.thread, &b.thread) && a.local == b.local && std::sync::Arc::ptr_eq(&a.domain, &b.domain)
}

impl WorkerWatch {
    /// One sample of every known worker at `now_ns` (CLOCK_MONOTONIC, the clock of last_hint_ns); the
    /// table is rescanned every SCAN_INTERVAL_NS (a worker registered since is picked up then, its
    /// earlier yields attributed to the reason its SCB shows at that first sample).
    pub fn sample(&mut self, workers: &Workers, now_ns: u64) {
        if now_ns >= self.next_scan_ns {
            self.next_scan_ns = now_ns + SCAN_INTERVAL_NS;
            let assigned = workers.assigned();
            self.seen.retain(|slot, seen| assigned.iter().any(|(s, a)| s == slot && same_owner(a, &seen.assigned)));
            for (slot, a) in assigned {
                self.seen.entry(slot).or_insert_with(|| Seen {
                    assigned: a,
                    yield_count: 0,
                    yields_by_reason: [0; REASON_SLOTS],
                    pending: false,
                });
            }
        }
        for seen in self.seen.values_mut() {
            let scb = seen.assigned.domain.region.scb(seen.assigned.local);
            let yields = scb.yield_count().load(Ordering::Relaxed);
            let reason = scb.last_yield_reason().load(Ordering::Relaxed);
            let seq = scb.preempt_seq().load(Ordering::Acquire);
            let ack = scb.last_ack_seq().load(Ordering::Acquire);
            // The SCB is the runtime's to write (any value, any order): the sum wraps, never panics.
            if yields > seen.yield_count {
                let by_reason = &mut seen.yields_by_reason[reason_index(reason)];
                *by_reason = by_reason.wrapping_add(yields - seen.yield_count);
            }
            seen.yield_count = yields;
            let pending = seq > ack;
            if seen.pending && !pending {
                let hint_ns = scb.last_hint_ns().load(Ordering::Relaxed);
                if hint_ns != 0 && hint_ns <= now_ns {
                    self.acknowledgement.push(now_ns - hint_ns);
                }
            }
            seen.pending = pending;
        }
    }

    /// Every registered worker, by slot.
    pub fn view(&self, workers: &Workers) -> Vec<WorkerView> {
        let mut out = Vec::new();
        for (slot, a) in workers.assigned() {
            let scb = a.domain.region.scb(a.local);
            let by_reason = self.seen.get(&slot).filter(|s| same_owner(&s.assigned, &a)).map(|s| s.yields_by_reason);
            let yields_by_reason = match by_reason {
                Some(counts) => counts
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(i, n)| (abi::YieldReason::try_from(i as u32).map(|r| r.name()).unwrap_or("UNKNOWN"), *n))
                    .collect(),
                None => Vec::new(),
            };
            out.push(WorkerView {
                slot,
                tid: a.tid,
                pid: a.pid,
                uid: a.uid,
                comm: comm(a.pid, a.tid),
                runtime_kind: scb.runtime_kind().load(Ordering::Relaxed),
                worker_state: scb.worker_state().load(Ordering::Acquire),
                runtime_mode: scb.runtime_mode().load(Ordering::Relaxed),
                preempt_seq: scb.preempt_seq().load(Ordering::Acquire),
                last_ack_seq: scb.last_ack_seq().load(Ordering::Acquire),
                yield_count: scb.yield_count().load(Ordering::Relaxed),
                yields_by_reason,
                escalations: scb.escalations().load(Ordering::Relaxed),
                escalated: scb.escalated().load(Ordering::Relaxed),
                in_critical: scb.in_critical().load(Ordering::Acquire),
                escapable: scb.escapable().load(Ordering::Acquire),
                priority: scb.priority().load(Ordering::Relaxed),
                hints_dropped: scb.hints_dropped().load(Ordering::Relaxed),
            });
        }
        out
    }
}

/// The thread's name as the kernel reports it (read by the agent, not taken from the worker).
fn comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).map(|s| s.trim_end().to_owned()).unwrap_or_else(|_| "?".into())
}
