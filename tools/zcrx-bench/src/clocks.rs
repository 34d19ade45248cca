// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Where the receive path's CPU time is read: the receiving thread and
//! its CPU's ksoftirqd, the NAPI threads, the sender, and the split of the
//! receiver's time inside and outside the receive calls.

/// CPU time charged to `cpu` in /proc/stat (user+nice+system+irq+softirq),
/// and softirq alone, in seconds.
pub(crate) fn cpu_stat(cpu: usize) -> (f64, f64) {
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
pub(crate) fn ksoftirqd_secs(cpu: usize) -> f64 {
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
pub(crate) struct Task {
    pub(crate) pid: libc::pid_t,
    pub(crate) comm: String,
    pub(crate) rest: String,
}

/// Every process (thread group) of /proc, from one read of its `stat`.
pub(crate) fn tasks() -> Vec<Task> {
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
pub(crate) fn cpu_clock(pid: libc::pid_t) -> Option<libc::clockid_t> {
    let mut clk: libc::clockid_t = 0;
    // SAFETY: writes into the live local.
    (unsafe { libc::clock_getcpuclockid(pid, &mut clk) } == 0).then_some(clk)
}

/// This thread's user + system time in seconds.
pub(crate) fn thread_cpu() -> f64 {
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
pub(crate) fn napi_secs(dev: Option<&str>) -> (f64, f64) {
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
pub(crate) static IN_CALLS_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Receive calls measured under `--split`.
pub(crate) static IN_CALLS_N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub(crate) static SPLIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn thread_cpu_ns() -> u64 {
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
pub(crate) fn split_overhead() -> (f64, f64) {
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
pub(crate) fn sender_clock() -> Option<libc::clockid_t> {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    // Zombies (ended, not yet reaped) do not count.
    let found: Vec<_> = tasks().into_iter().filter(|t| t.pid != me && t.comm == "zcrx-bench" && !t.rest.starts_with('Z')).collect();
    let [t] = &found[..] else { return None };
    cpu_clock(t.pid)
}

/// The time of CPU-time clock `clk` in seconds, if it still exists.
pub(crate) fn clock_secs(clk: libc::clockid_t) -> Option<f64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into the live local.
    (unsafe { libc::clock_gettime(clk, &mut ts) } == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}
