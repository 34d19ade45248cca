// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! A context of `/dev/zcrx`: the area, the binding, the refill ring, and
//! receiving from a TCP socket (the `testing` feature: the example below
//! is compiled only with it).
//!
#![cfg_attr(feature = "testing", doc = "```no_run")]
#![cfg_attr(not(feature = "testing"), doc = "```ignore")]
//! # fn main() -> std::io::Result<()> {
//! # let sock = std::net::TcpStream::connect("127.0.0.1:1")?;
//! use std::os::fd::AsRawFd;
//! let mut z = zcrx::Zcrx::open()?;
//! z.register_area(64 << 20)?; // 64 MiB of anonymous memory
//! z.bind(2, 0, 0)?; // ifindex 2, rx queue 0, ring as large as the area
//! let mut recs = vec![zcrx::Rec::default(); 256];
//! loop {
//!     let n = z.recv(sock.as_raw_fd(), &mut recs, 0)?;
//!     if n.bytes == 0 { break; }
//!     for r in &recs[..n.records] {
//!         let data: &[u8] = z.data(r);
//!         // ... use data ...
//!     }
//!     z.refill(&recs[..n.records])?;
//! }
//! # Ok(()) }
//! ```

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::{ioctl, open};
use crate::uapi::*;

/// One receive record.
pub type Rec = zcrx_rs_rec;

/// Result of [`Zcrx::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Records filled.
    pub records: usize,
    /// Bytes they describe; 0 at end of stream.
    pub bytes: u64,
}

/// An anonymous private mapping, unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) ptr: *mut u8,
    pub(crate) len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` hands out only its address and length; whoever builds
// slices from them (the area's readers, the ring's single producer behind a
// lock) proves those accesses race-free.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn anon(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    /// `len` bytes (rounded up to whole huge pages) of hugetlbfs memory, so
    /// that buffers larger than a page are physically contiguous: needs huge
    /// pages reserved (`/proc/sys/vm/nr_hugepages`), `ENOMEM` otherwise.
    pub(crate) fn huge(len: usize) -> io::Result<Self> {
        let hp = huge_page_size();
        let len = len.div_ceil(hp) * hp;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    pub(crate) fn shared(fd: RawFd, len: usize) -> io::Result<Self> {
        // SAFETY: maps the device's ring at offset 0; the kernel checks the length.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// The refill ring as mapped in user space.
pub(crate) struct Ring {
    map: Mapping,
    offsets: zcrx_rs_ring_offsets,
    entries: u32,
    /// Our producer position (the kernel only reads `tail`).
    tail: u32,
    /// Records whose entries did not fit yet (see [`Zcrx::refill`]), as
    /// `(off, len)`, oldest first.
    pub(crate) backlog: Vec<(u64, u32)>,
    /// Clears the offset-within-buffer bits of an area offset.
    buf_mask: u64,
    /// The module takes `ZCRX_RS_RQE_RANGE` entries: a record goes back as
    /// it came, merged or not.
    ranges: bool,
}

impl Ring {
    /// The ring that `BIND` (`b`, its output) set up, mapped as `map`;
    /// `backlog`: entries still due from an earlier ring.
    /// `buf_size`: the area's buffer size; `ranges`: the module takes
    /// `ZCRX_RS_RQE_RANGE` entries (`ZCRX_RS_FEATURE_MERGE`).
    pub(crate) fn new(map: Mapping, b: &zcrx_rs_bind, backlog: Vec<(u64, u32)>, buf_size: usize, ranges: bool) -> Self {
        Ring { map, offsets: b.offsets, entries: b.rq_entries, tail: 0, backlog, buf_mask: !(buf_size as u64 - 1), ranges }
    }

    /// The entry that gives back the buffers of record `(off, len)`: a
    /// range (one reference to each buffer it touches, which is what a
    /// merged record holds), or, from a module without ranges, the one
    /// buffer it lies in.
    fn entry(&self, (off, len): (u64, u32)) -> zcrx_rs_rqe {
        if self.ranges {
            zcrx_rs_rqe { off, len: len.max(1), flags: ZCRX_RS_RQE_RANGE }
        } else {
            zcrx_rs_rqe { off: off & self.buf_mask, len: 0, flags: 0 }
        }
    }

    /// Hands the buffers of records `(off, len)` back, one entry per
    /// record: straight onto the ring while it has room and nothing older
    /// waits, into the backlog otherwise (oldest first); one release store
    /// publishes them all.
    pub(crate) fn give_back(&mut self, recs: impl ExactSizeIterator<Item = (u64, u32)>) {
        self.flush_backlog();
        let mut direct = if self.backlog.is_empty() { self.room().min(recs.len()) } else { 0 };
        let published = direct > 0;
        for rec in recs {
            if direct > 0 {
                self.write(self.entry(rec));
                direct -= 1;
            } else {
                self.backlog.push(rec);
            }
        }
        if published {
            self.publish();
        }
    }

    fn head(&self) -> &AtomicU32 {
        // SAFETY: the offset is inside the mapping, u32-aligned (kernel ABI).
        unsafe { &*self.map.ptr.add(self.offsets.head as usize).cast::<AtomicU32>() }
    }

    fn tail_word(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { &*self.map.ptr.add(self.offsets.tail as usize).cast::<AtomicU32>() }
    }

    fn rqe(&self, pos: u32) -> *mut zcrx_rs_rqe {
        let i = (pos & (self.entries - 1)) as usize;
        // SAFETY: `i < entries`; the kernel sized the mapping for them.
        unsafe { self.map.ptr.add(self.offsets.rqes as usize).cast::<zcrx_rs_rqe>().add(i) }
    }

    /// Free entries.
    pub(crate) fn room(&self) -> usize {
        (self.entries - self.tail.wrapping_sub(self.head().load(Ordering::Acquire))) as usize
    }

    /// Writes one entry (the caller checked `room`); [`Ring::publish`]
    /// makes the written entries visible to the kernel.
    pub(crate) fn write(&mut self, e: zcrx_rs_rqe) {
        // SAFETY: the entry is ours until `tail` moves past it.
        unsafe { self.rqe(self.tail).write(e) };
        self.tail = self.tail.wrapping_add(1);
    }

    pub(crate) fn publish(&self) {
        self.tail_word().store(self.tail, Ordering::Release);
    }

    /// Moves as much of the backlog onto the ring as fits.
    pub(crate) fn flush_backlog(&mut self) {
        let n = self.room().min(self.backlog.len());
        if n == 0 {
            return;
        }
        for i in 0..n {
            self.write(self.entry(self.backlog[i]));
        }
        self.publish();
        self.backlog.drain(..n);
    }
}

/// An open `/dev/zcrx` context.
pub struct Zcrx {
    fd: OwnedFd,
    area: Option<Mapping>,
    ring: Option<Ring>,
    /// The registered area's buffer size (the page size until one is).
    buf_size: usize,
    /// For each buffer of the area, how many records the program holds
    /// that touch it: counted up by [`Zcrx::recv`], down when records or
    /// entries go back. [`Zcrx::data`] reads only buffers held here, which
    /// the kernel does not write (a record given back, or made up, would
    /// be memory the NIC may be writing).
    held: Vec<u16>,
}

impl Zcrx {
    /// Opens `/dev/zcrx`.
    pub fn open() -> io::Result<Self> {
        Self::open_path(Path::new("/dev/zcrx"))
    }

    /// Opens the device at `path`.
    pub fn open_path(path: &Path) -> io::Result<Self> {
        Ok(Zcrx { fd: open(path, libc::O_RDWR)?, area: None, ring: None, buf_size: page_size(), held: Vec::new() })
    }

    /// The raw fd (for tests that issue their own ioctls).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `ZCRX_RS_IOC_INFO`.
    pub fn info(&self) -> io::Result<zcrx_rs_info> {
        let mut i = zcrx_rs_info::default();
        ioctl(&self.fd, IOC_INFO as _, &mut i as *mut _ as usize)?;
        Ok(i)
    }

    /// `ZCRX_RS_IOC_STATS`.
    pub fn stats(&self) -> io::Result<zcrx_rs_stats> {
        let mut s = zcrx_rs_stats::default();
        ioctl(&self.fd, IOC_STATS as _, &mut s as *mut _ as usize)?;
        Ok(s)
    }

    /// Maps `len` bytes of anonymous memory and registers them as the area.
    pub fn register_area(&mut self, len: usize) -> io::Result<()> {
        self.register_area_buf(len, 0)
    }

    /// Registers `len` bytes as an area of `buf_size`-byte buffers (0: the
    /// page size). Buffers larger than a page get hugetlbfs memory, which a
    /// NIC can write whole (needs huge pages reserved: `ENOMEM` otherwise);
    /// with `huge == false` plain anonymous memory, good for copy-only
    /// contexts only (`BIND` says `ERANGE`).
    pub fn register_area_with(&mut self, len: usize, buf_size: usize, huge: bool) -> io::Result<()> {
        let m = if huge { Mapping::huge(len)? } else { Mapping::anon(len)? };
        // SAFETY: a fresh mapping no Rust object lives in, kept (`area`) for
        // as long as the context; read only through `data`.
        unsafe { self.register_raw_buf(m.ptr as u64, len as u64, buf_size as u32)? };
        self.area = Some(m);
        self.held = vec![0; len / self.buf_size];
        Ok(())
    }

    /// [`Zcrx::register_area_with`], huge pages when `buf_size` is larger
    /// than a page.
    pub fn register_area_buf(&mut self, len: usize, buf_size: usize) -> io::Result<()> {
        self.register_area_with(len, buf_size, buf_size > page_size())
    }

    /// Registers memory the caller owns (`addr`, `len`); the caller keeps it
    /// mapped for as long as this context lives. For tests of odd memory.
    ///
    /// # Safety
    ///
    /// If the module accepts the range, the kernel and (once bound) the NIC
    /// write into it until the context is gone, behind the compiler's back:
    /// the range must not overlap memory this program reads or writes as
    /// Rust objects (a `Vec`, the stack, ...) while the context lives. A
    /// range the module refuses (bad alignment, unmapped, ...) is never
    /// written.
    pub unsafe fn register_raw(&self, addr: u64, len: u64) -> io::Result<()> {
        let mut r = zcrx_rs_area_reg { addr, len, ..Default::default() };
        ioctl(&self.fd, IOC_REGISTER_AREA as _, &mut r as *mut _ as usize)?;
        Ok(())
    }

    /// [`Zcrx::register_raw`] with `buf_size`-byte buffers (0: a page).
    ///
    /// # Safety
    ///
    /// As for [`Zcrx::register_raw`].
    pub unsafe fn register_raw_buf(&mut self, addr: u64, len: u64, buf_size: u32) -> io::Result<()> {
        let mut r = zcrx_rs_area_reg { addr, len, buf_size, ..Default::default() };
        ioctl(&self.fd, IOC_REGISTER_AREA as _, &mut r as *mut _ as usize)?;
        self.buf_size = if buf_size == 0 { page_size() } else { buf_size as usize };
        Ok(())
    }

    /// Registers the first `len` bytes of the dma-buf `dmabuf` as the area
    /// (`ZCRX_RS_AREA_DMABUF`), buffers of `buf_size` bytes (0: a page), and
    /// maps the dma-buf here (`MAP_SHARED`) so that [`Zcrx::data`] reads
    /// what the NIC wrote. The caller keeps `dmabuf` open as long as it
    /// likes: the kernel holds its own reference.
    pub fn register_dmabuf(&mut self, dmabuf: RawFd, len: usize, buf_size: usize) -> io::Result<()> {
        let mut r = zcrx_rs_area_reg {
            len: len as u64,
            flags: ZCRX_RS_AREA_DMABUF,
            buf_size: buf_size as u32,
            dmabuf_fd: dmabuf,
            ..Default::default()
        };
        ioctl(&self.fd, IOC_REGISTER_AREA as _, &mut r as *mut _ as usize)?;
        match Mapping::shared(dmabuf, len) {
            Ok(m) => {
                self.area = Some(m);
                self.held = vec![0; len / if buf_size == 0 { page_size() } else { buf_size }];
            }
            Err(e) => {
                // An exporter without mmap: give the area up again, so the
                // context is as it was.
                let _ = ioctl(&self.fd, IOC_UNREGISTER_AREA as _, 0);
                return Err(e);
            }
        }
        self.buf_size = if buf_size == 0 { page_size() } else { buf_size };
        Ok(())
    }

    /// The area's buffer size (the page size before one is registered).
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Binds to rx queue `rxq` of `ifindex` (the caller's network namespace)
    /// and maps the refill ring. After [`Zcrx::unbind`] (or the device going
    /// away) the context can bind again; the new ring replaces the old one. `rq_entries == 0`: one entry per buffer of
    /// the area, so the ring can never be full.
    pub fn bind(&mut self, ifindex: u32, rxq: u32, rq_entries: u32) -> io::Result<()> {
        self.bind_flags(ifindex, rxq, rq_entries, 0)
    }

    /// Makes the context copy-only (`ZCRX_RS_BIND_NODEV`): no queue, no
    /// privilege needed; [`Zcrx::recv`] copies every byte into the area.
    /// Maps the refill ring as [`Zcrx::bind`] does.
    pub fn bind_nodev(&mut self, rq_entries: u32) -> io::Result<()> {
        self.bind_flags(0, 0, rq_entries, ZCRX_RS_BIND_NODEV)
    }

    /// Binds rx queue `rxq` of the device the context is bound to as well
    /// (`ZCRX_RS_BIND_ADD_QUEUE`): one area and one refill ring serve all
    /// its queues, so nothing is mapped again.
    pub fn add_queue(&self, ifindex: u32, rxq: u32) -> io::Result<()> {
        let mut b = zcrx_rs_bind { ifindex, rxq, flags: ZCRX_RS_BIND_ADD_QUEUE, ..Default::default() };
        ioctl(&self.fd, IOC_BIND as _, &mut b as *mut _ as usize).map(|_| ())
    }

    /// `ZCRX_RS_IOC_BIND` with `flags` (for tests of the checks).
    pub fn bind_flags(&mut self, ifindex: u32, rxq: u32, rq_entries: u32, flags: u32) -> io::Result<()> {
        let entries = if rq_entries != 0 {
            rq_entries
        } else {
            let bufs = self.area.as_ref().map_or(1, |a| a.len / self.buf_size);
            (bufs as u32).clamp(1, ZCRX_RS_RQ_MAX_ENTRIES)
        };
        let mut b = zcrx_rs_bind { ifindex, rxq, rq_entries: entries, flags, ..Default::default() };
        ioctl(&self.fd, IOC_BIND as _, &mut b as *mut _ as usize)?;
        let map = Mapping::shared(self.fd.as_raw_fd(), b.mmap_len as usize)?;
        // Binding again after UNBIND: the kernel took what the old ring held;
        // returns still waiting in its backlog go through the new ring.
        let backlog = self.ring.take().map(|r| r.backlog).unwrap_or_default();
        let ranges = self.info().is_ok_and(|i| i.features & u64::from(ZCRX_RS_FEATURE_MERGE) != 0);
        self.ring = Some(Ring::new(map, &b, backlog, self.buf_size, ranges));
        Ok(())
    }

    /// `ZCRX_RS_IOC_UNBIND`.
    pub fn unbind(&self) -> io::Result<()> {
        ioctl(&self.fd, IOC_UNBIND as _, 0).map(|_| ())
    }

    /// `ZCRX_RS_IOC_UNREGISTER_AREA`: gives the area up (not while bound,
    /// nor while any buffer is away: `EBUSY`). On success the area and the
    /// refill ring are unmapped here, refill entries still waiting are
    /// dropped (their buffers came home), and another area can be
    /// registered.
    pub fn unregister_area(&mut self) -> io::Result<()> {
        ioctl(&self.fd, IOC_UNREGISTER_AREA as _, 0)?;
        self.ring = None;
        self.area = None;
        self.held = Vec::new();
        self.buf_size = page_size();
        Ok(())
    }

    /// Receives from TCP socket `sock` into `recs` (flags:
    /// `ZCRX_RS_RECV_DONTWAIT`). The bytes are in the area at each record's
    /// offset until the record is given back with [`Zcrx::refill`].
    ///
    /// Refill entries still waiting in the backlog go onto the ring first.
    pub fn recv(&mut self, sock: RawFd, recs: &mut [Rec], flags: u32) -> io::Result<Received> {
        if let Some(ring) = self.ring.as_mut() {
            ring.flush_backlog();
        }
        let mut r = zcrx_rs_recv { sockfd: sock, flags, recs: recs.as_mut_ptr() as u64, nr_recs: recs.len() as u32, ..Default::default() };
        let ret = ioctl(&self.fd, IOC_RECV as _, &mut r as *mut _ as usize)?;
        debug_assert_eq!(ret as u64, r.bytes);
        let n = (r.nr_recs as usize).min(recs.len());
        // SAFETY: what this RECV returned, counted once.
        unsafe { self.adopt(&recs[..n]) };
        Ok(Received { records: r.nr_recs as usize, bytes: r.bytes })
    }

    /// Counts records received outside [`Zcrx::recv`] (a raw
    /// `ZCRX_RS_IOC_RECV` on [`Zcrx::raw_fd`], e.g. from another thread) as
    /// held, so that [`Zcrx::data`] reads them.
    ///
    /// # Safety
    ///
    /// The records must be what a RECV on this context returned, not given
    /// back yet, and adopted once: `data` then trusts that the kernel does
    /// not write their buffers.
    pub unsafe fn adopt(&mut self, recs: &[Rec]) {
        for rec in recs {
            for b in self.buffers_of(rec.off, rec.len as u64) {
                if let Some(h) = self.held.get_mut(b) {
                    *h = h.saturating_add(1);
                }
            }
        }
    }

    /// The buffers `[off, off + len)` touches.
    fn buffers_of(&self, off: u64, len: u64) -> std::ops::Range<usize> {
        let bs = self.buf_size as u64;
        match off.checked_add(len) {
            Some(end) if len > 0 => (off / bs) as usize..((end - 1) / bs + 1) as usize,
            _ => 0..0,
        }
    }

    /// Counts the records or entries going back off the ledger.
    fn release(&mut self, ranges: impl Iterator<Item = std::ops::Range<usize>>) {
        for r in ranges {
            for b in r {
                if let Some(h) = self.held.get_mut(b) {
                    *h = h.saturating_sub(1);
                }
            }
        }
    }

    /// The data a record describes. Panics unless the record lies in the
    /// area registered here and every buffer it touches is held by this
    /// program (received, not given back): those the kernel does not
    /// write.
    #[inline]
    pub fn data(&self, r: &Rec) -> &[u8] {
        let a = self.area.as_ref().expect("no area registered through register_area");
        assert!(r.off.checked_add(r.len as u64).is_some_and(|end| end <= a.len as u64), "record outside the area");
        let held = self.buffers_of(r.off, r.len as u64).all(|b| self.held.get(b).is_some_and(|&h| h > 0));
        assert!(held, "record {}+{}: a buffer it touches is not held (given back, or never received)", r.off, r.len);
        // SAFETY: inside our mapping; every buffer the range touches is
        // held by the program (the ledger), and the kernel does not write
        // a buffer while the user holds it; the borrow of `self` ends
        // before anything can give it back (`refill*` take `&mut self`).
        unsafe { std::slice::from_raw_parts(a.ptr.add(r.off as usize), r.len as usize) }
    }

    /// The area's address and length, for tests that look its pages up
    /// (pagemap); not for reading (see [`Zcrx::data`]).
    pub fn area_range(&self) -> Option<(*const u8, usize)> {
        self.area.as_ref().map(|a| (a.ptr as *const u8, a.len))
    }

    /// Address and length of the refill ring's mapping, if bound (for tests
    /// that hand odd memory to the kernel).
    pub fn ring_mapping(&self) -> Option<(u64, usize)> {
        self.ring.as_ref().map(|r| (r.map.ptr as u64, r.map.len))
    }

    /// The refill ring's layout in its mapping (offsets of head, tail and
    /// the entries; the number of entries), if bound: for a process that
    /// maps the ring through a shared context fd.
    pub fn ring_layout(&self) -> Option<(zcrx_rs_ring_offsets, u32)> {
        self.ring.as_ref().map(|r| (r.offsets, r.entries))
    }

    /// `ZCRX_RS_IOC_EVENTS`: collects the events that fired since the last
    /// call and arms `arm` (`ZCRX_RS_EVENT_*`); the reply says what fired
    /// and what is armed now. `poll()` on [`Zcrx::raw_fd`] reports
    /// `POLLPRI` while a fired event waits to be collected.
    pub fn events(&self, arm: u32) -> io::Result<zcrx_rs_events> {
        let mut e = zcrx_rs_events { arm, ..Default::default() };
        ioctl(&self.fd, IOC_EVENTS as _, &mut e as *mut _ as usize)?;
        Ok(e)
    }

    /// The counters the kernel keeps in the ring mapping (no syscall), if
    /// bound to a module that has them (`ZCRX_RS_FEATURE_EVENTS`).
    pub fn ring_stats(&self) -> Option<zcrx_rs_ring_stats> {
        let r = self.ring.as_ref()?;
        let off = r.offsets.stats as usize;
        if off == 0 || off + std::mem::size_of::<zcrx_rs_ring_stats>() > r.map.len {
            return None;
        }
        // SAFETY: inside the mapping (checked), 8-byte aligned (kernel
        // ABI); the kernel stores each word whole, so word-wise atomic
        // loads see whole values.
        let w = |i: usize| unsafe { (*r.map.ptr.add(off + 8 * i).cast::<std::sync::atomic::AtomicU64>()).load(Ordering::Relaxed) };
        Some(zcrx_rs_ring_stats { zc_bytes: w(0), copy_bytes: w(1), copy_records: w(2), alloc_fail: w(3), events: w(4), __resv: [0; 3] })
    }

    /// Room left in the refill ring.
    pub fn refill_room(&self) -> usize {
        self.ring.as_ref().map_or(0, Ring::room)
    }

    /// Gives the buffers of `recs` back through the refill ring, one entry
    /// per record. A buffer handed out in several records (a packet split
    /// across two receive calls) needs as many entries, so the entries can
    /// outnumber the ring; what does not fit waits in a backlog and goes out,
    /// oldest first, at the next `refill` or `recv` (by then the kernel has
    /// taken entries off the ring: the page pool on the next packets, or the
    /// receive call when it runs out of buffers).
    pub fn refill(&mut self, recs: &[Rec]) -> io::Result<()> {
        let ring = self.ring.as_mut().ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
        ring.give_back(recs.iter().map(|r| (r.off, r.len)));
        let ranges: Vec<_> = recs.iter().map(|r| self.buffers_of(r.off, r.len as u64)).collect();
        self.release(ranges.into_iter());
        Ok(())
    }

    /// Entries waiting to go onto the refill ring.
    pub fn refill_backlog(&self) -> usize {
        self.ring.as_ref().map_or(0, |r| r.backlog.len())
    }

    /// Puts raw entries on the refill ring as they are, all or none
    /// (`WouldBlock`); tests use bad ones on purpose.
    pub fn refill_entries(&mut self, entries: &[zcrx_rs_rqe]) -> io::Result<()> {
        if self.refill_room() < entries.len() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let ring = self.ring.as_mut().ok_or(io::Error::from_raw_os_error(libc::EINVAL))?;
        for e in entries {
            ring.write(*e);
        }
        ring.publish();
        let bs = self.buf_size as u64;
        let ranges: Vec<_> =
            entries
                .iter()
                .map(|e| {
                    if e.flags & ZCRX_RS_RQE_RANGE != 0 {
                        self.buffers_of(e.off, e.len as u64)
                    } else {
                        self.buffers_of(e.off / bs * bs, 1)
                    }
                })
                .collect();
        self.release(ranges.into_iter());
        Ok(())
    }

    /// [`Zcrx::refill_entries`] of `{off, len: 0, flags}` for each offset.
    pub fn refill_raw(&mut self, offs: &[u64], flags: u32) -> io::Result<()> {
        let entries: Vec<_> = offs.iter().map(|&off| zcrx_rs_rqe { off, len: 0, flags }).collect();
        self.refill_entries(&entries)
    }
}

/// The system page size (the default buffer size).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// The default huge page size (`Hugepagesize` in `/proc/meminfo`; 2 MiB if
/// it cannot be read).
pub fn huge_page_size() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let l = m.lines().find(|l| l.starts_with("Hugepagesize:"))?;
            l.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(2 << 20, |kb| kb << 10)
}

/// Keeps `File` in the public API for users who open the node themselves.
pub type DevFile = File;
