// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Bad inputs get clear errnos and change nothing.

use std::fs;
use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::sys::ioctl;
use zcrx::uapi::*;
use zcrx::{dev::page_size, Rec, Zcrx};

use crate::common::{ensure_loaded, expect_errno, wait_idle};
use crate::net::{in_netns, join, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("area_bad_inputs", area_bad_inputs),
    ("ioctl_bad_commands", ioctl_bad_commands),
    ("bind_bad_inputs", bind_bad_inputs),
    ("bind_with_xdp_attached", bind_with_xdp_attached),
    ("recv_bad_sockets", recv_bad_sockets),
    ("refill_bad_entries", refill_bad_entries),
    ("refill_range_entries", refill_range_entries),
];

fn area_bad_inputs(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let ps = page_size() as u64;
    let z = tryo!(Zcrx::open().map_err(|e| e.to_string()));
    // Memory we own for the checks that need a real mapping.
    let mut mem = vec![0u8; 8 * ps as usize];
    let base = (mem.as_mut_ptr() as u64).next_multiple_of(ps);
    // Each range below is refused, or memory no Rust object is read from
    // while the context lives; the context is never bound and never
    // receives, so nothing writes any of it.
    // SAFETY: as said above.
    let raw = |addr: u64, len: u64| unsafe { z.register_raw(addr, len) };
    tryo!(expect_errno("unaligned address", raw(base + 1, ps), libc::EINVAL));
    tryo!(expect_errno("unaligned length", raw(base, ps + 1), libc::EINVAL));
    tryo!(expect_errno("zero length", raw(base, 0), libc::EINVAL));
    tryo!(expect_errno("over 4 GiB", raw(base, ZCRX_RS_AREA_MAX_LEN + ps), libc::EINVAL));
    tryo!(expect_errno("wrapping range", raw(u64::MAX - ps + 1, 2 * ps), libc::EINVAL));
    tryo!(expect_errno("unmapped memory", raw(0x1000_0000_0000, 4 * ps), libc::EFAULT));
    // Shared memory (memfd, tmpfs) is supported: it can be pinned long-term.
    // A mapping of a file on a filesystem with writeback cannot be, and gets
    // EOPNOTSUPP; the VM has no such filesystem writable (its /tmp is
    // tmpfs-backed), so which case the file below hits depends on where it
    // lives: say which and check the answer fits.
    let name = std::ffi::CString::new("zcrx-selftest").unwrap();
    // SAFETY: a valid name; we own the new fd.
    let mfd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    // SAFETY: sizing our own memfd.
    if mfd < 0 || unsafe { libc::ftruncate(mfd, (4 * ps) as i64) } != 0 {
        return Fail("memfd_create".into());
    }
    for (what, fd) in [("memfd", mfd), ("file in /tmp", -1)] {
        let path = "/tmp/zcrx-selftest-file";
        let file;
        let fd = if fd >= 0 {
            fd
        } else {
            let _ = fs::remove_file(path);
            file = tryo!(fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(path).map_err(|e| e.to_string()));
            tryo!(file.set_len(4 * ps).map_err(|e| e.to_string()));
            file.as_raw_fd()
        };
        // SAFETY: statfs into a zeroed struct; maps our own fd.
        let (ftype, p) = unsafe {
            let mut sf: libc::statfs = std::mem::zeroed();
            libc::fstatfs(fd, &mut sf);
            let p = libc::mmap(std::ptr::null_mut(), 4 * ps as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            (sf.f_type as u64, p)
        };
        if p == libc::MAP_FAILED {
            return Fail(format!("mmap {what}"));
        }
        let z2 = tryo!(Zcrx::open().map_err(|e| e.to_string()));
        // SAFETY: the range is memory no Rust object is read from while the context lives (or one the module refuses); the context is never bound and never receives, so nothing writes it.
        let r = unsafe { z2.register_raw(p as u64, 4 * ps) };
        drop(z2);
        // SAFETY: our mapping.
        unsafe { libc::munmap(p, 4 * ps as usize) };
        let _ = fs::remove_file(path);
        const TMPFS_MAGIC: u64 = 0x0102_1994;
        const OVERLAYFS_MAGIC: u64 = 0x794c_7630;
        match r {
            Ok(()) if ftype == TMPFS_MAGIC || ftype == OVERLAYFS_MAGIC => {
                env.diag(&format!("MAP_SHARED {what} (fs {ftype:#x}, shmem): registered, as documented"))
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) && ftype != TMPFS_MAGIC => {
                env.diag(&format!("MAP_SHARED {what} (fs {ftype:#x}): EOPNOTSUPP, as documented"))
            }
            r => return Fail(format!("MAP_SHARED {what} on fs {ftype:#x}: {r:?}")),
        }
    }
    // SAFETY: our fd.
    unsafe { libc::close(mfd) };
    // Reserved fields and flags.
    let mut reg = zcrx_rs_area_reg { addr: base, len: ps, flags: 1, ..Default::default() };
    tryo!(expect_errno("flags set", ioctl(&fd(&z), IOC_REGISTER_AREA as _, &mut reg as *mut _ as usize), libc::EINVAL));
    let mut reg = zcrx_rs_area_reg { addr: base, len: ps, __resv: [1], ..Default::default() };
    tryo!(expect_errno("reserved set", ioctl(&fd(&z), IOC_REGISTER_AREA as _, &mut reg as *mut _ as usize), libc::EINVAL));
    // Nothing was registered by any of this.
    let st = tryo!(z.stats().map_err(|e| e.to_string()));
    if st.area_buffers != 0 {
        return Fail(format!("an area of {} buffers exists after only failures", st.area_buffers));
    }
    // One good area, then a second one is refused.
    // SAFETY: the range is memory no Rust object is read from while the context lives (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(unsafe { z.register_raw(base, 4 * ps) }.map_err(|e| format!("good area: {e}")));
    // SAFETY: the range is memory no Rust object is read from while the context lives (or one the module refuses); the context is never bound and never receives, so nothing writes it.
    tryo!(expect_errno("second area", unsafe { z.register_raw(base, 4 * ps) }, libc::EEXIST));
    drop(z);
    drop(mem);
    tryo!(wait_idle(Duration::from_secs(5)));
    Pass
}

struct RawFdRef(i32);
impl AsRawFd for RawFdRef {
    fn as_raw_fd(&self) -> i32 {
        self.0
    }
}
fn fd(z: &Zcrx) -> RawFdRef {
    RawFdRef(z.raw_fd())
}

fn ioctl_bad_commands(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let mut z = tryo!(Zcrx::open().map_err(|e| e.to_string()));
    let mut buf = [0u8; 256];
    let p = buf.as_mut_ptr() as usize;
    // Right number, wrong size: a different command.
    let wrong_size = (IOC_STATS & !(0x3fff << 16)) | (8 << 16);
    tryo!(expect_errno("STATS with a wrong size", ioctl(&fd(&z), wrong_size as _, p), libc::ENOTTY));
    let wrong_nr = (IOC_STATS & !0xff) | 0x7f;
    tryo!(expect_errno("unknown number", ioctl(&fd(&z), wrong_nr as _, p), libc::ENOTTY));
    let wrong_type = (IOC_STATS & !0xff00) | (0x12 << 8);
    tryo!(expect_errno("other ioctl type", ioctl(&fd(&z), wrong_type as _, p), libc::ENOTTY));
    tryo!(expect_errno("bad user pointer", ioctl(&fd(&z), IOC_INFO as _, 8), libc::EFAULT));
    // Operations that need state it does not have yet.
    let mut recs = [Rec::default(); 4];
    tryo!(expect_errno("RECV before BIND", z.recv(0, &mut recs, 0), libc::EINVAL));
    tryo!(expect_errno("UNBIND before BIND", z.unbind(), libc::EINVAL));
    // SAFETY: mapping the device with nothing bound must fail, not map.
    let m = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, z.raw_fd(), 0) };
    if m != libc::MAP_FAILED {
        return Fail("mmap before BIND succeeded".into());
    }
    let i = tryo!(z.info().map_err(|e| e.to_string()));
    if i.api_version != ZCRX_RS_API_VERSION || i.page_size as usize != page_size() {
        return Fail(format!("INFO: api {} page {}", i.api_version, i.page_size));
    }
    Pass
}

fn bind_bad_inputs(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(2));
    let a_idx = n.a_idx;
    // Header split still off: refused.
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        expect_errno("BIND without an area", z.bind(a_idx, 0, 64), libc::EINVAL)?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        expect_errno("BIND with header split off", z.bind(a_idx, 0, 64), libc::EINVAL)?;
        Ok(())
    });
    tryo!(join(h));
    tryo!(n.hds(true));
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        expect_errno("BIND to rx queue 2 of 2", z.bind(a_idx, 2, 64), libc::ERANGE)?;
        expect_errno("BIND to a missing ifindex", z.bind(9999, 0, 64), libc::ENODEV)?;
        expect_errno("BIND to loopback (no queue API)", z.bind(1, 0, 64), libc::EINVAL)?;
        expect_errno("BIND with 0 ring entries", z.bind(a_idx, 0, 0x7fff_ffff), libc::EINVAL)?;
        let mut b = zcrx_rs_bind { ifindex: a_idx, rxq: 0, rq_entries: 64, flags: 2, ..Default::default() };
        expect_errno("BIND with flags", ioctl(&RawFdRef(z.raw_fd()), IOC_BIND as _, &mut b as *mut _ as usize), libc::EINVAL)?;
        expect_errno("BIND NODEV with an ifindex", z.bind_flags(a_idx, 0, 64, ZCRX_RS_BIND_NODEV), libc::EINVAL)?;
        expect_errno("BIND NODEV with an rxq", z.bind_flags(0, 1, 64, ZCRX_RS_BIND_NODEV), libc::EINVAL)?;
        z.bind(a_idx, 0, 64).map_err(|e| format!("good BIND: {e}"))?;
        expect_errno("BIND NODEV while bound", z.bind_nodev(64), libc::EBUSY)?;
        expect_errno("second BIND", z.bind(a_idx, 1, 64), libc::EBUSY)?;
        // Another context on the same queue.
        let mut z2 = Zcrx::open().map_err(|e| e.to_string())?;
        z2.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        expect_errno("BIND to a queue bound by another context", z2.bind(a_idx, 0, 64), libc::EEXIST)?;
        // The failed attempts left nothing behind: queue 1 is still free.
        z2.bind(a_idx, 1, 64).map_err(|e| format!("BIND queue 1 after failures: {e}"))?;
        Ok(())
    });
    tryo!(join(h));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

fn recv_bad_sockets(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let mut recs = [Rec::default(); 8];
        let file = fs::File::open("/proc/self/status").map_err(|e| e.to_string())?;
        expect_errno("RECV on a regular file", z.recv(file.as_raw_fd(), &mut recs, 0), libc::ENOTSOCK)?;
        expect_errno("RECV on a closed fd", z.recv(999, &mut recs, 0), libc::EBADF)?;
        let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        expect_errno("RECV on a UDP socket", z.recv(udp.as_raw_fd(), &mut recs, 0), libc::EPROTONOSUPPORT)?;
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        expect_errno("RECV on a listening socket", z.recv(l.as_raw_fd(), &mut recs, 0), libc::ENOTCONN)?;
        // A connected socket with no data: EAGAIN when not waiting.
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        let mut c = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        expect_errno("RECV DONTWAIT, no data", z.recv(s.as_raw_fd(), &mut recs, ZCRX_RS_RECV_DONTWAIT), libc::EAGAIN)?;
        // SO_RCVTIMEO bounds a blocking call.
        s.set_read_timeout(Some(Duration::from_millis(200))).map_err(|e| e.to_string())?;
        expect_errno("RECV blocking past SO_RCVTIMEO", z.recv(s.as_raw_fd(), &mut recs, 0), libc::EAGAIN)?;
        expect_errno("RECV with 0 records", z.recv(s.as_raw_fd(), &mut [], 0), libc::EINVAL)?;
        // Loopback data is an ordinary socket's: it arrives, as copies.
        c.write_all(b"hello, zcrx").map_err(|e| e.to_string())?;
        drop(c);
        let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("RECV loopback data: {e}"))?;
        if got.bytes != 11 || recs[0].flags & ZCRX_RS_REC_COPY == 0 || z.data(&recs[0]) != b"hello, zcrx" {
            return Err(format!("loopback data: {got:?}, first record {:?}", recs[0]));
        }
        z.refill(&recs[..got.records]).map_err(|e| e.to_string())?;
        let eof = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("RECV at EOF: {e}"))?;
        if eof.bytes != 0 || eof.records != 0 {
            return Err(format!("expected EOF, got {eof:?}"));
        }
        Ok(())
    });
    tryo!(join(h));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// A context with an area of 16 buffers bound to rx queue 0 of `a_idx`
/// (a ring of 64 entries), and a loopback connection `(client, server)`
/// whose data RECV copies into the area.
fn small_area_and_loopback(a_idx: u32) -> Result<(Zcrx, TcpStream, TcpStream), String> {
    let mut z = Zcrx::open().map_err(|e| e.to_string())?;
    z.register_area(16 * page_size()).map_err(|e| e.to_string())?;
    z.bind(a_idx, 0, 64).map_err(|e| e.to_string())?;
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let c = TcpStream::connect(l.local_addr().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let (s, _) = l.accept().map_err(|e| e.to_string())?;
    Ok((z, c, s))
}

/// Bad refill entries are skipped and counted, never trusted.
fn refill_bad_entries(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let ps = page_size() as u64;
        // Get one buffer legitimately (a loopback copy), to return it twice.
        let (mut z, mut c, s) = small_area_and_loopback(a_idx)?;
        c.write_all(&[7u8; 100]).map_err(|e| e.to_string())?;
        let mut recs = [Rec::default(); 4];
        let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| e.to_string())?;
        if got.records != 1 {
            return Err(format!("expected one record, got {got:?}"));
        }
        let held = z.stats().map_err(|e| e.to_string())?.user_held;
        let good = recs[0].off;
        let bad = [
            16 * ps,    // past the area
            3 * ps + 8, // not at a buffer start
            u64::MAX - 4095,
            5 * ps, // never handed out
            good,   // fine
            good,   // returned twice
        ];
        z.refill_raw(&bad, 0).map_err(|e| e.to_string())?;
        z.refill_raw(&[good], 2).map_err(|e| e.to_string())?; // an unknown flag
                                                              // No page pool consumes the ring while the queue is idle; a receive
                                                              // that runs out of buffers drains it. Make one run out: the area has
                                                              // 16 buffers, send enough to need more.
        c.write_all(&vec![9u8; 40 * ps as usize]).map_err(|e| e.to_string())?;
        drop(c);
        let mut total = 0u64;
        let mut big = vec![Rec::default(); 64];
        let mut progress = std::time::Instant::now();
        loop {
            match z.recv(s.as_raw_fd(), &mut big, 0) {
                Ok(g) if g.bytes == 0 => break,
                Ok(g) => {
                    total += g.bytes;
                    progress = std::time::Instant::now();
                    z.refill(&big[..g.records]).map_err(|e| e.to_string())?;
                }
                // Everything this program got back is on the ring: RECV
                // takes it before it says ENOBUFS, so this cannot last.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && progress.elapsed() < Duration::from_secs(10) => continue,
                Err(e) => return Err(format!("recv after {total} bytes: {e}")),
            }
        }
        let st = z.stats().map_err(|e| e.to_string())?;
        if total != 40 * ps {
            return Err(format!("received {total} of {} bytes", 40 * ps));
        }
        if st.refill_bad != 6 {
            return Err(format!("refill_bad {} (ok {}), expected 6 bad entries", st.refill_bad, st.refill_ok));
        }
        // Buffers given back after the last drain wait on the ring: they are
        // the user's until consumed, none is lost.
        if held != 1 || st.user_held + st.free_buffers != st.area_buffers {
            return Err(format!(
                "user held {held} before; after: held {} + free {} != {} buffers",
                st.user_held, st.free_buffers, st.area_buffers
            ));
        }
        Ok(st)
    });
    let st = tryo!(join(h));
    env.diag(&format!(
        "refill ok {} bad {} (6 planted); held {} + free {} = all {} buffers",
        st.refill_ok, st.refill_bad, st.user_held, st.free_buffers, st.area_buffers
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// `ZCRX_RS_RQE_RANGE` entries: each buffer of a range goes back once if
/// the user held it and counts as bad if not; bad ranges are refused whole;
/// a range longer than one pass of the ring lock is finished in the next.
fn refill_range_entries(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let ps = page_size() as u64;
        // Three buffers held legitimately: loopback data is copied.
        let (mut z, mut c, s) = small_area_and_loopback(a_idx)?;
        c.write_all(&vec![7u8; 3 * ps as usize]).map_err(|e| e.to_string())?;
        let mut recs = [Rec::default(); 8];
        let mut got = 0;
        while got < 3 * ps {
            let g = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| e.to_string())?;
            got += g.bytes;
        }
        let held = z.stats().map_err(|e| e.to_string())?.user_held;
        const R: u32 = ZCRX_RS_RQE_RANGE;
        let e = |off, len, flags| zcrx_rs_rqe { off, len, flags };
        let entries = [
            e(0, 0, R),                       // no bytes
            e(15 * ps + 1, ps as u32, R),     // past the area
            e(u64::MAX, 2, R),                // wraps
            e(0, 1, R | 2),                   // an unknown flag
            e(0, 16 * ps as u32, R),          // all: the held ones go back
            e(ps + 5, 15 * ps as u32 - 5, R), // again: none is held now
        ];
        z.refill_entries(&entries).map_err(|e| e.to_string())?;
        // UNBIND takes what the ring holds (no pool will).
        z.unbind().map_err(|e| e.to_string())?;
        let st = z.stats().map_err(|e| e.to_string())?;
        let want_bad = 4 + (16 - held) + 15;
        if st.refill_ok != held || st.refill_bad != want_bad {
            return Err(format!("refill ok {} bad {}, expected {held} and {want_bad} ({held} buffers held)", st.refill_ok, st.refill_bad));
        }
        if st.user_held != 0 {
            return Err(format!("the user still holds {} buffers", st.user_held));
        }
        Ok((held, st))
    });
    let (held, st) = tryo!(join(h));
    env.diag(&format!(
        "{held} buffers held; 4 bad ranges, one over the whole area (ok {held}, bad {}), one over 15 buffers \
         (bad 15): refill ok {} bad {}; the user holds none after",
        16 - held,
        st.refill_ok,
        st.refill_bad
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// XDP and a memory provider exclude each other (the core refuses both
/// orders); the error is clear and nothing is left behind.
fn bind_with_xdp_attached(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    // An XDP program that passes everything (tools/selftest/xdp_pass.c,
    // built by make next to the kernel).
    let obj = format!("{}/xdp-pass.o", std::env::var("ZCRX_BUILD").unwrap_or_default());
    if !std::path::Path::new(&obj).exists() {
        return Fail(format!("{obj} missing: run make iou-zcrx"));
    }
    tryo!(crate::net::run("ip", &["-n", NS_A, "link", "set", "dev", &n.a, "xdpgeneric", "obj", &obj, "sec", "xdp.frags"], ""));
    let a_idx = n.a_idx;
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        expect_errno("BIND with XDP attached", z.bind(a_idx, 0, 64), libc::EEXIST)
    });
    tryo!(join(h));
    tryo!(crate::net::run("ip", &["-n", NS_A, "link", "set", "dev", &n.a, "xdpgeneric", "off"], ""));
    // Now bind, and XDP is refused while bound.
    let a = n.a.clone();
    let obj2 = obj.clone();
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(64 * page_size()).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 64).map_err(|e| format!("BIND after XDP removed: {e}"))?;
        // Refused by the core for the provider, with its message (not any
        // failure of `ip`: a missing object or a bad section fails too).
        match crate::net::run("ip", &["link", "set", "dev", &a, "xdpgeneric", "obj", &obj2, "sec", "xdp.frags"], "") {
            Ok(_) => Err("attaching XDP to a bound device succeeded".into()),
            Err(e) if e.contains("using memory provider") => Ok(e),
            Err(e) => Err(format!("attaching XDP to a bound device failed, but not for the provider: {e}")),
        }
    });
    let msg = tryo!(join(h));
    env.diag(&format!("XDP while bound refused: {}", msg.lines().last().unwrap_or("")));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
