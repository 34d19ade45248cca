// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A set of pinned pages mapped for DMA from one device.

use core::ptr::NonNull;

use kernel::{
    bindings,
    prelude::*,
    sync::Arc,
    types::Opaque, //
};

use super::pin::{PinnedPages, PAGE_SIZE};

/// Attributes of receive buffer mappings, as io_uring zcrx uses them: the
/// page pool syncs what it hands to the device.
const ATTRS: usize = (bindings::DMA_ATTR_SKIP_CPU_SYNC | bindings::DMA_ATTR_WEAK_ORDERING) as usize;

/// A reference to a device that does DMA (`get_device`/`put_device`).
///
/// # Invariants
///
/// We hold one reference to the device.
pub(crate) struct DmaDevice(NonNull<bindings::device>);

// SAFETY: device references may be dropped from any thread.
unsafe impl Send for DmaDevice {}
// SAFETY: `&DmaDevice` only hands out the pointer.
unsafe impl Sync for DmaDevice {}

impl DmaDevice {
    /// Takes a reference to `dev`.
    ///
    /// # Safety
    ///
    /// `dev` must be a live device.
    pub(crate) unsafe fn get(dev: NonNull<bindings::device>) -> Self {
        // SAFETY: the caller guarantees `dev` is live.
        unsafe { bindings::get_device(dev.as_ptr()) };
        DmaDevice(dev)
    }

    fn as_raw(&self) -> *mut bindings::device {
        self.0.as_ptr()
    }

    /// An identity of the device (its address), to compare with a page
    /// pool's.
    pub(crate) fn id(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Clone for DmaDevice {
    fn clone(&self) -> Self {
        // SAFETY: we hold a reference, so the device is live.
        unsafe { Self::get(self.0) }
    }
}

impl Drop for DmaDevice {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold a reference.
        unsafe { bindings::put_device(self.0.as_ptr()) };
    }
}

/// Pinned pages mapped `DMA_FROM_DEVICE` for `dev`.
///
/// # Invariants
///
/// `sgt` is an allocated scatterlist of `pages`, mapped for `dev` with
/// `ATTRS`; drop unmaps and frees it. The mapping owns a reference to the
/// pages, so they stay pinned until it is unmapped.
pub(crate) struct DmaMapping {
    dev: DmaDevice,
    sgt: KBox<Opaque<bindings::sg_table>>,
    _pages: Arc<PinnedPages>,
}

// SAFETY: mappings may be torn down from any thread.
unsafe impl Send for DmaMapping {}
// SAFETY: `&DmaMapping` only reads the mapped addresses.
unsafe impl Sync for DmaMapping {}

impl DmaMapping {
    /// Maps `pages` for `dev`, in segments of at most `max_segment` bytes
    /// (rounded down to whole pages): a multiple of the caller's buffer
    /// size keeps a contiguous run of buffers from being cut mid-buffer.
    pub(crate) fn new(dev: DmaDevice, pages: Arc<PinnedPages>, max_segment: u32) -> Result<Self> {
        let sgt = KBox::new(Opaque::<bindings::sg_table>::zeroed(), GFP_KERNEL_ACCOUNT)?;
        let n = u32::try_from(pages.len()).map_err(|_| EINVAL)?;
        let size = pages.len() * PAGE_SIZE;
        // SAFETY: `sgt` is a zeroed table we own; the page array is valid
        // and the pages pinned.
        let ret = unsafe {
            bindings::sg_alloc_table_from_pages_segment(
                sgt.get(),
                pages.as_raw_slice().as_ptr().cast_mut(),
                n,
                0,
                size,
                max_segment,
                bindings::GFP_KERNEL_ACCOUNT,
            )
        };
        kernel::error::to_result(ret)?;
        // SAFETY: the table was just allocated for live pages; `dev` is live.
        let ret = unsafe {
            bindings::dma_map_sgtable(
                dev.as_raw(),
                sgt.get(),
                bindings::dma_data_direction_DMA_FROM_DEVICE,
                ATTRS,
            )
        };
        if ret < 0 {
            // SAFETY: allocated above, not mapped.
            unsafe { bindings::sg_free_table(sgt.get()) };
            return Err(Error::from_errno(ret));
        }
        Ok(Self {
            dev,
            sgt,
            _pages: pages,
        })
    }

    /// Whether this is a mapping for `dev`.
    pub(crate) fn is_for(&self, dev: &DmaDevice) -> bool {
        self.dev.0 == dev.0
    }

    /// The identity of the device it is mapped for ([`DmaDevice::id`]).
    pub(crate) fn device_id(&self) -> usize {
        self.dev.id()
    }

    /// Calls `f(dma_address, length)` for each mapped segment, in page order.
    pub(crate) fn for_each_segment(&self, mut f: impl FnMut(u64, usize) -> Result) -> Result {
        // SAFETY: the table is mapped (type invariant).
        let (mut sg, n) = unsafe { ((*self.sgt.get()).sgl, (*self.sgt.get()).nents) };
        for _ in 0..n {
            if sg.is_null() {
                return Err(EINVAL);
            }
            // SAFETY: `sg` is one of the table's `nents` mapped entries.
            let (addr, len) = unsafe { (bindings::sg_dma_address(sg), bindings::sg_dma_len(sg)) };
            f(addr, len as usize)?;
            // SAFETY: as above.
            sg = unsafe { bindings::sg_next(sg) };
        }
        Ok(())
    }
}

impl Drop for DmaMapping {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the table is mapped for `dev` with
        // `ATTRS` and allocated.
        unsafe {
            bindings::dma_unmap_sgtable(
                self.dev.as_raw(),
                self.sgt.get(),
                bindings::dma_data_direction_DMA_FROM_DEVICE,
                ATTRS,
            );
            bindings::sg_free_table(self.sgt.get());
        }
    }
}
