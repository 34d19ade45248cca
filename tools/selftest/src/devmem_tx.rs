// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! devmem TX: a socket sending from a dma-buf bound to the device. Its
//! segments' payload is the dma-buf's net_iovs, which the kernel cannot
//! read.
//!
//! - On a socket that signs its segments (TCP-MD5, TCP-AO) signing hashes
//!   the payload: before the kernel fix (`tcp: do not sign segments whose
//!   payload is in device memory`) the hash followed a pointer computed
//!   from NULL (`tcp_md5_hash_skb_data()`). Now `sendmsg()` refuses
//!   dma-buf data on a signing socket with `EOPNOTSUPP`, and a key cannot
//!   be added while such data is queued (`EBUSY`).
//! - An MTU probe (`tcp_mtu_probing`) is built by copying the frags of the
//!   queued skbs into a new one: before the kernel fix (`tcp: keep MTU
//!   probes of device memory unreadable`) the probe was marked readable
//!   and merged frags of different net_iovs that looked contiguous.
//!
//! The sender is netdevsim's side `nsb` (netdevsim transmits from a dma-buf
//! bound to it, series patch 33); the receiver reads with `read()`: no
//! provider is involved, only the device-memory transmit path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::channel;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};

use crate::common::ensure_loaded;
use crate::net::{self, addr_a, join, Nsim, NS_A, NS_B};
use crate::signed::{add_key, listener, signed_connect, Sig};
use crate::tunnel::accept_within;
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("devmem_tx_on_signed_socket", devmem_tx_on_signed_socket), ("devmem_tx_mtu_probe", devmem_tx_mtu_probe)];

/// `SO_ZEROCOPY` and `SCM_DEVMEM_DMABUF` (asm-generic/socket.h).
pub(crate) const SO_ZEROCOPY: libc::c_int = 60;
const SCM_DEVMEM_DMABUF: libc::c_int = 79;
const MSG_ZEROCOPY: libc::c_int = 0x4000000;

/// The dma-buf's size: 64 pages, so a binding the kernel kept would not
/// hide in the pin slack of `wait_idle`.
const BUF: usize = 256 << 10;

/// Byte `i` of the dma-buf.
fn pat(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// A dma-buf of [`BUF`] bytes of [`pat`], bound for TX on `ifindex` of
/// the caller's namespace: `(binding, dmabuf, memfd)`; the binding lasts
/// while the first is alive.
fn tx_dmabuf(ifindex: u32) -> Result<(zcrx::netdev::TxBinding, OwnedFd, OwnedFd), String> {
    let data: Vec<u8> = (0..BUF).map(pat).collect();
    tx_dmabuf_of(ifindex, &data)
}

/// A dma-buf holding `data` (a whole number of pages), bound for TX on
/// `ifindex` of the caller's namespace, as [`tx_dmabuf`].
pub(crate) fn tx_dmabuf_of(ifindex: u32, data: &[u8]) -> Result<(zcrx::netdev::TxBinding, OwnedFd, OwnedFd), String> {
    let (memfd, dmabuf) = crate::dmabuf::udmabuf(data.len())?;
    let mut f = std::fs::File::from(memfd.try_clone().map_err(|e| e.to_string())?);
    f.write_all(data).map_err(|e| format!("fill the memfd: {e}"))?;
    let b = zcrx::netdev::bind_tx(ifindex, dmabuf.as_fd()).map_err(|e| format!("bind-tx: {e}"))?;
    Ok((b, dmabuf, memfd))
}

/// `sendmsg(MSG_ZEROCOPY | flags)` of `len` bytes at offset `off` of the
/// dma-buf of binding `id`.
pub(crate) fn send_devmem(s: &TcpStream, id: u32, off: usize, len: usize, flags: libc::c_int) -> std::io::Result<usize> {
    send_devmem_iov(s, id, &[(off, len)], flags)
}

/// `sendmsg(MSG_ZEROCOPY | flags)` of the dma-buf ranges `(offset, len)`
/// of binding `id`, in order.
fn send_devmem_iov(s: &TcpStream, id: u32, ranges: &[(usize, usize)], flags: libc::c_int) -> std::io::Result<usize> {
    // The iovecs' addresses are offsets into the dma-buf, not pointers.
    let mut iov: Vec<libc::iovec> =
        ranges.iter().map(|&(off, len)| libc::iovec { iov_base: off as *mut libc::c_void, iov_len: len }).collect();
    // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
    let (space, clen) = unsafe { (libc::CMSG_SPACE(4) as usize, libc::CMSG_LEN(4) as usize) };
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: all-zero is a valid msghdr.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = iov.len() as _;
    m.msg_control = cbuf.as_mut_ptr().cast();
    m.msg_controllen = space as _;
    // SAFETY: `m` describes `cbuf`, which has room for one header and 4
    // bytes of data (CMSG_SPACE(4)); CMSG_FIRSTHDR is then non-null.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = SCM_DEVMEM_DMABUF;
        (*c).cmsg_len = clen as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), id);
    }
    // SAFETY: `m` points at live locals; the kernel reads no user memory
    // through a dma-buf iovec.
    let r = unsafe { libc::sendmsg(s.as_raw_fd(), &m, MSG_ZEROCOPY | flags) };
    zcrx::sys::cvt(r as libc::c_long).map(|n| n as usize)
}

/// Reads and discards the socket's zerocopy completions (`MSG_ERRQUEUE`),
/// so that they do not use up its option memory.
pub(crate) fn drain_errqueue(s: &TcpStream) {
    let mut cbuf = [0u64; 16];
    loop {
        // SAFETY: all-zero is a valid msghdr.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        // SAFETY: `m` describes `cbuf` and no data buffer.
        let r = unsafe { libc::recvmsg(s.as_raw_fd(), &mut m, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
        if r < 0 {
            return;
        }
    }
}

pub(crate) fn set_int(s: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> Result<(), String> {
    // SAFETY: setsockopt reads an int from a live local.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    zcrx::sys::cvt(r.into()).map(|_| ()).map_err(|e| format!("setsockopt({level}, {opt}): {e}"))
}

/// Resets instead of lingering: a socket whose queued dma-buf data can
/// no longer be sent must not outlive the test with the binding's pages.
pub(crate) fn close_now(s: TcpStream) -> Result<(), String> {
    zcrx::sys::set_linger_abort(&s).map_err(|e| format!("SO_LINGER: {e}"))
}

/// Checks `got` against the dma-buf's bytes from offset 0.
fn check(got: &[u8], what: &str) -> Result<(), String> {
    match got.iter().enumerate().find(|&(i, &b)| b != pat(i)) {
        Some((i, &b)) => Err(format!("{what}: byte {i} is {b:#04x}, the dma-buf has {:#04x}", pat(i))),
        None => Ok(()),
    }
}

/// Everything the next connection on `l` sends, to its end.
fn read_one(l: &TcpListener) -> Result<Vec<u8>, String> {
    let mut s = accept_within(l, Duration::from_secs(60))?;
    s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
    Ok(got)
}

/// Connects from `nsb` without a key, retrying while the listener comes up.
fn plain_connect(to: SocketAddr) -> Result<TcpStream, String> {
    net::connect(to, Duration::from_secs(60))
}

/// The unsigned control: the whole dma-buf sent from device memory
/// arrives byte-exact (so the refusals below are not a broken devmem TX).
fn control(b_idx: u32, port: u16) -> Result<String, String> {
    let rx = net::in_netns(NS_A, move || {
        let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))).map_err(|e| format!("listen: {e}"))?;
        read_one(&l)
    });
    let tx = net::in_netns(NS_B, move || {
        let (b, _d, _m) = tx_dmabuf(b_idx)?;
        let s = plain_connect(addr_a(true, port))?;
        set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
        let mut off = 0;
        while off < BUF {
            off += send_devmem(&s, b.id(), off, BUF - off, 0).map_err(|e| format!("devmem sendmsg at {off}: {e}"))?;
        }
        net::wait_acked(&s, Duration::from_secs(60))?;
        Ok(())
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("sender: {e}"))?;
    if got.len() != BUF {
        return Err(format!("{} of {BUF} bytes arrived", got.len()));
    }
    check(&got, "unsigned devmem stream")?;
    Ok(format!("unsigned: {BUF} bytes sent from the dma-buf, byte-exact"))
}

/// A signed socket: dma-buf data is refused with `EOPNOTSUPP`, and the same
/// socket's ordinary data still arrives (the keys are right).
fn refused(sig: Sig, b_idx: u32, port: u16) -> Result<String, String> {
    let rx = net::in_netns(NS_A, move || {
        let l = listener(sig, port)?;
        read_one(&l)
    });
    let tx = net::in_netns(NS_B, move || {
        let (b, _d, _m) = tx_dmabuf(b_idx)?;
        let mut s = signed_connect(sig, addr_a(true, port))?;
        set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
        match send_devmem(&s, b.id(), 0, 4096, 0) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => return Err(format!("devmem sendmsg on a signed socket: {e}, expected EOPNOTSUPP")),
            Ok(n) => return Err(format!("devmem sendmsg on a signed socket sent {n} bytes, expected EOPNOTSUPP")),
        }
        let data: Vec<u8> = (0..BUF).map(pat).collect();
        s.write_all(&data).map_err(|e| format!("write: {e}"))?;
        Ok(())
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("sender: {e}"))?;
    if got.len() != BUF {
        return Err(format!("{} of {BUF} bytes of the signed write() arrived", got.len()));
    }
    check(&got, "signed write() after the refusal")?;
    let name = if sig == Sig::Md5 { "MD5" } else { "AO" };
    Ok(format!("{name}: devmem sendmsg EOPNOTSUPP, then {BUF} bytes by write() byte-exact"))
}

/// A listener on `[::]:port` whose connections get a receive buffer of
/// `rcvbuf` bytes (set before `listen()`, so that no early connection
/// misses it).
fn small_listener(port: u16, rcvbuf: i32) -> Result<TcpListener, String> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET6, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: we own the new fd.
    let l = unsafe { TcpListener::from_raw_fd(fd) };
    set_int(&l, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    net::set_rcvbuf(fd, rcvbuf)?;
    // SAFETY: all-zero is a valid sockaddr_in6 (the unspecified address).
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as u16;
    sa.sin6_port = port.to_be();
    // SAFETY: a valid sockaddr_in6 of the size passed; listen on our fd.
    let r = unsafe {
        if libc::bind(fd, (&sa as *const libc::sockaddr_in6).cast(), std::mem::size_of_val(&sa) as libc::socklen_t) != 0 {
            -1
        } else {
            libc::listen(fd, 8)
        }
    };
    if r != 0 {
        return Err(format!("bind/listen [::]:{port}: {}", std::io::Error::last_os_error()));
    }
    Ok(l)
}

/// A key cannot be added while dma-buf data is queued: with a key, that
/// data would have to be signed when it is sent. The sender queues data
/// behind the receiver's closed window, adding an MD5 and an AO key then
/// fails with `EBUSY`, and once the receiver reads, all of it arrives
/// byte-exact, unsigned.
fn key_after_queued(b_idx: u32, port: u16) -> Result<String, String> {
    let (queued_tx, queued_rx) = channel::<()>();
    let rx = net::in_netns(NS_A, move || {
        let l = small_listener(port, 4096)?;
        let mut s = accept_within(&l, Duration::from_secs(60))?;
        // Read only once the sender has tried its keys.
        queued_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the sender never got to its keys")?;
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
        Ok(got)
    });
    let tx = net::in_netns(NS_B, move || {
        let (b, _d, _m) = tx_dmabuf(b_idx)?;
        let s = plain_connect(addr_a(true, port))?;
        let r = (|| -> Result<(usize, usize, String), String> {
            set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
            // Queue dma-buf data until the socket takes no more: the
            // receiver does not read, its window closes after a few KiB.
            let mut queued = 0;
            while queued < BUF {
                match send_devmem(&s, b.id(), queued, BUF - queued, libc::MSG_DONTWAIT) {
                    Ok(n) => queued += n,
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                    Err(e) => return Err(format!("devmem sendmsg at {queued}: {e}")),
                }
            }
            let mut outq: libc::c_int = 0;
            zcrx::sys::ioctl(&s, libc::TIOCOUTQ as libc::c_ulong, &mut outq as *mut libc::c_int as usize)
                .map_err(|e| format!("SIOCOUTQ: {e}"))?;
            if outq <= 0 {
                return Err(format!("nothing left queued after {queued} bytes: the window did not close"));
            }
            let peer: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
            let expect = |sig: Sig, errno: i32, what: &str| match add_key(s.as_raw_fd(), sig, peer) {
                Err(e) if e.raw_os_error() == Some(errno) => Ok(()),
                Err(e) => Err(format!("{what} with {outq} bytes of dma-buf data queued: {e}, expected {}", zcrx::sys::errno_name(errno))),
                Ok(()) => Err(format!("{what} with {outq} bytes of dma-buf data queued: added")),
            };
            expect(Sig::Md5, libc::EBUSY, "an MD5 key")?;
            // A connection without TCP-AO gets its first AO key only in
            // repair mode (else EISCONN, whatever is queued).
            expect(Sig::Ao, libc::EISCONN, "an AO key")?;
            set_int(&s, libc::IPPROTO_TCP, libc::TCP_REPAIR, 1)?;
            let r = expect(Sig::Ao, libc::EBUSY, "an AO key in repair mode");
            // TCP_REPAIR_OFF: back to normal, with a window probe.
            set_int(&s, libc::IPPROTO_TCP, libc::TCP_REPAIR, 0)?;
            r?;
            Ok((queued, outq as usize, "MD5 EBUSY, AO EISCONN, AO in repair mode EBUSY".to_string()))
        })();
        // On an error, reset before the receiver reads: queued dma-buf
        // data must neither be sent under a key nor keep an orphan (and
        // the binding's pages) alive after the test.
        let s = match r {
            Ok(v) => (v, s),
            Err(e) => {
                let _ = close_now(s);
                let _ = queued_tx.send(());
                return Err(e);
            }
        };
        let (v, s) = s;
        let _ = queued_tx.send(());
        if let Err(e) = net::wait_acked(&s, Duration::from_secs(60)) {
            let _ = close_now(s);
            return Err(e);
        }
        Ok(v)
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    let (queued, outq, seen) = sent.map_err(|e| format!("sender: {e}"))?;
    if got.len() != queued {
        return Err(format!("{} of the {queued} bytes queued arrived", got.len()));
    }
    check(&got, "dma-buf data queued while the keys were refused")?;
    Ok(format!("keys added with {outq} of {queued} dma-buf bytes queued: {seen}; then all {queued} arrived byte-exact"))
}

/// What the MTU-probe stream sends: a dma-buf range, or readable bytes
/// written with `write()` (byte `i` of such a write is `!pat(i)`).
#[derive(Clone, Copy)]
enum Piece {
    Dma(usize, usize),
    Plain(usize),
}

/// The bytes the receiver must get for `pieces`, in order.
fn expected(pieces: &[Piece]) -> Vec<u8> {
    let mut v = Vec::new();
    for p in pieces {
        match *p {
            Piece::Dma(off, len) => v.extend((off..off + len).map(pat)),
            Piece::Plain(len) => v.extend((0..len).map(|i| !pat(i))),
        }
    }
    v
}

/// netdevsim's count of TX skbs whose frags it could not read (series
/// patch 35), on the sender's device.
fn tx_unreadable_refused() -> Result<u64, String> {
    let p = "/sys/kernel/debug/netdevsim/netdevsim2/ports/0/tx_unreadable_refused";
    std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?.trim().parse().map_err(|e| format!("{p}: {e}"))
}

/// devmem TX with MTU probing (`tcp_mtu_probing=2`: the connection starts
/// at `tcp_base_mss` and probes for more). Each 4 KiB round is 8 pieces
/// of 512 bytes, each from another dma-buf page, at offsets that continue
/// each other (piece j at offset 512 j): every boundary is between frags
/// of two net_iovs that look contiguous; every 32 rounds a `write()` of
/// 700 readable bytes comes between. An MTU probe copies the frags of the
/// queued skbs into a new skb; before the kernel fix it was marked
/// readable (a NULL page for whoever reads it: here netdevsim, as a NIC
/// that copies) and merged such frags into one, sending the wrong page's
/// bytes. 1 MiB must arrive byte-exact, netdevsim must have refused no
/// frag, and the sender's `TCPMTUPSuccess` shows that probes were sent and
/// acknowledged.
fn devmem_tx_mtu_probe(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    let b_idx = n.b_idx;
    let port = 7235;
    const ROUNDS: usize = 256;
    let pages = BUF / 4096;
    let mut pieces = Vec::new();
    for r in 0..ROUNDS {
        if r % 32 == 31 {
            pieces.push(Piece::Plain(700));
        }
        pieces.extend((0..8).map(|j| Piece::Dma(((8 * r + j) % pages) * 4096 + 512 * j, 512)));
    }
    let want = expected(&pieces);
    let total = want.len();
    let refused0 = tryo!(tx_unreadable_refused());
    let rx = net::in_netns(NS_A, move || {
        let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))).map_err(|e| format!("listen: {e}"))?;
        read_one(&l)
    });
    let tx = net::in_netns(NS_B, move || {
        std::fs::write("/proc/sys/net/ipv4/tcp_mtu_probing", "2").map_err(|e| format!("tcp_mtu_probing: {e}"))?;
        let (success0, fail0) = (crate::signed::tcpext("TCPMTUPSuccess")?, crate::signed::tcpext("TCPMTUPFail")?);
        let (b, _d, _m) = tx_dmabuf(b_idx)?;
        let mut s = plain_connect(addr_a(true, port))?;
        let r = (|| -> Result<(), String> {
            set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
            let mut i = 0;
            while i < pieces.len() {
                if let Piece::Plain(len) = pieces[i] {
                    let data: Vec<u8> = (0..len).map(|k| !pat(k)).collect();
                    s.write_all(&data).map_err(|e| format!("write: {e}"))?;
                    i += 1;
                    continue;
                }
                // up to 64 dma-buf pieces a call; a partial send resumes
                // in the middle of a piece
                let mut rest: Vec<(usize, usize)> = Vec::new();
                while i < pieces.len() && rest.len() < 64 {
                    match pieces[i] {
                        Piece::Dma(off, len) => rest.push((off, len)),
                        Piece::Plain(_) => break,
                    }
                    i += 1;
                }
                while !rest.is_empty() {
                    let mut n = send_devmem_iov(&s, b.id(), &rest, 0).map_err(|e| format!("devmem sendmsg: {e}"))?;
                    while n > 0 {
                        if n >= rest[0].1 {
                            n -= rest[0].1;
                            rest.remove(0);
                        } else {
                            rest[0] = (rest[0].0 + n, rest[0].1 - n);
                            n = 0;
                        }
                    }
                    drain_errqueue(&s);
                }
            }
            net::wait_acked(&s, Duration::from_secs(60))
        })();
        if let Err(e) = r {
            let _ = close_now(s);
            return Err(e);
        }
        drop(s);
        let (success, fail) = (crate::signed::tcpext("TCPMTUPSuccess")?, crate::signed::tcpext("TCPMTUPFail")?);
        Ok((success - success0, fail - fail0))
    });
    let sent = join(tx);
    let got = tryo!(join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err())));
    let (success, fail) = tryo!(sent.map_err(|e| format!("sender: {e}")));
    let refused = tryo!(tx_unreadable_refused()) - refused0;
    if got.len() != total {
        return Fail(format!("{} of {total} bytes arrived", got.len()));
    }
    if let Some(i) = got.iter().zip(&want).position(|(g, e)| g != e) {
        return Fail(format!("byte {i} is {:#04x}, expected {:#04x}", got[i], want[i]));
    }
    if refused != 0 {
        return Fail(format!("netdevsim refused {refused} TX skbs whose frags it could not read"));
    }
    if success == 0 {
        return Fail(format!("no MTU probe succeeded (TCPMTUPSuccess +0, TCPMTUPFail +{fail}): the test proves nothing"));
    }
    tryo!(crate::common::wait_idle(Duration::from_secs(10)));
    drop(n);
    env.diag(&format!(
        "{total} bytes ({ROUNDS} rounds of 8 net_iov pieces, readable writes between), byte-exact; \
         TCPMTUPSuccess +{success}, TCPMTUPFail +{fail}; netdevsim refused 0"
    ));
    Pass
}

/// devmem TX on a TCP-MD5 and a TCP-AO socket (see the module comment):
/// the unsigned control, the refusals, and a key added afterwards.
fn devmem_tx_on_signed_socket(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    let mut notes = Vec::new();
    notes.push(tryo!(control(n.b_idx, 7231).map_err(|e| format!("control: {e}"))));
    for (sig, port) in [(Sig::Md5, 7232), (Sig::Ao, 7233)] {
        notes.push(tryo!(refused(sig, n.b_idx, port)));
    }
    notes.push(tryo!(key_after_queued(n.b_idx, 7234)));
    tryo!(crate::common::wait_idle(Duration::from_secs(10)));
    drop(n);
    env.diag(&notes.join("; "));
    Pass
}
