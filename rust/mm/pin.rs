// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Long-term pinned user pages, charged to the owner's locked memory.

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{
    bindings,
    mm::{
        virt::{flags, VmaRef},
        Mm,
    },
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{ordering::Relaxed, Atomic},
    },
    ThisModule, //
};

use crate::stats::{Counter, GaugeShare};

/// Size of a page.
pub(crate) const PAGE_SIZE: usize = kernel::page::PAGE_SIZE;
/// log2 of [`PAGE_SIZE`].
pub(crate) const PAGE_SHIFT: u32 = PAGE_SIZE.trailing_zeros();

/// User pages pinned with `FOLL_LONGTERM | FOLL_WRITE`, with their charge.
///
/// The charge lives exactly as long as the pins (whoever holds the pages
/// last, an area or a DMA mapping): the pages are unpinned first, then the
/// charge is given back, then the gauge the pages are counted on falls
/// (field order).
///
/// # Invariants
///
/// Every entry of `pages` is a page pinned by us (one pin each), released
/// with `unpin_user_pages` on drop.
pub(crate) struct PinnedPages {
    pages: KVVec<*mut bindings::page>,
    _charge: PinCharge,
    _counted: GaugeShare,
}

// SAFETY: pinned pages may be used and unpinned from any thread.
unsafe impl Send for PinnedPages {}
// SAFETY: `&PinnedPages` only gives out page pointers for kmap/DMA mapping.
unsafe impl Sync for PinnedPages {}

impl PinnedPages {
    /// Pins `npages` pages of the current process starting at `addr`,
    /// charged to it (see [`PinCharge`]) and counted on `gauge` while pinned.
    ///
    /// One rule per case, checked on the mappings under the mmap lock, the
    /// same hold in which the pages are pinned (so the mappings cannot
    /// change in between):
    /// - `EFAULT`: part of the range is not mapped;
    /// - `EOPNOTSUPP`: a mapping is not ordinary memory (`VM_PFNMAP`,
    ///   `VM_MIXEDMAP`, `VM_IO`: device memory, kernel memory mapped to user
    ///   space such as a ring of `refuse_owner`'s files), a private mapping
    ///   of a file (other than hugetlbfs), or memory that cannot be pinned
    ///   long-term (a shared mapping of a file on a filesystem with
    ///   writeback);
    /// - `EACCES`: a mapping is not writable (read-only, `PROT_NONE`);
    /// - `ENOMEM`: over `RLIMIT_MEMLOCK`, or memory is short.
    pub(crate) fn pin_current(
        addr: usize,
        npages: usize,
        refuse_owner: &ThisModule,
        gauge: &'static Counter,
    ) -> Result<Self> {
        let end = npages
            .checked_mul(PAGE_SIZE)
            .and_then(|l| addr.checked_add(l))
            .ok_or(EINVAL)?;
        let charge = PinCharge::charge_current(npages)?;
        let mut pages: KVVec<*mut bindings::page> =
            KVVec::with_capacity(npages, GFP_KERNEL_ACCOUNT)?;
        pages.resize(npages, core::ptr::null_mut(), GFP_KERNEL_ACCOUNT)?;
        let task = kernel::current!();
        let mm = task.mm().ok_or(EFAULT)?;
        let guard = mm.mmap_read_lock();
        let mut a = addr;
        while a < end {
            let vma = guard.vma_lookup(a).ok_or(EFAULT)?;
            check_vma(vma, refuse_owner)?;
            a = vma.end();
        }
        let flags = bindings::FOLL_WRITE | bindings::FOLL_LONGTERM;
        // SAFETY: `pages` has room for `npages` pointers; the range belongs
        // to the current process, whose mmap lock we hold for reading as
        // `pin_user_pages` requires (it does not drop it: no `locked`
        // argument).
        let got = unsafe { bindings::pin_user_pages(addr, npages, flags, pages.as_mut_ptr()) };
        drop(guard);
        let got_n = usize::try_from(got).unwrap_or(0);
        if got_n != npages {
            if got_n > 0 {
                // SAFETY: the first `got_n` entries were pinned just now.
                unsafe { bindings::unpin_user_pages(pages.as_mut_ptr(), got_n) };
            }
            // Every mapping is there and writable: a fault means the memory
            // cannot be pinned long-term; a short pin likewise.
            return Err(match got {
                g if g < 0 && g as i32 != EFAULT.to_errno() => Error::from_errno(g as i32),
                _ => EOPNOTSUPP,
            });
        }
        // INVARIANT: all `npages` entries were pinned just now, once each.
        Ok(Self {
            pages,
            _charge: charge,
            _counted: GaugeShare::new(gauge, npages as u64),
        })
    }

    /// Number of pages.
    pub(crate) fn len(&self) -> usize {
        self.pages.len()
    }

    /// Raw page array, for building a scatterlist.
    pub(super) fn as_raw_slice(&self) -> &[*mut bindings::page] {
        &self.pages
    }

    /// Maps page `idx` into the kernel for the duration of `f`
    /// (`kmap_local_page`), for the copy fallback.
    ///
    /// # Panics
    ///
    /// If `idx` is out of range; callers use validated indices.
    pub(crate) fn with_mapped<R>(&self, idx: usize, f: impl FnOnce(&mut MappedPage<'_>) -> R) -> R {
        let page = self.pages[idx];
        // SAFETY: the page is pinned by us (type invariant) and stays so
        // while `self` is borrowed; it is unmapped below, in the same
        // context, before any mapping made after it (`f` cannot keep
        // `MappedPage`, which is also `!Send`).
        let va = unsafe { bindings::kmap_local_page(page) };
        let mut mapped = MappedPage {
            va: va.cast(),
            _p: PhantomData,
        };
        let r = f(&mut mapped);
        // SAFETY: `va` was mapped above by this context and is the newest
        // local mapping still in place.
        unsafe { bindings::kunmap_local(va) };
        r
    }
}

/// A pinned page mapped into the kernel by [`PinnedPages::with_mapped`].
///
/// No Rust reference to its bytes is ever made: user space may read (or,
/// misbehaving, write) them through its own mapping at any time, so they
/// are only written through the raw pointer, by `memcpy`-like callees.
///
/// # Invariants
///
/// `va` is the kernel address of a page mapped with `kmap_local_page` for
/// as long as the value exists (it is only ever borrowed from a scope of
/// `with_mapped`). The raw pointer makes the type `!Send`: local mappings
/// are per-CPU.
pub(crate) struct MappedPage<'a> {
    va: *mut u8,
    _p: PhantomData<&'a mut ()>,
}

impl MappedPage<'_> {
    /// Bytes in the page.
    pub(crate) const LEN: usize = PAGE_SIZE;

    /// The start of the page, valid for writes of [`MappedPage::LEN`]
    /// bytes while `self` is borrowed.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.va
    }
}

impl Drop for PinnedPages {
    fn drop(&mut self) {
        // SAFETY: by the type invariant every page is pinned once by us.
        unsafe { bindings::unpin_user_pages(self.pages.as_mut_ptr(), self.pages.len()) };
    }
}

/// The checks of [`PinnedPages::pin_current`] on one mapping.
fn check_vma(vma: &VmaRef, refuse_owner: &ThisModule) -> Result {
    let f = vma.flags();
    if f & (flags::PFNMAP | flags::MIXEDMAP | flags::IO) != 0 {
        return Err(EOPNOTSUPP);
    }
    // SAFETY: the caller holds the mmap lock, so `vma` and its file stay
    // valid and `vm_file`/`vm_ops` do not change; a file's `f_op` is set
    // once at open.
    let (owner, anonymous) = unsafe {
        let file = (*vma.as_ptr()).vm_file;
        let owner = if file.is_null() {
            None
        } else {
            Some((*(*file).f_op).owner)
        };
        // `vma_is_anonymous()`: no vm_ops (also a private /dev/zero map).
        (owner, (*vma.as_ptr()).vm_ops.is_null())
    };
    if owner.is_some_and(|o| core::ptr::eq(o, refuse_owner.as_ptr())) {
        return Err(EOPNOTSUPP);
    }
    if !anonymous && f & flags::SHARED == 0 && f & flags::HUGETLB == 0 {
        // A private mapping of a file.
        return Err(EOPNOTSUPP);
    }
    if f & flags::WRITE == 0 {
        return Err(EACCES);
    }
    Ok(())
}

/// Pinned pages charged as io_uring charges its pinned memory:
///
/// - to the *user's* `locked_vm`, against `RLIMIT_MEMLOCK` (`ENOMEM` over
///   it), unless the caller has `CAP_IPC_LOCK`: all processes of one user
///   share one limit, so N processes cannot pin N times the limit;
/// - to the process's `pinned_vm` (`VmPin` in `/proc/PID/status`), not its
///   `locked_vm` (`VmLck`, which is mlock's).
///
/// Uncharged on drop.
///
/// # Invariants
///
/// `npages` pages are added to `mm->pinned_vm`, and, if `user` is set, to
/// `user->locked_vm`; we hold a reference to `user` (`get_uid`) and to `mm`
/// (`mmgrab`).
pub(crate) struct PinCharge {
    user: Option<NonNull<bindings::user_struct>>,
    mm: ARef<Mm>,
    npages: usize,
}

// SAFETY: the references may be dropped and the counters (atomics) updated
// from any thread.
unsafe impl Send for PinCharge {}
// SAFETY: `&PinCharge` gives access to nothing.
unsafe impl Sync for PinCharge {}

/// `atomic_long_t`/`atomic64_t` at `p` as a Rust atomic.
///
/// # Safety
///
/// `p` points to a live, aligned `atomic64_t` (its `counter`) for `'a`,
/// only ever accessed atomically.
unsafe fn atomic64<'a>(p: *mut i64) -> &'a Atomic<i64> {
    // SAFETY: the caller guarantees it.
    unsafe { Atomic::from_ptr(p) }
}

impl PinCharge {
    /// Charges `npages` for the current process and user.
    pub(crate) fn charge_current(npages: usize) -> Result<Self> {
        let n = i64::try_from(npages).map_err(|_| ENOMEM)?;
        let task = kernel::current!();
        let mm: ARef<Mm> = ARef::from(&**task.mm().ok_or(ESRCH)?);
        // SAFETY: `init_user_ns` is a static; only its address is taken.
        let ipc_lock = unsafe {
            bindings::ns_capable_noaudit(
                core::ptr::addr_of_mut!(bindings::init_user_ns),
                bindings::CAP_IPC_LOCK as i32,
            )
        };
        let user = if ipc_lock {
            None
        } else {
            // SAFETY: `current->cred` is only changed by the task itself, so
            // it and its `user` are stable here (`current_user()`);
            // `get_uid()` is a reference count increment.
            let u = unsafe {
                let u = (*(*bindings::get_current()).cred).user;
                bindings::refcount_inc(core::ptr::addr_of_mut!((*u).__count));
                u
            };
            let u = NonNull::new(u).ok_or(EINVAL)?;
            // `rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT`.
            // SAFETY: `current->signal` lives as long as the task; the limit
            // is written with WRITE_ONCE, read once here (READ_ONCE).
            let limit = unsafe {
                let sig = (*bindings::get_current()).signal;
                core::ptr::addr_of!((*sig).rlim[bindings::RLIMIT_MEMLOCK as usize].rlim_cur)
                    .read_volatile()
            } as u64
                / PAGE_SIZE as u64;
            // SAFETY: `u` is live (we hold a reference); `locked_vm` is an
            // atomic_long_t, only accessed atomically.
            let locked =
                unsafe { atomic64(core::ptr::addr_of_mut!((*u.as_ptr()).locked_vm.counter)) };
            let mut cur = locked.load(Relaxed);
            loop {
                let new = cur.saturating_add(n);
                if new as u64 > limit {
                    // SAFETY: drops the reference taken above.
                    unsafe { bindings::free_uid(u.as_ptr()) };
                    return Err(ENOMEM);
                }
                match locked.cmpxchg(cur, new, Relaxed) {
                    Ok(_) => break,
                    Err(c) => cur = c,
                }
            }
            Some(u)
        };
        // SAFETY: `mm` is live (we hold an mmgrab reference); `pinned_vm` is
        // an atomic64_t, only accessed atomically.
        unsafe {
            atomic64(core::ptr::addr_of_mut!(
                (*mm.as_raw()).__bindgen_anon_1.pinned_vm.counter
            ))
        }
        .add(n, Relaxed);
        // INVARIANT: charged to both above.
        Ok(Self { user, mm, npages })
    }
}

impl Drop for PinCharge {
    fn drop(&mut self) {
        let n = self.npages as i64;
        // SAFETY: by the type invariant `mm` is live and charged.
        unsafe {
            atomic64(core::ptr::addr_of_mut!(
                (*self.mm.as_raw()).__bindgen_anon_1.pinned_vm.counter
            ))
        }
        .fetch_sub(n, Relaxed);
        if let Some(u) = self.user {
            // SAFETY: by the type invariant we hold a reference to `u`, and
            // `n` pages are charged to it; then we drop the reference.
            unsafe {
                atomic64(core::ptr::addr_of_mut!((*u.as_ptr()).locked_vm.counter))
                    .fetch_sub(n, Relaxed);
                bindings::free_uid(u.as_ptr());
            }
        }
    }
}
