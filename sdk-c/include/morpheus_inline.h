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

/*
 * spec/SCB.md §0.1 (error_code UNSUPPORTED_PLATFORM): the region is shared with other processes through
 * single lock-free little-endian accesses. A big-endian host would misread every field, and a lock-based
 * 64-bit atomic (libatomic's fallback) is not address-free, so it silently breaks across processes.
 */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "MORPHEUS_E_UNSUPPORTED_PLATFORM: the Morpheus ABI needs a little-endian host"
#endif
#if !defined(__GCC_ATOMIC_LLONG_LOCK_FREE) || __GCC_ATOMIC_LLONG_LOCK_FREE != 2 || __GCC_ATOMIC_INT_LOCK_FREE != 2
#error "MORPHEUS_E_UNSUPPORTED_PLATFORM: the Morpheus ABI needs always-lock-free 32- and 64-bit atomics"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The functions below read struct morpheus_worker's fields directly, as laid out by layout version 1.
 * A morpheus.h with another layout fails here at compile time; a program run against a libmorpheus with
 * another layout is reported to the library when it loads (morpheus_worker_register then fails with
 * -MORPHEUS_E_UNSUPPORTED_PLATFORM). The versioning rule is in sdk-c/README.md.
 */
#if MORPHEUS_WORKER_LAYOUT_VERSION != 1
#error "morpheus_inline.h reads struct morpheus_worker layout 1; this morpheus.h has another layout"
#endif

__attribute__((constructor, used)) static void morpheus__report_worker_layout(void)
{
	(void)morpheus_worker_layout_check(MORPHEUS_WORKER_LAYOUT_VERSION);
}

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

/*
 * Enter a critical section; only the outermost enter publishes in_critical: a relaxed store of 1, then a
 * seq_cst fence (spec/SCB.md §3.1; the same two operations as the Rust core's protocol::critical_enter).
 * The fence keeps the section's later loads after the store on arm64, which a seq_cst store alone does
 * not; it pairs with the scheduler's full barrier before its load of in_critical.
 */
static inline void morpheus_critical_enter(struct morpheus_worker *w)
{
	if (w->critical_depth++ != 0 || !w->in_critical)
		return;
	if (MORPHEUS_LIKELY(morpheus__generation_ok(w))) {
		__atomic_store_n(w->in_critical, 1u, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	} else {
		morpheus_worker_lost(w);
	}
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
