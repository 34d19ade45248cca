// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Long-term pinned user pages, charged to the owner's locked memory.

use core::ptr::NonNull;

use kernel::{
    bindings,
    mm::Mm,
    prelude::*,
    sync::aref::ARef, //
};

use crate::net::skb::SkBuff;

/// Size of a page.
pub(crate) const PAGE_SIZE: usize = kernel::page::PAGE_SIZE;

/// User pages pinned with `FOLL_LONGTERM | FOLL_WRITE`.
///
/// # Invariants
///
/// Every entry of `pages` is a page pinned by us (one pin each), released
/// with `unpin_user_pages` on drop.
pub(crate) struct PinnedPages {
    pages: KVVec<NonNull<bindings::page>>,
}

// SAFETY: pinned pages may be used and unpinned from any thread.
unsafe impl Send for PinnedPages {}
// SAFETY: `&PinnedPages` only gives out page pointers for kmap/DMA mapping.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pins `npages` pages of the current process starting at `addr`.
    ///
    /// `EFAULT` if part of the range is not mapped, `EOPNOTSUPP` if it is
    /// mapped but cannot be pinned long-term (a mapping of a regular file,
    /// device memory), `ENOMEM` if memory is short.
    pub(crate) fn pin_current(addr: usize, npages: usize) -> Result<Self> {
        let n = i32::try_from(npages).map_err(|_| EINVAL)?;
        let mut raw: KVVec<*mut bindings::page> = KVVec::with_capacity(npages, GFP_KERNEL)?;
        raw.resize(npages, core::ptr::null_mut(), GFP_KERNEL)?;
        let flags = bindings::FOLL_WRITE | bindings::FOLL_LONGTERM;
        // SAFETY: `raw` has room for `npages` pointers; the range belongs to
        // the current process.
        let got = unsafe { bindings::pin_user_pages_fast(addr, n, flags, raw.as_mut_ptr()) };
        let got_n = usize::try_from(got).unwrap_or(0);
        if got_n != npages {
            if got_n > 0 {
                // SAFETY: the first `got_n` entries were pinned just now.
                unsafe { bindings::unpin_user_pages(raw.as_mut_ptr(), got_n) };
            }
            return Err(if got < 0 {
                explain_pin_error(Error::from_errno(got as i32), addr, npages)
            } else {
                // A partial pin: the rest is not pinnable.
                explain_pin_error(EFAULT, addr, npages)
            });
        }
        let mut pages = KVVec::with_capacity(npages, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: all `npages` entries are pinned.
            unsafe { bindings::unpin_user_pages(raw.as_mut_ptr(), npages) };
        })?;
        for p in raw.iter() {
            // `pin_user_pages_fast` returned `npages`, so all are non-null;
            // capacity was reserved, so pushing cannot fail.
            if let Some(p) = NonNull::new(*p) {
                let _ = pages.push(p, GFP_KERNEL);
            }
        }
        Ok(Self { pages })
    }

    /// Number of pages.
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// Raw page array, for building a scatterlist.
    pub(crate) fn as_raw_slice(&self) -> &[NonNull<bindings::page>] {
        &self.pages
    }

    /// Copies `len` bytes of `skb` from offset `off` into page `idx`, from
    /// its start (the copy fallback). `len` must fit in a page.
    ///
    /// # Panics
    ///
    /// If `idx` is out of range; callers use validated indices.
    pub(crate) fn copy_from_skb(&self, idx: usize, skb: &SkBuff, off: u32, len: usize) -> Result {
        if len > PAGE_SIZE {
            return Err(EINVAL);
        }
        let page = self.pages[idx].as_ptr();
        // No Rust reference to the page is made: user space may read (or,
        // misbehaving, write) it through its own mapping at any time.
        // SAFETY: the page is pinned and mapped between kmap_local_page and
        // kunmap_local; `len <= PAGE_SIZE` bytes fit in it.
        unsafe {
            let va = bindings::kmap_local_page(page).cast::<u8>();
            let r = skb.copy_bits_to_raw(off, va, len);
            bindings::kunmap_local(va.cast());
            r
        }
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        // SAFETY: by the type invariant every page is pinned once by us.
        unsafe { bindings::unpin_user_pages(self.pages.as_mut_ptr().cast(), self.pages.len()) };
    }
}

/// After a failed pin, tell a hole (`EFAULT`) from memory that is mapped but
/// cannot be pinned long-term (`EOPNOTSUPP`).
fn explain_pin_error(e: Error, addr: usize, npages: usize) -> Error {
    if e != EFAULT {
        return e;
    }
    let Some(end) = npages
        .checked_mul(PAGE_SIZE)
        .and_then(|l| addr.checked_add(l))
    else {
        return EFAULT;
    };
    let task = kernel::current!();
    let Some(mm) = task.mm() else {
        return EFAULT;
    };
    let guard = mm.mmap_read_lock();
    let mut a = addr;
    while a < end {
        match guard.vma_lookup(a) {
            Some(vma) => a = vma.end(),
            None => return EFAULT,
        }
    }
    EOPNOTSUPP
}

/// Pages charged to a process's locked memory (`RLIMIT_MEMLOCK`, `VmLck`)
/// with `account_locked_vm`, uncharged on drop.
///
/// # Invariants
///
/// `npages` pages are charged to `mm`.
pub(crate) struct LockedVmCharge {
    mm: ARef<Mm>,
    npages: usize,
}

impl LockedVmCharge {
    /// Charges `npages` to the current process. `ENOMEM` when it would
    /// exceed `RLIMIT_MEMLOCK` (and the caller lacks `CAP_IPC_LOCK`).
    pub(crate) fn charge_current(npages: usize) -> Result<Self> {
        let task = kernel::current!();
        let mm: ARef<Mm> = ARef::from(&**task.mm().ok_or(ESRCH)?);
        // SAFETY: `mm` is live (we hold an mmgrab reference).
        let ret = unsafe { bindings::account_locked_vm(mm.as_raw(), npages, true) };
        kernel::error::to_result(ret)?;
        Ok(Self { mm, npages })
    }
}

impl Drop for LockedVmCharge {
    fn drop(&mut self) {
        // SAFETY: by the type invariant these pages are charged to `mm`,
        // which our reference keeps allocated.
        unsafe { bindings::account_locked_vm(self.mm.as_raw(), self.npages, false) };
    }
}
