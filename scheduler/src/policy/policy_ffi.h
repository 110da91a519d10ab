/* SPDX-License-Identifier: GPL-2.0-only */
/* Extern entry points for the inline policy (policy.c), for callers that cannot inline C: the agent. */
#ifndef MORPHEUS_POLICY_FFI_H
#define MORPHEUS_POLICY_FFI_H

#include "morpheus_policy.h"

enum morpheus_gate_verdict morpheus_ffi_gate(const struct morpheus_gate_input *in);
enum morpheus_hint_decision morpheus_ffi_hint_decide(morpheus_u32 worker_state, morpheus_u64 runtime_ns,
						     morpheus_u64 slice_ns, morpheus_u64 now_ns,
						     morpheus_u64 last_hint_ns, morpheus_u64 min_interval_ns,
						     morpheus_u64 preempt_seq, morpheus_u64 last_ack_seq);
int morpheus_ffi_hint_dropped(enum morpheus_hint_decision hint);
int morpheus_ffi_gate_due(int episode_open, enum morpheus_hint_decision hint, morpheus_u64 runtime_ns,
			  morpheus_u64 slice_ns);
void morpheus_ffi_gate_load(const struct morpheus_gate_config *cfg, const struct morpheus_scb *scb,
			    morpheus_u64 runtime_ns, struct morpheus_gate_input *in);
enum morpheus_escalation_step morpheus_ffi_escalation_decide(const struct morpheus_escalation *e,
							     const struct morpheus_gate_input *in,
							     enum morpheus_gate_verdict verdict, morpheus_u64 now_ns,
							     morpheus_u64 throttle_max_ns);
void morpheus_ffi_escalation_commit(struct morpheus_escalation *e, enum morpheus_escalation_step step,
				    const struct morpheus_gate_input *in, morpheus_u64 now_ns);
morpheus_u32 morpheus_ffi_step_action(enum morpheus_escalation_step step);
int morpheus_ffi_step_takes_effect(enum morpheus_escalation_step step, int demotion_stands);
int morpheus_ffi_effect_may_hold(const struct morpheus_scb *scb);
morpheus_u32 morpheus_ffi_escalation_action(morpheus_u32 policy, int repeated);
morpheus_u32 morpheus_ffi_pressure_level(morpheus_u32 cpu_some_avg10_centi);
enum morpheus_yield_point morpheus_ffi_yield_point(morpheus_u64 seen_ack_seq, morpheus_u64 last_ack_seq,
						  morpheus_u32 worker_state, int slept);
int morpheus_ffi_verdict_count(struct morpheus_verdict_tally *t, int may_act, morpheus_u64 runtime_ns,
			       morpheus_u64 slice_ns, morpheus_u64 preempt_seq, enum morpheus_gate_verdict verdict);

#endif /* MORPHEUS_POLICY_FFI_H */
