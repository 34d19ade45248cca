// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! dma-buf areas (`ZCRX_RS_AREA_DMABUF`): the NIC writes into memory
//! another driver exports (here udmabuf, a memfd's pages; a GPU's memory on
//! real machines); the module never maps it for the CPU.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::*;
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, expect_errno, info, mib, wait_idle};
use crate::net::{addr_a, in_netns, join, receive, sender, Nsim, Rx, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("dmabuf_area_zero_copy", dmabuf_area_zero_copy), ("dmabuf_huge_pages_in_device_segments", dmabuf_huge_pages_in_device_segments)];

/// `struct udmabuf_create` (`<linux/udmabuf.h>`).
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: libc::c_ulong = (1 << 30) | (24 << 16) | ((b'u' as libc::c_ulong) << 8) | 0x42;

/// A memfd of `len` bytes and a udmabuf of it: `(memfd, dmabuf)`.
pub(crate) fn udmabuf(len: usize) -> Result<(OwnedFd, OwnedFd), String> {
    udmabuf_of(len, 0)
}

/// The same with `memfd_create()` flags `extra` (`MFD_HUGETLB`).
fn udmabuf_of(len: usize, extra: libc::c_uint) -> Result<(OwnedFd, OwnedFd), String> {
    let os = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscalls on fds we own; the struct matches the ioctl.
    unsafe {
        let m = libc::memfd_create(c"zcrx-dmabuf".as_ptr(), libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC | extra);
        if m < 0 {
            return Err(os("memfd_create"));
        }
        let memfd = OwnedFd::from_raw_fd(m);
        if libc::ftruncate(m, len as libc::off_t) != 0 {
            return Err(os("ftruncate"));
        }
        if libc::fcntl(m, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0 {
            return Err(os("F_SEAL_SHRINK"));
        }
        let dev = libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if dev < 0 {
            return Err(os("/dev/udmabuf"));
        }
        let dev = OwnedFd::from_raw_fd(dev);
        let c = UdmabufCreate { memfd: m as u32, flags: 1, offset: 0, size: len as u64 };
        let d = libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE, &c as *const UdmabufCreate);
        if d < 0 {
            return Err(os("UDMABUF_CREATE"));
        }
        Ok((memfd, OwnedFd::from_raw_fd(d)))
    }
}

/// A 16 MiB udmabuf as the area of a context bound to a header-split
/// netdevsim queue: a stream arrives byte-exact (read through a mapping of
/// the dma-buf), all zero-copy; what REGISTER_AREA refuses (`EBADF` for a
/// closed fd, `EINVAL` for a memfd that is no dma-buf, a length beyond the
/// dma-buf, an address with the flag); a copy-only context cannot use it
/// (`EOPNOTSUPP`); data that would need a copy (loopback) stays in the
/// socket: RECV says `EOPNOTSUPP` and `read()` gets the bytes.
fn dmabuf_area_zero_copy(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let i = tryo!(info());
    if i.features & u64::from(ZCRX_RS_FEATURE_DMABUF) == 0 {
        return Fail(format!("INFO lacks ZCRX_RS_FEATURE_DMABUF: {:#x}", i.features));
    }
    const LEN: usize = 16 << 20;
    let (memfd, dmabuf) = tryo!(udmabuf(LEN));
    // The rules.
    let raw = |z: &Zcrx, r: zcrx_rs_area_reg| -> std::io::Result<()> {
        let mut r = r;
        // SAFETY: REGISTER_AREA on our fd with a matching struct.
        match unsafe { libc::ioctl(z.raw_fd(), IOC_REGISTER_AREA as _, &mut r as *mut zcrx_rs_area_reg) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    let reg = |fd: i32, len: usize, addr: u64| zcrx_rs_area_reg {
        addr,
        len: len as u64,
        flags: ZCRX_RS_AREA_DMABUF,
        dmabuf_fd: fd,
        ..Default::default()
    };
    let z = tryo!(Zcrx::open().map_err(|e| format!("open: {e}")));
    tryo!(expect_errno("a closed fd", raw(&z, reg(1000, LEN, 0)), libc::EBADF));
    tryo!(expect_errno("a memfd", raw(&z, reg(memfd.as_raw_fd(), LEN, 0)), libc::EINVAL));
    tryo!(expect_errno("longer than the dma-buf", raw(&z, reg(dmabuf.as_raw_fd(), 2 * LEN, 0)), libc::EINVAL));
    tryo!(expect_errno("an address with the flag", raw(&z, reg(dmabuf.as_raw_fd(), LEN, 4096)), libc::EINVAL));
    drop(z);
    // Copy-only cannot use it.
    let mut z = tryo!(Zcrx::open().map_err(|e| format!("open: {e}")));
    tryo!(z.register_dmabuf(dmabuf.as_raw_fd(), LEN, 0).map_err(|e| format!("register the dma-buf: {e}")));
    tryo!(expect_errno("copy-only on a dma-buf area", z.bind_nodev(0), libc::EOPNOTSUPP));
    drop(z);

    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    const PORT: u16 = 7160;
    let bytes = env.bytes(128 << 20);
    let seed = 160u64;
    let a_idx = n.a_idx;
    let before = tryo!(n.stats(1, 0));
    let log = tryo!(crate::devlog::DmaLog::start());
    let dfd = tryo!(dmabuf.try_clone().map_err(|e| format!("dup: {e}")));
    let mfd = tryo!(memfd.try_clone().map_err(|e| format!("dup: {e}")));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_netns(NS_A, move || -> Result<(Rx, zcrx_rs_stats, String), String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_dmabuf(dfd.as_raw_fd(), LEN, 0).map_err(|e| format!("register the dma-buf: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind: {e}"))?;
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).map_err(|e| format!("listen: {e}"))?;
        // A loopback connection: its data would need a copy.
        let lo = TcpListener::bind((Ipv4Addr::LOCALHOST, PORT + 1)).map_err(|e| format!("listen lo: {e}"))?;
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, PORT + 1)).map_err(|e| format!("connect lo: {e}"))?;
        let (mut s_lo, _) = lo.accept().map_err(|e| format!("accept lo: {e}"))?;
        std::io::Write::write_all(&mut c, b"copy me").map_err(|e| format!("write lo: {e}"))?;
        std::thread::sleep(Duration::from_millis(50));
        let mut recs = vec![Rec::default(); 8];
        let lo_res = match z.recv(s_lo.as_raw_fd(), &mut recs, 0) {
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                let mut b = [0u8; 7];
                s_lo.read_exact(&mut b).map_err(|e| format!("read after EOPNOTSUPP: {e}"))?;
                if &b != b"copy me" {
                    return Err(format!("read {b:?} after EOPNOTSUPP"));
                }
                "loopback RECV: EOPNOTSUPP, read() then got the 7 bytes".to_string()
            }
            other => return Err(format!("RECV of loopback data into a dma-buf area: {other:?}")),
        };
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // pagemap cannot read the dma-buf's mapping (VM_PFNMAP): the device
        // check finds the records' pages through the memfd's
        let area = z.area_range().ok_or("no area mapped")?;
        let alias = crate::devlog::Alias::new(area, &mfd)?;
        let rx = receive(&mut z, &s, &Pattern::new(seed), None)?;
        drop(alias);
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        Ok((rx, st, lo_res))
    });
    let _ = ready_rx.recv();
    let tx = sender(addr_a(false, PORT), bytes, Arc::new(Pattern::new(seed)), 0);
    let sent = join(tx);
    let (rx, st, lo_res) = match join(rx) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; sender: {sent:?}")),
    };
    let d = tryo!(n.stats(1, 0)).since(&before);
    env.diag(&format!(
        "udmabuf area of {}: {} byte-exact, zero-copy {} ({:.2}%), copied {}; module: zc {} copy {}; netdevsim DMA'd {}; \
         {lo_res}; EBADF, EINVAL x3, EOPNOTSUPP for copy-only",
        mib(LEN as u64),
        mib(rx.bytes),
        mib(rx.zc_bytes),
        100.0 * rx.zc_bytes as f64 / rx.bytes.max(1) as f64,
        mib(rx.copy_bytes),
        mib(st.zc_bytes),
        mib(st.copy_bytes),
        mib(d.dma_bytes)
    ));
    if sent != Ok(bytes) || rx.bytes != bytes {
        return Fail(format!("sent {sent:?}, received {} of {bytes}", rx.bytes));
    }
    if rx.zc_bytes != bytes || rx.copy_bytes != 0 || st.zc_bytes != bytes || d.dma_bytes < bytes {
        return Fail("not all zero-copy into the dma-buf".into());
    }
    env.diag(&tryo!(log.check(0, rx.zc_bytes)));
    drop(n);
    // The udmabuf pins its memfd's pages until its last reference goes:
    // then wait_idle sees them unpinned, the module's references included.
    drop((dmabuf, memfd));
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// DMA-API debugging's count of the misuses it reported (the debug
/// kernel), or `None` without it.
fn dma_api_errors() -> Option<u64> {
    std::fs::read_to_string("/sys/kernel/debug/dma-api/error_count").ok()?.trim().parse().ok()
}

/// A udmabuf of huge pages (a hugetlb memfd: 2 MiB physically contiguous
/// runs) as the area of a header-split netdevsim queue, whose device takes
/// DMA segments of at most 64 KiB (`dma_get_max_seg_size()`): the stream
/// arrives byte-exact and all zero-copy, and the exporter's mapping stays
/// within the device's limit: DMA-API debugging (the debug kernel) reports
/// no misuse. Before series patch 27, udmabuf mapped each 2 MiB run as one
/// segment ("mapping sg segment longer than device claims to support");
/// with ordinary pages only when they happened to be contiguous, so
/// `dmabuf_area_zero_copy` failed now and then.
fn dmabuf_huge_pages_in_device_segments(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    const LEN: usize = 8 << 20;
    let hp = zcrx::dev::huge_page_size();
    if hp != 2 << 20 {
        return Skip(format!("the default huge page is {} KiB: the test wants 2 MiB runs", hp >> 10));
    }
    let _huge = tryo!(crate::bigbuf::HugePages::reserve((LEN / hp) as u64 + 1));
    let (_memfd, dmabuf) = tryo!(udmabuf_of(LEN, libc::MFD_HUGETLB));
    let errors0 = dma_api_errors();
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    const PORT: u16 = 7162;
    let bytes = env.bytes(32 << 20);
    let seed = 162u64;
    let a_idx = n.a_idx;
    let before = tryo!(n.stats(1, 0));
    let dfd = tryo!(dmabuf.try_clone().map_err(|e| format!("dup: {e}")));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_netns(NS_A, move || -> Result<Rx, String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_dmabuf(dfd.as_raw_fd(), LEN, 0).map_err(|e| format!("register the dma-buf: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind: {e}"))?;
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).map_err(|e| format!("listen: {e}"))?;
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        receive(&mut z, &s, &Pattern::new(seed), None)
    });
    let _ = ready_rx.recv();
    let sent = join(sender(addr_a(false, PORT), bytes, Arc::new(Pattern::new(seed)), 0));
    let rx = match join(rx) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; sender: {sent:?}")),
    };
    let d = tryo!(n.stats(1, 0)).since(&before);
    let errors = dma_api_errors();
    env.diag(&format!(
        "huge-page udmabuf area of {}: {} byte-exact, zero-copy {}, copied {}; netdevsim DMA'd {}; DMA-API debug errors: {}",
        mib(LEN as u64),
        mib(rx.bytes),
        mib(rx.zc_bytes),
        mib(rx.copy_bytes),
        mib(d.dma_bytes),
        match (errors0, errors) {
            (Some(a), Some(b)) => format!("{a} before, {b} after"),
            _ => "not in this kernel (the debug kernel checks the segments)".into(),
        }
    ));
    if sent != Ok(bytes) || rx.bytes != bytes {
        return Fail(format!("sent {sent:?}, received {} of {bytes}", rx.bytes));
    }
    if rx.zc_bytes != bytes || rx.copy_bytes != 0 || d.dma_bytes < bytes {
        return Fail("not all zero-copy into the dma-buf".into());
    }
    if let (Some(a), Some(b)) = (errors0, errors) {
        if b != a {
            return Fail(format!("DMA-API debugging reported {} misuses (see the kernel log)", b - a));
        }
    }
    drop(n);
    drop(dmabuf);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
