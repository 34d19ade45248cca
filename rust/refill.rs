// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The refill ring: user space hands buffers back through it.
//!
//! Layout (offsets returned to user space in `zcrx_rs_ring_offsets`):
//! the kernel's consumer index `head` (u32) at [`HEAD_OFF`], the user's
//! producer index `tail` (u32) at [`TAIL_OFF`], on separate cache lines,
//! and `entries` × `struct zcrx_rs_rqe` from [`RQES_OFF`]; the context's
//! counters (`struct zcrx_rs_ring_stats`) at [`STATS_OFF`], written by the
//! kernel only.
//!
//! Ordering: the user writes entries, then stores `tail` with release; the
//! kernel loads `tail` with acquire, reads each entry exactly once, and
//! stores `head` with release after it is done with them. Entries are never
//! trusted: each is validated ([`parse_rqe`]) and the buffer must be held
//! by the user (see [`crate::urefs`]).

use core::sync::atomic::{AtomicU32, Ordering};

use kernel::prelude::*;

use crate::mm::{index_nospec, pin::PAGE_SIZE, shared::SharedMem};
use crate::stats::Stats;
use crate::uapi;

/// Offset of the consumer index.
pub(crate) const HEAD_OFF: u32 = 0;
/// Offset of the producer index.
pub(crate) const TAIL_OFF: u32 = 64;
/// Offset of the counters (`struct zcrx_rs_ring_stats`, 64 bytes).
pub(crate) const STATS_OFF: u32 = 128;
/// Offset of the entries.
pub(crate) const RQES_OFF: u32 = 192;

const _: () = assert!(
    STATS_OFF as usize + core::mem::size_of::<uapi::zcrx_rs_ring_stats>() <= RQES_OFF as usize
        && TAIL_OFF as usize + 4 <= STATS_OFF as usize
);

/// Why a refill entry was refused.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) enum BadRqe {
    /// Unknown flags.
    Pad,
    /// A range of no bytes.
    Empty,
    /// A range over more than `ZCRX_RS_RANGE_MAX_BUFS` buffers.
    TooLong,
    /// Offset not at a buffer boundary.
    Unaligned,
    /// Offset beyond the area.
    OutOfRange,
}

/// Validates an entry's fields: returns the buffer index in an area of
/// `nbufs` buffers of `1 << buf_shift` bytes.
pub(crate) fn parse_rqe(
    off: u64,
    pad: u32,
    nbufs: usize,
    buf_shift: u32,
) -> core::result::Result<usize, BadRqe> {
    if pad != 0 {
        return Err(BadRqe::Pad);
    }
    let mask = 1u64.checked_shl(buf_shift).ok_or(BadRqe::OutOfRange)? - 1;
    if off & mask != 0 {
        return Err(BadRqe::Unaligned);
    }
    let idx = off >> buf_shift;
    if idx >= nbufs as u64 {
        return Err(BadRqe::OutOfRange);
    }
    // Bounds-checked above; keep speculation from using an unchecked index.
    Ok(index_nospec(idx as usize, nbufs))
}

/// The buffers a valid entry hands back: `first..first + count`, all in
/// the area.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(crate) struct BufRange {
    pub(crate) first: usize,
    pub(crate) count: usize,
}

/// Validates an entry: a plain one names one buffer by its start
/// ([`parse_rqe`]); a `ZCRX_RS_RQE_RANGE` one, bytes `[off, off + len)`,
/// names every buffer they touch.
pub(crate) fn parse_entry(
    off: u64,
    len: u32,
    flags: u32,
    nbufs: usize,
    buf_shift: u32,
) -> core::result::Result<BufRange, BadRqe> {
    if flags == 0 {
        return parse_rqe(off, 0, nbufs, buf_shift).map(|first| BufRange { first, count: 1 });
    }
    if flags != uapi::ZCRX_RS_RQE_RANGE {
        return Err(BadRqe::Pad);
    }
    if len == 0 {
        return Err(BadRqe::Empty);
    }
    let area = (nbufs as u64)
        .checked_shl(buf_shift)
        .filter(|a| a >> buf_shift == nbufs as u64)
        .ok_or(BadRqe::OutOfRange)?;
    let end = off.checked_add(u64::from(len)).ok_or(BadRqe::OutOfRange)?;
    if end > area {
        return Err(BadRqe::OutOfRange);
    }
    let first = off >> buf_shift;
    let count = ((end - 1) >> buf_shift) - first + 1;
    if count > u64::from(uapi::ZCRX_RS_RANGE_MAX_BUFS) {
        return Err(BadRqe::TooLong);
    }
    // `first + count <= nbufs`: checked above (`take` keeps every index
    // of the range from speculation past it).
    Ok(BufRange {
        first: first as usize,
        count: count as usize,
    })
}

/// The kernel's position in the refill ring: the next entry, and what is
/// left of a range entry whose buffers did not all fit into one pass.
#[derive(Default)]
pub(crate) struct RingPos {
    head: u32,
    /// The next buffer of the current range, and how many are left.
    next: usize,
    left: usize,
}

/// What one pass over the ring did ([`RefillRing::take`]).
#[derive(Default)]
pub(crate) struct Taken {
    /// Buffers the user held and gave back.
    pub(crate) ok: u64,
    /// Bad entries, and buffers of ranges that the user did not hold.
    pub(crate) bad: u64,
    /// Entries read.
    pub(crate) entries: u32,
}

/// Ring size for a requested number of entries: a power of two in
/// `1..=ZCRX_RS_RQ_MAX_ENTRIES`.
pub(crate) fn ring_entries(requested: u32) -> Result<u32> {
    if requested == 0 || requested > uapi::ZCRX_RS_RQ_MAX_ENTRIES {
        return Err(EINVAL);
    }
    Ok(requested.next_power_of_two())
}

/// Bytes to mmap for a ring of `entries` entries.
pub(crate) fn ring_bytes(entries: u32) -> usize {
    (RQES_OFF as usize + entries as usize * core::mem::size_of::<uapi::zcrx_rs_rqe>())
        .next_multiple_of(PAGE_SIZE)
}

/// The ring memory and its size. The consumer position (`cached_head`) is
/// kept by the owner under its lock.
///
/// # Invariants
///
/// `mem` holds at least [`ring_bytes`]`(entries)` bytes; `entries` is a
/// power of two.
pub(crate) struct RefillRing {
    mem: SharedMem,
    entries: u32,
}

impl RefillRing {
    /// A zeroed ring of `entries` (a power of two) entries.
    pub(crate) fn new(entries: u32) -> Result<Self> {
        if !entries.is_power_of_two() {
            return Err(EINVAL);
        }
        Ok(Self {
            mem: SharedMem::new(ring_bytes(entries))?,
            entries,
        })
    }

    /// Number of entries.
    pub(crate) fn entries(&self) -> u32 {
        self.entries
    }

    /// The memory, to mmap.
    pub(crate) fn mem(&self) -> &SharedMem {
        &self.mem
    }

    fn index(&self, off: u32) -> &AtomicU32 {
        // `off` is HEAD_OFF or TAIL_OFF: aligned, inside the ring (type
        // invariant), so this cannot fail; a zero word stands in if it did.
        static ZERO: AtomicU32 = AtomicU32::new(0);
        self.mem.atomic_u32(off as usize).unwrap_or(&ZERO)
    }

    /// Brings the ring's `struct zcrx_rs_ring_stats` up to the counters of
    /// `s`. Callers race (RECV and NAPI, on several CPUs): each word only
    /// ever grows (`fetch_max`), so a late caller's older snapshot never
    /// takes back a newer value, and once all callers are done every word
    /// holds its counter's value.
    pub(crate) fn publish_stats(&self, s: &Stats) {
        use core::mem::offset_of;
        use uapi::zcrx_rs_ring_stats as R;
        let words = [
            (offset_of!(R, zc_bytes), s.zc_bytes.get_relaxed()),
            (offset_of!(R, copy_bytes), s.copy_bytes.get_relaxed()),
            (offset_of!(R, copy_records), s.copy_records.get_relaxed()),
            (offset_of!(R, alloc_fail), s.alloc_fail.get_relaxed()),
            (offset_of!(R, events), s.events.get_relaxed()),
        ];
        for (off, v) in words {
            // Inside the ring's first page (type invariant): cannot fail.
            if let Some(w) = self.mem.atomic_u64(STATS_OFF as usize + off) {
                w.fetch_max(v, Ordering::Relaxed);
            }
        }
    }

    /// Entries the user has published past `head`, at most the ring size.
    pub(crate) fn available(&self, head: u32) -> u32 {
        let tail = self.index(TAIL_OFF).load(Ordering::Acquire);
        tail.wrapping_sub(head).min(self.entries)
    }

    /// Whether anything waits on the ring after `pos`: entries the user
    /// published, or the rest of a range begun.
    pub(crate) fn pending(&self, pos: &RingPos) -> bool {
        pos.left > 0 || self.available(pos.head) > 0
    }

    /// Hands the buffers of the next entries to `give` (true if the user
    /// held the buffer and it went back), starting with the rest of a range
    /// `pos` was in: at most `max_bufs` buffers (a bad entry counts as one)
    /// and `max_entries` new entries. Publishes the new head.
    pub(crate) fn take(
        &self,
        pos: &mut RingPos,
        nbufs: usize,
        buf_shift: u32,
        max_bufs: usize,
        max_entries: u32,
        mut give: impl FnMut(usize) -> bool,
    ) -> Taken {
        let avail = self.available(pos.head).min(max_entries);
        let mut t = Taken::default();
        let mut bufs = 0;
        while bufs < max_bufs {
            if pos.left > 0 {
                // In the area (`parse_entry`); no speculation past it.
                let idx = index_nospec(pos.next, nbufs);
                pos.next += 1;
                pos.left -= 1;
                bufs += 1;
                if give(idx) {
                    t.ok += 1;
                } else {
                    t.bad += 1;
                }
                continue;
            }
            if t.entries == avail {
                break;
            }
            let (off, len, flags) = self.read(pos.head);
            pos.head = pos.head.wrapping_add(1);
            t.entries += 1;
            match parse_entry(off, len, flags, nbufs, buf_shift) {
                Ok(r) => {
                    pos.next = r.first;
                    pos.left = r.count;
                }
                Err(_) => {
                    t.bad += 1;
                    bufs += 1;
                }
            }
        }
        if t.entries > 0 {
            self.set_head(pos.head);
        }
        t
    }

    /// Reads entry `pos` (modulo the ring size) once: `(off, len, flags)`.
    /// The user may change the entry at any time: the caller validates
    /// this copy.
    pub(crate) fn read(&self, pos: u32) -> (u64, u32, u32) {
        let i = (pos & (self.entries - 1)) as usize;
        let at = RQES_OFF as usize + i * core::mem::size_of::<uapi::zcrx_rs_rqe>();
        // `i < entries`: inside the ring (type invariant), so this cannot
        // fail; an entry with bad flags stands in if it did.
        let rqe = self
            .mem
            .read::<uapi::zcrx_rs_rqe>(at)
            .unwrap_or(uapi::zcrx_rs_rqe {
                off: 0,
                len: 0,
                flags: u32::MAX,
            });
        (rqe.off, rqe.len, rqe.flags)
    }

    /// Publishes the consumer position: entries before `head` may be reused.
    pub(crate) fn set_head(&self, head: u32) {
        self.index(HEAD_OFF).store(head, Ordering::Release);
    }
}

#[cfg(zcrx_kunit)]
#[kunit_tests(zcrx_rs_refill)]
mod tests {
    use super::*;

    const P: u64 = PAGE_SIZE as u64;
    const S: u32 = crate::mm::pin::PAGE_SHIFT;

    #[test]
    fn accepts_buffer_starts() -> Result {
        assert_eq!(parse_rqe(0, 0, 16, S), Ok(0));
        assert_eq!(parse_rqe(5 * P, 0, 16, S), Ok(5));
        assert_eq!(parse_rqe(15 * P, 0, 16, S), Ok(15));
        Ok(())
    }

    #[test]
    fn large_buffers() -> Result {
        // 32 KiB buffers: entries name buffer starts, not pages.
        let s = S + 3;
        assert_eq!(parse_rqe(0, 0, 4, s), Ok(0));
        assert_eq!(parse_rqe(24 * P, 0, 4, s), Ok(3));
        assert_eq!(parse_rqe(P, 0, 4, s), Err(BadRqe::Unaligned));
        assert_eq!(parse_rqe(4 * P, 0, 4, s), Err(BadRqe::Unaligned));
        assert_eq!(parse_rqe(32 * P, 0, 4, s), Err(BadRqe::OutOfRange));
        assert_eq!(parse_rqe(0, 0, 4, 64), Err(BadRqe::OutOfRange));
        Ok(())
    }

    #[test]
    fn refuses_bad_entries() -> Result {
        assert_eq!(parse_rqe(16 * P, 0, 16, S), Err(BadRqe::OutOfRange));
        assert_eq!(
            parse_rqe(u64::MAX - P + 1, 0, 16, S),
            Err(BadRqe::OutOfRange)
        );
        assert_eq!(parse_rqe(P + 1, 0, 16, S), Err(BadRqe::Unaligned));
        assert_eq!(parse_rqe(1, 0, 16, S), Err(BadRqe::Unaligned));
        assert_eq!(parse_rqe(0, 1, 16, S), Err(BadRqe::Pad));
        assert_eq!(parse_rqe(0, 0, 0, S), Err(BadRqe::OutOfRange));
        Ok(())
    }

    #[test]
    fn range_entries() -> Result {
        const R: u32 = uapi::ZCRX_RS_RQE_RANGE;
        let br = |first, count| Ok(BufRange { first, count });
        // Plain entries as before.
        assert_eq!(parse_entry(5 * P, 77, 0, 16, S), br(5, 1));
        assert_eq!(parse_entry(5 * P + 1, 0, 0, 16, S), Err(BadRqe::Unaligned));
        // A record within one buffer, at any offset.
        assert_eq!(parse_entry(5 * P + 100, 200, R, 16, S), br(5, 1));
        assert_eq!(parse_entry(5 * P, P as u32, R, 16, S), br(5, 1));
        // Merged records: every buffer touched.
        assert_eq!(parse_entry(5 * P + 100, P as u32, R, 16, S), br(5, 2));
        assert_eq!(parse_entry(0, 16 * P as u32, R, 16, S), br(0, 16));
        // At most ZCRX_RS_RANGE_MAX_BUFS buffers.
        let max = uapi::ZCRX_RS_RANGE_MAX_BUFS as usize;
        let mp = max as u32 * P as u32;
        assert_eq!(parse_entry(P, mp, R, 2 * max, S), br(1, max));
        assert_eq!(parse_entry(P + 1, mp, R, 2 * max, S), Err(BadRqe::TooLong));
        assert_eq!(parse_entry(15 * P + 1, P as u32 - 1, R, 16, S), br(15, 1));
        // Large buffers.
        assert_eq!(parse_entry(9 * P, 8 * P as u32, R, 4, S + 3), br(1, 2));
        // Refused.
        assert_eq!(parse_entry(0, 0, R, 16, S), Err(BadRqe::Empty));
        assert_eq!(
            parse_entry(15 * P + 1, P as u32, R, 16, S),
            Err(BadRqe::OutOfRange)
        );
        assert_eq!(parse_entry(u64::MAX, 2, R, 16, S), Err(BadRqe::OutOfRange));
        assert_eq!(parse_entry(0, 1, R | 2, 16, S), Err(BadRqe::Pad));
        assert_eq!(parse_entry(0, 1, 2, 16, S), Err(BadRqe::Pad));
        assert_eq!(parse_entry(0, 1, R, 0, S), Err(BadRqe::OutOfRange));
        assert_eq!(parse_entry(0, 1, R, usize::MAX, S), Err(BadRqe::OutOfRange));
        Ok(())
    }

    #[test]
    fn take_splits_ranges() -> Result {
        let r = RefillRing::new(4)?;
        // Written as the user would (the ring is shared memory).
        let put = |i: u32, off: u64, len: u32, flags: u32| -> Result {
            let at = RQES_OFF as usize + i as usize * core::mem::size_of::<uapi::zcrx_rs_rqe>();
            r.mem
                .atomic_u64(at)
                .ok_or(EINVAL)?
                .store(off, Ordering::Relaxed);
            r.mem
                .atomic_u32(at + 8)
                .ok_or(EINVAL)?
                .store(len, Ordering::Relaxed);
            r.mem
                .atomic_u32(at + 12)
                .ok_or(EINVAL)?
                .store(flags, Ordering::Relaxed);
            Ok(())
        };
        const R: u32 = uapi::ZCRX_RS_RQE_RANGE;
        put(0, 2 * P, 3 * P as u32, R)?; // buffers 2, 3, 4
        put(1, 7 * P, 0, 0)?; // buffer 7
        put(2, 3, 0, 0)?; // bad
        r.index(TAIL_OFF).store(3, Ordering::Relaxed);
        let mut pos = RingPos::default();
        let mut got = KVec::new();
        // Room for two buffers: the range is cut, its entry consumed.
        let t = r.take(&mut pos, 16, S, 2, 4, |i| got.push(i, GFP_KERNEL).is_ok());
        assert_eq!((t.ok, t.bad, t.entries), (2, 0, 1));
        assert_eq!(r.index(HEAD_OFF).load(Ordering::Relaxed), 1);
        // The rest of the range first, then the plain entry and the bad one.
        let t = r.take(&mut pos, 16, S, 8, 4, |i| {
            i != 7 && got.push(i, GFP_KERNEL).is_ok()
        });
        assert_eq!((t.ok, t.bad, t.entries), (1, 2, 2));
        assert_eq!(&got[..], &[2, 3, 4]);
        assert_eq!(r.index(HEAD_OFF).load(Ordering::Relaxed), 3);
        // Nothing more.
        let t = r.take(&mut pos, 16, S, 8, 4, |_| true);
        assert_eq!((t.ok, t.bad, t.entries), (0, 0, 0));
        Ok(())
    }

    #[test]
    fn ring_sizes() -> Result {
        assert_eq!(ring_entries(1)?, 1);
        assert_eq!(ring_entries(100)?, 128);
        assert_eq!(
            ring_entries(uapi::ZCRX_RS_RQ_MAX_ENTRIES)?,
            uapi::ZCRX_RS_RQ_MAX_ENTRIES
        );
        assert!(ring_entries(0).is_err());
        assert!(ring_entries(uapi::ZCRX_RS_RQ_MAX_ENTRIES + 1).is_err());
        assert_eq!(ring_bytes(1), PAGE_SIZE);
        assert_eq!(ring_bytes(256), 2 * PAGE_SIZE);
        Ok(())
    }

    #[test]
    fn ring_indices_wrap() -> Result {
        let r = RefillRing::new(4)?;
        // The user published 3 entries past a head near the u32 wrap.
        r.index(TAIL_OFF).store(1, Ordering::Relaxed);
        assert_eq!(r.available(u32::MAX - 1), 3);
        // A tail far ahead is clamped to the ring size.
        r.index(TAIL_OFF).store(1000, Ordering::Relaxed);
        assert_eq!(r.available(0), 4);
        r.set_head(7);
        assert_eq!(r.index(HEAD_OFF).load(Ordering::Relaxed), 7);
        Ok(())
    }
}
