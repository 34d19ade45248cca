// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! KTAP output in the style of tools/testing/selftests/kselftest.h: a version
//! line, a plan, one `ok`/`not ok` line per test as it finishes, `# `
//! diagnostics, and a `# Totals:` line. Exit codes follow kselftest
//! (0 pass, 1 fail, 4 skip).

use std::fmt;
use std::io::Write;

/// How one test ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The test passed.
    Pass,
    /// The test failed; the string says why.
    Fail(String),
    /// The test could not run here; the string says why.
    Skip(String),
}

/// kselftest exit codes.
pub const KSFT_PASS: i32 = 0;
/// Some test failed.
pub const KSFT_FAIL: i32 = 1;
/// Everything was skipped.
pub const KSFT_SKIP: i32 = 4;

/// Counts of a finished run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Passed tests.
    pub pass: usize,
    /// Failed tests.
    pub fail: usize,
    /// Skipped tests.
    pub skip: usize,
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "# Totals: pass:{} fail:{} xfail:0 xpass:0 skip:{} error:0", self.pass, self.fail, self.skip)
    }
}

/// A KTAP writer over any `Write` (stdout in the tools, a buffer in tests).
pub struct Ktap<W: Write> {
    out: W,
    plan: usize,
    n: usize,
    totals: Totals,
}

impl<W: Write> Ktap<W> {
    /// Starts a KTAP document with a plan of `plan` tests.
    pub fn new(mut out: W, plan: usize) -> Self {
        let _ = writeln!(out, "TAP version 13");
        let _ = writeln!(out, "1..{plan}");
        let _ = out.flush();
        Ktap { out, plan, n: 0, totals: Totals::default() }
    }

    /// Prints a diagnostic line (`# ...`), one per input line.
    pub fn diag(&mut self, msg: &str) {
        for l in msg.lines() {
            let _ = writeln!(self.out, "# {l}");
        }
        let _ = self.out.flush();
    }

    /// The number the next result will have.
    pub fn next_number(&self) -> usize {
        self.n + 1
    }

    /// Records the result of the next test.
    pub fn result(&mut self, name: &str, outcome: &Outcome) {
        self.n += 1;
        let n = self.n;
        let name = sanitize(name);
        let _ = match outcome {
            Outcome::Pass => {
                self.totals.pass += 1;
                writeln!(self.out, "ok {n} {name}")
            }
            Outcome::Fail(why) => {
                self.totals.fail += 1;
                for l in why.lines() {
                    let _ = writeln!(self.out, "# {name}: {l}");
                }
                writeln!(self.out, "not ok {n} {name}")
            }
            Outcome::Skip(why) => {
                self.totals.skip += 1;
                writeln!(self.out, "ok {n} {name} # SKIP {}", why.replace('\n', " "))
            }
        };
        let _ = self.out.flush();
    }

    /// Prints the totals and returns the kselftest exit code. A run whose
    /// count does not match its plan fails.
    pub fn finish(mut self) -> (Totals, i32) {
        if self.n != self.plan {
            let _ = writeln!(self.out, "# planned {} tests but ran {}", self.plan, self.n);
            self.totals.fail += self.plan.saturating_sub(self.n);
        }
        let t = self.totals;
        let _ = writeln!(self.out, "{t}");
        let _ = self.out.flush();
        let code = if t.fail > 0 {
            KSFT_FAIL
        } else if t.pass == 0 && t.skip > 0 {
            KSFT_SKIP
        } else {
            KSFT_PASS
        };
        (t, code)
    }
}

/// KTAP test names are one line and must not contain `#`.
fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c == '#' || c == '\n' { '_' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(outcomes: &[Outcome], plan: usize) -> (String, Totals, i32) {
        let mut buf = Vec::new();
        let (t, code) = {
            let mut k = Ktap::new(&mut buf, plan);
            for (i, o) in outcomes.iter().enumerate() {
                k.result(&format!("t{i}"), o);
            }
            k.finish()
        };
        (String::from_utf8(buf).unwrap(), t, code)
    }

    #[test]
    fn all_pass() {
        let (s, t, code) = run(&[Outcome::Pass, Outcome::Pass], 2);
        assert_eq!(s, "TAP version 13\n1..2\nok 1 t0\nok 2 t1\n# Totals: pass:2 fail:0 xfail:0 xpass:0 skip:0 error:0\n");
        assert_eq!(t, Totals { pass: 2, fail: 0, skip: 0 });
        assert_eq!(code, KSFT_PASS);
    }

    #[test]
    fn failure_has_diagnostics_and_fails_run() {
        let (s, t, code) = run(&[Outcome::Fail("bad\nworse".into()), Outcome::Pass], 2);
        assert!(s.contains("# t0: bad\n# t0: worse\nnot ok 1 t0\n"));
        assert_eq!(t.fail, 1);
        assert_eq!(code, KSFT_FAIL);
    }

    #[test]
    fn skip_only_is_skip() {
        let (s, _, code) = run(&[Outcome::Skip("no device".into())], 1);
        assert!(s.contains("ok 1 t0 # SKIP no device\n"));
        assert_eq!(code, KSFT_SKIP);
    }

    #[test]
    fn short_run_fails() {
        let (s, t, code) = run(&[Outcome::Pass], 3);
        assert!(s.contains("# planned 3 tests but ran 1"));
        assert_eq!(t.fail, 2);
        assert_eq!(code, KSFT_FAIL);
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize("a#b\nc"), "a_b_c");
    }
}
