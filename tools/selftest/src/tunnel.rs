// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Tunnels: a NIC with header split finds the TCP header inside the
//! tunnels it knows and splits there (netdevsim: IPIP, IPv6 in IPv6, GRE,
//! and VXLAN or GENEVE on the UDP ports the stack gave it), so the payload
//! of a TCP flow carried by a tunnel that the host decapsulates lands in
//! the provider's buffers like any other. The decapsulation paths then
//! handle unreadable skbs: their checksums (GRE's, the outer UDP's, the
//! inner TCP's, from the NIC's `csum_level`), GRO of tunnelled flows, the
//! pulls of the outer headers.
//!
//! `tunnels_zero_copy` sends a stream through each tunnel from nsb to nsa
//! and receives it with RECV: byte-exact, every byte zero-copy, and
//! netdevsim's own counter shows it split at least that many payload
//! bytes into the area. The remote fuzzer (`remote.rs`) sends hostile
//! segments through the same tunnels.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::Pattern;

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{join, receive, run, sender, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::{self, Csum, Ip, Tcp};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("tunnels_zero_copy", tunnels_zero_copy), ("tunnel_checksums", tunnel_checksums)];

/// One tunnel between nsa and nsb over the netdevsim pair.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tunnel {
    /// The device's name, on both sides.
    pub name: &'static str,
    /// What it is: `ip link` type and the outer family.
    pub what: &'static str,
    /// The victim's (nsa's) inner address and the peer's (nsb's).
    pub a: &'static str,
    pub b: &'static str,
    /// Inner prefix length.
    pub plen: u8,
    /// Its outer encapsulation, for frames crafted by hand.
    pub encap: Encap,
}

/// How a tunnel wraps an inner IP datagram (`pkt::encap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encap {
    /// IP protocol 4 or 41 over IPv4 or IPv6.
    Ip { v6: bool },
    /// GRE over IPv4 with a checksum and key 7.
    GreCsumKey,
    /// VXLAN (VNI 42, UDP port 4789) over IPv4, no UDP checksum.
    Vxlan,
    /// GENEVE (VNI 43, UDP port 6081) over IPv6, with a UDP checksum.
    Geneve,
}

pub(crate) const VXLAN_PORT: u16 = 4789;
pub(crate) const GENEVE_PORT: u16 = 6081;

/// The tunnels [`tunnels_up`] creates.
pub(crate) const TUNNELS: &[Tunnel] = &[
    Tunnel { name: "zt-ipip", what: "IPIP over IPv4", a: "10.101.0.1", b: "10.101.0.2", plen: 24, encap: Encap::Ip { v6: false } },
    Tunnel { name: "zt-6in6", what: "IPv6 in IPv6", a: "fd00:102::1", b: "fd00:102::2", plen: 64, encap: Encap::Ip { v6: true } },
    Tunnel {
        name: "zt-gre",
        what: "GRE over IPv4, checksum and key",
        a: "10.103.0.1",
        b: "10.103.0.2",
        plen: 24,
        encap: Encap::GreCsumKey,
    },
    Tunnel { name: "zt-vx", what: "VXLAN over IPv4", a: "10.104.0.1", b: "10.104.0.2", plen: 24, encap: Encap::Vxlan },
    Tunnel { name: "zt-gnv", what: "GENEVE over IPv6", a: "10.105.0.1", b: "10.105.0.2", plen: 24, encap: Encap::Geneve },
];

/// The `ip` batch that creates tunnel `t` on one side: `local`/`remote`
/// are that side's outer addresses (v4, v6), `inner` its inner address.
/// VXLAN and GENEVE get an MTU that leaves room for their 50 and 70 bytes
/// of outer headers (not 1500: their first segments would be fragmented
/// outside, arrive in IP fragments, which no NIC splits, and be
/// reassembled readable until path MTU discovery shrinks the MSS).
fn tunnel_cmds(t: &Tunnel, local: (&str, &str), remote: (&str, &str), inner: &str, mac: &str) -> String {
    let n = t.name;
    let link = match t.encap {
        Encap::Ip { v6: false } => format!("link add {n} type ipip local {} remote {}", local.0, remote.0),
        Encap::Ip { v6: true } => format!("link add {n} type ip6tnl mode ip6ip6 local {} remote {} encaplimit none", local.1, remote.1),
        Encap::GreCsumKey => format!("link add {n} type gre local {} remote {} key 7 csum", local.0, remote.0),
        Encap::Vxlan => {
            format!("link add {n} address {mac} mtu 1400 type vxlan id 42 local {} remote {} dstport {VXLAN_PORT}", local.0, remote.0)
        }
        Encap::Geneve => format!("link add {n} address {mac} mtu 1400 type geneve id 43 remote {} dstport {GENEVE_PORT}", remote.1),
    };
    let nodad = if inner.contains(':') { " nodad" } else { "" };
    format!("{link}\naddr add {inner}/{} dev {n}{nodad}\nlink set {n} up\n", t.plen)
}

/// The MAC of a tunnel device that carries Ethernet (VXLAN, GENEVE) on
/// side `side` (1: nsa, 2: nsb): fixed, so that crafted frames can name it.
pub(crate) fn tunnel_mac(t: &Tunnel, side: u8) -> [u8; 6] {
    let k = TUNNELS.iter().position(|x| x.name == t.name).unwrap_or(0) as u8;
    [0x02, 0x7e, 0, 0, k, side]
}

/// Loads the modules VXLAN and GENEVE need (the kernel has them as
/// modules), from the build the VM runs.
pub(crate) fn load_udp_tunnels() -> Result<(), String> {
    let build = std::env::var("ZCRX_BUILD").map_err(|_| "ZCRX_BUILD not set (run in the VM)")?;
    for (m, ko) in [
        ("udp_tunnel", "net/ipv4/udp_tunnel.ko"),
        ("ip6_udp_tunnel", "net/ipv6/ip6_udp_tunnel.ko"),
        ("vxlan", "drivers/net/vxlan/vxlan.ko"),
        ("geneve", "drivers/net/geneve.ko"),
    ] {
        if !Path::new(&format!("/sys/module/{m}")).exists() {
            run("insmod", &[&format!("{build}/{ko}")], "")?;
        }
    }
    Ok(())
}

/// Creates [`TUNNELS`] on both ends of the netdevsim pair, with static
/// neighbour entries for the Ethernet ones, and checks that netdevsim was
/// given the VXLAN and GENEVE ports (else it would not split them). Gone
/// with the namespaces.
pub(crate) fn tunnels_up() -> Result<(), String> {
    load_udp_tunnels()?;
    let (a4, a6, b4, b6) = ("192.0.2.1", "2001:db8::1", "192.0.2.2", "2001:db8::2");
    let (mut ca, mut cb) = (String::new(), String::new());
    for t in TUNNELS {
        let (ma, mb) = (pkt::mac_str(tunnel_mac(t, 1)), pkt::mac_str(tunnel_mac(t, 2)));
        ca += &tunnel_cmds(t, (a4, a6), (b4, b6), t.a, &ma);
        cb += &tunnel_cmds(t, (b4, b6), (a4, a6), t.b, &mb);
        if matches!(t.encap, Encap::Vxlan | Encap::Geneve) {
            ca += &format!("neigh replace {} lladdr {mb} dev {} nud permanent\n", t.b, t.name);
            cb += &format!("neigh replace {} lladdr {ma} dev {} nud permanent\n", t.a, t.name);
        }
    }
    run("ip", &["-n", NS_A, "-b", "-"], &ca)?;
    run("ip", &["-n", NS_B, "-b", "-"], &cb)?;
    for (table, port) in [("table0", VXLAN_PORT), ("table1", GENEVE_PORT)] {
        let path = format!("/sys/kernel/debug/netdevsim/netdevsim1/ports/0/udp_ports/{table}");
        let t0 = std::time::Instant::now();
        loop {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            let has = text.split([' ', '\n']).filter_map(|w| w.parse::<u32>().ok()).any(|v| v >> 16 == u32::from(port));
            if has {
                break;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                return Err(format!("netdevsim was not given UDP port {port} ({path}: {:?})", text.trim()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The next connection on `l`, within `t` (a sender that failed must not
/// leave the receiver, and its binding, waiting for ever).
pub(crate) fn accept_within(l: &std::net::TcpListener, t: Duration) -> Result<std::net::TcpStream, String> {
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let t0 = std::time::Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < t => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
}

impl Tunnel {
    /// An address behind nsb inside the tunnel that no one has (`.77`).
    pub(crate) fn phantom(&self) -> String {
        format!("{}77", &self.b[..self.b.rfind(['.', ':']).unwrap_or(0) + 1])
    }

    /// Whether the outer header is IPv6, and the outer addresses (nsb to
    /// nsa).
    pub(crate) fn outer(&self) -> (bool, Ip) {
        let v6 = matches!(self.encap, Encap::Ip { v6: true } | Encap::Geneve);
        (v6, if v6 { Ip::new("2001:db8::2", "2001:db8::1") } else { Ip::new("192.0.2.2", "192.0.2.1") })
    }
}

/// The outer headers of a crafted frame, where they may differ from what
/// the tunnel itself sends.
pub(crate) struct Wrap {
    /// The outer UDP or GRE checksum (not for IP in IP).
    pub csum: Csum,
    pub gre_key: u32,
    pub vxlan_flags: u8,
    pub geneve_ver: u8,
    /// GENEVE options, a multiple of 4 bytes.
    pub geneve_opts: Vec<u8>,
    /// The inner Ethernet source (VXLAN, GENEVE).
    pub inner_src: [u8; 6],
    /// The outer UDP source port (a flow hash).
    pub usport: u16,
}

impl Wrap {
    /// What tunnel `t` itself would send, with the outer checksum `csum`.
    pub(crate) fn plain(t: &Tunnel, csum: Csum) -> Wrap {
        Wrap { csum, gre_key: 7, vxlan_flags: 0x08, geneve_ver: 0, geneve_opts: Vec::new(), inner_src: tunnel_mac(t, 2), usport: 50000 }
    }
}

/// Tunnel `t`'s datagram from nsb to nsa around the IP datagram `inner`,
/// its outer headers as `w` says. Returns whether the outer header is
/// IPv6, and the outer datagram.
pub(crate) fn encap(t: &Tunnel, inner: &[u8], w: &Wrap) -> (bool, Vec<u8>) {
    let (v6, o) = t.outer();
    let frame = || pkt::inner_frame(tunnel_mac(t, 1), w.inner_src, inner);
    let d = match t.encap {
        Encap::Ip { .. } => pkt::ip_in_ip(&o, inner),
        Encap::GreCsumKey => pkt::gre(&o, inner, w.csum, Some(w.gre_key)),
        Encap::Vxlan => pkt::udp_datagram(&o, w.usport, VXLAN_PORT, &pkt::vxlan(w.vxlan_flags, 42, &frame()), w.csum),
        Encap::Geneve => pkt::udp_datagram(&o, w.usport, GENEVE_PORT, &pkt::geneve(w.geneve_ver, 43, &w.geneve_opts, &frame()), w.csum),
    };
    (v6, d)
}

/// netdevsim's checksum offload inside tunnels, segment by segment, with a
/// provider bound (so that it splits): a segment whose checksums are all
/// right is not counted as bad; a wrong inner TCP checksum, or a wrong
/// outer UDP or GRE one, is counted by netdevsim (`csum_bad`) and, where
/// the stack keeps a counter, found by the stack (`InCsumErrors`), which
/// checks from the first checksum netdevsim did not vouch for. Each
/// segment is split into the area (`dma_packets`), so the stack checks
/// the rest without reading the payload.
fn tunnel_checksums(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(tunnels_up());
    let mac_a = tryo!(pkt::hwaddr(NS_A, &n.a));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let bound = with_receiver(n.a_idx, 0, 4 << 20, 7439, true, move |_z, _l| {
        let _ = done_rx.recv_timeout(Duration::from_secs(300));
        Ok(())
    });
    let mut lines = Vec::new();
    let r = (|| -> Result<(), String> {
        for t in TUNNELS {
            let phantom = t.phantom();
            let has_outer = matches!(t.encap, Encap::GreCsumKey | Encap::Vxlan | Encap::Geneve);
            let mut cases = vec![("right", Csum::Right, false), ("inner wrong", Csum::Right, true)];
            if has_outer {
                cases.push(("outer wrong", Csum::Wrong, false));
            }
            for (what, outer, inner_bad) in cases {
                let tcp = Tcp { bad_csum: inner_bad, ..Tcp::data(40000, 9, vec![0x5a; 300]) };
                let (v6, d) = encap(t, &pkt::tcp_datagram(&Ip::new(&phantom, t.a), &tcp), &Wrap::plain(t, outer));
                let before = n.stats(1, 0)?;
                let snmp0 = pkt::Snmp::read(NS_A)?;
                pkt::send_frames(NS_B, n.b_idx, vec![pkt::frame(mac_a, v6, &d, 0)])?;
                let t0 = std::time::Instant::now();
                let mut d = n.stats(1, 0)?.since(&before);
                while d.dma_packets == 0 && t0.elapsed() < Duration::from_secs(5) {
                    std::thread::sleep(Duration::from_millis(20));
                    d = n.stats(1, 0)?.since(&before);
                }
                let bad = inner_bad || outer == Csum::Wrong;
                if d.dma_packets != 1 {
                    return Err(format!("{} {what}: netdevsim split {} packets, not 1", t.what, d.dma_packets));
                }
                if d.csum_bad != u64::from(bad) {
                    return Err(format!("{} {what}: netdevsim counted {} bad checksums", t.what, d.csum_bad));
                }
                // The stack's verdict, which comes after netdevsim's (VXLAN
                // and GENEVE go through a GRO cell first): a segment that
                // reaches TCP counts in InSegs, one with a wrong checksum
                // there or in the outer UDP header in InCsumErrors; GRE
                // drops a wrong outer checksum before TCP and counts it
                // nowhere, so there InSegs must stay.
                let udp_wrong = outer == Csum::Wrong && matches!(t.encap, Encap::Vxlan | Encap::Geneve);
                let gre_wrong = outer == Csum::Wrong && t.encap == Encap::GreCsumKey;
                let read = |snmp0: &pkt::Snmp| -> Result<(u64, u64, u64), String> {
                    let s = pkt::Snmp::read(NS_A)?;
                    Ok((
                        s.since(snmp0, "Tcp:InSegs")?,
                        s.since(snmp0, "Tcp:InCsumErrors")?,
                        s.since(snmp0, "Udp:InCsumErrors")? + s.since(snmp0, "Udp6InCsumErrors")?,
                    ))
                };
                let done = |(segs, tcp_err, udp_err): (u64, u64, u64)| match () {
                    _ if inner_bad => tcp_err > 0,
                    _ if udp_wrong => udp_err > 0,
                    _ if gre_wrong => false,
                    _ => segs > 0,
                };
                let t0 = std::time::Instant::now();
                let wait = if gre_wrong { Duration::from_secs(1) } else { Duration::from_secs(10) };
                let mut c = read(&snmp0)?;
                while !done(c) && t0.elapsed() < wait {
                    std::thread::sleep(Duration::from_millis(20));
                    c = read(&snmp0)?;
                }
                let (segs, tcp_err, udp_err) = c;
                lines.push(format!(
                    "{} {what}: split {}, csum_bad {}, Tcp InSegs +{segs} InCsumErrors +{tcp_err}, Udp InCsumErrors +{udp_err}",
                    t.what, d.dma_packets, d.csum_bad
                ));
                let ok = match () {
                    _ if inner_bad => tcp_err == 1 && udp_err == 0,
                    _ if udp_wrong => udp_err == 1 && segs == 0 && tcp_err == 0,
                    _ if gre_wrong => segs == 0 && tcp_err == 0 && udp_err == 0,
                    _ => segs == 1 && tcp_err == 0 && udp_err == 0,
                };
                if !ok {
                    return Err(format!(
                        "{} {what}: the stack's counters are not what the segment's checksums call for \
                         (InSegs +{segs}, Tcp InCsumErrors +{tcp_err}, Udp InCsumErrors +{udp_err})",
                        t.what
                    ));
                }
            }
        }
        Ok(())
    })();
    let _ = done_tx.send(());
    for l in &lines {
        env.diag(l);
    }
    tryo!(r);
    tryo!(join(bound));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}

fn tunnels_zero_copy(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(tunnels_up());
    let bytes: u64 = 2 << 20;
    for (k, t) in TUNNELS.iter().enumerate() {
        let port = 7420 + k as u16;
        let pat = Arc::new(Pattern::new(0x7e00 + k as u64));
        let before = tryo!(n.stats(1, 0));
        let log = tryo!(DmaLog::start());
        let p2 = pat.clone();
        let rx = with_receiver(n.a_idx, 0, 16 << 20, port, true, move |z, l| {
            let s = accept_within(&l, Duration::from_secs(60))?;
            receive(z, &s, &p2, None)
        });
        let to = SocketAddr::new(t.a.parse::<IpAddr>().unwrap(), port);
        let tx = sender(to, bytes, pat, 0);
        let sent = tryo!(join(tx).map_err(|e| format!("{}: {e}", t.what)));
        let rx = tryo!(join(rx).map_err(|e| format!("{}: {e}", t.what)));
        let d = tryo!(n.stats(1, 0)).since(&before);
        env.diag(&format!(
            "{}: {} byte-exact, zero-copy {} copied {}; netdevsim split {} payload bytes in {} packets, bad checksums {}",
            t.what,
            mib(rx.bytes),
            mib(rx.zc_bytes),
            mib(rx.copy_bytes),
            d.dma_bytes,
            d.dma_packets,
            d.csum_bad
        ));
        if rx.bytes != sent || sent != bytes {
            return Fail(format!("{}: sent {sent} of {bytes}, received {}", t.what, rx.bytes));
        }
        if rx.zc_bytes != bytes {
            return Fail(format!("{}: {} of {bytes} bytes came zero-copy", t.what, rx.zc_bytes));
        }
        if d.dma_bytes < bytes {
            return Fail(format!("{}: netdevsim split only {} payload bytes of {bytes} into the area", t.what, d.dma_bytes));
        }
        let line = tryo!(log.check(0, rx.zc_bytes).map_err(|e| format!("{}: {e}", t.what)));
        env.diag(&format!("{}: {line}", t.what));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
