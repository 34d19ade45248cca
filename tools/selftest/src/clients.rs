// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Programs a user writes against zcrx-rs, run as a user runs them: the C
//! library's epoll example (built with nothing but `cc` and `pkg-config`),
//! and the Rust + tokio upload server with unmodified `curl` as its client.
//! Each checks the payload byte for byte and requires every byte zero-copy
//! (header split on one queue: nothing may be copied), with netdevsim's
//! own counter of what it DMA'd into provider buffers as the lower bound.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::Pattern;

use crate::common::{ensure_loaded, wait_idle};
use crate::devlog::{DmaLog, RecNote};
use crate::net::{addr_a, join, sender, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] =
    &[("c_epoll_server_many_connections", c_epoll_server_many_connections), ("curl_uploads_to_tokio_server", curl_uploads_to_tokio_server)];

/// FNV-1a 64 of the first `len` bytes of `pat`'s stream (what the C
/// example prints for a connection).
fn fnv1a64(pat: &Pattern, len: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut off = 0;
    while off < len {
        let n = ((len - off) as usize).min(64 << 10);
        for &b in pat.slice(off, n) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        off += n as u64;
    }
    h
}

/// One line of the example: `conn PEER: B bytes, Z zero-copy, C copied,
/// fnv1a64 H`.
fn parse_conn(l: &str) -> Option<(u64, u64, u64, u64)> {
    let rest = l.strip_prefix("conn ")?;
    // PEER is "[ADDR]:PORT"
    let rest = &rest[rest.find(']')?..];
    let rest = &rest[rest.find(": ")? + 2..];
    let w: Vec<&str> = rest.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    // B bytes Z zero-copy C copied fnv1a64 H
    if w.len() != 8 || w[1] != "bytes" || w[3] != "zero-copy" || w[5] != "copied" || w[6] != "fnv1a64" {
        return None;
    }
    Some((w[0].parse().ok()?, w[2].parse().ok()?, w[4].parse().ok()?, u64::from_str_radix(w[7], 16).ok()?))
}

/// libzcrx's epoll example (`tools/libzcrx/examples/epoll-server.c`),
/// built with `cc example.c $(pkg-config --cflags --libs zcrx)` against the
/// installed library: one context bound to the queue serves six parallel
/// connections of different lengths (some not a multiple of the page). Each
/// connection's byte count and FNV-1a hash must match what its sender sent;
/// its records must all be zero-copy, and netdevsim must have DMA'd at
/// least their bytes.
fn c_epoll_server_many_connections(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let server = exe.with_file_name("zcrx-epoll-server");
    let libdir = exe.with_file_name("").join("../libzcrx/prefix/lib");
    if !server.exists() {
        return Fail(format!("{} not built (make tools)", server.display()));
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let before = tryo!(n.stats(1, 0));
    let port = 7120;
    let conns = 6u64;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NS_A]).arg(&server);
    cmd.args(["-i", &n.a, "-q", "0", "-p", &port.to_string(), "-a", "64", "-n", &conns.to_string()]);
    cmd.env("LD_LIBRARY_PATH", &libdir);
    let note = tryo!(RecNote::new("epoll"));
    cmd.envs(note.env());
    let log = tryo!(DmaLog::start());
    let (mut child, rx) = tryo!(spawn_server(cmd, "listening"));
    // Lengths: different, so each reply line identifies its sender.
    let base = env.bytes(8 << 20);
    let want: Vec<(u64, u64)> = (0..conns).map(|k| (20 + k, base / (k + 1) + 4097 * k + 1)).collect();
    let senders: Vec<_> = want
        .iter()
        .enumerate()
        .map(|(i, &(seed, len))| sender(addr_a(i % 2 == 0, port), len, Arc::new(Pattern::new(seed)), i % 2))
        .collect();
    let mut errs = Vec::new();
    for (s, &(_, len)) in senders.into_iter().zip(&want) {
        match join(s) {
            Ok(sent) if sent == len => {}
            Ok(sent) => errs.push(format!("sent {sent} of {len}")),
            Err(e) => errs.push(e),
        }
    }
    let mut got = Vec::new();
    let mut total = None;
    while total.is_none() {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) if l.starts_with("total:") => total = Some(l),
            Ok(l) => got.push(l),
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let st = child.wait();
    if !errs.is_empty() {
        return Fail(format!("senders: {}", errs.join("; ")));
    }
    let Some(total) = total else {
        return Fail(format!("no total line from the example ({st:?}); got: {got:?}"));
    };
    let (mut zc, mut copied) = (0, 0);
    for &(seed, len) in &want {
        let line = got.iter().find(|l| parse_conn(l).is_some_and(|c| c.0 == len));
        let Some(line) = line else {
            return Fail(format!("no line for the {len}-byte connection; got: {got:?}"));
        };
        let (b, z, c, h) = parse_conn(line).expect("parsed above");
        let expect = fnv1a64(&Pattern::new(seed), len);
        if h != expect || z + c != b {
            return Fail(format!("{line}: expected fnv1a64 {expect:016x} and zero-copy + copied = bytes"));
        }
        zc += z;
        copied += c;
    }
    let d = tryo!(n.stats(1, 0)).since(&before);
    env.diag(&format!(
        "libzcrx epoll example: {conns} connections (IPv4 and IPv6) byte-exact, {} B in all: {zc} B zero-copy, \
         {copied} B copied; netdevsim DMA'd {} B into provider buffers",
        zc + copied,
        d.dma_bytes
    ));
    // One queue, header split on, an area larger than the sockets can
    // hold: nothing here may be copied, and the device must have written
    // at least what the records say it did.
    if copied != 0 || zc == 0 {
        return Fail(format!("{copied} bytes copied, {zc} zero-copy: all must be zero-copy ({total})"));
    }
    if d.dma_bytes < zc {
        return Fail(format!("netdevsim DMA'd {} B < {zc} B the example says came zero-copy", d.dma_bytes));
    }
    // Every zero-copy record the example got, in a write netdevsim made.
    env.diag(&tryo!(log.check_process(0, zc, &note)));
    drop(log);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}

/// The lines of `r` (a child's stdout or stderr), read by a thread of
/// their own into a channel until `r` ends or the receiver is dropped.
pub(crate) fn lines_of(r: impl std::io::Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

/// Spawns `cmd` with stdout read line by line into a channel; waits (a
/// bound, not a deadline) for its first line, which must start with
/// `ready`.
pub(crate) fn spawn_server(mut cmd: Command, ready: &str) -> Result<(Child, Receiver<String>), String> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("spawn {cmd:?}: {e}"))?;
    let rx = lines_of(child.stdout.take().expect("piped"));
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(l) if l.starts_with(ready) => Ok((child, rx)),
        other => {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            let _ = child.wait();
            Err(format!("{cmd:?} did not start: {other:?}; stderr: {}", err.trim()))
        }
    }
}

/// The Rust + tokio upload server (`tools/zcrx-upload`, on the `zcrx`
/// crate's `ZcrxStream`) with Debian's unmodified `curl` as the client, in
/// the other namespace: four parallel uploads of different sizes — IPv4 and
/// IPv6, with a length and chunked (`-T -` from a pipe), all with `Expect:
/// 100-continue`, which curl must see answered (`-v`). Each reply must be
/// `sha256sum`'s line for the file curl sent, each stored file must equal it byte for byte, and the server's
/// records must say every body byte came zero-copy (netdevsim DMA'd at
/// least that much).
fn curl_uploads_to_tokio_server(env: &Env) -> Outcome {
    with_upload_dirs(env, "zcrx-upload-test", curl_uploads)
}

/// Runs `f(env, zcrx-upload's path, src, dst)` with fresh directories
/// `src` (what clients send) and `dst` (the server's `--dir`) under a
/// temporary directory named after `name`, removed afterwards whatever
/// happened; its message becomes the test's diagnostic.
pub(crate) fn with_upload_dirs(
    env: &Env,
    name: &str,
    f: impl FnOnce(&Env, &std::path::Path, &std::path::Path, &std::path::Path) -> Result<String, String>,
) -> Outcome {
    tryo!(ensure_loaded(env));
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let server = exe.with_file_name("zcrx-upload");
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    let _ = std::fs::remove_dir_all(&dir);
    tryo!(std::fs::create_dir_all(&src).and_then(|_| std::fs::create_dir_all(&dst)).map_err(|e| e.to_string()));
    let r = f(env, &server, &src, &dst);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(msg) => {
            env.diag(&msg);
            Pass
        }
        Err(e) => Fail(e),
    }
}

/// zcrx-upload's line for the upload `name` among `lines` ("NAME: B
/// bytes, Z zero-copy, C copied, sha256 H"): `(bytes, zero-copy, copied)`.
pub(crate) fn upload_line(lines: &[String], name: &str) -> Result<(u64, u64, u64), String> {
    let line = lines.iter().find(|l| l.starts_with(&format!("{name}: "))).ok_or_else(|| format!("no server line for {name}: {lines:?}"))?;
    let w: Vec<&str> = line.split([' ', ',']).filter(|s| !s.is_empty()).collect();
    let num = |i: usize, key: &str| match (w.get(i).map(|s| s.parse::<u64>()), w.get(i + 1)) {
        (Some(Ok(v)), Some(k)) if *k == key => Some(v),
        _ => None,
    };
    match (num(1, "bytes"), num(3, "zero-copy"), num(5, "copied")) {
        (Some(b), Some(z), Some(c)) => Ok((b, z, c)),
        _ => Err(format!("unparsable server line {line:?}")),
    }
}

fn curl_uploads(env: &Env, server: &std::path::Path, src: &std::path::Path, dst: &std::path::Path) -> Result<String, String> {
    let big = env.bytes(16 << 20);
    // (name, size, IPv6, chunked)
    let files = [
        ("big.bin", big + 1, false, false),
        ("odd.bin", (3 << 20) + 12345, true, false),
        ("small.bin", 65533, false, false),
        ("chunked.bin", (2 << 20) + 7, true, true),
    ];
    for (k, &(name, size, _, _)) in files.iter().enumerate() {
        let mut buf = vec![0u8; size as usize];
        Pattern::new(40 + k as u64).fill(0, &mut buf);
        std::fs::write(src.join(name), &buf).map_err(|e| format!("write {name}: {e}"))?;
    }
    let n = Nsim::up(1)?;
    n.hds(true)?;
    let before = n.stats(1, 0)?;
    let port = 8081u16;
    let note = RecNote::new("upload")?;
    let log = DmaLog::start()?;
    let mut cmd = Command::new("ip");
    cmd.envs(note.env());
    cmd.args(["netns", "exec", NS_A]).arg(server).args(["--dev", &n.a, "--queue", "0", "--port", &port.to_string()]);
    // 64 MiB: more buffers than the four sockets' receive queues can hold
    // (tcp_rmem 4 MiB each), so a slow reader never starves the others.
    cmd.args(["--area", "64", "--requests", &files.len().to_string()]).arg("--dir").arg(dst);
    let (mut child, rx) = spawn_server(cmd, "listening")?;
    let curls: Vec<_> = files
        .iter()
        .map(|&(name, _, v6, chunked)| {
            let host = if v6 { "[2001:db8::1]".to_string() } else { "192.0.2.1".to_string() };
            let mut c = Command::new("ip");
            // -v: the exchange on stderr, to see the 100 Continue; the
            // header on every upload (curl adds it by itself only to large
            // or unknown-length ones).
            c.args(["netns", "exec", NS_B, "curl", "-sS", "-v", "--fail", "--max-time", "900"]);
            c.args(["-H", "Expect: 100-continue"]);
            let path = src.join(name);
            if chunked {
                // From a pipe: curl does not know the length and sends chunks.
                c.args(["-T", "-", &format!("http://{host}:{port}/{name}")]);
                c.stdin(std::fs::File::open(&path).map_err(|e| e.to_string())?);
            } else {
                c.arg("-T").arg(&path).arg(format!("http://{host}:{port}/"));
            }
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| format!("spawn curl: {e}"))
        })
        .collect::<Result<_, String>>()?;
    let outs: Vec<_> = curls.into_iter().map(|c| c.wait_with_output()).collect();
    // The server exits after the uploads; its last line is the total.
    let mut lines = Vec::new();
    let total = loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) if l.starts_with("total:") => break Some(l),
            Ok(l) => lines.push(l),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let _ = child.wait();
    let (mut zc, mut copied, mut all) = (0u64, 0u64, 0u64);
    for (&(name, size, v6, chunked), out) in files.iter().zip(outs) {
        let out = out.map_err(|e| format!("curl {name}: {e}"))?;
        let reply = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "curl {name}: {}: {} {}; server stderr: {}",
                out.status,
                reply.trim(),
                String::from_utf8_lossy(&out.stderr).trim(),
                err.trim()
            ));
        }
        let verbose = String::from_utf8_lossy(&out.stderr);
        if !verbose.contains("> Expect: 100-continue") || !verbose.contains("< HTTP/1.1 100 Continue") {
            return Err(format!("{name}: curl sent no Expect: 100-continue or got no 100 Continue:\n{verbose}"));
        }
        let sum = Command::new("sha256sum").arg(src.join(name)).output().map_err(|e| format!("sha256sum: {e}"))?;
        let want = String::from_utf8_lossy(&sum.stdout).split_whitespace().next().unwrap_or("").to_string();
        if reply.trim() != format!("{want}  {name}") {
            return Err(format!("{name}: the server replied {:?}, sha256sum says {want}", reply.trim()));
        }
        let stored = std::fs::read(dst.join(name)).map_err(|e| format!("stored {name}: {e}"))?;
        let sent = std::fs::read(src.join(name)).map_err(|e| e.to_string())?;
        if stored != sent {
            return Err(format!("{name}: the stored file ({} bytes) differs from what curl sent ({size})", stored.len()));
        }
        let (b, z, c) = upload_line(&lines, name)?;
        if b != size || z + c != b {
            return Err(format!("{name}: {b} bytes, {z} zero-copy, {c} copied: expected {size} bytes = zero-copy + copied"));
        }
        let _ = (v6, chunked);
        zc += z;
        copied += c;
        all += b;
    }
    let total = total.ok_or_else(|| format!("the server did not finish: {lines:?}; stderr: {}", err.trim()))?;
    let d = n.stats(1, 0)?.since(&before);
    // Header split on one queue, a 64 MiB area: every body byte comes
    // zero-copy, and the device wrote at least that much.
    if copied != 0 || zc == 0 {
        return Err(format!("body bytes: {copied} copied, {zc} zero-copy: all must be zero-copy ({total})"));
    }
    if d.dma_bytes < zc {
        return Err(format!("netdevsim DMA'd {} B < {zc} body bytes the server says came zero-copy", d.dma_bytes));
    }
    // Every zero-copy record the server got (heads included: the total
    // line's zero-copy count), in a write netdevsim made.
    let zc_all = total
        .split(" bytes zero-copy")
        .next()
        .and_then(|t| t.rsplit(' ').next())
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| format!("unparsable total line {total:?}"))?;
    if zc_all < zc {
        return Err(format!("{total}: fewer zero-copy bytes than the bodies' {zc}"));
    }
    let device = log.check_process(0, zc_all, &note)?;
    drop(log);
    wait_idle(Duration::from_secs(30))?;
    Ok(format!(
        "curl -T to zcrx-upload (tokio): 4 uploads (IPv4, IPv6, chunked, Expect: 100-continue), replies = sha256sum, \
         files byte-exact; bodies {all} B in all: {zc} B zero-copy, {copied} B copied; netdevsim DMA'd {} B \
         into provider buffers; {device}",
        d.dma_bytes
    ))
}
