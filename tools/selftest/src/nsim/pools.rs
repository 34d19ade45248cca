// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! netdevsim's page pools as the netdev family's `page-pool-get` shows
//! them: what a queue restart leaves behind.

use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::ZCRX_RS_REC_COPY;
use zcrx::{Pattern, Rec};

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{self, addr_a, in_netns, join, with_receiver, Nsim, DONTWAIT, NS_A, NS_B};
use crate::Env;

/// After [`net::NETDEV_YNL`]: `print_pools()` prints one line per page
/// pool of `ifindex` that no memory provider backs, `ID INFLIGHT
/// live|detached`.
const PRINT_POOLS: &str = r#"
def print_pools():
    for p in ynl.dump('page-pool-get', {}):
        if p.get('ifindex') != ifindex or 'mp-provider' in p or 'io-uring' in p or 'dmabuf' in p:
            continue
        print(p['id'], p.get('inflight', 0), 'detached' if 'detach-time' in p else 'live', flush=True)
"#;

/// After [`PRINT_POOLS`]: prints the pools, `ready`, waits for a line on
/// stdin, then for 3 s prints the pools every 0.1 s, and once more after
/// them, each time after a line `at SECONDS`.
const WATCH_POOLS: &str = r#"
import time
print_pools()
print('ready', flush=True)
sys.stdin.readline()
t0 = time.monotonic()
while time.monotonic() - t0 < 3.0:
    print('at', round(time.monotonic() - t0, 3), flush=True)
    print_pools()
    time.sleep(0.1)
print('at', round(time.monotonic() - t0, 3), flush=True)
print_pools()
"#;

/// What [`watch_pools_around`] saw: the pools before, and each dump after.
type Dumps = (Vec<Pool>, Vec<(f64, Vec<Pool>)>);

/// The pools of `ifindex` that no provider backs, seen from the calling
/// thread's namespace and CPU, before `act` and for 3 s after it: what it
/// left, dump by dump, with the time of each (s after `act` returned). The
/// watcher starts first (python takes seconds to start here).
fn watch_pools_around(ifindex: u32, act: impl FnOnce() -> Result<(), String>) -> Result<Dumps, String> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let script = format!("{}{PRINT_POOLS}{WATCH_POOLS}", net::NETDEV_YNL);
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", &script, &net::ksrc()?, &ifindex.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python3: {e}"))?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let r = (|| {
        let mut before = Vec::new();
        loop {
            let mut line = String::new();
            out.read_line(&mut line).map_err(|e| format!("pool watcher: {e}"))?;
            match line.trim() {
                "ready" => break,
                "" => return Err(String::from("pool watcher: no ready")),
                l => before.push(parse_pool(l)?),
            }
        }
        act()?;
        child.stdin.take().ok_or("no stdin")?.write_all(b"go\n").map_err(|e| format!("pool watcher: {e}"))?;
        let mut dumps: Vec<(f64, Vec<Pool>)> = Vec::new();
        for l in out.lines() {
            let l = l.map_err(|e| format!("pool watcher: {e}"))?;
            match l.strip_prefix("at ") {
                Some(t) => dumps.push((t.parse().map_err(|_| format!("bad line {l:?}"))?, Vec::new())),
                None => dumps.last_mut().ok_or(format!("pool before a time: {l:?}"))?.1.push(parse_pool(&l)?),
            }
        }
        Ok((before, dumps))
    })();
    let _ = child.kill();
    let st = child.wait().map_err(|e| format!("pool watcher: {e}"))?;
    let (before, dumps) = r?;
    if !st.success() || dumps.is_empty() {
        return Err(format!("pool watcher: {st}, {} dumps", dumps.len()));
    }
    Ok((before, dumps))
}

/// A pool of [`PRINT_POOLS`]: id, pages in flight, detached.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pool {
    id: u32,
    inflight: u64,
    detached: bool,
}

/// A line of `print_pools()`.
fn parse_pool(l: &str) -> Result<Pool, String> {
    match l.split_whitespace().collect::<Vec<_>>().as_slice() {
        [id, n, state] => Ok(Pool {
            id: id.parse().map_err(|_| format!("bad line {l:?}"))?,
            inflight: n.parse().map_err(|_| format!("bad line {l:?}"))?,
            detached: *state == "detached",
        }),
        _ => Err(format!("bad line {l:?}")),
    }
}

/// Takes away what sends packets on the link by itself, so that no CPU
/// runs NET_RX for this test but when the test sends: IPv6 (address
/// configuration and MLD send for seconds after the link comes up) and ARP
/// (a neighbour in use is probed again 5 s after it went stale), with
/// permanent neighbours instead.
fn quiet_link(n: &Nsim) -> Result<(), String> {
    let mac = |ns: &'static str, d: &str| -> Result<String, String> {
        let out = net::run("ip", &["-n", ns, "-br", "link", "show", "dev", d], "")?;
        out.split_whitespace().nth(2).map(str::to_string).ok_or(format!("ip link show dev {d}: {out:?}"))
    };
    let (mac_a, mac_b) = (mac(NS_A, &n.a)?, mac(NS_B, &n.b)?);
    for (ns, d, peer, lladdr) in [(NS_A, &n.a, "192.0.2.2", &mac_b), (NS_B, &n.b, "192.0.2.1", &mac_a)] {
        let dev = d.clone();
        join(in_netns(ns, move || {
            let p = format!("/proc/sys/net/ipv6/conf/{dev}/disable_ipv6");
            std::fs::write(&p, "1").map_err(|e| format!("{p}: {e}"))
        }))?;
        net::run("ip", &["-n", ns, "neigh", "replace", peer, "lladdr", lladdr, "dev", d, "nud", "permanent"], "")?;
    }
    Ok(())
}

/// How many NET_RX softirqs `cpu` has run (/proc/softirqs).
fn net_rx_on(cpu: usize) -> Result<u64, String> {
    let t = std::fs::read_to_string("/proc/softirqs").map_err(|e| format!("/proc/softirqs: {e}"))?;
    let l = t.lines().find(|l| l.trim_start().starts_with("NET_RX:")).ok_or("no NET_RX in /proc/softirqs")?;
    l.split_whitespace().nth(cpu + 1).and_then(|v| v.parse().ok()).ok_or(format!("bad line {l:?}"))
}

/// Pages that detached pools of `pools` still wait for.
fn waiting(pools: &[Pool]) -> u64 {
    pools.iter().filter(|p| p.detached).map(|p| p.inflight).sum()
}

/// A queue with a memory provider takes headers into a page pool of
/// ordinary pages of its own (series patch 34), as NICs do; with
/// `hds_copybreak` 1000 a segment of 1000 bytes stays whole and readable in
/// its header buffer. A destroyed page pool waits for its pages, and those
/// in skbs that a socket freed on another CPU than the one that allocated
/// them sit on that CPU's skb defer list until it runs NET_RX, which an
/// idle CPU may never do (patch 11).
///
/// The sender, on CPU 1 where netdevsim's NAPI then runs, sends 16 such
/// segments, each alone and acknowledged; after 0.5 s (the receiver's
/// timers armed on CPU 1 have fired) the receiver, on CPU 0, reads them,
/// byte-exact and copied: their skb goes to CPU 1's defer list (16 skbs at
/// most, below the 64 that send CPU 1 an IPI), and UNBIND follows at once.
/// IPv6 is off on both devices: its address configuration and MLD send
/// packets from CPU 1's workers for seconds after the link comes up, and
/// each makes CPU 1 run NET_RX; ARP's probes too, so the neighbours are
/// permanent. Before the read, `page-pool-get` must list the header pool
/// (the netdev's one pool without a provider) with pages. UNBIND restarts
/// the queue and destroys it: right after, the detached pool must wait for
/// the deferred pages (else the test shows nothing), and 3 s later no
/// detached pool of the netdev may wait for any (the release work retries
/// every second). Before patch 11 it waited until CPU 1 happened to run
/// NET_RX.
pub(crate) fn destroyed_pool_frees_deferred_skbs(env: &Env) -> Outcome {
    const SEGS: usize = 16;
    const SEG: usize = 1000;
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(Nsim::copybreak(1, SEG as u32));
    tryo!(quiet_link(&n));
    let a_idx = n.a_idx;
    let port = 7327u16;
    let pat = Arc::new(Pattern::new(u64::from(port)));
    let p2 = pat.clone();
    let (queued_tx, queued_rx) = mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 64 * zcrx::dev::page_size(), port, false, move |z, l| {
        zcrx::sys::pin_to_cpu(0).map_err(|e| format!("CPU 0: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        queued_rx.recv_timeout(Duration::from_secs(120)).map_err(|_| "the sender never queued its segments".to_string())?;
        sleep(Duration::from_millis(500));
        let (mut got, mut copied, mut net_rx0) = (0u64, 0u64, 0);
        // The watcher starts first: the read and UNBIND follow each other
        // at once, and CPU 1 has no time to run NET_RX between them.
        let (bound, dumps) = watch_pools_around(a_idx, || {
            net_rx0 = net_rx_on(1)?;
            let mut recs = vec![Rec::default(); 64];
            let t0 = Instant::now();
            while got < (SEGS * SEG) as u64 {
                match z.recv(s.as_raw_fd(), &mut recs, DONTWAIT) {
                    Ok(g) if g.bytes == 0 => return Err(format!("EOF after {got} bytes")),
                    Ok(g) => {
                        for r in &recs[..g.records] {
                            if let Some(bad) = p2.check(got, z.data(r)) {
                                return Err(format!("payload mismatch at {bad}"));
                            }
                            got += u64::from(r.len);
                            if r.flags & ZCRX_RS_REC_COPY != 0 {
                                copied += u64::from(r.len);
                            }
                        }
                        z.refill(&recs[..g.records]).map_err(|e| format!("refill: {e}"))?;
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && t0.elapsed() < Duration::from_secs(10) => {}
                    Err(e) => return Err(format!("recv after {got} bytes: {e}")),
                }
            }
            z.unbind().map_err(|e| format!("UNBIND: {e}"))
        })?;
        // NET_RX runs on CPU 1 from the read to the last look
        let net_rx = net_rx_on(1)? - net_rx0;
        Ok((got, copied, bound, dumps, net_rx))
    });
    let to = addr_a(false, port);
    let p3 = pat.clone();
    let tx = in_netns(NS_B, move || {
        let s = super::send_acked_segments(to, 1, &p3, SEGS, SEG)?;
        let _ = queued_tx.send(());
        // the connection stays open until the receiver is done
        Ok(s)
    });
    let r = join(rx);
    let sent = join(tx);
    let (got, copied, bound, dumps, net_rx) = tryo!(r.map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err())));
    drop(tryo!(sent));
    let (t_first, first) = dumps[0].clone();
    let (t_last, last) = dumps[dumps.len() - 1].clone();
    // the first dump in which no detached pool waits for a page
    let drained = dumps.iter().find(|(_, p)| waiting(p) == 0).map(|(t, _)| *t);
    env.diag(&format!(
        "{got} B byte-exact, {copied} B copied (readable in header buffers), 0 zero-copy; pools without a provider: \
         bound {bound:?}; after UNBIND: at {t_first:.2} s {first:?}, at {t_last:.2} s {last:?} ({} dumps); detached \
         pools waited for no page from {}; CPU 1 ran NET_RX {net_rx} times from the read on",
        dumps.len(),
        drained.map_or("never".into(), |t| format!("{t:.2} s"))
    ));
    if got != (SEGS * SEG) as u64 || copied != got {
        return Fail(format!("{got} of {} bytes received, {copied} copied: the segments did not stay in header buffers", SEGS * SEG));
    }
    let hdr = match bound.as_slice() {
        [p] if !p.detached && p.inflight > 0 => *p,
        _ => return Fail(format!("while bound, page-pool-get lists {bound:?}: expected one live header pool with pages")),
    };
    // The test shows something only if the destroyed header pool waited
    // for the deferred skbs' pages.
    if !first.iter().any(|p| p.id == hdr.id && p.detached && p.inflight > 0) {
        return Fail(format!(
            "at {t_first:.2} s after UNBIND the header pool {} did not wait for pages ({first:?}; CPU 1 ran NET_RX {net_rx} \
             times from the read on): nothing held them, the test shows nothing",
            hdr.id
        ));
    }
    if t_last < 3.0 {
        return Fail(format!("the pool watcher's last dump came {t_last:.2} s after UNBIND, before 3 s"));
    }
    if waiting(&last) != 0 || last.iter().any(|p| p.id == hdr.id) {
        return Fail(format!(
            "{t_last:.2} s after UNBIND the destroyed header pool still waits: {last:?} (CPU 1 ran NET_RX {net_rx} times \
             from the read on)"
        ));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// netdevsim's queue restarts (debugfs `queue_reset`, modes 0 to 3) replace
/// the queue's page pool. After each, `page-pool-get` must list one live
/// pool of the netdev, a new one (series patch 2: in modes 0, 2 and 3 the
/// new pool was made before its NAPI was added, took its netdev from the
/// NAPI, got none and was not listed).
pub(crate) fn queue_reset_keeps_pools_listed(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    let a_idx = n.a_idx;
    // one python for the five dumps (it takes seconds to start on the
    // debug kernel)
    let script = format!(
        "{PRINT_POOLS}
print('before', flush=True)
print_pools()
for mode in range(4):
    with open('/sys/kernel/debug/netdevsim/netdevsim1/ports/0/queue_reset', 'w') as f:
        f.write('0 %d' % mode)
    print('mode', mode, flush=True)
    print_pools()
"
    );
    let out = tryo!(join(in_netns(NS_A, move || net::netdev_ynl(&script, a_idx))));
    let mut seen: Vec<(String, Vec<Pool>)> = Vec::new();
    for l in out.lines() {
        if l == "before" || l.starts_with("mode ") {
            seen.push((l.to_string(), Vec::new()));
        } else if let Some((_, pools)) = seen.last_mut() {
            pools.push(tryo!(parse_pool(l)));
        } else {
            return Fail(format!("bad line {l:?}"));
        }
    }
    if seen.len() != 5 {
        return Fail(format!("expected a dump before and after each of 4 resets: {out:?}"));
    }
    for w in seen.windows(2) {
        let ((_, old), (mode, now)) = (&w[0], &w[1]);
        let live: Vec<&Pool> = now.iter().filter(|p| !p.detached).collect();
        if live.len() != 1 || old.iter().any(|p| p.id == live[0].id) {
            return Fail(format!("after a reset in {mode}, page-pool-get lists {now:?} (before: {old:?}): expected one new live pool"));
        }
    }
    env.diag(&format!("page-pool-get before and after resets in modes 0 to 3: {seen:?}"));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
