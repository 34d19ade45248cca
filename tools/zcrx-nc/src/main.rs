// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-nc: like `nc -l`, but the payload arrives zero-copy.
//!
//! Listens on a TCP port, accepts one connection and receives it through
//! `/dev/zcrx` bound to one rx queue of a NIC with header/data split: the
//! NIC writes the payload into our memory and `recv` only tells us where.
//! The payload goes to stdout (or is discarded, or checked against the
//! zcrx test pattern); zero-copy/copy statistics go to stderr.
//!
//!   zcrx-nc --dev eth0 --queue 3 --port 5201 > file
//!
//! The connection's packets must land on that queue (one queue, or an
//! ntuple/flow steering rule); whatever lands elsewhere still arrives, as
//! copies. It listens on IPv6 and IPv4 (`[::]`, unless
//! net.ipv6.bindv6only is set; `-4`: IPv4 only; `-s ADDR`: that address),
//! `-k` keeps listening for the next connection, `-w SECS` ends a
//! connection idle that long, `-v` prints a progress line, `--json` prints the
//! statistics of each connection as one JSON object. `--queues 0,1,2,3`
//! binds several rx queues of the device to the one context (flows spread
//! by RSS all arrive zero-copy). `--no-bind` binds no
//! queue (a copy-only context: any TCP path, loopback included, every byte
//! copied; no CAP_NET_ADMIN needed). `--buf-size 32k` registers the area as
//! 32 KiB buffers (hugetlbfs memory when binding a queue: reserve huge pages
//! in /proc/sys/vm/nr_hugepages). As with nc, `-l` may be given (listening
//! is all zcrx-nc does) and the port may come as `-p P` or last on the
//! command line: `zcrx-nc -l --dev eth0 --queue 3 5201`.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::process::exit;
use std::time::{Duration, Instant};

use zcrx::{Context, ErrorKind, Pattern, Stats};

struct Opts {
    dev: String,
    queues: Vec<u32>,
    port: u16,
    v6: bool,
    /// `-s ADDR`: the address to listen on.
    addr: Option<std::net::IpAddr>,
    /// `-w SECS`: how long a connection may stay idle.
    idle: Option<Duration>,
    area_mib: usize,
    /// Bytes per buffer; 0: the page size.
    buf_size: usize,
    no_bind: bool,
    out: Output,
    keep: bool,
    verbose: bool,
    json: bool,
}

enum Output {
    Stdout,
    Discard,
    Check(u64),
}

const USAGE: &str = "usage: zcrx-nc [-l] (--dev IFNAME --queue N | --dev IFNAME --queues A,B,.. | --no-bind)
               [-4|-6] [-s ADDR] (--port P | -p P | [ADDR] P)
               [--area MIB] [--buf-size N] [--discard | --check SEED] [-k] [-w SECS] [-v] [--json]
Receives a TCP connection zero-copy; payload to stdout, stats to stderr.
  --queues A,B  bind several rx queues of IFNAME (one area, one ring)
  --no-bind     bind no queue: every byte copied (any path, no CAP_NET_ADMIN)
  -l            listen (accepted as with nc: listening is all zcrx-nc does)
  --port P, -p P, or P last: the TCP port to listen on
  -4 | -6       IPv4 only | IPv6 and IPv4 (the default: [::])
  -s ADDR       listen on this local address only (also: ADDR before P)
  --area MIB    receive memory (default 64)
  --buf-size N  bytes per buffer: 4096, 32768, 32k, .. 2M (default a page); larger
                than a page needs huge pages to bind a queue (/proc/sys/vm/nr_hugepages)
  --discard     drop the payload
  --check SEED  verify it against the zcrx test pattern instead
  -k            keep listening: one connection after another (a connection
                that fails is reported and the next one taken)
  -w SECS       end a connection that brings no data for SECS seconds (its
                statistics say so; without -k zcrx-nc then exits 0, as nc)
  -v            a progress line on stderr while receiving
  --json        each connection's statistics as one JSON object
  -h, --help    this text
  -V, --version the version
";

fn parse() -> Opts {
    cliopt::parse("zcrx-nc", parse_args)
}

fn parse_args(p: &mut lexopt::Parser) -> Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Opts {
        dev: String::new(),
        queues: Vec::new(),
        port: 0,
        v6: true,
        addr: None,
        idle: None,
        area_mib: 64,
        buf_size: 0,
        no_bind: false,
        out: Output::Stdout,
        keep: false,
        verbose: false,
        json: false,
    };
    // the option being handled, for errors about its value
    let mut at = String::new();
    // words that are not options: [ADDR] PORT, as nc takes them
    let mut words: Vec<String> = Vec::new();
    let r = (|| {
        while let Some(arg) = p.next()? {
            at = cliopt::name(&arg);
            match arg {
                Long("dev") => o.dev = p.value()?.string()?,
                Long("queue") => o.queues = vec![p.value()?.parse()?],
                Long("queues") => {
                    o.queues = p.value()?.parse_with(|v| v.split(',').map(|q| q.trim().parse::<u32>()).collect::<Result<Vec<_>, _>>())?
                }
                Long("port") | Short('p') => o.port = p.value()?.parse()?,
                Short('l') => {}
                Short('s') => o.addr = Some(p.value()?.parse()?),
                Short('w') => {
                    let secs: f64 = p.value()?.parse()?;
                    match Duration::try_from_secs_f64(secs) {
                        Ok(d) if d >= Duration::from_millis(1) => o.idle = Some(d),
                        _ => return Err("want a number of seconds from 0.001 on".into()),
                    }
                }
                Value(v) => words.push(v.string()?),
                Long("area") => o.area_mib = p.value()?.parse()?,
                Long("buf-size") => {
                    o.buf_size = p.value()?.parse_with(|v| zcrx::sys::parse_size(v).ok_or("want a size such as 4096, 32k or 2M"))?
                }
                Long("no-bind") => o.no_bind = true,
                Long("discard") => o.out = Output::Discard,
                Long("check") => o.out = Output::Check(p.value()?.parse()?),
                Short('4') => o.v6 = false,
                Short('6') => o.v6 = true,
                Short('k') => o.keep = true,
                Short('v') => o.verbose = true,
                Long("json") => o.json = true,
                Short('h') | Long("help") => cliopt::help(USAGE),
                Short('V') | Long("version") => cliopt::version("zcrx-nc", env!("CARGO_PKG_VERSION")),
                _ => return Err(arg.unexpected()),
            }
            at.clear();
        }
        Ok(())
    })();
    cliopt::named(&at, r)?;
    match words.as_slice() {
        [] => {}
        [port] | [_, port] if o.port != 0 => return Err(format!("the port is {} already: what is {port:?}?", o.port).into()),
        [port] => o.port = port.parse().map_err(|_| format!("invalid port {port:?}"))?,
        [addr, port] if o.addr.is_none() => {
            o.addr = Some(addr.parse().map_err(|_| format!("invalid address {addr:?} (an IPv4 or IPv6 literal)"))?);
            o.port = port.parse().map_err(|_| format!("invalid port {port:?}"))?;
        }
        _ => return Err(format!("unexpected arguments {words:?}: want at most [ADDR] PORT").into()),
    }
    if let Some(a) = o.addr {
        if a.is_ipv6() && !o.v6 {
            return Err(format!("-4 and an IPv6 address ({a})").into());
        }
    }
    // Either a queue to bind or --no-bind, not both.
    if o.no_bind && (!o.dev.is_empty() || !o.queues.is_empty()) {
        return Err("--no-bind binds no queue: leave out --dev, --queue and --queues".into());
    }
    if !o.no_bind && o.dev.is_empty() {
        return Err("missing --dev IFNAME (the device whose queue to bind), or --no-bind".into());
    }
    if o.port == 0 {
        return Err("missing --port P".into());
    }
    Ok(o)
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("zcrx-nc: {what}: {e}");
    exit(1);
}

fn main() {
    let o = parse();
    // 1. The memory and the queue: bind before the connection exists, so
    //    that its first bytes already land in our buffers.
    let ctx = Context::open_with(o.area_mib << 20, o.buf_size).unwrap_or_else(|e| {
        if e.kind() == ErrorKind::InvalidArgument && o.buf_size != 0 {
            die("register area (--buf-size: a power of two from the page size to 2M, --area a multiple of it)", e)
        }
        die("open /dev/zcrx and register the area (is zcrx_rs loaded?)", e)
    });
    let bound = if o.no_bind {
        ctx.bind_nodev().unwrap_or_else(|e| die("copy-only context (--no-bind; module too old?)", e));
        "no queue: copy-only".to_string()
    } else {
        let queues = if o.queues.is_empty() { vec![0] } else { o.queues.clone() };
        ctx.bind(&o.dev, queues[0]).unwrap_or_else(|e| {
            if e.kind() == ErrorKind::MemoryNotContiguous && !ctx.huge_pages() {
                let pages = (o.area_mib << 20).div_ceil(zcrx::dev::huge_page_size());
                die(
                    &format!(
                        "bind {} queue {}: buffers of {} bytes need physically contiguous memory: \
                         reserve huge pages (echo {pages} > /proc/sys/vm/nr_hugepages)",
                        o.dev,
                        queues[0],
                        ctx.buf_size()
                    ),
                    e,
                )
            }
            die(&format!("bind {} queue {} (header split on? queue exists?)", o.dev, queues[0]), e)
        });
        for &q in &queues[1..] {
            ctx.add_queue(&o.dev, q).unwrap_or_else(|e| die(&format!("bind {} queue {} too (module too old?)", o.dev, q), e));
        }
        let list: Vec<String> = queues.iter().map(u32::to_string).collect();
        format!("{} queue{} {}", o.dev, if queues.len() > 1 { "s" } else { "" }, list.join(","))
    };

    // 2. An ordinary TCP socket.
    let addr: SocketAddr = match o.addr {
        Some(a) => (a, o.port).into(),
        None if o.v6 => (Ipv6Addr::UNSPECIFIED, o.port).into(),
        None => (Ipv4Addr::UNSPECIFIED, o.port).into(),
    };
    let listener = TcpListener::bind(addr).unwrap_or_else(|e| die("listen", e));
    eprintln!("zcrx-nc: listening on {addr}, {bound}, {}-byte buffers", ctx.buf_size());
    let pattern = match o.out {
        Output::Check(seed) => Some(Pattern::new(seed)),
        _ => None,
    };
    loop {
        let (sock, peer) = match listener.accept() {
            Ok(v) => v,
            // ECONNABORTED, EMFILE, ...: with -k, not the end
            Err(e) if o.keep => {
                eprintln!("zcrx-nc: accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Err(e) => die("accept", e),
        };
        if let Err(e) = sock.set_read_timeout(o.idle) {
            die("SO_RCVTIMEO (-w)", e)
        }
        let before = ctx.stats().unwrap_or_else(|e| die("stats", e));
        let t0 = Instant::now();
        let r = receive(&ctx, &sock, &o, pattern.as_ref());
        let secs = t0.elapsed().as_secs_f64();
        let st = ctx.stats().unwrap_or_else(|e| die("stats", e));
        match r {
            Ok((total, copied)) => report(&o, &peer, total, copied, secs, &before, &st, ctx.buf_size(), None),
            // a peer that resets (or a connection that fails otherwise)
            // ends its connection, not the listener
            // an idle peer ends its connection as nc -w does: reported,
            // and without -k the program's end, status 0
            Err((e, total, copied)) if o.keep || matches!(e, Ended::Idle(_)) => {
                report(&o, &peer, total, copied, secs, &before, &st, ctx.buf_size(), Some(&e))
            }
            Err((e, total, _)) => die(&format!("recv from {peer} after {total} bytes"), e),
        }
        if !o.keep {
            break;
        }
    }
}

/// Writes to stdout; a reader that went away (EPIPE: `| head`) ends the
/// program quietly, as a SIGPIPE would.
fn out(w: &mut impl Write, data: &[u8]) {
    match w.write_all(data) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => exit(0),
        Err(e) => die("write", e),
    }
}

/// The result of one connection: (bytes, bytes copied), or the error that
/// ended it with the same counts so far.
type Received = Result<(u64, u64), (Ended, u64, u64)>;

/// What ended a connection before its end of stream.
enum Ended {
    Recv(zcrx::Error),
    /// No data for this long (`-w`).
    Idle(Duration),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Recv(e) => e.fmt(f),
            Ended::Idle(d) => write!(f, "no data for {} s (-w): closed", d.as_secs_f64()),
        }
    }
}

/// Receives one connection to its end: records say where the bytes are;
/// the buffers go back as each batch is dropped.
fn receive(ctx: &Context, sock: &std::net::TcpStream, o: &Opts, pattern: Option<&Pattern>) -> Received {
    let mut stdout = io::stdout().lock();
    let (mut total, mut copied) = (0u64, 0u64);
    let t0 = Instant::now();
    let mut shown = t0;
    // a progress line drawn over itself on a terminal, one line a second
    // into a file or a pipe
    // SAFETY: isatty has no preconditions.
    let tty = unsafe { libc::isatty(2) } == 1;
    loop {
        let batch = match ctx.recv(sock, 256) {
            Ok(b) => b,
            // Every buffer is in flight (the others are queued in sockets
            // or on their way back): wait for some, as the crate asks.
            Err(e) if e.kind() == ErrorKind::NoBuffers => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock && o.idle.is_some() => {
                let _ = stdout.flush();
                if o.verbose && tty {
                    eprintln!();
                }
                return Err((Ended::Idle(o.idle.unwrap_or_default()), total, copied));
            }
            Err(e) => {
                let _ = stdout.flush();
                if o.verbose && tty {
                    eprintln!();
                }
                return Err((Ended::Recv(e), total, copied));
            }
        };
        if batch.is_eof() {
            break;
        }
        for r in batch.iter() {
            let data = r.data();
            match o.out {
                Output::Stdout => out(&mut stdout, data),
                Output::Discard => {}
                Output::Check(_) => {
                    if let Some(bad) = pattern.and_then(|p| p.check(total, data)) {
                        eprintln!("zcrx-nc: payload mismatch at stream offset {bad}");
                        exit(1);
                    }
                }
            }
            total += data.len() as u64;
            if r.is_copy() {
                copied += data.len() as u64;
            }
        }
        // the buffers go back here
        drop(batch);
        if o.verbose && shown.elapsed() >= Duration::from_secs(1) {
            shown = Instant::now();
            progress(total, copied, t0.elapsed().as_secs_f64(), tty);
        }
    }
    match stdout.flush() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => exit(0),
        r => r.unwrap_or_else(|e| die("write", e)),
    }
    if o.verbose {
        progress(total, copied, t0.elapsed().as_secs_f64(), tty);
        if tty {
            eprintln!();
        }
    }
    Ok((total, copied))
}

fn progress(total: u64, copied: u64, secs: f64, tty: bool) {
    let mib = total as f64 / f64::from(1 << 20);
    let zc = if total == 0 { 100.0 } else { (total - copied) as f64 * 100.0 / total as f64 };
    let line = format!("zcrx-nc: {mib:.1} MiB, {:.1} MiB/s, {zc:.1}% zero-copy", mib / secs.max(1e-9));
    if tty {
        eprint!("\r{line} ");
    } else {
        eprintln!("{line}");
    }
}

/// The statistics of one connection: its own byte counts, and the context's
/// counters over its lifetime (the difference of two STATS); `buf_size`:
/// the area's; `err`: what ended it, if it failed (with -k).
#[allow(clippy::too_many_arguments)]
fn report(o: &Opts, peer: &SocketAddr, total: u64, copied: u64, secs: f64, a: &Stats, b: &Stats, buf_size: usize, err: Option<&Ended>) {
    let gbits = total as f64 * 8.0 / secs.max(1e-9) / 1e9;
    let (copy_records, refill_ok, refill_bad, alloc_fail) =
        (b.copy_records - a.copy_records, b.refill_ok - a.refill_ok, b.refill_bad - a.refill_bad, b.alloc_fail - a.alloc_fail);
    if o.json {
        // (an error's text has no quote or backslash to escape)
        let error = err.map(|e| format!(",\"error\":\"{}\"", e.to_string().replace(['"', '\\'], "'"))).unwrap_or_default();
        eprintln!(
            "{{\"peer\":\"{peer}\",\"bytes\":{total},\"seconds\":{secs:.6},\"gbit_per_s\":{gbits:.3},\
             \"zero_copy_bytes\":{},\"copied_bytes\":{copied},\"copy_records\":{copy_records},\
             \"refill_ok\":{refill_ok},\"refill_bad\":{refill_bad},\"alloc_fail\":{alloc_fail},\
             \"buf_size\":{buf_size}{error}}}",
            total - copied
        );
    } else {
        let ended = err.map(|e| format!(", then: {e}")).unwrap_or_default();
        eprintln!(
            "zcrx-nc: {peer}: {total} bytes in {secs:.2} s ({gbits:.2} Gbit/s): zero-copy {} bytes, copied {copied} \
             bytes ({copy_records} records); refill ok {refill_ok} bad {refill_bad}, alloc failures {alloc_fail}{ended}",
            total - copied
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Result<Opts, String> {
        parse_args(&mut lexopt::Parser::from_args(args.iter().copied())).map_err(|e| e.to_string())
    }

    #[test]
    fn netcat_forms_of_the_port_and_address() {
        let o = opts(&["-l", "--no-bind", "5201"]).unwrap();
        assert_eq!((o.port, o.addr), (5201, None));
        let o = opts(&["--no-bind", "-p", "5202", "-w", "1.5"]).unwrap();
        assert_eq!((o.port, o.idle), (5202, Some(Duration::from_millis(1500))));
        let o = opts(&["--no-bind", "192.0.2.1", "5203"]).unwrap();
        assert_eq!((o.port, o.addr), (5203, Some("192.0.2.1".parse().unwrap())));
        let o = opts(&["--no-bind", "-s", "::1", "--port", "5204"]).unwrap();
        assert_eq!((o.port, o.addr), (5204, Some("::1".parse().unwrap())));
    }

    #[test]
    fn netcat_forms_that_do_not_add_up() {
        for (args, want) in [
            (&["--no-bind", "-p", "5201", "5202"][..], "the port is 5201 already"),
            (&["--no-bind", "host", "5201"][..], "invalid address"),
            (&["--no-bind", "a", "b", "c"][..], "at most [ADDR] PORT"),
            (&["--no-bind", "-4", "-s", "::1", "5201"][..], "-4 and an IPv6 address"),
            (&["--no-bind", "-w", "0", "5201"][..], "from 0.001 on"),
            (&["--no-bind", "-w", "1e-10", "5201"][..], "from 0.001 on"),
            (&["--no-bind", "-w", "1e20", "5201"][..], "from 0.001 on"),
            (&["--no-bind", "-s", "192.0.2.1", "192.0.2.2", "5201"][..], "at most [ADDR] PORT"),
        ] {
            match opts(args) {
                Err(e) => assert!(e.contains(want), "{args:?}: {e}"),
                Ok(_) => panic!("{args:?} accepted"),
            }
        }
    }
}
