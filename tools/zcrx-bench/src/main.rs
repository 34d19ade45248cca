// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-bench: one TCP flow, received four ways, measured the same way.
//!
//!   receiver: zcrx-bench -s --mode copy|trunc|iouring-zcrx|zcrx-rs|zcrx-rs-copy --port P
//!                        [--dev IFNAME --queue N [--queues Q]] [--buf-size N] [--area MIB]
//!                        [--cpu C] [-4|-6] [--json]
//!   sender:   zcrx-bench -c HOST --port P (-n BYTES | -t SECONDS) [--cpu C]
//!   summary:  zcrx-bench --report RESULTS.jsonl
//!
//! The receiver pins itself to one CPU and counts, from accept to end of
//! stream, the wall time and the receive path's CPU time on that CPU: its
//! own thread (user + system, which with tick-based accounting includes the
//! softirqs that ran on top of it) plus that CPU's ksoftirqd. Both come from
//! the scheduler's runtime (getrusage, /proc/PID/stat), which is exact.
//! For the report's breakdown it also reads, over the same window, the
//! CPU-time clocks of the NAPI threads (those of `--dev` and the others)
//! and of the sender (the one other zcrx-bench process; the sender shuts
//! its connections down after the last byte and waits, up to a minute, for
//! the receiver to close them, so that its clock can still be read).
//! The per-CPU tick counts of /proc/stat are reported too (`stat_cpu_secs`)
//! but not used: under TCG the tick lands in idle far more often than its
//! share (a run with 0.106 s of receiver runtime showed 0.02 s there).
//! Every mode except `trunc` (which never sees the payload) checks 64 bytes
//! per MiB of the stream against the pattern: the same cost for all. The
//! samples are 1 MiB + 4160 bytes apart, so over a run they visit every
//! 64-byte slot of a buffer (4 KiB or larger), not only its first bytes;
//! a wrong byte ends the receiver with exit code 1.
//!
//! `--buf-size N` (the zero-copy modes): the area is registered in buffers
//! of N bytes (a power of two from the page size; zcrx-rs up to 2 MiB, the
//! queue's driver decides what it takes: netdevsim 4-64 KiB). Larger than a
//! page, the area is hugetlbfs memory (a NIC writes a buffer as one DMA
//! range): reserve huge pages first (`/proc/sys/vm/nr_hugepages`). For
//! io_uring zcrx it is `rx_buf_len`. The JSON line records `buf_size`
//! (what the kernel took; 0 for copy and trunc).

mod chart;
mod client;
mod clocks;
mod multi;
mod opts;
mod report;

use iou_zcrx as uring;

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::exit;
use std::time::{Duration, Instant};

use zcrx::uapi::{ZCRX_RS_FEATURE_MERGE, ZCRX_RS_RECV_MERGE, ZCRX_RS_REC_COPY};
use zcrx::{Pattern, Rec, Zcrx};

use client::client;
use clocks::*;
use opts::{parse, Mode, Opts};

const SEED: u64 = 0x5eed;
/// Distance of the sampled checks: 64 bytes per MiB, at an offset that
/// moves by 4160 (65 x 64) bytes from one sample to the next, so the samples
/// go through all 64-byte slots of a page and of a 32 KiB buffer instead of
/// always landing at a buffer's start.
const CHECK_EVERY: u64 = (1 << 20) + 4160;
const CHECK_LEN: u64 = 64;
fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("zcrx-bench: {what}: {e}");
    exit(1);
}

/// Checks the sampled bytes of the stream: `CHECK_LEN` bytes from every
/// multiple of `CHECK_EVERY`, also where a sample spans two records.
struct Sampler {
    pat: Pattern,
    /// Stream offset of the sample being checked.
    next: u64,
    checked: u64,
}

impl Sampler {
    fn new(seed: u64) -> Self {
        Sampler { pat: Pattern::new(seed), next: 0, checked: 0 }
    }

    /// `data`: the stream's bytes from offset `off` (in order, no gaps).
    /// The compiler decides about inlining: forced inline, the io_uring
    /// loop needed 21 instructions more per completion (--split).
    fn check(&mut self, off: u64, data: &[u8]) {
        let end = off + data.len() as u64;
        while self.next < end {
            let (from, to) = (self.next.max(off), (self.next + CHECK_LEN).min(end));
            let slice = &data[(from - off) as usize..(to - off) as usize];
            if let Some(bad) = self.pat.check(from, slice) {
                die("verify", format!("payload mismatch at stream offset {bad}"));
            }
            self.checked += to - from;
            if self.next + CHECK_LEN > end {
                break; // the rest of this sample is in the next record
            }
            self.next += CHECK_EVERY;
        }
    }
}

fn ifindex(dev: &Option<String>) -> u32 {
    let Some(d) = dev else { die("--dev", "zero-copy modes need --dev and --queue") };
    zcrx::sys::ifindex(d).unwrap_or_else(|e| die(&format!("no interface {d}"), e))
}

/// The NAPI id of each bound queue, in order (empty with one queue: every
/// connection is on it).
fn napi_ids(o: &Opts) -> Vec<u32> {
    if o.queues < 2 || o.mode != Mode::IouringZcrx {
        return Vec::new();
    }
    let idx = ifindex(&o.dev);
    (o.queue..o.queue + o.queues).map(|q| zcrx::netdev::rx_queue_napi_id(idx, q).unwrap_or_else(|e| die("netdev queue-get", e))).collect()
}

fn server(o: &Opts) {
    let cpu = o.cpu.unwrap_or(1);
    zcrx::sys::pin_to_cpu(cpu).unwrap_or_else(|e| die("sched_setaffinity", e));
    let mut zc = None;
    let mut ring = None;
    let area = o.area_mib << 20;
    let page = zcrx::dev::page_size();
    let bs = if o.buf_size == 0 { page } else { o.buf_size };
    // Buffers larger than a page must each be one DMA range: hugetlbfs.
    let huge = bs > page;
    let what = |call: &str| {
        let pages = area.div_ceil(zcrx::dev::huge_page_size());
        if huge {
            format!("{call} ({area} bytes in {bs}-byte buffers, hugetlbfs: are {pages} huge pages free in /proc/sys/vm/nr_hugepages?)")
        } else {
            format!("{call} ({area} bytes in {bs}-byte buffers)")
        }
    };
    // The size the kernel took (io_uring says it back); 0: no area.
    let mut buf_size = 0;
    // RECV flags of the zcrx-rs modes.
    let mut zflags = 0;
    match o.mode {
        Mode::ZcrxRs | Mode::ZcrxRsNoMerge | Mode::ZcrxRsCopy => {
            let mut z = Zcrx::open().unwrap_or_else(|e| die("open /dev/zcrx", e));
            let reg = if bs == page { 0 } else { bs };
            z.register_area_with(area, reg, huge).unwrap_or_else(|e| die(&what("register area"), e));
            z.bind(ifindex(&o.dev), o.queue, 0).unwrap_or_else(|e| die(&what("bind"), e));
            for q in o.queue + 1..o.queue + o.queues {
                z.add_queue(ifindex(&o.dev), q).unwrap_or_else(|e| die(&format!("add rx queue {q}"), e));
            }
            if o.mode == Mode::ZcrxRsCopy {
                z.unbind().unwrap_or_else(|e| die("unbind", e));
            }
            buf_size = z.buf_size();
            let merges = z.info().is_ok_and(|i| i.features & u64::from(ZCRX_RS_FEATURE_MERGE) != 0);
            if o.mode == Mode::ZcrxRs && merges {
                zflags = ZCRX_RS_RECV_MERGE;
            }
            zc = Some(z);
        }
        Mode::IouringZcrx => {
            let bufs = (area / bs) as u32;
            let rx_buf_len = if bs == page { 0 } else { bs as u32 };
            let queues: Vec<u32> = (o.queue..o.queue + o.queues).collect();
            let r = uring::ZcrxRing::new(ifindex(&o.dev), &queues, area, bufs, rx_buf_len, huge)
                .unwrap_or_else(|e| die(&what("io_uring zcrx"), e));
            buf_size = r.buf_size();
            ring = Some(r);
        }
        _ => {}
    }
    let any: SocketAddr = if o.v6 { (Ipv6Addr::UNSPECIFIED, o.port).into() } else { (Ipv4Addr::UNSPECIFIED, o.port).into() };
    let l = TcpListener::bind(any).unwrap_or_else(|e| die("listen", e));
    // Many flows share one area (per queue for io_uring zcrx): each
    // socket gets a receive buffer of an eighth of the area's share per
    // flow (the kernel doubles it), so that all of them together hold at
    // most a quarter of the area and GRO'd skbs have room beyond that (see
    // "Sizing the area" in Documentation/zcrx-rs.rst: with more, TCP can
    // stall for good when the pool runs dry). SO_RCVLOWAT stays below it.
    let rcvbuf = (o.flows > 1).then(|| ((o.area_mib << 20) / (8 * o.flows)).max(64 << 10));
    let rcvlowat = match rcvbuf {
        Some(b) => o.rcvlowat.min(b as u32 / 2),
        None => o.rcvlowat,
    };
    if let Some(b) = rcvbuf {
        zcrx::sys::set_rcvbuf(&l, b as u32).unwrap_or_else(|e| die("setsockopt(SO_RCVBUF)", e));
    }
    if rcvlowat > 0 {
        // On the listener: the connection inherits it from its first byte.
        zcrx::sys::set_rcvlowat(&l, rcvlowat).unwrap_or_else(|e| die("setsockopt(SO_RCVLOWAT)", e));
    }
    let socks: Vec<TcpStream> = (0..o.flows)
        .map(|_| {
            let (s, _) = l.accept().unwrap_or_else(|e| die("accept", e));
            if rcvlowat > 0 {
                // Again on the connection: one the sender completed between
                // listen() and the setsockopt above was cloned without it.
                zcrx::sys::set_rcvlowat(&s, rcvlowat).unwrap_or_else(|e| die("setsockopt(SO_RCVLOWAT)", e));
            }
            s
        })
        .collect();
    let mut smp = Sampler::new(SEED);
    SPLIT.store(o.split, std::sync::atomic::Ordering::Relaxed);
    let split_cost = if o.split { split_overhead() } else { (0.0, 0.0) };
    // Set-up that reads /proc or netlink happens before the receiver's
    // own clock starts (its thread's CPU time, read last), so that no mode
    // pays it in the measured window.
    let napi = if o.flows > 1 || o.queues > 1 { napi_ids(o) } else { Vec::new() };
    let sender = sender_clock();
    let s0 = sender.and_then(clock_secs);
    let ((c0, si0), k0, n0) = (cpu_stat(cpu), ksoftirqd_secs(cpu), napi_secs(o.dev.as_deref()));
    if o.mark {
        insn_mark();
    }
    let (r0, t0) = (thread_cpu(), Instant::now());
    // Receive calls (read/recv, RECV ioctls, completion batches): bytes per
    // call says how much each wake-up found.
    let (mut total, mut copied, mut calls) = (0u64, 0u64, 0u64);
    // Records (zcrx-rs) or data completions (io_uring zcrx) handled.
    let mut records = 0u64;
    let mut s: &TcpStream = &socks[0];
    // Several queues: the many-flow loops, which know which queue a flow is on.
    let multi = o.flows > 1 || o.queues > 1;
    if multi {
        let m = multi::receive(o.mode, &socks, zc.as_mut(), ring.as_mut(), &napi, zflags);
        (total, copied, calls, records, smp.checked) = (m.total, m.copied, m.calls, m.records, m.checked);
    }
    match o.mode {
        _ if multi => {}
        Mode::Copy => {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                calls += 1;
                let n = in_call(|| s.read(&mut buf)).unwrap_or_else(|e| die("read", e));
                if n == 0 {
                    break;
                }
                smp.check(total, &buf[..n]);
                total += n as u64;
            }
            copied = total;
        }
        Mode::Trunc => {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                calls += 1;
                // SAFETY: recv into our buffer; MSG_TRUNC makes TCP drop the data.
                let n = in_call(|| unsafe { libc::recv(s.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) });
                if n < 0 {
                    die("recv(MSG_TRUNC)", io::Error::last_os_error());
                }
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
        }
        Mode::ZcrxRs | Mode::ZcrxRsNoMerge | Mode::ZcrxRsCopy => {
            let z = zc.as_mut().expect("set up above");
            let mut recs = vec![Rec::default(); 1024];
            loop {
                calls += 1;
                let got = match in_call(|| z.recv(s.as_raw_fd(), &mut recs, zflags)) {
                    Ok(g) => g,
                    Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => continue,
                    Err(e) => die("zcrx recv", e),
                };
                if got.bytes == 0 {
                    break;
                }
                records += got.records as u64;
                for r in &recs[..got.records] {
                    smp.check(total, z.data(r));
                    total += u64::from(r.len);
                    if r.flags & ZCRX_RS_REC_COPY != 0 {
                        copied += u64::from(r.len);
                    }
                }
                z.refill(&recs[..got.records]).unwrap_or_else(|e| die("refill", e));
            }
        }
        Mode::IouringZcrx => {
            let r = ring.as_mut().expect("set up above");
            r.recv_multishot(s.as_raw_fd()).unwrap_or_else(|e| die("RECV_ZC", e));
            let mut eof = false;
            while !eof {
                let mut rearm = false;
                let mut failed = None;
                calls += 1;
                r.complete_refill(|c, data| {
                    match c.err {
                        // The CQ ring filled up: the request ended; re-arm.
                        Some(libc::ENOSPC) => {
                            rearm = true;
                            return;
                        }
                        Some(e) => {
                            failed = Some(e);
                            return;
                        }
                        None => {}
                    }
                    if c.len == 0 {
                        eof = true;
                        return;
                    }
                    smp.check(total, data);
                    total += c.len as u64;
                    records += 1;
                    rearm |= !c.more;
                })
                .unwrap_or_else(|e| die("io_uring_enter", e));
                if let Some(e) = failed {
                    die("RECV_ZC", io::Error::from_raw_os_error(e));
                }
                if rearm && !eof {
                    r.recv_multishot(s.as_raw_fd()).unwrap_or_else(|e| die("RECV_ZC", e));
                }
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let rus = thread_cpu() - r0;
    if o.mark {
        insn_mark();
    }
    let n1 = napi_secs(o.dev.as_deref());
    let sender_secs = sender.and_then(clock_secs).zip(s0).map(|(a, b)| a - b);
    let (napi_dev, napi_other) = (n1.0 - n0.0, n1.1 - n0.1);
    let ksi = ksoftirqd_secs(cpu) - k0;
    let (c1, si1) = cpu_stat(cpu);
    let stat_cpu = c1 - c0;
    let cpu_secs = rus + ksi;
    let gib = total as f64 / (1u64 << 30) as f64;
    // Seconds and rates to 4 decimals: the runs' spread is far wider.
    let r4 = |x: f64| serde_json::json!((x * 1e4).round() / 1e4);
    let mut run = serde_json::json!({
        "mode": o.mode.name(),
        "bytes": total,
        "secs": r4(secs),
        "gbps": r4(total as f64 * 8.0 / secs / 1e9),
        "cpu_secs": r4(cpu_secs),
        "cpu_per_gib": r4(cpu_secs / gib.max(1e-12)),
        "thread_secs": r4(rus),
        "ksoftirqd_secs": r4(ksi),
        "stat_cpu_secs": r4(stat_cpu),
        "stat_softirq_secs": r4(si1 - si0),
        "copied_bytes": copied,
        "calls": calls,
        "records": records,
        "verified_bytes": smp.checked,
        "napi_dev_secs": r4(napi_dev),
        "napi_other_secs": r4(napi_other),
        "rcvlowat": rcvlowat,
        "rcvbuf": rcvbuf.unwrap_or(0),
        "flows": o.flows,
        "buf_size": buf_size,
        "area_bytes": if buf_size > 0 { area } else { 0 },
    });
    // The sender waits for us to close its connections (see `client`).
    if let Some(t) = sender_secs {
        run["sender_cpu_secs"] = r4(t);
    }
    if o.split {
        // The clock reads' own cost (measured before the run) taken out:
        // what they add inside the calls from in_calls_secs, and all of it
        // reported as split_overhead_secs.
        let ns = IN_CALLS_NS.load(std::sync::atomic::Ordering::Relaxed) as f64;
        let n = IN_CALLS_N.load(std::sync::atomic::Ordering::Relaxed) as f64;
        run["in_calls_secs"] = r4((ns - n * split_cost.0).max(0.0) / 1e9);
        run["split_calls"] = serde_json::json!(n as u64);
        run["split_overhead_secs"] = r4(n * split_cost.1 / 1e9);
    }
    let line = run.to_string();
    if o.json {
        println!("{line}");
    } else {
        eprintln!(
            "zcrx-bench {}{}: {:.1} MiB in {secs:.2} s = {:.3} Gbit/s; receiver CPU {cpu_secs:.2} s ({:.2} s/GiB: thread {rus:.2} s, ksoftirqd {ksi:.2} s); {} bytes copied; verified {} bytes",
            o.mode.name(),
            if buf_size > 0 { format!(" ({buf_size}-byte buffers)") } else { String::new() },
            total as f64 / (1 << 20) as f64,
            total as f64 * 8.0 / secs / 1e9,
            cpu_secs / gib.max(1e-12),
            copied,
            smp.checked
        );
    }
    drop(socks);
}

/// `--mark`: `xchg %bx,%bx` (66 87 db), a no-op that the bench's QEMU plugin
/// (scripts/qemu-insn-plugin.c) takes as the start or the end of a window.
fn insn_mark() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: exchanges a register with itself: changes no register, flag
    // or memory.
    unsafe {
        std::arch::asm!(".byte 0x66, 0x87, 0xdb", options(nomem, nostack, preserves_flags))
    };
}

fn main() {
    let o = parse();
    // io_uring's waits count as time inside receive calls (--split).
    uring::set_enter_hook(|f| in_call(f));
    if o.server {
        server(&o)
    } else {
        client(&o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample is checked whole, also across record boundaries, and
    /// the samples walk through a 32 KiB buffer's 64-byte slots.
    #[test]
    fn samples_span_records_and_walk_buffers() {
        let pat = Pattern::new(SEED);
        let len = 8 * CHECK_EVERY + 100;
        let mut data = vec![0u8; len as usize];
        pat.fill(0, &mut data);
        let mut s = Sampler::new(SEED);
        let mut off = 0usize;
        // Records of 4096 and 4100 bytes in turn: some samples straddle two.
        for (i, step) in [4096usize, 4100].iter().cycle().enumerate() {
            let end = (off + step).min(data.len());
            s.check(off as u64, &data[off..end]);
            off = end;
            if off == data.len() {
                assert!(i > 0);
                break;
            }
        }
        assert_eq!(s.checked, 9 * CHECK_LEN);
        let slots: std::collections::BTreeSet<u64> = (0..512).map(|k| (k * CHECK_EVERY) % 32768 / 64).collect();
        assert_eq!(slots.len(), 512);
    }
}
