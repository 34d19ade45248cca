// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The uAPI of `/dev/zcrx`, generated from the one C header
//! (`tools/include/uapi/linux/zcrx_rs.h`) by `scripts/gen-uapi.sh`. The
//! generated file carries clang's sizes and offsets as compile-time
//! assertions; the userspace crate includes the very same file (which lives
//! in its package: `tools/zcrx/src/uapi_bindings.rs`).

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    dead_code,
    unreachable_pub,
    clippy::all,
    missing_docs
)]
mod generated {
    include!("../tools/zcrx/src/uapi_bindings.rs");
}

pub(crate) use generated::*;

use kernel::ioctl::{_IO, _IOR, _IOWR};

use crate::mm::pod::pod;

pod!(
    zcrx_rs_info {
        api_version,
        page_size,
        features,
        contexts,
        areas,
        pinned_pages,
        providers,
        pools,
        max_buf_size,
        __pad,
        __resv
    },
    zcrx_rs_area_reg {
        addr,
        len,
        flags,
        area_id,
        buf_size,
        dmabuf_fd,
        __resv
    },
    zcrx_rs_ring_offsets {
        head,
        tail,
        rqes,
        stats
    },
    zcrx_rs_ring_stats {
        zc_bytes,
        copy_bytes,
        copy_records,
        alloc_fail,
        events,
        __resv
    },
    zcrx_rs_events {
        arm,
        fired,
        armed,
        __pad,
        __resv
    },
    zcrx_rs_bind {
        ifindex,
        rxq,
        rq_entries,
        flags,
        offsets,
        mmap_len,
        __resv
    },
    zcrx_rs_rqe { off, len, flags },
    zcrx_rs_recv {
        sockfd,
        flags,
        recs,
        nr_recs,
        __pad,
        bytes,
        __resv
    },
    zcrx_rs_rec { off, len, flags },
    zcrx_rs_stats {
        zc_bytes,
        zc_records,
        copy_bytes,
        copy_records,
        alloc_fail,
        refill_bad,
        refill_ok,
        user_held,
        area_buffers,
        free_buffers,
        __resv
    },
);

/// `ZCRX_RS_IOC_INFO`.
pub(crate) const IOC_INFO: u32 = _IOR::<zcrx_rs_info>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_INFO);
/// `ZCRX_RS_IOC_REGISTER_AREA`.
pub(crate) const IOC_REGISTER_AREA: u32 =
    _IOWR::<zcrx_rs_area_reg>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_REGISTER_AREA);
/// `ZCRX_RS_IOC_BIND`.
pub(crate) const IOC_BIND: u32 = _IOWR::<zcrx_rs_bind>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_BIND);
/// `ZCRX_RS_IOC_RECV`.
pub(crate) const IOC_RECV: u32 = _IOWR::<zcrx_rs_recv>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_RECV);
/// `ZCRX_RS_IOC_STATS`.
pub(crate) const IOC_STATS: u32 = _IOR::<zcrx_rs_stats>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_STATS);
/// `ZCRX_RS_IOC_UNBIND`.
pub(crate) const IOC_UNBIND: u32 = _IO(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNBIND);
/// `ZCRX_RS_IOC_EVENTS`.
pub(crate) const IOC_EVENTS: u32 =
    _IOWR::<zcrx_rs_events>(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_EVENTS);
/// `ZCRX_RS_IOC_UNREGISTER_AREA`.
pub(crate) const IOC_UNREGISTER_AREA: u32 = _IO(ZCRX_RS_IOC_MAGIC, ZCRX_RS_IOC_NR_UNREGISTER_AREA);
