// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The command-line conventions every zcrx-rs program keeps, on top of
//! [`lexopt`]: `-h`/`--help` prints the usage on stdout and exits 0,
//! `-V`/`--version` prints `NAME VERSION`, and a usage error goes to
//! stderr as `NAME: what is wrong` plus a pointer to `--help`, with exit
//! status 2. An error about an option's value names the option.
//!
//! ```no_run
//! fn parse_args(p: &mut lexopt::Parser) -> Result<u16, lexopt::Error> {
//!     use lexopt::prelude::*;
//!     let mut port = 0;
//!     // the option being handled, for errors about its value
//!     let mut at = String::new();
//!     let r = (|| {
//!         while let Some(arg) = p.next()? {
//!             at = cliopt::name(&arg);
//!             match arg {
//!                 Short('p') | Long("port") => port = p.value()?.parse()?,
//!                 Short('h') | Long("help") => cliopt::help("usage: prog --port P\n"),
//!                 _ => return Err(arg.unexpected()),
//!             }
//!             at.clear();
//!         }
//!         Ok(())
//!     })();
//!     cliopt::named(&at, r)?;
//!     Ok(port)
//! }
//! let port = cliopt::parse("prog", parse_args);
//! ```

use std::process::exit;

/// Parses the process's command line with `f`; on an error, prints it as
/// a usage error of program `bin` and exits with status 2.
pub fn parse<T>(bin: &str, f: impl FnOnce(&mut lexopt::Parser) -> Result<T, lexopt::Error>) -> T {
    let mut p = lexopt::Parser::from_env();
    f(&mut p).unwrap_or_else(|e| usage_error(bin, e))
}

/// Prints `bin: e` and where to look on stderr, and exits with status 2.
pub fn usage_error(bin: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("{bin}: {e}\nTry '{bin} --help'.");
    exit(2);
}

/// Prints `usage` on stdout and exits with status 0 (`-h`, `--help`).
pub fn help(usage: &str) -> ! {
    print!("{usage}");
    if !usage.ends_with('\n') {
        println!();
    }
    exit(0);
}

/// Prints `bin version` on stdout and exits with status 0 (`-V`,
/// `--version`).
pub fn version(bin: &str, version: &str) -> ! {
    println!("{bin} {version}");
    exit(0);
}

/// How an argument is spelt on the command line (`--port`, `-n`), to name
/// it in an error; empty for a positional value.
pub fn name(arg: &lexopt::Arg<'_>) -> String {
    match arg {
        lexopt::Arg::Long(l) => format!("--{l}"),
        lexopt::Arg::Short(c) => format!("-{c}"),
        lexopt::Arg::Value(_) => String::new(),
    }
}

/// `r`, with an error that does not name option `name` prefixed with it
/// (lexopt names the option in "missing argument" and "invalid option"
/// errors, not when its value does not parse).
pub fn named<T>(name: &str, r: Result<T, lexopt::Error>) -> Result<T, lexopt::Error> {
    r.map_err(|e| {
        let msg = e.to_string();
        if name.is_empty() || msg.contains(&format!("'{name}'")) {
            e
        } else {
            format!("{name}: {msg}").into()
        }
    })
}

/// For a program's own tests: runs the program at `exe` (its
/// `CARGO_BIN_EXE_*`) and checks the conventions above: `-h`/`--help` on
/// stdout starting with `usage: bin`, status 0, nothing on stderr;
/// `-V`/`--version` printing `bin version`; and for each of `errors` (the
/// arguments, and what the message must name) a usage error: status 2,
/// nothing on stdout, `bin: ` and a pointer to `--help` on stderr. No
/// device is needed: each run ends before the program opens anything.
/// Panics with the first difference.
pub fn check_conventions(exe: &str, bin: &str, version: &str, errors: &[(&[&str], &str)]) {
    use std::process::Command;
    let run = |args: &[&str]| Command::new(exe).args(args).output().unwrap_or_else(|e| panic!("run {exe}: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for flag in ["-h", "--help"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        assert!(text(&o.stdout).starts_with(&format!("usage: {bin}")), "{flag}: {}", text(&o.stdout));
        assert!(o.stderr.is_empty(), "{flag}: {}", text(&o.stderr));
    }
    for flag in ["-V", "--version"] {
        let o = run(&[flag]);
        assert_eq!(o.status.code(), Some(0), "{flag}");
        assert_eq!(text(&o.stdout), format!("{bin} {version}\n"));
    }
    for (args, want) in errors {
        let o = run(args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert!(err.starts_with(&format!("{bin}: ")), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err:?} does not say {want:?}");
        assert!(err.contains("--help"), "{args:?}: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(args: &[&str]) -> Result<u16, String> {
        use lexopt::prelude::*;
        let mut p = lexopt::Parser::from_args(args.iter().copied());
        let mut port = 0u16;
        let mut at = String::new();
        let r = (|| {
            while let Some(arg) = p.next()? {
                at = name(&arg);
                match arg {
                    Long("port") | Short('p') => port = p.value()?.parse()?,
                    _ => return Err(arg.unexpected()),
                }
                at.clear();
            }
            Ok(())
        })();
        named(&at, r).map_err(|e| e.to_string())?;
        Ok(port)
    }

    #[test]
    fn errors_name_the_option() {
        assert_eq!(port(&["--port", "80"]), Ok(80));
        assert_eq!(port(&["-p80"]), Ok(80));
        assert_eq!(port(&["--port=81"]), Ok(81));
        let e = port(&["--port", "x"]).unwrap_err();
        assert!(e.starts_with("--port: "), "{e}");
        let e = port(&["-p", "70000"]).unwrap_err();
        assert!(e.starts_with("-p: "), "{e}");
        // lexopt's own errors already name it: not twice
        let e = port(&["--port"]).unwrap_err();
        assert!(e.contains("'--port'") && !e.starts_with("--port:"), "{e}");
        let e = port(&["--frob"]).unwrap_err();
        assert!(e.contains("'--frob'"), "{e}");
    }
}
