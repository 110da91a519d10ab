// SPDX-License-Identifier: GPL-2.0-only
// Table-driven tests of morpheus_policy.h: every escalation-gate condition blocks on its own and all
// together escalate; boundaries of slice + grace; overflow safety; the gate's loads; every transition
// of the escalation state machine; the hint decision; actions; pressure; the base policy's deadline.
#include "morpheus_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr morpheus_u64 kSlice = MORPHEUS_DEFAULT_SLICE_NS;
constexpr morpheus_u64 kGrace = MORPHEUS_DEFAULT_GRACE_NS;
constexpr morpheus_u64 kMax = std::numeric_limits<morpheus_u64>::max();

// A worker that passes every condition.
morpheus_gate_input Escalatable()
{
	morpheus_gate_input in{};
	in.scheduler_mode = MORPHEUS_SCHEDULER_MODE_ENFORCED;
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_THREAD_KICK;
	in.worker_state = MORPHEUS_WORKER_STATE_RUNNING;
	in.escapable = 1;
	in.in_critical = 0;
	in.preempt_seq = 5;
	in.last_ack_seq = 4;
	in.runtime_ns = kSlice + kGrace + 1;
	in.slice_ns = kSlice;
	in.grace_ns = kGrace;
	return in;
}

struct GateCase {
	std::string name;
	void (*flip)(morpheus_gate_input *);
	morpheus_gate_verdict expected;
};

class GateSingleCondition : public ::testing::TestWithParam<GateCase> {};

TEST(Gate, AllConditionsTrueEscalates)
{
	const morpheus_gate_input in = Escalatable();
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_ESCALATE);
	for (morpheus_u32 policy : {MORPHEUS_ESCALATION_POLICY_THREAD_KICK, MORPHEUS_ESCALATION_POLICY_CGROUP_THROTTLE,
				    MORPHEUS_ESCALATION_POLICY_HYBRID}) {
		morpheus_gate_input p = in;
		p.escalation_policy = policy;
		EXPECT_EQ(morpheus_gate(&p), MORPHEUS_GATE_ESCALATE) << "policy " << policy;
	}
}

TEST_P(GateSingleCondition, BlocksAlone)
{
	morpheus_gate_input in = Escalatable();
	GetParam().flip(&in);
	EXPECT_EQ(morpheus_gate(&in), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
	EveryCondition, GateSingleCondition,
	::testing::Values(
		GateCase{"observer_mode", [](morpheus_gate_input *in) { in->scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER; },
			 MORPHEUS_GATE_BLOCKED_MODE},
		GateCase{"unknown_mode", [](morpheus_gate_input *in) { in->scheduler_mode = 7; }, MORPHEUS_GATE_BLOCKED_MODE},
		GateCase{"policy_none", [](morpheus_gate_input *in) { in->escalation_policy = MORPHEUS_ESCALATION_POLICY_NONE; },
			 MORPHEUS_GATE_BLOCKED_POLICY_NONE},
		GateCase{"state_init", [](morpheus_gate_input *in) { in->worker_state = MORPHEUS_WORKER_STATE_INIT; },
			 MORPHEUS_GATE_BLOCKED_STATE},
		GateCase{"state_registered", [](morpheus_gate_input *in) { in->worker_state = MORPHEUS_WORKER_STATE_REGISTERED; },
			 MORPHEUS_GATE_BLOCKED_STATE},
		GateCase{"state_quiescing", [](morpheus_gate_input *in) { in->worker_state = MORPHEUS_WORKER_STATE_QUIESCING; },
			 MORPHEUS_GATE_BLOCKED_STATE},
		GateCase{"state_dead", [](morpheus_gate_input *in) { in->worker_state = MORPHEUS_WORKER_STATE_DEAD; },
			 MORPHEUS_GATE_BLOCKED_STATE},
		GateCase{"state_unknown", [](morpheus_gate_input *in) { in->worker_state = 99; }, MORPHEUS_GATE_BLOCKED_STATE},
		GateCase{"not_escapable", [](morpheus_gate_input *in) { in->escapable = 0; }, MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE},
		GateCase{"in_critical", [](morpheus_gate_input *in) { in->in_critical = 1; }, MORPHEUS_GATE_BLOCKED_CRITICAL},
		GateCase{"acknowledged_equal", [](morpheus_gate_input *in) { in->last_ack_seq = in->preempt_seq; },
			 MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED},
		GateCase{"ack_ahead_of_seq", [](morpheus_gate_input *in) { in->last_ack_seq = in->preempt_seq + 1; },
			 MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED},
		GateCase{"runtime_at_slice_plus_grace", [](morpheus_gate_input *in) { in->runtime_ns = kSlice + kGrace; },
			 MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		GateCase{"runtime_at_slice", [](morpheus_gate_input *in) { in->runtime_ns = kSlice; },
			 MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		GateCase{"runtime_zero", [](morpheus_gate_input *in) { in->runtime_ns = 0; }, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE}),
	[](const ::testing::TestParamInfo<GateCase> &info) { return info.param.name; });

// The first failing condition, in the header's order, is the one reported.
TEST(Gate, ReportsFirstFailingConditionInOrder)
{
	morpheus_gate_input in{};
	in.scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER; // everything else fails too
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_MODE);
	in.scheduler_mode = MORPHEUS_SCHEDULER_MODE_ENFORCED;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_POLICY_NONE);
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_HYBRID;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_STATE);
	in.worker_state = MORPHEUS_WORKER_STATE_RUNNING;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_NOT_ESCAPABLE);
	in.escapable = 1;
	in.in_critical = 1;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_CRITICAL);
	in.in_critical = 0;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED);
	in.preempt_seq = 1;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_WITHIN_GRACE);
	in.runtime_ns = 1;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_ESCALATE) << "slice 0 and grace 0: any runtime is past them";
}

struct Boundary {
	morpheus_u64 runtime, slice, grace;
	morpheus_gate_verdict expected;
};

TEST(Gate, BoundariesAndOverflow)
{
	const std::vector<Boundary> cases = {
		{kSlice + kGrace, kSlice, kGrace, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		{kSlice + kGrace + 1, kSlice, kGrace, MORPHEUS_GATE_ESCALATE},
		{kSlice + 1, kSlice, 0, MORPHEUS_GATE_ESCALATE},
		{kSlice, kSlice, 0, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		// slice + grace would wrap to a small number: must not escalate.
		{100, kMax, kMax, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		{kMax, kMax, 1, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		{kMax, kMax - 1, 1, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		{kMax, kMax - 2, 1, MORPHEUS_GATE_ESCALATE},
		{kMax, 0, kMax - 1, MORPHEUS_GATE_ESCALATE},
		{kMax, 0, kMax, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
		{kMax, 1, kMax, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE},
	};
	for (const Boundary &c : cases) {
		morpheus_gate_input in = Escalatable();
		in.runtime_ns = c.runtime;
		in.slice_ns = c.slice;
		in.grace_ns = c.grace;
		EXPECT_EQ(morpheus_gate(&in), c.expected)
			<< "runtime " << c.runtime << " slice " << c.slice << " grace " << c.grace;
	}
	morpheus_gate_input in = Escalatable();
	in.preempt_seq = kMax;
	in.last_ack_seq = kMax - 1;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_ESCALATE);
	in.last_ack_seq = kMax;
	EXPECT_EQ(morpheus_gate(&in), MORPHEUS_GATE_BLOCKED_ACKNOWLEDGED);
}

// morpheus_gate_load reads each worker input from its own field of a real SCB and the configuration
// from the caller's config, never from a header (S4).
TEST(GateLoad, ReadsEveryInputFromItsField)
{
	morpheus_gate_config cfg{};
	morpheus_scb scb{};
	cfg.scheduler_mode = MORPHEUS_SCHEDULER_MODE_ENFORCED;
	cfg.escalation_policy = MORPHEUS_ESCALATION_POLICY_HYBRID;
	cfg.slice_ns = 11;
	cfg.grace_ns = 13;
	scb.worker_state = MORPHEUS_WORKER_STATE_RUNNING;
	scb.escapable = 1;
	scb.in_critical = 1;
	scb.preempt_seq = 17;
	scb.last_ack_seq = 16;
	morpheus_gate_input in;
	memset(&in, 0xa5, sizeof(in));
	EXPECT_EQ(morpheus_gate_decide(&cfg, &scb, 99, &in), MORPHEUS_GATE_BLOCKED_CRITICAL);
	EXPECT_EQ(in.scheduler_mode, (morpheus_u32)MORPHEUS_SCHEDULER_MODE_ENFORCED);
	EXPECT_EQ(in.escalation_policy, (morpheus_u32)MORPHEUS_ESCALATION_POLICY_HYBRID);
	EXPECT_EQ(in.worker_state, (morpheus_u32)MORPHEUS_WORKER_STATE_RUNNING);
	EXPECT_EQ(in.escapable, 1u);
	EXPECT_EQ(in.in_critical, 1u);
	EXPECT_EQ(in._pad, 0u);
	EXPECT_EQ(in.preempt_seq, 17u);
	EXPECT_EQ(in.last_ack_seq, 16u);
	EXPECT_EQ(in.runtime_ns, 99u);
	EXPECT_EQ(in.slice_ns, 11u);
	EXPECT_EQ(in.grace_ns, 13u);
	scb.in_critical = 0;
	EXPECT_EQ(morpheus_gate_decide(&cfg, &scb, 11 + 13 + 1, &in), MORPHEUS_GATE_ESCALATE);
	cfg.scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER;
	EXPECT_EQ(morpheus_gate_decide(&cfg, &scb, 11 + 13 + 1, &in), MORPHEUS_GATE_BLOCKED_MODE);
	EXPECT_TRUE(morpheus_effect_may_hold(&scb));
	scb.in_critical = 1;
	EXPECT_FALSE(morpheus_effect_may_hold(&scb));
}

// The replays' configuration comes from the case's header image, each field from its own.
TEST(GateConfig, OfHeaderReadsEveryField)
{
	morpheus_region_header hdr{};
	hdr.scheduler_mode = MORPHEUS_SCHEDULER_MODE_ENFORCED;
	hdr.escalation_policy = MORPHEUS_ESCALATION_POLICY_THREAD_KICK;
	hdr.slice_ns = 11;
	hdr.grace_ns = 13;
	hdr.hint_min_interval_ns = 17;
	morpheus_gate_config cfg;
	memset(&cfg, 0xa5, sizeof(cfg));
	morpheus_gate_config_of_header(&hdr, &cfg);
	EXPECT_EQ(cfg.scheduler_mode, (morpheus_u32)MORPHEUS_SCHEDULER_MODE_ENFORCED);
	EXPECT_EQ(cfg.escalation_policy, (morpheus_u32)MORPHEUS_ESCALATION_POLICY_THREAD_KICK);
	EXPECT_EQ(cfg.slice_ns, 11u);
	EXPECT_EQ(cfg.grace_ns, 13u);
}

constexpr morpheus_u64 kBound = MORPHEUS_DEFAULT_THROTTLE_MAX_NS;
constexpr morpheus_u64 kT0 = 1000 * kBound; // an arbitrary "now" of the first action

// An episode opened at kT0 by `steps` actions, the last at `last`, for a request acknowledged up to 4.
morpheus_escalation Open(morpheus_u32 steps, morpheus_u64 last, bool throttled)
{
	morpheus_escalation e{};
	e.open = 1;
	e.opened_ns = kT0;
	e.last_action_ns = last;
	e.ack_at_open = 4;
	e.preempt_seq = 5;
	e.steps = steps;
	e.throttled = throttled;
	return e;
}

struct StepCase {
	const char *name;
	morpheus_escalation e;
	morpheus_u32 policy;
	void (*change)(morpheus_gate_input *); // applied to Escalatable(), may be null
	morpheus_u64 now;
	morpheus_escalation_step expected;
};

// Every transition of the state machine: first actions per policy, repeats, their spacing, the end of
// repeats after a THROTTLE, and each lift with its precedence.
TEST(Escalation, EveryTransition)
{
	const morpheus_escalation none{};
	const morpheus_u32 KICK = MORPHEUS_ESCALATION_POLICY_THREAD_KICK, THR = MORPHEUS_ESCALATION_POLICY_CGROUP_THROTTLE,
			   HYB = MORPHEUS_ESCALATION_POLICY_HYBRID;
	const morpheus_u64 soon = kT0 + kGrace, later = kT0 + kGrace + 1;
	auto crit = [](morpheus_gate_input *in) { in->in_critical = 1; };
	auto acked = [](morpheus_gate_input *in) { in->last_ack_seq = 5; in->preempt_seq = 6; };
	auto quiescing = [](morpheus_gate_input *in) { in->worker_state = MORPHEUS_WORKER_STATE_QUIESCING; };
	auto observer = [](morpheus_gate_input *in) { in->scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER; };
	auto policy_none = [](morpheus_gate_input *in) { in->escalation_policy = MORPHEUS_ESCALATION_POLICY_NONE; };
	auto opted_out = [](morpheus_gate_input *in) { in->escapable = 0; };
	auto within = [](morpheus_gate_input *in) { in->runtime_ns = kSlice; };
	auto all_ack = [](morpheus_gate_input *in) { in->last_ack_seq = in->preempt_seq; };
	const std::vector<StepCase> cases = {
		// No episode: the gate decides, the policy picks the first action.
		{"first_kick", none, KICK, nullptr, kT0, MORPHEUS_STEP_KICK},
		{"first_throttle", none, THR, nullptr, kT0, MORPHEUS_STEP_THROTTLE},
		{"first_hybrid_kicks", none, HYB, nullptr, kT0, MORPHEUS_STEP_KICK},
		{"policy_none_nothing", none, MORPHEUS_ESCALATION_POLICY_NONE, nullptr, kT0, MORPHEUS_STEP_NONE},
		{"blocked_gate_nothing", none, KICK, crit, kT0, MORPHEUS_STEP_NONE},
		{"within_grace_nothing", none, KICK, within, kT0, MORPHEUS_STEP_NONE},
		{"acknowledged_nothing", none, KICK, all_ack, kT0, MORPHEUS_STEP_NONE},
		// Open, unacknowledged: one action per grace period.
		{"kick_repeat_too_soon", Open(1, kT0, false), KICK, nullptr, soon, MORPHEUS_STEP_NONE},
		{"kick_repeats_after_grace", Open(1, kT0, false), KICK, nullptr, later, MORPHEUS_STEP_KICK},
		{"kick_repeats_again", Open(7, kT0, false), KICK, nullptr, later, MORPHEUS_STEP_KICK},
		{"hybrid_too_soon", Open(1, kT0, false), HYB, nullptr, soon, MORPHEUS_STEP_NONE},
		{"hybrid_throttles_after_grace", Open(1, kT0, false), HYB, nullptr, later, MORPHEUS_STEP_THROTTLE},
		{"hybrid_nothing_after_throttle", Open(2, kT0, true), HYB, nullptr, kT0 + kBound - 1, MORPHEUS_STEP_NONE},
		{"throttle_holds", Open(1, kT0, true), THR, nullptr, kT0 + kBound - 1, MORPHEUS_STEP_NONE},
		{"open_within_grace_stays", Open(1, kT0, false), KICK, within, later, MORPHEUS_STEP_NONE},
		{"clock_backwards_no_repeat", Open(1, kT0, false), KICK, nullptr, kT0 - 1, MORPHEUS_STEP_NONE},
		// Lifts, each on its own.
		{"lift_acknowledged", Open(1, kT0, true), THR, acked, later, MORPHEUS_STEP_LIFT_ACKNOWLEDGED},
		{"lift_all_acknowledged", Open(1, kT0, false), KICK, [](morpheus_gate_input *in) { in->last_ack_seq = 5; in->preempt_seq = 5; },
		 later, MORPHEUS_STEP_LIFT_ACKNOWLEDGED},
		{"lift_not_running", Open(1, kT0, false), KICK, quiescing, later, MORPHEUS_STEP_LIFT_NOT_RUNNING},
		{"lift_critical", Open(2, kT0, true), HYB, crit, soon, MORPHEUS_STEP_LIFT_CRITICAL},
		{"lift_observer", Open(1, kT0, false), KICK, observer, later, MORPHEUS_STEP_LIFT_REVOKED},
		{"lift_policy_none", Open(1, kT0, true), THR, policy_none, later, MORPHEUS_STEP_LIFT_REVOKED},
		{"lift_not_escapable", Open(1, kT0, false), KICK, opted_out, later, MORPHEUS_STEP_LIFT_REVOKED},
		{"lift_expired", Open(1, kT0, true), THR, nullptr, kT0 + kBound, MORPHEUS_STEP_LIFT_EXPIRED},
		{"lift_expired_within_grace", Open(1, kT0, false), KICK, within, kT0 + kBound, MORPHEUS_STEP_LIFT_EXPIRED},
		{"not_expired_one_ns_before", Open(1, kT0, true), THR, nullptr, kT0 + kBound - 1, MORPHEUS_STEP_NONE},
		{"clock_backwards_no_expiry", Open(1, kT0, true), THR, nullptr, 0, MORPHEUS_STEP_NONE},
		// Precedence: acknowledgement, then state, then critical, then revocation, then the bound.
		{"ack_before_state", Open(1, kT0, false), KICK, [](morpheus_gate_input *in) { in->last_ack_seq = 5; in->worker_state = 0; },
		 kT0 + kBound, MORPHEUS_STEP_LIFT_ACKNOWLEDGED},
		{"state_before_critical", Open(1, kT0, false), KICK, [](morpheus_gate_input *in) { in->worker_state = 0; in->in_critical = 1; },
		 kT0 + kBound, MORPHEUS_STEP_LIFT_NOT_RUNNING},
		{"critical_before_revoked", Open(1, kT0, false), KICK, [](morpheus_gate_input *in) { in->in_critical = 1; in->escapable = 0; },
		 kT0 + kBound, MORPHEUS_STEP_LIFT_CRITICAL},
		{"revoked_before_expired", Open(1, kT0, false), KICK, observer, kT0 + kBound, MORPHEUS_STEP_LIFT_REVOKED},
	};
	for (const StepCase &c : cases) {
		morpheus_gate_input in = Escalatable();
		in.escalation_policy = c.policy;
		if (c.change)
			c.change(&in);
		const morpheus_gate_verdict verdict = morpheus_gate(&in);
		EXPECT_EQ(morpheus_escalation_decide(&c.e, &in, verdict, c.now, kBound), c.expected) << c.name;
	}
}

// commit: actions open and advance an episode, a THROTTLE ends its repeats, any lift closes it.
TEST(Escalation, CommitRecordsTheEpisode)
{
	morpheus_gate_input in = Escalatable(); // preempt_seq 5, last_ack_seq 4
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_HYBRID;
	morpheus_escalation e{};
	morpheus_escalation_commit(&e, MORPHEUS_STEP_NONE, &in, kT0);
	EXPECT_EQ(e.open, 0u);

	morpheus_escalation_commit(&e, MORPHEUS_STEP_KICK, &in, kT0);
	EXPECT_EQ(e.open, 1u);
	EXPECT_EQ(e.steps, 1u);
	EXPECT_EQ(e.opened_ns, kT0);
	EXPECT_EQ(e.last_action_ns, kT0);
	EXPECT_EQ(e.ack_at_open, 4u);
	EXPECT_EQ(e.preempt_seq, 5u);
	EXPECT_EQ(e.throttled, 0u);

	in.preempt_seq = 9; // later hints do not move the episode's request
	morpheus_escalation_commit(&e, MORPHEUS_STEP_THROTTLE, &in, kT0 + kGrace + 1);
	EXPECT_EQ(e.steps, 2u);
	EXPECT_EQ(e.opened_ns, kT0);
	EXPECT_EQ(e.last_action_ns, kT0 + kGrace + 1);
	EXPECT_EQ(e.preempt_seq, 5u);
	EXPECT_EQ(e.throttled, 1u);
	EXPECT_EQ(morpheus_escalation_decide(&e, &in, morpheus_gate(&in), kT0 + 2 * kGrace + 2, kBound), MORPHEUS_STEP_NONE);

	for (morpheus_escalation_step lift : {MORPHEUS_STEP_LIFT_ACKNOWLEDGED, MORPHEUS_STEP_LIFT_NOT_RUNNING,
					      MORPHEUS_STEP_LIFT_CRITICAL, MORPHEUS_STEP_LIFT_REVOKED, MORPHEUS_STEP_LIFT_EXPIRED}) {
		morpheus_escalation closed = e;
		morpheus_escalation_commit(&closed, lift, &in, kT0 + kBound);
		const morpheus_escalation zero{};
		EXPECT_EQ(memcmp(&closed, &zero, sizeof(zero)), 0) << "lift " << lift;
		EXPECT_TRUE(morpheus_step_is_lift(lift));
		EXPECT_EQ(morpheus_step_action(lift), 0u);
		// After a lift, a worker still overrunning starts a new episode with the first action.
		EXPECT_EQ(morpheus_escalation_decide(&closed, &in, morpheus_gate(&in), kT0 + kBound, kBound), MORPHEUS_STEP_KICK);
	}
	EXPECT_FALSE(morpheus_step_is_lift(MORPHEUS_STEP_NONE));
	EXPECT_FALSE(morpheus_step_is_lift(MORPHEUS_STEP_KICK));
	EXPECT_FALSE(morpheus_step_is_lift(MORPHEUS_NR_STEPS));
	EXPECT_EQ(morpheus_step_action(MORPHEUS_STEP_KICK), (morpheus_u32)MORPHEUS_ESCALATION_ACTION_KICK);
	EXPECT_EQ(morpheus_step_action(MORPHEUS_STEP_THROTTLE), (morpheus_u32)MORPHEUS_ESCALATION_ACTION_THROTTLE);
	EXPECT_EQ(morpheus_step_action(MORPHEUS_STEP_NONE), 0u);
}

// A whole HYBRID episode driven through decide + commit, as every backend drives it.
TEST(Escalation, HybridEpisodeEndToEnd)
{
	morpheus_gate_input in = Escalatable();
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_HYBRID;
	morpheus_escalation e{};
	struct Tick {
		morpheus_u64 now;
		morpheus_escalation_step expected;
	};
	const std::vector<Tick> ticks = {
		{kT0, MORPHEUS_STEP_KICK},
		{kT0 + 1, MORPHEUS_STEP_NONE},
		{kT0 + kGrace, MORPHEUS_STEP_NONE},
		{kT0 + kGrace + 1, MORPHEUS_STEP_THROTTLE},
		{kT0 + 3 * kGrace, MORPHEUS_STEP_NONE},
		{kT0 + kBound, MORPHEUS_STEP_LIFT_EXPIRED},
		{kT0 + kBound + 1, MORPHEUS_STEP_KICK},
	};
	for (const Tick &t : ticks) {
		const morpheus_escalation_step step = morpheus_escalation_decide(&e, &in, morpheus_gate(&in), t.now, kBound);
		EXPECT_EQ(step, t.expected) << "at " << t.now - kT0;
		morpheus_escalation_commit(&e, step, &in, t.now);
	}
	EXPECT_EQ(e.open, 1u);
	EXPECT_EQ(e.opened_ns, kT0 + kBound + 1);
}

// A THREAD_KICK episode whose kick is a standing demotion (sim; the agent's kick under the tracing
// backend): the repeats the state machine decides are no action, so the episode keeps its first
// action's time and count, and it is still lifted as any episode is. A HYBRID repeat still throttles.
TEST(Escalation, ARepeatedKickOverAStandingDemotionIsNoAction)
{
	morpheus_gate_input in = Escalatable();
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_THREAD_KICK;
	morpheus_escalation e{};
	int actions = 0;
	for (morpheus_u64 now = kT0; now < kT0 + kBound; now += kGrace / 2) {
		const morpheus_escalation_step step = morpheus_escalation_decide(&e, &in, morpheus_gate(&in), now, kBound);
		if (morpheus_step_action(step) && !morpheus_step_takes_effect(step, e.open != 0))
			continue;
		EXPECT_EQ(step, now == kT0 ? MORPHEUS_STEP_KICK : MORPHEUS_STEP_NONE) << "at " << now - kT0;
		actions += morpheus_step_action(step) != 0;
		morpheus_escalation_commit(&e, step, &in, now);
	}
	EXPECT_EQ(actions, 1);
	EXPECT_EQ(e.steps, 1u);
	EXPECT_EQ(e.last_action_ns, kT0);
	EXPECT_EQ(morpheus_escalation_decide(&e, &in, morpheus_gate(&in), kT0 + kBound, kBound), MORPHEUS_STEP_LIFT_EXPIRED);

	// The kernel's kick preempts again: no standing demotion, so the repeat is an action.
	EXPECT_TRUE(morpheus_step_takes_effect(MORPHEUS_STEP_KICK, 0));
	// The first kick of an episode, and any throttle, always take effect.
	EXPECT_TRUE(morpheus_step_takes_effect(MORPHEUS_STEP_THROTTLE, 1));
	in.escalation_policy = MORPHEUS_ESCALATION_POLICY_HYBRID;
	morpheus_escalation h{};
	morpheus_escalation_commit(&h, MORPHEUS_STEP_KICK, &in, kT0);
	const morpheus_escalation_step repeat = morpheus_escalation_decide(&h, &in, morpheus_gate(&in), kT0 + kGrace + 1, kBound);
	EXPECT_EQ(repeat, MORPHEUS_STEP_THROTTLE);
	EXPECT_TRUE(morpheus_step_takes_effect(repeat, 1));
}

struct HintCase {
	const char *name;
	morpheus_u32 state;
	morpheus_u64 runtime, slice, now, last_hint, interval;
	morpheus_u64 preempt_seq, last_ack_seq; /* equal: nothing pending */
	morpheus_hint_decision expected;
};

TEST(Hint, Decisions)
{
	const morpheus_u32 R = MORPHEUS_WORKER_STATE_RUNNING;
	const morpheus_u64 I = MORPHEUS_DEFAULT_HINT_MIN_INTERVAL_NS;
	const std::vector<HintCase> cases = {
		{"within_slice", R, kSlice, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_NONE},
		{"over_slice_first_hint", R, kSlice + 1, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_EMIT},
		{"not_running_registered", MORPHEUS_WORKER_STATE_REGISTERED, kMax, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_NONE},
		{"not_running_quiescing", MORPHEUS_WORKER_STATE_QUIESCING, kMax, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_NONE},
		{"not_running_init", MORPHEUS_WORKER_STATE_INIT, kMax, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_NONE},
		{"rate_limited", R, kSlice + 1, kSlice, 10 * I, 10 * I - I + 1, I, 3, 3, MORPHEUS_HINT_RATE_LIMITED},
		{"interval_exactly_elapsed", R, kSlice + 1, kSlice, 10 * I, 9 * I, I, 3, 3, MORPHEUS_HINT_EMIT},
		{"zero_interval", R, kSlice + 1, kSlice, 10 * I, 10 * I, 0, 3, 3, MORPHEUS_HINT_EMIT},
		{"huge_interval", R, kSlice + 1, kSlice, kMax, 1, kMax, 3, 3, MORPHEUS_HINT_RATE_LIMITED},
		{"huge_runtime", R, kMax, kSlice, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_EMIT},
		{"slice_max", R, kMax, kMax, 10 * I, 0, I, 3, 3, MORPHEUS_HINT_NONE},
		/* 1.5: rate limited while the request is unacknowledged: it has been asked, nothing is dropped. */
		{"rate_limited_request_pending", R, kSlice + 1, kSlice, 10 * I, 10 * I - I + 1, I, 3, 2, MORPHEUS_HINT_PENDING},
		{"rate_limited_many_pending", R, kMax, kSlice, 10 * I, 10 * I - 1, I, 9, 2, MORPHEUS_HINT_PENDING},
		{"rate_limited_pending_wrapped", R, kSlice + 1, kSlice, 10 * I, 10 * I - 1, I, 0, kMax, MORPHEUS_HINT_PENDING},
		/* Pending changes nothing else: past the interval the worker is hinted again, within its slice or
		 * not RUNNING it is not. */
		{"pending_interval_elapsed", R, kSlice + 1, kSlice, 10 * I, 9 * I, I, 3, 2, MORPHEUS_HINT_EMIT},
		{"pending_within_slice", R, kSlice, kSlice, 10 * I, 10 * I - 1, I, 3, 2, MORPHEUS_HINT_NONE},
		{"pending_not_running", MORPHEUS_WORKER_STATE_QUIESCING, kMax, kSlice, 10 * I, 10 * I - 1, I, 3, 2, MORPHEUS_HINT_NONE},
	};
	for (const HintCase &c : cases) {
		EXPECT_EQ(morpheus_hint_decide(c.state, c.runtime, c.slice, c.now, c.last_hint, c.interval, c.preempt_seq,
					       c.last_ack_seq),
			  c.expected)
			<< c.name;
	}
}

TEST(Hint, OnlyARateLimitedDecisionWithNothingPendingIsADroppedHint)
{
	EXPECT_TRUE(morpheus_hint_dropped(MORPHEUS_HINT_RATE_LIMITED));
	EXPECT_FALSE(morpheus_hint_dropped(MORPHEUS_HINT_PENDING));
	EXPECT_FALSE(morpheus_hint_dropped(MORPHEUS_HINT_EMIT));
	EXPECT_FALSE(morpheus_hint_dropped(MORPHEUS_HINT_NONE));
}

TEST(Hint, DecideOnAnScbLoadsTheRequestState)
{
	const morpheus_u64 I = MORPHEUS_DEFAULT_HINT_MIN_INTERVAL_NS;
	struct morpheus_scb scb = {};
	scb.worker_state = MORPHEUS_WORKER_STATE_RUNNING;
	scb.last_hint_ns = 10 * I - 1;
	scb.preempt_seq = 3;
	scb.last_ack_seq = 2;
	EXPECT_EQ(morpheus_hint_decide_scb(&scb, kSlice + 1, kSlice, 10 * I, I), MORPHEUS_HINT_PENDING);
	scb.last_ack_seq = 3;
	EXPECT_EQ(morpheus_hint_decide_scb(&scb, kSlice + 1, kSlice, 10 * I, I), MORPHEUS_HINT_RATE_LIMITED);
	scb.last_hint_ns = 9 * I;
	EXPECT_EQ(morpheus_hint_decide_scb(&scb, kSlice + 1, kSlice, 10 * I, I), MORPHEUS_HINT_EMIT);
}

TEST(GateDue, NeverInTheDecisionThatMadeTheRequest)
{
	const morpheus_u64 G = MORPHEUS_DEFAULT_GRACE_NS;
	/* A late decision: first seen past slice + grace, hinted now: not judged until the next one. */
	EXPECT_FALSE(morpheus_gate_due(0, MORPHEUS_HINT_EMIT, kSlice + 2 * G, kSlice));
	/* The next decision, the request still pending (its hint rate-limited or not due): judged. */
	EXPECT_TRUE(morpheus_gate_due(0, MORPHEUS_HINT_RATE_LIMITED, kSlice + 2 * G, kSlice));
	/* A rate-limited decision that counts nothing (1.5) is judged all the same: the gate is its own rule. */
	EXPECT_TRUE(morpheus_gate_due(0, MORPHEUS_HINT_PENDING, kSlice + 2 * G, kSlice));
	EXPECT_TRUE(morpheus_gate_due(0, MORPHEUS_HINT_NONE, kSlice + 2 * G, kSlice));
	/* Within its slice, no episode: nothing to judge. */
	EXPECT_FALSE(morpheus_gate_due(0, MORPHEUS_HINT_NONE, kSlice, kSlice));
	EXPECT_FALSE(morpheus_gate_due(0, MORPHEUS_HINT_NONE, 0, kSlice));
	/* An open episode is always looked at (its lifts), whatever the hint and runtime. */
	EXPECT_TRUE(morpheus_gate_due(1, MORPHEUS_HINT_EMIT, kSlice + 2 * G, kSlice));
	EXPECT_TRUE(morpheus_gate_due(1, MORPHEUS_HINT_NONE, 0, kSlice));
	EXPECT_TRUE(morpheus_gate_due(1, MORPHEUS_HINT_RATE_LIMITED, kMax, kSlice));
}

TEST(YieldPoint, OnlyAnAcknowledgementASleepOrNotRunningStartsASliceAfresh)
{
	const morpheus_u32 R = MORPHEUS_WORKER_STATE_RUNNING;
	/* Nothing happened: the slice goes on. */
	EXPECT_EQ(morpheus_yield_point(4, 4, R, 0), MORPHEUS_YIELD_POINT_NONE);
	/* last_ack_seq moved (either way: any change is an acknowledgement). */
	EXPECT_EQ(morpheus_yield_point(4, 5, R, 0), MORPHEUS_YIELD_POINT_ACKNOWLEDGED);
	EXPECT_EQ(morpheus_yield_point(kMax, 0, R, 0), MORPHEUS_YIELD_POINT_ACKNOWLEDGED);
	/* A voluntary sleep; an acknowledgement in the same interval is the reason given. */
	EXPECT_EQ(morpheus_yield_point(4, 4, R, 1), MORPHEUS_YIELD_POINT_SLEPT);
	EXPECT_EQ(morpheus_yield_point(4, 5, R, 1), MORPHEUS_YIELD_POINT_ACKNOWLEDGED);
	/* Not RUNNING comes first, whatever else happened. */
	for (morpheus_u32 s : {MORPHEUS_WORKER_STATE_INIT, MORPHEUS_WORKER_STATE_CLAIMED, MORPHEUS_WORKER_STATE_REGISTERED,
			       MORPHEUS_WORKER_STATE_QUIESCING, MORPHEUS_WORKER_STATE_DEAD}) {
		EXPECT_EQ(morpheus_yield_point(4, 4, s, 0), MORPHEUS_YIELD_POINT_NOT_RUNNING) << s;
		EXPECT_EQ(morpheus_yield_point(4, 5, s, 1), MORPHEUS_YIELD_POINT_NOT_RUNNING) << s;
	}
	/* There is no input for yield_count: a yield that acknowledges nothing is no yield point. */
}

TEST(VerdictCount, OncePerRequestAndVerdictPastTheSliceWhenTheDecisionMayAct)
{
	morpheus_verdict_tally t{};
	const auto spared = MORPHEUS_GATE_BLOCKED_CRITICAL;
	/* Within the slice, or a decision that may not act: never counted, nothing recorded. */
	EXPECT_FALSE(morpheus_verdict_count(&t, 1, kSlice, kSlice, 5, spared));
	EXPECT_FALSE(morpheus_verdict_count(&t, 0, kSlice + 1, kSlice, 5, spared));
	EXPECT_EQ(t.counted, 0u);
	/* The first decision past the slice counts; the same (request, verdict) again does not, however often. */
	EXPECT_TRUE(morpheus_verdict_count(&t, 1, kSlice + 1, kSlice, 5, spared));
	for (int i = 0; i < 10; i++)
		EXPECT_FALSE(morpheus_verdict_count(&t, 1, kSlice + 2 + i, kSlice, 5, spared)) << i;
	/* A new verdict for the same request counts, and so does going back to the first one. */
	EXPECT_TRUE(morpheus_verdict_count(&t, 1, kSlice + 20, kSlice, 5, MORPHEUS_GATE_BLOCKED_WITHIN_GRACE));
	EXPECT_TRUE(morpheus_verdict_count(&t, 1, kSlice + 21, kSlice, 5, spared));
	/* A new request counts again with the same verdict. */
	EXPECT_TRUE(morpheus_verdict_count(&t, 1, kSlice + 22, kSlice, 6, spared));
	EXPECT_EQ(t.preempt_seq, 6u);
	/* A zeroed tally (slot handed over) counts request 0 with verdict 0 once too. */
	morpheus_verdict_tally fresh{};
	EXPECT_TRUE(morpheus_verdict_count(&fresh, 1, kSlice + 1, kSlice, 0, MORPHEUS_GATE_ESCALATE));
	EXPECT_FALSE(morpheus_verdict_count(&fresh, 1, kSlice + 1, kSlice, 0, MORPHEUS_GATE_ESCALATE));
}

TEST(EscalationAction, PerPolicy)
{
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_NONE, 0), 0u);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_NONE, 1), 0u);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_THREAD_KICK, 0), MORPHEUS_ESCALATION_ACTION_KICK);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_THREAD_KICK, 1), MORPHEUS_ESCALATION_ACTION_KICK);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_CGROUP_THROTTLE, 0), MORPHEUS_ESCALATION_ACTION_THROTTLE);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_HYBRID, 0), MORPHEUS_ESCALATION_ACTION_KICK);
	EXPECT_EQ(morpheus_escalation_action(MORPHEUS_ESCALATION_POLICY_HYBRID, 1), MORPHEUS_ESCALATION_ACTION_THROTTLE);
	EXPECT_EQ(morpheus_escalation_action(42, 0), 0u);
}

TEST(Pressure, Thresholds)
{
	const std::vector<std::pair<morpheus_u32, morpheus_u32>> cases = {
		{0, MORPHEUS_PRESSURE_LEVEL_NONE},
		{MORPHEUS_PRESSURE_LOW_CENTI - 1, MORPHEUS_PRESSURE_LEVEL_NONE},
		{MORPHEUS_PRESSURE_LOW_CENTI, MORPHEUS_PRESSURE_LEVEL_LOW},
		{MORPHEUS_PRESSURE_MEDIUM_CENTI - 1, MORPHEUS_PRESSURE_LEVEL_LOW},
		{MORPHEUS_PRESSURE_MEDIUM_CENTI, MORPHEUS_PRESSURE_LEVEL_MEDIUM},
		{MORPHEUS_PRESSURE_HIGH_CENTI - 1, MORPHEUS_PRESSURE_LEVEL_MEDIUM},
		{MORPHEUS_PRESSURE_HIGH_CENTI, MORPHEUS_PRESSURE_LEVEL_HIGH},
		{10000, MORPHEUS_PRESSURE_LEVEL_HIGH},
		{0xffffffffu, MORPHEUS_PRESSURE_LEVEL_HIGH},
	};
	for (const auto &c : cases)
		EXPECT_EQ(morpheus_pressure_level(c.first), c.second) << c.first;
}

// The base policy's DEADLINE order (enum morpheus_base_order), at the default base slice.
constexpr morpheus_u64 kBaseSlice = 20ULL * 1000 * 1000;
constexpr morpheus_u64 kSecond = 1000ULL * 1000 * 1000;

TEST(BaseDeadline, SleeperWhoWaitedLongerGoesFirstWhateverCpuItUsedBefore)
{
	// Two tasks of the same wake-up rate, both just woken (they slept since they last ran): the one
	// queued first has the earlier deadline, although it used far more CPU before its sleep. Under
	// the CPUTIME order the other one would go first.
	morpheus_base_task heavy{}, light{};
	heavy.wake_rate = light.wake_rate = 100;
	heavy.last_sleep_ns = light.last_sleep_ns = 1;
	morpheus_base_charge(&heavy, 50 * kBaseSlice);
	morpheus_base_sleep(&heavy, 2 * kSecond);
	morpheus_base_charge(&light, 1000);
	morpheus_base_sleep(&light, 2 * kSecond);
	EXPECT_EQ(heavy.exec_ns, 0u);
	EXPECT_EQ(light.exec_ns, 0u);
	EXPECT_LT(morpheus_base_deadline(&heavy, 3 * kSecond, kBaseSlice), morpheus_base_deadline(&light, 3 * kSecond + 1000, kBaseSlice));
}

TEST(BaseDeadline, CpuSinceLastSleepPushesBackUpToTheCap)
{
	morpheus_base_task t{};
	const morpheus_u64 now = 10 * kSecond;
	EXPECT_EQ(morpheus_base_deadline(&t, now, kBaseSlice), now);
	morpheus_base_charge(&t, 3000);
	EXPECT_EQ(morpheus_base_deadline(&t, now, kBaseSlice), now + 3000);
	morpheus_base_charge(&t, 100 * kBaseSlice);
	EXPECT_EQ(morpheus_base_deadline(&t, now, kBaseSlice), now + kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES);
	// A hog queued at t is behind a sleeper queued up to the cap later, and ahead of one queued after.
	morpheus_base_task sleeper{};
	const morpheus_u64 cap = kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES;
	EXPECT_LT(morpheus_base_deadline(&sleeper, now + cap - 1, kBaseSlice), morpheus_base_deadline(&t, now, kBaseSlice));
	EXPECT_GT(morpheus_base_deadline(&sleeper, now + cap + 1, kBaseSlice), morpheus_base_deadline(&t, now, kBaseSlice));
	// Charging saturates.
	morpheus_base_charge(&t, ~0ULL);
	EXPECT_EQ(t.exec_ns, ~0ULL);
	EXPECT_EQ(morpheus_base_deadline(&t, now, kBaseSlice), now + cap);
}

TEST(BaseDeadline, WakeRateGivesCreditUpToTheWhole)
{
	// A task sleeping every 2 ms (500/s) approaches that rate; its credit grows with it, never past
	// the whole credit; the first sleep only notes the time.
	morpheus_base_task t{};
	morpheus_u64 now = kSecond;
	morpheus_base_sleep(&t, now);
	EXPECT_EQ(t.wake_rate, 0u);
	morpheus_u64 prev_credit = 0;
	for (int i = 0; i < 40; i++) {
		now += 2 * 1000 * 1000;
		morpheus_base_sleep(&t, now);
		morpheus_u64 credit = morpheus_base_wake_credit(t.wake_rate, kBaseSlice);
		EXPECT_GE(credit, prev_credit);
		prev_credit = credit;
	}
	EXPECT_GT(t.wake_rate, 480u);
	EXPECT_LE(t.wake_rate, 500u);
	const morpheus_u64 whole = morpheus_base_wake_credit(MORPHEUS_BASE_RATE_FULL, kBaseSlice);
	EXPECT_GT(whole, kBaseSlice / MORPHEUS_BASE_CREDIT_DIV - MORPHEUS_BASE_RATE_FULL);
	EXPECT_LE(whole, kBaseSlice / MORPHEUS_BASE_CREDIT_DIV);
	EXPECT_EQ(morpheus_base_wake_credit(100 * MORPHEUS_BASE_RATE_FULL, kBaseSlice), whole);
	EXPECT_EQ(morpheus_base_wake_credit(0, kBaseSlice), 0u);
	// The frequent waker queued at the same time as a task that never slept goes first by its credit.
	morpheus_base_task never{};
	EXPECT_EQ(morpheus_base_deadline(&never, now, kBaseSlice) - morpheus_base_deadline(&t, now, kBaseSlice),
		  morpheus_base_wake_credit(t.wake_rate, kBaseSlice));
	// Sleeping rarely brings the rate down; a clock that did not advance counts as the fastest rate.
	const morpheus_u64 fast = t.wake_rate;
	now += 10 * kSecond;
	morpheus_base_sleep(&t, now);
	EXPECT_LT(t.wake_rate, fast);
	morpheus_base_task same{};
	morpheus_base_sleep(&same, now);
	morpheus_base_sleep(&same, now);
	EXPECT_EQ(same.wake_rate, MORPHEUS_BASE_RATE_FULL / MORPHEUS_BASE_RATE_SMOOTHING);
	// A clock that went backwards changes no rate.
	morpheus_base_task back{};
	back.last_sleep_ns = now;
	morpheus_base_sleep(&back, now - 1);
	EXPECT_EQ(back.wake_rate, 0u);
}

TEST(BaseDeadline, NoUnderflowNearTimeZero)
{
	morpheus_base_task t{};
	t.wake_rate = MORPHEUS_BASE_RATE_FULL;
	EXPECT_EQ(morpheus_base_deadline(&t, 0, kBaseSlice), 0u);
	EXPECT_EQ(morpheus_base_deadline(&t, 1, kBaseSlice), 0u);
}

// The vtime orders (CPUTIME and LAG): a task is keyed by its vtime, raised to vtime_now less a credit.
TEST(BaseVtime, CreditIsASliceUnderCputimeAndTheSliceLagUnderLag)
{
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_CPUTIME, kBaseSlice, 100), kBaseSlice);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_CPUTIME, kBaseSlice, 10000), kBaseSlice);
	// DEADLINE keys by deadline; only a task cpu.max held goes back by vtime, with CPUTIME's credit.
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_DEADLINE, kBaseSlice, 100), kBaseSlice);
	const morpheus_u64 lag = kBaseSlice / MORPHEUS_BASE_LAG_DIV;
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 100), lag);
	EXPECT_LT(lag, kBaseSlice);
	// The same CPU time of credit for every weight: a heavier task's vtime moves slower.
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 200), lag / 2);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 50), lag * 2);
	// Weight 0 counts as 100; a tiny slice still leaves a credit of 1, a zero slice none.
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 0), lag);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, 1, 10000), 1u);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, 0, 100), 0u);
}

TEST(BaseVtime, KeyIsTheVtimeRaisedToTheFloor)
{
	const morpheus_u64 now = 10 * kSecond, credit = 2500 * 1000;
	EXPECT_EQ(morpheus_base_vtime_key(now - credit - 1, now, credit), now - credit);
	EXPECT_EQ(morpheus_base_vtime_key(0, now, credit), now - credit);
	EXPECT_EQ(morpheus_base_vtime_key(now - credit, now, credit), now - credit);
	EXPECT_EQ(morpheus_base_vtime_key(now - 1, now, credit), now - 1);
	EXPECT_EQ(morpheus_base_vtime_key(now + 5000, now, credit), now + 5000);
	// The clocks wrap: compared as a signed difference, as the kernel's time_before().
	const morpheus_u64 wrap = 1000;
	EXPECT_EQ(morpheus_base_vtime_key(~0ULL - 10, wrap, credit), ~0ULL - 10);
	EXPECT_EQ(morpheus_base_vtime_key(wrap - 5, wrap, 10), wrap - 5);
	EXPECT_EQ(morpheus_base_vtime_key(~0ULL - 20, 5, 10), ~0ULL - 4);
	EXPECT_EQ(morpheus_base_vtime_key(~0ULL, 5, 10), ~0ULL);
}

TEST(BaseVtime, UnderLagATaskThatRanMoreWaitsBehindALaterWakerByAtMostTheLag)
{
	// Two tasks of the same weight; A used 15 ms less CPU than B before both slept. B wakes first,
	// A 1 ms of vtime later (vtime_now moved on by then). Under CPUTIME A keeps its 15 ms lead and goes
	// ahead of B, who waited longer; under LAG both are raised to their floors and B, queued first,
	// goes first.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	const morpheus_u64 vtime_a = now - 20 * ms, vtime_b = now - 5 * ms;
	for (morpheus_u32 order : {MORPHEUS_BASE_ORDER_CPUTIME, MORPHEUS_BASE_ORDER_LAG}) {
		const morpheus_u64 credit = morpheus_base_vtime_credit(order, kBaseSlice, 100);
		const morpheus_u64 key_b = morpheus_base_vtime_key(vtime_b, now, credit);
		const morpheus_u64 key_a = morpheus_base_vtime_key(vtime_a, now + 1 * ms, credit);
		if (order == MORPHEUS_BASE_ORDER_CPUTIME)
			EXPECT_LT(key_a, key_b);
		else
			EXPECT_LT(key_b, key_a);
	}
	// Under LAG, a task queued once vtime_now has moved on by more than the lag never goes ahead of
	// one queued before with no more vtime than vtime_now then, however little CPU it used before
	// (under CPUTIME it may, up to a slice later).
	const morpheus_u64 lag = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 100);
	const morpheus_u64 first = morpheus_base_vtime_key(now, now, lag);
	EXPECT_GT(morpheus_base_vtime_key(0, now + lag + 1, lag), first);
	EXPECT_LT(morpheus_base_vtime_key(0, now + lag + 1, kBaseSlice), first);
}

// The BURST order: LAG's key plus the CPU used since the last sleep, capped; the vtime kept apart.
TEST(BaseBurst, CreditIsTheSliceLag)
{
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 100),
		  morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 100));
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 200), kBaseSlice / MORPHEUS_BASE_LAG_DIV / 2);
}

TEST(BaseBurst, KeyIsTheLagKeyPlusTheCappedExecRuntime)
{
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	const morpheus_u64 lag = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 100);
	const morpheus_u64 cap = kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES;
	// No state yet: the key so far is the vtime, raised to the lag floor, with no exec runtime.
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, nullptr, now - 10 * ms, now, kBaseSlice, 100), now - lag);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, nullptr, now + 3 * ms, now, kBaseSlice, 100), now + 3 * ms);
	// With state: the kept vtime, not the key so far, plus the exec runtime up to the cap.
	morpheus_base_task t{};
	morpheus_base_burst_charge(&t, now - 1 * ms, 2 * ms);
	EXPECT_EQ(t.has_vtime, 1u);
	EXPECT_EQ(t.vtime, now + 1 * ms);
	EXPECT_EQ(t.exec_ns, 2 * ms);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 0, now, kBaseSlice, 100), now + 1 * ms + 2 * ms);
	morpheus_base_burst_charge(&t, 0, 40 * ms);
	EXPECT_EQ(t.vtime, now + 41 * ms);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 12345, now, kBaseSlice, 100), now + 41 * ms + cap);
	// Sleeping ends the burst: the key is the vtime alone again; the vtime keeps every run.
	morpheus_base_sleep(&t, 5 * kSecond);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 0, now, kBaseSlice, 100), now + 41 * ms);
}

TEST(BaseBurst, AHogQueuedWithAWorkerGoesBehindItByItsBurstTheLagStillBoundsTheWorkersLead)
{
	// A hog and a worker, same weight, both near vtime_now. The hog has run 30 ms without sleeping;
	// the worker ran 0.5 ms since it woke. Under LAG the hog (less vtime) goes first; under BURST the
	// hog goes behind the worker by up to the cap.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task hog{}, worker{};
	morpheus_base_burst_charge(&hog, now - 32 * ms, 30 * ms);   // vtime now - 2 ms
	morpheus_base_burst_charge(&worker, now - 1 * ms, 500 * 1000); // vtime now - 0.5 ms
	const morpheus_u64 lag = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_LAG, kBaseSlice, 100);
	EXPECT_LT(morpheus_base_vtime_key(hog.vtime, now, lag), morpheus_base_vtime_key(worker.vtime, now, lag));
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &worker, 0, now, kBaseSlice, 100));
	// The burst term is capped: a worker whose vtime is more than the cap ahead of the hog's still
	// goes behind it (the hog is not starved).
	morpheus_base_task ahead{};
	morpheus_base_burst_charge(&ahead, now + kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES, 0);
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &ahead, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &hog, 0, now, kBaseSlice, 100));
	// A worker that slept long keeps only the lag of credit, whatever vtime it had.
	morpheus_base_task sleeper{};
	morpheus_base_burst_charge(&sleeper, now - 10 * kSecond, 0);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &sleeper, 0, now, kBaseSlice, 100), now - lag);
}

TEST(BaseBurst, QueueingRaisesTheKeptVtimeToTheFloorSoALongSleeperDoesNotKeepItsLead)
{
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	const morpheus_u64 lag = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 100);
	morpheus_base_task t{};
	morpheus_base_burst_charge(&t, now - 10 * kSecond, 1 * ms);
	morpheus_base_sleep(&t, 1);
	morpheus_base_burst_queued(&t, now, kBaseSlice, 100);
	EXPECT_EQ(t.vtime, now - lag);
	// After a 5 ms run it is 5 ms past the floor, not back at it (without the raise it would be
	// raised to the floor again at every queueing while it caught up ten seconds).
	morpheus_base_burst_charge(&t, 0, 5 * ms);
	morpheus_base_sleep(&t, 2);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 0, now, kBaseSlice, 100), now - lag + 5 * ms);
	// A vtime already past the floor is left alone; a task with no kept vtime is left alone.
	morpheus_base_burst_queued(&t, now, kBaseSlice, 100);
	EXPECT_EQ(t.vtime, now - lag + 5 * ms);
	morpheus_base_task none{};
	morpheus_base_burst_queued(&none, now, kBaseSlice, 100);
	EXPECT_EQ(none.vtime, 0u);
	EXPECT_EQ(none.has_vtime, 0u);
}

// The SPARE order: BURST with the term counting only the CPU beyond twice the usual burst.
TEST(BaseSpare, UsualBurstIsTheMovingAverageOfTheExecRuntimeAtEachSleep)
{
	const morpheus_u64 ms = 1000 * 1000;
	morpheus_base_task t{};
	morpheus_base_charge(&t, 4 * ms);
	morpheus_base_sleep(&t, 1 * kSecond);
	EXPECT_EQ(t.burst_avg_ns, 4 * ms); // the first sleep sets it
	morpheus_base_charge(&t, 8 * ms);
	morpheus_base_sleep(&t, 2 * kSecond);
	EXPECT_EQ(t.burst_avg_ns, 4 * ms - 4 * ms / MORPHEUS_BASE_RATE_SMOOTHING + 8 * ms / MORPHEUS_BASE_RATE_SMOOTHING);
	EXPECT_EQ(t.exec_ns, 0u);
}

TEST(BaseSpare, TermIsTheExecRuntimeBeyondTwiceTheUsualBurstCapped)
{
	const morpheus_u64 ms = 1000 * 1000;
	const morpheus_u64 cap = kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES;
	EXPECT_EQ(morpheus_base_spare_term(nullptr, kBaseSlice), 0u);
	morpheus_base_task t{};
	t.burst_avg_ns = 1 * ms;
	t.exec_ns = MORPHEUS_BASE_SPARE_MUL * ms;
	EXPECT_EQ(morpheus_base_spare_term(&t, kBaseSlice), 0u);
	t.exec_ns = MORPHEUS_BASE_SPARE_MUL * ms + 3 * ms;
	EXPECT_EQ(morpheus_base_spare_term(&t, kBaseSlice), 3 * ms);
	t.exec_ns = 100 * kBaseSlice;
	EXPECT_EQ(morpheus_base_spare_term(&t, kBaseSlice), cap);
	// A task that has never slept has no usual burst: its whole exec runtime counts, as under BURST.
	morpheus_base_task hog{};
	morpheus_base_burst_charge(&hog, 0, 7 * ms);
	EXPECT_EQ(morpheus_base_spare_term(&hog, kBaseSlice), 7 * ms);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_SPARE, kBaseSlice, 100),
		  morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 100));
}

TEST(BaseSpare, AWorkerPreemptedInsideItsUsualBurstQueuesLevelWithWakersAHogStillGoesBehind)
{
	// Traced in the VM at w8 (scheduler/BENCHMARKS.md): under BURST a worker preempted part-way into
	// its op was requeued behind every worker that woke meanwhile by the CPU of its op so far. Under
	// SPARE a worker whose run so far is within twice its usual burst keeps its lag key; a hog (never
	// slept) still goes behind the worker by its exec runtime, as under BURST.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task worker{}, waker{}, hog{};
	morpheus_base_burst_charge(&worker, now - 1 * ms, 0);
	morpheus_base_charge(&worker, 5 * ms);
	morpheus_base_sleep(&worker, 1 * kSecond);   // usual burst 5 ms
	morpheus_base_burst_charge(&worker, 0, 6 * ms); // preempted 6 ms into its next op; vtime now + 5 ms
	morpheus_base_burst_charge(&waker, now + 5 * ms, 0);
	morpheus_base_charge(&waker, 5 * ms);
	morpheus_base_sleep(&waker, 1 * kSecond);       // woke with the same vtime, no exec runtime
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &waker, 0, now, kBaseSlice, 100));
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &waker, 0, now, kBaseSlice, 100) + 5 * ms);
	morpheus_base_burst_charge(&hog, now - 32 * ms, 30 * ms); // vtime now - 2 ms, never slept
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &worker, 0, now, kBaseSlice, 100));
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &hog, 0, now, kBaseSlice, 100));
}

// The RECENT order: BURST with no term while the task slept and has used less than
// MORPHEUS_BASE_RECENT_SLICES base slices of CPU since, the whole capped term otherwise.
TEST(BaseRecent, AWorkerPreemptedSoonAfterWakingQueuesLevelWithAWakerOfTheSameVtime)
{
	// Traced in the VM at w8 (scheduler/BENCHMARKS.md): under BURST a worker preempted part-way into
	// its op was requeued behind every worker that woke meanwhile by the CPU of its op so far, and
	// under SPARE still behind them once its op ran past twice its usual burst. Under RECENT it keeps
	// its lag key: it slept, and has used less than a base slice of CPU since.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task worker{}, waker{};
	morpheus_base_burst_charge(&worker, now - 1 * ms, 0);
	morpheus_base_charge(&worker, ms / 2);
	morpheus_base_sleep(&worker, 1 * kSecond);      // usual burst 0.5 ms
	morpheus_base_burst_charge(&worker, 0, 6 * ms); // preempted 6 ms into its next op; vtime now + 5 ms
	morpheus_base_burst_charge(&waker, now + 5 * ms, 0);
	morpheus_base_charge(&waker, ms / 2);
	morpheus_base_sleep(&waker, 1 * kSecond); // woke with the same vtime, no exec runtime
	EXPECT_EQ(morpheus_base_recent_term(&worker, kBaseSlice), 0u);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &waker, 0, now, kBaseSlice, 100));
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &worker, 0, now, kBaseSlice, 100), now + 5 * ms);
	// Where BURST and SPARE put it behind the waker.
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &waker, 0, now, kBaseSlice, 100) + 5 * ms);
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_SPARE, &waker, 0, now, kBaseSlice, 100));
	// Just short of a base slice of CPU since its sleep, still level.
	worker.exec_ns = kBaseSlice * MORPHEUS_BASE_RECENT_SLICES - 1;
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &worker, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &waker, 0, now, kBaseSlice, 100));
}

TEST(BaseRecent, ATaskThatHasNotSleptForASliceOfCpuGetsTheWholeCappedTerm)
{
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	const morpheus_u64 cap = kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES;
	EXPECT_EQ(morpheus_base_recent_term(nullptr, kBaseSlice), 0u);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, nullptr, now, now, kBaseSlice, 100), now);
	morpheus_base_task t{};
	morpheus_base_burst_charge(&t, now, 1 * ms);
	morpheus_base_sleep(&t, 1 * kSecond);
	morpheus_base_burst_charge(&t, 0, kBaseSlice * MORPHEUS_BASE_RECENT_SLICES); // a whole slice since
	EXPECT_EQ(morpheus_base_recent_term(&t, kBaseSlice), cap);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &t, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 0, now, kBaseSlice, 100));
	morpheus_base_burst_charge(&t, 0, 3 * ms);
	EXPECT_EQ(morpheus_base_recent_term(&t, kBaseSlice), cap);
	t.exec_ns = 100 * kBaseSlice;
	EXPECT_EQ(morpheus_base_recent_term(&t, kBaseSlice), cap);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &t, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &t, 0, now, kBaseSlice, 100));
	// Its next sleep spares it again.
	morpheus_base_sleep(&t, 2 * kSecond);
	morpheus_base_burst_charge(&t, 0, 2 * ms);
	EXPECT_EQ(morpheus_base_recent_term(&t, kBaseSlice), 0u);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_RECENT, kBaseSlice, 100),
		  morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_BURST, kBaseSlice, 100));
}

TEST(BaseRecent, ATaskThatNeverSleptGetsTheTermAsUnderBurst)
{
	// A hog never sleeps: from its first run on it carries BURST's term, however little CPU it has
	// used so far, and goes behind a worker preempted soon after waking (w8_pressure's hogs).
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task hog{}, worker{};
	morpheus_base_burst_charge(&hog, now - 9 * ms, 7 * ms); // vtime now - 2 ms, never slept
	EXPECT_EQ(morpheus_base_recent_term(&hog, kBaseSlice), 7 * ms);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &hog, 0, now, kBaseSlice, 100));
	morpheus_base_burst_charge(&hog, 0, 30 * ms);
	EXPECT_EQ(morpheus_base_recent_term(&hog, kBaseSlice), kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES);
	morpheus_base_burst_charge(&worker, now - 1 * ms, 0);
	morpheus_base_charge(&worker, ms / 2);
	morpheus_base_sleep(&worker, 1 * kSecond);
	morpheus_base_burst_charge(&worker, 0, 6 * ms); // vtime now + 5 ms, below the hog's now + 28 ms
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &worker, 0, now, kBaseSlice, 100));
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &hog, 0, now, kBaseSlice, 100), morpheus_base_kept_key(MORPHEUS_BASE_ORDER_BURST, &hog, 0, now, kBaseSlice, 100));
}

// The ARRIVAL order: RECENT, with a task that slept recently keyed at the slice-lag floor whatever
// its vtime.
TEST(BaseArrival, TasksThatSleptRecentlyAreKeyedByWhenTheyWereQueuedNotByTheCpuTheyUsedBefore)
{
	// Two workers woke: one used 5 ms more CPU before its sleep than the other (its vtime is ahead
	// by that much). Under RECENT the one that used less goes first whenever both wait, even if it
	// was queued later; under ARRIVAL the one queued first goes first.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	const morpheus_u64 lag = morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_ARRIVAL, kBaseSlice, 100);
	morpheus_base_task heavy{}, light{};
	morpheus_base_burst_charge(&heavy, now, 5 * ms);
	morpheus_base_sleep(&heavy, 1 * kSecond); // vtime now + 5 ms
	morpheus_base_burst_charge(&light, now, 0);
	morpheus_base_sleep(&light, 1 * kSecond); // vtime now
	const morpheus_u64 heavy_key = morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &heavy, 0, now, kBaseSlice, 100);
	const morpheus_u64 light_key = morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &light, 0, now + 1 * ms, kBaseSlice, 100);
	EXPECT_EQ(heavy_key, now - lag);
	EXPECT_LT(heavy_key, light_key);
	EXPECT_EQ(light_key, now + 1 * ms - lag);
	// RECENT keys the heavy one by its vtime, behind the light one queued after it.
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &heavy, 0, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &light, 0, now + 1 * ms, kBaseSlice, 100));
	// Preempted inside its op (less than a base slice of CPU since its sleep): still the floor.
	morpheus_base_burst_charge(&heavy, 0, kBaseSlice * MORPHEUS_BASE_RECENT_SLICES - 1);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &heavy, 0, now, kBaseSlice, 100), now - lag);
	EXPECT_EQ(morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_ARRIVAL, kBaseSlice, 100),
		  morpheus_base_vtime_credit(MORPHEUS_BASE_ORDER_RECENT, kBaseSlice, 100));
	EXPECT_TRUE(morpheus_base_keeps_vtime(MORPHEUS_BASE_ORDER_ARRIVAL));
}

TEST(BaseArrival, ATaskThatHasNotSleptRecentlyIsKeyedAsUnderRecentBehindTheSleepers)
{
	// A hog (never slept) and a task past a base slice of CPU since its sleep carry RECENT's whole
	// key, vtime raised to the floor plus the capped term: behind a sleeper queued at the same time.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task hog{}, long_run{}, sleeper{};
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, nullptr, now, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, nullptr, now, now, kBaseSlice, 100));
	morpheus_base_burst_charge(&hog, now - 9 * ms, 7 * ms);
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &hog, 0, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &hog, 0, now, kBaseSlice, 100));
	morpheus_base_burst_charge(&long_run, now, 1 * ms);
	morpheus_base_sleep(&long_run, 1 * kSecond);
	morpheus_base_burst_charge(&long_run, 0, kBaseSlice * MORPHEUS_BASE_RECENT_SLICES);
	EXPECT_FALSE(morpheus_base_slept_recently(&long_run, kBaseSlice));
	EXPECT_EQ(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &long_run, 0, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_RECENT, &long_run, 0, now, kBaseSlice, 100));
	morpheus_base_burst_charge(&sleeper, now + 50 * ms, 0);
	morpheus_base_sleep(&sleeper, 1 * kSecond); // vtime far ahead of vtime_now
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &hog, 0, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &sleeper, 0, now, kBaseSlice, 100));
	EXPECT_GT(morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &long_run, 0, now, kBaseSlice, 100),
		  morpheus_base_kept_key(MORPHEUS_BASE_ORDER_ARRIVAL, &sleeper, 0, now, kBaseSlice, 100));
}

// Wake-up preemption: a waker preempts the runner only when it is ahead by more than the margin, a
// slice lag unless the agent set one.
TEST(BaseWakePreempt, AWakerPreemptsOnlyWhenAheadByMoreThanTheMargin)
{
	const morpheus_u64 now = 100 * kSecond, us = 1000;
	const morpheus_u64 lag = morpheus_base_wake_margin(0, kBaseSlice);
	EXPECT_EQ(lag, kBaseSlice / MORPHEUS_BASE_LAG_DIV);
	EXPECT_EQ(morpheus_base_wake_margin(500 * us, kBaseSlice), 500 * us);
	// Of equal keys, the runner is preempted once it has run past the margin, not before.
	EXPECT_FALSE(morpheus_base_wake_preempts(now, now + lag, lag));
	EXPECT_TRUE(morpheus_base_wake_preempts(now, now + lag + 1, lag));
	EXPECT_FALSE(morpheus_base_wake_preempts(now, now + 500 * us, 500 * us));
	EXPECT_TRUE(morpheus_base_wake_preempts(now, now + 500 * us + 1, 500 * us));
	// A 2 ms run of an equal: preempted under a 500 µs margin, not under the default lag.
	ASSERT_GT(lag, 2000 * us);
	EXPECT_FALSE(morpheus_base_wake_preempts(now, now + 2000 * us, lag));
	EXPECT_TRUE(morpheus_base_wake_preempts(now, now + 2000 * us, 500 * us));
	// A waker behind the runner never preempts it.
	EXPECT_FALSE(morpheus_base_wake_preempts(now + 3000 * us, now + 2000 * us, 500 * us));
	// Keys wrap as vtime does.
	EXPECT_TRUE(morpheus_base_wake_preempts(~0ULL - 10 * us, 500 * us, 500 * us));
	EXPECT_FALSE(morpheus_base_wake_preempts(500 * us, ~0ULL - 10 * us, 500 * us));
}

TEST(BaseKept, EachOrderTakesItsOwnTermAndOnlyTheKeptOrdersKeepAVtime)
{
	// The queue's key and the debug trace both take the term from morpheus_base_exec_term: a term
	// picked for the wrong order shows here.
	const morpheus_u64 now = 100 * kSecond, ms = 1000 * 1000;
	morpheus_base_task t{};
	morpheus_base_burst_charge(&t, now, 1 * ms);
	morpheus_base_sleep(&t, 1 * kSecond); // usual burst 1 ms
	morpheus_base_burst_charge(&t, 0, 3 * ms); // 3 ms since it slept: beyond SPARE's spare, below a slice
	ASSERT_LT(3 * ms, kBaseSlice * MORPHEUS_BASE_RECENT_SLICES);
	EXPECT_EQ(morpheus_base_exec_term(MORPHEUS_BASE_ORDER_BURST, &t, kBaseSlice), morpheus_base_capped_exec(&t, kBaseSlice));
	EXPECT_EQ(morpheus_base_exec_term(MORPHEUS_BASE_ORDER_BURST, &t, kBaseSlice), 3 * ms);
	EXPECT_EQ(morpheus_base_exec_term(MORPHEUS_BASE_ORDER_SPARE, &t, kBaseSlice), morpheus_base_spare_term(&t, kBaseSlice));
	EXPECT_EQ(morpheus_base_exec_term(MORPHEUS_BASE_ORDER_RECENT, &t, kBaseSlice), 0u);
	EXPECT_NE(morpheus_base_exec_term(MORPHEUS_BASE_ORDER_SPARE, &t, kBaseSlice), 3 * ms);
	for (morpheus_u32 order : {(morpheus_u32)MORPHEUS_BASE_ORDER_BURST, (morpheus_u32)MORPHEUS_BASE_ORDER_SPARE,
				   (morpheus_u32)MORPHEUS_BASE_ORDER_RECENT}) {
		EXPECT_TRUE(morpheus_base_keeps_vtime(order)) << order;
		morpheus_u64 floor = morpheus_base_vtime_key(morpheus_base_burst_vtime(&t, 0), now,
							     morpheus_base_vtime_credit(order, kBaseSlice, 100));
		EXPECT_EQ(morpheus_base_kept_key(order, &t, 0, now, kBaseSlice, 100) - floor,
			  morpheus_base_exec_term(order, &t, kBaseSlice))
			<< order;
	}
	for (morpheus_u32 order : {(morpheus_u32)MORPHEUS_BASE_ORDER_CPUTIME, (morpheus_u32)MORPHEUS_BASE_ORDER_LAG,
				   (morpheus_u32)MORPHEUS_BASE_ORDER_DEADLINE}) {
		EXPECT_FALSE(morpheus_base_keeps_vtime(order)) << order;
		EXPECT_EQ(morpheus_base_exec_term(order, &t, kBaseSlice), 0u) << order;
	}
	EXPECT_EQ(morpheus_base_capped_exec(nullptr, kBaseSlice), 0u);
	t.exec_ns = 10 * kBaseSlice;
	EXPECT_EQ(morpheus_base_capped_exec(&t, kBaseSlice), kBaseSlice * MORPHEUS_BASE_EXEC_CAP_SLICES);
}

} // namespace
