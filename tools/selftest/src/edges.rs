// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! uAPI edges: memory that must not become an area, ring mappings that must
//! be refused, one errno rule per case, STATS counting only what the user
//! got, raw sockets holding buffers, and binding again after UNBIND
//! (`rebind.rs`).

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

mod rebind;

use rebind::{bind_other_device_after_unbind, unbind_then_bind_again, unregister_then_register_another_area};

pub const TESTS: &[(&str, TestFn)] = &[
    ("area_refuses_odd_memory", area_refuses_odd_memory),
    ("ring_mmap_rules", ring_mmap_rules),
    ("errno_rules", errno_rules),
    ("stats_count_only_delivered", stats_count_only_delivered),
    ("merged_records_dropped_on_fault", merged_records_dropped_on_fault),
    ("unbind_then_bind_again", unbind_then_bind_again),
    ("bind_other_device_after_unbind", bind_other_device_after_unbind),
    ("unregister_then_register_another_area", unregister_then_register_another_area),
    ("raw_sockets_hold_buffers_until_closed", raw_sockets_hold_buffers_until_closed),
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
