// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Memory abstractions of zcrx_rs: pinned user pages and their accounting,
//! DMA mappings of them for a device, and kernel memory shared with user
//! space through mmap. With [`crate::net`] the only users of `bindings`.

pub(crate) mod dma;
pub(crate) mod pin;
pub(crate) mod pod;
pub(crate) mod shared;

/// `array_index_nospec`: `idx` if `idx < size`, else 0, without letting the
/// CPU speculate past a bounds check with an out-of-range index.
pub(crate) fn index_nospec(idx: usize, size: usize) -> usize {
    // SAFETY: pure computation.
    unsafe { kernel::bindings::array_index_nospec(idx, size) }
}
