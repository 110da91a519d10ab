// SPDX-License-Identifier: Apache-2.0 OR MIT
//! A worker's slow-path state ([`Inner`], owned by the thread's [`RawWorker`]) and the checkpoint's
//! slow path: deciding a yield, acknowledging it (spec/SCB.md §5.1) and the runtime modes (§5.4).

use std::{path::PathBuf, ptr::addr_of, sync::atomic::Ordering, sync::Arc};

use morpheus_abi::{PressureLevel, RuntimeKind, RuntimeMode, Scb, YieldReason};

use crate::{
    agent::AgentConnection,
    config::Config,
    lifeline::{notice, Instance, NoticeLevel},
    protocol,
    registration::reattach,
    raw::{generation_ok, inner, lose, RawWorker, FORCE_SLOW_PATH},
    region::{DetachReason, Region},
    sys::{self, a32, a64},
};

/// Per-reason yield counters of one worker (the SDK's own memory, §5.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct YieldCounts(pub(crate) [u64; YIELD_REASONS]);

const YIELD_REASONS: usize = YieldReason::ALL.len();

impl YieldCounts {
    /// Yields for `reason`.
    pub fn get(&self, reason: YieldReason) -> u64 {
        self.0[reason.raw() as usize]
    }

    /// Yields for any reason.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

pub(crate) enum Channel {
    Agent(AgentConnection),
    Direct,
    None,
}

/// Slow-path state of a worker.
pub(crate) struct Inner {
    pub(crate) region: Option<Arc<Region>>,
    pub(crate) scb: *mut Scb,
    pub(crate) slot: Option<u32>,
    pub(crate) slot_generation: u32,
    pub(crate) channel: Channel,
    pub(crate) kind: RuntimeKind,
    pub(crate) epoch: u64,
    /// The last acknowledged `preempt_seq` (also in `cached_ack` in DETERMINISTIC mode).
    pub(crate) acked: u64,
    /// The generation found when a restart detached the worker.
    pub(crate) lost: Option<u64>,
    pub(crate) detach_reason: Option<DetachReason>,
    /// What exactly made the worker detached or kept it from registering again (§6.1).
    pub(crate) detach_detail: Option<String>,
    pub(crate) mode: RuntimeMode,
    pub(crate) last_hints_dropped: u32,
    pub(crate) last_yield_ns: u64,
    pub(crate) last_mode_eval_ns: u64,
    pub(crate) counts: YieldCounts,
    pub(crate) escapable: bool,
    pub(crate) priority: i32,
    /// The options of the registration, for registering again after a restart (§6.1).
    pub(crate) config: Config,
    /// The agent instance the worker registered with (None: direct registration, or unknown).
    pub(crate) instance: Option<Arc<Instance>>,
    /// The socket on which the worker waits for a scheduler instance, while it waits (§6.1).
    pub(crate) awaiting: Option<PathBuf>,
    /// How many times the worker registered again on its own.
    pub(crate) reattachments: u64,
    /// Checkpoints that deferred a request for a critical section since the last yield, since when,
    /// and whether a probably leaked section was reported.
    pub(crate) deferred: u64,
    pub(crate) deferred_since_ns: u64,
    pub(crate) leak_noticed: bool,
}

/// Why a checkpoint decided to yield, and what it saw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    pub(crate) raw: usize,
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    pub(crate) reason: YieldReason,
}


/// Checkpoints that found a request deferred by a critical section before the SDK says the section
/// may have been left open (with at least `LEAK_SLICES` slices of time since the first of them).
const LEAK_CHECKPOINTS: u64 = 1000;
const LEAK_SLICES: u64 = 10;

static UNREGISTERED_NOTICED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Decide whether a checkpoint that saw `seq` yields. Writes nothing to the SCB.
pub(crate) unsafe fn prepare(raw: *mut RawWorker, seq: u64) -> Option<Ticket> {
    let Some(inner) = inner(raw) else {
        // A thread that never registered (its one slow path, see RawWorker::UNREGISTERED).
        (*raw).cached_ack = seq;
        if !UNREGISTERED_NOTICED.swap(true, Ordering::Relaxed) {
            notice(
                NoticeLevel::Warning,
                "a checkpoint ran on a thread that holds no worker: its checkpoints never yield \
                 (register the thread first: Worker::register, morpheus.aio.run, morpheus.Worker())",
            );
        }
        return None;
    };
    if (*raw).critical_depth > 0 {
        if inner.awaiting.is_none() {
            inner.note_deferred();
        }
        return None;
    }
    if !generation_ok(raw) {
        lose(raw);
        return None;
    }
    if inner.awaiting.is_some() {
        // The wake sequence moved (or the worker was just lost): a scheduler may be there (§6.1).
        reattach(raw);
        return None;
    }
    let reason = if seq != inner.acked {
        YieldReason::PreemptRequest
    } else {
        inner.mode_yield(raw)?
    };
    Some(Ticket { raw: raw as usize, epoch: inner.epoch, seq, reason })
}

/// Record a yield decided by [`prepare`]: reason, count, then the acknowledging CAS (§5.1).
/// Returns false (writing nothing) if the worker changed or the scheduler restarted meanwhile.
pub(crate) unsafe fn commit(raw: *mut RawWorker, ticket: Ticket) -> bool {
    if ticket.raw != raw as usize {
        return false;
    }
    let Some(inner) = inner(raw) else { return false };
    if inner.epoch != ticket.epoch || inner.scb.is_null() {
        return false;
    }
    if !generation_ok(raw) {
        lose(raw);
        return false;
    }
    let scb = inner.scb;
    a32(addr_of!((*scb).last_yield_reason)).store(ticket.reason.raw(), Ordering::Relaxed);
    a64(addr_of!((*scb).yield_count)).fetch_add(1, Ordering::Relaxed);
    if ticket.seq > inner.acked {
        // Up only, and only to a value read from preempt_seq; cache what the SCB now holds.
        inner.acked = protocol::acknowledge(a64(addr_of!((*scb).last_ack_seq)), ticket.seq);
    }
    inner.counts.0[ticket.reason.raw() as usize] += 1;
    inner.deferred = 0;
    let now = sys::mode_now_ns();
    inner.last_yield_ns = now;
    inner.evaluate_mode(raw, now);
    true
}

impl Inner {
    /// A checkpoint found a request and deferred it for a critical section. Many of them over many
    /// slices mean a section that was probably never exited: say so once per registration.
    fn note_deferred(&mut self) {
        let now = sys::monotonic_ns();
        if self.deferred == 0 {
            self.deferred_since_ns = now;
        }
        self.deferred += 1;
        let slice = self.region.as_ref().map_or(morpheus_abi::DEFAULT_SLICE_NS, |r| r.slice_ns());
        if !self.leak_noticed
            && self.deferred >= LEAK_CHECKPOINTS
            && now.saturating_sub(self.deferred_since_ns) >= LEAK_SLICES.saturating_mul(slice)
        {
            self.leak_noticed = true;
            notice(
                NoticeLevel::Warning,
                &format!(
                    "{} checkpoints over {} ms deferred the scheduler's request because the thread is inside a \
                     critical section: a section that is never exited keeps the worker from ever yielding",
                    self.deferred,
                    now.saturating_sub(self.deferred_since_ns) / 1_000_000
                ),
            );
        }
    }

    /// In PRESSURED / DEFENSIVE mode, whether the SDK yields on its own (§5.4).
    unsafe fn mode_yield(&mut self, raw: *mut RawWorker) -> Option<YieldReason> {
        let region = self.region.as_ref()?;
        let now = sys::mode_now_ns();
        let slice = region.slice_ns();
        let ran_a_slice = now.saturating_sub(self.last_yield_ns) >= slice;
        let reason = match self.mode {
            RuntimeMode::Deterministic => None,
            RuntimeMode::Pressured => {
                let budget = a64(addr_of!((*self.scb).budget_remaining_ns)).load(Ordering::Relaxed);
                (budget == 0 && ran_a_slice).then_some(YieldReason::Budget)
            }
            RuntimeMode::Defensive => ran_a_slice.then_some(YieldReason::Defensive),
        };
        // A yield re-evaluates the mode in commit; otherwise at most once per slice (§5.4).
        if reason.is_none() && now.saturating_sub(self.last_mode_eval_ns) >= slice {
            self.evaluate_mode(raw, now);
        }
        reason
    }

    /// In PRESSURED and DEFENSIVE (§5.4), the `CLOCK_MONOTONIC` time before which a checkpoint that
    /// finds nothing pending decides nothing: no mode yield (it needs a slice since the last yield)
    /// and no evaluation (at most once per slice since the last one), with the slice as loaded now.
    /// Until then such a checkpoint answers "no yield" and writes nothing, as the fast path does. None
    /// in DETERMINISTIC (the fast path compares `preempt_seq` alone) or without a region.
    pub(crate) fn mode_quiet_until_ns(&self) -> Option<u64> {
        if self.mode == RuntimeMode::Deterministic {
            return None;
        }
        let slice = self.region.as_ref()?.slice_ns();
        Some(self.last_yield_ns.min(self.last_mode_eval_ns).saturating_add(slice))
    }

    /// Re-evaluate the runtime mode and publish it; sets `cached_ack` so that only DETERMINISTIC
    /// mode keeps the one-load fast path. Caller has checked the generation.
    pub(crate) unsafe fn evaluate_mode(&mut self, raw: *mut RawWorker, now: u64) {
        let Some(region) = self.region.as_ref() else { return };
        self.last_mode_eval_ns = now;
        let dropped = a32(addr_of!((*self.scb).hints_dropped)).load(Ordering::Relaxed);
        let mode = if dropped != self.last_hints_dropped {
            RuntimeMode::Defensive
        } else if region.pressure().and_then(|p| p.level) == Some(PressureLevel::High) {
            RuntimeMode::Pressured
        } else {
            RuntimeMode::Deterministic
        };
        self.last_hints_dropped = dropped;
        if mode != self.mode {
            self.mode = mode;
            a32(addr_of!((*self.scb).runtime_mode)).store(mode.raw(), Ordering::Relaxed);
        }
        (*raw).cached_ack = if mode == RuntimeMode::Deterministic { self.acked } else { FORCE_SLOW_PATH };
    }
}
