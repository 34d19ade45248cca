// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The area: user memory registered as receive buffers.
//!
//! The user's pages are pinned long-term and charged to its locked memory;
//! each buffer (a page, or a power of two of them) has a `net_iov`, a user
//! reference count and a place on the free list (all kept by
//! [`NetIovArea`], the buffer ledger). At bind time the pages are
//! DMA-mapped for the rx queue's device and every net_iov gets its DMA
//! address.
//!
//! Life cycle of a buffer (see Documentation/zcrx-rs.rst for the diagram):
//! free list → page pool (alloc_netmems) → NIC → skb in a socket → handed
//! to the user in a receive record (user reference) → refill ring → back
//! to its pool, or to the free list (copy buffers, released pools).

use kernel::{prelude::*, sync::Arc};

use crate::mm::{
    dma::{AreaMemory, DmaBuf, DmaDevice},
    pin::{PinnedPages, PAGE_SIZE},
};
use crate::net::{
    netmem::{DmaUse, NetIovArea},
    provider::Uninstall,
};
use crate::stats::{GaugeShare, GLOBAL};
use crate::uapi;

/// A registered area.
///
/// # Invariants
///
/// `niovs` owns the pinned pages (one per buffer) and their charge (held
/// by a DMA mapping too while it lasts); `_counted` is dropped last, so the
/// `areas` gauge falls once the rest of the area is gone.
#[pin_data(PinnedDrop)]
pub(crate) struct Area {
    #[pin]
    niovs: NetIovArea,
    addr: u64,
    _counted: GaugeShare,
}

impl Area {
    /// Registers `len` bytes of the caller's memory at `addr` as buffers of
    /// `buf_size` bytes (0: a page).
    ///
    /// `EINVAL`: not page aligned, not a whole number of buffers, empty,
    /// too large or wrapping, or a buffer size that is not a power of two
    /// from the page size to `ZCRX_RS_BUF_MAX_SIZE`;
    /// `ENOMEM`: over `RLIMIT_MEMLOCK` (see [`crate::mm::pin::PinCharge`]); for
    /// the memory itself (`EFAULT`, `EACCES`, `EOPNOTSUPP`) see
    /// [`PinnedPages::pin_current`].
    pub(crate) fn register(addr: u64, len: u64, buf_size: u32) -> Result<Arc<Self>> {
        let page = PAGE_SIZE as u64;
        let buf = Self::check_size(len, buf_size)?;
        if addr % page != 0 {
            return Err(EINVAL);
        }
        addr.checked_add(len).ok_or(EINVAL)?;
        let addr_usize = usize::try_from(addr).map_err(|_| EINVAL)?;
        let n = usize::try_from(len / page).map_err(|_| EINVAL)?;

        let pages = Arc::new(
            PinnedPages::pin_current(addr_usize, n, crate::this_module(), &GLOBAL.pinned_pages)?,
            GFP_KERNEL_ACCOUNT,
        )?;
        Self::new(AreaMemory::Pages(pages), buf, addr)
    }

    /// Registers the first `len` bytes of the dma-buf behind `fd` as
    /// buffers of `buf_size` bytes (0: a page). Nothing is pinned or
    /// charged by us: the exporter owns the memory. The CPU never touches
    /// it here: no copies into it (see [`NetIovArea::can_copy`]).
    ///
    /// `EBADF`/`EINVAL`: `fd` is not a dma-buf; `EINVAL`: the sizes, as for
    /// [`Area::register`], or a dma-buf smaller than `len`.
    pub(crate) fn register_dmabuf(fd: i32, len: u64, buf_size: u32) -> Result<Arc<Self>> {
        let buf = Self::check_size(len, buf_size)?;
        let dmabuf = DmaBuf::from_fd(fd)?;
        let mem = AreaMemory::dmabuf(dmabuf, usize::try_from(len).map_err(|_| EINVAL)?)?;
        Self::new(mem, buf, 0)
    }

    /// The buffer size for a request of `buf_size` (0: a page) over `len`
    /// bytes: `EINVAL` unless a power of two from the page size to
    /// `ZCRX_RS_BUF_MAX_SIZE` of which `len` (nonzero, at most
    /// `ZCRX_RS_AREA_MAX_LEN`) is a whole number.
    fn check_size(len: u64, buf_size: u32) -> Result<u64> {
        let page = PAGE_SIZE as u64;
        let buf = match u64::from(buf_size) {
            0 => page,
            b if b.is_power_of_two() && b >= page && b <= u64::from(uapi::ZCRX_RS_BUF_MAX_SIZE) => {
                b
            }
            _ => return Err(EINVAL),
        };
        if len % buf != 0 || len == 0 || len > uapi::ZCRX_RS_AREA_MAX_LEN {
            return Err(EINVAL);
        }
        Ok(buf)
    }

    fn new(mem: AreaMemory, buf: u64, addr: u64) -> Result<Arc<Self>> {
        let niovs = NetIovArea::new(mem, buf.trailing_zeros())?;
        let area = Arc::pin_init(
            try_pin_init!(Self {
                niovs <- niovs,
                addr,
                _counted: GaugeShare::new(&GLOBAL.areas, 1),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        Ok(area)
    }

    /// Number of buffers.
    pub(crate) fn nbufs(&self) -> usize {
        self.niovs.len()
    }

    /// Bytes per buffer.
    pub(crate) fn buf_size(&self) -> usize {
        self.niovs.buf_size()
    }

    /// log2 of [`Area::buf_size`].
    pub(crate) fn buf_shift(&self) -> u32 {
        self.niovs.buf_shift()
    }

    /// The buffer ledger.
    pub(crate) fn niovs(&self) -> &NetIovArea {
        &self.niovs
    }

    /// Buffers on the free list now.
    pub(crate) fn free_count(&self) -> usize {
        self.niovs.free_count()
    }

    /// Buffers the user holds.
    pub(crate) fn user_held(&self) -> u64 {
        self.niovs.user_held()
    }

    /// Maps the area for `dev`, or shares the mapping that exists for it
    /// (see [`NetIovArea::map_dma`]).
    pub(crate) fn map_dma(&self, dev: DmaDevice) -> Result<DmaUse> {
        self.niovs.map_dma(dev)
    }

    /// Gives back a share of the mapping; the last one unmaps (see
    /// [`NetIovArea::unmap_dma`]).
    pub(crate) fn unmap_dma(&self, u: DmaUse, going: Option<&Uninstall<'_>>) {
        self.niovs.unmap_dma(u, going);
    }

    /// Unmaps the area if nothing uses the mapping any more (see
    /// [`NetIovArea::unmap_idle`]).
    pub(crate) fn unmap_idle(&self) {
        self.niovs.unmap_idle();
    }

    /// Buffers the free list keeps for copies: page pools cannot take them.
    ///
    /// Without a reserve a small area can deadlock: the pool's caches hold
    /// every buffer, the head of the socket's queue is a packet that came
    /// unsplit while the pool was dry, copying it needs a free buffer, and
    /// the zero-copy packets behind it cannot be read first.
    pub(crate) fn copy_reserve(&self) -> usize {
        if !self.niovs.can_copy() {
            // A dma-buf takes no copies: the pools may have every buffer.
            return 0;
        }
        (self.nbufs() / 8).clamp(1, 256)
    }

    /// How many buffers a pool keeps from out-of-order data once little is
    /// left behind its cache (and the size of that "little"): enough for
    /// the segments that fill a hole, few enough not to stop loss recovery
    /// in a big area.
    pub(crate) fn ofo_reserve(&self) -> u32 {
        (self.nbufs() / 8).clamp(2, 16) as u32
    }

    /// The receive memory one TCP socket may hold in the area's buffers, in
    /// its receive and out-of-order queues together (patch 55): a quarter
    /// of the area, and never less than 1 MiB (a smaller window slows one
    /// flow: 1 MiB is the window of 100 Gb/s at an 80 us RTT), so more than
    /// a quarter for areas under 4 MiB. 0, no cap, for an area of 1 MiB or
    /// less. The share counts truesize (skb heads too): fewer buffers than
    /// it says.
    ///
    /// The area is shared by every flow of the context's queues. Without a
    /// cap, one socket whose reader falls behind (or whose peer parks data
    /// beyond a hole) holds as much as its receive buffer allows, which can
    /// be more than the whole area, and every other flow stalls.
    pub(crate) fn sk_share(&self) -> u32 {
        const FLOOR: usize = 1 << 20;
        let area = self.nbufs().saturating_mul(self.buf_size());
        if area <= FLOOR {
            return 0;
        }
        u32::try_from((area / 4).max(FLOOR)).unwrap_or(u32::MAX)
    }

    /// Whether data can be copied into the area (not a dma-buf).
    pub(crate) fn can_copy(&self) -> bool {
        self.niovs.can_copy()
    }
}

// pin-init's `#[pinned_drop]` expands to an `unsafe impl` of its own.
#[allow(unsafe_code)]
#[pinned_drop]
impl PinnedDrop for Area {
    fn drop(self: Pin<&mut Self>) {
        let held = self.niovs.user_held();
        if held != 0 {
            pr_warn!(
                "area {:#x} freed with {} user references\n",
                self.addr,
                held
            );
        }
    }
}
