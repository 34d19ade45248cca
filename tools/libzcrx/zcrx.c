// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
/*
 * libzcrx: a small C API over the uAPI of /dev/zcrx (zcrx_rs.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/zcrx_rs.h>
#include "zcrx.h"

#define EXPORT __attribute__((visibility("default")))

/* Our record is the kernel's: zcrx_recv() hands the caller's array over. */
_Static_assert(sizeof(struct zcrx_rec) == sizeof(struct zcrx_rs_rec), "rec size");
_Static_assert(offsetof(struct zcrx_rec, off) == offsetof(struct zcrx_rs_rec, off), "off");
_Static_assert(offsetof(struct zcrx_rec, len) == offsetof(struct zcrx_rs_rec, len), "len");
_Static_assert(offsetof(struct zcrx_rec, flags) == offsetof(struct zcrx_rs_rec, flags), "flags");
_Static_assert(ZCRX_REC_COPY == ZCRX_RS_REC_COPY, "copy flag");
_Static_assert(ZCRX_RECV_DONTWAIT == ZCRX_RS_RECV_DONTWAIT, "dontwait flag");
_Static_assert(ZCRX_RECV_MERGE == ZCRX_RS_RECV_MERGE, "merge flag");
_Static_assert(ZCRX_FEATURE_MERGE == ZCRX_RS_FEATURE_MERGE, "feature");
_Static_assert(ZCRX_FEATURE_UNREGISTER_AREA == ZCRX_RS_FEATURE_UNREGISTER_AREA, "feature");
_Static_assert(ZCRX_FEATURE_BIND_NODEV == ZCRX_RS_FEATURE_BIND_NODEV, "feature");
_Static_assert(ZCRX_FEATURE_ADD_QUEUE == ZCRX_RS_FEATURE_ADD_QUEUE, "feature");
_Static_assert(ZCRX_FEATURE_BUF_SIZE == ZCRX_RS_FEATURE_BUF_SIZE, "feature");
_Static_assert(ZCRX_FEATURE_EVENTS == ZCRX_RS_FEATURE_EVENTS, "feature");
_Static_assert(ZCRX_EVENT_ALLOC_FAIL == ZCRX_RS_EVENT_ALLOC_FAIL, "event");
_Static_assert(ZCRX_EVENT_COPY == ZCRX_RS_EVENT_COPY, "event");
/* zcrx_ring_stats() copies word by word; the layouts match all the same. */
_Static_assert(sizeof(struct zcrx_ring_stats) == sizeof(struct zcrx_rs_ring_stats), "ring stats size");
_Static_assert(offsetof(struct zcrx_ring_stats, alloc_fail) ==
	       offsetof(struct zcrx_rs_ring_stats, alloc_fail), "ring stats alloc_fail");
_Static_assert(offsetof(struct zcrx_ring_stats, events) ==
	       offsetof(struct zcrx_rs_ring_stats, events), "ring stats events");

struct zcrx {
	int fd;
	uint32_t page_size;	/* INFO's: the default buffer size */
	uint32_t buf_size;	/* the area's (page_size without one) */
	/* the area */
	unsigned char *area;
	size_t area_len;
	size_t map_len;		/* what we mapped: area_len, or whole huge pages */
	bool area_ours;		/* mapped by zcrx_register_area*() */
	/* the refill ring (mapped at bind) */
	unsigned char *ring;
	size_t ring_len;
	_Atomic uint32_t *head;	/* kernel's */
	_Atomic uint32_t *tail;	/* ours */
	struct zcrx_rs_rqe *rqes;
	/* the module's counters in the ring mapping (NULL: it keeps none) */
	const _Atomic uint64_t *stats;
	uint32_t entries;
	uint32_t tail_local;
	/* the module takes range entries (ZCRX_FEATURE_MERGE): a record goes
	 * back as it came, merged or not */
	bool ranges;
	/* entries waiting for ring space, oldest first: [wait_start, wait_end) */
	struct zcrx_rs_rqe *wait;
	size_t wait_start, wait_end, wait_cap;
};

EXPORT int zcrx_lib_version_major(void)
{
	return ZCRX_LIB_VERSION_MAJOR;
}

EXPORT int zcrx_lib_version_minor(void)
{
	return ZCRX_LIB_VERSION_MINOR;
}

static int xioctl(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) < 0 ? -errno : 0;
}

EXPORT int zcrx_open(struct zcrx **out, const char *path)
{
	struct zcrx_rs_info info = { 0 };
	struct zcrx *z;
	int ret;

	z = calloc(1, sizeof(*z));
	if (!z)
		return -ENOMEM;
	z->fd = open(path ? path : "/dev/zcrx", O_RDWR | O_CLOEXEC);
	if (z->fd < 0) {
		ret = -errno;
		free(z);
		return ret;
	}
	ret = xioctl(z->fd, ZCRX_RS_IOC_INFO, &info);
	if (ret) {
		close(z->fd);
		free(z);
		return ret;
	}
	if (info.api_version != ZCRX_RS_API_VERSION) {
		close(z->fd);
		free(z);
		return -EPROTO;
	}
	z->page_size = info.page_size;
	z->buf_size = info.page_size;
	z->ranges = info.features & ZCRX_RS_FEATURE_MERGE;
	*out = z;
	return 0;
}

static void unmap_ring(struct zcrx *z)
{
	if (z->ring)
		munmap(z->ring, z->ring_len);
	z->ring = NULL;
	z->ring_len = 0;
	z->stats = NULL;
}

EXPORT void zcrx_close(struct zcrx *z)
{
	if (!z)
		return;
	unmap_ring(z);
	close(z->fd);
	/* The module unpins the area when the context goes; unmap after. */
	if (z->area_ours)
		munmap(z->area, z->map_len);
	free(z->wait);
	free(z);
}

EXPORT int zcrx_fd(const struct zcrx *z)
{
	return z->fd;
}

EXPORT int zcrx_info(struct zcrx *z, struct zcrx_info *out)
{
	struct zcrx_rs_info i = { 0 };
	int ret = xioctl(z->fd, ZCRX_RS_IOC_INFO, &i);

	if (ret)
		return ret;
	memset(out, 0, sizeof(*out));
	out->api_version = i.api_version;
	out->buf_size = i.page_size;
	out->features = i.features;
	/* a module without large buffers: the page size is the largest */
	out->max_buf_size = i.features & ZCRX_RS_FEATURE_BUF_SIZE && i.max_buf_size ?
			    i.max_buf_size : i.page_size;
	return 0;
}

EXPORT int zcrx_stats(struct zcrx *z, struct zcrx_stats *out)
{
	struct zcrx_rs_stats s = { 0 };
	int ret = xioctl(z->fd, ZCRX_RS_IOC_STATS, &s);

	if (ret)
		return ret;
	out->zc_bytes = s.zc_bytes;
	out->zc_records = s.zc_records;
	out->copy_bytes = s.copy_bytes;
	out->copy_records = s.copy_records;
	out->alloc_fail = s.alloc_fail;
	out->refill_bad = s.refill_bad;
	out->refill_ok = s.refill_ok;
	out->user_held = s.user_held;
	out->area_buffers = s.area_buffers;
	out->free_buffers = s.free_buffers;
	return 0;
}

EXPORT int zcrx_register_area_mem_buf(struct zcrx *z, void *addr, size_t len,
				      uint32_t buf_size)
{
	/* A page is 0 to the module: what modules before large buffers take. */
	struct zcrx_rs_area_reg r = {
		.addr = (uintptr_t)addr, .len = len,
		.buf_size = buf_size == z->page_size ? 0 : buf_size
	};
	int ret;

	if (z->area)
		return -EBUSY;
	ret = xioctl(z->fd, ZCRX_RS_IOC_REGISTER_AREA, &r);
	if (ret)
		return ret;
	z->area = addr;
	z->area_len = len;
	z->map_len = len;
	z->area_ours = false;
	z->buf_size = buf_size ? buf_size : z->page_size;
	return 0;
}

EXPORT int zcrx_register_area_mem(struct zcrx *z, void *addr, size_t len)
{
	return zcrx_register_area_mem_buf(z, addr, len, 0);
}

/* The default huge page size (Hugepagesize in /proc/meminfo; 2 MiB if it
 * cannot be read). */
static size_t huge_page_size(void)
{
	static const char key[] = "Hugepagesize:";
	char buf[4096], *p, *end;
	unsigned long kb;
	ssize_t n;
	int fd;

	fd = open("/proc/meminfo", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 2UL << 20;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 2UL << 20;
	buf[n] = '\0';
	p = strstr(buf, key);
	if (!p)
		return 2UL << 20;
	kb = strtoul(p + sizeof(key) - 1, &end, 10);
	return kb && end != p + sizeof(key) - 1 ? kb << 10 : 2UL << 20;
}

EXPORT int zcrx_register_area_buf(struct zcrx *z, size_t len, uint32_t buf_size)
{
	size_t map_len = len;
	void *p = MAP_FAILED;
	int ret;

	if (z->area)
		return -EBUSY;
	if (!buf_size)
		buf_size = z->page_size;
	if (buf_size < z->page_size || buf_size > ZCRX_RS_BUF_MAX_SIZE ||
	    buf_size & (buf_size - 1))
		return -EINVAL;
	if (!len || len % buf_size || len > ZCRX_RS_AREA_MAX_LEN)
		return -EINVAL;
	/* Buffers larger than a page: hugetlbfs memory, physically contiguous
	 * per huge page (the mapping is aligned to it), for a NIC to write
	 * them whole. Without huge pages reserved, plain memory: copy-only
	 * contexts take it, BIND answers ERANGE. */
	if (buf_size > z->page_size) {
		size_t hp = huge_page_size();

		map_len = (len + hp - 1) / hp * hp;
		p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
	}
	if (p == MAP_FAILED) {
		map_len = len;
		p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	}
	if (p == MAP_FAILED)
		return -errno;
	ret = zcrx_register_area_mem_buf(z, p, len, buf_size);
	if (ret) {
		munmap(p, map_len);
		return ret;
	}
	z->map_len = map_len;
	z->area_ours = true;
	return 0;
}

EXPORT int zcrx_register_area(struct zcrx *z, size_t len)
{
	return zcrx_register_area_buf(z, len, 0);
}

EXPORT uint32_t zcrx_buf_size(const struct zcrx *z)
{
	return z->buf_size;
}

static uint32_t ring_room(const struct zcrx *z)
{
	uint32_t head = atomic_load_explicit(z->head, memory_order_acquire);

	return z->entries - (z->tail_local - head);
}

/* Moves as many waiting entries onto the ring as fit. */
static void flush_wait(struct zcrx *z)
{
	uint32_t room, n, i;

	if (!z->ring || z->wait_start == z->wait_end)
		return;
	room = ring_room(z);
	n = z->wait_end - z->wait_start < room ? z->wait_end - z->wait_start : room;
	for (i = 0; i < n; i++) {
		z->rqes[z->tail_local++ & (z->entries - 1)] = z->wait[z->wait_start++];
	}
	if (n)
		atomic_store_explicit(z->tail, z->tail_local, memory_order_release);
	if (z->wait_start == z->wait_end)
		z->wait_start = z->wait_end = 0;
}

static int bind_flags(struct zcrx *z, unsigned int ifindex, unsigned int rxq,
		      unsigned int rq_entries, unsigned int flags)
{
	struct zcrx_rs_bind b = { .ifindex = ifindex, .rxq = rxq, .flags = flags };
	void *p;
	int ret;

	if (!z->area)
		return -EINVAL;
	if (!rq_entries) {
		size_t bufs = z->area_len / z->buf_size;

		rq_entries = bufs > ZCRX_RS_RQ_MAX_ENTRIES ? ZCRX_RS_RQ_MAX_ENTRIES : bufs;
	}
	if (rq_entries > ZCRX_RS_RQ_MAX_ENTRIES)
		return -EINVAL;
	b.rq_entries = rq_entries;
	ret = xioctl(z->fd, ZCRX_RS_IOC_BIND, &b);
	if (ret)
		return ret;
	/* The module reads the old ring no more: what it held was taken. */
	unmap_ring(z);
	p = mmap(NULL, b.mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED, z->fd, 0);
	if (p == MAP_FAILED) {
		/* Returns wait in the library until a binding maps a ring.
		 * A queue binding is undone; a copy-only context stays so
		 * (UNBIND answers EINVAL), without a ring mapped. */
		ret = -errno;
		ioctl(z->fd, ZCRX_RS_IOC_UNBIND);
		return ret;
	}
	/* Returns still waiting go through the new ring. */
	z->ring = p;
	z->ring_len = b.mmap_len;
	z->head = (_Atomic uint32_t *)(z->ring + b.offsets.head);
	z->tail = (_Atomic uint32_t *)(z->ring + b.offsets.tail);
	z->rqes = (struct zcrx_rs_rqe *)(z->ring + b.offsets.rqes);
	/* 0: a module without counters in the ring */
	if (b.offsets.stats && !(b.offsets.stats % sizeof(uint64_t)) &&
	    b.offsets.stats + sizeof(struct zcrx_rs_ring_stats) <= b.mmap_len)
		z->stats = (const _Atomic uint64_t *)(z->ring + b.offsets.stats);
	z->entries = b.rq_entries;
	z->tail_local = atomic_load_explicit(z->tail, memory_order_relaxed);
	flush_wait(z);
	return 0;
}

EXPORT int zcrx_bind_ifindex(struct zcrx *z, unsigned int ifindex,
			     unsigned int rxq, unsigned int rq_entries)
{
	return bind_flags(z, ifindex, rxq, rq_entries, 0);
}

EXPORT int zcrx_bind_nodev(struct zcrx *z, unsigned int rq_entries)
{
	return bind_flags(z, 0, 0, rq_entries, ZCRX_RS_BIND_NODEV);
}

EXPORT int zcrx_add_queue_ifindex(struct zcrx *z, unsigned int ifindex,
				  unsigned int rxq)
{
	struct zcrx_rs_bind b = {
		.ifindex = ifindex, .rxq = rxq, .flags = ZCRX_RS_BIND_ADD_QUEUE
	};

	/* The ring stays as it is: nothing to map. */
	return xioctl(z->fd, ZCRX_RS_IOC_BIND, &b);
}

EXPORT int zcrx_add_queue(struct zcrx *z, const char *ifname, unsigned int rxq)
{
	unsigned int ifindex = if_nametoindex(ifname);

	if (!ifindex)
		return errno == ENXIO || errno == ENODEV || !errno ? -ENODEV : -errno;
	return zcrx_add_queue_ifindex(z, ifindex, rxq);
}

EXPORT int zcrx_bind(struct zcrx *z, const char *ifname, unsigned int rxq,
		     unsigned int rq_entries)
{
	unsigned int ifindex = if_nametoindex(ifname);

	if (!ifindex)
		return errno == ENXIO || errno == ENODEV || !errno ? -ENODEV : -errno;
	return zcrx_bind_ifindex(z, ifindex, rxq, rq_entries);
}

EXPORT int zcrx_unbind(struct zcrx *z)
{
	return xioctl(z->fd, ZCRX_RS_IOC_UNBIND, NULL);
}

EXPORT int zcrx_unregister_area(struct zcrx *z)
{
	int ret = xioctl(z->fd, ZCRX_RS_IOC_UNREGISTER_AREA, NULL);

	if (ret)
		return ret;
	unmap_ring(z);
	if (z->area_ours)
		munmap(z->area, z->map_len);
	z->area = NULL;
	z->area_len = 0;
	z->map_len = 0;
	z->area_ours = false;
	z->buf_size = z->page_size;
	z->wait_start = z->wait_end = 0;
	return 0;
}

EXPORT ssize_t zcrx_recv(struct zcrx *z, int sockfd, struct zcrx_rec *recs,
			 unsigned int *nr, unsigned int flags)
{
	struct zcrx_rs_recv r = {
		.sockfd = sockfd,
		.flags = flags,
		.recs = (uintptr_t)recs,
		.nr_recs = *nr,
	};
	int ret;

	flush_wait(z);
	ret = xioctl(z->fd, ZCRX_RS_IOC_RECV, &r);
	if (ret) {
		*nr = 0;
		return ret;
	}
	*nr = r.nr_recs;
	return (ssize_t)r.bytes;
}

EXPORT const void *zcrx_data(const struct zcrx *z, const struct zcrx_rec *rec)
{
	if (!z->area || rec->off > z->area_len || rec->len > z->area_len - rec->off)
		return NULL;
	return z->area + rec->off;
}

/* Makes room for @n more waiting entries. */
static int wait_reserve(struct zcrx *z, size_t n)
{
	size_t used = z->wait_end - z->wait_start, cap;
	struct zcrx_rs_rqe *w;

	if (z->wait_start) {
		memmove(z->wait, z->wait + z->wait_start, used * sizeof(*z->wait));
		z->wait_start = 0;
		z->wait_end = used;
	}
	if (used + n <= z->wait_cap)
		return 0;
	cap = z->wait_cap ? z->wait_cap : 64;
	while (cap < used + n)
		cap *= 2;
	w = realloc(z->wait, cap * sizeof(*w));
	if (!w)
		return -ENOMEM;
	z->wait = w;
	z->wait_cap = cap;
	return 0;
}

/* The refill entry for @rec: a range (one reference to each buffer the
 * record touches: one, or several for a merged record) when the module
 * takes them, else the one buffer the record lies in. */
static struct zcrx_rs_rqe entry_of(const struct zcrx *z, const struct zcrx_rec *rec)
{
	struct zcrx_rs_rqe e = { 0 };

	if (z->ranges) {
		e.off = rec->off;
		e.len = rec->len ? rec->len : 1;
		e.flags = ZCRX_RS_RQE_RANGE;
	} else {
		e.off = rec->off & ~((uint64_t)z->buf_size - 1);
	}
	return e;
}

EXPORT int zcrx_return(struct zcrx *z, const struct zcrx_rec *recs, unsigned int n)
{
	unsigned int i = 0, direct = 0;
	int ret;

	/* All or nothing: room for every entry first, then no failure. */
	ret = wait_reserve(z, n);
	if (ret)
		return ret;
	flush_wait(z);
	/* Oldest first: straight onto the ring only when nothing waits. */
	if (z->ring && z->wait_start == z->wait_end) {
		uint32_t room = ring_room(z);

		direct = n < room ? n : room;
		for (; i < direct; i++)
			z->rqes[z->tail_local++ & (z->entries - 1)] = entry_of(z, &recs[i]);
		if (direct)
			atomic_store_explicit(z->tail, z->tail_local, memory_order_release);
	}
	for (; i < n; i++)
		z->wait[z->wait_end++] = entry_of(z, &recs[i]);
	return 0;
}

EXPORT unsigned int zcrx_return_pending(const struct zcrx *z)
{
	return z->wait_end - z->wait_start;
}

EXPORT int zcrx_events(struct zcrx *z, uint32_t arm, uint32_t *fired, uint32_t *armed)
{
	struct zcrx_rs_events e = { .arm = arm };
	int ret = xioctl(z->fd, ZCRX_RS_IOC_EVENTS, &e);

	if (ret)
		return ret;
	if (fired)
		*fired = e.fired;
	if (armed)
		*armed = e.armed;
	return 0;
}

EXPORT int zcrx_ring_stats(const struct zcrx *z, struct zcrx_ring_stats *out)
{
	const _Atomic uint64_t *w = z->stats;

	if (!z->ring)
		return -EINVAL;
	if (!w)
		return -EOPNOTSUPP;
	memset(out, 0, sizeof(*out));
	/* Each word is stored whole by the kernel: one relaxed load each. */
#define WORD(f) atomic_load_explicit(&w[offsetof(struct zcrx_rs_ring_stats, f) / sizeof(uint64_t)], \
				     memory_order_relaxed)
	out->zc_bytes = WORD(zc_bytes);
	out->copy_bytes = WORD(copy_bytes);
	out->copy_records = WORD(copy_records);
	out->alloc_fail = WORD(alloc_fail);
	out->events = WORD(events);
#undef WORD
	return 0;
}
