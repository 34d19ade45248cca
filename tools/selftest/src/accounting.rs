// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! What an area costs and who pays: RLIMIT_MEMLOCK per user, and the
//! kernel memory of an area charged to the memory cgroup.

use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::{dev::page_size, Zcrx};

use crate::common::{ensure_loaded, wait_idle};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("memlock_limit_is_per_user", memlock_limit_is_per_user), ("area_kernel_memory_in_memcg", area_kernel_memory_in_memcg)];

/// A helper process registering an area as `nobody` (see
/// `--child-register` in main.rs); its first line says how it went.
struct Child {
    proc: std::process::Child,
    answer: String,
}

impl Child {
    fn spawn(bytes: usize, limit: u64) -> Result<Child, String> {
        use std::io::BufRead;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut proc = std::process::Command::new(exe)
            .args(["--child-register", &bytes.to_string(), &limit.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawn helper: {e}"))?;
        let mut answer = String::new();
        let out = proc.stdout.take().ok_or("no stdout")?;
        std::io::BufReader::new(out).read_line(&mut answer).map_err(|e| e.to_string())?;
        Ok(Child { proc, answer: answer.trim().to_string() })
    }

    fn pid(&self) -> String {
        self.proc.id().to_string()
    }

    fn end(mut self) -> Result<(), String> {
        drop(self.proc.stdin.take());
        self.proc.wait().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// Areas are charged like io_uring's pinned memory: to the user, against
/// RLIMIT_MEMLOCK, so two processes of one user cannot together pin more
/// than the limit; to the process's VmPin, not its VmLck.
fn memlock_limit_is_per_user(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let mib_ = 1usize << 20;
    let limit = 8u64 << 20;
    let c1 = tryo!(Child::spawn(6 * mib_, limit));
    if c1.answer != "ok" {
        return Fail(format!("first process, 6 MiB of 8: {}", c1.answer));
    }
    let (pin, lck) = (tryo!(crate::common::status_kb(&c1.pid(), "VmPin")), tryo!(crate::common::status_kb(&c1.pid(), "VmLck")));
    if pin != 6144 || lck != 0 {
        return Fail(format!("first process: VmPin {pin} kB, VmLck {lck} kB; expected 6144 and 0"));
    }
    let c2 = tryo!(Child::spawn(6 * mib_, limit));
    let second = c2.answer.clone();
    tryo!(c2.end());
    if second != format!("errno {}", libc::ENOMEM) {
        return Fail(format!("second process of the same user, 6 MiB more (12 of 8): {second}, expected ENOMEM"));
    }
    let c3 = tryo!(Child::spawn(2 * mib_, limit));
    if c3.answer != "ok" {
        return Fail(format!("third process, 2 MiB (8 of 8): {}", c3.answer));
    }
    // The first one's charge goes with it (its area had no binding, so it
    // is freed by the last close, at exit).
    tryo!(c1.end());
    let c4 = tryo!(Child::spawn(6 * mib_, limit));
    let fourth = c4.answer.clone();
    tryo!(c4.end());
    tryo!(c3.end());
    if fourth != "ok" {
        return Fail(format!("after the first process exited, 6 MiB (8 of 8): {fourth}"));
    }
    env.diag("nobody, RLIMIT_MEMLOCK 8 MiB: 6 MiB ok (VmPin 6144 kB, VmLck 0), another process 6 MiB ENOMEM, 2 MiB ok; after the first exits 6 MiB ok");
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A field of a cgroup's `memory.stat`, in bytes.
fn memcg_stat(cg: &str, field: &str) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("{cg}/memory.stat")).map_err(|e| format!("{cg}/memory.stat: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
        .ok_or(format!("no {field} in {cg}/memory.stat"))
}

fn write_file(path: &str, what: &str) -> Result<(), String> {
    std::fs::write(path, what).map_err(|e| format!("write {what:?} to {path}: {e}"))
}

/// The module's own arrays for an area (net_iovs, counts, free list, page
/// vector) are charged to the caller's memory cgroup (GFP_KERNEL_ACCOUNT),
/// as io_uring's are: a container cannot hide tens of MiB of kernel memory
/// per GiB of area from its limit.
fn area_kernel_memory_in_memcg(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let root = "/sys/fs/cgroup";
    if !std::path::Path::new(&format!("{root}/cgroup.controllers")).exists() {
        let _ = std::fs::create_dir_all(root);
        let (src, dst, ty) = (c"none", c"/sys/fs/cgroup", c"cgroup2");
        // SAFETY: valid NUL-terminated strings; mounting cgroup2 in the VM.
        if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), ty.as_ptr(), 0, std::ptr::null()) } != 0 {
            return Fail(format!("mount cgroup2: {}", std::io::Error::last_os_error()));
        }
    }
    tryo!(write_file(&format!("{root}/cgroup.subtree_control"), "+memory"));
    let cg = format!("{root}/zcrx-selftest");
    let _ = std::fs::create_dir(&cg);
    let me = std::process::id().to_string();
    tryo!(write_file(&format!("{cg}/cgroup.procs"), &me));
    let r = (|| -> Result<(u64, u64, usize), String> {
        let area = 256usize << 20;
        let nbufs = area / page_size();
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        let k0 = memcg_stat(&cg, "kernel")?;
        z.register_area(area).map_err(|e| format!("register: {e}"))?;
        let k1 = memcg_stat(&cg, "kernel")?;
        drop(z);
        let k2 = memcg_stat(&cg, "kernel")?;
        Ok((k1.saturating_sub(k0), k1.saturating_sub(k2), nbufs))
    })();
    // Back to the root group, whatever happened.
    let back = write_file(&format!("{root}/cgroup.procs"), &me);
    let _ = std::fs::remove_dir(&cg);
    let (charged, uncharged, nbufs) = tryo!(r);
    tryo!(back);
    env.diag(&format!(
        "256 MiB area ({nbufs} buffers): the cgroup's kernel memory grew {} KiB ({} bytes per buffer), fell {} KiB at close",
        charged >> 10,
        charged / nbufs as u64,
        uncharged >> 10
    ));
    // The net_iov array alone is 40+ bytes per buffer.
    if charged < 40 * nbufs as u64 {
        return Fail(format!("only {charged} bytes of kernel memory charged for {nbufs} buffers"));
    }
    if uncharged * 10 < charged * 9 {
        return Fail(format!("{charged} bytes charged, only {uncharged} uncharged at close"));
    }
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
