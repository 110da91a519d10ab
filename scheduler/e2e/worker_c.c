// SPDX-License-Identifier: GPL-2.0-only
/*
 * The C SDK's test worker for the real-kernel test (e2e/guest.sh): the same roles and the same report
 * lines as worker.rs, but every worker is a libmorpheus worker (morpheus.h, the inline fast paths),
 * registered through the agent's socket. Linked statically against libmorpheus.a, so the guest needs
 * no runtime.
 *
 * usage: morpheus-e2e-worker-c [--ready FILE] (--seconds S | --until FILE) ROLE...
 * roles: cooperative   morpheus_checkpoint between pieces of work, sched_yield when it says so
 *        spin          never checkpoints, escapable
 *        critical      never checkpoints, escapable, inside a critical section throughout
 *        unescapable   never checkpoints, registered with escapable = 0
 * Each role prints: role=R sdk=c slot=N preempt_seq_start=A preempt_seq=B last_ack_seq=C
 *                   escalations=E yields=Y
 * --ready FILE: each role, once registered, writes `pid=P tid=T` (its process and thread) to FILE.
 * --until FILE: the roles run until FILE exists, or its directory is gone (the test that owned it has
 *               ended without making it), instead of for a time: the test decides when (as worker.rs).
 */
#define _GNU_SOURCE
#include <morpheus_inline.h>

#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum role { COOPERATIVE, SPIN, CRITICAL, UNESCAPABLE };
static const char *const ROLE_NAMES[] = { "cooperative", "spin", "critical", "unescapable" };

struct job {
	enum role role;
	double seconds;
	const char *ready;     /* --ready FILE, or NULL */
	const char *until;     /* --until FILE, or NULL: then `seconds` bounds the run */
	const char *until_dir; /* the directory `until` is made in */
	pthread_t thread;
	char report[512];
	int failed;
};

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Work the optimiser cannot remove. */
static __attribute__((noinline)) uint64_t burn(uint64_t iterations)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (uint64_t i = 0; i < iterations; i++)
		x = ((x << 7) | (x >> 57)) ^ (i * 0x2545f4914f6cdd1dull);
	__asm__ volatile("" : : "r"(x) : "memory");
	return x;
}

/* The worker's SCB, found from the SDK's own pointer to its preempt_seq (read-only: we only look). */
static const struct morpheus_scb *scb_of(const struct morpheus_worker *w)
{
	return (const struct morpheus_scb *)((const char *)w->preempt_seq - offsetof(struct morpheus_scb, preempt_seq));
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

/* `pid=P tid=T` of the calling thread into PATH, whole or not at all (written aside, then renamed). */
static int write_ready(const char *path)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
		errno = ENAMETOOLONG;
		return -1;
	}
	FILE *f = fopen(tmp, "w");
	if (f == NULL)
		return -1;
	int bad = fprintf(f, "pid=%d tid=%ld\n", (int)getpid(), (long)syscall(SYS_gettid)) < 0;
	bad |= fclose(f) != 0;
	return bad ? -1 : rename(tmp, path);
}

static void *run_role(void *arg)
{
	struct job *job = arg;
	struct morpheus_options opts;
	struct morpheus_worker *w = NULL;

	morpheus_options_init(&opts);
	opts.escapable = job->role == UNESCAPABLE ? 0 : 1;
	/* The critical role opens its section before registering: the depth is the thread's, so the SCB
	 * says in_critical from the moment the worker is RUNNING (SCB.md §4, §5.3). */
	if (job->role == CRITICAL)
		morpheus_critical_enter(morpheus_thread());
	int32_t rc = morpheus_worker_register(&opts, &w);
	if (rc != 0 || w == NULL || morpheus_worker_slot(w) < 0) {
		snprintf(job->report, sizeof job->report, "role=%s sdk=c error=registration rc=%d: %s",
			 ROLE_NAMES[job->role], rc, morpheus_last_error() ? morpheus_last_error() : "detached");
		job->failed = 1;
		return NULL;
	}
	if (job->ready != NULL && write_ready(job->ready) != 0) {
		snprintf(job->report, sizeof job->report, "role=%s sdk=c error=--ready %s: %s", ROLE_NAMES[job->role],
			 job->ready, strerror(errno));
		job->failed = 1;
		morpheus_worker_unregister(w);
		return NULL;
	}
	const struct morpheus_scb *scb = scb_of(w);
	uint64_t seq0 = __atomic_load_n(&scb->preempt_seq, __ATOMIC_ACQUIRE);
	double deadline = now() + job->seconds;
	while (job->until != NULL ? !exists(job->until) && exists(job->until_dir) : now() < deadline) {
		burn(20000);
		if (job->role == COOPERATIVE && morpheus_checkpoint(w))
			sched_yield();
	}
	/* The report is taken before the section closes: once it is closed the worker, still ignoring
	 * its requests, may rightly be escalated, and that must not count against the section. */
	snprintf(job->report, sizeof job->report,
		 "role=%s sdk=c slot=%lld preempt_seq_start=%llu preempt_seq=%llu last_ack_seq=%llu escalations=%u yields=%llu",
		 ROLE_NAMES[job->role], (long long)morpheus_worker_slot(w), (unsigned long long)seq0,
		 (unsigned long long)__atomic_load_n(&scb->preempt_seq, __ATOMIC_ACQUIRE),
		 (unsigned long long)__atomic_load_n(&scb->last_ack_seq, __ATOMIC_ACQUIRE),
		 (unsigned)__atomic_load_n(&scb->escalations, __ATOMIC_RELAXED),
		 (unsigned long long)morpheus_yield_count(w, MORPHEUS_YIELD_REASON_PREEMPT_REQUEST));
	if (job->role == CRITICAL)
		morpheus_critical_exit(w);
	morpheus_worker_unregister(w);
	return NULL;
}

static int usage(const char *why)
{
	fprintf(stderr, "morpheus-e2e-worker-c: %s\nusage: morpheus-e2e-worker-c [--ready FILE] (--seconds S | --until FILE) ROLE...\n",
		why);
	return 2;
}

int main(int argc, char **argv)
{
	double seconds = 0;
	const char *ready = NULL, *until = NULL;
	int first = 1;
	for (; first + 1 < argc && strncmp(argv[first], "--", 2) == 0; first += 2) {
		if (strcmp(argv[first], "--seconds") == 0) {
			char *end;
			seconds = strtod(argv[first + 1], &end);
			if (*end != '\0' || seconds <= 0)
				return usage("--seconds needs a positive number");
		} else if (strcmp(argv[first], "--ready") == 0) {
			ready = argv[first + 1];
		} else if (strcmp(argv[first], "--until") == 0) {
			until = argv[first + 1];
		} else {
			return usage("unknown option");
		}
	}
	if ((seconds > 0) == (until != NULL))
		return usage("needs one of --seconds S and --until FILE");
	int count = argc - first;
	if (count < 1)
		return usage("needs at least one role");
	/* dirname may modify its argument: it gets a copy, kept for the whole run. */
	char *until_dir = NULL;
	if (until != NULL) {
		char *copy = strdup(until);
		if (copy == NULL)
			return 1;
		until_dir = dirname(copy);
	}
	struct job *jobs = calloc((size_t)count, sizeof *jobs);
	if (jobs == NULL)
		return 1;
	for (int i = 0; i < count; i++) {
		int found = -1;
		for (int r = 0; r < 4; r++)
			if (strcmp(argv[first + i], ROLE_NAMES[r]) == 0)
				found = r;
		if (found < 0)
			return usage("unknown role (cooperative, spin, critical, unescapable)");
		jobs[i].role = (enum role)found;
		jobs[i].seconds = seconds;
		jobs[i].ready = ready;
		jobs[i].until = until;
		jobs[i].until_dir = until_dir;
	}
	for (int i = 0; i < count; i++)
		if ((errno = pthread_create(&jobs[i].thread, NULL, run_role, &jobs[i])) != 0) {
			perror("pthread_create");
			return 1;
		}
	int failed = 0;
	for (int i = 0; i < count; i++) {
		pthread_join(jobs[i].thread, NULL);
		printf("%s\n", jobs[i].report);
		failed |= jobs[i].failed;
	}
	free(jobs);
	return failed;
}
