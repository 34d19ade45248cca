// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `net_iov` areas and netmem references.
//!
//! A memory provider describes its memory to the networking stack as an
//! array of `struct net_iov`, one per buffer, owned by a `struct net_iov_area`.
//! The stack passes buffers around as `netmem_ref`, a tagged pointer to either
//! a `struct page` or a `struct net_iov`.

use core::marker::PhantomData;

use kernel::{
    bindings,
    prelude::*,
    types::Opaque, //
};

use super::page_pool::PagePool;

/// One `struct net_iov`.
///
/// # Invariants
///
/// Lives inside a [`NetIovArea`] that initialised it with `net_iov_init()`.
#[repr(transparent)]
pub(crate) struct NetIov(Opaque<bindings::net_iov>);

/// An array of `struct net_iov` with its `struct net_iov_area`.
///
/// # Invariants
///
/// - `area` and every element of `niovs` have stable addresses for the
///   lifetime of `self` (boxed, and `niovs` never grows or shrinks).
/// - `area.niovs == niovs.as_ptr()`, `area.num_niovs == niovs.len()`, and
///   every net_iov is initialised with `owner == area` and type
///   `NET_IOV_IOURING` (the type of kernel-readable user memory).
pub(crate) struct NetIovArea {
    _area: KBox<Opaque<bindings::net_iov_area>>,
    niovs: KVVec<NetIov>,
}

// SAFETY: the C structures are only accessed through the page pool API, which
// does its own synchronisation, and through atomic operations.
unsafe impl Send for NetIovArea {}
// SAFETY: see `Send`; `&NetIovArea` only hands out raw-pointer based views.
unsafe impl Sync for NetIovArea {}

impl NetIovArea {
    /// Allocates an area of `n` net_iovs.
    pub(crate) fn new(n: usize) -> Result<Self> {
        let area = KBox::new(Opaque::<bindings::net_iov_area>::zeroed(), GFP_KERNEL)?;
        let mut niovs = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            niovs.push(NetIov(Opaque::zeroed()), GFP_KERNEL)?;
        }
        // SAFETY: `area` is a valid, exclusively owned allocation.
        unsafe {
            (*area.get()).niovs = niovs.as_mut_ptr().cast();
            (*area.get()).num_niovs = n;
            (*area.get()).base_virtual = 0;
        }
        for niov in niovs.iter() {
            // SAFETY: `niov` is a valid net_iov nobody else uses yet.
            // INVARIANT: every net_iov is stamped with this area.
            unsafe {
                (*niov.0.get()).owner = area.get();
                (*niov.0.get()).type_ = bindings::net_iov_type_NET_IOV_IOURING;
            }
        }
        Ok(Self { _area: area, niovs })
    }

    /// Number of net_iovs.
    pub(crate) fn len(&self) -> usize {
        self.niovs.len()
    }

    /// The netmem reference of net_iov `idx`.
    ///
    /// # Panics
    ///
    /// If `idx >= self.len()`; callers index with validated indices.
    pub(crate) fn netmem(&self, idx: usize) -> Netmem<'_> {
        let niov = self.niovs[idx].0.get();
        // `net_iov_to_netmem()`: the address tagged with NET_IOV (net_iovs
        // are at least word aligned, so the bit is free).
        Netmem::from_raw((niov as usize | bindings::NET_IOV as usize) as bindings::netmem_ref)
    }

    /// Index of `nm` in this area, if it is one of our net_iovs.
    ///
    /// Only compares addresses, so it is safe for any netmem, including ones
    /// of other providers and pages.
    pub(crate) fn index_of(&self, nm: Netmem<'_>) -> Option<usize> {
        if !nm.is_net_iov() {
            return None;
        }
        let addr = nm.raw() & !(bindings::NET_IOV as usize);
        let base = self.niovs.as_ptr() as usize;
        let size = core::mem::size_of::<NetIov>();
        let off = addr.checked_sub(base)?;
        if off % size != 0 || off / size >= self.niovs.len() {
            return None;
        }
        Some(off / size)
    }

    /// Sets the DMA address of net_iov `idx`. Fails if the address does not
    /// fit the page pool's representation (`net_mp_niov_set_dma_addr`).
    pub(crate) fn set_dma_addr(&self, idx: usize, addr: u64) -> Result {
        let niov = self.niovs[idx].0.get();
        // SAFETY: `niov` is a live net_iov of this area.
        if unsafe { bindings::net_mp_niov_set_dma_addr(niov, addr) } {
            return Err(EFAULT);
        }
        Ok(())
    }

    /// The page pool net_iov `idx` is attached to, if any.
    pub(crate) fn pool_of(&self, idx: usize) -> Option<&PagePool> {
        let niov = self.niovs[idx].0.get();
        // SAFETY: `niov` is live; `desc.pp` is set by the page pool API and a
        // pool stays alive while it has net_iovs attached.
        let pp = unsafe { (*niov).desc.pp };
        if pp.is_null() {
            None
        } else {
            // SAFETY: see above.
            Some(unsafe { PagePool::from_raw(pp) })
        }
    }

    /// Attaches net_iov `idx` to `pool` (before handing it to the pool).
    pub(crate) fn attach(&self, idx: usize, pool: &PagePool) {
        // SAFETY: the net_iov is live and, being on our free list, attached to
        // no pool; `pool` is the pool asking for buffers.
        unsafe { bindings::net_mp_niov_set_page_pool(pool.as_raw(), self.niovs[idx].0.get()) }
    }

    /// Detaches net_iov `idx` from its pool (`release_netmem` path only).
    pub(crate) fn detach(&self, idx: usize) {
        // SAFETY: the net_iov is live; the pool is giving it back to us.
        unsafe { bindings::net_mp_niov_clear_page_pool(self.niovs[idx].0.get()) }
    }
}

/// A `netmem_ref`: a page or a net_iov, valid for `'a`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Netmem<'a>(bindings::netmem_ref, PhantomData<&'a ()>);

impl<'a> Netmem<'a> {
    /// Wraps a raw netmem reference that stays valid for `'a`.
    pub(crate) fn from_raw(raw: bindings::netmem_ref) -> Self {
        Netmem(raw, PhantomData)
    }

    /// The raw reference.
    pub(crate) fn raw(self) -> bindings::netmem_ref {
        self.0
    }

    /// Whether this is a net_iov (provider memory) rather than a page.
    pub(crate) fn is_net_iov(self) -> bool {
        // `netmem_is_net_iov()`: the tag bit.
        self.0 & bindings::NET_IOV as usize != 0
    }

    /// Takes one more page-pool reference (`page_pool_ref_netmem`).
    pub(crate) fn pp_ref(self) {
        // SAFETY: the netmem is valid for `'a` and owned by a page pool or by
        // the provider, both of which keep `pp_ref_count` meaningful.
        unsafe { bindings::page_pool_ref_netmem(self.0) }
    }

    /// Drops one page-pool reference; true if it was the last one.
    pub(crate) fn pp_unref_and_test(self) -> bool {
        // SAFETY: as for `pp_ref`.
        unsafe { bindings::page_pool_unref_and_test(self.0) }
    }

    /// Drops `nr` page-pool references; returns the count left.
    pub(crate) fn pp_unref(self, nr: i64) -> i64 {
        // SAFETY: as for `pp_ref`.
        unsafe { bindings::page_pool_unref_netmem(self.0, nr as isize) as i64 }
    }

    /// Sets the page-pool reference count of a buffer that is not in a pool
    /// (copy fallback buffers) to `nr`.
    pub(crate) fn pp_set_refs(self, nr: i64) {
        // SAFETY: as for `pp_ref`.
        unsafe { bindings::page_pool_fragment_netmem(self.0, nr as isize) }
    }

    /// The buffer's DMA address.
    pub(crate) fn dma_addr(self) -> u64 {
        // SAFETY: as for `pp_ref`.
        unsafe { bindings::page_pool_get_dma_addr_netmem(self.0) }
    }
}
