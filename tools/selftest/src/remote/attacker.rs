// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The attacker: frames crafted on a packet socket from the phantom
//! address, one packet class per round (see `CLASSES`).

use super::*;

mod layers;

/// The attacker: a packet socket on nsb's device.
pub(super) struct Attacker {
    pub(super) fd: std::os::fd::OwnedFd,
    pub(super) ifindex: u32,
    /// nsa's MAC.
    pub(super) mac: [u8; 6],
    pub(super) rng: Rng,
    /// Frames sent, per class.
    pub(super) sent: BTreeMap<&'static str, u64>,
    /// What happened, per event (sessions opened, SYN unanswered, ...).
    pub(super) events: BTreeMap<&'static str, u64>,
    pub(super) next_port: u16,
    /// netdevsim's hds_csum_complete as last set.
    pub(super) complete: bool,
}

/// A connection the attacker opened from the phantom address.
pub(super) struct Session {
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
    pub(super) fn seg(&self, off: u32, flags: u8, payload: Vec<u8>) -> Tcp {
        Tcp { seq: self.nxt.wrapping_add(off), ack: self.rcv, flags, win: 65535, ..Tcp::data(self.sport, self.dport, payload) }
    }
}

impl Attacker {
    /// Opens the socket, in the calling thread's namespace (nsb).
    pub(super) fn new(ifindex: u32, mac: [u8; 6], seed: u64) -> Result<Attacker, String> {
        let fd = pkt::packet_socket(ifindex)?;
        Ok(Attacker { fd, ifindex, mac, rng: Rng(seed), sent: BTreeMap::new(), events: BTreeMap::new(), next_port: 20000, complete: false })
    }

    pub(super) fn note(&mut self, what: &'static str) {
        *self.events.entry(what).or_default() += 1;
    }

    /// Sends an IP datagram to nsa, counted under `class`.
    pub(super) fn send(&mut self, class: &'static str, v6: bool, datagram: &[u8], pad: usize) {
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
    pub(super) fn expect(&mut self, port: u16, wait: Duration) -> Option<pkt::Seen> {
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
    pub(super) fn option_soup(&mut self) -> Vec<u8> {
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

    pub(super) fn payload(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.rng.next() as u8).collect()
    }

    /// Opens a connection to nsa's `dport` from the phantom address:
    /// SYN, SYN-ACK, ACK. `None` when nsa does not answer.
    pub(super) fn handshake(&mut self, class: &'static str, dport: u16, soup: bool) -> Option<Session> {
        let opts = if soup { self.option_soup() } else { vec![2, 4, 0x05, 0xb4, 4, 2] }; // MSS 1460, SACK permitted
        self.handshake_opts(class, dport, opts, Vec::new())
    }

    /// [`Attacker::handshake`] with options `syn` on the SYN and `ack` on
    /// the ACK that completes it.
    pub(super) fn handshake_opts(&mut self, class: &'static str, dport: u16, syn: Vec<u8>, ack: Vec<u8>) -> Option<Session> {
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

    pub(super) fn send_seg(&mut self, class: &'static str, s: &Session, t: &Tcp) {
        let v6 = s.ip.src.is_ipv6();
        self.send(class, v6, &pkt::tcp_datagram(&s.ip, t), 0);
    }

    /// Ends a session with a RST, as a peer that got the victim's ACKs:
    /// at the sequence number the victim acknowledged last (a RST elsewhere
    /// in the window only draws a challenge ACK, RFC 5961), and at the end
    /// of what we sent. The victim then frees its queues.
    pub(super) fn reset(&mut self, class: &'static str, s: &Session, off: u32) {
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
    pub(super) fn transit_flow(&mut self, class: &'static str, mut ip: Ip, sport: u16, min: usize) {
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

    /// One round of one class.
    pub(super) fn round(&mut self, forward_mtu: &mut Instant) {
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
