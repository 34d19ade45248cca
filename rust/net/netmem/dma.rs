// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The area's DMA mapping: one per device, shared by the bindings on it
//! ([`DmaUse`]), torn down only when no page pool holds a buffer or the
//! device is going away, and the syncs before a NIC gets a buffer.

use kernel::{
    bindings,
    prelude::*,
    sync::atomic::ordering::{Acquire, Relaxed, Release}, //
};

use super::NetIovArea;
use crate::mm::dma::{DmaDevice, DmaMapping};
use crate::net::{
    page_pool::{AllocBatch, PagePool},
    provider::Uninstall, //
};

/// The area's DMA mapping and how many [`DmaUse`]s share it.
pub(super) struct AreaDma {
    map: DmaMapping,
    users: usize,
}

impl NetIovArea {
    /// Syncs the buffers of `batch` that are ours for the device, before
    /// the pool hands them to the NIC (when the device needs syncs).
    pub(crate) fn sync_for_device(&self, batch: &AllocBatch<'_>) {
        let pool = batch.pool();
        if batch.area() != self.id
            || !self.mapped_for(pool)
            || !self.can_copy()
            || !pool.needs_sync()
        {
            // Nothing to do for a DMA-coherent device (asked once per
            // batch, not per buffer). A dma-buf's addresses are its
            // exporter's (peer-to-peer bus addresses, maybe): no cache
            // maintenance on them, as devmem.
            return;
        }
        let off = pool.offset() as usize;
        let size = self.buf_size();
        if off >= size {
            return;
        }
        for nm in batch.netmems() {
            if self.index_of(nm).is_some() {
                // SAFETY: a live net_iov of ours; its DMA address is set.
                let addr = unsafe { bindings::page_pool_get_dma_addr_netmem(nm.raw()) };
                // SAFETY: the address is the buffer's in our mapping for
                // the pool's device (checked above, and it stays: the
                // batch's buffers are attached to the pool, so `teardown`
                // refuses unless this area's provider is being uninstalled,
                // which the core does only after the queue stopped
                // allocating); `off + len` is within the buffer, whose DMA
                // addresses are contiguous (type invariant).
                unsafe { pool.sync_for_device(addr + off as u64, (size - off) as u32) };
            }
        }
    }

    /// Maps the area's pages for `dev` and sets every net_iov's DMA
    /// address, or takes one more share of the mapping that exists for
    /// `dev` (a binding made while the pools of an earlier one on the same
    /// device still hold buffers). A mapping for another device that no
    /// share uses and no pool holds a buffer of is torn down first;
    /// otherwise `EBUSY`: a net_iov has one DMA address, so the area serves
    /// one device at a time. `ERANGE` if a buffer larger than a page is not
    /// one contiguous range of DMA addresses (memory that is not
    /// physically contiguous per buffer, behind no IOMMU).
    pub(crate) fn map_dma(&self, dev: DmaDevice) -> Result<DmaUse> {
        let mut dma = self.dma.lock();
        if let Some(d) = &mut *dma {
            if d.map.is_for(&dev) {
                d.users += 1;
                return Ok(DmaUse { area: self.id });
            }
            if d.users > 0 || !self.teardown(&mut dma, false) {
                return Err(EBUSY);
            }
        }
        let size = self.buf_size();
        // Segments no longer than the device takes (a NIC on PCI: 64 KiB
        // unless its driver says more; DMA API debugging reports longer
        // ones), and whole buffers per segment where that limit allows:
        // a buffer then never spans segments, and each DMA sync stays
        // inside one.
        let max = dev.max_segment_size();
        let max_segment = if max as usize >= size {
            max & !(size as u32 - 1)
        } else {
            max
        };
        let m = self.mem.map(dev, max_segment)?;
        let mut idx = 0usize;
        // The buffer being put together: its DMA address, its bytes so far.
        let (mut start, mut filled) = (0u64, 0usize);
        m.for_each_segment(|addr, len| {
            // Segments in page order. A buffer may span segments (a buffer
            // larger than the device's segments), but it must be one range
            // of DMA addresses.
            let mut at = 0usize;
            while at < len {
                if idx >= self.len() {
                    // A dma-buf is mapped whole; the area is its start.
                    return if self.can_copy() { Err(EINVAL) } else { Ok(()) };
                }
                let a = addr + at as u64;
                if filled == 0 {
                    start = a;
                } else if a != start + filled as u64 {
                    return Err(ERANGE);
                }
                let take = (len - at).min(size - filled);
                filled += take;
                at += take;
                if filled == size {
                    self.set_dma_addr(idx, start)?;
                    idx += 1;
                    filled = 0;
                }
            }
            Ok(())
        })
        .and_then(|()| {
            if idx == self.len() {
                Ok(())
            } else {
                Err(EINVAL)
            }
        })
        .inspect_err(|_| self.clear_dma_addrs())?;
        {
            let _free = self.free.lock();
            self.mapped_dev.store(m.device_id(), Release);
        }
        *dma = Some(AreaDma { map: m, users: 1 });
        Ok(DmaUse { area: self.id })
    }

    /// Gives back a share of the DMA mapping; the last one unmaps. A share
    /// of another area is ignored (with a warning). While a buffer is still
    /// attached to a page pool, a NIC may still write it: the last share
    /// unmaps then only with proof that this area's provider is being
    /// uninstalled (`uninstall`, whose core has stopped the queue);
    /// otherwise the mapping stays until [`NetIovArea::unmap_idle`] finds
    /// no buffer attached, a mapping for another device is asked for, or
    /// the area goes.
    pub(crate) fn unmap_dma(&self, u: DmaUse, going: Option<&Uninstall<'_>>) {
        let DmaUse { area } = u;
        if area != self.id {
            pr_warn!("unmap_dma: a DMA share of another area\n");
            return;
        }
        let mut dma = self.dma.lock();
        let Some(d) = &mut *dma else { return };
        d.users -= 1;
        if d.users > 0 {
            return;
        }
        let going = going.is_some_and(|t| t.area == self.id);
        self.teardown(&mut dma, going);
    }

    /// Unmaps the area if no share uses its mapping and no buffer is
    /// attached to a page pool (the last pool of an unbound binding is
    /// gone).
    pub(crate) fn unmap_idle(&self) {
        let mut dma = self.dma.lock();
        if matches!(&*dma, Some(d) if d.users == 0) {
            self.teardown(&mut dma, false);
        }
    }

    /// Tears the mapping in `dma` (the locked `self.dma`, with no share
    /// left) down, unless a buffer is attached to a page pool and the
    /// device is not `going` away. Whether it did.
    fn teardown(&self, dma: &mut Option<AreaDma>, going: bool) -> bool {
        {
            // Under the free lock, which allocations hold from checking
            // `mapped_dev` to attaching: none attaches between the check
            // and the store below.
            let _free = self.free.lock();
            if !going && self.attached.load(Relaxed) != 0 {
                return false;
            }
            self.mapped_dev.store(0, Release);
        }
        self.clear_dma_addrs();
        drop(dma.take());
        true
    }

    pub(super) fn mapped_for(&self, pool: &PagePool) -> bool {
        let dev = self.mapped_dev.load(Acquire);
        dev != 0 && pool.dma_dev_id() == dev
    }

    fn set_dma_addr(&self, idx: usize, addr: u64) -> Result {
        // SAFETY: `niov` is a live net_iov of this area; called with the
        // `dma` lock held, while no NIC can use the buffer: when mapping,
        // no mapping existed, so buffers still attached are of pools whose
        // device went away (a destroyed pool neither syncs nor hands them
        // out); when clearing, the last share is gone and either no buffer
        // is attached or the device is going away (see `unmap_dma`).
        if unsafe { bindings::net_mp_niov_set_dma_addr(self.niov(idx), addr) } {
            return Err(EFAULT);
        }
        Ok(())
    }

    fn clear_dma_addrs(&self) {
        for i in 0..self.len() {
            // 0 always fits.
            let _ = self.set_dma_addr(i, 0);
        }
    }
}

/// A share of an area's DMA mapping, from [`NetIovArea::map_dma`]; give it
/// back with [`NetIovArea::unmap_dma`] (dropping it keeps the mapping).
#[must_use]
pub(crate) struct DmaUse {
    area: u64,
}
