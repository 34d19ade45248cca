// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! The netdev generic netlink family (`<linux/netdev.h>`), as much as a
//! receiver needs to tell its connections apart by rx queue: the NAPI
//! instance of each queue (`queue-get`), to match against a socket's
//! `SO_INCOMING_NAPI_ID`; `bind-tx`, which lets a socket transmit from a
//! dma-buf (devmem TX); and `bind-rx`, which makes a dma-buf the memory
//! provider of rx queues (devmem TCP).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::ethtool::{attr, for_each_attr, Genl};

const NETDEV_CMD_QUEUE_GET: u8 = 10;
const NETDEV_A_QUEUE_ID: u16 = 1;
const NETDEV_A_QUEUE_IFINDEX: u16 = 2;
const NETDEV_A_QUEUE_TYPE: u16 = 3;
const NETDEV_A_QUEUE_NAPI_ID: u16 = 4;
const NETDEV_QUEUE_TYPE_RX: u32 = 0;
const NETDEV_CMD_BIND_RX: u8 = 13;
const NETDEV_CMD_BIND_TX: u8 = 15;
const NETDEV_A_DMABUF_IFINDEX: u16 = 1;
const NETDEV_A_DMABUF_QUEUES: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const NETDEV_A_DMABUF_FD: u16 = 3;
const NETDEV_A_DMABUF_ID: u16 = 4;

/// The `queue-get` request attributes for rx queue `queue` of `ifindex`.
fn queue_get_attrs(ifindex: u32, queue: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr(&mut a, NETDEV_A_QUEUE_IFINDEX, &ifindex.to_ne_bytes());
    attr(&mut a, NETDEV_A_QUEUE_TYPE, &NETDEV_QUEUE_TYPE_RX.to_ne_bytes());
    attr(&mut a, NETDEV_A_QUEUE_ID, &queue.to_ne_bytes());
    a
}

/// The NAPI id of rx queue `queue` of device `ifindex` (in the caller's
/// network namespace); a `NotFound` error if the queue has no NAPI
/// instance (a driver that does not report one, or a device that is down),
/// the kernel's errno if it refused the request (no netdev family: the
/// lookup of the family fails with "no genetlink family netdev").
pub fn rx_queue_napi_id(ifindex: u32, queue: u32) -> io::Result<u32> {
    let mut g = Genl::open()?;
    let fam = g.family_id("netdev")?;
    let reply = g.request(fam, NETDEV_CMD_QUEUE_GET, &queue_get_attrs(ifindex, queue))?;
    let mut id = None;
    for_each_attr(reply.get(4..).unwrap_or(&[]), |t, p| {
        if t == NETDEV_A_QUEUE_NAPI_ID && p.len() >= 4 {
            id = Some(u32::from_ne_bytes([p[0], p[1], p[2], p[3]]));
        }
    });
    id.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("rx queue {queue} of ifindex {ifindex} reports no NAPI id")))
}

/// The binding id in a `bind-tx` or `bind-rx` reply (`what`).
fn dmabuf_id(reply: &[u8], what: &str) -> io::Result<u32> {
    let mut id = None;
    for_each_attr(reply.get(4..).unwrap_or(&[]), |t, p| {
        if t == NETDEV_A_DMABUF_ID && p.len() >= 4 {
            id = Some(u32::from_ne_bytes([p[0], p[1], p[2], p[3]]));
        }
    });
    id.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{what} reply without an id")))
}

/// A dma-buf bound for transmission on a device (`bind-tx`). The kernel
/// keeps the binding while the netlink socket that asked for it is open:
/// dropping this ends it.
pub struct TxBinding {
    _sock: Genl,
    id: u32,
}

impl TxBinding {
    /// The binding's id, for the `SCM_DEVMEM_DMABUF` control message of a
    /// `sendmsg(MSG_ZEROCOPY)` whose iovec addresses are offsets into the
    /// dma-buf.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Binds `dmabuf` for transmission on device `ifindex` (in the caller's
/// network namespace; needs `CAP_NET_ADMIN` and a device that can transmit
/// from unreadable memory, else the kernel's errno and message).
pub fn bind_tx(ifindex: u32, dmabuf: BorrowedFd<'_>) -> io::Result<TxBinding> {
    let mut g = Genl::open()?;
    let fam = g.family_id("netdev")?;
    let mut a = Vec::new();
    attr(&mut a, NETDEV_A_DMABUF_IFINDEX, &ifindex.to_ne_bytes());
    attr(&mut a, NETDEV_A_DMABUF_FD, &(dmabuf.as_raw_fd() as u32).to_ne_bytes());
    let id = dmabuf_id(&g.request(fam, NETDEV_CMD_BIND_TX, &a)?, "bind-tx")?;
    Ok(TxBinding { _sock: g, id })
}

/// A dma-buf bound as the memory provider of rx queues (`bind-rx`), for
/// as long as this lives (the netlink socket that asked for it).
pub struct RxBinding {
    _sock: Genl,
    id: u32,
}

impl RxBinding {
    /// The binding's id (`dmabuf_id` of `SCM_DEVMEM_DMABUF` messages).
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// Binds `dmabuf` to rx queues `queues` of device `ifindex` (in the
/// caller's network namespace; needs `CAP_NET_ADMIN`, header split on and
/// a device with the queue API, else the kernel's errno and message).
pub fn bind_rx(ifindex: u32, queues: &[u32], dmabuf: BorrowedFd<'_>) -> io::Result<RxBinding> {
    let mut g = Genl::open()?;
    let fam = g.family_id("netdev")?;
    let mut a = Vec::new();
    attr(&mut a, NETDEV_A_DMABUF_IFINDEX, &ifindex.to_ne_bytes());
    for q in queues {
        let mut nest = Vec::new();
        attr(&mut nest, NETDEV_A_QUEUE_ID, &q.to_ne_bytes());
        attr(&mut nest, NETDEV_A_QUEUE_TYPE, &NETDEV_QUEUE_TYPE_RX.to_ne_bytes());
        attr(&mut a, NETDEV_A_DMABUF_QUEUES | NLA_F_NESTED, &nest);
    }
    attr(&mut a, NETDEV_A_DMABUF_FD, &(dmabuf.as_raw_fd() as u32).to_ne_bytes());
    let id = dmabuf_id(&g.request(fam, NETDEV_CMD_BIND_RX, &a)?, "bind-rx")?;
    Ok(RxBinding { _sock: g, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_id_from_reply() {
        let mut r = vec![0u8; 4];
        attr(&mut r, NETDEV_A_DMABUF_ID, &7u32.to_ne_bytes());
        assert_eq!(dmabuf_id(&r, "bind-rx").unwrap(), 7);
        let e = dmabuf_id(&[0u8; 4], "bind-rx").unwrap_err();
        assert_eq!(e.to_string(), "bind-rx reply without an id");
    }

    #[test]
    fn queue_get_request() {
        let a = queue_get_attrs(3, 2);
        assert_eq!(a.len(), 24);
        let mut seen = Vec::new();
        for_each_attr(&a, |t, p| seen.push((t, u32::from_ne_bytes([p[0], p[1], p[2], p[3]]))));
        assert_eq!(seen, vec![(NETDEV_A_QUEUE_IFINDEX, 3), (NETDEV_A_QUEUE_TYPE, 0), (NETDEV_A_QUEUE_ID, 2)]);
    }
}
