// SPDX-License-Identifier: GPL-2.0-only
// Table-driven tests of morpheus_policy.h: every escalation-gate condition blocks on its own and all
// together escalate; boundaries of slice + grace; overflow safety; the hint decision; actions; pressure.
#include "morpheus_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
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

struct HintCase {
	const char *name;
	morpheus_u32 state;
	morpheus_u64 runtime, slice, now, last_hint, interval;
	morpheus_hint_decision expected;
};

TEST(Hint, Decisions)
{
	const morpheus_u32 R = MORPHEUS_WORKER_STATE_RUNNING;
	const morpheus_u64 I = MORPHEUS_DEFAULT_HINT_MIN_INTERVAL_NS;
	const std::vector<HintCase> cases = {
		{"within_slice", R, kSlice, kSlice, 10 * I, 0, I, MORPHEUS_HINT_NONE},
		{"over_slice_first_hint", R, kSlice + 1, kSlice, 10 * I, 0, I, MORPHEUS_HINT_EMIT},
		{"not_running_registered", MORPHEUS_WORKER_STATE_REGISTERED, kMax, kSlice, 10 * I, 0, I, MORPHEUS_HINT_NONE},
		{"not_running_quiescing", MORPHEUS_WORKER_STATE_QUIESCING, kMax, kSlice, 10 * I, 0, I, MORPHEUS_HINT_NONE},
		{"not_running_init", MORPHEUS_WORKER_STATE_INIT, kMax, kSlice, 10 * I, 0, I, MORPHEUS_HINT_NONE},
		{"rate_limited", R, kSlice + 1, kSlice, 10 * I, 10 * I - I + 1, I, MORPHEUS_HINT_RATE_LIMITED},
		{"interval_exactly_elapsed", R, kSlice + 1, kSlice, 10 * I, 9 * I, I, MORPHEUS_HINT_EMIT},
		{"zero_interval", R, kSlice + 1, kSlice, 10 * I, 10 * I, 0, MORPHEUS_HINT_EMIT},
		{"huge_interval", R, kSlice + 1, kSlice, kMax, 1, kMax, MORPHEUS_HINT_RATE_LIMITED},
		{"huge_runtime", R, kMax, kSlice, 10 * I, 0, I, MORPHEUS_HINT_EMIT},
		{"slice_max", R, kMax, kMax, 10 * I, 0, I, MORPHEUS_HINT_NONE},
	};
	for (const HintCase &c : cases) {
		EXPECT_EQ(morpheus_hint_decide(c.state, c.runtime, c.slice, c.now, c.last_hint, c.interval), c.expected)
			<< c.name;
	}
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
		{0, MORPHEUS_PRESSURE_LEVEL_NONE},     {499, MORPHEUS_PRESSURE_LEVEL_NONE},
		{500, MORPHEUS_PRESSURE_LEVEL_LOW},    {1999, MORPHEUS_PRESSURE_LEVEL_LOW},
		{2000, MORPHEUS_PRESSURE_LEVEL_MEDIUM}, {4999, MORPHEUS_PRESSURE_LEVEL_MEDIUM},
		{5000, MORPHEUS_PRESSURE_LEVEL_HIGH},  {10000, MORPHEUS_PRESSURE_LEVEL_HIGH},
		{0xffffffffu, MORPHEUS_PRESSURE_LEVEL_HIGH},
	};
	for (const auto &c : cases)
		EXPECT_EQ(morpheus_pressure_level(c.first), c.second) << c.first;
}

} // namespace
