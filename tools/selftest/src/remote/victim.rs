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
    s: TcpStream,
    valid: bool,
    /// Valid: the id (once its 8 bytes are in), its pattern, and bytes of
    /// pattern seen.
    id: Option<u64>,
    pat: Option<Pattern>,
    hdr: Vec<u8>,
    got: u64,
    last: Instant,
}

pub(super) fn victim_loop(z: &mut Zcrx, valid: TcpListener, garbage: TcpListener, stop: &AtomicBool) -> Result<Victim, String> {
    valid.set_nonblocking(true).map_err(|e| e.to_string())?;
    garbage.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut v = Victim::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut recs = vec![Rec::default(); 128];
    let mut stopped: Option<Instant> = None;
    loop {
        if stopped.is_none() && stop.load(Ordering::Acquire) {
            stopped = Some(Instant::now());
        }
        // After the senders stop: the valid connections still open must
        // finish; garbage ones are closed.
        if let Some(t) = stopped {
            if !conns.iter().any(|c| c.valid) {
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
                conns.push(Conn { s, valid: is_valid, id: None, pat: None, hdr: Vec::new(), got: 0, last: Instant::now() });
            }
        }
        // new ones: try them at once
        ready.resize(conns.len(), true);
        let mut i = 0;
        while i < conns.len() {
            let c = &mut conns[i];
            let mut close = false;
            if !ready[i] && stopped.is_none() {
                if c.valid && c.last.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "valid connection {:?} stalled after {} bytes: {}",
                        c.id,
                        c.got,
                        crate::net::stall_report(z, &c.s, c.got)
                    ));
                }
                i += 1;
                continue;
            }
            if !c.valid && at_mark(&c.s).unwrap_or(false) && recv_oob(&c.s).is_ok() {
                v.oob_read += 1;
            }
            let flags = ZCRX_RS_RECV_DONTWAIT | if c.got.is_multiple_of(2) { ZCRX_RS_RECV_MERGE } else { 0 };
            match z.recv(c.s.as_raw_fd(), &mut recs, flags) {
                Ok(got) if got.bytes == 0 => close = true,
                Ok(got) => {
                    c.last = Instant::now();
                    for r in &recs[..got.records] {
                        let mut d = z.data(r);
                        if r.flags & ZCRX_RS_REC_COPY != 0 {
                            v.copy_bytes += u64::from(r.len);
                        } else {
                            v.zc_bytes += u64::from(r.len);
                        }
                        if !c.valid {
                            v.garbage_bytes += d.len() as u64;
                            continue;
                        }
                        if c.id.is_none() {
                            let take = (8 - c.hdr.len()).min(d.len());
                            c.hdr.extend_from_slice(&d[..take]);
                            d = &d[take..];
                            if c.hdr.len() == 8 {
                                let id = u64::from_le_bytes(c.hdr[..].try_into().unwrap());
                                c.id = Some(id);
                                c.pat = Some(Pattern::new(id));
                            }
                        }
                        if let (Some(id), Some(p)) = (c.id, &c.pat) {
                            if let Some(bad) = p.check(c.got, d) {
                                return Err(format!("valid connection {id}: payload mismatch at offset {bad}"));
                            }
                            c.got += d.len() as u64;
                        }
                    }
                    z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => v.enobufs += 1,
                Err(e) if c.valid => return Err(format!("valid connection {:?}: RECV: {e}", c.id)),
                Err(e) => {
                    *v.garbage_errors.entry(zcrx::sys::errno_name(e.raw_os_error().unwrap_or(0)).to_string()).or_default() += 1;
                    close = true;
                }
            }
            if !close && !c.valid && stopped.is_some() {
                close = true;
            }
            if close {
                let c = conns.swap_remove(i);
                ready.swap_remove(i);
                if c.valid {
                    let Some(id) = c.id else { return Err("valid connection closed before its id".into()) };
                    let want = valid_len(id);
                    if c.got != want {
                        return Err(format!("valid connection {id}: {} bytes, sent {want}", c.got));
                    }
                    v.valid_done += 1;
                    v.valid_bytes += c.got;
                }
                continue;
            }
            i += 1;
        }
    }
    Ok(v)
}
