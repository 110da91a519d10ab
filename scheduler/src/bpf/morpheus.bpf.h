/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the BPF files of scx_morpheus share. Each file is compiled on its own and libbpf's static
 * linker joins them into one object (build.rs), so a function one file calls in another is declared
 * here, `__hidden`: libbpf then verifies it as a static subprogram, in its caller's context.
 *
 * The files, by concern:
 * - main.bpf.c: the sched_ext scheduler: base policy (weighted vtime, slices, dispatch queues), every
 *   sched_ext op and the ops table, and the host interface below for the worker layer.
 * - cpumax.bpf.c: cpu.max re-enforcement (sched_ext does not enforce it for the tasks it schedules).
 * - worker.bpf.c: the worker layer: registered threads (worker_slots, the per-uid regions), their CPU
 *   time since the last yield point, hints (preempt_seq), the escalation gate and state machine
 *   (src/policy/morpheus_policy.h) and the check timer.
 * - replay.bpf.c: conformance replay of the gate and the state machine (SEC("syscall") programs).
 * - trace.bpf.c: the second host of the worker layer, for kernels without sched_ext: tracing programs
 *   (sched_switch, task exit) instead of the ops. It is linked with worker.bpf.c and replay.bpf.c
 *   into an object of its own (build.rs), never with main.bpf.c or cpumax.bpf.c.
 *
 * worker.bpf.c and replay.bpf.c call no sched_ext kfunc and take no sched_ext type: they reach a
 * thread by its tid and a CPU by its number, and what only a scheduler can do (kick a CPU) through the
 * host interface, which the program that links them defines. tests/bpf_release.rs checks the worker
 * object's undefined symbols against that interface.
 */
#ifndef SCX_MORPHEUS_BPF_H
#define SCX_MORPHEUS_BPF_H

#ifndef __SCX_COMMON_BPF_H
/*
 * A file that does not include sched_ext's common header first (the worker layer, the replays) gets
 * the kernel's types and libbpf's helpers only, plus the few utilities it shares with the sched_ext
 * files in their plain form. The sched_ext header would bring programs and weak functions of its own
 * (a probe of bpf_scx_reg) into every object that includes it.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <asm-generic/errno.h>

#define READ_ONCE(x) (*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, val) ((*(volatile typeof(x) *)&(x)) = (val))
/* The POSIX clock id of bpf_timer_init (include/uapi/linux/time.h); vmlinux.h has no macros. */
#define CLOCK_MONOTONIC 1

/* Whether time a is before time b (as jiffies' time_before: correct across a wrap). */
static __always_inline bool time_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}
#endif

/*
 * Acquire loads. clang 19 has no BPF load-acquire instruction (LLVM 21 adds one), so the order comes
 * from the target CPU, picked by the architecture scx_cargo's BpfBuilder defines
 * (__SCX_TARGET_ARCH_<arch>, the kernel's arch name of the Rust target; aarch64 is arm64):
 * - x86-64 (TSO): every load is an acquire; a compiler barrier keeps later accesses after it.
 * - arm64: a plain load may be reordered with later loads and stores, so the load is followed by
 *   full_barrier(), a fetching atomic that every arm64 BPF JIT emits fully ordered (LSE `ldaddal`, or
 *   `ldaxr`/`stlxr` with a trailing `dmb ish`): no later access is performed before it, and it is
 *   after the load, so no later access is performed before the load either: load + full barrier is
 *   an acquire. The cost is one atomic on the CPU's own cache line (barrier_lines) per acquire load.
 * Any other architecture is refused rather than silently wrong. These are also the raw accessors of
 * the shared policy header (MORPHEUS_LOAD_*), which does the gate's loads itself.
 *
 * Release side (spec/SCB.md §5.2): preempt_seq is incremented with a fetching atomic
 * (__sync_fetch_and_add with its result used), which the BPF JITs emit fully ordered on x86-64 and
 * arm64; a non-fetching BPF atomic add is unordered on arm64 and is never used for a signal. The
 * worker lock (deciding) is released with an exchange, also a fetching atomic. The plain stores
 * (WRITE_ONCE) to an SCB (budget_remaining_ns, kernel_pressure_level, escalated) are advisory and
 * publish nothing a reader acquires through them.
 */
#if defined(__SCX_TARGET_ARCH_x86)
#define load_acquire(p)                                 \
	({                                              \
		typeof(*(p)) __v = READ_ONCE(*(p));     \
		barrier();                              \
		__v;                                    \
	})
#elif defined(__SCX_TARGET_ARCH_arm64)
#define load_acquire(p)                                 \
	({                                              \
		typeof(*(p)) __v = READ_ONCE(*(p));     \
		full_barrier();                         \
		__v;                                    \
	})
#else
#error "scx_morpheus's memory ordering is written for x86-64 and arm64 only; see load_acquire()"
#endif
#define MORPHEUS_LOAD_ACQUIRE(p) load_acquire(p)
#define MORPHEUS_LOAD_RELAXED(p) READ_ONCE(*(p))

/* A full barrier for the policy header (defined below, once the CPU bound is known). */
static __always_inline void full_barrier(void);
#define MORPHEUS_FULL_BARRIER() full_barrier()

#include "intf.h"

/*
 * BPF has no fence instruction, but a fetching atomic (its result used, so clang cannot emit the
 * non-fetching form; adding 0 would be folded into a load) is fully ordered in every JIT. Each CPU
 * uses its own cache line (worker.bpf.c defines the lines).
 */
struct barrier_line {
	u64 v;
	u64 _pad[7];
};
extern struct barrier_line barrier_lines[MORPHEUS_BPF_MAX_CPUS];

static __always_inline void full_barrier(void)
{
	u64 v = __sync_fetch_and_add(&barrier_lines[bpf_get_smp_processor_id() % MORPHEUS_BPF_MAX_CPUS].v, 1);

	barrier_var(v);
}

/* Counters read by the agent; indices in intf.h (worker.bpf.c defines them: every backend has them). */
extern u64 counters[MORPHEUS_NR_COUNTERS];

static __always_inline void count(u32 idx)
{
	if (idx < MORPHEUS_NR_COUNTERS)
		__sync_fetch_and_add(&counters[idx], 1);
}

/* Set by the agent before load (worker.bpf.c). */
extern const volatile u64 check_interval_ns;
extern const volatile u32 nr_possible_cpus;
/* Longest an escalation episode stays open without a lift (the agent's --throttle-max-ms). */
extern const volatile u64 throttle_max_ns;
/* The live configuration (S4, spec/SCB.md §10); worker.bpf.c says more. */
extern const volatile u64 cfg_grace_ns;

/* The SCB of `slot`, or NULL if out of range. The check sits next to the use for the verifier. */
static __always_inline struct morpheus_scb *scb_of(struct morpheus_region *r, u32 slot)
{
	if (slot >= MORPHEUS_MAX_WORKERS)
		return NULL;
	barrier_var(slot);
	return &r->scb[slot];
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

/*
 * The worker layer (worker.bpf.c). A thread is named by its tid (task_struct.pid) and its start time
 * `start_ns` (task_struct.start_time), which tells it from a thread that had the same tid before it;
 * its process by its pid (tgid); `cpu` is the CPU a thread runs on.
 */

/* The region of trust domain `domain`, or NULL if the agent has made none there. */
__hidden struct morpheus_region *worker_region(u32 domain);
/* The bookkeeping of agent slot `slot` (the `workers` map), or NULL if out of range. */
__hidden struct worker_ctx *worker_ctx_of(u32 slot);
/*
 * A run of thread `tid` of process `pid` starts on `cpu`: account it if the thread is a registered
 * worker and make sure the check timer comes by the end of its slice. True if the worker's escalation
 * episode is open and it is not in a critical section, so its run is to be demoted (the host's job).
 */
__hidden bool worker_running(u32 tid, u32 pid, u64 start_ns, s32 cpu);
/*
 * The run of thread `tid` ends (`cpu`: the CPU it ran on); `runnable`: it was preempted or its slice
 * ended, rather than sleeping or blocking (a yield point). Hints and escalation for an overrun.
 */
__hidden void worker_stopping(u32 tid, u64 start_ns, s32 cpu, bool runnable);
/* Whether thread `tid` is a registered worker whose escalation episode is open. */
__hidden bool worker_episode_open(u32 tid, u64 start_ns);
/*
 * Whether thread `tid`, a worker with an open episode, is to wait behind every other runnable task
 * now: not if it entered a critical section since the decision (in_critical loaded here again,
 * SCB.md §5.6; counted as a kick spared).
 */
__hidden bool worker_demoted(u32 tid, u64 start_ns);
/* Whether thread `tid` is a registered worker inside a critical section (in_critical loaded now). */
__hidden bool worker_in_critical(u32 tid, u64 start_ns);
/*
 * Thread `tid` exited: from then on no thread is taken for the worker it was, and its worker_slots
 * entry is removed. Called once the thread can run no more (sched_ext: ops.exit_task of a task that
 * exited; a tracing program: sched_process_exit or sched_process_free).
 */
__hidden void worker_exit(u32 tid, u64 start_ns);
/* Start the check timer (from the host's initialisation, once). 0 or a negative errno. */
__hidden s32 worker_timer_start(void);

/*
 * The host interface: what the program that links the worker layer defines for it (main.bpf.c, for
 * sched_ext). Nothing else of the host's is reached from the worker layer.
 */

/*
 * Carry out an escalation's KICK on `cpu`, where the worker runs now. True if it took effect here;
 * false if the host cannot preempt a CPU (the tracing host, trace.bpf.c), so the agent carries it out
 * (its record wakes the agent, and the episode's lift is reported to it).
 */
__hidden bool morpheus_host_kick(s32 cpu);
/*
 * The host's own work at each run of the check timer: returns when (ns from now) the timer must run
 * again for it, at most `due`.
 */
__hidden u64 morpheus_host_check(u64 due);

#ifdef __SCX_COMMON_BPF_H
/*
 * The sched_ext scheduler (main.bpf.c and cpumax.bpf.c, which include <scx/common.bpf.h> first) from
 * here on.
 */

/* The one shared dispatch queue of the base policy, ordered by virtual time. */
#define SHARED_DSQ 0
/* Tasks of cgroups that used up their cpu.max quota for the current period. */
#define THROTTLED_DSQ 1
/*
 * Workers whose escalation episode is open (the kernel backend's demotion, as the simulation backend's
 * SCHED_IDLE): a CPU takes one from here only when nothing else can run on it.
 */
#define DEMOTED_DSQ 2

/* 0: the kernel's default slice (SCX_SLICE_DFL); set by the agent before load (main.bpf.c). */
extern const volatile u64 task_slice_ns;
/* Highest dsq_vtime seen starting to run: the clock a waking task's vtime is clamped against. */
extern u64 vtime_now;
/* enum morpheus_base_order (morpheus_policy.h): set by the agent before load (main.bpf.c). */
extern const volatile u32 base_order;

static __always_inline u64 base_slice(void)
{
	return task_slice_ns ?: SCX_SLICE_DFL;
}

/*
 * p's vtime for queueing: a task that slept long keeps at most the credit base_order allows below
 * vtime_now (morpheus_base_vtime_credit: one slice, or the slice lag under LAG and
 * BURST; under BURST, p's dsq_vtime is its last key), so sleepers run soon
 * after waking without being able to monopolise a CPU afterwards.
 */
static __always_inline u64 queue_vtime(struct task_struct *p)
{
	u64 credit = morpheus_base_vtime_credit(base_order, base_slice(), p->scx.weight);

	return morpheus_base_vtime_key(p->scx.dsq_vtime, READ_ONCE(vtime_now), credit);
}

/* cpu.max re-enforcement (cpumax.bpf.c), called from the ops in main.bpf.c. */

/* Whether an idle CPU may take p at wake-up: not if its cgroup used its quota (enqueue holds it). */
__hidden bool cpumax_may_run(struct task_struct *p);
/* Hold p in THROTTLED_DSQ if its cgroup used its quota and p may be held now; true if held. */
__hidden bool cpumax_enqueue(struct task_struct *p, u64 enq_flags);
/* Release the held tasks whose cgroup has quota again (from ops.dispatch). */
__hidden void cpumax_dispatch(void);
/* Whether p's cgroup has a cpu.max cap. */
__hidden bool cpumax_capped(struct task_struct *p);
/* Start and end of a run of p (its cgroup's quota is charged for it). */
__hidden void cpumax_running(struct task_struct *p);
__hidden void cpumax_stopping(struct task_struct *p);
/* A task of a capped cgroup that runs out of quota mid-run is preempted at the next tick. */
__hidden void cpumax_tick(struct task_struct *p);
/* The cpu.max of cgroup `cgid` (ops.cgroup_set_bandwidth). */
__hidden void cpumax_set(u64 cgid, u64 period_us, u64 quota_us);
/* The check timer's part: held tasks become runnable at a period boundary. Returns `due` or sooner. */
__hidden u64 cpumax_check(u64 due);
#endif /* __SCX_COMMON_BPF_H */

#endif /* SCX_MORPHEUS_BPF_H */
