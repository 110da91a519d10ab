/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * scx_morpheus: a sched_ext scheduler that asks cooperative runtimes to yield.
 *
 * Base policy: weighted virtual time in one shared queue (the task that used the least CPU for its
 * weight runs first; a task waking from sleep is credited at most one slice, and preempts the task
 * running on its CPU if that one is well ahead); an idle CPU found at wake-up takes the task directly.
 * On top of
 * it, registered worker threads (tid -> slot, maintained by the agent) are accounted: CPU time since
 * their last yield point, and on slice overrun the scheduler bumps preempt_seq in the worker's Shared
 * Control Block and publishes a hint. Each uid's SCBs are in its own region map (a trust domain,
 * spec/SCB.md §10), reached through the `regions` array of maps. In enforced mode a worker that passes the escalation gate is
 * kicked off its CPU and runs only when nothing else can until its episode is lifted, and/or is
 * reported to the agent for a cgroup cap. Protocol: spec/SCB.md; the
 * decisions themselves: src/policy/morpheus_policy.h (shared with the simulation backend).
 */
#include <scx/common.bpf.h>

/*
 * Acquire loads. clang 19 has no BPF load-acquire instruction; on x86-64 (TSO) every load is an
 * acquire and a compiler barrier keeps later accesses after it. Other architectures would need
 * real barriers, so refuse to build for them rather than be silently wrong. These are also the raw
 * accessors of the shared policy header (MORPHEUS_LOAD_*), which does the gate's loads itself.
 *
 * Release side (spec/SCB.md §5.2): preempt_seq is incremented with a fetching atomic
 * (__sync_fetch_and_add with its result used), which the BPF JITs emit fully ordered on x86-64 and
 * arm64; a non-fetching BPF atomic add is unordered on arm64 and is never used for a signal.
 */
#ifndef __SCX_TARGET_ARCH_x86
#error "scx_morpheus's memory ordering is written for x86-64; see load_acquire()"
#endif
#define load_acquire(p)                                 \
	({                                              \
		typeof(*(p)) __v = READ_ONCE(*(p));     \
		barrier();                              \
		__v;                                    \
	})
#define MORPHEUS_LOAD_ACQUIRE(p) load_acquire(p)
#define MORPHEUS_LOAD_RELAXED(p) READ_ONCE(*(p))

/* A full barrier for the policy header (defined below, once the CPU bound is known). */
static __always_inline void full_barrier(void);
#define MORPHEUS_FULL_BARRIER() full_barrier()

#include "intf.h"

char _license[] SEC("license") = "GPL";

/*
 * BPF has no fence instruction, but a fetching atomic (its result used, so clang cannot emit the
 * non-fetching form; adding 0 would be folded into a load) is fully ordered in every JIT. Each CPU
 * uses its own cache line.
 */
struct barrier_line {
	u64 v;
	u64 _pad[7];
};
struct barrier_line barrier_lines[MORPHEUS_BPF_MAX_CPUS];

static __always_inline void full_barrier(void)
{
	u64 v = __sync_fetch_and_add(&barrier_lines[bpf_get_smp_processor_id() % MORPHEUS_BPF_MAX_CPUS].v, 1);

	barrier_var(v);
}

UEI_DEFINE(uei);

/* The one shared dispatch queue of the base policy, ordered by virtual time. */
#define SHARED_DSQ 0
/* Tasks of cgroups that used up their cpu.max quota for the current period. */
#define THROTTLED_DSQ 1
/*
 * Workers whose escalation episode is open (the kernel backend's demotion, as the simulation backend's
 * SCHED_IDLE): a CPU takes one from here only when nothing else can run on it.
 */
#define DEMOTED_DSQ 2

/* Set by the agent before load. */
/* 0: the kernel's default slice (SCX_SLICE_DFL). */
const volatile u64 task_slice_ns;
const volatile u64 check_interval_ns = 1000000;
const volatile u32 nr_possible_cpus = 1;
const volatile u32 nr_online_cpus = 1;
/* Longest an escalation episode stays open without a lift (the agent's --throttle-max-ms). */
const volatile u64 throttle_max_ns = MORPHEUS_DEFAULT_THROTTLE_MAX_NS;

/*
 * The scheduler's configuration (S4, spec/SCB.md §10), from the agent's command line. The live paths
 * read it here and never from the region header: every runtime that maps the region can write the
 * header, which only publishes these values. The replays (gate_replay, escalation_replay) take theirs
 * from the case's header image instead.
 */
const volatile u32 cfg_scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER;
const volatile u32 cfg_escalation_policy = MORPHEUS_ESCALATION_POLICY_NONE;
const volatile u64 cfg_slice_ns = MORPHEUS_DEFAULT_SLICE_NS;
const volatile u64 cfg_grace_ns = MORPHEUS_DEFAULT_GRACE_NS;
const volatile u64 cfg_hint_min_interval_ns = MORPHEUS_DEFAULT_HINT_MIN_INTERVAL_NS;
/* SCBs the region has (the timer's sweep of open episodes covers these). */
const volatile u32 cfg_scb_count = MORPHEUS_MAX_WORKERS;

/* The pressure level the agent measured last (PSI), copied into each SCB; the agent writes it. */
u32 pressure_level;

/* Escalation episodes open now: the timer looks for lifts of workers off CPU only while there are some. */
s64 nr_open_episodes;

/* Highest dsq_vtime seen starting to run: the clock a waking task's vtime is clamped against. */
u64 vtime_now;

/*
 * The check timer's longest period: with no registered worker on a CPU, no episode open and nothing
 * throttled there is nothing to check, so an unregistered workload pays for one timer run every 50 ms.
 */
#define IDLE_CHECK_NS (50ull * 1000 * 1000)
/*
 * Open episodes of workers off CPU are looked at for their lifts this often (as when the sweep ran at
 * every 16th run of a timer that fired every check interval).
 */
#define SWEEP_INTERVALS 16
/*
 * When the check timer is due (bpf_ktime_get_ns). It is armed for the earliest moment a worker on a
 * CPU can need a decision (check_due_in: the end of its slice, then every check interval; every
 * grace period in an episode), not every check interval: under emulation a timer run on the busy CPU
 * costs that CPU's task hundreds of microseconds. ops.running of a worker brings it forward
 * (timer_bring_forward).
 */
u64 timer_expires_ns;
/* When the timer last looked at the open episodes of workers off CPU. */
u64 last_sweep_ns;
/* One past the highest agent slot a worker has run in: only those can have an episode open. */
u32 slots_seen;

/* Counters read by the agent; indices in intf.h. */
u64 counters[MORPHEUS_NR_COUNTERS];
u64 gate_verdicts[MORPHEUS_NR_GATE_VERDICTS];
u64 escalations_by_policy[MORPHEUS_NR_POLICIES];
/* Lifts of escalation episodes, by state machine step (enum morpheus_escalation_step). */
u64 lifts_by_step[MORPHEUS_NR_STEPS];

/*
 * The regions runtimes map, one per trust domain (uid): by domain index, an mmapable array map of one
 * element (struct morpheus_region: header + MORPHEUS_MAX_WORKERS SCBs) that the agent creates at the
 * uid's first registration, and whose descriptor it hands only to that uid's processes. The inner
 * definition is the template every inserted map must match (type, flags, key and value size); sizes,
 * not types, because clang emits a type this deep in a map definition only as a declaration.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MORPHEUS_BPF_MAX_DOMAINS);
	__type(key, u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_MMAPABLE);
		__uint(max_entries, 1);
		__uint(key_size, sizeof(u32));
		__uint(value_size, sizeof(struct morpheus_region));
	});
} regions SEC(".maps");

/* tid -> (slot, domain, SCB index); written by the agent on registration and unregistration. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MORPHEUS_MAX_WORKERS);
	__type(key, u32);
	__type(value, struct morpheus_worker_slot);
} worker_slots SEC(".maps");

/* Hint records; their one consumer is the agent (SCB.md §8), so the ring is never pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MORPHEUS_HINT_RING_BYTES);
} hints SEC(".maps");

/* Escalation records for the agent, which applies cgroup caps. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MORPHEUS_HINT_RING_BYTES);
} escalation_events SEC(".maps");

/* struct worker_ctx (intf.h): the scheduler's private bookkeeping of one slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MORPHEUS_MAX_WORKERS);
	__type(key, u32);
	__type(value, struct worker_ctx);
} workers SEC(".maps");

/* Per CPU: slot + 1 of the registered worker running there, 0 if none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MORPHEUS_BPF_MAX_CPUS);
	__type(key, u32);
	__type(value, u32);
} cpu_worker SEC(".maps");

/*
 * cpu.max of cgroups, as the kernel reports it through ops.cgroup_set_bandwidth: under sched_ext the
 * kernel does not enforce it for our tasks, so the scheduler does (the agent's CGROUP_THROTTLE caps
 * rely on it). Keyed by cgroup id.
 */
struct cgroup_bw {
	u64 period_ns;
	u64 quota_ns;
	u64 period_start_ns;
	u64 used_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, u64);
	__type(value, struct cgroup_bw);
} cgroup_bw SEC(".maps");

/* Entries in cgroup_bw: lets every other task skip the cgroup lookup. */
u64 nr_capped_cgroups;

/* Per CPU: start of the current run of a task in a capped cgroup, and that cgroup. */
struct bw_run {
	u64 start_ns;
	u64 cgid;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct bw_run);
} bw_runs SEC(".maps");

/* Per CPU: the task running there (any task), for charging its vtime and for wake-up preemption. */
struct cpu_run {
	u64 start_ns; /* when it started running */
	u64 vtime;    /* its dsq_vtime then */
	u64 weight;   /* its weight then; 0 when the CPU runs none of our tasks */
	u64 demoted;  /* it is a worker with an open escalation episode: any waking task preempts it */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MORPHEUS_BPF_MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_run);
} cpu_runs SEC(".maps");

struct check_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct check_timer);
} check_timer SEC(".maps");

static __always_inline u64 base_slice(void)
{
	return task_slice_ns ?: SCX_SLICE_DFL;
}

/*
 * While tasks wait for a CPU, each should get one within this period (CFS's sched_latency), sharing
 * it out in slices no shorter than the minimum (each switch costs the machine).
 */
#define CONTENDED_PERIOD_NS (6ULL * 1000 * 1000)
#define MIN_CONTENDED_SLICE_NS (1000ULL * 1000)

/*
 * The slice of a task running now: the whole base slice while nothing waits in the shared queue (a
 * batch keeps its CPU with the fewest switches), else its share of the contended period. With whole
 * 20 ms slices, a task waking behind CPU hogs it did not lead in vtime waited out their slices: the
 * comparison's Table 1 w8 cells under pressure had 2.9x EEVDF's p99 (scheduler/BENCHMARKS.md).
 */
static __always_inline u64 contended_slice(void)
{
	u64 waiting = scx_bpf_dsq_nr_queued(SHARED_DSQ), cpus = nr_online_cpus ?: 1, slice;

	if (!waiting)
		return base_slice();
	slice = CONTENDED_PERIOD_NS * cpus / (cpus + waiting);
	return slice < MIN_CONTENDED_SLICE_NS ? MIN_CONTENDED_SLICE_NS : slice;
}

static __always_inline void count(u32 idx)
{
	if (idx < MORPHEUS_NR_COUNTERS)
		__sync_fetch_and_add(&counters[idx], 1);
}

/* CPU time scaled by weight (100 = nice 0): heavier tasks age more slowly. */
static __always_inline u64 scale_by_weight(u64 ns, u64 weight)
{
	return weight ? ns * 100 / weight : ns;
}

/*
 * p's vtime for queueing: a task that slept long keeps at most one slice of credit, so sleepers run
 * soon after waking without being able to monopolise a CPU afterwards.
 */
static __always_inline u64 queue_vtime(struct task_struct *p)
{
	u64 vtime = p->scx.dsq_vtime, floor = READ_ONCE(vtime_now) - base_slice();

	return time_before(vtime, floor) ? floor : vtime;
}

/* The region of trust domain `domain`, or NULL if the agent has made none there. */
static __always_inline struct morpheus_region *region_of(u32 domain)
{
	void *inner = bpf_map_lookup_elem(&regions, &domain);
	u32 zero = 0;

	if (!inner)
		return NULL;
	return bpf_map_lookup_elem(inner, &zero);
}

/* The SCB of `slot`, or NULL if out of range. The check sits next to the use for the verifier. */
static __always_inline struct morpheus_scb *scb_of(struct morpheus_region *r, u32 slot)
{
	if (slot >= MORPHEUS_MAX_WORKERS)
		return NULL;
	barrier_var(slot);
	return &r->scb[slot];
}

/* Where a registered thread's bookkeeping and SCB are (the agent's record), or NULL. */
static __always_inline struct morpheus_worker_slot *worker_slot_of(u32 tid)
{
	struct morpheus_worker_slot *ws = bpf_map_lookup_elem(&worker_slots, &tid);

	if (!ws || ws->slot >= MORPHEUS_MAX_WORKERS)
		return NULL;
	return ws;
}

/* The SCB at (domain, local): the agent's record says which; nothing in an SCB is asked. */
static __always_inline struct morpheus_scb *scb_at(u32 domain, u32 local)
{
	struct morpheus_region *r = region_of(domain);

	if (!r)
		return NULL;
	return scb_of(r, local);
}

/* The SCB of task p if it is a registered worker, else NULL. */
static __always_inline struct morpheus_scb *worker_scb_of(struct task_struct *p)
{
	struct morpheus_worker_slot *ws = worker_slot_of(p->pid);

	if (!ws)
		return NULL;
	return scb_at(ws->domain, ws->local);
}

/*
 * Whether a hold (cpu.max) may take p off the CPU now: not if p is a registered worker inside a
 * critical section. This is where an escalation's throttle takes effect, so in_critical is loaded
 * here again (SCB.md §5.6): a section entered after the decision is never held.
 */
static __always_inline bool hold_allowed(struct task_struct *p)
{
	struct morpheus_scb *scb = worker_scb_of(p);

	if (!scb || morpheus_effect_may_hold(scb))
		return true;
	count(MORPHEUS_CNT_HOLDS_SPARED_CRITICAL);
	return false;
}

/* The live gate's configuration: the agent's, from the program's load-time data (never the header). */
static __always_inline void live_gate_config(struct morpheus_gate_config *cfg)
{
	cfg->scheduler_mode = cfg_scheduler_mode;
	cfg->escalation_policy = cfg_escalation_policy;
	cfg->slice_ns = cfg_slice_ns;
	cfg->grace_ns = cfg_grace_ns;
}

/* Start a fresh accounting period: the worker reached a yield point. */
static __always_inline void reset_runtime(struct worker_ctx *w, u64 ack, u64 now)
{
	w->runtime_ns = 0;
	w->run_start_ns = now;
	w->seen_ack_seq = ack;
}

/* Bump preempt_seq and publish a hint; `runtime` is past `slice`. */
static void emit_hint(struct morpheus_scb *scb, u32 slot, u32 tid, u64 now, u64 seen_last_hint,
		      u64 runtime, u64 slice)
{
	struct morpheus_hint *hint;
	u64 seq;

	/* Two CPUs may decide for one worker at once (timer and ops.stopping): one hint wins. */
	if (__sync_val_compare_and_swap(&scb->last_hint_ns, seen_last_hint, now) != seen_last_hint)
		return;
	WRITE_ONCE(scb->budget_remaining_ns, 0);
	/*
	 * The signal last (SCB.md §5.2): a fetching atomic is fully ordered, so last_hint_ns and
	 * budget_remaining_ns above are visible to a runtime whose acquire load sees the new value.
	 */
	seq = __sync_fetch_and_add(&scb->preempt_seq, 1) + 1;

	hint = bpf_ringbuf_reserve(&hints, sizeof(*hint), 0);
	if (!hint) {
		__sync_fetch_and_add(&scb->hints_dropped, 1);
		count(MORPHEUS_CNT_HINTS_RING_FULL);
		return;
	}
	hint->timestamp_ns = now;
	hint->preempt_seq = seq;
	hint->slot = slot;
	hint->tid = tid;
	hint->reason = MORPHEUS_HINT_REASON_SLICE_OVERRUN;
	hint->_pad0 = 0;
	hint->overrun_ns = runtime - slice;
	/* The agent drains hints on its own tick; waking it per hint would cost the CPUs it runs on. */
	bpf_ringbuf_submit(hint, BPF_RB_NO_WAKEUP);
	count(MORPHEUS_CNT_HINTS_EMITTED);
}

static __always_inline void send_escalation_event(struct worker_ctx *w, u32 slot, u64 now, u64 seq, u32 policy,
						  u32 action, u64 overrun)
{
	struct morpheus_escalation_event *ev;

	ev = bpf_ringbuf_reserve(&escalation_events, sizeof(*ev), 0);
	if (!ev) {
		count(MORPHEUS_CNT_EVENTS_RING_FULL);
		return;
	}
	ev->timestamp_ns = now;
	ev->preempt_seq = seq;
	ev->slot = slot;
	ev->tid = w->tid;
	ev->pid = w->pid;
	ev->policy = policy;
	ev->action = action;
	ev->_pad0 = 0;
	ev->overrun_ns = overrun;
	/*
	 * A kick has taken effect here already; the agent only counts its record on its next tick. A
	 * throttle or its lift is the agent's to carry out, so that record wakes it.
	 */
	bpf_ringbuf_submit(ev, action == MORPHEUS_ESCALATION_ACTION_KICK ? BPF_RB_NO_WAKEUP : 0);
}

/* Count a gate verdict once per (pending request, verdict), so counters read as "times spared". */
static __always_inline void count_verdict(struct worker_ctx *w, u64 seq, u32 verdict)
{
	if (w->verdict_seq == seq && w->last_verdict == verdict)
		return;
	w->verdict_seq = seq;
	w->last_verdict = verdict;
	if (verdict < MORPHEUS_NR_GATE_VERDICTS)
		__sync_fetch_and_add(&gate_verdicts[verdict], 1);
}

/*
 * The escalation gate (spec/SCB.md §5.6) and its state machine for one SCB under `cfg`: every SCB input
 * loaded at decision time by the shared policy header (morpheus_gate_load, SCB.md's orders), then
 * the next step of the worker's episode. `runtime` is the worker's CPU time since its last yield
 * point. The live path (run_escalation, cfg from live_gate_config) and the conformance replays
 * (gate_replay, escalation_replay, cfg from the case's header image) all call this, so the replayed
 * answers are the live path's loads and rules.
 */
static __always_inline enum morpheus_escalation_step
escalation_decide(const struct morpheus_gate_config *cfg, struct morpheus_scb *scb, struct morpheus_escalation *esc,
		  u64 runtime, u64 now, struct morpheus_gate_input *in, enum morpheus_gate_verdict *verdict)
{
	*verdict = morpheus_gate_decide(cfg, scb, runtime, in);
	return morpheus_escalation_decide(esc, in, *verdict, now, throttle_max_ns);
}

/* Close the worker's episode; a throttle in force is reported so the agent lifts its cgroup cap. */
static __always_inline void lift_escalation(struct morpheus_scb *scb, struct worker_ctx *w, u32 slot, u64 now,
			    enum morpheus_escalation_step step, struct morpheus_gate_input *in)
{
	if (w->esc.throttled)
		send_escalation_event(w, slot, now, w->esc.preempt_seq, in->escalation_policy,
				      MORPHEUS_ESCALATION_ACTION_UNTHROTTLE, 0);
	morpheus_escalation_commit(&w->esc, step, in, now);
	WRITE_ONCE(scb->escalated, 0);
	if ((u32)step < MORPHEUS_NR_STEPS)
		__sync_fetch_and_add(&lifts_by_step[step], 1);
	if (__sync_fetch_and_sub(&nr_open_episodes, 1) <= 0)
		WRITE_ONCE(nr_open_episodes, 0);
}

/*
 * Run the worker's escalation state machine and carry out its step. `cpu` is the CPU it runs on, or
 * -1 when it is not on one (stopping, or the timer's look at workers off CPU): lifts then, no action,
 * as there is nothing to preempt. Callers hold the worker's `deciding` try-lock (run_escalation).
 */
static __always_inline void run_escalation_locked(struct morpheus_scb *scb, struct worker_ctx *w, u32 slot,
						  s32 cpu, u64 runtime, u64 now)
{
	struct morpheus_gate_config cfg;
	struct morpheus_gate_input in = {};
	enum morpheus_gate_verdict verdict;
	enum morpheus_escalation_step step;
	u32 action, opened;

	live_gate_config(&cfg);
	step = escalation_decide(&cfg, scb, &w->esc, runtime, now, &in, &verdict);
	if (cpu >= 0 && runtime > in.slice_ns)
		count_verdict(w, in.preempt_seq, verdict);
	if (step == MORPHEUS_STEP_NONE)
		return;
	if (morpheus_step_is_lift(step)) {
		lift_escalation(scb, w, slot, now, step, &in);
		return;
	}
	action = morpheus_step_action(step);
	if (!action || cpu < 0)
		return;
	opened = !w->esc.open;
	morpheus_escalation_commit(&w->esc, step, &in, now);
	if (opened)
		__sync_fetch_and_add(&nr_open_episodes, 1);
	/* One meaning in every backend: an episode is open (an action taken, not yet lifted). */
	WRITE_ONCE(scb->escalated, 1);

	if (action == MORPHEUS_ESCALATION_ACTION_KICK) {
		/*
		 * SCX_KICK_PREEMPT zeroes the current task's slice; ops.enqueue then sees the open episode
		 * and queues it behind every other runnable task (DEMOTED_DSQ), as a kick means to, unless
		 * it entered a critical section meanwhile. Should the CPU have switched to another task
		 * before the kick lands, that task keeps its CPU: the demoted worker is not in the queue
		 * dispatch takes from first.
		 */
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		count(MORPHEUS_CNT_KICKS);
	} else {
		/* The agent caps the cgroup; the hold is enforced in enqueue, which re-checks in_critical. */
		count(MORPHEUS_CNT_THROTTLES);
	}
	__sync_fetch_and_add(&scb->escalations, 1);
	count(MORPHEUS_CNT_ESCALATIONS);
	if (in.escalation_policy < MORPHEUS_NR_POLICIES)
		__sync_fetch_and_add(&escalations_by_policy[in.escalation_policy], 1);
	send_escalation_event(w, slot, now, in.preempt_seq, in.escalation_policy, action,
			      runtime - in.slice_ns - in.grace_ns);
}

/*
 * The timer and ops.stopping may decide for one worker on two CPUs at once: one of them runs the
 * state machine, the other skips this decision (the next one comes within a check interval or, in
 * an episode, a grace period). The exchange that releases the lock is a fetching atomic, so the
 * episode's stores are visible first.
 */
static __always_inline void run_escalation(struct morpheus_scb *scb, struct worker_ctx *w, u32 slot, s32 cpu,
					   u64 runtime, u64 now)
{
	if (__sync_val_compare_and_swap(&w->deciding, 0, 1) != 0)
		return;
	run_escalation_locked(scb, w, slot, cpu, runtime, now);
	__sync_lock_test_and_set(&w->deciding, 0);
}

/*
 * Hint and escalation decisions for one worker (agent slot `slot`), every input loaded at decision
 * time. `cpu` is the CPU it is running on, or -1 when it is not on one (no escalation action then:
 * nothing to preempt). Its SCB is the one its first run found through worker_slots.
 */
static void check_worker(u32 slot, struct worker_ctx *w, s32 cpu, u64 now)
{
	struct morpheus_scb *scb;
	enum morpheus_hint_decision hint;
	u64 runtime, slice, ack, last_hint;
	u32 state, tid = w->tid;

	scb = scb_at(w->domain, w->local);
	if (!scb)
		return;

	ack = load_acquire(&scb->last_ack_seq);
	if (ack != w->seen_ack_seq) {
		/* The runtime acknowledged: that was a yield point. */
		reset_runtime(w, ack, now);
		count(MORPHEUS_CNT_ACK_RESETS);
	}
	state = load_acquire(&scb->worker_state);
	/* A worker cannot checkpoint before it is RUNNING, so its runtime starts there (SCB.md §5.2):
	 * CPU time spent registering never counts against its first slice. */
	if (state != MORPHEUS_WORKER_STATE_RUNNING)
		reset_runtime(w, ack, now);
	runtime = w->runtime_ns;
	if (cpu >= 0 && now > w->run_start_ns)
		runtime += now - w->run_start_ns;

	slice = cfg_slice_ns;
	WRITE_ONCE(scb->budget_remaining_ns, runtime < slice ? slice - runtime : 0);
	WRITE_ONCE(scb->kernel_pressure_level, READ_ONCE(pressure_level));

	last_hint = READ_ONCE(scb->last_hint_ns);
	hint = morpheus_hint_decide(state, runtime, slice, now, last_hint, cfg_hint_min_interval_ns);
	if (hint == MORPHEUS_HINT_EMIT) {
		emit_hint(scb, slot, tid, now, last_hint, runtime, slice);
	} else if (hint == MORPHEUS_HINT_RATE_LIMITED) {
		__sync_fetch_and_add(&scb->hints_dropped, 1);
		count(MORPHEUS_CNT_HINTS_RATE_LIMITED);
	}

	/* Not in the decision that made the request; an open episode is looked at for its lifts. */
	if (morpheus_gate_due(w->esc.open, hint, runtime, slice) && (w->esc.open || cpu >= 0))
		run_escalation(scb, w, slot, cpu, runtime, now);
}

/*
 * Conformance replay (spec/CONFORMANCE.md §2.7; `scx_morpheus --replay-gate`): the gate on the SCB of
 * ctx->slot in the replay domain's region map, which the agent has filled with a scenario's region image, under the
 * configuration that image's header states. Run with BPF_PROG_TEST_RUN, never attached. Returns the
 * verdict, or -ERANGE for a slot the map cannot hold.
 */
SEC("syscall")
int gate_replay(struct morpheus_gate_replay_ctx *ctx)
{
	struct morpheus_gate_config cfg;
	struct morpheus_gate_input in = {};
	struct morpheus_region *r = region_of(MORPHEUS_REPLAY_DOMAIN);
	struct morpheus_scb *scb;

	if (!r)
		return -ENOENT;
	scb = scb_of(r, ctx->slot);
	if (!scb)
		return -ERANGE;
	morpheus_gate_config_of_header(&r->hdr, &cfg);
	return morpheus_gate_decide(&cfg, scb, ctx->runtime_ns, &in);
}

/*
 * Conformance replay of the escalation state machine (`scx_morpheus --replay-gate`, `escalate` cases):
 * the gate and the next step on the SCB of ctx->slot at time ctx->now_ns, with the episode kept in the
 * slot's worker_ctx between runs (ctx->reset clears it: a new scenario), under the configuration the
 * image's header states. The step is recorded as the
 * live path records it, without its effects. Results go back in ctx; returns 0 or a negative errno.
 */
SEC("syscall")
int escalation_replay(struct morpheus_escalation_replay_ctx *ctx)
{
	struct morpheus_gate_config cfg;
	struct morpheus_gate_input in = {};
	struct morpheus_region *r = region_of(MORPHEUS_REPLAY_DOMAIN);
	enum morpheus_gate_verdict verdict;
	enum morpheus_escalation_step step;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 slot = ctx->slot;

	if (!r)
		return -ENOENT;
	scb = scb_of(r, slot);
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!scb || !w)
		return -ERANGE;
	if (ctx->reset)
		__builtin_memset(&w->esc, 0, sizeof(w->esc));
	morpheus_gate_config_of_header(&r->hdr, &cfg);
	step = escalation_decide(&cfg, scb, &w->esc, ctx->runtime_ns, ctx->now_ns, &in, &verdict);
	morpheus_escalation_commit(&w->esc, step, &in, ctx->now_ns);
	ctx->verdict = verdict;
	ctx->step = step;
	ctx->escalated = w->esc.open;
	ctx->steps = w->esc.steps;
	return 0;
}

static __always_inline u64 task_cgid(struct task_struct *p)
{
	return BPF_CORE_READ(p, cgroups, dfl_cgrp, kn, id);
}

/* The cpu.max state of p's cgroup, or NULL when it has none (the common case, checked first). */
static __always_inline struct cgroup_bw *task_bw(struct task_struct *p, u64 *cgid)
{
	if (!READ_ONCE(nr_capped_cgroups))
		return NULL;
	*cgid = task_cgid(p);
	return bpf_map_lookup_elem(&cgroup_bw, cgid);
}

/* Whether the cgroup used its quota in the current period (starting a new period if due). */
static __always_inline bool bw_exhausted(struct cgroup_bw *bw, u64 now)
{
	if (now - bw->period_start_ns >= bw->period_ns) {
		bw->period_start_ns = now;
		bw->used_ns = 0;
	}
	return bw->used_ns >= bw->quota_ns;
}

/*
 * How long worker w, on a CPU since w->run_start_ns, can go without a check: until its slice ends;
 * a check interval once it is near or past it (the enforcement's resolution: hint, then the gate at
 * slice + grace); a grace period while its episode is open (it runs demoted, so any waking task
 * preempts it; what is left to decide is a repeated kick, once per grace period, or a lift). A
 * runtime an acknowledgement has since reset only makes the check come early.
 */
static __always_inline u64 check_due_in(struct worker_ctx *w, u64 now)
{
	u64 runtime = w->runtime_ns, slice = cfg_slice_ns;

	if (now > w->run_start_ns)
		runtime += now - w->run_start_ns;
	if (READ_ONCE(w->esc.open))
		return cfg_grace_ns > check_interval_ns ? cfg_grace_ns : check_interval_ns;
	if (runtime + check_interval_ns >= slice)
		return check_interval_ns;
	return slice - runtime;
}

/*
 * Arm the check timer for `now + due_in` if that is earlier than it is due. Every arming of the timer
 * goes through timer_expires_ns: whoever starts the timer last has seen the earliest expiry asked for
 * (the callback re-reads it after its own start), so a sooner request is never overwritten by a later.
 */
static __always_inline bool timer_expiry_lower(u64 at)
{
	u64 cur = READ_ONCE(timer_expires_ns);
	u32 i;

	bpf_for(i, 0, 8) {
		u64 seen;

		if (!time_before(at, cur))
			return false;
		seen = __sync_val_compare_and_swap(&timer_expires_ns, cur, at);
		if (seen == cur)
			return true;
		cur = seen;
	}
	return false;
}

static __always_inline void timer_bring_forward(struct bpf_timer *timer, u64 now, u64 due_in)
{
	if (timer_expiry_lower(now + due_in))
		bpf_timer_start(timer, due_in, 0);
}

/* Raise slots_seen to n (the sweep's bound). */
static __always_inline void slots_seen_at_least(u32 n)
{
	u32 i;

	bpf_for(i, 0, 8) {
		u32 cur = READ_ONCE(slots_seen);

		if (cur >= n || __sync_val_compare_and_swap(&slots_seen, cur, n) == cur)
			return;
	}
}

/*
 * The overrun check of every CPU's running worker (finer than the scheduler tick), and the sweep of
 * open episodes off CPU; re-armed for the earliest moment anything needs deciding.
 */
static int check_timer_fn(void *map, int *key, struct bpf_timer *timer)
{
	u64 now = bpf_ktime_get_ns(), due = IDLE_CHECK_NS, sweep = SWEEP_INTERVALS * check_interval_ns, at;
	u32 cpu;

	count(MORPHEUS_CNT_TIMER_RUNS);
	/*
	 * Plan the longest period first, then look: a worker that starts running after the scan below
	 * sees this plan in ops.running (both sides order their store before their load with a fully
	 * ordered atomic) and brings the timer forward itself.
	 */
	__sync_lock_test_and_set(&timer_expires_ns, now + IDLE_CHECK_NS);
	full_barrier();
	/* Nothing here reads a region header (runtimes can write it). */
	bpf_for(cpu, 0, nr_possible_cpus) {
		struct worker_ctx *w;
		u32 *cur, slot;

		if (cpu >= MORPHEUS_BPF_MAX_CPUS)
			break;
		cur = bpf_map_lookup_elem(&cpu_worker, &cpu);
		if (!cur || !*cur)
			continue;
		slot = *cur - 1;
		w = bpf_map_lookup_elem(&workers, &slot);
		if (!w || w->cpu != (s32)cpu) {
			/* Between ops.running's two stores: look again soon. */
			due = check_interval_ns;
			continue;
		}
		check_worker(slot, w, cpu, now);
		at = check_due_in(w, now);
		if (at < due)
			due = at;
	}
	/*
	 * Open episodes of workers off CPU still end (acknowledged, gone, or their bound): swept every
	 * SWEEP_INTERVALS check intervals while an episode is open, over the slots workers have run in.
	 */
	if (READ_ONCE(nr_open_episodes) > 0) {
		if (now - READ_ONCE(last_sweep_ns) >= sweep) {
			u32 slot, nr_slots = READ_ONCE(slots_seen);

			WRITE_ONCE(last_sweep_ns, now);
			if (nr_slots > cfg_scb_count)
				nr_slots = cfg_scb_count;
			if (nr_slots > MORPHEUS_MAX_WORKERS)
				nr_slots = MORPHEUS_MAX_WORKERS;
			bpf_for(slot, 0, nr_slots) {
				struct worker_ctx *w = bpf_map_lookup_elem(&workers, &slot);
				struct morpheus_scb *scb;

				if (!w || !w->esc.open || w->cpu >= 0)
					continue;
				scb = scb_at(w->domain, w->local);
				if (scb)
					run_escalation(scb, w, slot, -1, w->runtime_ns, now);
			}
		}
		if (sweep < due)
			due = sweep;
	}
	/* Throttled tasks become runnable at a period boundary: wake idle CPUs to dispatch them. */
	if (scx_bpf_dsq_nr_queued(THROTTLED_DSQ) > 0) {
		due = check_interval_ns;
		bpf_for(cpu, 0, nr_possible_cpus)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	if (READ_ONCE(nr_capped_cgroups) > 0)
		due = check_interval_ns;
	/*
	 * Take the earliest of this plan and what ops.running asked meanwhile, start the timer, then look
	 * once more: a request that came after the first look started the timer itself, after this.
	 */
	timer_expiry_lower(now + due);
	at = READ_ONCE(timer_expires_ns);
	bpf_timer_start(timer, time_before(now, at) ? at - now : 0, 0);
	full_barrier();
	if (READ_ONCE(timer_expires_ns) != at) {
		at = READ_ONCE(timer_expires_ns);
		bpf_timer_start(timer, time_before(now, at) ? at - now : 0, 0);
	}
	return 0;
}

s32 BPF_STRUCT_OPS(morpheus_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct cgroup_bw *bw;
	bool is_idle = false;
	u64 cgid;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	/* An idle CPU takes the task at once, unless its cgroup is out of quota (enqueue holds it). */
	bw = task_bw(p, &cgid);
	if (is_idle && !(bw && bw_exhausted(bw, bpf_ktime_get_ns())))
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, base_slice(), 0);
	return cpu;
}

/*
 * A task waking up on a busy CPU preempts the task running there if that one is ahead of it in
 * vtime by more than a fraction of a slice (the margin keeps tasks of equal standing from trading
 * the CPU at every wake-up). Without it a waking task waits out the runner's whole slice.
 */
static __always_inline void preempt_on_wakeup(struct task_struct *p, u64 vtime)
{
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 runner_vtime;

	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	if (!run || !run->weight)
		return;
	runner_vtime = run->vtime + scale_by_weight(bpf_ktime_get_ns() - run->start_ns, run->weight);
	if (run->demoted || time_before(vtime + base_slice() / 8, runner_vtime)) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		count(MORPHEUS_CNT_WAKE_PREEMPTS);
	}
}

/* The bookkeeping of p if it is a registered worker whose escalation episode is open, else NULL. */
static __always_inline struct worker_ctx *open_episode_of(struct task_struct *p)
{
	struct morpheus_worker_slot *ws;
	struct worker_ctx *w;
	u32 slot;

	/* Every other task pays one load here. */
	if (READ_ONCE(nr_open_episodes) <= 0)
		return NULL;
	ws = worker_slot_of(p->pid);
	if (!ws)
		return NULL;
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w || w->tid != p->pid || !READ_ONCE(w->esc.open))
		return NULL;
	return w;
}

/*
 * Whether p waits in DEMOTED_DSQ: a worker whose episode is open, unless it is inside a critical
 * section. This is where a kick takes effect, so in_critical is loaded here again (SCB.md §5.6): a
 * section begun since the decision keeps the worker's place in the shared queue.
 */
static __always_inline bool demoted_on_enqueue(struct task_struct *p)
{
	struct worker_ctx *w = open_episode_of(p);
	struct morpheus_scb *scb;

	if (!w)
		return false;
	scb = scb_at(w->domain, w->local);
	if (!scb)
		return false;
	if (morpheus_effect_may_hold(scb))
		return true;
	count(MORPHEUS_CNT_KICKS_SPARED_CRITICAL);
	return false;
}

/*
 * Workers whose episode was lifted (acknowledged, expired, revoked, unregistered) while they waited in
 * DEMOTED_DSQ go back to the shared queue, and their CPU is woken if it idles. They go in level with
 * the tasks running now (vtime_now), without a sleeper's credit: a demoted worker was runnable all
 * along, and its vtime stood still only because it was kept off the CPU. With the credit, a worker
 * whose episode had just expired went to the head of the queue and ran a whole base slice that a
 * waking task could not preempt (it was not "ahead" of the waker): traced in the VM, the zombie of the
 * starvation scenario ran 40 ms at a stretch while cooperative workers woke on its CPU.
 */
static __always_inline void release_lifted(void)
{
	struct task_struct *p;

	bpf_for_each(scx_dsq, p, DEMOTED_DSQ, 0) {
		u64 vtime, level;

		if (open_episode_of(p))
			continue;
		vtime = p->scx.dsq_vtime;
		level = READ_ONCE(vtime_now);
		scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, time_before(vtime, level) ? level : vtime);
		if (scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, SHARED_DSQ, 0))
			scx_bpf_kick_cpu(scx_bpf_task_cpu(p), SCX_KICK_IDLE);
	}
}

void BPF_STRUCT_OPS(morpheus_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct cgroup_bw *bw;
	u64 cgid, vtime = queue_vtime(p);

	bw = task_bw(p, &cgid);
	if (bw && bw_exhausted(bw, bpf_ktime_get_ns()) && hold_allowed(p)) {
		scx_bpf_dsq_insert(p, THROTTLED_DSQ, base_slice(), enq_flags);
		count(MORPHEUS_CNT_BW_THROTTLED);
		return;
	}
	/*
	 * SCX_ENQ_LAST: p's slice ended and its CPU found nothing else to run (dispatch has already
	 * come back empty). It goes straight back on that CPU: queued in the shared queue instead,
	 * nothing would dispatch it until the idle CPU happened to be woken (SCX_OPS_ENQ_LAST is
	 * set only so the hold above can take a capped task off its CPU).
	 */
	if (enq_flags & SCX_ENQ_LAST) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, base_slice(), enq_flags);
		return;
	}
	/* Behind every other runnable task, and a demoted worker that wakes preempts no one. */
	if (demoted_on_enqueue(p)) {
		s32 idle;

		scx_bpf_dsq_insert_vtime(p, DEMOTED_DSQ, base_slice(), vtime, enq_flags);
		count(MORPHEUS_CNT_DEMOTED_ENQUEUES);
		/* Still work-conserving: a CPU with nothing to run takes it. */
		idle = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (idle >= 0)
			scx_bpf_kick_cpu(idle, SCX_KICK_IDLE);
		return;
	}
	scx_bpf_dsq_insert_vtime(p, SHARED_DSQ, base_slice(), vtime, enq_flags);
	if (enq_flags & SCX_ENQ_WAKEUP)
		preempt_on_wakeup(p, vtime);
}

void BPF_STRUCT_OPS(morpheus_dispatch, s32 cpu, struct task_struct *prev)
{
	struct task_struct *p;
	u64 now;

	if (scx_bpf_dsq_nr_queued(THROTTLED_DSQ) > 0) {
		/* Release the tasks whose cgroup has quota again (a new period began). */
		now = bpf_ktime_get_ns();
		bpf_for_each(scx_dsq, p, THROTTLED_DSQ, 0) {
			struct cgroup_bw *bw;
			u64 cgid;

			bw = task_bw(p, &cgid);
			if (!bw || !bw_exhausted(bw, now)) {
				struct morpheus_scb *scb = worker_scb_of(p);

				/* A held task cannot run, so cannot enter a section: this sees holds that began inside one. */
				if (scb && !morpheus_effect_may_hold(scb))
					count(MORPHEUS_CNT_HELD_IN_CRITICAL);
				scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, queue_vtime(p));
				scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, SHARED_DSQ, 0);
			}
		}
	}
	if (scx_bpf_dsq_nr_queued(DEMOTED_DSQ) > 0)
		release_lifted();
	if (scx_bpf_dsq_move_to_local(SHARED_DSQ, 0))
		return;
	/*
	 * Nothing else can run here: a runnable prev whose slice ended keeps the CPU for another slice
	 * (SCX_OPS_ENQ_LAST would otherwise take it through ops.enqueue and the idle task and back).
	 * Not a task of a capped cgroup: its run is charged to the quota in ops.stopping, and the hold
	 * in ops.enqueue decides whether it may go on. Either way a runnable prev goes before a demoted
	 * worker (a kick that landed on another task than the one it was meant for costs that task
	 * nothing).
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		u64 cgid;

		if (!task_bw(prev, &cgid))
			scx_bpf_task_set_slice(prev, base_slice());
		return;
	}
	scx_bpf_dsq_move_to_local(DEMOTED_DSQ, 0);
}

/* Tasks queued since p began to run shorten its slice to their share of the CPU (contended_slice). */
static __always_inline void share_on_tick(struct task_struct *p)
{
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 share, ran;

	if (!scx_bpf_dsq_nr_queued(SHARED_DSQ))
		return;
	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	if (!run || !run->weight)
		return;
	share = contended_slice();
	ran = bpf_ktime_get_ns() - run->start_ns;
	if (ran >= share)
		scx_bpf_task_set_slice(p, 0);
	else if (p->scx.slice > share - ran)
		scx_bpf_task_set_slice(p, share - ran);
}

/* A task of a capped cgroup that runs out of quota mid-run is preempted at the next tick. */
void BPF_STRUCT_OPS(morpheus_tick, struct task_struct *p)
{
	struct cgroup_bw *bw;
	struct bw_run *run;
	u32 zero = 0;
	u64 cgid, now;

	share_on_tick(p);
	bw = task_bw(p, &cgid);
	run = bpf_map_lookup_elem(&bw_runs, &zero);
	if (!bw || !run)
		return;
	now = bpf_ktime_get_ns();
	if (run->cgid != cgid) {
		/* The cap arrived while the task was running: account from now on. */
		run->cgid = cgid;
		run->start_ns = now;
		return;
	}
	if (bw->used_ns + (now - run->start_ns) >= bw->quota_ns && hold_allowed(p))
		scx_bpf_task_set_slice(p, 0);
}

void BPF_STRUCT_OPS(morpheus_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us, u64 quota_us,
		    u64 burst_us)
{
	struct cgroup_bw bw = {};
	u64 cgid = cgrp->kn->id;

	/* "max" (no limit) arrives as RUNTIME_INF. */
	if (quota_us == (u64)-1 || !period_us) {
		if (!bpf_map_delete_elem(&cgroup_bw, &cgid))
			__sync_fetch_and_sub(&nr_capped_cgroups, 1);
		return;
	}
	bw.period_ns = period_us * 1000;
	bw.quota_ns = quota_us * 1000;
	bw.period_start_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&cgroup_bw, &cgid, &bw, BPF_NOEXIST) == 0)
		__sync_fetch_and_add(&nr_capped_cgroups, 1);
	else
		bpf_map_update_elem(&cgroup_bw, &cgid, &bw, BPF_EXIST);
}

/* Start accounting a run of a task in a capped cgroup (no-op for everyone else). */
static __always_inline void bw_running(struct task_struct *p)
{
	struct cgroup_bw *bw;
	struct bw_run *run;
	u32 zero = 0;
	u64 cgid;

	bw = task_bw(p, &cgid);
	run = bpf_map_lookup_elem(&bw_runs, &zero);
	if (!run)
		return;
	run->cgid = bw ? cgid : 0;
	run->start_ns = bw ? bpf_ktime_get_ns() : 0;
}

/* Charge the run that ends to the task's capped cgroup. */
static __always_inline void bw_stopping(struct task_struct *p)
{
	struct cgroup_bw *bw;
	struct bw_run *run;
	u32 zero = 0;
	u64 cgid, now;

	run = bpf_map_lookup_elem(&bw_runs, &zero);
	if (!run || !run->cgid)
		return;
	bw = task_bw(p, &cgid);
	if (bw && cgid == run->cgid) {
		now = bpf_ktime_get_ns();
		bw_exhausted(bw, now);
		if (now > run->start_ns)
			__sync_fetch_and_add(&bw->used_ns, now - run->start_ns);
	}
	run->cgid = 0;
}

/* Note the run that starts on this CPU and advance the global vtime clock. */
static __always_inline void vtime_running(struct task_struct *p)
{
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 vtime = p->scx.dsq_vtime, share;

	if (time_before(READ_ONCE(vtime_now), vtime))
		WRITE_ONCE(vtime_now, vtime);
	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	if (!run)
		return;
	run->start_ns = bpf_ktime_get_ns();
	run->vtime = vtime;
	run->weight = p->scx.weight ?: 100;
	run->demoted = 0;
	share = contended_slice();
	if (p->scx.slice > share)
		scx_bpf_task_set_slice(p, share);
}

/* Charge the run that ends to p's vtime: the CPU time it used, scaled by its weight. */
static __always_inline void vtime_stopping(struct task_struct *p)
{
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 now = bpf_ktime_get_ns();

	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	if (!run || !run->weight)
		return;
	if (now > run->start_ns)
		scx_bpf_task_set_dsq_vtime(p, p->scx.dsq_vtime +
					   scale_by_weight(now - run->start_ns, run->weight));
	run->weight = 0;
}

void BPF_STRUCT_OPS(morpheus_running, struct task_struct *p)
{
	struct check_timer *timer;
	struct morpheus_worker_slot *ws;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 tid = p->pid, slot, zero = 0;
	s32 cpu;
	u64 now;

	vtime_running(p);
	bw_running(p);
	ws = worker_slot_of(tid);
	if (!ws)
		return;
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w)
		return;
	scb = scb_at(ws->domain, ws->local);
	if (!scb) {
		count(MORPHEUS_CNT_STALE_SLOTS);
		return;
	}
	now = bpf_ktime_get_ns();
	if (w->tid != tid || w->domain != ws->domain || w->local != ws->local) {
		/* First run of a newly registered thread in this slot: its SCB is where the agent says. */
		w->tid = tid;
		w->pid = p->tgid;
		w->domain = ws->domain;
		w->local = ws->local;
		reset_runtime(w, load_acquire(&scb->last_ack_seq), now);
		w->verdict_seq = 0;
		w->last_verdict = 0;
		/* The previous holder's episode ended with its slot (the agent lifted its cap). */
		if (w->esc.open && __sync_fetch_and_sub(&nr_open_episodes, 1) <= 0)
			WRITE_ONCE(nr_open_episodes, 0);
		__builtin_memset(&w->esc, 0, sizeof(w->esc));
		slots_seen_at_least(slot + 1);
	}
	cpu = scx_bpf_task_cpu(p);
	w->run_start_ns = now;
	w->cpu = cpu;
	if (cpu >= 0 && cpu < MORPHEUS_BPF_MAX_CPUS) {
		u32 cpu_key = cpu, val = slot + 1;

		bpf_map_update_elem(&cpu_worker, &cpu_key, &val, BPF_ANY);
	}
	/* After the cpu_worker store, ordered before the load of the timer's plan (timer_bring_forward). */
	full_barrier();
	timer = bpf_map_lookup_elem(&check_timer, &zero);
	if (timer)
		timer_bring_forward(&timer->timer, now, check_due_in(w, now));
	/*
	 * A worker whose escalation episode is open runs behind everyone until it is lifted (as the
	 * simulation backend's demotion does): it waits in DEMOTED_DSQ (ops.enqueue), and when it does
	 * run, it has a short slice and any task waking on its CPU preempts it. Not inside a critical
	 * section: the effect re-checks in_critical where it takes hold.
	 */
	if (READ_ONCE(w->esc.open) && morpheus_effect_may_hold(scb)) {
		u32 cpu_key = cpu;
		struct cpu_run *run = bpf_map_lookup_elem(&cpu_runs, &cpu_key);

		if (run)
			run->demoted = 1;
		if (p->scx.slice > cfg_grace_ns)
			scx_bpf_task_set_slice(p, cfg_grace_ns);
	}
	count(MORPHEUS_CNT_WORKER_RUNS);
}

void BPF_STRUCT_OPS(morpheus_stopping, struct task_struct *p, bool runnable)
{
	struct morpheus_worker_slot *ws;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 tid = p->pid, slot, zero = 0;
	s32 cpu;
	u64 now;

	vtime_stopping(p);
	bw_stopping(p);
	ws = worker_slot_of(tid);
	if (!ws) {
		/* Unregistered while it ran: forget it on its CPU so the timer stops looking. */
		u32 cpu_key = scx_bpf_task_cpu(p), *cur;

		cur = bpf_map_lookup_elem(&cpu_worker, &cpu_key);
		if (cur && *cur)
			*cur = 0;
		return;
	}
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w || w->tid != tid || w->cpu < 0)
		return;
	scb = scb_at(w->domain, w->local);
	if (!scb)
		return;

	now = bpf_ktime_get_ns();
	cpu = w->cpu;
	if (cpu < MORPHEUS_BPF_MAX_CPUS) {
		u32 cpu_key = cpu;

		bpf_map_update_elem(&cpu_worker, &cpu_key, &zero, BPF_ANY);
	}
	if (now > w->run_start_ns)
		w->runtime_ns += now - w->run_start_ns;
	w->cpu = -1;

	if (!runnable) {
		/* A voluntary sleep or block is a yield point. */
		reset_runtime(w, load_acquire(&scb->last_ack_seq), now);
		count(MORPHEUS_CNT_SLEEP_RESETS);
		return;
	}
	/* Preempted or slice expired while still runnable: account, hint if overrun. */
	check_worker(slot, w, -1, now);
}

/* A task entering sched_ext starts level with the tasks running now. */
void BPF_STRUCT_OPS(morpheus_enable, struct task_struct *p)
{
	scx_bpf_task_set_dsq_vtime(p, READ_ONCE(vtime_now));
}

s32 BPF_STRUCT_OPS_SLEEPABLE(morpheus_init)
{
	struct check_timer *t;
	u32 zero = 0;
	s32 err;

	err = scx_bpf_create_dsq(SHARED_DSQ, -1);
	if (!err)
		err = scx_bpf_create_dsq(THROTTLED_DSQ, -1);
	if (!err)
		err = scx_bpf_create_dsq(DEMOTED_DSQ, -1);
	if (err) {
		scx_bpf_error("failed to create the dispatch queues: %d", err);
		return err;
	}

	t = bpf_map_lookup_elem(&check_timer, &zero);
	if (!t) {
		scx_bpf_error("check timer map has no element");
		return -ENOENT;
	}
	bpf_timer_init(&t->timer, &check_timer, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, check_timer_fn);
	timer_expires_ns = bpf_ktime_get_ns() + check_interval_ns;
	err = bpf_timer_start(&t->timer, check_interval_ns, 0);
	if (err) {
		scx_bpf_error("failed to start the overrun check timer: %d", err);
		return err;
	}
	return 0;
}

void BPF_STRUCT_OPS(morpheus_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(morpheus_ops,
	       .select_cpu = (void *)morpheus_select_cpu,
	       .enqueue = (void *)morpheus_enqueue,
	       .dispatch = (void *)morpheus_dispatch,
	       .running = (void *)morpheus_running,
	       .stopping = (void *)morpheus_stopping,
	       .tick = (void *)morpheus_tick,
	       .enable = (void *)morpheus_enable,
	       .cgroup_set_bandwidth = (void *)morpheus_cgroup_set_bandwidth,
	       .init = (void *)morpheus_init,
	       .exit = (void *)morpheus_exit,
	       /* Enqueue even the last runnable task when its slice ends, so a capped one can be held. */
	       .flags = SCX_OPS_ENQ_LAST,
	       .name = "morpheus");
