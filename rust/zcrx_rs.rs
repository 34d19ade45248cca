// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx_rs: a page-pool memory provider for zero-copy TCP receive into
//! pinned user pages, on a plain TCP socket.
//!
//! The crate root holds the module declaration and the module state: the
//! `/dev/zcrx` misc device, whose open files are [`context::Context`]s.
//!
//! Layout: [`net`] and [`mm`] are the abstraction layer, the only code that
//! touches `kernel::bindings`; the rest is the provider logic in safe Rust:
//! [`area`] (pinned user memory), [`refill`] (the
//! ring), [`zcrx`] (the provider callbacks and bindings), [`recv`] (the
//! receive walk), [`context`] (the device file), [`uapi`], [`stats`].

use kernel::{
    miscdevice::{
        MiscDeviceOptions,
        MiscDeviceRegistration, //
    },
    prelude::*,
};

// The provider logic has no `unsafe` (the compiler checks it): only the
// abstraction layer, `mm` and `net`, has.
#[deny(unsafe_code)]
mod area;
#[deny(unsafe_code)]
mod context;
#[deny(unsafe_code)]
mod events;
mod mm;
mod net;
#[deny(unsafe_code)]
mod recv;
#[deny(unsafe_code)]
mod refill;
#[deny(unsafe_code)]
mod stats;
#[deny(unsafe_code)]
mod uapi;
#[deny(unsafe_code)]
mod zcrx;

use context::Context;

/// Version of this module, printed on load.
const VERSION: &str = "0.2.0";

module! {
    type: ZcrxModule,
    name: "zcrx_rs",
    authors: ["The zcrx-rs developers"],
    description: "Zero-copy TCP receive into pinned user pages (page-pool memory provider)",
    license: "GPL",
    imports_ns: ["NETDEV_INTERNAL", "DMA_BUF"],
}

// The file operations of `/dev/zcrx`, owned by this module: an open context
// keeps the module loaded. On 7.2 the series' `misc_device_fops!` declares
// them; from 7.3 on `#[vtable]` gives `MiscDevice` an owner module and the
// registration builds them.
#[cfg(zcrx_misc_fops)]
kernel::misc_device_fops!(FOPS, Context);

/// Registers `/dev/zcrx`.
#[cfg(zcrx_misc_fops)]
fn register(options: MiscDeviceOptions) -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(options, &FOPS)
}

/// Registers `/dev/zcrx`.
#[cfg(not(zcrx_misc_fops))]
fn register(options: MiscDeviceOptions) -> impl PinInit<MiscDeviceRegistration<Context>, Error> {
    MiscDeviceRegistration::register(options)
}

/// This module (what C calls `THIS_MODULE`).
#[cfg(zcrx_misc_fops)]
pub(crate) fn this_module() -> &'static ThisModule {
    &THIS_MODULE
}

/// This module (what C calls `THIS_MODULE`).
#[cfg(not(zcrx_misc_fops))]
pub(crate) fn this_module() -> &'static ThisModule {
    kernel::module::this_module::<LocalModule>()
}

/// Module state: the registration of `/dev/zcrx`.
#[pin_data(PinnedDrop)]
struct ZcrxModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<Context>,
}

impl kernel::InPlaceModule for ZcrxModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!("zcrx_rs {} loaded\n", VERSION);
        let options = MiscDeviceOptions { name: c"zcrx" };
        try_pin_init!(Self {
            _miscdev <- register(options),
        })
    }
}

#[pinned_drop]
impl PinnedDrop for ZcrxModule {
    fn drop(self: Pin<&mut Self>) {
        pr_info!("zcrx_rs {} unloaded\n", VERSION);
    }
}
