// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A test that never returns must not leave the VM silent until its outer
//! timeout: each test runs under a budget, and one that overruns it gets
//! its `not ok` with where everything was (every thread of this process:
//! its kernel stack and wait channel; the kernel's blocked tasks through
//! SysRq `w`, in the guest's log), and the process exits (once its threads
//! can: one in uninterruptible sleep holds the exit until it wakes, and
//! vm.sh's timeout ends that).

use std::fs;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The test running: its name, start, budget and TAP number.
type Running = Option<(String, Instant, Duration, usize)>;

/// The watchdog's handle: the test running, under a lock the watchdog
/// holds from its decision to its exit, so that a test cannot get both
/// `ok` and `not ok`.
pub struct Watchdog(Arc<(Mutex<Running>, Condvar)>);

impl Watchdog {
    /// Starts the watchdog thread.
    pub fn start() -> Watchdog {
        let shared = Arc::new((Mutex::new(Running::None), Condvar::new()));
        let s = shared.clone();
        std::thread::spawn(move || {
            let (lock, cv) = &*s;
            let mut cur = lock.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                let wait = match &*cur {
                    Some((_, t0, budget, _)) => budget.saturating_sub(t0.elapsed()),
                    None => Duration::from_secs(3600),
                };
                if wait.is_zero() {
                    if let Some((name, _, budget, i)) = &*cur {
                        // the lock stays held: the test's own result
                        // cannot be printed any more
                        overrun(name, *budget, *i);
                    }
                }
                cur = cv.wait_timeout(cur, wait).unwrap_or_else(|e| e.into_inner()).0;
            }
        });
        Watchdog(shared)
    }

    /// Test `i` (its TAP number) called `name` starts, and may run for
    /// `budget`.
    pub fn start_test(&self, name: &str, budget: Duration, i: usize) {
        let (lock, cv) = &*self.0;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = Some((name.to_string(), Instant::now(), budget, i));
        cv.notify_one();
    }

    /// The test that was running returned (blocks for good if the
    /// watchdog has just declared it hung: the process is exiting).
    pub fn done(&self) {
        let (lock, cv) = &*self.0;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) = None;
        cv.notify_one();
    }
}

/// Writes `s` to fd 1 directly: std's stdout lock may be held by a thread
/// that hangs in a write.
fn write_out(s: &str) {
    let mut b = s.as_bytes();
    while !b.is_empty() {
        // SAFETY: writes from a live buffer of that length.
        let n = unsafe { libc::write(1, b.as_ptr().cast(), b.len()) };
        if n <= 0 {
            return;
        }
        b = &b[n as usize..];
    }
}

/// Reports the overrun and what every thread waits for, then exits.
fn overrun(name: &str, budget: Duration, i: usize) -> ! {
    let mut out = String::new();
    // (a fresh line: the interrupted test may have printed half of one)
    out += &format!("\n# watchdog: {name} still running after its budget of {} s: a hang\n", budget.as_secs());
    // The kernel's view of every blocked task, into the guest's log.
    match fs::write("/proc/sysrq-trigger", "w") {
        Ok(()) => out += "# watchdog: blocked tasks (SysRq w) are in the guest's kernel log\n",
        Err(e) => out += &format!("# watchdog: SysRq w: {e}\n"),
    }
    if let Ok(tasks) = fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let p = t.path();
            let rd = |f: &str| fs::read_to_string(p.join(f)).unwrap_or_else(|e| format!("({e})"));
            out +=
                &format!("# watchdog: thread {} ({}) wchan {}\n", t.file_name().to_string_lossy(), rd("comm").trim(), rd("wchan").trim());
            for l in rd("stack").lines() {
                out += &format!("#   {l}\n");
            }
        }
    }
    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    out += &format!("not ok {i} {name}\n");
    write_out(&out);
    std::process::exit(1);
}
