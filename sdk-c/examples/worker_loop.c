// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * A pthread worker loop with checkpoints and a critical section.
 *
 * Build against an installed libmorpheus:
 *   cc -O2 worker_loop.c $(pkg-config --cflags --libs morpheus) -pthread -o worker_loop
 * Run (the region comes from MORPHEUS_REGION, the pinned map or the sim file; detached without one):
 *   ./worker_loop [--slot N] [--yields K] [--seconds S]
 * --slot registers slot N directly (no agent; for harnesses that play the scheduler). The loop ends
 * after K yields (default 1) or S seconds (default 10).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <morpheus_inline.h>

struct args {
	int slot;
	unsigned long yields;
	double seconds;
	int status;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Stand-in for a unit of real work. */
static uint64_t work(uint64_t x)
{
	for (int i = 0; i < 1000; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

static void *worker_main(void *arg)
{
	struct args *a = (struct args *)arg;
	struct morpheus_options opts;
	struct morpheus_worker *registered;
	unsigned long yields = 0, iterations = 0;
	uint64_t acc = 1;
	double deadline;
	int err;

	morpheus_options_init(&opts);
	opts.direct_slot = a->slot;
	err = morpheus_worker_register(&opts, &registered);
	if (err) {
		fprintf(stderr, "worker_loop: register: %s\n", morpheus_last_error());
		a->status = 1;
		return NULL;
	}
	/* A copy whose address is never taken stays in a register across checkpoints. */
	struct morpheus_worker *const w = registered;

	printf("worker_loop: registered, slot %lld (%s)\n", (long long)morpheus_worker_slot(w),
	       morpheus_worker_status(w) == 0 ? "attached" : "detached");
	fflush(stdout);

	deadline = now_s() + a->seconds;
	while (yields < a->yields && now_s() < deadline) {
		acc = work(acc);
		iterations++;

		/* Buffers lent to a device, a lock held: the scheduler must not interrupt this. */
		if (iterations % 64 == 0) {
			morpheus_critical_enter(w);
			acc = work(acc);
			morpheus_critical_exit(w);
		}

		if (morpheus_checkpoint(w)) {
			yields++;
			printf("worker_loop: checkpoint yielded, acknowledged preempt_seq %llu\n",
			       (unsigned long long)w->cached_ack);
			fflush(stdout);
			sched_yield(); /* the yield the scheduler asked for */
		}
	}
	printf("worker_loop: %lu iterations, %lu yields (%llu for preempt requests), checksum %llx\n", iterations,
	       yields, (unsigned long long)morpheus_yield_count(w, MORPHEUS_YIELD_REASON_PREEMPT_REQUEST),
	       (unsigned long long)(acc & 0xff));
	err = morpheus_worker_unregister(w);
	if (err) {
		fprintf(stderr, "worker_loop: unregister: %s\n", morpheus_last_error());
		a->status = 1;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct args a = { .slot = -1, .yields = 1, .seconds = 10.0, .status = 0 };
	pthread_t thread;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--slot"))
			a.slot = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--yields"))
			a.yields = strtoul(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seconds"))
			a.seconds = atof(argv[i + 1]);
		else {
			fprintf(stderr, "usage: %s [--slot N] [--yields K] [--seconds S]\n", argv[0]);
			return 2;
		}
	}
	if (pthread_create(&thread, NULL, worker_main, &a) != 0) {
		perror("pthread_create");
		return 1;
	}
	pthread_join(thread, NULL);
	return a.status;
}
