// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Userspace side of zcrx-rs: KTAP reporting, kernel module handling and
//! (later) the uAPI of `/dev/zcrx`.

pub mod ktap;
pub mod kmod;
pub mod sys;
