// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The command-line conventions of zcrx-bench: `--help` on stdout with exit
//! status 0, `--version`, and a usage error (an unknown option, a value
//! that does not parse, a missing one) on stderr with exit status 2 and a
//! message that names the option. No device is needed: each run ends
//! before it opens anything.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zcrx-bench")).args(args).output().expect("run zcrx-bench")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_goes_to_stdout() {
    for flag in ["-h", "--help"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        assert!(text(&o.stdout).starts_with("usage: zcrx-bench"), "{flag}: {}", text(&o.stdout));
        assert!(o.stderr.is_empty(), "{flag}: {}", text(&o.stderr));
    }
}

#[test]
fn version() {
    for flag in ["-V", "--version"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        assert_eq!(text(&o.stdout), format!("zcrx-bench {}\n", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn usage_errors_name_the_option() {
    for (args, want) in [
        (&["--frobnicate"][..], "--frobnicate"),
        (&["-s", "--mode", "fast"], "--mode"),
        (&["-s", "--flows", "0"], "--flows"),
        (&["-s", "--queues", "2"], "--queues"),
        (&["-c", "host", "-n", "ten"], "-n"),
        (&["--port", "1"], "-s"),
    ] {
        let o = run(args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert!(err.starts_with("zcrx-bench: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} does not say {want:?}");
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
}
