// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-rs selftest: runs inside the test VM as root, prints KTAP.
//!
//! usage: zcrx-selftest --module PATH/zcrx_rs.ko [--big-stream BYTES] [--scale-down N]
//!                      [--list] [TEST...]
//!
//! Needs the test kernel (netdevsim with header-split DMA) and the
//! environment scripts/vm.sh sets (ZCRX_BUILD, ZCRX_CACHE).

/// Unwraps a `Result` in a test, or ends the test with `Fail(error)`.
macro_rules! tryo {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return zcrx::ktap::Outcome::Fail(e.to_string()),
        }
    };
}

mod accounting;
mod bigbuf;
mod clients;
mod common;
mod compat;
mod copyonly;
mod csum;
mod devlog;
mod devmem_tx;
mod dmabuf;
mod edges;
mod errors;
mod esp;
mod events;
mod fairshare;
mod faults;
mod forward;
mod fuzz;
mod hostile;
mod lifecycle;
mod multiqueue;
mod nc;
mod net;
mod netlink;
mod nsim;
mod pkt;
mod psp;
mod remote;
mod share;
mod signed;
mod soak;
mod stream;
mod takeover;
mod teardown;
mod trace;
mod tunnel;
mod ulp;
mod urgent;
mod watchdog;

use std::path::PathBuf;
use std::process::exit;

use zcrx::ktap::{Ktap, Outcome};

/// What every test gets.
pub struct Env {
    /// Path of zcrx_rs.ko.
    pub module: PathBuf,
    /// Size of the big stream test.
    pub big_stream: u64,
    /// Divisor for the other streams' sizes (`--scale-down`, for the slow
    /// debug kernel).
    pub scale_down: u64,
    /// How long `fuzz_uapi` runs (`--fuzz-seconds`; 0: it skips).
    pub fuzz_seconds: u64,
    /// Its seed (`--fuzz-seed`; default: from the clock).
    pub fuzz_seed: Option<u64>,
    /// How long `fuzz_remote` runs (`--fuzz-net-seconds`; default 10).
    pub fuzz_net_seconds: u64,
    /// Its seed (`--fuzz-net-seed`; default: from the clock).
    pub fuzz_net_seed: Option<u64>,
    /// Fewest frames `fuzz_remote` must send of every packet class
    /// (`--fuzz-net-min-per-class`; default 0: any count passes).
    pub fuzz_net_min_per_class: u64,
    /// How long `soak_streams_restarts_rebinds` runs (`--soak-seconds`; 0:
    /// it skips).
    pub soak_seconds: u64,
}

impl Env {
    /// A stream size, scaled down by `--scale-down` (at least 4 MiB).
    pub fn bytes(&self, b: u64) -> u64 {
        (b / self.scale_down).max(4 << 20).min(b)
    }

    /// Prints a KTAP diagnostic line (numbers, explanations).
    pub fn diag(&self, msg: &str) {
        for l in msg.lines() {
            println!("# {l}");
        }
    }
}

/// A test: a name and a function.
pub type TestFn = fn(&Env) -> Outcome;

/// All tests, in the order they run. Later tests may rely on the state that
/// earlier ones leave (a loaded module), and say so when it is missing.
fn all_tests() -> Vec<(&'static str, TestFn)> {
    let mut v = Vec::new();
    v.extend_from_slice(lifecycle::TESTS);
    v.extend_from_slice(errors::TESTS);
    v.extend_from_slice(edges::TESTS);
    v.extend_from_slice(takeover::TESTS);
    v.extend_from_slice(accounting::TESTS);
    v.extend_from_slice(stream::TESTS);
    v.extend_from_slice(nsim::TESTS);
    v.extend_from_slice(forward::TESTS);
    v.extend_from_slice(tunnel::TESTS);
    v.extend_from_slice(csum::TESTS);
    v.extend_from_slice(urgent::TESTS);
    v.extend_from_slice(signed::TESTS);
    v.extend_from_slice(devmem_tx::TESTS);
    v.extend_from_slice(psp::TESTS);
    v.extend_from_slice(esp::TESTS);
    v.extend_from_slice(faults::TESTS);
    v.extend_from_slice(teardown::TESTS);
    v.extend_from_slice(nc::TESTS);
    v.extend_from_slice(clients::TESTS);
    v.extend_from_slice(hostile::TESTS);
    v.extend_from_slice(compat::TESTS);
    v.extend_from_slice(share::TESTS);
    v.extend_from_slice(copyonly::TESTS);
    v.extend_from_slice(multiqueue::TESTS);
    v.extend_from_slice(bigbuf::TESTS);
    v.extend_from_slice(events::TESTS);
    v.extend_from_slice(netlink::TESTS);
    v.extend_from_slice(dmabuf::TESTS);
    v.extend_from_slice(soak::TESTS);
    v.extend_from_slice(fuzz::TESTS);
    v.extend_from_slice(remote::TESTS);
    v.extend_from_slice(fairshare::TESTS);
    v
}

const USAGE: &str = "usage: zcrx-selftest --module PATH/zcrx_rs.ko [--big-stream BYTES] [--scale-down N] [--fuzz-seconds S] [--fuzz-seed N] [--fuzz-net-seconds S] [--fuzz-net-seed N] [--fuzz-net-min-per-class N] [--soak-seconds S] [--exclude TEST[,TEST...]] [--list] [--fail-fast] [TEST...]";

fn usage() -> ! {
    eprintln!("{USAGE}");
    exit(2);
}

/// The command line (see `USAGE`).
struct Args {
    module: Option<PathBuf>,
    only: Vec<String>,
    exclude: Vec<String>,
    list: bool,
    fail_fast: bool,
    big_stream: u64,
    scale_down: u64,
    fuzz_seconds: u64,
    fuzz_seed: Option<u64>,
    soak_seconds: u64,
    fuzz_net_seconds: u64,
    fuzz_net_seed: Option<u64>,
    fuzz_net_min_per_class: u64,
}

fn parse_args(p: &mut lexopt::Parser) -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let mut a = Args {
        module: None,
        only: Vec::new(),
        exclude: Vec::new(),
        list: false,
        fail_fast: false,
        big_stream: 1 << 30,
        scale_down: 1,
        fuzz_seconds: 0,
        fuzz_seed: None,
        soak_seconds: 0,
        fuzz_net_seconds: 10,
        fuzz_net_seed: None,
        fuzz_net_min_per_class: 0,
    };
    let above_0 = |v: &str| v.parse::<u64>().ok().filter(|&n| n > 0).ok_or("want a number above 0");
    // the option being handled, for errors about its value
    let mut at = String::new();
    let r = (|| {
        while let Some(arg) = p.next()? {
            at = cliopt::name(&arg);
            match arg {
                Long("module") => a.module = Some(p.value()?.into()),
                Long("big-stream") => a.big_stream = p.value()?.parse()?,
                Long("scale-down") => a.scale_down = p.value()?.parse_with(above_0)?,
                Long("fuzz-seconds") => a.fuzz_seconds = p.value()?.parse()?,
                Long("fuzz-seed") => a.fuzz_seed = Some(p.value()?.parse()?),
                Long("fuzz-net-seconds") => a.fuzz_net_seconds = p.value()?.parse_with(above_0)?,
                Long("fuzz-net-seed") => a.fuzz_net_seed = Some(p.value()?.parse()?),
                Long("fuzz-net-min-per-class") => a.fuzz_net_min_per_class = p.value()?.parse()?,
                Long("soak-seconds") => a.soak_seconds = p.value()?.parse()?,
                Long("exclude") => a.exclude.extend(p.value()?.string()?.split(',').map(str::to_string)),
                Long("list") => a.list = true,
                Long("fail-fast") => a.fail_fast = true,
                Short('h') | Long("help") => cliopt::help(USAGE),
                Value(t) => a.only.push(t.string()?),
                _ => return Err(arg.unexpected()),
            }
            at.clear();
        }
        Ok(())
    })();
    cliopt::named(&at, r)?;
    Ok(a)
}

/// Makes this process `nobody` (no capabilities, no supplementary groups)
/// with `RLIMIT_MEMLOCK` `memlock` bytes: a helper's way of acting as an
/// ordinary user after opening `/dev/zcrx` as root.
pub fn become_nobody(memlock: u64) -> std::io::Result<()> {
    let rl = libc::rlimit { rlim_cur: memlock, rlim_max: memlock };
    // SAFETY: plain syscalls on this process's own credentials and limits.
    let dropped = unsafe {
        libc::setrlimit(libc::RLIMIT_MEMLOCK, &rl) == 0
            && libc::setgroups(0, std::ptr::null()) == 0
            && libc::setresgid(65534, 65534, 65534) == 0
            && libc::setresuid(65534, 65534, 65534) == 0
    };
    if dropped {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `--child-register BYTES LIMIT`: a helper process for the accounting
/// tests. Opens `/dev/zcrx` (as root), then becomes `nobody` with
/// `RLIMIT_MEMLOCK` LIMIT bytes (so without `CAP_IPC_LOCK`), registers an
/// anonymous area of BYTES and prints `ok` or `errno N`; keeps the area
/// until its stdin closes.
fn child_register(bytes: usize, limit: u64) -> ! {
    let z = zcrx::Zcrx::open().unwrap_or_else(|e| {
        println!("open {e}");
        exit(1)
    });
    if let Err(e) = become_nobody(limit) {
        println!("drop privileges: {e}");
        exit(1);
    }
    // SAFETY: a fresh anonymous mapping, kept until exit.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    // SAFETY: a fresh anonymous mapping no Rust object lives in, kept until exit.
    match unsafe { z.register_raw(p as u64, bytes as u64) } {
        Ok(()) => println!("ok"),
        Err(e) => println!("errno {}", e.raw_os_error().unwrap_or(0)),
    }
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(z);
    exit(0);
}

/// Tests between two kmemleak scans. A scan takes about 11 s on the debug
/// kernel in a 2 GiB guest: with 12 per group the scans alone were over
/// 2.5 minutes of `make check`'s 45; with 24, half of that.
const KMEMLEAK_GROUP: usize = 24;

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--child-refill") {
        share::child_refill();
    }
    if std::env::args().nth(1).as_deref() == Some("--child-copy-only") {
        let v: Vec<u64> = std::env::args().skip(2).filter_map(|a| a.parse().ok()).collect();
        if v.len() != 2 {
            usage();
        }
        copyonly::child_copy_only(v[0] as u16, v[1]);
    }
    if std::env::args().nth(1).as_deref() == Some("--child-register") {
        let v: Vec<u64> = std::env::args().skip(2).filter_map(|a| a.parse().ok()).collect();
        if v.len() != 2 {
            usage();
        }
        child_register(v[0] as usize, v[1]);
    }
    let Args {
        module,
        only,
        exclude,
        list,
        fail_fast,
        big_stream,
        scale_down,
        fuzz_seconds,
        fuzz_seed,
        soak_seconds,
        fuzz_net_seconds,
        fuzz_net_seed,
        fuzz_net_min_per_class,
    } = cliopt::parse("zcrx-selftest", parse_args);
    let all = all_tests();
    // A name that matches no test is a typo that would run (or leave out)
    // something else than asked: refuse it.
    if let Some(bad) = only.iter().chain(&exclude).find(|o| !all.iter().any(|(n, _)| n == o)) {
        eprintln!("zcrx-selftest: no test named {bad:?} (--list lists them)");
        exit(2);
    }
    let tests: Vec<_> =
        all.into_iter().filter(|(n, _)| (only.is_empty() || only.iter().any(|o| o == n)) && !exclude.iter().any(|o| o == n)).collect();
    if list {
        for (n, _) in &tests {
            println!("{n}");
        }
        return;
    }
    let Some(module) = module else { usage() };
    let env = Env {
        module,
        big_stream,
        scale_down,
        fuzz_seconds,
        fuzz_seed,
        fuzz_net_seconds,
        fuzz_net_seed,
        fuzz_net_min_per_class,
        soak_seconds,
    };

    // kmemleak (the debug kernel): a scan after every KMEMLEAK_GROUP tests
    // and one at the end, each a result of its own, so a leak is reported
    // near the tests that made it.
    let kmemleak = common::kmemleak_present();
    let groups = if kmemleak { tests.len().div_ceil(KMEMLEAK_GROUP) } else { 0 };
    let mut k = Ktap::new(std::io::stdout(), tests.len() + groups);
    if !exclude.is_empty() {
        k.diag(&format!("not run here (--exclude): {}", exclude.join(" ")));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        k.diag("not root: module and device tests need CAP_SYS_MODULE and CAP_NET_ADMIN");
    }
    // Every receiver here follows the sizing rule (Documentation/zcrx-rs.rst,
    // "Sizing the area"): its area holds more buffers than its sockets can.
    // TCP charges each 4 KiB buffer in a socket's queues in full, so a socket
    // holds up to tcp_rmem[2] / 4 KiB buffers; 7.2 lets it autotune to 32 MiB
    // (13 MiB in a 2 GiB guest), more than the 16 MiB areas of several tests.
    // With more, netdevsim's drops (dry pool) can leave the out-of-order
    // queue holding every buffer while the segment that fills its hole finds
    // none: the flow stalls for good (seen in soak_streams_restarts_rebinds).
    // 4 MiB per socket keeps every test inside the rule.
    match std::fs::write("/proc/sys/net/ipv4/tcp_rmem", "4096 131072 4194304") {
        Ok(()) => k.diag("tcp_rmem 4096 131072 4194304: every area here exceeds what its sockets can hold"),
        Err(e) => k.diag(&format!("cannot set tcp_rmem ({e}): small-area tests may stall")),
    }
    match common::foll_pins() {
        Ok(p) => {
            let _ = common::FOLL_PIN_BASE.set(std::sync::atomic::AtomicI64::new(p));
            k.diag(&format!("FOLL_PIN pages pinned before the first test: {p} (wait_idle expects them back, within 256)"));
        }
        Err(e) => k.diag(&format!("{e}: pinned pages are checked through the module's counters only")),
    }
    let count = tests.len();
    let mut first = 0;
    // Every test here takes a minute at most on the debug kernel, plus the
    // time it is told to run: five minutes more is a hang
    // (ZCRX_TEST_BUDGET=SECONDS sets another budget).
    let budget = std::env::var("ZCRX_TEST_BUDGET").ok().map(|v| {
        v.parse::<u64>().unwrap_or_else(|_| {
            eprintln!("zcrx-selftest: ZCRX_TEST_BUDGET={v:?}: not a number of seconds");
            exit(2)
        })
    });
    let budget = std::time::Duration::from_secs(budget.unwrap_or(300 + env.fuzz_seconds + env.fuzz_net_seconds + env.soak_seconds));
    let dog = watchdog::Watchdog::start();
    for (i, (name, f)) in tests.into_iter().enumerate() {
        let t0 = std::time::Instant::now();
        dog.start_test(name, budget, k.next_number());
        let o = f(&env);
        dog.done();
        k.diag(&format!("{name}: {:.1} s", t0.elapsed().as_secs_f64()));
        k.result(name, &o);
        if fail_fast && matches!(o, Outcome::Fail(_)) {
            k.diag("--fail-fast: stopping at the first failed test");
            break;
        }
        if kmemleak && ((i + 1) % KMEMLEAK_GROUP == 0 || i + 1 == count) {
            let t0 = std::time::Instant::now();
            let o = common::kmemleak_scan(i + 1 == count);
            k.diag(&format!("kmemleak scan after tests {}-{}: {:.1} s", first + 1, i + 1, t0.elapsed().as_secs_f64()));
            k.result(&format!("kmemleak_after_{name}"), &o);
            first = i + 1;
        }
    }
    let (_, code) = k.finish();
    exit(code);
}
