// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Another owner of the socket: a BPF sockmap or kernel TLS taking a
//! socket over from zcrx-rs (also while a RECV sleeps), and kTLS on a
//! zero-copy queue, whose records must never be decrypted from (or copied
//! out of) provider memory.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, expect_errno, mib, wait_idle};
use crate::net::{addr_a, connect, in_netns, join, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("socket_taken_over_while_waiting", socket_taken_over_while_waiting),
    ("ktls_takes_over_while_waiting", ktls_takes_over_while_waiting),
    ("ktls_on_zero_copy_queue", ktls_on_zero_copy_queue),
    ("ktls_record_header_readable_payload_not", ktls_record_header_readable_payload_not),
    ("ktls_copy_mode_refuses_provider_memory", ktls_copy_mode_refuses_provider_memory),
];

/// Puts TCP socket `fd` into a new sockmap (no programs): the socket is
/// then read by `tcp_bpf_recvmsg`, no longer by TCP itself. Returns the
/// map's fd (the socket stays in the map while it is open).
fn sockmap_insert(fd: i32) -> Result<i32, String> {
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    const BPF_MAP_TYPE_SOCKMAP: u32 = 15;
    let mut attr = [0u8; 128];
    for (i, v) in [BPF_MAP_TYPE_SOCKMAP, 4, 4, 1].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: bpf(2) with a zero-padded attribute of the size given.
    let map = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_ptr(), attr.len()) };
    if map < 0 {
        return Err(format!("bpf(BPF_MAP_CREATE sockmap): {}", std::io::Error::last_os_error()));
    }
    let key = 0u32;
    let value = fd as u32;
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(map as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(&key as *const u32 as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(&value as *const u32 as u64).to_ne_bytes());
    // SAFETY: as above; key and value outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, attr.as_ptr(), attr.len()) };
    if r < 0 {
        return Err(format!("bpf(BPF_MAP_UPDATE_ELEM sockmap): {}", std::io::Error::last_os_error()));
    }
    Ok(map as i32)
}

/// Who takes the socket away from zcrx-rs while a RECV sleeps.
#[derive(Clone, Copy, PartialEq)]
enum Taker {
    /// A BPF sockmap (its own recvmsg, the queue read by the psock).
    Sockmap,
    /// Kernel TLS: the `tls` ULP and a TLS_RX key; the peer switches to
    /// kTLS TX after the go byte, so the rest of the stream is TLS records.
    Ktls,
}

/// The AES-GCM-128 key both ends of a kTLS test use
/// (`struct tls12_crypto_info_aes_gcm_128`).
#[repr(C)]
struct TlsAesGcm128 {
    version: u16,
    cipher_type: u16,
    iv: [u8; 8],
    key: [u8; 16],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// TLS 1.2 and 1.3 (`TLS_1_2_VERSION`, `TLS_1_3_VERSION`).
pub(crate) const TLS12: u16 = 0x0303;
pub(crate) const TLS13: u16 = 0x0304;

/// Installs the `tls` ULP on `fd` (once per socket) and a fixed
/// AES-GCM-128 key of TLS `version` for `dir` (`TLS_TX` = 1 or `TLS_RX` = 2).
pub(crate) fn ktls(fd: i32, dir: i32, version: u16) -> Result<(), String> {
    const TCP_ULP: i32 = 31;
    const SOL_TLS: i32 = 282;
    let ulp = b"tls";
    // SAFETY: setsockopt with a buffer of the length given.
    let r = unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, TCP_ULP, ulp.as_ptr().cast(), ulp.len() as u32) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(format!("setsockopt(TCP_ULP, \"tls\"): {e}"));
        }
    }
    let ci = TlsAesGcm128 { version, cipher_type: 51, iv: *b"zcrx-iv!", key: *b"zcrx-rs test key", salt: *b"salt", rec_seq: [0; 8] };
    // SAFETY: as above; `ci` is the struct the kernel expects for this cipher.
    let r = unsafe { libc::setsockopt(fd, SOL_TLS, dir, (&ci as *const TlsAesGcm128).cast(), size_of::<TlsAesGcm128>() as u32) };
    if r < 0 {
        return Err(format!("setsockopt(SOL_TLS, {}): {}", if dir == 1 { "TLS_TX" } else { "TLS_RX" }, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// An upper layer takes the socket over (a sockmap, or kTLS) while a RECV
/// sleeps with the lock released: the RECV returns EPROTONOSUPPORT instead
/// of reading a queue it no longer owns, later RECVs are refused at once,
/// and the stream continues byte-exact through recv() from where RECV
/// stopped.
fn socket_taken_over_while_waiting(env: &Env) -> Outcome {
    taken_over(env, Taker::Sockmap)
}

/// As [`socket_taken_over_while_waiting`], with kernel TLS as the taker.
fn ktls_takes_over_while_waiting(env: &Env) -> Outcome {
    taken_over(env, Taker::Ktls)
}

fn taken_over(env: &Env, how: Taker) -> Outcome {
    tryo!(ensure_loaded(env));
    // All of the sender's traffic on queue 0 (XPS, whatever CPU sends),
    // and we bind queue 1: the data stays readable, so recv() can take over
    // after the switch.
    let n = tryo!(Nsim::up_steered(2, Some(0)));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let part1 = 256u64 << 10;
    let part2 = 1u64 << 20;
    let pat = Arc::new(Pattern::new(9090));
    let p2 = pat.clone();
    let port = 7303;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 1, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        let mut got = 0u64;
        let mut recs = vec![Rec::default(); 64];
        while got < part1 {
            let r = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("RECV at {got}: {e}"))?;
            if r.bytes == 0 {
                return Err(format!("EOF at {got}"));
            }
            for rec in &recs[..r.records] {
                if let Some(bad) = p2.check(got, z.data(rec)) {
                    return Err(format!("payload mismatch at {bad}"));
                }
                got += u64::from(rec.len);
            }
            z.refill(&recs[..r.records]).map_err(|e| e.to_string())?;
        }
        if got != part1 {
            return Err(format!("RECV got {got} bytes, the sender sent {part1} before waiting"));
        }
        // While the next RECV sleeps: take the socket over, then let the
        // sender go on.
        let fd = s.as_raw_fd();
        let mut s2 = s.try_clone().map_err(|e| e.to_string())?;
        let me = crate::common::gettid();
        let taker = std::thread::spawn(move || -> Result<i32, String> {
            crate::common::wait_sleeping_in(me, libc::SYS_ioctl, Duration::from_secs(20))?;
            let map = match how {
                Taker::Sockmap => sockmap_insert(fd)?,
                Taker::Ktls => {
                    ktls(fd, 2, TLS12)?;
                    -1
                }
            };
            s2.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            Ok(map)
        });
        let waited = z.recv(s.as_raw_fd(), &mut recs, 0);
        let map = taker.join().map_err(|_| "taker panicked".to_string())??;
        expect_errno("RECV whose socket was taken over while it slept", waited, libc::EPROTONOSUPPORT)?;
        expect_errno("RECV on a taken-over socket", z.recv(s.as_raw_fd(), &mut recs, 0), libc::EPROTONOSUPPORT)?;
        // Nothing was lost or read twice: recv() continues at `part1`.
        let mut buf = vec![0u8; 64 << 10];
        let mut off = part1;
        loop {
            let k = std::io::Read::read(&mut s, &mut buf).map_err(|e| format!("recv() at {off}: {e}"))?;
            if k == 0 {
                break;
            }
            if let Some(bad) = p2.check(off, &buf[..k]) {
                return Err(format!("recv() after the switch: mismatch at {bad}"));
            }
            off += k as u64;
        }
        if map >= 0 {
            // SAFETY: our map fd.
            unsafe { libc::close(map) };
        }
        Ok(off)
    });
    let tx = in_netns(NS_B, move || {
        zcrx::sys::pin_to_cpu(0).map_err(|e| format!("pin: {e}"))?;
        let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
        let mut buf = vec![0u8; (part1 + part2) as usize];
        pat.fill(0, &mut buf);
        c.write_all(&buf[..part1 as usize]).map_err(|e| format!("send part 1: {e}"))?;
        let mut go = [0u8; 1];
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
        if how == Taker::Ktls {
            ktls(c.as_raw_fd(), 1, TLS12)?;
        }
        c.write_all(&buf[part1 as usize..]).map_err(|e| format!("send part 2: {e}"))?;
        Ok::<_, String>(())
    });
    let sent = join(tx);
    let end = tryo!(join(rx));
    tryo!(sent);
    if end != part1 + part2 {
        return Fail(format!("stream ended at {end}, sent {}", part1 + part2));
    }
    env.diag(&format!(
        "{} through RECV, then {} took the socket: the sleeping RECV got EPROTONOSUPPORT, {} more byte-exact through recv()",
        mib(part1),
        if how == Taker::Ktls { "kTLS (TLS_RX; the peer sends TLS records)" } else { "a sockmap" },
        mib(part2)
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// kTLS on a flow whose payload lands in a bound queue: the records sit
/// in provider memory the kernel must not read, so kTLS cannot decrypt
/// them. The receiver gets an error instead of data (no splat, no
/// plaintext made up from memory it could not read), and tearing
/// everything down releases every buffer.
fn ktls_on_zero_copy_queue(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let total = 1u64 << 20;
    let pat = Arc::new(Pattern::new(4242));
    let p2 = pat.clone();
    let port = 7304;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS12)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0u64;
        let err = loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) => break None,
                Ok(k) => {
                    if let Some(bad) = p2.check(off, &buf[..k]) {
                        return Err(format!("kTLS read() returned data that is not the stream, at {bad}"));
                    }
                    off += k as u64;
                }
                Err(e) => break Some(e),
            }
        };
        drop(z);
        Ok((off, err))
    });
    let tx = in_netns(NS_B, move || {
        let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
        let mut go = [0u8; 1];
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
        ktls(c.as_raw_fd(), 1, TLS12)?;
        let mut buf = vec![0u8; total as usize];
        pat.fill(0, &mut buf);
        // The receiver may give up and close: a send error is fine here.
        let _ = c.write_all(&buf);
        Ok::<_, String>(())
    });
    let (off, err) = tryo!(join(rx));
    tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put no payload into provider memory: the test proves nothing".into());
    }
    match &err {
        Some(e) if e.raw_os_error() == Some(libc::EFAULT) => {}
        _ => return Fail(format!("kTLS read() after {off} bytes: {err:?}, expected EFAULT")),
    }
    env.diag(&format!(
        "kTLS on a zero-copy queue: {} bytes of TLS records in provider memory, read() fails with EFAULT after {off} bytes",
        st.dma_bytes
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// The kTLS receiver's read() of a record it cannot read: the error it
/// must fail with, or what it returned instead.
fn ktls_read_fails(s: &mut std::net::TcpStream) -> Result<std::io::Error, String> {
    let mut buf = vec![0u8; 64 << 10];
    match std::io::Read::read(s, &mut buf) {
        Ok(k) => Err(format!("kTLS read() returned {k} bytes of a record it could not read")),
        Err(e) => Ok(e),
    }
}

/// The sending peer of the kTLS record tests (in `NS_B`): connected to
/// `port` with TCP_NODELAY, once the receiver said go (one byte, returned
/// for reuse).
fn ktls_peer(port: u16) -> Result<(std::net::TcpStream, [u8; 1]), String> {
    let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
    c.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut go = [0u8; 1];
    std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
    Ok((c, go))
}

/// A TLS record whose 5-byte header arrived before the queue was bound
/// (readable) and whose body arrives after (in provider memory): the kTLS
/// receiver learns the record's length from the header and must then
/// refuse the body it cannot read (an error on read()), not hand the
/// cipher pages that do not exist.
fn ktls_record_header_readable_payload_not(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    // TLS 1.3: ciphertext, the inner content type, the 16-byte tag.
    let body = 4096usize + 17;
    let port = 7306;
    let (header_tx, header_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS13)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        // The header is in the socket (readable; the sender saw it
        // acknowledged): now bind, then ask for the body.
        header_rx.recv_timeout(Duration::from_secs(60)).map_err(|e| format!("waiting for the header: {e}"))??;
        z.bind(a_idx, 0, 0).map_err(|e| format!("BIND: {e}"))?;
        s.write_all(b"b").map_err(|e| format!("go body: {e}"))?;
        let r = ktls_read_fails(&mut s);
        drop(z);
        r
    });
    let tx = in_netns(NS_B, move || {
        let (mut c, mut go) = ktls_peer(port)?;
        // Application data (legacy version 3.3), `body` bytes.
        let hdr = [0x17, 3, 3, (body >> 8) as u8, body as u8];
        c.write_all(&hdr).map_err(|e| format!("send header: {e}"))?;
        let _ = header_tx.send(crate::net::wait_acked(&c, Duration::from_secs(60)));
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go body: {e}"))?;
        let _ = c.write_all(&vec![0x5a; body]);
        // Open until the receiver has tried the record and closed.
        c.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let _ = std::io::Read::read(&mut c, &mut go);
        Ok::<_, String>(())
    });
    let err = tryo!(join(rx));
    tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put none of the record's body into provider memory: the test proves nothing".into());
    }
    if err.raw_os_error() != Some(libc::EFAULT) {
        return Fail(format!("kTLS read() of a record it cannot read: {err}, expected EFAULT"));
    }
    env.diag(&format!("TLS 1.3 record: header readable, {} bytes of body in provider memory; read() fails with EFAULT", st.dma_bytes));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// kTLS's record parser copies the start of a record out of the TCP queue
/// (its copy mode) when the socket is under memory pressure or its window
/// has closed before a whole record is in. A provider's buffers are
/// charged in full (4 KiB for a 1-byte segment), so a peer gets there by
/// sending a record header one byte at a time to a receiver with a small
/// receive buffer (SO_RCVBUF 8192 here; out-of-order data counts too, so a
/// peer can also make the pressure itself). The copy used to WARN on the
/// unreadable frags (`skb_copy_bits()` in `tls_strp_copyin_frag()`, a
/// panic with `panic_on_warn`) and carry on parsing whatever the copy's
/// pages held; now the parser stops and read() fails with EFAULT, as for
/// any record in provider memory.
fn ktls_copy_mode_refuses_provider_memory(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let port = 7307;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        zcrx::sys::set_rcvbuf(&l, 8192).map_err(|e| format!("SO_RCVBUF: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS13)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        let r = ktls_read_fails(&mut s);
        // what the socket held when read() returned, for a failure
        let info = crate::net::tcp_info_line(&s);
        drop(z);
        r.map(|e| (e, info))
    });
    let tx = in_netns(NS_B, move || {
        let (mut c, mut go) = ktls_peer(port)?;
        // the first four bytes of an application data record header, one
        // segment each: the parser needs five to know the record's length
        let mut sent = 0;
        let mut stopped = String::new();
        for b in [0x17u8, 3, 3, 0x10] {
            if let Err(e) = c.write_all(&[b]).map_err(|e| e.to_string()).and_then(|()| crate::net::wait_acked(&c, Duration::from_secs(5))) {
                stopped = format!(" (byte {}: {e})", sent + 1);
                break;
            }
            sent += 1;
        }
        // Open until the receiver has tried the record and closed.
        c.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let _ = std::io::Read::read(&mut c, &mut go);
        Ok::<_, String>(format!("{sent}{stopped}"))
    });
    let (err, info) = tryo!(join(rx));
    let sent = tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put none of the header into provider memory: the test proves nothing".into());
    }
    if err.raw_os_error() != Some(libc::EFAULT) {
        return Fail(format!(
            "kTLS read() of a record header in provider memory: {err}, expected EFAULT; sender: {sent} one-byte \
             segments acknowledged; netdevsim: {} bytes in provider memory in {} packets, {} dropped without a buffer; receiver: {info}",
            st.dma_bytes, st.dma_packets, st.drop_no_buf
        ));
    }
    env.diag(&format!(
        "{sent} one-byte segments of a TLS header to a kTLS receiver with SO_RCVBUF 8192, {} bytes in provider memory: \
         read() fails with EFAULT",
        st.dma_bytes
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
