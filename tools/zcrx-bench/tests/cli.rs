// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The command-line conventions of zcrx-bench (`cliopt::check_conventions`):
//! `--help` on stdout with exit status 0, `--version`, and usage errors (an
//! unknown option, a value that does not parse, a missing one) on stderr
//! with exit status 2 and a message that names the option.

#[test]
fn command_line_conventions() {
    cliopt::check_conventions(
        env!("CARGO_BIN_EXE_zcrx-bench"),
        "zcrx-bench",
        env!("CARGO_PKG_VERSION"),
        &[
            (&["--frobnicate"][..], "--frobnicate"),
            (&["-s", "--mode", "fast"], "--mode"),
            (&["-s", "--flows", "0"], "--flows"),
            (&["-s", "--queues", "2"], "--queues"),
            (&["-c", "host", "-n", "ten"], "-n"),
            (&["--port", "1"], "-s"),
        ],
    );
}
