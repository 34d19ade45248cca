// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The command-line conventions of zcrx-nc (`cliopt::check_conventions`):
//! `--help` on stdout with exit status 0, `--version`, and usage errors (an
//! unknown option, a value that does not parse, a missing one) on stderr
//! with exit status 2 and a message that names the option.

#[test]
fn command_line_conventions() {
    cliopt::check_conventions(
        env!("CARGO_BIN_EXE_zcrx-nc"),
        "zcrx-nc",
        env!("CARGO_PKG_VERSION"),
        &[
            (&["--frobnicate"][..], "--frobnicate"),
            (&["--dev", "eth0", "--port", "x"], "--port"),
            (&["--dev", "eth0", "--port", "1", "--buf-size", "3q"], "--buf-size"),
            (&["--dev", "eth0", "--queues", "1,x", "--port", "1"], "--queues"),
            (&["--dev", "eth0", "--port"], "--port"),
            (&["--port", "1"], "--dev"),
            (&["--no-bind", "--dev", "eth0", "--port", "1"], "--no-bind"),
            (&["--no-bind"], "--port"),
        ],
    );
}
