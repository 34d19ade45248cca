// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The victim: accepts valid and garbage connections on the provider's
//! queue, checks the valid ones byte for byte and reads the rest.

use super::*;

/// What the victim saw.
#[derive(Debug, Default)]
pub(super) struct Victim {
    pub(super) valid_done: u64,
    pub(super) valid_bytes: u64,
    pub(super) zc_bytes: u64,
    pub(super) copy_bytes: u64,
    pub(super) garbage_conns: u64,
    pub(super) garbage_bytes: u64,
    pub(super) garbage_errors: BTreeMap<String, u64>,
    pub(super) oob_read: u64,
    pub(super) enobufs: u64,
}

/// One accepted connection on the victim.
pub(super) struct Conn {
    pub(super) s: TcpStream,
    valid: bool,
    /// Valid: the id (once its 8 bytes are in), its pattern, and bytes of
    /// pattern seen.
    id: Option<u64>,
    pat: Option<Pattern>,
    hdr: Vec<u8>,
    pub(super) got: u64,
    last: Instant,
}

/// How a poll-driven victim reads a connection that is ready.
pub(super) trait PollRx {
    /// Reads what `c` has without blocking and hands it to [`Conn::take`],
    /// counting zero-copy and copied bytes in `v`: `Ok(Ok(true))` if it
    /// read, `Ok(Ok(false))` at the end of stream, `Ok(Err(_))` what the
    /// receive call failed with (`EAGAIN`: nothing there), `Err` if the
    /// data was wrong.
    fn read(&mut self, c: &mut Conn, v: &mut Victim) -> Result<std::io::Result<bool>, String>;

    /// What the receiver knows of a stalled connection.
    fn stall_report(&self, c: &Conn) -> String;
}

/// zcrx-rs: `RECV` (merging records on every other call), records checked
/// and given back at once.
pub(super) struct ZcrxRx<'a> {
    pub(super) z: &'a mut Zcrx,
    pub(super) recs: Vec<Rec>,
}

impl PollRx for ZcrxRx<'_> {
    fn read(&mut self, c: &mut Conn, v: &mut Victim) -> Result<std::io::Result<bool>, String> {
        let flags = ZCRX_RS_RECV_DONTWAIT | if c.got.is_multiple_of(2) { ZCRX_RS_RECV_MERGE } else { 0 };
        let got = match self.z.recv(c.s.as_raw_fd(), &mut self.recs, flags) {
            Ok(got) => got,
            Err(e) => return Ok(Err(e)),
        };
        if got.bytes == 0 {
            return Ok(Ok(false));
        }
        for r in &self.recs[..got.records] {
            if r.flags & ZCRX_RS_REC_COPY != 0 {
                v.copy_bytes += u64::from(r.len);
            } else {
                v.zc_bytes += u64::from(r.len);
            }
            c.take(v, self.z.data(r))?;
        }
        self.z.refill(&self.recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        Ok(Ok(true))
    }

    fn stall_report(&self, c: &Conn) -> String {
        crate::net::stall_report(self.z, &c.s, c.got)
    }
}

impl Conn {
    fn new(s: TcpStream, valid: bool) -> Conn {
        Conn { s, valid, id: None, pat: None, hdr: Vec::new(), got: 0, last: Instant::now() }
    }

    /// Bytes `d` of this connection arrived: a valid one checks them
    /// against its pattern (after its 8-byte id).
    pub(super) fn take(&mut self, v: &mut Victim, mut d: &[u8]) -> Result<(), String> {
        if !self.valid {
            v.garbage_bytes += d.len() as u64;
            return Ok(());
        }
        if self.id.is_none() {
            let take = (8 - self.hdr.len()).min(d.len());
            self.hdr.extend_from_slice(&d[..take]);
            d = &d[take..];
            if self.hdr.len() == 8 {
                let id = u64::from_le_bytes(self.hdr[..].try_into().unwrap());
                self.id = Some(id);
                self.pat = Some(Pattern::new(id));
            }
        }
        if let (Some(id), Some(p)) = (self.id, &self.pat) {
            if let Some(bad) = p.check(self.got, d) {
                return Err(format!("valid connection {id}: payload mismatch at offset {bad}"));
            }
            self.got += d.len() as u64;
        }
        Ok(())
    }

    /// The connection ended: a valid one must have had all its bytes.
    fn finish(self, v: &mut Victim) -> Result<(), String> {
        if self.valid {
            let Some(id) = self.id else { return Err("valid connection closed before its id".into()) };
            let want = valid_len(id);
            if self.got != want {
                return Err(format!("valid connection {id}: {} bytes, sent {want}", self.got));
            }
            v.valid_done += 1;
            v.valid_bytes += self.got;
        }
        Ok(())
    }
}

pub(super) fn victim_loop(rx: &mut dyn PollRx, valid: TcpListener, garbage: TcpListener, stop: &AtomicBool) -> Result<Victim, String> {
    valid.set_nonblocking(true).map_err(|e| e.to_string())?;
    garbage.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut v = Victim::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut stopped: Option<Instant> = None;
    // Whether the listeners were drained after the stop: the senders have
    // connected (and maybe sent all) by then, so a valid connection can
    // still wait in the backlog.
    let mut drained = false;
    loop {
        if stopped.is_none() && stop.load(Ordering::Acquire) {
            stopped = Some(Instant::now());
        }
        // After the senders stop: the valid connections still open must
        // finish; garbage ones are closed.
        if let Some(t) = stopped {
            if drained && !conns.iter().any(|c| c.valid) {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("{} valid connections still open 120 s after the end", conns.iter().filter(|c| c.valid).count()));
            }
        }
        let mut fds: Vec<libc::pollfd> =
            [&valid, &garbage].iter().map(|l| libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        fds.extend(conns.iter().map(|c| libc::pollfd { fd: c.s.as_raw_fd(), events: libc::POLLIN | libc::POLLPRI, revents: 0 }));
        // SAFETY: `fds` is a valid array of pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        let mut ready: Vec<bool> = fds[2..].iter().map(|p| p.revents != 0).collect();
        for (l, is_valid) in [(&valid, true), (&garbage, false)] {
            while let Ok((s, _)) = l.accept() {
                let _ = s.set_nonblocking(false);
                if !is_valid {
                    v.garbage_conns += 1;
                    // Closed with a RST, at once: a server drops a hostile
                    // peer so, and no orphan keeps out-of-order data (and
                    // area buffers) while it retransmits a FIN for minutes.
                    zcrx::sys::set_linger_abort(&s).map_err(|e| format!("SO_LINGER: {e}"))?;
                }
                conns.push(Conn::new(s, is_valid));
            }
        }
        drained = stopped.is_some();
        // new ones: try them at once
        ready.resize(conns.len(), true);
        let mut i = 0;
        while i < conns.len() {
            let c = &mut conns[i];
            let mut close = false;
            if !ready[i] && stopped.is_none() {
                if c.valid && c.last.elapsed() > Duration::from_secs(60) {
                    return Err(format!("valid connection {:?} stalled after {} bytes: {}", c.id, c.got, rx.stall_report(c)));
                }
                i += 1;
                continue;
            }
            if !c.valid && at_mark(&c.s).unwrap_or(false) && recv_oob(&c.s).is_ok() {
                v.oob_read += 1;
            }
            match rx.read(c, &mut v)? {
                Ok(false) => close = true,
                Ok(true) => c.last = Instant::now(),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => v.enobufs += 1,
                Err(e) if c.valid => return Err(format!("valid connection {:?}: receive: {e}", c.id)),
                Err(e) => {
                    *v.garbage_errors.entry(zcrx::sys::errno_name(e.raw_os_error().unwrap_or(0)).to_string()).or_default() += 1;
                    close = true;
                }
            }
            if !close && !c.valid && stopped.is_some() {
                close = true;
            }
            if close {
                ready.swap_remove(i);
                conns.swap_remove(i).finish(&mut v)?;
                continue;
            }
            i += 1;
        }
    }
    Ok(v)
}

/// [`victim_loop`] with io_uring zcrx as the queue's provider: a multishot
/// `RECV_ZC` per accepted connection, tagged with it; a completion's
/// buffer goes back on the refill ring as soon as it is checked. io_uring
/// zcrx does not tell copied data from zero-copy: all of it counts as
/// `zc_bytes`.
pub(super) fn victim_loop_uring(
    ring: &mut iou_zcrx::ZcrxRing,
    valid: TcpListener,
    garbage: TcpListener,
    stop: &AtomicBool,
) -> Result<Victim, String> {
    valid.set_nonblocking(true).map_err(|e| e.to_string())?;
    garbage.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut v = Victim::default();
    let mut conns: BTreeMap<u64, Conn> = BTreeMap::new();
    let mut next_tag = 1u64;
    let mut stopped: Option<Instant> = None;
    let mut drained = false;
    // Ends a connection's receive (its request completes with the end of
    // stream, a late completion finds no connection) and closes it.
    let close = |c: Conn| {
        // SAFETY: shutdown(2) on the connection's open socket.
        unsafe { libc::shutdown(c.s.as_raw_fd(), libc::SHUT_RDWR) };
    };
    loop {
        if stopped.is_none() && stop.load(Ordering::Acquire) {
            stopped = Some(Instant::now());
            let g: Vec<u64> = conns.iter().filter(|(_, c)| !c.valid).map(|(t, _)| *t).collect();
            for t in g {
                close(conns.remove(&t).unwrap());
            }
        }
        if let Some(t) = stopped {
            if drained && !conns.values().any(|c| c.valid) {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("{} valid connections still open 120 s after the end", conns.values().filter(|c| c.valid).count()));
            }
        }
        for (l, is_valid) in [(&valid, true), (&garbage, false)] {
            while let Ok((s, _)) = l.accept() {
                if !is_valid {
                    v.garbage_conns += 1;
                    zcrx::sys::set_linger_abort(&s).map_err(|e| format!("SO_LINGER: {e}"))?;
                }
                ring.recv_multishot_tagged(s.as_raw_fd(), next_tag, 0).map_err(|e| format!("RECV_ZC: {e}"))?;
                conns.insert(next_tag, Conn::new(s, is_valid));
                next_tag += 1;
            }
        }
        drained = stopped.is_some();
        for c in conns.values().filter(|c| !c.valid) {
            if at_mark(&c.s).unwrap_or(false) && recv_oob(&c.s).is_ok() {
                v.oob_read += 1;
            }
        }
        let (mut ended, mut rearm, mut bad) = (Vec::new(), Vec::new(), None);
        let now = Instant::now();
        ring.complete_refill_timeout(Duration::from_millis(50), |cqe, d| {
            let Some(c) = conns.get_mut(&cqe.tag) else { return };
            match cqe.err {
                // The CQ ring was full: the request ended; ask again.
                Some(libc::ENOSPC) => rearm.push(cqe.tag),
                // No free buffer to copy into (io_zcrx_copy_chunk): what
                // ENOBUFS is to zcrx-rs; the stall check catches a wedge.
                Some(libc::ENOMEM) | Some(libc::ENOBUFS) => {
                    v.enobufs += 1;
                    rearm.push(cqe.tag);
                }
                Some(e) => ended.push((cqe.tag, Some(e))),
                None if cqe.len == 0 && !cqe.more => ended.push((cqe.tag, None)),
                None => {
                    c.last = now;
                    v.zc_bytes += d.len() as u64;
                    if let Err(e) = c.take(&mut v, d) {
                        bad.get_or_insert(e);
                    }
                    if !cqe.more {
                        rearm.push(cqe.tag);
                    }
                }
            }
        })
        .map_err(|e| format!("io_uring: {e}"))?;
        if let Some(e) = bad {
            return Err(e);
        }
        for t in rearm {
            if let Some(c) = conns.get(&t) {
                ring.recv_multishot_tagged(c.s.as_raw_fd(), t, 0).map_err(|e| format!("RECV_ZC again: {e}"))?;
            }
        }
        for (t, err) in ended {
            let Some(c) = conns.remove(&t) else { continue };
            match err {
                Some(e) if c.valid => {
                    return Err(format!("valid connection {:?}: RECV_ZC: {}", c.id, std::io::Error::from_raw_os_error(e)))
                }
                Some(e) => *v.garbage_errors.entry(zcrx::sys::errno_name(e).to_string()).or_default() += 1,
                None => {}
            }
            c.finish(&mut v)?;
        }
        if stopped.is_none() {
            if let Some(c) = conns.values().find(|c| c.valid && c.last.elapsed() > Duration::from_secs(60)) {
                return Err(format!("valid connection {:?} stalled after {} bytes: {}", c.id, c.got, crate::net::tcp_info_line(&c.s)));
            }
        }
    }
    Ok(v)
}
