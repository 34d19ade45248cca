// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Userspace side of zcrx-rs.
//!
//! - [`Context`], [`Batch`], [`Buf`]: the safe API for programs. Received
//!   bytes are owned values that go back to the refill ring when dropped;
//!   errors are typed ([`Error`], [`ErrorKind`]). With the `tokio` feature,
//!   [`tokio::ZcrxStream`] receives on a tokio `TcpStream` without blocking
//!   a runtime thread.
//! - [`Events`]: the refill ring ran dry, data was copied — armed with
//!   [`Context::arm_events`], awaited with [`Context::wait_events`], `epoll`
//!   on the context's fd, or `tokio::EventWatcher`; [`Context::ring_stats`]
//!   reads the counters with no system call ([`events`]).
//! - [`uapi`]: the uAPI itself, generated from `<linux/zcrx_rs.h>`.
//!
//! With the `testing` feature (for zcrx-rs's own tests and tools, not part
//! of the stable API): `Zcrx`, the thin wrapper of the uAPI the tests use
//! (raw records, explicit refill), a verifiable stream pattern, KTAP
//! reporting, kernel module, ethtool and netdev netlink helpers.

#![warn(missing_docs)]

pub mod ctx;
#[cfg(feature = "testing")]
pub mod dev;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unreachable_pub)]
mod dev;
pub mod error;
#[cfg(feature = "testing")]
pub mod ethtool;
pub mod events;
#[cfg(feature = "testing")]
pub mod kmod;
#[cfg(feature = "testing")]
pub mod ktap;
#[cfg(feature = "testing")]
pub mod netdev;
#[cfg(feature = "testing")]
pub mod pattern;
#[cfg(feature = "testing")]
pub mod psp;
#[cfg(feature = "testing")]
pub mod sys;
#[cfg(not(feature = "testing"))]
#[allow(dead_code, unreachable_pub)]
mod sys;
pub mod uapi;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use ctx::{Batch, Buf, Context, Info, Record, Stats};
#[cfg(feature = "testing")]
pub use dev::{Rec, Received, Zcrx};
pub use error::{Error, ErrorKind, Op};
pub use events::{Events, EventsState, RingStats};
#[cfg(feature = "testing")]
pub use pattern::Pattern;
