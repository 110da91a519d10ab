// SPDX-License-Identifier: GPL-2.0-only
//! What the agent publishes through its stats socket: one [`Metrics`] snapshot per request, in the
//! scx_stats schema (`#[derive(Stats)]`: `scx_morpheus --help-stats` lists every field). Counters are
//! cumulative since the agent started; a reader that wants rates takes the difference of two
//! snapshots (as `--stats`/`--monitor` do, [`Metrics::format`]).
//!
//! Readers: `scx_morpheus --stats/--monitor`, `morpheus top`, the OpenMetrics endpoint (--metrics),
//! and the tests, which read this structure, never a printed line.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;

use anyhow::Result;
use morpheus_abi as abi;
use morpheus_policy_ffi::GateVerdict;
use scx_stats::prelude::*;
use scx_stats_derive::Stats;
use serde::{Deserialize, Serialize};

use crate::stats::{Counters, Percentiles};
use crate::watch::WorkerView;

/// The agent's counters, the machine's pressure and the registered workers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(top, desc = "scx_morpheus: counters since start, pressure, reaction times and the registered workers")]
pub struct Metrics {
    #[stat(desc = "scx_morpheus version and build id")]
    pub version: String,
    #[stat(desc = "Backend: KERNEL (sched_ext) or SIM")]
    pub backend: String,
    #[stat(desc = "Scheduler mode (OBSERVER, ENFORCED)")]
    pub mode: String,
    #[stat(desc = "Escalation policy (NONE, THREAD_KICK, CGROUP_THROTTLE, HYBRID)")]
    pub policy: String,
    #[stat(desc = "Slice in microseconds")]
    pub slice_us: u64,
    #[stat(desc = "Grace in microseconds")]
    pub grace_us: u64,
    #[stat(desc = "Region generation (changes with every start)")]
    pub generation: u64,
    #[stat(desc = "Where --metrics serves OpenMetrics (ADDR:PORT; empty when off)")]
    pub metrics_address: String,
    #[stat(desc = "Milliseconds since the agent started")]
    pub uptime_ms: u64,
    #[stat(desc = "Workers registered now (gauge)")]
    pub nr_workers: u64,
    #[stat(desc = "Registered workers by the runtime_mode their runtime reports (gauge)")]
    pub workers_by_runtime_mode: BTreeMap<String, u64>,
    #[stat(desc = "Backend ticks (sim) or BPF timer runs (kernel)")]
    pub ticks: u64,
    #[stat(desc = "Hints emitted (preempt_seq increments)")]
    pub hints_emitted: u64,
    #[stat(desc = "Hints dropped: rate limited with no request pending, or lost to a full ring")]
    pub hints_dropped: u64,
    #[stat(desc = "Escalations applied (every policy; gate_verdicts.escalate counts the gate's verdicts)")]
    pub escalations: u64,
    #[stat(desc = "Escalations applied, by the escalation policy in force")]
    pub escalations_by_policy: BTreeMap<String, u64>,
    #[stat(desc = "Gate evaluations past the slice, by verdict (escalate, or what blocked it)")]
    pub gate_verdicts: BTreeMap<String, u64>,
    #[stat(desc = "Escalation actions taken or undone, by action")]
    pub actions: BTreeMap<String, u64>,
    #[stat(desc = "Escalations that fell back from the configured effect")]
    pub fallbacks: u64,
    #[stat(desc = "Errors applying or lifting an effect")]
    pub effect_errors: u64,
    #[stat(desc = "Effects not applied or undone at once: the worker was in a critical section")]
    pub spared_in_critical: u64,
    #[stat(desc = "Effects seen in force inside a critical section")]
    pub held_in_critical: u64,
    #[stat(desc = "The machine's pressure as the agent last sampled it")]
    pub pressure: PressureStats,
    #[stat(desc = "Reaction times: hint (overrun -> hint), escalation (grace expiry -> escalation), acknowledgement (hint -> ack)")]
    pub reactions: BTreeMap<String, ReactionStats>,
    #[stat(desc = "Counters only this backend has (kernel: the BPF program's)")]
    pub backend_counters: BTreeMap<String, u64>,
    #[stat(desc = "Escalation events since start (sim backend; the kernel's are counted in actions)")]
    pub events_total: u64,
    #[stat(desc = "The most recent escalation events, oldest first")]
    pub recent_events: Vec<EventStats>,
    #[stat(desc = "Every registered worker")]
    pub workers: Vec<WorkerStats>,
}

/// The pressure record the agent publishes in every region.
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(desc = "Machine pressure")]
pub struct PressureStats {
    #[stat(desc = "pressure_level (NONE, LOW, MEDIUM, HIGH)")]
    pub level: String,
    #[stat(desc = "PSI cpu some avg10, percent")]
    pub cpu_some_avg10: f64,
    #[stat(desc = "PSI io some avg10, percent")]
    pub io_some_avg10: f64,
    #[stat(desc = "PSI memory some avg10, percent")]
    pub memory_some_avg10: f64,
    #[stat(desc = "Runnable tasks beyond the number of CPUs")]
    pub runqueue_depth: u64,
}

/// A latency distribution.
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(desc = "Latency distribution: percentiles over the recent samples, count and max since start")]
pub struct ReactionStats {
    #[stat(desc = "Samples since start")]
    pub count: u64,
    #[stat(desc = "Median, microseconds")]
    pub p50_us: f64,
    #[stat(desc = "90th percentile, microseconds")]
    pub p90_us: f64,
    #[stat(desc = "99th percentile, microseconds")]
    pub p99_us: f64,
    #[stat(desc = "Maximum since start, microseconds")]
    pub max_us: f64,
}

impl From<Percentiles> for ReactionStats {
    fn from(p: Percentiles) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        ReactionStats { count: p.count, p50_us: us(p.p50_ns), p90_us: us(p.p90_ns), p99_us: us(p.p99_ns), max_us: us(p.max_ns) }
    }
}

/// One escalation_event record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(desc = "An escalation action taken or undone")]
pub struct EventStats {
    #[stat(desc = "CLOCK_MONOTONIC nanoseconds")]
    pub t_ns: u64,
    #[stat(desc = "escalation_action name")]
    pub action: String,
    #[stat(desc = "escalation_policy name")]
    pub policy: String,
    pub slot: u64,
    pub tid: u64,
    pub pid: u64,
    #[stat(desc = "The request escalated for (0 when undoing)")]
    pub preempt_seq: u64,
    #[stat(desc = "Microseconds past slice + grace")]
    pub overrun_us: u64,
}

impl From<&abi::EscalationEvent> for EventStats {
    fn from(e: &abi::EscalationEvent) -> Self {
        EventStats {
            t_ns: e.timestamp_ns,
            action: abi::EscalationAction::try_from(e.action).map(|a| a.name()).unwrap_or("UNKNOWN").into(),
            policy: abi::EscalationPolicy::try_from(e.policy).map(|p| p.name()).unwrap_or("UNKNOWN").into(),
            slot: e.slot.into(),
            tid: e.tid.into(),
            pid: e.pid.into(),
            preempt_seq: e.preempt_seq,
            overrun_us: e.overrun_ns / 1000,
        }
    }
}

/// One registered worker. Identity (slot, pid, tid, uid, comm) is the agent's; the runtime-written
/// fields are what the worker's runtime reports in its SCB.
#[derive(Clone, Debug, Default, Serialize, Deserialize, Stats)]
#[stat(desc = "A registered worker")]
pub struct WorkerStats {
    #[stat(desc = "The agent's slot number")]
    pub slot: u64,
    pub pid: u64,
    pub tid: u64,
    pub uid: u64,
    #[stat(desc = "Thread name (/proc)")]
    pub comm: String,
    #[stat(desc = "runtime_kind the runtime reports (RUST, C, PYTHON, ...)")]
    pub runtime_kind: String,
    #[stat(desc = "worker_state (REGISTERED, RUNNING, ...)")]
    pub state: String,
    #[stat(desc = "runtime_mode the runtime reports")]
    pub runtime_mode: String,
    #[stat(desc = "Yield requests not acknowledged yet (preempt_seq - last_ack_seq)")]
    pub pending_requests: u64,
    pub preempt_seq: u64,
    pub last_ack_seq: u64,
    #[stat(desc = "Yields the runtime reports")]
    pub yields: u64,
    #[stat(desc = "Yields by reason, sampled at the agent's tick")]
    pub yields_by_reason: BTreeMap<String, u64>,
    #[stat(desc = "Escalations applied to it")]
    pub escalations: u64,
    #[stat(desc = "1 while an escalation episode is open")]
    pub escalated: u64,
    #[stat(desc = "1 inside a critical section (runtime's claim)")]
    pub in_critical: u64,
    #[stat(desc = "1 if it may be escalated (runtime's claim)")]
    pub escapable: u64,
    #[stat(desc = "Advisory priority")]
    pub priority: i64,
    #[stat(desc = "Hints to it that were dropped")]
    pub hints_dropped: u64,
}

fn enum_name<T: TryFrom<u32>>(raw: u32, name: impl Fn(T) -> &'static str) -> String {
    T::try_from(raw).map(name).unwrap_or("UNKNOWN").to_owned()
}

impl From<&WorkerView> for WorkerStats {
    fn from(w: &WorkerView) -> Self {
        WorkerStats {
            slot: w.slot.into(),
            pid: w.pid.into(),
            tid: w.tid.into(),
            uid: w.uid.into(),
            comm: w.comm.clone(),
            runtime_kind: enum_name(w.runtime_kind, abi::RuntimeKind::name),
            state: enum_name(w.worker_state, abi::WorkerState::name),
            runtime_mode: enum_name(w.runtime_mode, abi::RuntimeMode::name),
            pending_requests: w.pending_requests(),
            preempt_seq: w.preempt_seq,
            last_ack_seq: w.last_ack_seq,
            yields: w.yield_count,
            yields_by_reason: w.yields_by_reason.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            escalations: w.escalations.into(),
            escalated: w.escalated.into(),
            in_critical: w.in_critical.into(),
            escapable: w.escapable.into(),
            priority: w.priority.into(),
            hints_dropped: w.hints_dropped.into(),
        }
    }
}

/// The agent's fixed facts, set once at start.
#[derive(Clone, Debug)]
pub struct Identity {
    pub version: String,
    pub backend: abi::Backend,
    pub mode: abi::SchedulerMode,
    pub policy: abi::EscalationPolicy,
    pub slice_ns: u64,
    pub grace_ns: u64,
    pub generation: u64,
    pub metrics_address: Option<std::net::SocketAddr>,
}

/// Everything one snapshot is made of, as the agent's main loop holds it.
pub struct Sources<'a> {
    pub identity: &'a Identity,
    pub uptime_ms: u64,
    pub counters: &'a Counters,
    pub reactions: &'a [(&'static str, Percentiles)],
    pub backend_counters: Vec<(String, u64)>,
    pub pressure: &'a abi::Pressure,
    pub events_total: u64,
    pub recent_events: &'a VecDeque<abi::EscalationEvent>,
    pub workers: &'a [WorkerView],
}

impl Metrics {
    pub fn build(src: Sources<'_>) -> Metrics {
        let c = src.counters;
        let id = src.identity;
        let mut workers_by_runtime_mode: BTreeMap<String, u64> = abi::RuntimeMode::ALL.iter().map(|m| (m.name().to_owned(), 0)).collect();
        for w in src.workers {
            *workers_by_runtime_mode.entry(enum_name(w.runtime_mode, abi::RuntimeMode::name)).or_default() += 1;
        }
        let percent = |hundredths: u32| f64::from(hundredths) / 100.0;
        Metrics {
            version: id.version.clone(),
            backend: id.backend.name().into(),
            mode: id.mode.name().into(),
            policy: id.policy.name().into(),
            slice_us: id.slice_ns / 1000,
            grace_us: id.grace_ns / 1000,
            generation: id.generation,
            metrics_address: id.metrics_address.map(|a| a.to_string()).unwrap_or_default(),
            uptime_ms: src.uptime_ms,
            nr_workers: src.workers.len() as u64,
            workers_by_runtime_mode,
            ticks: c.ticks,
            hints_emitted: c.hints_emitted,
            hints_dropped: c.hints_dropped,
            escalations: c.escalations_by_policy.iter().sum(),
            escalations_by_policy: abi::EscalationPolicy::ALL
                .iter()
                .map(|p| (p.name().to_owned(), c.escalations_by_policy.get(p.raw() as usize).copied().unwrap_or(0)))
                .collect(),
            gate_verdicts: GateVerdict::ALL.iter().map(|v| (v.label().to_owned(), c.gate[*v as usize])).collect(),
            actions: abi::EscalationAction::ALL.iter().map(|a| (a.name().to_owned(), c.actions[a.raw() as usize])).collect(),
            fallbacks: c.fallbacks,
            effect_errors: c.effect_errors,
            spared_in_critical: c.spared_in_critical,
            held_in_critical: c.held_in_critical,
            pressure: PressureStats {
                level: enum_name(src.pressure.level, abi::PressureLevel::name),
                cpu_some_avg10: percent(src.pressure.cpu_some_avg10),
                io_some_avg10: percent(src.pressure.io_some_avg10),
                memory_some_avg10: percent(src.pressure.memory_some_avg10),
                runqueue_depth: src.pressure.runqueue_depth.into(),
            },
            reactions: src.reactions.iter().map(|(k, p)| ((*k).to_owned(), ReactionStats::from(*p))).collect(),
            backend_counters: src.backend_counters.into_iter().collect(),
            events_total: src.events_total,
            recent_events: src.recent_events.iter().map(EventStats::from).collect(),
            workers: src.workers.iter().map(WorkerStats::from).collect(),
        }
    }

    fn map_value(map: &BTreeMap<String, u64>, key: &str) -> u64 {
        map.get(key).copied().unwrap_or(0)
    }

    /// The `--stats`/`--monitor` report of the interval from `earlier` to `self`: rates, then the
    /// interval's gate verdicts and actions, pressure and reaction times.
    pub fn format<W: Write>(&self, earlier: Option<&Metrics>, w: &mut W) -> Result<()> {
        let secs = match earlier {
            Some(e) if self.uptime_ms > e.uptime_ms => (self.uptime_ms - e.uptime_ms) as f64 / 1000.0,
            _ => (self.uptime_ms as f64 / 1000.0).max(1e-3),
        };
        let delta = |now: u64, f: &dyn Fn(&Metrics) -> u64| now.saturating_sub(earlier.map(f).unwrap_or(0));
        let rate = |now: u64, f: &dyn Fn(&Metrics) -> u64| delta(now, f) as f64 / secs;
        writeln!(
            w,
            "[scx_morpheus] {} {} {} | workers {:>3} | hints {:>7.1}/s dropped {:>6.1}/s | escalations {:>6.1}/s | pressure {} (cpu {:.1}%)",
            self.backend,
            self.mode,
            self.policy,
            self.nr_workers,
            rate(self.hints_emitted, &|m| m.hints_emitted),
            rate(self.hints_dropped, &|m| m.hints_dropped),
            rate(self.escalations, &|m| m.escalations),
            self.pressure.level,
            self.pressure.cpu_some_avg10,
        )?;
        let group = |map: &BTreeMap<String, u64>, old: &dyn Fn(&Metrics) -> &BTreeMap<String, u64>| -> String {
            map.iter()
                .map(|(k, v)| format!("{k}={}", v.saturating_sub(earlier.map(|e| Self::map_value(old(e), k)).unwrap_or(0))))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(w, "               gate [{}]", group(&self.gate_verdicts, &|m| &m.gate_verdicts))?;
        writeln!(w, "               actions [{}]", group(&self.actions, &|m| &m.actions))?;
        let reactions: Vec<String> = self
            .reactions
            .iter()
            .map(|(k, r)| format!("{k} n={} p50={:.0}µs p99={:.0}µs max={:.0}µs", r.count, r.p50_us, r.p99_us, r.max_us))
            .collect();
        writeln!(w, "               reaction [{}]", reactions.join(" | "))?;
        Ok(())
    }
}

/// The whole schema, for `--help-stats`.
pub fn server_meta() -> Vec<StatsMeta> {
    vec![Metrics::meta(), PressureStats::meta(), ReactionStats::meta(), EventStats::meta(), WorkerStats::meta()]
}
