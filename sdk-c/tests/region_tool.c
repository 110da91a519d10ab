// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * region_tool: play the scheduler on a sim region from a shell script (tests/example_test.sh).
 *
 *   region_tool create PATH COUNT        write a valid region with COUNT slots
 *   region_tool request PATH SLOT        preempt_seq += 1 (prints the new value)
 *   region_tool wait-state PATH SLOT STATE_NAME TIMEOUT_MS
 *   region_tool show PATH SLOT           print the SCB fields a test checks
 *   region_tool remove PATH
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_region.h"

static int usage(void)
{
	fprintf(stderr, "usage: region_tool create|request|wait-state|show|remove PATH [ARGS]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct sim_region r;

	if (argc < 3)
		return usage();
	if (!strcmp(argv[1], "create") && argc == 4) {
		struct sim_layout l = sim_layout_default((uint32_t)atoi(argv[3]));

		if (sim_region_create(&r, argv[2], &l)) {
			perror(argv[2]);
			return 1;
		}
		return 0;
	}
	if (!strcmp(argv[1], "remove"))
		return unlink(argv[2]) ? 1 : 0;
	if (sim_region_open(&r, argv[2])) {
		fprintf(stderr, "region_tool: cannot map %s\n", argv[2]);
		return 1;
	}
	if (argc < 4)
		return usage();
	uint32_t slot = (uint32_t)atoi(argv[3]);
	if (slot >= r.scb_count) {
		fprintf(stderr, "region_tool: slot %u >= scb_count %u\n", slot, r.scb_count);
		return 1;
	}
	if (!strcmp(argv[1], "request")) {
		printf("%llu\n", (unsigned long long)sim_request_yield(&r, slot));
		return 0;
	}
	if (!strcmp(argv[1], "show")) {
		printf("state=%s preempt_seq=%llu last_ack_seq=%llu yield_count=%llu last_yield_reason=%s "
		       "in_critical=%u runtime_kind=%s\n",
		       morpheus_worker_state_name(SIM_LOAD(&r, slot, worker_state)),
		       (unsigned long long)SIM_LOAD(&r, slot, preempt_seq),
		       (unsigned long long)SIM_LOAD(&r, slot, last_ack_seq),
		       (unsigned long long)SIM_LOAD(&r, slot, yield_count),
		       morpheus_yield_reason_name(SIM_LOAD(&r, slot, last_yield_reason)),
		       SIM_LOAD(&r, slot, in_critical),
		       morpheus_runtime_kind_name(SIM_LOAD(&r, slot, runtime_kind)));
		return 0;
	}
	if (!strcmp(argv[1], "wait-state") && argc == 6) {
		long timeout_ms = atol(argv[5]);
		struct timespec tick = { 0, 1000000 };

		for (long waited = 0; waited <= timeout_ms; waited++) {
			const char *name = morpheus_worker_state_name(SIM_LOAD(&r, slot, worker_state));
			if (name && !strcmp(name, argv[4]))
				return 0;
			nanosleep(&tick, NULL);
		}
		fprintf(stderr, "region_tool: slot %u did not reach %s within %ld ms\n", slot, argv[4], timeout_ms);
		return 1;
	}
	return usage();
}
