// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Receive memory mapped for DMA from one device: pinned user pages, or a
//! dma-buf attached to the device.

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

    /// The longest DMA segment the device takes, as
    /// `dma_get_max_seg_size()` says (an inline function bindgen does not
    /// see): its `dma_parms`, else 64 KiB.
    pub(crate) fn max_segment_size(&self) -> u32 {
        // SAFETY: we hold a reference, so the device is live; `dma_parms`,
        // when set, points at parameters that live as long as the device
        // (in the bus's device structure, e.g. a PCI device's).
        let max = unsafe {
            let parms = (*self.as_raw()).dma_parms;
            if parms.is_null() {
                0
            } else {
                (*parms).max_segment_size
            }
        };
        if max == 0 {
            1 << 16
        } else {
            max
        }
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

/// A reference to a dma-buf (`dma_buf_get`/`dma_buf_put`): memory another
/// driver exports (a GPU's, or udmabuf's view of a memfd).
///
/// # Invariants
///
/// We hold one reference to the dma-buf.
pub(crate) struct DmaBuf(NonNull<bindings::dma_buf>);

// SAFETY: dma-buf references may be dropped from any thread.
unsafe impl Send for DmaBuf {}
// SAFETY: `&DmaBuf` only reads the size, set at export and never changed.
unsafe impl Sync for DmaBuf {}

impl DmaBuf {
    /// The dma-buf behind file descriptor `fd` of the current process:
    /// `EBADF` if `fd` is not open, `EINVAL` if it is not a dma-buf.
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        // SAFETY: takes a reference to the file's dma-buf or returns an
        // error pointer.
        let p = kernel::error::from_err_ptr(unsafe { bindings::dma_buf_get(fd) })?;
        NonNull::new(p).map(DmaBuf).ok_or(EINVAL)
    }

    /// Its size in bytes.
    pub(crate) fn size(&self) -> usize {
        // SAFETY: we hold a reference; `size` is set at export time.
        unsafe { (*self.0.as_ptr()).size }
    }
}

impl Drop for DmaBuf {
    fn drop(&mut self) {
        // SAFETY: by the type invariant we hold a reference.
        unsafe { bindings::dma_buf_put(self.0.as_ptr()) };
    }
}

/// The memory behind an area's buffers.
pub(crate) enum AreaMemory {
    /// The user's pages, pinned (and charged) by us.
    Pages(Arc<PinnedPages>),
    /// The first `len` bytes of a dma-buf (`len <= buf.size()`).
    DmaBuf { buf: Arc<DmaBuf>, len: usize },
}

impl AreaMemory {
    /// The first `len` bytes of `buf`: `EINVAL` if it is smaller.
    pub(crate) fn dmabuf(buf: DmaBuf, len: usize) -> Result<Self> {
        if len > buf.size() {
            return Err(EINVAL);
        }
        Ok(AreaMemory::DmaBuf {
            buf: Arc::new(buf, GFP_KERNEL_ACCOUNT)?,
            len,
        })
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            AreaMemory::Pages(p) => p.len() * PAGE_SIZE,
            AreaMemory::DmaBuf { len, .. } => *len,
        }
    }

    /// The pinned pages, which the CPU can fill (copies); `None` for a
    /// dma-buf, which the module does not map for the CPU.
    pub(crate) fn pages(&self) -> Option<&PinnedPages> {
        match self {
            AreaMemory::Pages(p) => Some(p),
            AreaMemory::DmaBuf { .. } => None,
        }
    }

    /// Maps the memory for `dev` (pages in segments of at most
    /// `max_segment` bytes; a dma-buf as its exporter does). The mapping
    /// may cover more than [`AreaMemory::len`] (a dma-buf is mapped
    /// whole).
    pub(crate) fn map(&self, dev: DmaDevice, max_segment: u32) -> Result<DmaMapping> {
        match self {
            AreaMemory::Pages(p) => DmaMapping::new(dev, p.clone(), max_segment),
            AreaMemory::DmaBuf { buf, .. } => DmaMapping::new_dmabuf(dev, buf.clone()),
        }
    }
}

/// What a [`DmaMapping`] maps, and how to undo it.
enum Mapped {
    /// Pinned pages: our scatterlist, mapped with `ATTRS`.
    Pages {
        sgt: KBox<Opaque<bindings::sg_table>>,
        _pages: Arc<PinnedPages>,
    },
    /// A dma-buf attached to the device and mapped by its exporter.
    DmaBuf {
        buf: Arc<DmaBuf>,
        attach: NonNull<bindings::dma_buf_attachment>,
        sgt: NonNull<bindings::sg_table>,
    },
}

/// `DMA_FROM_DEVICE`: a constant of the enum's own name up to 7.2, a
/// variant of the newtype enum bindgen makes of it from 7.3 on.
#[cfg(not(zcrx_dma_dir_newtype))]
pub(crate) const FROM_DEVICE: bindings::dma_data_direction =
    bindings::dma_data_direction_DMA_FROM_DEVICE;
/// `DMA_FROM_DEVICE`: a constant of the enum's own name up to 7.2, a
/// variant of the newtype enum bindgen makes of it from 7.3 on.
#[cfg(zcrx_dma_dir_newtype)]
pub(crate) const FROM_DEVICE: bindings::dma_data_direction =
    bindings::dma_data_direction::DMA_FROM_DEVICE;

/// Receive memory mapped `DMA_FROM_DEVICE` for `dev`.
///
/// # Invariants
///
/// `map` is a mapped scatterlist for `dev`: of pinned pages, allocated and
/// mapped with `ATTRS` by us, owning a reference to the pages so that they
/// stay pinned until it is unmapped; or of a dma-buf, attached to `dev` and
/// mapped by its exporter, owning a reference to the dma-buf. Drop unmaps
/// (and detaches).
pub(crate) struct DmaMapping {
    dev: DmaDevice,
    map: Mapped,
}

// SAFETY: mappings may be torn down from any thread.
unsafe impl Send for DmaMapping {}
// SAFETY: `&DmaMapping` only reads the mapped addresses.
unsafe impl Sync for DmaMapping {}

impl DmaMapping {
    /// Maps `pages` for `dev`, in segments of at most `max_segment` bytes
    /// (rounded down to whole pages, at least one page).
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
                max_segment.max(PAGE_SIZE as u32),
                bindings::GFP_KERNEL_ACCOUNT,
            )
        };
        kernel::error::to_result(ret)?;
        // SAFETY: the table was just allocated for live pages; `dev` is live.
        let ret = unsafe { bindings::dma_map_sgtable(dev.as_raw(), sgt.get(), FROM_DEVICE, ATTRS) };
        if ret < 0 {
            // SAFETY: allocated above, not mapped.
            unsafe { bindings::sg_free_table(sgt.get()) };
            return Err(Error::from_errno(ret));
        }
        Ok(Self {
            dev,
            map: Mapped::Pages { sgt, _pages: pages },
        })
    }

    /// Attaches `buf` to `dev` and maps it `DMA_FROM_DEVICE` (the exporter
    /// builds the scatterlist). May sleep.
    pub(crate) fn new_dmabuf(dev: DmaDevice, buf: Arc<DmaBuf>) -> Result<Self> {
        // SAFETY: `buf` holds a reference to the dma-buf and `dev` to the
        // device; returns an attachment or an error pointer.
        let attach = kernel::error::from_err_ptr(unsafe {
            bindings::dma_buf_attach(buf.0.as_ptr(), dev.as_raw())
        })?;
        let attach = NonNull::new(attach).ok_or(EINVAL)?;
        // SAFETY: `attach` was just made for this dma-buf; mapping without
        // the reservation lock held is what the `_unlocked` variant is for.
        let sgt = kernel::error::from_err_ptr(unsafe {
            bindings::dma_buf_map_attachment_unlocked(attach.as_ptr(), FROM_DEVICE)
        });
        let sgt = match sgt.map(NonNull::new) {
            Ok(Some(sgt)) => sgt,
            other => {
                // SAFETY: attached above, not mapped.
                unsafe { bindings::dma_buf_detach(buf.0.as_ptr(), attach.as_ptr()) };
                return Err(other.err().unwrap_or(EINVAL));
            }
        };
        Ok(Self {
            dev,
            map: Mapped::DmaBuf { buf, attach, sgt },
        })
    }

    fn sgt(&self) -> *mut bindings::sg_table {
        match &self.map {
            Mapped::Pages { sgt, .. } => sgt.get(),
            Mapped::DmaBuf { sgt, .. } => sgt.as_ptr(),
        }
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
        let sgt = self.sgt();
        // SAFETY: the table is mapped (type invariant).
        let (mut sg, n) = unsafe { ((*sgt).sgl, (*sgt).nents) };
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
        match &self.map {
            Mapped::Pages { sgt, .. } => {
                // SAFETY: by the type invariant the table is mapped for
                // `dev` with `ATTRS` and allocated by us.
                unsafe {
                    bindings::dma_unmap_sgtable(self.dev.as_raw(), sgt.get(), FROM_DEVICE, ATTRS);
                    bindings::sg_free_table(sgt.get());
                }
            }
            Mapped::DmaBuf { buf, attach, sgt } => {
                // SAFETY: by the type invariant `sgt` is the exporter's
                // mapping of `attach`, an attachment of `buf`; both are
                // undone once, here.
                unsafe {
                    bindings::dma_buf_unmap_attachment_unlocked(
                        attach.as_ptr(),
                        sgt.as_ptr(),
                        FROM_DEVICE,
                    );
                    bindings::dma_buf_detach(buf.0.as_ptr(), attach.as_ptr());
                }
            }
        }
    }
}
