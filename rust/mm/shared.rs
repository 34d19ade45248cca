// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Zeroed kernel memory that user space maps, for rings shared with the
//! user: vmalloc memory charged to the caller's memory cgroup, mapped page
//! by page with `vm_insert_page` (what `remap_vmalloc_range` does for
//! `vmalloc_user` memory, which is not charged). The charge stays with the
//! pages for as long as they live, also through a mapping that outlives the
//! ring, so a program cannot pile up rings beyond its cgroup's limit.

use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU32, AtomicU64},
};

use kernel::{
    bindings,
    mm::virt::{flags, VmaNew},
    page::BorrowedPage,
    prelude::*,
    transmute::FromBytes, //
};

use super::pin::PAGE_SIZE;

/// A zeroed, page-aligned vmalloc area that may be mapped into user space.
///
/// # Invariants
///
/// `ptr` is a vmalloc allocation of `len` bytes (a multiple of the page
/// size, zeroed), freed with `vfree` on drop. Pages that user space mapped
/// stay alive through the mapping's own references.
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
        let gfp = bindings::GFP_KERNEL_ACCOUNT | bindings::__GFP_ZERO;
        // SAFETY: plain allocation.
        let ptr = unsafe { bindings::__vmalloc_noprof(len as kernel::ffi::c_ulong, gfp) };
        NonNull::new(ptr.cast())
            .map(|ptr| Self { ptr, len })
            .ok_or(ENOMEM)
    }

    /// The aligned `u32` at byte offset `off`, for atomic access (user
    /// space may write it at any time). `None` if it is not inside the
    /// memory or not 4-byte aligned.
    pub(crate) fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if off % core::mem::align_of::<AtomicU32>() != 0
            || off.checked_add(core::mem::size_of::<AtomicU32>())? > self.len
        {
            return None;
        }
        // SAFETY: `off` is in bounds and aligned (checked above; the memory
        // is page aligned); the memory lives as long as `self`. Concurrent
        // writers (user space) do not make atomic accesses unsound.
        Some(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() })
    }

    /// The aligned `u64` at byte offset `off`, for atomic access (counters
    /// the user reads). `None` if it is not inside the memory or not 8-byte
    /// aligned.
    pub(crate) fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        if off % core::mem::align_of::<AtomicU64>() != 0
            || off.checked_add(core::mem::size_of::<AtomicU64>())? > self.len
        {
            return None;
        }
        // SAFETY: as for `atomic_u32`: in bounds and aligned, alive as long
        // as `self`, only accessed atomically by us.
        Some(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() })
    }

    /// A copy of the `T` at byte offset `off`, read once (volatile): user
    /// space may change it at any time, so the caller validates the copy,
    /// never the memory. `None` if it is not inside the memory or not
    /// aligned for `T`.
    pub(crate) fn read<T: FromBytes>(&self, off: usize) -> Option<T> {
        if off % core::mem::align_of::<T>() != 0
            || off.checked_add(core::mem::size_of::<T>())? > self.len
        {
            return None;
        }
        // SAFETY: in bounds and aligned (checked above); any bit pattern
        // is a valid `T` (`FromBytes`); no reference to the shared bytes is
        // made, so a concurrent user write cannot invalidate one.
        Some(unsafe { core::ptr::read_volatile(self.ptr.as_ptr().add(off).cast::<T>()) })
    }

    /// Maps the memory into `vma`, which must be a shared mapping from
    /// offset 0 no larger than the memory: `EINVAL` otherwise (a private
    /// mapping would give the process a copy-on-write copy, so what it
    /// writes would never reach us).
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        if vma.end() - vma.start() > self.len {
            return Err(EINVAL);
        }
        if vma.flags() & flags::SHARED == 0 {
            return Err(EINVAL);
        }
        // SAFETY: `vma` is a valid vma being set up by mmap (type
        // invariant of `VmaNew`), and `vm_pgoff` is not written meanwhile.
        if unsafe { (*vma.as_ptr()).vm_pgoff } != 0 {
            return Err(EINVAL);
        }
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_dontdump();
        let map = vma.set_mixedmap();
        let start = vma.start();
        for off in (0..vma.end() - start).step_by(PAGE_SIZE) {
            // SAFETY: `off < len` (checked above), so the address is in our
            // vmalloc area, which is live.
            let page = unsafe { bindings::vmalloc_to_page(self.ptr.as_ptr().add(off).cast()) };
            let page = NonNull::new(page).ok_or(EINVAL)?;
            // SAFETY: the page belongs to our vmalloc area, which outlives
            // this borrow (it is only used for the insert below, which takes
            // a reference of its own).
            let page = unsafe { BorrowedPage::from_raw(page) };
            // On failure the core unmaps the vma, with what was inserted.
            map.vm_insert_page(start + off, &page)?;
        }
        Ok(())
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: by the type invariant the area came from vmalloc.
        unsafe { bindings::vfree(self.ptr.as_ptr().cast()) };
    }
}
