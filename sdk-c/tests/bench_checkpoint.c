// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * The C inline fast paths in a tight loop beside raw atomic loads, with the method of
 * sdk-rust/benches/plain_loop.rs: each case is a timed loop of N iterations folding its result into
 * an accumulator; the cases of a phase are interleaved round by round and each keeps its best round.
 * `make bench`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "morpheus_inline.h"
#include "sim_region.h"

#define ITERATIONS 20000000ULL
#define ROUNDS 9

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Keeps the compiler from knowing what a pointer points to, like Rust's black_box. */
#define OPAQUE(p) __asm__ volatile("" : "+r"(p))
#define SINK(v) __asm__ volatile("" : : "r"(v) : "memory")

/* One timed round of `body`; keeps the best per-iteration time in `best`. */
#define ROUND(best, body)                                                                               \
	do {                                                                                            \
		uint64_t acc = 0;                                                                       \
		double start = now_ns();                                                                \
		for (uint64_t i = 0; i < ITERATIONS; i++)                                               \
			acc += (uint64_t)(body);                                                        \
		double ns = (now_ns() - start) / (double)ITERATIONS;                                    \
		SINK(acc);                                                                              \
		if (ns < (best))                                                                        \
			(best) = ns;                                                                    \
	} while (0)

static int critical_once(struct morpheus_worker *w)
{
	morpheus_critical_enter(w);
	return morpheus_critical_exit(w);
}

static void report(const char *phase, const char *const names[], const double ns[], int n)
{
	printf("%s:\n", phase);
	for (int i = 0; i < n; i++)
		printf("  %-34s %8.3f ns  %6.2fx\n", names[i], ns[i], ns[i] / ns[0]);
}

int main(void)
{
	uint64_t *cell = calloc(8, sizeof(uint64_t));
	struct morpheus_options opts;
	struct morpheus_worker *registered;
	struct sim_region region;
	struct sim_layout layout = sim_layout_default(1);
	char path[64];

	OPAQUE(cell);
	/* Warm up: let the CPU reach its steady clock before the first measurement. */
	for (double until = now_ns() + 3e8; now_ns() < until;)
		;
	printf("c bench_checkpoint (%llu iterations per round, best of %d interleaved rounds)\n", ITERATIONS, ROUNDS);

	morpheus_options_init(&opts);
	opts.region_path = "";
	if (morpheus_worker_register(&opts, &registered)) {
		fprintf(stderr, "register: %s\n", morpheus_last_error());
		return 1;
	}
	{
		/* A local whose address is never taken stays in a register (see morpheus_inline.h). */
		struct morpheus_worker *const w = registered;
		double best[3] = { 1e30, 1e30, 1e30 };
		static const char *const names[] = { "baseline_relaxed_load", "baseline_acquire_load",
						     "checkpoint_detached" };

		for (int r = 0; r < ROUNDS; r++) {
			ROUND(best[0], __atomic_load_n(cell, __ATOMIC_RELAXED));
			ROUND(best[1], __atomic_load_n(cell, __ATOMIC_ACQUIRE));
			ROUND(best[2], morpheus_checkpoint(w));
		}
		morpheus_worker_unregister(w);
		report("detached phase, ratio to the relaxed load", names, best, 3);
	}

	snprintf(path, sizeof(path), "/dev/shm/morpheus-cbench-%d", (int)getpid());
	if (sim_region_create(&region, path, &layout)) {
		perror(path);
		return 1;
	}
	opts.region_path = path;
	opts.direct_slot = 0;
	if (morpheus_worker_register(&opts, &registered)) {
		fprintf(stderr, "register: %s\n", morpheus_last_error());
		return 1;
	}
	{
		struct morpheus_worker *const w = registered;
		double best[4] = { 1e30, 1e30, 1e30, 1e30 };
		static const char *const names[] = { "baseline_acquire_load", "checkpoint_attached_idle",
						     "critical_enter_exit_attached", "checkpoint_attached_pending" };

		for (int r = 0; r < ROUNDS; r++) {
			ROUND(best[0], __atomic_load_n(cell, __ATOMIC_ACQUIRE));
			ROUND(best[1], morpheus_checkpoint(w));
			ROUND(best[2], critical_once(w) + 1);
			ROUND(best[3], (sim_request_yield(&region, 0), morpheus_checkpoint(w)));
		}
		morpheus_worker_unregister(w);
		report("attached phase, ratio to the acquire load", names, best, 4);
	}
	sim_region_close(&region, 1);
	free(cell);
	return 0;
}
