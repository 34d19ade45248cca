// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Large rx buffers (`zcrx_rs_area_reg.buf_size`): one net_iov per buffer
//! of several pages, a page pool of that order on the queue, records and
//! refill entries in whole buffers.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::*;
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, expect_errno, info, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{self, addr_a, in_netns, join, sender, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("large_buffers_32k_zero_copy", large_buffers_32k_zero_copy), ("large_buffers_rules_and_copies", large_buffers_rules_and_copies)];

const BUF: usize = 32 << 10;

/// Huge pages reserved for a test, given back on drop.
pub(crate) struct HugePages {
    before: u64,
}

impl HugePages {
    /// Makes `n` more huge pages free than there are now.
    pub(crate) fn reserve(n: u64) -> Result<Self, String> {
        const P: &str = "/proc/sys/vm/nr_hugepages";
        let read = |p: &str| -> Result<u64, String> {
            fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?.trim().parse().map_err(|e| format!("{p}: {e}"))
        };
        let before = read(P)?;
        fs::write(P, format!("{}", before + n)).map_err(|e| format!("{P}: {e}"))?;
        let g = HugePages { before };
        let now = read(P)?;
        if now < before + n {
            return Err(format!("asked for {} huge pages, the kernel gave {now}", before + n));
        }
        Ok(g)
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = fs::write("/proc/sys/vm/nr_hugepages", format!("{}", self.before));
    }
}

/// What a stream received through large buffers.
#[derive(Default, Debug)]
struct Got {
    bytes: u64,
    zc: u64,
    copy: u64,
    records: u64,
    /// Most bytes of one zero-copy record past its buffer's start
    /// (`off % buf + len`): above a page, the NIC wrote past the first page.
    max_reach: u64,
    /// Longest record.
    max_len: u64,
}

/// Receives `s` to its end through `z`, checking every byte, every record
/// inside one buffer of `buf` bytes, and giving buffers back.
fn receive_big(z: &mut Zcrx, s: &std::net::TcpStream, pat: &Pattern, buf: u64) -> Result<Got, String> {
    use std::os::fd::AsRawFd;
    let mut recs = vec![Rec::default(); 128];
    let mut g = Got::default();
    let t0 = Instant::now();
    loop {
        let r = match z.recv(s.as_raw_fd(), &mut recs, 0) {
            Ok(r) => r,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) || e.raw_os_error() == Some(libc::EAGAIN) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("recv after {} bytes: {e}", g.bytes)),
        };
        if r.bytes == 0 {
            return Ok(g);
        }
        for rec in &recs[..r.records] {
            let data = z.data(rec);
            if let Some(bad) = pat.check(g.bytes, data) {
                return Err(format!("payload mismatch at stream offset {bad} (record off {} len {})", rec.off, rec.len));
            }
            let len = u64::from(rec.len);
            if rec.off % buf + len > buf {
                return Err(format!("record off {} len {len} crosses a {buf}-byte buffer", rec.off));
            }
            g.bytes += len;
            g.records += 1;
            g.max_len = g.max_len.max(len);
            if rec.flags & ZCRX_RS_REC_COPY != 0 {
                g.copy += len;
            } else {
                g.zc += len;
                crate::devlog::note(data)?;
                g.max_reach = g.max_reach.max(rec.off % buf + len);
            }
        }
        z.refill(&recs[..r.records]).map_err(|e| format!("refill: {e}"))?;
        if t0.elapsed() > Duration::from_secs(600) {
            return Err(format!("no end after 600 s and {} bytes", g.bytes));
        }
    }
}

/// 32 KiB buffers on a header-split netdevsim queue (its pool of order 3,
/// asked for through the queue's rx_page_size, also after the device went
/// down and up while bound): a stream arrives
/// byte-exact and all zero-copy, records never cross a buffer, the NIC
/// wrote past the first page of a buffer, the refill ring takes buffer
/// offsets, and INFO says what is supported.
fn large_buffers_32k_zero_copy(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let i = tryo!(info());
    if i.features & u64::from(ZCRX_RS_FEATURE_BUF_SIZE) == 0 || i.max_buf_size != ZCRX_RS_BUF_MAX_SIZE {
        return Fail(format!("INFO: features {:#x} max_buf_size {}", i.features, i.max_buf_size));
    }
    const AREA: usize = 32 << 20;
    let hp = zcrx::dev::huge_page_size();
    let _huge = tryo!(HugePages::reserve((AREA / hp) as u64 + 1));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    const PORT: u16 = 7140;
    let bytes = env.bytes(256 << 20);
    let seed = 140u64;
    let before = tryo!(n.stats(1, 0));
    // Every record matched to a write netdevsim logged. The log holds
    // 2^20 writes; over IPv4 netdevsim's TSO lets 64 KiB segments fill
    // 32 KiB buffers, so 256 MiB took about 9700. Should it fill, the
    // check fails ("lost N writes") rather than pass unchecked.
    let log = tryo!(DmaLog::start());
    let a_idx = n.a_idx;
    let dev = n.a.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = in_netns(NS_A, move || -> Result<(Got, zcrx_rs_stats), String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area_buf(AREA, BUF).map_err(|e| format!("register {} of {BUF}-byte buffers: {e}", mib(AREA as u64)))?;
        if z.buf_size() != BUF {
            return Err(format!("buffer size {} after registering {BUF}", z.buf_size()));
        }
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind queue 0 with {BUF}-byte buffers: {e}"))?;
        // The binding survives the device going down and up: its pools
        // come back with the binding's buffer size.
        for state in ["down", "up"] {
            net::run("ip", &["link", "set", "dev", &dev, state], "")?;
        }
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        if st.area_buffers != (AREA / BUF) as u64 {
            return Err(format!("area of {} buffers, expected {}", st.area_buffers, AREA / BUF));
        }
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).map_err(|e| format!("listen: {e}"))?;
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let g = receive_big(&mut z, &s, &Pattern::new(seed), BUF as u64)?;
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        Ok((g, st))
    });
    let _ = ready_rx.recv();
    // IPv4: netdevsim offers TSO for IPv4 only, so the sender's 64 KiB
    // skbs cross the pair whole and fill 32 KiB buffers as an LRO/HW-GRO
    // NIC would; IPv6 arrives in MSS-sized packets, one per buffer.
    let tx = sender(addr_a(false, PORT), bytes, Arc::new(Pattern::new(seed)), 0);
    let sent = join(tx);
    let (g, st) = match join(rx) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; sender: {sent:?}")),
    };
    let d = tryo!(n.stats(1, 0)).since(&before);
    env.diag(&format!(
        "{BUF}-byte buffers: {} byte-exact, zero-copy {} ({:.2}%), copied {}, {} records (longest {} B, \
         furthest {} B into a buffer); module: zc {} copy {} alloc_fail {} refill ok/bad {}/{}; \
         netdevsim DMA'd {} in {} packets, {} dropped for want of a buffer",
        mib(g.bytes),
        mib(g.zc),
        100.0 * g.zc as f64 / g.bytes.max(1) as f64,
        mib(g.copy),
        g.records,
        g.max_len,
        g.max_reach,
        mib(st.zc_bytes),
        mib(st.copy_bytes),
        st.alloc_fail,
        st.refill_ok,
        st.refill_bad,
        mib(d.dma_bytes),
        d.dma_packets,
        d.drop_no_buf
    ));
    if sent != Ok(bytes) || g.bytes != bytes {
        return Fail(format!("sent {sent:?}, received {} of {bytes} bytes", g.bytes));
    }
    if g.zc != g.bytes || st.zc_bytes != g.zc || st.copy_bytes != g.copy {
        return Fail("not all zero-copy, or the module's counters disagree with the records".into());
    }
    if d.dma_bytes < g.zc {
        return Fail(format!("netdevsim DMA'd {} < {} delivered zero-copy", d.dma_bytes, g.zc));
    }
    env.diag(&tryo!(log.check(0, g.zc)));
    drop(log);
    if g.max_reach <= 4096 {
        return Fail(format!("no record reached past the first page of a buffer (max {})", g.max_reach));
    }
    if st.refill_bad != 0 {
        return Fail(format!("{} refill entries refused", st.refill_bad));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// Anonymous memory whose first buffer is certainly not physically
/// contiguous: pages 0 and 1 swapped (mremap) if they were, checked in
/// `/proc/self/pagemap`. Returns its address (`len` bytes, leaked: the
/// test process ends soon).
fn discontiguous(len: usize) -> Result<u64, String> {
    let ps = zcrx::dev::page_size();
    // SAFETY: fresh anonymous mappings; nothing existing is touched.
    unsafe {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        let a = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
        let tmp = libc::mmap(std::ptr::null_mut(), ps, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0);
        if a == libc::MAP_FAILED || tmp == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let p0 = a.cast::<u8>();
        let p1 = p0.add(ps);
        let pfn = |p: *const u8| -> Result<u64, String> {
            use std::os::unix::fs::FileExt;
            let f = fs::File::open("/proc/self/pagemap").map_err(|e| format!("pagemap: {e}"))?;
            let mut b = [0u8; 8];
            f.read_exact_at(&mut b, (p as u64 / ps as u64) * 8).map_err(|e| format!("pagemap: {e}"))?;
            Ok(u64::from_le_bytes(b) & ((1 << 55) - 1))
        };
        // Contiguous by chance: swap the two pages, which makes them not.
        if pfn(p1)? == pfn(p0)? + 1 {
            let fixed = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
            if libc::mremap(p0.cast(), ps, ps, fixed, tmp) == libc::MAP_FAILED
                || libc::mremap(p1.cast(), ps, ps, fixed, p0) == libc::MAP_FAILED
                || libc::mremap(tmp, ps, ps, fixed, p1) == libc::MAP_FAILED
            {
                return Err(format!("mremap: {}", std::io::Error::last_os_error()));
            }
        } else {
            libc::munmap(tmp, ps);
        }
        let (f0, f1) = (pfn(p0)?, pfn(p1)?);
        if f0 == 0 || f1 == 0 || f1 == f0 + 1 {
            return Err(format!("pages 0 and 1 at pfns {f0:#x} {f1:#x}: not a discontiguous buffer"));
        }
        Ok(a as u64)
    }
}

/// The rules of `buf_size`, and copies into large buffers: what
/// REGISTER_AREA refuses (`EINVAL`: not a power of two, below a page,
/// above `ZCRX_RS_BUF_MAX_SIZE`, an area not a whole number of buffers,
/// the padding set); memory not physically contiguous per buffer is
/// refused at BIND (`ERANGE`) but serves a copy-only context, into which a
/// loopback stream arrives byte-exact in records of up to 32 KiB, copied
/// page by page.
fn large_buffers_rules_and_copies(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let ps = zcrx::dev::page_size() as u64;
    const LEN: usize = 4 << 20;
    let base = tryo!(discontiguous(LEN));
    let reg = |buf_size: u32, len: u64, pad: u32| -> std::io::Result<()> {
        let z = Zcrx::open()?;
        let mut r = zcrx_rs_area_reg { addr: base, len, buf_size, dmabuf_fd: pad as i32, ..Default::default() };
        // SAFETY: REGISTER_AREA on our context's fd with a matching struct.
        match unsafe { libc::ioctl(z.raw_fd(), IOC_REGISTER_AREA as _, &mut r as *mut zcrx_rs_area_reg) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    };
    for (what, bs, len, pad) in [
        ("buf_size 3 pages", 3 * ps as u32, 3 * ps * 4, 0),
        ("buf_size half a page", ps as u32 / 2, LEN as u64, 0),
        ("buf_size 4 MiB", 4 << 20, 4 << 20, 0),
        ("area not a whole number of buffers", BUF as u32, BUF as u64 + ps, 0),
        ("dmabuf_fd set without ZCRX_RS_AREA_DMABUF", BUF as u32, LEN as u64, 1),
    ] {
        tryo!(expect_errno(what, reg(bs, len, pad), libc::EINVAL));
    }
    // The largest accepted size.
    tryo!(reg(ZCRX_RS_BUF_MAX_SIZE, 2 * ZCRX_RS_BUF_MAX_SIZE as u64, 0).map_err(|e| format!("buf_size 2 MiB: {e}")));
    // Not physically contiguous: no NIC may write it, BIND says so.
    let a_idx = n.a_idx;
    tryo!(join(in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        // SAFETY: our own mapping that no Rust object lives in; the bind that follows is refused (ERANGE), so nothing writes it.
        unsafe { z.register_raw_buf(base, LEN as u64, BUF as u32) }.map_err(|e| format!("register: {e}"))?;
        expect_errno("BIND with discontiguous 32 KiB buffers", z.bind(a_idx, 0, 0), libc::ERANGE)
    })));
    // Contiguous, but larger than netdevsim takes (64 KiB): the driver
    // refuses the size, which is not the contiguity ERANGE above.
    let _huge = tryo!(HugePages::reserve(2));
    tryo!(join(in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area_buf(2 << 20, 128 << 10).map_err(|e| format!("register 128 KiB buffers: {e}"))?;
        expect_errno("BIND with 128 KiB buffers on netdevsim", z.bind(a_idx, 0, 0), libc::EOPNOTSUPP)
    })));
    // A copy-only context takes the same memory; copies fill whole buffers.
    const PORT: u16 = 7141;
    let bytes = env.bytes(32 << 20);
    let seed = 141u64;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let rx = std::thread::spawn(move || -> Result<(Got, zcrx_rs_stats), String> {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area_with(LEN, BUF, false).map_err(|e| format!("register: {e}"))?;
        z.bind_nodev(0).map_err(|e| format!("BIND NODEV: {e}"))?;
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, PORT)).map_err(|e| format!("listen: {e}"))?;
        let _ = ready_tx.send(());
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let g = receive_big(&mut z, &s, &Pattern::new(seed), BUF as u64)?;
        let st = z.stats().map_err(|e| format!("stats: {e}"))?;
        Ok((g, st))
    });
    let _ = ready_rx.recv();
    let tx = net::local_sender((Ipv4Addr::LOCALHOST, PORT).into(), bytes, Arc::new(Pattern::new(seed)));
    let sent = join(tx);
    let (g, st) = match rx.join().map_err(|_| "receiver panicked".to_string()).and_then(|r| r) {
        Ok(v) => v,
        Err(e) => return Fail(format!("copy-only receiver: {e}; sender: {sent:?}")),
    };
    env.diag(&format!(
        "EINVAL x5, 2 MiB accepted, ERANGE at BIND for discontiguous memory, EOPNOTSUPP for 128 KiB buffers \
         netdevsim does not take; copy-only over loopback with \
         {BUF}-byte buffers: {} byte-exact, zero-copy {}, copied {} in {} records (longest {} B); module: copy {}",
        mib(g.bytes),
        mib(g.zc),
        mib(g.copy),
        g.records,
        g.max_len,
        mib(st.copy_bytes)
    ));
    if sent != Ok(bytes) || g.bytes != bytes || g.copy != bytes || st.copy_bytes != bytes {
        return Fail(format!("sent {sent:?}, received {} of {bytes} bytes, {} copied", g.bytes, g.copy));
    }
    if g.max_len <= ps {
        return Fail(format!("no copy record longer than a page (max {})", g.max_len));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
