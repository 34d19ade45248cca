// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A context's receive state and the rx queues bound to it.
//!
//! [`Zcrx`] holds what the queues of one context share: the area, the
//! refill ring and the counters. Each bound rx queue has a [`Queue`], the
//! provider's private data (`mp_priv`) for that queue. A `Queue` is shared
//! by its `Zcrx` (from bind to unbind or close), the queue's [`Binding`]
//! (which owns a reference from bind to unbind or uninstall), and every
//! page pool created for the queue (from `init` to `destroy`, see
//! [`crate::net::provider`]); it holds its `Zcrx`, so neither is freed
//! while a pool could hand out a buffer of the area.
//!
//! Refill entries find their pool through the one ring: whichever queue's
//! pool refills next takes them. A buffer whose last reference that drops
//! goes into that pool's cache if it is that pool's, and back to its own
//! pool (or the free list, for a copy) otherwise.
//!
//! Lock order: a `Queue`'s `state` (mutex) is never held while the
//! device's instance lock is taken ([`Zcrx::unbind`] takes the bindings
//! out first), so it never nests against the core's lock → `state` order
//! of `uninstall`; nor is `queues`. `ring_pos` (BH spinlock) nests inside
//! nothing and takes the area's free list lock.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use kernel::{
    new_mutex, new_spinlock_bh,
    prelude::*,
    sync::{Arc, ArcBorrow, Mutex, SpinLockBh},
};

use crate::area::Area;
use crate::events::{EventSlot, Events};
use crate::mm::pin::PAGE_SIZE;
use crate::net::{
    netdev::LockedNetDev,
    netmem::{DmaUse, NetIovArea, Released},
    page_pool::{AllocBatch, PagePool},
    provider::{self, memory_provider_ops, Binding, BindingSlot, MemoryProvider, Uninstall},
    sock::Sleepers,
};
use crate::refill::{RefillRing, RingPos};
use crate::stats::{Stats, GLOBAL};
use crate::uapi::{ZCRX_RS_EVENT_ALLOC_FAIL, ZCRX_RS_RANGE_MAX_BUFS};

memory_provider_ops!(ZCRX_OPS, Queue);

/// Most refill entries [`Zcrx::drain_refill`] handles per hold of the ring
/// lock (io_uring zcrx takes 32 per hold as well).
const DRAIN_CHUNK: u32 = 32;

/// Where a binding stands.
pub(crate) enum BindState {
    /// Not bound yet (while [`Zcrx::add_queue`] runs).
    New,
    /// The queue is bound to us.
    Bound(Binding<Queue>),
    /// `UNBIND` (or the context's close) unbound it.
    Unbound,
    /// The device went away while bound (its `uninstall`).
    DeviceGone,
}

/// A context's receive state: area, refill ring, counters, bound queues.
#[pin_data(PinnedDrop)]
pub(crate) struct Zcrx {
    area: Arc<Area>,
    ring: RefillRing,
    /// The kernel's consumer position in the refill ring.
    #[pin]
    ring_pos: SpinLockBh<RingPos>,
    /// The queues bound, in binding order (empty for a copy-only context;
    /// kept after `uninstall` until UNBIND or close).
    #[pin]
    queues: Mutex<KVec<Arc<Queue>>>,
    /// Copy-only (`ZCRX_RS_BIND_NODEV`): never binds a queue.
    nodev: bool,
    pub(crate) stats: Stats,
    /// The events of the context that uses this state.
    #[pin]
    events: EventSlot,
    /// The page pools found no buffer the last time they asked (a queue's
    /// NIC drops what arrives), cleared when one is found again.
    starved: AtomicBool,
    /// Dry spells so far: a sleeping RECV wakes when this moves.
    dry_spells: AtomicU32,
    /// RECV calls sleeping for data, woken when the pools run dry: the
    /// user may hold the buffers that would let data in.
    #[pin]
    sleepers: Sleepers,
}

/// One rx queue bound to a [`Zcrx`]: the memory provider proper.
#[pin_data(PinnedDrop)]
pub(crate) struct Queue {
    zcrx: Arc<Zcrx>,
    #[pin]
    state: Mutex<BindState>,
    /// This binding's share of the area's DMA mapping, given back once: at
    /// uninstall (while the device is still there) or drop.
    #[pin]
    dma: Mutex<Option<DmaUse>>,
    dma_dev_id: usize,
    /// The device (see [`LockedNetDev::id`]) and queue.
    dev_id: usize,
    rxq: u32,
    slot: BindingSlot,
}

impl Zcrx {
    fn new(area: Arc<Area>, entries: u32, nodev: bool) -> Result<Arc<Self>> {
        let ring = RefillRing::new(entries)?;
        let zcrx = Arc::pin_init(
            try_pin_init!(Self {
                area,
                ring,
                ring_pos <- new_spinlock_bh!(RingPos::default(), "Zcrx::ring_pos"),
                queues <- new_mutex!(KVec::new(), "Zcrx::queues"),
                nodev,
                stats: Stats::new(),
                events <- EventSlot::new(),
                starved: AtomicBool::new(false),
                dry_spells: AtomicU32::new(0),
                sleepers <- Sleepers::new(),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        GLOBAL.providers.add(1);
        Ok(zcrx)
    }

    /// Binds `area` to rx queue `rxq` of device `ifindex` (current network
    /// namespace) with a refill ring of `entries` entries.
    /// `events`, if given, hears this state's events from the start (the
    /// queue may run dry as soon as it restarts): the caller detaches them
    /// before letting go of the state, as for [`Zcrx::attach_events`]; on
    /// failure they are detached here.
    pub(crate) fn bind(
        area: Arc<Area>,
        ifindex: u32,
        rxq: u32,
        entries: u32,
        events: Option<Arc<Events>>,
    ) -> Result<Arc<Self>> {
        let zcrx = Self::new(area, entries, false)?;
        if let Some(ev) = events {
            zcrx.attach_events(ev);
        }
        if let Err(e) = zcrx.add_queue(ifindex, rxq, false) {
            drop(zcrx.detach_events());
            return Err(e);
        }
        Ok(zcrx)
    }

    /// A copy-only context's state: `area` and a refill ring of `entries`
    /// entries, no queue, no DMA mapping. No page pool can ever use it (no
    /// queue is ever bound to it: [`Zcrx::add_queue`] refuses), so
    /// receiving copies every byte into free buffers of the area.
    pub(crate) fn copy_only(area: Arc<Area>, entries: u32) -> Result<Arc<Self>> {
        Self::new(area, entries, true)
    }

    /// Binds rx queue `rxq` of device `ifindex` too. With `more`, the
    /// context must be bound already, to that device (`EINVAL` if not
    /// bound, `EXDEV` for another device, `EEXIST` for a queue it has);
    /// without, it must have no queue yet.
    pub(crate) fn add_queue(self: &Arc<Self>, ifindex: u32, rxq: u32, more: bool) -> Result {
        if self.nodev || (more && !self.is_bound()) {
            // Before looking the device up: not bound is EINVAL whatever
            // the ifindex (checked again below, under the device lock).
            return Err(EINVAL);
        }
        let dev = LockedNetDev::lock_by_index(ifindex)?;
        {
            // The queues bound now (all of one device) decide.
            let queues = self.queues.lock();
            let mut any = false;
            for q in queues.iter().filter(|q| q.is_bound()) {
                any = true;
                if !more {
                    return Err(EBUSY);
                }
                if q.dev_id != dev.id() {
                    pr_info!("bind {} rxq {}: bound to another device\n", dev.name(), rxq);
                    return Err(EXDEV);
                }
                if q.rxq == rxq {
                    return Err(EEXIST);
                }
            }
            if more && !any {
                return Err(EINVAL);
            }
        }
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
        let dma_dev_id = dma_dev.id();
        let dev_id = dev.id();
        let queue = Arc::pin_init(
            try_pin_init!(Queue {
                zcrx: self.clone(),
                state <- new_mutex!(BindState::New, "Queue::state"),
                dma <- new_mutex!(None, "Queue::dma"),
                dma_dev_id,
                dev_id,
                rxq,
                slot: BindingSlot::new(),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        // Room for it before binding: nothing can fail after.
        self.queues.lock().reserve(1, GFP_KERNEL_ACCOUNT)?;
        let share = self.area.map_dma(dma_dev).inspect_err(|e| {
            if *e == EBUSY {
                pr_info!(
                    "bind {} rxq {}: the area is still mapped for another device\n",
                    dev.name(),
                    rxq
                );
            } else if *e == ERANGE {
                pr_info!(
                    "bind {} rxq {}: {}-byte buffers not contiguous for DMA (use huge pages)\n",
                    dev.name(),
                    rxq,
                    self.area.buf_size()
                );
            }
        })?;
        *queue.dma.lock() = Some(share);
        match provider::bind_rxq(&dev, rxq, &ZCRX_OPS, queue.clone()) {
            Ok(b) => {
                let mut st = queue.state.lock();
                if let BindState::DeviceGone = *st {
                    // The core uninstalled the binding before we could
                    // record it (a leased queue, whose device has its own
                    // lock): it is over; dropping it does not touch the
                    // queue, but takes the device lock, so release ours.
                    drop(st);
                    drop(dev);
                    drop(b);
                    return Err(ENODEV);
                }
                *st = BindState::Bound(b);
                drop(st);
                drop(dev);
                // Into the room reserved above (BINDs of a context run one
                // at a time); should it fail all the same, undo the bind.
                if self.queues.lock().push(queue.clone(), GFP_ATOMIC).is_err() {
                    let _ = queue.unbind();
                    queue.release_dma(None);
                    return Err(ENOMEM);
                }
                Ok(())
            }
            Err((e, msg)) => {
                pr_info!(
                    "bind {} rxq {}: {} (errno {})\n",
                    dev.name(),
                    rxq,
                    msg.map(|m| m.to_str().unwrap_or("?")).unwrap_or("failed"),
                    -e.to_errno()
                );
                // Nothing refers to `queue` but us: dropping it unmaps.
                if e == ERANGE && self.area.buf_size() > PAGE_SIZE {
                    // The queue index was checked above: this is the
                    // driver refusing the buffer size (its
                    // `ndo_validate_qcfg`), not to be mistaken for an area
                    // that is not contiguous per buffer.
                    pr_info!(
                        "bind {} rxq {}: the driver does not take {}-byte buffers\n",
                        dev.name(),
                        rxq,
                        self.area.buf_size()
                    );
                    return Err(EOPNOTSUPP);
                }
                Err(e)
            }
        }
    }

    /// The RECV calls sleeping for this state's data.
    pub(crate) fn sleepers(&self) -> &Sleepers {
        &self.sleepers
    }

    /// How many dry spells began so far: a RECV that looked at
    /// [`Zcrx::starved_and_held`] sleeps until this moves (or data comes),
    /// not while `starved` stays set, which would spin a caller that holds
    /// no buffer.
    pub(crate) fn dry_spells(&self) -> u32 {
        self.dry_spells.load(Relaxed)
    }

    /// The pools ran dry and the user holds buffers that are not on the
    /// refill ring: data may wait in the stack for buffers only the user
    /// can give back. While starved, this first takes what the user gave
    /// back (no pool consumes the ring while nothing arrives): if that was
    /// anything, the pools have buffers again and the state is not starved
    /// any more. Then it counts the user's references (a walk: only while
    /// starved).
    pub(crate) fn starved_and_held(&self) -> bool {
        if !self.starved.load(Relaxed) {
            return false;
        }
        if self.drain_refill() > 0 {
            self.starved.store(false, Relaxed);
            return false;
        }
        // The copy reserve is no use to the pools.
        self.area.free_count() <= self.area.copy_reserve() && self.area.user_held() > 0
    }

    /// Fires `events` (`ZCRX_RS_EVENT_*`) into the context's, if armed
    /// there, and publishes the counters in the ring: call after counting
    /// what the events are about.
    pub(crate) fn fire(&self, events: u32) {
        let n = self.events.fire(events);
        if n != 0 {
            self.stats.events.add(u64::from(n));
        }
        self.ring.publish_stats(&self.stats);
    }

    /// Lets the context's `events` hear this state's events (see
    /// [`EventSlot`]: the context detaches before letting go of them).
    pub(crate) fn attach_events(&self, events: Arc<Events>) {
        self.events.attach(events);
    }

    /// The context stops hearing this state's events.
    pub(crate) fn detach_events(&self) -> Option<Arc<Events>> {
        self.events.detach()
    }

    /// The area.
    pub(crate) fn area(&self) -> &Arc<Area> {
        &self.area
    }

    /// The refill ring.
    pub(crate) fn ring(&self) -> &RefillRing {
        &self.ring
    }

    /// Whether any queue is still bound to us.
    pub(crate) fn is_bound(&self) -> bool {
        self.queues.lock().iter().any(|q| q.is_bound())
    }

    /// Unbinds every queue (each restarts without us). `EINVAL` if none was
    /// bound (unbound already, or copy-only), `ENODEV` if the device went
    /// away meanwhile.
    pub(crate) fn unbind(&self) -> Result {
        // Out of `queues`: unbinding takes the device's instance lock.
        let queues = core::mem::take(&mut *self.queues.lock());
        let mut res = Err(EINVAL);
        for q in queues.iter() {
            match q.unbind() {
                Ok(()) => res = Ok(()),
                Err(e) if e == ENODEV && res.is_err() => res = Err(ENODEV),
                Err(_) => {}
            }
        }
        // The queues restarted without us. Buffers the user gave back and
        // no pool will take from the ring now go home (so that the old pools
        // can finish), then each binding's DMA share goes: the mapping with
        // them if no pool holds a buffer any more, else when the last of
        // them is destroyed (`destroy`).
        self.drain_refill();
        for q in queues.iter() {
            q.release_dma(None);
        }
        res
    }

    /// The user gives buffer `idx` back once. False if the user did not
    /// hold it (the caller counts that as a bad refill entry).
    pub(crate) fn user_return(&self, idx: usize) -> bool {
        self.area.niovs().user_return(idx, None)
    }

    /// Takes back every buffer the user still holds (teardown).
    pub(crate) fn scrub(&self) {
        self.area.niovs().scrub_user();
    }

    /// Returns every buffer the user put on the refill ring to its pool or
    /// the free list, and how many that were. For when no pool drives the
    /// ring: after unbinding, when copies need buffers while the queue sees
    /// no traffic, or while the pools are starved.
    ///
    /// The ring lock (a BH spinlock, which the NAPI side also takes) is
    /// held for at most [`DRAIN_CHUNK`] buffers at a time, and one call
    /// reads at most one ring's worth of entries and handles at most as
    /// many buffers as they (and a range begun before) can name.
    pub(crate) fn drain_refill(&self) -> u64 {
        let (nbufs, shift) = (self.area.nbufs(), self.area.buf_shift());
        let mut returned = 0;
        let mut entries = self.ring.entries();
        let mut bufs = (entries as usize + 1) * ZCRX_RS_RANGE_MAX_BUFS as usize;
        while bufs > 0 {
            let mut pos = self.ring_pos.lock();
            let t = self.ring.take(
                &mut pos,
                nbufs,
                shift,
                bufs.min(DRAIN_CHUNK as usize),
                entries.min(DRAIN_CHUNK),
                |idx| self.user_return(idx),
            );
            drop(pos);
            let done = (t.ok + t.bad) as usize;
            if done == 0 && t.entries == 0 {
                break;
            }
            entries -= t.entries;
            bufs = bufs.saturating_sub(done);
            self.stats.refill_ok.add(t.ok);
            self.stats.refill_bad.add(t.bad);
            returned += t.ok;
        }
        returned
    }

    /// Takes buffers from the refill ring for `batch`'s pool: those whose
    /// last reference this drops and that belong to the pool go straight
    /// into its cache (in the order the user gave them back, see
    /// `alloc_netmems`). Returns whether more waits on the ring.
    fn refill_from_ring(&self, batch: &mut AllocBatch<'_>) -> bool {
        let niovs = self.area.niovs();
        let mut pos = self.ring_pos.lock();
        let t = self.ring.take(
            &mut pos,
            self.area.nbufs(),
            self.area.buf_shift(),
            batch.room(),
            self.ring.entries(),
            |idx| niovs.user_return(idx, Some(&mut *batch)),
        );
        let more = self.ring.pending(&pos);
        drop(pos);
        if t.ok != 0 {
            self.stats.refill_ok.add(t.ok);
        }
        if t.bad != 0 {
            self.stats.refill_bad.add(t.bad);
        }
        more
    }
}

impl Queue {
    /// Whether this queue is still bound to us.
    fn is_bound(&self) -> bool {
        matches!(*self.state.lock(), BindState::Bound(_))
    }

    /// Unbinds the queue. `EINVAL` if it was unbound already, `ENODEV` if
    /// the device went away meanwhile.
    fn unbind(&self) -> Result {
        let binding = {
            let mut st = self.state.lock();
            match core::mem::replace(&mut *st, BindState::Unbound) {
                BindState::Bound(b) => b,
                BindState::Unbound | BindState::New => return Err(EINVAL),
                BindState::DeviceGone => {
                    *st = BindState::DeviceGone;
                    return Err(ENODEV);
                }
            }
        };
        // Out of `state`: this takes the device's instance lock.
        binding.unbind();
        Ok(())
    }

    /// Gives up this binding's share of the area's DMA mapping; once.
    fn release_dma(&self, going: Option<&Uninstall<'_>>) {
        if let Some(share) = self.dma.lock().take() {
            self.zcrx.area.unmap_dma(share, going);
        }
    }
}

impl MemoryProvider for Queue {
    const NAME: &'static CStr = c"zcrx_rs";
    fn net_iov_area(&self) -> &NetIovArea {
        self.zcrx.area.niovs()
    }

    fn binding_slot(&self) -> &BindingSlot {
        &self.slot
    }

    fn alloc_netmems(this: ArcBorrow<'_, Self>, batch: &mut AllocBatch<'_>) {
        let zcrx = &this.zcrx;
        let more = zcrx.refill_from_ring(batch);
        if batch.len() == 0 {
            zcrx.area
                .niovs()
                .alloc_free_into(batch, zcrx.area.copy_reserve());
        }
        // Little left behind the pool's cache once this batch is in it
        // (nothing more on the ring, the free list down to its last few
        // beyond the copy reserve): TCP keeps the cache's last buffers
        // from out-of-order data (patch 54). Else that data can take all
        // that is left, and the segment that fills its hole never finds a
        // buffer. (A snapshot: another pool of the context, or copies,
        // may drain the free list before this pool asks again.)
        let mark = zcrx.area.ofo_reserve();
        let low = batch.len() == 0
            || (!more
                && zcrx
                    .area
                    .free_count()
                    .saturating_sub(zcrx.area.copy_reserve())
                    < mark as usize);
        batch.pool().set_reserve(if low { mark } else { 0 });
        if batch.len() == 0 {
            zcrx.stats.alloc_fail.add(1);
            zcrx.fire(ZCRX_RS_EVENT_ALLOC_FAIL);
            // Once per dry spell: a RECV sleeping for data that cannot come
            // must hear it (it returns ENOBUFS, so the user gives back).
            if !zcrx.starved.swap(true, Relaxed) {
                zcrx.dry_spells.fetch_add(1, Relaxed);
                zcrx.sleepers.wake_all();
            }
            return;
        }
        if zcrx.starved.load(Relaxed) {
            zcrx.starved.store(false, Relaxed);
        }
        // The pool hands out the batch's last buffer first: reversed, the
        // NIC fills buffers in the order they came, from the ring as the
        // user gave them back or from the free list in ascending order. A
        // user that gives records back in stream order then keeps getting
        // consecutive buffers for consecutive data, which
        // `ZCRX_RS_RECV_MERGE` turns into one record.
        batch.reverse();
        zcrx.area.niovs().sync_for_device(batch);
    }

    fn release_netmem(this: ArcBorrow<'_, Self>, released: Released<'_>) {
        if !this.zcrx.area.niovs().take_released(released) {
            pr_warn!("release_netmem: not a buffer of this area\n");
        }
    }

    fn init(this: ArcBorrow<'_, Self>, pool: &PagePool) -> Result {
        // The core guarantees these for pools created for a bound queue;
        // a mismatch is a bug, not a user error.
        if pool.dma_dev_id() != this.dma_dev_id {
            pr_warn!("page pool DMA device is not the queue's\n");
            return Err(EINVAL);
        }
        // One-page buffers mapped by us for the device to write: the
        // layer's `init` trampoline refused any other pool already.
        pool.set_sk_share(this.zcrx.area.sk_share());
        GLOBAL.pools.add(1);
        Ok(())
    }

    fn destroy(this: ArcBorrow<'_, Self>) {
        // The last pool of an unbound binding may have held the last
        // attached buffers: unmap if no share and no buffer uses the mapping.
        this.zcrx.area.unmap_idle();
        GLOBAL.pools.sub(1);
    }

    fn uninstall(this: ArcBorrow<'_, Self>, token: &Uninstall<'_>) {
        // The device is being unregistered: forget it and unmap now, while
        // its DMA device is still usable.
        let mut st = this.state.lock();
        if let BindState::New = &*st {
            // `add_queue` has not recorded the binding yet; it will see this.
            *st = BindState::DeviceGone;
        }
        if let BindState::Bound(_) = &*st {
            let BindState::Bound(b) = core::mem::replace(&mut *st, BindState::DeviceGone) else {
                return;
            };
            match b.uninstalled(token) {
                Ok(()) => {}
                Err(b) => {
                    // Not this binding's uninstall: it stays bound, and
                    // keeps its mapping.
                    *st = BindState::Bound(b);
                    pr_warn!("uninstall: not our binding\n");
                    return;
                }
            }
        }
        // Otherwise UNBIND took it down meanwhile and keeps its state; the
        // device is going away all the same.
        drop(st);
        this.release_dma(Some(token));
    }
}

// pin-init's `#[pinned_drop]` expands to an `unsafe impl` of its own.
#[allow(unsafe_code)]
#[pinned_drop]
impl PinnedDrop for Queue {
    fn drop(self: Pin<&mut Self>) {
        self.release_dma(None);
    }
}

// pin-init's `#[pinned_drop]` expands to an `unsafe impl` of its own.
#[allow(unsafe_code)]
#[pinned_drop]
impl PinnedDrop for Zcrx {
    fn drop(self: Pin<&mut Self>) {
        GLOBAL.providers.sub(1);
    }
}
