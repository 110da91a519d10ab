// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * The C SDK's inline fast paths (morpheus_inline.h), each wrapped in one out-of-line function so that
 * tests/arm64_orders.py finds its arm64 machine code by symbol: `make arm64-orders TARGET=...` compiles
 * this file with the cross gcc and checks the orders of spec/SCB.md §3.1 in the disassembly.
 *
 * With -DORDERS_NEGATIVE_CONTROL the same functions do the same accesses with every order relaxed (and
 * no fence): the checker must reject that object, which shows in every run that it can fail.
 */
#include "morpheus_inline.h"

bool orders_checkpoint(struct morpheus_worker *w);
void orders_critical_enter(struct morpheus_worker *w);
int orders_critical_exit(struct morpheus_worker *w);

#ifndef ORDERS_NEGATIVE_CONTROL

bool orders_checkpoint(struct morpheus_worker *w)
{
	return morpheus_checkpoint(w);
}

void orders_critical_enter(struct morpheus_worker *w)
{
	morpheus_critical_enter(w);
}

int orders_critical_exit(struct morpheus_worker *w)
{
	return morpheus_critical_exit(w);
}

#else

bool orders_checkpoint(struct morpheus_worker *w)
{
	uint64_t seq = __atomic_load_n(w->preempt_seq, __ATOMIC_RELAXED);

	if (MORPHEUS_LIKELY(seq == w->cached_ack))
		return false;
	return morpheus_checkpoint_slow(w, seq);
}

void orders_critical_enter(struct morpheus_worker *w)
{
	if (w->critical_depth++ == 0 && w->in_critical)
		__atomic_store_n(w->in_critical, 1u, __ATOMIC_RELAXED);
}

int orders_critical_exit(struct morpheus_worker *w)
{
	if (--w->critical_depth == 0 && w->in_critical)
		__atomic_store_n(w->in_critical, 0u, __ATOMIC_RELAXED);
	return 0;
}

#endif
