// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Helpers shared by the tests: the module, module-wide counters, locked
//! memory of this process.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering::Acquire, Ordering::Relaxed};
use std::sync::OnceLock;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::kmod;
use zcrx::uapi::zcrx_rs_info;
use zcrx::Zcrx;

use crate::Env;

pub const MODULE: &str = "zcrx_rs";

/// Loads the module unless it is loaded; waits for the device node.
pub fn ensure_loaded(env: &Env) -> Result<(), String> {
    if !kmod::is_loaded(MODULE) {
        kmod::load(&env.module, "").map_err(|e| format!("load {}: {e}", env.module.display()))?;
    }
    let t0 = Instant::now();
    while !Path::new("/dev/zcrx").exists() {
        if t0.elapsed() > Duration::from_secs(3) {
            return Err("/dev/zcrx did not appear".into());
        }
        sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Module-wide counters, read through a fresh context (which counts itself).
pub fn info() -> Result<zcrx_rs_info, String> {
    Zcrx::open().and_then(|z| z.info()).map_err(|e| format!("INFO: {e}"))
}

/// Makes every CPU run its network softirq once (a loopback packet sent
/// from each): skbs freed on another CPU than the one that received them
/// wait on that CPU's deferred-free list (`skb_attempt_defer_free`) until its
/// next `net_rx_action`, and with them the buffers they hold and so the page
/// pool that lends them. On a quiet test machine nothing else runs it.
pub fn kick_softirqs() {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    for cpu in 0..n {
        let _ = std::thread::spawn(move || {
            let _ = zcrx::sys::pin_to_cpu(cpu);
            if let Ok(s) = std::net::UdpSocket::bind("127.0.0.1:0") {
                let _ = s.send_to(b"kick", "127.0.0.1:9");
            }
        })
        .join();
    }
}

/// Pages pinned with `FOLL_PIN` in the whole system and not yet unpinned
/// (`/proc/vmstat`: `nr_foll_pin_acquired - nr_foll_pin_released`). The
/// kernel counts these itself, independent of the module's own
/// `pinned_pages` gauge and of the `VmPin` charge: an area whose pages are
/// charged and uncharged but never unpinned shows here.
pub fn foll_pins() -> Result<i64, String> {
    let s = fs::read_to_string("/proc/vmstat").map_err(|e| format!("/proc/vmstat: {e}"))?;
    let field = |name: &str| -> Result<i64, String> {
        s.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .ok_or(format!("/proc/vmstat: no {name}"))
    };
    Ok(field("nr_foll_pin_acquired")? - field("nr_foll_pin_released")?)
}

/// How many pages above [`FOLL_PIN_BASE`] [`wait_idle`] lets pass: others
/// pin pages too, for a while (up to 21 pages seen for over 10 s on a
/// loaded host); every area here is 1 MiB (256 pages) or more, and leaked
/// pins add up from test to test.
const FOLL_PIN_SLACK: i64 = 256;

/// [`foll_pins`] with nothing of ours pinned: what [`wait_idle`] expects
/// back. main sets it before the first test; file I/O may hold pages
/// pinned for a moment (FUSE/virtiofs direct I/O, as the guest's root file
/// system is), so the lowest count seen since stands for "nothing".
pub static FOLL_PIN_BASE: OnceLock<AtomicI64> = OnceLock::new();

/// Waits up to `t` for the module to have no objects in use besides the
/// probing context, and the system's `FOLL_PIN` pages back where they were
/// before the first test (within [`FOLL_PIN_SLACK`]); Err describing what
/// is left.
pub fn wait_idle(t: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    let mut kicked = Instant::now();
    loop {
        let i = info()?;
        let pins = match FOLL_PIN_BASE.get() {
            Some(base) => {
                let now = foll_pins()?;
                now - base.fetch_min(now, Relaxed).min(now)
            }
            None => 0,
        };
        let idle = i.contexts == 1 && i.areas == 0 && i.pinned_pages == 0 && i.providers == 0 && i.pools == 0;
        if idle && pins <= FOLL_PIN_SLACK {
            return Ok(());
        }
        if kicked.elapsed() > Duration::from_secs(2) {
            kick_softirqs();
            kicked = Instant::now();
        }
        if t0.elapsed() > t {
            return Err(format!(
                "module not back to baseline after {:?}: contexts {} (1 is the probe), areas {}, pinned pages {}, \
                 providers {}, pools {}; FOLL_PIN pages still pinned since the first test: {pins}",
                t, i.contexts, i.areas, i.pinned_pages, i.providers, i.pools
            ));
        }
        sleep(Duration::from_millis(100));
    }
}

/// The calling thread's id, for [`wait_sleeping_in`].
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// [`wait_sleeping_in`] for a thread that publishes its id in `tid` (0
/// until then) once it is about to make the call.
pub fn wait_published_sleeping_in(tid: &AtomicI32, nr: libc::c_long, t: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        match tid.load(Acquire) {
            0 if t0.elapsed() > t => return Err(format!("no thread id published after {t:?}")),
            0 => sleep(Duration::from_millis(2)),
            id => return wait_sleeping_in(id, nr, t.saturating_sub(t0.elapsed())),
        }
    }
}

/// Waits up to `t` until thread `tid` of this process sleeps inside system
/// call `nr` (`/proc/self/task/TID/syscall` names the call a blocked thread
/// is in, its `stat` says `S`): a test that needs another thread to be
/// waiting in RECV observes it instead of guessing with a sleep.
pub fn wait_sleeping_in(tid: i32, nr: libc::c_long, t: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    let task = format!("/proc/self/task/{tid}");
    loop {
        let call = fs::read_to_string(format!("{task}/syscall")).map_err(|e| format!("{task}/syscall: {e}"))?;
        let stat = fs::read_to_string(format!("{task}/stat")).map_err(|e| format!("{task}/stat: {e}"))?;
        // "pid (comm) S ...": the state follows the last ')'.
        let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).unwrap_or("?");
        let in_call = call.split_whitespace().next().and_then(|v| v.parse::<libc::c_long>().ok());
        if state == "S" && in_call == Some(nr) {
            return Ok(());
        }
        if t0.elapsed() > t {
            return Err(format!("thread {tid} not sleeping in system call {nr} after {t:?}: state {state}, syscall {}", call.trim()));
        }
        sleep(Duration::from_millis(2));
    }
}

const KMEMLEAK: &str = "/sys/kernel/debug/kmemleak";

/// Whether the kernel has kmemleak (the debug kernel).
pub fn kmemleak_present() -> bool {
    fs::metadata(KMEMLEAK).is_ok()
}

/// Scans for leaks now (`last`: after waiting out kmemleak's 5 s minimum
/// age, so that objects leaked by the last tests are old enough to be
/// reported): Fail with kmemleak's report when it suspects any object,
/// which it then clears so the next scan reports only new ones.
pub fn kmemleak_scan(last: bool) -> zcrx::ktap::Outcome {
    use zcrx::ktap::Outcome::*;
    if last {
        sleep(Duration::from_secs(6));
    }
    if let Err(e) = fs::write(KMEMLEAK, "scan") {
        return Fail(format!("{KMEMLEAK}: scan: {e}"));
    }
    let report = match fs::read_to_string(KMEMLEAK) {
        Ok(r) => r,
        Err(e) => return Fail(format!("{KMEMLEAK}: {e}")),
    };
    let n = report.lines().filter(|l| l.starts_with("unreferenced object")).count();
    if n == 0 {
        return Pass;
    }
    let _ = fs::write(KMEMLEAK, "clear");
    Fail(format!("kmemleak suspects {n} objects:\n{}", report.lines().take(40).collect::<Vec<_>>().join("\n")))
}

/// The module's reference count.
pub fn refcnt() -> i64 {
    kmod::refcnt(MODULE).unwrap_or(-1)
}

/// A `/proc/PID/status` field in kB (`pid` "self" for this process).
pub fn status_kb(pid: &str, field: &str) -> Result<u64, String> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    s.lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or(format!("/proc/{pid}/status: no {field}"))
}

/// `VmPin` of this process (pinned pages, where areas are charged), in kB.
pub fn vm_pinned_kb() -> Result<u64, String> {
    status_kb("self", "VmPin")
}

/// Tries `rmmod` and expects it to be refused (module in use); Err if it
/// unloaded or failed otherwise.
pub fn rmmod_refused() -> Result<(), String> {
    match kmod::unload(MODULE) {
        Ok(()) => Err("rmmod succeeded while the module was in use".into()),
        Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(()),
        Err(e) => Err(format!("rmmod: {e}, expected EWOULDBLOCK (in use)")),
    }
}

/// Unloads the module, waiting up to `t` for page pools to let it go.
pub fn rmmod_eventually(t: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        match kmod::unload(MODULE) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) && t0.elapsed() < t => sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("rmmod after {:?}: {e} (refcnt {})", t0.elapsed(), refcnt())),
        }
    }
}

/// Formats a byte count.
pub fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// The kernel tree's io_uring zcrx selftest program, built for this kernel
/// (scripts/build-iou-zcrx.sh).
pub fn iou_zcrx_exe() -> Result<String, String> {
    let build = std::env::var("ZCRX_BUILD").map_err(|e| format!("ZCRX_BUILD: {e}"))?;
    let exe = format!("{build}/iou-zcrx");
    if !Path::new(&exe).exists() {
        return Err(format!("{exe} missing (scripts/build-iou-zcrx.sh)"));
    }
    Ok(exe)
}

/// `what` must fail with `want`.
pub fn expect_errno<T>(what: &str, r: std::io::Result<T>, want: i32) -> Result<(), String> {
    match r {
        Ok(_) => Err(format!("{what}: succeeded, expected {}", zcrx::sys::errno_name(want))),
        Err(e) if e.raw_os_error() == Some(want) => Ok(()),
        Err(e) => Err(format!("{what}: {e}, expected {}", zcrx::sys::errno_name(want))),
    }
}
