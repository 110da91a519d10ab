// SPDX-License-Identifier: GPL-2.0-only
//! Counters and latency samples every backend keeps. The agent publishes them, with its own view of
//! the workers, through the stats socket (src/snapshot.rs, src/stats_socket.rs).

use std::collections::VecDeque;

use morpheus_abi as abi;
use morpheus_policy_ffi::{GateVerdict, GATE_VERDICTS};

/// Size of the per-action counter array: escalation_action values are 1..=N.
pub const ACTION_SLOTS: usize = abi::EscalationAction::ALL.len() + 1;
/// Size of the per-policy counter array: escalation_policy values are 0..N-1.
pub const POLICY_SLOTS: usize = abi::EscalationPolicy::ALL.len();

/// Cumulative counters since start. Backends fill them; [`Counters::delta`] turns two snapshots into
/// the per-interval figures that are printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Runs of the periodic overrun check over every worker: a tick of the simulation backend, a run of
    /// the BPF timer in the kernel backend (which also decides at each worker's ops.stopping, not
    /// counted here).
    pub ticks: u64,
    /// Hints emitted (preempt_seq increments).
    pub hints_emitted: u64,
    /// Hints dropped: rate limited with no request pending, or lost to a full ring.
    pub hints_dropped: u64,
    /// Gate verdicts by verdict (index = morpheus_gate_verdict), counted by the policy header's rule
    /// (`morpheus_verdict_count`) in every backend: past the slice, once per pending request and verdict,
    /// so a counter reads "requests that got this verdict"; [0] counts requests found escalatable.
    pub gate: [u64; GATE_VERDICTS],
    /// Escalation actions applied, by escalation_action value (index 0 unused).
    pub actions: [u64; ACTION_SLOTS],
    /// Escalations applied (an action taken), by the escalation_policy they were decided under.
    pub escalations_by_policy: [u64; POLICY_SLOTS],
    /// THROTTLE steps whose cgroup cap was not applied (no writable cgroup v2 `cpu.max`, or the write
    /// failed, which also counts in `effect_errors`): the episode's demotion is then its only effect, in
    /// every backend (the sim demotes with SCHED_IDLE, the kernel backend runs an open episode in its
    /// demoted queue).
    pub fallbacks: u64,
    /// Errors applying or lifting an effect (the thread vanished, permission denied, ...).
    pub effect_errors: u64,
    /// Effects not applied, or undone at once, because the worker was in a critical section where the
    /// effect takes hold (spec/SCB.md §5.6: the section began after the decision).
    pub spared_in_critical: u64,
    /// Effects that took hold while the worker was inside a critical section (kernel: a held worker seen
    /// in a section; sim: an effect found in force over a section at a tick, then lifted). Kernel: 0.
    pub held_in_critical: u64,
    /// Workers currently registered (gauge).
    pub workers: u64,
}

impl Counters {
    /// `self - earlier` for every cumulative counter; gauges keep `self`'s value.
    pub fn delta(&self, earlier: &Counters) -> Counters {
        let sub = |a: &mut u64, b: u64| *a -= b.min(*a);
        let mut d = self.clone();
        sub(&mut d.ticks, earlier.ticks);
        sub(&mut d.hints_emitted, earlier.hints_emitted);
        sub(&mut d.hints_dropped, earlier.hints_dropped);
        for (a, b) in d.gate.iter_mut().zip(earlier.gate.iter()) {
            sub(a, *b);
        }
        for (a, b) in d.actions.iter_mut().zip(earlier.actions.iter()) {
            sub(a, *b);
        }
        for (a, b) in d.escalations_by_policy.iter_mut().zip(earlier.escalations_by_policy.iter()) {
            sub(a, *b);
        }
        sub(&mut d.fallbacks, earlier.fallbacks);
        sub(&mut d.effect_errors, earlier.effect_errors);
        sub(&mut d.spared_in_critical, earlier.spared_in_critical);
        sub(&mut d.held_in_critical, earlier.held_in_critical);
        d
    }

    pub fn escalations(&self) -> u64 {
        self.gate[GateVerdict::MORPHEUS_GATE_ESCALATE as usize]
    }
}

/// How many recent samples a [`Samples`] keeps for its percentiles: bounded memory on long runs,
/// and percentiles that describe the recent past rather than the first minutes.
pub const SAMPLE_WINDOW: usize = 8192;

/// Latency samples in nanoseconds: a window of the most recent ones (percentiles), plus the count
/// and maximum since start.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    recent: VecDeque<u64>,
    count: u64,
    max: u64,
}

/// A distribution summary: percentiles over the recent window, count and maximum since start.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl Samples {
    pub fn push(&mut self, v: u64) {
        if self.recent.len() == SAMPLE_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(v);
        self.count += 1;
        self.max = self.max.max(v);
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.recent.is_empty() {
            return Percentiles::default();
        }
        let mut v: Vec<u64> = self.recent.iter().copied().collect();
        v.sort_unstable();
        // Nearest rank: the smallest sample with at least p% of the samples at or below it.
        let rank = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Percentiles { count: self.count, p50_ns: rank(50.0), p90_ns: rank(90.0), p99_ns: rank(99.0), max_ns: self.max }
    }

    /// "n=.. p50=..µs p90=.. p99=.. max=.." or "n=0" (log lines).
    pub fn summary(&self) -> String {
        let p = self.percentiles();
        if p.count == 0 {
            return "n=0".into();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        format!("n={} p50={:.0}µs p90={:.0}µs p99={:.0}µs max={:.0}µs", p.count, us(p.p50_ns), us(p.p90_ns), us(p.p99_ns), us(p.max_ns))
    }
}

/// The scheduler's reaction times a backend measures (both backends, from their own decisions).
#[derive(Clone, Debug, Default)]
pub struct Reactions {
    /// How far past its slice a worker ran when its first hint of an episode was emitted.
    pub hint: Samples,
    /// How far past slice + grace a worker ran when it was escalated (first escalation of an episode).
    pub escalation: Samples,
}

/// One escalation_event as a report line: `event: action=DEMOTE slot=0 tid=... policy=THREAD_KICK ...`.
pub fn format_event(event: &abi::EscalationEvent) -> String {
    let action = abi::EscalationAction::try_from(event.action).map(|a| a.name()).unwrap_or("?");
    let policy = abi::EscalationPolicy::try_from(event.policy).map(|p| p.name()).unwrap_or("?");
    format!(
        "event: action={action} slot={} tid={} pid={} policy={policy} preempt_seq={} overrun_us={} t_ns={}",
        event.slot,
        event.tid,
        event.pid,
        event.preempt_seq,
        event.overrun_ns / 1000,
        event.timestamp_ns
    )
}
