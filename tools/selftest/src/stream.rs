// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Data tests: streams through zcrx_rs on the netdevsim pair, every byte
//! checked against the pattern, zero-copy and copied bytes counted and
//! cross-checked with netdevsim's header-split counters.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::{ZCRX_RS_FEATURE_MERGE, ZCRX_RS_RECV_MERGE};
use zcrx::{Pattern, Rec};

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::{self, DmaLog};
use crate::net::{self, addr_a, join, receive, receive_flags, sender, with_receiver, with_receiver_rcvbuf, Nsim, Rx, DONTWAIT};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("no_provider_stream_unchanged", no_provider_stream_unchanged),
    ("iouring_zcrx_in_tree", iouring_zcrx_in_tree),
    ("zc_stream_1g_ipv6", zc_stream_1g_ipv6),
    ("zc_stream_ipv4", zc_stream_ipv4),
    ("tiny_area_backpressure", tiny_area_backpressure),
    ("flow_on_unbound_queue_is_copied", flow_on_unbound_queue_is_copied),
    ("two_sockets_one_queue", two_sockets_one_queue),
    ("rcvlowat_honoured", rcvlowat_honoured),
    ("merged_records_stream", merged_records_stream),
];

/// One stream of `bytes` to receiver queue `rxq` from a sender on `cpu`;
/// returns what the receiver saw and netdevsim's counters before/after.
#[allow(clippy::too_many_arguments)]
pub fn one_stream(
    n: &Nsim,
    bytes: u64,
    area: usize,
    rxq: u32,
    cpu: usize,
    v6: bool,
    port: u16,
    seed: u64,
) -> Result<(Rx, net::HdsStats, net::HdsStats, zcrx::uapi::zcrx_rs_stats), String> {
    one_stream_rcvbuf(n, bytes, area, rxq, cpu, v6, port, seed, None)
}

/// [`one_stream`] with the receiving socket's `SO_RCVBUF` set.
#[allow(clippy::too_many_arguments)]
pub fn one_stream_rcvbuf(
    n: &Nsim,
    bytes: u64,
    area: usize,
    rxq: u32,
    cpu: usize,
    v6: bool,
    port: u16,
    seed: u64,
    rcvbuf: Option<i32>,
) -> Result<(Rx, net::HdsStats, net::HdsStats, zcrx::uapi::zcrx_rs_stats), String> {
    let before = n.stats(1, cpu as u32 % n.queues)?;
    let pat = Arc::new(Pattern::new(seed));
    let p2 = pat.clone();
    let rx = with_receiver_rcvbuf(n.a_idx, rxq, area, port, v6, rcvbuf, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // A RECV that waits this long says where things stand (`receive`
        // prints a stall report and goes on until its own deadline) rather
        // than hanging the run.
        s.set_read_timeout(Some(Duration::from_secs(15))).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        let rx = receive(z, &s, &p2, None)?;
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        Ok((rx, st))
    });
    let tx = sender(addr_a(v6, port), bytes, pat, cpu);
    let sent = join(tx);
    // The receiver's error explains the sender's, report it first.
    let (rx, st) = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    let sent = sent.map_err(|e| format!("sender: {e}"))?;
    let after = n.stats(1, cpu as u32 % n.queues)?;
    if sent != bytes || rx.bytes != bytes {
        return Err(format!("sent {sent}, received {} of {bytes} bytes", rx.bytes));
    }
    Ok((rx, before, after, st))
}

pub fn report(rx: &Rx, st: &zcrx::uapi::zcrx_rs_stats, d: net::HdsStats, secs: f64) -> String {
    format!(
        "{} byte-exact in {secs:.1} s: zero-copy {} ({:.2}%), copied {} in {} records; module: zc {} copy {} \
         alloc_fail {} refill ok/bad {}/{}; netdevsim: DMA'd {} in {} pkts, {} pkts unsplit",
        mib(rx.bytes),
        mib(rx.zc_bytes),
        100.0 * rx.zc_bytes as f64 / rx.bytes.max(1) as f64,
        mib(rx.copy_bytes),
        st.copy_records,
        mib(st.zc_bytes),
        mib(st.copy_bytes),
        st.alloc_fail,
        st.refill_ok,
        st.refill_bad,
        mib(d.dma_bytes),
        d.dma_packets,
        d.fallback_packets
    )
}

fn delta(a: net::HdsStats, b: net::HdsStats) -> net::HdsStats {
    b.since(&a)
}

/// Checks a zero-copy stream: all of it zero-copy by our records, the module's
/// counters agree with the records, and netdevsim DMA'd at least that much.
pub fn check_zc(k: &str, rx: &Rx, st: &zcrx::uapi::zcrx_rs_stats, d: net::HdsStats) -> Result<(), String> {
    if rx.zc_bytes != rx.bytes {
        return Err(format!("{k}: only {} of {} bytes zero-copy (nothing here may be copied)", rx.zc_bytes, rx.bytes));
    }
    if st.zc_bytes != rx.zc_bytes || st.copy_bytes != rx.copy_bytes {
        return Err(format!(
            "{k}: module says zc {} copy {}, records say zc {} copy {}",
            st.zc_bytes, st.copy_bytes, rx.zc_bytes, rx.copy_bytes
        ));
    }
    if d.dma_bytes < rx.zc_bytes {
        return Err(format!("{k}: netdevsim DMA'd {} bytes < {} delivered zero-copy", d.dma_bytes, rx.zc_bytes));
    }
    Ok(())
}

/// Starts netdevsim's DMA log for a stream of `bytes` when the log can
/// hold its writes (one per segment at worst: 1448 bytes), and says so
/// either way: the device check must not be skipped in silence.
fn device_log(env: &Env, bytes: u64) -> Result<Option<DmaLog>, String> {
    if bytes > devlog::CAPACITY * 1024 {
        env.diag(&format!(
            "device check not run: {} may take more writes than netdevsim's DMA log holds ({})",
            mib(bytes),
            devlog::CAPACITY
        ));
        return Ok(None);
    }
    DmaLog::start().map(Some)
}

/// The device check of a stream on queue 0 (see [`devlog`]), when its
/// log ran.
fn device_check(env: &Env, log: Option<DmaLog>, rx: &Rx) -> Result<(), String> {
    let Some(log) = log else { return Ok(()) };
    env.diag(&log.check(0, rx.zc_bytes)?);
    Ok(())
}

fn stream_test(env: &Env, bytes: u64, area: usize, v6: bool, port: u16) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let log = tryo!(device_log(env, bytes));
    let t0 = Instant::now();
    let (rx, b, a, st) = tryo!(one_stream(&n, bytes, area, 0, 0, v6, port, port as u64));
    let d = delta(b, a);
    env.diag(&report(&rx, &st, d, t0.elapsed().as_secs_f64()));
    tryo!(check_zc("stream", &rx, &st, d));
    tryo!(device_check(env, log, &rx));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

fn zc_stream_1g_ipv6(env: &Env) -> Outcome {
    stream_test(env, env.big_stream, 64 << 20, true, 7001)
}

fn zc_stream_ipv4(env: &Env) -> Outcome {
    stream_test(env, env.bytes(64 << 20), 16 << 20, false, 7002)
}

fn tiny_area_backpressure(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let t0 = Instant::now();
    let pages = 16;
    let area = pages * zcrx::dev::page_size();
    // netdevsim drops what finds no buffer, as a NIC does, and TCP must
    // resend it into buffers the receiver gave back. That works only while
    // the socket cannot hold every buffer itself: TCP charges each buffer
    // in its receive and out-of-order queues at its full size against the
    // receive buffer, so a receive buffer of half the area (SO_RCVBUF is
    // doubled) leaves half for the segment that fills a hole. With more,
    // the out-of-order queue can take all buffers while the missing
    // segment has none to land in, and the flow stalls for good (see
    // Documentation, "Sizing the area").
    //
    // And GRO off on the receiver: one skb then holds one buffer. With GRO
    // one out-of-order skb could hold most of the area's 16 buffers (up to
    // 17 frags), SO_RCVBUF bounds the queue only as segments arrive, and
    // none arrives while the pool is dry: the segment that fills the hole
    // was dropped again at every retransmission (seen under a loaded host:
    // stalls of 30 s and more).
    tryo!(net::ethtool_in(net::NS_A, &["-K", &n.a, "gro", "off"]));
    let rcvbuf = (area / 4) as i32;
    let log = tryo!(DmaLog::start());
    let (rx, b, a, st) = tryo!(one_stream_rcvbuf(&n, env.bytes(32 << 20), area, 0, 0, true, 7003, 3, Some(rcvbuf)));
    let d = delta(b, a);
    env.diag(&format!(
        "area of {pages} buffers, SO_RCVBUF {rcvbuf}, GRO off: {}; netdevsim dropped {} bursts for want of a buffer; \
         ENOBUFS {} times, refill backlog peak {}",
        report(&rx, &st, d, t0.elapsed().as_secs_f64()),
        d.drop_no_buf,
        rx.enobufs,
        rx.backlog_max
    ));
    // Nothing is delivered readable when the pool is dry: all zero-copy,
    // and the module's counters agree. (Whether the pool ran dry at all
    // varies from run to run; dry_pool_drops_then_recovers makes sure.)
    if rx.copy_bytes != 0 || st.copy_bytes != 0 || st.zc_bytes != rx.bytes {
        return Fail(format!("{} bytes copied (module: {}), module zc {}", rx.copy_bytes, st.copy_bytes, st.zc_bytes));
    }
    // Every record in a write netdevsim logged: after hundreds of drops
    // and retransmissions into recycled buffers, none is stale.
    env.diag(&tryo!(log.check(0, rx.zc_bytes)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

fn flow_on_unbound_queue_is_copied(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up_steered(2, Some(1)));
    tryo!(n.hds(true));
    // Bound to queue 0; the sender sends everything on tx queue 1 (XPS from
    // every CPU), which the receiver gets on rx queue 1: ordinary pages, so
    // the bytes can only arrive as copies. Should anything still land on the
    // bound queue, it arrives zero-copy, and no more than netdevsim DMA'd.
    let q0_before = tryo!(n.stats(1, 0));
    let t0 = Instant::now();
    let (rx, b, a, st) = tryo!(one_stream(&n, env.bytes(16 << 20), 8 << 20, 0, 1, true, 7004, 4));
    let d = delta(b, a);
    let q0 = delta(q0_before, tryo!(n.stats(1, 0)));
    env.diag(&format!(
        "flow steered to rx queue 1, bound queue 0: {}; bound queue 0 DMA'd {}",
        report(&rx, &st, d, t0.elapsed().as_secs_f64()),
        mib(q0.dma_bytes)
    ));
    if st.copy_bytes != rx.copy_bytes || st.zc_bytes != rx.zc_bytes {
        return Fail("module counters disagree with the records".into());
    }
    if d.dma_bytes != 0 {
        return Fail(format!("netdevsim DMA'd {} bytes on unbound queue 1", d.dma_bytes));
    }
    if rx.zc_bytes > q0.dma_bytes {
        return Fail(format!("{} bytes zero-copy but only {} DMA'd on the bound queue", rx.zc_bytes, q0.dma_bytes));
    }
    // With the flow steered, all of it must have used queue 1.
    if rx.copy_bytes != rx.bytes {
        return Fail(format!("only {} of {} bytes took the unbound queue (copies)", rx.copy_bytes, rx.bytes));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Two connections on the one bound queue, received through one context
/// with poll() and non-blocking receive calls, each checked separately;
/// both all zero-copy, every record in a write netdevsim logged.
fn two_sockets_one_queue(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let bytes = env.bytes(24 << 20);
    // 48 MiB at most: netdevsim's DMA log holds its writes.
    let log = tryo!(DmaLog::start());
    let pats = [Arc::new(Pattern::new(21)), Arc::new(Pattern::new(22))];
    let (pa, pb) = (pats[0].clone(), pats[1].clone());
    let rx = with_receiver(n.a_idx, 0, 16 << 20, 7005, true, move |z, l| {
        let s1 = l.accept().map_err(|e| format!("accept: {e}"))?.0;
        let s2 = l.accept().map_err(|e| format!("accept: {e}"))?.0;
        // Which sender is which: the first 8 bytes tell.
        let socks = [s1, s2];
        let mut off = [0u64; 2];
        let mut which: [Option<usize>; 2] = [None, None];
        let mut done = [false; 2];
        let mut zc = 0u64;
        let mut recs = vec![Rec::default(); 64];
        let t0 = Instant::now();
        while !(done[0] && done[1]) {
            if t0.elapsed() > Duration::from_secs(300) {
                return Err("timed out".into());
            }
            let mut pfd: Vec<libc::pollfd> =
                socks.iter().map(|s| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(pfd.as_mut_ptr(), 2, 1000) };
            for i in 0..2 {
                if done[i] || pfd[i].revents == 0 {
                    continue;
                }
                let got = match z.recv(socks[i].as_raw_fd(), &mut recs, DONTWAIT) {
                    Ok(g) => g,
                    Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                    Err(e) => return Err(format!("recv: {e}")),
                };
                if got.bytes == 0 {
                    done[i] = true;
                    continue;
                }
                for r in &recs[..got.records] {
                    let data = z.data(r);
                    let w = match which[i] {
                        Some(w) => w,
                        None => {
                            let w = if pa.check(0, &data[..8.min(data.len())]).is_none() { 0 } else { 1 };
                            which[i] = Some(w);
                            w
                        }
                    };
                    let p = if w == 0 { &pa } else { &pb };
                    if let Some(bad) = p.check(off[i], data) {
                        return Err(format!("socket {i}: mismatch at stream offset {bad}"));
                    }
                    off[i] += u64::from(r.len);
                    if r.flags & zcrx::uapi::ZCRX_RS_REC_COPY == 0 {
                        zc += u64::from(r.len);
                        devlog::note(data)?;
                    }
                }
                z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
            }
        }
        Ok((off, zc))
    });
    let t1 = sender(addr_a(true, 7005), bytes, pats[0].clone(), 0);
    let t2 = sender(addr_a(true, 7005), bytes, pats[1].clone(), 0);
    // A failed sender leaves the receiver waiting in accept(): the test
    // fails without joining it (it may go on noting records until the
    // VM ends; a DMA log of a later test would then fail too).
    tryo!(join(t1));
    tryo!(join(t2));
    let (off, zc) = tryo!(join(rx));
    env.diag(&format!("two streams of {} each byte-exact; {zc} of {} B zero-copy", mib(bytes), 2 * bytes));
    if off != [bytes, bytes] {
        return Fail(format!("received {off:?}"));
    }
    // Both sockets on the bound queue, header split on: nothing copied.
    if zc != 2 * bytes {
        return Fail(format!("{} of {} bytes copied: both streams must be all zero-copy", 2 * bytes - zc, 2 * bytes));
    }
    env.diag(&tryo!(log.check(0, zc)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A blocking receive call waits for SO_RCVLOWAT bytes, like recv(): with
/// a 256 KiB mark every call but the last (cut short by the end of the
/// stream) hands out at least that much, byte-exact. The sender pauses
/// after 100 KiB, so a first call that did not wait would come back short.
fn rcvlowat_honoured(env: &Env) -> Outcome {
    const LOWAT: u64 = 256 << 10;
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    // Not a multiple of the mark: the last call returns a short tail.
    let bytes = env.bytes(8 << 20) + 1000;
    let pat = Arc::new(Pattern::new(31));
    let p2 = pat.clone();
    let tid_rx = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let tid_tx = tid_rx.clone();
    let rx = with_receiver(n.a_idx, 0, 16 << 20, 7006, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        zcrx::sys::set_rcvlowat(&s, LOWAT as u32).map_err(|e| format!("setsockopt(SO_RCVLOWAT): {e}"))?;
        // The sender goes on once this thread sleeps in RECV with the
        // first 100 KiB in the socket.
        tid_rx.store(crate::common::gettid(), std::sync::atomic::Ordering::Release);
        // Room for far more than the mark: only the mark decides.
        let mut recs = vec![Rec::default(); 4096];
        let (mut total, mut calls, mut short) = (0u64, 0u64, Vec::new());
        loop {
            let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("recv after {total} bytes: {e}"))?;
            if got.bytes == 0 {
                break;
            }
            calls += 1;
            for r in &recs[..got.records] {
                if let Some(bad) = p2.check(total, z.data(r)) {
                    return Err(format!("payload mismatch at stream offset {bad}"));
                }
                total += u64::from(r.len);
            }
            if got.bytes < LOWAT {
                short.push((total, got.bytes));
            }
            z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        }
        Ok((total, calls, short))
    });
    let to = addr_a(true, 7006);
    let tx = net::in_netns(net::NS_B, move || {
        let _ = zcrx::sys::pin_to_cpu(0);
        let mut s = net::connect(to, Duration::from_secs(60))?;
        let first = 100 << 10;
        s.write_all(pat.slice(0, first)).map_err(|e| format!("send: {e}"))?;
        // All 100 KiB in the receiver's socket, and the receiver asleep in
        // RECV (a call that ignored the mark would have returned them).
        net::wait_acked(&s, Duration::from_secs(60))?;
        crate::common::wait_published_sleeping_in(&tid_tx, libc::SYS_ioctl, Duration::from_secs(60))?;
        let mut off = first as u64;
        while off < bytes {
            let n = ((bytes - off) as usize).min(256 << 10);
            s.write_all(pat.slice(off, n)).map_err(|e| format!("send at {off}: {e}"))?;
            off += n as u64;
        }
        Ok(off)
    });
    let sent = join(tx);
    let (total, calls, short) = tryo!(join(rx));
    tryo!(sent);
    env.diag(&format!("{} in {calls} calls with SO_RCVLOWAT {} KiB; short calls {short:?}", mib(total), LOWAT >> 10));
    if total != bytes {
        return Fail(format!("received {total} of {bytes} bytes"));
    }
    // Only the call that ended at the end of the stream may be short.
    if short.iter().any(|&(end, _)| end != bytes) {
        return Fail(format!("calls returned less than SO_RCVLOWAT before the end: (end offset, bytes) {short:?}"));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// `ZCRX_RS_RECV_MERGE`: a GRO packet's consecutive buffers come as one
/// record, which goes back as one range entry; every byte is checked, and
/// once UNBIND has read the whole ring the user holds no buffer and no
/// entry was refused.
fn merged_records_stream(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let info = tryo!(crate::common::info());
    if info.features & u64::from(ZCRX_RS_FEATURE_MERGE) == 0 {
        return Fail("the module does not say ZCRX_RS_FEATURE_MERGE".into());
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    // Each segment's payload fills one 4 KiB buffer (IPv6 + TCP with
    // timestamps: 72 bytes of headers), and GRO puts consecutive segments
    // into one skb: consecutive buffers, as the bench runs it.
    tryo!(n.mtu(4096 + 72));
    let bytes = env.bytes(64 << 20);
    let port = 7011;
    let pat = Arc::new(Pattern::new(11));
    let p2 = pat.clone();
    let log = tryo!(device_log(env, bytes));
    let before = tryo!(n.stats(1, 0));
    let t0 = Instant::now();
    let rx = with_receiver(n.a_idx, 0, 16 << 20, port, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(15))).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
        let rx = receive_flags(z, &s, &p2, 0, None, ZCRX_RS_RECV_MERGE)?;
        // UNBIND takes what the ring still holds: then every range has
        // been read, and the user holds nothing if each gave back exactly
        // the references its record held.
        z.unbind().map_err(|e| format!("unbind: {e}"))?;
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        Ok((rx, st))
    });
    let sent = join(sender(addr_a(true, port), bytes, pat, 0));
    let (rx, st) = tryo!(join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err())));
    let sent = tryo!(sent.map_err(|e| format!("sender: {e}")));
    let d = delta(before, tryo!(n.stats(1, 0)));
    if sent != bytes || rx.bytes != bytes {
        return Fail(format!("sent {sent}, received {} of {bytes} bytes", rx.bytes));
    }
    env.diag(&format!(
        "{}; {} zero-copy records for {} buffers ({} spanning several, {:.1} buffers per record)",
        report(&rx, &st, d, t0.elapsed().as_secs_f64()),
        rx.records - st.copy_records,
        rx.zc_bufs,
        rx.merged,
        rx.zc_bufs as f64 / (rx.records - st.copy_records).max(1) as f64
    ));
    tryo!(check_zc("merged stream", &rx, &st, d));
    tryo!(device_check(env, log, &rx));
    // Merging happened: fewer records than buffers.
    if rx.merged == 0 || rx.records >= rx.zc_bufs {
        return Fail(format!("{} records for {} buffers: nothing merged", rx.records, rx.zc_bufs));
    }
    if st.refill_bad != 0 || st.user_held != 0 {
        return Fail(format!("after UNBIND: {} refill entries refused, {} buffers still held by the user", st.refill_bad, st.user_held));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Without any provider the pair behaves as before the patches: a plain
/// stream arrives byte-exact and netdevsim DMAs nothing.
fn no_provider_stream_unchanged(_env: &Env) -> Outcome {
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(crate::teardown::plain_stream_ok(&n, 7010));
    Pass
}

/// The kernel's own io_uring zcrx selftest program, unmodified, on the
/// patched netdevsim: each run sends 2 MiB and the receiver checks every
/// byte; netdevsim's counters must show the payload DMA'd into io_uring's
/// buffers, not delivered through the copy fallback.
fn iouring_zcrx_in_tree(env: &Env) -> Outcome {
    let exe = tryo!(crate::common::iou_zcrx_exe());
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    const RUNS: u64 = 4;
    // iou-zcrx gives the whole transfer 5 s from listen() (its tstop) and
    // the binary stays unmodified: start the client the moment the server
    // listens, and size the transfer (its -z) so that even a debug kernel
    // on a slow TCG host (~1 MiB/s, 2x slower machines) meets the deadline
    // with room to spare: 1 MiB on the fast kernel, 256 KiB on the debug
    // one. The binary also takes a recvzc() error as fatal, and io_uring
    // ends a multishot recvzc with -ENOSPC when its completion queue (1024
    // entries: 512 SQ entries) is full, one completion per received frag;
    // a receiver that falls behind by 1024 segments (~1.4 MiB) fails with
    // "recvzc(): -28" (one fast-kernel run in a few dozen did). 1 MiB in
    // 12840-byte writes is at most ~830 segments: the whole transfer fits
    // the queue, however the receiver is scheduled.
    let per_run: u64 = if env.scale_down > 1 { 256 << 10 } else { 1 << 20 };
    env.diag(&format!("iou-zcrx has a 5 s deadline from listen(): the client starts when the server listens, {} per run", mib(per_run)));
    let before = tryo!(n.stats(1, 0));
    let mut slowest = Duration::ZERO;
    for run in 0..RUNS {
        let port = 7020 + run as u16;
        let srv = std::process::Command::new("ip")
            .args(["netns", "exec", net::NS_A, &exe, "-s", "-p", &port.to_string(), "-i", &n.a, "-q", "0"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let mut srv = tryo!(srv.map_err(|e| format!("spawn server: {e}")));
        // The server registers its zcrx instance (a queue restart), then
        // listens: wait for the listening socket, not a fixed time.
        let t0 = std::time::Instant::now();
        loop {
            if !matches!(srv.try_wait(), Ok(None)) {
                break;
            }
            if tryo!(listening_in(net::NS_A, port)) {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = srv.kill();
                return Fail(format!("run {run}: the server did not listen within 120 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let listened = std::time::Instant::now();
        // Spawned from a thread in the sender's namespace (the child
        // inherits it): no `ip netns exec` start-up inside the deadline.
        let (exe2, port_s, size_s) = (exe.clone(), port.to_string(), per_run.to_string());
        let cli = join(net::in_netns(net::NS_B, move || {
            std::process::Command::new(&exe2)
                .args(["-c", "-h", "2001:db8::1", "-p", &port_s, "-l", "12840", "-z", &size_s])
                .output()
                .map_err(|e| e.to_string())
        }));
        let cli = tryo!(cli.map_err(|e| format!("client: {e}")));
        // A server whose client never got through waits in io_uring for
        // good (its own time limit is checked between completions only).
        if !cli.status.success() {
            let _ = srv.kill();
        }
        let out = tryo!(srv.wait_with_output().map_err(|e| format!("server: {e}")));
        slowest = slowest.max(listened.elapsed());
        if !out.status.success() || !cli.status.success() {
            return Fail(format!(
                "run {run}: server {} ({}), client {} ({})",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                cli.status,
                String::from_utf8_lossy(&cli.stderr).trim()
            ));
        }
    }
    let d = delta(before, tryo!(n.stats(1, 0)));
    env.diag(&format!(
        "tree's iou-zcrx: {RUNS} runs of {} byte-exact, the slowest {:.1} s from listen to the end (its limit: 5 s); \
         netdevsim DMA'd {} into io_uring buffers in {} packets, {} packets unsplit",
        mib(per_run),
        slowest.as_secs_f64(),
        mib(d.dma_bytes),
        d.dma_packets,
        d.fallback_packets
    ));
    if d.dma_bytes < RUNS * per_run || d.fallback_packets != 0 {
        return Fail(format!("expected at least {} bytes DMA'd and no fallback", RUNS * per_run));
    }
    Pass
}

/// Whether a TCP socket listens on `port` in network namespace `ns`
/// (`/proc/thread-self/net/tcp6` and `tcp`, state 0A).
fn listening_in(ns: &'static str, port: u16) -> Result<bool, String> {
    join(net::in_netns(ns, move || {
        let want = format!(":{port:04X} ");
        for f in ["/proc/thread-self/net/tcp6", "/proc/thread-self/net/tcp"] {
            let t = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
            for l in t.lines().skip(1) {
                let cols: Vec<&str> = l.split_whitespace().collect();
                if cols.len() > 3 && format!("{} ", cols[1]).contains(&want) && cols[3] == "0A" {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }))
}
