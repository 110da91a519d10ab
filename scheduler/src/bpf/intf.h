/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Things the BPF program and its agent (src/kernel.rs, through bindgen) share that are internal to
 * scx_morpheus: counter indices and the layout of the region map's value. Everything that runtimes
 * see (the SCB, the header, hint and escalation records, enum values) comes from the generated
 * abi/c/morpheus_abi.h, and the decisions from src/policy/morpheus_policy.h; nothing here repeats them.
 */
#ifndef SCX_MORPHEUS_INTF_H
#define SCX_MORPHEUS_INTF_H

#include "../../../abi/c/morpheus_abi.h"
#include "../policy/morpheus_policy.h"

/* The region as the BPF program maps it: one array element holding header + every SCB. */
struct morpheus_region {
	struct morpheus_region_header hdr;
	struct morpheus_scb scb[MORPHEUS_MAX_WORKERS];
};

/*
 * Context of the gate_replay program (BPF_PROG_TEST_RUN, `scx_morpheus --replay-gate`): which SCB of
 * the region map to judge, and the runtime since its last yield point. The program returns the
 * verdict (enum morpheus_gate_verdict) or a negative errno.
 */
struct morpheus_gate_replay_ctx {
	morpheus_u64 runtime_ns;
	morpheus_u32 slot;
	morpheus_u32 _pad;
};

/*
 * Context of the escalation_replay program: the slot and time to decide for, the runtime, whether to
 * start a fresh episode (a new scenario); the program fills in the verdict, the state machine's step
 * (enum morpheus_escalation_step) and the episode after it (escalated = open, steps).
 */
struct morpheus_escalation_replay_ctx {
	morpheus_u64 runtime_ns;
	morpheus_u64 now_ns;
	morpheus_u32 slot;
	morpheus_u32 reset;
	morpheus_u32 verdict;
	morpheus_u32 step;
	morpheus_u32 escalated;
	morpheus_u32 steps;
};

/* Highest CPU id the per-CPU "current worker" table covers. */
#define MORPHEUS_BPF_MAX_CPUS 1024

/* Indices into the BPF program's `counters` array (.bss), read by the agent. */
enum morpheus_counter {
	MORPHEUS_CNT_HINTS_EMITTED = 0,   /* preempt_seq increments with a hint record published */
	MORPHEUS_CNT_HINTS_RATE_LIMITED,  /* overruns inside hint_min_interval_ns (hints_dropped++) */
	MORPHEUS_CNT_HINTS_RING_FULL,     /* preempt_seq bumped but the hint ring was full (hints_dropped++) */
	MORPHEUS_CNT_ESCALATIONS,         /* escalation actions taken (all policies) */
	MORPHEUS_CNT_KICKS,               /* SCX_KICK_PREEMPT of a worker's CPU */
	MORPHEUS_CNT_THROTTLES,           /* throttle requests sent to the agent */
	MORPHEUS_CNT_EVENTS_RING_FULL,    /* escalation_event records lost (ring full) */
	MORPHEUS_CNT_WORKER_RUNS,         /* ops.running of a registered worker */
	MORPHEUS_CNT_ACK_RESETS,          /* runtime reset because last_ack_seq advanced */
	MORPHEUS_CNT_SLEEP_RESETS,        /* runtime reset because the worker slept voluntarily */
	MORPHEUS_CNT_STALE_SLOTS,         /* tid map entry whose SCB names another tid (ignored) */
	MORPHEUS_CNT_TIMER_RUNS,          /* runs of the periodic overrun check */
	MORPHEUS_CNT_BW_THROTTLED,        /* enqueues held back because the cgroup's cpu.max quota was used */
	MORPHEUS_CNT_WAKE_PREEMPTS,       /* base policy: a waking task preempted one far ahead in vtime */
	MORPHEUS_CNT_KICKS_SPARED_CRITICAL, /* kick's requeue skipped: the worker entered a section after the decision */
	MORPHEUS_CNT_HOLDS_SPARED_CRITICAL, /* cpu.max hold skipped: the worker was in a critical section */
	MORPHEUS_CNT_HELD_IN_CRITICAL,    /* a worker released from the hold was in a section while held: must stay 0 */
	MORPHEUS_NR_COUNTERS,
};

/* Counter arrays indexed by gate verdict (enum morpheus_gate_verdict) and by policy. */
#define MORPHEUS_NR_GATE_VERDICTS MORPHEUS_GATE_NR_VERDICTS
#define MORPHEUS_NR_POLICIES (MORPHEUS_ESCALATION_POLICY_HYBRID + 1)

#endif /* SCX_MORPHEUS_INTF_H */
