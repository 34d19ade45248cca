// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Copy-only contexts (`ZCRX_RS_BIND_NODEV`): an area and no queue. RECV
//! then works on any TCP socket and copies every byte into the area, so a
//! program written for zcrx-rs runs on any path; binding needs no
//! privilege because no queue's traffic is involved.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{exit, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::{Pattern, Zcrx};

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::net::{addr_a, join, receive, sender, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("copy_only_on_loopback_unprivileged", copy_only_on_loopback_unprivileged),
    ("copy_only_on_unbound_netdevsim_queue", copy_only_on_unbound_netdevsim_queue),
    ("unregister_waits_for_running_recv", unregister_waits_for_running_recv),
];

/// `--child-copy-only PORT SEED`: opens `/dev/zcrx` as root, then becomes
/// `nobody` (no capabilities, `RLIMIT_MEMLOCK` 8 MiB), registers a 4 MiB
/// area, checks that binding loopback's queue 0 is refused (`EPERM`), makes
/// the context copy-only, listens on 127.0.0.1:PORT and prints
/// `listening`; then receives one connection to its end, checking every
/// byte against pattern SEED, and prints `ok BYTES ZC COPY COPY_RECORDS
/// STATS_COPY STATS_ZC` (or `error ...`).
pub fn child_copy_only(port: u16, seed: u64) -> ! {
    let fail = |what: &str| -> ! {
        println!("error {what}");
        exit(1)
    };
    let mut z = Zcrx::open().unwrap_or_else(|e| fail(&format!("open /dev/zcrx: {e}")));
    if let Err(e) = crate::become_nobody(8 << 20) {
        fail(&format!("drop privileges: {e}"));
    }
    z.register_area(4 << 20).unwrap_or_else(|e| fail(&format!("register 4 MiB as nobody: {e}")));
    let lo = zcrx::sys::ifindex("lo").unwrap_or_else(|e| fail(&format!("ifindex lo: {e}")));
    match z.bind(lo, 0, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        other => fail(&format!("BIND to a queue as nobody: {other:?}, expected EPERM")),
    }
    z.bind_nodev(0).unwrap_or_else(|e| fail(&format!("BIND NODEV as nobody: {e}")));
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap_or_else(|e| fail(&format!("listen: {e}")));
    println!("listening");
    let _ = std::io::stdout().flush();
    let (s, _) = l.accept().unwrap_or_else(|e| fail(&format!("accept: {e}")));
    let rx = receive(&mut z, &s, &Pattern::new(seed), None).unwrap_or_else(|e| fail(&e));
    let st = z.stats().unwrap_or_else(|e| fail(&format!("stats: {e}")));
    println!("ok {} {} {} {} {} {}", rx.bytes, rx.zc_bytes, rx.copy_bytes, rx.records, st.copy_bytes, st.zc_bytes);
    exit(0);
}

/// A copy-only context made by `nobody` receives a loopback stream: every
/// byte right, every byte flagged as copied, the module's counters agree;
/// binding a queue as `nobody` is refused.
fn copy_only_on_loopback_unprivileged(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let port = 7120u16;
    let seed = 120u64;
    let bytes = env.bytes(32 << 20);
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let child = Command::new(exe)
        .args(["--child-copy-only", &port.to_string(), &seed.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn();
    let mut child = tryo!(child.map_err(|e| format!("spawn helper: {e}")));
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    tryo!(out.read_line(&mut line).map_err(|e| e.to_string()));
    if line.trim() != "listening" {
        let _ = child.kill();
        let _ = child.wait();
        return Fail(format!("helper: {}", line.trim()));
    }
    let pat = Pattern::new(seed);
    let sent = (|| -> Result<(), String> {
        let to = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut s = TcpStream::connect(to).map_err(|e| format!("connect {to}: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let mut off = 0u64;
        while off < bytes {
            let n = ((bytes - off) as usize).min(256 << 10);
            s.write_all(pat.slice(off, n)).map_err(|e| format!("send at {off}: {e}"))?;
            off += n as u64;
        }
        Ok(())
    })();
    line.clear();
    let read = out.read_line(&mut line);
    let _ = child.wait();
    tryo!(sent);
    tryo!(read.map_err(|e| e.to_string()));
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if !line.starts_with("ok ") || v.len() != 6 {
        return Fail(format!("helper: {}", line.trim()));
    }
    let (got, zc, copy, records, st_copy, st_zc) = (v[0], v[1], v[2], v[3], v[4], v[5]);
    env.diag(&format!(
        "nobody, copy-only context on loopback: {} byte-exact in {records} records, zero-copy {}, copied {} \
         (module: copy {} zc {}); BIND to lo queue 0 as nobody: EPERM",
        mib(got),
        mib(zc),
        mib(copy),
        mib(st_copy),
        mib(st_zc)
    ));
    if got != bytes || copy != bytes || zc != 0 || st_copy != bytes || st_zc != 0 {
        return Fail(format!("expected {bytes} bytes, all copied; got {got} (zc {zc}, copy {copy})"));
    }
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// zcrx-nc `--no-bind` on a header-split netdevsim queue nobody bound:
/// the payload arrives byte-exact, all of it copied, and netdevsim DMA'd
/// nothing into provider memory (its pools hand out ordinary pages).
fn copy_only_on_unbound_netdevsim_queue(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let port = 7121u16;
    let seed = 121u64;
    let bytes = env.bytes(32 << 20);
    let before = tryo!(n.stats(1, 0));
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let nc = exe.with_file_name("zcrx-nc");
    let child = Command::new("ip")
        .args(["netns", "exec", NS_A])
        .arg(&nc)
        .args(["--no-bind", "--port", &port.to_string(), "--check", &seed.to_string(), "--area", "8", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let child = tryo!(child.map_err(|e| format!("spawn {}: {e}", nc.display())));
    let sent = join(sender(addr_a(true, port), bytes, Arc::new(Pattern::new(seed)), 0));
    let out = tryo!(child.wait_with_output().map_err(|e| e.to_string()));
    let err = String::from_utf8_lossy(&out.stderr);
    let sent = tryo!(sent.map_err(|e| format!("sender: {e}; zcrx-nc: {}", err.trim())));
    if !out.status.success() {
        return Fail(format!("zcrx-nc --no-bind: {}: {}", out.status, err.trim()));
    }
    let d = tryo!(n.stats(1, 0)).since(&before);
    let Some(json) = err.lines().find(|l| l.starts_with('{')) else {
        return Fail(format!("no JSON line from zcrx-nc: {}", err.trim()));
    };
    let field = |k: &str| -> Option<u64> {
        let v = json.split(&format!("\"{k}\":")).nth(1)?;
        v.split([',', '}']).next()?.trim().parse().ok()
    };
    let (Some(got), Some(zc), Some(copy)) = (field("bytes"), field("zero_copy_bytes"), field("copied_bytes")) else {
        return Fail(format!("unparsable JSON line: {json}"));
    };
    env.diag(&format!(
        "zcrx-nc --no-bind on netdevsim (header split on, no queue bound): {} byte-exact, zero-copy {}, copied {}; \
         netdevsim DMA'd {} into provider buffers",
        mib(got),
        mib(zc),
        mib(copy),
        mib(d.dma_bytes)
    ));
    if sent != bytes || got != bytes || copy != bytes || zc != 0 || d.dma_bytes != 0 {
        return Fail(format!("sent {sent} of {bytes}; zcrx-nc: {json}"));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// UNREGISTER_AREA refuses (`EBUSY`) while a RECV runs on the context: a
/// RECV blocked for data could otherwise hand out buffers of an area the
/// program was told is gone. Once the RECV returned and its buffer came
/// back, UNREGISTER_AREA succeeds and the module's area and pin counts
/// fall back. Loopback, copy-only: no device involved.
fn unregister_waits_for_running_recv(env: &Env) -> Outcome {
    use std::os::fd::AsRawFd;
    use zcrx::uapi::{zcrx_rs_recv, IOC_RECV};
    tryo!(ensure_loaded(env));
    let base = tryo!(crate::common::info());
    let mut z = tryo!(Zcrx::open().map_err(|e| format!("open: {e}")));
    tryo!(z.register_area(1 << 20).map_err(|e| format!("register: {e}")));
    tryo!(z.bind_nodev(0).map_err(|e| format!("bind nodev: {e}")));
    let l = tryo!(TcpListener::bind((Ipv4Addr::LOCALHOST, 7122)).map_err(|e| format!("listen: {e}")));
    let mut tx = tryo!(TcpStream::connect((Ipv4Addr::LOCALHOST, 7122)).map_err(|e| format!("connect: {e}")));
    let (rxs, _) = tryo!(l.accept().map_err(|e| format!("accept: {e}")));
    let fd = z.raw_fd();
    let sockfd = rxs.as_raw_fd();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let recv = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() });
        let mut recs = vec![zcrx::Rec::default(); 8];
        let mut r = zcrx_rs_recv { sockfd, recs: recs.as_mut_ptr() as u64, nr_recs: recs.len() as u32, ..Default::default() };
        // Blocks until the byte below arrives.
        let ret = zcrx::sys::ioctl(&fd, IOC_RECV as _, &mut r as *mut _ as usize);
        recs.truncate(r.nr_recs as usize);
        ret.map(|_| recs).map_err(|e| format!("RECV: {e}"))
    });
    let tid = tryo!(tid_rx.recv().map_err(|e| e.to_string()));
    // Wait (bounded by progress, not a deadline) until the thread sleeps in
    // the ioctl: /proc's syscall file then starts with ioctl's number.
    let path = format!("/proc/self/task/{tid}/syscall");
    let mut waited = 0;
    loop {
        let s = std::fs::read_to_string(&path).unwrap_or_default();
        if s.starts_with(&format!("{} ", libc::SYS_ioctl)) {
            break;
        }
        waited += 1;
        if waited > 60_000 {
            return Fail("the RECV thread never entered the ioctl".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let busy = z.unregister_area();
    tryo!(tx.write_all(b"x").map_err(|e| format!("send: {e}")));
    let recs = tryo!(recv.join().map_err(|_| "RECV thread panicked".to_string()));
    let recs = tryo!(recs);
    match busy {
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        other => return Fail(format!("UNREGISTER_AREA during a RECV: {other:?}, expected EBUSY")),
    }
    // SAFETY: what the thread's RECV on this context returned, not given
    // back yet, adopted once.
    unsafe { z.adopt(&recs) };
    if recs.len() != 1 || recs[0].len != 1 || z.data(&recs[0]) != b"x" {
        return Fail(format!("RECV returned {recs:?}, expected one copied byte 'x'"));
    }
    tryo!(z.refill(&recs).map_err(|e| format!("refill: {e}")));
    tryo!(z.unregister_area().map_err(|e| format!("UNREGISTER_AREA after the RECV returned: {e}")));
    let after = tryo!(crate::common::info());
    if after.areas != base.areas || after.pinned_pages != base.pinned_pages {
        return Fail(format!(
            "after UNREGISTER_AREA: areas {} pinned pages {}; before the test {} and {}",
            after.areas, after.pinned_pages, base.areas, base.pinned_pages
        ));
    }
    env.diag("UNREGISTER_AREA during a blocked RECV: EBUSY; after it returned (1 byte, copied) and the buffer came back: ok, areas and pinned pages back to where they were");
    Pass
}
