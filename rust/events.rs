// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Events a program waits for instead of polling `STATS`: the page pool
//! ran dry, data was copied. `ZCRX_RS_IOC_EVENTS` arms them; an armed
//! event fires once and is disarmed; `poll()`/`epoll` on the context fd
//! report `EPOLLPRI` while a fired event has not been collected.
//!
//! The state lives with the context (an [`Events`] per open file); the
//! receive state ([`crate::zcrx::Zcrx`]) fires into it through an
//! [`EventSlot`], which the context fills when it binds and empties when it
//! lets go of that state. A `Zcrx` may outlive its context (page pools
//! still draining) and be dropped in softirq context; emptying the slot
//! first keeps the last reference to the `Events`, whose wait queue must be
//! freed where one may sleep (`PollCondVar`'s drop waits for an RCU grace
//! period), with the context.

use core::sync::atomic::{
    AtomicU32,
    Ordering::{Acquire, Relaxed, Release},
};

use kernel::{
    fs::File,
    new_poll_condvar, new_spinlock_bh,
    prelude::*,
    sync::{
        poll::{PollCondVar, PollTable, POLLPRI},
        Arc, SpinLockBh,
    },
};

use crate::uapi::{ZCRX_RS_EVENT_ALLOC_FAIL, ZCRX_RS_EVENT_COPY};

/// Every event there is.
pub(crate) const ALL: u32 = ZCRX_RS_EVENT_ALLOC_FAIL | ZCRX_RS_EVENT_COPY;

/// The events of one context: which are armed, which fired and were not
/// collected yet, and the wait queue of its pollers.
#[pin_data]
pub(crate) struct Events {
    armed: AtomicU32,
    fired: AtomicU32,
    #[pin]
    waiters: PollCondVar,
}

impl Events {
    /// Nothing armed, nothing fired.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                armed: AtomicU32::new(0),
                fired: AtomicU32::new(0),
                waiters <- new_poll_condvar!("Events::waiters"),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// Fires the armed ones among `events` (any context, also softirq):
    /// they are disarmed, marked fired, and the pollers woken. Returns how
    /// many fired.
    pub(crate) fn fire(&self, events: u32) -> u32 {
        // Cheap when nothing is armed, the common case on the data path.
        if self.armed.load(Relaxed) & events == 0 {
            return 0;
        }
        let hit = self.armed.fetch_and(!events, Relaxed) & events;
        if hit == 0 {
            return 0;
        }
        // Release: whoever sees the bit (collect, poll) sees the counters
        // the caller updated before firing.
        self.fired.fetch_or(hit, Release);
        self.waiters.notify_all();
        hit.count_ones()
    }

    /// Collects the fired events (clearing them), then arms `arm`:
    /// `(fired, armed now)`.
    pub(crate) fn collect_and_arm(&self, arm: u32) -> (u32, u32) {
        let fired = self.fired.swap(0, Acquire);
        let armed = self.armed.fetch_or(arm, Relaxed) | arm;
        (fired, armed)
    }

    /// `poll()`: registers `table` with the wait queue and returns
    /// `POLLPRI` while a fired event waits to be collected.
    pub(crate) fn poll(&self, file: &File, table: &PollTable<'_>) -> u32 {
        table.register_wait(file, &self.waiters);
        if self.fired.load(Acquire) != 0 {
            POLLPRI
        } else {
            0
        }
    }
}

/// Where a receive state fires its events: the [`Events`] of the context
/// that uses it, or nothing.
///
/// # Invariants
///
/// Whoever fills the slot empties it before letting go of its own
/// reference to the `Events` (see the module documentation): the slot's
/// reference is never the last one.
#[pin_data]
pub(crate) struct EventSlot {
    #[pin]
    events: SpinLockBh<Option<Arc<Events>>>,
}

impl EventSlot {
    /// An empty slot.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            events <- new_spinlock_bh!(None, "EventSlot::events"),
        })
    }

    /// Points the slot at `events` (the caller keeps a reference of its
    /// own until it calls [`EventSlot::detach`]).
    pub(crate) fn attach(&self, events: Arc<Events>) {
        // An earlier one (not expected: a context attaches once) is
        // dropped out of the lock, by the caller, who holds it too.
        let old = self.events.lock().replace(events);
        drop(old);
    }

    /// Empties the slot: the state fires no more events into the context.
    pub(crate) fn detach(&self) -> Option<Arc<Events>> {
        self.events.lock().take()
    }

    /// Fires `events` into the attached context, if any; how many fired.
    pub(crate) fn fire(&self, events: u32) -> u32 {
        // The reference is not cloned: the context's keeps it alive.
        match &*self.events.lock() {
            Some(ev) => ev.fire(events),
            None => 0,
        }
    }
}
