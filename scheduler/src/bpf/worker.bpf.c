/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The worker layer of scx_morpheus. Registered worker threads (tid -> slot, maintained by the agent)
 * are accounted: CPU time since their last yield point, and on slice overrun preempt_seq is bumped in
 * the worker's Shared Control Block and a hint published. Each uid's SCBs are in its own region map (a
 * trust domain, spec/SCB.md §10), reached through the `regions` array of maps. In enforced mode a
 * worker that passes the escalation gate gets its episode's action: a KICK, which the host carries out
 * (morpheus_host_kick: sched_ext preempts it and runs it only when nothing else can until its episode
 * is lifted), and/or a report to the agent for a cgroup cap. Protocol: spec/SCB.md; the decisions
 * themselves: src/policy/morpheus_policy.h (shared with the simulation backend).
 *
 * No sched_ext kfunc or type is used here (morpheus.bpf.h): the host calls the worker_* functions
 * from its own hooks with a thread's tid and CPU, and the layer reaches the host only through the
 * morpheus_host_* interface.
 */
#include "morpheus.bpf.h"

/* The full barrier's cache lines, one per CPU (morpheus.bpf.h). */
struct barrier_line barrier_lines[MORPHEUS_BPF_MAX_CPUS];

/* Set by the agent before load. */
const volatile u64 check_interval_ns = 1000000;
const volatile u32 nr_possible_cpus = 1;
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

/*
 * One bit per tid below MORPHEUS_TID_LIMIT (intf.h), written only by the agent through its own mapping
 * (src/kernel.rs, TidBits): set before it writes a tid's worker_slots entry, cleared only once the tid
 * has none. So a clear bit means "no registered worker", which is what nearly every context switch of
 * the machine asks (most answered already by worker_tid_summary below); a set bit sends the question to worker_slots, the one
 * truth (an entry this side removed at the thread's exit leaves the bit set until the agent releases
 * the slot).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MORPHEUS_TID_WORDS);
	__type(key, u32);
	__type(value, u64);
} worker_tids SEC(".maps");

/*
 * One bit per block of MORPHEUS_TID_SUMMARY_BLOCK tids (intf.h), written only by the agent through its
 * own mapping (src/kernel.rs, TidBits), under one lock with worker_tids. Invariant: while a tid's bit
 * in worker_tids is set, its block's bit here is set. The agent sets the block's bit before the tid's
 * bit, and clears it only after clearing a tid's bit has left every bit of the block clear. So a clear
 * bit here means "no tid of the block may be a worker", read before worker_tids, and a switch between
 * threads that are no worker touches only these 1 KiB instead of a line of the 512 KiB bitmap.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MORPHEUS_TID_SUMMARY_WORDS);
	__type(key, u32);
	__type(value, u64);
} worker_tid_summary SEC(".maps");

/* Hint records; their one consumer is the agent (SCB.md §8), so the ring is never pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MORPHEUS_HINT_RING_BYTES);
} hints SEC(".maps");

/* Detection records (intf.h, struct morpheus_detection); their one consumer is the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MORPHEUS_DETECTION_RING_BYTES);
} detections SEC(".maps");

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

/*
 * One CPU's entry of cpu_worker: slot + 1 of the registered worker running there, 0 if none. Each
 * entry is a whole cache line (MORPHEUS_CACHE_LINE_SIZE, the ABI's), so two CPUs' words are a line
 * apart and never share one whatever the map's base alignment: a CPU's switches read and write its own
 * entry, and no other CPU's switch writes that line (only the check timer reads every CPU's entry).
 * Not a per-CPU array: the check timer reads every CPU's entry (a per-CPU array would need a
 * bpf_map_lookup_percpu_elem call for each), and the worker layer stores to the CPU its host names
 * (worker_running's `cpu`, the task's CPU at worker_stopping), where a per-CPU array's inlined lookup
 * reaches only the running CPU's copy.
 */
struct cpu_worker_line {
	u32 slot1;
	u8 _pad[MORPHEUS_CACHE_LINE_SIZE - sizeof(u32)];
};
_Static_assert(sizeof(struct cpu_worker_line) == MORPHEUS_CACHE_LINE_SIZE, "one cpu_worker entry a cache line");

/* Per CPU (struct cpu_worker_line): slot + 1 of the registered worker running there, 0 if none. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MORPHEUS_BPF_MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_worker_line);
} cpu_worker SEC(".maps");

/*
 * The slot each thread's bookkeeping is bound to, by tid (set at the thread's first run in the slot,
 * see worker_running): how the thread's exit finds its slot when the agent has removed its
 * worker_slots entry already. One per bound slot at most.
 */
struct bound_thread {
	u64 start_ns; /* the thread's start time (struct worker_ctx's start_ns) */
	u32 slot;
	u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MORPHEUS_MAX_WORKERS);
	__type(key, u32);
	__type(value, struct bound_thread);
} bound_threads SEC(".maps");

/*
 * Store `val` (slot + 1, or 0) as CPU `cpu`'s entry of cpu_worker: a lookup the verifier inlines for an
 * array and a store, where bpf_map_update_elem would be a helper call on every switch of a worker.
 */
static __always_inline void cpu_worker_set(u32 cpu, u32 val)
{
	struct cpu_worker_line *cur = bpf_map_lookup_elem(&cpu_worker, &cpu);

	if (cur)
		WRITE_ONCE(cur->slot1, val);
}

struct check_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct check_timer);
} check_timer SEC(".maps");

/* The region of trust domain `domain`, or NULL if the agent has made none there. */
static __always_inline struct morpheus_region *region_of(u32 domain)
{
	void *inner = bpf_map_lookup_elem(&regions, &domain);
	u32 zero = 0;

	if (!inner)
		return NULL;
	return bpf_map_lookup_elem(inner, &zero);
}

/*
 * Whether thread `tid` may have a worker_slots entry: false only if its block's bit in
 * worker_tid_summary or its own bit in worker_tids is clear (the summary first: a clear block bit
 * implies a clear tid bit). Array lookups the verifier inlines (no call, no hash), for the threads that
 * are no worker.
 */
static __always_inline bool tid_may_be_worker(u32 tid)
{
	u32 block = tid >> MORPHEUS_TID_SUMMARY_SHIFT, sword = block / 64, word = tid / 64;
	u64 *bits;

	if (tid >= MORPHEUS_TID_LIMIT)
		return true;
	bits = bpf_map_lookup_elem(&worker_tid_summary, &sword);
	if (bits && !((READ_ONCE(*bits) >> (block % 64)) & 1))
		return false;
	bits = bpf_map_lookup_elem(&worker_tids, &word);
	return !bits || ((READ_ONCE(*bits) >> (tid % 64)) & 1);
}

/* Where a registered thread's bookkeeping and SCB are (the agent's record), or NULL. */
static __always_inline struct morpheus_worker_slot *worker_slot_of(u32 tid)
{
	struct morpheus_worker_slot *ws;

	if (!tid_may_be_worker(tid))
		return NULL;
	ws = bpf_map_lookup_elem(&worker_slots, &tid);
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

/*
 * Whether the bookkeeping w of the slot that thread `tid`'s worker_slots entry ws names is bound to
 * another thread that had this tid (their start times tell them apart): that thread exited, as a tid
 * names one live thread at a time, and ws is its registration, not yet removed (worker_exit runs after
 * the tid is released). Thread `tid` is then not that worker.
 */
static __always_inline bool bound_elsewhere(struct worker_ctx *w, struct morpheus_worker_slot *ws, u32 tid,
					    u64 start_ns)
{
	return w->tid == tid && w->domain == ws->domain && w->local == ws->local && w->start_ns &&
	       w->start_ns != start_ns;
}

/*
 * Whether thread `tid` (started at `start_ns`) started after its worker_slots entry ws was written
 * (intf.h, registered_ns): then it is not the thread that registered, which held the tid when the
 * entry was written, but a later holder of the tid.
 */
static __always_inline bool started_after_registration(struct morpheus_worker_slot *ws, u64 start_ns)
{
	return start_ns > ws->registered_ns;
}

/* The SCB of thread `tid` (started at `start_ns`) if it is a registered worker, else NULL. */
static __always_inline struct morpheus_scb *worker_scb_of(u32 tid, u64 start_ns)
{
	struct morpheus_worker_slot *ws = worker_slot_of(tid);
	struct worker_ctx *w;
	u32 slot;

	if (!ws || started_after_registration(ws, start_ns))
		return NULL;
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (w && bound_elsewhere(w, ws, tid, start_ns))
		return NULL;
	return scb_at(ws->domain, ws->local);
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

/*
 * A record on ring `ring` of `size` bytes wakes the agent only once the ring is half full: the agent
 * drains on its own tick (waking it per record would cost the CPUs it runs on), and a burst is drained
 * long before the ring fills, however long that tick.
 */
static __always_inline u64 ring_wakeup(void *ring, u64 size)
{
	return bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= size / 2 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/*
 * Bump preempt_seq and publish a hint; `runtime` is past `slice`. `ack`: the last_ack_seq the decision
 * loaded (a detection record if this is the first request since it).
 */
static void emit_hint(struct morpheus_scb *scb, u32 slot, u32 tid, u64 now, u64 seen_last_hint,
		      u64 runtime, u64 slice, u64 ack)
{
	struct morpheus_detection *det;
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
	bpf_ringbuf_submit(hint, ring_wakeup(&hints, MORPHEUS_HINT_RING_BYTES));
	count(MORPHEUS_CNT_HINTS_EMITTED);
	if (seq - 1 != ack)
		return;
	det = bpf_ringbuf_reserve(&detections, sizeof(*det), 0);
	if (!det)
		return;
	det->overrun_ns = runtime - slice;
	det->slot = slot;
	det->_pad = 0;
	bpf_ringbuf_submit(det, ring_wakeup(&detections, MORPHEUS_DETECTION_RING_BYTES));
}

/*
 * `wake`: the agent has something to carry out for this record (a throttle, a kick its host could not
 * take, or the lift of either), so the record wakes it; the rest it counts on its next tick.
 */
static __always_inline void send_escalation_event(struct worker_ctx *w, u32 slot, u64 now, u64 seq, u32 policy,
						  u32 action, u64 overrun, bool wake)
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
	bpf_ringbuf_submit(ev, wake ? 0 : BPF_RB_NO_WAKEUP);
}

/*
 * Count a gate verdict by the policy header's rule (morpheus_verdict_count: past the slice, once per
 * pending request and verdict), which the simulation backend counts by too. A decision may act only
 * when the worker is on a CPU (`cpu` >= 0).
 */
static __always_inline void count_verdict(struct worker_ctx *w, s32 cpu, u64 runtime, u64 slice, u64 seq,
					  enum morpheus_gate_verdict verdict)
{
	if (morpheus_verdict_count(&w->verdicts, cpu >= 0, runtime, slice, seq, verdict) &&
	    (u32)verdict < MORPHEUS_NR_GATE_VERDICTS)
		__sync_fetch_and_add(&gate_verdicts[verdict], 1);
}

/*
 * Close the worker's episode. An effect the agent carries out is reported so the agent undoes it: a
 * cgroup cap (UNTHROTTLE), or a kick its host left to it (RESTORE: the tracing host's agent demotes).
 */
static __always_inline void lift_escalation(struct morpheus_scb *scb, struct worker_ctx *w, u32 slot, u64 now,
			    enum morpheus_escalation_step step, struct morpheus_gate_input *in)
{
	if (w->esc.throttled || w->agent_effect)
		send_escalation_event(w, slot, now, w->esc.preempt_seq, in->escalation_policy,
				      w->esc.throttled ? MORPHEUS_ESCALATION_ACTION_UNTHROTTLE :
							 MORPHEUS_ESCALATION_ACTION_RESTORE,
				      0, true);
	w->agent_effect = 0;
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
	bool by_agent = true;

	live_gate_config(&cfg);
	step = escalation_decide(&cfg, scb, &w->esc, runtime, now, &in, &verdict);
	count_verdict(w, cpu, runtime, in.slice_ns, in.preempt_seq, verdict);
	if (step == MORPHEUS_STEP_NONE)
		return;
	if (morpheus_step_is_lift(step)) {
		lift_escalation(scb, w, slot, now, step, &in);
		return;
	}
	action = morpheus_step_action(step);
	if (!action || cpu < 0)
		return;
	/* A kick the agent carried out is a demotion, in force until the lift: a repeat changes nothing. */
	if (!morpheus_step_takes_effect(step, w->esc.open && w->agent_effect))
		return;
	opened = !w->esc.open;
	morpheus_escalation_commit(&w->esc, step, &in, now);
	if (opened)
		__sync_fetch_and_add(&nr_open_episodes, 1);
	/* One meaning in every backend: an episode is open (an action taken, not yet lifted). */
	WRITE_ONCE(scb->escalated, 1);

	if (action == MORPHEUS_ESCALATION_ACTION_KICK) {
		by_agent = !morpheus_host_kick(cpu);
	} else {
		/* The agent caps the cgroup; the hold is enforced in enqueue, which re-checks in_critical. */
		count(MORPHEUS_CNT_THROTTLES);
	}
	if (by_agent)
		w->agent_effect = 1;
	__sync_fetch_and_add(&scb->escalations, 1);
	count(MORPHEUS_CNT_ESCALATIONS);
	if (in.escalation_policy < MORPHEUS_NR_POLICIES)
		__sync_fetch_and_add(&escalations_by_policy[in.escalation_policy], 1);
	send_escalation_event(w, slot, now, in.preempt_seq, in.escalation_policy, action,
			      runtime - in.slice_ns - in.grace_ns, by_agent);
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
	state = load_acquire(&scb->worker_state);
	/* The yield-point rule of the policy header, the simulation backend's too (SCB.md §5.2); a sleep is
	 * seen where it happens, in worker_stopping. */
	switch (morpheus_yield_point(w->seen_ack_seq, ack, state, 0)) {
	case MORPHEUS_YIELD_POINT_NONE:
		break;
	case MORPHEUS_YIELD_POINT_ACKNOWLEDGED:
		count(MORPHEUS_CNT_ACK_RESETS);
		reset_runtime(w, ack, now);
		break;
	default:
		reset_runtime(w, ack, now);
		break;
	}
	runtime = w->runtime_ns;
	if (cpu >= 0 && now > w->run_start_ns)
		runtime += now - w->run_start_ns;

	slice = cfg_slice_ns;
	WRITE_ONCE(scb->budget_remaining_ns, runtime < slice ? slice - runtime : 0);
	WRITE_ONCE(scb->kernel_pressure_level, READ_ONCE(pressure_level));

	last_hint = READ_ONCE(scb->last_hint_ns);
	/* A rate-limited decision with the request still pending drops nothing (SCB.md §5.2, 1.5). */
	hint = morpheus_hint_decide(state, runtime, slice, now, last_hint, cfg_hint_min_interval_ns,
				    READ_ONCE(scb->preempt_seq), ack);
	if (hint == MORPHEUS_HINT_EMIT) {
		emit_hint(scb, slot, tid, now, last_hint, runtime, slice, ack);
	} else if (morpheus_hint_dropped(hint)) {
		__sync_fetch_and_add(&scb->hints_dropped, 1);
		count(MORPHEUS_CNT_HINTS_RATE_LIMITED);
	}

	/* Not in the decision that made the request; an open episode is looked at for its lifts. */
	if (morpheus_gate_due(w->esc.open, hint, runtime, slice) && (w->esc.open || cpu >= 0))
		run_escalation(scb, w, slot, cpu, runtime, now);
}

/*
 * How long worker w, on a CPU since w->run_start_ns, can go without a check: until its slice ends,
 * however near that is (a check that comes a little before the end, for another CPU's worker, must
 * not put the hint a whole check interval past it); a check interval once it is past it (the
 * enforcement's resolution: further hints, then the gate at slice + grace); a grace period while its
 * episode is open (it runs demoted, so any waking task preempts it; what is left to decide is a
 * repeated kick, once per grace period, or a lift). A runtime an acknowledgement has since reset
 * only makes the check come early.
 */
static __always_inline u64 check_due_in(struct worker_ctx *w, u64 now)
{
	u64 runtime = w->runtime_ns, slice = cfg_slice_ns;

	if (now > w->run_start_ns)
		runtime += now - w->run_start_ns;
	if (READ_ONCE(w->esc.open))
		return cfg_grace_ns > check_interval_ns ? cfg_grace_ns : check_interval_ns;
	if (runtime >= slice)
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

/*
 * bpf_timer_start's flags, chosen once by worker_timer_start: BPF_F_TIMER_CPU_PIN (Linux 6.7) where the
 * kernel takes it, so that the check timer expires on the CPU that last brought it forward (the CPU
 * of the worker whose slice ends first) and is never moved to another; 0 on a kernel that refuses the
 * flag. The agent reads it (whether the timer is pinned).
 */
u64 timer_start_flags;

static __always_inline u64 timer_flags(void)
{
	return READ_ONCE(timer_start_flags);
}

static __always_inline void timer_bring_forward(struct bpf_timer *timer, u64 now, u64 due_in)
{
	if (timer_expiry_lower(now + due_in))
		bpf_timer_start(timer, due_in, timer_flags());
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
 * The overrun check of every CPU's running worker (finer than the scheduler tick), the sweep of open
 * episodes off CPU and the host's periodic work; re-armed for the earliest moment anything needs
 * deciding.
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
		struct cpu_worker_line *cur;
		struct worker_ctx *w;
		u32 slot1, slot;

		if (cpu >= MORPHEUS_BPF_MAX_CPUS)
			break;
		cur = bpf_map_lookup_elem(&cpu_worker, &cpu);
		if (!cur)
			continue;
		slot1 = READ_ONCE(cur->slot1);
		if (!slot1)
			continue;
		slot = slot1 - 1;
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
	/* The host's own periodic work (sched_ext: cpu.max holds). */
	due = morpheus_host_check(due);
	/*
	 * Take the earliest of this plan and what ops.running asked meanwhile, start the timer, then look
	 * once more: a request that came after the first look started the timer itself, after this.
	 */
	timer_expiry_lower(now + due);
	at = READ_ONCE(timer_expires_ns);
	bpf_timer_start(timer, time_before(now, at) ? at - now : 0, timer_flags());
	full_barrier();
	if (READ_ONCE(timer_expires_ns) != at) {
		at = READ_ONCE(timer_expires_ns);
		bpf_timer_start(timer, time_before(now, at) ? at - now : 0, timer_flags());
	}
	return 0;
}

/*
 * The bookkeeping of thread `tid` (started at `start_ns`) if it is a registered worker whose
 * escalation episode is open, else NULL.
 */
static __always_inline struct worker_ctx *open_episode_of(u32 tid, u64 start_ns)
{
	struct morpheus_worker_slot *ws;
	struct worker_ctx *w;
	u32 slot;

	/* Every other task pays one load here. */
	if (READ_ONCE(nr_open_episodes) <= 0)
		return NULL;
	ws = worker_slot_of(tid);
	if (!ws)
		return NULL;
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w || w->tid != tid || w->start_ns != start_ns || !READ_ONCE(w->esc.open))
		return NULL;
	return w;
}

/* The region of trust domain `domain`, or NULL (morpheus.bpf.h). */
__hidden struct morpheus_region *worker_region(u32 domain)
{
	return region_of(domain);
}

/* The bookkeeping of agent slot `slot`, or NULL (morpheus.bpf.h). */
__hidden struct worker_ctx *worker_ctx_of(u32 slot)
{
	return bpf_map_lookup_elem(&workers, &slot);
}

/*
 * Bind slot `slot` (bookkeeping w, not yet changed) to thread `tid` started at `start_ns`, in
 * bound_threads: the slot's previous thread is no longer found there, and a slot this thread was
 * bound to before (it was registered again elsewhere) is bound to it no more.
 */
static __always_inline void bind_thread(struct worker_ctx *w, u32 slot, u32 tid, u64 start_ns)
{
	struct bound_thread *old, new = { .start_ns = start_ns, .slot = slot };
	u32 old_tid = w->tid;

	old = bpf_map_lookup_elem(&bound_threads, &old_tid);
	if (old && old->slot == slot && old->start_ns == w->start_ns)
		bpf_map_delete_elem(&bound_threads, &old_tid);
	old = bpf_map_lookup_elem(&bound_threads, &tid);
	if (old && old->slot != slot && old->start_ns == start_ns) {
		u32 prev = old->slot;
		struct worker_ctx *pw = bpf_map_lookup_elem(&workers, &prev);

		if (pw && pw->tid == tid && pw->start_ns == start_ns)
			pw->start_ns = 0;
	}
	bpf_map_update_elem(&bound_threads, &tid, &new, BPF_ANY);
}

/*
 * A run of thread `tid` (process `pid`, started at `start_ns`) starts on `cpu`; true: demote it
 * (morpheus.bpf.h).
 */
__hidden bool worker_running(u32 tid, u32 pid, u64 start_ns, s32 cpu)
{
	struct check_timer *timer;
	struct morpheus_worker_slot *ws;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 slot, zero = 0;
	bool demote;
	u64 now;

	ws = worker_slot_of(tid);
	if (!ws)
		return false;
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w)
		return false;
	scb = scb_at(ws->domain, ws->local);
	if (!scb) {
		count(MORPHEUS_CNT_STALE_SLOTS);
		return false;
	}
	if (bound_elsewhere(w, ws, tid, start_ns) || started_after_registration(ws, start_ns)) {
		count(MORPHEUS_CNT_TID_REUSED);
		return false;
	}
	now = bpf_ktime_get_ns();
	if (w->tid != tid || w->domain != ws->domain || w->local != ws->local || w->start_ns != start_ns) {
		/*
		 * First run of a newly registered thread in this slot (or of one registered again after
		 * the slot's thread exited): its SCB is where the agent says. It started before the entry
		 * was written (checked above), and the registering thread held the tid then, so this is
		 * that thread.
		 */
		bind_thread(w, slot, tid, start_ns);
		w->tid = tid;
		w->start_ns = start_ns;
		w->pid = pid;
		w->domain = ws->domain;
		w->local = ws->local;
		reset_runtime(w, load_acquire(&scb->last_ack_seq), now);
		__builtin_memset(&w->verdicts, 0, sizeof(w->verdicts));
		/* The previous holder's episode ended with its slot (the agent lifted its cap). */
		if (w->esc.open && __sync_fetch_and_sub(&nr_open_episodes, 1) <= 0)
			WRITE_ONCE(nr_open_episodes, 0);
		__builtin_memset(&w->esc, 0, sizeof(w->esc));
		w->agent_effect = 0;
		slots_seen_at_least(slot + 1);
	}
	w->run_start_ns = now;
	w->cpu = cpu;
	if (cpu >= 0 && cpu < MORPHEUS_BPF_MAX_CPUS)
		cpu_worker_set(cpu, slot + 1);
	/* After the cpu_worker store, ordered before the load of the timer's plan (timer_bring_forward). */
	full_barrier();
	timer = bpf_map_lookup_elem(&check_timer, &zero);
	if (timer)
		timer_bring_forward(&timer->timer, now, check_due_in(w, now));
	/*
	 * A worker whose escalation episode is open runs behind everyone until it is lifted (as the
	 * simulation backend's demotion does), which the host carries out. Not inside a critical
	 * section: the effect re-checks in_critical where it takes hold.
	 */
	demote = READ_ONCE(w->esc.open) && morpheus_effect_may_hold(scb);
	count(MORPHEUS_CNT_WORKER_RUNS);
	return demote;
}

/* The run of thread `tid` (started at `start_ns`) on `task_cpu` ends (morpheus.bpf.h). */
__hidden void worker_stopping(u32 tid, u64 start_ns, s32 task_cpu, bool runnable)
{
	struct morpheus_worker_slot *ws;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 slot;
	s32 cpu;
	u64 now;

	ws = worker_slot_of(tid);
	if (!ws) {
		/* Unregistered while it ran: forget it on its CPU so the timer stops looking. */
		struct cpu_worker_line *cur;
		u32 cpu_key = task_cpu;

		cur = bpf_map_lookup_elem(&cpu_worker, &cpu_key);
		if (cur && cur->slot1)
			cur->slot1 = 0;
		return;
	}
	slot = ws->slot;
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w || w->tid != tid || w->start_ns != start_ns || w->cpu < 0)
		return;
	scb = scb_at(w->domain, w->local);
	if (!scb)
		return;

	now = bpf_ktime_get_ns();
	cpu = w->cpu;
	if (cpu < MORPHEUS_BPF_MAX_CPUS)
		cpu_worker_set(cpu, 0);
	if (now > w->run_start_ns)
		w->runtime_ns += now - w->run_start_ns;
	w->cpu = -1;

	if (!runnable) {
		/* A voluntary sleep or block: a yield point by the policy header's rule (never NONE). */
		u64 ack = load_acquire(&scb->last_ack_seq);
		u32 state = load_acquire(&scb->worker_state);

		if (morpheus_yield_point(w->seen_ack_seq, ack, state, 1) != MORPHEUS_YIELD_POINT_NONE) {
			reset_runtime(w, ack, now);
			count(MORPHEUS_CNT_SLEEP_RESETS);
		}
		return;
	}
	/* Preempted or slice expired while still runnable: account, hint if overrun. */
	check_worker(slot, w, -1, now);
}

/* Whether thread `tid` is a registered worker whose escalation episode is open (morpheus.bpf.h). */
__hidden bool worker_episode_open(u32 tid, u64 start_ns)
{
	return open_episode_of(tid, start_ns) != NULL;
}

/*
 * Whether thread `tid` is demoted now: a worker whose episode is open, unless it is inside a critical
 * section. This is where a kick takes effect, so in_critical is loaded here again (SCB.md §5.6): a
 * section begun since the decision keeps the worker's place.
 */
__hidden bool worker_demoted(u32 tid, u64 start_ns)
{
	struct worker_ctx *w = open_episode_of(tid, start_ns);
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

/* Whether thread `tid` is a registered worker inside a critical section (morpheus.bpf.h). */
__hidden bool worker_in_critical(u32 tid, u64 start_ns)
{
	struct morpheus_scb *scb = worker_scb_of(tid, start_ns);

	return scb && !morpheus_effect_may_hold(scb);
}

/* Start the check timer, once (morpheus.bpf.h). */
__hidden s32 worker_timer_start(void)
{
	struct check_timer *t;
	u32 zero = 0;
	long ret;

	t = bpf_map_lookup_elem(&check_timer, &zero);
	if (!t)
		return -ENOENT;
	bpf_timer_init(&t->timer, &check_timer, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, check_timer_fn);
	timer_expires_ns = bpf_ktime_get_ns() + check_interval_ns;
	ret = bpf_timer_start(&t->timer, check_interval_ns, BPF_F_TIMER_CPU_PIN);
	if (ret != -EINVAL) {
		WRITE_ONCE(timer_start_flags, BPF_F_TIMER_CPU_PIN);
		return ret;
	}
	/* A kernel before 6.7: no pinned BPF timers. */
	WRITE_ONCE(timer_start_flags, 0);
	return bpf_timer_start(&t->timer, check_interval_ns, 0);
}

/*
 * Thread `tid` (started at `start_ns`) exited (morpheus.bpf.h). If a slot is bound to it, the slot's
 * next registration binds afresh whatever its tid, and the thread's worker_slots entry, if the agent
 * has not removed it yet and it still names that slot, is removed: a thread that later gets the tid
 * is never found through it. An entry the agent wrote since for another thread is left alone.
 */
__hidden void worker_exit(u32 tid, u64 start_ns)
{
	struct morpheus_worker_slot *ws;
	struct bound_thread *b;
	struct worker_ctx *w;
	u32 slot;

	b = bpf_map_lookup_elem(&bound_threads, &tid);
	if (!b || b->start_ns != start_ns)
		return;
	slot = b->slot;
	bpf_map_delete_elem(&bound_threads, &tid);
	w = bpf_map_lookup_elem(&workers, &slot);
	if (!w || w->tid != tid || w->start_ns != start_ns)
		return;
	w->start_ns = 0;
	ws = bpf_map_lookup_elem(&worker_slots, &tid);
	if (ws && ws->slot == slot && ws->domain == w->domain && ws->local == w->local) {
		bpf_map_delete_elem(&worker_slots, &tid);
		count(MORPHEUS_CNT_WORKER_EXITS);
	}
}
