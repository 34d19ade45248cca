/* SPDX-License-Identifier: LGPL-2.1-or-later OR MIT */
/*
 * libzcrx: zero-copy TCP receive with the zcrx_rs module, from C.
 *
 * A context (struct zcrx) owns an area of memory registered with the
 * module, an optional binding of that area to one rx queue of a NIC, and
 * the refill ring through which buffers go back. zcrx_recv() receives from
 * any connected TCP socket: each record says where the next bytes of the
 * stream are in the area (zero-copy when the NIC placed them there, copied
 * into an area buffer otherwise, ZCRX_REC_COPY). The bytes stay valid until
 * the record is given back with zcrx_return().
 *
 * Errors: functions returning int or ssize_t return a negative errno
 * (-EINVAL, -ENOMEM, ...) on failure and never set errno as their result.
 *
 * Threads: a context is not thread safe. Use one context per thread
 * (each bound to its own queue), or serialise calls on a shared one.
 *
 * Documentation/libzcrx.rst is the reference, with a complete example.
 */
#ifndef ZCRX_H
#define ZCRX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header; zcrx_lib_version_major()/_minor() give the
 * library's at run time (since 1.5). Functions are versioned symbols
 * (LIBZCRX_1.0, ...): a program built against 1.N runs with any later 1.x. */
#define ZCRX_LIB_VERSION_MAJOR	1
#define ZCRX_LIB_VERSION_MINOR	5

/* One receive record: the next @len bytes of the stream are at @off. */
struct zcrx_rec {
	uint64_t off;		/* offset in the area */
	uint32_t len;
	uint32_t flags;		/* ZCRX_REC_* */
};

#define ZCRX_REC_COPY	(1U << 0)	/* copied by the CPU, not DMA'd by the NIC */

/* zcrx_recv() flags */
#define ZCRX_RECV_DONTWAIT	(1U << 0)	/* -EAGAIN instead of blocking */
#define ZCRX_RECV_MERGE		(1U << 1)	/* one record for consecutive
						 * buffers of a packet (up to 32;
						 * ZCRX_FEATURE_MERGE); since 1.4 */

/* Counters of one context (zcrx_stats()). */
struct zcrx_stats {
	uint64_t zc_bytes;	/* handed over zero-copy */
	uint64_t zc_records;
	uint64_t copy_bytes;	/* copied into area buffers */
	uint64_t copy_records;
	uint64_t alloc_fail;	/* the queue asked for a buffer, none was free */
	uint64_t refill_bad;	/* bad refill entries the module skipped */
	uint64_t refill_ok;	/* buffers returned through the refill ring */
	uint64_t user_held;	/* buffers the program holds now */
	uint64_t area_buffers;	/* buffers in the area */
	uint64_t free_buffers;	/* buffers on the module's free list now */
	uint64_t __resv[6];	/* zero; later counters go here */
};

/* zcrx_info() feature bits */
#define ZCRX_FEATURE_UNREGISTER_AREA	(1ULL << 0)	/* zcrx_unregister_area() */
#define ZCRX_FEATURE_BIND_NODEV		(1ULL << 1)	/* zcrx_bind_nodev() */
#define ZCRX_FEATURE_ADD_QUEUE		(1ULL << 2)	/* zcrx_add_queue() */
#define ZCRX_FEATURE_BUF_SIZE		(1ULL << 3)	/* zcrx_register_area_buf() */
#define ZCRX_FEATURE_EVENTS		(1ULL << 4)	/* zcrx_events(), EPOLLPRI on
							 * zcrx_fd(), zcrx_ring_stats();
							 * since 1.3 */
#define ZCRX_FEATURE_MERGE		(1ULL << 8)	/* ZCRX_RECV_MERGE; since 1.4 */

/* Events (zcrx_events()); since 1.3. An armed event fires once, then it is
 * disarmed: arm it again to hear of the next one. */
#define ZCRX_EVENT_ALLOC_FAIL	(1U << 0)	/* a page pool of the context found
						 * no buffer: the refill ring ran
						 * dry, the NIC drops until
						 * buffers come back */
#define ZCRX_EVENT_COPY		(1U << 1)	/* zcrx_recv() copied data (not
						 * placed by the NIC) */

/* Counters of the current binding that the module keeps in the refill
 * ring's mapping (zcrx_ring_stats(): no system call). Each only grows; a
 * new binding starts from zero. Since 1.3. */
struct zcrx_ring_stats {
	uint64_t zc_bytes;	/* handed over zero-copy */
	uint64_t copy_bytes;	/* copied into area buffers */
	uint64_t copy_records;
	uint64_t alloc_fail;	/* the queue asked for a buffer, none was free */
	uint64_t events;	/* armed events that fired */
	uint64_t __resv[3];	/* zero; later counters go here */
};

/* What the loaded module supports (zcrx_info()). */
struct zcrx_info {
	uint32_t api_version;	/* the module's uAPI version */
	uint32_t buf_size;	/* the page size: the default and smallest
				 * buffer size of an area */
	uint64_t features;	/* feature bits */
	uint32_t max_buf_size;	/* largest buffer size an area may have
				 * (the page size without
				 * ZCRX_FEATURE_BUF_SIZE); since 1.2 */
	uint32_t __pad;		/* zero */
	uint64_t __resv[3];	/* zero */
};

struct zcrx;

/* Opens a context on /dev/zcrx (@path NULL) or on @path. */
int zcrx_open(struct zcrx **out, const char *path);

/* Closes the context: unbinds, unmaps, frees. Records not given back yet
 * become invalid. */
void zcrx_close(struct zcrx *z);

/* The context's file descriptor: poll/epoll it for EPOLLPRI (POLLPRI;
 * select(): exceptfds), reported while an event armed with zcrx_events()
 * has fired and waits to be collected; or pass it (SCM_RIGHTS). */
int zcrx_fd(const struct zcrx *z);

int zcrx_info(struct zcrx *z, struct zcrx_info *info);
int zcrx_stats(struct zcrx *z, struct zcrx_stats *stats);

/* Maps @len bytes of anonymous memory (a multiple of the page size) and
 * registers them as the area of page-sized buffers. One area per context.
 * -ENOMEM over RLIMIT_MEMLOCK. */
int zcrx_register_area(struct zcrx *z, size_t len);

/* Registers memory the caller owns and keeps mapped while the context
 * lives (page aligned: e.g. a hugetlbfs or shared anonymous mapping), as
 * page-sized buffers. */
int zcrx_register_area_mem(struct zcrx *z, void *addr, size_t len);

/* zcrx_register_area() with buffers of @buf_size bytes (since 1.2): a power
 * of two from the page size to zcrx_info()'s max_buf_size (2 MiB), 0 for
 * the page size; @len a multiple of it. Records never cross a buffer, and
 * zcrx_return() gives whole buffers back. A NIC writes a buffer larger than
 * a page only if it is physically contiguous, so for those the area is
 * hugetlbfs memory (MAP_HUGETLB, @len rounded up to whole huge pages); if
 * no huge pages are reserved (/proc/sys/vm/nr_hugepages) it falls back to
 * plain anonymous memory, which copy-only contexts (zcrx_bind_nodev())
 * take but zcrx_bind() refuses with -ERANGE. -EINVAL for a bad size or a
 * module without ZCRX_FEATURE_BUF_SIZE. */
int zcrx_register_area_buf(struct zcrx *z, size_t len, uint32_t buf_size);

/* zcrx_register_area_mem() with buffers of @buf_size bytes (since 1.2), as
 * zcrx_register_area_buf() describes; for zcrx_bind() each buffer must be
 * physically contiguous (hugetlbfs memory), -ERANGE otherwise. */
int zcrx_register_area_mem_buf(struct zcrx *z, void *addr, size_t len,
			       uint32_t buf_size);

/* The buffer size of the context's area: what records and returns are
 * counted in (the page size while it has none). Since 1.2. */
uint32_t zcrx_buf_size(const struct zcrx *z);

/* Installs the area on rx queue @rxq of @ifname (in the caller's network
 * namespace) and maps the refill ring; @rq_entries 0 sizes it for every
 * buffer of the area. Needs CAP_NET_ADMIN; data lands zero-copy when the
 * queue splits headers and the flow is steered to it, and is copied into
 * area buffers otherwise. zcrx_recv() needs a context that was bound (it
 * keeps working, by copy, after zcrx_unbind() or the device going away). */
int zcrx_bind(struct zcrx *z, const char *ifname, unsigned int rxq,
	      unsigned int rq_entries);
int zcrx_bind_ifindex(struct zcrx *z, unsigned int ifindex, unsigned int rxq,
		      unsigned int rq_entries);
int zcrx_unbind(struct zcrx *z);

/* Binds rx queue @rxq of the device the context is bound to as well: one
 * area and one refill ring serve all its queues (flows spread by RSS all
 * arrive zero-copy). -EINVAL if not bound, -EXDEV for another device,
 * -EEXIST for a queue it has; zcrx_unbind() unbinds them all. */
int zcrx_add_queue(struct zcrx *z, const char *ifname, unsigned int rxq);
int zcrx_add_queue_ifindex(struct zcrx *z, unsigned int ifindex, unsigned int rxq);

/* Makes the context copy-only: no queue and no CAP_NET_ADMIN; zcrx_recv() then
 * works on any connected TCP socket (loopback, veth, a NIC without header
 * split) and copies every byte into area buffers (ZCRX_REC_COPY), so that
 * one program runs everywhere and is zero-copy where a bound queue allows.
 * Maps the refill ring as zcrx_bind() does; -EBUSY while bound, -EINVAL
 * if the module lacks ZCRX_FEATURE_BIND_NODEV. */
int zcrx_bind_nodev(struct zcrx *z, unsigned int rq_entries);

/* Gives the area up so that another can be registered: -EBUSY while bound
 * or while any buffer is away (call again once they are home), -EINVAL
 * without one, -ENOTTY if the module lacks ZCRX_FEATURE_UNREGISTER_AREA. */
int zcrx_unregister_area(struct zcrx *z);

/* Receives from connected TCP socket @sockfd into at most *@nr records;
 * sets *@nr to the number filled. Returns the bytes they describe, 0 at
 * end of stream, or a negative errno (-EAGAIN with ZCRX_RECV_DONTWAIT and
 * nothing to read; -ENOBUFS: every buffer is held, give some back). Buffers
 * given back with zcrx_return() are handed to the module first. -EINVAL:
 * the context was never bound. Readiness: poll/epoll the socket itself. */
ssize_t zcrx_recv(struct zcrx *z, int sockfd, struct zcrx_rec *recs,
		  unsigned int *nr, unsigned int flags);

/* The bytes a record describes (rec->len of them), or NULL if the record is
 * not inside this context's area. Valid until the record is returned. */
const void *zcrx_data(const struct zcrx *z, const struct zcrx_rec *rec);

/* Gives the buffers of @n records back, one call for a batch (a merged
 * record's buffers all at once: since 1.4). Never fails
 * for lack of ring space: what does not fit waits and goes out at the next
 * zcrx_return() or zcrx_recv(). All or nothing: -ENOMEM (nothing given
 * back, call again) if that wait list cannot grow. */
int zcrx_return(struct zcrx *z, const struct zcrx_rec *recs, unsigned int n);

/* Refill entries waiting for ring space. */
unsigned int zcrx_return_pending(const struct zcrx *z);

/* Arms the events @arm (ZCRX_EVENT_*; 0 arms nothing) and collects those
 * that fired since the last call: *@fired gets them (they are cleared),
 * *@armed what is armed now (either pointer may be NULL). An armed event
 * fires once and is disarmed; while a fired one waits to be collected,
 * poll/epoll on zcrx_fd() report EPOLLPRI. Events stay armed across
 * zcrx_unbind() and a new bind. -EINVAL for unknown events, -ENOTTY if the
 * module lacks ZCRX_FEATURE_EVENTS. Since 1.3. */
int zcrx_events(struct zcrx *z, uint32_t arm, uint32_t *fired, uint32_t *armed);

/* Reads the counters the module keeps in the refill ring's mapping (no
 * system call): those of the latest binding's ring (a new bind starts a new
 * ring, from zero). -EINVAL if the context was never bound (no ring mapped),
 * -EOPNOTSUPP if the module keeps none (no ZCRX_FEATURE_EVENTS). Since 1.3. */
int zcrx_ring_stats(const struct zcrx *z, struct zcrx_ring_stats *out);

/* The version of the library the program runs with (which may be newer
 * than the header it was built with). A program that needs a function of
 * 1.N checks ZCRX_LIB_VERSION_MINOR at build time; the dynamic linker
 * refuses to start it with an older library of 1.5 or later (1.0-1.4 have
 * no symbol versions). Since 1.5. */
int zcrx_lib_version_major(void);
int zcrx_lib_version_minor(void);

#ifdef __cplusplus
}
#endif

#endif /* ZCRX_H */
