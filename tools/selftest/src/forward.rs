// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The receiver as a router: a host whose queue has a memory provider
//! forwards what is not addressed to it, and TCP segments of anyone's
//! flows land in the provider's buffers like the host's own (a steering
//! rule by port alone, or RSS, sends them there). The forward path must
//! then neither crash nor corrupt what it sends on:
//!
//! - a datagram larger than the next link's MTU with DF clear is
//!   fragmented, which copies its payload: before the kernel fix
//!   (`net: do not BUG() when fragmenting an skb with unreadable frags`)
//!   `ip_frag_next()` hit `BUG()` in softirq — one packet from anywhere on
//!   the path panicked the host;
//! - with DF set (every TCP stack's default), or a TTL that runs out, the
//!   router answers with ICMP quoting the datagram, payload included. Before
//!   the kernel fix (`net: keep the checksum of the head in
//!   skb_copy_and_csum_bits()`) the quote of an unreadable datagram carried
//!   a wrong ICMP checksum: the sender dropped it, and path MTU discovery
//!   through such a router black-holed.
//!
//! Topology: nsb (the peer) -> nsa (netdevsim, header split, queue 0 with
//! or without a provider; forwarding on) -> veth, MTU 1280 -> nsc.

use std::path::Path;
use std::sync::mpsc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{in_netns, join, run, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::{self, Snmp};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("forward_unreadable_to_low_mtu", forward_unreadable_to_low_mtu)];

/// The namespace behind the router.
const NS_C: &str = "nsc";
/// The link from nsa to nsc: the smallest MTU IPv6 allows.
const LOW_MTU: u32 = 1280;
/// MAC address of nsc's end (nsa knows it: no neighbour discovery races).
const NSC_MAC: &str = "02:00:00:00:00:c2";

/// nsc behind nsa over a veth pair (`fwd0` in nsa, `fwd1` in nsc) with
/// MTU [`LOW_MTU`], nsa forwarding both families, ICMP not rate limited.
/// Gone on drop.
pub(crate) struct Router;

impl Router {
    pub(crate) fn up() -> Result<Router, String> {
        let build = std::env::var("ZCRX_BUILD").map_err(|_| "ZCRX_BUILD not set (run in the VM)")?;
        if !Path::new("/sys/module/veth").exists() {
            run("insmod", &[&format!("{build}/drivers/net/veth.ko")], "")?;
        }
        Self::down_quiet();
        let r = Router;
        run(
            "ip",
            &["-b", "-"],
            &format!(
                "netns add {NS_C}\nlink add fwd0 mtu {LOW_MTU} type veth peer name fwd1 mtu {LOW_MTU} address {NSC_MAC}\n\
                 link set fwd0 netns {NS_A}\nlink set fwd1 netns {NS_C}\n"
            ),
        )?;
        run(
            "ip",
            &["-n", NS_A, "-b", "-"],
            &format!(
                "addr add 198.51.100.1/24 dev fwd0\naddr add 2001:db8:1::1/64 dev fwd0 nodad\nlink set fwd0 up\n\
                 neigh replace 198.51.100.2 lladdr {NSC_MAC} dev fwd0 nud permanent\n\
                 neigh replace 2001:db8:1::2 lladdr {NSC_MAC} dev fwd0 nud permanent\n"
            ),
        )?;
        run(
            "ip",
            &["-n", NS_C, "-b", "-"],
            "addr add 198.51.100.2/24 dev fwd1\naddr add 2001:db8:1::2/64 dev fwd1 nodad\nlink set fwd1 up\n\
             link set lo up\nroute add 0.0.0.0/0 via 198.51.100.1\nroute add ::/0 via 2001:db8:1::1\n",
        )?;
        join(in_netns(NS_A, || {
            for (k, v) in
                [("ipv4/ip_forward", "1"), ("ipv6/conf/all/forwarding", "1"), ("ipv4/icmp_ratelimit", "0"), ("ipv6/icmp/ratelimit", "0")]
            {
                let p = format!("/proc/sys/net/{k}");
                std::fs::write(&p, v).map_err(|e| format!("{p} = {v}: {e}"))?;
            }
            Ok(())
        }))?;
        Ok(r)
    }

    fn down_quiet() {
        let p = format!("/run/netns/{NS_C}");
        if let Ok(c) = std::ffi::CString::new(p.clone()) {
            // SAFETY: a valid path; detaching a mount we created.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_file(&p);
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        Self::down_quiet();
    }
}

/// Datagrams of each class sent per round.
const K: u64 = 5;
/// Size of every datagram: over [`LOW_MTU`].
const DGRAM: usize = 1400;

/// One class of datagrams: IPv4 to nsc with DF clear (fragmented), IPv4
/// with DF set (ICMP fragmentation needed), IPv4 with TTL 1 (ICMP time
/// exceeded), IPv6 (ICMPv6 packet too big; IPv6 routers never fragment).
fn datagrams(mac: [u8; 6]) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for class in 0..4 {
        for i in 0..K {
            let v6 = class == 3;
            let mut ip = if v6 { pkt::Ip::new("2001:db8::2", "2001:db8:1::2") } else { pkt::Ip::new("192.0.2.2", "198.51.100.2") };
            ip.df = class != 0;
            ip.ttl = if class == 2 { 1 } else { 64 };
            ip.id = (class * 100 + i) as u16;
            let hdrs = if v6 { 60 } else { 40 };
            let payload: Vec<u8> = (0..DGRAM - hdrs).map(|j| (j as u64 * 31 + i) as u8).collect();
            let tcp = pkt::Tcp { seq: 1 + (i as u32) * 4096, ..pkt::Tcp::data(40000 + class as u16, 9, payload) };
            frames.push(pkt::frame(mac, v6, &pkt::tcp_datagram(&ip, &tcp), 0));
        }
    }
    frames
}

/// What one round did, from counters of every namespace and of netdevsim.
#[derive(Debug)]
struct Round {
    /// Payload packets netdevsim split and DMA'd on nsa's queue 0.
    dma_packets: u64,
    /// nsa: IPv4 datagrams fragmented, failed to (DF set included), fragments made.
    frag_oks: u64,
    frag_fails: u64,
    frag_creates: u64,
    /// nsc: IPv4 datagrams reassembled.
    reasm_oks: u64,
    /// nsb: ICMP destination unreachable, time exceeded, bad ICMP checksums.
    dest_unreach: u64,
    time_exceeded: u64,
    icmp_csum_errors: u64,
    /// nsb: ICMPv6 packet too big, bad ICMPv6 checksums.
    too_big6: u64,
    icmp6_csum_errors: u64,
}

/// Sends the datagrams; `split`: netdevsim must split every one into the
/// provider's buffers (it splits only into a provider's memory).
fn round(n: &Nsim, mac: [u8; 6], split: bool) -> Result<Round, String> {
    let (a0, b0, c0) = (Snmp::read(NS_A)?, Snmp::read(NS_B)?, Snmp::read(NS_C)?);
    let h0 = n.stats(1, 0)?;
    pkt::send_frames(NS_B, n.b_idx, datagrams(mac))?;
    // Every datagram was handled once nsa counted it and nsb got every ICMP
    // error (well or badly summed); a bound for a hang, not a deadline.
    let t0 = Instant::now();
    loop {
        let (a, b) = (Snmp::read(NS_A)?, Snmp::read(NS_B)?);
        let h = n.stats(1, 0)?.since(&h0);
        let v4 = a.since(&a0, "Ip:FragOKs")? + a.since(&a0, "Ip:FragFails")?;
        let icmp = b.since(&b0, "Icmp:InMsgs")?;
        let icmp6 = b.since(&b0, "Icmp6InPktTooBigs")? + b.since(&b0, "Icmp6InCsumErrors")?;
        if (!split || h.dma_packets >= 4 * K) && v4 >= 2 * K && icmp >= 2 * K && icmp6 >= K {
            break;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "not every datagram handled after 30 s: netdevsim {h:?}, nsa IPv4 fragmented or not {v4}, \
                 nsb ICMP {icmp}, ICMPv6 too big {icmp6} (want {}, {}, {}, {K})",
                4 * K,
                2 * K,
                2 * K
            ));
        }
        sleep(Duration::from_millis(20));
    }
    let (a, b) = (Snmp::read(NS_A)?, Snmp::read(NS_B)?);
    // Fragments nsa sent, if any, reach nsc over a veth within a softirq:
    // wait for its reassembly count to match what nsa made.
    let frag_oks = a.since(&a0, "Ip:FragOKs")?;
    let t0 = Instant::now();
    let mut c = Snmp::read(NS_C)?;
    while c.since(&c0, "Ip:ReasmOKs")? < frag_oks && t0.elapsed() < Duration::from_secs(10) {
        sleep(Duration::from_millis(20));
        c = Snmp::read(NS_C)?;
    }
    Ok(Round {
        dma_packets: n.stats(1, 0)?.since(&h0).dma_packets,
        frag_oks,
        frag_fails: a.since(&a0, "Ip:FragFails")?,
        frag_creates: a.since(&a0, "Ip:FragCreates")?,
        reasm_oks: c.since(&c0, "Ip:ReasmOKs")?,
        dest_unreach: b.since(&b0, "Icmp:InDestUnreachs")?,
        time_exceeded: b.since(&b0, "Icmp:InTimeExcds")?,
        icmp_csum_errors: b.since(&b0, "Icmp:InCsumErrors")?,
        too_big6: b.since(&b0, "Icmp6InPktTooBigs")?,
        icmp6_csum_errors: b.since(&b0, "Icmp6InCsumErrors")?,
    })
}

/// What both rounds must show: every ICMP error there and well summed.
fn check_icmp(what: &str, r: &Round) -> Result<(), String> {
    if r.icmp_csum_errors != 0 || r.icmp6_csum_errors != 0 {
        return Err(format!("{what}: the peer got ICMP errors with bad checksums: {r:?}"));
    }
    if r.dest_unreach != K || r.time_exceeded != K || r.too_big6 != K {
        return Err(format!("{what}: want {K} each of fragmentation needed, time exceeded, packet too big: {r:?}"));
    }
    Ok(())
}

fn forward_unreadable_to_low_mtu(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let router = tryo!(Router::up());
    let mac = tryo!(pkt::hwaddr(NS_A, &n.a));

    // The control: no provider, netdevsim delivers whole (readable) skbs.
    // Proves that the datagrams reach the paths under test at all.
    let plain = tryo!(round(&n, mac, false));
    env.diag(&format!("no provider: {plain:?}"));
    tryo!(check_icmp("no provider", &plain));
    if plain.frag_oks != K || plain.frag_fails != K || plain.reasm_oks != K {
        return Fail(format!("no provider: want {K} datagrams fragmented and reassembled, {K} refused (DF)"));
    }

    // The same datagrams with zcrx-rs bound to the queue: their payload is
    // in the provider's buffers, which the kernel cannot read.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 1 << 20, 7330, false, move |_z, _l| {
        let _ = go_rx.recv();
        Ok(())
    });
    let bound = round(&n, mac, true);
    let _ = go_tx.send(());
    tryo!(join(rx));
    let bound = tryo!(bound);
    env.diag(&format!("zcrx-rs bound: {bound:?}"));
    if bound.dma_packets != 4 * K {
        return Fail(format!("zcrx-rs bound: netdevsim split {} datagrams into the area, not {}", bound.dma_packets, 4 * K));
    }
    tryo!(check_icmp("zcrx-rs bound", &bound));
    if bound.frag_oks != 0 || bound.frag_creates != 0 || bound.reasm_oks != 0 || bound.frag_fails != 2 * K {
        return Fail(format!("zcrx-rs bound: want every datagram refused by fragmentation ({} FragFails, no fragment made)", 2 * K));
    }
    env.diag(&format!(
        "{} datagrams in provider memory: {K} not fragmented (dropped, counted), {} ICMP errors quoting them \
         with good checksums; {} datagrams fragmented and reassembled without a provider",
        4 * K,
        3 * K,
        plain.frag_oks
    ));
    drop(router);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
