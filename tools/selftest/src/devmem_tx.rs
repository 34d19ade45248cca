// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! devmem TX (a socket sending from a dma-buf bound to the device) on a
//! socket that signs its segments with TCP-MD5 or TCP-AO. The payload of
//! such a segment is the dma-buf's net_iovs, which the kernel cannot read,
//! and signing hashes the payload: before the kernel fix (`tcp: do not
//! sign segments whose payload is in device memory`) the hash followed a
//! pointer computed from NULL (`tcp_md5_hash_skb_data()`). Now `sendmsg()`
//! refuses dma-buf data on a signing socket with `EOPNOTSUPP`, and a key
//! added after such data was queued stops the socket from sending it
//! instead of crashing.
//!
//! The sender is netdevsim's side `nsb` (netdevsim transmits from a dma-buf
//! bound to it, series patch 25); the receiver reads with `read()`: no
//! provider is involved, only the device-memory transmit path.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::mpsc::channel;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};

use crate::common::ensure_loaded;
use crate::net::{self, addr_a, join, Nsim, NS_A, NS_B};
use crate::signed::{add_key, listener, signed_connect, Sig};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("devmem_tx_on_signed_socket", devmem_tx_on_signed_socket)];

/// `SO_ZEROCOPY` and `SCM_DEVMEM_DMABUF` (asm-generic/socket.h).
const SO_ZEROCOPY: libc::c_int = 60;
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
    let (memfd, dmabuf) = crate::dmabuf::udmabuf(BUF)?;
    let mut f = std::fs::File::from(memfd.try_clone().map_err(|e| e.to_string())?);
    let data: Vec<u8> = (0..BUF).map(pat).collect();
    f.write_all(&data).map_err(|e| format!("fill the memfd: {e}"))?;
    let b = zcrx::netdev::bind_tx(ifindex, dmabuf.as_fd()).map_err(|e| format!("bind-tx: {e}"))?;
    Ok((b, dmabuf, memfd))
}

/// `sendmsg(MSG_ZEROCOPY | flags)` of `len` bytes at offset `off` of the
/// dma-buf of binding `id`.
fn send_devmem(s: &TcpStream, id: u32, off: usize, len: usize, flags: libc::c_int) -> std::io::Result<usize> {
    // The iovec's address is an offset into the dma-buf, not a pointer.
    let mut iov = libc::iovec { iov_base: off as *mut libc::c_void, iov_len: len };
    // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes.
    let (space, clen) = unsafe { (libc::CMSG_SPACE(4) as usize, libc::CMSG_LEN(4) as usize) };
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: all-zero is a valid msghdr.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.as_mut_ptr().cast();
    m.msg_controllen = space;
    // SAFETY: `m` describes `cbuf`, which has room for one header and 4
    // bytes of data (CMSG_SPACE(4)); CMSG_FIRSTHDR is then non-null.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = SCM_DEVMEM_DMABUF;
        (*c).cmsg_len = clen;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u32>(), id);
    }
    // SAFETY: `m` points at live locals; the kernel reads no user memory
    // through a dma-buf iovec.
    let r = unsafe { libc::sendmsg(s.as_raw_fd(), &m, MSG_ZEROCOPY | flags) };
    zcrx::sys::cvt(r as libc::c_long).map(|n| n as usize)
}

fn set_int(s: &impl AsRawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> Result<(), String> {
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
fn close_now(s: TcpStream) -> Result<(), String> {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads a linger from a live local.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of_val(&l) as libc::socklen_t,
        )
    };
    zcrx::sys::cvt(r.into()).map(|_| ()).map_err(|e| format!("SO_LINGER: {e}"))
}

/// Checks `got` against the dma-buf's bytes from offset 0.
fn check(got: &[u8], what: &str) -> Result<(), String> {
    match got.iter().enumerate().find(|&(i, &b)| b != pat(i)) {
        Some((i, &b)) => Err(format!("{what}: byte {i} is {b:#04x}, the dma-buf has {:#04x}", pat(i))),
        None => Ok(()),
    }
}

/// Connects from `nsb` without a key, retrying while the listener comes up.
fn plain_connect(to: SocketAddr) -> Result<TcpStream, String> {
    net::connect(to, Duration::from_secs(10))
}

/// The unsigned control: the whole dma-buf sent from device memory
/// arrives byte-exact (so the refusals below are not a broken devmem TX).
fn control(b_idx: u32, port: u16) -> Result<String, String> {
    let rx = net::in_netns(NS_A, move || {
        let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
        Ok(got)
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
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
        Ok(got)
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

/// A key added on both ends after dma-buf data was queued behind a closed
/// window: when the window opens the sender would have to sign the queued
/// device memory. It must not crash; the data stays unsent, what was sent
/// before the keys arrived byte-exact, and further dma-buf data is refused.
fn key_after_queued(b_idx: u32, port: u16) -> Result<String, String> {
    let (accepted_tx, accepted_rx) = channel::<()>();
    let (queued_tx, queued_rx) = channel::<()>();
    let (rx_keyed_tx, rx_keyed_rx) = channel::<()>();
    let (tx_keyed_tx, tx_keyed_rx) = channel::<()>();
    let (read_tx, read_rx) = channel::<()>();
    let rx = net::in_netns(NS_A, move || {
        let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))).map_err(|e| format!("listen: {e}"))?;
        // A small receive buffer, inherited by the accepted socket: the
        // window closes after a few KiB.
        net::set_rcvbuf(l.as_raw_fd(), 4096)?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let _ = accepted_tx.send(());
        queued_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the sender queued nothing")?;
        add_key(s.as_raw_fd(), Sig::Md5, "2001:db8::2".parse::<std::net::Ipv6Addr>().unwrap()).map_err(|e| format!("receiver key: {e}"))?;
        let _ = rx_keyed_tx.send(());
        tx_keyed_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the sender added no key")?;
        // Reading opens the window; the (signed) window update lets the
        // sender go on with the queued dma-buf data.
        s.set_read_timeout(Some(Duration::from_secs(3))).map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => break,
                Err(e) => return Err(format!("read: {e}")),
            }
        }
        let _ = read_tx.send(());
        close_now(s.try_clone().map_err(|e| e.to_string())?)?;
        Ok(got)
    });
    let tx = net::in_netns(NS_B, move || {
        let (b, _d, _m) = tx_dmabuf(b_idx)?;
        let s = plain_connect(addr_a(true, port))?;
        set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
        accepted_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "not accepted")?;
        // Queue dma-buf data until the socket takes no more.
        let mut queued = 0;
        while queued < BUF {
            match send_devmem(&s, b.id(), queued, BUF - queued, libc::MSG_DONTWAIT) {
                Ok(n) => queued += n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(e) => return Err(format!("devmem sendmsg at {queued}: {e}")),
            }
        }
        // Let the window close.
        std::thread::sleep(Duration::from_millis(500));
        let _ = queued_tx.send(());
        rx_keyed_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the receiver added no key")?;
        add_key(s.as_raw_fd(), Sig::Md5, "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap()).map_err(|e| format!("sender key: {e}"))?;
        let _ = tx_keyed_tx.send(());
        read_rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "the receiver never finished reading")?;
        let refused = matches!(
            send_devmem(&s, b.id(), 0, 4096, libc::MSG_DONTWAIT),
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP)
        );
        let mut outq: libc::c_int = 0;
        zcrx::sys::ioctl(&s, libc::TIOCOUTQ as libc::c_ulong, &mut outq as *mut libc::c_int as usize)
            .map_err(|e| format!("SIOCOUTQ: {e}"))?;
        close_now(s)?;
        Ok((queued, refused, outq as usize))
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    let (queued, refused, outq) = sent.map_err(|e| format!("sender: {e}"))?;
    check(&got, "data sent before the keys")?;
    if got.is_empty() || got.len() >= queued {
        return Err(format!("{} of {queued} queued bytes arrived: the window never closed or never opened", got.len()));
    }
    if outq != queued - got.len() {
        return Err(format!("the sender still holds {outq} bytes, {} were queued and {} arrived", queued, got.len()));
    }
    if !refused {
        return Err("a devmem sendmsg after the key was added was not refused with EOPNOTSUPP".into());
    }
    Ok(format!(
        "MD5 added after queueing: {} of {queued} bytes arrived (byte-exact) before the keys, {outq} left unsent, no crash",
        got.len()
    ))
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
    drop(n);
    tryo!(crate::common::wait_idle(Duration::from_secs(10)));
    env.diag(&notes.join("; "));
    Pass
}
