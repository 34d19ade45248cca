// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! User references: how many times each buffer was handed to user space
//! (in a receive record) and not given back yet.
//!
//! The counts can never underflow: a return for a buffer the user does not
//! hold is refused, which is how bad or repeated refill entries are caught.
//!
//! Ordering. Each user reference stands for one page-pool reference that
//! the receive path took *before* the user reference ([`UserRefs::get`]),
//! and that the refill path drops *after* taking the user reference back
//! ([`UserRefs::put`]), possibly on another CPU. The page-pool reference
//! is a relaxed atomic. `get` is a release and a successful `put` (or
//! `take_all`) an acquire, so a `put` that sees the user reference also
//! sees the page-pool reference taken before it: the refill path can never
//! drop the pool's count to zero (and recycle the buffer) while an skb
//! still holds it, on any architecture. A copy buffer's count is set
//! before `get` in the same way.
//!
//! The counts are `core` atomics rather than `kernel::sync::atomic`, which
//! the kernel asks Rust code to use (the LKMM is its memory model): a
//! deliberate exception for the hot path. Without C helper inlining (this
//! build's rustc and clang have different LLVMs) each `kernel` atomic is a
//! call into a C helper, and these are taken and dropped for every buffer
//! received. No C code touches the counts; the one ordering that matters is
//! the release/acquire pair above against the page-pool count (a C
//! `atomic_long_t`), which on the architectures this runs on (x86-64, where
//! both are `lock`-prefixed instructions) holds across the two models.
//! Back to `kernel::sync::atomic` once helpers can be inlined.

use core::sync::atomic::{
    AtomicU32,
    Ordering::{Acquire, Relaxed, Release},
};

use kernel::prelude::*;

/// Per-buffer user reference counts.
///
/// There is deliberately no running total: the receive path (one CPU) and
/// the refill path (the NAPI CPU) would both write it for every buffer, a
/// cache line bouncing between them. [`UserRefs::held`] sums on demand.
pub(crate) struct UserRefs {
    refs: KVVec<AtomicU32>,
}

impl UserRefs {
    /// `n` buffers, none held.
    pub(crate) fn new(n: usize) -> Result<Self> {
        let mut refs = KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..n {
            refs.push(AtomicU32::new(0), GFP_KERNEL_ACCOUNT)?;
        }
        Ok(Self { refs })
    }

    /// The user now holds buffer `i` once more. Release: publishes the
    /// page-pool reference taken for it (see the module comment).
    pub(crate) fn get(&self, i: usize) {
        self.refs[i].fetch_add(1, Release);
    }

    /// [`UserRefs::get`] without the bounds check (the receive path's,
    /// for every buffer).
    ///
    /// # Safety
    ///
    /// `i` is less than the number of buffers.
    #[inline(always)]
    pub(crate) unsafe fn get_unchecked(&self, i: usize) {
        // SAFETY: `i` is in bounds (the caller's promise).
        unsafe { self.refs.get_unchecked(i) }.fetch_add(1, Release);
    }

    /// The user gives buffer `i` back once. False (and nothing changes) if
    /// the user does not hold it. Acquire on success: pairs with `get`.
    pub(crate) fn put(&self, i: usize) -> bool {
        let r = &self.refs[i];
        let mut old = r.load(Relaxed);
        loop {
            if old == 0 {
                return false;
            }
            match r.compare_exchange_weak(old, old - 1, Acquire, Relaxed) {
                Ok(_) => break,
                Err(cur) => old = cur,
            }
        }
        true
    }

    /// Takes all of the user's references to buffer `i` (teardown scrub);
    /// returns how many there were.
    pub(crate) fn take_all(&self, i: usize) -> u32 {
        let r = &self.refs[i];
        if r.load(Relaxed) == 0 {
            return 0;
        }
        r.swap(0, Acquire)
    }

    /// Current count of buffer `i` (for the KUnit suites).
    #[cfg(zcrx_kunit)]
    pub(crate) fn count(&self, i: usize) -> u32 {
        self.refs[i].load(Relaxed)
    }

    /// Buffers held by the user, counted with multiplicity (a walk over
    /// all counts: for stats and teardown, not for hot paths).
    pub(crate) fn held(&self) -> u64 {
        self.refs.iter().map(|r| u64::from(r.load(Relaxed))).sum()
    }
}

#[cfg(zcrx_kunit)]
#[kunit_tests(zcrx_rs_urefs)]
mod tests {
    use super::*;

    #[test]
    fn never_underflows() -> Result {
        let u = UserRefs::new(4)?;
        assert!(!u.put(0));
        assert_eq!(u.count(0), 0);
        assert_eq!(u.held(), 0);
        u.get(0);
        assert!(u.put(0));
        assert!(!u.put(0));
        assert_eq!(u.held(), 0);
        Ok(())
    }

    #[test]
    fn counts_with_multiplicity() -> Result {
        let u = UserRefs::new(4)?;
        u.get(1);
        u.get(1);
        u.get(3);
        assert_eq!(u.count(1), 2);
        assert_eq!(u.held(), 3);
        assert!(u.put(1));
        assert_eq!(u.count(1), 1);
        assert_eq!(u.held(), 2);
        Ok(())
    }

    #[test]
    fn take_all_scrubs() -> Result {
        let u = UserRefs::new(2)?;
        u.get(0);
        u.get(0);
        u.get(0);
        assert_eq!(u.take_all(0), 3);
        assert_eq!(u.take_all(0), 0);
        assert_eq!(u.held(), 0);
        // After a scrub a late refill entry is refused, not double-returned.
        assert!(!u.put(0));
        Ok(())
    }
}
