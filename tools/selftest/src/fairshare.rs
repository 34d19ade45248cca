// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! One socket cannot take the area. TCP holds a socket to its share of a
//! memory provider's buffers in its receive and out-of-order queues
//! together (patch 55), and zcrx-rs sets that share to a quarter of the
//! area (at least 1 MiB), whatever the socket's receive buffer: a
//! reader that falls behind cannot stall the other flows of the queue.

use std::fs;
use std::net::TcpListener;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::Pattern;

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{self, addr_a, in_netns, join, sender_timeout, with_receiver_setup, Nsim, NS_A};
use crate::pkt;
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("slow_reader_holds_only_its_share", slow_reader_holds_only_its_share),
    ("slow_reader_locked_rcvbuf_holds_only_its_share", slow_reader_locked_rcvbuf_holds_only_its_share),
];

/// Buffers in the area: 4 MiB with 4 KiB pages.
const BUFS: usize = 1024;
/// What one skb may add past the share: TCP admits an skb whole while the
/// socket is at or below its limit, and a GRO'd skb holds up to about 45
/// buffers (Documentation/zcrx-rs.rst, "Sizing the area").
const SLACK: usize = 256 << 10;

/// A socket whose receive buffer is twice the area (every socket of the
/// receiving namespace starts with 8 MiB, as autotuning gives a bulk
/// reader that kept up) stops being read while its peer sends 6 MiB. Its
/// queues must stop at about a quarter of the area, and another connection
/// on the queue must then get 16 MiB byte-exact, all zero-copy, while the
/// first stays unread; then the first is read to its end, byte-exact (it
/// resumes on the window update). TCP also lowers the socket's receive
/// buffer to the share, so that its window fits it. Without the share the
/// first socket took the whole area and the other connection got nothing.
fn slow_reader_holds_only_its_share(env: &Env) -> Outcome {
    slow_reader(env, None, 7412)
}

/// The same, with the receive buffer set by the application
/// (`SO_RCVBUFFORCE`, 8 MiB, doubled by the kernel): TCP leaves a buffer
/// the user sized alone and holds the socket to its share by dropping.
fn slow_reader_locked_rcvbuf_holds_only_its_share(env: &Env) -> Outcome {
    slow_reader(env, Some(8 << 20), 7413)
}

/// What the receiver saw of the slow socket and the other connection.
struct Seen {
    /// The slow socket's memory when accepted, at its peak and at the end
    /// of the other connection.
    start: net::SkMem,
    peak: u32,
    after: net::SkMem,
    rx: net::Rx,
    took: Duration,
    slow: net::Rx,
    slow_took: Duration,
}

fn slow_reader(env: &Env, locked: Option<u32>, port: u16) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(join(in_netns(NS_A, || {
        fs::write("/proc/sys/net/ipv4/tcp_rmem", "4096 8388608 8388608").map_err(|e| format!("tcp_rmem: {e}"))
    })));
    let page = zcrx::dev::page_size();
    let area = BUFS * page;
    // a quarter of the area, at least 1 MiB (Documentation/zcrx-rs.rst)
    let share = (area / 4).max(1 << 20);
    let slow_bytes = 6u64 << 20;
    let bytes = env.bytes(16 << 20);
    let before = tryo!(n.stats(1, 0));
    let snmp0 = tryo!(pkt::Snmp::read(NS_A));
    let log = tryo!(DmaLog::start());
    let pat_slow = Arc::new(Pattern::new(u64::from(port) ^ 0x5105));
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (ps, p) = (pat_slow.clone(), pat.clone());
    let setup = move |l: &TcpListener| match locked {
        Some(b) => zcrx::sys::set_rcvbuf_force(l, b).map_err(|e| format!("SO_RCVBUFFORCE: {e}")),
        None => Ok(()),
    };
    let receiver = with_receiver_setup(n.a_idx, 0, area, port, false, setup, move |z, l| {
        let (slow, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let start = net::sk_mem(&slow)?;
        // Read nothing of it; wait until its queues stop growing.
        let (t0, mut changed, mut last, mut peak) = (Instant::now(), Instant::now(), 0u32, 0u32);
        loop {
            let m = net::sk_mem(&slow)?;
            peak = peak.max(m.rmem_alloc);
            if m.rmem_alloc != last {
                (last, changed) = (m.rmem_alloc, Instant::now());
            } else if last > 0 && changed.elapsed() > Duration::from_secs(1) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("the unread socket's queues still change after 60 s: {}", net::tcp_info_line(&slow)));
            }
            sleep(Duration::from_millis(50));
        }
        let _ = go_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let t1 = Instant::now();
        // A stall here is the failure this test looks for.
        let rx = net::receive_or_stall(z, &s, &p, Duration::from_secs(30)).map_err(|e| format!("the other connection: {e}"))?;
        let took = t1.elapsed();
        let after = net::sk_mem(&slow)?;
        peak = peak.max(after.rmem_alloc);
        let t2 = Instant::now();
        let slow_rx = net::receive(z, &slow, &ps, None).map_err(|e| format!("the slow connection, read at last: {e}"))?;
        Ok(Seen { start, peak, after, rx, took, slow: slow_rx, slow_took: t2.elapsed() })
    });
    // Bounds for a stall (writes without progress), not deadlines.
    let slow_sender = sender_timeout(addr_a(false, port), slow_bytes, pat_slow, 0, Duration::from_secs(120));
    let other = match go_rx.recv_timeout(Duration::from_secs(90)) {
        Ok(()) => Some(sender_timeout(addr_a(false, port), bytes, pat, 1, Duration::from_secs(120))),
        Err(_) => None,
    };
    let r = join(receiver);
    let sent = other.map(join);
    let slow_sent = join(slow_sender);
    let d = tryo!(n.stats(1, 0)).since(&before);
    let snmp = tryo!(pkt::Snmp::read(NS_A));
    let seen = tryo!(r.map_err(|e| format!(
        "receiver: {e}; senders: {:?} {:?}",
        sent.as_ref().map(|s| s.as_ref().err()),
        slow_sent.as_ref().err()
    )));
    let sent = tryo!(sent.unwrap_or_else(|| Err("the other connection never started".into())));
    let slow_sent = tryo!(slow_sent);
    let ext = |k: &str| snmp.since(&snmp0, &format!("TcpExt:{k}")).unwrap_or(0);
    env.diag(&format!(
        "area {} ({BUFS} buffers), share {}; the unread socket: receive buffer {} at accept{}, queues at most {} \
         ({} buffers' worth), receive buffer {} at the end",
        mib(area as u64),
        mib(share as u64),
        mib(u64::from(seen.start.rcvbuf)),
        if locked.is_some() { " (locked by SO_RCVBUFFORCE)" } else { "" },
        mib(u64::from(seen.peak)),
        seen.peak as usize / page,
        mib(u64::from(seen.after.rcvbuf)),
    ));
    env.diag(&format!(
        "the other connection: {} byte-exact in {:.1} s, zero-copy {} copied {}; then the unread one: {} byte-exact in {:.1} s, \
         zero-copy {} copied {}",
        mib(seen.rx.bytes),
        seen.took.as_secs_f64(),
        mib(seen.rx.zc_bytes),
        mib(seen.rx.copy_bytes),
        mib(seen.slow.bytes),
        seen.slow_took.as_secs_f64(),
        mib(seen.slow.zc_bytes),
        mib(seen.slow.copy_bytes),
    ));
    env.diag(&format!(
        "TCP: TCPRcvQDrop +{} TCPOFODrop +{} TCPZeroWindowDrop +{} PruneCalled +{}; netdevsim split {} packets, dropped {} for want of a buffer",
        ext("TCPRcvQDrop"),
        ext("TCPOFODrop"),
        ext("TCPZeroWindowDrop"),
        ext("PruneCalled"),
        d.dma_packets,
        d.drop_no_buf
    ));
    if sent != bytes || seen.rx.bytes != bytes || slow_sent != slow_bytes || seen.slow.bytes != slow_bytes {
        return Fail(format!("sent {sent} and {slow_sent}, received {} of {bytes} and {} of {slow_bytes}", seen.rx.bytes, seen.slow.bytes));
    }
    if seen.rx.zc_bytes != bytes {
        return Fail(format!("{} of {bytes} bytes of the other connection zero-copy", seen.rx.zc_bytes));
    }
    // The test proves something only if the unread socket could have
    // taken more than the area, and tried.
    if (seen.start.rcvbuf as usize) < area {
        return Fail(format!("the unread socket's receive buffer was {} at accept, less than the area", seen.start.rcvbuf));
    }
    if (seen.peak as usize) < share / 2 {
        return Fail(format!("the unread socket held at most {} bytes: it never came near its share", seen.peak));
    }
    if seen.peak as usize > share + SLACK {
        return Fail(format!("the unread socket held {} bytes, more than its share {share} and one skb", seen.peak));
    }
    if locked.is_none() && seen.after.rcvbuf as usize > share + SLACK {
        return Fail(format!("the unread socket's receive buffer is still {} (its window does not fit the share)", seen.after.rcvbuf));
    }
    if let Some(b) = locked {
        if seen.after.rcvbuf != 2 * b {
            return Fail(format!("the locked receive buffer changed: {} (set {})", seen.after.rcvbuf, 2 * b));
        }
    }
    env.diag(&tryo!(log.check(0, seen.rx.zc_bytes + seen.slow.zc_bytes)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
