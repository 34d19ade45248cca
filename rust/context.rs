// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! One open file of `/dev/zcrx`: a zero-copy receive context.
//!
//! The file holds a reference to the module for as long as it is open (the
//! misc device's file operations name the module as their owner), so the
//! last close, never `rmmod`, ends a context.

use kernel::{
    fs::File,
    miscdevice::{
        MiscDevice,
        MiscDeviceRegistration, //
    },
    prelude::*,
};

/// Per-open state. Empty for now: areas and bindings hang off it later.
pub(crate) struct Context;

#[vtable]
impl MiscDevice for Context {
    type Ptr = KBox<Self>;

    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        KBox::new(Context, GFP_KERNEL).map_err(Into::into)
    }

    fn ioctl(_me: &Context, _file: &File, _cmd: u32, _arg: usize) -> Result<isize> {
        Err(ENOTTY)
    }
}
