/* SPDX-License-Identifier: Apache-2.0 OR MIT */
/*
 * Test helper: a region file written as a scheduler writes it, and the scheduler's side of the
 * protocol on it. Every size, offset and constant comes from morpheus_abi.h, and the order of every
 * publication from morpheus_test_region.h (both generated from spec/abi.toml). Header-only, for the
 * gtest suite and tests/region_tool.c.
 */
#ifndef MORPHEUS_SIM_REGION_H
#define MORPHEUS_SIM_REGION_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "morpheus_abi.h"
#include "morpheus_test_region.h"

/* What to write; sim_layout_default() gives what a scheduler writes, tests break one field. */
struct sim_layout {
	uint32_t scb_count;
	uint32_t header_size;
	uint32_t scb_stride;
	uint64_t magic;
	uint16_t abi_major;
	uint64_t generation;
	int64_t file_len; /* -1: exactly header_size + scb_count * scb_stride */
};

struct sim_region {
	char path[256];
	unsigned char *base;
	size_t len;
	uint32_t scb_count, header_size, scb_stride;
};

static inline struct sim_layout sim_layout_default(uint32_t scb_count)
{
	struct sim_layout l;
	l.scb_count = scb_count;
	l.header_size = (uint32_t)sizeof(struct morpheus_region_header);
	l.scb_stride = (uint32_t)sizeof(struct morpheus_scb);
	l.magic = MORPHEUS_REGION_MAGIC;
	l.abi_major = MORPHEUS_ABI_MAJOR;
	l.generation = 1;
	l.file_len = -1;
	return l;
}

static inline struct morpheus_region_header *sim_header(const struct sim_region *r)
{
	return (struct morpheus_region_header *)r->base;
}

/* Create (replacing by unlink, never truncating) the region at `path`. Returns 0 or -1. */
static inline int sim_region_create(struct sim_region *r, const char *path, const struct sim_layout *l)
{
	struct morpheus_region_header h;
	size_t len = l->file_len >= 0 ? (size_t)l->file_len
				       : (size_t)l->header_size + (size_t)l->scb_count * l->scb_stride;
	int fd;

	memset(r, 0, sizeof(*r));
	snprintf(r->path, sizeof(r->path), "%s", path);
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
		return -1;
	memset(&h, 0, sizeof(h));
	h.magic = l->magic;
	h.abi_major = l->abi_major;
	h.abi_minor = MORPHEUS_ABI_MINOR;
	h.header_size = l->header_size;
	h.scb_stride = l->scb_stride;
	h.scb_count = l->scb_count;
	h.scheduler_mode = MORPHEUS_SCHEDULER_MODE_OBSERVER;
	h.escalation_policy = MORPHEUS_ESCALATION_POLICY_NONE;
	h.slice_ns = MORPHEUS_DEFAULT_SLICE_NS;
	h.grace_ns = MORPHEUS_DEFAULT_GRACE_NS;
	h.hint_min_interval_ns = MORPHEUS_DEFAULT_HINT_MIN_INTERVAL_NS;
	h.scheduler_pid = (uint32_t)getpid();
	h.backend = MORPHEUS_BACKEND_SIM;
	if (len < sizeof(h) && pwrite(fd, &h, len, 0) < 0) { /* a truncated region: never published */
		close(fd);
		return -1;
	}
	r->len = len;
	r->scb_count = l->scb_count;
	r->header_size = l->header_size;
	r->scb_stride = l->scb_stride;
	if (len > 0) {
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			close(fd);
			return -1;
		}
		r->base = (unsigned char *)p;
		if (len >= sizeof(h))
			morpheus_test_publish_region(sim_header(r), &h, l->generation);
	}
	close(fd);
	return 0;
}

/* Map an existing region (for region_tool). Returns 0 or -1. */
static inline int sim_region_open(struct sim_region *r, const char *path)
{
	struct stat st;
	void *p;
	int fd = open(path, O_RDWR | O_CLOEXEC);

	memset(r, 0, sizeof(*r));
	if (fd < 0 || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct morpheus_region_header))
		return -1;
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->base = (unsigned char *)p;
	r->len = (size_t)st.st_size;
	r->scb_count = sim_header(r)->scb_count;
	r->header_size = sim_header(r)->header_size;
	r->scb_stride = sim_header(r)->scb_stride;
	return 0;
}

static inline void sim_region_close(struct sim_region *r, int remove_file)
{
	if (r->base)
		munmap(r->base, r->len);
	if (remove_file)
		unlink(r->path);
	r->base = NULL;
}

static inline struct morpheus_scb *sim_scb(const struct sim_region *r, uint32_t slot)
{
	return (struct morpheus_scb *)(r->base + r->header_size + (size_t)slot * r->scb_stride);
}

/* The scheduler asks `slot` to yield (the generated publication); returns the new preempt_seq. */
static inline uint64_t sim_request_yield(const struct sim_region *r, uint32_t slot)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return morpheus_test_publish_request(sim_scb(r, slot), (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
}

static inline void sim_set_generation(const struct sim_region *r, uint64_t generation)
{
	__atomic_store_n(&sim_header(r)->generation, generation, __ATOMIC_RELEASE);
}

#define SIM_LOAD(r, slot, field) __atomic_load_n(&sim_scb((r), (slot))->field, __ATOMIC_ACQUIRE)

#endif /* MORPHEUS_SIM_REGION_H */
