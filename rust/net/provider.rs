// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Page-pool memory providers implemented in Rust.
//!
//! A type implementing [`MemoryProvider`] becomes a `struct
//! memory_provider_ops` in the module's read-only data, with the module as
//! its owner, through [`memory_provider_ops!`]. The provider's private data
//! is an `Arc<T>`: the binding of an rx queue points at it, and every page
//! pool created for the queue holds a reference from `init` to `destroy`.

use core::ffi::c_void;

use kernel::{
    bindings,
    prelude::*,
    sync::{Arc, ArcBorrow}, //
};

use super::{
    netmem::Netmem,
    page_pool::{AllocBatch, PagePool}, //
};

/// The callbacks of a memory provider.
pub(crate) trait MemoryProvider: Send + Sync + Sized + 'static {
    /// Fill `batch` with buffers for its pool; may leave it empty.
    fn alloc_netmems(this: ArcBorrow<'_, Self>, batch: &mut AllocBatch<'_>);

    /// Take back a buffer the pool no longer wants.
    fn release_netmem(this: ArcBorrow<'_, Self>, pool: &PagePool, nm: Netmem<'_>);

    /// Check that `pool` suits this provider. After success the pool holds a
    /// reference to the provider until it is destroyed.
    fn init(this: ArcBorrow<'_, Self>, pool: &PagePool) -> Result;

    /// A pool that `init` accepted is being destroyed; its reference is
    /// dropped right after.
    fn destroy(this: ArcBorrow<'_, Self>);

    /// The rx queue's device is going away: drop what refers to it. The
    /// binding is cleared by the core afterwards.
    fn uninstall(this: ArcBorrow<'_, Self>);
}

/// A `struct memory_provider_ops` that can live in a `static`.
#[repr(transparent)]
pub(crate) struct ProviderOps(bindings::memory_provider_ops);

// SAFETY: the table is never written after initialisation; the owner pointer
// is only used by the core's module reference counting.
unsafe impl Sync for ProviderOps {}

impl ProviderOps {
    /// Builds the ops of `T`, owned by `owner`.
    pub(crate) const fn new<T: MemoryProvider>(owner: *mut bindings::module) -> Self {
        ProviderOps(bindings::memory_provider_ops {
            owner,
            alloc_netmems: Some(alloc_netmems::<T>),
            release_netmem: Some(release_netmem::<T>),
            init: Some(init::<T>),
            destroy: Some(destroy::<T>),
            nl_fill: Some(nl_fill),
            uninstall: Some(uninstall::<T>),
        })
    }

    /// The raw table.
    pub(crate) fn as_raw(&'static self) -> *const bindings::memory_provider_ops {
        &self.0
    }
}

/// Defines `static $name: ProviderOps` for provider type `$t`, owned by this
/// module (so that the core pins the module while the ops are in use).
macro_rules! memory_provider_ops {
    ($name:ident, $t:ty) => {
        static $name: $crate::net::provider::ProviderOps = {
            #[allow(improper_ctypes)]
            extern "C" {
                static __this_module: ::kernel::types::Opaque<::kernel::bindings::module>;
            }
            // SAFETY: only the address of the module structure is taken; it
            // is valid for the whole life of the module.
            $crate::net::provider::ProviderOps::new::<$t>(unsafe { __this_module.get() })
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
    // SAFETY: see above.
    let mut batch = unsafe { AllocBatch::new(pool) };
    // SAFETY: `pool` uses our ops, so `mp_priv` is a `T`.
    T::alloc_netmems(unsafe { provider_of::<T>(pool) }, &mut batch);
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
    T::release_netmem(
        unsafe { provider_of::<T>(pool) },
        pool,
        Netmem::from_raw(netmem),
    );
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

/// `memory_provider_ops::nl_fill`: nothing to add.
///
/// # Safety
///
/// Called by the netdev netlink code only; it touches none of its arguments.
unsafe extern "C" fn nl_fill(
    _mp_priv: *mut c_void,
    _rsp: *mut bindings::sk_buff,
    _rxq: *mut bindings::netdev_rx_queue,
) -> i32 {
    // The netdev netlink family has no attribute for out-of-tree providers:
    // dumps show the queue as bound, without provider details.
    0
}

/// `memory_provider_ops::uninstall` of providers of type `T`.
///
/// # Safety
///
/// Called by the core only, with the `mp_priv` of a binding of `T` whose
/// queue is still bound.
unsafe extern "C" fn uninstall<T: MemoryProvider>(
    mp_priv: *mut c_void,
    _rxq: *mut bindings::netdev_rx_queue,
) {
    // SAFETY: `mp_priv` comes from a binding of `T`, whose owner keeps the
    // `Arc<T>` alive for as long as the queue is bound.
    T::uninstall(unsafe { ArcBorrow::from_raw(mp_priv.cast::<T>()) });
}

/// The parameters that bind an rx queue to `this`, a provider of type `T`
/// that lives in an `Arc<T>`. Binding and unbinding must use equal params.
pub(crate) fn params<T: MemoryProvider>(
    ops: &'static ProviderOps,
    this: &T,
) -> bindings::pp_memory_provider_params {
    bindings::pp_memory_provider_params {
        mp_priv: core::ptr::from_ref(this).cast_mut().cast(),
        mp_ops: ops.as_raw(),
        ..pin_init::zeroed()
    }
}
