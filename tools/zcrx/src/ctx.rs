// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! The safe, ownership-based API: a [`Context`] (shareable between threads),
//! received data as a [`Batch`] of records or as single [`Buf`]s, each of
//! which goes back to the refill ring when dropped.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let sock = std::net::TcpStream::connect("127.0.0.1:1")?;
//! let ctx = zcrx::Context::open(64 << 20)?; // a 64 MiB area
//! ctx.bind("eth0", 3)?; // rx queue 3; flows steered there come zero-copy
//! loop {
//!     let batch = ctx.recv(&sock, 256)?;
//!     if batch.is_eof() {
//!         break;
//!     }
//!     for rec in batch.iter() {
//!         let data: &[u8] = rec.data();
//!         // ... use data (rec.is_copy(): the CPU copied it) ...
//!     }
//! } // each batch goes back to the ring here, in one go
//! # Ok(()) }
//! ```
//!
//! The bytes of a record stay valid while its [`Batch`] or [`Buf`] lives:
//! the kernel does not write a buffer the program holds, and the borrow
//! checker stops a slice from outliving its owner. Nothing is given back
//! twice or never: a record is returned exactly when its owner drops.
//! Returning costs no system call (ring entries in shared memory).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::dev::{page_size, Mapping, Ring};
use crate::error::{Error, ErrorKind, Op, Result};
use crate::events::{ring_stats_from, stats_offset, wait_blocking, Events, EventsState, RingStats};
use crate::sys::{ioctl, open};
use crate::uapi::*;

mod bufs;
pub use bufs::{Batch, Buf, BufIter, Record};

/// What the loaded module supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// The module's uAPI version.
    pub api_version: u32,
    /// The page size: the default and smallest buffer size of an area.
    pub page_size: usize,
    /// The largest buffer size an area may have ([`Context::open_with`]):
    /// the page size on a module without [`Info::buf_size()`].
    pub max_buf_size: usize,
    /// Feature bits.
    pub features: u64,
}

impl Info {
    /// Whether copy-only contexts ([`Context::bind_nodev`]) are supported.
    pub fn bind_nodev(&self) -> bool {
        self.features & u64::from(ZCRX_RS_FEATURE_BIND_NODEV) != 0
    }

    /// Whether one context can bind several queues ([`Context::add_queue`]).
    pub fn add_queue(&self) -> bool {
        self.features & u64::from(ZCRX_RS_FEATURE_ADD_QUEUE) != 0
    }

    /// Whether an area can be given up without closing the context.
    pub fn unregister_area(&self) -> bool {
        self.features & u64::from(ZCRX_RS_FEATURE_UNREGISTER_AREA) != 0
    }

    /// Whether an area can have buffers larger than a page
    /// ([`Context::open_with`], up to [`Info::max_buf_size`]).
    pub fn buf_size(&self) -> bool {
        self.features & u64::from(ZCRX_RS_FEATURE_BUF_SIZE) != 0
    }

    /// Whether the module has events ([`Context::arm_events`], `EPOLLPRI`
    /// on the context's fd) and counters in the ring mapping
    /// ([`Context::ring_stats`]).
    pub fn events(&self) -> bool {
        self.features & u64::from(ZCRX_RS_FEATURE_EVENTS) != 0
    }

    /// `INFO`'s answer as an [`Info`].
    fn from_uapi(i: &zcrx_rs_info) -> Self {
        let feature = i.features & u64::from(ZCRX_RS_FEATURE_BUF_SIZE) != 0;
        let max = if feature && i.max_buf_size != 0 { i.max_buf_size } else { i.page_size };
        Info { api_version: i.api_version, page_size: i.page_size as usize, max_buf_size: max as usize, features: i.features }
    }
}

/// The buffer size an area of `buf_size` (0: the page size) gets, if it
/// is one the uAPI allows: a power of two from `page` to
/// `ZCRX_RS_BUF_MAX_SIZE` that divides `area_len` (which is not 0).
fn area_buf_size(area_len: usize, buf_size: usize, page: usize) -> Option<usize> {
    let bs = if buf_size == 0 { page } else { buf_size };
    let ok = bs.is_power_of_two() && bs >= page && bs <= ZCRX_RS_BUF_MAX_SIZE as usize && area_len != 0 && area_len & (bs - 1) == 0;
    ok.then_some(bs)
}

/// The index of interface `ifname`; `ENODEV` (as BIND would say) if there
/// is none.
fn ifindex_of(ifname: &str) -> Result<u32> {
    crate::sys::ifindex(ifname).map_err(|_| Error::new(Op::Bind, std::io::Error::from_raw_os_error(libc::ENODEV)))
}

/// Counters of a context.
pub type Stats = zcrx_rs_stats;

struct Shared {
    fd: OwnedFd,
    /// The area: read through records while their owner holds them.
    area: Mapping,
    /// Its registered length (`area.len` is whole huge pages for a
    /// hugetlbfs area).
    area_len: usize,
    /// Its buffer size: refill entries name whole buffers.
    buf_size: usize,
    /// Whether it is hugetlbfs memory (else plain pages: a buffer larger
    /// than a page is then not physically contiguous).
    huge: bool,
    /// The module merges records of consecutive buffers and takes them
    /// back as ranges (`ZCRX_RS_FEATURE_MERGE`): receive calls ask for it.
    merge: bool,
    /// The refill ring and what waits for room in it. One producer at a
    /// time: the lock.
    refill: Mutex<Refill>,
}

/// The refill side of a context.
struct Refill {
    /// The ring of the current binding (its backlog holds what waits).
    ring: Option<Ring>,
    /// The address of the module's counters in `ring`'s mapping (`None`:
    /// no ring, or a module without them); valid while `ring` is.
    stats_at: Option<usize>,
    /// Entries due while no ring is mapped (a failed rebind): they go out
    /// through the next ring.
    orphans: Vec<(u64, u32)>,
}

impl Shared {
    fn refill(&self) -> MutexGuard<'_, Refill> {
        // A panic while holding the lock leaves the ring consistent (each
        // entry is written before `tail` moves): keep going.
        self.refill.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives back the buffers of `recs`.
    fn give_back(&self, recs: &[zcrx_rs_rec]) {
        if recs.is_empty() {
            return;
        }
        let mut f = self.refill();
        match f.ring.as_mut() {
            Some(r) => r.give_back(recs.iter().map(|r| (r.off, r.len))),
            None => f.orphans.extend(recs.iter().map(|r| (r.off, r.len))),
        }
    }

    /// The bytes of `r`, a record [`Shared::check`] accepted (every
    /// record a `Batch` or `Buf` holds).
    fn bytes(&self, r: &zcrx_rs_rec) -> &[u8] {
        // SAFETY: `check` proved the range inside the mapping; the kernel
        // does not write a buffer while the program holds it (the record's
        // owner is alive: it borrows `self`), and nothing else writes the
        // private mapping.
        unsafe { std::slice::from_raw_parts(self.area.ptr.add(r.off as usize), r.len as usize) }
    }

    fn check(&self, r: &zcrx_rs_rec) -> bool {
        r.off.checked_add(r.len as u64).is_some_and(|end| end <= self.area_len as u64)
    }
}

/// A zcrx context: an area registered with the module, bound to rx queues
/// of one device ([`Context::bind`], [`Context::add_queue`]) or copy-only
/// ([`Context::bind_nodev`]). Cheap to clone (the clones share one context);
/// `Send` and `Sync`: any thread may receive on it (each call on its own
/// socket) and drop what it received.
#[derive(Clone)]
pub struct Context {
    shared: Arc<Shared>,
}

impl Context {
    /// Opens `/dev/zcrx` and registers `area_len` bytes of fresh anonymous
    /// memory (a multiple of the page size) as the area, one buffer per
    /// page.
    pub fn open(area_len: usize) -> Result<Self> {
        Self::open_at(Path::new("/dev/zcrx"), area_len)
    }

    /// [`Context::open`] with the device at `path`.
    pub fn open_at(path: &Path, area_len: usize) -> Result<Self> {
        Self::open_at_with(path, area_len, 0)
    }

    /// [`Context::open`] with buffers of `buf_size` bytes: a power of two
    /// from the page size to [`Info::max_buf_size`] (2 MiB), 0 for the page
    /// size; `area_len` a multiple of it (else
    /// [`ErrorKind::InvalidArgument`]). Records never cross a buffer and
    /// refill entries name whole buffers: fewer of both per byte.
    ///
    /// A NIC writes a buffer larger than a page only if it is physically
    /// contiguous, so such an area is hugetlbfs memory (`MAP_HUGETLB`,
    /// rounded up to whole huge pages). With no huge pages reserved
    /// (`/proc/sys/vm/nr_hugepages`) it is plain anonymous memory instead:
    /// [`Context::bind_nodev`] takes it, [`Context::bind`] fails with
    /// [`ErrorKind::MemoryNotContiguous`] (`ERANGE`); see
    /// [`Context::huge_pages`]. Needs the module's [`Info::buf_size()`]
    /// (`EINVAL` otherwise).
    pub fn open_with(area_len: usize, buf_size: usize) -> Result<Self> {
        Self::open_at_with(Path::new("/dev/zcrx"), area_len, buf_size)
    }

    /// [`Context::open_with`] with the device at `path`.
    pub fn open_at_with(path: &Path, area_len: usize, buf_size: usize) -> Result<Self> {
        let fd = open(path, libc::O_RDWR).map_err(|e| Error::new(Op::Open, e))?;
        let mut i = zcrx_rs_info::default();
        ioctl(&fd, IOC_INFO as _, &mut i as *mut _ as usize).map_err(|e| Error::new(Op::Info, e))?;
        if i.api_version != ZCRX_RS_API_VERSION {
            return Err(Error::with_kind(Op::Info, ErrorKind::VersionMismatch, std::io::Error::from_raw_os_error(libc::EPROTO)));
        }
        let page = i.page_size as usize;
        let Some(bs) = area_buf_size(area_len, buf_size, page) else {
            return Err(Error::with_kind(Op::RegisterArea, ErrorKind::InvalidArgument, std::io::Error::from_raw_os_error(libc::EINVAL)));
        };
        // Larger buffers: hugetlbfs, else plain memory (copy-only, or BIND
        // says ERANGE).
        let huge = if bs > page { Mapping::huge(area_len).ok() } else { None };
        let is_huge = huge.is_some();
        let area = match huge {
            Some(m) => m,
            None => Mapping::anon(area_len).map_err(|e| Error::new(Op::RegisterArea, e))?,
        };
        // A page is 0 to the module: what modules before large buffers take.
        let wire = if bs == page { 0 } else { bs as u32 };
        let mut r = zcrx_rs_area_reg { addr: area.ptr as u64, len: area_len as u64, buf_size: wire, ..Default::default() };
        ioctl(&fd, IOC_REGISTER_AREA as _, &mut r as *mut _ as usize).map_err(|e| Error::new(Op::RegisterArea, e))?;
        let refill = Mutex::new(Refill { ring: None, stats_at: None, orphans: Vec::new() });
        let merge = i.features & u64::from(ZCRX_RS_FEATURE_MERGE) != 0;
        Ok(Context { shared: Arc::new(Shared { fd, area, area_len, buf_size: bs, huge: is_huge, merge, refill }) })
    }

    /// What the module supports.
    pub fn info(&self) -> Result<Info> {
        let mut i = zcrx_rs_info::default();
        ioctl(&self.shared.fd, IOC_INFO as _, &mut i as *mut _ as usize).map_err(|e| Error::new(Op::Info, e))?;
        Ok(Info::from_uapi(&i))
    }

    /// The context's counters.
    pub fn stats(&self) -> Result<Stats> {
        let mut s = zcrx_rs_stats::default();
        ioctl(&self.shared.fd, IOC_STATS as _, &mut s as *mut _ as usize).map_err(|e| Error::new(Op::Stats, e))?;
        Ok(s)
    }

    /// Binds the area to rx queue `rxq` of the device named `ifname`.
    pub fn bind(&self, ifname: &str, rxq: u32) -> Result<()> {
        let ifindex = ifindex_of(ifname)?;
        self.bind_ifindex(ifindex, rxq, 0)
    }

    /// Binds the area to rx queue `rxq` of device `ifindex` (the caller's
    /// network namespace) with a refill ring of `rq_entries` (0: one per
    /// buffer, so it never fills). Needs `CAP_NET_ADMIN`. After
    /// [`Context::unbind`] or the device going away, binding again is fine.
    pub fn bind_ifindex(&self, ifindex: u32, rxq: u32, rq_entries: u32) -> Result<()> {
        self.bind_with(ifindex, rxq, rq_entries, 0)
    }

    /// Binds rx queue `rxq` of the device the context is bound to as well
    /// (named `ifname`): flows that RSS or a steering rule sends to any of
    /// its queues then arrive zero-copy into the one area, and records go
    /// back through the one refill ring. `EXDEV`: another device; `EEXIST`:
    /// a queue it has; `EINVAL`: not bound. Needs [`Info::add_queue`].
    pub fn add_queue(&self, ifname: &str, rxq: u32) -> Result<()> {
        let ifindex = ifindex_of(ifname)?;
        self.add_queue_ifindex(ifindex, rxq)
    }

    /// [`Context::add_queue`] by interface index.
    pub fn add_queue_ifindex(&self, ifindex: u32, rxq: u32) -> Result<()> {
        let mut b = zcrx_rs_bind { ifindex, rxq, flags: ZCRX_RS_BIND_ADD_QUEUE, ..Default::default() };
        ioctl(&self.shared.fd, IOC_BIND as _, &mut b as *mut _ as usize).map(|_| ()).map_err(|e| Error::new(Op::Bind, e))
    }

    /// Makes the context copy-only: no queue, no `CAP_NET_ADMIN` needed. Receiving
    /// then works on any TCP socket (loopback, veth, a NIC without header
    /// split) and copies every byte into the area ([`Record::is_copy`]), so
    /// a program written for zero-copy runs everywhere. After it, binding
    /// to a queue is still possible; while bound, this answers `EBUSY`.
    /// Needs the module's [`Info::bind_nodev`].
    pub fn bind_nodev(&self) -> Result<()> {
        self.bind_with(0, 0, 0, ZCRX_RS_BIND_NODEV)
    }

    fn bind_with(&self, ifindex: u32, rxq: u32, rq_entries: u32, flags: u32) -> Result<()> {
        let bufs = self.shared.area_len / self.shared.buf_size;
        let entries = if rq_entries != 0 { rq_entries } else { (bufs as u32).clamp(1, ZCRX_RS_RQ_MAX_ENTRIES) };
        if entries > ZCRX_RS_RQ_MAX_ENTRIES {
            return Err(Error::with_kind(Op::Bind, ErrorKind::InvalidArgument, std::io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // The lock is held across BIND: an entry written to the old ring
        // after BIND took it over would be lost. (Drops on other threads
        // wait for the bind; binding is rare.)
        let mut f = self.shared.refill();
        let mut b = zcrx_rs_bind { ifindex, rxq, rq_entries: entries, flags, ..Default::default() };
        ioctl(&self.shared.fd, IOC_BIND as _, &mut b as *mut _ as usize).map_err(|e| self.bind_error(e))?;
        // The module reads the old ring no more: it took what the ring held.
        let mut due = std::mem::take(&mut f.orphans);
        f.stats_at = None;
        if let Some(old) = f.ring.take() {
            due.extend(old.backlog.iter().copied());
        }
        match Mapping::shared(self.shared.fd.as_raw_fd(), b.mmap_len as usize) {
            Ok(map) => {
                // `map.len` is `mmap_len`: the counters are inside it.
                f.stats_at = stats_offset(b.offsets.stats, map.len as u64).map(|off| map.ptr as usize + off);
                let mut ring = Ring::new(map, &b, due, self.shared.buf_size, self.shared.merge);
                ring.flush_backlog();
                f.ring = Some(ring);
                Ok(())
            }
            Err(e) => {
                f.orphans = due;
                let _ = ioctl(&self.shared.fd, IOC_UNBIND as _, 0);
                Err(Error::with_kind(Op::Bind, ErrorKind::Other, e))
            }
        }
    }

    /// BIND's error `e`, typed: `ERANGE` for an area of buffers larger than
    /// a page that is not hugetlbfs memory means those buffers are not
    /// physically contiguous (rather than no such queue).
    fn bind_error(&self, e: std::io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ERANGE) && self.shared.buf_size > page_size() && !self.shared.huge {
            return Error::with_kind(Op::Bind, ErrorKind::MemoryNotContiguous, e);
        }
        Error::new(Op::Bind, e)
    }

    /// Takes the area off its queue now. Receiving goes on (what is in
    /// flight, then copies).
    pub fn unbind(&self) -> Result<()> {
        ioctl(&self.shared.fd, IOC_UNBIND as _, 0).map(|_| ()).map_err(|e| Error::new(Op::Unbind, e))
    }

    /// Receives from TCP socket `sock` into at most `max_records` records
    /// (1..=65536); blocks unless the socket is non-blocking. An empty
    /// batch with [`Batch::is_eof`] is the end of the stream.
    pub fn recv(&self, sock: &impl AsFd, max_records: usize) -> Result<Batch> {
        self.recv_flags(sock, max_records, 0)
    }

    /// [`Context::recv`] that never blocks ([`ErrorKind::WouldBlock`]).
    pub fn try_recv(&self, sock: &impl AsFd, max_records: usize) -> Result<Batch> {
        self.recv_flags(sock, max_records, ZCRX_RS_RECV_DONTWAIT)
    }

    fn recv_flags(&self, sock: &impl AsFd, max_records: usize, flags: u32) -> Result<Batch> {
        let n = max_records.clamp(1, 65536);
        if let Some(r) = self.shared.refill().ring.as_mut() {
            r.flush_backlog();
        }
        let mut recs = vec![zcrx_rs_rec::default(); n];
        let flags = if self.shared.merge { flags | ZCRX_RS_RECV_MERGE } else { flags };
        let mut r = zcrx_rs_recv {
            sockfd: sock.as_fd().as_raw_fd(),
            flags,
            recs: recs.as_mut_ptr() as u64,
            nr_recs: n as u32,
            ..Default::default()
        };
        ioctl(&self.shared.fd, IOC_RECV as _, &mut r as *mut _ as usize).map_err(|e| Error::new(Op::Recv, e))?;
        recs.truncate(r.nr_recs as usize);
        let batch = Batch { shared: self.shared.clone(), recs, bytes: r.bytes };
        if let Some(bad) = batch.recs.iter().find(|r| !self.shared.check(r)) {
            let msg = format!("record {{off {:#x}, len {}}} outside the area", bad.off, bad.len);
            // `batch` drops here: the module's references go back.
            return Err(Error::with_kind(Op::Recv, ErrorKind::BadRecord, std::io::Error::other(msg)));
        }
        Ok(batch)
    }

    /// Refill entries waiting for room in the ring (they go out at the
    /// next return or receive).
    pub fn pending_returns(&self) -> usize {
        let f = self.shared.refill();
        f.orphans.len() + f.ring.as_ref().map_or(0, |r| r.backlog.len())
    }

    /// The size of the area.
    pub fn area_len(&self) -> usize {
        self.shared.area_len
    }

    /// The area's buffer size: a record never crosses a buffer, and a
    /// buffer goes back whole.
    pub fn buf_size(&self) -> usize {
        self.shared.buf_size
    }

    /// Whether the area is hugetlbfs memory. An area of buffers larger
    /// than a page that is not ([`Context::open_with`] found no huge pages
    /// reserved) serves copy-only contexts only.
    pub fn huge_pages(&self) -> bool {
        self.shared.huge
    }

    /// Arms `events` (added to those armed; [`Events::empty()`] arms
    /// nothing) and collects the events that fired since the last call
    /// (`ZCRX_RS_IOC_EVENTS`). An armed event fires once and is disarmed:
    /// arm it again to hear of the next one. While a fired event waits to
    /// be collected, the context's fd ([`AsFd`]) reports `EPOLLPRI`.
    /// Events belong to the context: they stay armed across
    /// [`Context::unbind`] and a new bind. Needs the module's
    /// [`Info::events`] (`ENOTTY` otherwise; `EINVAL` for events it does
    /// not know). Errors say [`Op::Events`].
    pub fn arm_events(&self, events: Events) -> Result<EventsState> {
        let mut e = zcrx_rs_events { arm: events.bits(), ..Default::default() };
        ioctl(&self.shared.fd, IOC_EVENTS as _, &mut e as *mut _ as usize).map_err(|e| Error::new(Op::Events, e))?;
        Ok(EventsState::from_uapi(&e))
    }

    /// Collects the events that fired since the last call, arming nothing:
    /// [`Context::arm_events`] with [`Events::empty()`].
    pub fn collect_events(&self) -> Result<EventsState> {
        self.arm_events(Events::empty())
    }

    /// Arms `arm` as [`Context::arm_events`] does, then blocks this thread
    /// until an armed event fires (or `timeout` passes: `fired` empty) and
    /// collects it. Returns at once when an event had fired already.
    /// [`ErrorKind::InvalidArgument`] if nothing is armed (it would wait
    /// for ever). For a thread that watches a context while others
    /// receive; tokio programs use `tokio::EventWatcher` (feature `tokio`).
    pub fn wait_events(&self, arm: Events, timeout: Option<Duration>) -> Result<EventsState> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let first = self.arm_events(arm)?;
        wait_blocking(self.shared.fd.as_fd(), first, deadline, || self.collect_events())
    }

    /// The counters the module keeps in the refill ring's mapping, read
    /// with no system call: those of the latest binding's ring. `None`
    /// before a bind, or with a module without them ([`Info::events`]).
    pub fn ring_stats(&self) -> Option<RingStats> {
        let f = self.shared.refill();
        let at = f.stats_at?;
        // SAFETY: `at` is the counters' address inside the mapping of
        // `f.ring`, which lives while we hold the lock (it is replaced
        // only under it, `stats_at` with it); the words are 8-byte aligned
        // (checked) and the kernel stores each whole, so word-wise atomic
        // loads see whole values.
        Some(ring_stats_from(|off| unsafe { (*((at + off) as *const AtomicU64)).load(Ordering::Relaxed) }))
    }
}

impl AsFd for Context {
    /// The context's fd: for `poll`/`epoll` on `EPOLLPRI` (an armed event
    /// fired: [`Context::arm_events`]), or to pass to another process
    /// (`SCM_RIGHTS`). Do not close it.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.shared.fd.as_fd()
    }
}

impl AsRawFd for Context {
    /// The raw fd of [`Context::as_fd`].
    fn as_raw_fd(&self) -> RawFd {
        self.shared.fd.as_raw_fd()
    }
}

// Debug: what a program logs (fds, sizes, record positions), never the
// payload.
impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shared;
        f.debug_struct("Context")
            .field("fd", &s.fd.as_raw_fd())
            .field("area_len", &s.area_len)
            .field("buf_size", &s.buf_size)
            .field("huge", &s.huge)
            .field("merge", &s.merge)
            .field("bound", &s.refill().ring.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn context_and_buffers_cross_threads() {
        assert_send_sync::<Context>();
        assert_send_sync::<Batch>();
        assert_send_sync::<Buf>();
        #[cfg(feature = "tokio")]
        assert_send_sync::<crate::tokio::ZcrxStream>();
        #[cfg(feature = "stream")]
        {
            assert_send_sync::<crate::tokio::Batches>();
            fn assert_unpin<T: Unpin>() {}
            assert_unpin::<crate::tokio::Batches>();
        }
    }

    #[test]
    fn area_buffer_sizes_the_uapi_allows() {
        let ps = 4096;
        assert_eq!(area_buf_size(1 << 20, 0, ps), Some(ps));
        assert_eq!(area_buf_size(1 << 20, 4096, ps), Some(4096));
        assert_eq!(area_buf_size(1 << 20, 32768, ps), Some(32768));
        assert_eq!(area_buf_size(4 << 20, 2 << 20, ps), Some(2 << 20));
        assert_eq!(area_buf_size(8 << 20, 4 << 20, ps), None, "over ZCRX_RS_BUF_MAX_SIZE");
        assert_eq!(area_buf_size(1 << 20, 2048, ps), None, "under a page");
        assert_eq!(area_buf_size(1 << 20, 12288, ps), None, "not a power of two");
        assert_eq!(area_buf_size(32768 + 4096, 32768, ps), None, "not whole buffers");
        assert_eq!(area_buf_size(0, 0, ps), None);
        assert_eq!(area_buf_size(64 << 10, 0, 16384), Some(16384), "16K pages");
    }

    #[test]
    fn info_max_buf_size_is_the_page_without_the_feature() {
        let mut i = zcrx_rs_info { api_version: 1, page_size: 4096, features: 0x7, ..Default::default() };
        let old = Info::from_uapi(&i);
        assert!(!old.buf_size() && old.add_queue());
        assert_eq!((old.page_size, old.max_buf_size), (4096, 4096));
        i.features |= u64::from(ZCRX_RS_FEATURE_BUF_SIZE);
        i.max_buf_size = ZCRX_RS_BUF_MAX_SIZE;
        let new = Info::from_uapi(&i);
        assert!(new.buf_size());
        assert_eq!((new.page_size, new.max_buf_size), (4096, 2 << 20));
    }

    #[test]
    fn info_events_is_the_feature_bit() {
        let mut i = zcrx_rs_info { api_version: 1, page_size: 4096, features: 0xf, ..Default::default() };
        assert!(!Info::from_uapi(&i).events());
        i.features |= u64::from(ZCRX_RS_FEATURE_EVENTS);
        assert!(Info::from_uapi(&i).events());
    }

    #[test]
    fn open_without_the_module_says_so() {
        let e = match Context::open_at(Path::new("/nonexistent/zcrx"), 1 << 20) {
            Err(e) => e,
            Ok(_) => panic!("opened a device that does not exist"),
        };
        assert_eq!(e.kind(), ErrorKind::ModuleNotLoaded);
        assert_eq!(e.op(), Op::Open);
    }
}
