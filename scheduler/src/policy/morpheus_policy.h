/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The scheduler's decisions as pure functions: the one source of the policy, compiled into the BPF
 * program's worker layer and conformance replays (src/bpf/worker.bpf.c, replay.bpf.c), into the agent's simulation backend (through src/policy/policy.c) and
 * into the conformance policy agent (conformance/agents/policy/), and tested table-driven by
 * policy_test.cc. Normative text: spec/SCB.md §5.2 (hints) and §5.6 (escalation gate and its state
 * machine).
 *
 * Shared memory is touched in three places only, morpheus_gate_load(), morpheus_effect_may_hold() and
 * (replays only) morpheus_gate_config_of_header(), through accessors each build defines before
 * including this header: MORPHEUS_LOAD_ACQUIRE(p), MORPHEUS_LOAD_RELAXED(p) and MORPHEUS_FULL_BARRIER(). The defaults below are the C11 builtins
 * (userspace C and C++); the BPF program defines its own (src/bpf/morpheus.bpf.h).
 */
#ifndef MORPHEUS_POLICY_H
#define MORPHEUS_POLICY_H

#include "../../../abi/c/morpheus_abi.h"

#ifndef MORPHEUS_LOAD_ACQUIRE
#define MORPHEUS_LOAD_ACQUIRE(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#endif
#ifndef MORPHEUS_LOAD_RELAXED
#define MORPHEUS_LOAD_RELAXED(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#endif
/* Orders everything the scheduler did before (its effect) against the in_critical load after it. */
#ifndef MORPHEUS_FULL_BARRIER
#define MORPHEUS_FULL_BARRIER() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/* Inlined everywhere: the BPF verifier then sees the loads where the caller's pointers come from. */
#define MORPHEUS_POLICY_FN static inline __attribute__((always_inline))

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
	morpheus_u32 scheduler_mode;    /* morpheus_gate_config (the scheduler's own, S4) */
	morpheus_u32 escalation_policy; /* morpheus_gate_config */
	morpheus_u32 worker_state;      /* scb.worker_state */
	morpheus_u32 escapable;         /* scb.escapable */
	morpheus_u32 in_critical;       /* scb.in_critical */
	morpheus_u32 _pad;
	morpheus_u64 preempt_seq;       /* scb.preempt_seq */
	morpheus_u64 last_ack_seq;      /* scb.last_ack_seq */
	morpheus_u64 runtime_ns;        /* CPU time since the worker's last yield point */
	morpheus_u64 slice_ns;          /* morpheus_gate_config */
	morpheus_u64 grace_ns;          /* morpheus_gate_config */
};

/*
 * The escalation gate. Every condition must hold; the first that fails is reported, in the order
 * below, so counters say why a worker was spared.
 */
MORPHEUS_POLICY_FN enum morpheus_gate_verdict morpheus_gate(const struct morpheus_gate_input *in)
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

/*
 * What to do about a worker that ran `runtime_ns` since its last yield point (SCB.md §5.2): nothing
 * while it is within its slice or not RUNNING; past it, a hint unless one was sent within
 * `min_interval_ns`. A hint so rate limited is a dropped hint (the worker goes DEFENSIVE, §5.4) only
 * when nothing is pending: while the worker's request is unacknowledged (`preempt_seq` differs from
 * `last_ack_seq`) it has already been asked, the hint it would get coalesces into the one it has (§5.1:
 * one yield per observation), so nothing is lost and nothing is counted (1.5; 1.4 counted it).
 */
enum morpheus_hint_decision {
	MORPHEUS_HINT_NONE = 0,     /* within its slice, or not RUNNING */
	MORPHEUS_HINT_EMIT,         /* bump preempt_seq and publish a hint */
	MORPHEUS_HINT_RATE_LIMITED, /* would hint, but the last one is too recent and nothing is pending: count a dropped hint */
	MORPHEUS_HINT_PENDING,      /* would hint, the last one is too recent, its request still unacknowledged: count nothing */
};

MORPHEUS_POLICY_FN enum morpheus_hint_decision
morpheus_hint_decide(morpheus_u32 worker_state, morpheus_u64 runtime_ns, morpheus_u64 slice_ns,
		     morpheus_u64 now_ns, morpheus_u64 last_hint_ns, morpheus_u64 min_interval_ns,
		     morpheus_u64 preempt_seq, morpheus_u64 last_ack_seq)
{
	if (worker_state != MORPHEUS_WORKER_STATE_RUNNING || runtime_ns <= slice_ns)
		return MORPHEUS_HINT_NONE;
	if (last_hint_ns && now_ns - last_hint_ns < min_interval_ns)
		return preempt_seq != last_ack_seq ? MORPHEUS_HINT_PENDING : MORPHEUS_HINT_RATE_LIMITED;
	return MORPHEUS_HINT_EMIT;
}

/* Whether a hint decision counts a dropped hint (increments scb.hints_dropped). */
MORPHEUS_POLICY_FN int morpheus_hint_dropped(enum morpheus_hint_decision hint)
{
	return hint == MORPHEUS_HINT_RATE_LIMITED;
}

/*
 * The hint decision on an SCB as it is now, for the conformance replays (a live backend loads these
 * fields itself, where it also applies the yield-point rule): worker_state and last_ack_seq
 * load-acquire (pairing with the runtime's release store and CAS), preempt_seq and last_hint_ns
 * relaxed (only the scheduler writes them). `runtime_ns` is the scheduler's own measurement; slice and
 * interval are the caller's configuration.
 */
MORPHEUS_POLICY_FN enum morpheus_hint_decision
morpheus_hint_decide_scb(const struct morpheus_scb *scb, morpheus_u64 runtime_ns, morpheus_u64 slice_ns,
			 morpheus_u64 now_ns, morpheus_u64 min_interval_ns)
{
	morpheus_u32 state = MORPHEUS_LOAD_ACQUIRE(&scb->worker_state);
	morpheus_u64 ack = MORPHEUS_LOAD_ACQUIRE(&scb->last_ack_seq);
	morpheus_u64 seq = MORPHEUS_LOAD_RELAXED(&scb->preempt_seq);

	return morpheus_hint_decide(state, runtime_ns, slice_ns, now_ns, MORPHEUS_LOAD_RELAXED(&scb->last_hint_ns),
				    min_interval_ns, seq, ack);
}

/*
 * Whether a decision runs the escalation gate and state machine for a worker, given what the same
 * decision did about its hint: always while an episode is open (it is looked at for its lifts);
 * otherwise only for a worker past its slice, and never in the decision that has just made the request
 * (hint EMIT): the worker has not yet had one checkpoint to see it. Without that, a decision that comes
 * late (a timer or tick delayed by milliseconds, a stalled CPU) finds a cooperative worker past slice +
 * grace for the first time and escalates it for a request published a moment before.
 */
MORPHEUS_POLICY_FN int morpheus_gate_due(int episode_open, enum morpheus_hint_decision hint, morpheus_u64 runtime_ns,
					 morpheus_u64 slice_ns)
{
	if (episode_open)
		return 1;
	if (hint == MORPHEUS_HINT_EMIT)
		return 0;
	return runtime_ns > slice_ns;
}

/* Which action an escalation takes under a policy: the first step, and the step after a further grace. */
MORPHEUS_POLICY_FN morpheus_u32 morpheus_escalation_action(morpheus_u32 policy, int repeated)
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

/*
 * The scheduler's configuration as the gate sees it. A live scheduler passes its own copy (S4, SCB.md
 * §10: the BPF program's load-time data, the simulation backend's command line), never the region
 * header, which every runtime of the region can write; the header only publishes these values.
 */
struct morpheus_gate_config {
	morpheus_u32 scheduler_mode;
	morpheus_u32 escalation_policy;
	morpheus_u64 slice_ns;
	morpheus_u64 grace_ns;
};

/*
 * The configuration a region header image states: for the conformance replays only, whose cases
 * carry their own header (a live scheduler never reads its configuration back from a region).
 */
MORPHEUS_POLICY_FN void morpheus_gate_config_of_header(const struct morpheus_region_header *hdr,
							struct morpheus_gate_config *cfg)
{
	cfg->scheduler_mode = MORPHEUS_LOAD_RELAXED(&hdr->scheduler_mode);
	cfg->escalation_policy = MORPHEUS_LOAD_RELAXED(&hdr->escalation_policy);
	cfg->slice_ns = MORPHEUS_LOAD_RELAXED(&hdr->slice_ns);
	cfg->grace_ns = MORPHEUS_LOAD_RELAXED(&hdr->grace_ns);
}

/*
 * The gate's inputs, loaded at decision time with SCB.md §5.6's orders: a full barrier, worker_state
 * first (acquire: it pairs with the store-release of RUNNING, which follows the registrar's store of
 * escapable and the runtime's of in_critical, so a worker is judged with the values it registered
 * with), then escapable, in_critical and last_ack_seq (acquire, each pairing with the runtime's
 * release store or CAS), preempt_seq; the configuration is the caller's `cfg`. `runtime_ns` is the
 * scheduler's own measurement. Every backend calls this; none loads the gate's inputs itself.
 */
MORPHEUS_POLICY_FN void morpheus_gate_load(const struct morpheus_gate_config *cfg, const struct morpheus_scb *scb,
					   morpheus_u64 runtime_ns, struct morpheus_gate_input *in)
{
	/* The scheduler's half of the in_critical pairing (SCB.md §3.1), as in morpheus_effect_may_hold. */
	MORPHEUS_FULL_BARRIER();
	in->worker_state = MORPHEUS_LOAD_ACQUIRE(&scb->worker_state);
	in->escapable = MORPHEUS_LOAD_ACQUIRE(&scb->escapable);
	in->in_critical = MORPHEUS_LOAD_ACQUIRE(&scb->in_critical);
	in->last_ack_seq = MORPHEUS_LOAD_ACQUIRE(&scb->last_ack_seq);
	in->preempt_seq = MORPHEUS_LOAD_ACQUIRE(&scb->preempt_seq);
	in->scheduler_mode = cfg->scheduler_mode;
	in->escalation_policy = cfg->escalation_policy;
	in->slice_ns = cfg->slice_ns;
	in->grace_ns = cfg->grace_ns;
	in->runtime_ns = runtime_ns;
	in->_pad = 0;
}

/* Load and judge in one call: the verdict on the SCB as it is now, under `cfg`. */
MORPHEUS_POLICY_FN enum morpheus_gate_verdict
morpheus_gate_decide(const struct morpheus_gate_config *cfg, const struct morpheus_scb *scb, morpheus_u64 runtime_ns,
		     struct morpheus_gate_input *in)
{
	morpheus_gate_load(cfg, scb, runtime_ns, in);
	return morpheus_gate(in);
}

/*
 * One worker's escalation episode, the scheduler's private state (one per slot, zeroed when the slot
 * changes hands). An episode opens with the first action taken for an unacknowledged request and
 * stays open (scb.escalated = 1) until it is lifted.
 */
struct morpheus_escalation {
	morpheus_u64 opened_ns;      /* time of the episode's first action */
	morpheus_u64 last_action_ns; /* time of its latest action */
	morpheus_u64 ack_at_open;    /* last_ack_seq when it opened: any change of it is an acknowledgement */
	morpheus_u64 preempt_seq;    /* preempt_seq when it opened (named again by the lifting events) */
	morpheus_u32 open;           /* 1 while an episode is open */
	morpheus_u32 steps;          /* actions taken in it */
	morpheus_u32 throttled;      /* a THROTTLE was taken: the episode's last step */
	morpheus_u32 _pad;
};

/* What the scheduler does about one worker at one decision: nothing, an action, or a lift (and why). */
enum morpheus_escalation_step {
	MORPHEUS_STEP_NONE = 0,
	MORPHEUS_STEP_KICK,              /* take ESCALATION_ACTION_KICK */
	MORPHEUS_STEP_THROTTLE,          /* take ESCALATION_ACTION_THROTTLE */
	MORPHEUS_STEP_LIFT_ACKNOWLEDGED, /* last_ack_seq moved since the episode opened */
	MORPHEUS_STEP_LIFT_NOT_RUNNING,  /* the worker left RUNNING */
	MORPHEUS_STEP_LIFT_CRITICAL,     /* the worker entered a critical section */
	MORPHEUS_STEP_LIFT_REVOKED,      /* observer mode, policy NONE or escapable = 0 now */
	MORPHEUS_STEP_LIFT_EXPIRED,      /* open for throttle_max_ns without any of the above */
	MORPHEUS_NR_STEPS,
};

MORPHEUS_POLICY_FN int morpheus_step_is_lift(enum morpheus_escalation_step step)
{
	return step >= MORPHEUS_STEP_LIFT_ACKNOWLEDGED && step < MORPHEUS_NR_STEPS;
}

/* The escalation_action an action step takes (0 for a step that is no action). */
MORPHEUS_POLICY_FN morpheus_u32 morpheus_step_action(enum morpheus_escalation_step step)
{
	if (step == MORPHEUS_STEP_KICK)
		return MORPHEUS_ESCALATION_ACTION_KICK;
	if (step == MORPHEUS_STEP_THROTTLE)
		return MORPHEUS_ESCALATION_ACTION_THROTTLE;
	return 0;
}

/*
 * The escalation state machine (SCB.md §5.6), given the episode, the gate's inputs and verdict as just
 * loaded, the time, and the bound on an episode (throttle_max_ns). Pure: the caller applies the step
 * and then records it with morpheus_escalation_commit().
 *
 *   open episode:  lifted, first rule that holds: last_ack_seq changed -> ACKNOWLEDGED; not RUNNING ->
 *                  NOT_RUNNING; in_critical -> CRITICAL; observer mode, policy NONE or escapable 0 ->
 *                  REVOKED; now - opened_ns >= throttle_max_ns -> EXPIRED.
 *   gate ESCALATE: no episode -> the policy's first action (KICK; THROTTLE for CGROUP_THROTTLE);
 *                  an open episode repeats once per grace period (now - last_action_ns > grace_ns)
 *                  with the policy's next action (THREAD_KICK: KICK again; HYBRID: THROTTLE), and
 *                  never after a THROTTLE, which holds until the episode is lifted.
 *   otherwise:     nothing (an open episode stays open while the gate only says WITHIN_GRACE).
 */
MORPHEUS_POLICY_FN enum morpheus_escalation_step
morpheus_escalation_decide(const struct morpheus_escalation *e, const struct morpheus_gate_input *in,
			   enum morpheus_gate_verdict verdict, morpheus_u64 now_ns, morpheus_u64 throttle_max_ns)
{
	morpheus_u32 action;

	if (e->open) {
		if (in->last_ack_seq != e->ack_at_open)
			return MORPHEUS_STEP_LIFT_ACKNOWLEDGED;
		if (in->worker_state != MORPHEUS_WORKER_STATE_RUNNING)
			return MORPHEUS_STEP_LIFT_NOT_RUNNING;
		if (in->in_critical)
			return MORPHEUS_STEP_LIFT_CRITICAL;
		if (verdict == MORPHEUS_GATE_BLOCKED_MODE || verdict == MORPHEUS_GATE_BLOCKED_POLICY_NONE ||
		    verdict == MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE)
			return MORPHEUS_STEP_LIFT_REVOKED;
		/* Written as a subtraction; a clock that went backwards never expires an episode early. */
		if (now_ns >= e->opened_ns && now_ns - e->opened_ns >= throttle_max_ns)
			return MORPHEUS_STEP_LIFT_EXPIRED;
	}
	if (verdict != MORPHEUS_GATE_ESCALATE)
		return MORPHEUS_STEP_NONE;
	if (e->open && (e->throttled || now_ns < e->last_action_ns || now_ns - e->last_action_ns <= in->grace_ns))
		return MORPHEUS_STEP_NONE;
	action = morpheus_escalation_action(in->escalation_policy, e->open && e->steps > 0);
	if (action == MORPHEUS_ESCALATION_ACTION_KICK)
		return MORPHEUS_STEP_KICK;
	if (action == MORPHEUS_ESCALATION_ACTION_THROTTLE)
		return MORPHEUS_STEP_THROTTLE;
	return MORPHEUS_STEP_NONE;
}

/*
 * Whether an action step changes anything, given whether the episode's effect is a demotion that
 * stands until the lift (`demotion_stands`: the first kick was carried out by demoting the thread,
 * as the sim backend and the agent of a kernel without sched_ext do). A repeated KICK then finds the
 * demotion in force: it is no action, so it is neither taken, counted in `escalations` nor
 * committed (the episode's last action stays the demotion), and every backend counts one action
 * for what one demotion did. A kick the kernel carries out preempts the CPU again; a THROTTLE
 * always changes the effect.
 */
MORPHEUS_POLICY_FN int morpheus_step_takes_effect(enum morpheus_escalation_step step, int demotion_stands)
{
	return !(step == MORPHEUS_STEP_KICK && demotion_stands);
}

/* Record a step the caller took: an action opens or advances the episode, a lift closes it. */
MORPHEUS_POLICY_FN void morpheus_escalation_commit(struct morpheus_escalation *e, enum morpheus_escalation_step step,
						   const struct morpheus_gate_input *in, morpheus_u64 now_ns)
{
	if (morpheus_step_is_lift(step)) {
		e->opened_ns = 0;
		e->last_action_ns = 0;
		e->ack_at_open = 0;
		e->preempt_seq = 0;
		e->open = 0;
		e->steps = 0;
		e->throttled = 0;
		return;
	}
	if (!morpheus_step_action(step))
		return;
	if (!e->open) {
		e->open = 1;
		e->opened_ns = now_ns;
		e->ack_at_open = in->last_ack_seq;
		e->preempt_seq = in->preempt_seq;
		e->steps = 0;
		e->throttled = 0;
	}
	e->steps++;
	e->last_action_ns = now_ns;
	if (step == MORPHEUS_STEP_THROTTLE)
		e->throttled = 1;
}

/*
 * Why the scheduler starts the worker's slice afresh at a look at it (SCB.md §5.2), in every backend:
 * the runtime of a worker counts from its last yield point, and a yield point is exactly
 *   - not RUNNING: a worker cannot checkpoint before it is RUNNING, so CPU time spent registering (or
 *     quiescing) never counts against a slice;
 *   - ACKNOWLEDGED: last_ack_seq differs from the value seen at the last yield point;
 *   - SLEPT: the thread slept or blocked voluntarily since the scheduler last looked.
 * Nothing else is: a yield that acknowledges nothing (yield_count moves, e.g. a budget yield in the
 * PRESSURED or DEFENSIVE mode, or sched_yield) keeps the thread runnable and its slice running.
 * The first rule that holds is the reason; NONE: the slice goes on.
 */
enum morpheus_yield_point {
	MORPHEUS_YIELD_POINT_NONE = 0,
	MORPHEUS_YIELD_POINT_NOT_RUNNING,
	MORPHEUS_YIELD_POINT_ACKNOWLEDGED,
	MORPHEUS_YIELD_POINT_SLEPT,
};

MORPHEUS_POLICY_FN enum morpheus_yield_point morpheus_yield_point(morpheus_u64 seen_ack_seq, morpheus_u64 last_ack_seq,
								  morpheus_u32 worker_state, int slept)
{
	if (worker_state != MORPHEUS_WORKER_STATE_RUNNING)
		return MORPHEUS_YIELD_POINT_NOT_RUNNING;
	if (last_ack_seq != seen_ack_seq)
		return MORPHEUS_YIELD_POINT_ACKNOWLEDGED;
	if (slept)
		return MORPHEUS_YIELD_POINT_SLEPT;
	return MORPHEUS_YIELD_POINT_NONE;
}

/*
 * The per-verdict gate counters (the stats' "gate", by morpheus_gate_verdict), counted the same way by
 * every backend: a verdict is counted when a decision that may act (the worker is on a CPU in the
 * kernel backend; every tick in the simulation backend, whose effects need no CPU) finds the worker past
 * its slice, and only once per (pending request, verdict): a counter reads as "requests that got this
 * verdict", never as "decisions taken while it held", which would depend on how often a backend looks.
 * A new request, or a new verdict for the same request, is counted again. The tally is the backend's
 * private state of one slot, zeroed when the slot changes hands.
 */
struct morpheus_verdict_tally {
	morpheus_u64 preempt_seq; /* the request last counted */
	morpheus_u32 verdict;     /* the verdict last counted for it */
	morpheus_u32 counted;     /* 1 once anything was counted */
};

/* Whether to count `verdict` for the request `preempt_seq` now; records it in `t` when it does. */
MORPHEUS_POLICY_FN int morpheus_verdict_count(struct morpheus_verdict_tally *t, int may_act, morpheus_u64 runtime_ns,
					      morpheus_u64 slice_ns, morpheus_u64 preempt_seq,
					      enum morpheus_gate_verdict verdict)
{
	if (!may_act || runtime_ns <= slice_ns)
		return 0;
	if (t->counted && t->preempt_seq == preempt_seq && t->verdict == (morpheus_u32)verdict)
		return 0;
	t->preempt_seq = preempt_seq;
	t->verdict = verdict;
	t->counted = 1;
	return 1;
}

/*
 * Where an escalation's effect takes hold (the kernel backend holding a worker back in enqueue, the
 * requeue after a kick; the simulation backend right after demoting or capping), the scheduler loads
 * in_critical again: an effect never holds a worker whose section began after the decision. The full
 * barrier pairs Dekker-style with the runtime's store of in_critical := 1 and its seq_cst fence
 * (SCB.md §3.1): either this load sees 1, or the section begins after the effect is in force.
 */
MORPHEUS_POLICY_FN int morpheus_effect_may_hold(const struct morpheus_scb *scb)
{
	MORPHEUS_FULL_BARRIER();
	return MORPHEUS_LOAD_ACQUIRE(&scb->in_critical) == 0;
}

/*
 * The base policy: how the sched_ext ops (src/bpf/main.bpf.c) order every runnable task of the
 * machine in their shared queue, worker or not. Chosen at load (scx_morpheus --base-order).
 *
 *   DEADLINE: a task's key is a deadline, the time it was queued, plus the CPU time it has
 *     used since it last slept (its weight-scaled "exec runtime", capped at MORPHEUS_BASE_EXEC_CAP_SLICES
 *     base slices), minus a credit for waking often (up to 1/MORPHEUS_BASE_CREDIT_DIV of a slice, in
 *     proportion to its wake-up rate up to MORPHEUS_BASE_RATE_FULL per second). Tasks that sleep before
 *     using much CPU are ordered by when they became runnable (who waited longest goes first), ahead of
 *     tasks that have run long without sleeping; a task queued at t waits behind none queued after
 *     t + cap + credit, so nothing starves.
 *   CPUTIME: the former order, the task that used the least CPU for its weight first (a waking task
 *     credited at most one slice): a worker that has run more waits behind the others even when it has
 *     waited longer. Kept for the before/after of the comparison (scheduler/BENCHMARKS.md).
 *   LAG: CPUTIME's weighted virtual time, but a task enters the queue at most a lag of
 *     1/MORPHEUS_BASE_LAG_DIV of a base slice (of CPU time, so lag * 100 / weight of vtime) behind the
 *     highest key started (vtime_now), instead of a whole slice: whatever CPU a task used less than the
 *     others before, it goes ahead of tasks queued after it by at most that lag, so tasks that keep
 *     waking and sleeping run nearly in the order they became runnable (as EEVDF's lag clamp and
 *     scx_bpfland's slice lag bound a sleeper's credit), and a task that has run long without sleeping
 *     still falls behind them by what it used.
 *   BURST: LAG's key plus a second term, the CPU time the task has used since it last slept (its
 *     weight-scaled exec runtime, as DEADLINE keeps it), capped at MORPHEUS_BASE_EXEC_CAP_SLICES base
 *     slices: among tasks queued together, one that has run long without sleeping goes behind the
 *     ones that woke after short runs by up to that cap, while the lag still bounds what CPU used less
 *     before a sleep buys. The term is in the queue key only, never in the task's vtime (what it is
 *     charged for its runs), so it does not accumulate over the task's queueings; the vtime is kept
 *     apart from the key (struct morpheus_base_task) once the task has run.
 *   SPARE: BURST, but the second term counts only the CPU used since the last sleep beyond
 *     MORPHEUS_BASE_SPARE_MUL times the task's usual burst (its average CPU between two sleeps,
 *     burst_avg_ns): a task that sleeps after short runs and was preempted part-way into one keeps its
 *     place among the tasks waking, while a task that has never slept under this scheduler (a hog:
 *     no usual burst) still goes behind them by its whole exec runtime, up to the cap.
 *   RECENT: BURST, but the second term is 0 while the task has slept recently, and BURST's whole
 *     capped exec runtime otherwise. "Slept recently": it has slept under this scheduler at least
 *     once (last_sleep_ns set) and its exec runtime since that sleep (exec_ns, the count BURST keeps:
 *     CPU time only, scaled by weight) is below MORPHEUS_BASE_RECENT_SLICES base slices. Invariant:
 *     a task's key under RECENT is its BURST vtime raised to the slice-lag floor plus either 0 (it
 *     slept, and has used less than that much CPU since) or min(exec_ns, cap) exactly as under BURST
 *     (it never slept, or has run that long without sleeping); nothing in between. The test counts
 *     CPU, not the wall time since the wake-up, because the wall time includes the queue waits the
 *     order exists to shorten; a hog never sleeps, so it carries the whole term at every queueing,
 *     as under BURST. Why these choices, with the figures: scheduler/BENCHMARKS.md, issue 21.
 *   ARRIVAL: RECENT, but a task that slept recently (RECENT's test) is keyed at the slice-lag floor
 *     itself, vtime_now less the lag when it is queued, whatever its vtime: the CPU it used before
 *     that sleep is not held against it. Tasks that sleep often are so served in the order they were
 *     queued (vtime_now never goes back, and equal keys keep their insertion order), as a FIFO would,
 *     while a task that has run a base slice of CPU without sleeping, or never slept, is keyed as
 *     under RECENT: its vtime raised to the floor plus the capped exec term, behind them.
 * Which of them main.bpf.c uses when none is asked for is scx_morpheus's --base-order default
 * (src/main.rs); the enum's values are the load-time constant main.bpf.c reads.
 */
enum morpheus_base_order {
	MORPHEUS_BASE_ORDER_DEADLINE = 0,
	MORPHEUS_BASE_ORDER_CPUTIME = 1,
	MORPHEUS_BASE_ORDER_LAG = 2,
	MORPHEUS_BASE_ORDER_BURST = 3,
	MORPHEUS_BASE_ORDER_SPARE = 4,
	MORPHEUS_BASE_ORDER_RECENT = 5,
	MORPHEUS_BASE_ORDER_ARRIVAL = 6,
};

/* LAG, BURST, SPARE, RECENT and ARRIVAL orders: the most credit a waking task keeps, as a fraction of a base slice (1 / this). */
#define MORPHEUS_BASE_LAG_DIV 8

/*
 * The credit, in vtime (CPU time * 100 / weight), that a task of `weight` (100 = nice 0, 0 taken as
 * 100) keeps below vtime_now when it is queued: a whole slice under CPUTIME (and for a task cpu.max
 * held, under DEADLINE, which keys its queue by deadline instead), the slice lag under LAG, BURST,
 * SPARE, RECENT and ARRIVAL.
 * Never 0 for a non-zero slice, so a task is never keyed past vtime_now by the floor itself.
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_vtime_credit(morpheus_u32 order, morpheus_u64 slice_ns, morpheus_u64 weight)
{
	morpheus_u64 lag;

	if (order != MORPHEUS_BASE_ORDER_LAG && order != MORPHEUS_BASE_ORDER_BURST && order != MORPHEUS_BASE_ORDER_SPARE &&
	    order != MORPHEUS_BASE_ORDER_RECENT && order != MORPHEUS_BASE_ORDER_ARRIVAL)
		return slice_ns;
	lag = slice_ns / MORPHEUS_BASE_LAG_DIV * 100 / (weight ? weight : 100);
	return lag ? lag : (slice_ns ? 1 : 0);
}

/*
 * A task's key in the vtime-ordered queue: its vtime, raised to vtime_now less `credit` if it is
 * further behind (the times wrap: compared as a signed difference, as the kernel's time_before()).
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_vtime_key(morpheus_u64 vtime, morpheus_u64 vtime_now, morpheus_u64 credit)
{
	morpheus_u64 floor = vtime_now - credit;

	return (long long)(vtime - floor) < 0 ? floor : vtime;
}

/* Cap on the exec runtime a deadline carries, in base slices: the most a task is pushed back. */
#define MORPHEUS_BASE_EXEC_CAP_SLICES 1
/* Wake-ups per second at (and above) which a task gets the whole credit. */
#define MORPHEUS_BASE_RATE_FULL 512
/* The whole credit for waking often: one base slice divided by this. */
#define MORPHEUS_BASE_CREDIT_DIV 4
/* SPARE order: the CPU since the last sleep that goes unpenalised, in multiples of the usual burst. */
#define MORPHEUS_BASE_SPARE_MUL 2
/*
 * RECENT order: a task that slept has slept recently while its exec runtime since is below this many
 * base slices. Equal to MORPHEUS_BASE_EXEC_CAP_SLICES, so the term is 0 or the whole cap.
 */
#define MORPHEUS_BASE_RECENT_SLICES 1
/* Weight of the newest interval in the wake-up rate's (and the usual burst's) moving average: 1 / this. */
#define MORPHEUS_BASE_RATE_SMOOTHING 4

/* What the base policy keeps per task (all zero for a task never seen to run). */
struct morpheus_base_task {
	morpheus_u64 exec_ns;       /* weight-scaled CPU time used since the task last slept */
	morpheus_u64 wake_rate;     /* moving average of its sleeps (so wake-ups) per second */
	morpheus_u64 last_sleep_ns; /* when it last went to sleep; 0: never */
	morpheus_u64 vtime;         /* BURST: its weighted vtime, apart from its queue key; valid if has_vtime */
	morpheus_u64 has_vtime;     /* BURST: 0 until its first run's end (its vtime is its key until then) */
	morpheus_u64 burst_avg_ns;  /* moving average of exec_ns at its sleeps (its usual burst); 0: never slept */
};

/* A run of `scaled_ns` (CPU time scaled by weight) ended: it adds to the exec runtime (saturating). */
MORPHEUS_POLICY_FN void morpheus_base_charge(struct morpheus_base_task *t, morpheus_u64 scaled_ns)
{
	t->exec_ns = t->exec_ns + scaled_ns < t->exec_ns ? ~(morpheus_u64)0 : t->exec_ns + scaled_ns;
}

/*
 * The task goes to sleep at `now_ns`: the exec runtime it ends updates its usual burst (the first
 * sleep sets it), the exec runtime starts again from zero, and the interval since its previous sleep
 * (its period) updates the wake-up rate. The first sleep only notes the time; a clock that did not
 * advance counts as the fastest rate.
 */
MORPHEUS_POLICY_FN void morpheus_base_sleep(struct morpheus_base_task *t, morpheus_u64 now_ns)
{
	if (t->last_sleep_ns && now_ns >= t->last_sleep_ns) {
		morpheus_u64 interval = now_ns - t->last_sleep_ns, rate;

		rate = interval ? 1000000000ULL / interval : MORPHEUS_BASE_RATE_FULL;
		if (rate > MORPHEUS_BASE_RATE_FULL)
			rate = MORPHEUS_BASE_RATE_FULL;
		t->wake_rate = t->wake_rate - t->wake_rate / MORPHEUS_BASE_RATE_SMOOTHING + rate / MORPHEUS_BASE_RATE_SMOOTHING;
	}
	if (t->last_sleep_ns)
		t->burst_avg_ns = t->burst_avg_ns - t->burst_avg_ns / MORPHEUS_BASE_RATE_SMOOTHING + t->exec_ns / MORPHEUS_BASE_RATE_SMOOTHING;
	else
		t->burst_avg_ns = t->exec_ns;
	t->last_sleep_ns = now_ns;
	t->exec_ns = 0;
}

/* The credit of a task waking `wake_rate` times a second, for a base slice of `slice_ns`. */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_wake_credit(morpheus_u64 wake_rate, morpheus_u64 slice_ns)
{
	morpheus_u64 rate = wake_rate < MORPHEUS_BASE_RATE_FULL ? wake_rate : MORPHEUS_BASE_RATE_FULL;

	return slice_ns / MORPHEUS_BASE_CREDIT_DIV / MORPHEUS_BASE_RATE_FULL * rate;
}

/*
 * A task's exec runtime (CPU used since it last slept, weight-scaled), capped at
 * MORPHEUS_BASE_EXEC_CAP_SLICES base slices of `slice_ns`: the term DEADLINE and BURST add. 0 for no
 * state yet (t NULL).
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_capped_exec(const struct morpheus_base_task *t, morpheus_u64 slice_ns)
{
	morpheus_u64 cap = slice_ns * MORPHEUS_BASE_EXEC_CAP_SLICES;

	if (!t)
		return 0;
	return t->exec_ns < cap ? t->exec_ns : cap;
}

/* The deadline of a task queued at `now_ns` (DEADLINE order; see enum morpheus_base_order). */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_deadline(const struct morpheus_base_task *t, morpheus_u64 now_ns,
							morpheus_u64 slice_ns)
{
	morpheus_u64 exec = morpheus_base_capped_exec(t, slice_ns);
	morpheus_u64 credit = morpheus_base_wake_credit(t->wake_rate, slice_ns);
	morpheus_u64 at = now_ns + exec;

	return at > credit ? at - credit : 0;
}

/*
 * Whether order `order` keeps a task's vtime apart from its queue key (struct morpheus_base_task's
 * `vtime`): BURST, SPARE, RECENT and ARRIVAL, whose keys add an exec-runtime term that must not add
 * up over queueings (morpheus_base_kept_key).
 */
MORPHEUS_POLICY_FN int morpheus_base_keeps_vtime(morpheus_u32 order)
{
	return order == MORPHEUS_BASE_ORDER_BURST || order == MORPHEUS_BASE_ORDER_SPARE ||
	       order == MORPHEUS_BASE_ORDER_RECENT || order == MORPHEUS_BASE_ORDER_ARRIVAL;
}

/*
 * BURST order: the task's vtime. Until its first run under this order ends (has_vtime 0, or no state
 * yet: t NULL) every key it was queued with carried no exec runtime, so its key, `dsq_vtime`, is its
 * vtime; after that, the vtime it keeps.
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_burst_vtime(const struct morpheus_base_task *t, morpheus_u64 dsq_vtime)
{
	return t && t->has_vtime ? t->vtime : dsq_vtime;
}

/*
 * SPARE order: the second term of the key of a task (state `t`, NULL: none yet): the exec runtime
 * beyond MORPHEUS_BASE_SPARE_MUL times its usual burst, capped at MORPHEUS_BASE_EXEC_CAP_SLICES base
 * slices (BURST's cap). 0 while it has used no more than that since it last slept.
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_spare_term(const struct morpheus_base_task *t, morpheus_u64 slice_ns)
{
	morpheus_u64 cap = slice_ns * MORPHEUS_BASE_EXEC_CAP_SLICES, spare, over;

	if (!t)
		return 0;
	spare = t->burst_avg_ns * MORPHEUS_BASE_SPARE_MUL;
	over = t->exec_ns > spare ? t->exec_ns - spare : 0;
	return over < cap ? over : cap;
}

/*
 * RECENT and ARRIVAL orders: whether a task (state `t`, NULL: none yet, so it never slept) has slept
 * under this scheduler and used less than MORPHEUS_BASE_RECENT_SLICES base slices of CPU
 * (weight-scaled) since. If not, its term is its exec runtime capped at MORPHEUS_BASE_EXEC_CAP_SLICES
 * base slices, BURST's term.
 */
MORPHEUS_POLICY_FN int morpheus_base_slept_recently(const struct morpheus_base_task *t, morpheus_u64 slice_ns)
{
	return t && t->last_sleep_ns && t->exec_ns < slice_ns * MORPHEUS_BASE_RECENT_SLICES;
}

/*
 * Wake-up preemption (every order): a waking task with queue key `waker_key` preempts the task
 * running on its CPU, whose key advanced by the CPU it has used since it started (weight-scaled) is
 * `runner_key`, if it is ahead by more than `margin`. The margin keeps tasks of equal standing from
 * trading the CPU at every wake-up: a runner is preempted by an equal only once it has run that long.
 * Keys wrap as vtime does (compared by their signed difference).
 */
MORPHEUS_POLICY_FN int morpheus_base_wake_preempts(morpheus_u64 waker_key, morpheus_u64 runner_key, morpheus_u64 margin)
{
	return (long long)(waker_key + margin - runner_key) < 0;
}

/* The wake-up preemption margin: `margin_ns` as the agent set it, or by default a slice lag. */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_wake_margin(morpheus_u64 margin_ns, morpheus_u64 slice_ns)
{
	return margin_ns ? margin_ns : slice_ns / MORPHEUS_BASE_LAG_DIV;
}

/* RECENT (and ARRIVAL) order: the second term of the key, 0 for a task that slept recently. */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_recent_term(const struct morpheus_base_task *t, morpheus_u64 slice_ns)
{
	if (morpheus_base_slept_recently(t, slice_ns))
		return 0;
	return morpheus_base_capped_exec(t, slice_ns);
}

/*
 * The second term of the key of a task (state `t`, NULL: none yet) under a kept-vtime order `order`
 * (morpheus_base_kept_key): BURST's capped exec runtime, SPARE's term, or RECENT's (also ARRIVAL's);
 * 0 under any other order. The one place an order picks its term: the queue's key and the trace's record both take it here.
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_exec_term(morpheus_u32 order, const struct morpheus_base_task *t,
							 morpheus_u64 slice_ns)
{
	if (order == MORPHEUS_BASE_ORDER_SPARE)
		return morpheus_base_spare_term(t, slice_ns);
	if (order == MORPHEUS_BASE_ORDER_RECENT || order == MORPHEUS_BASE_ORDER_ARRIVAL)
		return morpheus_base_recent_term(t, slice_ns);
	if (order == MORPHEUS_BASE_ORDER_BURST)
		return morpheus_base_capped_exec(t, slice_ns);
	return 0;
}

/*
 * The key of a task under a kept-vtime order `order` (BURST, SPARE, RECENT or ARRIVAL: the task's
 * vtime kept apart from its key) with state `t` (NULL: none yet), key so far `dsq_vtime` and `weight`
 * (100 = nice 0), queued when the highest vtime started is `vtime_now`: its vtime raised to the
 * order's slice-lag floor (morpheus_base_vtime_key), plus the order's exec term
 * (morpheus_base_exec_term); under ARRIVAL, the floor alone for a task that slept recently.
 */
MORPHEUS_POLICY_FN morpheus_u64 morpheus_base_kept_key(morpheus_u32 order, const struct morpheus_base_task *t,
							morpheus_u64 dsq_vtime, morpheus_u64 vtime_now, morpheus_u64 slice_ns,
							morpheus_u64 weight)
{
	morpheus_u64 credit = morpheus_base_vtime_credit(order, slice_ns, weight);

	if (order == MORPHEUS_BASE_ORDER_ARRIVAL && morpheus_base_slept_recently(t, slice_ns))
		return vtime_now - credit;
	return morpheus_base_vtime_key(morpheus_base_burst_vtime(t, dsq_vtime), vtime_now, credit) +
	       morpheus_base_exec_term(order, t, slice_ns);
}

/*
 * BURST (and SPARE, RECENT) order: the task is queued. Its vtime is raised to the floor its key was (the credit it keeps
 * is the lag, as the insertion does for LAG's vtime), so a task that slept long does not keep its
 * old lead over the runs that follow.
 */
MORPHEUS_POLICY_FN void morpheus_base_burst_queued(struct morpheus_base_task *t, morpheus_u64 vtime_now,
						    morpheus_u64 slice_ns, morpheus_u64 weight)
{
	morpheus_u64 credit = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, slice_ns, weight);

	if (t->has_vtime)
		t->vtime = morpheus_base_vtime_key(t->vtime, vtime_now, credit);
}

/*
 * BURST order: a run of `scaled_ns` (CPU time scaled by weight) ended. It adds to the task's vtime
 * (its key `dsq_vtime` taken as its vtime at its first run's end, morpheus_base_burst_vtime) and to
 * its exec runtime (morpheus_base_charge).
 */
MORPHEUS_POLICY_FN void morpheus_base_burst_charge(struct morpheus_base_task *t, morpheus_u64 dsq_vtime, morpheus_u64 scaled_ns)
{
	t->vtime = morpheus_base_burst_vtime(t, dsq_vtime) + scaled_ns;
	t->has_vtime = 1;
	morpheus_base_charge(t, scaled_ns);
}

/* Pressure level from PSI cpu "some" avg10 in hundredths of a percent (thresholds: abi.toml PRESSURE_*_CENTI). */
MORPHEUS_POLICY_FN morpheus_u32 morpheus_pressure_level(morpheus_u32 cpu_some_avg10_centi)
{
	if (cpu_some_avg10_centi >= MORPHEUS_PRESSURE_HIGH_CENTI)
		return MORPHEUS_PRESSURE_LEVEL_HIGH;
	if (cpu_some_avg10_centi >= MORPHEUS_PRESSURE_MEDIUM_CENTI)
		return MORPHEUS_PRESSURE_LEVEL_MEDIUM;
	if (cpu_some_avg10_centi >= MORPHEUS_PRESSURE_LOW_CENTI)
		return MORPHEUS_PRESSURE_LEVEL_LOW;
	return MORPHEUS_PRESSURE_LEVEL_NONE;
}

#endif /* MORPHEUS_POLICY_H */
