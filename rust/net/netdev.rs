// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Network devices: lookup with the instance lock held, references, and
//! binding a memory provider to an rx queue.

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{
    bindings,
    prelude::*,
    str::CStr,
    task::Task, //
};

use crate::mm::dma::DmaDevice;

/// A copy of an interface name, for messages.
pub(crate) struct NetDevName([u8; 16]);

impl kernel::fmt::Display for NetDevName {
    fn fmt(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        match core::str::from_utf8(&self.0[..len]) {
            Ok(s) => f.write_str(s),
            Err(_) => f.write_str("?"),
        }
    }
}

/// A network device whose instance lock (`netdev_lock`) we hold.
///
/// # Invariants
///
/// `dev` is a registered device of the caller's network namespace, locked
/// by us until drop; the lock keeps it from being unregistered.
pub(crate) struct LockedNetDev {
    dev: NonNull<bindings::net_device>,
}

impl LockedNetDev {
    /// Looks up `ifindex` in the current task's network namespace and locks
    /// it. `ENODEV` if there is no such device.
    pub(crate) fn lock_by_index(ifindex: u32) -> Result<Self> {
        let ifindex = i32::try_from(ifindex).map_err(|_| ENODEV)?;
        // SAFETY: in process context `current` is valid; its `nsproxy` is
        // only changed by the task itself, and is NULL once it is exiting
        // (a close from the exit path), checked below.
        let nsproxy = unsafe { (*Task::current_raw()).nsproxy };
        if nsproxy.is_null() {
            return Err(ENODEV);
        }
        // SAFETY: a live nsproxy of the current task.
        let net = unsafe { (*nsproxy).net_ns };
        // SAFETY: `net` is the caller's live namespace.
        let dev = unsafe { bindings::netdev_get_by_index_lock(net, ifindex) };
        // INVARIANT: on success the device is returned locked.
        NonNull::new(dev).map(|dev| Self { dev }).ok_or(ENODEV)
    }

    /// The interface name, copied (a rename may write it meanwhile; the
    /// instance lock does not cover it).
    pub(crate) fn name(&self) -> NetDevName {
        let mut n = NetDevName([0; 16]);
        let src = self.dev.as_ptr();
        for (i, b) in n.0.iter_mut().enumerate().take(15) {
            // SAFETY: the device is live (type invariant); each byte of the
            // fixed-size `name` array is read once through a raw place.
            *b = unsafe { core::ptr::addr_of!((*src).name[i]).read_volatile() };
            if *b == 0 {
                break;
            }
        }
        n
    }

    /// The device's identity, for telling devices apart (its address,
    /// never dereferenced through this value). Stable while the device is
    /// registered.
    pub(crate) fn id(&self) -> usize {
        self.dev.as_ptr() as usize
    }

    /// Number of rx queues in use.
    pub(crate) fn rx_queues(&self) -> u32 {
        // SAFETY: the device is live; `real_num_rx_queues` changes only
        // under the instance lock, which we hold.
        unsafe { core::ptr::addr_of!((*self.dev.as_ptr()).real_num_rx_queues).read() }
    }

    /// Whether header/data split is on with a zero threshold, as binding a
    /// provider requires.
    pub(crate) fn header_split_ready(&self) -> bool {
        // SAFETY: the device is live; `cfg` is replaced only under the
        // instance lock, which we hold.
        let cfg = unsafe { core::ptr::addr_of!((*self.dev.as_ptr()).cfg).read() };
        if cfg.is_null() {
            return false;
        }
        // SAFETY: `cfg` belongs to the locked device; its fields are written
        // under the instance lock.
        let (split, thresh) = unsafe {
            (
                core::ptr::addr_of!((*cfg).hds_config).read(),
                core::ptr::addr_of!((*cfg).hds_thresh).read(),
            )
        };
        u32::from(split) == bindings::ethtool_tcp_data_split_ETHTOOL_TCP_DATA_SPLIT_ENABLED
            && thresh == 0
    }

    /// The device that DMAs for rx queue `rxq`, if the queue exists and can
    /// do zero-copy at all.
    pub(crate) fn queue_dma_dev(&self, rxq: u32) -> Option<DmaDevice> {
        if rxq >= self.rx_queues() {
            return None;
        }
        // SAFETY: the device is locked, as the function requires, and `rxq`
        // is one of its rx queues (drivers index their queues with it).
        let dev = unsafe {
            bindings::netdev_queue_get_dma_dev(
                self.dev.as_ptr(),
                rxq,
                bindings::netdev_queue_type_NETDEV_QUEUE_TYPE_RX,
            )
        };
        // SAFETY: a non-null result is a live device of the locked netdev.
        NonNull::new(dev).map(|dev| unsafe { DmaDevice::get(dev) })
    }

    /// Takes a tracked reference to the device.
    pub(super) fn hold(&self) -> Result<NetDevRefBox> {
        let mut r = KBox::new(
            NetDevRef {
                dev: self.dev,
                // SAFETY: a zeroed tracker is the unused state.
                tracker: unsafe { core::mem::zeroed() },
            },
            GFP_KERNEL,
        )?;
        // SAFETY: the device is live; the tracker is ours and stays at a
        // stable address (boxed) until `netdev_put`.
        unsafe { bindings::netdev_hold(self.dev.as_ptr(), &mut r.tracker, bindings::GFP_KERNEL) };
        Ok(NetDevRefBox(r))
    }

    /// Binds a memory provider to rx queue `rxq`, restarting the queue.
    /// On failure returns the errno and the core's explanation, if any.
    ///
    /// # Safety
    ///
    /// `params` name valid ops whose owner is loaded, and a `mp_priv` those
    /// ops accept that stays valid until the queue is unbound or the
    /// binding uninstalled (see [`super::provider::bind_rxq`]).
    pub(super) unsafe fn mp_open_rxq(
        &self,
        rxq: u32,
        params: &bindings::pp_memory_provider_params,
    ) -> core::result::Result<(), (Error, Option<&'static CStr>)> {
        // SAFETY: all-zero is a valid, empty extack.
        let mut extack: bindings::netlink_ext_ack = unsafe { core::mem::zeroed() };
        // SAFETY: the device is locked; the caller guarantees `params`.
        let ret =
            unsafe { bindings::netif_mp_open_rxq(self.dev.as_ptr(), rxq, params, &mut extack) };
        if ret == 0 {
            return Ok(());
        }
        let msg = if extack._msg.is_null() {
            None
        } else {
            // SAFETY: NL_SET_ERR_MSG stores pointers to static strings.
            Some(unsafe { CStr::from_char_ptr(extack._msg) })
        };
        Err((Error::from_errno(ret), msg))
    }
}

impl Drop for LockedNetDev {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold the lock.
        unsafe { bindings::netdev_unlock(self.dev.as_ptr()) };
    }
}

/// A tracked reference to a network device (`netdev_hold`).
pub(crate) struct NetDevRef {
    dev: NonNull<bindings::net_device>,
    tracker: bindings::netdevice_tracker,
}

/// A boxed [`NetDevRef`]: the tracker must not move while held.
///
/// # Invariants
///
/// The box holds a reference taken with `netdev_hold` on its own tracker.
pub(crate) struct NetDevRefBox(KBox<NetDevRef>);

// SAFETY: a netdev reference may be dropped from any thread.
unsafe impl Send for NetDevRefBox {}
// SAFETY: `&NetDevRefBox` only allows locking the device, which is thread safe.
unsafe impl Sync for NetDevRefBox {}

impl NetDevRefBox {
    /// Takes the device's instance lock.
    pub(super) fn lock(&self) -> NetDevGuard<'_> {
        // SAFETY: we hold a reference, so the device is live.
        unsafe { bindings::netdev_lock(self.0.dev.as_ptr()) };
        NetDevGuard {
            dev: self,
            _not_send: PhantomData,
        }
    }
}

impl Drop for NetDevRefBox {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the reference was taken on this tracker.
        unsafe { bindings::netdev_put(self.0.dev.as_ptr(), &mut self.0.tracker) };
    }
}

/// The instance lock of a referenced device, released on drop. Not `Send`:
/// the lock (a mutex) must be released by the task that took it.
pub(crate) struct NetDevGuard<'a> {
    dev: &'a NetDevRefBox,
    _not_send: PhantomData<*mut ()>,
}

impl NetDevGuard<'_> {
    /// Unbinds the memory provider described by `params` from rx queue
    /// `rxq`; a no-op when the device already dropped the binding.
    pub(super) fn mp_close_rxq(&self, rxq: u32, params: &bindings::pp_memory_provider_params) {
        // SAFETY: the device is locked; the core compares `params` with the
        // queue's binding and does nothing if they differ.
        unsafe { bindings::netif_mp_close_rxq(self.dev.0.dev.as_ptr(), rxq, params) };
    }
}

impl Drop for NetDevGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: `lock()` took the lock.
        unsafe { bindings::netdev_unlock(self.dev.0.dev.as_ptr()) };
    }
}
