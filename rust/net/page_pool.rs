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

    /// Whether the pool's device needs cache maintenance for DMA at all
    /// (not on a DMA-coherent device): when not, a caller may skip looking
    /// up the DMA addresses of a whole batch.
    pub(crate) fn needs_sync(&self) -> bool {
        // SAFETY: the pool's device is live while the pool is.
        unsafe { bindings::dma_dev_need_sync(self.dev()) }
    }

    /// An identity of the device the pool maps its buffers for, to compare
    /// with [`crate::mm::dma::DmaDevice::id`].
    pub(crate) fn dma_dev_id(&self) -> usize {
        self.dev() as usize
    }

    /// Whether the pool DMA-maps its buffers. Only for the `init`
    /// trampoline (see the comment inside).
    pub(super) fn dma_map(&self) -> bool {
        // SAFETY: the pool is live; the bit-field getter reads its storage
        // unit through the raw pointer. That unit also holds `dma_sync`,
        // which the core clears when it destroys the pool: read this only
        // before then (pool `init`), as the provider does.
        unsafe { bindings::page_pool::dma_map_raw(self.0.get()) }
    }

    /// Whether the pool's buffers are only written by the device.
    pub(crate) fn dma_from_device(&self) -> bool {
        self.dma_dir() == crate::mm::dma::FROM_DEVICE
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

    /// Most bytes from `offset` the pool syncs for the device (and the
    /// driver lets it write) per buffer.
    pub(crate) fn max_len(&self) -> u32 {
        // SAFETY: as for `mp_priv`.
        unsafe { core::ptr::addr_of!((*self.0.get()).p.max_len).read() }
    }

    /// Keeps the last `n` buffers of the pool's cache from out-of-order
    /// TCP data (`net_mp_set_reserve`; 0: no reserve), so that the segment
    /// filling a hole finds a buffer.
    pub(crate) fn set_reserve(&self, n: u32) {
        // SAFETY: the pool is live (type invariant); the function only
        // writes the pool's `mp_reserve`, with WRITE_ONCE.
        unsafe { bindings::net_mp_set_reserve(self.as_raw(), n) }
    }

    /// Caps the receive memory (truesize) one TCP socket may hold while the
    /// payload offered to it sits in this pool's buffers
    /// (`net_mp_set_sk_share`; 0: no cap).
    pub(crate) fn set_sk_share(&self, bytes: u32) {
        // SAFETY: the pool is live (type invariant); the function only
        // writes the pool's `mp_sk_share`, with WRITE_ONCE.
        unsafe { bindings::net_mp_set_sk_share(self.as_raw(), bytes) }
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
        // One more check of what `needs_sync` said: cheap, and this stays
        // right for a caller that did not ask first.
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

/// The buffers an `alloc_netmems` callback hands to a pool: staged here,
/// then appended to the pool's allocation cache by [`AllocBatch::finish`],
/// as the C providers do.
///
/// The cache is not borrowed while the callback runs: a buffer that the
/// provider gives back during the callback without the batch (a put from
/// the pool's own NAPI context) may be recycled straight into it, and
/// `finish` appends after whatever it finds there.
///
/// # Invariants
///
/// `staged[..len]` are buffers attached to `pool`, each with the one
/// page-pool reference of a buffer the pool hands out, owned by the batch;
/// `len <= MAX`.
pub(crate) struct AllocBatch<'a> {
    pool: &'a PagePool,
    staged: [bindings::netmem_ref; AllocBatch::MAX],
    len: usize,
    area: u64,
}

impl<'a> AllocBatch<'a> {
    /// Largest batch a pool takes (`PP_ALLOC_CACHE_REFILL`).
    pub(crate) const MAX: usize = bindings::PP_ALLOC_CACHE_REFILL as usize;

    /// # Safety
    ///
    /// Only from an `alloc_netmems` callback of `pool`, which runs in the
    /// pool's allocation context (the only writer of its allocation cache
    /// apart from direct recycling on the same CPU), once per callback.
    /// `area` is the id of the net_iov area of the pool's provider, which
    /// the pool keeps alive.
    pub(super) unsafe fn new(pool: &'a PagePool, area: u64) -> Self {
        AllocBatch {
            pool,
            staged: [0; Self::MAX],
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
        Self::MAX - self.len
    }

    /// Adds a buffer; it must be attached to this pool with one reference.
    /// When the batch is full the buffer is handed back (`Err`): the caller
    /// still owns it and must not lose it.
    pub(super) fn push<'b>(&mut self, nm: Netmem<'b>) -> core::result::Result<(), Netmem<'b>> {
        if self.len >= Self::MAX {
            return Err(nm);
        }
        self.staged[self.len] = nm.raw();
        self.len += 1;
        Ok(())
    }

    /// Reverses the order of the buffers added so far (the pool hands out
    /// the last one first).
    pub(crate) fn reverse(&mut self) {
        self.staged[..self.len].reverse();
    }

    /// Buffers added so far.
    pub(crate) fn netmems(&self) -> impl Iterator<Item = Netmem<'_>> + '_ {
        // SAFETY: every entry was pushed from a `Netmem` valid while the
        // pool (and so the batch) lives.
        self.staged[..self.len]
            .iter()
            .map(|&r| unsafe { Netmem::from_raw(r) })
    }

    /// Number of buffers added.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Completes the callback: all but the last buffer go to the pool's
    /// cache, the last one is returned (0 when there is none), as the C
    /// contract wants. A buffer that finds the cache full goes back
    /// through the pool's put path (its ring, or the provider's release).
    pub(crate) fn finish(self) -> bindings::netmem_ref {
        if self.len == 0 {
            return 0;
        }
        let pp = self.pool.as_raw();
        for &nm in &self.staged[..self.len - 1] {
            // SAFETY: we run in the pool's `alloc_netmems` callback (see
            // `new`), so nothing else writes the allocation cache now; it is
            // read and written through raw places, each time afresh, with no
            // reference to it held across the put below.
            let placed = unsafe {
                let count = core::ptr::addr_of!((*pp).alloc.count).read() as usize;
                if count < bindings::PP_ALLOC_CACHE_SIZE as usize {
                    core::ptr::addr_of_mut!((*pp).alloc.cache[count]).write(nm);
                    core::ptr::addr_of_mut!((*pp).alloc.count).write((count + 1) as u32);
                    true
                } else {
                    false
                }
            };
            if !placed {
                // SAFETY: `nm` is attached to this pool with the one
                // reference of a buffer the pool hands out, owned by the
                // batch (type invariant) and given back here once: the
                // state `put_unrefed` takes (the last unref resets the
                // count to one).
                unsafe { self.pool.put_unrefed(Netmem::from_raw(nm)) };
            }
        }
        self.staged[self.len - 1]
    }
}
