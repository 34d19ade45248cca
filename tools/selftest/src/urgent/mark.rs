// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Readers at the urgent mark: the `SIGURG`-then-read-until-`sockatmark()`
//! loop on the zero-copy path, and what RECV, `recv(MSG_OOB)` and
//! `sockatmark()` say at the mark (with and without `SO_OOBINLINE`).

use super::*;

/// `fcntl(F_SETOWN_EX)`: not in the libc crate.
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;
#[repr(C)]
struct FOwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}

/// The classic urgent-data loop (RFC 1122 4.2.2.4: the application must
/// be able to learn where urgent data ends), on the zero-copy path: the
/// peer sends 40000 bytes, one urgent byte and 20000 more; the receiver
/// waits for `SIGURG`, then receives until `sockatmark()`. It must stop
/// after exactly the 40000 bytes before the urgent byte, see `EPOLLPRI`
/// there, get `EINVAL` from `recv(MSG_OOB)` (the byte is in the area,
/// unreadable to the kernel: it stays in-line), then receive the rest,
/// the urgent byte first, byte-exact, all zero-copy. Before the kernel
/// kept the mark for unreadable bytes, `sockatmark()` never became true
/// and the loop read past the urgent data (here: more than 40000 bytes).
pub(super) fn urgent_mark_loop_zero_copy(env: &Env) -> Outcome {
    const BEFORE: u64 = 40000;
    const AFTER: u64 = 20000;
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let before = tryo!(n.stats(1, 0));
    let log = tryo!(crate::devlog::DmaLog::start());
    let port = 7109u16;
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let p2 = pat.clone();
    // The sender sends the urgent byte once the receiver owns the socket's
    // SIGURG (and has it blocked, to take it with sigtimedwait()).
    let (owned_tx, owned_rx) = std::sync::mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 4 << 20, port, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // SAFETY: sigset operations on a local set; blocking SIGURG in this
        // thread only; F_SETOWN_EX with a valid f_owner_ex for our socket.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        let owned = unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGURG);
            let own = FOwnerEx { kind: F_OWNER_TID, pid: libc::gettid() };
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0
                && libc::fcntl(s.as_raw_fd(), F_SETOWN_EX, &own as *const FOwnerEx) == 0
        };
        if !owned {
            return Err(format!("block SIGURG, F_SETOWN_EX: {}", std::io::Error::last_os_error()));
        }
        let _ = owned_tx.send(());
        let ts = libc::timespec { tv_sec: 60, tv_nsec: 0 };
        // SAFETY: valid set and timeout; no siginfo wanted.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
        if sig != libc::SIGURG {
            return Err(format!("no SIGURG within 60 s: {}", std::io::Error::last_os_error()));
        }
        // A receiver that does not stop at the mark would wait for more
        // than the stream has: end it instead of hanging.
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        let mut recs = vec![Rec::default(); 128];
        let mut data = Vec::new();
        let (mut zc, mut copied, mut calls) = (0u64, 0u64, 0u64);
        let mut recv_into = |z: &mut Zcrx, data: &mut Vec<u8>| -> Result<u64, String> {
            let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("recv after {} bytes: {e}", data.len()))?;
            calls += 1;
            for r in &recs[..got.records] {
                data.extend_from_slice(z.data(r));
                if r.flags & ZCRX_RS_REC_COPY != 0 {
                    copied += u64::from(r.len);
                } else {
                    crate::devlog::note(z.data(r))?;
                    zc += u64::from(r.len);
                }
            }
            z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
            Ok(got.bytes)
        };
        // On SIGURG: read until the mark.
        while !at_mark(&s).map_err(|e| format!("SIOCATMARK: {e}"))? {
            if recv_into(z, &mut data)? == 0 {
                return Err(format!("end of stream after {} bytes, never at the mark", data.len()));
            }
        }
        let at = data.len() as u64;
        let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 0) };
        let oob = recv_oob(&s);
        while recv_into(z, &mut data)? != 0 {}
        let end = recv_oob(&s);
        Ok((at, p.revents & libc::POLLPRI != 0, oob, end, data, zc, copied, calls))
    });
    let to = addr_a(true, port);
    let tx = net::in_netns(net::NS_B, move || {
        let mut s = net::connect(to, Duration::from_secs(60))?;
        std::io::Write::write_all(&mut s, pat.slice(0, BEFORE as usize)).map_err(|e| format!("send: {e}"))?;
        owned_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the receiver did not take SIGURG".to_string())?;
        send_oob(&s, pat.slice(BEFORE, 1)[0]).map_err(|e| format!("send(MSG_OOB): {e}"))?;
        std::io::Write::write_all(&mut s, pat.slice(BEFORE + 1, AFTER as usize)).map_err(|e| format!("send: {e}"))?;
        Ok(())
    });
    let sent = join(tx);
    let r = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()));
    let (at, pri, oob, end, data, zc, copied, calls) = tryo!(r);
    tryo!(sent);
    let d = tryo!(n.stats(1, 0)).since(&before);
    let total = BEFORE + 1 + AFTER;
    env.diag(&format!(
        "SIGURG, then RECV until sockatmark(): at the mark after {at} bytes, EPOLLPRI {pri}, recv(MSG_OOB) {};          {} bytes in all in {calls} calls, zero-copy {zc} copied {copied}; netdevsim DMA'd {} B in {} packets,          {} unsplit; recv(MSG_OOB) at the end {}",
        match &oob {
            Ok(b) => format!("{b:#04x}"),
            Err(e) => zcrx::sys::errno_name(e.raw_os_error().unwrap_or(0)).to_string(),
        },
        data.len(),
        d.dma_bytes,
        d.dma_packets,
        d.fallback_packets,
        match &end {
            Ok(b) => format!("{b:#04x}"),
            Err(e) => zcrx::sys::errno_name(e.raw_os_error().unwrap_or(0)).to_string(),
        },
    ));
    if at != BEFORE {
        return Fail(format!("the loop stopped after {at} bytes, not at the urgent byte ({BEFORE})"));
    }
    if !pri {
        return Fail("no EPOLLPRI at the mark".into());
    }
    if oob.as_ref().map_err(|e| e.raw_os_error()) != Err(Some(libc::EINVAL)) {
        return Fail(format!("recv(MSG_OOB) at an unreadable urgent byte: {oob:?}, expected EINVAL (in-line)"));
    }
    if data.len() as u64 != total || p2.check(0, &data).is_some() {
        return Fail(format!("{} bytes, expected {total} byte-exact with the urgent byte in-line", data.len()));
    }
    if zc != total || copied != 0 || d.fallback_packets != 0 || d.dma_bytes < total {
        return Fail(format!("not all zero-copy: {zc} of {total} (copied {copied}), netdevsim DMA'd {}", d.dma_bytes));
    }
    if end.as_ref().map_err(|e| e.raw_os_error()) != Err(Some(libc::EINVAL)) {
        return Fail(format!("recv(MSG_OOB) after the stream: {end:?}, expected EINVAL"));
    }
    env.diag(&tryo!(log.check(0, zc)));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// The mark, exactly: the sender writes 40000 bytes, one urgent byte and
/// 20000 more; the receiver has `SO_RCVLOWAT` 1 MiB, more than all of it,
/// so only the mark can end its first RECV early. That call must describe
/// exactly the 40000 bytes before the mark; SIOCATMARK is then true;
/// without SO_OOBINLINE recv(MSG_OOB) returns the urgent byte and the rest
/// of the stream comes without it, with it the byte is the first of the
/// rest. Afterwards no urgent data is left.
///
/// `during_wait` false: the receiver starts once everything up to the
/// urgent byte is in the socket (POLLPRI and SIOCINQ say so), so RECV
/// meets the mark in its first read. True: it starts once the 40000 bytes
/// are queued, and the sender sends the urgent byte 300 ms later, so RECV
/// (usually) reads the 40000 bytes, waits for more, and is woken by the
/// urgent byte right at the mark; either way the result must be exact.
pub(super) fn at_the_mark(n: &Nsim, oobinline: bool, during_wait: bool, port: u16) -> Result<String, String> {
    const BEFORE: u64 = 40000;
    const AFTER: u64 = 20000;
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let p2 = pat.clone();
    // The sender closes only after the first RECV returned: neither the
    // end of the stream nor anything else but the mark may end that call.
    let first_done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (fd_rx, fd_tx) = (first_done.clone(), first_done.clone());
    let ready = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let (ready_rx, ready_tx) = (ready.clone(), ready.clone());
    // On the listener before the sender can connect (the connection is
    // cloned from it), and checked on the accepted socket.
    let setup = move |l: &TcpListener| {
        set_oobinline(l, oobinline).map_err(|e| format!("SO_OOBINLINE: {e}"))?;
        zcrx::sys::set_rcvlowat(l, 1 << 20).map_err(|e| format!("SO_RCVLOWAT: {e}"))
    };
    let rx = with_receiver_setup(n.a_idx, 0, 4 << 20, port, true, setup, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut lowat: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into a live int.
        let r = unsafe {
            libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, (&mut lowat as *mut libc::c_int).cast(), &mut len)
        };
        if r != 0 || lowat != 1 << 20 {
            return Err(format!("SO_RCVLOWAT of the accepted socket: {lowat} (getsockopt {r}), expected 1 MiB"));
        }
        // A RECV that does not stop at the mark waits for SO_RCVLOWAT
        // bytes that never come: end it (and fail) instead of hanging.
        const RCVTIMEO: Duration = Duration::from_secs(20);
        s.set_read_timeout(Some(RCVTIMEO)).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        let t0 = Instant::now();
        loop {
            let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, if during_wait { 10 } else { 100 }) };
            let mut inq: libc::c_int = 0;
            zcrx::sys::ioctl(&s, libc::FIONREAD as libc::c_ulong, &mut inq as *mut libc::c_int as usize)
                .map_err(|e| format!("SIOCINQ: {e}"))?;
            if (during_wait || p.revents & libc::POLLPRI != 0) && inq as u64 >= BEFORE {
                break;
            }
            // Not a performance deadline: data that never comes.
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("data not in the socket after 60 s ({inq} bytes queued)"));
            }
        }
        // The sender waits for this thread to sleep in RECV before it
        // sends the urgent byte.
        ready_rx.store(crate::common::gettid(), std::sync::atomic::Ordering::Release);
        let mut recs = vec![Rec::default(); 128];
        let mut data = Vec::new();
        let t_recv = Instant::now();
        let got = z.recv(s.as_raw_fd(), &mut recs, 0);
        let took = t_recv.elapsed();
        fd_rx.store(true, std::sync::atomic::Ordering::Release);
        let got = got.map_err(|e| format!("first recv: {e}"))?;
        // Not a performance bound: only SO_RCVTIMEO firing takes this long
        // (a call that reached the mark and waited for more anyway).
        if took >= RCVTIMEO {
            return Err(format!("first RECV returned only when SO_RCVTIMEO ({RCVTIMEO:?}) ran out"));
        }
        for r in &recs[..got.records] {
            data.extend_from_slice(z.data(r));
        }
        z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        if got.bytes != BEFORE || p2.check(0, &data).is_some() {
            return Err(format!("first RECV: {} bytes, expected the {BEFORE} before the mark", got.bytes));
        }
        if !at_mark(&s).map_err(|e| format!("SIOCATMARK: {e}"))? {
            // Seen once in many runs (copy path, urgent byte during the
            // wait); say what the socket holds, for the next time.
            let mut inq: libc::c_int = 0;
            let _ = zcrx::sys::ioctl(&s, libc::FIONREAD as libc::c_ulong, &mut inq as *mut libc::c_int as usize);
            return Err(format!(
                "SIOCATMARK false after the first RECV (first RECV took {took:?}; then {inq} bytes queued, \
                 recv(MSG_OOB): {:?}, SIOCATMARK again: {:?})",
                recv_oob(&s),
                at_mark(&s)
            ));
        }
        let oob = recv_oob(&s);
        let urgent = p2.slice(BEFORE, 1)[0];
        match (&oob, oobinline) {
            (Ok(b), false) if *b == urgent => {}
            (Err(e), true) if e.raw_os_error() == Some(libc::EINVAL) => {}
            _ => return Err(format!("recv(MSG_OOB) at the mark: {oob:?} (urgent byte {urgent:#04x})")),
        }
        data.clear();
        loop {
            let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("recv: {e}"))?;
            if got.bytes == 0 {
                break;
            }
            for r in &recs[..got.records] {
                data.extend_from_slice(z.data(r));
            }
            z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        }
        let from = if oobinline { BEFORE } else { BEFORE + 1 };
        let want = BEFORE + 1 + AFTER - from;
        if data.len() as u64 != want || p2.check(from, &data).is_some() {
            return Err(format!("after the mark: {} bytes, expected {want} from stream offset {from}", data.len()));
        }
        let end = recv_oob(&s);
        if end.as_ref().map_err(|e| e.raw_os_error()) != Err(Some(libc::EINVAL)) {
            return Err(format!("recv(MSG_OOB) after the stream: {end:?}, expected EINVAL"));
        }
        Ok(oob.ok())
    });
    let to = addr_a(true, port);
    let tx = net::in_netns(net::NS_B, move || {
        let mut s = net::connect(to, Duration::from_secs(60))?;
        std::io::Write::write_all(&mut s, pat.slice(0, BEFORE as usize)).map_err(|e| format!("send: {e}"))?;
        if during_wait {
            // The receiver has the 40000 bytes queued and calls RECV, which
            // reads them and waits for SO_RCVLOWAT: send once it sleeps.
            crate::common::wait_published_sleeping_in(&ready_tx, libc::SYS_ioctl, Duration::from_secs(60))?;
        }
        send_oob(&s, pat.slice(BEFORE, 1)[0]).map_err(|e| format!("send(MSG_OOB): {e}"))?;
        std::io::Write::write_all(&mut s, pat.slice(BEFORE + 1, AFTER as usize)).map_err(|e| format!("send: {e}"))?;
        let t0 = Instant::now();
        while !fd_tx.load(std::sync::atomic::Ordering::Acquire) && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    });
    let sent = join(tx);
    let what = format!("at the mark (SO_OOBINLINE {oobinline}, urgent byte during the wait {during_wait})");
    let oob = join(rx).map_err(|e| format!("{what}: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("{what}: sender: {e}"))?;
    Ok(format!(
        "at the mark{}{}: first RECV (SO_RCVLOWAT 1 MiB) stopped after exactly {BEFORE} bytes, SIOCATMARK true, \
         MSG_OOB {}, the rest byte-exact",
        if oobinline { ", SO_OOBINLINE" } else { "" },
        if during_wait { ", urgent byte sent while RECV waited" } else { "" },
        match oob {
            Some(b) => format!("returned the urgent byte {b:#04x}"),
            None => "EINVAL (the byte is in-line)".into(),
        }
    ))
}
