// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `net_iov` areas, netmem references, and who owns each buffer.
//!
//! A memory provider describes its memory to the networking stack as an
//! array of `struct net_iov`, one per buffer, owned by a `struct net_iov_area`.
//! The stack passes buffers around as `netmem_ref`, a tagged pointer to either
//! a `struct page` or a `struct net_iov`.
//!
//! [`NetIovArea`] is also the ledger of the buffers: it alone moves a
//! buffer between the free list, a page pool, the stack and the user, so
//! page-pool reference counts, pool attachment and DMA addresses can only
//! change in the ways the page pool core expects. Its safe API takes proofs
//! instead of trusting indices: a [`FragBuf`] (a buffer a live skb holds),
//! a [`FreeBuf`] (a buffer taken off the free list), a [`Released`] (a
//! buffer a pool gives back, made only by the provider callback), an
//! [`AllocBatch`] (made only by the allocation callback), a [`DmaUse`] (a
//! share of the DMA mapping). A buffer index from user space is only ever
//! looked up, and a return the user does not hold is refused.

use core::mem::ManuallyDrop;

use kernel::{
    bindings,
    new_mutex,
    new_spinlock_bh,
    prelude::*,
    sync::{
        atomic::{ordering::Relaxed, Atomic},
        Mutex, SpinLockBh,
    },
    types::Opaque, //
};

use super::{
    freelist::FreeList,
    page_pool::{AllocBatch, PagePool},
    skb::Frag,
    urefs::UserRefs, //
};
use crate::mm::{dma::AreaMemory, pin::PAGE_SHIFT};

mod bufs;
mod dma;

pub(crate) use bufs::{FragBuf, FreeBuf, Netmem, NextBuf, Released};
use dma::AreaDma;
pub(crate) use dma::DmaUse;

/// Ids of net_iov areas: unique for the life of the module, so a token of
/// a freed area can never match a new one at the same address.
static NEXT_AREA_ID: Atomic<u64> = Atomic::new(1);

/// One `struct net_iov`.
///
/// # Invariants
///
/// Lives inside a [`NetIovArea`] that initialised it with `net_iov_init()`.
#[repr(transparent)]
struct NetIov(Opaque<bindings::net_iov>);

/// An array of `struct net_iov` with its `struct net_iov_area`, and the
/// state of every buffer.
///
/// # Invariants
///
/// - `area` and every element of `niovs` have stable addresses for the
///   lifetime of `self` (boxed, and `niovs` never grows or shrinks).
/// - `area.niovs == niovs.as_ptr()`, `area.num_niovs == niovs.len()`, and
///   every net_iov is initialised with `owner == area` and type
///   `NET_IOV_IOURING` (the type of kernel-readable user memory).
/// - Every buffer `i` is in exactly one state:
///   - *free*: on `free`, attached to no pool, no page-pool reference, not
///     held by the user;
///   - *pool*: attached to a page pool, which counts it in flight until it
///     releases it to us; its page-pool references belong to the pool's
///     users, and `urefs[i]` of them to the user (one each, see below);
///   - *copy*: attached to no pool, not on `free`, exactly `urefs[i] >= 1`
///     page-pool references, all the user's.
///
///   Each user reference stands for one page-pool reference that this type
///   took for the user and drops when the user gives the buffer back.
/// - Buffer `i` is bytes `i << buf_shift .. (i + 1) << buf_shift` of
///   `mem` (for pinned pages: pages `i << order .. (i + 1) << order`,
///   `order = buf_shift - PAGE_SHIFT`); `mem.len()` is a whole number of
///   buffers.
/// - While `dma` holds a mapping, every net_iov's DMA address is its
///   buffer's address in that mapping, where the whole buffer is one
///   contiguous range of DMA addresses, and `mapped_dev` is the mapping's
///   device; otherwise the addresses and `mapped_dev` are 0. `mapped_dev`
///   changes only under the `free` lock, which allocations for a pool hold
///   from checking it to attaching buffers.
/// - `attached` is at least the number of buffers attached to a page pool
///   whenever the `free` lock is held (attaching counts up under it,
///   detaching counts down under it afterwards).
/// - `urefs` counts `niovs.len()` buffers.
/// - `id` is unique among all areas ever made.
/// - Dropped with a buffer still attached to a page pool (a provider bug),
///   it leaks its net_iovs, their area and the DMA mapping instead of
///   freeing memory the pool still uses.
#[pin_data(PinnedDrop)]
pub(crate) struct NetIovArea {
    area: ManuallyDrop<KBox<Opaque<bindings::net_iov_area>>>,
    niovs: ManuallyDrop<KVVec<NetIov>>,
    mem: AreaMemory,
    /// log2 of the buffer size in bytes (at least `PAGE_SHIFT`).
    buf_shift: u32,
    urefs: UserRefs,
    #[pin]
    free: SpinLockBh<FreeList>,
    #[pin]
    dma: Mutex<Option<AreaDma>>,
    mapped_dev: Atomic<usize>,
    /// How many buffers are attached to a page pool; changed only under
    /// the `free` lock, after a detach (so it may count one that was just
    /// detached, never miss one attached).
    attached: Atomic<usize>,
    id: u64,
}

// SAFETY: the C structures are only accessed through the page pool API, which
// does its own synchronisation, through atomics, and under our locks.
unsafe impl Send for NetIovArea {}
// SAFETY: see `Send`.
unsafe impl Sync for NetIovArea {}

impl NetIovArea {
    /// An area whose buffers are `mem`, `1 << buf_shift` bytes (whole
    /// pages) each, all free. `EINVAL` unless `buf_shift` is at least the
    /// page shift and `mem` is a whole, nonzero number of buffers.
    pub(crate) fn new(mem: AreaMemory, buf_shift: u32) -> Result<impl PinInit<Self, Error>> {
        if !(PAGE_SHIFT..usize::BITS).contains(&buf_shift) {
            return Err(EINVAL);
        }
        let len = mem.len();
        if len == 0 || len % (1usize << buf_shift) != 0 {
            return Err(EINVAL);
        }
        let n = len >> buf_shift;
        // Charged to the caller's memory cgroup, like io_uring's area
        // arrays: these scale with the area.
        let area = KBox::new(
            Opaque::<bindings::net_iov_area>::zeroed(),
            GFP_KERNEL_ACCOUNT,
        )?;
        let mut niovs = KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..n {
            niovs.push(NetIov(Opaque::zeroed()), GFP_KERNEL_ACCOUNT)?;
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
        let urefs = UserRefs::new(n)?;
        // INVARIANT: every buffer starts free.
        let free = FreeList::new_full(n)?;
        Ok(try_pin_init!(Self {
            area: ManuallyDrop::new(area),
            niovs: ManuallyDrop::new(niovs),
            mem,
            buf_shift,
            urefs,
            free <- new_spinlock_bh!(free, "NetIovArea::free"),
            dma <- new_mutex!(None, "NetIovArea::dma"),
            mapped_dev: Atomic::new(0),
            attached: Atomic::new(0),
            id: NEXT_AREA_ID.fetch_add(1, Relaxed),
        }))
    }

    /// Number of buffers.
    pub(crate) fn len(&self) -> usize {
        self.niovs.len()
    }

    /// Buffers on the free list now.
    pub(crate) fn free_count(&self) -> usize {
        self.free.lock().len()
    }

    /// log2 of the buffer size.
    pub(crate) fn buf_shift(&self) -> u32 {
        self.buf_shift
    }

    /// Bytes per buffer.
    pub(crate) fn buf_size(&self) -> usize {
        1 << self.buf_shift
    }

    /// Pages per buffer, as a page-pool order.
    pub(crate) fn buf_order(&self) -> u32 {
        self.buf_shift - PAGE_SHIFT
    }

    /// Whether the CPU can fill buffers (copies): pinned pages can, a
    /// dma-buf cannot (the module does not map it for the CPU).
    pub(crate) fn can_copy(&self) -> bool {
        self.mem.pages().is_some()
    }

    /// Buffers the user holds, counted with multiplicity (a walk: for stats
    /// and teardown).
    pub(crate) fn user_held(&self) -> u64 {
        self.urefs.held()
    }

    fn niov(&self, idx: usize) -> *mut bindings::net_iov {
        self.niovs[idx].0.get()
    }

    fn netmem(&self, idx: usize) -> Netmem<'_> {
        // SAFETY: net_iov `idx` is live while `self` is borrowed; tagged as
        // `net_iov_to_netmem()` does (net_iovs are word aligned, so the tag
        // bit is free).
        unsafe {
            Netmem::from_raw(
                (self.niov(idx) as usize | bindings::NET_IOV as usize) as bindings::netmem_ref,
            )
        }
    }

    /// Index of `nm` in this area, if it is one of our net_iovs.
    ///
    /// Only compares addresses, so it is safe for any netmem, including ones
    /// of other providers and pages.
    #[inline(always)]
    pub(crate) fn index_of(&self, nm: Netmem<'_>) -> Option<usize> {
        // Ours are `base + i * size` tagged `NET_IOV` (bit 0, free in the
        // aligned array): a page (untagged) or an address off the array
        // or between two net_iovs never gives a whole index below `len`
        // (below `base` it wraps to a huge offset).
        let base = self.niovs.as_ptr() as usize | bindings::NET_IOV as usize;
        let size = core::mem::size_of::<NetIov>();
        let off = nm.raw().wrapping_sub(base);
        if off % size != 0 || off / size >= self.niovs.len() {
            return None;
        }
        Some(off / size)
    }

    // Page-pool reference counts of our own net_iovs. These are atomic
    // operations on memory we own, so they are always memory safe; what the
    // counts mean is kept by the ledger invariant, which is why they are
    // private.

    /// The page-pool reference count of buffer `idx` as a `core` atomic.
    ///
    /// The receive and refill paths take and drop one for every buffer;
    /// the C helpers (`page_pool_ref_netmem()`, `page_pool_unref_and_test()`)
    /// are static inlines that C callers get inline but that are a call
    /// each time from here (no helper inlining in this build), so the two
    /// hot ones are done inline below. A `core` atomic on a C atomic: the
    /// exception to the LKMM rule explained in `urefs`; what may be lost is
    /// the sanitizers' instrumentation of the `atomic_long_*()` calls.
    fn pp_count(&self, idx: usize) -> &core::sync::atomic::AtomicI64 {
        // SAFETY: a live net_iov of ours.
        unsafe { Self::pp_count_of(self.niov(idx)) }
    }

    /// [`NetIovArea::pp_count`] of the net_iov `niov`.
    ///
    /// # Safety
    ///
    /// `niov` is a net_iov of a [`NetIovArea`] that lives at least as long
    /// as `'a`.
    #[inline(always)]
    unsafe fn pp_count_of<'a>(niov: *mut bindings::net_iov) -> &'a core::sync::atomic::AtomicI64 {
        // SAFETY: `niov` is live for `'a` (the caller's promise);
        // `pp_ref_count` is an `atomic_long_t` (8 bytes, 8-aligned on
        // 64-bit), which the kernel only ever accesses atomically.
        unsafe {
            core::sync::atomic::AtomicI64::from_ptr(core::ptr::addr_of_mut!(
                (*niov).desc.pp_ref_count.counter
            ))
        }
    }

    /// Drops one page-pool reference; true if it was the last (the count is
    /// then 1 again, what a buffer going back to its pool carries), as
    /// `page_pool_unref_and_test()` does.
    #[inline]
    fn pp_unref_and_test(&self, idx: usize) -> bool {
        use core::sync::atomic::Ordering::{Relaxed, SeqCst};
        let c = self.pp_count(idx);
        // Ours is the only one left: nothing to write (`atomic_long_read()`).
        if c.load(Relaxed) == 1 {
            return true;
        }
        // `atomic_long_sub_return()`: fully ordered.
        let ret = c.fetch_sub(1, SeqCst) - 1;
        if ret < 0 {
            kernel::pr_warn_once!("page-pool reference count of a buffer went below zero\n");
        }
        if ret == 0 {
            // Another holder dropped its reference meanwhile: we are the
            // last after all; back to the one a pool buffer carries.
            c.store(1, Relaxed);
            return true;
        }
        false
    }

    fn pp_unref(&self, idx: usize, nr: u32) -> i64 {
        // SAFETY: a live net_iov of ours.
        unsafe { bindings::page_pool_unref_netmem(self.netmem(idx).raw(), nr as isize) as i64 }
    }

    fn pp_set_refs(&self, idx: usize, nr: u32) {
        // SAFETY: a live net_iov of ours.
        unsafe { bindings::page_pool_fragment_netmem(self.netmem(idx).raw(), nr as isize) }
    }

    fn free_push(&self, free: &mut FreeList, idx: usize) {
        if let Err(e) = free.push(idx as u32) {
            // The ledger invariant makes this impossible; say so loudly
            // rather than corrupt the list.
            pr_warn!("buffer {} returned twice ({:?})\n", idx, e);
        }
    }

    /// Buffer `idx`, whose last page-pool reference the caller just
    /// dropped, goes back: to `recycle`'s cache if it belongs to that pool
    /// and there is room, else to the pool it belongs to, else (a copy
    /// buffer) to the free list.
    #[inline]
    fn return_unrefed(&self, idx: usize, recycle: Option<&mut AllocBatch<'_>>) {
        let niov = self.niov(idx);
        // SAFETY: `niov` is live; `desc.pp` is only written when the buffer
        // is attached (taken off the free list) and detached (released by
        // its pool), neither of which can happen to a buffer in flight.
        let pp = unsafe { (*niov).desc.pp };
        if pp.is_null() {
            // INVARIANT: a copy buffer with no reference left is free.
            let mut free = self.free.lock();
            self.free_push(&mut free, idx);
            return;
        }
        if let Some(batch) = recycle {
            if core::ptr::eq(pp, batch.pool().as_raw()) && batch.push(self.netmem(idx)).is_ok() {
                // INVARIANT: back in its pool's cache, still in flight.
                return;
            }
        }
        // SAFETY: the buffer is in flight in pool `pp` with no reference
        // left (the caller dropped the last one), so the pool is alive (it
        // waits for its buffers) and takes the buffer back exactly once.
        unsafe { PagePool::from_raw(pp).put_unrefed(self.netmem(idx)) };
    }

    /// A buffer that a frag of a live skb holds, if it is one of ours.
    #[inline(always)]
    pub(crate) fn lookup<'a>(&'a self, frag: &'a Frag) -> Option<FragBuf<'a>> {
        let idx = self.index_of(frag.netmem())?;
        // INVARIANT: `index_of` only returns indices below `len()`; the skb
        // holds a page-pool reference to the buffer for as long as the frag
        // is borrowed.
        Some(FragBuf {
            area: self,
            idx,
            niov: self.niov(idx),
        })
    }

    /// Takes a free buffer (for a copy): it is attached to no pool and
    /// goes back to the free list when dropped, unless given to the user.
    /// Fill it with [`FreeBuf::with_page`], page by page.
    pub(crate) fn take_free(&self) -> Option<FreeBuf<'_>> {
        let idx = self.free.lock().pop()? as usize;
        Some(FreeBuf { area: self, idx })
    }

    /// The user gives buffer `idx` back once. False (and nothing changes)
    /// if the user does not hold it. The buffer goes back to `recycle`'s
    /// cache when it was the last reference and it belongs to that pool,
    /// else to its own pool or the free list.
    ///
    /// With a `recycle` batch that is full or not this area's, nothing
    /// happens (false): the caller sized or chose its batch wrong, and the
    /// entry shows up as a bad one rather than going the slow way.
    // Inline: the page pool's refill runs this for every buffer the user
    // gives back (a call here and in `return_unrefed` cost the refill
    // about twice io_uring zcrx's, by the bench's profile).
    #[inline(always)]
    pub(crate) fn user_return(&self, idx: usize, recycle: Option<&mut AllocBatch<'_>>) -> bool {
        if let Some(b) = &recycle {
            if b.room() == 0 || b.area() != self.id {
                return false;
            }
        }
        if idx >= self.len() || !self.urefs.put(idx) {
            return false;
        }
        // The user's reference was one page-pool reference (ledger
        // invariant); `put` ordered it after the `get` (acquire/release).
        if self.pp_unref_and_test(idx) {
            self.return_unrefed(idx, recycle);
        }
        true
    }

    /// Takes back every buffer the user still holds (teardown).
    pub(crate) fn scrub_user(&self) {
        for idx in 0..self.len() {
            let n = self.urefs.take_all(idx);
            if n != 0 && self.pp_unref(idx, n) == 0 {
                self.return_unrefed(idx, None);
            }
        }
    }

    /// Moves free buffers into `batch`'s pool, as many as fit, keeping
    /// `reserve` on the free list. Nothing when the batch is not for this
    /// area's provider, or the area is not mapped for the pool's device
    /// (the NIC would DMA to addresses of another).
    pub(crate) fn alloc_free_into(&self, batch: &mut AllocBatch<'_>, reserve: usize) {
        if batch.area() != self.id {
            return;
        }
        let mut free = self.free.lock();
        // Under the free lock: the mapping cannot go between this check and
        // the attaching below (see the type invariant).
        if !self.mapped_for(batch.pool()) {
            return;
        }
        while batch.room() > 0 && free.len() > reserve {
            let Some(i) = free.pop() else { break };
            let i = i as usize;
            // SAFETY: buffer `i` was free, so attached to no pool; the pool
            // is live (the batch borrows it) and, as the batch is only made
            // in its `alloc_netmems` callback, running in its context.
            // INVARIANT: attached, with the one reference the pool gives
            // it, and in the batch below (the pool's cache at `finish`):
            // a pool buffer.
            unsafe { bindings::net_mp_niov_set_page_pool(batch.pool().as_raw(), self.niov(i)) };
            self.attached
                .store(self.attached.load(Relaxed) + 1, Relaxed);
            if batch.push(self.netmem(i)).is_err() {
                // Cannot happen: there was room. The buffer stays attached
                // and counted by the pool, so it is lost, not corrupted.
                kernel::pr_warn_once!("alloc_free_into: a buffer did not fit the batch\n");
                break;
            }
        }
    }

    /// Takes back a buffer its pool released (`release_netmem`): detached,
    /// it is free again. False if it is not ours.
    pub(crate) fn take_released(&self, r: Released<'_>) -> bool {
        if r.area != self.id {
            return false;
        }
        let Some(idx) = self.index_of(r.nm) else {
            return false;
        };
        // SAFETY: the pool gives the buffer back (`Released` is only made by
        // the `release_netmem` callback); it holds no reference any more.
        unsafe { bindings::net_mp_niov_clear_page_pool(self.niov(idx)) };
        // INVARIANT: detached and on the free list.
        let mut free = self.free.lock();
        self.attached
            .store(self.attached.load(Relaxed).saturating_sub(1), Relaxed);
        self.free_push(&mut free, idx);
        true
    }

    /// Whether any buffer is attached to a page pool.
    fn any_attached(&self) -> bool {
        (0..self.len()).any(|i| {
            // SAFETY: a live net_iov of ours; `desc.pp` is a pointer written
            // when attaching and detaching, read once.
            let pp = unsafe { core::ptr::addr_of!((*self.niov(i)).desc.pp).read_volatile() };
            !pp.is_null()
        })
    }

    /// The id of this area (see [`AllocBatch`], [`Released`], [`DmaUse`]).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

#[pinned_drop]
impl PinnedDrop for NetIovArea {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: the fields are dropped below at most once and never used
        // again; nothing is moved out of the pinned struct.
        let this = unsafe { self.get_unchecked_mut() };
        if this.any_attached() {
            // A pool still uses our net_iovs (and may DMA into the pages):
            // leak them, their area and the mapping rather than free them.
            // The mapping holds the pinned pages, and they their charge: the
            // pages stay pinned and charged to the user (RLIMIT_MEMLOCK,
            // VmPin) until reboot, as they must while a device may write.
            pr_warn!("net_iov area dropped with buffers in a page pool: leaking it, its pages stay pinned and charged\n");
            core::mem::forget(this.dma.lock().take());
            return;
        }
        // SAFETY: no pool refers to the net_iovs or their area any more, and
        // they are not used again.
        unsafe {
            ManuallyDrop::drop(&mut this.niovs);
            ManuallyDrop::drop(&mut this.area);
        }
    }
}
