/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * zcrx_rs: zero-copy TCP receive into pinned user memory, without io_uring.
 *
 * The one definition of the uAPI of /dev/zcrx. The module's and the
 * userspace tools' Rust definitions are generated from this file
 * (scripts/gen-uapi.sh); a test checks both layouts against the C compiler.
 * Documentation/zcrx-rs.rst describes the semantics.
 *
 * Rules: every struct has fixed-size fields and explicit padding; reserved
 * fields and unknown flags must be zero (EINVAL otherwise); each struct
 * starts with nothing version-dependent and grows only at the end, its size
 * being part of the ioctl number.
 *
 * Where later fields took over reserved or padding bytes, an anonymous
 * union keeps the first header's name (zcrx_rs 1.0) for the same bytes, so
 * a program written against it still builds and, with those bytes zero,
 * runs as it did (tools/uapi-compat/ checks this). One exception could not
 * be avoided: headers of 1.2 to 1.4 named the reserved tails of
 * zcrx_rs_area_reg and zcrx_rs_info __resv too, at other offsets; in C,
 * __resv is 1.0's again (it starts at buf_size and max_buf_size). A
 * program that zeroes the whole struct, or leaves __resv alone, is not
 * affected. The generated Rust definitions see only the current names
 * (scripts/gen-uapi.sh defines __ZCRX_RS_CURRENT_NAMES, under which the
 * tails are __resv as in 1.2 to 1.4); the layout is the same either way.
 */
#ifndef _UAPI_LINUX_ZCRX_RS_H
#define _UAPI_LINUX_ZCRX_RS_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define ZCRX_RS_API_VERSION	1

/*
 * Buffers are one page each unless REGISTER_AREA asks for larger ones
 * (buf_size: a power of two up to ZCRX_RS_BUF_MAX_SIZE); an area is a whole
 * number of buffers.
 */
#define ZCRX_RS_AREA_MAX_LEN	(1ULL << 32)	/* 4 GiB */
#define ZCRX_RS_BUF_MAX_SIZE	(1U << 21)	/* 2 MiB */
#define ZCRX_RS_RQ_MAX_ENTRIES	32768
/* Most buffers a merged record or a ZCRX_RS_RQE_RANGE entry touches. */
#define ZCRX_RS_RANGE_MAX_BUFS	32

/*
 * Offsets into the area are what records and refill entries carry: the
 * buffer is at area_base + off, off is a multiple of the buffer size for
 * refill entries.
 */

/*
 * ZCRX_RS_IOC_INFO: what this module supports, and module-wide counters of
 * live objects (for leak checks: all zero when nothing is in use).
 */
struct zcrx_rs_info {
	__u32	api_version;		/* out: ZCRX_RS_API_VERSION */
	__u32	page_size;		/* out: page size: the default and
					 * smallest buffer size */
	__u64	features;		/* out: ZCRX_RS_FEATURE_* */
	__u64	contexts;		/* out: open contexts, this one included */
	__u64	areas;			/* out: registered areas alive */
	__u64	pinned_pages;		/* out: user pages pinned by all areas */
	__u64	providers;		/* out: bindings alive, one per context
					 * however many queues (until every
					 * page pool that used one is gone) */
	__u64	pools;			/* out: page pools using zcrx_rs */
#ifdef __ZCRX_RS_CURRENT_NAMES
	__u32	max_buf_size;
	__u32	__pad;
	__u64	__resv[2];
#else
	__extension__ union {
		__u64	__resv[3];	/* 1.0's name for all 24 bytes */
		__extension__ struct {
			__u32	max_buf_size;	/* out: largest buf_size of an
						 * area (ZCRX_RS_FEATURE_BUF_SIZE) */
			__u32	__pad;		/* out: zero */
			/* __u64 __resv[2] in the Rust definitions: zero */
		};
	};
#endif
};

/* INFO features: what this module supports beyond API version 1's base. */
#define ZCRX_RS_FEATURE_UNREGISTER_AREA	(1ULL << 0)	/* ZCRX_RS_IOC_UNREGISTER_AREA */
#define ZCRX_RS_FEATURE_BIND_NODEV	(1ULL << 1)	/* ZCRX_RS_BIND_NODEV */
#define ZCRX_RS_FEATURE_ADD_QUEUE	(1ULL << 2)	/* ZCRX_RS_BIND_ADD_QUEUE */
#define ZCRX_RS_FEATURE_BUF_SIZE	(1ULL << 3)	/* zcrx_rs_area_reg.buf_size */
#define ZCRX_RS_FEATURE_EVENTS		(1ULL << 4)	/* ZCRX_RS_IOC_EVENTS, poll(),
							 * ring stats */
#define ZCRX_RS_FEATURE_DMABUF		(1ULL << 5)	/* ZCRX_RS_AREA_DMABUF */
#define ZCRX_RS_FEATURE_NETLINK		(1ULL << 6)	/* queue-get/page-pool-get
							 * show mp-provider */
#define ZCRX_RS_FEATURE_SHARE		(1ULL << 7)	/* a context fd serves any
							 * process holding it
							 * (SCM_RIGHTS, fork) */
#define ZCRX_RS_FEATURE_MERGE		(1ULL << 8)	/* ZCRX_RS_RECV_MERGE,
							 * ZCRX_RS_RQE_RANGE */

/*
 * ZCRX_RS_IOC_REGISTER_AREA: pin user memory as receive buffers.
 *
 * A buffer larger than a page must be one range of DMA addresses for a NIC
 * to write it (without an IOMMU: physically contiguous): back the area with
 * hugetlbfs memory, else BIND fails with ERANGE. A copy-only context
 * (ZCRX_RS_BIND_NODEV) takes any memory.
 *
 * With ZCRX_RS_AREA_DMABUF the area is the first len bytes of the dma-buf
 * dmabuf_fd (udmabuf, a GPU's memory) instead of user memory at addr
 * (which must be 0): the NIC writes it, the module never maps it for the
 * CPU, so data that would need a copy stays in the socket (RECV:
 * EOPNOTSUPP) and a copy-only context cannot use it.
 */
struct zcrx_rs_area_reg {
	__u64	addr;			/* in: page aligned (0 for a dma-buf) */
	__u64	len;			/* in: a multiple of the buffer size,
					 * <= ZCRX_RS_AREA_MAX_LEN */
	__u32	flags;			/* in: ZCRX_RS_AREA_* */
	__u32	area_id;		/* out: 0 (one area per context) */
#ifdef __ZCRX_RS_CURRENT_NAMES
	__u32	buf_size;
	__s32	dmabuf_fd;
	__u64	__resv[1];
#else
	__extension__ union {
		__u64	__resv[2];	/* 1.0's name for all 16 bytes: zero
					 * is the default of each field */
		__extension__ struct {
			__u32	buf_size;	/* in: bytes per buffer, a power
						 * of two from the page size to
						 * ZCRX_RS_BUF_MAX_SIZE; 0: the
						 * page size. The queues bound
						 * must take buffers of this
						 * size (their driver's
						 * rx_page_size support) */
			__s32	dmabuf_fd;	/* in: with ZCRX_RS_AREA_DMABUF;
						 * else 0 */
			/* __u64 __resv[1] in the Rust definitions: zero */
		};
	};
#endif
};

#define ZCRX_RS_AREA_DMABUF	(1U << 0)	/* the area is a dma-buf */

/* Refill ring layout in the mmap of the context (offset 0). */
struct zcrx_rs_ring_offsets {
	__u32	head;			/* kernel consumer index (u32) */
	__u32	tail;			/* user producer index (u32) */
	__u32	rqes;			/* array of struct zcrx_rs_rqe */
#ifdef __ZCRX_RS_CURRENT_NAMES
	__u32	stats;
#else
	__extension__ union {
		__u32	stats;		/* struct zcrx_rs_ring_stats
					 * (ZCRX_RS_FEATURE_EVENTS) */
		__u32	__resv;		/* 1.0's name */
	};
#endif
};

/*
 * Counters of the current binding in the ring mapping, brought up to date
 * by the kernel as they change (each a naturally aligned __u64 that only
 * grows): readable with no syscall. The first four are ZCRX_RS_IOC_STATS's
 * counters of the same names.
 */
struct zcrx_rs_ring_stats {
	__u64	zc_bytes;
	__u64	copy_bytes;
	__u64	copy_records;
	__u64	alloc_fail;
	__u64	events;			/* armed events fired */
	__u64	__resv[3];
};

/*
 * ZCRX_RS_IOC_BIND: install the provider on an rx queue (CAP_NET_ADMIN), or
 * with ZCRX_RS_BIND_NODEV make the context copy-only: no queue, ifindex
 * and rxq zero, no CAP_NET_ADMIN; RECV then copies every byte into the area.
 * With ZCRX_RS_BIND_ADD_QUEUE a bound context binds one more rx queue of
 * the same device: one area and one refill ring serve all its queues.
 */
struct zcrx_rs_bind {
	__u32	ifindex;		/* in: in the caller's network namespace */
	__u32	rxq;			/* in: rx queue index */
	__u32	rq_entries;		/* in: refill ring size; out: rounded up
					 * to a power of two */
	__u32	flags;			/* in: ZCRX_RS_BIND_* */
	struct zcrx_rs_ring_offsets offsets;	/* out */
	__u64	mmap_len;		/* out: length to mmap at offset 0 */
	__u64	__resv[2];		/* in: zero */
};

#define ZCRX_RS_BIND_NODEV	(1U << 0)	/* copy-only: no queue */
#define ZCRX_RS_BIND_ADD_QUEUE	(1U << 1)	/* one more queue, same device */

/*
 * One refill ring entry: hand buffer [off, off + buffer size) back, or, with
 * ZCRX_RS_RQE_RANGE, one reference to each buffer that [off, off + len)
 * touches: a record returned as RECV gave it, merged or not.
 */
struct zcrx_rs_rqe {
	__u64	off;			/* buffer aligned offset in the area
					 * (any offset with ZCRX_RS_RQE_RANGE) */
	__u32	len;			/* ignored (informational); bytes, at
					 * least 1, with ZCRX_RS_RQE_RANGE
					 * (touching at most
					 * ZCRX_RS_RANGE_MAX_BUFS buffers) */
#ifdef __ZCRX_RS_CURRENT_NAMES
	__u32	flags;
#else
	__extension__ union {
		__u32	flags;		/* 0 or ZCRX_RS_RQE_RANGE */
		__u32	__pad;		/* 1.0's name */
	};
#endif
};

#define ZCRX_RS_RQE_RANGE	(1U << 0)	/* [off, off + len), one
						 * reference per buffer it
						 * touches */

/* One receive record: the next @len bytes of the stream are at @off. */
struct zcrx_rs_rec {
	__u64	off;			/* offset in the area */
	__u32	len;
	__u32	flags;			/* ZCRX_RS_REC_* */
};

#define ZCRX_RS_REC_COPY	(1U << 0)	/* copied into the buffer, not
						 * placed there by the NIC */

/* ZCRX_RS_IOC_RECV: receive from a TCP socket into records. */
struct zcrx_rs_recv {
	__s32	sockfd;			/* in: a connected TCP socket */
	__u32	flags;			/* in: ZCRX_RS_RECV_* */
	__u64	recs;			/* in: user pointer to zcrx_rs_rec[] */
	__u32	nr_recs;		/* in: capacity; out: records filled */
	__u32	__pad;			/* in: zero */
	__u64	bytes;			/* out: bytes described by the records */
	__u64	__resv[2];		/* in: zero */
};

#define ZCRX_RS_RECV_DONTWAIT	(1U << 0)	/* like MSG_DONTWAIT */
#define ZCRX_RS_RECV_MERGE	(1U << 1)	/* one record for consecutive
						 * buffers of a packet (see
						 * below) */

/*
 * With ZCRX_RS_RECV_MERGE, a zero-copy record may span several buffers: a
 * piece of the stream that starts a buffer and follows the previous
 * record's last byte in the area extends that record instead of starting
 * one, within one packet (GRO/LRO skb), up to ZCRX_RS_RANGE_MAX_BUFS
 * buffers. Such a record holds one reference to each buffer it touches; give it back with one ZCRX_RS_RQE_RANGE entry
 * of its off and len (or one plain entry per buffer). Without the flag
 * every record lies within one buffer.
 */

/*
 * ZCRX_RS_IOC_EVENTS: arm events, collect those that fired. An armed event
 * fires once (then it is disarmed): poll()/epoll on the context fd then
 * report EPOLLPRI until a call collects it. Arming what is armed already,
 * or 0, only collects.
 */
struct zcrx_rs_events {
	__u32	arm;			/* in: ZCRX_RS_EVENT_* to arm */
	__u32	fired;			/* out: events that fired since the last
					 * call (collected: cleared) */
	__u32	armed;			/* out: events armed now */
	__u32	__pad;			/* in: zero */
	__u64	__resv[2];		/* in: zero */
};

#define ZCRX_RS_EVENT_ALLOC_FAIL	(1U << 0)	/* a page pool of the
							 * context found no
							 * buffer (ring dry) */
#define ZCRX_RS_EVENT_COPY		(1U << 1)	/* RECV copied data */

/* ZCRX_RS_IOC_STATS: counters of this context. */
struct zcrx_rs_stats {
	__u64	zc_bytes;		/* handed over zero-copy */
	__u64	zc_records;
	__u64	copy_bytes;		/* copied into area buffers */
	__u64	copy_records;
	__u64	alloc_fail;		/* page pool asked, nothing to give */
	__u64	refill_bad;		/* bad refill ring entries skipped
					 * (and buffers of ranges the user
					 * did not hold) */
	__u64	refill_ok;		/* buffers returned through the ring */
	__u64	user_held;		/* buffers the user holds now */
	__u64	area_buffers;		/* buffers in the area */
	__u64	free_buffers;		/* buffers on the free list now */
	__u64	__resv[6];
};

#define ZCRX_RS_IOC_MAGIC		0xBD
#define ZCRX_RS_IOC_NR_INFO		0x01
#define ZCRX_RS_IOC_NR_REGISTER_AREA	0x02
#define ZCRX_RS_IOC_NR_BIND		0x03
#define ZCRX_RS_IOC_NR_RECV		0x04
#define ZCRX_RS_IOC_NR_STATS		0x05
#define ZCRX_RS_IOC_NR_UNBIND		0x06
#define ZCRX_RS_IOC_NR_UNREGISTER_AREA	0x07
#define ZCRX_RS_IOC_NR_EVENTS		0x08

#define ZCRX_RS_IOC_INFO	_IOR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_INFO, struct zcrx_rs_info)
#define ZCRX_RS_IOC_REGISTER_AREA \
	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_REGISTER_AREA, struct zcrx_rs_area_reg)
#define ZCRX_RS_IOC_BIND	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_BIND, struct zcrx_rs_bind)
#define ZCRX_RS_IOC_RECV	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_RECV, struct zcrx_rs_recv)
#define ZCRX_RS_IOC_STATS	_IOR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_STATS, struct zcrx_rs_stats)
#define ZCRX_RS_IOC_UNBIND	_IO(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNBIND)
/*
 * ZCRX_RS_IOC_UNREGISTER_AREA: give the area up (unpinned, uncharged) so
 * that another can be registered. Only while not bound and with every
 * buffer home: EBUSY otherwise (give buffers back; a pool of the earlier
 * binding may still be draining). The refill ring goes with it.
 */
#define ZCRX_RS_IOC_UNREGISTER_AREA \
	_IO(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNREGISTER_AREA)
#define ZCRX_RS_IOC_EVENTS \
	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_EVENTS, struct zcrx_rs_events)

#endif /* _UAPI_LINUX_ZCRX_RS_H */
