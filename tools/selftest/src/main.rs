// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-rs selftest: runs inside the test VM as root, prints KTAP.
//!
//! usage: zcrx-selftest --module PATH/zcrx_rs.ko [--list] [TEST...]

mod lifecycle;

use std::path::PathBuf;
use std::process::exit;

use zcrx::ktap::{Ktap, Outcome};

/// What every test gets: where things are.
pub struct Env {
    /// Path of zcrx_rs.ko.
    pub module: PathBuf,
}

/// A test: a name and a function.
pub type TestFn = fn(&Env) -> Outcome;

/// All tests, in the order they run. Later tests may rely on the state that
/// earlier ones leave (a loaded module), and say so when it is missing.
fn all_tests() -> Vec<(&'static str, TestFn)> {
    let mut v = Vec::new();
    v.extend_from_slice(lifecycle::TESTS);
    v
}

fn usage() -> ! {
    eprintln!("usage: zcrx-selftest --module PATH/zcrx_rs.ko [--list] [TEST...]");
    exit(2);
}

fn main() {
    let mut module = None;
    let mut only = Vec::new();
    let mut list = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--module" => module = Some(PathBuf::from(args.next().unwrap_or_else(|| usage()))),
            "--list" => list = true,
            "-h" | "--help" => usage(),
            s if s.starts_with('-') => usage(),
            s => only.push(s.to_string()),
        }
    }
    let tests: Vec<_> = all_tests()
        .into_iter()
        .filter(|(n, _)| only.is_empty() || only.iter().any(|o| o == n))
        .collect();
    if list {
        for (n, _) in &tests {
            println!("{n}");
        }
        return;
    }
    let Some(module) = module else { usage() };
    let env = Env { module };

    let mut k = Ktap::new(std::io::stdout(), tests.len());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        k.diag("not root: module and device tests need CAP_SYS_MODULE");
    }
    for (name, f) in tests {
        let o = f(&env);
        k.result(name, &o);
    }
    let (_, code) = k.finish();
    exit(code);
}
