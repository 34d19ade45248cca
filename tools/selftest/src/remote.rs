// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The remote packet fuzzer (`make fuzz-net`; a short run in `make check`):
//! a hostile peer against a host whose queue has a memory provider.
//!
//! The victim, nsa, has netdevsim queue 0 with header split on and zcrx-rs
//! bound, listens on two ports and forwards to nsc over a veth with a
//! smaller MTU (the topology of `forward.rs`). From nsb:
//!
//! - valid connections, one after the other, each with data unique to it
//!   (an 8-byte id, then the pattern seeded with that id), received with
//!   RECV on port 7400 and checked byte for byte: none may stall or differ;
//! - an attacker crafting frames with a packet socket. It speaks TCP from a
//!   phantom address (192.0.2.77, 2001:db8::77: nsa reaches it through a
//!   static neighbour entry, nsb's stack drops what comes back, the
//!   attacker reads it), so it can open real connections to port 7401 and
//!   then misbehave inside their windows: option soup, urgent pointers
//!   anywhere, reordered, overlapping and retransmitted segments, IP
//!   fragments, bad checksums, link-layer padding, zero windows, FIN and
//!   RST races; and outside any connection: random flags, and segments
//!   the victim must forward (DF set or clear, TTL running out) while the
//!   next link's MTU changes. The victim reads port 7401 with RECV too
//!   (and `MSG_OOB` at marks), discarding what it gets.
//!
//! Every kernel splat fails the run (the VM's log scan). The report: the
//! seed, frames sent per class, valid connections verified (bytes, zero-
//! copy share), netdevsim's counters, and how often kprobes saw the kernel
//! functions that read payload (all calls, readable or not).
//!
//! GRO mixing: the `gro_mix` class sends small and large in-order segments
//! back to back while it changes netdevsim's `hds_copybreak` now and then
//! (small payloads stay readable in the header buffer), so readable and
//! unreadable skbs of one flow meet in GRO. The `back_out` class sends
//! segments nsa routes back out of its netdevsim port (a NIC with netmem
//! TX), so that IPv6 answers with Redirects quoting them. Every class
//! meets both of netdevsim's checksum reports: now and then it switches
//! between CHECKSUM_UNNECESSARY and CHECKSUM_COMPLETE (`hds_csum_complete`)
//! for what it splits; it writes a frame's padding to provider memory
//! either way.
//!
//! The `signed` class sends segments with a TCP-MD5 or TCP-AO option and
//! a payload to listeners that have keys for the phantom: the victim
//! checks the signature, which needs the payload, before any sequence
//! check.
//!
//! Tunnels (`tunnel.rs`): nsa decapsulates IPIP, IPv6 in IPv6, GRE,
//! VXLAN and GENEVE from nsb, and netdevsim splits the TCP inside them.
//! Valid connections take every path in turn (plain IPv4 and IPv6, and
//! each tunnel); the `tunnel` class sends segments from a phantom inside
//! each tunnel, in-order runs for GRO, with wrong inner and outer
//! checksums, missing UDP checksums, wrong GRE keys, odd VXLAN flags,
//! GENEVE options and versions, padding inside and outside.
//!
//! Upper layers (`ulp.rs`): nsa has an MPTCP listener and kTLS listeners
//! (TLS 1.2 and 1.3, AES-GCM-128) whose sockets are on the provider's
//! queue. The `mptcp` class connects with nsb's own MPTCP, asking for DSS
//! checksums most of the time, or crafts an MP_CAPABLE handshake and DSS
//! options by hand; the `ktls` class sends kTLS records from nsb's own
//! kTLS, or made-up records. Their receivers read with `recv()`: what the
//! NIC left readable (`hds_copybreak`) decrypts, the rest fails with
//! `EFAULT`, as on any socket of a provider's queue.
//!
//! ESP: nsa has IPv4 and IPv6 SAs offloaded to netdevsim (`esp.rs`), which
//! "decrypts" and splits what their SPIs name; the `esp` class sends ESP
//! packets with any trailer to them.
//!
//! Parking out-of-order data for good is a test of its own,
//! `ofo_parker_cannot_stall_others`; every session here ends with a RST
//! that frees its queues.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::sys::{at_mark, recv_oob};
use zcrx::uapi::{ZCRX_RS_RECV_DONTWAIT, ZCRX_RS_RECV_MERGE, ZCRX_RS_REC_COPY};
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::forward::Router;
use crate::fuzz::Rng;
use crate::net::{connect, in_netns, join, run, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::{self, Csum, Ip, Tcp, ACK, FIN, PSH, RST, SYN, URG};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("fuzz_remote", fuzz_remote),
    ("ofo_parker_cannot_stall_others", ofo_parker_cannot_stall_others),
    ("ofo_parkers_cannot_stall_others_512", ofo_parkers_cannot_stall_others_512),
];

/// The attacker's packet classes, each picked with the same chance.
const CLASSES: &[&str] = &[
    "options",
    "urgent",
    "reorder",
    "frag",
    "forward",
    "bad_csum",
    "padding",
    "rst_fin",
    "flags",
    "zero_win",
    "gro_mix",
    "back_out",
    "signed",
    "tunnel",
    "mptcp",
    "ktls",
    "esp",
    "esp_tunnel",
    "esp_udp",
];

const VALID_PORT: u16 = 7400;
const GARBAGE_PORT: u16 = 7401;
/// Listeners with a TCP-MD5 and a TCP-AO key for the phantom addresses.
const MD5_PORT: u16 = 7404;
/// The port ESP protects (`esp.rs`'s SAs, offloaded to netdevsim).
const ESP_PORT: u16 = 7409;
/// The TCP port of the tunnel-mode and the ESP-in-UDP SA's policies.
const ESP_PORT_TUNNEL: u16 = 7410;
const ESP_PORT_UDP: u16 = 7411;
const AO_PORT: u16 = 7405;
const PHANTOM4: &str = "192.0.2.77";
const PHANTOM6: &str = "2001:db8::77";
/// Functions that read payload: how often the run reached them.
const PROBES: &[&str] = &[
    "skb_copy_bits",
    "skb_checksum",
    "skb_copy_and_csum_bits",
    "__skb_checksum_complete",
    "ip_do_fragment",
    "ip6_fragment",
    "skb_gro_receive",
    "tcp_urg",
    "__skb_to_sgvec",
    "__icmp_send",
    "ndisc_send_redirect",
    "ip_tunnel_rcv",
    "__ip6_tnl_rcv",
    "vxlan_rcv",
    "geneve_udp_encap_recv",
    "mptcp_recvmsg",
    "tls_sw_recvmsg",
    "esp_input_done2",
    "esp6_input_done2",
];

/// kprobe events on [`PROBES`]; removed on drop.
struct Probes {
    dir: String,
    names: Vec<String>,
}

impl Probes {
    fn new() -> (Probes, Vec<String>) {
        let mut dir = "/sys/kernel/tracing".to_string();
        if !std::path::Path::new(&format!("{dir}/kprobe_events")).exists() {
            let _ = run("mount", &["-t", "tracefs", "nodev", &dir], "");
        }
        if !std::path::Path::new(&format!("{dir}/kprobe_events")).exists() {
            dir = "/sys/kernel/debug/tracing".into();
        }
        let mut p = Probes { dir, names: Vec::new() };
        let mut missing = Vec::new();
        for f in PROBES {
            let ev = format!("zf_{}", f.trim_start_matches('_'));
            let add = std::fs::OpenOptions::new()
                .append(true)
                .open(format!("{}/kprobe_events", p.dir))
                .and_then(|mut o| std::io::Write::write_all(&mut o, format!("p:{ev} {f}\n").as_bytes()));
            let on = add.and_then(|_| std::fs::write(format!("{}/events/kprobes/{ev}/enable", p.dir), "1"));
            match on {
                Ok(()) => p.names.push(ev),
                Err(e) => missing.push(format!("{f} ({e})")),
            }
        }
        (p, missing)
    }

    /// Hits per probed function.
    fn hits(&self) -> BTreeMap<String, u64> {
        let t = std::fs::read_to_string(format!("{}/kprobe_profile", self.dir)).unwrap_or_default();
        t.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (n, h) = (w.next()?, w.next()?.parse().ok()?);
                self.names.iter().any(|x| x == n).then(|| (n.trim_start_matches("zf_").to_string(), h))
            })
            .collect()
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        for ev in &self.names {
            let _ = std::fs::write(format!("{}/events/kprobes/{ev}/enable", self.dir), "0");
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(format!("{}/kprobe_events", self.dir))
                .and_then(|mut o| std::io::Write::write_all(&mut o, format!("-:{ev}\n").as_bytes()));
        }
    }
}

/// The attacker: a packet socket on nsb's device.
struct Attacker {
    fd: std::os::fd::OwnedFd,
    ifindex: u32,
    /// nsa's MAC.
    mac: [u8; 6],
    rng: Rng,
    /// Frames sent, per class.
    sent: BTreeMap<&'static str, u64>,
    /// What happened, per event (sessions opened, SYN unanswered, ...).
    events: BTreeMap<&'static str, u64>,
    next_port: u16,
    /// netdevsim's hds_csum_complete as last set.
    complete: bool,
}

/// A connection the attacker opened from the phantom address.
struct Session {
    ip: Ip,
    sport: u16,
    dport: u16,
    /// Next sequence number to send.
    nxt: u32,
    /// The victim's next sequence number (what we ack).
    rcv: u32,
}

impl Session {
    /// A segment at stream offset `off` from `nxt`.
    fn seg(&self, off: u32, flags: u8, payload: Vec<u8>) -> Tcp {
        Tcp { seq: self.nxt.wrapping_add(off), ack: self.rcv, flags, win: 65535, ..Tcp::data(self.sport, self.dport, payload) }
    }
}

impl Attacker {
    /// Opens the socket, in the calling thread's namespace (nsb).
    fn new(ifindex: u32, mac: [u8; 6], seed: u64) -> Result<Attacker, String> {
        let fd = pkt::packet_socket(ifindex)?;
        Ok(Attacker { fd, ifindex, mac, rng: Rng(seed), sent: BTreeMap::new(), events: BTreeMap::new(), next_port: 20000, complete: false })
    }

    fn note(&mut self, what: &'static str) {
        *self.events.entry(what).or_default() += 1;
    }

    /// Sends an IP datagram to nsa, counted under `class`.
    fn send(&mut self, class: &'static str, v6: bool, datagram: &[u8], pad: usize) {
        if self.complete {
            self.note("frames sent with CHECKSUM_COMPLETE on");
        }
        let f = pkt::frame(self.mac, v6, datagram, pad);
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = self.ifindex as i32;
        sa.sll_halen = 6;
        sa.sll_addr[..6].copy_from_slice(&self.mac);
        // A full tx queue (EAGAIN, ENOBUFS) just loses the frame, as the
        // wire would.
        // SAFETY: `f` and `sa` are valid for the lengths given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                f.as_ptr().cast(),
                f.len(),
                0,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n == f.len() as isize {
            *self.sent.entry(class).or_default() += 1;
        } else {
            self.note("send failed");
        }
    }

    /// The next segment nsa sends to the phantom's `port`, within `wait`.
    fn expect(&mut self, port: u16, wait: Duration) -> Option<pkt::Seen> {
        let t0 = Instant::now();
        let mut buf = vec![0u8; 2048];
        while t0.elapsed() < wait {
            let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 20) };
            loop {
                // SAFETY: `buf` is writable for its length.
                let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n <= 0 {
                    break;
                }
                let Some(s) = pkt::parse(&buf[..n as usize]) else { continue };
                let to_phantom = s.dst == PHANTOM4.parse::<IpAddr>().unwrap() || s.dst == PHANTOM6.parse::<IpAddr>().unwrap();
                if to_phantom && s.dport == port {
                    return Some(s);
                }
            }
        }
        None
    }

    /// Random TCP options: sometimes well-formed kinds with odd lengths,
    /// sometimes raw bytes.
    fn option_soup(&mut self) -> Vec<u8> {
        let mut o = Vec::new();
        let n = self.rng.below(6);
        for _ in 0..n {
            let kind = self.rng.pick(&[0u8, 1, 2, 3, 4, 5, 8, 19, 28, 29, 30, 34, 253, 254, 99]);
            match kind {
                0 | 1 => o.push(kind),
                _ => {
                    let len = if self.rng.pct(70) {
                        match kind {
                            2 => 4,
                            3 => 3,
                            4 => 2,
                            8 => 10,
                            19 => 18,
                            _ => 2 + self.rng.below(16) as u8,
                        }
                    } else {
                        self.rng.below(41) as u8
                    };
                    o.push(kind);
                    o.push(len);
                    for _ in 2..len {
                        o.push(self.rng.next() as u8);
                    }
                }
            }
        }
        o.truncate(40);
        o
    }

    fn payload(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.rng.next() as u8).collect()
    }

    /// Opens a connection to nsa's `dport` from the phantom address:
    /// SYN, SYN-ACK, ACK. `None` when nsa does not answer.
    fn handshake(&mut self, class: &'static str, dport: u16, soup: bool) -> Option<Session> {
        let opts = if soup { self.option_soup() } else { vec![2, 4, 0x05, 0xb4, 4, 2] }; // MSS 1460, SACK permitted
        self.handshake_opts(class, dport, opts, Vec::new())
    }

    /// [`Attacker::handshake`] with options `syn` on the SYN and `ack` on
    /// the ACK that completes it.
    fn handshake_opts(&mut self, class: &'static str, dport: u16, syn: Vec<u8>, ack: Vec<u8>) -> Option<Session> {
        let v6 = self.rng.pct(50);
        let ip = if v6 { Ip::new(PHANTOM6, "2001:db8::1") } else { Ip::new(PHANTOM4, "192.0.2.1") };
        self.next_port = if self.next_port >= 60000 { 20000 } else { self.next_port + 1 };
        let sport = self.next_port;
        let iss = self.rng.next() as u32;
        let syn = Tcp { seq: iss, ack: 0, flags: SYN, win: 65535, opts: syn, ..Tcp::data(sport, dport, Vec::new()) };
        self.send(class, v6, &pkt::tcp_datagram(&ip, &syn), 0);
        let sa = self.expect(sport, Duration::from_millis(500));
        let Some(sa) = sa.filter(|s| s.flags & (SYN | ACK) == SYN | ACK && s.ack == iss.wrapping_add(1)) else {
            self.note("SYN unanswered");
            return None;
        };
        let s = Session { ip, sport, dport, nxt: iss.wrapping_add(1), rcv: sa.seq.wrapping_add(1) };
        let ack = Tcp { opts: ack, ..s.seg(0, ACK, Vec::new()) };
        self.send(class, v6, &pkt::tcp_datagram(&s.ip, &ack), 0);
        self.note("sessions opened");
        Some(s)
    }

    fn send_seg(&mut self, class: &'static str, s: &Session, t: &Tcp) {
        let v6 = s.ip.src.is_ipv6();
        self.send(class, v6, &pkt::tcp_datagram(&s.ip, t), 0);
    }

    /// Ends a session with a RST, as a peer that got the victim's ACKs:
    /// at the sequence number the victim acknowledged last (a RST elsewhere
    /// in the window only draws a challenge ACK, RFC 5961), and at the end
    /// of what we sent. The victim then frees its queues.
    fn reset(&mut self, class: &'static str, s: &Session, off: u32) {
        let mut acked = 0u32;
        // until the victim is quiet for 20 ms (its ACKs come late on a
        // slow kernel): a RST off rcv_nxt only draws a challenge ACK
        while let Some(a) = self.expect(s.sport, Duration::from_millis(20)) {
            let d = a.ack.wrapping_sub(s.nxt);
            if a.flags & ACK != 0 && d <= off.wrapping_add(1) {
                acked = acked.max(d);
            }
        }
        for seq in [s.nxt.wrapping_add(acked), s.nxt.wrapping_add(off)] {
            let mut r = s.seg(0, RST | ACK, Vec::new());
            r.seq = seq;
            self.send_seg(class, s, &r);
        }
    }

    /// 1 to 8 segments of one flow through the victim (to `ip.dst`, port
    /// 9, from `sport`), back to back so that GRO may merge them before
    /// they are forwarded: DF set or clear, TTL 1, 2 or 64, payloads of
    /// `min` to `min + 1399` bytes.
    fn transit_flow(&mut self, class: &'static str, mut ip: Ip, sport: u16, min: usize) {
        let v6 = ip.src.is_ipv6();
        ip.df = self.rng.pct(50);
        ip.ttl = self.rng.pick(&[1, 2, 64]);
        ip.id = self.rng.next() as u16;
        let mut seq = self.rng.next() as u32;
        for _ in 0..1 + self.rng.below(8) {
            let n = min + self.rng.below(1400) as usize;
            let t = Tcp { seq, ..Tcp::data(sport, 9, self.payload(n)) };
            self.send(class, v6, &pkt::tcp_datagram(&ip, &t), 0);
            seq = seq.wrapping_add(n as u32);
            ip.id = ip.id.wrapping_add(1);
        }
    }

    /// 1 to 8 segments of one flow from a phantom behind nsb, through one
    /// of the tunnels nsa decapsulates (`tunnel.rs`), to either port or
    /// none: in order (GRO of tunnelled flows), any flags now and then,
    /// option soup; and the wrappers mangled now and then: a wrong inner
    /// TCP, outer UDP or GRE checksum, no UDP checksum, a wrong GRE key,
    /// VXLAN without its VNI flag, GENEVE with options or a version it
    /// does not know, link-layer padding, bytes after the inner datagram
    /// (netdevsim leaves those unsplit: its inner and outer ends differ).
    fn tunnel(&mut self, class: &'static str) {
        use crate::tunnel::{encap, Encap, Wrap, TUNNELS};
        use pkt::Csum;
        let t = TUNNELS[self.rng.below(TUNNELS.len() as u64) as usize];
        let mut inner = Ip::new(&t.phantom(), t.a);
        inner.df = self.rng.pct(50);
        inner.id = self.rng.next() as u16;
        let dport = self.rng.pick(&[VALID_PORT, GARBAGE_PORT, 9]);
        let sport = 1024 + self.rng.below(60000) as u16;
        let mut seq = self.rng.next() as u32;
        let ack = self.rng.next() as u32;
        // the outer UDP source port: a flow hash, fixed per flow
        let usport = 49152 + self.rng.below(16384) as u16;
        for _ in 0..1 + self.rng.below(8) {
            let n = 1 + self.rng.below(1300) as usize;
            let mut tcp = Tcp { seq, ack, win: 65535, ..Tcp::data(sport, dport, self.payload(n)) };
            if self.rng.pct(15) {
                tcp.flags = self.rng.next() as u8;
                tcp.urg = self.rng.next() as u16;
            }
            if self.rng.pct(15) {
                tcp.opts = self.option_soup();
            }
            tcp.bad_csum = self.rng.pct(10);
            let mut d = pkt::tcp_datagram(&inner, &tcp);
            if self.rng.pct(5) {
                // bytes after the inner datagram, inside the tunnel
                let extra = 1 + self.rng.below(32) as usize;
                d.extend((0..extra).map(|_| self.rng.next() as u8));
            }
            seq = seq.wrapping_add(n as u32);
            inner.id = inner.id.wrapping_add(1);
            let wrong = |r: &mut Rng| if r.pct(10) { Csum::Wrong } else { Csum::Right };
            // the inner Ethernet source: mostly nsb's tunnel device
            let src = |r: &mut Rng, w: &mut Wrap| {
                if !r.pct(90) {
                    w.inner_src = [2, r.next() as u8, 0, 0, 0, 1];
                }
            };
            let mut w = Wrap { usport, ..Wrap::plain(&t, Csum::Right) };
            match t.encap {
                Encap::Ip { .. } => {}
                Encap::GreCsumKey => {
                    w.csum = if self.rng.pct(5) { Csum::Absent } else { wrong(&mut self.rng) };
                    if self.rng.pct(5) {
                        w.gre_key = self.rng.next() as u32;
                    }
                }
                Encap::Vxlan => {
                    if self.rng.pct(5) {
                        w.vxlan_flags = self.rng.next() as u8 & !0x08;
                    }
                    w.csum = if self.rng.pct(50) { Csum::Absent } else { wrong(&mut self.rng) };
                    src(&mut self.rng, &mut w);
                }
                Encap::Geneve => {
                    if self.rng.pct(5) {
                        w.geneve_ver = 1 + self.rng.below(3) as u8;
                    }
                    // options: class, type, length in 4-byte words, data
                    if self.rng.pct(30) {
                        let words = self.rng.below(4) as u8;
                        w.geneve_opts.extend_from_slice(&[0x01, 0x02, self.rng.next() as u8 & 0x80, words]);
                        w.geneve_opts.extend((0..4 * words).map(|_| self.rng.next() as u8));
                    }
                    w.csum = if self.rng.pct(10) { Csum::Absent } else { wrong(&mut self.rng) };
                    src(&mut self.rng, &mut w);
                }
            }
            let (outer6, out) = encap(&t, &d, &w);
            let pad = if self.rng.pct(10) { 1 + self.rng.below(32) as usize } else { 0 };
            self.send(class, outer6, &out, pad);
        }
    }

    /// nsa's address for a connection of the attacker's own stack (nsb).
    fn victim_addr(&mut self, port: u16) -> SocketAddr {
        crate::net::addr_a(self.rng.pct(50), port)
    }

    /// 1 to 16 writes of 1 to 1400 bytes (`TCP_NODELAY`: about a segment
    /// each) made by `make`, each counted under `class`.
    fn writes(&mut self, class: &'static str, s: &mut TcpStream, make: impl Fn(&mut Self, usize) -> Vec<u8>) {
        for _ in 0..1 + self.rng.below(16) {
            let n = 1 + self.rng.below(1400) as usize;
            let b = make(self, n);
            if std::io::Write::write_all(s, &b).is_err() {
                self.note("write failed");
                return;
            }
            *self.sent.entry(class).or_default() += 1;
        }
    }

    /// Closes a connection of the attacker's own stack: with a FIN, or
    /// with a RST once everything written was acknowledged (within 200
    /// ms; else with a FIN, which still sends it), so that every write
    /// counted was sent.
    fn end_conn(&mut self, s: TcpStream) {
        if self.rng.pct(50) && crate::net::wait_acked(&s, Duration::from_millis(200)).is_ok() {
            let _ = zcrx::sys::set_linger_abort(&s);
        }
    }

    /// To nsa's MPTCP listener. Mostly the attacker's own MPTCP stack,
    /// asking for DSS checksums (`net.mptcp.checksum_enabled` in nsb) most
    /// of the time; otherwise by hand from the phantom: an MP_CAPABLE
    /// handshake that asks for checksums, with made-up keys, then segments
    /// with DSS options of random flags, mappings and checksums.
    fn mptcp(&mut self, class: &'static str) {
        use crate::ulp::{connect_proto, IPPROTO_MPTCP, MPTCP_PORT};
        if self.rng.pct(70) {
            let csum = if self.rng.pct(70) { "1" } else { "0" };
            if std::fs::write("/proc/sys/net/mptcp/checksum_enabled", csum).is_err() {
                self.note("checksum_enabled write failed");
            }
            let to = self.victim_addr(MPTCP_PORT);
            let Ok(mut s) = connect_proto(to, IPPROTO_MPTCP, Duration::from_secs(1)) else {
                self.note("MPTCP connect failed");
                return;
            };
            if s.set_write_timeout(Some(Duration::from_millis(500))).is_err() {
                self.note("SO_SNDTIMEO failed");
                return;
            }
            self.writes(class, &mut s, |a, n| a.payload(n));
            self.end_conn(s);
            return;
        }
        // MP_CAPABLE v1, flags A (checksums) and H (HMAC-SHA256); the ACK
        // echoes a key for each side
        let syn = vec![2, 4, 0x05, 0xb4, 4, 2, 30, 4, 0x01, 0x81];
        let mut ack = vec![30, 20, 0x01, 0x81];
        ack.extend(self.payload(16));
        let Some(s) = self.handshake_opts(class, MPTCP_PORT, syn, ack) else { return };
        let mut off = 0u32;
        for _ in 0..1 + self.rng.below(6) {
            let n = 1 + self.rng.below(1300) as u32;
            let mut t = s.seg(off, ACK | PSH, self.payload(n as usize));
            t.opts = self.dss(off, n);
            self.send_seg(class, &s, &t);
            off += n;
        }
        self.reset(class, &s, off);
    }

    /// A DSS option (MPTCP kind 30, subtype 2) for `n` bytes at subflow
    /// offset `off`: random flags, a mapping that is mostly right for the
    /// segment, a random checksum; now and then a random length.
    fn dss(&mut self, off: u32, n: u32) -> Vec<u8> {
        let flags = self.rng.next() as u8 & 0x1f;
        let mut o = vec![30, 0, 0x20, flags];
        if flags & 0x01 != 0 {
            o.extend(self.payload(if flags & 0x02 != 0 { 8 } else { 4 }));
        }
        if flags & 0x04 != 0 {
            o.extend(self.payload(if flags & 0x08 != 0 { 8 } else { 4 }));
            let ssn = if self.rng.pct(70) { off + 1 } else { self.rng.next() as u32 };
            o.extend_from_slice(&ssn.to_be_bytes());
            let len = if self.rng.pct(70) { n as u16 } else { self.rng.next() as u16 };
            o.extend_from_slice(&len.to_be_bytes());
            if self.rng.pct(90) {
                o.extend(self.payload(2));
            }
        }
        o[1] = if self.rng.pct(90) { o.len() as u8 } else { self.rng.below(40) as u8 };
        o
    }

    /// To nsa's kTLS listeners (TLS 1.2 or 1.3, AES-GCM-128, the key the
    /// victim installs): mostly records from the attacker's own kTLS
    /// (`TLS_TX`), one per write; otherwise made-up records: a random or
    /// plausible type, version and length, random bytes.
    fn ktls(&mut self, class: &'static str) {
        use crate::takeover::{ktls, TLS12, TLS13};
        use crate::ulp::{connect_proto, TLS12_PORT, TLS13_PORT, TLS_TX};
        let v13 = self.rng.pct(50);
        let to = self.victim_addr(if v13 { TLS13_PORT } else { TLS12_PORT });
        let Ok(mut s) = connect_proto(to, 0, Duration::from_secs(1)) else {
            self.note("kTLS connect failed");
            return;
        };
        if s.set_write_timeout(Some(Duration::from_millis(500))).is_err() {
            self.note("SO_SNDTIMEO failed");
            return;
        }
        if self.rng.pct(80) {
            if ktls(s.as_raw_fd(), TLS_TX, if v13 { TLS13 } else { TLS12 }).is_err() {
                self.note("TLS_TX failed");
                return;
            }
            self.writes(class, &mut s, |a, n| a.payload(n));
        } else {
            self.writes(class, &mut s, |a, n| {
                let any = a.rng.next() as u8;
                let mut r = vec![a.rng.pick(&[23u8, 23, 21, 22, 20, any]), 3, 3];
                if a.rng.pct(10) {
                    r[1] = a.rng.next() as u8;
                    r[2] = a.rng.next() as u8;
                }
                let len = if a.rng.pct(70) { n as u16 } else { a.rng.next() as u16 };
                r.extend_from_slice(&len.to_be_bytes());
                r.extend(a.payload(n));
                r
            });
        }
        self.end_conn(s);
    }

    /// ESP from nsb's own address to the SAs nsa offloads to netdevsim
    /// (`esp.rs`; netdevsim "decrypts" what its SPI names and splits it,
    /// leaving the trailer in the area): in transport mode to [`ESP_PORT`]
    /// (class `esp`), in tunnel mode to [`ESP_PORT_TUNNEL`] (`esp_tunnel`:
    /// the segment in an inner datagram of the same addresses) or in UDP
    /// (`esp_udp`: to [`crate::esp::NATT_PORT`], tunnel mode, to
    /// [`ESP_PORT_UDP`]). 1 to 6 packets of one flow to that port (or
    /// another), the SPI mostly that of the mode's SA, any sequence
    /// numbers, a TCP segment of any flags and payload, then padding and a
    /// pad length that mostly agree, a next header that is mostly right,
    /// and a random ICV.
    fn esp(&mut self, class: &'static str) {
        use crate::esp::Mode;
        let mode = match class {
            "esp_tunnel" => Mode::Tunnel,
            "esp_udp" => Mode::Udp,
            _ => Mode::Transport,
        };
        let v6 = self.rng.pct(50);
        let mut ip = if v6 { Ip::new("2001:db8::2", "2001:db8::1") } else { Ip::new("192.0.2.2", "192.0.2.1") };
        ip.id = self.rng.next() as u16;
        let spi = if self.rng.pct(90) {
            let (s4, s6) = mode.spis();
            if v6 {
                s6
            } else {
                s4
            }
        } else {
            self.rng.next() as u32
        };
        let sport = 1024 + self.rng.below(60000) as u16;
        let port = match mode {
            Mode::Transport => ESP_PORT,
            Mode::Tunnel => ESP_PORT_TUNNEL,
            Mode::Udp | Mode::UdpTransport => ESP_PORT_UDP,
        };
        let dport = if self.rng.pct(80) { port } else { self.rng.pick(&[VALID_PORT, GARBAGE_PORT, ESP_PORT, 9]) };
        let mut seq = self.rng.next() as u32;
        for _ in 0..1 + self.rng.below(6) {
            let n = self.rng.below(1300) as usize;
            let any = self.rng.next() as u8;
            let flags = self.rng.pick(&[SYN, ACK | PSH, ACK, ACK | FIN, any]);
            let t = Tcp { seq, flags, win: 65535, ..Tcp::data(sport, dport, self.payload(n)) };
            seq = seq.wrapping_add(n as u32);
            let (seg, right) = match mode {
                Mode::Tunnel | Mode::Udp => {
                    let mut inner = ip;
                    inner.id = self.rng.next() as u16;
                    (pkt::tcp_datagram(&inner, &t), if v6 { 41 } else { 4 })
                }
                _ => (pkt::tcp_segment(&ip, &t), 6),
            };
            let mut e = Vec::with_capacity(seg.len() + 64);
            e.extend_from_slice(&spi.to_be_bytes());
            e.extend_from_slice(&(self.rng.next() as u32).to_be_bytes());
            e.extend(self.payload(8)); // IV
            e.extend_from_slice(&seg);
            let fit = (4 - (seg.len() + 2) % 4) % 4;
            let pad = if self.rng.pct(80) { fit } else { self.rng.below(256) as usize };
            e.extend((1..=pad).map(|i| i as u8));
            let padlen = if self.rng.pct(90) { pad as u8 } else { self.rng.next() as u8 };
            let any = self.rng.next() as u8;
            let next = if self.rng.pct(85) { right } else { self.rng.pick(&[6u8, 17, 41, 4, 59, any]) };
            e.extend_from_slice(&[padlen, next]);
            e.extend(self.payload(16)); // ICV
            let d = match mode {
                Mode::Udp | Mode::UdpTransport => {
                    let natt = crate::esp::NATT_PORT;
                    let sp = if self.rng.pct(90) { natt } else { self.rng.next() as u16 };
                    // IPv4: mostly none, as ESP in UDP goes; IPv6 must
                    // have one (udp6 drops a zero before IPsec sees it)
                    let usual = if v6 { Csum::Right } else { Csum::Absent };
                    let csum = if self.rng.pct(80) { usual } else { self.rng.pick(&[Csum::Right, Csum::Wrong, Csum::Absent]) };
                    pkt::udp_datagram(&ip, sp, natt, &e, csum)
                }
                _ => pkt::ip_datagram(&ip, libc::IPPROTO_ESP as u8, &e),
            };
            ip.id = ip.id.wrapping_add(1);
            let lpad = if self.rng.pct(10) { 1 + self.rng.below(32) as usize } else { 0 };
            self.send(class, v6, &d, lpad);
        }
    }

    /// One round of one class.
    fn round(&mut self, forward_mtu: &mut Instant) {
        // Now and then netdevsim switches between CHECKSUM_UNNECESSARY and
        // CHECKSUM_COMPLETE for what it splits: every class then meets
        // both (padding in provider memory trimmed, or the packet dropped;
        // GRO and TCP checking the device's sum of unreadable payload).
        if self.rng.pct(2) {
            let on = self.rng.pct(50);
            let r = Nsim::csum_complete(1, on);
            if r.is_ok() {
                self.complete = on;
            }
            let what = match r {
                Ok(()) if on => "CHECKSUM_COMPLETE on",
                Ok(()) => "CHECKSUM_COMPLETE off",
                Err(_) => "hds_csum_complete write failed",
            };
            self.note(what);
        }
        let class = self.rng.pick(CLASSES);
        match class {
            "esp" | "esp_tunnel" | "esp_udp" => self.esp(class),
            "tunnel" => self.tunnel(class),
            "mptcp" => self.mptcp(class),
            "ktls" => self.ktls(class),
            "signed" => {
                // Segments with a TCP-MD5 or TCP-AO option (a random
                // signature) and a payload, to a listener that has a key
                // for the phantom: the victim hashes the payload to check
                // the signature, before any sequence check.
                let v6 = self.rng.pct(50);
                let ip = if v6 { Ip::new(PHANTOM6, "2001:db8::1") } else { Ip::new(PHANTOM4, "192.0.2.1") };
                let ao = self.rng.pct(50);
                let sport = 1024 + self.rng.below(60000) as u16;
                for _ in 0..1 + self.rng.below(4) {
                    let n = 1 + self.rng.below(1400) as usize;
                    let mut t = Tcp {
                        seq: self.rng.next() as u32,
                        ack: self.rng.next() as u32,
                        flags: self.rng.pick(&[ACK | PSH, ACK, ACK | PSH | URG, ACK | FIN]),
                        urg: self.rng.next() as u16,
                        ..Tcp::data(sport, if ao { AO_PORT } else { MD5_PORT }, self.payload(n))
                    };
                    // MD5: kind 19, a 16-byte digest; AO: kind 29, key ids
                    // and a 12-byte MAC (hmac(sha1), truncated)
                    t.opts = if ao { vec![29, 16, 100, 100] } else { vec![19, 18] };
                    for _ in 0..if ao { 12 } else { 16 } {
                        t.opts.push(self.rng.next() as u8);
                    }
                    self.send(class, v6, &pkt::tcp_datagram(&ip, &t), 0);
                }
            }
            "back_out" => {
                // Routed back out of the port they came in on (nsa's route
                // to 203.0.113.0/24 and 2001:db8:3::5 leads to nsb): the
                // NIC must not be handed provider memory to transmit, and
                // IPv6 answers with Redirects quoting them.
                let ip = if self.rng.pct(50) {
                    Ip::new(PHANTOM6, crate::forward::BACK6)
                } else {
                    Ip::new(PHANTOM4, &format!("203.0.113.{}", 1 + self.rng.below(250)))
                };
                self.transit_flow(class, ip, 40001, 1);
            }
            "gro_mix" => {
                // Now and then a new copybreak on the victim's device:
                // segments of at most that many bytes stay readable in the
                // header buffer, the others are split. In-order segments of
                // both kinds, back to back, meet in one GRO batch.
                if self.rng.pct(10) {
                    let cb = self.rng.pick(&[0u32, 64, 256, 1000]);
                    let what = if Nsim::copybreak(1, cb).is_ok() { "copybreak changed" } else { "copybreak write failed" };
                    self.note(what);
                }
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let mut off = 0u32;
                for _ in 0..4 + self.rng.below(12) {
                    let n = if self.rng.pct(50) { 1 + self.rng.below(256) } else { 257 + self.rng.below(1144) } as u32;
                    let t = s.seg(off, ACK | PSH, self.payload(n as usize));
                    self.send_seg(class, &s, &t);
                    off += n;
                }
                self.reset(class, &s, off);
            }
            "options" => {
                let soup = self.rng.pct(50);
                let Some(s) = self.handshake(class, GARBAGE_PORT, soup) else { return };
                let mut off = 0u32;
                for _ in 0..1 + self.rng.below(4) {
                    let n = 1 + self.rng.below(1400) as usize;
                    let mut t = s.seg(off, ACK | PSH, self.payload(n));
                    t.opts = self.option_soup();
                    self.send_seg(class, &s, &t);
                    off = off.wrapping_add(n as u32);
                }
                self.reset(class, &s, off);
            }
            "urgent" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let segs = 2 + self.rng.below(6) as u32;
                let size = 200 + self.rng.below(1200) as u32;
                // Some segments out of order first (an urgent byte that
                // arrives before the hole is filled), then all in order.
                let mut order: Vec<u32> = (0..segs).collect();
                if self.rng.pct(50) {
                    order.rotate_left(1 + self.rng.below(u64::from(segs - 1)) as usize);
                    order.extend(0..segs);
                }
                for i in order {
                    let mut t = s.seg(i * size, ACK | PSH, self.payload(size as usize));
                    if self.rng.pct(60) {
                        t.flags |= URG;
                        t.urg = match self.rng.below(4) {
                            0 => 0,
                            1 => self.rng.below(u64::from(size)) as u16,
                            2 => (size + self.rng.below(3000) as u32) as u16,
                            _ => self.rng.next() as u16,
                        };
                    }
                    self.send_seg(class, &s, &t);
                }
                self.reset(class, &s, segs * size);
            }
            "reorder" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let total = 2000 + self.rng.below(20000) as u32;
                let data = self.payload(total as usize);
                // Random pieces, overlapping, some repeated or with
                // different bytes in the overlap, in random order; then
                // the whole range once more in order so no hole stays.
                let mut pieces = Vec::new();
                for _ in 0..4 + self.rng.below(12) {
                    let a = self.rng.below(u64::from(total)) as u32;
                    let len = (1 + self.rng.below(1400) as u32).min(total - a);
                    pieces.push((a, len));
                }
                let mut a = 0;
                while a < total {
                    let len = (1 + self.rng.below(1400) as u32).min(total - a);
                    pieces.push((a, len));
                    a += len;
                }
                for (a, len) in pieces {
                    let mut bytes = data[a as usize..(a + len) as usize].to_vec();
                    if self.rng.pct(10) {
                        bytes.iter_mut().for_each(|b| *b ^= 0x5a);
                    }
                    let mut t = s.seg(a, ACK | PSH, bytes);
                    if self.rng.pct(30) {
                        // a SACK block (kind 5) over something we sent
                        let l = s.rcv;
                        t.opts = vec![1, 1, 5, 10];
                        t.opts.extend_from_slice(&l.to_be_bytes());
                        t.opts.extend_from_slice(&l.wrapping_add(100).to_be_bytes());
                    }
                    self.send_seg(class, &s, &t);
                }
                self.reset(class, &s, total);
            }
            "frag" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let n = 100 + self.rng.below(1300) as usize;
                let t = s.seg(0, ACK | PSH, self.payload(n));
                let d = pkt::tcp_datagram(&s.ip, &t);
                let chunk = 8 * (1 + self.rng.below(100) as usize);
                let v6 = s.ip.src.is_ipv6();
                let mut frags = if v6 {
                    pkt::ipv6_fragments(&d, chunk, self.rng.next() as u32)
                } else {
                    let mut d = d;
                    d[4..6].copy_from_slice(&(self.rng.next() as u16).to_be_bytes());
                    d[6] = 0; // DF off
                    pkt::ipv4_fragments(&d, chunk)
                };
                if self.rng.pct(40) {
                    frags.reverse();
                }
                if self.rng.pct(20) {
                    let dup = frags[self.rng.below(frags.len() as u64) as usize].clone();
                    frags.push(dup);
                }
                for f in frags {
                    self.send(class, v6, &f, 0);
                }
                self.reset(class, &s, n as u32);
            }
            "forward" => {
                // To nsc, through the victim: fragmented (DF clear), or
                // answered with ICMP (DF set, TTL 1).
                if forward_mtu.elapsed() > Duration::from_secs(1) && self.rng.pct(5) {
                    let mtu = self.rng.pick(&["1280", "1400", "1500"]);
                    if run("ip", &["-n", NS_A, "link", "set", "fwd0", "mtu", mtu], "").is_ok() {
                        self.note("forward MTU changed");
                    }
                    *forward_mtu = Instant::now();
                }
                let ip = if self.rng.pct(40) { Ip::new(PHANTOM6, "2001:db8:1::2") } else { Ip::new(PHANTOM4, "198.51.100.2") };
                self.transit_flow(class, ip, 40000, 100);
            }
            "bad_csum" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let n = 1 + self.rng.below(1400) as usize;
                let mut t = s.seg(0, ACK | PSH, self.payload(n));
                t.bad_csum = true;
                self.send_seg(class, &s, &t);
                // and the good one, so the stream goes on
                t.bad_csum = false;
                self.send_seg(class, &s, &t);
                self.reset(class, &s, n as u32);
            }
            "padding" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let n = 1 + self.rng.below(1400) as usize;
                let t = s.seg(0, ACK | PSH, self.payload(n));
                let d = pkt::tcp_datagram(&s.ip, &t);
                let pad = 1 + self.rng.below(64) as usize;
                self.send(class, s.ip.src.is_ipv6(), &d, pad);
                self.reset(class, &s, n as u32);
            }
            "rst_fin" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let n = 1 + self.rng.below(1400) as u32;
                let what = self.rng.below(4);
                let flags = match what {
                    0 => ACK | PSH | FIN,
                    1 => ACK | RST,
                    2 => ACK | SYN,
                    _ => ACK | FIN | URG,
                };
                let mut t = s.seg(0, flags, self.payload(n as usize));
                t.urg = (n / 2) as u16;
                self.send_seg(class, &s, &t);
                let t = s.seg(n + u32::from(flags & FIN != 0), ACK | PSH, self.payload(100));
                self.send_seg(class, &s, &t);
                self.reset(class, &s, n + 101);
            }
            "zero_win" => {
                let Some(s) = self.handshake(class, GARBAGE_PORT, false) else { return };
                let mut off = 0;
                for _ in 0..3 {
                    let n = 1 + self.rng.below(1400) as u32;
                    let mut t = s.seg(off, ACK | PSH, self.payload(n as usize));
                    t.win = 0;
                    self.send_seg(class, &s, &t);
                    off += n;
                }
                self.reset(class, &s, off);
            }
            _ => {
                // "flags": any flags, any sequence number, either port or none
                let v6 = self.rng.pct(50);
                let ip = if v6 { Ip::new(PHANTOM6, "2001:db8::1") } else { Ip::new(PHANTOM4, "192.0.2.1") };
                let dport = self.rng.pick(&[VALID_PORT, GARBAGE_PORT, 9]);
                let sport = 1024 + self.rng.below(60000) as u16;
                for _ in 0..1 + self.rng.below(8) {
                    let n = self.rng.below(1400) as usize;
                    let mut t = Tcp {
                        seq: self.rng.next() as u32,
                        ack: self.rng.next() as u32,
                        flags: self.rng.next() as u8,
                        urg: self.rng.next() as u16,
                        ..Tcp::data(sport, dport, self.payload(n))
                    };
                    t.opts = self.option_soup();
                    self.send(class, v6, &pkt::tcp_datagram(&ip, &t), 0);
                }
            }
        }
    }
}

/// What the victim saw.
#[derive(Debug, Default)]
struct Victim {
    valid_done: u64,
    valid_bytes: u64,
    zc_bytes: u64,
    copy_bytes: u64,
    garbage_conns: u64,
    garbage_bytes: u64,
    garbage_errors: BTreeMap<String, u64>,
    oob_read: u64,
    enobufs: u64,
}

/// One accepted connection on the victim.
struct Conn {
    s: TcpStream,
    valid: bool,
    /// Valid: the id (once its 8 bytes are in), its pattern, and bytes of
    /// pattern seen.
    id: Option<u64>,
    pat: Option<Pattern>,
    hdr: Vec<u8>,
    got: u64,
    last: Instant,
}

fn victim_loop(z: &mut Zcrx, valid: TcpListener, garbage: TcpListener, stop: &AtomicBool) -> Result<Victim, String> {
    valid.set_nonblocking(true).map_err(|e| e.to_string())?;
    garbage.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut v = Victim::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut recs = vec![Rec::default(); 128];
    let mut stopped: Option<Instant> = None;
    loop {
        if stopped.is_none() && stop.load(Ordering::Acquire) {
            stopped = Some(Instant::now());
        }
        // After the senders stop: the valid connections still open must
        // finish; garbage ones are closed.
        if let Some(t) = stopped {
            if !conns.iter().any(|c| c.valid) {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                return Err(format!("{} valid connections still open 120 s after the end", conns.iter().filter(|c| c.valid).count()));
            }
        }
        let mut fds: Vec<libc::pollfd> =
            [&valid, &garbage].iter().map(|l| libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        fds.extend(conns.iter().map(|c| libc::pollfd { fd: c.s.as_raw_fd(), events: libc::POLLIN | libc::POLLPRI, revents: 0 }));
        // SAFETY: `fds` is a valid array of pollfds.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
        let mut ready: Vec<bool> = fds[2..].iter().map(|p| p.revents != 0).collect();
        for (l, is_valid) in [(&valid, true), (&garbage, false)] {
            while let Ok((s, _)) = l.accept() {
                let _ = s.set_nonblocking(false);
                if !is_valid {
                    v.garbage_conns += 1;
                    // Closed with a RST, at once: a server drops a hostile
                    // peer so, and no orphan keeps out-of-order data (and
                    // area buffers) while it retransmits a FIN for minutes.
                    zcrx::sys::set_linger_abort(&s).map_err(|e| format!("SO_LINGER: {e}"))?;
                }
                conns.push(Conn { s, valid: is_valid, id: None, pat: None, hdr: Vec::new(), got: 0, last: Instant::now() });
            }
        }
        // new ones: try them at once
        ready.resize(conns.len(), true);
        let mut i = 0;
        while i < conns.len() {
            let c = &mut conns[i];
            let mut close = false;
            if !ready[i] && stopped.is_none() {
                if c.valid && c.last.elapsed() > Duration::from_secs(60) {
                    return Err(format!(
                        "valid connection {:?} stalled after {} bytes: {}",
                        c.id,
                        c.got,
                        crate::net::stall_report(z, &c.s, c.got)
                    ));
                }
                i += 1;
                continue;
            }
            if !c.valid && at_mark(&c.s).unwrap_or(false) && recv_oob(&c.s).is_ok() {
                v.oob_read += 1;
            }
            let flags = ZCRX_RS_RECV_DONTWAIT | if c.got.is_multiple_of(2) { ZCRX_RS_RECV_MERGE } else { 0 };
            match z.recv(c.s.as_raw_fd(), &mut recs, flags) {
                Ok(got) if got.bytes == 0 => close = true,
                Ok(got) => {
                    c.last = Instant::now();
                    for r in &recs[..got.records] {
                        let mut d = z.data(r);
                        if r.flags & ZCRX_RS_REC_COPY != 0 {
                            v.copy_bytes += u64::from(r.len);
                        } else {
                            v.zc_bytes += u64::from(r.len);
                        }
                        if !c.valid {
                            v.garbage_bytes += d.len() as u64;
                            continue;
                        }
                        if c.id.is_none() {
                            let take = (8 - c.hdr.len()).min(d.len());
                            c.hdr.extend_from_slice(&d[..take]);
                            d = &d[take..];
                            if c.hdr.len() == 8 {
                                let id = u64::from_le_bytes(c.hdr[..].try_into().unwrap());
                                c.id = Some(id);
                                c.pat = Some(Pattern::new(id));
                            }
                        }
                        if let (Some(id), Some(p)) = (c.id, &c.pat) {
                            if let Some(bad) = p.check(c.got, d) {
                                return Err(format!("valid connection {id}: payload mismatch at offset {bad}"));
                            }
                            c.got += d.len() as u64;
                        }
                    }
                    z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => v.enobufs += 1,
                Err(e) if c.valid => return Err(format!("valid connection {:?}: RECV: {e}", c.id)),
                Err(e) => {
                    *v.garbage_errors.entry(zcrx::sys::errno_name(e.raw_os_error().unwrap_or(0)).to_string()).or_default() += 1;
                    close = true;
                }
            }
            if !close && !c.valid && stopped.is_some() {
                close = true;
            }
            if close {
                let c = conns.swap_remove(i);
                ready.swap_remove(i);
                if c.valid {
                    let Some(id) = c.id else { return Err("valid connection closed before its id".into()) };
                    let want = valid_len(id);
                    if c.got != want {
                        return Err(format!("valid connection {id}: {} bytes, sent {want}", c.got));
                    }
                    v.valid_done += 1;
                    v.valid_bytes += c.got;
                }
                continue;
            }
            i += 1;
        }
    }
    Ok(v)
}

/// Makes nsa reach the phantom addresses through nsb's device (static
/// neighbour entries); returns nsa's MAC, for the attacker's frames.
fn phantom_up(n: &Nsim) -> Result<[u8; 6], String> {
    let mac_a = pkt::hwaddr(NS_A, &n.a)?;
    let mac_b = pkt::hwaddr_str(NS_B, &n.b)?;
    run(
        "ip",
        &["-n", NS_A, "-b", "-"],
        &format!(
            "neigh replace {PHANTOM4} lladdr {mac_b} dev {0} nud permanent\n\
             neigh replace {PHANTOM6} lladdr {mac_b} dev {0} nud permanent\n",
            n.a
        ),
    )?;
    Ok(mac_a)
}

/// A peer that parks out-of-order data cannot stall another connection
/// of the queue. An area of 64 buffers (56 for the pool); the attacker
/// opens three connections and sends each 40 segments beyond a one-byte
/// hole, never filling it (out-of-order data waits for the hole, in
/// provider buffers, up to each socket's receive buffer: together more
/// than the pool has). Then a well-behaved sender sends 1 MiB on another
/// connection, which must arrive byte-exact, all of it zero-copy, while
/// the attacker's connections stay open. Before TCP kept the pool's last
/// buffers from out-of-order data (patch 34), the parked segments took
/// them all and every segment of the new connection was dropped for want
/// of a buffer: its sender gave up. (With the reserve it still stalled
/// at times, with 32 buffers and two parkers on the debug kernel and once
/// in `make check` with 64: the buffers the receiver gave back were on a
/// CPU's skb defer list, patch 35.)
fn ofo_parker_cannot_stall_others(env: &Env) -> Outcome {
    ofo_parkers(env, 64, 3, 40, 7402)
}

/// The same with an area of 512 buffers (448 for the pool, handed out in
/// full batches of 64 from the free list: the last batch must set the
/// reserve too) and 20 parking connections of 32 segments.
fn ofo_parkers_cannot_stall_others_512(env: &Env) -> Outcome {
    ofo_parkers(env, 512, 20, 32, 7403)
}

/// `conns` attacker connections send `segs` segments each beyond a hole
/// into an area of `bufs` buffers; then 1 MiB on another connection must
/// arrive byte-exact and all zero-copy.
fn ofo_parkers(env: &Env, bufs: usize, conns: u32, segs: u32, port: u16) -> Outcome {
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

/// Listeners on [`MD5_PORT`] and [`AO_PORT`] with keys for the phantom
/// addresses, in the calling thread's namespace (nsa).
fn signed_listeners() -> Result<[TcpListener; 2], String> {
    use crate::signed::{add_key, Sig};
    let mut ls = Vec::new();
    for (sig, port) in [(Sig::Md5, MD5_PORT), (Sig::Ao, AO_PORT)] {
        let l = TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).map_err(|e| format!("listen {port}: {e}"))?;
        let v4: std::net::Ipv4Addr = PHANTOM4.parse().unwrap();
        for peer in [PHANTOM6.parse().unwrap(), v4.to_ipv6_mapped()] {
            add_key(l.as_raw_fd(), sig, peer).map_err(|e| format!("port {port}: key for {peer}: {e}"))?;
        }
        ls.push(l);
    }
    ls.try_into().map_err(|_| "two listeners".to_string())
}

/// Length of valid connection `id`'s pattern: 64 KiB to 2 MiB.
fn valid_len(id: u64) -> u64 {
    let mut r = Rng(id ^ 0x5eed);
    (64 << 10) + r.below(2 << 20)
}

fn fuzz_remote(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let secs = env.fuzz_net_seconds;
    let seed = env
        .fuzz_net_seed
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1));
    env.diag(&format!("fuzz_remote: seed {seed}, {secs} s (--fuzz-net-seed {seed} replays the attacker's choices)"));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let router = tryo!(Router::up());
    tryo!(crate::forward::back_out_up(&n));
    tryo!(crate::tunnel::tunnels_up());
    tryo!(crate::esp::esp_up(&n, Some(ESP_PORT)));
    tryo!(crate::esp::esp_up_crafted(&n, Some(ESP_PORT_TUNNEL), crate::esp::Mode::Tunnel));
    tryo!(crate::esp::esp_up_crafted(&n, Some(ESP_PORT_UDP), crate::esp::Mode::Udp));
    let _natt = tryo!(crate::esp::natt_socket());
    let mac_a = tryo!(phantom_up(&n));
    let (probes, unprobed) = Probes::new();
    let hits0 = probes.hits();
    let before = tryo!(n.stats(1, 0));
    let refused0 = tryo!(crate::forward::tx_refused());
    let snmp0 = tryo!(pkt::Snmp::read(NS_A));

    let stop = Arc::new(AtomicBool::new(false));
    let (vl_tx, vl_rx) = std::sync::mpsc::channel::<TcpListener>();
    let stop_v = stop.clone();
    let victim = with_receiver(n.a_idx, 0, 64 << 20, GARBAGE_PORT, true, move |z, garbage| {
        let valid = TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, VALID_PORT)).map_err(|e| format!("listen: {e}"))?;
        let _signed = signed_listeners()?;
        let _ = vl_tx.send(valid.try_clone().map_err(|e| e.to_string())?);
        victim_loop(z, valid, garbage, &stop_v)
    });
    // The valid listener is up once its clone arrives.
    let Ok(_valid_listener) = vl_rx.recv_timeout(Duration::from_secs(60)) else {
        return Fail(join(victim).err().unwrap_or_else(|| "victim did not listen".into()));
    };
    let (sink, listening) = crate::ulp::sink(NS_A, stop.clone());
    if !listening {
        stop.store(true, Ordering::Release);
        let _ = join(victim);
        return Fail(join(sink).err().unwrap_or_else(|| "the MPTCP/kTLS sink did not listen".into()));
    }
    let deadline = Instant::now() + Duration::from_secs(secs);

    let stop_s = stop.clone();
    let sender = in_netns(NS_B, move || {
        let (mut ids, mut bytes) = (0u64, 0u64);
        let mut paths = BTreeMap::new();
        let mut id = seed.rotate_left(17);
        while Instant::now() < deadline && !stop_s.load(Ordering::Acquire) {
            id = id.wrapping_add(1);
            // plain IPv6, plain IPv4, or through one of the tunnels
            let tunnels = crate::tunnel::TUNNELS;
            let path = (id % (2 + tunnels.len() as u64)) as usize;
            let to: SocketAddr = match path {
                0 => (std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1), VALID_PORT).into(),
                1 => (std::net::Ipv4Addr::new(192, 0, 2, 1), VALID_PORT).into(),
                k => SocketAddr::new(tunnels[k - 2].a.parse().unwrap(), VALID_PORT),
            };
            *paths.entry(if path < 2 { ["IPv6", "IPv4"][path] } else { tunnels[path - 2].name }).or_insert(0u64) += 1;
            let mut s = connect(to, Duration::from_secs(60))?;
            let p = Pattern::new(id);
            let len = valid_len(id);
            std::io::Write::write_all(&mut s, &id.to_le_bytes()).map_err(|e| format!("send id: {e}"))?;
            let mut off = 0;
            while off < len {
                let k = ((len - off) as usize).min(64 << 10);
                std::io::Write::write_all(&mut s, p.slice(off, k)).map_err(|e| format!("connection {id}: send at {off}: {e}"))?;
                off += k as u64;
            }
            ids += 1;
            bytes += len;
        }
        Ok((ids, bytes, paths))
    });

    let b_idx = n.b_idx;
    let attacker = in_netns(NS_B, move || {
        let mut a = Attacker::new(b_idx, mac_a, seed)?;
        let mut mtu_changed = Instant::now();
        let mut rounds = 0u64;
        while Instant::now() < deadline {
            a.round(&mut mtu_changed);
            rounds += 1;
        }
        *a.events.entry("rounds").or_default() = rounds;
        Ok((a.sent, a.events))
    });

    let att = join(attacker);
    let snd = join(sender);
    stop.store(true, Ordering::Release);
    let vic = join(victim);
    let ulp = join(sink);
    let hits = probes.hits();
    drop(probes);
    let d = n.stats(1, 0).map(|s| s.since(&before));
    let refused = crate::forward::tx_refused().map(|r| r - refused0);
    let snmp = pkt::Snmp::read(NS_A);
    let (sent, events) = tryo!(att);
    let (ids, bytes, paths) = tryo!(snd);
    let v = tryo!(vic);
    let ulp = tryo!(ulp);
    let d = tryo!(d);
    let refused = tryo!(refused);
    let snmp = tryo!(snmp);
    let xfrm_err = tryo!(snmp.since(&snmp0, "XfrmInStateProtoError"));
    let (md5_bad, ao_bad) = (tryo!(snmp.since(&snmp0, "TcpExt:TCPMD5Failure")), tryo!(snmp.since(&snmp0, "TcpExt:TCPAOBad")));
    let total: u64 = sent.values().sum();
    env.diag(&format!(
        "attacker: {total} sent (frames; for mptcp and ktls also writes of the attacker's own stack, one each: \
         up to 1400 bytes with TCP_NODELAY, about a segment): {}",
        sent.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
    ));
    // `make fuzz-net`'s bar: every class sent at least 1000 times.
    let few: Vec<String> = CLASSES
        .iter()
        .filter(|c| sent.get(*c).copied().unwrap_or(0) < 1000)
        .map(|c| format!("{c} {}", sent.get(c).copied().unwrap_or(0)))
        .collect();
    env.diag(&format!("classes sent fewer than 1000 times: {}", if few.is_empty() { "none".to_string() } else { few.join(", ") }));
    env.diag(&format!("attacker events: {}", events.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")));
    env.diag(&format!(
        "valid: {} of {ids} connections byte-exact ({} of {}), zero-copy {} copied {} (all connections); \
         garbage: {} connections, {} read, errors {:?}, MSG_OOB read {}, ENOBUFS {}",
        v.valid_done,
        mib(v.valid_bytes),
        mib(bytes),
        mib(v.zc_bytes),
        mib(v.copy_bytes),
        v.garbage_conns,
        mib(v.garbage_bytes),
        v.garbage_errors,
        v.oob_read,
        v.enobufs
    ));
    for (kind, what) in [("mptcp", "MPTCP"), ("tls1.2", "kTLS 1.2"), ("tls1.3", "kTLS 1.3")] {
        env.diag(&format!("{what} receiver: {}", ulp.get(kind).map(|x| x.to_string()).unwrap_or_else(|| "no connection".into())));
    }
    // What the mptcp and ktls classes must have reached: their receivers
    // keyed (kTLS) or spoke MPTCP, read, and met provider memory (EFAULT).
    let mp_capable = tryo!(snmp.since(&snmp0, "MPTcpExt:MPCapableACKRX"));
    env.diag(&format!("MPTcpExt:MPCapableACKRX {mp_capable}"));
    let probed = |f: &str| hits.get(f).map(|n| n - hits0.get(f).copied().unwrap_or(0));
    for (class, kinds, recv_fn) in [("mptcp", &["mptcp"][..], "mptcp_recvmsg"), ("ktls", &["tls1.2", "tls1.3"][..], "tls_sw_recvmsg")] {
        if sent.get(class).copied().unwrap_or(0) == 0 {
            continue;
        }
        let seen: Vec<&crate::ulp::Seen> = kinds.iter().filter_map(|k| ulp.get(k)).collect();
        let efault: u64 = seen.iter().map(|x| x.ends.get("EFAULT").copied().unwrap_or(0)).sum();
        if seen.iter().map(|x| x.conns).sum::<u64>() == 0 {
            return Fail(format!("the {class} class sent, but its receiver accepted no connection"));
        }
        if class == "ktls" && kinds.iter().any(|k| ulp.get(k).is_some_and(|x| x.conns > 0 && x.keyed == 0)) {
            return Fail("a kTLS receiver installed no TLS_RX key on any connection".into());
        }
        if class == "mptcp" && mp_capable == 0 {
            return Fail("the mptcp class sent, but no connection was accepted as MPTCP (MPCapableACKRX 0)".into());
        }
        if efault == 0 {
            return Fail(format!("no {class} connection met provider memory (none ended with EFAULT)"));
        }
        if probed(recv_fn) == Some(0) {
            return Fail(format!("the {class} class sent, but {recv_fn} was never called"));
        }
    }
    env.diag(&format!("valid connections by path: {}", paths.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")));
    env.diag(&format!(
        "netdevsim queue 0: split {} packets ({}), dry-pool drops {}, bad checksums {}, unsplit (dry fallback) {}, \
         delivered with CHECKSUM_COMPLETE {}",
        d.dma_packets,
        mib(d.dma_bytes),
        d.drop_no_buf,
        d.csum_bad,
        d.fallback_packets,
        d.csum_complete
    ));
    // Switched on in some rounds: if frames went out meanwhile (most are
    // TCP segments with payload, split), some must have come so.
    let while_on = events.get("frames sent with CHECKSUM_COMPLETE on").copied().unwrap_or(0);
    if while_on >= 50 && d.csum_complete == 0 {
        return Fail(format!(
            "{while_on} frames sent while hds_csum_complete was on, but netdevsim delivered nothing with CHECKSUM_COMPLETE"
        ));
    }
    if events.get("hds_csum_complete write failed").copied().unwrap_or(0) > 0 {
        return Fail("writing netdevsim's hds_csum_complete failed".into());
    }
    env.diag(&format!(
        "reached (kprobe hits, all calls): {}{}",
        hits.iter().map(|(k, n)| format!("{k} {}", n - hits0.get(k).copied().unwrap_or(0))).collect::<Vec<_>>().join(", "),
        if unprobed.is_empty() { String::new() } else { format!("; not probed: {}", unprobed.join(", ")) }
    ));
    env.diag(&format!("netdevsim refused to transmit {refused} unreadable skbs (the core must keep them from it)"));
    if refused != 0 {
        return Fail(format!("the core handed netdevsim {refused} skbs of provider rx buffers to transmit"));
    }
    env.diag(&format!("signed segments dropped by the victim: TCPMD5Failure {md5_bad}, TCPAOBad {ao_bad}"));
    env.diag(&format!("ESP packets dropped by the victim: XfrmInStateProtoError {xfrm_err}"));
    let esp_sent: u64 = ["esp", "esp_tunnel", "esp_udp"].iter().map(|c| sent.get(c).copied().unwrap_or(0)).sum();
    if esp_sent > 0 && xfrm_err == 0 {
        return Fail("ESP packets were sent, but none was dropped as malformed or unreadable".into());
    }
    if sent.get("signed").copied().unwrap_or(0) > 0 && md5_bad + ao_bad == 0 {
        return Fail("signed segments were sent, but no signature was checked".into());
    }
    if v.valid_done != ids || v.valid_bytes != bytes {
        return Fail(format!("{} of {ids} valid connections verified ({} of {bytes} bytes)", v.valid_done, v.valid_bytes));
    }
    if ids == 0 || total == 0 || d.dma_packets == 0 {
        return Fail("the run did nothing: no valid connection, no frame, or nothing split into the area".into());
    }
    drop(router);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
