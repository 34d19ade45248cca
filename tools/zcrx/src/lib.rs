// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Userspace side of zcrx-rs: the uAPI of `/dev/zcrx` and a small safe
//! wrapper for it ([`Zcrx`]), a verifiable stream pattern, KTAP reporting
//! and kernel module handling for the tests.

pub mod dev;
pub mod ethtool;
pub mod kmod;
pub mod ktap;
pub mod pattern;
pub mod sys;
pub mod uapi;

pub use dev::{Rec, Received, Zcrx};
pub use pattern::Pattern;
