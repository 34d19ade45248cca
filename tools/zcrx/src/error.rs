// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Typed errors of [`crate::Context`]: which operation failed, what that
//! errno means for it, and the OS error itself.

use std::fmt;
use std::io;

use crate::sys::errno_name;

/// The operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Opening `/dev/zcrx`.
    Open,
    /// Asking the module what it supports.
    Info,
    /// Mapping or registering the area.
    RegisterArea,
    /// Binding the area to an rx queue, or mapping its refill ring.
    Bind,
    /// Unbinding.
    Unbind,
    /// Receiving from a socket.
    Recv,
    /// Reading the counters.
    Stats,
    /// Arming, collecting or waiting for events.
    Events,
}

/// What went wrong, as far as the caller can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `/dev/zcrx` does not exist: `zcrx_rs` is not loaded.
    ModuleNotLoaded,
    /// The module speaks another uAPI version.
    VersionMismatch,
    /// Missing privilege (`CAP_NET_ADMIN` to bind, device permissions).
    PermissionDenied,
    /// Pinning the area would exceed `RLIMIT_MEMLOCK`, or memory is short.
    OutOfMemory,
    /// The memory cannot be used as an area (not ordinary, not writable).
    BadMemory,
    /// No such network device (or it went away).
    NoSuchDevice,
    /// The device has no such rx queue.
    NoSuchQueue,
    /// The queue cannot take a provider: header split off, `hds-thresh` not
    /// 0, no DMA device, or the driver lacks the queue API.
    QueueNotCapable,
    /// The queue has another memory provider, or XDP is attached.
    QueueBusy,
    /// The area's buffers are larger than a page but not physically
    /// contiguous, so a NIC cannot write them (`ERANGE` at bind): it is
    /// not hugetlbfs memory because no huge pages were reserved
    /// (`/proc/sys/vm/nr_hugepages`). Copy-only contexts take it.
    MemoryNotContiguous,
    /// This context is bound already, or its area is still mapped for
    /// another device.
    ContextBusy,
    /// The context is not bound (never bound, for `recv`; for `unbind`,
    /// unbound already).
    NotBound,
    /// Nothing to read now on a non-blocking socket.
    WouldBlock,
    /// Every buffer is held: give some back (drop [`crate::Buf`]s and
    /// [`crate::Batch`]es) and call again.
    NoBuffers,
    /// The socket is not a TCP socket read by TCP itself (kTLS, sockmap).
    NotTcp,
    /// The socket is not connected.
    NotConnected,
    /// The connection failed (reset, timed out, ...): the socket's error.
    Connection,
    /// Interrupted by a signal.
    Interrupted,
    /// An argument the uAPI refuses (area length, ring size).
    InvalidArgument,
    /// The kernel returned a record outside the area (a bug).
    BadRecord,
    /// Anything else.
    Other,
}

/// An error of the zcrx API.
#[derive(Debug)]
pub struct Error {
    op: Op,
    kind: ErrorKind,
    os: io::Error,
}

impl Error {
    /// The error `os` of operation `op`, classified.
    pub fn new(op: Op, os: io::Error) -> Self {
        let kind = classify(op, os.raw_os_error().unwrap_or(0));
        Error { op, kind, os }
    }

    pub(crate) fn with_kind(op: Op, kind: ErrorKind, os: io::Error) -> Self {
        Error { op, kind, os }
    }

    /// The operation that failed.
    pub fn op(&self) -> Op {
        self.op
    }

    /// What it means.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The errno, if the error came from the kernel.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.os.raw_os_error()
    }
}

fn classify(op: Op, e: i32) -> ErrorKind {
    use ErrorKind::*;
    match (op, e) {
        (Op::Open, libc::ENOENT | libc::ENXIO | libc::ENODEV) => ModuleNotLoaded,
        (_, libc::EPERM | libc::EACCES) if op != Op::RegisterArea => PermissionDenied,
        (_, libc::EINTR) => Interrupted,
        (_, libc::EAGAIN) => WouldBlock,
        (_, libc::ENOMEM) => OutOfMemory,
        (Op::RegisterArea, libc::EINVAL) => InvalidArgument,
        (Op::RegisterArea, libc::EFAULT | libc::EACCES | libc::EOPNOTSUPP) => BadMemory,
        (Op::Bind, libc::ENODEV) => NoSuchDevice,
        (Op::Bind, libc::ERANGE) => NoSuchQueue,
        (Op::Bind, libc::EINVAL | libc::EOPNOTSUPP) => QueueNotCapable,
        (Op::Bind, libc::EEXIST) => QueueBusy,
        (Op::Bind, libc::EBUSY) => ContextBusy,
        (Op::Unbind, libc::EINVAL) => NotBound,
        (Op::Unbind, libc::ENODEV) => NoSuchDevice,
        (Op::Recv, libc::EINVAL) => NotBound,
        (Op::Recv, libc::ENOBUFS) => NoBuffers,
        (Op::Recv, libc::ENOTSOCK | libc::EPROTONOSUPPORT | libc::EBADF) => NotTcp,
        (Op::Recv, libc::ENOTCONN) => NotConnected,
        (
            Op::Recv,
            libc::ECONNRESET
            | libc::ECONNABORTED
            | libc::ETIMEDOUT
            | libc::EPIPE
            | libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::EHOSTDOWN
            | libc::ENETUNREACH
            | libc::ENETDOWN,
        ) => Connection,
        _ => Other,
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            Op::Open => "open /dev/zcrx",
            Op::Info => "info",
            Op::RegisterArea => "register area",
            Op::Bind => "bind",
            Op::Unbind => "unbind",
            Op::Recv => "recv",
            Op::Stats => "stats",
            Op::Events => "events",
        };
        let what = match self.kind {
            ErrorKind::ModuleNotLoaded => "the zcrx_rs module is not loaded",
            ErrorKind::VersionMismatch => "the module speaks another uAPI version",
            ErrorKind::PermissionDenied => "permission denied (binding needs CAP_NET_ADMIN)",
            ErrorKind::OutOfMemory => "over RLIMIT_MEMLOCK or out of memory",
            ErrorKind::BadMemory => "this memory cannot be an area",
            ErrorKind::NoSuchDevice => "no such network device",
            ErrorKind::NoSuchQueue => "no such rx queue",
            ErrorKind::QueueNotCapable => "the queue cannot take a provider (header split off, hds-thresh not 0, or no queue API)",
            ErrorKind::QueueBusy => "the queue has another memory provider or XDP",
            ErrorKind::MemoryNotContiguous => {
                "buffers larger than a page need physically contiguous memory: reserve huge pages \
                 (/proc/sys/vm/nr_hugepages)"
            }
            ErrorKind::ContextBusy => "the context is bound already",
            ErrorKind::NotBound => "the context is not bound",
            ErrorKind::WouldBlock => "nothing to read now",
            ErrorKind::NoBuffers => "every buffer is held; give some back",
            ErrorKind::NotTcp => "not a socket read by TCP",
            ErrorKind::NotConnected => "the socket is not connected",
            ErrorKind::Connection => "the connection failed",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::InvalidArgument => "invalid argument (area length, ring size)",
            ErrorKind::BadRecord => "the kernel returned a record outside the area",
            ErrorKind::Other => "failed",
        };
        match self.os.raw_os_error() {
            Some(e) => write!(f, "zcrx {op}: {what} ({}: {})", errno_name(e), self.os),
            None => write!(f, "zcrx {op}: {what} ({})", self.os),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.os)
    }
}

impl From<Error> for io::Error {
    /// Keeps the `io::ErrorKind` (`WouldBlock` stays `WouldBlock`), with the
    /// typed error inside.
    fn from(e: Error) -> io::Error {
        io::Error::new(e.os.kind(), e)
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    fn err(op: Op, e: i32) -> Error {
        Error::new(op, io::Error::from_raw_os_error(e))
    }

    #[test]
    fn errnos_mean_what_the_uapi_says() {
        assert_eq!(err(Op::Open, libc::ENOENT).kind(), ErrorKind::ModuleNotLoaded);
        assert_eq!(err(Op::Bind, libc::EINVAL).kind(), ErrorKind::QueueNotCapable);
        assert_eq!(err(Op::Bind, libc::EEXIST).kind(), ErrorKind::QueueBusy);
        assert_eq!(err(Op::Bind, libc::EBUSY).kind(), ErrorKind::ContextBusy);
        assert_eq!(err(Op::Bind, libc::ERANGE).kind(), ErrorKind::NoSuchQueue);
        assert_eq!(err(Op::Bind, libc::EPERM).kind(), ErrorKind::PermissionDenied);
        assert_eq!(err(Op::RegisterArea, libc::EACCES).kind(), ErrorKind::BadMemory);
        assert_eq!(err(Op::RegisterArea, libc::EINVAL).kind(), ErrorKind::InvalidArgument);
        assert_eq!(err(Op::RegisterArea, libc::ENOMEM).kind(), ErrorKind::OutOfMemory);
        assert_eq!(err(Op::Recv, libc::EAGAIN).kind(), ErrorKind::WouldBlock);
        assert_eq!(err(Op::Recv, libc::ENOBUFS).kind(), ErrorKind::NoBuffers);
        assert_eq!(err(Op::Recv, libc::EINVAL).kind(), ErrorKind::NotBound);
        assert_eq!(err(Op::Recv, libc::ECONNRESET).kind(), ErrorKind::Connection);
        assert_eq!(err(Op::Recv, libc::EPROTONOSUPPORT).kind(), ErrorKind::NotTcp);
        assert_eq!(err(Op::Unbind, libc::EINVAL).kind(), ErrorKind::NotBound);
    }

    #[test]
    fn converts_to_io_error_keeping_kind_and_message() {
        let e: io::Error = err(Op::Recv, libc::EAGAIN).into();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let msg = err(Op::Bind, libc::EINVAL).to_string();
        assert!(msg.starts_with("zcrx bind: the queue cannot take a provider"), "{msg}");
        assert!(msg.contains("EINVAL"), "{msg}");
        let e = Error::with_kind(Op::Bind, ErrorKind::MemoryNotContiguous, io::Error::from_raw_os_error(libc::ERANGE));
        let msg = e.to_string();
        assert!(msg.contains("huge pages") && msg.contains("ERANGE"), "{msg}");
    }
}
