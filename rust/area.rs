// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The area: user memory registered as receive buffers.
//!
//! The user's pages are pinned long-term and charged to its locked memory;
//! each page is one buffer with a `net_iov`, a user reference count and a
//! place on the free list. At bind time the pages are DMA-mapped for the rx
//! queue's device and every net_iov gets its DMA address.
//!
//! Life cycle of a buffer (see Documentation/zcrx-rs.rst for the diagram):
//! free list → page pool (alloc_netmems) → NIC → skb in a socket → handed
//! to the user in a receive record (user reference) → refill ring → back
//! to its pool, or to the free list (copy buffers, released pools).
//!
//! Lock order: `dma` (mutex) is never held with `free` (BH spinlock).

use kernel::{
    new_mutex, new_spinlock_bh,
    prelude::*,
    sync::{Arc, Mutex, SpinLockBh},
};

use crate::freelist::FreeList;
use crate::mm::{
    dma::{DmaDevice, DmaMapping},
    pin::{LockedVmCharge, PinnedPages, PAGE_SIZE},
};
use crate::net::{netmem::NetIovArea, page_pool::AllocBatch};
use crate::stats::GLOBAL;
use crate::uapi;
use crate::urefs::UserRefs;

/// A registered area.
///
/// # Invariants
///
/// `niovs`, `urefs`, `free` and `pages` all describe the same `nbufs`
/// buffers; field order makes the DMA mapping go before the pages are
/// unpinned, and the pages before the charge.
#[pin_data(PinnedDrop)]
pub(crate) struct Area {
    #[pin]
    dma: Mutex<Option<DmaMapping>>,
    niovs: NetIovArea,
    urefs: UserRefs,
    #[pin]
    free: SpinLockBh<FreeList>,
    pages: PinnedPages,
    _charge: LockedVmCharge,
    addr: u64,
}

impl Area {
    /// Registers `len` bytes of the caller's memory at `addr`.
    ///
    /// `EINVAL`: not page aligned, empty, too large or wrapping;
    /// `ENOMEM`: over `RLIMIT_MEMLOCK`; `EFAULT`: not mapped;
    /// `EOPNOTSUPP`: mapped but not pinnable long-term (a regular file).
    pub(crate) fn register(addr: u64, len: u64) -> Result<Arc<Self>> {
        let page = PAGE_SIZE as u64;
        if addr % page != 0 || len % page != 0 || len == 0 || len > uapi::ZCRX_RS_AREA_MAX_LEN {
            return Err(EINVAL);
        }
        addr.checked_add(len).ok_or(EINVAL)?;
        let addr_usize = usize::try_from(addr).map_err(|_| EINVAL)?;
        let n = usize::try_from(len / page).map_err(|_| EINVAL)?;

        let charge = LockedVmCharge::charge_current(n)?;
        let pages = PinnedPages::pin_current(addr_usize, n)?;
        let niovs = NetIovArea::new(n)?;
        let urefs = UserRefs::new(n)?;
        let free = FreeList::new_full(n)?;
        let area = Arc::pin_init(
            try_pin_init!(Self {
                dma <- new_mutex!(None, "Area::dma"),
                niovs,
                urefs,
                free <- new_spinlock_bh!(free, "Area::free"),
                pages,
                _charge: charge,
                addr,
            }),
            GFP_KERNEL,
        )?;
        GLOBAL.areas.add(1);
        GLOBAL.pinned_pages.add(n as u64);
        Ok(area)
    }

    /// Number of buffers.
    pub(crate) fn nbufs(&self) -> usize {
        self.niovs.len()
    }

    /// The net_iovs.
    pub(crate) fn niovs(&self) -> &NetIovArea {
        &self.niovs
    }

    /// The user reference counts.
    pub(crate) fn urefs(&self) -> &UserRefs {
        &self.urefs
    }

    /// The pinned pages.
    pub(crate) fn pages(&self) -> &PinnedPages {
        &self.pages
    }

    /// Buffers on the free list now.
    pub(crate) fn free_count(&self) -> usize {
        self.free.lock().len()
    }

    /// Maps the area for `dev` and sets every net_iov's DMA address.
    /// `EBUSY` if it is mapped already (an area serves one binding).
    pub(crate) fn map_dma(&self, dev: DmaDevice) -> Result {
        let mut dma = self.dma.lock();
        if dma.is_some() {
            return Err(EBUSY);
        }
        let m = DmaMapping::new(dev, &self.pages)?;
        let mut idx = 0usize;
        m.for_each_segment(|addr, len| {
            if len % PAGE_SIZE != 0 {
                return Err(EINVAL);
            }
            for k in 0..len / PAGE_SIZE {
                if idx >= self.nbufs() {
                    return Err(EINVAL);
                }
                self.niovs
                    .set_dma_addr(idx, addr + (k * PAGE_SIZE) as u64)?;
                idx += 1;
            }
            Ok(())
        })
        .and_then(|()| {
            if idx == self.nbufs() {
                Ok(())
            } else {
                Err(EINVAL)
            }
        })
        .inspect_err(|_| self.clear_dma_addrs())?;
        *dma = Some(m);
        Ok(())
    }

    /// Undoes [`Area::map_dma`]; idempotent. Called when the device goes
    /// away (uninstall) and at final teardown.
    pub(crate) fn unmap_dma(&self) {
        let mut dma = self.dma.lock();
        if let Some(m) = dma.take() {
            self.clear_dma_addrs();
            drop(m);
        }
    }

    fn clear_dma_addrs(&self) {
        for i in 0..self.nbufs() {
            let _ = self.niovs.set_dma_addr(i, 0);
        }
    }

    /// Buffers the free list keeps for copies: page pools cannot take them.
    ///
    /// Without a reserve a small area can deadlock: the pool's caches hold
    /// every buffer, the head of the socket's queue is a packet that came
    /// unsplit while the pool was dry, copying it needs a free buffer, and
    /// the zero-copy packets behind it cannot be read first.
    pub(crate) fn copy_reserve(&self) -> usize {
        (self.nbufs() / 8).clamp(1, 256)
    }

    /// Moves free buffers to `batch`'s pool, as many as fit, keeping the
    /// copy reserve.
    pub(crate) fn alloc_free_batch(&self, batch: &mut AllocBatch<'_>) {
        let reserve = self.copy_reserve();
        let mut free = self.free.lock();
        while batch.room() > 0 && free.len() > reserve {
            let Some(i) = free.pop() else { break };
            let i = i as usize;
            self.niovs.attach(i, batch.pool());
            batch.push(self.niovs.netmem(i));
        }
    }

    /// Takes one free buffer for a copy; it is attached to no pool.
    pub(crate) fn alloc_free(&self) -> Option<usize> {
        self.free.lock().pop().map(|i| i as usize)
    }

    /// Puts buffer `idx` back on the free list.
    pub(crate) fn release(&self, idx: usize) {
        if let Err(e) = self.free.lock().push(idx as u32) {
            // A buffer returned twice is a bug in the accounting above.
            pr_warn!(
                "area {:#x}: buffer {} released twice ({:?})\n",
                self.addr,
                idx,
                e
            );
        }
    }
}

#[pinned_drop]
impl PinnedDrop for Area {
    fn drop(self: Pin<&mut Self>) {
        GLOBAL.areas.sub(1);
        GLOBAL.pinned_pages.sub(self.nbufs() as u64);
        let held = self.urefs.held();
        if held != 0 {
            pr_warn!(
                "area {:#x} freed with {} user references\n",
                self.addr,
                held
            );
        }
    }
}
