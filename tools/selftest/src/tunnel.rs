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
use crate::net::{receive, run, sender, with_receiver, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("tunnels_zero_copy", tunnels_zero_copy)];

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

fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// Loads the modules VXLAN and GENEVE need (the kernel has them as
/// modules), from the build the VM runs.
fn load_udp_tunnels() -> Result<(), String> {
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
        let (ma, mb) = (mac_str(tunnel_mac(t, 1)), mac_str(tunnel_mac(t, 2)));
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
        let p2 = pat.clone();
        let rx = with_receiver(n.a_idx, 0, 16 << 20, port, true, move |z, l| {
            let s = l.accept().map_err(|e| format!("accept: {e}"))?.0;
            receive(z, &s, &p2, None)
        });
        let to = SocketAddr::new(t.a.parse::<IpAddr>().unwrap(), port);
        let tx = sender(to, bytes, pat, 0);
        let sent = tryo!(crate::net::join(tx).map_err(|e| format!("{}: {e}", t.what)));
        let rx = tryo!(crate::net::join(rx).map_err(|e| format!("{}: {e}", t.what)));
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
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
