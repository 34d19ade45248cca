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
 */
#ifndef _UAPI_LINUX_ZCRX_RS_H
#define _UAPI_LINUX_ZCRX_RS_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define ZCRX_RS_API_VERSION	1

/* Buffers are one page each; an area is a whole number of buffers. */
#define ZCRX_RS_AREA_MAX_LEN	(1ULL << 32)	/* 4 GiB */
#define ZCRX_RS_RQ_MAX_ENTRIES	32768

/*
 * Offsets into the area are what records and refill entries carry: the
 * buffer is at area_base + off, off is a multiple of the page size for
 * refill entries.
 */

/*
 * ZCRX_RS_IOC_INFO: what this module supports, and module-wide counters of
 * live objects (for leak checks: all zero when nothing is in use).
 */
struct zcrx_rs_info {
	__u32	api_version;		/* out: ZCRX_RS_API_VERSION */
	__u32	page_size;		/* out: buffer size */
	__u64	features;		/* out: zero for now */
	__u64	contexts;		/* out: open contexts, this one included */
	__u64	areas;			/* out: registered areas alive */
	__u64	pinned_pages;		/* out: user pages pinned by all areas */
	__u64	providers;		/* out: bindings alive (until every page
					 * pool that used one is gone) */
	__u64	pools;			/* out: page pools using zcrx_rs */
	__u64	__resv[3];		/* out: zero */
};

/* ZCRX_RS_IOC_REGISTER_AREA: pin user memory as receive buffers. */
struct zcrx_rs_area_reg {
	__u64	addr;			/* in: page aligned */
	__u64	len;			/* in: page aligned, <= ZCRX_RS_AREA_MAX_LEN */
	__u32	flags;			/* in: must be zero */
	__u32	area_id;		/* out: 0 (one area per context) */
	__u64	__resv[2];		/* in: zero */
};

/* Refill ring layout in the mmap of the context (offset 0). */
struct zcrx_rs_ring_offsets {
	__u32	head;			/* kernel consumer index (u32) */
	__u32	tail;			/* user producer index (u32) */
	__u32	rqes;			/* array of struct zcrx_rs_rqe */
	__u32	__resv;
};

/* ZCRX_RS_IOC_BIND: install the provider on an rx queue. */
struct zcrx_rs_bind {
	__u32	ifindex;		/* in: in the caller's network namespace */
	__u32	rxq;			/* in: rx queue index */
	__u32	rq_entries;		/* in: refill ring size; out: rounded up
					 * to a power of two */
	__u32	flags;			/* in: must be zero */
	struct zcrx_rs_ring_offsets offsets;	/* out */
	__u64	mmap_len;		/* out: length to mmap at offset 0 */
	__u64	__resv[2];		/* in: zero */
};

/* One refill ring entry: hand buffer [off, off + page size) back. */
struct zcrx_rs_rqe {
	__u64	off;			/* page aligned offset in the area */
	__u32	len;			/* ignored (informational) */
	__u32	__pad;			/* must be zero */
};

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

/* ZCRX_RS_IOC_STATS: counters of this context. */
struct zcrx_rs_stats {
	__u64	zc_bytes;		/* handed over zero-copy */
	__u64	zc_records;
	__u64	copy_bytes;		/* copied into area buffers */
	__u64	copy_records;
	__u64	alloc_fail;		/* page pool asked, nothing to give */
	__u64	refill_bad;		/* bad refill ring entries skipped */
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

#define ZCRX_RS_IOC_INFO	_IOR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_INFO, struct zcrx_rs_info)
#define ZCRX_RS_IOC_REGISTER_AREA \
	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_REGISTER_AREA, struct zcrx_rs_area_reg)
#define ZCRX_RS_IOC_BIND	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_BIND, struct zcrx_rs_bind)
#define ZCRX_RS_IOC_RECV	_IOWR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_RECV, struct zcrx_rs_recv)
#define ZCRX_RS_IOC_STATS	_IOR(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_STATS, struct zcrx_rs_stats)
#define ZCRX_RS_IOC_UNBIND	_IO(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNBIND)

#endif /* _UAPI_LINUX_ZCRX_RS_H */
