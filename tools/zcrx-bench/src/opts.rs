// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-bench's command line: the modes and the options.

use std::process::exit;

use crate::{die, report};

/// Most connections one run may have.
pub(crate) const MAX_FLOWS: usize = 256;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Copy,
    Trunc,
    IouringZcrx,
    /// zcrx-rs, records of consecutive buffers merged when the module can
    /// (`ZCRX_RS_RECV_MERGE`, given back as ranges).
    ZcrxRs,
    /// zcrx-rs with one record per buffer (no `ZCRX_RS_RECV_MERGE`).
    ZcrxRsNoMerge,
    /// zcrx-rs bound and unbound again before the flow starts: RECV copies
    /// every byte into the area (the copy fallback, with its per-call
    /// budget and the refill ring drained by RECV itself).
    ZcrxRsCopy,
}

impl Mode {
    pub(crate) fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "copy" => Mode::Copy,
            "trunc" => Mode::Trunc,
            "iouring-zcrx" => Mode::IouringZcrx,
            "zcrx-rs" => Mode::ZcrxRs,
            "zcrx-rs-nomerge" => Mode::ZcrxRsNoMerge,
            "zcrx-rs-copy" => Mode::ZcrxRsCopy,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Copy => "copy",
            Mode::Trunc => "trunc",
            Mode::IouringZcrx => "iouring-zcrx",
            Mode::ZcrxRs => "zcrx-rs",
            Mode::ZcrxRsNoMerge => "zcrx-rs-nomerge",
            Mode::ZcrxRsCopy => "zcrx-rs-copy",
        }
    }

    /// Modes with an area, and so a buffer size.
    pub(crate) fn has_area(self) -> bool {
        matches!(self, Mode::IouringZcrx | Mode::ZcrxRs | Mode::ZcrxRsNoMerge | Mode::ZcrxRsCopy)
    }
}

pub(crate) struct Opts {
    pub(crate) server: bool,
    pub(crate) host: Option<String>,
    pub(crate) port: u16,
    pub(crate) mode: Mode,
    pub(crate) dev: Option<String>,
    pub(crate) queue: u32,
    /// Rx queues bound from `queue` on (the zero-copy modes).
    pub(crate) queues: u32,
    pub(crate) cpu: Option<usize>,
    pub(crate) v6: bool,
    pub(crate) json: bool,
    /// Measure the receiver's CPU time inside its receive system calls.
    pub(crate) split: bool,
    /// Mark the measured window for an instruction-counting emulator.
    pub(crate) mark: bool,
    pub(crate) bytes: Option<u64>,
    pub(crate) secs: Option<f64>,
    pub(crate) rcvlowat: u32,
    /// Bytes per buffer of the area; 0: the page size.
    pub(crate) buf_size: usize,
    pub(crate) area_mib: usize,
    /// Concurrent connections (sender and receiver).
    pub(crate) flows: usize,
    /// The sender's bytes per write().
    pub(crate) write_size: usize,
    /// Sender: flow i connects from this source port + i (0: any).
    pub(crate) src_port: u16,
}

const USAGE: &str = "\
usage: zcrx-bench -s --mode copy|trunc|iouring-zcrx|zcrx-rs|zcrx-rs-copy --port P [--dev IF --queue N]
                  [--buf-size N] [--area MIB] [--cpu C] [-4|-6] [--rcvlowat BYTES] [--json]
       zcrx-bench -c HOST --port P (-n BYTES | -t SECONDS) [--cpu C] [--write-size N]
       zcrx-bench --report RESULTS.jsonl
  --buf-size N  zero-copy modes: bytes per buffer (4096, 32768, 32k, ..; default a page);
                larger than a page: a hugetlbfs area (reserve /proc/sys/vm/nr_hugepages)
  --area MIB    zero-copy modes: the area (default 64; io_uring zcrx: per queue)
  --queues Q    zero-copy modes: bind queues N..N+Q-1 (zcrx-rs: one context, one area;
                io_uring zcrx: one instance per queue); RSS spreads the flows
  --flows N     both sides: N concurrent connections (1-256; -n is the total)
  --write-size N  sender: bytes per write() (default 256k)
  --src-port P  sender: flow i connects from port P+i (the same 4-tuples, so the same
                RSS spread, for every mode; the port may be in TIME_WAIT: SO_REUSEADDR)
  --split       receiver: also measure its CPU time inside receive system calls (in_calls_secs)
  --mark        receiver: execute `xchg %bx,%bx` where the measured window opens and closes
                (a no-op that scripts/qemu-insn-plugin.c counts instructions between)
  -h, --help    this text
  -V, --version the version
";

pub(crate) fn parse() -> Opts {
    cliopt::parse("zcrx-bench", parse_args)
}

/// A value in `range`, or an error that says which.
fn within<T: std::str::FromStr + PartialOrd + std::fmt::Display>(v: &str, lo: T, hi: T) -> Result<T, String> {
    match v.parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(format!("want a number from {lo} to {hi}")),
    }
}

fn parse_args(p: &mut lexopt::Parser) -> Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Opts {
        server: false,
        host: None,
        port: 5201,
        mode: Mode::Copy,
        dev: None,
        queue: 0,
        queues: 1,
        cpu: None,
        v6: true,
        json: false,
        split: false,
        mark: false,
        bytes: None,
        secs: None,
        rcvlowat: 0,
        buf_size: 0,
        area_mib: 64,
        flows: 1,
        write_size: 256 << 10,
        src_port: 0,
    };
    let size = |v: &str| zcrx::sys::parse_size(v).filter(|&n| n > 0).ok_or("want a size such as 4096, 32k or 2M");
    // the option being handled, for errors about its value
    let mut at = String::new();
    let r = (|| {
        while let Some(arg) = p.next()? {
            at = cliopt::name(&arg);
            match arg {
                Short('s') => o.server = true,
                Short('c') => o.host = Some(p.value()?.string()?),
                Short('p') | Long("port") => o.port = p.value()?.parse()?,
                Long("mode") => {
                    o.mode = p
                        .value()?
                        .parse_with(|v| Mode::parse(v).ok_or("want copy, trunc, iouring-zcrx, zcrx-rs, zcrx-rs-nomerge or zcrx-rs-copy"))?
                }
                Long("dev") => o.dev = Some(p.value()?.string()?),
                Long("queue") => o.queue = p.value()?.parse()?,
                Long("queues") => o.queues = p.value()?.parse_with(|v| within(v, 1, 64))?,
                Long("cpu") => o.cpu = Some(p.value()?.parse()?),
                Short('4') => o.v6 = false,
                Short('6') => o.v6 = true,
                Long("json") => o.json = true,
                Long("split") => o.split = true,
                Long("mark") => o.mark = true,
                Long("rcvlowat") => o.rcvlowat = p.value()?.parse()?,
                Long("buf-size") => o.buf_size = p.value()?.parse_with(size)?,
                Long("area") => o.area_mib = p.value()?.parse_with(|v| within(v, 1, usize::MAX >> 20))?,
                Long("flows") => o.flows = p.value()?.parse_with(|v| within(v, 1, MAX_FLOWS))?,
                Long("write-size") => o.write_size = p.value()?.parse_with(size)?,
                Long("src-port") => o.src_port = p.value()?.parse_with(|v| within(v, 1, u16::MAX))?,
                Short('n') => o.bytes = Some(p.value()?.parse()?),
                Short('t') => o.secs = Some(p.value()?.parse()?),
                Long("report") => {
                    let path = p.value()?.string()?;
                    // A report piped into head(1) ends quietly, like other tools.
                    // SAFETY: restoring the default action of a signal.
                    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
                    match report::report(&path) {
                        Ok(()) => exit(0),
                        Err(e) => die("report", e),
                    }
                }
                Short('h') | Long("help") => cliopt::help(USAGE),
                Short('V') | Long("version") => cliopt::version("zcrx-bench", env!("CARGO_PKG_VERSION")),
                _ => return Err(arg.unexpected()),
            }
            at.clear();
        }
        Ok(())
    })();
    cliopt::named(&at, r)?;
    if o.server == o.host.is_some() {
        return Err("either -s (receive) or -c HOST (send)".into());
    }
    if o.queues > 1 && !o.mode.has_area() {
        return Err(format!("--queues: mode {} binds no queue", o.mode.name()).into());
    }
    if o.buf_size != 0 && o.buf_size != zcrx::dev::page_size() && !o.mode.has_area() {
        return Err(format!("--buf-size: mode {} has no buffers of its own", o.mode.name()).into());
    }
    Ok(o)
}
