/* SPDX-License-Identifier: Apache-2.0 OR MIT */
/*
 * The fast paths of the Morpheus C SDK, inlined into the caller (the liburing way): a checkpoint
 * with nothing pending is one acquire load and one comparison, a nested critical enter or exit is an
 * increment or decrement. They operate on `struct morpheus_worker`, whose layout comes from the Rust
 * core through cbindgen (morpheus.h); the library is called only on the slow paths.
 *
 * Every function takes the calling thread's worker (from morpheus_worker_register or
 * morpheus_worker_current); a worker must never be used from another thread.
 *
 * Keep the handle in a local whose address is never taken, e.g.
 *     struct morpheus_worker *const w = morpheus_worker_current();
 * The checkpoint's acquire load forbids the compiler to keep a variable whose address escaped (such as
 * the one passed to morpheus_worker_register) in a register: it would reload it on every checkpoint.
 */
#ifndef MORPHEUS_INLINE_H
#define MORPHEUS_INLINE_H

#include "morpheus.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MORPHEUS_LIKELY(x) __builtin_expect(!!(x), 1)
#define MORPHEUS_UNLIKELY(x) __builtin_expect(!!(x), 0)

/*
 * The checkpoint. Returns true when the scheduler asked this worker to yield: the request is already
 * acknowledged, and the caller must yield now (return to its loop, sched_yield(), ...). Never yields
 * inside a critical section or when detached.
 */
static inline bool morpheus_checkpoint(struct morpheus_worker *w)
{
	uint64_t seq = __atomic_load_n(w->preempt_seq, __ATOMIC_ACQUIRE);

	if (MORPHEUS_LIKELY(seq == w->cached_ack))
		return false;
	return morpheus_checkpoint_slow(w, seq);
}

/* Whether the region is still the one the worker attached to (the library detaches it otherwise). */
static inline bool morpheus__generation_ok(const struct morpheus_worker *w)
{
	return __atomic_load_n(w->generation, __ATOMIC_ACQUIRE) == w->attached_generation;
}

/* Enter a critical section; only the outermost enter publishes in_critical (seq_cst). */
static inline void morpheus_critical_enter(struct morpheus_worker *w)
{
	if (w->critical_depth++ != 0 || !w->in_critical)
		return;
	if (MORPHEUS_LIKELY(morpheus__generation_ok(w)))
		__atomic_store_n(w->in_critical, 1u, __ATOMIC_SEQ_CST);
	else
		morpheus_worker_lost(w);
}

/*
 * Exit a critical section; only the outermost exit clears in_critical (release). Returns 0, or
 * -MORPHEUS_E_NOT_IN_CRITICAL (writing nothing) without a matching enter.
 */
static inline int morpheus_critical_exit(struct morpheus_worker *w)
{
	if (MORPHEUS_UNLIKELY(w->critical_depth == 0))
		return morpheus_critical_exit_call(w); /* reports the error */
	if (--w->critical_depth != 0 || !w->in_critical)
		return 0;
	if (MORPHEUS_LIKELY(morpheus__generation_ok(w)))
		__atomic_store_n(w->in_critical, 0u, __ATOMIC_RELEASE);
	else
		morpheus_worker_lost(w);
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* MORPHEUS_INLINE_H */
