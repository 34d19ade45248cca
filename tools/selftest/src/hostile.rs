// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `zcrx-upload` against hostile clients, while ordinary uploads run: the
//! server must answer each hostile client as HTTP says (or close it when
//! its time is up), finish every ordinary upload byte-exact and zero-copy,
//! and leave nothing in its directory but complete files, ^C included.

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
    cmd.args(["--area", "64", "--max-conns", "100", "--header-timeout", &t, "--idle-timeout", &t]).arg("--dir").arg(dst);
    let (mut child, rx) = spawn_server(cmd, "listening")?;
    let r = attack(env, src, dst);
    // ^C: the server must remove what it had not finished
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
    let (summary, legit) = r.map_err(|e| format!("{e}; server stderr: {}", err.trim()))?;
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
    if nr.is_empty() {
        return Err("the never-reading client's uploads: none stored".into());
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
        "{summary}; never-reading client: {} of {NEVER_READS} pipelined uploads stored; ^C: exit 0, nothing left but \
         complete files ({} in all)",
        nr.len(),
        names.len()
    ))
}

/// The ordinary uploads: `(name, size)`.
type Uploads = Vec<(&'static str, u64)>;

/// Pipelined one-byte uploads the never-reading client sends.
const NEVER_READS: usize = 64;

/// Runs the hostile clients and two ordinary uploads at once; returns a
/// summary line and the ordinary uploads `(name, size)`.
fn attack(env: &Env, src: &Path, dst: &Path) -> Result<(String, Uploads), String> {
    let to4 = addr_a(false, PORT);
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
    // a client that never reads: 64 pipelined one-byte uploads, its
    // receive buffer small, open until the end
    let (nr_tx, nr_rx) = std::sync::mpsc::channel::<()>();
    let never = in_netns(NS_B, move || {
        let s = connect(to4, Duration::from_secs(30))?;
        zcrx::sys::set_rcvbuf(&s, 4096).map_err(|e| format!("SO_RCVBUF: {e}"))?;
        let mut all = Vec::new();
        for k in 0..NEVER_READS {
            all.extend_from_slice(format!("PUT /nr-{k} HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\n").as_bytes());
            all.push(k as u8);
        }
        (&s).write_all(&all).map_err(|e| format!("never-reader: {e}"))?;
        let _ = nr_rx.recv_timeout(Duration::from_secs(300));
        drop(s);
        Ok(())
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
    let _ = nr_tx.send(());
    join(never)?;
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
    Ok((format!("{summary}; 2 ordinary uploads byte-exact meanwhile"), legit))
}
