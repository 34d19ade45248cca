// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Checksums and padding in provider memory. A NIC with header split
//! writes the whole frame after the headers to the data buffers: the
//! payload and whatever follows the IP datagram (the Ethernet padding of
//! a short frame, or bytes a peer appended), which the stack then trims
//! there. And many NICs report CHECKSUM_COMPLETE, the sum of the frame,
//! instead of a verdict: GRO and TCP then check the sum, and trimming
//! unreadable padding would need the sum of bytes the CPU cannot read.
//! netdevsim does both (series patch 39: the padding always,
//! CHECKSUM_COMPLETE with `hds_csum_complete`).
//!
//! `padding_and_csum_complete` sends crafted segments (IPv4 and IPv6) to
//! the provider-bound queue and asserts, from netdevsim's counters, that
//! each was split with its padding in provider memory, and from the
//! stack's, what became of it: trimmed and received with
//! CHECKSUM_UNNECESSARY; received, or counted as a checksum error, with
//! CHECKSUM_COMPLETE; dropped and counted (IPv4 `InDiscards`, IPv6
//! `InHdrErrors`) when
//! CHECKSUM_COMPLETE covers unreadable padding (the stack cannot take the
//! padding's sum out). No warning on any path (the run's splat scan).
//! `csum_complete_stream` receives a stream with CHECKSUM_COMPLETE on
//! every packet: byte-exact, all zero-copy, every record in a write
//! netdevsim logged.

use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};

use crate::common::{ensure_loaded, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{self, join, with_receiver, HdsStats, Nsim, NS_A, NS_B};
use crate::pkt::{self, Ip, Tcp};
use crate::stream::{check_zc, one_stream, report};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("padding_and_csum_complete", padding_and_csum_complete), ("csum_complete_stream", csum_complete_stream)];

/// What the stack did with one crafted segment.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// It reached TCP (`Tcp:InSegs`), checksum right.
    Received,
    /// TCP counted a checksum error (`Tcp:InCsumErrors`).
    CsumError,
    /// IP dropped it before TCP, in pskb_trim_rcsum() (IPv4 counts it in
    /// `Ip:InDiscards`, IPv6 in `Ip6InHdrErrors`).
    Dropped,
}

fn padding_and_csum_complete(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let mac_a = tryo!(pkt::hwaddr(NS_A, &n.a));
    // A provider bound to the queue (netdevsim splits only into a
    // provider's buffers); the segments go to a port nobody listens on,
    // so TCP answers each that reaches it with a reset.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let bound = with_receiver(n.a_idx, 0, 4 << 20, 7450, true, move |_z, _l| {
        let _ = done_rx.recv_timeout(Duration::from_secs(300));
        Ok(())
    });
    let payload = 300usize;
    let pad = 200usize;
    // (what, CHECKSUM_COMPLETE, padding, wrong TCP checksum, readable
    // (hds_copybreak: the whole frame in the header buffer), verdict)
    let cases = [
        ("padding, CHECKSUM_UNNECESSARY", false, pad, false, false, Verdict::Received),
        ("no padding, CHECKSUM_COMPLETE", true, 0, false, false, Verdict::Received),
        ("no padding, CHECKSUM_COMPLETE, TCP checksum wrong", true, 0, true, false, Verdict::CsumError),
        ("padding, CHECKSUM_COMPLETE", true, pad, false, false, Verdict::Dropped),
        // the padding readable: the stack takes its sum out of the
        // device's, which must have covered it (else a checksum error)
        ("padding readable, CHECKSUM_COMPLETE", true, pad, false, true, Verdict::Received),
    ];
    let mut lines = Vec::new();
    let r = (|| -> Result<(), String> {
        for v6 in [false, true] {
            let ip = if v6 { Ip::new("2001:db8::2", "2001:db8::1") } else { Ip::new("192.0.2.2", "192.0.2.1") };
            let fam = if v6 { "IPv6" } else { "IPv4" };
            for (k, &(what, complete, pad, bad, readable, want)) in cases.iter().enumerate() {
                Nsim::csum_complete(1, complete)?;
                Nsim::copybreak(1, if readable { 1024 } else { 0 })?;
                let tcp = Tcp { bad_csum: bad, ..Tcp::data(41000 + k as u16, 9, vec![0x5a; payload]) };
                let d = pkt::tcp_datagram(&ip, &tcp);
                let before = n.stats(1, 0)?;
                let snmp0 = pkt::Snmp::read(NS_A)?;
                pkt::send_frames(NS_B, n.b_idx, vec![pkt::frame(mac_a, v6, &d, pad)])?;
                let split = wait_split(&n, &before)?;
                // netdevsim wrote the payload and the padding to provider
                // memory (or left both in the header buffer), and said how
                // it summed the packet.
                let (packets, bytes) = if readable { (0, 0) } else { (1, (payload + pad) as u64) };
                if split.dma_packets != packets || split.dma_bytes != bytes {
                    return Err(format!(
                        "{fam} {what}: netdevsim split {} packets, {} bytes (want {packets}, {bytes})",
                        split.dma_packets, split.dma_bytes
                    ));
                }
                if split.csum_complete != u64::from(complete) {
                    return Err(format!("{fam} {what}: {} packets with CHECKSUM_COMPLETE", split.csum_complete));
                }
                let got = wait_verdict(&snmp0, v6, want).map_err(|e| format!("{fam} {what}: {e}"))?;
                if got != want {
                    return Err(format!("{fam} {what}: the stack's verdict was {got:?}, expected {want:?}"));
                }
                lines.push(format!("{fam} {what}: {got:?}"));
            }
        }
        Ok(())
    })();
    let _ = Nsim::csum_complete(1, false);
    let _ = Nsim::copybreak(1, 0);
    let _ = done_tx.send(());
    let b = join(bound);
    tryo!(r);
    tryo!(b);
    env.diag(&format!("{payload}-byte segments, {pad} bytes of padding written to provider memory after them: {}", lines.join("; ")));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// netdevsim's counters once it split one packet on queue 0 since
/// `before`, or delivered one with CHECKSUM_COMPLETE (a bound, not a
/// sleep).
fn wait_split(n: &Nsim, before: &HdsStats) -> Result<HdsStats, String> {
    let t0 = Instant::now();
    loop {
        let d = n.stats(1, 0)?.since(before);
        if d.dma_packets + d.csum_complete > 0 || t0.elapsed() > Duration::from_secs(10) {
            return Ok(d);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The stack's verdict on the one segment sent since `snmp0`, as soon as
/// it is `want`; else, once 10 s have passed, what it was. (Counters only
/// grow: a checksum error counts in InSegs first, then in InCsumErrors.)
fn wait_verdict(snmp0: &pkt::Snmp, v6: bool, want: Verdict) -> Result<Verdict, String> {
    let discards = if v6 { "Ip6InHdrErrors" } else { "Ip:InDiscards" };
    let t0 = Instant::now();
    loop {
        let s = pkt::Snmp::read(NS_A)?;
        let segs = s.since(snmp0, "Tcp:InSegs")?;
        let csum = s.since(snmp0, "Tcp:InCsumErrors")?;
        let disc = s.since(snmp0, discards)?;
        let v = match (segs, csum, disc) {
            (0, 0, 0) => None,
            (1, 0, 0) => Some(Verdict::Received),
            (1, 1, 0) => Some(Verdict::CsumError),
            (0, 0, 1) => Some(Verdict::Dropped),
            _ => return Err(format!("InSegs +{segs}, InCsumErrors +{csum}, {discards} +{disc} for one segment")),
        };
        if v == Some(want) {
            return Ok(want);
        }
        if t0.elapsed() > Duration::from_secs(10) {
            return v.ok_or(format!("no verdict from the stack in 10 s; counters that moved: {}", s.moved(snmp0)));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stream with CHECKSUM_COMPLETE on every packet, over IPv4 and over
/// IPv6: the sender's TSO and GSO off, so that each segment is a frame of
/// its own (netdevsim reports CHECKSUM_COMPLETE only for those, with the
/// checksum the sender left to its NIC filled in); GRO on the receiver
/// checks the device's sum without reading the payload. Byte-exact, all
/// zero-copy, every record in a logged write, and not one checksum error
/// (a wrong sum would be a retransmission that byte checks cannot see).
fn csum_complete_stream(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(net::ethtool_in(NS_B, &["-K", &n.b, "tso", "off", "gso", "off"]));
    tryo!(Nsim::csum_complete(1, true));
    let r = (|| -> Result<(), String> {
        for v6 in [false, true] {
            let fam = if v6 { "IPv6" } else { "IPv4" };
            let bytes = env.bytes(8 << 20);
            let snmp0 = pkt::Snmp::read(NS_A)?;
            let log = DmaLog::start()?;
            let t0 = Instant::now();
            let port = 7451 + u16::from(v6);
            let (rx, b, a, st) = one_stream(&n, bytes, 16 << 20, 0, 0, v6, port, u64::from(port))?;
            let d = a.since(&b);
            env.diag(&format!("{fam}: {}", report(&rx, &st, d, t0.elapsed().as_secs_f64())));
            check_zc(&format!("{fam} CHECKSUM_COMPLETE stream"), &rx, &st, d)?;
            if d.csum_complete == 0 || d.csum_complete != d.dma_packets {
                return Err(format!(
                    "{fam}: netdevsim delivered {} of its {} split packets with CHECKSUM_COMPLETE: want all",
                    d.csum_complete, d.dma_packets
                ));
            }
            let errs = pkt::Snmp::read(NS_A)?.since(&snmp0, "Tcp:InCsumErrors")?;
            if errs != 0 {
                return Err(format!("{fam}: TCP counted {errs} checksum errors: the device's sum was wrong"));
            }
            env.diag(&format!(
                "{fam}: {} packets with CHECKSUM_COMPLETE, no checksum error; {}",
                d.csum_complete,
                log.check(0, rx.zc_bytes)?
            ));
        }
        Ok(())
    })();
    let _ = Nsim::csum_complete(1, false);
    tryo!(r);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
