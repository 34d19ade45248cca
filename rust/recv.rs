// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Receiving: walk the next bytes of a TCP stream and describe them as
//! records of the area.
//!
//! Frags that are buffers of our area (the NIC wrote them there) are handed
//! over as they are: the user gets a reference and a record. Everything
//! else — headers the NIC did not split, packets that came when the pool
//! was dry, flows on other queues — is copied into free buffers of the area
//! and flagged `ZCRX_RS_REC_COPY`. When no buffer is free the call returns
//! what it has; the rest stays in the socket.
//!
//! Records reach user memory in batches, each batch before the bytes it
//! describes are consumed from the socket: a failed copy to the user gives
//! the batch's buffers back and leaves its bytes in the socket, so nothing
//! is ever lost.

use kernel::{prelude::*, transmute::AsBytes, uaccess::UserSliceWriter};

use crate::mm::pin::PAGE_SIZE;
use crate::net::{
    netmem::{FragBuf, NextBuf},
    skb::SkBuff,
    sock::{ActorResult, LockedSock, TcpSocket, TcpState},
};
use crate::uapi::{zcrx_rs_rec, ZCRX_RS_EVENT_COPY, ZCRX_RS_RANGE_MAX_BUFS, ZCRX_RS_REC_COPY};
use crate::zcrx::Zcrx;

/// Records buffered before they are written to user memory.
pub(crate) const BATCH: usize = 32;

/// Most bytes one call copies (the copy fallback runs under the socket
/// lock, while the socket's softirq side queues to its backlog), unless
/// `SO_RCVLOWAT` asks for more: like a `recv()` with a 2 MiB buffer. Twice
/// the bench's 1 MiB mark, so that a call takes what a wake-up finds (at 1
/// MiB, 12% more calls and 8% more CPU per GiB in the copy fallback).
/// Zero-copy records cost no copy and are not bounded beyond the caller's
/// record array.
pub(crate) const COPY_BUDGET: u64 = 2 << 20;

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

/// Why a receive call stopped early.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    /// No free buffer for a copy.
    NoBuffers,
    /// The caller's record array is full.
    RecordsFull,
    /// Writing records to the user failed.
    Fault,
    /// This call copied its budget (see [`Walker::copy_budget`]).
    CopyBudget,
    /// Data needs a copy and the area takes none (a dma-buf).
    NoCopy,
}

/// What one receive call copied, added to the binding's stats once at the
/// end of the call rather than per record (those counters are shared with
/// the refill path on the NAPI CPU). The zero-copy part is what was
/// delivered less this (see `Drop for Walker`): not counted per buffer.
#[derive(Default)]
struct Tally {
    copy_bytes: u64,
    copy_records: u64,
}

/// The state of one receive call while `tcp_read_sock` walks the queue.
///
/// # Invariants
///
/// `next` is a run (its `take` can find a buffer) only while `run_len !=
/// 0`; then the last buffered record is a zero-copy one of `run_len` bytes
/// (its own `len` is written when the run ends), it ends at the end of the
/// buffer before `next`'s, and may take every buffer of the run without
/// describing more than `ZCRX_RS_RANGE_MAX_BUFS` buffers or `u32::MAX`
/// bytes.
struct Walker<'a, S: RecordSink> {
    zcrx: &'a Zcrx,
    batch: RecordBatch<S>,
    /// The buffer that would extend the last record (merging).
    next: NextBuf<'a>,
    /// While a run is open, the last record's length (written to it when
    /// the run ends): growing a local costs less than the record.
    run_len: u32,
    /// `ZCRX_RS_RECV_MERGE`: most buffers a record may take after its
    /// first; 0 without merging.
    merge_bufs: usize,
    stop: Option<Stop>,
    tally: Tally,
    /// Most bytes this call copies: [`COPY_BUDGET`], or `SO_RCVLOWAT` if
    /// that is more (the budget never ends a call short of the mark).
    copy_budget: u64,
}

impl<S: RecordSink> Drop for Walker<'_, S> {
    fn drop(&mut self) {
        let st = &self.zcrx.stats;
        let t = &self.tally;
        // Every record was delivered or dropped by now (`on_skb`), and
        // dropped copies were taken out of the tally: the rest of what was
        // delivered came zero-copy.
        let records = u64::from(self.batch.delivered());
        debug_assert!(records >= t.copy_records && self.batch.delivered_bytes() >= t.copy_bytes);
        let zc_records = records.saturating_sub(t.copy_records);
        let zc_bytes = self.batch.delivered_bytes().saturating_sub(t.copy_bytes);
        if zc_records != 0 {
            st.zc_bytes.add(zc_bytes);
            st.zc_records.add(zc_records);
        }
        if t.copy_records != 0 {
            st.copy_bytes.add(t.copy_bytes);
            st.copy_records.add(t.copy_records);
        }
        if records != 0 {
            let ev = if t.copy_records != 0 {
                ZCRX_RS_EVENT_COPY
            } else {
                0
            };
            self.zcrx.fire(ev);
        }
    }
}

impl<S: RecordSink> Walker<'_, S> {
    /// Gives back the buffers of records that never reached the user, and
    /// takes them out of the tally: STATS counts what the user got.
    fn drop_pending(&mut self) {
        self.end_run();
        let zcrx = self.zcrx;
        let tally = &mut self.tally;
        self.batch.take_pending(|r| {
            let len = u64::from(r.len);
            if r.flags & ZCRX_RS_REC_COPY != 0 {
                tally.copy_bytes -= len;
                tally.copy_records -= 1;
            }
            // One reference per buffer the record touches (several for a
            // merged one, see `walk`).
            let shift = zcrx.area().buf_shift();
            let first = (r.off >> shift) as usize;
            let last = ((r.off + len.max(1) - 1) >> shift) as usize;
            for idx in first..=last {
                if !zcrx.user_return(idx) {
                    // The user never saw the record, but may have guessed
                    // the buffer and returned it through the ring
                    // meanwhile: its reference went back then.
                    kernel::pr_warn_once!("recv: a pending record's buffer was returned early\n");
                }
            }
        });
    }

    /// The last record may not grow any more (it is written, dropped, or
    /// no longer the last).
    fn end_run(&mut self) {
        if self.run_len != 0 {
            self.batch.set_last_len(self.run_len);
            self.run_len = 0;
        }
        self.next.clear();
    }

    /// Makes room for one record; false (and `stop` set) if there is none.
    /// Ends the run: the caller adds a record.
    #[inline(always)]
    fn make_room(&mut self) -> bool {
        self.end_run();
        if self.stop.is_some() {
            return false;
        }
        if !self.batch.has_room() {
            self.stop = Some(Stop::RecordsFull);
            return false;
        }
        if self.batch.buffer_full() && self.batch.flush().is_err() {
            self.drop_pending();
            self.stop = Some(Stop::Fault);
            return false;
        }
        true
    }

    /// `tcp_read_sock` actor: `len` bytes of `skb` from `offset`.
    fn on_skb(&mut self, skb: &SkBuff, offset: u32, len: usize) -> ActorResult {
        if self.stop.is_some() {
            return Ok(0);
        }
        let before = self.batch.delivered_bytes();
        let walked = self.walk(skb, offset, len);
        self.end_run();
        if self.batch.flush().is_err() {
            self.drop_pending();
            self.stop = Some(Stop::Fault);
        }
        let consumed = (self.batch.delivered_bytes() - before) as usize;
        match walked {
            Err(e) if consumed == 0 => Err(e),
            _ => Ok(consumed),
        }
    }

    /// Describes `len` bytes of `skb` from `offset`; returns how many it
    /// could (less when a stop condition hit).
    fn walk(&mut self, skb: &SkBuff, offset: u32, len: usize) -> Result<usize> {
        let end = offset as usize + len;
        let mut off = offset as usize;

        let headlen = skb.headlen() as usize;
        if off < headlen {
            let n = headlen.min(end) - off;
            let done = self.copy(skb, off, n)?;
            off += done;
            if done < n {
                return Ok(off - offset as usize);
            }
        }

        let mut start = headlen;
        let zcrx = self.zcrx;
        let niovs = zcrx.area().niovs();
        let shift = niovs.buf_shift();
        let buf_size = niovs.buf_size();
        for frag in skb.frags() {
            let size = frag.size() as usize;
            let fend = start + size;
            // A whole frag that starts the buffer after the last record's
            // (which ends at the end of its buffer) extends that record, up
            // to ZCRX_RS_RANGE_MAX_BUFS buffers: each buffer a record
            // touches is one piece of it with one user reference, and the
            // record goes back as one range (`ZCRX_RS_RQE_RANGE`). Needs no
            // room in the record array, and no stop check: no stop is set
            // here (see the returns below). Most buffers of a GRO'd stream
            // come this way (all but each packet's first and one after
            // every 32): keep it short (the bench's `--insn` counts its
            // instructions). The run is checked first, so that without one
            // (no merging) a frag costs one comparison here; `take` checks
            // it again, which the compiler folds.
            if self.next.is_next(frag)
                && off == start
                && fend <= end
                && frag.off() == 0
                && size.wrapping_sub(1) < buf_size
            {
                if let Some(buf) = self.next.take(frag) {
                    // The skb keeps its reference; the user's keeps the
                    // buffer from being recycled while the user reads.
                    buf.give_to_user();
                    // INVARIANT: the run's limits keep this in range;
                    // `next` moved on with it.
                    self.run_len += size as u32;
                    if size != buf_size {
                        // INVARIANT: the record ends inside the buffer.
                        self.end_run();
                    }
                    off = fend;
                    start = fend;
                    continue;
                }
            }
            if off < fend && off < end {
                let n = fend.min(end) - off;
                let boff = frag.off() as usize + (off - start);
                let done = match niovs.lookup(frag) {
                    Some(buf) => self.zero_copy(buf, boff, n, shift)?,
                    // Another provider's memory: not readable, not ours.
                    None if frag.netmem().is_net_iov() => return Err(EFAULT),
                    None => self.copy(skb, off, n)?,
                };
                off += done;
                if done < n {
                    return Ok(off - offset as usize);
                }
            }
            start = fend;
        }

        for sub in skb.frag_list() {
            let send = start + sub.len() as usize;
            if off < send && off < end {
                let n = send.min(end) - off;
                let done = self.walk(sub, (off - start) as u32, n)?;
                off += done;
                if done < n {
                    return Ok(off - offset as usize);
                }
            }
            start = send;
        }
        Ok(off - offset as usize)
    }

    /// Hands `n` bytes at `boff` of our buffer `buf` (of `1 << shift`
    /// bytes) to the user in a record of their own (`walk` merges what it
    /// can).
    #[inline(always)]
    fn zero_copy(&mut self, buf: FragBuf<'_>, boff: usize, n: usize, shift: u32) -> Result<usize> {
        let buf_size = 1usize << shift;
        if boff + n > buf_size {
            return Err(EFAULT);
        }
        if !self.make_room() {
            return Ok(0);
        }
        let idx = buf.idx();
        // A record that ends at the end of its buffer may go on in the
        // next one.
        let next = (boff + n == buf_size && self.merge_bufs > 0)
            .then(|| NextBuf::after(self.zcrx.area().niovs(), &buf, self.merge_bufs));
        buf.give_to_user();
        let rec = zcrx_rs_rec {
            off: ((idx << shift) + boff) as u64,
            len: n as u32,
            flags: 0,
        };
        if self.batch.push(rec).is_err() {
            // `make_room` said there was room; never keep the reference.
            self.zcrx.user_return(idx);
            return Ok(0);
        }
        if let Some(next) = next {
            // INVARIANT: `rec` is the last record, a zero-copy one that ends
            // at the end of buffer `idx`; `merge_bufs` keeps it within the
            // limits (`make_room` ended any run before).
            self.next = next;
            self.run_len = n as u32;
        }
        Ok(n)
    }

    /// Copies `n` readable bytes of `skb` at `off` into free buffers.
    fn copy(&mut self, skb: &SkBuff, off: usize, n: usize) -> Result<usize> {
        let area = self.zcrx.area();
        if !area.can_copy() {
            // A dma-buf area: the data stays in the socket; the call ends
            // with what it has (a wait could never get past this data),
            // and the next one says why.
            self.stop = Some(Stop::NoCopy);
            return Ok(0);
        }
        let mut done = 0;
        while done < n {
            if self.tally.copy_bytes >= self.copy_budget {
                self.stop.get_or_insert(Stop::CopyBudget);
                break;
            }
            if !self.make_room() {
                break;
            }
            let Some(mut buf) = area.niovs().take_free() else {
                self.stop = Some(Stop::NoBuffers);
                break;
            };
            let idx = buf.idx();
            let chunk = (n - done).min(area.buf_size());
            // Page by page (a buffer may span several); on failure `buf`
            // goes back to the free list as it drops.
            let mut filled = 0;
            for k in 0..chunk.div_ceil(PAGE_SIZE) {
                let len = (chunk - filled).min(PAGE_SIZE);
                let at = (off + done + filled) as u32;
                buf.with_page(k, |page| skb.copy_bits_to_page(at, page, len))??;
                filled += len;
            }
            // A copy buffer belongs to no pool; its one reference is the
            // user's, dropped when the user returns it.
            buf.give_to_user();
            let rec = zcrx_rs_rec {
                off: (idx << area.buf_shift()) as u64,
                len: chunk as u32,
                flags: ZCRX_RS_REC_COPY,
            };
            if self.batch.push(rec).is_err() {
                // As in `zero_copy`.
                self.zcrx.user_return(idx);
                break;
            }
            self.tally.copy_bytes += chunk as u64;
            self.tally.copy_records += 1;
            done += chunk;
        }
        Ok(done)
    }
}

/// Result of a receive call.
pub(crate) struct Received {
    /// Records written.
    pub(crate) records: u32,
    /// Bytes they describe (0 with 0 records: end of stream).
    pub(crate) bytes: u64,
}

/// How many buffers of `1 << shift` bytes a merged record may take after
/// its first: the whole record within `ZCRX_RS_RANGE_MAX_BUFS` buffers (one
/// range entry gives it back) and `u32::MAX` bytes (its `len`).
fn merge_extra_bufs(shift: u32) -> usize {
    (ZCRX_RS_RANGE_MAX_BUFS as usize).min((u32::MAX >> shift.min(31)) as usize) - 1
}

/// Receives from `sock` into at most `cap` records written to `sink`.
///
/// Like `recv()`: blocks until data arrives unless `nonblock` (then
/// `EAGAIN`), honours `SO_RCVLOWAT`, `SO_RCVTIMEO` and signals, returns 0 bytes at end of
/// stream and the socket's error if it has one, and returns before an
/// urgent mark once it has described anything (a call that starts at the
/// mark passes it: `tcp_read_sock()` steps over the urgent byte, or reads
/// it with `SO_OOBINLINE`). `ENOBUFS` when data is
/// there but no buffer is free to copy it into, or when nothing could be
/// read while the page pools are dry and the user holds buffers (instead
/// of sleeping or `EAGAIN`; a sleeping call is woken when the pools run
/// dry): return buffers through the refill ring and call again; `EOPNOTSUPP` when the data needs a copy
/// and the area takes none (a dma-buf); `ENOTCONN` on a listening or
/// unconnected socket.
pub(crate) fn recv<S: RecordSink>(
    zcrx: &Zcrx,
    sock: &TcpSocket,
    sink: S,
    cap: u32,
    nonblock: bool,
    merge: bool,
) -> Result<Received> {
    let shift = zcrx.area().buf_shift();
    let mut w = Walker {
        zcrx,
        batch: RecordBatch::new(sink, cap),
        next: NextBuf::none(zcrx.area().niovs()),
        run_len: 0,
        merge_bufs: if merge { merge_extra_bufs(shift) } else { 0 },
        stop: None,
        tally: Tally::default(),
        copy_budget: COPY_BUDGET,
    };
    let mut lock = sock.lock()?;
    if lock.state() == TcpState::Listen {
        return Err(ENOTCONN);
    }
    let mut timeo = lock.rcvtimeo(nonblock);
    let target = lock.rcvlowat();
    w.copy_budget = COPY_BUDGET.max(target);
    let mut drained = false;
    loop {
        let r = lock.read(&mut |skb: &SkBuff, off: u32, len: usize| w.on_skb(skb, off, len));
        if w.batch.delivered() > 0 {
            // Like recv(): wait for SO_RCVLOWAT bytes, unless waiting could
            // not bring more (a stop, no time left, end of stream, an error
            // to report next time) or the next byte is at the urgent mark
            // (recv() stops there once it has read anything, so that the
            // program can look: SIOCATMARK, MSG_OOB). A signal ends the
            // wait with the data.
            // Nor while the pools are dry and the user holds buffers: more
            // may only come once the user gives some back. (Read the dry
            // spells first: the wait below ends when a new one begins.)
            let spells = zcrx.dry_spells();
            if w.batch.delivered_bytes() >= target
                || w.stop.is_some()
                || timeo == 0
                || !lock.may_get_more()
                || lock.at_urgent_mark()
                || zcrx.starved_and_held()
            {
                break;
            }
            let seen = lock.queue_tail();
            if lock
                .wait_data_or(&mut timeo, seen, zcrx.sleepers(), || {
                    zcrx.dry_spells() != spells
                })
                .is_err()
            {
                break;
            }
            // The wait released the lock: an urgent mark may have come
            // right where we are. Do not read past it in this call.
            if lock.at_urgent_mark() || zcrx.starved_and_held() {
                break;
            }
            continue;
        }
        r?;
        match w.stop {
            Some(Stop::NoBuffers) if !drained => {
                // Buffers the user gave back may wait on the refill ring
                // with no page pool to consume it: take them and retry.
                zcrx.drain_refill();
                drained = true;
                w.stop = None;
                continue;
            }
            Some(Stop::NoBuffers) => return Err(ENOBUFS),
            Some(Stop::Fault) => return Err(EFAULT),
            Some(Stop::NoCopy) => return Err(EOPNOTSUPP),
            Some(Stop::RecordsFull) | Some(Stop::CopyBudget) | None => {}
        }
        if eof_or_error(&lock)? {
            break;
        }
        // Nothing to read, the pools are dry and the user holds buffers:
        // the data may be waiting for those (dropped by the NIC, or behind
        // a hole in the out-of-order queue). Say so instead of sleeping or
        // EAGAIN, and wake such a sleeper when the pools run dry.
        let spells = zcrx.dry_spells();
        if zcrx.starved_and_held() {
            return Err(ENOBUFS);
        }
        if timeo == 0 {
            return Err(EAGAIN);
        }
        // Nothing read. Should anything be queued that this call could not
        // consume, sleep until more arrives instead of spinning.
        let seen = lock.queue_tail();
        lock.wait_data_or(&mut timeo, seen, zcrx.sleepers(), || {
            zcrx.dry_spells() != spells
        })?;
    }
    drop(lock);
    debug_assert!(w.batch.pending_bytes() == 0);
    Ok(Received {
        records: w.batch.delivered(),
        bytes: w.batch.delivered_bytes(),
    })
}

/// Nothing was read: true at end of stream, the socket's error, or false
/// when the caller should wait for data.
fn eof_or_error(lock: &LockedSock<'_>) -> Result<bool> {
    if lock.done() {
        return Ok(true);
    }
    if let Some(e) = lock.take_error() {
        return Err(e);
    }
    if lock.rcv_shutdown() {
        return Ok(true);
    }
    if lock.state() == TcpState::Close {
        return Err(ENOTCONN);
    }
    Ok(false)
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
