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
mod multi;
mod report;
mod uring;

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::exit;
use std::time::{Duration, Instant};

use zcrx::uapi::{ZCRX_RS_FEATURE_MERGE, ZCRX_RS_RECV_MERGE, ZCRX_RS_REC_COPY};
use zcrx::{Pattern, Rec, Zcrx};

const SEED: u64 = 0x5eed;
/// Distance of the sampled checks: 64 bytes per MiB, at an offset that
/// moves by 4160 (65 x 64) bytes from one sample to the next, so the samples
/// go through all 64-byte slots of a page and of a 32 KiB buffer instead of
/// always landing at a buffer's start.
const CHECK_EVERY: u64 = (1 << 20) + 4160;
const CHECK_LEN: u64 = 64;
/// Most connections one run may have.
const MAX_FLOWS: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Copy,
    Trunc,
    IouringZcrx,
    /// zcrx-rs, records of consecutive buffers merged when the module can
    /// (`ZCRX_RS_RECV_MERGE`, given back as ranges).
    ZcrxRs,
    /// zcrx-rs with one record per buffer (no `ZCRX_RS_RECV_MERGE`).
    ZcrxRsNoMerge,
    /// zcrx-rs bound and unbound again before the flow starts: RECV copies
    /// every byte into the area (the copy fallback, with its per-call
    /// budget and the refill ring drained by RECV itself).
    ZcrxRsCopy,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "copy" => Mode::Copy,
            "trunc" => Mode::Trunc,
            "iouring-zcrx" => Mode::IouringZcrx,
            "zcrx-rs" => Mode::ZcrxRs,
            "zcrx-rs-nomerge" => Mode::ZcrxRsNoMerge,
            "zcrx-rs-copy" => Mode::ZcrxRsCopy,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Trunc => "trunc",
            Mode::IouringZcrx => "iouring-zcrx",
            Mode::ZcrxRs => "zcrx-rs",
            Mode::ZcrxRsNoMerge => "zcrx-rs-nomerge",
            Mode::ZcrxRsCopy => "zcrx-rs-copy",
        }
    }

    /// Modes with an area, and so a buffer size.
    fn has_area(self) -> bool {
        matches!(self, Mode::IouringZcrx | Mode::ZcrxRs | Mode::ZcrxRsNoMerge | Mode::ZcrxRsCopy)
    }
}

struct Opts {
    server: bool,
    host: Option<String>,
    port: u16,
    mode: Mode,
    dev: Option<String>,
    queue: u32,
    /// Rx queues bound from `queue` on (the zero-copy modes).
    queues: u32,
    cpu: Option<usize>,
    v6: bool,
    json: bool,
    /// Measure the receiver's CPU time inside its receive system calls.
    split: bool,
    /// Mark the measured window for an instruction-counting emulator.
    mark: bool,
    bytes: Option<u64>,
    secs: Option<f64>,
    rcvlowat: u32,
    /// Bytes per buffer of the area; 0: the page size.
    buf_size: usize,
    area_mib: usize,
    /// Concurrent connections (sender and receiver).
    flows: usize,
    /// The sender's bytes per write().
    write_size: usize,
    /// Sender: flow i connects from this source port + i (0: any).
    src_port: u16,
}

fn usage() -> ! {
    eprintln!(
        "usage: zcrx-bench -s --mode copy|trunc|iouring-zcrx|zcrx-rs|zcrx-rs-copy --port P [--dev IF --queue N]\n\
         \x20                 [--buf-size N] [--area MIB] [--cpu C] [-4|-6] [--rcvlowat BYTES] [--json]\n\
         \x20      zcrx-bench -c HOST --port P (-n BYTES | -t SECONDS) [--cpu C] [--write-size N]\n\
         \x20      zcrx-bench --report RESULTS.jsonl\n\
         \x20 --buf-size N  zero-copy modes: bytes per buffer (4096, 32768, 32k, ..; default a page);\n\
         \x20               larger than a page: a hugetlbfs area (reserve /proc/sys/vm/nr_hugepages)\n\
         \x20 --area MIB    zero-copy modes: the area (default 64; io_uring zcrx: per queue)\n\
         \x20 --queues Q    zero-copy modes: bind queues N..N+Q-1 (zcrx-rs: one context, one area;\n\
         \x20               io_uring zcrx: one instance per queue); RSS spreads the flows\n\
         \x20 --flows N     both sides: N concurrent connections (1-{MAX_FLOWS}; -n is the total)\n\
         \x20 --write-size N  sender: bytes per write() (default 256k)\n\
         \x20 --src-port P  sender: flow i connects from port P+i (the same 4-tuples, so the same\n\
         \x20               RSS spread, for every mode; the port may be in TIME_WAIT: SO_REUSEADDR)\n\
         \x20 --split      receiver: also measure its CPU time inside receive system calls (in_calls_secs)\n\
         \x20 --mark       receiver: execute `xchg %bx,%bx` where the measured window opens and closes\n\
         \x20              (a no-op that scripts/qemu-insn-plugin.c counts instructions between)"
    );
    exit(2);
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("zcrx-bench: {what}: {e}");
    exit(1);
}

fn parse() -> Opts {
    let mut o = Opts {
        server: false,
        host: None,
        port: 5201,
        mode: Mode::Copy,
        dev: None,
        queue: 0,
        queues: 1,
        cpu: None,
        v6: true,
        json: false,
        split: false,
        mark: false,
        bytes: None,
        secs: None,
        rcvlowat: 0,
        buf_size: 0,
        area_mib: 64,
        flows: 1,
        write_size: 256 << 10,
        src_port: 0,
    };
    let mut a = std::env::args().skip(1);
    while let Some(k) = a.next() {
        let mut v = || a.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "-s" => o.server = true,
            "-c" => o.host = Some(v()),
            "--port" | "-p" => o.port = v().parse().unwrap_or_else(|_| usage()),
            "--mode" => o.mode = Mode::parse(&v()).unwrap_or_else(|| usage()),
            "--dev" => o.dev = Some(v()),
            "--queue" => o.queue = v().parse().unwrap_or_else(|_| usage()),
            "--queues" => o.queues = v().parse().ok().filter(|&n| (1..=64).contains(&n)).unwrap_or_else(|| usage()),
            "--cpu" => o.cpu = Some(v().parse().unwrap_or_else(|_| usage())),
            "-4" => o.v6 = false,
            "-6" => o.v6 = true,
            "--json" => o.json = true,
            "--split" => o.split = true,
            "--mark" => o.mark = true,
            "--rcvlowat" => o.rcvlowat = v().parse().unwrap_or_else(|_| usage()),
            "--buf-size" => o.buf_size = zcrx::sys::parse_size(&v()).unwrap_or_else(|| usage()),
            "--area" => o.area_mib = v().parse().ok().filter(|&m| m > 0).unwrap_or_else(|| usage()),
            "--flows" => o.flows = v().parse().ok().filter(|&n| (1..=MAX_FLOWS).contains(&n)).unwrap_or_else(|| usage()),
            "--write-size" => o.write_size = zcrx::sys::parse_size(&v()).filter(|&n| n > 0).unwrap_or_else(|| usage()),
            "--src-port" => o.src_port = v().parse().ok().filter(|&p| p > 0).unwrap_or_else(|| usage()),
            "-n" => o.bytes = Some(v().parse().unwrap_or_else(|_| usage())),
            "-t" => o.secs = Some(v().parse().unwrap_or_else(|_| usage())),
            "--report" => {
                let path = v();
                // A report piped into head(1) ends quietly, like other tools.
                // SAFETY: restoring the default action of a signal.
                unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
                match report::report(&path) {
                    Ok(()) => exit(0),
                    Err(e) => die("report", e),
                }
            }
            _ => usage(),
        }
    }
    if o.server == o.host.is_some() {
        usage();
    }
    if o.queues > 1 && !o.mode.has_area() {
        die("--queues", format!("mode {} binds no queue", o.mode.name()));
    }
    if o.buf_size != 0 && o.buf_size != zcrx::dev::page_size() && !o.mode.has_area() {
        die("--buf-size", format!("mode {} has no buffers of its own", o.mode.name()));
    }
    o
}

/// CPU time charged to `cpu` in /proc/stat (user+nice+system+irq+softirq),
/// and softirq alone, in seconds.
fn cpu_stat(cpu: usize) -> (f64, f64) {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let key = format!("cpu{cpu} ");
    let Some(l) = s.lines().find(|l| l.starts_with(&key)) else { return (0.0, 0.0) };
    let v: Vec<f64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0.0);
    // user nice system idle iowait irq softirq
    ((get(0) + get(1) + get(2) + get(5) + get(6)) / hz, get(6) / hz)
}

/// CPU time (user + system) of `ksoftirqd/cpu`, in seconds; 0 if not found.
fn ksoftirqd_secs(cpu: usize) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let want = format!("ksoftirqd/{cpu}");
    let Some(t) = tasks().into_iter().find(|t| t.comm == want) else { return 0.0 };
    // Fields after the ")" that ends the name: utime is the 12th, stime the 13th.
    let f: Vec<f64> = t.rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / hz
}

/// A process of /proc: its pid, its name and the fields of its `stat`
/// after the name (state first).
struct Task {
    pid: libc::pid_t,
    comm: String,
    rest: String,
}

/// Every process (thread group) of /proc, from one read of its `stat`.
fn tasks() -> Vec<Task> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<libc::pid_t>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // "PID (COMM) STATE ...": the name may hold spaces and ")".
            let (comm, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            Some(Task { pid, comm: comm.to_string(), rest: rest.to_string() })
        })
        .collect()
}

/// The CPU-time clock of process `pid` (its whole thread group).
fn cpu_clock(pid: libc::pid_t) -> Option<libc::clockid_t> {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: writes into the live local.
    (unsafe { libc::clock_getcpuclockid(pid, &mut clk) } == 0).then_some(clk)
}

/// This thread's user + system time in seconds.
fn thread_cpu() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Scheduler runtime (exact: the CPU-time clock of each thread,
/// `clock_getcpuclockid`) of the kernel's NAPI threads, in seconds: those of
/// device `dev` (comm `napi/DEV-ID`) and all others. With threaded NAPI the
/// receive side of a device runs there: netdevsim's emulated DMA, GRO, the
/// page pool's allocations, TCP's receive up to the socket's queue.
fn napi_secs(dev: Option<&str>) -> (f64, f64) {
    let (mut mine, mut other) = (0.0, 0.0);
    // comm is cut to 15 bytes: match the device name as far as it goes.
    let want = dev.map(|d| format!("napi/{d}-"));
    for t in tasks().into_iter().filter(|t| t.comm.starts_with("napi/")) {
        // None: the thread went away meanwhile.
        let Some(secs) = cpu_clock(t.pid).and_then(clock_secs) else { continue };
        match &want {
            Some(w) if w.starts_with(&t.comm) || t.comm.starts_with(w.as_str()) => mine += secs,
            _ => other += secs,
        }
    }
    (mine, other)
}

/// `--split`: the receiver's CPU time inside its receive system calls
/// (read, recv, the RECV ioctl, epoll_wait, io_uring_enter), in ns; 0 when
/// not asked for. Two clock_gettime(CLOCK_THREAD_CPUTIME_ID) calls per
/// system call, so a diagnostic: the main numbers run without it.
static IN_CALLS_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Receive calls measured under `--split`.
static IN_CALLS_N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static SPLIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into the live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs `f` (a receive system call), adding its CPU time to
/// [`IN_CALLS_NS`] under `--split`.
#[inline]
pub(crate) fn in_call<T>(f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::Ordering::Relaxed;
    if !SPLIT.load(Relaxed) {
        return f();
    }
    let t = thread_cpu_ns();
    let r = f();
    IN_CALLS_NS.fetch_add(thread_cpu_ns() - t, Relaxed);
    IN_CALLS_N.fetch_add(1, Relaxed);
    r
}

/// What [`in_call`]'s own clock reads cost per call, in ns: inside the
/// measured span and in all (measured on empty calls, before the run), so
/// that `--split` can take them out of its figures.
fn split_overhead() -> (f64, f64) {
    use std::sync::atomic::Ordering::Relaxed;
    const N: u64 = 256;
    let t = thread_cpu_ns();
    for _ in 0..N {
        in_call(|| ());
    }
    let all = (thread_cpu_ns() - t) as f64 / N as f64;
    let inside = IN_CALLS_NS.swap(0, Relaxed) as f64 / N as f64;
    IN_CALLS_N.store(0, Relaxed);
    (inside, all)
}

/// The sender: the one other zcrx-bench process on the system (the bench
/// runs one), as the CPU-time clock of its whole thread group (threads
/// that ended included), or None if there is not exactly one.
fn sender_clock() -> Option<libc::clockid_t> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // Zombies (ended, not yet reaped) do not count.
    let found: Vec<_> = tasks().into_iter().filter(|t| t.pid != me && t.comm == "zcrx-bench" && !t.rest.starts_with('Z')).collect();
    let [t] = &found[..] else { return None };
    cpu_clock(t.pid)
}

/// The time of CPU-time clock `clk` in seconds, if it still exists.
fn clock_secs(clk: libc::clockid_t) -> Option<f64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into the live local.
    (unsafe { libc::clock_gettime(clk, &mut ts) } == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
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
    // The sender waits for us to close its connections (see `client`).
    let sender_secs = match (sender.and_then(clock_secs), s0) {
        (Some(a), Some(b)) => format!("\"sender_cpu_secs\":{:.4},", a - b),
        _ => String::new(),
    };
    let (napi_dev, napi_other) = (n1.0 - n0.0, n1.1 - n0.1);
    let ksi = ksoftirqd_secs(cpu) - k0;
    let (c1, si1) = cpu_stat(cpu);
    let stat_cpu = c1 - c0;
    let cpu_secs = rus + ksi;
    let gib = total as f64 / (1u64 << 30) as f64;
    let line = format!(
        "{{\"mode\":\"{}\",\"bytes\":{total},\"secs\":{secs:.4},\"gbps\":{:.4},\"cpu_secs\":{cpu_secs:.4},\
         \"cpu_per_gib\":{:.4},\"thread_secs\":{rus:.4},\"ksoftirqd_secs\":{ksi:.4},\"stat_cpu_secs\":{stat_cpu:.4},\
         \"stat_softirq_secs\":{:.4},\"copied_bytes\":{copied},\"calls\":{calls},\"records\":{records},\
         \"verified_bytes\":{},\"napi_dev_secs\":{napi_dev:.4},\"napi_other_secs\":{napi_other:.4},{sender_secs}{}\"rcvlowat\":{rcvlowat},\"rcvbuf\":{},\"flows\":{},\"buf_size\":{buf_size},\"area_bytes\":{}}}",
        o.mode.name(),
        total as f64 * 8.0 / secs / 1e9,
        cpu_secs / gib.max(1e-12),
        si1 - si0,
        smp.checked,
        if o.split {
            // The clock reads' own cost (measured before the run) taken out:
            // what they add inside the calls from in_calls_secs, and all
            // of it reported as split_overhead_secs.
            let ns = IN_CALLS_NS.load(std::sync::atomic::Ordering::Relaxed) as f64;
            let n = IN_CALLS_N.load(std::sync::atomic::Ordering::Relaxed) as f64;
            format!(
                "\"in_calls_secs\":{:.4},\"split_calls\":{n},\"split_overhead_secs\":{:.4},",
                (ns - n * split_cost.0).max(0.0) / 1e9,
                n * split_cost.1 / 1e9
            )
        } else {
            String::new()
        },
        rcvbuf.unwrap_or(0),
        o.flows,
        if buf_size > 0 { area } else { 0 }
    );
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

/// A TCP connection to `to` from local port `port` (any address), with
/// SO_REUSEADDR so that a port whose last connection is in TIME_WAIT can be
/// bound again (connect() then reuses the 4-tuple where the stack allows it:
/// net.ipv4.tcp_tw_reuse).
fn connect_from(to: SocketAddr, port: u16) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let fam = if to.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd nothing else owns; the stream closes it.
    let s = unsafe { TcpStream::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a live local.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let any: std::net::IpAddr = if to.is_ipv6() { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
    let (local, remote) = (sockaddr(&SocketAddr::new(any, port)), sockaddr(&to));
    // SAFETY: bind and connect read the address structs, live locals of the
    // lengths given.
    unsafe {
        if libc::bind(fd, local.0.as_ptr().cast(), local.1) < 0 || libc::connect(fd, remote.0.as_ptr().cast(), remote.1) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(s)
}

/// `addr` as a sockaddr_in or sockaddr_in6 in a byte buffer, and its length.
fn sockaddr(addr: &SocketAddr) -> (Vec<u8>, libc::socklen_t) {
    match addr {
        SocketAddr::V4(a) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: a plain C struct viewed as its bytes.
            let b = unsafe { std::slice::from_raw_parts((&sa as *const libc::sockaddr_in).cast::<u8>(), std::mem::size_of_val(&sa)) };
            (b.to_vec(), b.len() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a plain C struct viewed as its bytes.
            let b = unsafe { std::slice::from_raw_parts((&sa as *const libc::sockaddr_in6).cast::<u8>(), std::mem::size_of_val(&sa)) };
            (b.to_vec(), b.len() as libc::socklen_t)
        }
    }
}

fn client(o: &Opts) {
    if let Some(c) = o.cpu {
        zcrx::sys::pin_to_cpu(c).unwrap_or_else(|e| die("sched_setaffinity", e));
    }
    let host = o.host.clone().unwrap_or_default();
    let addr: SocketAddr = format!("{}:{}", if host.contains(':') { format!("[{host}]") } else { host.clone() }, o.port)
        .parse()
        .unwrap_or_else(|e| die("address", e));
    // What the sender writes is computed before connecting: no set-up in
    // the timed window. The stream from offset 0 for PERIOD + write size
    // bytes: a write of up to the write size starts anywhere in the first
    // period (the pattern repeats every PERIOD bytes).
    let mut table = vec![0u8; zcrx::pattern::PERIOD + o.write_size];
    Pattern::new(SEED).fill(0, &mut table);
    let table = std::sync::Arc::new(table);
    // Every connection is up before the first byte goes out: the receiver
    // starts its clock once it has accepted them all.
    let t0 = Instant::now();
    let socks: Vec<TcpStream> = (0..o.flows)
        .map(|i| loop {
            let r = if o.src_port == 0 {
                TcpStream::connect(addr)
            } else {
                let p = o.src_port.checked_add(i as u16).unwrap_or_else(|| die("--src-port", "port + flows exceeds 65535"));
                connect_from(addr, p)
            };
            match r {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => die("connect", e),
            }
        })
        .collect();
    let total = o.bytes.unwrap_or(u64::MAX);
    let until = o.secs.map(|t| Instant::now() + Duration::from_secs_f64(t));
    let (n, wsize, cpu) = (o.flows as u64, o.write_size, o.cpu);
    let senders: Vec<_> = socks
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let table = table.clone();
            // The first flow carries what does not divide evenly.
            let limit = if total == u64::MAX { total } else { total / n + if i == 0 { total % n } else { 0 } };
            std::thread::spawn(move || {
                if let Some(c) = cpu {
                    zcrx::sys::pin_to_cpu(c).unwrap_or_else(|e| die("sched_setaffinity", e));
                }
                let mut off = 0u64;
                while off < limit && until.is_none_or(|u| Instant::now() < u) {
                    let at = (off % zcrx::pattern::PERIOD as u64) as usize;
                    let buf = &table[at..at + ((limit - off) as usize).min(wsize)];
                    s.write_all(buf).unwrap_or_else(|e| die("send", e));
                    off += buf.len() as u64;
                }
                // End of stream; then stay until the receiver closes (at
                // most a minute), so that it can read this process's CPU
                // time at its end.
                s.shutdown(std::net::Shutdown::Write).unwrap_or_else(|e| die("shutdown", e));
                let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                let mut b = [0u8; 1];
                while matches!(s.read(&mut b), Ok(n) if n > 0) {}
            })
        })
        .collect();
    for t in senders {
        if t.join().is_err() {
            die("send", "a sender thread panicked");
        }
    }
}

fn main() {
    let o = parse();
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
