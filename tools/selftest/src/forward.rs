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
//! - a datagram routed back out of the netdevsim port it came in on: the
//!   NIC transmits from net_iovs only when they are a dmabuf bound for TX
//!   on it. Before the kernel fix (`net: check every frag of an unreadable
//!   skb before transmit`) the core handed the driver the provider's rx
//!   buffers, which a real NIC reads through another mapping (netdevsim
//!   refuses them and counts a TX drop). IPv6 answers such a datagram with
//!   a Redirect quoting it: before the fix (`ipv6: ndisc: quote only the
//!   readable part of a redirected packet`) the quote went out with the
//!   uninitialised bytes of a fresh skb where the payload could not be
//!   copied.
//!
//! Topology: nsb (the peer) -> nsa (netdevsim, header split, queue 0 with
//! or without a provider; forwarding on) -> veth, MTU 1280 -> nsc; and
//! nsa -> back out of its netdevsim port -> nsb.

use std::path::Path;
use std::sync::mpsc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{in_netns, join, run, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::{self, Snmp};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("forward_unreadable_to_low_mtu", forward_unreadable_to_low_mtu),
    ("forward_unreadable_into_ipv6_tunnel", forward_unreadable_into_ipv6_tunnel),
    ("forward_unreadable_back_out", forward_unreadable_back_out),
];

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

/// The IPv4 prefix nsa routes into its IPv6 VXLAN tunnel to nsc.
const VX_NET: &str = "198.18.0";

/// [`K`] IPv4 TCP datagrams of [`DGRAM`] bytes with DF clear, from nsb to
/// the far end of nsa's IPv6 VXLAN tunnel.
fn vx_datagrams(mac: [u8; 6]) -> Vec<Vec<u8>> {
    (0..K)
        .map(|i| {
            let mut ip = pkt::Ip::new("192.0.2.2", &format!("{VX_NET}.2"));
            ip.df = false;
            ip.id = (500 + i) as u16;
            let payload: Vec<u8> = (0..DGRAM - 40).map(|j| (j as u64 * 17 + i) as u8).collect();
            let tcp = pkt::Tcp { seq: 1 + (i as u32) * 4096, ..pkt::Tcp::data(41000, 9, payload) };
            pkt::frame(mac, false, &pkt::tcp_datagram(&ip, &tcp), 0)
        })
        .collect()
}

/// One batch of [`vx_datagrams`], after nsa forgot the path MTUs it
/// learnt (a refusal teaches it the tunnel's, and from then on IPv4
/// fragments the inner datagrams before they reach the tunnel): netdevsim's
/// split packets, and nsa's IPv6 fragmentation counters (fragmented,
/// refused, fragments made) and the inner datagrams IPv4 fragmented or
/// refused to.
fn vx_round(n: &Nsim, mac: [u8; 6]) -> Result<VxRound, String> {
    run("ip", &["-n", NS_A, "route", "flush", "cache"], "")?;
    run("ip", &["-n", NS_A, "-6", "route", "flush", "cache"], "")?;
    let a0 = Snmp::read(NS_A)?;
    let h0 = n.stats(1, 0)?;
    let d0 = tx_dropped(NS_A, "vx6")?;
    pkt::send_frames(NS_B, n.b_idx, vx_datagrams(mac))?;
    let t0 = Instant::now();
    loop {
        let a = Snmp::read(NS_A)?;
        let r = VxRound {
            dma: n.stats(1, 0)?.since(&h0).dma_packets,
            oks: a.since(&a0, "Ip6FragOKs")?,
            fails: a.since(&a0, "Ip6FragFails")?,
            creates: a.since(&a0, "Ip6FragCreates")?,
            v4: a.since(&a0, "Ip:FragOKs")? + a.since(&a0, "Ip:FragFails")?,
            tx_dropped: tx_dropped(NS_A, "vx6")? - d0,
        };
        if r.oks + r.fails + r.v4 + r.tx_dropped >= K || t0.elapsed() > Duration::from_secs(30) {
            return Ok(r);
        }
        sleep(Duration::from_millis(20));
    }
}

/// What one [`vx_round`] did.
#[derive(Debug)]
struct VxRound {
    /// Datagrams netdevsim split into the area.
    dma: u64,
    /// nsa: IPv6 datagrams fragmented, refused, fragments made.
    oks: u64,
    fails: u64,
    creates: u64,
    /// nsa: inner IPv4 datagrams fragmented or refused before the tunnel.
    v4: u64,
    /// Datagrams the tunnel device dropped before it encapsulated them.
    tx_dropped: u64,
}

/// The IPv6 half of fragmentation: IPv6 routers never fragment (nsa
/// answers a forwarded IPv6 datagram over the MTU with packet too big,
/// [`forward_unreadable_to_low_mtu`]), and a locally made datagram with
/// unreadable frags cannot exist; what is left is an encapsulation that
/// nsa makes itself. nsa routes an IPv4 prefix into a VXLAN tunnel over
/// IPv6 whose MTU (1500) is over what the link under it takes (1280; no
/// `dev` given, so VXLAN does not clamp its MTU to the link's), and nsb
/// sends datagrams with DF clear there.
///
/// - Readable (no provider): VXLAN lets IPv4 without DF through, and
///   `ip6_fragment()` refuses each outer datagram, over the link's MTU,
///   before it copies anything: VXLAN's datagrams do not have `ignore_df`
///   (`Ip6FragFails`, none fragmented).
/// - Unreadable (zcrx-rs bound): the tunnel device cannot transmit
///   net_iovs, and the core drops them at its transmit (series patch 19),
///   before any encapsulation: `ip6_fragment()` never sees them.
///
/// What does set `ignore_df` and would reach `ip6_frag_next()` (whose
/// copy series patch 13 makes fail instead of `BUG()`): L2TP, which does
/// not encrypt, behind the same transmit check; netfilter's
/// defragmentation, IPVS and OVS, none of them in our test kernels.
/// (WireGuard and OpenVPN set it after encrypting, which fails first on
/// unreadable frags.)
fn forward_unreadable_into_ipv6_tunnel(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    tryo!(crate::tunnel::load_udp_tunnels());
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let router = tryo!(Router::up());
    tryo!(run(
        "ip",
        &["-n", NS_A, "-b", "-"],
        &format!(
            "link add vx6 type vxlan id 43 local 2001:db8:1::1 remote 2001:db8:1::2 dstport 4790\n\
             link set vx6 mtu 1500\naddr add {VX_NET}.1/24 dev vx6\nlink set vx6 up\n\
             neigh replace {VX_NET}.2 lladdr 02:00:00:00:00:d2 dev vx6 nud permanent\n"
        ),
    ));
    let mac = tryo!(pkt::hwaddr(NS_A, &n.a));
    // Readable, every datagram reaches ip6_fragment(), which refuses it.
    let plain = tryo!(vx_round(&n, mac));
    env.diag(&format!("no provider: {plain:?}"));
    if plain.fails != K || plain.oks != 0 || plain.creates != 0 {
        return Fail(format!("no provider: want ip6_fragment() to refuse all {K} tunnel datagrams and fragment none"));
    }
    // Unreadable, the tunnel device (no netmem TX) drops them before it
    // encapsulates anything (series patch 19's check in the core), so
    // ip6_fragment() never sees them.
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 1 << 20, 7330, false, move |_z, _l| {
        let _ = go_rx.recv();
        Ok(())
    });
    let bound = vx_round(&n, mac);
    let _ = go_tx.send(());
    tryo!(join(rx));
    let bound = tryo!(bound);
    env.diag(&format!("zcrx-rs bound: {bound:?}"));
    if bound.dma != K {
        return Fail(format!("zcrx-rs bound: netdevsim split {} datagrams into the area, not {K}", bound.dma));
    }
    if bound.tx_dropped != K || bound.oks + bound.fails + bound.creates + bound.v4 != 0 {
        return Fail(format!("zcrx-rs bound: want all {K} dropped by the tunnel device before encapsulation, none at fragmentation"));
    }
    drop(router);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Where nsa routes back out of its netdevsim port (to nsb's MAC).
pub(crate) const BACK4: &str = "203.0.113.5";
pub(crate) const BACK6: &str = "2001:db8:3::5";
/// Datagrams per family per round, and their size.
const BACK_K: usize = 5;
const BACK_DGRAM: usize = 1000;

/// The datagrams of [`forward_unreadable_back_out`]: `BACK_K` per family,
/// from nsb (on-link, so IPv6 answers with a Redirect) to the addresses nsa
/// routes back out of the same port; every byte of each payload differs
/// from its neighbours' and from zero.
fn back_datagrams(round: u32) -> Vec<(bool, Vec<u8>)> {
    let mut d = Vec::new();
    for v6 in [false, true] {
        for i in 0..BACK_K {
            let mut ip = if v6 { pkt::Ip::new("2001:db8::2", BACK6) } else { pkt::Ip::new("192.0.2.2", BACK4) };
            ip.id = (round * 100 + i as u32) as u16;
            let hdrs = if v6 { 60 } else { 40 };
            let payload: Vec<u8> = (0..BACK_DGRAM - hdrs).map(|j| 1 + ((j * 7 + i * 13 + round as usize) % 251) as u8).collect();
            let tcp = pkt::Tcp { seq: round * 1_000_000 + (i as u32) * 4096, ..pkt::Tcp::data(41000, 9, payload) };
            d.push((v6, pkt::tcp_datagram(&ip, &tcp)));
        }
    }
    d
}

/// What nsb saw of one round: datagrams that came back, and the quotes of
/// IPv6 Redirects (the Redirected Header option's data).
#[derive(Debug, Default)]
struct Back {
    returned: usize,
    quotes: Vec<Vec<u8>>,
}

/// Captures on nsb's device for `dur`: datagrams to [`BACK4`]/[`BACK6`] and
/// ICMPv6 Redirects, not counting what nsb itself sends. `ready` hears
/// once the socket is bound.
fn back_capture(b_idx: u32, dur: Duration, ready: mpsc::Sender<()>) -> std::thread::JoinHandle<Result<Back, String>> {
    in_netns(NS_B, move || {
        let fd = pkt::packet_socket(b_idx)?;
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let sl = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        let _ = ready.send(());
        let (b4, b6): ([u8; 4], [u8; 16]) =
            (BACK4.parse::<std::net::Ipv4Addr>().unwrap().octets(), BACK6.parse::<std::net::Ipv6Addr>().unwrap().octets());
        let mut back = Back::default();
        let mut buf = vec![0u8; 2048];
        let t0 = Instant::now();
        while t0.elapsed() < dur {
            let mut p = libc::pollfd { fd: raw, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 20) };
            loop {
                let mut from = sa;
                let mut fl = sl;
                // SAFETY: `buf` and `from` are writable for the lengths given.
                let n = unsafe {
                    libc::recvfrom(raw, buf.as_mut_ptr().cast(), buf.len(), 0, (&mut from as *mut libc::sockaddr_ll).cast(), &mut fl)
                };
                if n <= 0 {
                    break;
                }
                if from.sll_pkttype == libc::PACKET_OUTGOING {
                    continue;
                }
                let f = &buf[..n as usize];
                let Some(et) = f.get(12..14) else { continue };
                match u16::from_be_bytes([et[0], et[1]]) {
                    0x0800 if f.get(30..34) == Some(&b4[..]) => back.returned += 1,
                    0x86dd if f.get(38..54) == Some(&b6[..]) => back.returned += 1,
                    // ICMPv6 (next header 58) type 137: a Redirect
                    0x86dd if f.get(20) == Some(&58) && f.get(54) == Some(&137) => {
                        // options after type, code, sum, reserved, target, destination
                        let mut o = &f[54 + 40..];
                        while o.len() >= 8 && o[1] != 0 {
                            let len = usize::from(o[1]) * 8;
                            if o[0] == 4 && len <= o.len() {
                                back.quotes.push(o[8..len].to_vec());
                            }
                            o = &o[len.min(o.len())..];
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(back)
    })
}

/// netdevsim's count of TX skbs it refused because it could not read their
/// frags (device 1's port: nsa's).
pub(crate) fn tx_refused() -> Result<u64, String> {
    let p = "/sys/kernel/debug/netdevsim/netdevsim1/ports/0/tx_unreadable_refused";
    let t = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
    t.trim().parse().map_err(|e| format!("{p}: {t:?}: {e}"))
}

/// One round of [`forward_unreadable_back_out`]: sends the datagrams and
/// returns what nsa, nsb and netdevsim saw.
fn back_round(n: &Nsim, mac: [u8; 6], sent: &[(bool, Vec<u8>)]) -> Result<BackRound, String> {
    let a0 = Snmp::read(NS_A)?;
    let h0 = n.stats(1, 0)?;
    let drop0 = tx_refused()?;
    let core0 = tx_dropped(NS_A, &n.a)?;
    let (ready_tx, ready_rx) = mpsc::channel();
    let cap = back_capture(n.b_idx, Duration::from_secs(3), ready_tx);
    if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        return Err(join(cap).err().unwrap_or_else(|| "the capture did not start".into()));
    }
    pkt::send_frames(NS_B, n.b_idx, sent.iter().map(|(v6, d)| pkt::frame(mac, *v6, d, 0)).collect())?;
    let back = join(cap)?;
    let a = Snmp::read(NS_A)?;
    let drop1 = tx_refused()?;
    Ok(BackRound {
        back,
        fwd4: a.since(&a0, "Ip:ForwDatagrams")?,
        fwd6: a.since(&a0, "Ip6OutForwDatagrams")?,
        refused: drop1 - drop0,
        tx_dropped: tx_dropped(NS_A, &n.a)? - core0,
        split: n.stats(1, 0)?.since(&h0).dma_packets,
    })
}

/// What one round of [`forward_unreadable_back_out`] saw.
struct BackRound {
    back: Back,
    /// nsa's forwarded datagrams, IPv4 and IPv6.
    fwd4: u64,
    fwd6: u64,
    /// TX skbs netdevsim refused as unreadable (its own count).
    refused: u64,
    /// nsa's port's TX drops, the core's and the driver's.
    tx_dropped: u64,
    /// Datagrams netdevsim split into the area.
    split: u64,
}

/// TX drops of `dev` in `ns` (`ip -s -o link`: the driver's and the
/// core's).
fn tx_dropped(ns: &str, dev: &str) -> Result<u64, String> {
    let out = run("ip", &["-n", ns, "-s", "-o", "link", "show", "dev", dev], "")?;
    let parts: Vec<&str> = out.split('\\').map(str::trim).collect();
    let i = parts.iter().position(|p| p.starts_with("TX:")).ok_or(format!("no TX counters in: {out}"))?;
    let v: Vec<u64> = parts.get(i + 1).unwrap_or(&"").split_whitespace().filter_map(|x| x.parse().ok()).collect();
    match v[..] {
        [_, _, _, dropped, ..] => Ok(dropped),
        _ => Err(format!("cannot read TX counters in: {out}")),
    }
}

/// netdevsim transmits from net_iovs (netmem TX) only where DMA addresses
/// are physical addresses of coherent memory: no IOMMU, no forced bounce
/// buffers. Elsewhere the core drops every unreadable skb for it, and
/// [`forward_unreadable_back_out`] would prove nothing.
fn netdevsim_has_netmem_tx() -> Result<(), String> {
    let groups = std::fs::read_dir("/sys/kernel/iommu_groups").map(|d| d.count()).unwrap_or(0);
    let cmdline = std::fs::read_to_string("/proc/cmdline").map_err(|e| format!("/proc/cmdline: {e}"))?;
    if groups != 0 || cmdline.contains("swiotlb=force") {
        return Err(format!(
            "netdevsim has no netmem TX here ({groups} IOMMU groups, swiotlb forced: {})",
            cmdline.contains("swiotlb=force")
        ));
    }
    Ok(())
}

/// Every Redirect quote must be a prefix of one datagram sent (the quote
/// starts at its IPv6 header), never longer than the datagram and never
/// empty. Returns the quoted lengths.
fn check_quotes(what: &str, back: &Back, sent: &[(bool, Vec<u8>)]) -> Result<Vec<usize>, String> {
    let mut lens = Vec::new();
    for q in &back.quotes {
        let Some((_, d)) = sent.iter().filter(|(v6, _)| *v6).find(|(_, d)| q.len() >= 48 && d.get(..48) == q.get(..48)) else {
            return Err(format!("{what}: a Redirect quotes {} bytes that start like no datagram sent", q.len()));
        };
        if q.len() > d.len() + 7 {
            return Err(format!("{what}: a Redirect quotes {} bytes of a {}-byte datagram", q.len(), d.len()));
        }
        let n = q.len().min(d.len());
        if let Some(i) = (0..n).find(|&i| q[i] != d[i]) {
            let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
            return Err(format!(
                "{what}: a Redirect quotes {} bytes of the datagram, {} of them differ; from byte {i}: {} \
                 where the datagram has {}",
                q.len(),
                (0..n).filter(|&i| q[i] != d[i]).count(),
                hex(&q[i..n.min(i + 16)]),
                hex(&d[i..n.min(i + 16)])
            ));
        }
        lens.push(q.len());
    }
    Ok(lens)
}

/// Makes nsa route [`BACK4`]'s /24 and [`BACK6`] back out of its
/// netdevsim port, to nsb's MAC, forwarding on (IPv4 redirects off, IPv6
/// ones sent from a link-local address that is not tentative).
pub(crate) fn back_out_up(n: &Nsim) -> Result<(), String> {
    let mac_b = pkt::hwaddr_str(NS_B, &n.b)?;
    run(
        "ip",
        &["-n", NS_A, "-b", "-"],
        &format!(
            // the automatic link-local address waits for DAD
            "addr add fe80::a/64 dev {a} nodad\n\
             route add 203.0.113.0/24 via 192.0.2.2 dev {a}\nroute add 2001:db8:3::/64 dev {a}\n\
             neigh replace 192.0.2.2 lladdr {mac_b} dev {a} nud permanent\n\
             neigh replace 2001:db8::2 lladdr {mac_b} dev {a} nud permanent\n\
             neigh replace {BACK6} lladdr {mac_b} dev {a} nud permanent\n",
            a = n.a
        ),
    )?;
    let a_dev = n.a.clone();
    join(in_netns(NS_A, move || {
        for (k, v) in [
            ("ipv4/ip_forward".to_string(), "1"),
            ("ipv6/conf/all/forwarding".to_string(), "1"),
            ("ipv4/conf/all/send_redirects".to_string(), "0"),
            (format!("ipv4/conf/{a_dev}/send_redirects"), "0"),
        ] {
            let p = format!("/proc/sys/net/{k}");
            std::fs::write(&p, v).map_err(|e| format!("{p} = {v}: {e}"))?;
        }
        Ok(())
    }))
}

/// A router whose route for a destination leads back out of the port a
/// datagram came in on, with a provider bound to that port's queue.
/// Without a provider (the control) each datagram goes back out whole and
/// IPv6 quotes it in a Redirect. With zcrx-rs bound, the payload is in the
/// provider's buffers: nsa must forward nothing (netdevsim, like bnxt or
/// mlx5, transmits from net_iovs, but only from a dmabuf bound for TX on
/// it), and netdevsim must refuse none (the core keeps such skbs from it),
/// and every Redirect must quote only bytes of the datagram.
fn forward_unreadable_back_out(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    tryo!(netdevsim_has_netmem_tx());
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let mac = tryo!(pkt::hwaddr(NS_A, &n.a));
    tryo!(back_out_up(&n));
    let k = BACK_K as u64;

    // The control: no provider, readable skbs.
    let sent = back_datagrams(1);
    let r = tryo!(back_round(&n, mac, &sent));
    let lens = tryo!(check_quotes("no provider", &r.back, &sent));
    env.diag(&format!(
        "no provider: forwarded {} IPv4 + {} IPv6, {} came back to nsb, TX drops {} (netdevsim refused {}), \
         Redirects quoting {lens:?} bytes",
        r.fwd4, r.fwd6, r.back.returned, r.tx_dropped, r.refused
    ));
    if r.fwd4 != k || r.fwd6 != k || r.back.returned != 2 * BACK_K || r.tx_dropped != 0 || lens.is_empty() {
        return Fail(format!("no provider: want {k} + {k} forwarded and back at nsb, no TX drop, a Redirect"));
    }

    // Redirects to one peer are rate limited (a token a second, a burst
    // of six): the control spent five.
    sleep(Duration::from_secs(3));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 1 << 20, 7331, false, move |_z, _l| {
        let _ = go_rx.recv();
        Ok(())
    });
    let sent = back_datagrams(2);
    let r = back_round(&n, mac, &sent);
    let _ = go_tx.send(());
    tryo!(join(rx));
    let r = tryo!(r);
    let quotes = check_quotes("zcrx-rs bound", &r.back, &sent);
    env.diag(&format!(
        "zcrx-rs bound: {} datagrams split into the area, forwarded {} IPv4 + {} IPv6, {} came back to nsb, \
         TX drops {} (netdevsim refused {}), Redirects: {}",
        r.split,
        r.fwd4,
        r.fwd6,
        r.back.returned,
        r.tx_dropped,
        r.refused,
        match &quotes {
            Ok(l) => format!("quoting {l:?} bytes"),
            Err(e) => e.clone(),
        }
    ));
    if r.split != 2 * k {
        return Fail(format!("zcrx-rs bound: netdevsim split {} datagrams into the area, not {}", r.split, 2 * k));
    }
    if r.fwd4 != k || r.fwd6 != k {
        return Fail(format!("zcrx-rs bound: want {k} + {k} datagrams through the forward path"));
    }
    let mut bad = Vec::new();
    if r.refused != 0 {
        bad.push(format!("the core handed netdevsim {} skbs of provider rx buffers to transmit (it refused them)", r.refused));
    }
    if r.back.returned != 0 {
        bad.push(format!("{} datagrams in provider memory were transmitted", r.back.returned));
    }
    // Every datagram dropped at transmit, by the core or the driver; not
    // lost on the way there.
    if r.tx_dropped != 2 * k {
        bad.push(format!("{} TX drops on nsa's port, not {}", r.tx_dropped, 2 * k));
    }
    match quotes {
        Err(e) => bad.push(e),
        Ok(l) if l.is_empty() => bad.push("no Redirect came (the quote is not tested)".into()),
        Ok(_) => {}
    }
    if !bad.is_empty() {
        return Fail(format!("zcrx-rs bound: {}", bad.join("; ")));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
