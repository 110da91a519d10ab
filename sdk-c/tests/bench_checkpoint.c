// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * The C inline fast paths beside raw atomic loads, with the method of sdk-rust/benches/plain_loop.rs
 * (best of 7 timed loops of N iterations, result folded into an accumulator). `make bench`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "morpheus_inline.h"
#include "sim_region.h"

#define ITERATIONS 50000000ULL
#define RUNS 7

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Keeps the compiler from knowing what a pointer points to, like Rust's black_box. */
#define OPAQUE(p) __asm__ volatile("" : "+r"(p))
#define SINK(v) __asm__ volatile("" : : "r"(v) : "memory")

#define MEASURE(result, body)                                                                                   \
	do {                                                                                                    \
		double best = 1e30;                                                                             \
		for (int run = 0; run < RUNS; run++) {                                                          \
			uint64_t acc = 0;                                                                       \
			double start = now_ns();                                                                \
			for (uint64_t i = 0; i < ITERATIONS; i++)                                               \
				acc += (uint64_t)(body);                                                        \
			double ns = (now_ns() - start) / (double)ITERATIONS;                                    \
			SINK(acc);                                                                              \
			if (ns < best)                                                                          \
				best = ns;                                                                      \
		}                                                                                               \
		(result) = best;                                                                                \
	} while (0)

static int critical_once(struct morpheus_worker *w)
{
	morpheus_critical_enter(w);
	return morpheus_critical_exit(w);
}

int main(void)
{
	uint64_t *cell = calloc(8, sizeof(uint64_t));
	double acquire, relaxed, detached, attached, pending, critical;
	struct morpheus_options opts;
	struct morpheus_worker *registered;
	struct sim_region region;
	struct sim_layout layout = sim_layout_default(1);
	char path[64];

	OPAQUE(cell);
	/* Warm up: let the CPU reach its steady clock before the first measurement. */
	for (double until = now_ns() + 3e8; now_ns() < until;)
		;
	MEASURE(acquire, __atomic_load_n(cell, __ATOMIC_ACQUIRE));
	MEASURE(relaxed, __atomic_load_n(cell, __ATOMIC_RELAXED));

	morpheus_options_init(&opts);
	opts.region_path = "";
	if (morpheus_worker_register(&opts, &registered)) {
		fprintf(stderr, "register: %s\n", morpheus_last_error());
		return 1;
	}
	{
		/* A local whose address is never taken stays in a register (see morpheus_inline.h). */
		struct morpheus_worker *const w = registered;

		MEASURE(detached, morpheus_checkpoint(w));
		morpheus_worker_unregister(w);
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

		MEASURE(attached, morpheus_checkpoint(w));
		MEASURE(critical, critical_once(w) + 1);
		MEASURE(pending, (sim_request_yield(&region, 0), morpheus_checkpoint(w)));
		morpheus_worker_unregister(w);
	}
	sim_region_close(&region, 1);

	printf("c bench_checkpoint (%llu iterations, best of %d), ns/op and ratio to the acquire load:\n",
	       ITERATIONS, RUNS);
	struct {
		const char *name;
		double ns;
	} rows[] = {
		{ "baseline_acquire_load", acquire },	  { "baseline_relaxed_load", relaxed },
		{ "checkpoint_detached", detached },	  { "checkpoint_attached_idle", attached },
		{ "checkpoint_attached_pending", pending }, { "critical_enter_exit_attached", critical },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		printf("  %-30s %8.3f ns  %6.2fx\n", rows[i].name, rows[i].ns, rows[i].ns / acquire);
	printf("  detached / relaxed load: %.2fx\n", detached / relaxed);
	return 0;
}
