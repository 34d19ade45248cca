// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The tokens of the ledger: proof of who holds a buffer ([`FragBuf`]: a
//! live skb's frag; [`FreeBuf`]: taken off the free list; [`Released`]: a
//! pool gives it back), the receive path's run of consecutive buffers
//! ([`NextBuf`]), and [`Netmem`], a `netmem_ref` to look at.

use core::marker::PhantomData;

use kernel::{bindings, prelude::*};

use super::{NetIov, NetIovArea};
use crate::mm::pin::MappedPage;
use crate::net::skb::Frag;

/// One of our buffers that a frag of a live skb holds.
///
/// # Invariants
///
/// `idx < area.len()` and `niov` is net_iov `idx` of `area`; the skb holds a
/// page-pool reference to buffer `idx` of `area` while this value (which
/// borrows the frag) exists.
pub(crate) struct FragBuf<'a> {
    pub(super) area: &'a NetIovArea,
    pub(super) idx: usize,
    pub(super) niov: *mut bindings::net_iov,
}

impl FragBuf<'_> {
    /// The buffer's index.
    pub(crate) fn idx(&self) -> usize {
        self.idx
    }

    /// Hands the buffer to the user: one more page-pool reference, so it is
    /// not recycled while the user reads it, then one user reference.
    ///
    /// Runs for every buffer received: no bounds checks (the index came
    /// from `lookup` or `NextBuf::take`).
    #[inline(always)]
    pub(crate) fn give_to_user(self) {
        let (area, idx) = (self.area, self.idx);
        // Taking a reference is allowed: the skb's keeps the count above 0
        // (type invariant). Before the user reference (see `urefs`);
        // `atomic_long_inc()`: relaxed.
        // SAFETY: `niov` is net_iov `idx` of `area` (type invariant), live
        // for as long as `area`.
        unsafe { NetIovArea::pp_count_of(self.niov) }
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        // SAFETY: `idx < area.len()` (type invariant: `lookup` or `take`
        // found it in the array), the number of buffers `urefs` counts
        // (type invariant of `NetIovArea`).
        unsafe { area.urefs.get_unchecked(idx) };
    }
}

/// The buffer that would continue a run of buffers handed to the user, and
/// how far the run may go: recognised by its address alone, the receive
/// path's shortcut for a GRO'd stream, whose frags are usually buffers `i,
/// i + 1, ...` (the pool hands them out in that order).
///
/// # Invariants
///
/// `raw == 0` (no run), or `raw` is the netmem of buffer `idx` of `area` and
/// `end` that of buffer `j` (compared only, never used: it may be one past
/// the array) for some `idx < j <= area.len()`.
pub(crate) struct NextBuf<'a> {
    area: &'a NetIovArea,
    raw: usize,
    end: usize,
    idx: usize,
}

impl<'a> NextBuf<'a> {
    /// No run: [`NextBuf::take`] finds nothing.
    pub(crate) fn none(area: &'a NetIovArea) -> Self {
        NextBuf {
            area,
            raw: 0,
            end: 0,
            idx: 0,
        }
    }

    /// A run after `buf`, a buffer of `area`, of at most `max` more buffers
    /// (fewer at the end of the area; none if `buf` is not `area`'s).
    pub(crate) fn after(area: &'a NetIovArea, buf: &FragBuf<'_>, max: usize) -> Self {
        if !core::ptr::eq(area, buf.area) {
            return Self::none(area);
        }
        // `buf.idx < len`, so `i <= len`.
        let i = buf.idx + 1;
        let left = max.min(area.len() - i);
        if left == 0 {
            return Self::none(area);
        }
        let size = core::mem::size_of::<NetIov>();
        let raw = area.netmem(i).raw();
        // INVARIANT: buffer `i < len` is there, `j = i + left <= len`.
        NextBuf {
            area,
            raw,
            end: raw + left * size,
            idx: i,
        }
    }

    /// Ends the run.
    #[inline(always)]
    pub(crate) fn clear(&mut self) {
        // INVARIANT: no run.
        self.raw = 0;
    }

    /// Whether `frag` holds the next buffer of the run.
    #[inline(always)]
    pub(crate) fn is_next(&self, frag: &Frag) -> bool {
        // A live frag's netmem is never 0: without a run (`raw == 0`) no
        // frag matches.
        frag.netmem().raw() == self.raw
    }

    /// `frag`'s buffer if it is the next one of the run, which then moves
    /// on past it; `None` (nothing changes) otherwise. One comparison
    /// instead of [`NetIovArea::lookup`].
    #[inline(always)]
    pub(crate) fn take<'f>(&mut self, frag: &'f Frag) -> Option<FragBuf<'f>>
    where
        'a: 'f,
    {
        if !self.is_next(frag) {
            return None;
        }
        let size = core::mem::size_of::<NetIov>();
        let idx = self.idx;
        // Tagged (`NET_IOV`, bit 0): the net_iov is one byte below.
        let niov = (self.raw - bindings::NET_IOV as usize) as *mut bindings::net_iov;
        // INVARIANT: the next net_iov follows in the array; at `end` the
        // run is over.
        self.raw += size;
        self.idx += 1;
        if self.raw == self.end {
            self.raw = 0;
        }
        // INVARIANT: the frag holds buffer `idx < len` of `area` (its
        // netmem is that net_iov's); the skb holds a page-pool reference to
        // it for as long as the frag is borrowed.
        let area = self.area;
        Some(FragBuf { area, idx, niov })
    }
}

/// A buffer taken off the free list: attached to no pool, no references.
/// Back to the free list on drop, unless given to the user.
pub(crate) struct FreeBuf<'a> {
    pub(super) area: &'a NetIovArea,
    pub(super) idx: usize,
}

impl FreeBuf<'_> {
    /// The buffer's index (to fill the page with a copy).
    pub(crate) fn idx(&self) -> usize {
        self.idx
    }

    /// Runs `f` with page `k` of the buffer mapped into the kernel (to
    /// fill it with a copy); `EINVAL` if the buffer has no page `k`,
    /// `EOPNOTSUPP` if the area is not CPU memory (a dma-buf).
    pub(crate) fn with_page<R>(
        &mut self,
        k: usize,
        f: impl FnOnce(&mut MappedPage<'_>) -> R,
    ) -> Result<R> {
        let order = self.area.buf_order();
        if k >> order != 0 {
            return Err(EINVAL);
        }
        let pages = self.area.mem.pages().ok_or(EOPNOTSUPP)?;
        Ok(pages.with_mapped((self.idx << order) + k, f))
    }

    /// Hands the filled buffer to the user.
    pub(crate) fn give_to_user(self) {
        let (area, idx) = (self.area, self.idx);
        core::mem::forget(self);
        // INVARIANT: a copy buffer: one page-pool reference, the user's,
        // set before the user reference (see `urefs`).
        area.pp_set_refs(idx, 1);
        area.urefs.get(idx);
    }
}

impl Drop for FreeBuf<'_> {
    fn drop(&mut self) {
        let mut free = self.area.free.lock();
        self.area.free_push(&mut free, self.idx);
    }
}

/// A buffer a page pool gives back to its provider (`release_netmem`).
/// Made only by the callback; see [`NetIovArea::take_released`].
pub(crate) struct Released<'a> {
    pub(super) nm: Netmem<'a>,
    pub(super) area: u64,
}

impl<'a> Released<'a> {
    /// # Safety
    ///
    /// Only from a `release_netmem` callback, for the netmem it was given;
    /// `area` is the id of the area of the pool's provider.
    pub(in crate::net) unsafe fn new(nm: Netmem<'a>, area: u64) -> Self {
        Released { nm, area }
    }
}

/// A `netmem_ref`: a page or a net_iov, valid for `'a`. Only for looking
/// at (is it a net_iov, is it ours); the reference counts are the ledger's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Netmem<'a>(bindings::netmem_ref, PhantomData<&'a ()>);

impl<'a> Netmem<'a> {
    /// Wraps a raw netmem reference.
    ///
    /// # Safety
    ///
    /// `raw` is a valid `netmem_ref` (a live page or net_iov, tagged as the
    /// core does) that stays valid for `'a`.
    pub(crate) unsafe fn from_raw(raw: bindings::netmem_ref) -> Self {
        Netmem(raw, PhantomData)
    }

    /// The raw reference (for address comparisons and the C calls of this
    /// layer).
    pub(in crate::net) fn raw(self) -> bindings::netmem_ref {
        self.0
    }

    /// Whether this is a net_iov (provider memory) rather than a page.
    pub(crate) fn is_net_iov(self) -> bool {
        // `netmem_is_net_iov()`: the tag bit.
        self.0 & bindings::NET_IOV as usize != 0
    }
}
