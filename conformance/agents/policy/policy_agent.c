// SPDX-License-Identifier: Apache-2.0 OR MIT
/*
 * Policy conformance agent: the scheduler side of spec/SCB.md §5.2 (the hint decision) and §5.6 (the
 * escalation gate and its state machine).
 *
 * It speaks the agent protocol of spec/CONFORMANCE.md (target "gate"): `attach` maps the harness's
 * region read-only; `gate` takes the configuration the header image states
 * (morpheus_gate_config_of_header), loads one SCB with morpheus_gate_load() and judges them with
 * morpheus_gate(); `escalate` does the same and runs the escalation state machine on the slot's episode
 * (kept here, one per slot, for the life of the process); `hint` decides the slot's hint with
 * morpheus_hint_decide_scb() under the slice and hint interval the header image states; all from the
 * shared policy header, the code compiled into both the BPF program and the simulation backend. Names
 * are the enumerators' names without their MORPHEUS_GATE_ / MORPHEUS_STEP_ / MORPHEUS_HINT_ prefix,
 * produced by the preprocessor from the header.
 *
 * MORPHEUS_CONFORMANCE_BREAK breaks one rule on purpose, for the harness's own tests (never set otherwise):
 *   hint_pending_dropped  the hint decision is taken as if no request were pending (the SCB copy it
 *                         judges has last_ack_seq = preempt_seq): the 1.4 reading, in which a rate-limited
 *                         decision with a request pending is a dropped hint (SCB.md §5.2, 1.5: nothing).
 *
 * (The policy header is GPL-2.0-only; a binary built from this file is therefore GPL-2.0-only.)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../scheduler/src/policy/morpheus_policy.h"
#include "../common/agent_json.h"

#define VERDICT(name) [MORPHEUS_GATE_##name] = #name
static const char *const verdict_names[MORPHEUS_GATE_NR_VERDICTS] = {
	VERDICT(ESCALATE),
	VERDICT(BLOCKED_MODE),
	VERDICT(BLOCKED_POLICY_NONE),
	VERDICT(BLOCKED_STATE),
	VERDICT(BLOCKED_NOT_ESCAPABLE),
	VERDICT(BLOCKED_CRITICAL),
	VERDICT(BLOCKED_ACKNOWLEDGED),
	VERDICT(BLOCKED_WITHIN_GRACE),
};

#define STEP(name) [MORPHEUS_STEP_##name] = #name
static const char *const step_names[MORPHEUS_NR_STEPS] = {
	STEP(NONE),
	STEP(KICK),
	STEP(THROTTLE),
	STEP(LIFT_ACKNOWLEDGED),
	STEP(LIFT_NOT_RUNNING),
	STEP(LIFT_CRITICAL),
	STEP(LIFT_REVOKED),
	STEP(LIFT_EXPIRED),
};

#define HINT(name) [MORPHEUS_HINT_##name] = #name
static const char *const hint_names[] = {
	HINT(NONE),
	HINT(EMIT),
	HINT(RATE_LIMITED),
	HINT(PENDING),
};

/* The rule MORPHEUS_CONFORMANCE_BREAK names, or "" (see the file's comment). */
static const char *break_mode = "";

static unsigned char *region;
static size_t region_len;
/* The episode of each slot, as the scheduler keeps it privately (zero: none open). */
static struct morpheus_escalation episodes[MORPHEUS_MAX_WORKERS];

static const char *verdict_name(enum morpheus_gate_verdict v);
static int evaluate(const unsigned char *image, size_t len, unsigned long long slot, unsigned long long runtime_ns,
		    struct morpheus_gate_input *in, enum morpheus_gate_verdict *out);

/*
 * One decision of the state machine for `slot` at `now_ns`, recorded as a scheduler records it. The
 * bound of an episode is DEFAULT_THROTTLE_MAX_NS, the scheduler's default (CONFORMANCE.md §2.6).
 * Returns -1 for a slot outside the region.
 */
static int escalate_step(const unsigned char *image, size_t len, unsigned long long slot, unsigned long long runtime_ns,
			 unsigned long long now_ns, enum morpheus_gate_verdict *verdict, enum morpheus_escalation_step *step)
{
	struct morpheus_gate_input in;
	if (slot >= MORPHEUS_MAX_WORKERS || evaluate(image, len, slot, runtime_ns, &in, verdict))
		return -1;
	*step = morpheus_escalation_decide(&episodes[slot], &in, *verdict, now_ns, MORPHEUS_DEFAULT_THROTTLE_MAX_NS);
	morpheus_escalation_commit(&episodes[slot], *step, &in, now_ns);
	return 0;
}

static void print_escalation(const char *prefix, unsigned long long slot, enum morpheus_gate_verdict v,
			     enum morpheus_escalation_step step)
{
	printf("%s\"verdict\":\"%s\",\"step\":\"%s\",\"escalated\":%s,\"steps\":%u}\n", prefix, verdict_name(v),
	       (unsigned)step < MORPHEUS_NR_STEPS ? step_names[step] : "UNKNOWN", episodes[slot].open ? "true" : "false",
	       (unsigned)episodes[slot].steps);
}

static void attach(long long id, const char *line)
{
	char path[4096];
	struct stat st;
	if (json_str(line, "path", path, sizeof(path))) {
		reply_error(id, "BAD_REQUEST", "attach needs a string path");
		return;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		reply_error(id, "IO", "cannot open the region");
		if (fd >= 0)
			close(fd);
		return;
	}
	void *map = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED) {
		reply_error(id, "IO", "cannot map the region");
		return;
	}
	const struct morpheus_region_header *h = map;
	const char *error = NULL;
	if ((size_t)st.st_size < sizeof(*h))
		error = "REGION_TRUNCATED";
	else if (h->magic != MORPHEUS_REGION_MAGIC)
		error = "BAD_MAGIC";
	else if (h->abi_major != MORPHEUS_ABI_MAJOR)
		error = "ABI_MAJOR_MISMATCH";
	if (error) {
		munmap(map, st.st_size);
		reply_error(id, error, "the gate needs a region of this ABI major");
		return;
	}
	region = map;
	region_len = st.st_size;
	printf("{\"id\":%lld,\"ok\":true,\"attached\":true}\n", id);
}

static void gate(long long id, const char *line)
{
	unsigned long long slot, runtime_ns;
	if (!region) {
		reply_error(id, "DETACHED", "gate before attach");
		return;
	}
	if (json_u64(line, "slot", &slot) || json_u64(line, "runtime_ns", &runtime_ns)) {
		reply_error(id, "BAD_REQUEST", "gate needs integer slot and runtime_ns");
		return;
	}
	const char *name;
	struct morpheus_gate_input in;
	enum morpheus_gate_verdict v;
	if (evaluate(region, region_len, slot, runtime_ns, &in, &v)) {
		reply_error(id, "SLOT_OUT_OF_RANGE", "slot outside the region");
		return;
	}
	name = verdict_name(v);
	printf("{\"id\":%lld,\"ok\":true,\"escalate\":%s,\"verdict\":\"%s\"}\n", id,
	       v == MORPHEUS_GATE_ESCALATE ? "true" : "false", name);
}

static void escalate(long long id, const char *line)
{
	unsigned long long slot, runtime_ns, now_ns;
	enum morpheus_gate_verdict v;
	enum morpheus_escalation_step step;
	char prefix[64];
	if (!region) {
		reply_error(id, "DETACHED", "escalate before attach");
		return;
	}
	if (json_u64(line, "slot", &slot) || json_u64(line, "runtime_ns", &runtime_ns) || json_u64(line, "now_ns", &now_ns)) {
		reply_error(id, "BAD_REQUEST", "escalate needs integer slot, runtime_ns and now_ns");
		return;
	}
	if (escalate_step(region, region_len, slot, runtime_ns, now_ns, &v, &step)) {
		reply_error(id, "SLOT_OUT_OF_RANGE", "slot outside the region");
		return;
	}
	snprintf(prefix, sizeof(prefix), "{\"id\":%lld,\"ok\":true,", id);
	print_escalation(prefix, slot, v, step);
}

/*
 * The hint decision for `slot` of a region image at `now_ns` (SCB.md §5.2), under the slice and hint
 * interval its header states (a live scheduler uses its own configuration). Returns -1 for a slot
 * outside the region.
 */
static int hint_step(const unsigned char *image, size_t len, unsigned long long slot, unsigned long long runtime_ns,
		     unsigned long long now_ns, enum morpheus_hint_decision *out)
{
	const struct morpheus_region_header *h = (const void *)image;
	if (len < sizeof(*h) || slot >= h->scb_count ||
	    h->header_size + (slot + 1) * (unsigned long long)h->scb_stride > len)
		return -1;
	const struct morpheus_scb *scb = (const void *)(image + h->header_size + slot * h->scb_stride);
	struct morpheus_scb copy;
	if (!strcmp(break_mode, "hint_pending_dropped")) {
		memcpy(&copy, scb, sizeof(copy));
		copy.last_ack_seq = copy.preempt_seq;
		scb = &copy;
	}
	*out = morpheus_hint_decide_scb(scb, runtime_ns, MORPHEUS_LOAD_RELAXED(&h->slice_ns), now_ns,
					MORPHEUS_LOAD_RELAXED(&h->hint_min_interval_ns));
	return 0;
}

static void print_hint(const char *prefix, enum morpheus_hint_decision d)
{
	printf("%s\"hint\":\"%s\",\"dropped\":%s}\n", prefix,
	       (unsigned)d < sizeof(hint_names) / sizeof(hint_names[0]) && hint_names[d] ? hint_names[d] : "UNKNOWN",
	       morpheus_hint_dropped(d) ? "true" : "false");
}

static void hint(long long id, const char *line)
{
	unsigned long long slot, runtime_ns, now_ns;
	enum morpheus_hint_decision d;
	char prefix[64];
	if (!region) {
		reply_error(id, "DETACHED", "hint before attach");
		return;
	}
	if (json_u64(line, "slot", &slot) || json_u64(line, "runtime_ns", &runtime_ns) || json_u64(line, "now_ns", &now_ns)) {
		reply_error(id, "BAD_REQUEST", "hint needs integer slot, runtime_ns and now_ns");
		return;
	}
	if (hint_step(region, region_len, slot, runtime_ns, now_ns, &d)) {
		reply_error(id, "SLOT_OUT_OF_RANGE", "slot outside the region");
		return;
	}
	snprintf(prefix, sizeof(prefix), "{\"id\":%lld,\"ok\":true,", id);
	print_hint(prefix, d);
}

static const char *verdict_name(enum morpheus_gate_verdict v)
{
	return (unsigned)v < MORPHEUS_GATE_NR_VERDICTS && verdict_names[v] ? verdict_names[v] : "UNKNOWN";
}

/* The gate on a region image: the loads a scheduler makes at decision time, with SCB.md's orders. */
static int evaluate(const unsigned char *image, size_t len, unsigned long long slot, unsigned long long runtime_ns,
		    struct morpheus_gate_input *in, enum morpheus_gate_verdict *out)
{
	const struct morpheus_region_header *h = (const void *)image;
	if (len < sizeof(*h) || slot >= h->scb_count ||
	    h->header_size + (slot + 1) * (unsigned long long)h->scb_stride > len)
		return -1;
	const struct morpheus_scb *scb = (const void *)(image + h->header_size + slot * h->scb_stride);
	/* The case's configuration is its header image's; the SCB's loads are the shared helper's. */
	struct morpheus_gate_config cfg;
	morpheus_gate_config_of_header(h, &cfg);
	*out = morpheus_gate_decide(&cfg, scb, runtime_ns, in);
	return 0;
}

/*
 * --replay: answer the cases of `cli.py export-gate-cases` (one JSON line each, the region image in
 * hex) on stdout, for `cli.py import-answers`. The kernel column's replayer does the same with the BPF
 * program evaluating the gate.
 */
static int replay(void)
{
	char *line = NULL, *hex = NULL, scenario_case[256];
	size_t cap = 0;
	unsigned char *image = NULL;
	while (getline(&line, &cap, stdin) > 0) {
		unsigned long long slot, runtime_ns, now_ns;
		size_t n = strlen(line);
		struct morpheus_gate_input in;
		enum morpheus_gate_verdict v;
		enum morpheus_escalation_step step;
		char op[16] = "gate", prefix[300];
		bool reset = false;
		hex = realloc(hex, n + 1);
		image = realloc(image, n / 2 + 1);
		if (!hex || !image || json_str(line, "case", scenario_case, sizeof(scenario_case)) ||
		    json_u64(line, "slot", &slot) || json_u64(line, "runtime_ns", &runtime_ns) ||
		    json_str(line, "region_hex", hex, n + 1)) {
			fprintf(stderr, "policy agent: malformed case line\n");
			return 2;
		}
		size_t len = strlen(hex) / 2;
		for (size_t i = 0; i < len; i++)
			sscanf(hex + 2 * i, "%2hhx", &image[i]);
		if (json_value(line, "op") && json_str(line, "op", op, sizeof(op))) {
			fprintf(stderr, "policy agent: malformed case line (op)\n");
			return 2;
		}
		if (!strcmp(op, "hint")) {
			enum morpheus_hint_decision d;
			if (json_u64(line, "now_ns", &now_ns)) {
				fprintf(stderr, "policy agent: malformed hint case line\n");
				return 2;
			}
			if (hint_step(image, len, slot, runtime_ns, now_ns, &d)) {
				printf("{\"case\":\"%s\",\"error\":\"SLOT_OUT_OF_RANGE\"}\n", scenario_case);
				continue;
			}
			snprintf(prefix, sizeof(prefix), "{\"case\":\"%s\",", scenario_case);
			print_hint(prefix, d);
			continue;
		}
		if (!strcmp(op, "escalate")) {
			/* Cases of one scenario come in order; reset marks a scenario's first. */
			if (json_u64(line, "now_ns", &now_ns) || (json_value(line, "reset") && json_bool(line, "reset", &reset))) {
				fprintf(stderr, "policy agent: malformed escalate case line\n");
				return 2;
			}
			if (reset && slot < MORPHEUS_MAX_WORKERS)
				memset(&episodes[slot], 0, sizeof(episodes[slot]));
			if (escalate_step(image, len, slot, runtime_ns, now_ns, &v, &step)) {
				printf("{\"case\":\"%s\",\"error\":\"SLOT_OUT_OF_RANGE\"}\n", scenario_case);
				continue;
			}
			snprintf(prefix, sizeof(prefix), "{\"case\":\"%s\",", scenario_case);
			print_escalation(prefix, slot, v, step);
			continue;
		}
		if (evaluate(image, len, slot, runtime_ns, &in, &v)) {
			printf("{\"case\":\"%s\",\"error\":\"SLOT_OUT_OF_RANGE\"}\n", scenario_case);
			continue;
		}
		printf("{\"case\":\"%s\",\"escalate\":%s,\"verdict\":\"%s\"}\n", scenario_case,
		       v == MORPHEUS_GATE_ESCALATE ? "true" : "false", verdict_name(v));
	}
	free(line);
	free(hex);
	free(image);
	return 0;
}

int main(int argc, char **argv)
{
	char *line = NULL;
	size_t cap = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("MORPHEUS_CONFORMANCE_BREAK"))
		break_mode = getenv("MORPHEUS_CONFORMANCE_BREAK");
	if (argc > 1 && !strcmp(argv[1], "--replay"))
		return replay();
	printf("{\"protocol\":\"morpheus-conformance\",\"version\":1,\"sdk\":\"policy\",\"runtime_kind\":\"UNKNOWN\","
	       "\"abi_major\":%u,\"abi_minor\":%u,\"checkpoint_modes\":[],\"pid\":%d}\n",
	       (unsigned)MORPHEUS_ABI_MAJOR, (unsigned)MORPHEUS_ABI_MINOR, (int)getpid());
	while (getline(&line, &cap, stdin) > 0) {
		unsigned long long uid = 0;
		long long id = json_u64(line, "id", &uid) ? -1 : (long long)uid;
		char op[32];
		if (json_str(line, "op", op, sizeof(op))) {
			reply_error(id, "BAD_REQUEST", "no op");
		} else if (!strcmp(op, "exit")) {
			break;
		} else if (!strcmp(op, "attach")) {
			attach(id, line);
		} else if (!strcmp(op, "gate")) {
			gate(id, line);
		} else if (!strcmp(op, "escalate")) {
			escalate(id, line);
		} else if (!strcmp(op, "hint")) {
			hint(id, line);
		} else {
			reply_error(id, "UNSUPPORTED", "the policy agent knows attach, gate, escalate and hint");
		}
	}
	free(line);
	return 0;
}
