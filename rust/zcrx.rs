// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A binding of an area to one rx queue: the memory provider proper.
//!
//! [`Zcrx`] is the provider's private data (`mp_priv`). It is shared by the
//! context that created it, the rx queue binding (through the context,
//! which always unbinds before it lets go), and every page pool created for
//! the queue (from `init` to `destroy`, see [`crate::net::provider`]). It
//! is freed when the last of them is gone, so no pool can ever hand out a
//! buffer of freed memory.
//!
//! Lock order: `netdev` (mutex) → the device's instance lock (taken by
//! [`Zcrx::unbind`] after releasing `netdev`, so never nested with the
//! core's lock → `netdev` order of `uninstall`). `ring_head` (BH spinlock)
//! nests inside nothing and takes the area's free list lock.

use kernel::{
    new_mutex, new_spinlock_bh,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex, SpinLockBh},
};

use crate::area::Area;
use crate::mm::{dma::DmaDevice, pin::PAGE_SIZE};
use crate::net::{
    netdev::{LockedNetDev, NetDevRefBox},
    netmem::Netmem,
    page_pool::{AllocBatch, PagePool},
    provider::{self, memory_provider_ops, MemoryProvider},
};
use crate::refill::{parse_rqe, RefillRing};
use crate::stats::{Stats, GLOBAL};

memory_provider_ops!(ZCRX_OPS, Zcrx);

/// One bound rx queue.
#[pin_data(PinnedDrop)]
pub(crate) struct Zcrx {
    area: Arc<Area>,
    ring: RefillRing,
    /// The kernel's consumer position in the refill ring.
    #[pin]
    ring_head: SpinLockBh<u32>,
    /// The bound device; `None` once unbound or uninstalled.
    #[pin]
    netdev: Mutex<Option<NetDevRefBox>>,
    dma_dev: DmaDevice,
    ifindex: u32,
    rxq: u32,
    pub(crate) stats: Stats,
}

impl Zcrx {
    /// Binds `area` to rx queue `rxq` of device `ifindex` (current network
    /// namespace) with a refill ring of `entries` entries.
    pub(crate) fn bind(area: Arc<Area>, ifindex: u32, rxq: u32, entries: u32) -> Result<Arc<Self>> {
        let dev = LockedNetDev::lock_by_index(ifindex)?;
        if rxq >= dev.rx_queues() {
            pr_info!(
                "bind {} rxq {}: the device has {} rx queues\n",
                dev.name(),
                rxq,
                dev.rx_queues()
            );
            return Err(ERANGE);
        }
        if !dev.header_split_ready() {
            pr_info!(
                "bind {} rxq {}: needs tcp-data-split on and hds-thresh 0\n",
                dev.name(),
                rxq
            );
            return Err(EINVAL);
        }
        let Some(dma_dev) = dev.queue_dma_dev(rxq) else {
            pr_info!(
                "bind {} rxq {}: the queue has no DMA device\n",
                dev.name(),
                rxq
            );
            return Err(EOPNOTSUPP);
        };
        let ring = RefillRing::new(entries)?;
        let netdev = dev.hold()?;
        area.map_dma(dma_dev.clone())?;
        let area2 = area.clone();
        let zcrx = Arc::pin_init(
            try_pin_init!(Self {
                area: area2,
                ring,
                ring_head <- new_spinlock_bh!(0, "Zcrx::ring_head"),
                netdev <- new_mutex!(Some(netdev), "Zcrx::netdev"),
                dma_dev,
                ifindex,
                rxq,
                stats: Stats::new(),
            }),
            GFP_KERNEL,
        )
        .inspect_err(|_| area.unmap_dma())?;
        GLOBAL.providers.add(1);
        let params = provider::params(&ZCRX_OPS, &*zcrx);
        if let Err((e, msg)) = dev.mp_open_rxq(rxq, &params) {
            pr_info!(
                "bind {} rxq {}: {} (errno {})\n",
                dev.name(),
                rxq,
                msg.map(|m| m.to_str().unwrap_or("?")).unwrap_or("failed"),
                -e.to_errno()
            );
            // Nothing refers to `zcrx` but us: dropping it unmaps and frees.
            return Err(e);
        }
        Ok(zcrx)
    }

    /// The area.
    pub(crate) fn area(&self) -> &Arc<Area> {
        &self.area
    }

    /// The refill ring.
    pub(crate) fn ring(&self) -> &RefillRing {
        &self.ring
    }

    /// Whether the queue is still bound to us.
    pub(crate) fn is_bound(&self) -> bool {
        self.netdev.lock().is_some()
    }

    /// Unbinds the queue (it restarts without us). Idempotent; a no-op after
    /// the device went away.
    pub(crate) fn unbind(&self) {
        let Some(netdev) = self.netdev.lock().take() else {
            return;
        };
        let params = provider::params(&ZCRX_OPS, self);
        netdev.lock().mp_close_rxq(self.rxq, &params);
    }

    /// Gives buffer `idx`, whose last reference was just dropped, back to
    /// its pool, or to the free list when it belongs to none (a copy buffer).
    fn return_buffer(&self, idx: usize) {
        let niovs = self.area.niovs();
        match niovs.pool_of(idx) {
            Some(pool) => pool.put_unrefed(niovs.netmem(idx)),
            None => self.area.release(idx),
        }
    }

    /// The user gives buffer `idx` back once. False if the user did not
    /// hold it (the caller counts that as a bad refill entry).
    pub(crate) fn user_return(&self, idx: usize) -> bool {
        if !self.area.urefs().put(idx) {
            return false;
        }
        if self.area.niovs().netmem(idx).pp_unref_and_test() {
            self.return_buffer(idx);
        }
        true
    }

    /// Takes back every buffer the user still holds (teardown).
    pub(crate) fn scrub(&self) {
        for idx in 0..self.area.nbufs() {
            let n = self.area.urefs().take_all(idx);
            if n != 0 && self.area.niovs().netmem(idx).pp_unref(i64::from(n)) == 0 {
                self.return_buffer(idx);
            }
        }
    }

    /// Returns every buffer the user put on the refill ring to its pool or
    /// the free list. For when no pool drives the ring: after unbinding, or
    /// when copies need buffers while the queue sees no traffic.
    pub(crate) fn drain_refill(&self) {
        let mut head = self.ring_head.lock();
        let n = self.ring.available(*head);
        let (mut ok, mut bad) = (0u64, 0u64);
        for _ in 0..n {
            let (off, pad) = self.ring.read(*head);
            *head = head.wrapping_add(1);
            match parse_rqe(off, pad, self.area.nbufs()) {
                Ok(idx) if self.user_return(idx) => ok += 1,
                _ => bad += 1,
            }
        }
        self.ring.set_head(*head);
        drop(head);
        self.stats.refill_ok.add(ok);
        self.stats.refill_bad.add(bad);
    }

    /// Takes buffers from the refill ring for `batch`'s pool.
    fn refill_from_ring(&self, batch: &mut AllocBatch<'_>) {
        let mut head = self.ring_head.lock();
        let n = self.ring.available(*head).min(batch.room() as u32);
        if n == 0 {
            return;
        }
        let (mut ok, mut bad) = (0u64, 0u64);
        let niovs = self.area.niovs();
        for _ in 0..n {
            let (off, pad) = self.ring.read(*head);
            *head = head.wrapping_add(1);
            let Ok(idx) = parse_rqe(off, pad, self.area.nbufs()) else {
                bad += 1;
                continue;
            };
            if !self.area.urefs().put(idx) {
                bad += 1;
                continue;
            }
            ok += 1;
            let nm = niovs.netmem(idx);
            if !nm.pp_unref_and_test() {
                continue;
            }
            match niovs.pool_of(idx) {
                Some(pool) if core::ptr::eq(pool, batch.pool()) => batch.push(nm),
                _ => self.return_buffer(idx),
            }
        }
        self.ring.set_head(*head);
        drop(head);
        self.stats.refill_ok.add(ok);
        self.stats.refill_bad.add(bad);
    }
}

impl MemoryProvider for Zcrx {
    fn alloc_netmems(this: ArcBorrow<'_, Self>, batch: &mut AllocBatch<'_>) {
        this.refill_from_ring(batch);
        if batch.len() == 0 {
            this.area.alloc_free_batch(batch);
        }
        if batch.len() == 0 {
            this.stats.alloc_fail.add(1);
            return;
        }
        let pool = batch.pool();
        for nm in batch.netmems() {
            pool.sync_for_device(nm, PAGE_SIZE as u32);
        }
    }

    fn release_netmem(this: ArcBorrow<'_, Self>, _pool: &PagePool, nm: Netmem<'_>) {
        let niovs = this.area.niovs();
        match niovs.index_of(nm) {
            Some(idx) => {
                niovs.detach(idx);
                this.area.release(idx);
            }
            None => pr_warn!("release_netmem: not a buffer of this area\n"),
        }
    }

    fn init(this: ArcBorrow<'_, Self>, pool: &PagePool) -> Result {
        // The core guarantees these for pools created for a bound queue;
        // a mismatch is a bug, not a user error.
        if !core::ptr::eq(pool.dma_dev(), this.dma_dev.as_raw()) {
            pr_warn!("page pool DMA device is not the queue's\n");
            return Err(EINVAL);
        }
        if !pool.dma_map() || !pool.dma_from_device() {
            return Err(EOPNOTSUPP);
        }
        if pool.order() != 0 {
            return Err(EINVAL);
        }
        GLOBAL.pools.add(1);
        Ok(())
    }

    fn destroy(_this: ArcBorrow<'_, Self>) {
        GLOBAL.pools.sub(1);
    }

    fn uninstall(this: ArcBorrow<'_, Self>) {
        // The device is being unregistered: forget it and unmap now, while
        // its DMA device is still usable.
        drop(this.netdev.lock().take());
        this.area.unmap_dma();
    }
}

#[pinned_drop]
impl PinnedDrop for Zcrx {
    fn drop(self: Pin<&mut Self>) {
        self.area.unmap_dma();
        GLOBAL.providers.sub(1);
    }
}
