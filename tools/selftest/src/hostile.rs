// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `zcrx-upload` against hostile clients, while ordinary uploads run: the
//! server must answer each hostile client as HTTP says (or close it when
//! its time is up), finish every ordinary upload byte-exact and zero-copy,
//! and leave nothing in its directory but complete files; then refuse
//! connections beyond `--max-conns` (503), and on ^C in the middle of an
//! upload remove its temporary file.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome;
use zcrx::Pattern;

use crate::clients::{spawn_server, upload_line, with_upload_dirs};
use crate::common::wait_idle;
use crate::net::{addr_a, connect, in_netns, join, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("upload_survives_hostile_clients", upload_survives_hostile_clients)];

const PORT: u16 = 8082;
/// The server's header and idle timeouts in this test (seconds).
const TIMEOUT: u64 = 3;
const SLOWLORIS: usize = 64;

/// Reads what the server sends until it closes, or `limit` passes:
/// `(bytes, closed)`.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < limit {
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            // a reset is a close too
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// The status line the server answered with, or what it did instead.
fn status(got: &[u8], closed: bool) -> String {
    let t = String::from_utf8_lossy(got);
    match t.lines().next() {
        Some(l) if !l.is_empty() => l.to_string(),
        _ if closed => "closed without a reply".to_string(),
        _ => "no reply, still open".to_string(),
    }
}

/// One hostile client: what it did and what it got (`expect` must be the
/// start of the status line, or "closed" for a close without reply).
struct Probe {
    what: &'static str,
    expect: &'static str,
    got: String,
}

fn probe(what: &'static str, expect: &'static str, to: SocketAddr, send: Vec<u8>, limit: Duration) -> JoinHandle<Result<Probe, String>> {
    in_netns(NS_B, move || {
        let mut s = connect(to, Duration::from_secs(30))?;
        // the server may close before it has read everything: fine
        let _ = s.write_all(&send);
        let (got, closed) = read_until_closed(&mut s, limit);
        Ok(Probe { what, expect, got: status(&got, closed) })
    })
}

fn upload_survives_hostile_clients(env: &Env) -> Outcome {
    with_upload_dirs(env, "zcrx-hostile", hostile)
}

fn hostile(env: &Env, server: &Path, src: &Path, dst: &Path) -> Result<String, String> {
    let n = Nsim::up(1)?;
    n.hds(true)?;
    let before = n.stats(1, 0)?;
    std::fs::write(dst.join("existing.bin"), b"keep").map_err(|e| e.to_string())?;
    let t = TIMEOUT.to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NS_A]).arg(server).args(["--dev", &n.a, "--queue", "0", "--port", &PORT.to_string()]);
    let mc = MAX_CONNS.to_string();
    cmd.args(["--area", "64", "--max-conns", &mc, "--header-timeout", &t, "--idle-timeout", &t]).arg("--dir").arg(dst);
    let (mut child, rx) = spawn_server(cmd, "listening")?;
    let r = attack(env, src, dst).and_then(|(summary, legit, nr_port)| {
        let full = too_many(to_a())?;
        Ok((format!("{summary}; {full}"), legit, nr_port))
    });
    // ^C in the middle of an upload: the server must remove what it had
    // not finished
    let half = r.as_ref().ok().map(|_| half_upload(dst));
    // SAFETY: kill(2) on our child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let t0 = Instant::now();
    let exited = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            _ if t0.elapsed() > Duration::from_secs(20) => break None,
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let lines: Vec<String> = rx.try_iter().collect();
    let (summary, legit, nr_port) = r.map_err(|e| format!("{e}; server stderr: {}", err.trim()))?;
    let half =
        half.expect("attack passed").and_then(|h| join(h.0).map(|()| h.1)).map_err(|e| format!("{e}; server stderr: {}", err.trim()))?;
    let st = exited.ok_or("the server did not exit within 20 s of SIGINT")?;
    if !st.success() {
        return Err(format!("the server exited with {st} after SIGINT; stderr: {}", err.trim()));
    }
    // Nothing but complete files: the ordinary uploads and the file that
    // existed, unchanged; and of the never-reading client's, those the
    // server stored before it gave up on the client (each its one byte).
    let mut names: Vec<String> =
        std::fs::read_dir(dst).map_err(|e| e.to_string())?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let mut need: Vec<String> = legit.iter().map(|(name, _)| name.to_string()).collect();
    need.push("existing.bin".into());
    let nr: Vec<&String> =
        names.iter().filter(|f| f.strip_prefix("nr-").and_then(|k| k.parse::<usize>().ok()).is_some_and(|k| k < NEVER_READS)).collect();
    let other: Vec<&String> = names.iter().filter(|f| !need.contains(f) && !nr.contains(f)).collect();
    if !other.is_empty() || need.iter().any(|f| !names.contains(f)) {
        return Err(format!("the directory holds {names:?}: expected {need:?} and nr-* files only"));
    }
    // (the server may read and store them all before its replies back up)
    if nr.is_empty() {
        return Err(format!("the never-reading client's uploads: none of {NEVER_READS} stored"));
    }
    if !err.lines().any(|l| l.contains(&format!("]:{nr_port}: the client took no reply for {TIMEOUT} s: reset"))) {
        return Err(format!("the server's log does not say it reset the never-reading client (port {nr_port}): {}", err.trim()));
    }
    if std::fs::read(dst.join("existing.bin")).map_err(|e| e.to_string())? != b"keep" {
        return Err("existing.bin was replaced".into());
    }
    for f in &nr {
        let k: usize = f[3..].parse().unwrap_or(usize::MAX);
        if std::fs::read(dst.join(f)).map_err(|e| e.to_string())? != [k as u8] {
            return Err(format!("{f} is not the byte sent"));
        }
    }
    // every ordinary body zero-copy, as the server's lines say
    let mut zc = 0;
    for (name, size) in &legit {
        let (b, z, c) = upload_line(&lines, name)?;
        if b != *size || z != *size {
            return Err(format!("{name}: {b} bytes, {z} zero-copy, {c} copied: expected {size} bytes, all zero-copy"));
        }
        zc += size;
    }
    let d = n.stats(1, 0)?.since(&before);
    if d.dma_bytes < zc {
        return Err(format!("netdevsim DMA'd {} B, less than the {zc} B of ordinary bodies", d.dma_bytes));
    }
    drop(n);
    wait_idle(Duration::from_secs(30))?;
    Ok(format!(
        "{summary}; ^C during {half}: exit 0, nothing left but complete files ({} in all, {} of the never-reading \
         client's {NEVER_READS} pipelined uploads)",
        names.len(),
        nr.len()
    ))
}

/// The ordinary uploads: `(name, size)`.
type Uploads = Vec<(&'static str, u64)>;

/// Pipelined one-byte uploads the never-reading client sends: their
/// replies (about 140 bytes each, 280 KiB in all) are far more than its
/// receive buffer and the server's send buffer (64 KiB) hold, so the
/// server must give up on it (its idle timeout) with most of them
/// undelivered.
const NEVER_READS: usize = 2048;

/// TCP states (`tcpi_state`).
const TCP_ESTABLISHED: u8 = 1;
const TCP_CLOSE: u8 = 7;

/// What the never-reading client saw: the replies it found when it read at
/// last, its TCP state then, its port.
struct NeverReader {
    replies: usize,
    state: u8,
    port: u16,
}

/// The server's address in this test (IPv4).
fn to_a() -> SocketAddr {
    addr_a(false, PORT)
}

/// `--max-conns` in this test.
const MAX_CONNS: usize = 100;

/// [`MAX_CONNS`] + 10 connections that send nothing, opened one after
/// another once the hostile clients are done: at least the last 10 must be
/// answered 503 (more if the server still counts some of the earlier
/// connections), the others closed without a word when the header timeout
/// passes (idle connections: no request was begun); then 10 more must be
/// served, not refused, within 15 s: the slots came back.
fn too_many(to: SocketAddr) -> Result<String, String> {
    join(in_netns(NS_B, move || {
        let mut socks = Vec::new();
        for _ in 0..MAX_CONNS + 10 {
            socks.push(connect(to, Duration::from_secs(30))?);
        }
        let (mut n503, mut idle, mut other) = (0, 0, Vec::new());
        for s in &mut socks {
            let (got, closed) = read_until_closed(s, Duration::from_secs(TIMEOUT + 10));
            match status(&got, closed) {
                l if l.starts_with("HTTP/1.1 503") => n503 += 1,
                l if l == "closed without a reply" => idle += 1,
                l => other.push(l),
            }
        }
        // The slots come back: 10 more are served (closed after the header
        // timeout like the others), none refused. A slot is held until the
        // server has lingered (2 s) after its close: try again for 15 s.
        let t0 = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            let mut again = Vec::new();
            for _ in 0..10 {
                again.push(connect(to, Duration::from_secs(30))?);
            }
            let refused = again
                .iter_mut()
                .map(|s| {
                    let (got, closed) = read_until_closed(s, Duration::from_secs(TIMEOUT + 10));
                    status(&got, closed)
                })
                .filter(|l| l != "closed without a reply")
                .collect::<Vec<_>>();
            if refused.is_empty() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(format!(
                    "after the idle connections closed, 10 new ones got {refused:?} ({tries} tries in 15 s): slots not \
                     given back"
                ));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        if n503 < 10 || idle == 0 || !other.is_empty() {
            return Err(format!(
                "{} idle connections with --max-conns {MAX_CONNS}: {n503} answered 503, {idle} closed without a \
                 reply, others: {other:?} (expected at least 10 x 503, the rest closed)",
                MAX_CONNS + 10
            ));
        }
        Ok(format!(
            "{} idle connections at --max-conns {MAX_CONNS}: {n503} x 503, {idle} closed after the header timeout, then \
             10 more served (try {tries})",
            MAX_CONNS + 10
        ))
    }))
}

/// An upload of 64 MiB that has sent its first MiB and goes on slowly: it
/// returns once the server has its temporary file (the client thread, and
/// what to call it in the summary); the caller sends ^C then.
fn half_upload(dst: &Path) -> Result<(JoinHandle<Result<(), String>>, String), String> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (sent_tx, sent_rx) = std::sync::mpsc::channel::<u16>();
    let h = in_netns(NS_B, move || {
        // The server may still count a connection of the last phase for a
        // moment (503, then a reset of what was sent): try again.
        let mut tries = 0;
        let mut s = loop {
            let mut s = connect(to_a(), Duration::from_secs(30))?;
            s.set_write_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
            let head = format!("PUT /half.bin HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n", 64u64 << 20);
            match s.write_all(head.as_bytes()).and_then(|()| s.write_all(&vec![0x33u8; 1 << 20])) {
                Ok(()) => break s,
                Err(e) if tries < 5 => {
                    tries += 1;
                    let port = s.local_addr().map_or(0, |a| a.port());
                    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(2));
                    eprintln!("# half upload from port {port}, try {tries}: {e} (the server: {})", status(&got, closed));
                    std::thread::sleep(Duration::from_secs(1));
                }
                Err(e) => return Err(format!("half upload: {e}")),
            }
        };
        let _ = sent_tx.send(s.local_addr().map_or(0, |a| a.port()));
        // a little more every 200 ms (the idle timeout is 3 s) until the
        // server goes away
        while rx.recv_timeout(Duration::from_millis(200)) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            if s.write_all(&[0x33u8; 1024]).is_err() {
                break;
            }
        }
        Ok(())
    });
    // the first MiB sent (on the connection that stays), then its file
    let Ok(port) = sent_rx.recv_timeout(Duration::from_secs(90)) else {
        let _ = tx.send(());
        return Err(format!("a 64 MiB upload: {}", join(h).err().unwrap_or_else(|| "its first MiB not sent".into())));
    };
    let t0 = Instant::now();
    loop {
        let part =
            std::fs::read_dir(dst).map_err(|e| e.to_string())?.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".half.bin."));
        if part {
            // the client goes on until the server is gone; give it the
            // signal to stop after that
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(30));
                let _ = tx.send(());
            });
            return Ok((h, "a 64 MiB upload (its .part file there)".into()));
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = tx.send(());
            let _ = join(h);
            return Err(format!("a 64 MiB upload from port {port}: the server made no .half.bin.*.part file within 20 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the hostile clients and two ordinary uploads at once; returns a
/// summary line, the ordinary uploads `(name, size)` and the never-reading
/// client's port.
fn attack(env: &Env, src: &Path, dst: &Path) -> Result<(String, Uploads, u16), String> {
    let to4 = to_a();
    let limit = Duration::from_secs(TIMEOUT + 10);
    let mut probes = Vec::new();
    // 64 slowloris heads: a header line a second, never the blank line
    for _ in 0..SLOWLORIS {
        probes.push(in_netns(NS_B, move || {
            let mut s = connect(to4, Duration::from_secs(30))?;
            s.write_all(b"PUT /slow HTTP/1.1\r\nHost: a\r\n").map_err(|e| e.to_string())?;
            let t0 = Instant::now();
            let mut got = Vec::new();
            let mut closed = false;
            while t0.elapsed() < limit && !closed {
                if s.write_all(b"X-Slow: 1\r\n").is_err() {
                    closed = true;
                    break;
                }
                let (g, c) = read_until_closed(&mut s, Duration::from_secs(1));
                got.extend(g);
                closed = c;
            }
            Ok(Probe { what: "slowloris head", expect: "HTTP/1.1 408", got: status(&got, closed) })
        }));
    }
    let tb = b"PUT /tb.bin HTTP/1.1\r\nHost: a\r\nContent-Length: 1099511627776\r\n\r\n".to_vec();
    probes.push(probe("Content-Length of a terabyte", "HTTP/1.1 413", to4, [tb, vec![7u8; 1 << 20]].concat(), limit));
    let smug = b"PUT /smug.bin HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n".to_vec();
    probes.push(probe("chunk size line ended by a bare LF", "HTTP/1.1 400", to4, smug, limit));
    let smug2 = b"PUT /smug2.bin HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\r\nhello\r\n0\r\n\r\n".to_vec();
    probes.push(probe("chunk size line with two CRs", "HTTP/1.1 400", to4, smug2, limit));
    let exists = b"PUT /existing.bin HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789".to_vec();
    probes.push(probe("a file that exists", "HTTP/1.1 409", to4, exists, limit));
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    probes.push(probe("4 KiB of random bytes", "HTTP/1.1 400", to4, junk, limit));
    let lf = b"PUT /lf.bin HTTP/1.1\nHost: a\nContent-Length: 3\n\nabc".to_vec();
    probes.push(probe("a head with bare LF line ends", "HTTP/1.1 400", to4, lf, limit));
    let nul = b"PUT /nul.bin HTTP/1.1\r\nHost: a\r\nX-Evil: a\0b\r\nContent-Length: 3\r\n\r\nabc".to_vec();
    probes.push(probe("a NUL in a header value", "HTTP/1.1 400", to4, nul, limit));
    let v19 = b"PUT /v.bin HTTP/1.9\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc".to_vec();
    probes.push(probe("HTTP/1.9", "HTTP/1.1 505", to4, v19, limit));
    let expect = b"PUT /e.bin HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\nabc".to_vec();
    probes.push(probe("an unknown expectation", "HTTP/1.1 417", to4, expect, limit));
    let long = format!("PUT /{} HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc", "n".repeat(300)).into_bytes();
    probes.push(probe("a 300-byte file name", "HTTP/1.1 400", to4, long, limit));
    // two bulk peers that stop: 8 MiB of a 64 MiB body, then silence
    for k in 0..2 {
        probes.push(in_netns(NS_B, move || {
            let mut s = connect(to4, Duration::from_secs(30))?;
            let head = format!("PUT /stall-{k}.bin HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n", 64u64 << 20);
            s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
            let chunk = vec![0x5au8; 1 << 20];
            for _ in 0..8 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
            let (got, closed) = read_until_closed(&mut s, limit);
            // closed when its time was up, with no reply (none is due)
            Ok(Probe { what: "a bulk peer that stops sending", expect: "closed", got: status(&got, closed) })
        }));
    }
    // a client that never reads: pipelined one-byte uploads, its receive
    // buffer small; it reads only once the server has closed the connection
    let never = in_netns(NS_B, move || {
        let s = connect(to4, Duration::from_secs(30))?;
        zcrx::sys::set_rcvbuf(&s, 4096).map_err(|e| format!("SO_RCVBUF: {e}"))?;
        s.set_write_timeout(Some(Duration::from_secs(60))).map_err(|e| e.to_string())?;
        let port = s.local_addr().map_err(|e| e.to_string())?.port();
        let mut all = Vec::new();
        for k in 0..NEVER_READS {
            all.extend_from_slice(format!("PUT /nr-{k} HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n").as_bytes());
            all.push(k as u8);
        }
        // (the server may give up, and reset, before it has read them all)
        let _ = (&s).write_all(&all);
        // Until the server closes (FIN: CLOSE_WAIT, or reset: CLOSE), or a
        // minute passes (a server that waits for ever fails below).
        let t0 = Instant::now();
        let mut state = crate::net::tcp_state(&s)?;
        while state == TCP_ESTABLISHED && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(100));
            state = crate::net::tcp_state(&s)?;
        }
        // now read what the server sent before it gave up
        let mut s = s;
        let (got, _) = read_until_closed(&mut s, Duration::from_secs(TIMEOUT + 10));
        let replies = String::from_utf8_lossy(&got).matches("HTTP/1.1 201").count();
        Ok(NeverReader { replies, state, port })
    });
    // meanwhile, two ordinary uploads with curl, IPv4 and IPv6 (chunked)
    let legit = [("legit4.bin", env.bytes(8 << 20) + 3, false), ("legit6.bin", (4 << 20) + 5, true)];
    let mut curls = Vec::new();
    for (k, &(name, size, v6)) in legit.iter().enumerate() {
        let mut buf = vec![0u8; size as usize];
        Pattern::new(90 + k as u64).fill(0, &mut buf);
        std::fs::write(src.join(name), &buf).map_err(|e| e.to_string())?;
        let host = if v6 { "[2001:db8::1]" } else { "192.0.2.1" };
        let mut c = Command::new("ip");
        c.args(["netns", "exec", NS_B, "curl", "-sS", "--fail", "--max-time", "300"]);
        let url = format!("http://{host}:{PORT}/{name}");
        if v6 {
            c.args(["-T", "-", &url]).stdin(std::fs::File::open(src.join(name)).map_err(|e| e.to_string())?);
        } else {
            c.arg("-T").arg(src.join(name)).arg(&url);
        }
        curls.push(c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("spawn curl: {e}"))?);
    }
    let mut problems = Vec::new();
    let mut answered = std::collections::BTreeMap::<String, usize>::new();
    for p in probes {
        let p = join(p)?;
        let closed_as_expected = p.expect == "closed" && p.got == "closed without a reply";
        if !p.got.starts_with(p.expect) && !closed_as_expected {
            problems.push(format!("{}: {} (expected {})", p.what, p.got, p.expect));
        }
        *answered.entry(format!("{}: {}", p.what, p.got)).or_default() += 1;
    }
    let nr = join(never)?;
    if nr.state != TCP_CLOSE {
        problems.push(format!(
            "the never-reading client: {} of {NEVER_READS} replies, its connection in TCP state {} (expected {TCP_CLOSE}, \
             reset by the server)",
            nr.replies, nr.state
        ));
    }
    for ((name, size, _), c) in legit.iter().zip(curls) {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            problems.push(format!("curl {name}: {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
            continue;
        }
        let stored = std::fs::read(dst.join(name)).map_err(|e| format!("{name}: {e}"))?;
        if stored != std::fs::read(src.join(name)).map_err(|e| e.to_string())? || stored.len() as u64 != *size {
            problems.push(format!("{name}: the stored file is not what curl sent"));
        }
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let summary = answered.iter().map(|(k, n)| if *n > 1 { format!("{n} x {k}") } else { k.clone() }).collect::<Vec<_>>().join("; ");
    let legit: Vec<(&'static str, u64)> = legit.iter().map(|&(name, size, _)| (name, size)).collect();
    Ok((
        format!(
            "{summary}; a client that never reads: reset by the server after {} of {NEVER_READS} replies; 2 ordinary \
             uploads byte-exact meanwhile",
            nr.replies
        ),
        legit,
        nr.port,
    ))
}
