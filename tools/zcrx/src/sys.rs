// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Thin, checked wrappers around the few raw syscalls the tools need.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Converts a libc return value into an `io::Result`.
pub fn cvt(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `open(2)` with raw flags, returning an owned fd.
pub fn open(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let fd = cvt(unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) } as libc::c_long)?;
    // SAFETY: `open` just returned this fd and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `ioctl(2)` with a pointer argument (or 0).
pub fn ioctl(fd: &impl AsRawFd, cmd: libc::c_ulong, arg: usize) -> io::Result<libc::c_long> {
    // SAFETY: the caller passes an argument that matches `cmd`; for the
    // commands we send, the kernel only reads/writes the pointed-to struct.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), cmd, arg) } as libc::c_long)
}

/// Errno of an `io::Error`, or 0 when it has none.
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// Name of an errno value, for messages ("EBUSY").
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN/EWOULDBLOCK",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENODATA => "ENODATA",
        libc::ENOTCONN => "ENOTCONN",
        libc::ENOEXEC => "ENOEXEC",
        libc::E2BIG => "E2BIG",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ECONNRESET => "ECONNRESET",
        libc::EPIPE => "EPIPE",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENOBUFS => "ENOBUFS",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EBADMSG => "EBADMSG",
        libc::EMSGSIZE => "EMSGSIZE",
        _ => "E?",
    }
}

/// Sends `fd` over the Unix socket `sock` (`SCM_RIGHTS`), with `data` (at
/// least one byte) as the message.
pub fn send_fd(sock: &impl AsRawFd, fd: &impl AsRawFd, data: &[u8]) -> io::Result<()> {
    assert!(!data.is_empty(), "SCM_RIGHTS needs a byte of data");
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: a msghdr over our buffers (the kernel only reads `data`);
    // CMSG_FIRSTHDR/CMSG_DATA stay within `cbuf` (CMSG_SPACE(4) <= 64).
    unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = libc::CMSG_SPACE(4) as _;
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd.as_raw_fd());
        cvt(libc::sendmsg(sock.as_raw_fd(), &m, 0) as libc::c_long)?;
    }
    Ok(())
}

/// Receives a message with one fd (`SCM_RIGHTS`) from the Unix socket
/// `sock` into `buf`: the fd and the message's length.
pub fn recv_fd(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(OwnedFd, usize)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; 8];
    // SAFETY: a msghdr over our buffers; the kernel writes at most
    // `msg_controllen` bytes of control data into `cbuf`; CMSG_FIRSTHDR
    // returns NULL or a header inside it.
    unsafe {
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of_val(&cbuf) as _;
        let n = cvt(libc::recvmsg(sock.as_raw_fd(), &mut m, libc::MSG_CMSG_CLOEXEC) as libc::c_long)?;
        let c = libc::CMSG_FIRSTHDR(&m);
        if c.is_null() || (*c).cmsg_level != libc::SOL_SOCKET || (*c).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::from_raw_os_error(libc::EBADMSG));
        }
        // The kernel installed this fd for us; nothing else owns it.
        let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()));
        Ok((fd, n as usize))
    }
}

/// A byte count on a command line: `32768`, or with a binary suffix,
/// `32k`/`32K`, `2m`/`2M`; `None` for zero or anything else.
pub fn parse_size(s: &str) -> Option<usize> {
    let (digits, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        _ => (s, 0),
    };
    let n: usize = digits.parse().ok()?;
    n.checked_mul(1 << shift).filter(|&v| v > 0)
}

/// The index of network interface `name` (in the caller's namespace).
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is empty, a valid value; CPU_SET stays
    // inside it (it ignores CPUs beyond the set's size).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        set
    };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } as libc::c_long).map(|_| ())
}

/// Sets the `SOL_SOCKET` option `opt` of socket `fd` to the int `bytes`
/// (`EINVAL` if it does not fit one).
fn set_socket_int(fd: &impl AsRawFd, opt: libc::c_int, bytes: u32) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: setsockopt reads an int from a live local.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(r.into()).map(|_| ())
}

/// Sets `SO_RCVLOWAT` on socket `fd`: blocking receives (recv(), RECV)
/// wait for that many bytes. On a listener, connections inherit it.
pub fn set_rcvlowat(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    set_socket_int(fd, libc::SO_RCVLOWAT, bytes)
}

/// Sets `SO_RCVBUF` on socket `fd` (the kernel doubles it, and stops
/// autotuning the socket's receive buffer). On a listener, connections
/// inherit it.
pub fn set_rcvbuf(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    set_socket_int(fd, libc::SO_RCVBUF, bytes)
}

/// Sets `SO_RCVBUFFORCE` on socket `fd`: [`set_rcvbuf`] beyond
/// `net.core.rmem_max` (needs `CAP_NET_ADMIN`).
pub fn set_rcvbuf_force(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    set_socket_int(fd, libc::SO_RCVBUFFORCE, bytes)
}

/// Sets `SO_SNDBUF` on socket `fd` (the kernel doubles it, and stops
/// autotuning the socket's send buffer).
pub fn set_sndbuf(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    set_socket_int(fd, libc::SO_SNDBUF, bytes)
}

/// `TCP_MAXSEG` of TCP socket `fd`: the largest payload of a segment it
/// sends (the MSS, less TCP options).
pub fn tcp_maxseg(fd: &impl AsRawFd) -> io::Result<u32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live local.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_MAXSEG, (&mut v as *mut libc::c_int).cast(), &mut len) };
    cvt(r.into()).map(|_| v as u32)
}

/// `SO_INCOMING_NAPI_ID` of socket `fd`: the NAPI instance (so the rx
/// queue) its last packet arrived on; 0 before any did. A connection
/// accepted from a listener has the one of the handshake's last ACK.
pub fn incoming_napi_id(fd: &impl AsRawFd) -> io::Result<u32> {
    let mut v: libc::c_uint = 0;
    let mut len = std::mem::size_of::<libc::c_uint>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live local.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID, (&mut v as *mut libc::c_uint).cast(), &mut len)
    };
    cvt(r.into()).map(|_| v)
}

/// Sets `SO_LINGER` {on, 0} on socket `fd`: `close()` resets the
/// connection and frees it at once.
pub fn set_linger_abort(fd: &impl AsRawFd) -> io::Result<()> {
    let l = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt reads a live `linger` of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    cvt(r.into()).map(|_| ())
}

/// Sets `SO_OOBINLINE` on socket `fd`: urgent bytes stay in the stream.
pub fn set_oobinline(fd: &impl AsRawFd, on: bool) -> io::Result<()> {
    let v: libc::c_int = on.into();
    // SAFETY: setsockopt reads an int from a live local.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_OOBINLINE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(r.into()).map(|_| ())
}

/// `sockatmark()`: whether the next byte to read is at the urgent mark.
pub fn at_mark(fd: &impl AsRawFd) -> io::Result<bool> {
    let mut v: libc::c_int = 0;
    // asm-generic/sockios.h (libc does not have it for Linux).
    const SIOCATMARK: libc::c_ulong = 0x8905;
    ioctl(fd, SIOCATMARK, &mut v as *mut libc::c_int as usize)?;
    Ok(v != 0)
}

/// `recv(fd, &b, 1, MSG_OOB | MSG_DONTWAIT)`: the urgent byte, if the
/// kernel holds one (`EINVAL`: no urgent data; `EAGAIN`: announced, not
/// arrived yet).
pub fn recv_oob(fd: &impl AsRawFd) -> io::Result<u8> {
    let mut b = 0u8;
    // SAFETY: recv writes at most one byte into a live local.
    let r = unsafe { libc::recv(fd.as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_OOB | libc::MSG_DONTWAIT) };
    match cvt(r as libc::c_long)? {
        1 => Ok(b),
        _ => Err(io::Error::from_raw_os_error(libc::ENODATA)),
    }
}

/// `send(fd, &b, 1, MSG_OOB)`: one urgent byte.
pub fn send_oob(fd: &impl AsRawFd, b: u8) -> io::Result<()> {
    // SAFETY: send reads one byte from a live local.
    let r = unsafe { libc::send(fd.as_raw_fd(), (&b as *const u8).cast(), 1, libc::MSG_OOB | libc::MSG_NOSIGNAL) };
    match cvt(r as libc::c_long)? {
        1 => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::EAGAIN)),
    }
}

/// CPU time the calling thread has used (user + system).
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes a timespec into a live local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_and_without_suffix() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("32768"), Some(32768));
        assert_eq!(parse_size("32k"), Some(32768));
        assert_eq!(parse_size("32K"), Some(32768));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        for bad in ["", "k", "0", "-4096", "32kb", "3.5k", "0x1000", " 4096", "x"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cvt_maps_negative_to_errno() {
        // SAFETY: closing an fd that cannot be open sets errno to EBADF.
        let r = cvt(unsafe { libc::close(-1) } as libc::c_long);
        assert_eq!(errno(&r.unwrap_err()), libc::EBADF);
        assert_eq!(cvt(5).unwrap(), 5);
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EBUSY), "EBUSY");
        assert_eq!(errno_name(libc::ENOTTY), "ENOTTY");
        assert_eq!(errno_name(9999), "E?");
    }
}
