// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Upper layers on a provider's queue, for the remote fuzzer: MPTCP (with
//! DSS checksums when the peer asks) and kernel TLS receivers on nsa, whose
//! segments land in the provider's buffers like any other on the queue.
//! Neither can read that memory: MPTCP must not checksum it in software,
//! kTLS's parser must stop instead of warning, and `recv()` fails with
//! `EFAULT` where the payload is unreadable (payloads the NIC leaves in the
//! header buffer, `hds_copybreak`, stay readable and decrypt). The sink
//! reads what it can and counts the rest by errno; a splat fails the run.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::in_netns;
use crate::takeover::{ktls, TLS12, TLS13};

/// The MPTCP listener and the kTLS ones (TLS 1.2, TLS 1.3) on nsa.
pub(crate) const MPTCP_PORT: u16 = 7406;
pub(crate) const TLS12_PORT: u16 = 7407;
pub(crate) const TLS13_PORT: u16 = 7408;
pub(crate) const IPPROTO_MPTCP: i32 = 262;
/// `TLS_TX`, `TLS_RX` (setsockopt(SOL_TLS, ...)).
pub(crate) const TLS_TX: i32 = 1;
const TLS_RX: i32 = 2;

/// `to` as a `sockaddr` and its length.
fn sockaddr(to: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; zeroed is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than, and aligned for, sockaddr_in.
            let sin = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as u16;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as u16;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A stream socket of protocol `proto` (0: TCP, [`IPPROTO_MPTCP`]) of
/// `to`'s family, non-blocking, owned by the returned stream.
fn stream_socket(to: SocketAddr, proto: i32) -> io::Result<TcpStream> {
    let fam = if to.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket nobody else owns.
    Ok(unsafe { TcpStream::from_raw_fd(fd) })
}

/// Connects a `proto` socket to `to` within `wait`; blocking afterwards.
pub(crate) fn connect_proto(to: SocketAddr, proto: i32, wait: Duration) -> io::Result<TcpStream> {
    let s = stream_socket(to, proto)?;
    let (ss, len) = sockaddr(to);
    // SAFETY: `ss` holds a sockaddr of `len` bytes.
    let r = unsafe { libc::connect(s.as_raw_fd(), (&ss as *const libc::sockaddr_storage).cast(), len) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
        let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, wait.as_millis() as i32) } <= 0 {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
    }
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// A `proto` listener on `port` of every address, both families.
fn listen_proto(port: u16, proto: i32) -> io::Result<TcpListener> {
    let any: SocketAddr = (std::net::Ipv6Addr::UNSPECIFIED, port).into();
    let s = stream_socket(any, proto)?;
    let one: i32 = 1;
    // SAFETY: setsockopt reads an int.
    unsafe { libc::setsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, (&one as *const i32).cast(), 4) };
    let (ss, len) = sockaddr(any);
    // SAFETY: `ss` holds a sockaddr of `len` bytes.
    if unsafe { libc::bind(s.as_raw_fd(), (&ss as *const libc::sockaddr_storage).cast(), len) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain listen(2) on our socket.
    if unsafe { libc::listen(s.as_raw_fd(), 64) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd moves from the stream to the listener, which owns it.
    Ok(unsafe { TcpListener::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(s)) })
}

/// What the sink saw on one kind of listener.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub conns: u64,
    /// kTLS: connections whose `TLS_RX` key went in.
    pub keyed: u64,
    /// Bytes `recv()` returned (plaintext, for kTLS).
    pub bytes: u64,
    /// Why connections ended, by errno name ("EOF" for an orderly end).
    pub ends: BTreeMap<String, u64>,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ends: Vec<String> = self.ends.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let keyed = if self.keyed > 0 { format!(" ({} keyed)", self.keyed) } else { String::new() };
        write!(f, "{} connections{keyed}, {} bytes read, ended by {}", self.conns, self.bytes, ends.join(", "))
    }
}

/// What the sink saw, by kind of listener.
pub(crate) type SinkReport = BTreeMap<&'static str, Seen>;

/// Runs the sink in nsa until `stop`: the MPTCP and kTLS listeners,
/// reading every connection until it ends. Returns what it saw, by kind
/// ("mptcp", "tls1.2", "tls1.3"), once it listens (the channel says so).
pub(crate) fn sink(ns: &'static str, stop: Arc<AtomicBool>) -> (std::thread::JoinHandle<Result<SinkReport, String>>, bool) {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = in_netns(ns, move || {
        let ls = [
            ("mptcp", listen_proto(MPTCP_PORT, IPPROTO_MPTCP).map_err(|e| format!("MPTCP listener: {e}"))?, 0),
            ("tls1.2", listen_proto(TLS12_PORT, 0).map_err(|e| format!("kTLS listener: {e}"))?, TLS12),
            ("tls1.3", listen_proto(TLS13_PORT, 0).map_err(|e| format!("kTLS listener: {e}"))?, TLS13),
        ];
        let _ = tx.send(());
        let mut seen: BTreeMap<&'static str, Seen> = BTreeMap::new();
        let mut conns: Vec<(&'static str, TcpStream)> = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        fn end(seen: &mut BTreeMap<&'static str, Seen>, kind: &'static str, why: String) {
            *seen.entry(kind).or_default().ends.entry(why).or_default() += 1;
        }
        let mut stopped: Option<Instant> = None;
        loop {
            if stopped.is_none() && stop.load(Ordering::Acquire) {
                stopped = Some(Instant::now());
            }
            // a second after the end (what is in flight), everything closes
            if stopped.is_some_and(|t| t.elapsed() > Duration::from_secs(1)) {
                for (kind, _) in conns.drain(..) {
                    end(&mut seen, kind, "closed at the end".into());
                }
                return Ok(seen);
            }
            let mut fds: Vec<libc::pollfd> =
                ls.iter().map(|l| libc::pollfd { fd: l.1.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
            fds.extend(conns.iter().map(|c| libc::pollfd { fd: c.1.as_raw_fd(), events: libc::POLLIN, revents: 0 }));
            // SAFETY: `fds` is a valid array of pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
            for (kind, l, ver) in &ls {
                while let Ok((s, _)) = l.accept() {
                    seen.entry(kind).or_default().conns += 1;
                    // A peer that is gone already fails TLS_RX (ENOTCONN):
                    // counted as its end.
                    if *ver != 0 {
                        if let Err(e) = ktls(s.as_raw_fd(), TLS_RX, *ver) {
                            end(&mut seen, kind, format!("TLS_RX: {}", e.rsplit(": ").next().unwrap_or("")));
                            continue;
                        }
                        seen.entry(kind).or_default().keyed += 1;
                    }
                    let _ = zcrx::sys::set_linger_abort(&s);
                    let _ = s.set_nonblocking(true);
                    conns.push((kind, s));
                }
            }
            let mut i = 0;
            while i < conns.len() {
                let (kind, s) = &conns[i];
                // SAFETY: `buf` is writable for its length.
                let n = unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
                let why = match n {
                    0 => Some("EOF".to_string()),
                    n if n > 0 => {
                        seen.entry(kind).or_default().bytes += n as u64;
                        None
                    }
                    _ => {
                        let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
                        (e != libc::EAGAIN).then(|| match zcrx::sys::errno_name(e) {
                            "E?" => format!("errno {e}"),
                            name => name.to_string(),
                        })
                    }
                };
                if let Some(why) = why {
                    let kind = *kind;
                    conns.swap_remove(i);
                    end(&mut seen, kind, why);
                    continue;
                }
                i += 1;
            }
        }
    });
    let ok = rx.recv_timeout(Duration::from_secs(60)).is_ok();
    (h, ok)
}
