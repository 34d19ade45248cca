// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Peers that park out-of-order data for good cannot stall another
//! connection of the queue.

use super::*;

/// A peer that parks out-of-order data cannot stall another connection
/// of the queue. An area of 64 buffers (56 for the pool); the attacker
/// opens three connections and sends each 40 segments beyond a one-byte
/// hole, never filling it (out-of-order data waits for the hole, in
/// provider buffers, up to each socket's receive buffer: together more
/// than the pool has). Then a well-behaved sender sends 1 MiB on another
/// connection, which must arrive byte-exact, all of it zero-copy, while
/// the attacker's connections stay open. Before TCP kept the pool's last
/// buffers from out-of-order data (patch 54), the parked segments took
/// them all and every segment of the new connection was dropped for want
/// of a buffer: its sender gave up. (With the reserve it still stalled
/// at times, with 32 buffers and two parkers on the debug kernel and once
/// in `make check` with 64: the buffers the receiver gave back were on a
/// CPU's skb defer list, patch 16.)
pub(super) fn ofo_parker_cannot_stall_others(env: &Env) -> Outcome {
    ofo_parkers(env, 64, 3, 40, 7402)
}

/// The same with an area of 512 buffers (448 for the pool, handed out in
/// full batches of 64 from the free list: the last batch must set the
/// reserve too) and 20 parking connections of 32 segments.
pub(super) fn ofo_parkers_cannot_stall_others_512(env: &Env) -> Outcome {
    ofo_parkers(env, 512, 20, 32, 7403)
}

/// `conns` attacker connections send `segs` segments each beyond a hole
/// into an area of `bufs` buffers; then 1 MiB on another connection must
/// arrive byte-exact and all zero-copy.
pub(super) fn ofo_parkers(env: &Env, bufs: usize, conns: u32, segs: u32, port: u16) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let mac_a = tryo!(phantom_up(&n));
    let before = tryo!(n.stats(1, 0));
    let log = tryo!(crate::devlog::DmaLog::start());
    let snmp0 = tryo!(pkt::Snmp::read(NS_A));
    let bytes = 1u64 << 20;
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let p2 = pat.clone();
    let victim = with_receiver(n.a_idx, 0, bufs * zcrx::dev::page_size(), port, true, move |z, l| {
        // The attacker's connections come first; they stay open (and
        // unread) until the end.
        let mut parkers = Vec::new();
        let s = loop {
            let (s, peer) = l.accept().map_err(|e| format!("accept: {e}"))?;
            let ip = peer.ip().to_canonical();
            if ip == PHANTOM4.parse::<IpAddr>().unwrap() || ip == PHANTOM6.parse::<IpAddr>().unwrap() {
                parkers.push(s);
            } else {
                break s;
            }
        };
        let rx = crate::net::receive(z, &s, &p2, None)?;
        Ok((rx, parkers.len()))
    });
    let b_idx = n.b_idx;
    let seed = 0x0f0_u64 ^ u64::from(port);
    let attacker = in_netns(NS_B, move || {
        let mut a = Attacker::new(b_idx, mac_a, seed)?;
        let mut sessions = Vec::new();
        for _ in 0..conns {
            let s = a.handshake("park", port, false).ok_or("the victim did not answer the attacker's SYN")?;
            for i in 0..segs {
                let payload = a.payload(1400);
                let t = s.seg(1 + i * 1400, ACK | PSH, payload);
                a.send_seg("park", &s, &t);
            }
            sessions.push(s);
        }
        Ok((a, sessions))
    });
    let (a, sessions) = tryo!(join(attacker));
    // every segment was split into the area or dropped for want of a
    // buffer: netdevsim saw them all
    tryo!(crate::nsim::wait_stats(Duration::from_secs(10), "netdevsim saw every segment of the attacker", |st| {
        let d = st.since(&before);
        d.dma_packets + d.drop_no_buf >= u64::from(conns * segs)
    }));
    let parked = tryo!(pkt::Snmp::read(NS_A).and_then(|s| s.since(&snmp0, "TcpExt:TCPOFOQueue")));
    let t0 = Instant::now();
    // A bound for a stall (writes without progress), not a deadline: with
    // 32 buffers the debug kernel took 75 s for the MiB, in retransmissions.
    let sent = join(crate::net::sender_timeout(crate::net::addr_a(true, port), bytes, pat, 0, Duration::from_secs(120)));
    let r = join(victim);
    let took = t0.elapsed();
    // the attacker's sessions end (their queues go) before anything can
    // return: a closed socket holding only out-of-order data lingers as an
    // orphan, with its buffers, until the phantom answers
    let mut a = a;
    for s in &sessions {
        a.reset("park", s, segs * 1400 + 1);
    }
    let snmp = tryo!(pkt::Snmp::read(NS_A));
    let d = tryo!(n.stats(1, 0)).since(&before);
    let (rx, parkers) = tryo!(r.map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err())));
    let sent = tryo!(sent);
    env.diag(&format!(
        "{bufs} buffers; {parkers} connections sent {} segments beyond a hole (TCPOFOQueue +{parked}, TCPOFODrop +{}); then \
         {} byte-exact on another connection in {:.1} s, zero-copy {} copied {}; netdevsim split {} packets, \
         dropped {} for want of a buffer",
        conns * segs,
        tryo!(snmp.since(&snmp0, "TcpExt:TCPOFODrop")),
        mib(rx.bytes),
        took.as_secs_f64(),
        mib(rx.zc_bytes),
        mib(rx.copy_bytes),
        d.dma_packets,
        d.drop_no_buf
    ));
    if sent != bytes || rx.bytes != bytes {
        return Fail(format!("sent {sent}, received {} of {bytes}", rx.bytes));
    }
    if rx.zc_bytes != bytes {
        return Fail(format!("{} of {bytes} bytes zero-copy", rx.zc_bytes));
    }
    // The victim's records in writes netdevsim logged (the parked
    // segments' writes are never received: passed over).
    env.diag(&tryo!(log.check(0, rx.zc_bytes)));
    drop(log);
    // The test proves something only if the attacker did park data.
    // (at least half the pool's share)
    if parkers != conns as usize || parked < ((bufs - bufs / 8) / 2) as u64 {
        return Fail(format!("{parkers} attacker connections, {parked} segments parked out of order"));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
