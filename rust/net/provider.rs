// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Page-pool memory providers implemented in Rust.
//!
//! A type implementing [`MemoryProvider`] becomes a `struct
//! memory_provider_ops` in the module's read-only data, with the module as
//! its owner, through [`memory_provider_ops!`]. The provider's private data
//! is an `Arc<T>`: the binding of an rx queue points at it, and every page
//! pool created for the queue holds a reference from `init` to `destroy`.

use core::{
    ffi::c_void,
    marker::PhantomData,
    sync::atomic::{
        AtomicU8,
        Ordering::{Acquire, Release},
    }, //
};

use kernel::{
    bindings,
    prelude::*,
    str::CStr,
    sync::{Arc, ArcBorrow}, //
};

use super::{
    netdev::{LockedNetDev, NetDevRefBox},
    netmem::{NetIovArea, Netmem, Released},
    page_pool::{AllocBatch, PagePool}, //
};

/// The callbacks of a memory provider.
pub(crate) trait MemoryProvider: Send + Sync + Sized + 'static {
    /// The provider's name in netlink dumps (`queue-get`, `page-pool-get`:
    /// the `mp-provider` nest, with the area's buffer size).
    const NAME: &'static CStr;

    /// The buffers this provider gives its pools. Must always be the same
    /// area: its id is stamped on every [`AllocBatch`], [`Released`] and
    /// [`Uninstall`], and the area refuses those of another.
    fn net_iov_area(&self) -> &NetIovArea;

    /// Where the layer keeps this provider's binding state: a provider is
    /// bound to at most one queue at a time (so a queue's `mp_priv` names
    /// one binding). Must always be the same slot.
    fn binding_slot(&self) -> &BindingSlot;

    /// Fill `batch` with buffers for its pool; may leave it empty.
    fn alloc_netmems(this: ArcBorrow<'_, Self>, batch: &mut AllocBatch<'_>);

    /// Take back a buffer the pool no longer wants.
    fn release_netmem(this: ArcBorrow<'_, Self>, released: Released<'_>);

    /// Check that `pool` suits this provider. After success the pool holds a
    /// reference to the provider until it is destroyed.
    fn init(this: ArcBorrow<'_, Self>, pool: &PagePool) -> Result;

    /// A pool that `init` accepted is being destroyed; its reference is
    /// dropped right after.
    fn destroy(this: ArcBorrow<'_, Self>);

    /// The rx queue's device is going away: drop what refers to it, and
    /// end the queue's [`Binding`] with [`Binding::uninstalled`]. The core
    /// clears the queue's binding afterwards.
    fn uninstall(this: ArcBorrow<'_, Self>, token: &Uninstall<'_>);
}

/// Whether a provider is bound, kept by this layer (see
/// [`MemoryProvider::binding_slot`]).
pub(crate) struct BindingSlot(AtomicU8);

const SLOT_FREE: u8 = 0;
const SLOT_BOUND: u8 = 1;
/// The core uninstalled the binding (device going away) and cleared the
/// queue's parameters itself: the [`Binding`] must not close the queue.
const SLOT_UNINSTALLED: u8 = 2;

impl BindingSlot {
    /// A slot with no binding.
    pub(crate) const fn new() -> Self {
        BindingSlot(AtomicU8::new(SLOT_FREE))
    }
}

/// The `struct memory_provider_ops` of provider type `T`, in a `static`.
#[repr(transparent)]
pub(crate) struct ProviderOps<T> {
    ops: bindings::memory_provider_ops,
    _t: PhantomData<fn(T)>,
}

// SAFETY: the table is never written after initialisation; the owner pointer
// is only used by the core's module reference counting.
unsafe impl<T> Sync for ProviderOps<T> {}

impl<T: MemoryProvider> ProviderOps<T> {
    /// Builds the ops of `T`, owned by `owner`.
    ///
    /// # Safety
    ///
    /// `owner` is the module that contains `T`'s code (so that the core's
    /// reference on it keeps the callbacks loaded).
    pub(crate) const unsafe fn new(owner: *mut bindings::module) -> Self {
        ProviderOps {
            ops: bindings::memory_provider_ops {
                owner,
                alloc_netmems: Some(alloc_netmems::<T>),
                release_netmem: Some(release_netmem::<T>),
                init: Some(init::<T>),
                destroy: Some(destroy::<T>),
                nl_fill: Some(nl_fill::<T>),
                uninstall: Some(uninstall::<T>),
            },
            _t: PhantomData,
        }
    }

    fn as_raw(&'static self) -> *const bindings::memory_provider_ops {
        &self.ops
    }
}

/// Defines `static $name: ProviderOps` for provider type `$t`, owned by this
/// module (so that the core pins the module while the ops are in use).
macro_rules! memory_provider_ops {
    ($name:ident, $t:ty) => {
        #[allow(unsafe_code)]
        static $name: $crate::net::provider::ProviderOps<$t> = {
            #[allow(improper_ctypes)]
            extern "C" {
                static __this_module: ::kernel::types::Opaque<::kernel::bindings::module>;
            }
            // SAFETY: the address of this module's structure, valid for the
            // whole life of the module, which contains `$t`'s code.
            unsafe { $crate::net::provider::ProviderOps::<$t>::new(__this_module.get()) }
        };
    };
}
pub(crate) use memory_provider_ops;

/// # Safety
///
/// `pp` is a live pool whose `mp_priv` came from a binding of `T`.
unsafe fn provider_of<'a, T: MemoryProvider>(pp: &'a PagePool) -> ArcBorrow<'a, T> {
    // SAFETY: bindings of `T` set `mp_priv` to `Arc::as_ptr` of an `Arc<T>`,
    // which the pool keeps alive from `init` to `destroy` (and the binding
    // before that).
    unsafe { ArcBorrow::from_raw(pp.mp_priv().cast::<T>()) }
}

/// `memory_provider_ops::alloc_netmems` of providers of type `T`.
///
/// # Safety
///
/// Called by the page pool core only, with a live pool that uses these ops
/// (so its `mp_priv` came from a binding of `T`) and an empty cache.
unsafe extern "C" fn alloc_netmems<T: MemoryProvider>(
    pp: *mut bindings::page_pool,
    _gfp: bindings::gfp_t,
) -> bindings::netmem_ref {
    // SAFETY: the core passes a live pool.
    let pool = unsafe { PagePool::from_raw(pp) };
    // SAFETY: this is the alloc_netmems callback; the core only calls it with
    // an empty allocation cache (it WARNs otherwise, and so do we).
    if unsafe { (*pp).alloc.count } != 0 {
        kernel::pr_warn_once!("alloc_netmems called with a non-empty cache\n");
        return 0;
    }
    // SAFETY: `pool` uses our ops, so `mp_priv` is a `T`.
    let this = unsafe { provider_of::<T>(pool) };
    // SAFETY: see above; the pool keeps `this`, and so its area, alive.
    let mut batch = unsafe { AllocBatch::new(pool, this.net_iov_area().id()) };
    T::alloc_netmems(this, &mut batch);
    batch.finish()
}

/// `memory_provider_ops::release_netmem` of providers of type `T`.
///
/// # Safety
///
/// Called by the page pool core only, with a live pool that uses these ops
/// and a netmem of that pool.
unsafe extern "C" fn release_netmem<T: MemoryProvider>(
    pp: *mut bindings::page_pool,
    netmem: bindings::netmem_ref,
) -> bool {
    // SAFETY: the core passes a live pool.
    let pool = unsafe { PagePool::from_raw(pp) };
    // SAFETY: `pool` uses our ops.
    let this = unsafe { provider_of::<T>(pool) };
    // SAFETY: the core passes a netmem of `pool`, live during the call, and
    // gives it back to us (this is the release callback); `pool` belongs to
    // `this`, whose area gave it its buffers.
    let released = unsafe { Released::new(Netmem::from_raw(netmem), this.net_iov_area().id()) };
    T::release_netmem(this, released);
    // The provider keeps the buffer: the pool must not free it as a page.
    false
}

/// `memory_provider_ops::init` of providers of type `T`.
///
/// # Safety
///
/// Called by the page pool core only, with a live pool that uses these ops.
unsafe extern "C" fn init<T: MemoryProvider>(pp: *mut bindings::page_pool) -> i32 {
    // SAFETY: the core passes a live pool.
    let pool = unsafe { PagePool::from_raw(pp) };
    if pool.mp_priv().is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: `pool` uses our ops.
    let this = unsafe { provider_of::<T>(pool) };
    // What the area's buffers are: `1 << order` pages each, mapped by us
    // for the device to write. A pool that wants anything else (another
    // order, data or syncs past the buffer's end) would make the NIC write
    // past a buffer; refuse it here, whatever `T::init` says.
    let size = this.net_iov_area().buf_size() as u64;
    let (off, max_len) = (u64::from(pool.offset()), u64::from(pool.max_len()));
    if pool.order() != this.net_iov_area().buf_order()
        || off >= size
        || max_len > size - off
        || !pool.dma_map()
        || !pool.dma_from_device()
    {
        return EOPNOTSUPP.to_errno();
    }
    match T::init(this, pool) {
        Ok(()) => {
            // The pool's reference, dropped in `destroy`.
            let arc: Arc<T> = this.into();
            let _ = Arc::into_raw(arc);
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `memory_provider_ops::destroy` of providers of type `T`.
///
/// # Safety
///
/// Called by the page pool core only, once, for a pool whose `init`
/// succeeded.
unsafe extern "C" fn destroy<T: MemoryProvider>(pp: *mut bindings::page_pool) {
    // SAFETY: the core passes a live pool.
    let pool = unsafe { PagePool::from_raw(pp) };
    // SAFETY: `init` succeeded for this pool and leaked one reference of the
    // `Arc<T>` behind `mp_priv`; this is its matching release.
    let this = unsafe { Arc::<T>::from_raw(pool.mp_priv().cast::<T>()) };
    T::destroy(this.as_arc_borrow());
    drop(this);
}

/// `memory_provider_ops::nl_fill` of providers of type `T`: the
/// `mp-provider` nest (series patch "netdev: let memory providers in
/// modules describe themselves in dumps") with `T::NAME` and the area's
/// buffer size.
///
/// # Safety
///
/// Called by the netdev netlink code only, with the `mp_priv` of a queue
/// bound to a `T` (then `rxq` is that queue, under the device's instance
/// lock, so the binding and its reference live) or of a live page pool of
/// a `T` (then `rxq` is null, and the pool holds a reference from `init`),
/// and a message being filled.
unsafe extern "C" fn nl_fill<T: MemoryProvider>(
    mp_priv: *mut c_void,
    rsp: *mut bindings::sk_buff,
    rxq: *mut bindings::netdev_rx_queue,
) -> i32 {
    // SAFETY: `mp_priv` is an `Arc<T>` pointer that a binding or a pool
    // keeps alive through the call (see above).
    let this = unsafe { ArcBorrow::<T>::from_raw(mp_priv.cast::<T>()) };
    let len = u32::try_from(this.net_iov_area().buf_size()).unwrap_or(0);
    // SAFETY: `rsp` and `rxq` are the core's, valid for the call; the name
    // is a static C string.
    unsafe { bindings::netdev_nl_mp_info_fill(rsp, rxq, T::NAME.as_char_ptr(), len) }
}

/// `memory_provider_ops::uninstall` of providers of type `T`.
///
/// # Safety
///
/// Called by the core only, with the `mp_priv` of a binding of `T` whose
/// queue is still bound, and that queue.
unsafe extern "C" fn uninstall<T: MemoryProvider>(
    mp_priv: *mut c_void,
    rxq: *mut bindings::netdev_rx_queue,
) {
    // SAFETY: `mp_priv` comes from a [`Binding`] of `T`, which owns a
    // reference to the `Arc<T>` for as long as the queue is bound. Our own
    // reference keeps `T` alive through the callback, which may end the
    // binding (and drop the binding's reference) before it returns.
    let this: Arc<T> = unsafe { ArcBorrow::from_raw(mp_priv.cast::<T>()) }.into();
    // The core clears the queue's parameters after this callback: the one
    // binding of `this` (see `bind_rxq`) must not close the queue again,
    // even if it is dropped before it learns of this (a bind in progress).
    this.binding_slot().0.store(SLOT_UNINSTALLED, Release);
    let token = Uninstall {
        mp_priv: mp_priv as usize,
        area: this.net_iov_area().id(),
        _rxq: rxq as usize,
        _p: PhantomData,
    };
    T::uninstall(this.as_arc_borrow(), &token);
    drop(this);
}

/// Proof that the core is uninstalling the binding of one rx queue: given
/// to [`MemoryProvider::uninstall`], which passes it to
/// [`Binding::uninstalled`].
pub(crate) struct Uninstall<'a> {
    mp_priv: usize,
    /// The id of the uninstalled provider's area: only its DMA mapping may
    /// be torn down on the strength of this token.
    pub(super) area: u64,
    // The queue the core names: the physical one of a leased queue, so it
    // is not compared (a binding's `mp_priv` is unique to it).
    _rxq: usize,
    _p: PhantomData<&'a ()>,
}

/// The binding of an rx queue to a provider of type `T`, from
/// [`bind_rxq`] until [`Binding::unbind`] (or drop) or, when the device goes
/// away, [`Binding::uninstalled`].
///
/// # Invariants
///
/// The queue `rxq` of `dev` is bound with `mp_ops == ops` and `mp_priv ==
/// Arc::as_ptr(&this)`, or the core uninstalled it (`this`'s slot says so):
/// the queue's pointer is backed by the reference `this` holds. It is the
/// only binding of `this` (its slot is not free while it exists).
pub(crate) struct Binding<T: MemoryProvider> {
    dev: NetDevRefBox,
    rxq: u32,
    ops: &'static ProviderOps<T>,
    this: Arc<T>,
}

/// Binds rx queue `rxq` of the locked `dev` to `this`, a provider of type
/// `T` with ops `ops` (restarting the queue). On failure returns the errno
/// and the core's explanation, if any.
pub(crate) fn bind_rxq<T: MemoryProvider>(
    dev: &LockedNetDev,
    rxq: u32,
    ops: &'static ProviderOps<T>,
    this: Arc<T>,
) -> core::result::Result<Binding<T>, (Error, Option<&'static CStr>)> {
    let held = dev.hold().map_err(|e| (e, None))?;
    let slot = &this.binding_slot().0;
    if slot
        .compare_exchange(SLOT_FREE, SLOT_BOUND, Acquire, Acquire)
        .is_err()
    {
        return Err((EBUSY, None));
    }
    let p = params(ops, &this);
    // SAFETY: `p` names our ops and an `Arc<T>` that the returned binding
    // keeps alive until the queue is unbound or uninstalled; `this` has no
    // other binding (its slot was free), so `mp_priv` names this one.
    if let Err(e) = unsafe { dev.mp_open_rxq(rxq, &p) } {
        slot.store(SLOT_FREE, Release);
        return Err(e);
    }
    // INVARIANT: bound just now with `p`; the slot is taken.
    Ok(Binding {
        dev: held,
        rxq,
        ops,
        this,
    })
}

impl<T: MemoryProvider> Binding<T> {
    /// Unbinds the queue (it restarts without the provider).
    pub(crate) fn unbind(self) {
        drop(self);
    }

    /// Ends the binding the core is uninstalling (the device is going
    /// away): drops the device reference and the provider reference
    /// without unbinding, which the core does itself. A token of another
    /// binding's uninstall is refused: the binding is handed back (`Err`),
    /// still bound.
    pub(crate) fn uninstalled(self, token: &Uninstall<'_>) -> core::result::Result<(), Self> {
        if token.mp_priv != Arc::as_ptr(&self.this) as usize {
            // The trampoline marked the slot for the uninstall it names,
            // which is not this binding's: this one stays bound.
            self.this.binding_slot().0.store(SLOT_BOUND, Release);
            return Err(self);
        }
        self.this.binding_slot().0.store(SLOT_FREE, Release);
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; the fields are
        // moved out once each.
        let (dev, arc) = unsafe { (core::ptr::read(&this.dev), core::ptr::read(&this.this)) };
        drop(dev);
        drop(arc);
        Ok(())
    }
}

impl<T: MemoryProvider> Drop for Binding<T> {
    fn drop(&mut self) {
        let slot = &self.this.binding_slot().0;
        let dev = self.dev.lock();
        // Under the device's lock, which `uninstall` runs under too: either
        // it ran (and the core cleared the queue) or it will not for us.
        // For a leased queue `uninstall` holds only the physical device's
        // lock; then the close below may race with it, and the core's close
        // returns early in either order (the queue is unregistering).
        if slot.load(Acquire) != SLOT_UNINSTALLED {
            let p = params(self.ops, &self.this);
            // The binding's own parameters (type invariant); afterwards the
            // queue no longer points at `this`, whose reference is dropped
            // next.
            dev.mp_close_rxq(self.rxq, &p);
        }
        drop(dev);
        slot.store(SLOT_FREE, Release);
    }
}

/// The parameters that bind an rx queue to `this`.
fn params<T: MemoryProvider>(
    ops: &'static ProviderOps<T>,
    this: &Arc<T>,
) -> bindings::pp_memory_provider_params {
    let area = this.net_iov_area();
    bindings::pp_memory_provider_params {
        // The pointer from the `Arc` itself: valid for `Arc::from_raw` and
        // `ArcBorrow::from_raw` in the callbacks.
        mp_priv: Arc::as_ptr(this).cast_mut().cast(),
        mp_ops: ops.as_raw(),
        // Buffers larger than a page need a queue that takes them (the
        // core refuses a driver without `QCFG_RX_PAGE_SIZE`); one page is
        // every driver's default, asked for by not asking.
        rx_page_size: if area.buf_order() == 0 {
            0
        } else {
            area.buf_size() as u32
        },
    }
}
