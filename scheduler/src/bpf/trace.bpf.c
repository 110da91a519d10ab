/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * scx_morpheus's tracing host of the worker layer (`--backend trace`): Morpheus on a kernel without
 * sched_ext. The kernel's own scheduler schedules every task; these programs only watch it.
 *
 * - tp_btf/sched_switch ends the run of the task switched out (worker_stopping) and starts the run of
 *   the task switched in (worker_running) on this CPU: the worker layer's accounting of a registered
 *   thread's CPU time since its last yield point, exact to the context switch, and its check timer
 *   brought forward to the end of the slice of a worker that starts running.
 * - tp_btf/sched_process_free tells the worker layer that a thread exited (worker_exit), once it can
 *   run no more: its task_struct is being freed, after its last context switch (an exiting thread
 *   still runs after sched_process_exit). The tid may have been given to a new thread by then; the
 *   worker layer tells the two apart by the start time.
 * - trace_init (SEC("syscall"), run once by the agent) starts the worker layer's check timer. The
 *   timer's callback is verified with this program; the verifier refuses bpf_timer in kprobe,
 *   tracepoint, raw tracepoint and perf event programs, but tp_btf programs are BPF_PROG_TYPE_TRACING,
 *   which may start it (worker_running does, from sched_switch).
 *
 * The host interface (morpheus.bpf.h): no BPF program can preempt a CPU here, so a KICK is left to
 * the agent (it demotes the thread to SCHED_IDLE, as the simulation backend does), and there is no
 * periodic work of the host's own. Everything else (hints, the gate, the escalation state machine,
 * the regions) is worker.bpf.c's, linked unchanged; replay.bpf.c's replays are linked too, so the
 * conformance gate can be answered by this object.
 */
#include "morpheus.bpf.h"
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

/* include/linux/sched.h: the state of a task that is still runnable when it is switched out. */
#define TASK_RUNNING 0

/*
 * A context switch on this CPU. `prev` stays runnable if it was preempted (or yielded the CPU without
 * sleeping); otherwise it sleeps or blocks, which the worker layer counts as a yield point.
 */
SEC("tp_btf/sched_switch")
int BPF_PROG(morpheus_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	s32 cpu = bpf_get_smp_processor_id();

	worker_stopping(prev->pid, prev->start_time, cpu, preempt || prev_state == TASK_RUNNING);
	worker_running(next->pid, next->tgid, next->start_time, cpu);
	return 0;
}

/* A thread's task_struct is freed (every thread, not only a group's last). */
SEC("tp_btf/sched_process_free")
int BPF_PROG(morpheus_task_free, struct task_struct *p)
{
	worker_exit(p->pid, p->start_time);
	return 0;
}

/* Starts the worker layer's check timer (BPF_PROG_TEST_RUN, once, after the programs are attached). */
SEC("syscall")
int trace_init(void *ctx)
{
	return worker_timer_start();
}

/* The host interface: this host cannot preempt a CPU; the agent carries the kick out. */
__hidden bool morpheus_host_kick(s32 cpu)
{
	return false;
}

/* The host interface: nothing of its own to do at the check timer's runs. */
__hidden u64 morpheus_host_check(u64 due)
{
	return due;
}
