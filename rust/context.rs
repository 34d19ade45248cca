// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! One open file of `/dev/zcrx`: a zero-copy receive context.
//!
//! A context owns at most one area and one binding (of one or more rx
//! queues of a device, or copy-only). The file holds a reference to the
//! module while it is open (patch "rust: miscdevice: make open files pin
//! the owning module"), so the last close, never `rmmod`, ends a context:
//! it unbinds its queues, takes back every buffer the user
//! still holds, and drops its references; the area is unmapped, unpinned
//! and uncharged when the last page pool that used it is gone.
//!
//! ioctls (see `tools/include/uapi/linux/zcrx_rs.h`): INFO, REGISTER_AREA,
//! BIND, RECV, STATS, UNBIND, UNREGISTER_AREA, EVENTS; mmap at offset 0
//! maps the refill ring; poll reports fired events (`EPOLLPRI`).
//!
//! Lock order: `ctl` → mmap_lock → `inner`. So `inner` is never held while
//! user memory is touched (copies, pinning) and is only taken briefly;
//! `ctl` makes the calls that change what the context holds (REGISTER_AREA,
//! BIND, UNBIND, UNREGISTER_AREA) one at a time, so that none of them acts
//! on a state another one changed meanwhile (a BIND publishing a binding of
//! an area an UNREGISTER_AREA just gave up). RECV does not take it: it may
//! block for long. UNREGISTER_AREA answers `EBUSY` while a RECV runs.

use kernel::{
    fs::File,
    ioctl::_IOC_SIZE,
    miscdevice::{MiscDevice, MiscDeviceRegistration},
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    sync::{poll::PollTable, Arc, Mutex},
    uaccess::{UserPtr, UserSlice, UserSliceWriter},
};

use crate::area::Area;
use crate::events::{self, Events};
use crate::mm::pin::PAGE_SIZE;
use crate::net::sock::TcpSocket;
use crate::recv;
use crate::refill::{self, HEAD_OFF, RQES_OFF, STATS_OFF, TAIL_OFF};
use crate::stats::GLOBAL;
use crate::uapi::{self, *};
use crate::zcrx::Zcrx;

/// Most records one RECV call may ask for.
const MAX_RECS: u32 = 1 << 16;

struct Inner {
    area: Option<Arc<Area>>,
    zcrx: Option<Arc<Zcrx>>,
    /// Armed and fired events, made by the first EVENTS or poll (their
    /// wait queue costs an RCU grace period when freed); attached to
    /// `zcrx` while it is the context's (detached before the context lets
    /// go of one).
    events: Option<Arc<Events>>,
    /// RECV calls running (on `zcrx`, or on one it replaced).
    recvs: usize,
}

/// Per-open state.
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    /// Held across the calls that change `inner`'s area or binding.
    #[pin]
    ctl: Mutex<()>,
    #[pin]
    inner: Mutex<Inner>,
}

/// A RECV in progress: counted in `Inner::recvs` while it lives.
struct RecvInFlight<'a>(&'a Context);

impl Drop for RecvInFlight<'_> {
    fn drop(&mut self) {
        self.0.inner.lock().recvs -= 1;
    }
}

/// Fills BIND's reply: the layout of a refill ring of `entries` entries.
fn describe_ring(req: &mut zcrx_rs_bind, entries: u32) {
    req.rq_entries = entries;
    req.offsets = zcrx_rs_ring_offsets {
        head: HEAD_OFF,
        tail: TAIL_OFF,
        rqes: RQES_OFF,
        stats: STATS_OFF,
    };
    req.mmap_len = refill::ring_bytes(entries) as u64;
}

fn is_zero(v: &[u64]) -> bool {
    v.iter().all(|&x| x == 0)
}

#[vtable]
impl MiscDevice for Context {
    type Ptr = Pin<KBox<Self>>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let ctx = KBox::try_pin_init(
            try_pin_init!(Context {
                ctl <- new_mutex!((), "Context::ctl"),
                inner <- new_mutex!(
                    Inner {
                        area: None,
                        zcrx: None,
                        events: None,
                        recvs: 0
                    },
                    "Context::inner"
                ),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        GLOBAL.contexts.add(1);
        Ok(ctx)
    }

    fn ioctl(me: Pin<&Context>, file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let size = _IOC_SIZE(cmd);
        let user = UserSlice::new(UserPtr::from_addr(arg), size);
        match cmd {
            uapi::IOC_INFO => me.info(user),
            uapi::IOC_REGISTER_AREA => me.register_area(user),
            uapi::IOC_BIND => me.bind(user),
            uapi::IOC_RECV => me.recv(user, file),
            uapi::IOC_STATS => me.stats(user),
            uapi::IOC_UNBIND => me.unbind(),
            uapi::IOC_UNREGISTER_AREA => me.unregister_area(),
            uapi::IOC_EVENTS => me.arm_events(user),
            _ => Err(ENOTTY),
        }
    }

    fn poll(me: Pin<&Context>, file: &File, table: &PollTable<'_>) -> u32 {
        match me.events() {
            Ok(ev) => ev.poll(file, table),
            // No memory for the wait queue: nothing to wait on.
            Err(_) => kernel::sync::poll::POLLERR,
        }
    }

    fn mmap(me: Pin<&Context>, _file: &File, vma: &VmaNew) -> Result {
        let zcrx = me.inner.lock().zcrx.clone().ok_or(EINVAL)?;
        vma.try_clear_mayexec()?;
        zcrx.ring().mem().mmap(vma)
    }
}

impl Context {
    fn info(&self, user: UserSlice) -> Result<isize> {
        let info = zcrx_rs_info {
            api_version: ZCRX_RS_API_VERSION,
            page_size: PAGE_SIZE as u32,
            features: u64::from(
                ZCRX_RS_FEATURE_UNREGISTER_AREA
                    | ZCRX_RS_FEATURE_BIND_NODEV
                    | ZCRX_RS_FEATURE_ADD_QUEUE
                    | ZCRX_RS_FEATURE_BUF_SIZE
                    | ZCRX_RS_FEATURE_EVENTS
                    | ZCRX_RS_FEATURE_DMABUF
                    | ZCRX_RS_FEATURE_NETLINK
                    | ZCRX_RS_FEATURE_SHARE
                    | ZCRX_RS_FEATURE_MERGE,
            ),
            contexts: GLOBAL.contexts.get(),
            areas: GLOBAL.areas.get(),
            pinned_pages: GLOBAL.pinned_pages.get(),
            providers: GLOBAL.providers.get(),
            pools: GLOBAL.pools.get(),
            max_buf_size: ZCRX_RS_BUF_MAX_SIZE,
            __pad: 0,
            __resv: [0; 2],
        };
        user.writer().write(&info)?;
        Ok(0)
    }

    fn register_area(&self, user: UserSlice) -> Result<isize> {
        let _ctl = self.ctl.lock();
        let (mut r, mut w) = user.reader_writer();
        let mut req: zcrx_rs_area_reg = r.read()?;
        let dmabuf = req.flags & ZCRX_RS_AREA_DMABUF != 0;
        if req.flags & !ZCRX_RS_AREA_DMABUF != 0
            || req.area_id != 0
            || (!dmabuf && req.dmabuf_fd != 0)
            || (dmabuf && req.addr != 0)
            || !is_zero(&req.__resv)
        {
            return Err(EINVAL);
        }
        // Lock order: never hold `inner` while touching user memory (page
        // faults and pinning take mmap_lock; mmap takes it, then `inner`).
        if self.inner.lock().area.is_some() {
            // One area per context.
            return Err(EEXIST);
        }
        let area = if dmabuf {
            Area::register_dmabuf(req.dmabuf_fd, req.len, req.buf_size)?
        } else {
            Area::register(req.addr, req.len, req.buf_size)?
        };
        req.area_id = 0;
        w.write(&req)?;
        let mut inner = self.inner.lock();
        if inner.area.is_some() {
            // Another thread registered one meanwhile; ours is dropped.
            return Err(EEXIST);
        }
        inner.area = Some(area);
        Ok(0)
    }

    fn bind(&self, user: UserSlice) -> Result<isize> {
        let _ctl = self.ctl.lock();
        let (mut r, mut w) = user.reader_writer();
        let mut req: zcrx_rs_bind = r.read()?;
        let nodev = req.flags & ZCRX_RS_BIND_NODEV != 0;
        let add = req.flags & ZCRX_RS_BIND_ADD_QUEUE != 0;
        if req.flags & !(ZCRX_RS_BIND_NODEV | ZCRX_RS_BIND_ADD_QUEUE) != 0
            || (nodev && add)
            || (nodev && (req.ifindex != 0 || req.rxq != 0))
            || !is_zero(&req.__resv)
            || req.offsets.head != 0
            || req.offsets.tail != 0
            || req.offsets.rqes != 0
            || req.offsets.stats != 0
            || req.mmap_len != 0
        {
            return Err(EINVAL);
        }
        // A bound queue sees the traffic of every socket steered to it; a
        // copy-only context reads only sockets its caller has.
        if !nodev && !crate::net::capable_net_admin() {
            return Err(EPERM);
        }
        if add {
            return self.add_queue(req, w);
        }
        let entries = refill::ring_entries(req.rq_entries)?;
        // A context binds one queue at a time; after UNBIND (or the device
        // going away) it may bind again, with a new refill ring. Buffers
        // the user holds from the earlier binding stay valid and go back
        // through the new ring.
        let (area, old, events) = {
            let inner = self.inner.lock();
            if let Some(z) = &inner.zcrx {
                if z.is_bound() {
                    return Err(EBUSY);
                }
            }
            (
                inner.area.clone().ok_or(EINVAL)?,
                inner.zcrx.clone(),
                inner.events.clone(),
            )
        };
        if let Some(old) = &old {
            // Buffers the user gave back on the old ring since UNBIND go
            // home first: the old binding's pools can then finish, and with
            // them the area's mapping for their device (a BIND to another
            // device answers EBUSY until then).
            old.drain_refill();
        }
        let zcrx = if nodev {
            if !area.can_copy() {
                // Copy-only needs memory the CPU can fill.
                return Err(EOPNOTSUPP);
            }
            Zcrx::copy_only(area, entries)?
        } else {
            // Events attached from the start: the queue may run dry at once.
            Zcrx::bind(area, req.ifindex, req.rxq, entries, events)?
        };
        describe_ring(&mut req, entries);
        let published = w.write(&req).and_then(|()| {
            let mut inner = self.inner.lock();
            let unchanged = match (&inner.zcrx, &old) {
                (None, None) => true,
                (Some(cur), Some(old)) => Arc::ptr_eq(cur, old),
                _ => false,
            };
            if !unchanged {
                // Another thread bound meanwhile.
                return Err(EBUSY);
            }
            inner.zcrx = Some(zcrx.clone());
            // The events as they are now (an EVENTS call may have made
            // them meanwhile).
            if let Some(ev) = &inner.events {
                zcrx.attach_events(ev.clone());
            }
            Ok(())
        });
        if let Err(e) = published {
            let _ = zcrx.unbind();
            drop(zcrx.detach_events());
            return Err(e);
        }
        if let Some(old) = old {
            // Entries the user put on the old ring while binding go home,
            // and the old state lets go of its queues (those the device
            // took down keep it alive through theirs until then).
            let _ = old.unbind();
            drop(old.detach_events());
        }
        Ok(0)
    }

    /// BIND with `ZCRX_RS_BIND_ADD_QUEUE` (the caller holds `ctl`): one more
    /// rx queue of the device the context is bound to, served by the same
    /// area and refill ring (`rq_entries` is ignored; the reply describes
    /// the ring as it is, so there is nothing to map again).
    fn add_queue(&self, mut req: zcrx_rs_bind, mut w: UserSliceWriter) -> Result<isize> {
        let zcrx = self.inner.lock().zcrx.clone().ok_or(EINVAL)?;
        let entries = zcrx.ring().entries();
        describe_ring(&mut req, entries);
        // The reply first: it does not depend on the outcome, and a
        // binding made needs no undoing then.
        w.write(&req)?;
        zcrx.add_queue(req.ifindex, req.rxq, true)?;
        Ok(0)
    }

    fn recv(&self, user: UserSlice, _file: &File) -> Result<isize> {
        let (mut r, mut w) = user.reader_writer();
        let mut req: zcrx_rs_recv = r.read()?;
        if req.flags & !(ZCRX_RS_RECV_DONTWAIT | ZCRX_RS_RECV_MERGE) != 0
            || req.__pad != 0
            || !is_zero(&req.__resv)
        {
            return Err(EINVAL);
        }
        if req.nr_recs == 0 || req.nr_recs > MAX_RECS {
            return Err(EINVAL);
        }
        if req.recs == 0 {
            // Like recv() with a NULL buffer.
            return Err(EFAULT);
        }
        // `_running` is declared first so that it drops last: the count
        // falls only once this call holds nothing of the area any more.
        let (_running, zcrx) = {
            let mut inner = self.inner.lock();
            let zcrx = inner.zcrx.clone().ok_or(EINVAL)?;
            inner.recvs += 1;
            (RecvInFlight(self), zcrx)
        };
        let sock = TcpSocket::from_fd(req.sockfd)?;
        let nonblock = req.flags & ZCRX_RS_RECV_DONTWAIT != 0 || sock.nonblocking();
        let len = req.nr_recs as usize * core::mem::size_of::<zcrx_rs_rec>();
        let sink = UserSlice::new(UserPtr::from_addr(req.recs as usize), len).writer();
        let merge = req.flags & ZCRX_RS_RECV_MERGE != 0;
        let got = recv::recv(&zcrx, &sock, sink, req.nr_recs, nonblock, merge)?;
        req.nr_recs = got.records;
        req.bytes = got.bytes;
        // The records are in user memory already; if this copy fails the
        // caller can still find them (it gets EFAULT, the data is there).
        w.write(&req)?;
        Ok(isize::try_from(got.bytes).unwrap_or(isize::MAX))
    }

    fn stats(&self, user: UserSlice) -> Result<isize> {
        let inner = self.inner.lock();
        let mut st = zcrx_rs_stats::default();
        if let Some(area) = &inner.area {
            st.area_buffers = area.nbufs() as u64;
            st.free_buffers = area.free_count() as u64;
            st.user_held = area.user_held();
        }
        if let Some(z) = &inner.zcrx {
            let s = &z.stats;
            st.zc_bytes = s.zc_bytes.get();
            st.zc_records = s.zc_records.get();
            st.copy_bytes = s.copy_bytes.get();
            st.copy_records = s.copy_records.get();
            st.alloc_fail = s.alloc_fail.get();
            st.refill_bad = s.refill_bad.get();
            st.refill_ok = s.refill_ok.get();
        }
        drop(inner);
        user.writer().write(&st)?;
        Ok(0)
    }

    /// The context's events, made (and attached to the receive state) on
    /// first use.
    fn events(&self) -> Result<Arc<Events>> {
        let mut inner = self.inner.lock();
        if let Some(ev) = &inner.events {
            return Ok(ev.clone());
        }
        let ev = Events::new()?;
        if let Some(z) = &inner.zcrx {
            z.attach_events(ev.clone());
        }
        inner.events = Some(ev.clone());
        Ok(ev)
    }

    /// Collects the fired events and arms `arm` (see [`events`]).
    fn arm_events(&self, user: UserSlice) -> Result<isize> {
        let (mut r, mut w) = user.reader_writer();
        let mut req: zcrx_rs_events = r.read()?;
        if req.arm & !events::ALL != 0
            || req.fired != 0
            || req.armed != 0
            || req.__pad != 0
            || !is_zero(&req.__resv)
        {
            return Err(EINVAL);
        }
        let (fired, armed) = self.events()?.collect_and_arm(req.arm);
        req.fired = fired;
        req.armed = armed;
        w.write(&req)?;
        Ok(0)
    }

    fn unbind(&self) -> Result<isize> {
        let _ctl = self.ctl.lock();
        let zcrx = self.inner.lock().zcrx.clone().ok_or(EINVAL)?;
        zcrx.unbind()?;
        Ok(0)
    }

    /// Gives the area up: not while bound (`EBUSY`), nor while any buffer
    /// is away from the free list (`EBUSY`: the user holds it, or a page
    /// pool or socket of the earlier binding still does); `EINVAL` without
    /// an area. The binding's state and refill ring go with it; the area
    /// is unpinned and uncharged when its last reference goes (now, unless
    /// a dying page pool still refers to it).
    fn unregister_area(&self) -> Result<isize> {
        let _ctl = self.ctl.lock();
        let (area, zcrx) = {
            let inner = self.inner.lock();
            let area = inner.area.clone().ok_or(EINVAL)?;
            if inner.zcrx.as_ref().is_some_and(|z| z.is_bound()) {
                return Err(EBUSY);
            }
            (area, inner.zcrx.clone())
        };
        if let Some(z) = &zcrx {
            // What the user put on the ring since UNBIND goes home first.
            z.drain_refill();
        }
        if area.free_count() != area.nbufs() {
            return Err(EBUSY);
        }
        let taken = {
            let mut inner = self.inner.lock();
            let same_area = inner.area.as_ref().is_some_and(|a| Arc::ptr_eq(a, &area));
            let same_zcrx = match (&inner.zcrx, &zcrx) {
                (None, None) => true,
                (Some(cur), Some(z)) => Arc::ptr_eq(cur, z),
                _ => false,
            };
            // Checked again here, where no RECV can start: one that ran
            // between the first check and this lock may have handed out
            // buffers, and returned.
            if !same_area || !same_zcrx || inner.recvs != 0 || area.free_count() != area.nbufs() {
                // A RECV runs (it could still hand out buffers of the
                // area), one handed some out meanwhile, or the state
                // changed (not with `ctl` held; kept as a check).
                return Err(EBUSY);
            }
            (inner.zcrx.take(), inner.area.take())
        };
        // Out of the lock: dropping the area unpins (lock order, see top).
        if let Some(z) = taken.0 {
            // Not bound (checked), but queues the device took down are
            // still listed and hold it: let go of them.
            let _ = z.unbind();
            z.scrub();
            drop(z.detach_events());
        }
        drop(taken.1);
        Ok(0)
    }
}

// pin-init's `#[pinned_drop]` expands to an `unsafe impl` of its own.
#[allow(unsafe_code)]
#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        // Out of the lock first: tearing down takes the netdev lock and,
        // when the area goes, mmap_lock (lock order: see the top).
        let (zcrx, area) = {
            let mut inner = self.inner.lock();
            (inner.zcrx.take(), inner.area.take())
        };
        if let Some(zcrx) = zcrx {
            // Not bound any more (UNBIND, device gone) is fine here.
            let _ = zcrx.unbind();
            zcrx.scrub();
            // Before `inner.events` goes (see `events`): the state may
            // outlive us in a draining page pool.
            drop(zcrx.detach_events());
        }
        drop(area);
        GLOBAL.contexts.sub(1);
    }
}
