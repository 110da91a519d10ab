/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The scheduler's decisions as pure functions: the one source of the policy, compiled into the BPF
 * program (src/bpf/main.bpf.c) and into the agent's simulation backend (through src/policy/policy.c),
 * and tested table-driven by policy_test.cc. Normative text: spec/SCB.md, "Escalation gate" and
 * "Hints". Callers load the SCB and header fields with the orders SCB.md gives, at decision time, and
 * pass the values here; nothing in this file touches memory shared with a runtime.
 */
#ifndef MORPHEUS_POLICY_H
#define MORPHEUS_POLICY_H

#include "../../../abi/c/morpheus_abi.h"

/* Why the gate said no, or that it said yes. Counters are kept per verdict. */
enum morpheus_gate_verdict {
	MORPHEUS_GATE_ESCALATE = 0,
	MORPHEUS_GATE_BLOCKED_MODE,           /* scheduler is in observer mode */
	MORPHEUS_GATE_BLOCKED_POLICY_NONE,    /* escalation policy is NONE */
	MORPHEUS_GATE_BLOCKED_STATE,          /* worker is not RUNNING */
	MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE,  /* worker did not opt in */
	MORPHEUS_GATE_BLOCKED_CRITICAL,       /* worker is inside a critical section */
	MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED,   /* no unacknowledged request */
	MORPHEUS_GATE_BLOCKED_WITHIN_GRACE,   /* has not yet run past slice + grace */
	MORPHEUS_GATE_NR_VERDICTS,
};

/* Everything the gate looks at, as loaded at decision time. */
struct morpheus_gate_input {
	morpheus_u32 scheduler_mode;    /* region_header.scheduler_mode */
	morpheus_u32 escalation_policy; /* region_header.escalation_policy */
	morpheus_u32 worker_state;      /* scb.worker_state */
	morpheus_u32 escapable;         /* scb.escapable */
	morpheus_u32 in_critical;       /* scb.in_critical */
	morpheus_u32 _pad;
	morpheus_u64 preempt_seq;       /* scb.preempt_seq */
	morpheus_u64 last_ack_seq;      /* scb.last_ack_seq */
	morpheus_u64 runtime_ns;        /* CPU time since the worker's last yield point */
	morpheus_u64 slice_ns;          /* region_header.slice_ns */
	morpheus_u64 grace_ns;          /* region_header.grace_ns */
};

/*
 * The escalation gate. Every condition must hold; the first that fails is reported, in the order
 * below, so counters say why a worker was spared.
 */
static inline enum morpheus_gate_verdict morpheus_gate(const struct morpheus_gate_input *in)
{
	if (in->scheduler_mode != MORPHEUS_SCHEDULER_MODE_ENFORCED)
		return MORPHEUS_GATE_BLOCKED_MODE;
	if (in->escalation_policy == MORPHEUS_ESCALATION_POLICY_NONE)
		return MORPHEUS_GATE_BLOCKED_POLICY_NONE;
	if (in->worker_state != MORPHEUS_WORKER_STATE_RUNNING)
		return MORPHEUS_GATE_BLOCKED_STATE;
	if (!in->escapable)
		return MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE;
	if (in->in_critical)
		return MORPHEUS_GATE_BLOCKED_CRITICAL;
	if (in->preempt_seq <= in->last_ack_seq)
		return MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED;
	/* Written as a subtraction so a huge slice + grace cannot overflow. */
	if (in->runtime_ns <= in->slice_ns || in->runtime_ns - in->slice_ns <= in->grace_ns)
		return MORPHEUS_GATE_BLOCKED_WITHIN_GRACE;
	return MORPHEUS_GATE_ESCALATE;
}

/* What to do about a worker that ran `runtime_ns` since its last yield point. */
enum morpheus_hint_decision {
	MORPHEUS_HINT_NONE = 0,     /* within its slice, or not RUNNING */
	MORPHEUS_HINT_EMIT,         /* bump preempt_seq and publish a hint */
	MORPHEUS_HINT_RATE_LIMITED, /* would hint, but the last one is too recent: count a dropped hint */
};

static inline enum morpheus_hint_decision
morpheus_hint_decide(morpheus_u32 worker_state, morpheus_u64 runtime_ns, morpheus_u64 slice_ns,
		     morpheus_u64 now_ns, morpheus_u64 last_hint_ns, morpheus_u64 min_interval_ns)
{
	if (worker_state != MORPHEUS_WORKER_STATE_RUNNING || runtime_ns <= slice_ns)
		return MORPHEUS_HINT_NONE;
	if (last_hint_ns && now_ns - last_hint_ns < min_interval_ns)
		return MORPHEUS_HINT_RATE_LIMITED;
	return MORPHEUS_HINT_EMIT;
}

/* Which action an escalation takes under a policy: the first step, and the step after a further grace. */
static inline morpheus_u32 morpheus_escalation_action(morpheus_u32 policy, int repeated)
{
	switch (policy) {
	case MORPHEUS_ESCALATION_POLICY_THREAD_KICK:
		return MORPHEUS_ESCALATION_ACTION_KICK;
	case MORPHEUS_ESCALATION_POLICY_CGROUP_THROTTLE:
		return MORPHEUS_ESCALATION_ACTION_THROTTLE;
	case MORPHEUS_ESCALATION_POLICY_HYBRID:
		return repeated ? MORPHEUS_ESCALATION_ACTION_THROTTLE : MORPHEUS_ESCALATION_ACTION_KICK;
	default:
		return 0;
	}
}

/* Pressure level from PSI cpu "some" avg10 in hundredths of a percent (thresholds: pressure_level docs). */
static inline morpheus_u32 morpheus_pressure_level(morpheus_u32 cpu_some_avg10_centi)
{
	if (cpu_some_avg10_centi >= 5000)
		return MORPHEUS_PRESSURE_LEVEL_HIGH;
	if (cpu_some_avg10_centi >= 2000)
		return MORPHEUS_PRESSURE_LEVEL_MEDIUM;
	if (cpu_some_avg10_centi >= 500)
		return MORPHEUS_PRESSURE_LEVEL_LOW;
	return MORPHEUS_PRESSURE_LEVEL_NONE;
}

#endif /* MORPHEUS_POLICY_H */
