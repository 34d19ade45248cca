// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Safe abstractions over the kernel's networking internals that a page-pool
//! memory provider needs. Together with [`crate::mm`] this is the only part
//! of the module that touches `kernel::bindings`; the provider logic uses
//! these types.

mod freelist;
pub(crate) mod netdev;
pub(crate) mod netmem;
pub(crate) mod page_pool;
pub(crate) mod provider;
pub(crate) mod skb;
pub(crate) mod sock;
mod urefs;

/// Whether the caller has `CAP_NET_ADMIN` (in the initial user namespace).
pub(crate) fn capable_net_admin() -> bool {
    // SAFETY: `capable` only inspects the current task's credentials.
    unsafe { kernel::bindings::capable(kernel::bindings::CAP_NET_ADMIN as i32) }
}
