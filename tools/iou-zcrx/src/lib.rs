// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The in-tree io_uring zcrx, driven with raw syscalls (no liburing): one
//! ring with one zcrx instance per rx queue (each with its own area and
//! refill ring: an instance serves one queue), a multishot `RECV_ZC` per
//! connection on the instance of the queue its packets arrive on.
//! The uAPI comes from the kernel's own header (`io_uring_sys.rs`, generated
//! by scripts/gen-uapi.sh from the test kernel's installed headers).
//! Used by zcrx-bench (the io_uring mode) and zcrx-selftest (io_uring zcrx
//! as the fuzzed host's provider).

use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A wrapper every `io_uring_enter` call goes through (zcrx-bench's
/// `--split` clock).
pub type EnterHook = fn(&mut dyn FnMut() -> libc::c_long) -> libc::c_long;

static ENTER_HOOK: OnceLock<EnterHook> = OnceLock::new();

/// Routes every `io_uring_enter` of this process through `hook` (once; a
/// second call is ignored).
pub fn set_enter_hook(hook: EnterHook) {
    let _ = ENTER_HOOK.set(hook);
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

#[allow(non_camel_case_types, non_upper_case_globals, dead_code, non_snake_case, clippy::all)]
mod sys {
    include!("io_uring_sys.rs");
}
use sys::*;

fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(fd: RawFd, len: usize, off: u64) -> io::Result<Map> {
        let flags = if fd < 0 { libc::MAP_PRIVATE | libc::MAP_ANONYMOUS } else { libc::MAP_SHARED };
        Self::with_flags(fd, len, off, flags)
    }

    /// `len` bytes of hugetlbfs memory (a whole number of huge pages), so
    /// that buffers larger than a page are physically contiguous.
    fn huge(len: usize) -> io::Result<Map> {
        Self::with_flags(-1, len, 0, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB)
    }

    fn with_flags(fd: RawFd, len: usize, off: u64, flags: libc::c_int) -> io::Result<Map> {
        // SAFETY: mapping io_uring memory (fd >= 0) or anonymous memory (fd < 0).
        let p = unsafe {
            libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_POPULATE, fd, off as libc::off_t)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { ptr: p.cast(), len })
    }

    fn at<T>(&self, off: u32) -> *mut T {
        // SAFETY: offsets come from the kernel and are inside the mapping.
        unsafe { self.ptr.add(off as usize).cast() }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn atomic(p: *mut u32) -> &'static AtomicU32 {
    // SAFETY: ring indices are u32s in shared memory, valid while the ring is.
    unsafe { &*(p as *const AtomicU32) }
}

/// One zcrx instance: an area and a refill ring, bound to one rx queue.
struct Ifq {
    area: Map,
    _rq: Map,
    rq_head_ptr: *mut u32,
    rq_tail_ptr: *mut u32,
    rqes: *mut io_uring_zcrx_rqe,
    rq_mask: u32,
    rq_tail: u32,
    area_token: u64,
    zcrx_id: u32,
}

/// An io_uring with zcrx instances bound to rx queues.
pub struct ZcrxRing {
    fd: RawFd,
    _rings: Map,
    sqes: Map,
    sq_tail: *mut u32,
    sq_mask: u32,
    sq_array: *mut u32,
    cq_head: *mut u32,
    cq_tail: *mut u32,
    cq_mask: u32,
    cqes: *mut u8,
    ifqs: Vec<Ifq>,
    /// The buffer size the kernel took (`rx_buf_len` as it answered).
    buf_size: usize,
}

/// Most zcrx instances (rx queues) of one ring here.
const MAX_IFQS: usize = 64;

/// Where a request's tag ends and its instance's index starts in
/// `user_data`.
const IFQ_SHIFT: u32 = 48;

/// One completion of the multishot receive.
pub struct Completion {
    /// Bytes (0: end of stream).
    pub len: usize,
    /// Offset of the data in the area.
    pub off: u64,
    /// The request continues (`IORING_CQE_F_MORE`).
    pub more: bool,
    /// The request ended with this errno (`-ENOSPC`: the CQ ring was full;
    /// reap and re-arm).
    pub err: Option<i32>,
    /// The request's tag (see [`ZcrxRing::recv_multishot_tagged`]).
    pub tag: u64,
    /// The zcrx instance of the request (index into the queues given to
    /// [`ZcrxRing::new`]).
    pub ifq: usize,
}

impl ZcrxRing {
    /// Sets up the ring and, for each queue of `rxqs` of `ifindex`, a zcrx
    /// instance with an area of `area_len` bytes and a refill ring of
    /// `rq_entries`. `rx_buf_len`: the buffer size (0: a page); larger
    /// buffers must each be contiguous (else `ERANGE`), so `huge` backs
    /// the areas with hugetlbfs memory.
    pub fn new(ifindex: u32, rxqs: &[u32], area_len: usize, rq_entries: u32, rx_buf_len: u32, huge: bool) -> io::Result<Self> {
        if rxqs.is_empty() || rxqs.len() > MAX_IFQS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("io_uring zcrx: 1 to {MAX_IFQS} rx queues, not {}", rxqs.len()),
            ));
        }
        // The multishot request ends with -ENOSPC when the CQ ring is full
        // (the kernel's iou-zcrx selftest has 1024 entries); 4096 make that
        // rare, and the loop re-arms when it happens.
        let mut p = io_uring_params {
            cq_entries: 4096,
            flags: IORING_SETUP_CQSIZE
                | IORING_SETUP_SINGLE_ISSUER
                | IORING_SETUP_DEFER_TASKRUN
                | IORING_SETUP_CQE32
                | IORING_SETUP_SUBMIT_ALL
                | IORING_SETUP_COOP_TASKRUN,
            ..Default::default()
        };
        // SAFETY: io_uring_setup fills `p`.
        let fd = cvt(unsafe { libc::syscall(libc::SYS_io_uring_setup, 64u32, &mut p as *mut io_uring_params) })? as RawFd;
        if p.features & IORING_FEAT_SINGLE_MMAP == 0 {
            return Err(io::Error::other("io_uring without IORING_FEAT_SINGLE_MMAP"));
        }
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * 32;
        let rings = Map::new(fd, sq_len.max(cq_len), IORING_OFF_SQ_RING as u64)?;
        let sqes = Map::new(fd, p.sq_entries as usize * std::mem::size_of::<io_uring_sqe>(), IORING_OFF_SQES as u64)?;
        let mut ring = ZcrxRing {
            fd,
            sq_tail: rings.at(p.sq_off.tail),
            sq_mask: p.sq_entries - 1,
            sq_array: rings.at(p.sq_off.array),
            cq_head: rings.at(p.cq_off.head),
            cq_tail: rings.at(p.cq_off.tail),
            cq_mask: p.cq_entries - 1,
            cqes: rings.at(p.cq_off.cqes),
            _rings: rings,
            sqes,
            ifqs: Vec::new(),
            buf_size: 0,
        };
        for &rxq in rxqs {
            let area = if huge { Map::huge(area_len)? } else { Map::new(-1, area_len, 0)? };
            // The refill ring in our own memory (a user region).
            let rq_len = (4096 + rq_entries as usize * std::mem::size_of::<io_uring_zcrx_rqe>()).next_multiple_of(4096);
            let rq = Map::new(-1, rq_len, 0)?;
            let mut region = io_uring_region_desc {
                user_addr: rq.ptr as u64,
                size: rq_len as u64,
                flags: IORING_MEM_REGION_TYPE_USER,
                ..Default::default()
            };
            let mut area_reg = io_uring_zcrx_area_reg { addr: area.ptr as u64, len: area_len as u64, ..Default::default() };
            let mut reg = io_uring_zcrx_ifq_reg {
                if_idx: ifindex,
                if_rxq: rxq,
                rq_entries,
                area_ptr: &mut area_reg as *mut _ as u64,
                region_ptr: &mut region as *mut _ as u64,
                rx_buf_len,
                ..Default::default()
            };
            // SAFETY: registering our structures with our ring.
            cvt(unsafe {
                libc::syscall(libc::SYS_io_uring_register, fd, io_uring_register_op_IORING_REGISTER_ZCRX_IFQ, &mut reg as *mut _, 1)
            })
            .map_err(|e| io::Error::new(e.kind(), format!("rx queue {rxq}: {e}")))?;
            // The kernel writes back the size it took; an older one may not.
            ring.buf_size = match reg.rx_buf_len {
                0 if rx_buf_len == 0 => page_size(),
                0 => rx_buf_len as usize,
                n => n as usize,
            };
            ring.ifqs.push(Ifq {
                rq_head_ptr: rq.at(reg.offsets.head),
                rq_tail_ptr: rq.at(reg.offsets.tail),
                rqes: rq.at(reg.offsets.rqes),
                rq_mask: reg.rq_entries - 1,
                _rq: rq,
                area,
                rq_tail: 0,
                area_token: area_reg.rq_area_token,
                zcrx_id: reg.zcrx_id,
            });
        }
        Ok(ring)
    }

    /// Queues a multishot `RECV_ZC` on socket `sock` (on the first
    /// instance) and submits it.
    pub fn recv_multishot(&mut self, sock: RawFd) -> io::Result<()> {
        self.recv_multishot_tagged(sock, 2, 0)
    }

    /// [`ZcrxRing::recv_multishot`] on instance `ifq` (the socket's packets
    /// must arrive on its queue, else the request fails with `EFAULT`),
    /// whose completions carry `tag` (below 2^48).
    pub fn recv_multishot_tagged(&mut self, sock: RawFd, tag: u64, ifq: usize) -> io::Result<()> {
        debug_assert!(tag < (1 << IFQ_SHIFT));
        let zcrx_id = self.ifqs[ifq].zcrx_id;
        let tail = atomic(self.sq_tail).load(Ordering::Relaxed);
        let idx = tail & self.sq_mask;
        let sqe = self.sqes.at::<io_uring_sqe>(idx * std::mem::size_of::<io_uring_sqe>() as u32);
        // SAFETY: the sqe slot is ours until the tail moves past it.
        unsafe {
            ptr::write_bytes(sqe, 0, 1);
            (*sqe).opcode = io_uring_op_IORING_OP_RECV_ZC as u8;
            (*sqe).fd = sock;
            (*sqe).ioprio = IORING_RECV_MULTISHOT as u16;
            (*sqe).__bindgen_anon_5.zcrx_ifq_idx = zcrx_id;
            (*sqe).user_data = ((ifq as u64) << IFQ_SHIFT) | tag;
            *self.sq_array.add(idx as usize) = idx;
        }
        atomic(self.sq_tail).store(tail.wrapping_add(1), Ordering::Release);
        self.enter(1, 0)
    }

    fn enter(&self, submit: u32, wait: u32) -> io::Result<()> {
        self.enter_timeout(submit, wait, None)
    }

    /// `io_uring_enter`, waiting for `wait` completions at most `timeout`
    /// (`ETIME` then).
    fn enter_timeout(&self, submit: u32, wait: u32, timeout: Option<Duration>) -> io::Result<()> {
        let mut flags = if wait > 0 { IORING_ENTER_GETEVENTS } else { 0 };
        let ts = timeout.map(|t| __kernel_timespec { tv_sec: t.as_secs() as i64, tv_nsec: t.subsec_nanos().into() });
        let arg = ts.as_ref().map(|ts| io_uring_getevents_arg { ts: ts as *const _ as u64, ..Default::default() });
        let (argp, argsz) = match &arg {
            Some(a) => {
                flags |= IORING_ENTER_EXT_ARG;
                (a as *const io_uring_getevents_arg as *const u8, std::mem::size_of::<io_uring_getevents_arg>())
            }
            None => (ptr::null::<u8>(), 0usize),
        };
        // SAFETY: plain io_uring_enter on our ring; `arg` and `ts` outlive
        // the call.
        let mut call = || unsafe { libc::syscall(libc::SYS_io_uring_enter, self.fd, submit, wait, flags, argp, argsz) };
        cvt(match ENTER_HOOK.get() {
            Some(h) => h(&mut call),
            None => call(),
        })
        .map(|_| ())
    }

    /// [`ZcrxRing::complete_refill`], waiting at most `timeout` for a
    /// completion: `Ok(false)` if none came.
    pub fn complete_refill_timeout(&mut self, timeout: Duration, f: impl FnMut(&Completion, &[u8])) -> io::Result<bool> {
        if atomic(self.cq_head).load(Ordering::Relaxed) == atomic(self.cq_tail).load(Ordering::Acquire) {
            match self.enter_timeout(0, 1, Some(timeout)) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR)) => {}
                r => r?,
            }
            if atomic(self.cq_head).load(Ordering::Relaxed) == atomic(self.cq_tail).load(Ordering::Acquire) {
                return Ok(false);
            }
        }
        self.complete_refill(f).map(|()| true)
    }

    /// Waits for at least one completion, then handles all there are:
    /// calls `f` with each and its bytes in the area (empty for an error or
    /// the end of stream) and puts the buffer of each data completion on
    /// its instance's refill ring as soon as `f` returns, the way a
    /// receiver done with the data does; the refill rings' tails and the
    /// CQ head are published once per call. The buffers are the kernel's
    /// again after that: `f` must not keep the bytes.
    pub fn complete_refill(&mut self, mut f: impl FnMut(&Completion, &[u8])) -> io::Result<()> {
        loop {
            let head = atomic(self.cq_head).load(Ordering::Relaxed);
            let tail = atomic(self.cq_tail).load(Ordering::Acquire);
            if head == tail {
                self.enter(0, 1)?;
                continue;
            }
            let buf_mask = !(self.buf_size as u64 - 1);
            // Room on each refill ring, read once per batch (the kernel only
            // frees more meanwhile). A buffer handed out in two completions
            // takes two entries, so the ring can fill up: then stop, rather
            // than overwrite an entry the kernel has not read.
            let mut room = [0u32; MAX_IFQS];
            for (r, q) in room.iter_mut().zip(&self.ifqs) {
                *r = (q.rq_mask + 1) - q.rq_tail.wrapping_sub(atomic(q.rq_head_ptr).load(Ordering::Acquire));
            }
            let mut used = [0u32; MAX_IFQS];
            let mut h = head;
            while h != tail {
                // A data completion needs a refill entry: with none left
                // on its instance's ring, stop before it (it is handled
                // on the next call, once the kernel has taken entries).
                // SAFETY: CQE32 entries are 32 bytes, inside the ring, and
                // ours until the head moves past them; a plain CQE starts
                // each.
                let (res, user_data) = unsafe {
                    let c = &*(self.cqes.add(((h & self.cq_mask) * 32) as usize) as *const io_uring_cqe);
                    (c.res, c.user_data)
                };
                let ifq = (user_data >> IFQ_SHIFT) as usize;
                if res > 0 && used[ifq] == room[ifq] {
                    if h == head {
                        return Err(io::Error::other("io_uring zcrx refill ring full"));
                    }
                    break;
                }
                // SAFETY: CQE32 entries are 32 bytes, inside the ring, and
                // ours until the head moves past them.
                let cqe = unsafe { self.cqes.add(((h & self.cq_mask) * 32) as usize) };
                // SAFETY: as above; the zcrx CQE follows the plain one.
                let (res, flags, off, user_data) = unsafe {
                    let c = &*(cqe as *const io_uring_cqe);
                    (c.res, c.flags, (*(cqe.add(16) as *const io_uring_zcrx_cqe)).off, c.user_data)
                };
                let c = Completion {
                    len: res.max(0) as usize,
                    off: off & !(IORING_ZCRX_AREA_MASK_VALUE),
                    more: flags & IORING_CQE_F_MORE != 0,
                    err: (res < 0).then_some(-res),
                    tag: user_data & ((1 << IFQ_SHIFT) - 1),
                    ifq: (user_data >> IFQ_SHIFT) as usize,
                };
                h = h.wrapping_add(1);
                if res <= 0 {
                    f(&c, &[]);
                    continue;
                }
                let q = &mut self.ifqs[c.ifq];
                // As zcrx-rs's `Zcrx::data` does for each record.
                assert!(c.off.checked_add(c.len as u64).is_some_and(|end| end <= q.area.len as u64), "completion outside the area");
                used[c.ifq] += 1;
                // SAFETY: inside this instance's area (checked above); the
                // kernel does not write the buffer until it is given back
                // below, after `f` is done with it.
                let data = unsafe { std::slice::from_raw_parts(q.area.ptr.add(c.off as usize), c.len) };
                f(&c, data);
                let idx = q.rq_tail & q.rq_mask;
                // SAFETY: the entry is ours until the tail moves past it (room
                // checked above).
                unsafe {
                    *q.rqes.add(idx as usize) = io_uring_zcrx_rqe { off: (c.off & buf_mask) | q.area_token, len: c.len as u32, __pad: 0 };
                }
                q.rq_tail = q.rq_tail.wrapping_add(1);
            }
            atomic(self.cq_head).store(h, Ordering::Release);
            for q in &self.ifqs {
                atomic(q.rq_tail_ptr).store(q.rq_tail, Ordering::Release);
            }
            return Ok(());
        }
    }

    /// The area's buffer size.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }
}

/// `IORING_ZCRX_AREA_MASK`: the area id bits of an offset.
const IORING_ZCRX_AREA_MASK_VALUE: u64 = !((1u64 << IORING_ZCRX_AREA_SHIFT) - 1);

impl Drop for ZcrxRing {
    fn drop(&mut self) {
        // SAFETY: our fd; closing the ring unregisters the zcrx instances.
        // The areas and refill rings are unmapped after it (field drops).
        unsafe { libc::close(self.fd) };
    }
}
