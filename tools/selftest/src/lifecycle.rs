// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Module life cycle: load, the device node, open/close, unload rules.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::kmod;
use zcrx::ktap::Outcome::{self, *};
use zcrx::sys::{errno, errno_name, ioctl, open};

use crate::{Env, TestFn};

const NAME: &str = "zcrx_rs";
const DEV: &str = "/dev/zcrx";

pub const TESTS: &[(&str, TestFn)] = &[
    ("module_loads", module_loads),
    ("device_node_appears", device_node_appears),
    ("open_close", open_close),
    ("unknown_ioctl_is_enotty", unknown_ioctl_is_enotty),
    ("rmmod_refused_while_open", rmmod_refused_while_open),
    ("rmmod_after_close", rmmod_after_close),
    ("reload_and_unload", reload_and_unload),
    ("bnxt_loads_and_unloads", bnxt_loads_and_unloads),
];

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Fail(format!($($fmt)+));
        }
    };
}

fn open_dev() -> Result<OwnedFd, Outcome> {
    open(Path::new(DEV), libc::O_RDWR).map_err(|e| Fail(format!("open({DEV}): {e} ({})", errno_name(errno(&e)))))
}

fn module_loads(env: &Env) -> Outcome {
    if kmod::is_loaded(NAME) {
        return Fail(format!("{NAME} is already loaded before the test started"));
    }
    if let Err(e) = kmod::load(&env.module, "") {
        return Fail(format!("finit_module({}): {e}", env.module.display()));
    }
    let state = fs::read_to_string(format!("/sys/module/{NAME}/initstate")).unwrap_or_default();
    check!(state.trim() == "live", "initstate is {:?}, expected \"live\"", state.trim());
    Pass
}

/// Waits up to `t` for `p` to exist (devtmpfs creates nodes asynchronously).
fn wait_for(p: &Path, t: Duration) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < t {
        if p.exists() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    p.exists()
}

fn device_node_appears(_: &Env) -> Outcome {
    check!(wait_for(Path::new(DEV), Duration::from_secs(3)), "{DEV} did not appear within 3 s");
    let md = match fs::metadata(DEV) {
        Ok(m) => m,
        Err(e) => return Fail(format!("stat({DEV}): {e}")),
    };
    check!(md.file_type().is_char_device(), "{DEV} is not a character device");
    let sysfs = fs::read_to_string("/sys/class/misc/zcrx/dev").unwrap_or_default();
    let rdev = md.rdev();
    let want = format!("{}:{}", libc::major(rdev), libc::minor(rdev));
    check!(sysfs.trim() == want, "/sys/class/misc/zcrx/dev says {:?}, the node is {want}", sysfs.trim());
    Pass
}

fn open_close(_: &Env) -> Outcome {
    let before = kmod::refcnt(NAME).unwrap_or(-1);
    let fd = match open_dev() {
        Ok(fd) => fd,
        Err(o) => return o,
    };
    let during = kmod::refcnt(NAME).unwrap_or(-1);
    drop(fd);
    let after = kmod::refcnt(NAME).unwrap_or(-1);
    check!(during == before + 1, "refcnt while open is {during}, expected {} (an open file must hold the module)", before + 1);
    check!(after == before, "refcnt after close is {after}, expected {before}");
    Pass
}

fn unknown_ioctl_is_enotty(_: &Env) -> Outcome {
    let fd = match open_dev() {
        Ok(fd) => fd,
        Err(o) => return o,
    };
    match ioctl(&fd, 0x4008_7aff, 0) {
        Ok(r) => Fail(format!("unknown ioctl returned {r}, expected ENOTTY")),
        Err(e) if errno(&e) == libc::ENOTTY => Pass,
        Err(e) => Fail(format!("unknown ioctl: {e}, expected ENOTTY")),
    }
}

fn rmmod_refused_while_open(_: &Env) -> Outcome {
    let fd = match open_dev() {
        Ok(fd) => fd,
        Err(o) => return o,
    };
    // delete_module(2) reports a module in use as EWOULDBLOCK (kernel/module/main.c:
    // try_stop_module); kmod's rmmod prints "is in use" for it.
    let r = kmod::unload(NAME);
    let still = kmod::is_loaded(NAME);
    drop(fd);
    match r {
        Ok(()) => Fail("rmmod succeeded while /dev/zcrx was open".into()),
        Err(e) if errno(&e) == libc::EWOULDBLOCK => {
            check!(still, "module vanished although rmmod failed");
            Pass
        }
        Err(e) => Fail(format!("rmmod while open: {e} ({}), expected EWOULDBLOCK", errno_name(errno(&e)))),
    }
}

fn rmmod_after_close(_: &Env) -> Outcome {
    if let Err(e) = kmod::unload(NAME) {
        return Fail(format!("rmmod {NAME}: {e} ({})", errno_name(errno(&e))));
    }
    check!(!kmod::is_loaded(NAME), "/sys/module/{NAME} still there after rmmod");
    let t0 = Instant::now();
    while Path::new(DEV).exists() && t0.elapsed() < Duration::from_secs(3) {
        sleep(Duration::from_millis(20));
    }
    check!(!Path::new(DEV).exists(), "{DEV} still exists 3 s after rmmod");
    Pass
}

fn reload_and_unload(env: &Env) -> Outcome {
    for i in 0..3 {
        if let Err(e) = kmod::load(&env.module, "") {
            return Fail(format!("load #{i}: {e}"));
        }
        if !wait_for(Path::new(DEV), Duration::from_secs(3)) {
            return Fail(format!("load #{i}: {DEV} did not appear"));
        }
        match open_dev() {
            Ok(fd) => drop(fd),
            Err(o) => return o,
        }
        if let Err(e) = kmod::unload(NAME) {
            return Fail(format!("unload #{i}: {e}"));
        }
    }
    Pass
}

/// bnxt_en, the other header-split NIC the project names, builds with the
/// series applied (fast kernel: CONFIG_BNXT=m) and loads and unloads: its PCI
/// driver registers, no device binds (the VM has none).
fn bnxt_loads_and_unloads(_env: &Env) -> Outcome {
    const BNXT: &str = "bnxt_en";
    let Ok(build) = std::env::var("ZCRX_BUILD") else {
        return Fail("ZCRX_BUILD not set (run in the VM)".into());
    };
    let ko = Path::new(&build).join("drivers/net/ethernet/broadcom/bnxt/bnxt_en.ko");
    if !ko.exists() {
        let why = "not built in this kernel flavour (the fast one has CONFIG_BNXT=m)";
        return Skip(format!("{}: {why}", ko.display()));
    }
    check!(!kmod::is_loaded(BNXT), "{BNXT} is loaded before the test started");
    if let Err(e) = kmod::load(&ko, "") {
        return Fail(format!("finit_module({}): {e}", ko.display()));
    }
    let state = fs::read_to_string(format!("/sys/module/{BNXT}/initstate")).unwrap_or_default();
    let driver = Path::new("/sys/bus/pci/drivers").join(BNXT);
    let registered = driver.is_dir();
    let bound = fs::read_dir(&driver).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().contains(':'))).unwrap_or(false);
    let unloaded = kmod::unload(BNXT);
    check!(state.trim() == "live", "{BNXT} initstate is {:?}, expected \"live\"", state.trim());
    check!(registered, "{} missing: the PCI driver did not register", driver.display());
    check!(!bound, "a PCI device is bound to {BNXT} in a VM that has none");
    if let Err(e) = unloaded {
        return Fail(format!("delete_module({BNXT}): {e}"));
    }
    check!(!kmod::is_loaded(BNXT), "{BNXT} still loaded after delete_module()");
    Pass
}
