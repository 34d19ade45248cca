// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Urgent data (`MSG_OOB`) from the peer, as a hostile sender would send
//! it: urgent bytes at random offsets of a stream, some back to back,
//! towards every receiver a provider-bound queue can have — zcrx-rs on the
//! zero-copy path, zcrx-rs on the copy path (with and without
//! `SO_OOBINLINE`) and the kernel tree's io_uring zcrx receiver.
//!
//! Before the kernel fix (`tcp: do not BUG() on an urgent byte in
//! unreadable memory`) the first urgent byte that landed in a provider's
//! buffer panicked the receiving kernel in `tcp_urg()`.
//!
//! What the tests hold the kernel and RECV to (Documentation/zcrx-rs.rst,
//! "Urgent data"):
//! - an urgent byte the NIC wrote into a provider's memory cannot be read
//!   by the kernel, so it stays in the stream as in-line data: every byte
//!   arrives, in order; the mark stays (`SIGURG`, `SIOCATMARK`,
//!   `EPOLLPRI`, RECV stops there), as with `SO_OOBINLINE`, and
//!   `recv(MSG_OOB)` says `EINVAL`;
//! - an urgent byte in readable memory keeps recv()'s semantics: RECV stops
//!   at the mark once it has described anything, `recv(MSG_OOB)` returns
//!   the byte there, and the next RECV steps over it (it is not stream
//!   data) — or, with `SO_OOBINLINE`, describes it as data;
//! - no receiver spins: each one's CPU time is bounded.

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::sys::{at_mark, recv_oob, send_oob, set_oobinline, thread_cpu_time};
use zcrx::uapi::ZCRX_RS_REC_COPY;
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::net::{self, addr_a, join, with_receiver, with_receiver_setup, HdsStats, Nsim};
use crate::{Env, TestFn};

mod mark;

use mark::{at_the_mark, urgent_mark_loop_zero_copy};

pub const TESTS: &[(&str, TestFn)] = &[
    ("urgent_zero_copy_inline", urgent_zero_copy_inline),
    ("urgent_mark_loop_zero_copy", urgent_mark_loop_zero_copy),
    ("urgent_copy_path", urgent_copy_path),
    ("urgent_copy_path_oobinline", urgent_copy_path_oobinline),
    ("urgent_iouring_zcrx", urgent_iouring_zcrx),
];

/// What a receiver may spend on CPU for one test stream (at most 16 MiB,
/// received in a few hundred ms of CPU on either kernel): generous, so
/// that only a receiver spinning at an urgent mark goes over it.
const CPU_BOUND: Duration = Duration::from_secs(20);

/// A byte stream the sender can produce.
#[derive(Clone)]
enum Source {
    /// [`Pattern`]: checked by our receivers.
    Pat(Arc<Pattern>),
    /// `'a' + offset % 26`: what the tree's iou-zcrx checks against.
    Alpha,
}

impl Source {
    fn byte(&self, off: u64) -> u8 {
        match self {
            Source::Pat(p) => p.slice(off, 1)[0],
            Source::Alpha => b'a' + (off % 26) as u8,
        }
    }

    fn fill(&self, off: u64, buf: &mut [u8]) {
        match self {
            Source::Pat(p) => p.fill(off, buf),
            Source::Alpha => buf.iter_mut().enumerate().for_each(|(i, b)| *b = self.byte(off + i as u64)),
        }
    }
}

/// Which bytes of a stream of `bytes` the sender sends with `MSG_OOB`.
struct Plan {
    bytes: u64,
    /// Sorted stream offsets.
    oob: Vec<u64>,
}

fn splitmix(z: &mut u64) -> u64 {
    *z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut x = *z;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl Plan {
    /// Six urgent bytes at random offsets, a pair and a triple back to
    /// back, none in the first or last 4 KiB. Each run of urgent bytes is
    /// chosen so that its bytes and the byte after it differ pairwise
    /// (also one apart): a receiver then tells without doubt whether an
    /// urgent byte stayed in-line or was taken out.
    fn new(bytes: u64, seed: u64, src: &Source) -> Plan {
        let mut z = seed;
        let mut oob: Vec<u64> = Vec::new();
        for run in [1, 1, 1, 1, 1, 1, 2, 3] {
            loop {
                let o = 4096 + splitmix(&mut z) % (bytes - 8192);
                let clash = oob.iter().any(|&x| x + 8 > o && o + 8 > x);
                let w: Vec<u8> = (0..run + 2).map(|i| src.byte(o + i)).collect();
                let distinct = (0..w.len()).all(|i| (i + 1..w.len().min(i + 3)).all(|j| w[i] != w[j]));
                if !clash && distinct {
                    oob.extend(o..o + run);
                    break;
                }
            }
        }
        oob.sort_unstable();
        Plan { bytes, oob }
    }
}

/// Sends `plan.bytes` of `src` to `to` from `nsb`: 64 KiB writes, each
/// urgent byte on its own with `send(MSG_OOB)`. Returns the bytes sent.
fn oob_sender(to: std::net::SocketAddr, plan: Arc<Plan>, src: Source, cpu: usize) -> JoinHandle<Result<u64, String>> {
    net::in_netns(net::NS_B, move || {
        let _ = zcrx::sys::pin_to_cpu(cpu);
        // The receiver may take a while to listen (iou-zcrx registers its
        // queue first, a queue restart): retry for up to a minute.
        let t0 = Instant::now();
        let mut s = loop {
            match std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)) {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(60) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("connect {to}: {e}")),
            }
        };
        s.set_write_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0u64;
        for &o in plan.oob.iter().chain(std::iter::once(&plan.bytes)) {
            while off < o {
                let n = ((o - off) as usize).min(buf.len());
                src.fill(off, &mut buf[..n]);
                std::io::Write::write_all(&mut s, &buf[..n]).map_err(|e| format!("send at {off}: {e}"))?;
                off += n as u64;
            }
            if o < plan.bytes {
                send_oob(&s, src.byte(o)).map_err(|e| format!("send(MSG_OOB) at {o}: {e}"))?;
                off += 1;
            }
        }
        Ok(off)
    })
}

/// Checks a received stream against what was sent: every byte in order,
/// except urgent bytes, each of which is either in-line or taken out of
/// the stream (and then maybe read with `MSG_OOB`).
struct Expect {
    pat: Arc<Pattern>,
    plan: Arc<Plan>,
    /// Next stream offset expected.
    pos: u64,
    /// Index in `plan.oob` of the next urgent byte not passed yet.
    next: usize,
    /// Urgent bytes that came in-line.
    inline: Vec<u64>,
    /// Urgent bytes missing from the stream.
    removed: Vec<u64>,
    /// Urgent bytes read with `MSG_OOB`.
    oob_read: Vec<u64>,
    /// Bytes received.
    received: u64,
}

impl Expect {
    fn new(pat: Arc<Pattern>, plan: Arc<Plan>) -> Self {
        Expect { pat, plan, pos: 0, next: 0, inline: Vec::new(), removed: Vec::new(), oob_read: Vec::new(), received: 0 }
    }

    fn byte(&self, off: u64) -> u8 {
        self.pat.slice(off, 1)[0]
    }

    fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            let urgent = self.plan.oob.get(self.next).copied().unwrap_or(u64::MAX);
            if self.pos < urgent {
                let n = (data.len() as u64).min(urgent - self.pos) as usize;
                if let Some(bad) = self.pat.check(self.pos, &data[..n]) {
                    return Err(format!(
                        "payload mismatch at stream offset {bad} (received byte {}; urgent bytes in-line {:?}, \
                         taken out {:?})",
                        self.received + (bad - self.pos),
                        self.inline,
                        self.removed
                    ));
                }
                self.pos += n as u64;
                self.received += n as u64;
                data = &data[n..];
            } else {
                if data[0] == self.byte(urgent) {
                    self.inline.push(urgent);
                    self.received += 1;
                    data = &data[1..];
                } else {
                    self.removed.push(urgent);
                }
                self.pos += 1;
                self.next += 1;
            }
        }
        Ok(())
    }

    /// `recv(MSG_OOB)` returned `b` with the reader at the mark: the next
    /// byte of the stream must be an urgent byte of that value, or one
    /// further on in the same run of urgent bytes (when the next one's
    /// pointer arrives while the reader is at a mark, the kernel takes the
    /// older byte out of the stream and moves the mark on, see
    /// `tcp_check_urg()`).
    fn oob(&mut self, b: u8) -> Result<(), String> {
        let mut k = 0;
        while let Some(&o) = self.plan.oob.get(self.next + k) {
            if o != self.pos + k as u64 {
                break;
            }
            if self.byte(o) == b {
                self.oob_read.push(o);
                return Ok(());
            }
            k += 1;
        }
        Err(format!("recv(MSG_OOB) gave {b:#04x} at stream offset {}, which is not an urgent byte of that value", self.pos))
    }

    /// End of stream: urgent bytes at the very end can only have been taken out.
    fn finish(&mut self) -> Result<(), String> {
        while let Some(&o) = self.plan.oob.get(self.next) {
            if o != self.pos {
                break;
            }
            self.removed.push(o);
            self.pos += 1;
            self.next += 1;
        }
        if self.pos != self.plan.bytes {
            return Err(format!("stream ended at offset {} of {}", self.pos, self.plan.bytes));
        }
        if let Some(o) = self.oob_read.iter().find(|o| !self.removed.contains(o)) {
            return Err(format!("urgent byte at {o} was read with MSG_OOB and also in-line"));
        }
        Ok(())
    }
}

/// What an urgent-data receive loop saw.
#[derive(Default)]
struct UrgRx {
    zc_bytes: u64,
    copy_bytes: u64,
    calls: u64,
    /// Calls after which the socket was at the urgent mark.
    at_mark: u64,
    cpu: Duration,
    /// `recv(MSG_OOB)` at the end: the errno (0: it returned a byte).
    final_oob_errno: i32,
}

/// Receives `s` to the end through `z`, checking it with `exp`. After each
/// call, if the socket is at the urgent mark and `read_oob`, reads the
/// urgent byte with `MSG_OOB` (waiting for it with `POLLPRI` while it is
/// announced but not there yet).
fn receive_urgent(z: &mut Zcrx, s: &std::net::TcpStream, exp: &mut Expect, read_oob: bool) -> Result<UrgRx, String> {
    let mut recs = vec![Rec::default(); 128];
    let mut rx = UrgRx::default();
    let cpu0 = thread_cpu_time();
    let t0 = Instant::now();
    loop {
        // Not a performance deadline: a receiver stuck for good.
        if t0.elapsed() > Duration::from_secs(300) {
            return Err(format!("receive stuck after {} bytes", exp.received));
        }
        let got = match z.recv(s.as_raw_fd(), &mut recs, 0) {
            Ok(g) => g,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("recv after {} bytes: {e}", exp.received)),
        };
        rx.calls += 1;
        if got.bytes == 0 {
            break;
        }
        for r in &recs[..got.records] {
            exp.feed(z.data(r))?;
            if r.flags & ZCRX_RS_REC_COPY != 0 {
                rx.copy_bytes += u64::from(r.len);
            } else {
                crate::devlog::note(z.data(r))?;
                rx.zc_bytes += u64::from(r.len);
            }
        }
        z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        if !at_mark(s).map_err(|e| format!("SIOCATMARK: {e}"))? {
            continue;
        }
        rx.at_mark += 1;
        if !read_oob {
            continue;
        }
        loop {
            match recv_oob(s) {
                Ok(b) => {
                    exp.oob(b)?;
                    break;
                }
                // Announced, not arrived: wait while we are at the mark
                // (an unreadable byte never comes out of band: the mark
                // goes when it arrives).
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 100) };
                    if !at_mark(s).map_err(|e| format!("SIOCATMARK: {e}"))? {
                        break;
                    }
                }
                // No urgent data (left in-line, or superseded by a newer mark).
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                Err(e) => return Err(format!("recv(MSG_OOB) at stream offset {}: {e}", exp.pos)),
            }
        }
    }
    rx.cpu = thread_cpu_time() - cpu0;
    rx.final_oob_errno = match recv_oob(s) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    };
    exp.finish()?;
    Ok(rx)
}

/// What [`urgent_stream`] returns: what the stream was expected to be and
/// was, the receiver's counts, netdevsim's counters, the device, and (on
/// the zero-copy path) the device check's line.
type UrgentRun = (Expect, UrgRx, HdsStats, Nsim, Option<String>);

/// One stream with urgent bytes into a zcrx-rs receiver bound to queue 0:
/// `steer` sends the flow to the unbound queue 1 (the copy path). On the
/// zero-copy path, every zero-copy record is matched to netdevsim's writes
/// ([`crate::devlog`]).
fn urgent_stream(env: &Env, steer: bool, oobinline: bool, port: u16, seed: u64) -> Result<UrgentRun, String> {
    ensure_loaded(env)?;
    let n = if steer { Nsim::up_steered(2, Some(1))? } else { Nsim::up(1)? };
    n.hds(true)?;
    let pat = Arc::new(Pattern::new(seed));
    let plan = Arc::new(Plan::new(env.bytes(16 << 20), seed, &Source::Pat(pat.clone())));
    let q = if steer { 1 } else { 0 };
    let before = n.stats(1, q)?;
    let log = if steer { None } else { Some(crate::devlog::DmaLog::start()?) };
    let (p2, plan2) = (pat.clone(), plan.clone());
    // More buffers than the stream has packets (each takes at least one,
    // and urgent mode sends them MSS-sized): the pool cannot run dry, so
    // netdevsim never delivers a packet unsplit, whatever the receiver's pace.
    let area = if steer { 8 << 20 } else { (4 * plan.bytes as usize).max(16 << 20) };
    let setup = move |l: &TcpListener| set_oobinline(l, oobinline).map_err(|e| format!("SO_OOBINLINE: {e}"));
    let rx = with_receiver_setup(n.a_idx, 0, area, port, true, setup, move |z, l| {
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut exp = Expect::new(p2, plan2);
        let rx = receive_urgent(z, &s, &mut exp, !oobinline)?;
        Ok((exp, rx))
    });
    let tx = oob_sender(addr_a(true, port), plan.clone(), Source::Pat(pat), if steer { 1 } else { 0 });
    let sent = join(tx);
    let (exp, rx) = join(rx).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    let sent = sent.map_err(|e| format!("sender: {e}"))?;
    if sent != plan.bytes {
        return Err(format!("sent {sent} of {} bytes", plan.bytes));
    }
    let after = n.stats(1, q)?;
    let d = after.since(&before);
    if rx.cpu > CPU_BOUND {
        return Err(format!("receiver used {:?} of CPU for {} (spinning?)", rx.cpu, mib(plan.bytes)));
    }
    let line = match &log {
        Some(log) => Some(log.check(q, rx.zc_bytes)?),
        None => None,
    };
    Ok((exp, rx, d, n, line))
}

fn describe(exp: &Expect, rx: &UrgRx, d: &HdsStats) -> String {
    format!(
        "{} with {} urgent bytes at {:?}: {} received byte-exact, zero-copy {} copied {}; urgent bytes in-line {}, \
         taken out {} (read with MSG_OOB {}); {} calls, {} at the mark; receiver CPU {:.2} s; \
         netdevsim DMA'd {} in {} pkts, {} unsplit; MSG_OOB at the end: {}",
        mib(exp.plan.bytes),
        exp.plan.oob.len(),
        exp.plan.oob,
        exp.received,
        mib(rx.zc_bytes),
        mib(rx.copy_bytes),
        exp.inline.len(),
        exp.removed.len(),
        exp.oob_read.len(),
        rx.calls,
        rx.at_mark,
        rx.cpu.as_secs_f64(),
        mib(d.dma_bytes),
        d.dma_packets,
        d.fallback_packets,
        zcrx::sys::errno_name(rx.final_oob_errno)
    )
}

/// (a) Zero-copy: the urgent bytes land in the area, unreadable to the
/// kernel; they arrive in-line, every byte in order (at a mark, if the
/// reader stops there, `recv(MSG_OOB)` says `EINVAL`: in-line); none is
/// left once the stream is read.
fn urgent_zero_copy_inline(env: &Env) -> Outcome {
    let (exp, rx, d, n, line) = tryo!(urgent_stream(env, false, false, 7101, 101));
    env.diag(&describe(&exp, &rx, &d));
    env.diag(line.as_deref().unwrap_or("no device check"));
    if rx.zc_bytes == 0 || d.dma_bytes < rx.zc_bytes {
        return Fail(format!("zero-copy {} bytes, netdevsim DMA'd {}: not the zero-copy path", rx.zc_bytes, d.dma_bytes));
    }
    // Every urgent byte must have been in a provider's buffer: no packet
    // unsplit (the area has room for all of them, see urgent_stream).
    if d.fallback_packets != 0 {
        return Fail(format!("netdevsim delivered {} packets unsplit: urgent bytes may have been readable", d.fallback_packets));
    }
    if !exp.removed.is_empty() || exp.inline.len() != exp.plan.oob.len() {
        return Fail(format!("urgent bytes taken out of the stream: {:?}", exp.removed));
    }
    if rx.final_oob_errno != libc::EINVAL {
        return Fail(format!(
            "recv(MSG_OOB) after the stream: {}, expected EINVAL (no urgent data left)",
            zcrx::sys::errno_name(rx.final_oob_errno)
        ));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// (b) Copy path (flow on an unbound queue): recv() semantics, checked
/// twice. First with a stream of urgent bytes at random offsets: what
/// arrives in-line is the stream with urgent bytes taken out, each byte
/// read with MSG_OOB at the mark is an urgent byte of the stream, and the
/// last urgent byte is always taken out (Linux keeps only the newest mark:
/// an older one the sender superseded before the reader got there stays
/// in-line). Whether the reader sees a given mark depends on timing: a
/// call that starts at the mark steps over it, as recv() does. Then
/// exactly, with everything in the socket before the first call (see
/// [`at_the_mark`]).
fn urgent_copy_path(env: &Env) -> Outcome {
    let (exp, rx, d, n, _) = tryo!(urgent_stream(env, true, false, 7102, 102));
    env.diag(&describe(&exp, &rx, &d));
    if rx.zc_bytes != 0 {
        return Fail(format!("{} bytes zero-copy from a flow on the unbound queue", rx.zc_bytes));
    }
    let last = *exp.plan.oob.last().unwrap();
    if !exp.removed.contains(&last) {
        return Fail(format!("the last urgent byte ({last}) was not taken out of the stream"));
    }
    env.diag(&tryo!(at_the_mark(&n, false, false, 7105)));
    env.diag(&tryo!(at_the_mark(&n, false, true, 7107)));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// (b) Copy path with SO_OOBINLINE: urgent bytes are stream data, every
/// byte arrives; RECV still stops at the mark as recv() does.
fn urgent_copy_path_oobinline(env: &Env) -> Outcome {
    let (exp, rx, d, n, _) = tryo!(urgent_stream(env, true, true, 7103, 103));
    env.diag(&describe(&exp, &rx, &d));
    if !exp.removed.is_empty() {
        return Fail(format!("urgent bytes missing with SO_OOBINLINE: {:?}", exp.removed));
    }
    if rx.final_oob_errno != libc::EINVAL {
        return Fail(format!("recv(MSG_OOB) with SO_OOBINLINE: {}, expected EINVAL", zcrx::sys::errno_name(rx.final_oob_errno)));
    }
    env.diag(&tryo!(at_the_mark(&n, true, false, 7106)));
    env.diag(&tryo!(at_the_mark(&n, true, true, 7108)));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// (c) The tree's io_uring zcrx receiver (iou-zcrx -s, unmodified), which
/// checks every byte against its own pattern: the urgent bytes must reach
/// it in-line, and it must end without spinning.
fn urgent_iouring_zcrx(_env: &Env) -> Outcome {
    // iou-zcrx's pattern is 2 MiB, and it gives the whole transfer 5 s from
    // listen() (the sender connects within 50 ms of it): 1 MiB on the fast
    // kernel, 512 KiB on the debug one (~1 MiB/s under TCG, and hosts vary
    // 2x), so the deadline is met with room to spare. It also takes a
    // recvzc() error as fatal, and a full completion queue (1024 entries,
    // one per received frag) ends io_uring's multishot recvzc with -ENOSPC:
    // 1 MiB in 64 KiB writes plus the urgent bytes is under 800 segments,
    // so the whole transfer fits the queue however the receiver is
    // scheduled (see iouring_zcrx_in_tree).
    let send_size: u64 = if _env.scale_down > 1 { 128 * 4096 } else { 256 * 4096 };
    let exe = tryo!(crate::common::iou_zcrx_exe());
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let before = tryo!(n.stats(1, 0));
    let port = 7104u16;
    let srv = std::process::Command::new("ip")
        .args(["netns", "exec", net::NS_A, &exe, "-s", "-p", &port.to_string(), "-i", &n.a, "-q", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut srv = tryo!(srv.map_err(|e| format!("spawn iou-zcrx: {e}")));
    let pid = srv.id() as libc::pid_t;
    let stderr = srv.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut t = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut t);
            t
        })
    });
    let plan = Arc::new(Plan::new(send_size, 104, &Source::Alpha));
    let sent = join(oob_sender(addr_a(true, port), plan.clone(), Source::Alpha, 0));
    // Reap it ourselves for its resource usage (`ip netns exec` execs it).
    // It ends at the end of the stream; if the sender failed it may wait
    // in io_uring for good (its 5 s limit is checked between completions
    // only): kill it then, or after a minute (a stuck receiver).
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it and the status.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let t0 = Instant::now();
    let mut killed = false;
    loop {
        // SAFETY: `pid` is our child, not reaped yet; the pointers are to live locals.
        match unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) } {
            0 => {}
            r if r == pid => break,
            _ => return Fail(format!("wait4(iou-zcrx): {}", std::io::Error::last_os_error())),
        }
        if !killed && (sent.is_err() || t0.elapsed() > Duration::from_secs(60)) {
            // SAFETY: signalling our own child, not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::mem::forget(srv);
    let err = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
    let cpu = Duration::from_micros(
        (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) as u64 * 1_000_000 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) as u64,
    );
    let d = tryo!(n.stats(1, 0));
    let (dma, fb) = (d.dma_bytes - before.dma_bytes, d.fallback_packets - before.fallback_packets);
    let exited_ok = !killed && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    _env.diag(&format!(
        "tree's iou-zcrx, {} with {} urgent bytes at {:?}: exit status {status:#x} ({}), CPU {:.2} s; \
         netdevsim DMA'd {} ({} unsplit packets); sender: {:?}",
        mib(send_size),
        plan.oob.len(),
        plan.oob,
        err.trim(),
        cpu.as_secs_f64(),
        mib(dma),
        fb,
        sent
    ));
    tryo!(sent);
    if !exited_ok {
        return Fail(format!("iou-zcrx failed{}: {}", if killed { " (killed: it did not end)" } else { "" }, err.trim()));
    }
    if dma < send_size || fb != 0 {
        return Fail(format!("netdevsim DMA'd {dma} bytes with {fb} unsplit packets: not all zero-copy"));
    }
    if cpu > CPU_BOUND {
        return Fail(format!("iou-zcrx used {cpu:?} of CPU (spinning?)"));
    }
    Pass
}
