// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Read-only views of socket buffers: the linear part, page/netmem frags
//! and the frag list.

use kernel::{
    bindings,
    prelude::*,
    types::Opaque, //
};

use super::netmem::Netmem;
use crate::mm::pin::MappedPage;

/// A `struct sk_buff`, borrowed from the socket's receive queue.
///
/// # Invariants
///
/// The skb is live and not modified for the lifetime of the reference (the
/// socket lock is held by whoever handed it out).
#[repr(transparent)]
pub(crate) struct SkBuff(Opaque<bindings::sk_buff>);

impl SkBuff {
    /// # Safety
    ///
    /// `ptr` is a live skb that nobody modifies during `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::sk_buff) -> &'a Self {
        // SAFETY: transparent wrapper; validity is the caller's promise.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut bindings::sk_buff {
        self.0.get()
    }

    /// Total length (linear part, frags and frag list).
    pub(crate) fn len(&self) -> u32 {
        // SAFETY: by the type invariant the skb is live.
        unsafe { (*self.as_raw()).len }
    }

    /// Length of the linear part (`skb_headlen`: `len - data_len`).
    pub(crate) fn headlen(&self) -> u32 {
        // SAFETY: by the type invariant the skb is live and not modified.
        let (len, data_len) = unsafe { ((*self.as_raw()).len, (*self.as_raw()).data_len) };
        len - data_len
    }

    /// The shared info, as a raw pointer: clones of the skb change parts of
    /// it (`dataref`) at any time, so no reference to it is made; the fields
    /// read below (frags, `nr_frags`, `frag_list`) do not change while the
    /// skb sits in the socket's queue (type invariant).
    fn shinfo(&self) -> *mut bindings::skb_shared_info {
        // SAFETY: a live skb always has its shared info.
        unsafe { bindings::skb_shinfo(self.as_raw()) }
    }

    /// The page/netmem frags.
    pub(crate) fn frags(&self) -> &[Frag] {
        let sh = self.shinfo();
        // SAFETY: `sh` is the live shared info; `nr_frags` and the frag array
        // are not modified while we look (see `shinfo`). `Frag` is a
        // transparent wrapper of `skb_frag_t` (an `Opaque`), so the slice
        // makes no claim about the frags' bytes.
        unsafe {
            let n = usize::from(core::ptr::addr_of!((*sh).nr_frags).read());
            let frags = core::ptr::addr_of!((*sh).frags);
            let n = n.min(array_len(frags));
            core::slice::from_raw_parts(frags.cast::<Frag>(), n)
        }
    }

    /// The skbs on the frag list, in order.
    pub(crate) fn frag_list(&self) -> FragListIter<'_> {
        // SAFETY: as for `frags`.
        let next = unsafe { core::ptr::addr_of!((*self.shinfo()).frag_list).read() };
        FragListIter {
            next,
            _p: core::marker::PhantomData,
        }
    }

    /// Copies `len` bytes starting at `offset` of the data to the start of
    /// `page` (`skb_copy_bits`): works for the linear part, page frags and
    /// the frag list, but not for unreadable (net_iov) frags (`EFAULT`).
    /// `EINVAL` if `len` exceeds the page.
    pub(crate) fn copy_bits_to_page(
        &self,
        offset: u32,
        page: &mut MappedPage<'_>,
        len: usize,
    ) -> Result {
        if len > MappedPage::LEN {
            return Err(EINVAL);
        }
        let len = i32::try_from(len).map_err(|_| EINVAL)?;
        let off = i32::try_from(offset).map_err(|_| EINVAL)?;
        // SAFETY: the skb is live; `page` is valid for writes of `LEN >=
        // len` bytes (type invariant of `MappedPage`); `skb_copy_bits`
        // checks `offset + len` against the skb and fails otherwise.
        kernel::error::to_result(unsafe {
            bindings::skb_copy_bits(self.as_raw(), off, page.as_mut_ptr().cast(), len)
        })
    }
}

/// The length of the array `p` points to, without touching it.
fn array_len<T, const N: usize>(_p: *const [T; N]) -> usize {
    N
}

/// One frag of an skb.
#[repr(transparent)]
pub(crate) struct Frag(Opaque<bindings::skb_frag_t>);

impl Frag {
    fn as_raw(&self) -> *mut bindings::skb_frag_t {
        self.0.get()
    }

    // The accessors read the fields as `skb_frag_size()`, `skb_frag_off()`
    // and `skb_frag_netmem()` do: they run for every frag of every packet,
    // a helper call each is not free.

    /// Length of the frag.
    pub(crate) fn size(&self) -> u32 {
        // SAFETY: the frag belongs to a live skb that nobody modifies.
        unsafe { (*self.as_raw()).len }
    }

    /// Offset of the data in the buffer.
    pub(crate) fn off(&self) -> u32 {
        // SAFETY: as for `size`.
        unsafe { (*self.as_raw()).offset }
    }

    /// The buffer holding the data.
    pub(crate) fn netmem(&self) -> Netmem<'_> {
        // SAFETY: as for `size`; the skb holds a reference to the buffer,
        // so it is valid while the frag is borrowed.
        unsafe { Netmem::from_raw((*self.as_raw()).netmem) }
    }
}

/// Iterator over an skb's frag list.
pub(crate) struct FragListIter<'a> {
    next: *mut bindings::sk_buff,
    _p: core::marker::PhantomData<&'a SkBuff>,
}

impl<'a> Iterator for FragListIter<'a> {
    type Item = &'a SkBuff;

    fn next(&mut self) -> Option<&'a SkBuff> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: skbs on a frag list live as long as their parent, which is
        // live for `'a`.
        let skb = unsafe { SkBuff::from_raw(self.next) };
        // SAFETY: as above.
        self.next = unsafe { (*self.next).__bindgen_anon_1.__bindgen_anon_1.next };
        Some(skb)
    }
}
