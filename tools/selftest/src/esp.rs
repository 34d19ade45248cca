// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! IPsec crypto offload towards a provider-bound queue. A NIC with crypto
//! offload decrypts ESP before it splits headers from data, so what it
//! puts in the provider's buffers is the TCP payload and the ESP trailer
//! after it (padding, pad length, next header, ICV). The stack then reads
//! the trailer to strip it: before the kernel fix (`esp: drop a packet
//! whose trailer cannot be read instead of BUG()`) that read failed on
//! provider memory and `esp_remove_trailer()` hit `BUG()` in softirq, for
//! the first segment of any peer with the SA (a SYN is enough: its trailer
//! is in the data buffer too). Now the packet is dropped and counted
//! (`XfrmInStateProtoError`); the host lives.
//!
//! netdevsim emulates the offload on both ends (kernel series: `netdevsim:
//! emulate IPsec crypto offload on receive, and split what it decrypted`):
//! the sender's stack leaves the packet unencrypted for its NIC, and the
//! receiving netdevsim "decrypts" it by telling the stack so. The test
//! first shows that path carries a stream byte-exact while the queue has
//! no provider, then sends to the provider-bound queue; in transport mode,
//! in tunnel mode (the segment in an inner datagram; netdevsim splits at
//! the inner TCP header) and as ESP in UDP (RFC 3948, tunnel mode and
//! transport mode, port 4500, received through a `UDP_ENCAP_ESPINUDP`
//! socket as an IKE daemon's; series patch 40, and patch 26 for IPv6 in
//! transport mode). IPv6 ESP in UDP has no offloaded transmit
//! path: before series patch 25 its first packet oopsed in `esp6_xmit()`;
//! now the sender encrypts it in software, and nsa decrypts it in
//! software too. The remote fuzzer sends all three (`esp`, `esp_tunnel`,
//! `esp_udp`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{addr_a, connect, in_netns, join, run, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::Snmp;
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("esp_offload_to_zero_copy_queue", esp_offload)];

/// rfc4106(gcm(aes)): a 128-bit key and a 32-bit salt.
const KEY: &str = "0x7a6372782d727320657370206b65792173616c74";

/// The SPIs of the IPv4 and the IPv6 SA [`esp_up`] creates.
pub(crate) const SPI4: u32 = 0x7a01;
pub(crate) const SPI6: u32 = 0x7a02;

/// The port of ESP in UDP (RFC 3948), both ends.
pub(crate) const NATT_PORT: u16 = 4500;

/// How ESP carries the TCP segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// Transport mode: the segment follows the ESP header and IV.
    Transport,
    /// Tunnel mode: an IP datagram (the segment in it) follows the IV.
    Tunnel,
    /// Tunnel mode, the ESP packet in UDP to [`NATT_PORT`] (RFC 3948), as
    /// IKE daemons behind a NAT use it.
    Udp,
    /// Transport mode in UDP to [`NATT_PORT`]. Without netfilter (the test
    /// kernels) 7.2 decrypted IPv6 ESP in UDP of a transport mode SA and
    /// handed the segment to the IKE socket as a UDP datagram: TCP never
    /// saw it (series patch 26).
    UdpTransport,
}

impl Mode {
    /// The SPIs of its IPv4 and IPv6 SA.
    pub(crate) fn spis(self) -> (u32, u32) {
        match self {
            Mode::Transport => (SPI4, SPI6),
            Mode::Tunnel => (0x7a11, 0x7a12),
            Mode::Udp => (0x7a21, 0x7a22),
            Mode::UdpTransport => (0x7a31, 0x7a32),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Transport => "transport mode",
            Mode::Tunnel => "tunnel mode",
            Mode::Udp => "ESP in UDP (tunnel mode)",
            Mode::UdpTransport => "ESP in UDP (transport mode)",
        }
    }

    /// Whether the ESP packets go in UDP (RFC 3948).
    pub(crate) fn in_udp(self) -> bool {
        matches!(self, Mode::Udp | Mode::UdpTransport)
    }
}

/// ESP in transport mode from nsb to nsa, IPv4 (SPI [`SPI4`]) and IPv6
/// ([`SPI6`]), for TCP (to port `dport` only, if given), offloaded to the
/// netdevsim ports on both ends.
pub(crate) fn esp_up(n: &Nsim, dport: Option<u16>) -> Result<(), String> {
    esp_up_mode(n, dport, Mode::Transport)
}

/// [`esp_up`] in `mode`, with its SPIs ([`Mode::spis`]). Several modes at
/// once need a `dport` each: their policies would select the same traffic.
pub(crate) fn esp_up_mode(n: &Nsim, dport: Option<u16>, mode: Mode) -> Result<(), String> {
    esp_setup(n, dport, mode, false)
}

/// [`esp_up_mode`] for a peer that crafts its ESP frames itself, in the
/// clear (the remote fuzzer): every receive SA offloaded to netdevsim, the
/// IPv6 one of ESP in UDP too.
pub(crate) fn esp_up_crafted(n: &Nsim, dport: Option<u16>, mode: Mode) -> Result<(), String> {
    esp_setup(n, dport, mode, true)
}

fn esp_setup(n: &Nsim, dport: Option<u16>, mode: Mode, crafted: bool) -> Result<(), String> {
    let sel = dport.map(|p| format!(" dport {p}")).unwrap_or_default();
    let (spi4, spi6) = mode.spis();
    let reqid = 7 + mode as u32;
    let (how, encap4, encap6) = match mode {
        Mode::Transport => ("transport", String::new(), String::new()),
        Mode::Tunnel => ("tunnel", String::new(), String::new()),
        Mode::Udp | Mode::UdpTransport => (
            if mode == Mode::Udp { "tunnel" } else { "transport" },
            format!(" encap espinudp {NATT_PORT} {NATT_PORT} 0.0.0.0"),
            format!(" encap espinudp {NATT_PORT} {NATT_PORT} ::"),
        ),
    };
    let mut cmds = [String::new(), String::new()];
    for (src, dst, plen, spi, encap) in [("192.0.2.2", "192.0.2.1", 32, spi4, &encap4), ("2001:db8::2", "2001:db8::1", 128, spi6, &encap6)]
    {
        for (i, dev, dir) in [(0, &n.b, "out"), (1, &n.a, "in")] {
            // IPv6 ESP in UDP leaves the sender encrypted in software
            // although its SA is offloaded (the stack has no offload path
            // for it: before series patch 25 the first packet crashed
            // esp6_xmit()): netdevsim cannot take it as decrypted, so nsa
            // decrypts it itself.
            let offload = if mode.in_udp() && plen == 128 && dir == "in" && !crafted {
                String::new()
            } else {
                format!(" offload dev {dev} dir {dir}")
            };
            cmds[i] += &format!(
                "xfrm state add src {src} dst {dst} proto esp spi {spi:#x} reqid {reqid} mode {how}{encap} \
                 aead rfc4106(gcm(aes)) {KEY} 128{offload}\n\
                 xfrm policy add src {src}/{plen} dst {dst}/{plen} proto tcp{sel} dir {dir} \
                 tmpl src {src} dst {dst} proto esp reqid {reqid} mode {how}\n"
            );
        }
    }
    run("ip", &["-n", NS_B, "-b", "-"], &cmds[0])?;
    run("ip", &["-n", NS_A, "-b", "-"], &cmds[1])?;
    Ok(())
}

/// Removes every SA and policy of both namespaces.
fn esp_down() -> Result<(), String> {
    for ns in [NS_A, NS_B] {
        run("ip", &["-n", ns, "-b", "-"], "xfrm policy flush\nxfrm state flush\n")?;
    }
    Ok(())
}

/// A UDP socket in nsa on [`NATT_PORT`] (IPv4 and IPv6) that hands ESP in
/// UDP to IPsec (`UDP_ENCAP_ESPINUDP`), as an IKE daemon's socket does:
/// without it the stack takes ESP in UDP for plain UDP.
pub(crate) fn natt_socket() -> Result<std::net::UdpSocket, String> {
    join(in_netns(NS_A, || {
        let s = std::net::UdpSocket::bind(("::", NATT_PORT)).map_err(|e| format!("bind UDP {NATT_PORT}: {e}"))?;
        const UDP_ENCAP: libc::c_int = 100;
        const UDP_ENCAP_ESPINUDP: libc::c_int = 2;
        let v = UDP_ENCAP_ESPINUDP;
        // SAFETY: setsockopt on our socket with an int option.
        let r = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_UDP,
                UDP_ENCAP,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(format!("UDP_ENCAP: {}", std::io::Error::last_os_error()));
        }
        Ok(s)
    }))
}

/// How many frames queued on packet socket `tap` are UDP to
/// [`NATT_PORT`] over IPv6 (`v6`) or IPv4 (the socket loses what overflows
/// its buffer: a lower bound, enough to show there were some).
fn natt_frames(tap: &std::os::fd::OwnedFd, v6: bool) -> u64 {
    use std::os::fd::AsRawFd;
    let mut buf = vec![0u8; 65536];
    let mut n = 0;
    loop {
        // SAFETY: reads into our buffer of that length.
        let k = unsafe { libc::recv(tap.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if k <= 0 {
            return n;
        }
        let f = &buf[..k as usize];
        let (proto, l4) = match (v6, f.get(12..14)) {
            (true, Some([0x86, 0xdd])) => (f.get(14 + 6).copied(), 14 + 40),
            (false, Some([0x08, 0x00])) => (f.get(14 + 9).copied(), 14 + usize::from(f.get(14).map_or(5, |b| b & 15)) * 4),
            _ => continue,
        };
        if proto == Some(17) && f.get(l4 + 2..l4 + 4) == Some(&NATT_PORT.to_be_bytes()[..]) {
            n += 1;
        }
    }
}

/// Where ESP packets went, for a failure's message: the non-zero xfrm
/// error counters of both namespaces and their SAs' packet counts.
fn xfrm_report() -> String {
    let mut out = Vec::new();
    for ns in [NS_B, NS_A] {
        let stat = run("ip", &["netns", "exec", ns, "cat", "/proc/net/xfrm_stat"], "").unwrap_or_else(|e| e);
        let nz: Vec<&str> = stat.lines().filter(|l| !l.trim_end().ends_with(" 0") && !l.trim_end().ends_with("\t0")).collect();
        let st = run("ip", &["-n", ns, "-s", "xfrm", "state"], "").unwrap_or_else(|e| e);
        let counts: Vec<String> = st
            .lines()
            .filter(|l| l.trim_start().starts_with("src ") || l.contains("packets") || l.contains("offload"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        let snmp = run("ip", &["netns", "exec", ns, "nstat", "-as"], "").unwrap_or_else(|e| e);
        let snmp: Vec<String> = snmp
            .lines()
            .filter(|l| ["Ip6", "Udp6", "Tcp", "TcpExt", "Icmp6"].iter().any(|p| l.starts_with(p)))
            .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
            .collect();
        out.push(format!("{ns}: xfrm_stat {nz:?}; states {counts:?}; {snmp:?}"));
    }
    out.join("; ")
}

/// netdevsim's count of packets it decrypted for receive SAs (device 1).
fn ipsec_rx() -> Result<u64, String> {
    let path = "/sys/kernel/debug/netdevsim/netdevsim1/ports/0/ipsec_rx";
    let t = std::fs::read_to_string(path).map_err(|e| format!("{path} (netdevsim without receive offload?): {e}"))?;
    t.trim().parse().map_err(|e| format!("{path}: {t:?}: {e}"))
}

fn esp_offload(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    // netdevsim decrypts only what its peer sends unsegmented (a GSO
    // packet gets its trailers per segment from the NIC)
    tryo!(run("ip", &["netns", "exec", NS_B, "ethtool", "-K", &n.b, "tso", "off", "gso", "off"], ""));
    let _natt = tryo!(natt_socket());
    for (i, mode) in [Mode::Transport, Mode::Tunnel, Mode::Udp, Mode::UdpTransport].into_iter().enumerate() {
        tryo!(esp_up_mode(&n, None, mode));
        let r = esp_mode(env, &n, mode, 7430 + 2 * i as u16);
        tryo!(esp_down());
        tryo!(r);
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// One mode of [`esp_offload`], its SAs up: first with header split off
/// (no provider) a stream byte-exact through netdevsim's decryption on
/// `port`, then a connection to `port + 1` on the provider-bound queue.
fn esp_mode(env: &Env, n: &Nsim, mode: Mode, port: u16) -> Result<(), String> {
    let m = mode.name();
    // Without a provider: the emulated offload carries a stream, over
    // IPv4 and over IPv6.
    n.hds(false)?;
    let mut rx1 = ipsec_rx()?;
    let bytes = 256 << 10;
    for v6 in [false, true] {
        let rx0 = rx1;
        // what arrives on nsa's port, before the stack sees it
        let a_idx = n.a_idx;
        let tap = if mode.in_udp() { Some(join(in_netns(NS_A, move || crate::pkt::packet_socket(a_idx)))?) } else { None };
        let plain = in_netns(NS_A, move || {
            let l = TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
            let mut s = crate::tunnel::accept_within(&l, Duration::from_secs(60))?;
            s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
            let mut got = Vec::new();
            s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
            Ok(got)
        });
        let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect();
        let d2 = data.clone();
        let sent = join(in_netns(NS_B, move || {
            let mut s = connect(addr_a(v6, port), Duration::from_secs(30))?;
            s.write_all(&d2).map_err(|e| format!("write: {e}"))
        }));
        let got = join(plain).map_err(|e| format!("{m}: receiver: {e}; sender: {sent:?}; {}", xfrm_report()))?;
        sent?;
        rx1 = ipsec_rx()?;
        let fam = if v6 { "IPv6" } else { "IPv4" };
        env.diag(&format!(
            "{m}, no provider, {fam}: {} of {bytes} bytes through ESP, netdevsim decrypted {} packets",
            got.len(),
            rx1 - rx0
        ));
        if got != data {
            return Err(format!("{m}, no provider, {fam}: received {} bytes, not the {bytes} sent byte for byte", got.len()));
        }
        // ESP in UDP came in UDP (an SA with encap takes bare ESP too)
        if let Some(tap) = tap {
            let natt = natt_frames(&tap, v6);
            if natt == 0 {
                return Err(format!("{m}, no provider, {fam}: no UDP datagram to port {NATT_PORT} reached nsa's port"));
            }
            env.diag(&format!("{m}, no provider, {fam}: at least {natt} UDP datagrams to port {NATT_PORT} on nsa's port"));
        }
        // (IPv6 ESP in UDP: decrypted by nsa's stack, see esp_up_mode)
        if rx1 == rx0 && !(v6 && mode.in_udp()) {
            return Err(format!("{m}, no provider, {fam}: netdevsim decrypted nothing (the SA was not offloaded?)"));
        }
    }

    // With zcrx-rs on the queue: the SYN's trailer is in the area. One
    // SYN (and its retransmission) per family, one family at a time, so
    // that the drops each causes show.
    n.hds(true)?;
    let port = port + 1;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 4 << 20, port, true, move |_z, l| {
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(l.accept().is_ok())
    });
    let mut established = false;
    let mut lines = Vec::new();
    let r = (|| -> Result<(), String> {
        for v6 in [false, true] {
            let fam = if v6 { "IPv6" } else { "IPv4" };
            if v6 && mode.in_udp() {
                lines.push(format!(
                    "{m}, provider bound, {fam}: not run: the stack encrypts IPv6 ESP in UDP in software, \
                     netdevsim does not decrypt it (no receive offload to split behind)"
                ));
                continue;
            }
            let before = n.stats(1, 0)?;
            let (snmp0, rx0) = (Snmp::read(NS_A)?, ipsec_rx()?);
            let c = join(in_netns(NS_B, move || {
                let to: SocketAddr = addr_a(v6, port);
                Ok(std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_ok())
            }))?;
            established |= c;
            let d = n.stats(1, 0)?.since(&before);
            let (err, rx) = (Snmp::read(NS_A)?.since(&snmp0, "XfrmInStateProtoError")?, ipsec_rx()? - rx0);
            lines.push(format!(
                "{m}, provider bound, {fam}: netdevsim decrypted {rx} and split {} packets ({} B after the headers), \
                 XfrmInStateProtoError +{err}, {}",
                d.dma_packets,
                d.dma_bytes,
                if c { "connected" } else { "no connection" }
            ));
            if d.dma_packets == 0 || rx == 0 {
                return Err(format!("{m}, provider bound, {fam}: netdevsim split or decrypted no ESP packet: the test proves nothing"));
            }
            if err == 0 {
                return Err(format!("{m}, provider bound, {fam}: ESP packets with their trailer in the area were not counted as dropped"));
            }
        }
        Ok(())
    })();
    let _ = done_tx.send(());
    let accepted = join(rx);
    for l in &lines {
        env.diag(l);
    }
    r?;
    if accepted? || established {
        return Err(format!("{m}, provider bound: a connection was established through ESP whose trailers cannot be read"));
    }
    Ok(())
}
