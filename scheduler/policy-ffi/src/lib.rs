// SPDX-License-Identifier: GPL-2.0-only
//! The scheduler's decision functions for the agent: `scheduler/src/policy/morpheus_policy.h`,
//! compiled from C (the BPF program compiles the same header), with safe wrappers.

#![no_std]

/// Raw bindgen output for `policy_ffi.h`.
#[allow(non_camel_case_types, non_upper_case_globals, non_snake_case, missing_docs, dead_code, clippy::all)]
pub mod raw {
    include!(concat!(env!("OUT_DIR"), "/policy_bindings.rs"));
}

pub use raw::morpheus_gate_config as GateConfig;
pub use raw::morpheus_gate_input as GateInput;
pub use raw::morpheus_gate_verdict as GateVerdict;
pub use raw::morpheus_hint_decision as HintDecision;
pub use raw::morpheus_escalation as Escalation;
pub use raw::morpheus_escalation_step as EscalationStep;
pub use raw::morpheus_verdict_tally as VerdictTally;
pub use raw::morpheus_yield_point as YieldPoint;

use morpheus_abi::Scb;

/// Number of gate verdicts (for counter arrays indexed by verdict).
pub const GATE_VERDICTS: usize = GateVerdict::MORPHEUS_GATE_NR_VERDICTS as usize;

/// The escalation gate: whether the worker described by `input` may be escalated, or why not.
pub fn gate(input: &GateInput) -> GateVerdict {
    // SAFETY: a pure function of the struct it reads; the reference is valid for the call.
    unsafe { raw::morpheus_ffi_gate(input) }
}

/// The gate's inputs: the SCB's fields loaded with the orders of spec/SCB.md §5.6, the configuration
/// the caller's own (S4: never read back from a region header a runtime can write).
///
/// # Safety
/// `scb` must point to a mapped SCB that stays mapped for the call; other processes may write it
/// concurrently (every load is atomic).
pub unsafe fn gate_load(config: &GateConfig, scb: *const Scb, runtime_ns: u64) -> GateInput {
    let mut input = GateInput::default();
    raw::morpheus_ffi_gate_load(config, scb, runtime_ns, &mut input);
    input
}

/// The escalation state machine's step for one worker (spec/SCB.md §5.6).
pub fn escalation_decide(e: &Escalation, input: &GateInput, verdict: GateVerdict, now_ns: u64, throttle_max_ns: u64) -> EscalationStep {
    // SAFETY: a pure function of the structs it reads.
    unsafe { raw::morpheus_ffi_escalation_decide(e, input, verdict, now_ns, throttle_max_ns) }
}

/// Records a step the caller took (an action opens or advances the episode, a lift closes it).
pub fn escalation_commit(e: &mut Escalation, step: EscalationStep, input: &GateInput, now_ns: u64) {
    // SAFETY: writes only `e`, which the reference makes exclusive.
    unsafe { raw::morpheus_ffi_escalation_commit(e, step, input, now_ns) }
}

/// Whether an effect may hold the worker now: in_critical loaded again (acquire), where the effect
/// takes hold.
///
/// # Safety
/// `scb` must point to a mapped SCB for the call.
pub unsafe fn effect_may_hold(scb: *const Scb) -> bool {
    raw::morpheus_ffi_effect_may_hold(scb) != 0
}

impl EscalationStep {
    /// Every step, in the order of the enum (index = value).
    pub const ALL: [EscalationStep; EscalationStep::MORPHEUS_NR_STEPS as usize] = [
        EscalationStep::MORPHEUS_STEP_NONE,
        EscalationStep::MORPHEUS_STEP_KICK,
        EscalationStep::MORPHEUS_STEP_THROTTLE,
        EscalationStep::MORPHEUS_STEP_LIFT_ACKNOWLEDGED,
        EscalationStep::MORPHEUS_STEP_LIFT_NOT_RUNNING,
        EscalationStep::MORPHEUS_STEP_LIFT_CRITICAL,
        EscalationStep::MORPHEUS_STEP_LIFT_REVOKED,
        EscalationStep::MORPHEUS_STEP_LIFT_EXPIRED,
    ];

    /// The escalation_action value this step takes, if it is an action.
    pub fn action(self) -> Option<u32> {
        // SAFETY: pure function of its argument.
        let action = unsafe { raw::morpheus_ffi_step_action(self) };
        (action != 0).then_some(action)
    }

    /// Whether this action step changes anything when the episode's effect is a demotion that stands
    /// until the lift (`demotion_stands`): a repeated KICK does not, and is then no action at all
    /// (not taken, counted or committed).
    pub fn takes_effect(self, demotion_stands: bool) -> bool {
        // SAFETY: pure function of its arguments.
        unsafe { raw::morpheus_ffi_step_takes_effect(self, demotion_stands as core::ffi::c_int) != 0 }
    }

    /// Whether the step lifts an open episode.
    pub fn is_lift(self) -> bool {
        self.lift_reason().is_some()
    }

    /// Why a lift step lifts, for logs and stats; None for other steps.
    pub const fn lift_reason(self) -> Option<&'static str> {
        match self {
            EscalationStep::MORPHEUS_STEP_LIFT_ACKNOWLEDGED => Some("acknowledged"),
            EscalationStep::MORPHEUS_STEP_LIFT_NOT_RUNNING => Some("not_running"),
            EscalationStep::MORPHEUS_STEP_LIFT_CRITICAL => Some("critical"),
            EscalationStep::MORPHEUS_STEP_LIFT_REVOKED => Some("revoked"),
            EscalationStep::MORPHEUS_STEP_LIFT_EXPIRED => Some("expired"),
            _ => None,
        }
    }
}

/// Whether a worker that ran `runtime_ns` since its last yield point gets a hint now; a rate-limited one
/// is a dropped hint only with no request pending (`preempt_seq` = `last_ack_seq`; SCB.md §5.2, 1.5).
#[allow(clippy::too_many_arguments)]
pub fn hint_decide(
    worker_state: u32,
    runtime_ns: u64,
    slice_ns: u64,
    now_ns: u64,
    last_hint_ns: u64,
    min_interval_ns: u64,
    preempt_seq: u64,
    last_ack_seq: u64,
) -> HintDecision {
    // SAFETY: pure function of its arguments.
    unsafe { raw::morpheus_ffi_hint_decide(worker_state, runtime_ns, slice_ns, now_ns, last_hint_ns, min_interval_ns, preempt_seq, last_ack_seq) }
}

/// Whether a hint decision counts a dropped hint (increments `hints_dropped`).
pub fn hint_dropped(hint: HintDecision) -> bool {
    // SAFETY: pure function of its argument.
    unsafe { raw::morpheus_ffi_hint_dropped(hint) != 0 }
}

/// Whether this decision runs the escalation gate for a worker, given its episode and the hint the
/// same decision took (never in the decision that has just made the request).
pub fn gate_due(episode_open: bool, hint: HintDecision, runtime_ns: u64, slice_ns: u64) -> bool {
    // SAFETY: pure function of its arguments.
    unsafe { raw::morpheus_ffi_gate_due(episode_open as core::ffi::c_int, hint, runtime_ns, slice_ns) != 0 }
}

/// The escalation_action value an escalation under `policy` takes (0 for none); `repeated` selects
/// the step after a further grace period (HYBRID).
pub fn escalation_action(policy: u32, repeated: bool) -> u32 {
    // SAFETY: pure function of its arguments.
    unsafe { raw::morpheus_ffi_escalation_action(policy, repeated as core::ffi::c_int) }
}

/// pressure_level for a PSI cpu "some" avg10 in hundredths of a percent.
pub fn pressure_level(cpu_some_avg10_centi: u32) -> u32 {
    // SAFETY: pure function of its argument.
    unsafe { raw::morpheus_ffi_pressure_level(cpu_some_avg10_centi) }
}

/// Why the worker's slice starts afresh at this look (spec/SCB.md §5.2), or `MORPHEUS_YIELD_POINT_NONE`:
/// not RUNNING, `last_ack_seq` moved since `seen_ack_seq`, or it `slept` voluntarily. Nothing else (a
/// `yield_count` move without an acknowledgement) is a yield point.
pub fn yield_point(seen_ack_seq: u64, last_ack_seq: u64, worker_state: u32, slept: bool) -> YieldPoint {
    // SAFETY: pure function of its arguments.
    unsafe { raw::morpheus_ffi_yield_point(seen_ack_seq, last_ack_seq, worker_state, slept as core::ffi::c_int) }
}

/// Whether a gate verdict is counted now: by a decision that `may_act`, past the slice, once per
/// (pending request, verdict); records it in `tally`.
pub fn verdict_count(tally: &mut VerdictTally, may_act: bool, runtime_ns: u64, slice_ns: u64, preempt_seq: u64, verdict: GateVerdict) -> bool {
    // SAFETY: writes only `tally`, which the reference makes exclusive.
    unsafe { raw::morpheus_ffi_verdict_count(tally, may_act as core::ffi::c_int, runtime_ns, slice_ns, preempt_seq, verdict) != 0 }
}

impl HintDecision {
    /// Every hint decision, in the order of the enum (index = value).
    pub const ALL: [HintDecision; 4] = [
        HintDecision::MORPHEUS_HINT_NONE,
        HintDecision::MORPHEUS_HINT_EMIT,
        HintDecision::MORPHEUS_HINT_RATE_LIMITED,
        HintDecision::MORPHEUS_HINT_PENDING,
    ];
}

impl GateVerdict {
    /// Every verdict, in the order of the enum (index = value).
    pub const ALL: [GateVerdict; GATE_VERDICTS] = [
        GateVerdict::MORPHEUS_GATE_ESCALATE,
        GateVerdict::MORPHEUS_GATE_BLOCKED_MODE,
        GateVerdict::MORPHEUS_GATE_BLOCKED_POLICY_NONE,
        GateVerdict::MORPHEUS_GATE_BLOCKED_STATE,
        GateVerdict::MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE,
        GateVerdict::MORPHEUS_GATE_BLOCKED_CRITICAL,
        GateVerdict::MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED,
        GateVerdict::MORPHEUS_GATE_BLOCKED_WITHIN_GRACE,
    ];

    /// Short name for logs and stats.
    pub const fn label(self) -> &'static str {
        match self {
            GateVerdict::MORPHEUS_GATE_ESCALATE => "escalate",
            GateVerdict::MORPHEUS_GATE_BLOCKED_MODE => "mode",
            GateVerdict::MORPHEUS_GATE_BLOCKED_POLICY_NONE => "policy_none",
            GateVerdict::MORPHEUS_GATE_BLOCKED_STATE => "state",
            GateVerdict::MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE => "not_escapable",
            GateVerdict::MORPHEUS_GATE_BLOCKED_CRITICAL => "critical",
            GateVerdict::MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED => "acknowledged",
            GateVerdict::MORPHEUS_GATE_BLOCKED_WITHIN_GRACE => "within_grace",
            GateVerdict::MORPHEUS_GATE_NR_VERDICTS => "invalid",
        }
    }
}
