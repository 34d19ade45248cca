// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Loading and unloading kernel modules with the raw syscalls, so tests see
//! the kernel's own errno (kmod's `rmmod` rewrites some of them).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::sys::{cvt, open};

/// Loads the module at `path` with `finit_module(2)`.
pub fn load(path: &Path, params: &str) -> io::Result<()> {
    let file = open(path, libc::O_RDONLY)?;
    let params = CString::new(params).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the fd is open, `params` is a valid C string, flags are 0.
    cvt(unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), params.as_ptr(), 0) })?;
    Ok(())
}

/// Unloads module `name` with `delete_module(2)` and `O_NONBLOCK`: a module
/// in use fails at once with `EWOULDBLOCK` instead of waiting.
pub fn unload(name: &str) -> io::Result<()> {
    let c = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid C string; O_NONBLOCK never blocks.
    cvt(unsafe { libc::syscall(libc::SYS_delete_module, c.as_ptr(), libc::O_NONBLOCK) })?;
    Ok(())
}

/// Whether module `name` is loaded (has a /sys/module entry with state).
pub fn is_loaded(name: &str) -> bool {
    Path::new("/sys/module").join(name).join("initstate").exists()
}

/// The module's reference count from /sys/module/NAME/refcnt.
pub fn refcnt(name: &str) -> io::Result<i64> {
    let s = fs::read_to_string(Path::new("/sys/module").join(name).join("refcnt"))?;
    s.trim().parse().map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("refcnt: {s:?}")))
}
