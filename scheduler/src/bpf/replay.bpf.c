/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Conformance replay: the escalation gate and its state machine, answered by the same code the live
 * path runs (escalation_decide, morpheus.bpf.h) on a scenario's region image. SEC("syscall") programs,
 * run with BPF_PROG_TEST_RUN and never attached; like the worker layer they need no sched_ext.
 */
#include "morpheus.bpf.h"

/*
 * The replay domain's region map and the SCB of `slot` in it, which the agent has filled with a
 * scenario's region image: 0, or -ENOENT without the map, -ERANGE for a slot it cannot hold.
 */
static __always_inline int replay_scb(u32 slot, struct morpheus_region **rp, struct morpheus_scb **scbp)
{
	struct morpheus_region *r = worker_region(MORPHEUS_REPLAY_DOMAIN);

	if (!r)
		return -ENOENT;
	*scbp = scb_of(r, slot);
	if (!*scbp)
		return -ERANGE;
	*rp = r;
	return 0;
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
	struct morpheus_region *r;
	struct morpheus_scb *scb;
	int err = replay_scb(ctx->slot, &r, &scb);

	if (err)
		return err;
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
	enum morpheus_gate_verdict verdict;
	enum morpheus_escalation_step step;
	struct morpheus_region *r;
	struct morpheus_scb *scb;
	struct worker_ctx *w;
	u32 slot = ctx->slot;
	int err = replay_scb(slot, &r, &scb);

	if (err)
		return err;
	w = worker_ctx_of(slot);
	if (!w)
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

/*
 * Conformance replay of the hint decision (`scx_morpheus --replay-gate`, `hint` cases; SCB.md §5.2):
 * the policy header's rule, which the worker layer's check_worker takes, on the SCB of ctx->slot at
 * time ctx->now_ns, under the slice and hint interval the image's header states. Nothing is stored.
 * Returns the decision, or a negative errno.
 */
SEC("syscall")
int hint_replay(struct morpheus_hint_replay_ctx *ctx)
{
	struct morpheus_region *r;
	struct morpheus_scb *scb;
	int err = replay_scb(ctx->slot, &r, &scb);

	if (err)
		return err;
	return morpheus_hint_decide_scb(scb, ctx->runtime_ns, MORPHEUS_LOAD_RELAXED(&r->hdr.slice_ns), ctx->now_ns,
					MORPHEUS_LOAD_RELAXED(&r->hdr.hint_min_interval_ns));
}

/*
 * Who the worker layer takes for a worker (the scheduler's tests, src/trace.rs): the live path's start
 * of a run (worker_running) for thread ctx->tid started at ctx->start_ns, on no CPU, against the
 * worker_slots entry and region the test wrote. Returns 1 if agent slot ctx->slot is then bound to that
 * thread, else 0. Run with BPF_PROG_TEST_RUN, never attached.
 */
SEC("syscall")
int bind_replay(struct morpheus_bind_replay_ctx *ctx)
{
	struct worker_ctx *w;

	worker_running(ctx->tid, ctx->tid, ctx->start_ns, -1);
	w = worker_ctx_of(ctx->slot);
	return w && w->tid == ctx->tid && w->start_ns == ctx->start_ns;
}
