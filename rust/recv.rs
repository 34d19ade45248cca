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

use kernel::prelude::*;

use crate::mm::pin::PAGE_SIZE;
use crate::net::{
    netmem::{FragBuf, NextBuf},
    skb::SkBuff,
    sock::{ActorResult, LockedSock, TcpSocket, TcpState},
};
use crate::uapi::{zcrx_rs_rec, ZCRX_RS_EVENT_COPY, ZCRX_RS_REC_COPY};
use crate::zcrx::Zcrx;

mod records;

use records::merge_extra_bufs;
pub(crate) use records::{RecordBatch, RecordSink};

/// Most bytes one call copies (the copy fallback runs under the socket
/// lock, while the socket's softirq side queues to its backlog), unless
/// `SO_RCVLOWAT` asks for more: like a `recv()` with a 2 MiB buffer. Twice
/// the bench's 1 MiB mark, so that a call takes what a wake-up finds (at 1
/// MiB, 12% more calls and 8% more CPU per GiB in the copy fallback).
/// Zero-copy records cost no copy and are not bounded beyond the caller's
/// record array.
pub(crate) const COPY_BUDGET: u64 = 2 << 20;

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
