// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Packets as a remote peer crafts them: IPv4/IPv6 TCP segments with every
//! header field chosen by the caller, in Ethernet frames sent as they are
//! from the sender's device (AF_PACKET: the stack adds nothing, checks
//! nothing, offloads nothing; the skbs are CHECKSUM_NONE). Per-namespace
//! SNMP counters to see what the receiving stack made of them.

use std::fs;
use std::net::IpAddr;

use crate::net::{in_netns, join};

/// The one's complement sum of `b` as 16-bit big-endian words, added to `s`.
pub fn sum16(mut s: u32, b: &[u8]) -> u32 {
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

/// Folds a sum into the 16-bit one's complement checksum.
pub fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// TCP flags.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;
pub const URG: u8 = 0x20;

/// A TCP segment's fields.
#[derive(Clone, Debug)]
pub struct Tcp {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub win: u16,
    pub urg: u16,
    /// Options, padded to 4 bytes here.
    pub opts: Vec<u8>,
    pub payload: Vec<u8>,
    /// Send a wrong checksum.
    pub bad_csum: bool,
}

impl Tcp {
    /// ACK|PSH from `sport` to `dport`, sequence and ack 1, `payload`.
    pub fn data(sport: u16, dport: u16, payload: Vec<u8>) -> Tcp {
        Tcp { sport, dport, seq: 1, ack: 1, flags: ACK | PSH, win: 1024, urg: 0, opts: Vec::new(), payload, bad_csum: false }
    }
}

/// The IP header's fields.
#[derive(Clone, Copy, Debug)]
pub struct Ip {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub ttl: u8,
    /// IPv4: Don't Fragment.
    pub df: bool,
    /// IPv4: identification.
    pub id: u16,
}

impl Ip {
    /// From `src` to `dst` (both of one family), TTL 64, DF set.
    pub fn new(src: &str, dst: &str) -> Ip {
        Ip { src: src.parse().expect("address"), dst: dst.parse().expect("address"), ttl: 64, df: true, id: 0 }
    }
}

/// The IP datagram carrying `tcp`: IPv4 (20-byte header) or IPv6 (no
/// extension headers), TCP checksum right unless `tcp.bad_csum`.
pub fn tcp_datagram(ip: &Ip, tcp: &Tcp) -> Vec<u8> {
    let t = tcp_segment(ip, tcp);
    let mut d = ip_header(ip, libc::IPPROTO_TCP as u8, t.len()).0;
    d.extend_from_slice(&t);
    d
}

/// `tcp` alone, its checksum over `ip`'s pseudo-header (what a datagram
/// of `ip` carries, in the clear or inside ESP).
pub fn tcp_segment(ip: &Ip, tcp: &Tcp) -> Vec<u8> {
    let mut opts = tcp.opts.clone();
    opts.resize(opts.len().div_ceil(4) * 4, 0); // EOL padding
    let doff = (20 + opts.len()) / 4;
    let tcplen = 20 + opts.len() + tcp.payload.len();
    let mut t = Vec::with_capacity(tcplen);
    t.extend_from_slice(&tcp.sport.to_be_bytes());
    t.extend_from_slice(&tcp.dport.to_be_bytes());
    t.extend_from_slice(&tcp.seq.to_be_bytes());
    t.extend_from_slice(&tcp.ack.to_be_bytes());
    t.extend_from_slice(&[(doff as u8) << 4, tcp.flags]);
    t.extend_from_slice(&tcp.win.to_be_bytes());
    t.extend_from_slice(&[0, 0]); // checksum
    t.extend_from_slice(&tcp.urg.to_be_bytes());
    t.extend_from_slice(&opts);
    t.extend_from_slice(&tcp.payload);
    let proto = libc::IPPROTO_TCP as u8;
    let pseudo = ip_header(ip, proto, tcplen).1;
    let mut c = fold(sum16(pseudo + tcplen as u32 + u32::from(proto), &t));
    if tcp.bad_csum {
        c ^= 0x0101;
    }
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

/// The IP header of a datagram with `l4len` bytes of protocol `proto`
/// (IPv4: 20 bytes, its checksum filled in; IPv6: no extension headers),
/// and the sum of the pseudo-header's addresses.
fn ip_header(ip: &Ip, proto: u8, l4len: usize) -> (Vec<u8>, u32) {
    match (ip.src, ip.dst) {
        (IpAddr::V6(s), IpAddr::V6(dst)) => {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(l4len as u16).to_be_bytes());
            h.extend_from_slice(&[proto, ip.ttl]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&dst.octets());
            (h, sum16(sum16(0, &s.octets()), &dst.octets()))
        }
        (IpAddr::V4(s), IpAddr::V4(dst)) => {
            let mut h = vec![0x45, 0];
            h.extend_from_slice(&((20 + l4len) as u16).to_be_bytes());
            h.extend_from_slice(&ip.id.to_be_bytes());
            h.extend_from_slice(&[if ip.df { 0x40 } else { 0 }, 0, ip.ttl, proto, 0, 0]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&dst.octets());
            let c = fold(sum16(0, &h));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            (h, sum16(sum16(0, &s.octets()), &dst.octets()))
        }
        _ => panic!("ip_header: mixed address families"),
    }
}

/// An IP datagram of protocol `proto` carrying `l4` as it is.
pub fn ip_datagram(ip: &Ip, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut d = ip_header(ip, proto, l4.len()).0;
    d.extend_from_slice(l4);
    d
}

/// What to put in a checksum field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Csum {
    Right,
    Wrong,
    /// None (UDP: 0; GRE: no checksum field).
    Absent,
}

/// A checksum other than `c`, and not 0 (which UDP reads as "none").
fn wrong(c: u16) -> u16 {
    if c == 0x0101 {
        0x0202
    } else {
        c ^ 0x0101
    }
}

/// `inner` (an IP datagram) carried in IP itself (IPIP, IPv6 in IPv6).
pub fn ip_in_ip(outer: &Ip, inner: &[u8]) -> Vec<u8> {
    let proto = if inner[0] >> 4 == 6 { libc::IPPROTO_IPV6 } else { libc::IPPROTO_IPIP } as u8;
    let mut d = ip_header(outer, proto, inner.len()).0;
    d.extend_from_slice(inner);
    d
}

/// `inner` (an IP datagram) in GRE, with a checksum as `csum` says and
/// the key `key` if given.
pub fn gre(outer: &Ip, inner: &[u8], csum: Csum, key: Option<u32>) -> Vec<u8> {
    let ptype: u16 = if inner[0] >> 4 == 6 { 0x86dd } else { 0x0800 };
    let flags: u16 = if csum != Csum::Absent { 0x8000 } else { 0 } | if key.is_some() { 0x2000 } else { 0 };
    let mut g = Vec::with_capacity(12 + inner.len());
    g.extend_from_slice(&flags.to_be_bytes());
    g.extend_from_slice(&ptype.to_be_bytes());
    if csum != Csum::Absent {
        g.extend_from_slice(&[0, 0, 0, 0]);
    }
    if let Some(k) = key {
        g.extend_from_slice(&k.to_be_bytes());
    }
    g.extend_from_slice(inner);
    if csum != Csum::Absent {
        let mut c = fold(sum16(0, &g));
        if csum == Csum::Wrong {
            c = wrong(c);
        }
        g[4..6].copy_from_slice(&c.to_be_bytes());
    }
    let mut d = ip_header(outer, libc::IPPROTO_GRE as u8, g.len()).0;
    d.extend_from_slice(&g);
    d
}

/// A UDP datagram with `payload`, its checksum as `csum` says.
pub fn udp_datagram(ip: &Ip, sport: u16, dport: u16, payload: &[u8], csum: Csum) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut u = Vec::with_capacity(len);
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&(len as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let proto = libc::IPPROTO_UDP as u8;
    let (mut d, pseudo) = ip_header(ip, proto, len);
    if csum != Csum::Absent {
        let mut c = fold(sum16(pseudo + len as u32 + u32::from(proto), &u));
        if c == 0 {
            c = 0xffff;
        }
        if csum == Csum::Wrong {
            c = wrong(c);
        }
        u[6..8].copy_from_slice(&c.to_be_bytes());
    }
    d.extend_from_slice(&u);
    d
}

/// An Ethernet frame from `src` to `dst` holding `datagram` (what VXLAN
/// and GENEVE carry).
pub fn inner_frame(dst: [u8; 6], src: [u8; 6], datagram: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + datagram.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&(if datagram[0] >> 4 == 6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    f.extend_from_slice(datagram);
    f
}

/// The VXLAN header (flags: 0x08 is "VNI valid") and `frame`.
pub fn vxlan(flags: u8, vni: u32, frame: &[u8]) -> Vec<u8> {
    let mut v = vec![flags, 0, 0, 0];
    v.extend_from_slice(&(vni << 8).to_be_bytes());
    v.extend_from_slice(frame);
    v
}

/// The GENEVE header (version `ver`, Ethernet payload), `opts` (a multiple
/// of 4 bytes, at most 252) and `frame`.
pub fn geneve(ver: u8, vni: u32, opts: &[u8], frame: &[u8]) -> Vec<u8> {
    let mut g = vec![(ver << 6) | (opts.len() / 4) as u8, 0, 0x65, 0x58];
    g.extend_from_slice(&(vni << 8).to_be_bytes());
    g.extend_from_slice(opts);
    g.extend_from_slice(frame);
    g
}

/// Splits `payload` into pieces of `chunk` bytes (rounded down to 8; at
/// least 8), each behind the header `hdr(offset, length, more)` makes.
fn fragments(payload: &[u8], chunk: usize, hdr: impl Fn(usize, usize, bool) -> Vec<u8>) -> Vec<Vec<u8>> {
    let chunk = (chunk / 8).max(1) * 8;
    payload
        .chunks(chunk)
        .enumerate()
        .map(|(i, p)| {
            let off = i * chunk;
            let mut f = hdr(off, p.len(), off + p.len() < payload.len());
            f.extend_from_slice(p);
            f
        })
        .collect()
}

/// IPv4 fragments of `datagram` (a 20-byte header, no options) with
/// `chunk` bytes of payload each (rounded down to 8; at least 8).
pub fn ipv4_fragments(datagram: &[u8], chunk: usize) -> Vec<Vec<u8>> {
    let (hdr, payload) = datagram.split_at(20);
    fragments(payload, chunk, |off, len, more| {
        let mut h = hdr.to_vec();
        h[2..4].copy_from_slice(&((20 + len) as u16).to_be_bytes());
        h[6..8].copy_from_slice(&((if more { 0x2000 } else { 0 }) | (off / 8) as u16).to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = fold(sum16(0, &h));
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h
    })
}

/// IPv6 fragments of `datagram` (a 40-byte header, no extension headers)
/// with a fragment header of identification `id` and `chunk` bytes of
/// payload each (rounded down to 8; at least 8).
pub fn ipv6_fragments(datagram: &[u8], chunk: usize, id: u32) -> Vec<Vec<u8>> {
    let (hdr, payload) = datagram.split_at(40);
    fragments(payload, chunk, |off, len, more| {
        let mut h = hdr.to_vec();
        h[4..6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
        let next = h[6];
        h[6] = 44; // fragment header
        h.extend_from_slice(&[next, 0]);
        h.extend_from_slice(&((off as u16) | u16::from(more)).to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        h
    })
}

/// A TCP segment seen on the wire.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub dst: IpAddr,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
}

/// Parses an Ethernet frame holding a TCP segment (IPv4 without fragments,
/// IPv6 without extension headers).
pub fn parse(f: &[u8]) -> Option<Seen> {
    let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
    let ip = f.get(14..)?;
    let (dst, t): (IpAddr, &[u8]) = match et {
        0x0800 => {
            let ihl = usize::from(ip.first()? & 0xf) * 4;
            if *ip.get(9)? != libc::IPPROTO_TCP as u8 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 {
                return None;
            }
            let d: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
            (d.into(), ip.get(ihl..)?)
        }
        0x86dd => {
            if *ip.get(6)? != libc::IPPROTO_TCP as u8 {
                return None;
            }
            let d: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
            (d.into(), ip.get(40..)?)
        }
        _ => return None,
    };
    Some(Seen {
        dst,
        dport: u16::from_be_bytes([*t.get(2)?, *t.get(3)?]),
        seq: u32::from_be_bytes(t.get(4..8)?.try_into().ok()?),
        ack: u32::from_be_bytes(t.get(8..12)?.try_into().ok()?),
        flags: *t.get(13)?,
    })
}

/// An Ethernet frame to `dst` holding `datagram`, with `pad` bytes of
/// link-layer padding after it.
pub fn frame(dst: [u8; 6], v6: bool, datagram: &[u8], pad: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + datagram.len() + pad);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f.extend_from_slice(&(if v6 { 0x86ddu16 } else { 0x0800 }).to_be_bytes());
    f.extend_from_slice(datagram);
    f.resize(f.len() + pad, 0xee);
    f
}

/// A non-blocking packet socket for every protocol, bound to device
/// `ifindex` of the calling thread's namespace.
pub fn packet_socket(ifindex: u32) -> Result<std::os::fd::OwnedFd, String> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket creation; the fd is owned below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK, i32::from(proto)) };
    if fd < 0 {
        return Err(format!("AF_PACKET socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto;
    sa.sll_ifindex = ifindex as i32;
    // SAFETY: `sa` is a valid sockaddr_ll for its size.
    let r = unsafe {
        libc::bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&sa as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(format!("bind AF_PACKET: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Sends `frames` as they are from device `ifindex` of namespace `ns`.
pub fn send_frames(ns: &'static str, ifindex: u32, frames: Vec<Vec<u8>>) -> Result<(), String> {
    join(in_netns(ns, move || {
        // SAFETY: plain socket creation; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            return Err(format!("AF_PACKET socket: {}", std::io::Error::last_os_error()));
        }
        let mut r = Ok(());
        for f in &frames {
            // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
            let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sa.sll_family = libc::AF_PACKET as u16;
            sa.sll_ifindex = ifindex as i32;
            sa.sll_halen = 6;
            sa.sll_addr[..6].copy_from_slice(&f[..6]);
            // SAFETY: `f` and `sa` are valid for the lengths given.
            let n = unsafe {
                libc::sendto(
                    fd,
                    f.as_ptr().cast(),
                    f.len(),
                    0,
                    (&sa as *const libc::sockaddr_ll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            };
            if n != f.len() as isize {
                r = Err(format!("sendto: {}", std::io::Error::last_os_error()));
                break;
            }
        }
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        r
    }))
}

/// The MAC address of `dev` in namespace `ns` (SIOCGIFHWADDR).
pub fn hwaddr(ns: &'static str, dev: &str) -> Result<[u8; 6], String> {
    let dev = dev.to_string();
    join(in_netns(ns, move || {
        // SAFETY: ifreq is plain data; zeroed is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(dev.as_bytes().iter().take(15)) {
            *d = *s as libc::c_char;
        }
        // SAFETY: plain socket creation; the fd is closed below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: SIOCGIFHWADDR reads the name and writes the address in `ifr`.
        let r = unsafe { libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut ifr) };
        let e = std::io::Error::last_os_error();
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        if r != 0 {
            return Err(format!("SIOCGIFHWADDR {dev}: {e}"));
        }
        // SAFETY: SIOCGIFHWADDR filled the hwaddr member of the union.
        let a = unsafe { ifr.ifr_ifru.ifru_hwaddr.sa_data };
        Ok([a[0] as u8, a[1] as u8, a[2] as u8, a[3] as u8, a[4] as u8, a[5] as u8])
    }))
}

/// A MAC address as `ip` writes it (`02:00:00:00:00:02`).
pub fn mac_str(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// [`hwaddr`] as `ip` writes it.
pub fn hwaddr_str(ns: &'static str, dev: &str) -> Result<String, String> {
    Ok(mac_str(hwaddr(ns, dev)?))
}

/// SNMP counters of namespace `ns`: `/proc/net/snmp` (`Ip`, `Icmp`, `Tcp`,
/// ... : a names line and a values line), `/proc/net/netstat` (`TcpExt`,
/// `MPTcpExt`, ...: the same), `/proc/net/snmp6` and, where the kernel
/// has it, `/proc/net/xfrm_stat` (one `Name value` per line), as a
/// `Table:Name`, `Name6` or `XfrmName` -> value map. A
/// name asked for that is missing is an error, never a zero.
pub struct Snmp(std::collections::HashMap<String, u64>);

impl Snmp {
    pub fn read(ns: &'static str) -> Result<Snmp, String> {
        join(in_netns(ns, || {
            let mut m = std::collections::HashMap::new();
            // a names line and a values line per table
            for f in ["snmp", "netstat"] {
                let t = fs::read_to_string(format!("/proc/thread-self/net/{f}")).map_err(|e| format!("/proc/net/{f}: {e}"))?;
                let lines: Vec<&str> = t.lines().collect();
                for p in lines.chunks(2) {
                    let [names, vals] = p else { continue };
                    let table = names.split(':').next().unwrap_or("");
                    for (n, v) in names.split_whitespace().skip(1).zip(vals.split_whitespace().skip(1)) {
                        if let Ok(v) = v.parse::<i64>() {
                            m.insert(format!("{table}:{n}"), v as u64);
                        }
                    }
                }
            }
            let t6 = fs::read_to_string("/proc/thread-self/net/snmp6").map_err(|e| format!("/proc/net/snmp6: {e}"))?;
            let xfrm = fs::read_to_string("/proc/thread-self/net/xfrm_stat").unwrap_or_default();
            for l in t6.lines().chain(xfrm.lines()) {
                let mut w = l.split_whitespace();
                if let (Some(n), Some(v)) = (w.next(), w.next().and_then(|v| v.parse().ok())) {
                    m.insert(n.to_string(), v);
                }
            }
            Ok(Snmp(m))
        }))
    }

    pub fn get(&self, name: &str) -> Result<u64, String> {
        self.0.get(name).copied().ok_or(format!("no SNMP counter {name}"))
    }

    /// Every counter that moved since `before`, `name +delta`, sorted.
    pub fn moved(&self, before: &Snmp) -> String {
        let mut v: Vec<String> = self
            .0
            .iter()
            .filter_map(|(k, v)| before.0.get(k).filter(|b| *b != v).map(|b| format!("{k} +{}", v.wrapping_sub(*b))))
            .collect();
        v.sort();
        v.join(", ")
    }

    /// `name` now minus `name` in `before`.
    pub fn since(&self, before: &Snmp, name: &str) -> Result<u64, String> {
        Ok(self.get(name)?.wrapping_sub(before.get(name)?))
    }
}
