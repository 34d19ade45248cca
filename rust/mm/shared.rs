// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Zeroed kernel memory that user space maps (`vmalloc_user` +
//! `remap_vmalloc_range`), for rings shared with the user.

use core::ptr::NonNull;

use kernel::{
    bindings,
    mm::virt::VmaNew,
    prelude::*, //
};

use super::pin::PAGE_SIZE;

/// A zeroed, page-aligned vmalloc area that may be mapped into user space.
///
/// # Invariants
///
/// `ptr` is a `vmalloc_user` allocation of `len` bytes (a multiple of the
/// page size), freed with `vfree` on drop. Pages that user space mapped stay
/// alive through the mapping's own references.
pub(crate) struct SharedMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: vmalloc memory may be used and freed from any thread.
unsafe impl Send for SharedMem {}
// SAFETY: shared access goes through raw pointers with atomics/volatile.
unsafe impl Sync for SharedMem {}

impl SharedMem {
    /// Allocates `len` bytes, rounded up to whole pages.
    pub(crate) fn new(len: usize) -> Result<Self> {
        let len = len.checked_next_multiple_of(PAGE_SIZE).ok_or(EINVAL)?;
        // SAFETY: plain allocation.
        let ptr = unsafe { bindings::vmalloc_user_noprof(len) };
        NonNull::new(ptr.cast())
            .map(|ptr| Self { ptr, len })
            .ok_or(ENOMEM)
    }

    /// Start of the memory.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Maps the memory into `vma` (from offset 0). `EINVAL` if the vma is
    /// larger than the memory.
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        if vma.end() - vma.start() > self.len {
            return Err(EINVAL);
        }
        vma.set_dontcopy();
        // SAFETY: `vma` is being set up by mmap; the memory is a
        // `vmalloc_user` area of at least the vma's size.
        kernel::error::to_result(unsafe {
            bindings::remap_vmalloc_range(vma.as_ptr(), self.ptr.as_ptr().cast(), 0)
        })
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the area came from `vmalloc_user`.
        unsafe { bindings::vfree(self.ptr.as_ptr().cast()) };
    }
}
