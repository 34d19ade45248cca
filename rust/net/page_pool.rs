// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A borrowed `struct page_pool`, as memory provider callbacks see it.

use kernel::{
    bindings,
    types::Opaque, //
};

use super::netmem::Netmem;

/// A page pool.
///
/// # Invariants
///
/// Only ever used by reference, obtained from a pointer the page pool core
/// passed to a provider callback, or from a net_iov attached to the pool;
/// the pool outlives the reference.
#[repr(transparent)]
pub(crate) struct PagePool(Opaque<bindings::page_pool>);

impl PagePool {
    /// # Safety
    ///
    /// `ptr` must point to a live page pool that outlives `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::page_pool) -> &'a Self {
        // SAFETY: `PagePool` is a transparent wrapper; the caller guarantees
        // validity for `'a`.
        unsafe { &*ptr.cast() }
    }

    /// The raw pointer.
    pub(super) fn as_raw(&self) -> *mut bindings::page_pool {
        self.0.get()
    }

    // The accessors below read single fields that are set when the pool is
    // created and never written afterwards, each through a raw place: other
    // fields of a live pool (its caches, ring, counters, `p.napi`) change
    // under us, so no reference to the whole struct is made.

    /// The provider's private pointer of this pool.
    pub(super) fn mp_priv(&self) -> *mut core::ffi::c_void {
        // SAFETY: live pool (type invariant); `mp_priv` is set at creation.
        unsafe { core::ptr::addr_of!((*self.0.get()).mp_priv).read() }
    }

    fn dev(&self) -> *mut bindings::device {
        // SAFETY: as for `mp_priv`.
        unsafe { core::ptr::addr_of!((*self.0.get()).p.dev).read() }
    }

    fn dma_dir(&self) -> bindings::dma_data_direction {
        // SAFETY: as for `mp_priv`.
        unsafe { core::ptr::addr_of!((*self.0.get()).p.dma_dir).read() }
    }

    /// An identity of the device the pool maps its buffers for, to compare
    /// with [`crate::mm::dma::DmaDevice::id`].
    pub(crate) fn dma_dev_id(&self) -> usize {
        self.dev() as usize
    }

    /// Whether the pool DMA-maps its buffers.
    pub(crate) fn dma_map(&self) -> bool {
        // SAFETY: as for `mp_priv`; the bit-field getter reads through the
        // raw pointer.
        unsafe { bindings::page_pool::dma_map_raw(self.0.get()) }
    }

    /// Whether the pool's buffers are only written by the device.
    pub(crate) fn dma_from_device(&self) -> bool {
        self.dma_dir() == bindings::dma_data_direction_DMA_FROM_DEVICE
    }

    /// Buffer order (0: one page).
    pub(crate) fn order(&self) -> u32 {
        // SAFETY: as for `mp_priv`.
        unsafe { core::ptr::addr_of!((*self.0.get()).p.order).read() }
    }

    /// Offset of the data in each buffer.
    pub(crate) fn offset(&self) -> u32 {
        // SAFETY: as for `mp_priv`.
        unsafe { core::ptr::addr_of!((*self.0.get()).p.offset).read() }
    }

    /// Gives `nm` back to this pool (`page_pool_put_unrefed_netmem`).
    ///
    /// # Safety
    ///
    /// `nm` is a buffer in flight in this pool whose last page-pool
    /// reference the caller just dropped (and owned); it is given back once.
    pub(super) unsafe fn put_unrefed(&self, nm: Netmem<'_>) {
        // SAFETY: the pool is live; the caller guarantees `nm`.
        unsafe {
            bindings::page_pool_put_unrefed_netmem(
                self.as_raw(),
                nm.raw(),
                u32::MAX, // -1: sync the whole buffer if needed
                false,
            )
        }
    }

    /// Syncs `len` bytes at DMA address `addr` for the device before the
    /// pool hands the buffer to the NIC again, when the device needs
    /// explicit syncs (the pool itself only syncs what it recycles).
    ///
    /// # Safety
    ///
    /// `addr..addr + len` lies in one buffer mapped `DMA_FROM_DEVICE` for
    /// this pool's device, and stays mapped during the call.
    pub(super) unsafe fn sync_for_device(&self, addr: u64, len: u32) {
        let dev = self.dev();
        // SAFETY: `dev` is the pool's live DMA device; the caller
        // guarantees the address range.
        unsafe {
            if bindings::dma_dev_need_sync(dev) {
                bindings::__dma_sync_single_for_device(dev, addr, len as usize, self.dma_dir());
            }
        }
    }
}

/// The buffers an `alloc_netmems` callback hands to a pool, written straight
/// into the pool's allocation cache like the C providers do.
///
/// # Invariants
///
/// `cache` is `pool->alloc.cache`, which is empty (`alloc.count == 0`) while
/// the callback runs; `len <= cache.len()`.
pub(crate) struct AllocBatch<'a> {
    pool: &'a PagePool,
    cache: &'a mut [bindings::netmem_ref],
    len: usize,
    area: u64,
}

impl<'a> AllocBatch<'a> {
    /// Largest batch a pool takes (`PP_ALLOC_CACHE_REFILL`).
    pub(crate) const MAX: usize = bindings::PP_ALLOC_CACHE_REFILL as usize;

    /// # Safety
    ///
    /// Only from an `alloc_netmems` callback of `pool`, whose cache is
    /// empty. `area` is the id of the net_iov area of the pool's provider,
    /// which the pool keeps alive.
    pub(super) unsafe fn new(pool: &'a PagePool, area: u64) -> Self {
        // SAFETY: the caller runs inside `alloc_netmems`, which owns the
        // pool's allocation cache; it holds at least `PP_ALLOC_CACHE_SIZE`.
        let cache = unsafe { &mut (*pool.as_raw()).alloc.cache };
        let max = Self::MAX.min(cache.len());
        AllocBatch {
            pool,
            cache: &mut cache[..max],
            len: 0,
            area,
        }
    }

    /// The id of the net_iov area whose buffers this pool may take.
    pub(super) fn area(&self) -> u64 {
        self.area
    }

    /// The pool being filled.
    pub(crate) fn pool(&self) -> &'a PagePool {
        self.pool
    }

    /// Room left.
    pub(crate) fn room(&self) -> usize {
        self.cache.len() - self.len
    }

    /// Adds a buffer; it must be attached to this pool with one reference.
    /// When the batch is full the buffer is handed back (`Err`): the caller
    /// still owns it and must not lose it.
    pub(super) fn push<'b>(&mut self, nm: Netmem<'b>) -> core::result::Result<(), Netmem<'b>> {
        if self.len >= self.cache.len() {
            return Err(nm);
        }
        self.cache[self.len] = nm.raw();
        self.len += 1;
        Ok(())
    }

    /// Buffers added so far.
    pub(crate) fn netmems(&self) -> impl Iterator<Item = Netmem<'_>> + '_ {
        // SAFETY: every entry was pushed from a `Netmem` valid while the
        // pool (and so the batch) lives.
        self.cache[..self.len]
            .iter()
            .map(|&r| unsafe { Netmem::from_raw(r) })
    }

    /// Number of buffers added.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Completes the callback: all but the last buffer go to the cache, the
    /// last one is returned (0 when there is none), as the C contract wants.
    pub(crate) fn finish(self) -> bindings::netmem_ref {
        if self.len == 0 {
            return 0;
        }
        // SAFETY: the cache holds `len` valid entries and was empty before.
        unsafe { (*self.pool.as_raw()).alloc.count = (self.len - 1) as u32 };
        self.cache[self.len - 1]
    }
}
