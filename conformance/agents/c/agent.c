// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * Conformance agent for sdk-c (libmorpheus): speaks spec/CONFORMANCE.md's protocol on stdin/stdout and
 * drives the public C API (morpheus.h, morpheus_inline.h) as a C application would. Every request
 * runs on the main thread, which is the worker thread. The C SDK has only the synchronous checkpoint; it
 * offers the explicit yield (morpheus_record_explicit_yield) and the mode clock tests set
 * (morpheus_testing_set_mode_clock), so the optional ops `explicit_yield` and `mode_clock` are its.
 *
 * libmorpheus attaches and registers in one call (morpheus_worker_register). `attach` validates the
 * region with morpheus_region_check (the header checks of SCB.md §1.3, writing nothing) and remembers
 * the path; `register` then maps it again and registers the slot asked for.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "morpheus.h"
#include "morpheus_inline.h"

#include "../common/agent_json.h"

static char region_path[4096];   /* the path `attach` accepted ("" = detached) */
static struct morpheus_worker *worker;

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void fail(long long id, int rc)
{
	const char *name = morpheus_error_code_name((morpheus_u32)-rc);
	reply_error(id, name ? name : "UNKNOWN", morpheus_last_error());
}

static void op_attach(long long id, const char *line)
{
	char path[sizeof(region_path)];
	int discover = json_is_null(line, "path");

	if (!discover && json_str(line, "path", path, sizeof(path))) {
		reply_error(id, "BAD_REQUEST", "path must be a string");
		return;
	}
	int rc = morpheus_region_check(discover ? NULL : path);
	if (rc < 0) { /* a refused attach changes nothing (CONFORMANCE.md §2.3): the earlier path stays */
		fail(id, rc);
		return;
	}
	if (rc == 1) { /* "" or nothing discovered: detached mode */
		region_path[0] = '\0';
		printf("{\"id\":%lld,\"ok\":true,\"attached\":false}\n", id);
		return;
	}
	if (discover) {
		/* The path discovery took (SCB.md §1.2), so that `register` maps the region that was checked. */
		const char *found = getenv(MORPHEUS_ENV_REGION);
		if (!found)
			found = access(MORPHEUS_PINNED_REGION_PATH, F_OK) == 0 ? MORPHEUS_PINNED_REGION_PATH
									  : MORPHEUS_SIM_REGION_PATH;
		snprintf(region_path, sizeof(region_path), "%s", found);
	} else {
		snprintf(region_path, sizeof(region_path), "%s", path);
	}
	printf("{\"id\":%lld,\"ok\":true,\"attached\":true}\n", id);
}

/* register: direct registration of `slot` on the attached region; register_agent (slot < 0): through
 * the agent by discovery (SCB.md §1.2, §4.1), the defaults of morpheus_options_init. */
static void op_register(long long id, const char *line, bool via_agent)
{
	long long slot = -1;
	struct morpheus_options opts;
	struct morpheus_worker *w = NULL;

	if (!via_agent && (json_i64(line, "slot", &slot) || slot < 0 || slot > INT32_MAX)) {
		reply_error(id, "BAD_REQUEST", "slot must be a non-negative integer");
		return;
	}
	morpheus_options_init(&opts);
	if (!via_agent) {
		opts.region_path = region_path; /* "" (never attached or refused): a detached worker */
		opts.direct_slot = (int32_t)slot;
	}
	/* Optional: what the registration request asks for (SCB.md §4: written before REGISTERED). */
	bool escapable;
	long long priority;
	if (!json_is_null(line, "escapable") && !json_bool(line, "escapable", &escapable))
		opts.escapable = escapable ? 1 : 0;
	if (!json_is_null(line, "priority") && !json_i64(line, "priority", &priority)) {
		if (priority < INT32_MIN || priority > INT32_MAX) {
			reply_error(id, "BAD_REQUEST", "priority out of int32 range");
			return;
		}
		opts.priority = (int32_t)priority;
	}
	int rc = morpheus_worker_register(&opts, &w);
	if (rc) {
		fail(id, rc);
		return;
	}
	worker = w;
	long long got = morpheus_worker_slot(w);
	printf("{\"id\":%lld,\"ok\":true,\"tid\":%ld,\"attached\":%s,\"slot\":", id, (long)syscall(SYS_gettid),
	       got >= 0 ? "true" : "false");
	if (got >= 0)
		printf("%lld}\n", got);
	else
		printf("null}\n");
}

/* 1 yielded, 0 not. A lost worker's checkpoint is a plain no-yield, never an error (SCB.md §6). */
static int checkpoint(void)
{
	return morpheus_checkpoint(worker) ? 1 : 0;
}

static int need_worker(long long id)
{
	if (!worker) {
		reply_error(id, morpheus_error_code_name(MORPHEUS_E_NOT_REGISTERED), "no worker on this thread");
		return -1;
	}
	return 0;
}

static void handle(long long id, const char *op, const char *line)
{
	if (!strcmp(op, "attach")) {
		op_attach(id, line);
	} else if (!strcmp(op, "register")) {
		op_register(id, line, false);
	} else if (!strcmp(op, "register_agent")) {
		op_register(id, line, true);
	} else if (!strcmp(op, "checkpoint")) {
		char mode[16];
		if (json_str(line, "mode", mode, sizeof(mode)) || strcmp(mode, "sync")) {
			reply_error(id, "UNSUPPORTED", "the C SDK has only the sync checkpoint");
		} else if (!need_worker(id)) {
			int rc = checkpoint();
			if (rc < 0)
				fail(id, rc);
			else
				printf("{\"id\":%lld,\"ok\":true,\"yielded\":%s}\n", id, rc ? "true" : "false");
		}
	} else if (!strcmp(op, "checkpoint_loop")) {
		long long duration;
		if (json_i64(line, "duration_ms", &duration)) {
			reply_error(id, "BAD_REQUEST", "duration_ms must be an integer");
		} else if (!need_worker(id)) {
			long long end = now_ms() + duration, iterations = 0, yields = 0;
			while (now_ms() < end) {
				for (int i = 0; i < 64; i++) {
					iterations++;
					yields += morpheus_checkpoint(worker);
				}
			}
			printf("{\"id\":%lld,\"ok\":true,\"iterations\":%lld,\"yields\":%lld}\n", id, iterations, yields);
		}
	} else if (!strcmp(op, "critical_enter")) {
		/* The depth is the thread's, worker or not (SCB.md §5.3). */
		struct morpheus_worker *self = morpheus_thread();
		morpheus_critical_enter(self);
		printf("{\"id\":%lld,\"ok\":true,\"depth\":%u}\n", id, (unsigned)self->critical_depth);
	} else if (!strcmp(op, "critical_exit")) {
		struct morpheus_worker *self = morpheus_thread();
		int rc = morpheus_critical_exit(self);
		if (rc)
			fail(id, rc);
		else
			printf("{\"id\":%lld,\"ok\":true,\"depth\":%u}\n", id, (unsigned)self->critical_depth);
	} else if (!strcmp(op, "set_escapable")) {
		bool value;
		if (json_bool(line, "value", &value)) {
			reply_error(id, "BAD_REQUEST", "value must be a boolean");
		} else if (!need_worker(id)) {
			int rc = morpheus_set_escapable(worker, value);
			if (rc)
				fail(id, rc);
			else
				printf("{\"id\":%lld,\"ok\":true}\n", id);
		}
	} else if (!strcmp(op, "set_priority")) {
		long long value;
		if (json_i64(line, "value", &value)) {
			reply_error(id, "BAD_REQUEST", "value must be an integer");
		} else if (!need_worker(id)) {
			int rc = morpheus_set_priority(worker, (int32_t)value);
			if (rc)
				fail(id, rc);
			else
				printf("{\"id\":%lld,\"ok\":true}\n", id);
		}
	} else if (!strcmp(op, "explicit_yield")) {
		/* The application yielded on its own (SCB.md §5.8); a detached or lost worker writes nothing. */
		if (!need_worker(id)) {
			int rc = morpheus_record_explicit_yield(worker);
			if (rc)
				fail(id, rc);
			else
				printf("{\"id\":%lld,\"ok\":true}\n", id);
		}
	} else if (!strcmp(op, "mode_clock")) {
		/* The thread's mode clock (SCB.md §5.4): every op of this agent runs on this thread. */
		long long ns;
		if (json_i64(line, "ns", &ns) || ns < 0) {
			reply_error(id, "BAD_REQUEST", "ns must be an integer >= 0");
		} else {
			morpheus_testing_set_mode_clock((int64_t)ns);
			printf("{\"id\":%lld,\"ok\":true}\n", id);
		}
	} else if (!strcmp(op, "state")) {
		if (!worker) {
			printf("{\"id\":%lld,\"ok\":true,\"attached\":%s,\"registered\":false,\"depth\":%u}\n", id,
			       region_path[0] ? "true" : "false", (unsigned)morpheus_thread()->critical_depth);
			return;
		}
		int32_t priority = 0;
		int escapable = morpheus_escapable(worker);
		int rc = escapable < 0 ? escapable : morpheus_priority(worker, &priority);
		if (rc < 0) {
			fail(id, rc);
			return;
		}
		long long slot = morpheus_worker_slot(worker);
		unsigned long long yields = 0;
		for (morpheus_u32 r = 0; morpheus_yield_reason_name(r); r++)
			yields += morpheus_yield_count(worker, r);
		int mode = morpheus_runtime_mode(worker);
		const char *mode_name = mode >= 0 ? morpheus_runtime_mode_name((morpheus_u32)mode) : NULL;
		printf("{\"id\":%lld,\"ok\":true,\"attached\":%s,\"registered\":true,\"depth\":%u,\"cached_ack\":%llu,"
		       "\"yields\":%llu,\"mode\":",
		       id, slot >= 0 ? "true" : "false", (unsigned)worker->critical_depth,
		       (unsigned long long)worker->cached_ack, yields);
		json_print_str(mode_name ? mode_name : "UNKNOWN");
		printf(",\"escapable\":%s,\"priority\":%d", escapable ? "true" : "false", (int)priority);
		if (slot >= 0)
			printf(",\"slot\":%lld}\n", slot);
		else
			printf(",\"slot\":null}\n");
	} else if (!strcmp(op, "status")) {
		if (!need_worker(id)) {
			int rc = morpheus_worker_status(worker);
			if (rc == -(int)MORPHEUS_E_DETACHED || rc == 0)
				printf("{\"id\":%lld,\"ok\":true,\"attached\":%s}\n", id, rc ? "false" : "true");
			else
				fail(id, rc);
		}
	} else if (!strcmp(op, "shutdown")) {
		if (!need_worker(id)) {
			int rc = morpheus_worker_unregister(worker);
			worker = NULL;
			if (rc)
				fail(id, rc);
			else
				printf("{\"id\":%lld,\"ok\":true}\n", id);
		}
	} else {
		reply_error(id, "UNSUPPORTED", "unknown op");
	}
}

int main(void)
{
	char *line = NULL;
	size_t cap = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("{\"protocol\":\"morpheus-conformance\",\"version\":1,\"sdk\":\"c\",\"runtime_kind\":");
	json_print_str(morpheus_runtime_kind_name(MORPHEUS_RUNTIME_KIND_C));
	printf(",\"abi_major\":%u,\"abi_minor\":%u,\"checkpoint_modes\":[\"sync\"],"
	       "\"state_fields\":[\"escapable\",\"priority\"],\"attach_maps\":false,"
	       "\"ops\":[\"explicit_yield\",\"mode_clock\"],\"pid\":%d}\n",
	       (unsigned)MORPHEUS_ABI_MAJOR, (unsigned)MORPHEUS_ABI_MINOR, (int)getpid());
	while (getline(&line, &cap, stdin) > 0) {
		long long id = -1;
		char op[32];
		json_i64(line, "id", &id);
		if (json_str(line, "op", op, sizeof(op))) {
			reply_error(id, "BAD_REQUEST", "no op");
			continue;
		}
		if (!strcmp(op, "exit"))
			break;
		handle(id, op, line);
	}
	free(line);
	/* Exit without shutting the worker down (CONFORMANCE.md: exit). */
	_exit(0);
}
