/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * scx_morpheus: a sched_ext scheduler that asks cooperative runtimes to yield.
 *
 * Base policy (this file): one shared queue ordered by the rule morpheus_policy.h states (enum
 * morpheus_base_order): (--base-order cputime) weighted virtual time, the task that used the least
 * CPU for its weight first; (lag) the same with a waking task's credit bounded by a slice lag;
 * (burst) lag's key plus the CPU the task used since it last slept, capped; (spare) the same counting
 * only that CPU beyond twice the task's usual burst; (recent) burst's key without that CPU while the
 * task slept and has used less than a base slice since; (arrival, the default) recent, with such a task
 * keyed at the slice-lag floor whatever its vtime, so that tasks that sleep often run in the order they
 * were queued; or (deadline) a deadline, the time a task was queued plus the CPU time it used since it
 * last slept, less a credit for waking often. A waking task preempts the task
 * running on its CPU if that one is well behind it in the same order; an idle CPU found at wake-up
 * takes the task directly. On top of it, the worker layer (worker.bpf.c) accounts registered worker threads and asks
 * them to yield; the ops below call it, and carry out what it decides that only a scheduler can do: a
 * worker whose escalation episode is open is kicked off its CPU and runs only when nothing else can
 * until its episode is lifted. cpu.max is enforced by cpumax.bpf.c, the conformance replays are in
 * replay.bpf.c; morpheus.bpf.h lists the files and what they share.
 */
#include <scx/common.bpf.h>
#include "morpheus.bpf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

/* Set by the agent before load. */
/* 0: the kernel's default slice (SCX_SLICE_DFL). */
const volatile u64 task_slice_ns;
const volatile u32 nr_online_cpus = 1;
/* enum morpheus_base_order: how the shared queue is ordered (the agent sets it; this is its default). */
const volatile u32 base_order = MORPHEUS_BASE_ORDER_ARRIVAL;
/* The wake-up preemption margin in ns (morpheus_base_wake_margin; 0: a slice lag). Set by the agent. */
const volatile u64 wake_margin_ns;

/*
 * Highest queue key seen starting to run: under CPUTIME and LAG the clock a waking task's vtime is
 * clamped against; under BURST the same clock, from the vtimes started (not the keys, which carry the
 * exec runtime); under DEADLINE (keys are times) the level a lifted or enabled task goes in at.
 */
u64 vtime_now;

/* Per task: what the DEADLINE, BURST, SPARE and RECENT orders keep (morpheus_policy.h), created at its first run's end. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct morpheus_base_task);
} base_tasks SEC(".maps");

/* BURST, SPARE and RECENT: the task's vtime is kept apart from its key (struct morpheus_base_task). */
static __always_inline bool vtime_kept_apart(void)
{
	return morpheus_base_keeps_vtime(base_order);
}

/*
 * Debug trace of the base policy (scx_morpheus --debug-base-trace; off by default, and then nothing
 * below it is reached): counts, sums and maxima by enum morpheus_base_trace (intf.h), read by the
 * agent. Only measurement: no scheduling decision reads them.
 */
const volatile bool base_trace_on;
u64 base_trace[MORPHEUS_NR_BASE_TRACE];

/* How a traced task last entered a queue, and when (its wait ends at ops.running). */
#define TRACE_NONE 0
#define TRACE_WAKE 1
#define TRACE_REQUEUE 2
#define TRACE_DIRECT 3

struct trace_task {
	u64 queued_ns;
	u64 kind; /* TRACE_*; TRACE_NONE once its wait was counted */
	u64 spared; /* a TRACE_WAKE that found its CPU running a task it did not preempt */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct trace_task);
} trace_tasks SEC(".maps");

static __always_inline void trace_add(u32 idx, u64 v)
{
	if (idx < MORPHEUS_NR_BASE_TRACE)
		__sync_fetch_and_add(&base_trace[idx], v);
}

/* A maximum (not atomic: a debug figure, one lost update at worst). */
static __always_inline void trace_max(u32 idx, u64 v)
{
	if (idx < MORPHEUS_NR_BASE_TRACE && base_trace[idx] < v)
		base_trace[idx] = v;
}

/* Per CPU: the task running there (any task), for charging its vtime and for wake-up preemption. */
struct cpu_run {
	u64 start_ns; /* when it started running */
	u64 vtime;    /* its queue key (dsq_vtime) then */
	u64 weight;   /* its weight then; 0 when the CPU runs none of our tasks */
	u64 demoted;  /* it is a worker with an open escalation episode: any waking task preempts it */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MORPHEUS_BPF_MAX_CPUS);
	__type(key, u32);
	__type(value, struct cpu_run);
} cpu_runs SEC(".maps");

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

/* CPU time scaled by weight (100 = nice 0): heavier tasks age more slowly. */
static __always_inline u64 scale_by_weight(u64 ns, u64 weight)
{
	return weight ? ns * 100 / weight : ns;
}

/*
 * Trace (base_trace_on): p enters a queue as `kind` with `key` (TRACE_DIRECT: no key). Notes where
 * the key stands against vtime_now and, under BURST, SPARE and RECENT, the exec-runtime term it carries.
 */
static __always_inline void trace_queued(struct task_struct *p, u64 kind, u64 key)
{
	struct morpheus_base_task *t;
	struct trace_task *tt;
	bool wake = kind == TRACE_WAKE;
	u64 now_v, exec;

	if (!base_trace_on)
		return;
	tt = bpf_task_storage_get(&trace_tasks, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tt)
		return;
	tt->queued_ns = bpf_ktime_get_ns();
	tt->kind = kind;
	tt->spared = 0;
	if (kind == TRACE_DIRECT) {
		trace_add(MORPHEUS_BT_DIRECT, 1);
		return;
	}
	trace_add(wake ? MORPHEUS_BT_WAKE_ENQUEUES : MORPHEUS_BT_REQUEUES, 1);
	now_v = READ_ONCE(vtime_now);
	if (time_before(key, now_v))
		trace_add(wake ? MORPHEUS_BT_WAKE_BEHIND_US : MORPHEUS_BT_REQUEUE_BEHIND_US, (now_v - key) / 1000);
	else
		trace_add(wake ? MORPHEUS_BT_WAKE_AHEAD_US : MORPHEUS_BT_REQUEUE_AHEAD_US, (key - now_v) / 1000);
	if (!vtime_kept_apart())
		return;
	t = bpf_task_storage_get(&base_tasks, p, 0, 0);
	if (!t)
		return;
	exec = morpheus_base_exec_term(base_order, t, base_slice());
	trace_add(wake ? MORPHEUS_BT_WAKE_EXEC_US : MORPHEUS_BT_REQUEUE_EXEC_US, exec / 1000);
}

/* Trace (base_trace_on): p starts to run; the wait since it was queued is counted by its kind. */
static __always_inline void trace_running(struct task_struct *p)
{
	struct trace_task *tt;
	u64 wait;

	if (!base_trace_on)
		return;
	tt = bpf_task_storage_get(&trace_tasks, p, 0, 0);
	if (!tt || tt->kind == TRACE_NONE)
		return;
	wait = (bpf_ktime_get_ns() - tt->queued_ns) / 1000;
	if (tt->kind == TRACE_WAKE) {
		trace_add(MORPHEUS_BT_WAKE_WAIT_US, wait);
		trace_max(MORPHEUS_BT_WAKE_WAIT_MAX_US, wait);
		if (wait >= 1000)
			trace_add(MORPHEUS_BT_WAKE_WAIT_GE1MS, 1);
		if (wait >= 2000)
			trace_add(MORPHEUS_BT_WAKE_WAIT_GE2MS, 1);
		if (wait >= 4000)
			trace_add(MORPHEUS_BT_WAKE_WAIT_GE4MS, 1);
		if (wait >= 8000)
			trace_add(MORPHEUS_BT_WAKE_WAIT_GE8MS, 1);
		if (tt->spared && wait >= 1000)
			trace_add(MORPHEUS_BT_WAKE_SPARED_GE1MS, 1);
	} else if (tt->kind == TRACE_REQUEUE) {
		trace_add(MORPHEUS_BT_REQUEUE_WAIT_US, wait);
		trace_max(MORPHEUS_BT_REQUEUE_WAIT_MAX_US, wait);
		if (wait >= 2000)
			trace_add(MORPHEUS_BT_REQUEUE_WAIT_GE2MS, 1);
		if (wait >= 8000)
			trace_add(MORPHEUS_BT_REQUEUE_WAIT_GE8MS, 1);
	} else {
		trace_add(MORPHEUS_BT_DIRECT_WAIT_US, wait);
	}
	tt->kind = TRACE_NONE;
}

/* Trace (base_trace_on): the waking p found its CPU running a task it does not preempt. */
static __always_inline void trace_spared(struct task_struct *p)
{
	struct trace_task *tt;

	if (!base_trace_on)
		return;
	tt = bpf_task_storage_get(&trace_tasks, p, 0, 0);
	if (!tt || tt->kind != TRACE_WAKE)
		return;
	tt->spared = 1;
	trace_add(MORPHEUS_BT_WAKE_SPARED, 1);
}

/* Trace (base_trace_on): the run of the task on `cpu` ends (before vtime_stopping clears its record). */
static __always_inline void trace_stopping(u32 cpu, bool runnable)
{
	struct cpu_run *run;
	u64 now;

	if (!base_trace_on)
		return;
	trace_add(runnable ? MORPHEUS_BT_RUNS_PREEMPTED : MORPHEUS_BT_RUNS_SLEPT, 1);
	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	now = bpf_ktime_get_ns();
	if (run && run->weight && now > run->start_ns)
		trace_add(MORPHEUS_BT_RUN_US, (now - run->start_ns) / 1000);
}

/*
 * p's key in the shared queue now, by base_order (morpheus_policy.h). A task with no base state yet
 * (it has not finished a run under this scheduler) has used no CPU since it last slept. A task that
 * cpu.max held goes back with queue_vtime() (cpumax.bpf.c) under every order: under DEADLINE and BURST
 * its last key, raised to at least vtime_now less a slice (DEADLINE) or the slice lag (BURST).
 */
static __always_inline u64 queue_key(struct task_struct *p)
{
	struct morpheus_base_task none = {}, *t;

	if (base_order != MORPHEUS_BASE_ORDER_DEADLINE && !vtime_kept_apart())
		return queue_vtime(p);
	t = bpf_task_storage_get(&base_tasks, p, 0, 0);
	if (vtime_kept_apart())
		return morpheus_base_kept_key(base_order, t, READ_ONCE(p->scx.dsq_vtime), READ_ONCE(vtime_now), base_slice(),
					      p->scx.weight);
	return morpheus_base_deadline(t ?: &none, bpf_ktime_get_ns(), base_slice());
}

/*
 * (Under BURST, p's dsq_vtime is read with READ_ONCE wherever it goes to a policy function that may
 * take t's vtime instead: a plain read is sunk by the compiler into one load from either pointer,
 * which the verifier refuses, "same insn cannot be used with different pointers".)
 *
 * BURST order: p is being queued with its key; its kept vtime is raised to the floor that key had
 * (morpheus_base_burst_queued). The other orders' vtime is the key, set by the insertion itself.
 */
static __always_inline void burst_queued(struct task_struct *p)
{
	struct morpheus_base_task *t;

	if (!vtime_kept_apart())
		return;
	t = bpf_task_storage_get(&base_tasks, p, 0, 0);
	if (t)
		morpheus_base_burst_queued(t, READ_ONCE(vtime_now), base_slice(), p->scx.weight);
}

s32 BPF_STRUCT_OPS(morpheus_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	/* An idle CPU takes the task at once, unless its cgroup is out of quota (enqueue holds it). */
	if (is_idle && cpumax_may_run(p)) {
		trace_queued(p, TRACE_DIRECT, 0);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, base_slice(), 0);
	}
	return cpu;
}

/*
 * A task waking up on a busy CPU preempts the task running there if that one's key, advanced by the
 * CPU it has used since it started, is behind the waker's by more than the margin
 * (morpheus_base_wake_preempts). Without it a waking task waits out the runner's whole slice.
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
	if (run->demoted ||
	    morpheus_base_wake_preempts(vtime, runner_vtime, morpheus_base_wake_margin(wake_margin_ns, base_slice()))) {
		scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
		count(MORPHEUS_CNT_WAKE_PREEMPTS);
	} else {
		trace_spared(p);
	}
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

		if (worker_episode_open(p->pid, p->start_time))
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
	u64 vtime = queue_key(p);

	if (cpumax_enqueue(p, enq_flags))
		return;
	burst_queued(p);
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
	/*
	 * A worker whose episode is open waits in DEMOTED_DSQ, behind every other runnable task, and
	 * preempts no one when it wakes.
	 */
	if (worker_demoted(p->pid, p->start_time)) {
		s32 idle;

		scx_bpf_dsq_insert_vtime(p, DEMOTED_DSQ, base_slice(), vtime, enq_flags);
		count(MORPHEUS_CNT_DEMOTED_ENQUEUES);
		/* Still work-conserving: a CPU with nothing to run takes it. */
		idle = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (idle >= 0)
			scx_bpf_kick_cpu(idle, SCX_KICK_IDLE);
		return;
	}
	/* Before the insertion: once in the queue, p may start to run on another CPU. */
	trace_queued(p, enq_flags & SCX_ENQ_WAKEUP ? TRACE_WAKE : TRACE_REQUEUE, vtime);
	scx_bpf_dsq_insert_vtime(p, SHARED_DSQ, base_slice(), vtime, enq_flags);
	if (enq_flags & SCX_ENQ_WAKEUP)
		preempt_on_wakeup(p, vtime);
}

void BPF_STRUCT_OPS(morpheus_dispatch, s32 cpu, struct task_struct *prev)
{
	cpumax_dispatch();
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
		if (!cpumax_capped(prev))
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

/* Tasks waiting shorten the running task's slice; cpu.max holds a task out of quota. */
void BPF_STRUCT_OPS(morpheus_tick, struct task_struct *p)
{
	share_on_tick(p);
	cpumax_tick(p);
}

void BPF_STRUCT_OPS(morpheus_cgroup_set_bandwidth, struct cgroup *cgrp, u64 period_us, u64 quota_us,
		    u64 burst_us)
{
	cpumax_set(cgrp->kn->id, period_us, quota_us);
}

/*
 * Note the run that starts on this CPU and advance the global clock. Its standing for wake-up
 * preemption is its queue key: under DEADLINE and BURST the key it has as it starts (also when an idle
 * CPU took it directly, without a key), under CPUTIME and LAG its vtime. The clock advances to the
 * key, except under BURST: to the task's vtime (morpheus_base_burst_vtime), without the exec runtime.
 */
static __always_inline void vtime_running(struct task_struct *p)
{
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 vtime = base_order == MORPHEUS_BASE_ORDER_DEADLINE || vtime_kept_apart() ?
			    queue_key(p) : p->scx.dsq_vtime, clock = vtime, share;

	if (vtime_kept_apart())
		clock = morpheus_base_burst_vtime(bpf_task_storage_get(&base_tasks, p, 0, 0), READ_ONCE(p->scx.dsq_vtime));
	if (time_before(READ_ONCE(vtime_now), clock))
		WRITE_ONCE(vtime_now, clock);
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

/*
 * Charge the run that ends to p: its vtime (under BURST the one it keeps apart from its key, once it
 * has base state) and (DEADLINE and BURST) the CPU it used since it last slept, both scaled by its
 * weight; a task that goes to sleep (not runnable) starts that count again and updates its wake-up rate.
 */
static __always_inline void vtime_stopping(struct task_struct *p, bool runnable)
{
	struct morpheus_base_task *t = NULL;
	struct cpu_run *run;
	u32 cpu = scx_bpf_task_cpu(p);
	u64 now = bpf_ktime_get_ns(), scaled = 0;

	if (base_order == MORPHEUS_BASE_ORDER_DEADLINE || vtime_kept_apart())
		t = bpf_task_storage_get(&base_tasks, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	run = bpf_map_lookup_elem(&cpu_runs, &cpu);
	if (run && run->weight) {
		if (now > run->start_ns) {
			scaled = scale_by_weight(now - run->start_ns, run->weight);
			if (!t || !vtime_kept_apart())
				scx_bpf_task_set_dsq_vtime(p, p->scx.dsq_vtime + scaled);
		}
		run->weight = 0;
	}
	if (!t)
		return;
	if (vtime_kept_apart())
		morpheus_base_burst_charge(t, READ_ONCE(p->scx.dsq_vtime), scaled);
	else
		morpheus_base_charge(t, scaled);
	if (!runnable)
		morpheus_base_sleep(t, now);
}

/*
 * The host interface of the worker layer (morpheus.bpf.h): a KICK. SCX_KICK_PREEMPT zeroes the current
 * task's slice; ops.enqueue then sees the open episode and queues it behind every other runnable task
 * (DEMOTED_DSQ), as a kick means to, unless it entered a critical section meanwhile. Should the CPU
 * have switched to another task before the kick lands, that task keeps its CPU: the demoted worker is
 * not in the queue dispatch takes from first.
 */
__hidden bool morpheus_host_kick(s32 cpu)
{
	scx_bpf_kick_cpu(cpu, SCX_KICK_PREEMPT);
	count(MORPHEUS_CNT_KICKS);
	return true;
}

/* The host interface: the scheduler's part of each check timer run is cpu.max's. */
__hidden u64 morpheus_host_check(u64 due)
{
	return cpumax_check(due);
}

void BPF_STRUCT_OPS(morpheus_running, struct task_struct *p)
{
	s32 cpu;

	trace_running(p);
	vtime_running(p);
	cpumax_running(p);
	cpu = scx_bpf_task_cpu(p);
	/*
	 * A worker whose escalation episode is open runs behind everyone until it is lifted (as the
	 * simulation backend's demotion does): it waits in DEMOTED_DSQ (ops.enqueue), and when it does
	 * run, it has a short slice and any task waking on its CPU preempts it. Not inside a critical
	 * section: the effect re-checks in_critical where it takes hold.
	 */
	if (worker_running(p->pid, p->tgid, p->start_time, cpu)) {
		u32 cpu_key = cpu;
		struct cpu_run *run = bpf_map_lookup_elem(&cpu_runs, &cpu_key);

		if (run)
			run->demoted = 1;
		if (p->scx.slice > cfg_grace_ns)
			scx_bpf_task_set_slice(p, cfg_grace_ns);
	}
}

void BPF_STRUCT_OPS(morpheus_stopping, struct task_struct *p, bool runnable)
{
	trace_stopping(scx_bpf_task_cpu(p), runnable);
	vtime_stopping(p, runnable);
	cpumax_stopping(p);
	worker_stopping(p->pid, p->start_time, scx_bpf_task_cpu(p), runnable);
}

/* A task entering sched_ext starts level with the tasks running now. */
void BPF_STRUCT_OPS(morpheus_enable, struct task_struct *p)
{
	scx_bpf_task_set_dsq_vtime(p, READ_ONCE(vtime_now));
}

/*
 * A task leaves sched_ext: it exited (after its last switch, or on kernels before sched_ext_dead()
 * when its task_struct is freed), its fork failed, or the scheduler is being unloaded. Only a task
 * that exited leaves the worker layer (exit_state is set once it is a zombie or dead).
 */
void BPF_STRUCT_OPS(morpheus_exit_task, struct task_struct *p, struct scx_exit_task_args *args)
{
	if (p->exit_state)
		worker_exit(p->pid, p->start_time);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(morpheus_init)
{
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

	err = worker_timer_start();
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
	       .exit_task = (void *)morpheus_exit_task,
	       .cgroup_set_bandwidth = (void *)morpheus_cgroup_set_bandwidth,
	       .init = (void *)morpheus_init,
	       .exit = (void *)morpheus_exit,
	       /* Enqueue even the last runnable task when its slice ends, so a capped one can be held. */
	       .flags = SCX_OPS_ENQ_LAST,
	       .name = "morpheus");
