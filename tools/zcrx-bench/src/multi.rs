// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Many connections at once (`--flows N`, N > 1), received by one thread the
//! way a server does it: copy, trunc and zcrx-rs wait in `epoll_wait()` and
//! make one non-blocking receive call per ready connection (`SO_RCVLOWAT`
//! applies: a connection is ready once that much is queued, or at its
//! end); io_uring zcrx has one multishot `RECV_ZC` per connection on its
//! ring, told apart by their tags, each on the zcrx instance of the rx queue
//! its packets arrive on (`SO_INCOMING_NAPI_ID`; with several queues bound,
//! RSS decides). Every connection's stream is checked against the pattern
//! from its own offset 0, as with one flow.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use zcrx::uapi::{ZCRX_RS_RECV_DONTWAIT, ZCRX_RS_REC_COPY};
use zcrx::{Rec, Zcrx};

use crate::uring::ZcrxRing;
use crate::{die, Mode, Sampler, SEED};

/// What the connections brought, summed.
pub struct Totals {
    pub total: u64,
    pub copied: u64,
    /// Receive calls (for io_uring: completion batches).
    pub calls: u64,
    /// Records (zcrx-rs) or data completions (io_uring zcrx).
    pub records: u64,
    pub checked: u64,
}

/// One connection's progress.
struct Flow<'a> {
    s: &'a TcpStream,
    smp: Sampler,
    off: u64,
    done: bool,
}

/// Receives every connection of `socks` to its end.
/// `napi`: the NAPI id of each bound queue, in order (io_uring zcrx with
/// several queues; empty: all on the first).
pub fn receive(mode: Mode, socks: &[TcpStream], zc: Option<&mut Zcrx>, ring: Option<&mut ZcrxRing>, napi: &[u32], zflags: u32) -> Totals {
    let mut flows: Vec<Flow<'_>> = socks.iter().map(|s| Flow { s, smp: Sampler::new(SEED), off: 0, done: false }).collect();
    let mut t = Totals { total: 0, copied: 0, calls: 0, records: 0, checked: 0 };
    match mode {
        Mode::IouringZcrx => uring(&mut flows, ring.expect("set up"), napi, &mut t),
        _ => polled(mode, &mut flows, zc, zflags, &mut t),
    }
    t.total = flows.iter().map(|f| f.off).sum();
    t.checked = flows.iter().map(|f| f.smp.checked).sum();
    t
}

/// `epoll_wait()`, then one non-blocking call per ready connection.
fn polled(mode: Mode, flows: &mut [Flow<'_>], mut zc: Option<&mut Zcrx>, zflags: u32, t: &mut Totals) {
    // SAFETY: plain epoll_create1; the fd is ours.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        die("epoll_create1", io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    for (i, f) in flows.iter().enumerate() {
        f.s.set_nonblocking(true).unwrap_or_else(|e| die("O_NONBLOCK", e));
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
        // SAFETY: a live event struct for our epoll fd.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, f.s.as_raw_fd(), &mut ev) } < 0 {
            die("epoll_ctl", io::Error::last_os_error());
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut recs = vec![Rec::default(); 1024];
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; flows.len()];
    let mut open = flows.len();
    while open > 0 {
        // SAFETY: `evs` has room for `evs.len()` events.
        // Not a performance bound: data that stopped coming (a stall) ends
        // the run with an error instead of waiting for the VM's timeout.
        let n = crate::in_call(|| unsafe { libc::epoll_wait(ep.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, 120_000) });
        if n == 0 {
            let left: Vec<String> = flows.iter().enumerate().filter(|(_, f)| !f.done).map(|(i, f)| format!("{i}@{}", f.off)).collect();
            die("epoll_wait", format!("no data on any of {open} open flows for 120 s (flow@bytes: {})", left.join(" ")));
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            die("epoll_wait", e);
        }
        for ev in &evs[..n as usize] {
            let f = &mut flows[ev.u64 as usize];
            if f.done {
                continue;
            }
            t.calls += 1;
            let got = match mode {
                Mode::Copy => match crate::in_call(|| f.s.read(&mut buf)) {
                    Ok(n) => {
                        f.smp.check(f.off, &buf[..n]);
                        t.copied += n as u64;
                        Some(n as u64)
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                    Err(e) => die("read", e),
                },
                Mode::Trunc => {
                    // SAFETY: recv into our buffer; MSG_TRUNC makes TCP drop the data.
                    let n = crate::in_call(|| unsafe {
                        libc::recv(f.s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC | libc::MSG_DONTWAIT)
                    });
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() != io::ErrorKind::WouldBlock {
                            die("recv(MSG_TRUNC)", e);
                        }
                        None
                    } else {
                        Some(n as u64)
                    }
                }
                Mode::ZcrxRs | Mode::ZcrxRsNoMerge | Mode::ZcrxRsCopy => {
                    let z = zc.as_deref_mut().expect("set up");
                    match crate::in_call(|| z.recv(f.s.as_raw_fd(), &mut recs, ZCRX_RS_RECV_DONTWAIT | zflags)) {
                        Ok(g) => {
                            t.records += g.records as u64;
                            let mut off = f.off;
                            for r in &recs[..g.records] {
                                f.smp.check(off, z.data(r));
                                off += u64::from(r.len);
                                if r.flags & ZCRX_RS_REC_COPY != 0 {
                                    t.copied += u64::from(r.len);
                                }
                            }
                            z.refill(&recs[..g.records]).unwrap_or_else(|e| die("refill", e));
                            Some(g.bytes)
                        }
                        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => None,
                        Err(e) => die("zcrx recv", e),
                    }
                }
                Mode::IouringZcrx => unreachable!(),
            };
            match got {
                Some(0) => {
                    f.done = true;
                    open -= 1;
                    // SAFETY: removing a registered fd from our epoll fd.
                    unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_DEL, f.s.as_raw_fd(), std::ptr::null_mut()) };
                }
                Some(n) => f.off += n,
                None => {}
            }
        }
    }
}

/// The index in `napi` of the queue connection `s` arrives on (0 if
/// `napi` is empty).
fn queue_of(s: &TcpStream, napi: &[u32]) -> usize {
    if napi.is_empty() {
        return 0;
    }
    let id = zcrx::sys::incoming_napi_id(s).unwrap_or_else(|e| {
        let hint = if e.raw_os_error() == Some(libc::ENOPROTOOPT) { " (a kernel without CONFIG_NET_RX_BUSY_POLL)" } else { "" };
        die("SO_INCOMING_NAPI_ID", format!("{e}{hint}"))
    });
    napi.iter()
        .position(|&n| n == id)
        .unwrap_or_else(|| die("SO_INCOMING_NAPI_ID", format!("connection on NAPI {id}, not one of the bound queues' {napi:?}")))
}

/// One multishot `RECV_ZC` per connection, tagged with its index, on the
/// instance of its queue.
fn uring(flows: &mut [Flow<'_>], r: &mut ZcrxRing, napi: &[u32], t: &mut Totals) {
    let ifq: Vec<usize> = flows.iter().map(|f| queue_of(f.s, napi)).collect();
    for (i, f) in flows.iter().enumerate() {
        r.recv_multishot_tagged(f.s.as_raw_fd(), i as u64, ifq[i]).unwrap_or_else(|e| die("RECV_ZC", e));
    }
    let mut open = flows.len();
    let mut rearm = Vec::new();
    while open > 0 {
        t.calls += 1;
        let mut failed = None;
        r.complete_refill(|c, data| {
            let f = &mut flows[c.tag as usize];
            match c.err {
                // The CQ ring filled up: the request ended; re-arm.
                Some(libc::ENOSPC) => {
                    rearm.push(c.tag as usize);
                    return;
                }
                Some(e) => {
                    failed = Some(e);
                    return;
                }
                None => {}
            }
            if c.len == 0 {
                f.done = true;
                open -= 1;
                return;
            }
            f.smp.check(f.off, data);
            f.off += c.len as u64;
            t.records += 1;
            if !c.more {
                rearm.push(c.tag as usize);
            }
        })
        .unwrap_or_else(|e| die("io_uring_enter", e));
        if let Some(e) = failed {
            die("RECV_ZC", io::Error::from_raw_os_error(e));
        }
        for i in rearm.drain(..) {
            if !flows[i].done {
                r.recv_multishot_tagged(flows[i].s.as_raw_fd(), i as u64, ifq[i]).unwrap_or_else(|e| die("RECV_ZC", e));
            }
        }
    }
}
