// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The free list of an area: buffers that are on no page pool and not held
//! by the user. Pure logic; the caller provides the locking.

use kernel::prelude::*;

/// Why a buffer could not be put on the free list.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FreeListError {
    /// The index is not a buffer of this area.
    OutOfRange,
    /// The buffer is already free (a double free).
    AlreadyFree,
}

/// A LIFO stack of free buffer indices, with a bitmap that catches double
/// frees (a lost-buffer or double-return bug would otherwise corrupt it).
///
/// # Invariants
///
/// `stack` holds distinct indices `< n`, exactly those whose bit is set in
/// `free`; `stack.len() <= n`.
pub(crate) struct FreeList {
    stack: KVVec<u32>,
    free: KVVec<u64>,
    n: usize,
}

impl FreeList {
    /// A list of `n` buffers, all free; `pop` hands out 0, 1, 2, ... first.
    pub(crate) fn new_full(n: usize) -> Result<Self> {
        let n32 = u32::try_from(n).map_err(|_| EINVAL)?;
        let mut stack = KVVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
        for i in (0..n32).rev() {
            stack.push(i, GFP_KERNEL_ACCOUNT)?;
        }
        let words = n.div_ceil(64);
        let mut free = KVVec::with_capacity(words, GFP_KERNEL_ACCOUNT)?;
        free.resize(words, u64::MAX, GFP_KERNEL_ACCOUNT)?;
        if n % 64 != 0 {
            if let Some(last) = free.last_mut() {
                *last = (1u64 << (n % 64)) - 1;
            }
        }
        Ok(Self { stack, free, n })
    }

    /// Number of free buffers.
    pub(crate) fn len(&self) -> usize {
        self.stack.len()
    }

    /// Takes a free buffer.
    pub(crate) fn pop(&mut self) -> Option<u32> {
        let i = self.stack.pop()?;
        self.free[i as usize / 64] &= !(1u64 << (i % 64));
        Some(i)
    }

    /// Returns buffer `i`.
    pub(crate) fn push(&mut self, i: u32) -> core::result::Result<(), FreeListError> {
        let iu = i as usize;
        if iu >= self.n {
            return Err(FreeListError::OutOfRange);
        }
        let (w, b) = (iu / 64, 1u64 << (i % 64));
        if self.free[w] & b != 0 {
            return Err(FreeListError::AlreadyFree);
        }
        // Cannot fail: at most `n` distinct indices, capacity is `n`.
        self.stack
            .push(i, GFP_ATOMIC)
            .map_err(|_| FreeListError::AlreadyFree)?;
        self.free[w] |= b;
        Ok(())
    }

    /// Whether buffer `i` is free (for the KUnit suites).
    #[cfg(zcrx_kunit)]
    pub(crate) fn is_free(&self, i: u32) -> bool {
        (i as usize) < self.n && self.free[i as usize / 64] & (1u64 << (i % 64)) != 0
    }
}

#[cfg(zcrx_kunit)]
#[kunit_tests(zcrx_rs_freelist)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_order_then_empty() -> Result {
        let mut f = FreeList::new_full(3)?;
        assert_eq!(f.len(), 3);
        assert_eq!(f.pop(), Some(0));
        assert_eq!(f.pop(), Some(1));
        assert_eq!(f.pop(), Some(2));
        assert_eq!(f.pop(), None);
        assert_eq!(f.len(), 0);
        Ok(())
    }

    #[test]
    fn push_back_and_reuse_lifo() -> Result {
        let mut f = FreeList::new_full(4)?;
        let a = f.pop().unwrap_or(99);
        let b = f.pop().unwrap_or(99);
        assert!(!f.is_free(a) && !f.is_free(b));
        assert_eq!(f.push(a), Ok(()));
        assert!(f.is_free(a));
        assert_eq!(f.pop(), Some(a));
        assert_eq!(f.push(b), Ok(()));
        assert_eq!(f.len(), 3);
        Ok(())
    }

    #[test]
    fn double_free_and_range_are_refused() -> Result {
        let mut f = FreeList::new_full(65)?;
        assert_eq!(f.push(3), Err(FreeListError::AlreadyFree));
        assert_eq!(f.push(65), Err(FreeListError::OutOfRange));
        assert_eq!(f.push(u32::MAX), Err(FreeListError::OutOfRange));
        let x = f.pop().unwrap_or(99);
        assert_eq!(f.push(x), Ok(()));
        assert_eq!(f.push(x), Err(FreeListError::AlreadyFree));
        assert_eq!(f.len(), 65);
        Ok(())
    }

    #[test]
    fn bitmap_edges() -> Result {
        // n a multiple of 64 and not: the last word must hold exactly n bits.
        for n in [1usize, 63, 64, 65, 128, 129] {
            let mut f = FreeList::new_full(n)?;
            let mut popped = 0;
            while f.pop().is_some() {
                popped += 1;
            }
            assert_eq!(popped, n);
            assert!(!f.is_free(n as u32 - 1));
            assert_eq!(f.push(n as u32 - 1), Ok(()));
            assert_eq!(f.push(n as u32), Err(FreeListError::OutOfRange));
        }
        Ok(())
    }
}
