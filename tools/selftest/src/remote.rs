// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The remote packet fuzzer (`make fuzz-net`; a short run in `make check`):
//! a hostile peer against a host whose queue has a memory provider.
//!
//! The victim, nsa, has netdevsim queue 0 with header split on and a
//! memory provider bound: the run is split into three phases of equal
//! length, one per provider: zcrx-rs, the in-tree io_uring zcrx
//! (`iou_zcrx`, multishot `RECV_ZC`) and devmem TCP (a udmabuf bound with
//! `bind-rx`, `recvmsg(MSG_SOCK_DEVMEM)`; `remote/devmem.rs`). It
//! listens on two ports and forwards to nsc over a veth with a smaller MTU
//! (the topology of `forward.rs`). From nsb:
//!
//! - valid connections, one after the other, each with data unique to it
//!   (an 8-byte id, then the pattern seeded with that id), received through
//!   the provider on port 7400 and checked byte for byte: none may stall
//!   or differ;
//! - an attacker crafting frames with a packet socket. It speaks TCP from a
//!   phantom address (192.0.2.77, 2001:db8::77: nsa reaches it through a
//!   static neighbour entry, nsb's stack drops what comes back, the
//!   attacker reads it), so it can open real connections to port 7401 and
//!   then misbehave inside their windows: option soup, urgent pointers
//!   anywhere, reordered, overlapping and retransmitted segments, IP
//!   fragments, bad checksums, link-layer padding, zero windows, FIN and
//!   RST races; and outside any connection: random flags, and segments
//!   the victim must forward (DF set or clear, TTL running out) while the
//!   next link's MTU changes. The victim reads port 7401 through the
//!   provider too (and `MSG_OOB` at marks), discarding what it gets.
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

mod attacker;
mod devmem;
mod ofo;
mod victim;

use attacker::Attacker;
use ofo::{ofo_parker_cannot_stall_others, ofo_parkers_cannot_stall_others_512};
use victim::{victim_loop, victim_loop_uring};

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
        let dir = crate::trace::root().unwrap_or_else(|_| "/sys/kernel/tracing".into());
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

/// The victim's listeners, in nsa: the valid one on [`VALID_PORT`] (a
/// clone goes to `ready` once all listen), `garbage` or a new one on
/// [`GARBAGE_PORT`], and the signed ones (open while the third lives).
fn victim_listeners(
    garbage: Option<TcpListener>,
    ready: &std::sync::mpsc::Sender<TcpListener>,
) -> Result<(TcpListener, TcpListener, [TcpListener; 2]), String> {
    let listen = |port| TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port)).map_err(|e| format!("listen on {port}: {e}"));
    let valid = listen(VALID_PORT)?;
    let garbage = match garbage {
        Some(g) => g,
        None => listen(GARBAGE_PORT)?,
    };
    let signed = signed_listeners()?;
    let _ = ready.send(valid.try_clone().map_err(|e| e.to_string())?);
    Ok((valid, garbage, signed))
}

/// Length of valid connection `id`'s pattern: 64 KiB to 2 MiB.
fn valid_len(id: u64) -> u64 {
    let mut r = Rng(id ^ 0x5eed);
    (64 << 10) + r.below(2 << 20)
}

/// The memory provider bound to the victim's queue: the run gives each
/// its share of the time, one after the other.
#[derive(Clone, Copy)]
enum Provider {
    ZcrxRs,
    /// The in-tree io_uring zcrx (`iou_zcrx`): one instance on queue 0, a
    /// multishot `RECV_ZC` per accepted connection.
    IoUring,
    /// devmem TCP (`devmem.rs`): a udmabuf bound to queue 0 with
    /// `bind-rx`, `recvmsg(MSG_SOCK_DEVMEM)`.
    Devmem,
}

impl Provider {
    const ALL: [Provider; 3] = [Provider::ZcrxRs, Provider::IoUring, Provider::Devmem];

    fn name(self) -> &'static str {
        match self {
            Provider::ZcrxRs => "zcrx-rs",
            Provider::IoUring => "io_uring zcrx",
            Provider::Devmem => "devmem TCP",
        }
    }
}

fn fuzz_remote(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let secs = env.fuzz_net_seconds;
    let seed = env
        .fuzz_net_seed
        .unwrap_or_else(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1));
    env.diag(&format!("fuzz_remote: seed {seed}, {secs} s (--fuzz-net-seed {seed} replays the attacker's choices)"));
    let k = Provider::ALL.len() as u64;
    let mut sent = BTreeMap::new();
    for (i, prov) in Provider::ALL.into_iter().enumerate() {
        let s = (secs / k).max(5);
        env.diag(&format!("phase {}/{k}: {} bound to netdevsim queue 0, {s} s", i + 1, prov.name()));
        match fuzz_phase(env, prov, s, seed ^ i as u64, &mut sent) {
            Pass => {}
            Fail(e) => return Fail(format!("{}: {e}", prov.name())),
            o => return o,
        }
    }
    // `make fuzz-net`'s bar: every class sent at least 1000 times.
    let few: Vec<String> = CLASSES
        .iter()
        .filter(|c| sent.get(*c).copied().unwrap_or(0) < 1000)
        .map(|c| format!("{c} {}", sent.get(c).copied().unwrap_or(0)))
        .collect();
    env.diag(&format!(
        "all phases: {} frames sent; classes sent fewer than 1000 times: {}",
        sent.values().sum::<u64>(),
        if few.is_empty() { "none".to_string() } else { few.join(", ") }
    ));
    // `make fuzz-net`'s long runs: a class sent too rarely tested nothing.
    let min = env.fuzz_net_min_per_class;
    let rare: Vec<String> =
        CLASSES.iter().map(|c| (c, sent.get(c).copied().unwrap_or(0))).filter(|(_, n)| *n < min).map(|(c, n)| format!("{c} {n}")).collect();
    if !rare.is_empty() {
        return Fail(format!("classes sent fewer than --fuzz-net-min-per-class {min} times: {}", rare.join(", ")));
    }
    Pass
}

/// One phase of [`fuzz_remote`]: `prov` bound, `secs` seconds; adds the
/// frames sent per class to `sent_all`. Every class must have been sent
/// a third of `--fuzz-net-min-per-class` times (rounded up) in the phase.
fn fuzz_phase(env: &Env, prov: Provider, secs: u64, seed: u64, sent_all: &mut BTreeMap<&'static str, u64>) -> Outcome {
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
    let unverifiable = tryo!(crate::trace::DropWatch::new(crate::signed::UNREADABLE));

    let stop = Arc::new(AtomicBool::new(false));
    let (vl_tx, vl_rx) = std::sync::mpsc::channel::<TcpListener>();
    let stop_v = stop.clone();
    let victim = match prov {
        Provider::ZcrxRs => with_receiver(n.a_idx, 0, 64 << 20, GARBAGE_PORT, true, move |z, garbage| {
            let (valid, garbage, _signed) = victim_listeners(Some(garbage), &vl_tx)?;
            victim_loop(&mut victim::ZcrxRx { z, recs: vec![Rec::default(); 128] }, valid, garbage, &stop_v)
        }),
        Provider::Devmem => {
            let a_idx = n.a_idx;
            in_netns(NS_A, move || {
                let mut rx = devmem::DevmemRx::new(a_idx, 0, 64 << 20)?;
                let (valid, garbage, _signed) = victim_listeners(None, &vl_tx)?;
                victim_loop(&mut rx, valid, garbage, &stop_v)
            })
        }
        Provider::IoUring => {
            let a_idx = n.a_idx;
            in_netns(NS_A, move || {
                // 64 MiB of 4 KiB buffers, a refill entry for each.
                let mut ring = iou_zcrx::ZcrxRing::new(a_idx, &[0], 64 << 20, 16384, 0, false)
                    .map_err(|e| format!("io_uring zcrx on queue 0: {e}"))?;
                let (valid, garbage, _signed) = victim_listeners(None, &vl_tx)?;
                victim_loop_uring(&mut ring, valid, garbage, &stop_v)
            })
        }
    };
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
    for (c, k) in &sent {
        *sent_all.entry(*c).or_default() += k;
    }
    let min = env.fuzz_net_min_per_class.div_ceil(Provider::ALL.len() as u64);
    let rare: Vec<String> =
        CLASSES.iter().map(|c| (c, sent.get(c).copied().unwrap_or(0))).filter(|(_, n)| *n < min).map(|(c, n)| format!("{c} {n}")).collect();
    if !rare.is_empty() {
        return Fail(format!("classes sent fewer than {min} times in this phase: {}", rare.join(", ")));
    }
    let (ids, bytes, paths) = tryo!(snd);
    let v = tryo!(vic);
    let ulp = tryo!(ulp);
    let d = tryo!(d);
    let refused = tryo!(refused);
    let snmp = tryo!(snmp);
    let xfrm_err = tryo!(snmp.since(&snmp0, "XfrmInStateProtoError"));
    let (md5_bad, ao_bad) = (tryo!(snmp.since(&snmp0, "TcpExt:TCPMD5Failure")), tryo!(snmp.since(&snmp0, "TcpExt:TCPAOBad")));
    let unverifiable = tryo!(unverifiable.count());
    let total: u64 = sent.values().sum();
    env.diag(&format!(
        "attacker: {total} sent (frames; for mptcp and ktls also writes of the attacker's own stack, one each: \
         up to 1400 bytes with TCP_NODELAY, about a segment): {}",
        sent.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", ")
    ));
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
        if class == "ktls" {
            // A connection the attacker reset before it was accepted fails
            // TLS_RX with ENOTCONN: that is the attacker's doing (in a short
            // phase it may be a version's only connection). Any other
            // failure, or no key at all, is the receiver's.
            for (k, x) in kinds.iter().filter_map(|k| ulp.get(k).map(|x| (k, x))) {
                if let Some(why) = x.ends.keys().find(|e| e.starts_with("TLS_RX:") && !e.contains("not connected")) {
                    return Fail(format!("{k}: TLS_RX failed on a connection that was there: {why}"));
                }
            }
            if seen.iter().map(|x| x.keyed).sum::<u64>() == 0 {
                return Fail("no kTLS receiver installed a TLS_RX key on any connection".into());
            }
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
    env.diag(&format!(
        "signed segments dropped by the victim: TCPMD5Failure {md5_bad}, TCPAOBad {ao_bad}, \
         payload unreadable ({}) {unverifiable}",
        crate::signed::UNREADABLE
    ));
    env.diag(&format!("ESP packets dropped by the victim: XfrmInStateProtoError {xfrm_err}"));
    let esp_sent: u64 = ["esp", "esp_tunnel", "esp_udp"].iter().map(|c| sent.get(c).copied().unwrap_or(0)).sum();
    if esp_sent > 0 && xfrm_err == 0 {
        return Fail("ESP packets were sent, but none was dropped as malformed or unreadable".into());
    }
    if sent.get("signed").copied().unwrap_or(0) > 0 && md5_bad + ao_bad + unverifiable == 0 {
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
