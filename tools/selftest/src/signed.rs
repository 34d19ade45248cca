// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! TCP-MD5 (RFC 2385) and TCP-AO (RFC 5925) signed connections towards a
//! provider-bound queue. To verify a signature the kernel hashes the
//! payload; a payload in a provider's buffers cannot be read, and before
//! the kernel fix (`tcp: do not hash unreadable payload to verify MD5 and
//! AO signatures`) hashing it followed a pointer computed from NULL in
//! softirq. Now such a segment cannot be verified and is dropped with a
//! drop reason of its own (`TCP_HASH_UNREADABLE`), not counted as badly
//! signed (`TCPMD5Failure`/`TCPAOBad`, which BGP operators alarm on). The
//! same connection to an ordinary queue carries data, which shows that
//! the keys are right.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::Zcrx;

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{self, addr_a, join, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("md5_signed_to_zero_copy_queue", md5),
    ("ao_signed_to_zero_copy_queue", ao),
    ("mptcp_dss_checksum_to_zero_copy_queue", mptcp_dss_checksum),
];

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Sig {
    Md5,
    Ao,
}

impl Sig {
    /// The TcpExt counter of segments dropped for a bad signature.
    pub(crate) fn counter(self) -> &'static str {
        match self {
            Sig::Md5 => "TCPMD5Failure",
            Sig::Ao => "TCPAOBad",
        }
    }
}

const KEY: &[u8] = b"zcrx-rs signed segment test key";

/// The drop reason of a signed segment whose payload is unreadable.
pub(crate) const UNREADABLE: &str = "TCP_HASH_UNREADABLE";

/// A `struct sockaddr_in6` (or `sockaddr_in` for an IPv4 address) for
/// `ip` in the first bytes of a `__kernel_sockaddr_storage` (128 bytes).
fn sockaddr_storage(ip: std::net::IpAddr) -> [u8; 128] {
    let mut a = [0u8; 128];
    match ip {
        std::net::IpAddr::V6(ip) => {
            a[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            a[8..24].copy_from_slice(&ip.octets());
        }
        std::net::IpAddr::V4(ip) => {
            a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            a[4..8].copy_from_slice(&ip.octets());
        }
    }
    a
}

/// Adds a signing key for peer `peer` to socket `fd`.
/// An IPv4 peer of an IPv6 socket is given as a mapped address (a /32
/// for TCP-AO).
pub(crate) fn add_key(fd: i32, sig: Sig, peer: impl Into<std::net::IpAddr>) -> std::io::Result<()> {
    let peer: std::net::IpAddr = peer.into();
    let mut buf = Vec::new();
    let opt = match sig {
        Sig::Md5 => {
            // struct tcp_md5sig: addr, flags, prefixlen, keylen (u16),
            // ifindex (int), key[80]: 216 bytes.
            buf.extend_from_slice(&sockaddr_storage(peer));
            buf.extend_from_slice(&[0, 0]);
            buf.extend_from_slice(&(KEY.len() as u16).to_ne_bytes());
            buf.extend_from_slice(&0i32.to_ne_bytes());
            let mut k = [0u8; 80];
            k[..KEY.len()].copy_from_slice(KEY);
            buf.extend_from_slice(&k);
            libc::TCP_MD5SIG
        }
        Sig::Ao => {
            // struct tcp_ao_add: addr, alg_name[64], ifindex, flag bits
            // (u32), reserved2 (u16), prefix, sndid, rcvid, maclen,
            // keyflags, keylen, key[80]: 288 bytes.
            buf.extend_from_slice(&sockaddr_storage(peer));
            let mut alg = [0u8; 64];
            alg[..10].copy_from_slice(b"hmac(sha1)");
            buf.extend_from_slice(&alg);
            buf.extend_from_slice(&0i32.to_ne_bytes());
            buf.extend_from_slice(&0u32.to_ne_bytes());
            buf.extend_from_slice(&0u16.to_ne_bytes());
            let v4 = match peer {
                std::net::IpAddr::V4(_) => true,
                std::net::IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
            };
            let prefix = if v4 { 32 } else { 128 };
            buf.extend_from_slice(&[prefix, 100, 100, 0, 0, KEY.len() as u8]);
            let mut k = [0u8; 80];
            k[..KEY.len()].copy_from_slice(KEY);
            buf.extend_from_slice(&k);
            const TCP_AO_ADD_KEY: i32 = 38;
            TCP_AO_ADD_KEY
        }
    };
    // SAFETY: setsockopt reads `buf.len()` bytes from a live buffer.
    let r = unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, opt, buf.as_ptr().cast(), buf.len() as libc::socklen_t) };
    zcrx::sys::cvt(r.into()).map(|_| ())
}

/// The `pkt_good` and `pkt_bad` counters of the first TCP-AO key of
/// socket `fd`: `getsockopt(TCP_AO_GET_KEYS)` with `get_all`, room for one
/// `struct tcp_ao_getsockopt` (304 bytes; `nkeys` at 272, the flag bits at
/// 276, `pkt_good` at 288, `pkt_bad` at 296).
pub(crate) fn ao_key_counters(fd: i32) -> Result<(u64, u64), String> {
    const TCP_AO_GET_KEYS: i32 = 41;
    const GET_ALL: u16 = 1 << 2;
    let mut b = [0u8; 304];
    b[272..276].copy_from_slice(&1u32.to_ne_bytes());
    b[276..278].copy_from_slice(&GET_ALL.to_ne_bytes());
    let mut len = 304 as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live buffer.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, TCP_AO_GET_KEYS, b.as_mut_ptr().cast(), &mut len) };
    zcrx::sys::cvt(r.into()).map_err(|e| format!("getsockopt(TCP_AO_GET_KEYS): {e}"))?;
    let nkeys = u32::from_ne_bytes(b[272..276].try_into().unwrap());
    if nkeys != 1 || len != 304 {
        return Err(format!("getsockopt(TCP_AO_GET_KEYS): {nkeys} keys, {len} bytes (want 1 key, 304 bytes)"));
    }
    let good = u64::from_ne_bytes(b[288..296].try_into().unwrap());
    let bad = u64::from_ne_bytes(b[296..304].try_into().unwrap());
    Ok((good, bad))
}

/// A listener on `[::]:port` that signs with the sender's address.
pub(crate) fn listener(sig: Sig, port: u16) -> Result<TcpListener, String> {
    let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))).map_err(|e| format!("listen: {e}"))?;
    add_key(l.as_raw_fd(), sig, "2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap()).map_err(|e| format!("listener key: {e}"))?;
    Ok(l)
}

/// Connects to the receiver from `nsb` with a key, retrying while it comes up.
pub(crate) fn signed_connect(sig: Sig, to: SocketAddr) -> Result<TcpStream, String> {
    let t0 = Instant::now();
    loop {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: we own the new fd.
        let s = unsafe { TcpStream::from_raw_fd(fd) };
        add_key(fd, sig, "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()).map_err(|e| format!("sender key: {e}"))?;
        let SocketAddr::V6(a) = to else { return Err("IPv6 only".into()) };
        // SAFETY: all-zero is a valid sockaddr_in6.
        let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        sa.sin6_family = libc::AF_INET6 as u16;
        sa.sin6_port = a.port().to_be();
        sa.sin6_addr.s6_addr = a.ip().octets();
        // SAFETY: a valid sockaddr_in6 of the size passed.
        let r = unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_in6).cast(), std::mem::size_of_val(&sa) as libc::socklen_t) };
        if r == 0 {
            s.set_write_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
            return Ok(s);
        }
        let e = std::io::Error::last_os_error();
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("connect {to}: {e}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TcpExt counter of the calling thread's network namespace.
pub(crate) fn tcpext(name: &str) -> Result<u64, String> {
    let t = std::fs::read_to_string("/proc/thread-self/net/netstat").map_err(|e| format!("netstat: {e}"))?;
    let mut lines = t.lines().filter(|l| l.starts_with("TcpExt:"));
    let (Some(h), Some(v)) = (lines.next(), lines.next()) else { return Err("netstat: no TcpExt".into()) };
    h.split_whitespace()
        .zip(v.split_whitespace())
        .find(|(k, _)| *k == name)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or(format!("netstat: no TcpExt {name} (kernel without the option?)"))
}

const DATA: usize = 256 << 10;

/// Control: a signed stream with no provider anywhere arrives byte-exact.
fn control(sig: Sig, port: u16) -> Result<(), String> {
    let _n = Nsim::up(1)?;
    let rx = net::in_netns(NS_A, move || {
        let l = listener(sig, port)?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
        // The key's counters are read right: verified segments count as good.
        if sig == Sig::Ao {
            let (good, bad) = ao_key_counters(s.as_raw_fd())?;
            if good == 0 || bad != 0 {
                return Err(format!("TCP-AO key counters after a good stream: {good} good, {bad} bad"));
            }
        }
        Ok(got)
    });
    let tx = net::in_netns(net::NS_B, move || {
        let mut s = signed_connect(sig, addr_a(true, port))?;
        s.write_all(&vec![0x5a; DATA]).map_err(|e| format!("send: {e}"))?;
        Ok(())
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("sender: {e}"))?;
    if got.len() != DATA || got.iter().any(|&b| b != 0x5a) {
        return Err(format!("control stream without a provider: {} of {DATA} bytes, or wrong bytes", got.len()));
    }
    Ok(())
}

/// The same to a zero-copy queue: the kernel survives, the segments are
/// dropped as unverifiable (drop reason `TCP_HASH_UNREADABLE`, from the
/// `kfree_skb` tracepoint), not counted as badly signed (neither in
/// TcpExt nor, for TCP-AO, in the key's `pkt_bad`), and nothing reaches
/// the receiver.
fn to_zero_copy_queue(env: &Env, sig: Sig, port: u16) -> Result<String, String> {
    ensure_loaded(env)?;
    let n = Nsim::up(1)?;
    n.hds(true)?;
    let a_idx = n.a_idx;
    let done = Arc::new(AtomicBool::new(false));
    let (d2, d3) = (done.clone(), done.clone());
    let rx = net::in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area(4 << 20).map_err(|e| format!("register: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind: {e}"))?;
        let before = tcpext(sig.counter())?;
        // A kernel without the fix has no such drop reason: the segments
        // still come (and would crash it), and the test fails after them.
        let watch = crate::trace::DropWatch::new(UNREADABLE);
        let l = listener(sig, port)?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let watch = match watch {
            Ok(w) => w,
            Err(e) => {
                std::thread::sleep(Duration::from_secs(5));
                return Err(format!("{e}; the connection's signed segments were let come for 5 s first"));
            }
        };
        // The sender's data segments arrive (and are retransmitted) within
        // moments; this only bounds a kernel that never drops them.
        let t0 = Instant::now();
        let dropped = loop {
            let now = watch.count()?;
            if now > 0 {
                break now;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                return Err(format!("no drop with reason {UNREADABLE} after 120 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let bad = tcpext(sig.counter())? - before;
        if bad != 0 {
            return Err(format!("{bad} unverifiable segments counted as badly signed ({})", sig.counter()));
        }
        // TCP-AO also counts per key: the key's pkt_bad must not move either.
        let key = if sig == Sig::Ao {
            let (good, bad) = ao_key_counters(s.as_raw_fd())?;
            if bad != 0 {
                return Err(format!("the connection's TCP-AO key counts {bad} bad segments ({good} good)"));
            }
            format!(", 0 in the key's pkt_bad ({good} good)")
        } else {
            String::new()
        };
        // Nothing was accepted as data.
        let mut inq: libc::c_int = 0;
        zcrx::sys::ioctl(&s, libc::FIONREAD as libc::c_ulong, &mut inq as *mut libc::c_int as usize)
            .map_err(|e| format!("FIONREAD: {e}"))?;
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        d2.store(true, Ordering::Release);
        Ok((dropped, inq, st.zc_bytes + st.copy_bytes, key))
    });
    let tx = net::in_netns(net::NS_B, move || {
        let mut s = signed_connect(sig, addr_a(true, port))?;
        // Nothing will be acknowledged: write what fits, without blocking.
        s.set_nonblocking(true).map_err(|e| e.to_string())?;
        let n = s.write(&vec![0x5a; DATA]).map_err(|e| format!("send: {e}"))?;
        if n == 0 {
            return Err("send: 0 bytes".into());
        }
        while !d3.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    });
    let r = join(rx);
    // Lets the sender go also when the receiver failed early.
    done.store(true, Ordering::Release);
    let sent = join(tx);
    // The receiver's error explains the sender's: report it first.
    let (dropped, inq, recv, key) = r.map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("sender: {e}"))?;
    if inq != 0 || recv != 0 {
        return Err(format!("{inq} bytes queued / {recv} received although no segment could be verified"));
    }
    drop(n);
    wait_idle(Duration::from_secs(10))?;
    Ok(format!("{dropped} segments with payload in the area dropped as {UNREADABLE}, 0 counted in {}{key}", sig.counter()))
}

fn run(env: &Env, sig: Sig, port: u16) -> Outcome {
    if let Err(e) = control(sig, port) {
        return Fail(format!("control (no provider): {e}"));
    }
    match to_zero_copy_queue(env, sig, port + 1) {
        Ok(d) => {
            env.diag(&format!("control without a provider byte-exact; to the zero-copy queue: {d}"));
            Pass
        }
        Err(e) => Fail(e),
    }
}

fn md5(env: &Env) -> Outcome {
    run(env, Sig::Md5, 7201)
}

fn ao(env: &Env) -> Outcome {
    run(env, Sig::Ao, 7211)
}

/// `IPPROTO_MPTCP`: not in the libc crate.
const IPPROTO_MPTCP: i32 = 262;

/// An MPTCP socket (IPv4: the test kernels have no MPTCP_IPV6):
/// `socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`.
fn mptcp_socket() -> Result<i32, String> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, IPPROTO_MPTCP) };
    if fd < 0 {
        return Err(format!("socket(IPPROTO_MPTCP): {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

fn sockaddr4(a: SocketAddr) -> libc::sockaddr_in {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as u16;
    sa.sin_port = a.port().to_be();
    if let SocketAddr::V4(v4) = a {
        sa.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
    }
    sa
}

/// MPTCP with DSS checksums (RFC 8684 3.3.1) towards a provider-bound
/// queue: the peer asks for checksums (`net.mptcp.checksum_enabled` on the
/// sender's side is enough), and the receiver must sum each mapping's
/// payload, which is in the provider's buffers. Before the kernel fix
/// (`mptcp: do not checksum unreadable frags to validate a mapping`) the
/// sum hit `WARN_ON_ONCE` in `__skb_checksum()` (a panic with
/// `panic_on_warn`; the log scan catches it); now the mapping cannot be
/// validated and the connection falls back to plain TCP (RFC 8684 3.7),
/// counted in `MPTcpExt:DssFallback`. An MPTCP listener reads with
/// `recv()`, which cannot copy provider memory: it gets `EFAULT` (MPTCP
/// sockets cannot receive zero-copy; steer them to other queues).
fn mptcp_dss_checksum(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let port = 7501u16;
    tryo!(join(net::in_netns(net::NS_B, || {
        std::fs::write("/proc/sys/net/mptcp/checksum_enabled", "1").map_err(|e| format!("checksum_enabled: {e}"))
    })));
    let before = tryo!(n.stats(1, 0));
    let snmp0 = tryo!(crate::pkt::Snmp::read(NS_A));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = net::with_receiver(n.a_idx, 0, 4 << 20, 7500, true, move |_z, _l| {
        let fd = mptcp_socket()?;
        // SAFETY: we own the new fd.
        let l = unsafe { TcpListener::from_raw_fd(fd) };
        let sa = sockaddr4(SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port)));
        // SAFETY: a valid sockaddr_in of the size passed.
        let r = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), std::mem::size_of_val(&sa) as libc::socklen_t) };
        // SAFETY: listen(2) on our socket.
        if r != 0 || unsafe { libc::listen(fd, 4) } != 0 {
            return Err(format!("MPTCP bind/listen: {}", std::io::Error::last_os_error()));
        }
        let _ = ready_tx.send(());
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let (mut got, mut buf) = (0u64, vec![0u8; 64 << 10]);
        loop {
            match s.read(&mut buf) {
                Ok(0) => return Ok((got, None)),
                Ok(k) => got += k as u64,
                Err(e) => return Ok((got, e.raw_os_error())),
            }
        }
    });
    let ready = ready_rx.recv_timeout(Duration::from_secs(60));
    let to = addr_a(false, port);
    let tx = net::in_netns(net::NS_B, move || {
        let fd = mptcp_socket()?;
        // SAFETY: we own the new fd.
        let mut s = unsafe { TcpStream::from_raw_fd(fd) };
        let sa = sockaddr4(to);
        // SAFETY: a valid sockaddr_in of the size passed.
        let r = unsafe { libc::connect(fd, (&sa as *const libc::sockaddr_in).cast(), std::mem::size_of_val(&sa) as libc::socklen_t) };
        if r != 0 {
            return Err(format!("MPTCP connect: {}", std::io::Error::last_os_error()));
        }
        s.set_write_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let data = vec![0x5au8; 256 << 10];
        // The receiver may fail the connection: count what went out.
        let sent = match s.write_all(&data) {
            Ok(()) => data.len() as u64,
            Err(_) => 0,
        };
        Ok(sent)
    });
    let sent = join(tx);
    if ready.is_err() {
        return Fail(format!("the MPTCP listener did not come up: {:?}", join(rx).err()));
    }
    let (got, err) = tryo!(join(rx));
    let sent = tryo!(sent);
    let d = tryo!(n.stats(1, 0)).since(&before);
    let snmp = tryo!(crate::pkt::Snmp::read(NS_A));
    let fallback = tryo!(snmp.since(&snmp0, "MPTcpExt:DssFallback"));
    let csum_err = tryo!(snmp.since(&snmp0, "MPTcpExt:DataCsumErr"));
    env.diag(&format!(
        "MPTCP with DSS checksums, {sent} B sent: netdevsim split {} packets into the area ({} B); \
         DssFallback +{fallback}, DataCsumErr +{csum_err}; the listener read {got} B, then {}",
        d.dma_packets,
        d.dma_bytes,
        err.map(zcrx::sys::errno_name).unwrap_or("EOF")
    ));
    if d.dma_packets == 0 {
        return Fail("no payload landed in the area: the checksum path was not reached".into());
    }
    if fallback == 0 {
        return Fail("the connection did not fall back: was the mapping validated at all?".into());
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
