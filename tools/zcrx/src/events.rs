// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Events of a context and the counters in its ring mapping: a program
//! learns that the refill ring ran dry, or that data was copied, without
//! asking for the counters in a loop.
//!
//! Arm the events to hear of ([`crate::Context::arm_events`]); an armed
//! event fires once and is disarmed, so a storm of allocation failures
//! costs one wake-up: arm it again to hear of the next one. While a fired
//! event waits to be collected the context's fd reports `EPOLLPRI`: wait
//! with [`crate::Context::wait_events`] (a blocking thread), with
//! `crate::tokio::EventWatcher` (feature `tokio`), or add the fd
//! ([`std::os::fd::AsFd`] on [`crate::Context`]) to an epoll set with
//! `EPOLLPRI`. [`crate::Context::ring_stats`] reads the counters with no
//! system call.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use zcrx::Events;
//! let ctx = zcrx::Context::open(64 << 20)?;
//! ctx.bind("eth0", 3)?;
//! let watcher = ctx.clone();
//! std::thread::spawn(move || loop {
//!     match watcher.wait_events(Events::ALLOC_FAIL, None) {
//!         Ok(st) if st.fired.contains(Events::ALLOC_FAIL) => {
//!             let n = watcher.ring_stats().map_or(0, |s| s.alloc_fail);
//!             eprintln!("the refill ring ran dry (failed allocations so far: {n})");
//!             std::thread::sleep(std::time::Duration::from_secs(1)); // one line a second at most
//!         }
//!         Ok(_) => {}
//!         Err(e) => break eprintln!("events: {e}"),
//!     }
//! });
//! // ... receive on ctx as usual ...
//! # Ok(()) }
//! ```

use std::fmt;
use std::ops::{BitAnd, BitOr, BitOrAssign, Sub};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Instant;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::uapi::*;

/// A set of context events (`ZCRX_RS_EVENT_*`).
///
/// Combine with `|`; a set the module reports may hold events newer than
/// this crate (kept as bits, shown in hex by `Debug`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Events(u32);

impl Events {
    /// A page pool of the context found no buffer: the refill ring ran
    /// dry, and the NIC drops until buffers come back
    /// (`ZCRX_RS_EVENT_ALLOC_FAIL`). Give buffers back sooner, or use a
    /// larger area.
    pub const ALLOC_FAIL: Events = Events(ZCRX_RS_EVENT_ALLOC_FAIL);
    /// A receive copied data: it was not placed by the NIC (flow not
    /// steered to a bound queue, header split off, or a copy-only context)
    /// (`ZCRX_RS_EVENT_COPY`).
    pub const COPY: Events = Events(ZCRX_RS_EVENT_COPY);

    /// No event.
    pub const fn empty() -> Self {
        Events(0)
    }

    /// Every event this crate knows.
    pub const fn all() -> Self {
        Events(ZCRX_RS_EVENT_ALLOC_FAIL | ZCRX_RS_EVENT_COPY)
    }

    /// The uAPI's bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The set of `bits`, if this crate knows every one of them.
    pub const fn from_bits(bits: u32) -> Option<Self> {
        if bits & !Self::all().0 == 0 {
            Some(Events(bits))
        } else {
            None
        }
    }

    /// The set of `bits`, unknown ones included (the module refuses to
    /// arm what it does not know: `EINVAL`).
    pub const fn from_bits_retain(bits: u32) -> Self {
        Events(bits)
    }

    /// No event in the set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Every event of `other` is in the set.
    pub const fn contains(self, other: Events) -> bool {
        self.0 & other.0 == other.0
    }

    /// Some event of `other` is in the set.
    pub const fn intersects(self, other: Events) -> bool {
        self.0 & other.0 != 0
    }
}

impl BitOr for Events {
    type Output = Events;
    fn bitor(self, rhs: Events) -> Events {
        Events(self.0 | rhs.0)
    }
}

impl BitOrAssign for Events {
    fn bitor_assign(&mut self, rhs: Events) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Events {
    type Output = Events;
    fn bitand(self, rhs: Events) -> Events {
        Events(self.0 & rhs.0)
    }
}

impl Sub for Events {
    type Output = Events;
    /// The events of `self` not in `rhs`.
    fn sub(self, rhs: Events) -> Events {
        Events(self.0 & !rhs.0)
    }
}

impl fmt::Debug for Events {
    /// `ALLOC_FAIL | COPY`, `(empty)`, unknown bits in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(empty)");
        }
        let mut sep = "";
        for (e, name) in [(Events::ALLOC_FAIL, "ALLOC_FAIL"), (Events::COPY, "COPY")] {
            if self.contains(e) {
                write!(f, "{sep}{name}")?;
                sep = " | ";
            }
        }
        let rest = *self - Events::all();
        if !rest.is_empty() {
            write!(f, "{sep}{:#x}", rest.0)?;
        }
        Ok(())
    }
}

/// The module's answer to arming or collecting events
/// ([`crate::Context::arm_events`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventsState {
    /// The events that fired since the last call (now collected: the
    /// context's fd stops reporting `EPOLLPRI` for them). A fired event is
    /// disarmed.
    pub fired: Events,
    /// The events armed now.
    pub armed: Events,
}

impl EventsState {
    /// `EVENTS`'s reply as an [`EventsState`].
    pub(crate) fn from_uapi(e: &zcrx_rs_events) -> Self {
        EventsState { fired: Events::from_bits_retain(e.fired), armed: Events::from_bits_retain(e.armed) }
    }
}

/// The counters the module keeps in the refill ring's mapping
/// ([`crate::Context::ring_stats`]), of the latest binding: each only
/// grows, and a new binding starts from zero. The first four are
/// [`crate::Stats`]'s counters of the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RingStats {
    /// Bytes handed over zero-copy.
    pub zc_bytes: u64,
    /// Bytes copied into area buffers.
    pub copy_bytes: u64,
    /// Records of copied bytes.
    pub copy_records: u64,
    /// Times a page pool asked for a buffer and found none (the ring ran
    /// dry).
    pub alloc_fail: u64,
    /// Armed events that fired.
    pub events: u64,
}

/// The error of waiting with nothing armed (it would never end).
pub(crate) fn nothing_armed() -> Error {
    Error::with_kind(Op::Events, ErrorKind::InvalidArgument, std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Waits in `poll(2)` for `POLLPRI` on `fd` (a context's) and collects
/// with `collect` until something fired, or `deadline` passed (`fired`
/// empty). `st`: the answer of the arming call, which may have collected
/// events already.
pub(crate) fn wait_blocking(
    fd: BorrowedFd<'_>,
    mut st: EventsState,
    deadline: Option<Instant>,
    mut collect: impl FnMut() -> Result<EventsState>,
) -> Result<EventsState> {
    loop {
        if !st.fired.is_empty() {
            return Ok(st);
        }
        if st.armed.is_empty() {
            return Err(nothing_armed());
        }
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(st);
                }
                // rounded up: never a busy loop of 0 ms polls
                left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32
            }
        };
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut p, 1, ms) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::new(Op::Events, e));
            }
        }
        // Ready, timed out or interrupted: whatever fired is collected.
        st = collect()?;
    }
}

/// Where the counters are in a ring mapping of `mmap_len` bytes whose
/// `offsets.stats` is `off`: `None` for a module without them (0), or an
/// offset that does not leave room for them or is not 8-byte aligned.
pub(crate) fn stats_offset(off: u32, mmap_len: u64) -> Option<usize> {
    let size = std::mem::size_of::<zcrx_rs_ring_stats>() as u64;
    let ok = off != 0 && off & 7 == 0 && u64::from(off).checked_add(size).is_some_and(|end| end <= mmap_len);
    ok.then_some(off as usize)
}

/// The counters, given a reader of the `u64` at a byte offset inside
/// `struct zcrx_rs_ring_stats`.
pub(crate) fn ring_stats_from(word: impl Fn(usize) -> u64) -> RingStats {
    use std::mem::offset_of;
    type R = zcrx_rs_ring_stats;
    RingStats {
        zc_bytes: word(offset_of!(R, zc_bytes)),
        copy_bytes: word(offset_of!(R, copy_bytes)),
        copy_records: word(offset_of!(R, copy_records)),
        alloc_fail: word(offset_of!(R, alloc_fail)),
        events: word(offset_of!(R, events)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn events_are_the_uapi_bits() {
        assert_eq!(Events::ALLOC_FAIL.bits(), ZCRX_RS_EVENT_ALLOC_FAIL);
        assert_eq!(Events::COPY.bits(), ZCRX_RS_EVENT_COPY);
        assert_eq!(Events::all(), Events::ALLOC_FAIL | Events::COPY);
        assert!(Events::empty().is_empty() && Events::default().is_empty());
        assert_eq!(Events::from_bits(3), Some(Events::all()));
        assert_eq!(Events::from_bits(0), Some(Events::empty()));
        assert_eq!(Events::from_bits(4), None, "unknown bit");
        assert_eq!(Events::from_bits_retain(4).bits(), 4);
    }

    #[test]
    fn set_operations() {
        let mut e = Events::ALLOC_FAIL;
        assert!(e.contains(Events::ALLOC_FAIL) && !e.contains(Events::all()));
        assert!(e.intersects(Events::all()) && !e.intersects(Events::COPY));
        assert!(e.contains(Events::empty()));
        e |= Events::COPY;
        assert_eq!(e, Events::all());
        assert_eq!(e - Events::COPY, Events::ALLOC_FAIL);
        assert_eq!(e & Events::COPY, Events::COPY);
    }

    #[test]
    fn debug_names_the_events() {
        assert_eq!(format!("{:?}", Events::empty()), "(empty)");
        assert_eq!(format!("{:?}", Events::COPY), "COPY");
        assert_eq!(format!("{:?}", Events::all()), "ALLOC_FAIL | COPY");
        assert_eq!(format!("{:?}", Events::from_bits_retain(0x11)), "ALLOC_FAIL | 0x10");
        assert_eq!(format!("{:?}", Events::from_bits_retain(0x8)), "0x8");
    }

    #[test]
    fn state_from_the_reply() {
        let e = zcrx_rs_events { arm: 3, fired: ZCRX_RS_EVENT_COPY, armed: ZCRX_RS_EVENT_ALLOC_FAIL, ..Default::default() };
        let st = EventsState::from_uapi(&e);
        assert_eq!(st, EventsState { fired: Events::COPY, armed: Events::ALLOC_FAIL });
    }

    #[test]
    fn stats_offset_needs_room_and_alignment() {
        // The module's layout: counters at 128, entries from 192.
        assert_eq!(stats_offset(128, 4096), Some(128));
        assert_eq!(stats_offset(0, 4096), None, "a module without counters");
        assert_eq!(stats_offset(132, 4096), None, "not 8-byte aligned");
        assert_eq!(stats_offset(4096 - 64, 4096), Some(4096 - 64));
        assert_eq!(stats_offset(4096 - 56, 4096), None, "past the end");
        assert_eq!(stats_offset(0xffff_fff8, u64::from(u32::MAX)), None, "overflows nothing");
    }

    /// A connected TCP pair: urgent data sent on `.1` makes `.0` report
    /// `POLLPRI` until it is read with `MSG_OOB` (as a fired event does
    /// until collected).
    pub(crate) fn urgent_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    /// Sends one urgent byte on `s`: an event "fires".
    pub(crate) fn fire(s: &std::net::TcpStream) {
        // SAFETY: one byte from a valid buffer.
        let n = unsafe { libc::send(s.as_raw_fd(), b"!".as_ptr().cast(), 1, libc::MSG_OOB) };
        assert_eq!(n, 1, "{}", std::io::Error::last_os_error());
    }

    /// Collects: the urgent byte read means ALLOC_FAIL fired.
    pub(crate) fn collect(s: &std::net::TcpStream) -> Result<EventsState> {
        let mut c = 0u8;
        // SAFETY: one byte into a valid buffer.
        let n = unsafe { libc::recv(s.as_raw_fd(), (&mut c as *mut u8).cast(), 1, libc::MSG_OOB | libc::MSG_DONTWAIT) };
        let fired = if n == 1 { Events::ALLOC_FAIL } else { Events::empty() };
        Ok(EventsState { fired, armed: Events::ALLOC_FAIL - fired })
    }

    #[test]
    fn blocking_wait_wakes_on_pollpri_and_times_out() {
        use std::os::fd::AsFd;
        use std::time::Duration;
        let (a, b) = urgent_pair();
        let armed = EventsState { fired: Events::empty(), armed: Events::ALLOC_FAIL };
        // nothing fires: the deadline ends the wait, nothing fired
        let t0 = Instant::now();
        let st = wait_blocking(a.as_fd(), armed, Some(t0 + Duration::from_millis(50)), || collect(&a)).unwrap();
        assert!(st.fired.is_empty() && t0.elapsed() >= Duration::from_millis(50));
        // an event fired before the wait: found at once
        fire(&b);
        std::thread::sleep(Duration::from_millis(20));
        let st = wait_blocking(a.as_fd(), armed, None, || collect(&a)).unwrap();
        assert_eq!(st.fired, Events::ALLOC_FAIL);
        // one fires while it waits
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            fire(&b);
            b
        });
        let st = wait_blocking(a.as_fd(), armed, Some(Instant::now() + Duration::from_secs(30)), || collect(&a)).unwrap();
        assert_eq!(st.fired, Events::ALLOC_FAIL);
        let _b = t.join().unwrap();
        // the arming call had collected one: no wait
        let done = EventsState { fired: Events::COPY, armed: Events::empty() };
        assert_eq!(wait_blocking(a.as_fd(), done, None, || panic!("waited")).unwrap(), done);
        // nothing armed: an error, not a wait for ever
        let e = wait_blocking(a.as_fd(), EventsState::default(), None, || panic!("waited")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn ring_stats_read_the_uapi_words() {
        // Word i holds 10 * (i + 1): the fields come from their offsets.
        let s = ring_stats_from(|off| {
            assert_eq!(off % 8, 0);
            (off as u64 / 8 + 1) * 10
        });
        assert_eq!(s, RingStats { zc_bytes: 10, copy_bytes: 20, copy_records: 30, alloc_fail: 40, events: 50 });
    }
}
