// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Counters: per binding (reported by `ZCRX_RS_IOC_STATS`) and module-wide
//! counts of live objects (reported by `ZCRX_RS_IOC_INFO`, for leak checks).

use kernel::sync::atomic::{
    ordering::{Acquire, Relaxed, Release},
    Atomic,
};

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

    /// Subtracts `n` (for gauges), after everything this thread did before
    /// (release): a reader that sees the gauge fall also sees what the
    /// object released on its way out.
    pub(crate) fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Release);
    }

    /// Current value (acquire, pairs with [`Counter::sub`]).
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Acquire)
    }

    /// Current value, for a copy of an event counter.
    pub(crate) fn get_relaxed(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// `n` counted on a module-wide gauge while this lives.
///
/// As the last field of a struct it falls after every other field has been
/// dropped, so a gauge at zero means the objects are gone *and* whatever
/// they held (pins, charges, mappings) has been given back: `INFO` never
/// reports "idle" while a process's `VmPin` is still charged.
pub(crate) struct GaugeShare {
    gauge: &'static Counter,
    n: u64,
}

impl GaugeShare {
    /// Adds `n` to `gauge` until dropped.
    pub(crate) fn new(gauge: &'static Counter, n: u64) -> Self {
        gauge.add(n);
        Self { gauge, n }
    }
}

impl Drop for GaugeShare {
    fn drop(&mut self) {
        self.gauge.sub(self.n);
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
    /// Armed events that fired.
    pub(crate) events: Counter,
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
            events: Counter::new(),
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
