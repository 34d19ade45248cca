// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Counters: per binding (reported by `ZCRX_RS_IOC_STATS`) and module-wide
//! counts of live objects (reported by `ZCRX_RS_IOC_INFO`, for leak checks).

use kernel::sync::atomic::{ordering::Relaxed, Atomic};

/// A relaxed event counter.
pub(crate) struct Counter(Atomic<u64>);

impl Counter {
    /// Zero.
    pub(crate) const fn new() -> Self {
        Counter(Atomic::new(0))
    }

    /// Adds `n`.
    pub(crate) fn add(&self, n: u64) {
        self.0.add(n, Relaxed);
    }

    /// Subtracts `n` (for gauges).
    pub(crate) fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Relaxed);
    }

    /// Current value.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Counters of one binding.
pub(crate) struct Stats {
    pub(crate) zc_bytes: Counter,
    pub(crate) zc_records: Counter,
    pub(crate) copy_bytes: Counter,
    pub(crate) copy_records: Counter,
    pub(crate) alloc_fail: Counter,
    pub(crate) refill_bad: Counter,
    pub(crate) refill_ok: Counter,
}

impl Stats {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Stats {
            zc_bytes: Counter::new(),
            zc_records: Counter::new(),
            copy_bytes: Counter::new(),
            copy_records: Counter::new(),
            alloc_fail: Counter::new(),
            refill_bad: Counter::new(),
            refill_ok: Counter::new(),
        }
    }
}

/// Live objects of the whole module.
pub(crate) struct Global {
    pub(crate) contexts: Counter,
    pub(crate) areas: Counter,
    pub(crate) pinned_pages: Counter,
    pub(crate) providers: Counter,
    pub(crate) pools: Counter,
}

/// The module-wide counters.
pub(crate) static GLOBAL: Global = Global {
    contexts: Counter::new(),
    areas: Counter::new(),
    pinned_pages: Counter::new(),
    providers: Counter::new(),
    pools: Counter::new(),
};
