/* SPDX-License-Identifier: Apache-2.0 OR MIT */
/*
 * The few JSON helpers the C conformance agents need: requests of spec/CONFORMANCE.md are flat
 * objects of strings, integers, booleans and null, one per line; replies are printed with printf.
 */
#ifndef MORPHEUS_AGENT_JSON_H
#define MORPHEUS_AGENT_JSON_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pointer to the value of "key" in a flat JSON object, or NULL. */
static inline const char *json_value(const char *line, const char *key)
{
	char pattern[64];
	snprintf(pattern, sizeof(pattern), "\"%s\"", key);
	for (const char *p = strstr(line, pattern); p; p = strstr(p + 1, pattern)) {
		const char *q = p + strlen(pattern);
		while (*q == ' ')
			q++;
		if (*q == ':') {
			q++;
			while (*q == ' ')
				q++;
			return q;
		}
	}
	return NULL;
}

static inline int json_i64(const char *line, const char *key, long long *out)
{
	const char *v = json_value(line, key);
	char *end;
	if (!v || !(*v == '-' || (*v >= '0' && *v <= '9')))
		return -1;
	errno = 0;
	*out = strtoll(v, &end, 10);
	return errno ? -1 : 0;
}

static inline int json_u64(const char *line, const char *key, unsigned long long *out)
{
	const char *v = json_value(line, key);
	char *end;
	if (!v || *v < '0' || *v > '9')
		return -1;
	errno = 0;
	*out = strtoull(v, &end, 10);
	return errno ? -1 : 0;
}

static inline int json_bool(const char *line, const char *key, bool *out)
{
	const char *v = json_value(line, key);
	if (v && !strncmp(v, "true", 4))
		*out = true;
	else if (v && !strncmp(v, "false", 5))
		*out = false;
	else
		return -1;
	return 0;
}

/* 1 if the key is present with the value null or absent, 0 otherwise. */
static inline int json_is_null(const char *line, const char *key)
{
	const char *v = json_value(line, key);
	return !v || !strncmp(v, "null", 4);
}

/* Copy a JSON string value; backslash escapes are refused (the harness sends plain paths). */
static inline int json_str(const char *line, const char *key, char *out, size_t size)
{
	const char *v = json_value(line, key);
	size_t n = 0;
	if (!v || *v != '"')
		return -1;
	for (v++; *v && *v != '"'; v++) {
		if (*v == '\\' || n + 1 >= size)
			return -1;
		out[n++] = *v;
	}
	out[n] = '\0';
	return *v == '"' ? 0 : -1;
}

/* Print s as a JSON string literal. */
static inline void json_print_str(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static inline void reply_error(long long id, const char *error, const char *message)
{
	printf("{\"id\":%lld,\"ok\":false,\"error\":", id);
	json_print_str(error);
	printf(",\"message\":");
	json_print_str(message);
	printf("}\n");
}

#endif /* MORPHEUS_AGENT_JSON_H */
