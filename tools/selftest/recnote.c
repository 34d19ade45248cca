// SPDX-License-Identifier: GPL-2.0
/*
 * Copyright (C) 2026 The zcrx-rs developers.
 *
 * recnote: the device check (tools/selftest/src/devlog.rs) for receivers
 * that run in a process of their own (libzcrx's epoll example, zcrx-upload,
 * zcrx-nc). Loaded with LD_PRELOAD, it wraps ioctl(): it remembers each
 * context's area (ZCRX_RS_IOC_REGISTER_AREA) and, when ZCRX_RS_IOC_RECV
 * returns, appends one line per page piece of every zero-copy record to
 * the file $ZCRX_RECNOTE:
 *
 *   piece PHYS LEN          physical address (/proc/self/pagemap) and length
 *   error TEXT              a record it could not note (the check fails)
 *
 * It notes before the program sees the records, so before any buffer can
 * go back to the device: the pieces of one buffer are in the file in the
 * order of its writes, as the check needs. One write(2) per RECV call on a
 * file opened O_APPEND, under a lock: calls of several threads do not
 * interleave. (That holds as long as a program does not run two RECVs on
 * one socket at once, whose records could be noted in the other order;
 * the receivers checked with it do not.) Only fds that registered an area
 * are followed, and an fd forgets its area when it is closed. The program
 * itself is not changed and cannot tell (errno and the return value are
 * the real ioctl's and close's). Test tooling, not for production.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <linux/zcrx_rs.h>

#define MAX_AREAS 64

struct area {
	int fd;			/* context fd, -1: slot free */
	uint64_t addr, len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct area areas[MAX_AREAS];
static int nr_areas;
static int out_fd = -1, pagemap_fd = -1;
static int (*real_ioctl)(int, unsigned long, ...);
static int (*real_close)(int);

__attribute__((constructor)) static void recnote_init(void)
{
	real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
	if (!real_ioctl || !real_close) {
		fprintf(stderr, "recnote: dlsym(ioctl, close) failed\n");
		abort();
	}
}

/* a growing text buffer for one RECV call's lines */
struct out {
	char *p;
	size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->p ? o->p + o->len : NULL,
			      o->p ? o->cap - o->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (o->p && o->len + n < o->cap) {
			o->len += n;
			return;
		}
		o->cap = (o->cap + n + 1) * 2;
		o->p = realloc(o->p, o->cap);
		if (!o->p)
			abort();
	}
}

static void write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;	/* the check then finds bytes missing */
		p += n;
		len -= n;
	}
}

/* called with the lock held */
static int open_files(void)
{
	const char *path = getenv("ZCRX_RECNOTE");

	if (out_fd < 0 && path)
		out_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
			      0600);
	if (pagemap_fd < 0)
		pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	return out_fd >= 0 ? 0 : -1;
}

static struct area *find(int fd)
{
	for (int i = 0; i < nr_areas; i++)
		if (areas[i].fd == fd)
			return &areas[i];
	return NULL;
}

static void note_area(int fd, const struct zcrx_rs_area_reg *reg)
{
	struct area *a = find(fd);

	if (!a)
		a = find(-1);
	if (!a && nr_areas < MAX_AREAS)
		a = &areas[nr_areas++];
	if (!a)
		return;		/* its records are then not noted: the check
				 * finds bytes missing
				 */
	a->fd = fd;
	a->addr = reg->addr;	/* 0 for a dma-buf: not noted */
	a->len = reg->len;
}

static int phys_of(uint64_t va, uint64_t ps, uint64_t *phys)
{
	uint64_t e;

	if (pread(pagemap_fd, &e, sizeof(e), va / ps * 8) != sizeof(e))
		return -1;
	if (!(e >> 63) || !(e & ((1ULL << 55) - 1)))
		return -1;
	*phys = (e & ((1ULL << 55) - 1)) * ps + va % ps;
	return 0;
}

static void note_recs(int fd, const struct zcrx_rs_recv *r)
{
	const struct zcrx_rs_rec *rec = (const void *)(uintptr_t)r->recs;
	uint64_t ps = sysconf(_SC_PAGESIZE);
	struct out o = { 0 };
	struct area *a;

	pthread_mutex_lock(&lock);
	a = find(fd);
	/* not a context that registered an area (another device's ioctl of
	 * the same number): leave it alone
	 */
	if (!a || open_files())
		goto out;
	for (uint32_t i = 0; i < r->nr_recs; i++) {
		uint64_t va, left, chunk, phys;

		if (rec[i].flags & ZCRX_RS_REC_COPY)
			continue;
		if (!a->addr || rec[i].off + rec[i].len > a->len) {
			put(&o, "error fd %d: record off %llu len %u outside any area noted\n",
			    fd, (unsigned long long)rec[i].off, rec[i].len);
			continue;
		}
		va = a->addr + rec[i].off;
		for (left = rec[i].len; left; left -= chunk, va += chunk) {
			chunk = ps - va % ps;
			if (chunk > left)
				chunk = left;
			if (phys_of(va, ps, &phys)) {
				put(&o, "error pagemap: page of %#llx not present\n",
				    (unsigned long long)va);
				break;
			}
			put(&o, "piece %#llx %llu\n", (unsigned long long)phys,
			    (unsigned long long)chunk);
		}
	}
	if (o.len)
		write_all(out_fd, o.p, o.len);
out:
	pthread_mutex_unlock(&lock);
	free(o.p);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int ret, saved;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_ioctl)	/* called before the constructor ran */
		recnote_init();
	ret = real_ioctl(fd, req, arg);
	if (ret < 0)
		return ret;
	saved = errno;
	if (req == ZCRX_RS_IOC_REGISTER_AREA) {
		pthread_mutex_lock(&lock);
		note_area(fd, arg);
		pthread_mutex_unlock(&lock);
	} else if (req == ZCRX_RS_IOC_RECV) {
		note_recs(fd, arg);
	}
	errno = saved;
	return ret;
}

int close(int fd)
{
	struct area *a;

	if (!real_close)
		recnote_init();
	pthread_mutex_lock(&lock);
	a = find(fd);
	if (a)
		a->fd = -1;	/* the slot is free */
	pthread_mutex_unlock(&lock);
	return real_close(fd);
}
