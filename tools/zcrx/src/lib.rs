// SPDX-License-Identifier: GPL-2.0
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
//! - [`Zcrx`]: the thin wrapper of the uAPI the tests use (raw records,
//!   explicit refill), and the uAPI itself ([`uapi`]).
//! - For the tests and tools: a verifiable stream pattern, KTAP reporting,
//!   kernel module handling.

#![warn(missing_docs)]

pub mod ctx;
pub mod dev;
pub mod error;
pub mod ethtool;
pub mod events;
pub mod kmod;
pub mod ktap;
pub mod netdev;
pub mod pattern;
pub mod sys;
pub mod uapi;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use ctx::{Batch, Buf, Context, Info, Record, Stats};
pub use dev::{Rec, Received, Zcrx};
pub use error::{Error, ErrorKind, Op};
pub use events::{Events, EventsState, RingStats};
pub use pattern::Pattern;
