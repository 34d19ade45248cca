// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The command-line conventions of zcrx-upload (`cliopt::check_conventions`):
//! `--help` on stdout with exit status 0, `--version`, and usage errors (an
//! unknown option, a value that does not parse, a missing one) on stderr
//! with exit status 2 and a message that names the option.

#[test]
fn command_line_conventions() {
    cliopt::check_conventions(
        env!("CARGO_BIN_EXE_zcrx-upload"),
        "zcrx-upload",
        env!("CARGO_PKG_VERSION"),
        &[
            (&["--frobnicate"][..], "--frobnicate"),
            (&["--no-bind", "--port", "70000"], "--port"),
            (&["--no-bind", "--listen", "nowhere"], "--listen"),
            (&["--no-bind", "--max-size", "lots"], "--max-size"),
            (&["--no-bind", "--header-timeout", "0"], "--header-timeout"),
            (&["--no-bind", "--dev", "eth0"], "--no-bind"),
            (&["--dev", "eth0"], "--queue"),
        ],
    );
}
