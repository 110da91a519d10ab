// SPDX-License-Identifier: GPL-2.0-only
//! Counters every backend keeps, and the periodic report (`--stats`).

use std::fmt::Write as _;
use std::time::Duration;

use morpheus_abi as abi;
use morpheus_policy_ffi::{GateVerdict, GATE_VERDICTS};

/// Size of the per-action counter array: escalation_action values are 1..=N.
pub const ACTION_SLOTS: usize = abi::EscalationAction::ALL.len() + 1;

/// Cumulative counters since start. Backends fill them; [`Counters::delta`] turns two snapshots into
/// the per-interval figures that are printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Ticks run (sim) or events drained (kernel).
    pub ticks: u64,
    /// Hints emitted (preempt_seq increments).
    pub hints_emitted: u64,
    /// Hints rate-limited or lost to a full ring.
    pub hints_dropped: u64,
    /// Gate evaluations by verdict (index = morpheus_gate_verdict); [0] counts escalations decided.
    pub gate: [u64; GATE_VERDICTS],
    /// Escalation actions applied, by escalation_action value (index 0 unused).
    pub actions: [u64; ACTION_SLOTS],
    /// Escalations that could not take the configured effect and fell back (e.g. no writable cgroup).
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
        let mut d = self.clone();
        d.ticks -= earlier.ticks.min(d.ticks);
        d.hints_emitted -= earlier.hints_emitted.min(d.hints_emitted);
        d.hints_dropped -= earlier.hints_dropped.min(d.hints_dropped);
        for (a, b) in d.gate.iter_mut().zip(earlier.gate.iter()) {
            *a -= (*b).min(*a);
        }
        for (a, b) in d.actions.iter_mut().zip(earlier.actions.iter()) {
            *a -= (*b).min(*a);
        }
        d.fallbacks -= earlier.fallbacks.min(d.fallbacks);
        d.effect_errors -= earlier.effect_errors.min(d.effect_errors);
        d.spared_in_critical -= earlier.spared_in_critical.min(d.spared_in_critical);
        d.held_in_critical -= earlier.held_in_critical.min(d.held_in_critical);
        d
    }

    pub fn escalations(&self) -> u64 {
        self.gate[GateVerdict::MORPHEUS_GATE_ESCALATE as usize]
    }

    /// One report line: rates over `interval`, gate verdicts by name, actions by the spec's names.
    pub fn format_line(&self, interval: Duration, mode: u32, policy: u32) -> String {
        let secs = interval.as_secs_f64().max(1e-9);
        let mut line = String::new();
        let mode = abi::SchedulerMode::try_from(mode).map(|m| m.name()).unwrap_or("?");
        let policy = abi::EscalationPolicy::try_from(policy).map(|p| p.name()).unwrap_or("?");
        let _ = write!(
            line,
            "mode={mode} policy={policy} workers={} hints={:.0}/s dropped={:.0}/s escalations={:.0}/s",
            self.workers,
            self.hints_emitted as f64 / secs,
            self.hints_dropped as f64 / secs,
            self.escalations() as f64 / secs,
        );
        let _ = write!(line, " blocked[");
        let mut first = true;
        for verdict in GateVerdict::ALL.iter().skip(1) {
            let n = self.gate[*verdict as usize];
            let _ = write!(line, "{}{}={}", if first { "" } else { " " }, verdict.label(), n);
            first = false;
        }
        let _ = write!(line, "] actions[");
        let mut first = true;
        for action in abi::EscalationAction::ALL {
            let n = self.actions[action.raw() as usize];
            let _ = write!(line, "{}{}={}", if first { "" } else { " " }, action.name(), n);
            first = false;
        }
        let _ = write!(line, "] fallbacks={} effect_errors={}", self.fallbacks, self.effect_errors);
        line
    }

    /// Cumulative figures, one `key=value` per counter (printed once at exit; the starvation
    /// benchmark reads this line).
    pub fn format_totals(&self) -> String {
        let mut line = format!(
            "totals: ticks={} hints={} dropped={} escalations={}",
            self.ticks,
            self.hints_emitted,
            self.hints_dropped,
            self.escalations()
        );
        for action in abi::EscalationAction::ALL {
            let _ = write!(line, " {}={}", action.name().to_lowercase(), self.actions[action.raw() as usize]);
        }
        for verdict in GateVerdict::ALL.iter().skip(1) {
            let _ = write!(line, " blocked_{}={}", verdict.label(), self.gate[*verdict as usize]);
        }
        let _ = write!(
            line,
            " fallbacks={} effect_errors={} spared_in_critical={} held_in_critical={}",
            self.fallbacks, self.effect_errors, self.spared_in_critical, self.held_in_critical
        );
        line
    }
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
