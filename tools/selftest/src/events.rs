// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Events (`ZCRX_RS_IOC_EVENTS`, `poll()` on the context fd) and the
//! counters in the ring mapping: a program learns that its pool ran dry or
//! that data was copied without asking `STATS`.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::*;
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, info, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{addr_a, in_netns, join, sender, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("events_pool_dry_wakes_epoll", events_pool_dry_wakes_epoll), ("events_copy_wakes_epoll", events_copy_wakes_epoll)];

/// An epoll instance, closed on drop.
struct Epoll(RawFd);

impl Epoll {
    fn new() -> Result<Self, String> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(format!("epoll_create1: {}", std::io::Error::last_os_error()));
        }
        Ok(Epoll(fd))
    }

    fn add(&self, fd: RawFd, events: u32) -> Result<(), String> {
        let mut ev = libc::epoll_event { events, u64: fd as u64 };
        // SAFETY: valid fds and event struct.
        if unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
            return Err(format!("epoll_ctl ADD {fd}: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// The (fd, events) ready within `ms` milliseconds.
    fn wait(&self, ms: i32) -> Result<Vec<(RawFd, u32)>, String> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: `evs` is writable for 8 events.
        let n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), 8, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(Vec::new());
            }
            return Err(format!("epoll_wait: {e}"));
        }
        Ok(evs[..n as usize].iter().map(|e| (e.u64 as RawFd, e.events)).collect())
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our fd.
        unsafe { libc::close(self.0) };
    }
}

/// What the event-driven receiver saw.
#[derive(Default, Debug)]
struct Seen {
    bytes: u64,
    zc: u64,
    copy: u64,
    /// Records held when the pool-dry event woke epoll.
    held_at_event: usize,
    fired: u32,
    armed_after: u32,
    /// `fired` of a collect after more pool failures (must be 0: one-shot).
    fired_again: u32,
    ring: zcrx_rs_ring_stats,
    stats: zcrx_rs_stats,
    alloc_fail_at_event: u64,
}

/// Receives `s` through `z`, driven by epoll on the socket (`EPOLLIN`) and
/// the context (`EPOLLPRI`): holds every record (never refills) until the
/// context reports the armed pool-dry event, then gives everything back
/// and receives the rest to the end, refilling as it goes. Every byte is
/// checked against `pat`.
fn dry_then_drain(z: &mut Zcrx, s: &TcpStream, pat: &Pattern) -> Result<Seen, String> {
    let mut seen = Seen::default();
    let e = z.events(ZCRX_RS_EVENT_ALLOC_FAIL).map_err(|e| format!("EVENTS arm: {e}"))?;
    if e.fired != 0 || e.armed != ZCRX_RS_EVENT_ALLOC_FAIL {
        return Err(format!("arming: fired {:#x} armed {:#x}", e.fired, e.armed));
    }
    let ep = Epoll::new()?;
    ep.add(z.raw_fd(), libc::EPOLLPRI as u32)?;
    ep.add(s.as_raw_fd(), libc::EPOLLIN as u32)?;
    // Nothing fired yet: the context is not ready.
    if let Some(r) = ep.wait(0)?.iter().find(|r| r.0 == z.raw_fd()) {
        return Err(format!("context ready ({:#x}) before anything fired", r.1));
    }
    let mut held: Vec<Rec> = Vec::new();
    let mut recs = vec![Rec::default(); 128];
    let mut dry = false;
    let t0 = Instant::now();
    // The event is what lets this receiver go on: without it (or without
    // the wake-up) nothing moves. 60 s without a byte or the event fails.
    let mut progress = Instant::now();
    loop {
        if t0.elapsed() > Duration::from_secs(600) {
            return Err(format!("no end after 600 s and {} bytes (event seen: {dry})", seen.bytes));
        }
        if progress.elapsed() > Duration::from_secs(60) {
            return Err(format!("nothing for 60 s after {} bytes, holding {} buffers (event seen: {dry})", seen.bytes, held.len()));
        }
        let ready = ep.wait(1000)?;
        if !dry && ready.iter().any(|r| r.0 == z.raw_fd() && r.1 & libc::EPOLLPRI as u32 != 0) {
            let e = z.events(0).map_err(|e| format!("EVENTS collect: {e}"))?;
            seen.fired = e.fired;
            seen.armed_after = e.armed;
            seen.held_at_event = held.len();
            seen.alloc_fail_at_event = z.stats().map_err(|e| format!("stats: {e}"))?.alloc_fail;
            dry = true;
            progress = Instant::now();
            z.refill(&held).map_err(|e| format!("refill: {e}"))?;
            held.clear();
            // Collected: the context is not ready any more.
            if ep.wait(0)?.iter().any(|r| r.0 == z.raw_fd()) {
                return Err("context still ready after collecting".into());
            }
        }
        // DONTWAIT: epoll said (or may have said) readable; an empty
        // socket answers EAGAIN.
        let got = match z.recv(s.as_raw_fd(), &mut recs, ZCRX_RS_RECV_DONTWAIT) {
            Ok(g) => g,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
            Err(e) => return Err(format!("recv after {} bytes: {e}", seen.bytes)),
        };
        if got.bytes == 0 {
            break;
        }
        progress = Instant::now();
        for r in &recs[..got.records] {
            if let Some(bad) = pat.check(seen.bytes, z.data(r)) {
                return Err(format!("payload mismatch at stream offset {bad}"));
            }
            seen.bytes += u64::from(r.len);
            if r.flags & ZCRX_RS_REC_COPY != 0 {
                seen.copy += u64::from(r.len);
            } else {
                seen.zc += u64::from(r.len);
                crate::devlog::note(z.data(r))?;
            }
        }
        if dry {
            z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        } else {
            held.extend_from_slice(&recs[..got.records]);
        }
    }
    if !dry {
        return Err(format!("the stream ended ({} bytes) without the pool-dry event", seen.bytes));
    }
    let e = z.events(0).map_err(|e| format!("EVENTS: {e}"))?;
    seen.fired_again = e.fired;
    seen.stats = z.stats().map_err(|e| format!("stats: {e}"))?;
    seen.ring = z.ring_stats().ok_or("no counters in the ring mapping")?;
    Ok(seen)
}

/// A receiver that never gives buffers back drains its pool: the armed
/// `ZCRX_RS_EVENT_ALLOC_FAIL` fires and wakes `epoll_wait` on the context
/// fd (`EPOLLPRI`), once; the receiver then returns every buffer and the
/// stream completes byte-exact (the NIC dropped while dry, TCP resent).
/// The ring mapping's counters match `STATS`.
fn events_pool_dry_wakes_epoll(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let i = tryo!(info());
    if i.features & u64::from(ZCRX_RS_FEATURE_EVENTS) == 0 {
        return Fail(format!("INFO lacks ZCRX_RS_FEATURE_EVENTS: {:#x}", i.features));
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    const PORT: u16 = 7150;
    // 128 buffers: a socket's receive buffer holds more, so the pool runs
    // dry while the receiver holds what it got.
    const AREA: usize = 128 << 12;
    let bytes = env.bytes(16 << 20);
    let seed = 150u64;
    let a_idx = n.a_idx;
    let before = tryo!(n.stats(1, 0));
    // Every record, held or not, matched to a write netdevsim logged.
    let log = tryo!(DmaLog::start());
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_netns(NS_A, move || -> Result<Seen, String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area(AREA).map_err(|e| format!("register: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind: {e}"))?;
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).map_err(|e| format!("listen: {e}"))?;
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        dry_then_drain(&mut z, &s, &Pattern::new(seed))
    });
    let _ = ready_rx.recv();
    let tx = sender(addr_a(false, PORT), bytes, Arc::new(Pattern::new(seed)), 0);
    let sent = join(tx);
    let seen = match join(rx) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; sender: {sent:?}")),
    };
    let d = tryo!(n.stats(1, 0)).since(&before);
    env.diag(&format!(
        "{} byte-exact, zero-copy {} ({:.2}%), copied {}; pool-dry event woke epoll with {} records held, \
         alloc_fail {} then; fired {:#x}, armed after {:#x}, fired again {:#x}; STATS alloc_fail {} zc {} copy {}; \
         ring counters: alloc_fail {} zc {} copy {} events {}; netdevsim dropped {} for want of a buffer",
        mib(seen.bytes),
        mib(seen.zc),
        100.0 * seen.zc as f64 / seen.bytes.max(1) as f64,
        mib(seen.copy),
        seen.held_at_event,
        seen.alloc_fail_at_event,
        seen.fired,
        seen.armed_after,
        seen.fired_again,
        seen.stats.alloc_fail,
        mib(seen.stats.zc_bytes),
        mib(seen.stats.copy_bytes),
        seen.ring.alloc_fail,
        mib(seen.ring.zc_bytes),
        mib(seen.ring.copy_bytes),
        seen.ring.events,
        d.drop_no_buf
    ));
    if sent != Ok(bytes) || seen.bytes != bytes {
        return Fail(format!("sent {sent:?}, received {} of {bytes}", seen.bytes));
    }
    if seen.fired != ZCRX_RS_EVENT_ALLOC_FAIL || seen.armed_after != 0 || seen.alloc_fail_at_event == 0 {
        return Fail("the event did not fire as armed, or stayed armed".into());
    }
    if seen.fired_again != 0 || seen.ring.events != 1 {
        return Fail("a one-shot event fired more than once".into());
    }
    // After the stream the counters are still (no traffic): equal.
    let (r, s) = (&seen.ring, &seen.stats);
    if r.alloc_fail != s.alloc_fail || r.zc_bytes != s.zc_bytes || r.copy_bytes != s.copy_bytes || r.copy_records != s.copy_records {
        return Fail("the ring's counters differ from STATS".into());
    }
    if seen.zc != seen.bytes {
        return Fail(format!("{} of {} bytes zero-copy: nothing here may be copied", seen.zc, seen.bytes));
    }
    env.diag(&tryo!(log.check(0, seen.zc)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A copy-only context over loopback with `ZCRX_RS_EVENT_COPY` armed: the
/// first RECV's copies fire it and `epoll_wait` on the context fd returns
/// `EPOLLPRI`; nothing fires with nothing armed; armed again it fires
/// again, also after a new BIND; arming rules (`EINVAL` for unknown bits
/// or output fields set).
fn events_copy_wakes_epoll(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    const PORT: u16 = 7151;
    let bytes = env.bytes(8 << 20);
    let seed = 151u64;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = std::thread::spawn(move || -> Result<(u64, u32, zcrx_rs_ring_stats, zcrx_rs_stats), String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        // Arming rules, before anything is registered.
        let raw = |e: zcrx_rs_events| -> std::io::Result<()> {
            let mut e = e;
            // SAFETY: EVENTS on our fd with a matching struct.
            match unsafe { libc::ioctl(z.raw_fd(), IOC_EVENTS as _, &mut e as *mut zcrx_rs_events) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        };
        for (what, e) in [
            ("unknown event", zcrx_rs_events { arm: 1 << 7, ..Default::default() }),
            ("fired set", zcrx_rs_events { fired: 1, ..Default::default() }),
            ("armed set", zcrx_rs_events { armed: 1, ..Default::default() }),
            ("pad set", zcrx_rs_events { __pad: 1, ..Default::default() }),
            ("reserved set", zcrx_rs_events { __resv: [0, 1], ..Default::default() }),
        ] {
            crate::common::expect_errno(what, raw(e), libc::EINVAL)?;
        }
        z.register_area(4 << 20).map_err(|e| format!("register: {e}"))?;
        z.bind_nodev(0).map_err(|e| format!("BIND NODEV: {e}"))?;
        let ep = Epoll::new()?;
        ep.add(z.raw_fd(), libc::EPOLLPRI as u32)?;
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, PORT)).map_err(|e| format!("listen: {e}"))?;
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let pat = Pattern::new(seed);
        let mut recs = vec![Rec::default(); 128];
        let mut got = 0u64;
        let mut fired = 0u32;
        let mut first = true;
        loop {
            let r = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("recv after {got}: {e}"))?;
            if r.bytes == 0 {
                break;
            }
            if first {
                // Copies with nothing armed: nothing fired.
                if !ep.wait(0)?.is_empty() {
                    return Err("ready with nothing armed".into());
                }
                let e = z.events(ZCRX_RS_EVENT_COPY).map_err(|e| format!("arm: {e}"))?;
                if e.fired != 0 {
                    return Err(format!("fired {:#x} with nothing armed", e.fired));
                }
                first = false;
            } else if fired == 0 {
                // Armed before this RECV copied: epoll must see it now.
                let ready = ep.wait(10_000)?;
                if !ready.iter().any(|r| r.1 & libc::EPOLLPRI as u32 != 0) {
                    return Err("a RECV copied with COPY armed, and epoll saw nothing".into());
                }
                fired = z.events(0).map_err(|e| format!("collect: {e}"))?.fired;
            }
            for rec in &recs[..r.records] {
                if let Some(bad) = pat.check(got, z.data(rec)) {
                    return Err(format!("payload mismatch at stream offset {bad}"));
                }
                got += u64::from(rec.len);
            }
            z.refill(&recs[..r.records]).map_err(|e| format!("refill: {e}"))?;
        }
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        let ring = z.ring_stats().ok_or("no counters in the ring mapping")?;
        // Armed again, it fires again, also after a new BIND: the events
        // are the context's.
        let e = z.events(ZCRX_RS_EVENT_COPY).map_err(|e| format!("re-arm: {e}"))?;
        if e.fired != 0 || e.armed != ZCRX_RS_EVENT_COPY {
            return Err(format!("re-arming: fired {:#x} armed {:#x}", e.fired, e.armed));
        }
        z.bind_nodev(0).map_err(|e| format!("BIND NODEV again: {e}"))?;
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, PORT)).map_err(|e| format!("connect: {e}"))?;
        let (s2, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        std::io::Write::write_all(&mut c, &[7u8; 4096]).map_err(|e| format!("write: {e}"))?;
        let r = z.recv(s2.as_raw_fd(), &mut recs, 0).map_err(|e| format!("recv after rebind: {e}"))?;
        if r.bytes == 0 || !ep.wait(10_000)?.iter().any(|r| r.1 & libc::EPOLLPRI as u32 != 0) {
            return Err("after re-arming and a new BIND, a copy did not wake epoll".into());
        }
        let again = z.events(0).map_err(|e| format!("collect: {e}"))?.fired;
        if again != ZCRX_RS_EVENT_COPY {
            return Err(format!("after re-arming and a new BIND: fired {again:#x}"));
        }
        Ok((got, fired, ring, st))
    });
    let _ = ready_rx.recv();
    let tx = crate::net::local_sender((Ipv4Addr::LOCALHOST, PORT).into(), bytes, Arc::new(Pattern::new(seed)));
    let sent = join(tx);
    let (got, fired, ring, st) = match rx.join().map_err(|_| "receiver panicked".to_string()).and_then(|r| r) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; sender: {sent:?}")),
    };
    env.diag(&format!(
        "copy-only over loopback: {} byte-exact, all copied; COPY fired {fired:#x} and woke epoll, and again \
         after re-arming and a new BIND; \
         STATS copy {} in {} records; ring counters copy {} in {} records, events {}; EINVAL x5 for bad requests",
        mib(got),
        mib(st.copy_bytes),
        st.copy_records,
        mib(ring.copy_bytes),
        ring.copy_records,
        ring.events
    ));
    if sent != Ok(bytes) || got != bytes {
        return Fail(format!("sent {sent:?}, received {got} of {bytes}"));
    }
    if fired != ZCRX_RS_EVENT_COPY || ring.events != 1 {
        return Fail(format!("fired {fired:#x}, ring says {} events", ring.events));
    }
    if ring.copy_bytes != st.copy_bytes || ring.copy_records != st.copy_records || st.copy_bytes != bytes {
        return Fail("the ring's counters differ from STATS, or not all copied".into());
    }
    Pass
}
