// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Fault injection: every allocation a uAPI call makes, failed in turn.
//!
//! The debug kernel has failslab and fail_page_alloc. `/proc/thread-self/
//! fail-nth` fails the N-th fault-injection point this thread reaches in
//! its next calls (slab and page allocations, including those of the
//! network core and netdevsim when BIND restarts the queue); after the
//! call it reads 0 if the failure was injected. So N = 1, 2, ... walks
//! every allocation of the call until one runs that has fewer than N.
//! Each injected failure must give an errno (or be absorbed: success),
//! never a splat (the VM runner scans the log) or a leak (the module's
//! live-object counters are back to zero after every case, and a stream
//! through a fresh binding still arrives byte-exact at the end).

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::{dev::page_size, Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{addr_a, in_netns, join, receive, sender, with_receiver, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("fault_injection_every_allocation", fault_injection_every_allocation)];

const FAIL_NTH: &str = "/proc/thread-self/fail-nth";

/// The fault-injection knobs of both allocators.
const FAULT_DIRS: [&str; 2] = ["/sys/kernel/debug/failslab", "/sys/kernel/debug/fail_page_alloc"];

/// Writes each `(name, value)` of `knobs` in every fault-injection
/// directory, saving what each held into `saved` before it is changed
/// (for [`restore_knobs`]).
fn set_knobs(knobs: &[(&str, String)], saved: &mut Vec<(String, String)>) -> Result<(), String> {
    for dir in FAULT_DIRS {
        for (k, v) in knobs {
            let p = format!("{dir}/{k}");
            let was = fs::read_to_string(&p).map_err(|e| format!("{p}: {e}"))?;
            saved.push((p.clone(), was.trim().to_string()));
            fs::write(&p, v).map_err(|e| format!("write {v} to {p}: {e}"))?;
        }
    }
    Ok(())
}

/// Writes back what [`set_knobs`] saved, last first (so `probability`
/// goes back to 0 before the rest); all are tried, the first error is
/// returned.
fn restore_knobs(saved: &[(String, String)]) -> Result<(), String> {
    let mut r = Ok(());
    for (p, v) in saved.iter().rev() {
        if let Err(e) = fs::write(p, v) {
            r = r.and(Err(format!("restoring {p}: {e}")));
        }
    }
    r
}

/// Lets sleeping allocations fail too (the module allocates GFP_KERNEL),
/// quietly; returns how to restore the old settings.
fn setup_fault_attrs() -> Result<Vec<(String, String)>, String> {
    let mut old = Vec::new();
    let knobs = [("ignore-gfp-wait", "N"), ("verbose", "0"), ("task-filter", "N"), ("probability", "0")];
    if let Err(e) = set_knobs(&knobs.map(|(k, v)| (k, v.to_string())), &mut old) {
        let _ = restore_knobs(&old);
        return Err(e);
    }
    Ok(old)
}

/// `/proc/thread-self/fail-nth` of the calling thread, opened once: reading
/// and writing it allocates nothing, so it does not consume the count.
struct FailNth(fs::File);

impl FailNth {
    fn open() -> Result<Self, String> {
        fs::OpenOptions::new().read(true).write(true).open(FAIL_NTH).map(FailNth).map_err(|e| format!("open {FAIL_NTH}: {e}"))
    }

    fn set(&self, n: u32) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        self.0.write_at(n.to_string().as_bytes(), 0).map(|_| ()).map_err(|e| format!("write {FAIL_NTH}: {e}"))
    }

    fn get(&self) -> Result<u32, String> {
        use std::os::unix::fs::FileExt;
        let mut b = [0u8; 16];
        let k = self.0.read_at(&mut b, 0).map_err(|e| format!("read {FAIL_NTH}: {e}"))?;
        std::str::from_utf8(&b[..k]).ok().and_then(|t| t.trim().parse().ok()).ok_or(format!("{FAIL_NTH}: {:?}", &b[..k]))
    }

    /// Runs `op` with the `n`-th fault point of this thread failing: `None`
    /// when `op` reached fewer than `n` points (nothing injected), else
    /// what `op` returned.
    fn with_nth<T>(&self, n: u32, op: impl FnOnce() -> std::io::Result<T>) -> Result<Option<std::io::Result<T>>, String> {
        self.set(n)?;
        let r = op();
        let left = self.get()?;
        self.set(0)?;
        Ok(if left != 0 { None } else { Some(r) })
    }
}

/// What one site's walk saw: injections, and how each ended.
#[derive(Default)]
struct Site {
    points: u32,
    errnos: std::collections::BTreeMap<String, u32>,
    absorbed: u32,
}

impl Site {
    fn record<T>(&mut self, r: &std::io::Result<T>) -> Result<(), String> {
        self.points += 1;
        match r {
            Ok(_) => self.absorbed += 1,
            Err(e) => match e.raw_os_error() {
                Some(c) => *self.errnos.entry(zcrx::sys::errno_name(c).to_string()).or_default() += 1,
                None => return Err(format!("not an errno: {e}")),
            },
        }
        Ok(())
    }

    /// The report line; an error if no allocation was failed at all, or
    /// none made the call fail: the walk then proved nothing.
    fn checked_line(&self, name: &str) -> Result<String, String> {
        if self.points == 0 || self.errnos.is_empty() {
            return Err(format!("{name}: no injected failure reached the caller: {}", self.line(name)));
        }
        Ok(self.line(name))
    }

    fn line(&self, name: &str) -> String {
        let e: Vec<String> = self.errnos.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!(
            "{name}: {} allocations failed in turn: errno {}; absorbed (call succeeded) {}",
            self.points,
            if e.is_empty() { "none".into() } else { e.join(", ") },
            self.absorbed
        )
    }
}

/// Most fault points walked per site (a bound, not an expectation: the
/// walk ends when a call reaches fewer points).
const MAX_POINTS: u32 = 400;

fn fault_injection_every_allocation(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    if !std::path::Path::new("/sys/kernel/debug/failslab").exists() || !std::path::Path::new(FAIL_NTH).exists() {
        return Skip("no failslab/fail-nth in this kernel (the debug kernel has them)".into());
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let old = tryo!(setup_fault_attrs());
    let h = in_netns(NS_A, move || -> Result<Vec<String>, String> {
        let ps = page_size();
        let mut lines = Vec::new();
        let f = FailNth::open()?;
        let idle = || wait_idle(Duration::from_secs(20));

        // REGISTER_AREA (pinning, the net_iov arrays, the charge).
        let mut site = Site::default();
        for nth in 1..=MAX_POINTS {
            let mut z = Zcrx::open().map_err(|e| e.to_string())?;
            let Some(r) = f.with_nth(nth, || z.register_area(64 * ps))? else { break };
            site.record(&r)?;
            drop(z);
            idle().map_err(|e| format!("REGISTER_AREA, allocation {nth} failed: {e}"))?;
        }
        lines.push(site.checked_line("REGISTER_AREA")?);

        // BIND (the ring, the DMA mapping, the binding, and the queue
        // restart in the core and netdevsim with its new page pool).
        let mut site = Site::default();
        for nth in 1..=MAX_POINTS {
            let mut z = Zcrx::open().map_err(|e| e.to_string())?;
            z.register_area(64 * ps).map_err(|e| e.to_string())?;
            let Some(r) = f.with_nth(nth, || z.bind(a_idx, 0, 64))? else { break };
            site.record(&r)?;
            drop(z);
            idle().map_err(|e| format!("BIND, allocation {nth} failed: {e}"))?;
        }
        lines.push(site.checked_line("BIND (incl. the queue restart)")?);

        // RECV on the copy path (loopback data into free buffers) and
        // mmap of the ring: a bound context, a connection with data.
        let mut site = Site::default();
        let mut mm = Site::default();
        for nth in 1..=MAX_POINTS {
            let mut z = Zcrx::open().map_err(|e| e.to_string())?;
            z.register_area(64 * ps).map_err(|e| e.to_string())?;
            z.bind(a_idx, 0, 64).map_err(|e| e.to_string())?;
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
            let mut c = std::net::TcpStream::connect(l.local_addr().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            let (s, _) = l.accept().map_err(|e| e.to_string())?;
            c.write_all(&[7u8; 20000]).map_err(|e| e.to_string())?;
            let mut recs = vec![Rec::default(); 16];
            let done_recv = match f.with_nth(nth, || z.recv(s.as_raw_fd(), &mut recs, 0))? {
                None => true,
                Some(r) => {
                    site.record(&r)?;
                    if let Ok(g) = &r {
                        for rec in &recs[..g.records] {
                            if z.data(rec).iter().any(|&b| b != 7) {
                                return Err(format!("RECV, allocation {nth} failed: wrong bytes"));
                            }
                        }
                    }
                    false
                }
            };
            // A second mapping of the ring.
            let fd = z.raw_fd();
            let done_mmap = match f.with_nth(nth, || {
                // SAFETY: maps the ring of our own context; unmapped below.
                let p = unsafe { libc::mmap(std::ptr::null_mut(), ps, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
                if p == libc::MAP_FAILED {
                    Err(std::io::Error::last_os_error())
                } else {
                    // SAFETY: the mapping made just now.
                    unsafe { libc::munmap(p, ps) };
                    Ok(())
                }
            })? {
                None => true,
                Some(r) => {
                    mm.record(&r)?;
                    false
                }
            };
            drop((z, s, c, l));
            idle().map_err(|e| format!("RECV/mmap, allocation {nth} failed: {e}"))?;
            if done_recv && done_mmap {
                break;
            }
        }
        // RECV allocates nothing (its records and copies use what BIND
        // set up): it reaches no fault point, which the line says.
        lines.push(site.line("RECV (copy path)"));
        lines.push(mm.checked_line("mmap of the ring")?);
        Ok(lines)
    });
    let r = join(h);
    let unset = restore_knobs(&old);
    let lines = tryo!(r);
    tryo!(unset);
    for l in &lines {
        env.diag(l);
    }
    // The queue still works after all that: a stream through a fresh
    // binding, zero-copy and byte-exact; then one while 2% of all atomic
    // allocations fail, system-wide (the NAPI side: netdevsim's skbs, the
    // stack's): packets drop, TCP retransmits, the bytes still arrive.
    for (i, atomic_fail) in [(0u16, false), (1, true)] {
        let pat = Arc::new(Pattern::new(31337 + u64::from(i)));
        let p2 = pat.clone();
        let bytes = env.bytes(4 << 20);
        let port = 7401 + i;
        // The device check (records in writes netdevsim logged), started
        // before the fault knobs so that its allocation cannot fail.
        let log = tryo!(DmaLog::start());
        let rx = with_receiver(a_idx, 0, 8 << 20, port, true, move |z, l| {
            let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            receive(z, &s, &p2, None)
        });
        // `times` counts down once per injected failure: what is left
        // afterwards says how many there were.
        const TIMES: u64 = 1_000_000;
        let mut restore = Vec::new();
        let set = if atomic_fail {
            let knobs = [
                ("ignore-gfp-wait", "Y".to_string()),
                ("task-filter", "N".into()),
                ("interval", "1".into()),
                ("times", TIMES.to_string()),
                ("probability", "2".into()),
            ];
            set_knobs(&knobs, &mut restore)
        } else {
            Ok(())
        };
        let sent = if set.is_ok() { join(sender(addr_a(true, port), bytes, pat, 0)) } else { Err("not sent".into()) };
        let rx = if set.is_ok() { join(rx) } else { Err("knobs not set".into()) };
        let injected: u64 = if atomic_fail {
            FAULT_DIRS
                .iter()
                .filter_map(|d| fs::read_to_string(format!("{d}/times")).ok()?.trim().parse::<u64>().ok())
                .map(|left| TIMES - left.min(TIMES))
                .sum()
        } else {
            0
        };
        // Probability back to 0 first, whatever happened.
        let unset = restore_knobs(&restore);
        tryo!(set);
        tryo!(unset);
        if atomic_fail && injected == 0 {
            return Fail("2% of atomic allocations were to fail, but none was failed".into());
        }
        let rx = tryo!(rx);
        tryo!(sent);
        // A failed allocation drops a packet (TCP sends it again); with
        // header split on, netdevsim never hands the stack readable
        // payload, so nothing may come copied.
        if rx.bytes != bytes || rx.zc_bytes != bytes {
            return Fail(format!("stream after the injections: {} of {bytes} bytes, {} zero-copy: all must be", rx.bytes, rx.zc_bytes));
        }
        env.diag(&tryo!(log.check(0, rx.zc_bytes)));
        drop(log);
        env.diag(&format!(
            "then a stream{}: {} bytes byte-exact, {} zero-copy, {} copied",
            if atomic_fail { format!(" with 2% of atomic allocations failing ({injected} failed)") } else { String::new() },
            rx.bytes,
            rx.zc_bytes,
            rx.copy_bytes
        ));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(20)));
    Pass
}
