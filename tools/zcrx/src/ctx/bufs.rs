// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! What a receive call hands out: a [`Batch`] of records, each [`Record`]
//! borrowed from it, or each record as a [`Buf`] that owns its buffer. The
//! buffers go back to the refill ring when their owner drops.

use std::sync::Arc;

use super::Shared;
use crate::uapi::*;

/// The records of one receive call: the next [`Batch::bytes`] bytes of the
/// stream, in order. Dropping it gives every buffer back at once.
pub struct Batch {
    pub(super) shared: Arc<Shared>,
    pub(super) recs: Vec<zcrx_rs_rec>,
    pub(super) bytes: u64,
}

/// One record of a [`Batch`], borrowed from it.
#[derive(Clone, Copy)]
pub struct Record<'a> {
    shared: &'a Shared,
    rec: &'a zcrx_rs_rec,
}

impl<'a> Record<'a> {
    /// The bytes.
    pub fn data(&self) -> &'a [u8] {
        self.shared.bytes(self.rec)
    }

    /// Copied by the CPU (the NIC did not place these bytes).
    pub fn is_copy(&self) -> bool {
        self.rec.flags & ZCRX_RS_REC_COPY != 0
    }

    /// Offset of the bytes in the area.
    pub fn offset(&self) -> u64 {
        self.rec.off
    }
}

impl Batch {
    /// The end of the stream: no records, no bytes.
    pub fn is_eof(&self) -> bool {
        self.bytes == 0
    }

    /// Bytes the records describe.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// The records, in stream order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Record<'_>> + '_ {
        self.recs.iter().map(|rec| Record { shared: &self.shared, rec })
    }

    /// Bytes that came zero-copy and bytes that were copied.
    pub fn split_counts(&self) -> (u64, u64) {
        self.recs.iter().fold(
            (0, 0),
            |(z, c), r| {
                if r.flags & ZCRX_RS_REC_COPY != 0 {
                    (z, c + r.len as u64)
                } else {
                    (z + r.len as u64, c)
                }
            },
        )
    }
}

impl IntoIterator for Batch {
    type Item = Buf;
    type IntoIter = BufIter;

    /// Each record as a [`Buf`] of its own, to keep some longer than others.
    fn into_iter(mut self) -> BufIter {
        let recs = std::mem::take(&mut self.recs);
        BufIter { shared: self.shared.clone(), recs: recs.into_iter() }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.shared.give_back(&self.recs);
    }
}

// Debug: record positions and counts, never the payload.
impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("records", &self.recs.len()).field("bytes", &self.bytes).finish()
    }
}

impl std::fmt::Debug for Record<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Record").field("offset", &self.rec.off).field("len", &self.rec.len).field("copy", &self.is_copy()).finish()
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf").field("offset", &self.rec.off).field("len", &self.rec.len).field("copy", &self.is_copy()).finish()
    }
}

impl std::fmt::Debug for BufIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufIter").field("left", &self.recs.len()).finish()
    }
}

/// The records of a [`Batch`] as [`Buf`]s.
pub struct BufIter {
    shared: Arc<Shared>,
    recs: std::vec::IntoIter<zcrx_rs_rec>,
}

impl Iterator for BufIter {
    type Item = Buf;
    fn next(&mut self) -> Option<Buf> {
        self.recs.next().map(|rec| Buf { shared: self.shared.clone(), rec })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.recs.size_hint()
    }
}

impl ExactSizeIterator for BufIter {}

impl Drop for BufIter {
    fn drop(&mut self) {
        // Records never taken out go back too.
        let rest: Vec<_> = self.recs.by_ref().collect();
        self.shared.give_back(&rest);
    }
}

/// One received record that owns its buffer: derefs to its bytes, goes back
/// to the refill ring when dropped. `Send`: hand it to another thread or
/// task and drop it there.
pub struct Buf {
    shared: Arc<Shared>,
    rec: zcrx_rs_rec,
}

impl Buf {
    /// Copied by the CPU (the NIC did not place these bytes).
    pub fn is_copy(&self) -> bool {
        self.rec.flags & ZCRX_RS_REC_COPY != 0
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.shared.bytes(&self.rec)
    }
}

/// With the `bytes` feature: the record as a [`bytes::Bytes`] that owns its
/// buffer, for code built on `bytes` (hyper, tonic, ...). No copy; the
/// buffer goes back to the refill ring when the last clone or slice of the
/// `Bytes` is dropped, so a `Bytes` kept for long keeps its buffer from the
/// NIC for as long.
#[cfg(feature = "bytes")]
impl From<Buf> for bytes::Bytes {
    fn from(b: Buf) -> bytes::Bytes {
        bytes::Bytes::from_owner(b)
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        self.shared.give_back(std::slice::from_ref(&self.rec));
    }
}
