// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Records on their way to the user: batched ([`RecordBatch`]) and
//! written to a [`RecordSink`] before the bytes they describe leave the
//! socket, and how many buffers one merged record may span.

use kernel::{prelude::*, transmute::AsBytes, uaccess::UserSliceWriter};

#[cfg(zcrx_kunit)]
use crate::mm::pin::PAGE_SIZE;
use crate::uapi::{zcrx_rs_rec, ZCRX_RS_RANGE_MAX_BUFS};

/// Records buffered before they are written to user memory.
const BATCH: usize = 32;

/// Where records go (user memory, or a test's buffer).
pub(crate) trait RecordSink {
    /// Appends `recs`.
    fn write(&mut self, recs: &[zcrx_rs_rec]) -> Result;
}

impl RecordSink for UserSliceWriter {
    fn write(&mut self, recs: &[zcrx_rs_rec]) -> Result {
        self.write_slice(recs.as_bytes())
    }
}

/// Records on their way to a sink, at most `cap` in all.
///
/// # Invariants
///
/// `n <= BATCH`; `delivered + n <= cap`; `pending_bytes` is the sum of the
/// lengths of the `n` buffered records.
pub(crate) struct RecordBatch<S: RecordSink> {
    sink: S,
    buf: [zcrx_rs_rec; BATCH],
    n: usize,
    cap: u32,
    delivered: u32,
    delivered_bytes: u64,
    pending_bytes: u64,
}

impl<S: RecordSink> RecordBatch<S> {
    /// A batch writing at most `cap` records to `sink`.
    pub(crate) fn new(sink: S, cap: u32) -> Self {
        Self {
            sink,
            buf: [zcrx_rs_rec::default(); BATCH],
            n: 0,
            cap,
            delivered: 0,
            delivered_bytes: 0,
            pending_bytes: 0,
        }
    }

    /// Whether another record may be added (after a flush if `buffer_full`).
    pub(crate) fn has_room(&self) -> bool {
        self.delivered as usize + self.n < self.cap as usize
    }

    /// Whether the buffer must be flushed before the next push.
    pub(crate) fn buffer_full(&self) -> bool {
        self.n == BATCH
    }

    /// Adds a record; the caller checked `has_room` and `!buffer_full`.
    /// Without room the record is handed back (`Err`).
    pub(crate) fn push(&mut self, rec: zcrx_rs_rec) -> core::result::Result<(), zcrx_rs_rec> {
        if self.n >= BATCH || !self.has_room() {
            return Err(rec);
        }
        self.pending_bytes += u64::from(rec.len);
        self.buf[self.n] = rec;
        self.n += 1;
        Ok(())
    }

    /// Sets the length of the last buffered record (a merge: the caller
    /// knows the bytes follow it in the area); nothing without a record.
    pub(crate) fn set_last_len(&mut self, len: u32) {
        if let Some(last) = self.buf[..self.n].last_mut() {
            self.pending_bytes = self.pending_bytes - u64::from(last.len) + u64::from(len);
            last.len = len;
        }
    }

    /// Writes the buffered records. On failure they stay pending (see
    /// [`RecordBatch::take_pending`]).
    pub(crate) fn flush(&mut self) -> Result {
        if self.n == 0 {
            return Ok(());
        }
        self.sink.write(&self.buf[..self.n])?;
        self.delivered += self.n as u32;
        self.delivered_bytes += self.pending_bytes;
        self.n = 0;
        self.pending_bytes = 0;
        Ok(())
    }

    /// Drops the buffered records, calling `f` on each (to give their
    /// buffers back).
    pub(crate) fn take_pending(&mut self, mut f: impl FnMut(&zcrx_rs_rec)) {
        for r in &self.buf[..self.n] {
            f(r);
        }
        self.n = 0;
        self.pending_bytes = 0;
    }

    /// Records written to the sink.
    pub(crate) fn delivered(&self) -> u32 {
        self.delivered
    }

    /// Bytes described by the records written to the sink.
    pub(crate) fn delivered_bytes(&self) -> u64 {
        self.delivered_bytes
    }

    /// Bytes described by records not written yet.
    pub(crate) fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }
}

/// How many buffers of `1 << shift` bytes a merged record may take after
/// its first: the whole record within `ZCRX_RS_RANGE_MAX_BUFS` buffers (one
/// range entry gives it back) and `u32::MAX` bytes (its `len`).
pub(crate) fn merge_extra_bufs(shift: u32) -> usize {
    (ZCRX_RS_RANGE_MAX_BUFS as usize).min((u32::MAX >> shift.min(31)) as usize) - 1
}

#[cfg(zcrx_kunit)]
#[kunit_tests(zcrx_rs_records)]
mod tests {
    use super::*;

    /// A sink that keeps what it gets and fails on request.
    struct VecSink {
        got: KVec<zcrx_rs_rec>,
        writes: u32,
        fail_at_write: Option<u32>,
    }

    impl RecordSink for &mut VecSink {
        fn write(&mut self, recs: &[zcrx_rs_rec]) -> Result {
            self.writes += 1;
            if self.fail_at_write == Some(self.writes) {
                return Err(EFAULT);
            }
            for r in recs {
                self.got.push(*r, GFP_KERNEL)?;
            }
            Ok(())
        }
    }

    fn rec(i: u64) -> zcrx_rs_rec {
        zcrx_rs_rec {
            off: i * PAGE_SIZE as u64,
            len: 100,
            flags: 0,
        }
    }

    #[test]
    fn merged_records_fit_one_range_entry() -> Result {
        for shift in 12..=31u32 {
            let bufs = merge_extra_bufs(shift) + 1;
            assert!(bufs <= ZCRX_RS_RANGE_MAX_BUFS as usize);
            assert!((bufs as u64) << shift <= u64::from(u32::MAX));
        }
        // 4 KiB buffers: a record may fill a whole range entry.
        assert_eq!(merge_extra_bufs(12) + 1, ZCRX_RS_RANGE_MAX_BUFS as usize);
        Ok(())
    }

    #[test]
    fn batches_of_batch_size() -> Result {
        let mut s = VecSink {
            got: KVec::new(),
            writes: 0,
            fail_at_write: None,
        };
        {
            let mut b = RecordBatch::new(&mut s, 1000);
            for i in 0..(BATCH as u64 * 2 + 3) {
                if b.buffer_full() {
                    b.flush()?;
                }
                assert!(b.push(rec(i)).is_ok());
            }
            b.flush()?;
            assert_eq!(b.delivered(), BATCH as u32 * 2 + 3);
            assert_eq!(b.delivered_bytes(), 100 * (BATCH as u64 * 2 + 3));
        }
        assert_eq!(s.writes, 3);
        assert_eq!(s.got.len(), BATCH * 2 + 3);
        assert_eq!(s.got[BATCH + 1].off, (BATCH as u64 + 1) * PAGE_SIZE as u64);
        Ok(())
    }

    #[test]
    fn capacity_is_never_exceeded() -> Result {
        let mut s = VecSink {
            got: KVec::new(),
            writes: 0,
            fail_at_write: None,
        };
        let mut b = RecordBatch::new(&mut s, 5);
        let mut pushed = 0;
        while b.has_room() {
            assert!(b.push(rec(pushed)).is_ok());
            pushed += 1;
        }
        assert_eq!(pushed, 5);
        assert!(b.push(rec(99)).is_err()); // no room: handed back
        b.flush()?;
        assert_eq!(b.delivered(), 5);
        assert!(!b.has_room());
        Ok(())
    }

    #[test]
    fn sets_only_the_last_record() -> Result {
        let mut s = VecSink {
            got: KVec::new(),
            writes: 0,
            fail_at_write: None,
        };
        let p = PAGE_SIZE as u64;
        let mut b = RecordBatch::new(&mut s, 100);
        b.set_last_len(10); // nothing to set
        assert_eq!(b.pending_bytes(), 0);
        assert!(b.push(rec(3)).is_ok());
        b.set_last_len(p as u32 + 100);
        assert!(b.push(rec(7)).is_ok());
        b.set_last_len(101);
        assert_eq!(b.pending_bytes(), 100 + p + 101);
        b.flush()?;
        b.set_last_len(10); // nothing after a flush
        assert_eq!(b.delivered(), 2);
        assert_eq!(b.delivered_bytes(), 100 + p + 101);
        assert_eq!((s.got[0].off, s.got[0].len), (3 * p, 100 + p as u32));
        assert_eq!((s.got[1].off, s.got[1].len), (7 * p, 101));
        Ok(())
    }

    #[test]
    fn failed_flush_keeps_records_pending() -> Result {
        let mut s = VecSink {
            got: KVec::new(),
            writes: 0,
            fail_at_write: Some(2),
        };
        let mut b = RecordBatch::new(&mut s, 100);
        assert!(b.push(rec(1)).is_ok());
        b.flush()?;
        assert!(b.push(rec(2)).is_ok());
        assert!(b.push(rec(3)).is_ok());
        assert!(b.flush().is_err());
        assert_eq!(b.delivered(), 1);
        assert_eq!(b.pending_bytes(), 200);
        let mut returned = KVec::new();
        b.take_pending(|r| {
            let _ = returned.push(r.off, GFP_KERNEL);
        });
        assert_eq!(returned.len(), 2);
        assert_eq!(b.pending_bytes(), 0);
        assert_eq!(b.delivered_bytes(), 100);
        Ok(())
    }
}
