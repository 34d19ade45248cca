// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! devmem TCP as the victim's provider: a udmabuf bound to queue 0 with
//! the netdev family's `bind-rx`, sockets read with
//! `recvmsg(MSG_SOCK_DEVMEM)`, the payload read back through the memfd
//! behind the dma-buf, and every fragment given back with
//! `SO_DEVMEM_DONTNEED`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use super::victim::{Conn, PollRx, Victim};

/// asm-generic/socket.h
const SO_DEVMEM_LINEAR: libc::c_int = 78;
const SO_DEVMEM_DMABUF: libc::c_int = 79;
const SO_DEVMEM_DONTNEED: libc::c_int = 80;
const MSG_SOCK_DEVMEM: libc::c_int = 0x2000000;

/// `struct dmabuf_cmsg` (uapi/linux/uio.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct DmabufCmsg {
    frag_offset: u64,
    frag_size: u32,
    frag_token: u32,
    dmabuf_id: u32,
    flags: u32,
}

/// `struct dmabuf_token`.
#[repr(C)]
struct DmabufToken {
    token_start: u32,
    token_count: u32,
}

/// A dma-buf bound to rx queues; the binding lasts while its netlink
/// socket is open.
pub(super) struct DevmemRx {
    binding: zcrx::netdev::RxBinding,
    _dmabuf: OwnedFd,
    _memfd: OwnedFd,
    map: *const u8,
    len: usize,
    buf: Vec<u8>,
    cbuf: Vec<u64>,
}

impl DevmemRx {
    /// A `len`-byte udmabuf bound to rx queue `queue` of `ifindex` (in
    /// the caller's namespace).
    pub(super) fn new(ifindex: u32, queue: u32, len: usize) -> Result<DevmemRx, String> {
        let (memfd, dmabuf) = crate::dmabuf::udmabuf(len)?;
        let binding = zcrx::netdev::bind_rx(ifindex, &[queue], dmabuf.as_fd()).map_err(|e| format!("bind-rx: {e}"))?;
        // SAFETY: a fresh shared, read-only mapping of the memfd, which
        // lives as long as `self` (unmapped in drop).
        let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, memfd.as_fd().as_raw_fd(), 0) };
        if map == libc::MAP_FAILED {
            return Err(format!("mmap the memfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<DmabufCmsg>() as u32) } as usize * 64;
        Ok(DevmemRx {
            binding,
            _dmabuf: dmabuf,
            _memfd: memfd,
            map: map.cast(),
            len,
            buf: vec![0; 64 << 10],
            cbuf: vec![0; space.div_ceil(8)],
        })
    }
}

impl Drop for DevmemRx {
    fn drop(&mut self) {
        // SAFETY: our mapping, of `len` bytes.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.len) };
    }
}

impl PollRx for DevmemRx {
    fn read(&mut self, c: &mut Conn, v: &mut Victim) -> Result<std::io::Result<bool>, String> {
        let mut iov = libc::iovec { iov_base: self.buf.as_mut_ptr().cast(), iov_len: self.buf.len() };
        // SAFETY: all-zero is a valid msghdr.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = self.cbuf.as_mut_ptr().cast();
        m.msg_controllen = (self.cbuf.len() * 8) as _;
        // SAFETY: `m` points at our buffer and control buffer, both live.
        let n = unsafe { libc::recvmsg(c.s.as_raw_fd(), &mut m, MSG_SOCK_DEVMEM | libc::MSG_DONTWAIT) };
        if n < 0 {
            return Ok(Err(std::io::Error::last_os_error()));
        }
        if n == 0 {
            return Ok(Ok(false));
        }
        // Pieces in stream order: linear bytes come in the iovec, fragments
        // in the dma-buf; without any control message all came readable.
        let (mut linear, mut dev, mut tokens) = (0usize, 0usize, Vec::new());
        let mut any = false;
        // SAFETY: walking the control messages the kernel wrote into `m`.
        let mut h = unsafe { libc::CMSG_FIRSTHDR(&m) };
        while !h.is_null() {
            // SAFETY: `h` is a control message header inside `cbuf`.
            let (level, ty) = unsafe { ((*h).cmsg_level, (*h).cmsg_type) };
            if level == libc::SOL_SOCKET && (ty == SO_DEVMEM_LINEAR || ty == SO_DEVMEM_DMABUF) {
                any = true;
                // SAFETY: these messages carry a struct dmabuf_cmsg.
                let d: DmabufCmsg = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(h).cast()) };
                let sz = d.frag_size as usize;
                if ty == SO_DEVMEM_LINEAR {
                    let piece = self.buf.get(linear..linear + sz).ok_or("SO_DEVMEM_LINEAR beyond the bytes received")?;
                    c.take(v, piece)?;
                    linear += sz;
                    v.copy_bytes += sz as u64;
                } else {
                    if d.dmabuf_id != self.binding.id() {
                        return Err(format!("SO_DEVMEM_DMABUF of dma-buf {}, bound: {}", d.dmabuf_id, self.binding.id()));
                    }
                    let off = d.frag_offset as usize;
                    if off.checked_add(sz).is_none_or(|e| e > self.len) {
                        return Err(format!("SO_DEVMEM_DMABUF fragment {off}+{sz} outside the {}-byte dma-buf", self.len));
                    }
                    // SAFETY: inside the mapping (checked); the device does
                    // not write the fragment until its token is given back.
                    let piece = unsafe { std::slice::from_raw_parts(self.map.add(off), sz) };
                    c.take(v, piece)?;
                    dev += sz;
                    v.zc_bytes += sz as u64;
                    tokens.push(DmabufToken { token_start: d.frag_token, token_count: 1 });
                }
            }
            // SAFETY: next header of the same message.
            h = unsafe { libc::CMSG_NXTHDR(&m, h) };
        }
        if m.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err("recvmsg(MSG_SOCK_DEVMEM): control messages truncated".into());
        }
        if !any {
            c.take(v, &self.buf[..n as usize])?;
            v.copy_bytes += n as u64;
        } else if linear + dev != n as usize {
            return Err(format!("recvmsg(MSG_SOCK_DEVMEM) returned {n} bytes, its messages say {linear} linear + {dev} in the dma-buf"));
        }
        for chunk in tokens.chunks(128) {
            // SAFETY: setsockopt reads `chunk` (an array of dmabuf_token).
            let r = unsafe {
                libc::setsockopt(
                    c.s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    SO_DEVMEM_DONTNEED,
                    chunk.as_ptr().cast(),
                    std::mem::size_of_val(chunk) as libc::socklen_t,
                )
            };
            if r < 0 || r as usize != chunk.len() {
                return Err(format!(
                    "SO_DEVMEM_DONTNEED of {} tokens: {}",
                    chunk.len(),
                    if r < 0 { std::io::Error::last_os_error().to_string() } else { format!("{r} freed") }
                ));
            }
        }
        Ok(Ok(true))
    }

    fn stall_report(&self, c: &Conn) -> String {
        format!("after {} bytes; socket: {}", c.got, crate::net::tcp_info_line(&c.s))
    }
}
