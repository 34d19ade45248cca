// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The sender: `-c HOST`, one or more flows of the pattern, each from
//! its own local port, shut down after the last byte.

use super::*;

/// A TCP connection to `to` from local port `port` (any address), with
/// SO_REUSEADDR so that a port whose last connection is in TIME_WAIT can be
/// bound again (connect() then reuses the 4-tuple where the stack allows it:
/// net.ipv4.tcp_tw_reuse).
fn connect_from(to: SocketAddr, port: u16) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let fam = if to.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd nothing else owns; the stream closes it.
    let s = unsafe { TcpStream::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a live local.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let any: std::net::IpAddr = if to.is_ipv6() { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
    let (local, remote) = (sockaddr(&SocketAddr::new(any, port)), sockaddr(&to));
    // SAFETY: bind and connect read the address structs, live locals of the
    // lengths given.
    unsafe {
        if libc::bind(fd, local.0.as_ptr().cast(), local.1) < 0 || libc::connect(fd, remote.0.as_ptr().cast(), remote.1) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(s)
}

/// `addr` as a sockaddr_in or sockaddr_in6 in a byte buffer, and its length.
fn sockaddr(addr: &SocketAddr) -> (Vec<u8>, libc::socklen_t) {
    match addr {
        SocketAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: a plain C struct viewed as its bytes.
            let b = unsafe { std::slice::from_raw_parts((&sa as *const libc::sockaddr_in).cast::<u8>(), std::mem::size_of_val(&sa)) };
            (b.to_vec(), b.len() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a plain C struct viewed as its bytes.
            let b = unsafe { std::slice::from_raw_parts((&sa as *const libc::sockaddr_in6).cast::<u8>(), std::mem::size_of_val(&sa)) };
            (b.to_vec(), b.len() as libc::socklen_t)
        }
    }
}

pub(crate) fn client(o: &Opts) {
    if let Some(c) = o.cpu {
        zcrx::sys::pin_to_cpu(c).unwrap_or_else(|e| die("sched_setaffinity", e));
    }
    let host = o.host.clone().unwrap_or_default();
    let addr: SocketAddr = format!("{}:{}", if host.contains(':') { format!("[{host}]") } else { host.clone() }, o.port)
        .parse()
        .unwrap_or_else(|e| die("address", e));
    // What the sender writes is computed before connecting: no set-up in
    // the timed window. The stream from offset 0 for PERIOD + write size
    // bytes: a write of up to the write size starts anywhere in the first
    // period (the pattern repeats every PERIOD bytes).
    let mut table = vec![0u8; zcrx::pattern::PERIOD + o.write_size];
    Pattern::new(SEED).fill(0, &mut table);
    let table = std::sync::Arc::new(table);
    // Every connection is up before the first byte goes out: the receiver
    // starts its clock once it has accepted them all.
    let t0 = Instant::now();
    let socks: Vec<TcpStream> = (0..o.flows)
        .map(|i| loop {
            let r = if o.src_port == 0 {
                TcpStream::connect(addr)
            } else {
                let p = o.src_port.checked_add(i as u16).unwrap_or_else(|| die("--src-port", "port + flows exceeds 65535"));
                connect_from(addr, p)
            };
            match r {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => die("connect", e),
            }
        })
        .collect();
    let total = o.bytes.unwrap_or(u64::MAX);
    let until = o.secs.map(|t| Instant::now() + Duration::from_secs_f64(t));
    let (n, wsize, cpu) = (o.flows as u64, o.write_size, o.cpu);
    let senders: Vec<_> = socks
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let table = table.clone();
            // The first flow carries what does not divide evenly.
            let limit = if total == u64::MAX { total } else { total / n + if i == 0 { total % n } else { 0 } };
            std::thread::spawn(move || {
                if let Some(c) = cpu {
                    zcrx::sys::pin_to_cpu(c).unwrap_or_else(|e| die("sched_setaffinity", e));
                }
                let mut off = 0u64;
                while off < limit && until.is_none_or(|u| Instant::now() < u) {
                    let at = (off % zcrx::pattern::PERIOD as u64) as usize;
                    let buf = &table[at..at + ((limit - off) as usize).min(wsize)];
                    s.write_all(buf).unwrap_or_else(|e| die("send", e));
                    off += buf.len() as u64;
                }
                // End of stream; then stay until the receiver closes (at
                // most a minute), so that it can read this process's CPU
                // time at its end.
                s.shutdown(std::net::Shutdown::Write).unwrap_or_else(|e| die("shutdown", e));
                let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                let mut b = [0u8; 1];
                while matches!(s.read(&mut b), Ok(n) if n > 0) {}
            })
        })
        .collect();
    for t in senders {
        if t.join().is_err() {
            die("send", "a sender thread panicked");
        }
    }
}
