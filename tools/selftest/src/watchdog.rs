// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A test that never returns must not leave the VM silent until its outer
//! timeout: each test runs under a budget, and one that overruns it gets
//! its `not ok` with where everything was (every thread of this process:
//! its kernel stack and wait channel; the kernel's blocked tasks through
//! SysRq `w`, in the guest's log), and the run ends there.

use std::fs;
use std::io::Write;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// What the watchdog is told: a test started (its name, budget, number),
/// or the one running ended.
enum Msg {
    Start(String, Duration, usize),
    Done,
}

/// The watchdog thread's handle.
pub struct Watchdog(Sender<Msg>);

impl Watchdog {
    /// Starts the watchdog. On an overrun it prints the test's result
    /// (`not ok N name`, as TAP has it) and the dumps, then exits with 1.
    pub fn start() -> Watchdog {
        let (tx, rx) = channel::<Msg>();
        std::thread::spawn(move || {
            let mut cur: Option<(String, Instant, Duration, usize)> = None;
            loop {
                let wait = cur.as_ref().map(|(_, t0, b, _)| b.saturating_sub(t0.elapsed())).unwrap_or(Duration::from_secs(3600));
                match rx.recv_timeout(wait) {
                    Ok(Msg::Start(n, b, i)) => cur = Some((n, Instant::now(), b, i)),
                    Ok(Msg::Done) => cur = None,
                    Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some((name, t0, budget, i)) = &cur {
                            if t0.elapsed() >= *budget {
                                overrun(name, *budget, *i);
                            }
                        }
                    }
                }
            }
        });
        Watchdog(tx)
    }

    /// Test `i` (1-based, its TAP number) called `name` starts, and may run
    /// for `budget`.
    pub fn start_test(&self, name: &str, budget: Duration, i: usize) {
        let _ = self.0.send(Msg::Start(name.to_string(), budget, i));
    }

    /// The test that was running returned.
    pub fn done(&self) {
        let _ = self.0.send(Msg::Done);
    }
}

/// Reports the overrun and what every thread waits for, then exits.
fn overrun(name: &str, budget: Duration, i: usize) -> ! {
    let mut out = String::new();
    out += &format!("# watchdog: {name} still running after its budget of {} s: a hang\n", budget.as_secs());
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
    out += &format!("not ok {i} {name}\n");
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(out.as_bytes());
    let _ = so.flush();
    std::process::exit(1);
}
