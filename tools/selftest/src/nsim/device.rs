// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! netdevsim's offloads as a NIC has them: header buffers left readable
//! for small payloads (GRO keeps them apart), checksums and padding, ntuple
//! rules into RSS contexts, per-queue statistics, and the log of its writes
//! that the zero-copy checks match records against.

use super::*;

/// NICs that split headers from data still leave a small payload in the
/// header buffer (copybreak): one queue, one flow, readable and unreadable
/// skbs mixed. netdevsim does so with `hds_copybreak`; the receiver's
/// `gro_flush_timeout` (2 ms, NAPI flushes deferred) keeps a segment in
/// GRO until the next one of its flow comes. Two ways the two kinds meet
/// there, 400 rounds each, 2 ms apart, the sender's TSO and GSO off: each
/// round is one write of a full segment and a tail, which leave as a split
/// segment and a readable one right behind it.
///
/// - (a) `hds_copybreak` 256, tails of 100 bytes: the small segment's
///   skb head is kmalloc'ed, so GRO can only chain it on the `frag_list`;
/// - (b) `hds_copybreak` 1024, tails of 900 bytes: the head is a page
///   fragment, as a header buffer is, and GRO appends it to the held skb as
///   a page frag. Before patch 18 the merged skb said unreadable and held a
///   page, which nobody may copy (`skb_copy_bits()` fails on any frag of an
///   unreadable skb), and RECV failed with EFAULT. The other way round (a
///   readable skb gaining provider frags) the stack would read a `net_iov`
///   as a page.
///
/// All must arrive byte-exact, the readable segments copied, the rest
/// zero-copy, and at least half of the rounds must have come as both kinds
/// (else the test proved nothing).
pub(super) fn copybreak_segments_stay_apart_in_gro(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_dev = n.a.clone();
    tryo!(net::run(
        "ip",
        &[
            "netns",
            "exec",
            NS_A,
            "sh",
            "-c",
            &format!("echo 2000000 > /sys/class/net/{a_dev}/gro_flush_timeout && echo 1 > /sys/class/net/{a_dev}/napi_defer_hard_irqs"),
        ],
        "",
    ));
    // A write leaves at once, not held back for the one after it.
    tryo!(net::run("ip", &["netns", "exec", NS_B, "sysctl", "-q", "-w", "net.ipv4.tcp_autocorking=0"], ""));
    tryo!(net::ethtool_in(NS_B, &["-K", &n.b, "tso", "off", "gso", "off"]));
    for (phase, copybreak, tail, port) in [("a", 256, 100, 7325u16), ("b", 1024, 900, 7326)] {
        tryo!(Nsim::copybreak(1, copybreak));
        let d = tryo!(copybreak_phase(&n, port, tail).map_err(|e| format!("({phase}) {e}")));
        env.diag(&format!("({phase}) hds_copybreak {copybreak}: {d}"));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// One phase of [`copybreak_segments_stay_apart_in_gro`]: 400 rounds to
/// `port`, each a write of a segment and `tail` bytes, 2 ms apart.
fn copybreak_phase(n: &Nsim, port: u16, tail: u64) -> Result<String, String> {
    const ROUNDS: u64 = 400;
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let p2 = pat.clone();
    let log = crate::devlog::DmaLog::start()?;
    let rx = with_receiver(n.a_idx, 0, 4 << 20, port, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        net::receive(z, &s, &p2, None)
    });
    let tx = in_netns(NS_B, move || {
        let mut s = net::connect(addr_a(true, port), Duration::from_secs(30))?;
        s.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
        let mss = zcrx::sys::tcp_maxseg(&s).map_err(|e| format!("TCP_MAXSEG: {e}"))? as u64;
        let mut off = 0u64;
        for _ in 0..ROUNDS {
            let k = (mss + tail) as usize;
            std::io::Write::write_all(&mut s, pat.slice(off, k)).map_err(|e| format!("send at {off}: {e}"))?;
            off += k as u64;
            // the tail leaves on its own (the next write would fill it up),
            // right behind its full segment: both land in the receiver's
            // GRO within one gro_flush_timeout
            sleep(Duration::from_millis(2));
        }
        Ok((off, mss))
    });
    let sent = join(tx);
    let r = join(rx);
    let rx = r.map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    let (sent, mss) = sent?;
    if rx.bytes != sent {
        return Err(format!("sent {sent}, received {}", rx.bytes));
    }
    if rx.copy_bytes < tail * ROUNDS / 2 || rx.zc_bytes < mss * ROUNDS / 2 {
        return Err(format!(
            "{} bytes copied, {} zero-copy: fewer than half of the {ROUNDS} rounds came as a split and a readable segment",
            rx.copy_bytes, rx.zc_bytes
        ));
    }
    // The split ones' records in writes netdevsim logged (the readable
    // ones were copied: they are in no buffer of the device).
    let dev = log.check(0, rx.zc_bytes)?;
    Ok(format!(
        "{ROUNDS} rounds of {mss}+{tail} bytes, {} byte-exact, zero-copy {} B, copied {} B; {dev}",
        mib(rx.bytes),
        rx.zc_bytes,
        rx.copy_bytes
    ))
}

/// An Ethernet frame with a TCP segment (ACK|PSH, `payload`) from the
/// sender to the receiver's `dport`, its TCP checksum right or (`bad`)
/// wrong, and `pad` bytes of link-layer padding after the IP datagram.
fn tcp_frame(dst: [u8; 6], v6: bool, dport: u16, payload: &[u8], pad: usize, bad: bool) -> Vec<u8> {
    let ip = if v6 { pkt::Ip::new("2001:db8::2", "2001:db8::1") } else { pkt::Ip::new("192.0.2.2", "192.0.2.1") };
    let tcp = pkt::Tcp { bad_csum: bad, ..pkt::Tcp::data(40000, dport, payload.to_vec()) };
    pkt::frame(dst, v6, &pkt::tcp_datagram(&ip, &tcp), pad)
}

/// TCP's InCsumErrors in the receiver's namespace.
fn tcp_csum_errors() -> Result<u64, String> {
    pkt::Snmp::read(NS_A)?.get("Tcp:InCsumErrors")
}

/// netdevsim verifies the TCP checksum of what the sender did not checksum
/// (a raw frame: CHECKSUM_NONE) and DMAs the rest of the frame after the
/// headers, the padding after the IP datagram included (series patch 39;
/// the stack trims it in provider memory): one good and one bad frame per
/// family, 21 bytes of padding each, into the bound queue. All four are
/// split and DMA'd to the byte, as a NIC does; the good ones reach TCP,
/// padding trimmed; the bad ones go up unvalidated (CHECKSUM_NONE), and
/// the stack, which cannot sum payload in provider memory, must drop them
/// as bad (InCsumErrors) without a warning (before the kernel fix it hit
/// WARN_ON_ONCE in __skb_checksum(), which the log scan catches).
pub(super) fn checksum_checked_padding_dmad(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let mac = tryo!(pkt::hwaddr(NS_A, &n.a));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // A bound queue (the pool is the provider's); nobody listens on 7331.
    let rx = with_receiver(n.a_idx, 0, 1 << 20, 7330, false, move |_z, _l| {
        let _ = go_rx.recv();
        Ok(())
    });
    let before = tryo!(n.stats(1, 0));
    let csum_before = tryo!(tcp_csum_errors());
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let mut frames = Vec::new();
    for v6 in [false, true] {
        frames.push(tcp_frame(mac, v6, 7331, &payload, 21, false));
        frames.push(tcp_frame(mac, v6, 7331, &payload, 21, true));
    }
    let sent = pkt::send_frames(NS_B, n.b_idx, frames);
    let d =
        wait_stats(Duration::from_secs(60), "4 frames split", |st| st.dma_packets >= before.dma_packets + 4).map(|st| st.since(&before));
    let _ = go_tx.send(());
    tryo!(join(rx));
    tryo!(sent);
    let d = tryo!(d);
    // The stack counts the bad ones when it gets them: poll for it.
    let t0 = Instant::now();
    let mut errs = tryo!(tcp_csum_errors()) - csum_before;
    while errs < 2 && t0.elapsed() < Duration::from_secs(30) {
        sleep(Duration::from_millis(20));
        errs = tryo!(tcp_csum_errors()) - csum_before;
    }
    env.diag(&format!(
        "4 raw frames of {} B payload + 21 B padding: netdevsim split {} and DMA'd {} B, found {} bad checksums; \
         TCP InCsumErrors +{errs}",
        payload.len(),
        d.dma_packets,
        d.dma_bytes,
        d.csum_bad
    ));
    if d.dma_packets != 4 || d.dma_bytes != 4 * (payload.len() as u64 + 21) {
        return Fail(format!("expected 4 packets, {} B DMA'd (payload and padding)", 4 * (payload.len() + 21)));
    }
    if d.csum_bad != 2 || errs != 2 {
        return Fail("expected 2 bad checksums, found by netdevsim and dropped by TCP".into());
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// An ntuple rule that delivers through an RSS context on netdevsim, which
/// adds the rule's queue to the context's pick (like sfc): "context C action
/// 2" over a context spreading on queues 0-1 delivers to queues 2-3, and the
/// core must refuse to take the device down to 3 channels while the rule is
/// there. Before kernel series patch 12 it looked for FLOW_RSS where drivers
/// do not report it and allowed it. Nor may the context's table change so
/// that the rule's flows leave the device ("equal 3" would send them to
/// queues 2-4 of 4): netdevsim refuses such a table (the core checks the
/// rule when it is inserted, not the table when it changes; before, the
/// queue wrapped around and the flows went silently to queue 0). Traffic
/// through the rule lands on queues 2-3 only (the socket's NAPI).
pub(super) fn ntuple_context_rule_keeps_its_queues(env: &Env) -> Outcome {
    let n = tryo!(Nsim::up(4));
    let ethtool = tryo!(net::ethtool());
    let dev = n.a.clone();
    let ifindex = n.a_idx;
    let r = join(in_netns(NS_A, move || -> Result<(String, String), String> {
        let et = |args: &[&str]| net::run(&ethtool, args, "");
        // the word ethtool prints after `what`
        let after = |out: String, what: &str| -> Result<String, String> {
            let word = out.split(what).nth(1).and_then(|t| t.split_whitespace().next());
            word.map(str::to_string).ok_or(format!("no {what:?} in {out:?}"))
        };
        let ctx = after(et(&["-X", &dev, "context", "new", "start", "0", "equal", "2"])?, "New RSS context is ")?;
        let rule =
            after(et(&["-N", &dev, "flow-type", "tcp6", "dst-port", "5000", "context", &ctx, "action", "2"])?, "Added rule with ID ")?;
        let spread = context_traffic(ifindex)?;
        // (checked here: once accepted, the device has 3 channels and every
        // step below fails for that reason)
        let shrink = match et(&["-L", &dev, "combined", "3"]) {
            Ok(_) => return Err("ethtool -L combined 3 accepted while a rule delivers to queues 2-3".into()),
            Err(e) => e,
        };
        match et(&["-X", &dev, "context", &ctx, "equal", "3"]) {
            Ok(_) => return Err("ethtool -X context equal 3 accepted while a rule adds queue 2 to its entries".into()),
            // (the ioctl ethtool uses for -X shows no extack, only EINVAL;
            // that the rule was the reason shows below, where the same
            // table is taken once the rule is gone)
            Err(e) if !e.contains("would leave the device") && !e.contains("Invalid argument") => {
                return Err(format!("ethtool -X context equal 3 refused for another reason: {e}"))
            }
            Err(_) => {}
        }
        et(&["-X", &dev, "context", &ctx, "equal", "2"]).map_err(|e| format!("ethtool -X context equal 2 (the same spread): {e}"))?;
        et(&["-N", &dev, "delete", &rule])?;
        et(&["-X", &dev, "context", &ctx, "equal", "3"]).map_err(|e| format!("ethtool -X context equal 3 once the rule went: {e}"))?;
        et(&["-X", &dev, "context", &ctx, "delete"])?;
        // the same request once nothing uses queue 3: the refusal was the rule's
        let after = et(&["-L", &dev, "combined", "3"]);
        match after {
            _ if !shrink.contains("too low for existing ntuple filter") => {
                Err(format!("ethtool -L combined 3 refused for another reason: {shrink}"))
            }
            Err(e) => Err(format!("ethtool -L combined 3 after the rule and context went: {e}")),
            Ok(_) => Ok((shrink, spread)),
        }
    }));
    let (e, spread) = tryo!(r);
    let why = e.lines().find(|l| l.contains("too low")).unwrap_or(&e);
    env.diag(&format!("{spread}; ethtool -L combined 3 refused while the rule is there: {}", why.trim()));
    Pass
}

/// Connections of [`ntuple_context_rule_keeps_its_queues`]'s rule.
/// (16: with RSS spreading them over two queues, both get flows but in
/// one run of 2^15.)
const CONTEXT_FLOWS: u16 = 16;

/// Traffic through the rule "context C action 2" (C spreading on queues
/// 0-1), in `NS_A`: [`CONTEXT_FLOWS`] connections from `nsb` to port 5000,
/// each received byte-exact (64 KiB of its own data), and each socket's
/// NAPI (`SO_INCOMING_NAPI_ID`) must be that of queue 2 or 3, from the
/// netdev family's `queue-get` (the tree's YNL), and both queues must get
/// flows (the context's spread, not only the rule's queue). Returns how
/// the flows spread.
fn context_traffic(ifindex: u32) -> Result<String, String> {
    const PER: u64 = 64 << 10;
    let base = 0x5eed_c0de;
    let l = std::net::TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, 5000)).map_err(|e| format!("listen :5000: {e}"))?;
    let senders: Vec<_> = (0..CONTEXT_FLOWS).map(|i| net::flow_sender(net::addr_a(true, 5000), PER, base, usize::from(i % 2))).collect();
    let mut napis = Vec::new();
    // flows the rule loses must fail the test, not hang it
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    for _ in 0..CONTEXT_FLOWS {
        let (mut s, peer) = loop {
            match l.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < Duration::from_secs(60) => {
                    sleep(Duration::from_millis(10))
                }
                Err(e) => return Err(format!("accept (after {} of {CONTEXT_FLOWS} flows): {e}", napis.len())),
            }
        };
        s.set_nonblocking(false).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut got).map_err(|e| format!("read from {peer}: {e}"))?;
        let pat = zcrx::pattern::Pattern::new(net::flow_seed(base, peer.port()));
        if got.len() as u64 != PER {
            return Err(format!("{peer}: {} of {PER} bytes", got.len()));
        }
        if let Some(off) = pat.check(0, &got) {
            return Err(format!("{peer}: wrong byte at offset {off}"));
        }
        let mut napi: libc::c_uint = 0;
        let mut len = std::mem::size_of_val(&napi) as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `napi`.
        let r = unsafe {
            libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID, (&mut napi as *mut libc::c_uint).cast(), &mut len)
        };
        zcrx::sys::cvt(r.into()).map_err(|e| format!("SO_INCOMING_NAPI_ID: {e}"))?;
        napis.push(napi);
    }
    for t in senders {
        t.join().map_err(|_| "sender panicked")??;
    }
    // queue -> NAPI id, from the netdev family
    let out = net::netdev_ynl(QUEUE_NAPIS, ifindex)?;
    let mut queue_of = std::collections::HashMap::new();
    for l in out.lines() {
        let v: Vec<u32> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if let [q, napi] = v[..] {
            queue_of.insert(napi, q);
        }
    }
    let mut per_queue = [0u32; 4];
    for napi in &napis {
        match queue_of.get(napi) {
            Some(&q) if q == 2 || q == 3 => per_queue[q as usize] += 1,
            Some(q) => return Err(format!("a flow of the rule reached queue {q} (NAPI {napi}), not 2 or 3")),
            None => return Err(format!("NAPI {napi} of a flow is no rx queue's ({out:?})")),
        }
    }
    if per_queue[2] == 0 || per_queue[3] == 0 {
        return Err(format!(
            "the context spreads over two queues, but its {CONTEXT_FLOWS} flows went to queue 2: {}, queue 3: {}",
            per_queue[2], per_queue[3]
        ));
    }
    Ok(format!(
        "{CONTEXT_FLOWS} flows through the rule byte-exact, {} on queue 2 and {} on queue 3 (none on 0-1)",
        per_queue[2], per_queue[3]
    ))
}

/// After [`net::NETDEV_YNL`]: the NAPI id of each rx queue of `ifindex`,
/// `QUEUE NAPI` per line.
const QUEUE_NAPIS: &str = r#"
for q in ynl.dump('queue-get', {'ifindex': ifindex}):
    if q.get('type') == 'rx' and 'napi-id' in q:
        print(q['id'], q['napi-id'])
"#;

/// After [`net::NETDEV_YNL`]: `qstats-get` for one device: one line of totals (rx-csum-bad, rx-hw-drops, rx-alloc-fail)
/// for each line read. One process for the whole test: a Python start
/// with the spec takes half a minute on the debug kernel.
const QSTATS: &str = r#"
for _ in sys.stdin:
    t = [0, 0, 0]
    for q in ynl.dump('qstats-get', {'ifindex': ifindex}):
        for i, k in enumerate(('rx-csum-bad', 'rx-hw-drops', 'rx-alloc-fail')):
            t[i] += q.get(k, 0)
    print(*t, flush=True)
"#;

/// Where [`QSTATS`]'s stderr goes (read when it fails: a traceback).
const QSTATS_ERR: &str = "/tmp/zcrx-selftest-qstats.err";

/// A running [`QSTATS`] in `NS_A`.
struct Qstats {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Qstats {
    fn start(ifindex: u32) -> Result<Qstats, String> {
        use std::process::{Command, Stdio};
        let ksrc = net::ksrc()?;
        // spawned from a thread in NS_A: the process and its netlink
        // socket live there
        let mut child = join(in_netns(NS_A, move || {
            Command::new("/usr/bin/python3")
                .args(["-c", &format!("{}{QSTATS}", net::NETDEV_YNL), &ksrc, &ifindex.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(fs::File::create(QSTATS_ERR).map_err(|e| format!("{QSTATS_ERR}: {e}"))?)
                .spawn()
                .map_err(|e| format!("python3: {e}"))
        }))?;
        let out = std::io::BufReader::new(child.stdout.take().ok_or("python3: no stdout")?);
        Ok(Qstats { child, out })
    }

    fn totals(&mut self) -> Result<[u64; 3], String> {
        use std::io::{BufRead, Write};
        let stdin = self.child.stdin.as_mut().ok_or("python3: no stdin")?;
        stdin.write_all(b"get\n").and_then(|()| stdin.flush()).map_err(|e| format!("qstats-get: {e}"))?;
        let mut line = String::new();
        self.out.read_line(&mut line).map_err(|e| format!("qstats-get: {e}"))?;
        let v: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        v.try_into().map_err(|_| {
            let err = fs::read_to_string(QSTATS_ERR).unwrap_or_default();
            format!("qstats-get: bad output {line:?}; the YNL script said: {}", err.trim())
        })
    }
}

impl Drop for Qstats {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The device's queue statistics do not go backwards when `ethtool -L`
/// takes queues away: netdevsim counts 3 bad checksums on queue 3 of 4
/// (raw frames steered there by an ntuple rule, split into a provider's
/// buffers); the device's `rx-csum-bad` total (`qstats-get`) stays 3 with
/// 2 queues and with 4 again (not 0, then 3; not 6). Before the fix of
/// series patch 30 the counters of the removed queues left the totals.
pub(super) fn queue_stats_survive_channel_shrink(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(4));
    tryo!(n.hds(true));
    let ethtool = tryo!(net::ethtool());
    let et = move |args: Vec<String>| {
        let ethtool = ethtool.clone();
        join(in_netns(NS_A, move || net::run(&ethtool, &args.iter().map(String::as_str).collect::<Vec<_>>(), "")))
    };
    let dev = n.a.clone();
    let out = tryo!(et(vec![
        "-N".into(),
        dev.clone(),
        "flow-type".into(),
        "tcp4".into(),
        "dst-port".into(),
        "7341".into(),
        "action".into(),
        "3".into()
    ]));
    let Some(rule) = out.split("Added rule with ID ").nth(1).and_then(|t| t.split_whitespace().next()).map(str::to_string) else {
        return Fail(format!("ethtool -N: no rule id in {out:?}"));
    };
    let mut qs = tryo!(Qstats::start(n.a_idx));
    let base = tryo!(qs.totals());
    let before = tryo!(net::hds_stats(1, 3));
    let mac = tryo!(pkt::hwaddr(NS_A, &n.a));
    let (go_tx, go_rx) = mpsc::channel::<()>();
    // queue 3 bound (netdevsim splits only into a provider's buffers);
    // nobody listens on 7341
    let rx = with_receiver(n.a_idx, 3, 1 << 20, 7340, false, move |_z, _l| {
        let _ = go_rx.recv();
        Ok(())
    });
    let payload: Vec<u8> = (0..600u32).map(|i| (i * 11) as u8).collect();
    let frames = (0..3).map(|_| tcp_frame(mac, false, 7341, &payload, 0, true)).collect();
    let sent = pkt::send_frames(NS_B, n.b_idx, frames);
    let t0 = Instant::now();
    let counted = loop {
        let st = net::hds_stats(1, 3).map(|st| st.since(&before));
        match st {
            Ok(d) if d.csum_bad >= 3 => break Ok(d.csum_bad),
            Ok(_) if t0.elapsed() < Duration::from_secs(60) => sleep(Duration::from_millis(20)),
            Ok(d) => break Err(format!("netdevsim counted {} of 3 bad checksums on queue 3 in 60 s", d.csum_bad)),
            Err(e) => break Err(e),
        }
    };
    let _ = go_tx.send(());
    tryo!(join(rx));
    tryo!(sent);
    let counted = tryo!(counted);
    let four = tryo!(qs.totals());
    tryo!(et(vec!["-N".into(), dev.clone(), "delete".into(), rule]));
    tryo!(et(vec!["-L".into(), dev.clone(), "combined".into(), "2".into()]));
    let two = tryo!(qs.totals());
    tryo!(et(vec!["-L".into(), dev.clone(), "combined".into(), "4".into()]));
    let four_again = tryo!(qs.totals());
    env.diag(&format!(
        "netdevsim counted {counted} bad checksums on queue 3; rx-csum-bad/hw-drops/alloc-fail totals: before {base:?}, \
         4 queues {four:?}, 2 queues {two:?}, 4 again {four_again:?}"
    ));
    if four[0] != base[0] + 3 {
        return Fail(format!("rx-csum-bad went from {} to {} with 3 bad checksums counted", base[0], four[0]));
    }
    if two != four || four_again != four {
        return Fail(format!("the totals changed with the queues: 4 queues {four:?}, 2 queues {two:?}, 4 again {four_again:?}"));
    }
    drop(qs);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Every zero-copy record points at bytes the device wrote for it: with
/// netdevsim logging each delivered header-split write (queue, DMA address,
/// length) and its DMA addresses at `NSIM_DMA_OFFSET` above the physical
/// ones, a 4 MiB stream received with RECV is checked record by record.
/// Each record's bytes, at their physical address (`/proc/self/pagemap`)
/// plus the offset, must lie in a write of their buffer that no earlier
/// record used up: the writes of each buffer are taken in the order
/// netdevsim made them, so a buffer handed out twice for one write (a
/// stale buffer with the right bytes, which byte checks pass) fails. All
/// records are zero-copy, the log lost nothing, and the logged bytes
/// equal netdevsim's own `dma_bytes`.
pub(super) fn records_point_at_device_writes(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let log = tryo!(DmaLog::start());
    let bytes: u64 = 4 << 20;
    let port = 7351;
    let rx = with_receiver(n.a_idx, 0, 16 << 20, port, false, move |z, l| {
        let s = crate::tunnel::accept_within(&l, Duration::from_secs(60))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let peer = s.peer_addr().map_err(|e| format!("peer address: {e}"))?;
        // net::receive notes each zero-copy record for the device check
        net::receive(z, &s, &Pattern::new(net::flow_seed(0x5eed, peer.port())), None)
    });
    let sent = net::flow_sender(addr_a(false, port), bytes, 0x5eed, 0);
    let s = join(sent);
    let r = join(rx);
    tryo!(s);
    let rx = tryo!(r);
    if rx.bytes != bytes || rx.copy_bytes != 0 {
        return Fail(format!("{} of {bytes} bytes, {} copied: all must come zero-copy", rx.bytes, rx.copy_bytes));
    }
    let line = tryo!(log.check(0, rx.zc_bytes));
    env.diag(&format!("{} bytes in {} records, all zero-copy; {line}", rx.bytes, rx.records));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
