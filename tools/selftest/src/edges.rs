// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! uAPI edges: memory that must not become an area, ring mappings that must
//! be refused, one errno rule per case, STATS counting only what the user
//! got, and binding again after UNBIND.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::*;
use zcrx::{dev::page_size, Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, expect_errno, info, kick_softirqs, mib, wait_idle};
use crate::net::{addr_a, connect, in_netns, join, receive_flags, receive_from, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("area_refuses_odd_memory", area_refuses_odd_memory),
    ("ring_mmap_rules", ring_mmap_rules),
    ("errno_rules", errno_rules),
    ("stats_count_only_delivered", stats_count_only_delivered),
    ("merged_records_dropped_on_fault", merged_records_dropped_on_fault),
    ("unbind_then_bind_again", unbind_then_bind_again),
    ("bind_other_device_after_unbind", bind_other_device_after_unbind),
    ("unregister_then_register_another_area", unregister_then_register_another_area),
    ("socket_taken_over_while_waiting", socket_taken_over_while_waiting),
    ("ktls_takes_over_while_waiting", ktls_takes_over_while_waiting),
    ("ktls_on_zero_copy_queue", ktls_on_zero_copy_queue),
    ("raw_sockets_hold_buffers_until_closed", raw_sockets_hold_buffers_until_closed),
    ("ktls_record_header_readable_payload_not", ktls_record_header_readable_payload_not),
    ("ktls_copy_mode_refuses_provider_memory", ktls_copy_mode_refuses_provider_memory),
    ("memlock_limit_is_per_user", memlock_limit_is_per_user),
    ("area_kernel_memory_in_memcg", area_kernel_memory_in_memcg),
];

/// An mmap the test owns; unmapped on drop.
struct Map(*mut libc::c_void, usize);

impl Map {
    fn new(len: usize, prot: i32, flags: i32, fd: i32) -> Result<Map, String> {
        // SAFETY: a fresh mapping chosen by the kernel.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Map(p, len))
    }
    fn addr(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

fn memfd(len: usize) -> Result<i32, String> {
    let name = std::ffi::CString::new("zcrx-edges").unwrap();
    // SAFETY: a valid name; we own the new fd.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    // SAFETY: sizing our own memfd.
    if fd < 0 || unsafe { libc::ftruncate(fd, len as i64) } != 0 {
        return Err("memfd_create".into());
    }
    Ok(fd)
}

/// Memory that is not writable, not ordinary, or privately mapped from a
/// file is refused, with one errno per case, and nothing is left behind.
fn area_refuses_odd_memory(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let ps = page_size();
    let len = 4 * ps;
    let (rw, anon) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS);
    let z = tryo!(Zcrx::open().map_err(|e| e.to_string()));
    let mfd = tryo!(memfd(len));
    let cases: Vec<(&str, Map, i32)> = vec![
        ("read-only anonymous memory", tryo!(Map::new(len, libc::PROT_READ, anon, -1)), libc::EACCES),
        ("PROT_NONE anonymous memory", tryo!(Map::new(len, libc::PROT_NONE, anon, -1)), libc::EACCES),
        ("MAP_PRIVATE of a memfd", tryo!(Map::new(len, rw, libc::MAP_PRIVATE, mfd)), libc::EOPNOTSUPP),
        ("read-only MAP_SHARED memfd", tryo!(Map::new(len, libc::PROT_READ, libc::MAP_SHARED, mfd)), libc::EACCES),
    ];
    for (what, m, want) in &cases {
        // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
        tryo!(expect_errno(what, unsafe { z.register_raw(m.addr(), len as u64) }, *want));
    }
    // A range that starts in good memory and runs into bad: refused whole.
    let good = tryo!(Map::new(2 * len, rw, anon, -1));
    // SAFETY: making the second half of our own mapping read-only.
    unsafe { libc::mprotect((good.addr() as usize + len) as *mut _, len, libc::PROT_READ) };
    // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(expect_errno("writable memory running into read-only", unsafe { z.register_raw(good.addr(), 2 * len as u64) }, libc::EACCES));
    // What is allowed still is: private anonymous and a shared memfd.
    // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(Zcrx::open().and_then(|z2| unsafe { z2.register_raw(good.addr(), len as u64) }).map_err(|e| format!("anonymous: {e}")));
    let shared = tryo!(Map::new(len, rw, libc::MAP_SHARED, mfd));
    // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(Zcrx::open().and_then(|z2| unsafe { z2.register_raw(shared.addr(), len as u64) }).map_err(|e| format!("shared memfd: {e}")));
    // A private map of /dev/zero is anonymous memory (no vm_ops), though
    // it has a file.
    let zero = tryo!(std::fs::OpenOptions::new().read(true).write(true).open("/dev/zero").map_err(|e| e.to_string()));
    let zmap = tryo!(Map::new(len, rw, libc::MAP_PRIVATE, zero.as_raw_fd()));
    // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(Zcrx::open()
        .and_then(|z2| unsafe { z2.register_raw(zmap.addr(), len as u64) })
        .map_err(|e| format!("MAP_PRIVATE /dev/zero: {e}")));
    let st = tryo!(z.stats().map_err(|e| e.to_string()));
    if st.area_buffers != 0 {
        return Fail(format!("an area of {} buffers exists after only refusals", st.area_buffers));
    }
    env.diag(&format!(
        "{} refusals, each with its documented errno; anonymous, shared memfd and private /dev/zero memory accepted",
        cases.len() + 1
    ));
    drop(cases);
    drop(z);
    // SAFETY: our fd.
    unsafe { libc::close(mfd) };
    tryo!(wait_idle(Duration::from_secs(5)));
    Pass
}

/// The refill ring maps only shared, from offset 0, and is never an area.
fn ring_mmap_rules(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let ps = page_size();
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * ps).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 64).map_err(|e| e.to_string())?;
        let fd = z.raw_fd();
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        expect_errno(
            "MAP_PRIVATE of the ring",
            Map::new(ps, rw, libc::MAP_PRIVATE, fd).map_err(|_| std::io::Error::last_os_error()),
            libc::EINVAL,
        )?;
        // SAFETY: an mmap at a non-zero offset that must fail.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), ps, rw, libc::MAP_SHARED, fd, ps as i64) };
        if p != libc::MAP_FAILED {
            return Err("mmap of the ring at offset 4096 succeeded".into());
        }
        // The ring's own mapping (kernel memory) offered as an area, to
        // this context's sibling: refused, never received into.
        let (addr, len) = z.ring_mapping().ok_or("no ring mapping")?;
        let z2 = Zcrx::open().map_err(|e| e.to_string())?;
        // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
        expect_errno("a refill ring as an area", unsafe { z2.register_raw(addr, len as u64) }, libc::EOPNOTSUPP)?;
        // A second shared mapping of the ring is fine (and is no area either).
        let m = Map::new(ps, rw, libc::MAP_SHARED, fd)?;
        // SAFETY: the range is our own mapping that no Rust object lives in (or one the module refuses); the context is never bound and never receives, so nothing writes it.
        expect_errno("a second ring mapping as an area", unsafe { z2.register_raw(m.addr(), ps as u64) }, libc::EOPNOTSUPP)?;
        Ok(())
    });
    tryo!(join(h));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// One errno per case: a NULL record array is EFAULT (like recv() with a
/// NULL buffer), UNBIND of a context that is not bound is EINVAL every time.
fn errno_rules(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        expect_errno("UNBIND, never bound", z.unbind(), libc::EINVAL)?;
        z.bind(a_idx, 0, 64).map_err(|e| e.to_string())?;
        let mut r = zcrx_rs_recv { sockfd: 0, nr_recs: 4, recs: 0, ..Default::default() };
        expect_errno("RECV with recs = NULL", zcrx::sys::ioctl(&z.raw_fd(), IOC_RECV as _, &mut r as *mut _ as usize), libc::EFAULT)?;
        z.unbind().map_err(|e| format!("UNBIND: {e}"))?;
        expect_errno("second UNBIND", z.unbind(), libc::EINVAL)?;
        expect_errno("third UNBIND", z.unbind(), libc::EINVAL)?;
        Ok(())
    });
    tryo!(join(h));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A RECV whose records cannot be written (a read-only record array) fails
/// with EFAULT, leaves the data in the socket and adds nothing to STATS;
/// STATS then matches exactly what the records delivered.
fn stats_count_only_delivered(env: &Env) -> Outcome {
    faulted_recvs_then_stream(env, 7301, None, 0)
}

/// [`stats_count_only_delivered`] with `ZCRX_RS_RECV_MERGE` at an MTU where
/// each segment fills a 4 KiB buffer: the records that could not be written
/// are merged ones, and giving them back must return every buffer they
/// hold (the user holds none after the failed calls).
fn merged_records_dropped_on_fault(env: &Env) -> Outcome {
    faulted_recvs_then_stream(env, 7308, Some(4096 + 72), ZCRX_RS_RECV_MERGE)
}

fn faulted_recvs_then_stream(env: &Env, port: u16, mtu: Option<u32>, flags: u32) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    if let Some(m) = mtu {
        tryo!(n.mtu(m));
    }
    let a_idx = n.a_idx;
    let bytes = env.bytes(8 << 20);
    let pat = Arc::new(Pattern::new(4242));
    let p2 = pat.clone();
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(8 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // Wait for data, then receive into a read-only record array.
        let ro = Map::new(page_size(), libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
        let mut faults = 0;
        for _ in 0..3 {
            let mut r = zcrx_rs_recv { sockfd: s.as_raw_fd(), flags, nr_recs: 64, recs: ro.addr(), ..Default::default() };
            expect_errno(
                "RECV into a read-only record array",
                zcrx::sys::ioctl(&z.raw_fd(), IOC_RECV as _, &mut r as *mut _ as usize),
                libc::EFAULT,
            )?;
            faults += 1;
        }
        let st = z.stats().map_err(|e| e.to_string())?;
        if st.zc_bytes + st.copy_bytes != 0 || st.zc_records + st.copy_records != 0 || st.user_held != 0 {
            return Err(format!(
                "after {faults} failed RECVs STATS says zc {} B/{} recs, copy {} B/{} recs, user holds {}",
                st.zc_bytes, st.zc_records, st.copy_bytes, st.copy_records, st.user_held
            ));
        }
        let rx = receive_flags(&mut z, &s, &p2, 0, None, flags)?;
        let st = z.stats().map_err(|e| e.to_string())?;
        Ok((rx, st))
    });
    let tx = in_netns(NS_B, move || {
        let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
        let mut off = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        while off < bytes {
            let k = (bytes - off).min(buf.len() as u64) as usize;
            pat.fill(off, &mut buf[..k]);
            c.write_all(&buf[..k]).map_err(|e| format!("send: {e}"))?;
            off += k as u64;
        }
        Ok::<_, String>(off)
    });
    let sent = join(tx);
    let (rx, st) = tryo!(join(rx));
    let sent = tryo!(sent);
    if rx.bytes != sent {
        return Fail(format!("received {} of {sent} bytes", rx.bytes));
    }
    if st.zc_bytes != rx.zc_bytes || st.copy_bytes != rx.copy_bytes || st.zc_records + st.copy_records != rx.records {
        return Fail(format!(
            "STATS zc {} copy {} in {} records; the records delivered zc {} copy {} in {}",
            st.zc_bytes,
            st.copy_bytes,
            st.zc_records + st.copy_records,
            rx.zc_bytes,
            rx.copy_bytes,
            rx.records
        ));
    }
    // Header split on the bound queue: the stream after the faults is
    // all zero-copy (what the faulted calls left in the socket included).
    if rx.copy_bytes != 0 || rx.zc_bytes != rx.bytes {
        return Fail(format!("{} of {} bytes copied: all must be zero-copy", rx.copy_bytes, rx.bytes));
    }
    if flags & ZCRX_RS_RECV_MERGE != 0 && rx.merged == 0 {
        return Fail(format!("{} records for {} buffers: nothing merged", rx.records, rx.zc_bufs));
    }
    env.diag(&tryo!(log.check(0, rx.zc_bytes)));
    drop(log);
    env.diag(&format!(
        "3 RECVs into a read-only array{}: EFAULT, STATS unchanged, the user holds no buffer; then {} byte-exact, \
         zero-copy {} copied {} in {} records ({} spanning several buffers), STATS equal",
        if flags & ZCRX_RS_RECV_MERGE != 0 { " with ZCRX_RS_RECV_MERGE" } else { "" },
        mib(rx.bytes),
        mib(rx.zc_bytes),
        mib(rx.copy_bytes),
        rx.records,
        rx.merged
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Re-register without reopening (`ZCRX_RS_IOC_UNREGISTER_AREA`, feature
/// bit in INFO): a 4 MiB area streams zero-copy with some buffers kept;
/// UNREGISTER answers EBUSY while bound and while the user holds buffers,
/// then (buffers back, the old pools drained) gives the area up: INFO shows
/// it gone and EINVAL for a second UNREGISTER or a BIND without an area.
/// An 8 MiB area registered on the same context then streams zero-copy.
fn unregister_then_register_another_area(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let i0 = tryo!(info());
    if i0.features & u64::from(ZCRX_RS_FEATURE_UNREGISTER_AREA) == 0 {
        return Fail(format!("INFO features {:#x} lack ZCRX_RS_FEATURE_UNREGISTER_AREA", i0.features));
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let part = env.bytes(8 << 20);
    let pats = [Arc::new(Pattern::new(881)), Arc::new(Pattern::new(882))];
    let port = 7304;
    let p2 = pats.clone();
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let mut lines = Vec::new();
        let mut zc = 0u64;
        for (phase, area) in [(0usize, 4usize << 20), (1, 8 << 20)] {
            z.register_area(area).map_err(|e| format!("phase {phase}: register {}: {e}", mib(area as u64)))?;
            z.bind(a_idx, 0, 0).map_err(|e| format!("phase {phase}: bind: {e}"))?;
            let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            // Keep the first records out.
            let mut recs = vec![Rec::default(); 8];
            let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("phase {phase}: RECV: {e}"))?;
            let mut got = 0u64;
            for r in &recs[..first.records] {
                if let Some(bad) = p2[phase].check(got, z.data(r)) {
                    return Err(format!("phase {phase}: payload mismatch at {bad}"));
                }
                if r.flags & ZCRX_RS_REC_COPY == 0 {
                    crate::devlog::note(z.data(r))?;
                }
                got += u64::from(r.len);
            }
            let held = recs[..first.records].to_vec();
            let rx = receive_from(&mut z, &s, &p2[phase], got, None)?;
            // Every byte zero-copy, the records kept out too.
            let first_copied = recs[..first.records].iter().any(|r| r.flags & ZCRX_RS_REC_COPY != 0);
            if got + rx.bytes != part || rx.zc_bytes != rx.bytes || first_copied {
                return Err(format!(
                    "phase {phase}: {} of {part} bytes, {} of the last {} zero-copy, first records copied: {first_copied}",
                    got + rx.bytes,
                    rx.zc_bytes,
                    rx.bytes
                ));
            }
            zc += rx.zc_bytes + first.bytes;
            lines.push(format!("area {}: {} byte-exact, {} zero-copy", mib(area as u64), mib(part), mib(rx.zc_bytes + first.bytes)));
            drop(s);
            if phase == 1 {
                z.refill(&held).map_err(|e| e.to_string())?;
                break;
            }
            let busy = |what: &str, r: std::io::Result<()>| match r {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
                other => Err(format!("UNREGISTER {what}: {other:?}, expected EBUSY")),
            };
            busy("while bound", z.unregister_area())?;
            z.unbind().map_err(|e| format!("unbind: {e}"))?;
            busy(&format!("with {} records held", held.len()), z.unregister_area())?;
            z.refill(&held).map_err(|e| e.to_string())?;
            // The old pools give their buffers back as they go (a bound, not
            // a deadline).
            let t0 = std::time::Instant::now();
            let mut tries = 0;
            loop {
                tries += 1;
                match z.unregister_area() {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < Duration::from_secs(60) => {
                        kick_softirqs();
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(format!("UNREGISTER after UNBIND and refill: {e} ({tries} tries)")),
                }
            }
            let mut raw = Zcrx::open().map_err(|e| e.to_string())?;
            let again = z.unregister_area();
            if again.as_ref().err().and_then(|e| e.raw_os_error()) != Some(libc::EINVAL) {
                return Err(format!("a second UNREGISTER: {again:?}, expected EINVAL"));
            }
            if raw.bind(a_idx, 0, 0).err().and_then(|e| e.raw_os_error()) != Some(libc::EINVAL) {
                return Err("BIND without an area did not answer EINVAL".into());
            }
            drop(raw);
            lines.push(format!("UNREGISTER: EBUSY while bound and while holding, ok after refill ({tries} tries)"));
        }
        Ok((lines, zc))
    });
    let tx = in_netns(NS_B, move || {
        for pat in &pats {
            let mut s = connect(addr_a(true, port), Duration::from_secs(60))?;
            let mut go = [0u8];
            std::io::Read::read_exact(&mut s, &mut go).map_err(|e| format!("go: {e}"))?;
            let mut off = 0;
            while off < part {
                let k = ((part - off) as usize).min(256 << 10);
                s.write_all(pat.slice(off, k)).map_err(|e| format!("send: {e}"))?;
                off += k as u64;
            }
        }
        Ok(())
    });
    let sent = join(tx);
    let (lines, zc) = tryo!(join(rx));
    tryo!(sent);
    env.diag(&lines.join("; "));
    // Both areas' records in writes netdevsim logged (the second area
    // may reuse the first one's pages: each buffer's writes in order).
    env.diag(&tryo!(log.check(0, zc)));
    drop(log);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}

/// UNBIND, then BIND again — the same queue and the other one — with
/// buffers still held from the first binding: every stream byte-exact and
/// all of it zero-copy on each binding (each record in a write netdevsim
/// logged on one of the two queues, each queue's logged bytes equal to its
/// counter), the held buffers go back through the new ring, and everything
/// is released at the end.
fn unbind_then_bind_again(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    // Two queues; each phase has its own connection and port, which an
    // ntuple rule steers to the queue bound in that phase. (XPS alone, the
    // sender pinned to CPU q, put 0.2-0.5 MiB of each 8 MiB phase on the
    // other queue, where it could only be copied: a retransmission or an
    // ACK-clocked send from another CPU's softirq takes its tx queue.)
    let n = tryo!(Nsim::up(2));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    const PHASES: [(u32, u32, u16); 3] = [(0, 0, 7302), (1, 0, 7310), (2, 1, 7311)];
    for (_, q, port) in PHASES {
        let (q, port) = (q.to_string(), port.to_string());
        tryo!(crate::net::ethtool_in(NS_A, &["-N", &n.a, "flow-type", "tcp6", "dst-port", &port, "action", &q]));
    }
    let before = [tryo!(n.stats(1, 0)), tryo!(n.stats(1, 1))];
    let log = tryo!(crate::devlog::DmaLog::start());
    let part = env.bytes(8 << 20);
    let pat = Arc::new(Pattern::new(777));
    let p2 = pat.clone();
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(16 << 20).map_err(|e| e.to_string())?;
        let ls = PHASES
            .iter()
            .map(|p| std::net::TcpListener::bind(("::", p.2)).map_err(|e| format!("listen on {}: {e}", p.2)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lines = Vec::new();
        let mut held: Vec<Rec> = Vec::new();
        let mut zc = 0u64;
        // Phase p: bind queue q, accept the connection to its port (steered
        // to q), receive `part`.
        for ((phase, q, _), l) in PHASES.into_iter().zip(&ls) {
            z.bind(a_idx, q, 0).map_err(|e| format!("phase {phase}: BIND queue {q}: {e}"))?;
            if !held.is_empty() {
                // Buffers of the earlier binding go back through this ring.
                z.refill(&held).map_err(|e| format!("refill held: {e}"))?;
                held.clear();
            }
            let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            // Bound and ready: tell the sender to start.
            s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            let before = z.stats().map_err(|e| e.to_string())?;
            // Keep a few buffers of this phase out until the next binding.
            let mut recs = vec![Rec::default(); 8];
            let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("phase {phase}: first RECV: {e}"))?;
            let mut got = 0u64;
            for r in &recs[..first.records] {
                if let Some(bad) = p2.check(got, z.data(r)) {
                    return Err(format!("phase {phase}: payload mismatch at {bad}"));
                }
                if r.flags & ZCRX_RS_REC_COPY != 0 {
                    return Err(format!("phase {phase} (queue {q}): first records copied: all must be zero-copy"));
                }
                crate::devlog::note(z.data(r))?;
                got += u64::from(r.len);
            }
            held.extend_from_slice(&recs[..first.records]);
            let rx = receive_from(&mut z, &s, &p2, got, None)?;
            if got + rx.bytes != part {
                return Err(format!("phase {phase}: received {} of {part} bytes", got + rx.bytes));
            }
            let st = z.stats().map_err(|e| e.to_string())?;
            // The flow steered to the bound queue, header split on: nothing
            // may be copied.
            if rx.copy_bytes != 0 {
                return Err(format!("phase {phase} (queue {q}): {} bytes of {} copied: all must be zero-copy", rx.copy_bytes, mib(part)));
            }
            zc += got + rx.zc_bytes;
            lines.push(format!(
                "phase {phase}: queue {q}, {} byte-exact, all zero-copy (records); STATS zc {}, copied {}, pool ran \
                 dry {} times",
                mib(part),
                mib(st.zc_bytes.saturating_sub(before.zc_bytes)),
                mib(st.copy_bytes.saturating_sub(before.copy_bytes)),
                st.alloc_fail.saturating_sub(before.alloc_fail)
            ));
            drop(s);
            z.unbind().map_err(|e| format!("phase {phase}: UNBIND: {e}"))?;
        }
        // Give the last phase's held buffers back: with nothing bound the
        // ring is drained by the next copy RECV or at close; close now.
        let held_n = held.len();
        drop(z);
        lines.push(format!("{held_n} buffers still held at close, taken back by the close"));
        Ok((lines, zc))
    });
    let tx = in_netns(NS_B, move || {
        for (phase, q, port) in PHASES {
            // Send from CPU q too (XPS puts most of the flow on tx queue
            // q, netdevsim's peer rx queue q); the rule steers the rest.
            zcrx::sys::pin_to_cpu(q as usize).map_err(|e| format!("pin to CPU {q}: {e}"))?;
            let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
            let mut go = [0u8; 1];
            std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("phase {phase}: waiting for go: {e}"))?;
            let mut off = 0u64;
            let mut buf = vec![0u8; 64 << 10];
            while off < part {
                let k = (part - off).min(buf.len() as u64) as usize;
                pat.fill(off, &mut buf[..k]);
                c.write_all(&buf[..k]).map_err(|e| format!("send: {e}"))?;
                off += k as u64;
            }
            c.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            // Wait for the receiver to close before the next phase's bind.
            let mut b = [0u8; 1];
            let _ = std::io::Read::read(&mut c, &mut b);
        }
        Ok::<_, String>(())
    });
    let sent = join(tx);
    let (lines, zc) = tryo!(join(rx));
    tryo!(sent);
    for l in lines {
        env.diag(&l);
    }
    for q in 0..2 {
        let a = tryo!(n.stats(1, q));
        env.diag(&format!(
            "netdevsim rx queue {q}: DMA'd {} in {} packets, {} packets ({}) unsplit",
            mib(a.dma_bytes - before[q as usize].dma_bytes),
            a.dma_packets - before[q as usize].dma_packets,
            a.fallback_packets - before[q as usize].fallback_packets,
            mib(a.fallback_bytes - before[q as usize].fallback_bytes)
        ));
    }
    // Every zero-copy piece in a write netdevsim made on the queue bound
    // at the time (one area: either queue's writes may match).
    env.diag(&tryo!(log.check_queues(&[0, 1], zc)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Puts TCP socket `fd` into a new sockmap (no programs): the socket is
/// then read by `tcp_bpf_recvmsg`, no longer by TCP itself. Returns the
/// map's fd (the socket stays in the map while it is open).
fn sockmap_insert(fd: i32) -> Result<i32, String> {
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    const BPF_MAP_TYPE_SOCKMAP: u32 = 15;
    let mut attr = [0u8; 128];
    for (i, v) in [BPF_MAP_TYPE_SOCKMAP, 4, 4, 1].iter().enumerate() {
        attr[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: bpf(2) with a zero-padded attribute of the size given.
    let map = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_CREATE, attr.as_ptr(), attr.len()) };
    if map < 0 {
        return Err(format!("bpf(BPF_MAP_CREATE sockmap): {}", std::io::Error::last_os_error()));
    }
    let key = 0u32;
    let value = fd as u32;
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&(map as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(&key as *const u32 as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(&value as *const u32 as u64).to_ne_bytes());
    // SAFETY: as above; key and value outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, attr.as_ptr(), attr.len()) };
    if r < 0 {
        return Err(format!("bpf(BPF_MAP_UPDATE_ELEM sockmap): {}", std::io::Error::last_os_error()));
    }
    Ok(map as i32)
}

/// BIND `z` to queue 0 of `ifindex` in namespace `ns`, retrying while the
/// area is still mapped for the device of an earlier binding whose pool is
/// being torn down (EBUSY); the number of attempts.
fn bind_when_free(z: Zcrx, ns: &'static str, ifindex: u32) -> Result<(Zcrx, u32), String> {
    join(in_netns(ns, move || {
        let mut z = z;
        let t0 = std::time::Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match z.bind(ifindex, 0, 0) {
                Ok(()) => return Ok((z, tries)),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(format!("BIND in {ns} after {tries} tries: {e}")),
            }
        }
    }))
}

/// After UNBIND the area can serve another device: the earlier binding's
/// DMA share is given back at UNBIND (with the refill ring drained), and
/// the mapping goes once its last pool is gone. Device A with traffic (a
/// few buffers held across UNBIND and given back through the old ring
/// after it), then device B, then A again, one context and one area.
fn bind_other_device_after_unbind(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let (a_idx, b_idx) = (n.a_idx, n.b_idx);
    tryo!(join(in_netns(NS_B, move || { zcrx::ethtool::set_header_split(b_idx, true).map_err(|e| format!("header split on B: {e}")) })));
    let bytes = 1u64 << 20;
    let pat = Arc::new(Pattern::new(31337));
    let p2 = pat.clone();
    let port = 7307;
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("BIND A: {e}"))?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // Hold the first records' buffers across UNBIND.
        let mut recs = vec![Rec::default(); 8];
        let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("first RECV: {e}"))?;
        let mut off = 0u64;
        for r in &recs[..first.records] {
            if let Some(bad) = p2.check(off, z.data(r)) {
                return Err(format!("payload mismatch at {bad}"));
            }
            if r.flags & ZCRX_RS_REC_COPY == 0 {
                crate::devlog::note(z.data(r))?;
            }
            off += u64::from(r.len);
        }
        let mut got = receive_from(&mut z, &s, &p2, off, None)?;
        // One queue, bound, header split on: every byte zero-copy, the
        // records held across UNBIND too.
        let first_copied = recs[..first.records].iter().any(|r| r.flags & ZCRX_RS_REC_COPY != 0);
        if got.copy_bytes != 0 || first_copied {
            return Err(format!(
                "device A: {} bytes copied after the first records (which were copied: {first_copied}): all must be zero-copy",
                got.copy_bytes
            ));
        }
        got.bytes += off;
        got.zc_bytes += off;
        drop(s);
        z.unbind().map_err(|e| format!("UNBIND A: {e}"))?;
        // Give them back through the old ring: the next BIND takes them.
        z.refill(&recs[..first.records]).map_err(|e| format!("refill after UNBIND: {e}"))?;
        Ok((z, got))
    });
    let tx = crate::net::sender(addr_a(true, port), bytes, pat, 0);
    let sent = join(tx);
    let (z, got) = tryo!(join(rx));
    let sent = tryo!(sent);
    if got.bytes != sent || got.zc_bytes != got.bytes {
        return Fail(format!("device A: received {} of {sent} bytes, {} zero-copy", got.bytes, got.zc_bytes));
    }
    // Every record on A in a write netdevsim 1 logged.
    env.diag(&tryo!(log.check(0, got.zc_bytes)));
    drop(log);
    let (z, tries_b) = tryo!(bind_when_free(z, NS_B, b_idx));
    tryo!(join(in_netns(NS_B, move || {
        let z = z;
        let r = z.unbind().map_err(|e| format!("UNBIND B: {e}"));
        r.map(|()| z)
    }))
    .and_then(|z| bind_when_free(z, NS_A, a_idx))
    .map(|(z, tries_a)| {
        env.diag(&format!(
            "{} byte-exact on A ({} zero-copy), unbound; bound B after {tries_b} tries, unbound; A again after \
             {tries_a} tries",
            mib(got.bytes),
            mib(got.zc_bytes)
        ));
        drop(z);
    }));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Who takes the socket away from zcrx-rs while a RECV sleeps.
#[derive(Clone, Copy, PartialEq)]
enum Taker {
    /// A BPF sockmap (its own recvmsg, the queue read by the psock).
    Sockmap,
    /// Kernel TLS: the `tls` ULP and a TLS_RX key; the peer switches to
    /// kTLS TX after the go byte, so the rest of the stream is TLS records.
    Ktls,
}

/// The AES-GCM-128 key both ends of a kTLS test use
/// (`struct tls12_crypto_info_aes_gcm_128`).
#[repr(C)]
struct TlsAesGcm128 {
    version: u16,
    cipher_type: u16,
    iv: [u8; 8],
    key: [u8; 16],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

/// TLS 1.2 and 1.3 (`TLS_1_2_VERSION`, `TLS_1_3_VERSION`).
pub(crate) const TLS12: u16 = 0x0303;
pub(crate) const TLS13: u16 = 0x0304;

/// Installs the `tls` ULP on `fd` (once per socket) and a fixed
/// AES-GCM-128 key of TLS `version` for `dir` (`TLS_TX` = 1 or `TLS_RX` = 2).
pub(crate) fn ktls(fd: i32, dir: i32, version: u16) -> Result<(), String> {
    const TCP_ULP: i32 = 31;
    const SOL_TLS: i32 = 282;
    let ulp = b"tls";
    // SAFETY: setsockopt with a buffer of the length given.
    let r = unsafe { libc::setsockopt(fd, libc::IPPROTO_TCP, TCP_ULP, ulp.as_ptr().cast(), ulp.len() as u32) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(format!("setsockopt(TCP_ULP, \"tls\"): {e}"));
        }
    }
    let ci = TlsAesGcm128 { version, cipher_type: 51, iv: *b"zcrx-iv!", key: *b"zcrx-rs test key", salt: *b"salt", rec_seq: [0; 8] };
    // SAFETY: as above; `ci` is the struct the kernel expects for this cipher.
    let r = unsafe { libc::setsockopt(fd, SOL_TLS, dir, (&ci as *const TlsAesGcm128).cast(), size_of::<TlsAesGcm128>() as u32) };
    if r < 0 {
        return Err(format!("setsockopt(SOL_TLS, {}): {}", if dir == 1 { "TLS_TX" } else { "TLS_RX" }, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// An upper layer takes the socket over (a sockmap, or kTLS) while a RECV
/// sleeps with the lock released: the RECV returns EPROTONOSUPPORT instead
/// of reading a queue it no longer owns, later RECVs are refused at once,
/// and the stream continues byte-exact through recv() from where RECV
/// stopped.
fn socket_taken_over_while_waiting(env: &Env) -> Outcome {
    taken_over(env, Taker::Sockmap)
}

/// As [`socket_taken_over_while_waiting`], with kernel TLS as the taker.
fn ktls_takes_over_while_waiting(env: &Env) -> Outcome {
    taken_over(env, Taker::Ktls)
}

fn taken_over(env: &Env, how: Taker) -> Outcome {
    tryo!(ensure_loaded(env));
    // All of the sender's traffic on queue 0 (XPS, whatever CPU sends),
    // and we bind queue 1: the data stays readable, so recv() can take over
    // after the switch.
    let n = tryo!(Nsim::up_steered(2, Some(0)));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let part1 = 256u64 << 10;
    let part2 = 1u64 << 20;
    let pat = Arc::new(Pattern::new(9090));
    let p2 = pat.clone();
    let port = 7303;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 1, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        let mut got = 0u64;
        let mut recs = vec![Rec::default(); 64];
        while got < part1 {
            let r = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("RECV at {got}: {e}"))?;
            if r.bytes == 0 {
                return Err(format!("EOF at {got}"));
            }
            for rec in &recs[..r.records] {
                if let Some(bad) = p2.check(got, z.data(rec)) {
                    return Err(format!("payload mismatch at {bad}"));
                }
                got += u64::from(rec.len);
            }
            z.refill(&recs[..r.records]).map_err(|e| e.to_string())?;
        }
        if got != part1 {
            return Err(format!("RECV got {got} bytes, the sender sent {part1} before waiting"));
        }
        // While the next RECV sleeps: take the socket over, then let the
        // sender go on.
        let fd = s.as_raw_fd();
        let mut s2 = s.try_clone().map_err(|e| e.to_string())?;
        let me = crate::common::gettid();
        let taker = std::thread::spawn(move || -> Result<i32, String> {
            crate::common::wait_sleeping_in(me, libc::SYS_ioctl, Duration::from_secs(20))?;
            let map = match how {
                Taker::Sockmap => sockmap_insert(fd)?,
                Taker::Ktls => {
                    ktls(fd, 2, TLS12)?;
                    -1
                }
            };
            s2.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            Ok(map)
        });
        let waited = z.recv(s.as_raw_fd(), &mut recs, 0);
        let map = taker.join().map_err(|_| "taker panicked".to_string())??;
        expect_errno("RECV whose socket was taken over while it slept", waited, libc::EPROTONOSUPPORT)?;
        expect_errno("RECV on a taken-over socket", z.recv(s.as_raw_fd(), &mut recs, 0), libc::EPROTONOSUPPORT)?;
        // Nothing was lost or read twice: recv() continues at `part1`.
        let mut buf = vec![0u8; 64 << 10];
        let mut off = part1;
        loop {
            let k = std::io::Read::read(&mut s, &mut buf).map_err(|e| format!("recv() at {off}: {e}"))?;
            if k == 0 {
                break;
            }
            if let Some(bad) = p2.check(off, &buf[..k]) {
                return Err(format!("recv() after the switch: mismatch at {bad}"));
            }
            off += k as u64;
        }
        if map >= 0 {
            // SAFETY: our map fd.
            unsafe { libc::close(map) };
        }
        Ok(off)
    });
    let tx = in_netns(NS_B, move || {
        zcrx::sys::pin_to_cpu(0).map_err(|e| format!("pin: {e}"))?;
        let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
        let mut buf = vec![0u8; (part1 + part2) as usize];
        pat.fill(0, &mut buf);
        c.write_all(&buf[..part1 as usize]).map_err(|e| format!("send part 1: {e}"))?;
        let mut go = [0u8; 1];
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
        if how == Taker::Ktls {
            ktls(c.as_raw_fd(), 1, TLS12)?;
        }
        c.write_all(&buf[part1 as usize..]).map_err(|e| format!("send part 2: {e}"))?;
        Ok::<_, String>(())
    });
    let sent = join(tx);
    let end = tryo!(join(rx));
    tryo!(sent);
    if end != part1 + part2 {
        return Fail(format!("stream ended at {end}, sent {}", part1 + part2));
    }
    env.diag(&format!(
        "{} through RECV, then {} took the socket: the sleeping RECV got EPROTONOSUPPORT, {} more byte-exact through recv()",
        mib(part1),
        if how == Taker::Ktls { "kTLS (TLS_RX; the peer sends TLS records)" } else { "a sockmap" },
        mib(part2)
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// kTLS on a flow whose payload lands in a bound queue: the records sit
/// in provider memory the kernel must not read, so kTLS cannot decrypt
/// them. The receiver gets an error instead of data (no splat, no
/// plaintext made up from memory it could not read), and tearing
/// everything down releases every buffer.
fn ktls_on_zero_copy_queue(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let total = 1u64 << 20;
    let pat = Arc::new(Pattern::new(4242));
    let p2 = pat.clone();
    let port = 7304;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS12)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0u64;
        let err = loop {
            match std::io::Read::read(&mut s, &mut buf) {
                Ok(0) => break None,
                Ok(k) => {
                    if let Some(bad) = p2.check(off, &buf[..k]) {
                        return Err(format!("kTLS read() returned data that is not the stream, at {bad}"));
                    }
                    off += k as u64;
                }
                Err(e) => break Some(e),
            }
        };
        drop(z);
        Ok((off, err))
    });
    let tx = in_netns(NS_B, move || {
        let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
        let mut go = [0u8; 1];
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
        ktls(c.as_raw_fd(), 1, TLS12)?;
        let mut buf = vec![0u8; total as usize];
        pat.fill(0, &mut buf);
        // The receiver may give up and close: a send error is fine here.
        let _ = c.write_all(&buf);
        Ok::<_, String>(())
    });
    let (off, err) = tryo!(join(rx));
    tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put no payload into provider memory: the test proves nothing".into());
    }
    match &err {
        Some(e) if e.raw_os_error() == Some(libc::EFAULT) => {}
        _ => return Fail(format!("kTLS read() after {off} bytes: {err:?}, expected EFAULT")),
    }
    env.diag(&format!(
        "kTLS on a zero-copy queue: {} bytes of TLS records in provider memory, read() fails with EFAULT after {off} bytes",
        st.dma_bytes
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// The kTLS receiver's read() of a record it cannot read: the error it
/// must fail with, or what it returned instead.
fn ktls_read_fails(s: &mut std::net::TcpStream) -> Result<std::io::Error, String> {
    let mut buf = vec![0u8; 64 << 10];
    match std::io::Read::read(s, &mut buf) {
        Ok(k) => Err(format!("kTLS read() returned {k} bytes of a record it could not read")),
        Err(e) => Ok(e),
    }
}

/// The sending peer of the kTLS record tests (in `NS_B`): connected to
/// `port` with TCP_NODELAY, once the receiver said go (one byte, returned
/// for reuse).
fn ktls_peer(port: u16) -> Result<(std::net::TcpStream, [u8; 1]), String> {
    let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
    c.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut go = [0u8; 1];
    std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go: {e}"))?;
    Ok((c, go))
}

/// A TLS record whose 5-byte header arrived before the queue was bound
/// (readable) and whose body arrives after (in provider memory): the kTLS
/// receiver learns the record's length from the header and must then
/// refuse the body it cannot read (an error on read()), not hand the
/// cipher pages that do not exist.
fn ktls_record_header_readable_payload_not(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    // TLS 1.3: ciphertext, the inner content type, the 16-byte tag.
    let body = 4096usize + 17;
    let port = 7306;
    let (header_tx, header_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS13)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        // The header is in the socket (readable; the sender saw it
        // acknowledged): now bind, then ask for the body.
        header_rx.recv_timeout(Duration::from_secs(60)).map_err(|e| format!("waiting for the header: {e}"))??;
        z.bind(a_idx, 0, 0).map_err(|e| format!("BIND: {e}"))?;
        s.write_all(b"b").map_err(|e| format!("go body: {e}"))?;
        let r = ktls_read_fails(&mut s);
        drop(z);
        r
    });
    let tx = in_netns(NS_B, move || {
        let (mut c, mut go) = ktls_peer(port)?;
        // Application data (legacy version 3.3), `body` bytes.
        let hdr = [0x17, 3, 3, (body >> 8) as u8, body as u8];
        c.write_all(&hdr).map_err(|e| format!("send header: {e}"))?;
        let _ = header_tx.send(crate::net::wait_acked(&c, Duration::from_secs(60)));
        std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("waiting for go body: {e}"))?;
        let _ = c.write_all(&vec![0x5a; body]);
        // Open until the receiver has tried the record and closed.
        c.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let _ = std::io::Read::read(&mut c, &mut go);
        Ok::<_, String>(())
    });
    let err = tryo!(join(rx));
    tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put none of the record's body into provider memory: the test proves nothing".into());
    }
    if err.raw_os_error() != Some(libc::EFAULT) {
        return Fail(format!("kTLS read() of a record it cannot read: {err}, expected EFAULT"));
    }
    env.diag(&format!("TLS 1.3 record: header readable, {} bytes of body in provider memory; read() fails with EFAULT", st.dma_bytes));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// kTLS's record parser copies the start of a record out of the TCP queue
/// (its copy mode) when the socket is under memory pressure or its window
/// has closed before a whole record is in. A provider's buffers are
/// charged in full (4 KiB for a 1-byte segment), so a peer gets there by
/// sending a record header one byte at a time to a receiver with a small
/// receive buffer (SO_RCVBUF 8192 here; out-of-order data counts too, so a
/// peer can also make the pressure itself). The copy used to WARN on the
/// unreadable frags (`skb_copy_bits()` in `tls_strp_copyin_frag()`, a
/// panic with `panic_on_warn`) and carry on parsing whatever the copy's
/// pages held; now the parser stops and read() fails with EFAULT, as for
/// any record in provider memory.
fn ktls_copy_mode_refuses_provider_memory(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let port = 7307;
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        zcrx::sys::set_rcvbuf(&l, 8192).map_err(|e| format!("SO_RCVBUF: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(20))).map_err(|e| e.to_string())?;
        ktls(s.as_raw_fd(), 2, TLS13)?;
        s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        let r = ktls_read_fails(&mut s);
        drop(z);
        r
    });
    let tx = in_netns(NS_B, move || {
        let (mut c, mut go) = ktls_peer(port)?;
        // the first four bytes of an application data record header, one
        // segment each: the parser needs five to know the record's length
        let mut sent = 0;
        for b in [0x17u8, 3, 3, 0x10] {
            if c.write_all(&[b]).is_err() || crate::net::wait_acked(&c, Duration::from_secs(5)).is_err() {
                break;
            }
            sent += 1;
        }
        // Open until the receiver has tried the record and closed.
        c.set_read_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let _ = std::io::Read::read(&mut c, &mut go);
        Ok::<_, String>(sent)
    });
    let err = tryo!(join(rx));
    let sent = tryo!(join(tx));
    let st = tryo!(n.stats(1, 0));
    if st.dma_bytes == 0 {
        return Fail("netdevsim put none of the header into provider memory: the test proves nothing".into());
    }
    if err.raw_os_error() != Some(libc::EFAULT) {
        return Fail(format!("kTLS read() of a record header in provider memory: {err}, expected EFAULT"));
    }
    env.diag(&format!(
        "{sent} one-byte segments of a TLS header to a kTLS receiver with SO_RCVBUF 8192, {} bytes in provider memory: \
         read() fails with EFAULT",
        st.dma_bytes
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A raw IPv6 socket for TCP that is never read (it needs CAP_NET_RAW) gets
/// clones of the zero-copy skbs, and the clones hold their buffers: after
/// the context and the TCP socket are closed, the area, its pool and its
/// pinned pages stay (charged to this process) while it is open; closing
/// it gives everything back. A packet socket on the device sees the same
/// frames but keeps only their headers (af_packet trims an skb with
/// unreadable frags to its linear part), so it holds nothing.
fn raw_sockets_hold_buffers_until_closed(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let a_dev = n.a.clone();
    let bytes = 1u64 << 20;
    let pat = Arc::new(Pattern::new(777));
    let p2 = pat.clone();
    let port = 7305;
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let sock = |domain: i32, ty: i32, proto: i32, what: &str| -> Result<i32, String> {
            // SAFETY: socket(2); we own the new fd.
            let fd = unsafe { libc::socket(domain, ty, proto) };
            if fd < 0 {
                return Err(format!("socket({what}): {}", std::io::Error::last_os_error()));
            }
            Ok(fd)
        };
        let raw6 = sock(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_TCP, "AF_INET6, SOCK_RAW, IPPROTO_TCP")?;
        let pkt = sock(libc::AF_PACKET, libc::SOCK_RAW, (libc::ETH_P_ALL as u16).to_be() as i32, "AF_PACKET, ETH_P_ALL")?;
        let ifidx = zcrx::sys::ifindex(&a_dev).map_err(|e| e.to_string())?;
        // SAFETY: a zeroed sockaddr_ll is valid; the fields set below.
        let mut ll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        ll.sll_family = libc::AF_PACKET as u16;
        ll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        ll.sll_ifindex = ifidx as i32;
        // SAFETY: bind(2) with a sockaddr_ll of the size given.
        if unsafe { libc::bind(pkt, (&ll as *const libc::sockaddr_ll).cast(), size_of::<libc::sockaddr_ll>() as u32) } < 0 {
            return Err(format!("bind(packet socket): {}", std::io::Error::last_os_error()));
        }
        let pin0 = crate::common::vm_pinned_kb()?;
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let got = receive_from(&mut z, &s, &p2, 0, None)?;
        let pinned = crate::common::vm_pinned_kb()? - pin0;
        drop(s);
        drop(z);
        Ok((got, pinned, raw6, pkt, pin0))
    });
    let tx = crate::net::sender(addr_a(true, port), bytes, pat, 0);
    let sent = join(tx);
    let (got, pinned, raw6, pkt, pin0) = tryo!(join(rx));
    let sent = tryo!(sent);
    if got.bytes != sent || got.zc_bytes != sent {
        return Fail(format!("received {} of {sent} bytes, {} zero-copy: all must be", got.bytes, got.zc_bytes));
    }
    env.diag(&tryo!(log.check(0, got.zc_bytes)));
    drop(log);
    // Both raw sockets still hold clones: nothing may be released yet.
    let held = |what: &str| -> Result<(), String> {
        match wait_idle(Duration::from_secs(3)) {
            Ok(()) => Err(format!("{what}: the module went idle although a raw socket holds zero-copy skbs")),
            Err(_) => {
                let i = crate::common::info()?;
                let pin = crate::common::vm_pinned_kb()? - pin0;
                if i.areas != 1 || pin != pinned {
                    return Err(format!("{what}: areas {}, VmPin +{pin} kB; expected the area and its {pinned} kB", i.areas));
                }
                Ok(())
            }
        }
    };
    tryo!(held("context and TCP socket closed, the raw and the packet socket open"));
    // SAFETY: our fd, closed once.
    unsafe { libc::close(raw6) };
    let released = wait_idle(Duration::from_secs(10));
    // The packet socket has frames queued (it saw the stream), unread.
    let mut frame = [0u8; 256];
    // SAFETY: recv(2) into our buffer of the length given.
    let queued = unsafe { libc::recv(pkt, frame.as_mut_ptr().cast(), frame.len(), libc::MSG_DONTWAIT | libc::MSG_PEEK) };
    // SAFETY: as above.
    unsafe { libc::close(pkt) };
    tryo!(released.map_err(|e| format!("raw IPv6 socket closed, packet socket open: {e}")));
    if queued <= 0 {
        return Fail("the packet socket has no frame queued: it saw nothing, so proves nothing".into());
    }
    let pin = tryo!(crate::common::vm_pinned_kb()) - pin0;
    if pin != 0 {
        return Fail(format!("after closing the raw socket VmPin is still +{pin} kB"));
    }
    env.diag(&format!(
        "{} byte-exact ({} zero-copy); {pinned} kB stayed pinned while the raw socket held clones, all released when it \
         closed, with the packet socket (frames queued) still open",
        mib(got.bytes),
        mib(got.zc_bytes)
    ));
    drop(n);
    Pass
}

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
