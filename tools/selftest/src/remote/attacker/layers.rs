// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The attacker's classes above plain TCP: tunnels, MPTCP, kTLS and ESP.

use super::*;

impl Attacker {
    /// 1 to 8 segments of one flow from a phantom behind nsb, through one
    /// of the tunnels nsa decapsulates (`tunnel.rs`), to either port or
    /// none: in order (GRO of tunnelled flows), any flags now and then,
    /// option soup; and the wrappers mangled now and then: a wrong inner
    /// TCP, outer UDP or GRE checksum, no UDP checksum, a wrong GRE key,
    /// VXLAN without its VNI flag, GENEVE with options or a version it
    /// does not know, link-layer padding, bytes after the inner datagram
    /// (netdevsim leaves those unsplit: its inner and outer ends differ).
    pub(super) fn tunnel(&mut self, class: &'static str) {
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
    pub(super) fn victim_addr(&mut self, port: u16) -> SocketAddr {
        crate::net::addr_a(self.rng.pct(50), port)
    }

    /// 1 to 16 writes of 1 to 1400 bytes (`TCP_NODELAY`: about a segment
    /// each) made by `make`, each counted under `class`.
    pub(super) fn writes(&mut self, class: &'static str, s: &mut TcpStream, make: impl Fn(&mut Self, usize) -> Vec<u8>) {
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
    pub(super) fn end_conn(&mut self, s: TcpStream) {
        if self.rng.pct(50) && crate::net::wait_acked(&s, Duration::from_millis(200)).is_ok() {
            let _ = zcrx::sys::set_linger_abort(&s);
        }
    }

    /// To nsa's MPTCP listener. Mostly the attacker's own MPTCP stack,
    /// asking for DSS checksums (`net.mptcp.checksum_enabled` in nsb) most
    /// of the time; otherwise by hand from the phantom: an MP_CAPABLE
    /// handshake that asks for checksums, with made-up keys, then segments
    /// with DSS options of random flags, mappings and checksums.
    pub(super) fn mptcp(&mut self, class: &'static str) {
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
    pub(super) fn dss(&mut self, off: u32, n: u32) -> Vec<u8> {
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
    pub(super) fn ktls(&mut self, class: &'static str) {
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
    pub(super) fn esp(&mut self, class: &'static str) {
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
}
