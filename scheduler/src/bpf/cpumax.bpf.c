/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * cpu.max re-enforcement. Under sched_ext the kernel does not enforce a cgroup's cpu.max for the tasks
 * the BPF scheduler runs; it hands the value to ops.cgroup_set_bandwidth, and this file enforces it: a
 * task of a cgroup that used its quota for the current period is held in THROTTLED_DSQ until the next
 * period, and one that runs out mid-run is preempted at the next tick. The agent's CGROUP_THROTTLE caps
 * rely on it. A registered worker inside a critical section is never held (the worker layer loads
 * in_critical where the hold takes effect, SCB.md §5.6).
 */
#include <scx/common.bpf.h>
#include "morpheus.bpf.h"

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
 * Whether a hold (cpu.max) may take p off the CPU now: not if p is a registered worker inside a
 * critical section. This is where an escalation's throttle takes effect, so in_critical is loaded
 * here again (SCB.md §5.6): a section entered after the decision is never held.
 */
static __always_inline bool hold_allowed(struct task_struct *p)
{
	if (!worker_in_critical(p->pid, p->start_time))
		return true;
	count(MORPHEUS_CNT_HOLDS_SPARED_CRITICAL);
	return false;
}

/* Whether an idle CPU may take p at wake-up (morpheus.bpf.h). */
__hidden bool cpumax_may_run(struct task_struct *p)
{
	struct cgroup_bw *bw;
	u64 cgid;

	bw = task_bw(p, &cgid);
	return !(bw && bw_exhausted(bw, bpf_ktime_get_ns()));
}

/* Hold p if its cgroup used its quota (morpheus.bpf.h). */
__hidden bool cpumax_enqueue(struct task_struct *p, u64 enq_flags)
{
	struct cgroup_bw *bw;
	u64 cgid;

	bw = task_bw(p, &cgid);
	if (bw && bw_exhausted(bw, bpf_ktime_get_ns()) && hold_allowed(p)) {
		scx_bpf_dsq_insert(p, THROTTLED_DSQ, base_slice(), enq_flags);
		count(MORPHEUS_CNT_BW_THROTTLED);
		return true;
	}
	return false;
}

/* Release the held tasks whose cgroup has quota again: a new period began (morpheus.bpf.h). */
__hidden void cpumax_dispatch(void)
{
	struct task_struct *p;
	u64 now;

	if (scx_bpf_dsq_nr_queued(THROTTLED_DSQ) > 0) {
		now = bpf_ktime_get_ns();
		bpf_for_each(scx_dsq, p, THROTTLED_DSQ, 0) {
			struct cgroup_bw *bw;
			u64 cgid;

			bw = task_bw(p, &cgid);
			if (!bw || !bw_exhausted(bw, now)) {
				/* A held task cannot run, so cannot enter a section: this sees holds that began inside one. */
				if (worker_in_critical(p->pid, p->start_time))
					count(MORPHEUS_CNT_HELD_IN_CRITICAL);
				scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, queue_vtime(p));
				scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, SHARED_DSQ, 0);
			}
		}
	}
}

/* Whether p's cgroup has a cap (morpheus.bpf.h). */
__hidden bool cpumax_capped(struct task_struct *p)
{
	u64 cgid;

	return task_bw(p, &cgid) != NULL;
}

/* A task of a capped cgroup that runs out of quota mid-run is preempted at the next tick. */
__hidden void cpumax_tick(struct task_struct *p)
{
	struct cgroup_bw *bw;
	struct bw_run *run;
	u32 zero = 0;
	u64 cgid, now;

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

/* The cpu.max of cgroup `cgid`, as ops.cgroup_set_bandwidth reports it (morpheus.bpf.h). */
__hidden void cpumax_set(u64 cgid, u64 period_us, u64 quota_us)
{
	struct cgroup_bw bw = {};

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
__hidden void cpumax_running(struct task_struct *p)
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
__hidden void cpumax_stopping(struct task_struct *p)
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

/*
 * The check timer's part (morpheus.bpf.h): throttled tasks become runnable at a period boundary, so
 * idle CPUs are woken to dispatch them, and capped cgroups are looked at every check interval.
 */
__hidden u64 cpumax_check(u64 due)
{
	u32 cpu;

	if (scx_bpf_dsq_nr_queued(THROTTLED_DSQ) > 0) {
		due = check_interval_ns;
		bpf_for(cpu, 0, nr_possible_cpus)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	}
	if (READ_ONCE(nr_capped_cgroups) > 0)
		due = check_interval_ns;
	return due;
}
