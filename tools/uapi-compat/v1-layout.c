// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
/*
 * Every name the first released zcrx_rs uAPI header (1.0, v1/linux/) gave:
 * each struct's size, each field's offset and size, each macro's value.
 * scripts/uapi-compat.sh builds this against 1.0's header and against the
 * current one and requires the two outputs to be the same: a name may not
 * go away, move or change its size or value.
 */
#include <stddef.h>
#include <stdio.h>

#include <linux/zcrx_rs.h>

#define S(t)	printf("sizeof %s %zu\n", #t, sizeof(struct t))
#define F(t, f)	printf("field %s.%s %zu %zu\n", #t, #f, offsetof(struct t, f), \
		       sizeof(((struct t *)0)->f))
#define V(m)	printf("value %s %llu\n", #m, (unsigned long long)(m))

int main(void)
{
	V(ZCRX_RS_API_VERSION);
	V(ZCRX_RS_AREA_MAX_LEN);
	V(ZCRX_RS_RQ_MAX_ENTRIES);

	S(zcrx_rs_info);
	F(zcrx_rs_info, api_version);
	F(zcrx_rs_info, page_size);
	F(zcrx_rs_info, features);
	F(zcrx_rs_info, contexts);
	F(zcrx_rs_info, areas);
	F(zcrx_rs_info, pinned_pages);
	F(zcrx_rs_info, providers);
	F(zcrx_rs_info, pools);
	F(zcrx_rs_info, __resv);

	S(zcrx_rs_area_reg);
	F(zcrx_rs_area_reg, addr);
	F(zcrx_rs_area_reg, len);
	F(zcrx_rs_area_reg, flags);
	F(zcrx_rs_area_reg, area_id);
	F(zcrx_rs_area_reg, __resv);

	S(zcrx_rs_ring_offsets);
	F(zcrx_rs_ring_offsets, head);
	F(zcrx_rs_ring_offsets, tail);
	F(zcrx_rs_ring_offsets, rqes);
	F(zcrx_rs_ring_offsets, __resv);

	S(zcrx_rs_bind);
	F(zcrx_rs_bind, ifindex);
	F(zcrx_rs_bind, rxq);
	F(zcrx_rs_bind, rq_entries);
	F(zcrx_rs_bind, flags);
	F(zcrx_rs_bind, offsets);
	F(zcrx_rs_bind, mmap_len);
	F(zcrx_rs_bind, __resv);

	S(zcrx_rs_rqe);
	F(zcrx_rs_rqe, off);
	F(zcrx_rs_rqe, len);
	F(zcrx_rs_rqe, __pad);

	S(zcrx_rs_rec);
	F(zcrx_rs_rec, off);
	F(zcrx_rs_rec, len);
	F(zcrx_rs_rec, flags);
	V(ZCRX_RS_REC_COPY);

	S(zcrx_rs_recv);
	F(zcrx_rs_recv, sockfd);
	F(zcrx_rs_recv, flags);
	F(zcrx_rs_recv, recs);
	F(zcrx_rs_recv, nr_recs);
	F(zcrx_rs_recv, __pad);
	F(zcrx_rs_recv, bytes);
	F(zcrx_rs_recv, __resv);
	V(ZCRX_RS_RECV_DONTWAIT);

	S(zcrx_rs_stats);
	F(zcrx_rs_stats, zc_bytes);
	F(zcrx_rs_stats, zc_records);
	F(zcrx_rs_stats, copy_bytes);
	F(zcrx_rs_stats, copy_records);
	F(zcrx_rs_stats, alloc_fail);
	F(zcrx_rs_stats, refill_bad);
	F(zcrx_rs_stats, refill_ok);
	F(zcrx_rs_stats, user_held);
	F(zcrx_rs_stats, area_buffers);
	F(zcrx_rs_stats, free_buffers);
	F(zcrx_rs_stats, __resv);

	V(ZCRX_RS_IOC_MAGIC);
	V(ZCRX_RS_IOC_NR_INFO);
	V(ZCRX_RS_IOC_NR_REGISTER_AREA);
	V(ZCRX_RS_IOC_NR_BIND);
	V(ZCRX_RS_IOC_NR_RECV);
	V(ZCRX_RS_IOC_NR_STATS);
	V(ZCRX_RS_IOC_NR_UNBIND);
	V(ZCRX_RS_IOC_INFO);
	V(ZCRX_RS_IOC_REGISTER_AREA);
	V(ZCRX_RS_IOC_BIND);
	V(ZCRX_RS_IOC_RECV);
	V(ZCRX_RS_IOC_STATS);
	V(ZCRX_RS_IOC_UNBIND);
	return 0;
}
