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

/*
 * A trust domain's region as the BPF program maps it: one array element holding header + every SCB.
 * Each uid has its own such map (created by the agent at its first registration, spec/SCB.md §10);
 * the program reaches it through the `regions` array of maps, by the domain's index.
 */
struct morpheus_region {
	struct morpheus_region_header hdr;
	struct morpheus_scb scb[MORPHEUS_MAX_WORKERS];
};

/* Trust domains (uids) the `regions` array of maps holds. */
#define MORPHEUS_BPF_MAX_DOMAINS 256

/* The domain whose region the conformance replays (gate_replay, escalation_replay) judge. */
#define MORPHEUS_REPLAY_DOMAIN 0

/*
 * Value of the `worker_slots` map (key: tid), written only by the agent at registration: the
 * agent's slot number (index of `workers`, and the slot in hint and escalation records), the
 * domain and SCB index of the worker's SCB, and `registered_ns`, CLOCK_MONOTONIC (the clock of a
 * task's start_time) read by the agent after the registering thread's pidfd was opened and before
 * its exit is watched. The registering thread started before `registered_ns`, so a thread started
 * after it is a later holder of the tid and is never taken for this worker, even if the registering
 * thread exited before any run of it bound it (then no bound thread's exit removes the entry; the
 * agent does, once the pidfd says the thread exited). The BPF side learns a worker's SCB only from here, never from a tid, pid or
 * slot written in an SCB. An entry is removed by the agent (unregistration, or the thread's pidfd
 * saying it exited), or by the BPF side when the thread it was bound to exits (worker_exit,
 * src/bpf/worker.bpf.c).
 */
struct morpheus_worker_slot {
	morpheus_u32 slot;
	morpheus_u32 domain;
	morpheus_u32 local;
	morpheus_u32 _pad;
	morpheus_u64 registered_ns;
};

/*
 * Context of the gate_replay program (BPF_PROG_TEST_RUN, `scx_morpheus --replay-gate`): which SCB of
 * the replay domain's region to judge, and the runtime since its last yield point. The program returns the
 * verdict (enum morpheus_gate_verdict) or a negative errno.
 */
struct morpheus_gate_replay_ctx {
	morpheus_u64 runtime_ns;
	morpheus_u32 slot;
	morpheus_u32 _pad;
};

/*
 * Context of the hint_replay program (BPF_PROG_TEST_RUN, `--replay-gate` `hint` cases): the slot, its
 * runtime and the time to decide for; the program returns the hint decision (enum
 * morpheus_hint_decision) or a negative errno.
 */
struct morpheus_hint_replay_ctx {
	morpheus_u64 runtime_ns;
	morpheus_u64 now_ns;
	morpheus_u32 slot;
	morpheus_u32 _pad;
};

/*
 * Context of the bind_replay program (BPF_PROG_TEST_RUN, the scheduler's tests): a run of thread `tid`,
 * started at `start_ns`, begins on no CPU (worker_running); the program returns 1 if agent slot `slot`
 * is then bound to that thread, else 0.
 */
struct morpheus_bind_replay_ctx {
	morpheus_u64 start_ns;
	morpheus_u32 tid;
	morpheus_u32 slot;
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

/*
 * The scheduler's private bookkeeping of one slot (the `workers` array, by the agent's slot number).
 * The agent reads `esc` to know whether the episode behind a cgroup cap is still open.
 */
struct worker_ctx {
	morpheus_u64 runtime_ns;   /* CPU time since the last yield point, up to run_start_ns */
	morpheus_u64 run_start_ns; /* when the current run started (valid while cpu >= 0) */
	morpheus_u64 seen_ack_seq; /* last_ack_seq at the last yield point */
	morpheus_u64 start_ns;     /* the bound thread's start time (task_struct.start_time): with tid, which
				    * thread this is, as a tid names one live thread at a time; 0 once it exited */
	struct morpheus_escalation esc; /* the escalation episode (shared state machine) */
	struct morpheus_verdict_tally verdicts; /* gate verdicts counted (the policy header's rule) */
	morpheus_u32 tid;          /* thread this bookkeeping belongs to (a slot can be reused) */
	morpheus_u32 pid;          /* its process (the task's own tgid, never an SCB's pid) */
	morpheus_u32 domain;       /* where its SCB is (from worker_slots at its first run) */
	morpheus_u32 local;
	morpheus_s32 cpu;          /* CPU it runs on, -1 when not running */
	morpheus_u32 deciding;     /* a CPU is running this worker's state machine (try-lock) */
	morpheus_u32 agent_effect; /* the open episode has an effect the agent carries out (its lift is reported) */
};

/*
 * A detection record (the `detections` ring, worker.bpf.c; the agent's only, never pinned): the overrun
 * of a hint that was the first request since the worker's last acknowledgement (preempt_seq before the
 * hint equal to the last_ack_seq its decision loaded), which is what the agent's hint reaction time
 * measures. Decided where the hint is, so the measurement does not depend on when the agent drains.
 */
struct morpheus_detection {
	morpheus_u64 overrun_ns; /* the hint record's overrun_ns */
	morpheus_u32 slot;
	morpheus_u32 _pad;
};

/* The detection ring's size: 4096 records of 16 bytes (plus the ring's 8-byte headers). */
#define MORPHEUS_DETECTION_RING_BYTES (128u * 1024)

/*
 * The `worker_tids` bitmap (worker.bpf.c): one bit per possible tid, set by the agent for every tid it
 * has a `worker_slots` entry for, so that a context switch of any other thread is told apart by one
 * load. Tids are below the kernel's PID_MAX_LIMIT (include/linux/threads.h: 4 Mi on 64-bit kernels);
 * a tid at or above it is looked up in worker_slots directly.
 */
#define MORPHEUS_TID_LIMIT (4u * 1024 * 1024)
#define MORPHEUS_TID_WORDS (MORPHEUS_TID_LIMIT / 64)

/*
 * The `worker_tid_summary` bitmap (worker.bpf.c) over worker_tids: one bit per block of
 * MORPHEUS_TID_SUMMARY_BLOCK consecutive tids (8 of worker_tids' words), 1 KiB in all, set by the agent
 * while any tid of the block has its worker_tids bit set. A switch between threads that are no worker
 * then reads this small, always hot bitmap and not the 512 KiB one.
 */
#define MORPHEUS_TID_SUMMARY_SHIFT 9
#define MORPHEUS_TID_SUMMARY_BLOCK (1u << MORPHEUS_TID_SUMMARY_SHIFT)
#define MORPHEUS_TID_SUMMARY_WORDS (MORPHEUS_TID_LIMIT / MORPHEUS_TID_SUMMARY_BLOCK / 64)

/* Highest CPU id the per-CPU "current worker" table covers. */
#define MORPHEUS_BPF_MAX_CPUS 1024

/* Indices into the BPF program's `counters` array (.bss), read by the agent. */
enum morpheus_counter {
	MORPHEUS_CNT_HINTS_EMITTED = 0,   /* preempt_seq increments with a hint record published */
	MORPHEUS_CNT_HINTS_RATE_LIMITED,  /* overruns inside hint_min_interval_ns with no request pending (hints_dropped++) */
	MORPHEUS_CNT_HINTS_RING_FULL,     /* preempt_seq bumped but the hint ring was full (hints_dropped++) */
	MORPHEUS_CNT_ESCALATIONS,         /* escalation actions taken (all policies) */
	MORPHEUS_CNT_KICKS,               /* SCX_KICK_PREEMPT of a worker's CPU */
	MORPHEUS_CNT_THROTTLES,           /* throttle requests sent to the agent */
	MORPHEUS_CNT_EVENTS_RING_FULL,    /* escalation_event records lost (ring full) */
	MORPHEUS_CNT_WORKER_RUNS,         /* ops.running of a registered worker */
	MORPHEUS_CNT_ACK_RESETS,          /* runtime reset because last_ack_seq advanced */
	MORPHEUS_CNT_SLEEP_RESETS,        /* runtime reset because the worker slept voluntarily */
	MORPHEUS_CNT_STALE_SLOTS,         /* tid map entry naming a domain with no region or a slot out of range (ignored) */
	MORPHEUS_CNT_TIMER_RUNS,          /* runs of the periodic overrun check */
	MORPHEUS_CNT_BW_THROTTLED,        /* enqueues held back because the cgroup's cpu.max quota was used */
	MORPHEUS_CNT_WAKE_PREEMPTS,       /* base policy: a waking task preempted one far ahead in vtime */
	MORPHEUS_CNT_KICKS_SPARED_CRITICAL, /* demotion skipped at enqueue: the worker entered a section after the decision */
	MORPHEUS_CNT_HOLDS_SPARED_CRITICAL, /* cpu.max hold skipped: the worker was in a critical section */
	MORPHEUS_CNT_HELD_IN_CRITICAL,    /* a worker released from the hold was in a section while held: must stay 0 */
	MORPHEUS_CNT_DEMOTED_ENQUEUES,    /* enqueues of a worker with an open episode into the demoted queue */
	MORPHEUS_CNT_TID_REUSED,          /* runs of a thread whose tid names a worker bound to an exited thread, or that started after the worker registered (not that worker) */
	MORPHEUS_CNT_WORKER_EXITS,        /* worker_slots entries removed because their thread exited */
	MORPHEUS_NR_COUNTERS,
};

/*
 * Indices into main.bpf.c's `base_trace` array: a debug trace of the base policy, filled only when
 * scx_morpheus runs with --debug-base-trace (all zero otherwise) and read into its stats'
 * backend_counters as base_trace_<name>. Times in µs. "wake": a task queued in the shared queue as it
 * woke; "requeue": queued there while still runnable (its slice ended or a waker preempted it);
 * "direct": a waking task an idle CPU took at once. A wait runs from the queueing to ops.running.
 */
enum morpheus_base_trace {
	MORPHEUS_BT_WAKE_ENQUEUES = 0,
	MORPHEUS_BT_REQUEUES,
	MORPHEUS_BT_DIRECT,
	MORPHEUS_BT_WAKE_WAIT_US,        /* sum of the waits of wake enqueues */
	MORPHEUS_BT_REQUEUE_WAIT_US,     /* sum of the waits of requeues */
	MORPHEUS_BT_DIRECT_WAIT_US,      /* sum of the waits of direct dispatches */
	MORPHEUS_BT_WAKE_WAIT_MAX_US,
	MORPHEUS_BT_REQUEUE_WAIT_MAX_US,
	MORPHEUS_BT_WAKE_WAIT_GE1MS,     /* wake enqueues that waited 1 ms or more */
	MORPHEUS_BT_WAKE_WAIT_GE2MS,
	MORPHEUS_BT_WAKE_WAIT_GE4MS,
	MORPHEUS_BT_WAKE_WAIT_GE8MS,
	MORPHEUS_BT_REQUEUE_WAIT_GE2MS,
	MORPHEUS_BT_REQUEUE_WAIT_GE8MS,
	MORPHEUS_BT_WAKE_BEHIND_US,      /* sum over wake enqueues of vtime_now - key, where the key is below vtime_now */
	MORPHEUS_BT_WAKE_AHEAD_US,       /* sum over wake enqueues of key - vtime_now, where the key is above it */
	MORPHEUS_BT_REQUEUE_BEHIND_US,
	MORPHEUS_BT_REQUEUE_AHEAD_US,
	MORPHEUS_BT_WAKE_EXEC_US,        /* BURST, SPARE, RECENT: sum of the exec-runtime term in wake enqueues' keys */
	MORPHEUS_BT_REQUEUE_EXEC_US,     /* BURST, SPARE, RECENT: the same in requeues' keys */
	MORPHEUS_BT_RUNS_PREEMPTED,      /* runs that ended with the task still runnable */
	MORPHEUS_BT_RUNS_SLEPT,          /* runs that ended with the task going to sleep */
	MORPHEUS_BT_RUN_US,              /* sum of the lengths of all runs */
	MORPHEUS_BT_WAKE_SPARED,         /* wake enqueues that found their CPU running a task they did not preempt */
	MORPHEUS_BT_WAKE_SPARED_GE1MS,   /* of those, the ones that waited 1 ms or more */
	MORPHEUS_NR_BASE_TRACE,
};

/* Counter arrays indexed by gate verdict (enum morpheus_gate_verdict) and by policy. */
#define MORPHEUS_NR_GATE_VERDICTS MORPHEUS_GATE_NR_VERDICTS
#define MORPHEUS_NR_POLICIES (MORPHEUS_ESCALATION_POLICY_HYBRID + 1)

#endif /* SCX_MORPHEUS_INTF_H */
