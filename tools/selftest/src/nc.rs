// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-nc as its users run it: one connection after another, both
//! families, large buffers, peers that reset or go quiet, and the
//! command-line forms nc users type.

use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::Pattern;

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::{DmaLog, RecNote};
use crate::net::{addr_a, connect, in_netns, join, sender, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("nc_keeps_listening_v6_then_v4", nc_keeps_listening_v6_then_v4),
    ("nc_keeps_listening_through_resets", nc_keeps_listening_through_resets),
    ("nc_large_buffers", nc_large_buffers),
    ("nc_idle_peer_and_local_address", nc_idle_peer_and_local_address),
];

pub(crate) fn spawn_nc(n: &Nsim, port: u16, seed: u64) -> Result<Child, String> {
    spawn_nc_with(n, port, seed, &[], None)
}

/// zcrx-nc on queue 0, checking pattern `seed`; with `note`, it notes its
/// zero-copy records for the device check.
fn spawn_nc_with(n: &Nsim, port: u16, seed: u64, extra: &[&str], note: Option<&RecNote>) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let nc = exe.with_file_name("zcrx-nc");
    let mut cmd = Command::new("ip");
    if let Some(note) = note {
        cmd.envs(note.env());
    }
    cmd.args(["netns", "exec", NS_A])
        .arg(&nc)
        .args(["--dev", &n.a, "--queue", "0", "--port", &port.to_string(), "--check", &seed.to_string(), "--area", "8"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", nc.display()))
}

/// zcrx-nc's next JSON line (one per connection) from `rx`, its stderr;
/// None if none comes within `limit` (a bound for a hang, not a deadline).
fn next_json_line(rx: &Receiver<String>, limit: Duration) -> Option<String> {
    loop {
        match rx.recv_timeout(limit) {
            Ok(l) if l.starts_with('{') => return Some(l),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
}

/// The number member `k` of zcrx-nc's JSON line `l`.
fn json_u64(l: &str, k: &str) -> Option<u64> {
    l.split(&format!("\"{k}\":")).nth(1)?.split([',', '}']).next()?.parse().ok()
}

/// zcrx-nc as a user runs it: `-k` keeps one context bound across
/// connections, `[::]` takes IPv6 and IPv4 peers, `--json` reports each
/// connection on its own line, `-v` draws a progress line. Two streams, one
/// per family, each checked byte for byte by zcrx-nc (`--check`) and counted
/// in its JSON: all zero-copy, and no more than netdevsim DMA'd.
fn nc_keeps_listening_v6_then_v4(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let before = tryo!(n.stats(1, 0));
    let port = 7107;
    let note = tryo!(RecNote::new("nc-k"));
    let log = tryo!(DmaLog::start());
    let mut child = tryo!(spawn_nc_with(&n, port, 11, &["-k", "-v", "--json"], Some(&note)));
    let rx = crate::clients::lines_of(child.stderr.take().expect("piped"));
    let bytes = env.bytes(16 << 20);
    let mut out = Vec::new();
    let mut fail = None;
    for v6 in [true, false] {
        let sent = join(sender(addr_a(v6, port), bytes, Arc::new(Pattern::new(11)), 0));
        if let Err(e) = sent.and_then(|s| if s == bytes { Ok(()) } else { Err(format!("sent {s} of {bytes}")) }) {
            fail = Some(format!("{} sender: {e}", if v6 { "IPv6" } else { "IPv4" }));
            break;
        }
        match next_json_line(&rx, Duration::from_secs(120)) {
            Some(l) => out.push((v6, l)),
            None => {
                fail = Some(format!("no JSON line from zcrx-nc for the {} connection", if v6 { "IPv6" } else { "IPv4" }));
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    if let Some(f) = fail {
        return Fail(f);
    }
    let mut diag = Vec::new();
    let mut zc_all = 0;
    for (v6, l) in &out {
        let (Some(b), Some(zc)) = (json_u64(l, "bytes"), json_u64(l, "zero_copy_bytes")) else {
            return Fail(format!("unparsable JSON line: {l}"));
        };
        let peer_ok = if *v6 { l.contains("[2001:db8::2]") } else { l.contains("192.0.2.2") };
        // Header split on the one queue: every byte zero-copy.
        if b != bytes || !peer_ok || zc != bytes {
            return Fail(format!("expected {bytes} bytes from the {} peer, all zero-copy, got: {l}", if *v6 { "IPv6" } else { "IPv4" }));
        }
        zc_all += zc;
        diag.push(format!("{}: {} byte-exact, {} zero-copy", if *v6 { "IPv6" } else { "IPv4" }, mib(b), mib(zc)));
    }
    let dma = tryo!(n.stats(1, 0)).since(&before).dma_bytes;
    env.diag(&format!("zcrx-nc -k --json: {}; netdevsim DMA'd {dma} B into provider buffers", diag.join("; ")));
    if dma < zc_all {
        return Fail(format!("netdevsim DMA'd {dma} B < {zc_all} B zcrx-nc says came zero-copy"));
    }
    // Every zero-copy record zcrx-nc got, in a write netdevsim made.
    env.diag(&tryo!(log.check_process(0, zc_all, &note)));
    Pass
}

/// `zcrx-nc --buf-size 32k --json` on a header-split netdevsim queue (huge
/// pages reserved): an IPv4 stream arrives byte-exact (zcrx-nc checks the
/// pattern), all zero-copy, and the JSON line says 32768.
fn nc_large_buffers(env: &Env) -> Outcome {
    use std::io::Read;
    tryo!(ensure_loaded(env));
    // `--area 8`: 8 MiB of huge pages.
    let _huge = tryo!(crate::bigbuf::HugePages::reserve((8 << 20) / zcrx::dev::huge_page_size() as u64 + 1));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let before = tryo!(n.stats(1, 0));
    let port = 7108;
    let note = tryo!(RecNote::new("nc-32k"));
    let log = tryo!(DmaLog::start());
    let mut child = tryo!(spawn_nc_with(&n, port, 12, &["--buf-size", "32k", "--json"], Some(&note)));
    let bytes = env.bytes(64 << 20);
    let sent = join(sender(addr_a(false, port), bytes, Arc::new(Pattern::new(12)), 0));
    let mut err = String::new();
    let _ = child.stderr.take().expect("piped").read_to_string(&mut err);
    let status = child.wait();
    let line = err.lines().find(|l| l.starts_with('{')).unwrap_or_default().to_string();
    let field = |k: &str| json_u64(&line, k);
    env.diag(&format!("zcrx-nc --buf-size 32k: {line}"));
    if sent != Ok(bytes) || !status.as_ref().is_ok_and(|s| s.success()) {
        return Fail(format!("sent {sent:?}, zcrx-nc {status:?}: {err}"));
    }
    if field("bytes") != Some(bytes) || field("zero_copy_bytes") != Some(bytes) || field("buf_size") != Some(32768) {
        return Fail(format!("expected {bytes} bytes, all zero-copy, buf_size 32768: {line}"));
    }
    let dma = tryo!(n.stats(1, 0)).since(&before).dma_bytes;
    if dma < bytes {
        return Fail(format!("netdevsim DMA'd {dma} B < {bytes} B zcrx-nc says came zero-copy"));
    }
    env.diag(&tryo!(log.check_process(0, bytes, &note)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// `zcrx-nc -k` serves one connection after another; a peer that resets
/// mid-stream ends its own connection, not the listener. 100 peers each
/// send the start of the pattern (1 to 256 KiB) and reset (`SO_LINGER`
/// 0); then one sends 4 MiB to the end. Each reset connection gets its
/// JSON line with an `error`, the last one its bytes, all zero-copy and
/// checked against the pattern (`--check`), and zcrx-nc is still running.
fn nc_keeps_listening_through_resets(env: &Env) -> Outcome {
    use std::io::Write;
    const RESETS: usize = 100;
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let port = 7119;
    let seed = 19;
    let mut child = tryo!(spawn_nc_with(&n, port, seed, &["-k", "--json"], None));
    let rx = crate::clients::lines_of(child.stderr.take().expect("piped"));
    let pat = Arc::new(Pattern::new(seed));
    let next_line = || next_json_line(&rx, Duration::from_secs(60));
    let mut lines = Vec::new();
    let mut k = 12345u64;
    let mut sent = Ok(0);
    for i in 0..RESETS {
        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = 1 + (k >> 33) as usize % (256 << 10);
        let p2 = pat.clone();
        let r = join(in_netns(NS_B, move || {
            let mut s = connect(addr_a(i % 2 == 0, port), Duration::from_secs(60))?;
            s.write_all(p2.slice(0, len)).map_err(|e| format!("reset peer {i}: {e}"))?;
            zcrx::sys::set_linger_abort(&s).map_err(|e| format!("SO_LINGER: {e}"))
        }));
        if let Err(e) = r {
            sent = Err(e);
            break;
        }
        match next_line() {
            Some(l) => lines.push(l),
            None => break,
        }
    }
    let bytes = 4u64 << 20;
    if lines.len() == RESETS {
        sent = join(sender(addr_a(true, port), bytes, pat, 0));
        if let Some(l) = next_line() {
            lines.push(l);
        }
    }
    let alive = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    let sent = tryo!(sent);
    if !alive {
        return Fail(format!("zcrx-nc -k exited after {} connections: {:?}", lines.len(), lines.last()));
    }
    if lines.len() != RESETS + 1 || sent != bytes {
        return Fail(format!(
            "{} JSON lines for {} connections (sent {sent} of {bytes} on the last): {:?}",
            lines.len(),
            RESETS + 1,
            lines.last()
        ));
    }
    let errors = lines[..RESETS].iter().filter(|l| l.contains("\"error\":")).count();
    let last = &lines[RESETS];
    let field = |k: &str| json_u64(last, k);
    if last.contains("\"error\":") || field("bytes") != Some(bytes) || field("zero_copy_bytes") != Some(bytes) {
        return Fail(format!("the last connection: {last} (expected {bytes} bytes, all zero-copy, no error)"));
    }
    // A reset that comes after zcrx-nc read everything may end the
    // connection as an end of stream: most must have been seen as errors.
    if errors < RESETS / 2 {
        return Fail(format!("only {errors} of {RESETS} reset connections ended with an error: {:?}", &lines[..3]));
    }
    env.diag(&format!(
        "zcrx-nc -k: {RESETS} peers reset mid-stream ({errors} reported with an error, the rest as an end), then {} \
         byte-exact and zero-copy; still listening",
        mib(bytes)
    ));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// zcrx-nc with nc's forms: `-l -k -w 1 --json ... 192.0.2.1 PORT` (the
/// address and the port last, as `nc -l` takes them). A peer that sends
/// 1 MB and then nothing, keeping the connection open, is closed after
/// about a second of silence with an error that says so, with its bytes
/// counted (checked by zcrx-nc against the pattern, all zero-copy); the
/// next peer's 4 MiB then arrive whole (`-k` goes on). An IPv6 peer is
/// refused: zcrx-nc listens on the IPv4 address alone.
fn nc_idle_peer_and_local_address(env: &Env) -> Outcome {
    use std::io::{Read, Write};
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let port = 7121u16;
    let seed = 21;
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let nc = exe.with_file_name("zcrx-nc");
    let mut child = tryo!(Command::new("ip")
        .args(["netns", "exec", NS_A])
        .arg(&nc)
        .args(["-l", "-k", "-w", "1", "--json", "--dev", &n.a, "--queue", "0", "--area", "8"])
        .args(["--check", &seed.to_string(), "192.0.2.1", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", nc.display())));
    let rx = crate::clients::lines_of(child.stderr.take().expect("piped"));
    let next_line = || next_json_line(&rx, Duration::from_secs(60));
    let pat = Arc::new(Pattern::new(seed));
    // (one write of the pattern: at most a period, just under 1 MiB)
    let quiet = 1_000_000u64;
    let p2 = pat.clone();
    // the quiet peer: 1 MB, then silence until zcrx-nc closes (EOF)
    let r = join(in_netns(NS_B, move || {
        let mut s = connect(addr_a(false, port), Duration::from_secs(60))?;
        s.write_all(p2.slice(0, quiet as usize)).map_err(|e| format!("quiet peer: {e}"))?;
        let t0 = std::time::Instant::now();
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => Ok(t0.elapsed()),
            r => Err(format!("quiet peer: {r:?} where zcrx-nc should have closed")),
        }
    }));
    let idle_line = next_line();
    // one try (net::connect would retry a refusal for 10 s)
    let v6 = join(in_netns(NS_B, move || match std::net::TcpStream::connect_timeout(&addr_a(true, port), Duration::from_secs(5)) {
        Ok(_) => Err("an IPv6 peer got in".to_string()),
        Err(e) => Ok(e.to_string()),
    }));
    let bytes = 4u64 << 20;
    let sent = join(sender(addr_a(false, port), bytes, pat, 0));
    let last_line = next_line();
    let alive = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    let closed_after = tryo!(r);
    let v6 = tryo!(v6);
    let sent = tryo!(sent);
    let (Some(idle), Some(last)) = (idle_line, last_line) else {
        return Fail("zcrx-nc wrote no JSON line for a connection".into());
    };
    env.diag(&format!(
        "quiet peer closed by zcrx-nc after {:.1} s of silence: {idle}; IPv6 peer: {v6}; next peer: {last}",
        closed_after.as_secs_f64()
    ));
    if !idle.contains("no data for 1 s (-w)")
        || json_u64(&idle, "bytes") != Some(quiet)
        || json_u64(&idle, "zero_copy_bytes") != Some(quiet)
    {
        return Fail(format!("the quiet peer's line: {idle} (expected {quiet} bytes, all zero-copy, and the idle error)"));
    }
    if !(Duration::from_millis(900)..Duration::from_secs(4)).contains(&closed_after) {
        return Fail(format!("the quiet peer was closed after {closed_after:?}, not after about 1 s of silence"));
    }
    if !alive
        || sent != bytes
        || last.contains("\"error\":")
        || json_u64(&last, "bytes") != Some(bytes)
        || json_u64(&last, "zero_copy_bytes") != Some(bytes)
    {
        return Fail(format!("after the quiet peer (zcrx-nc running: {alive}; sent {sent} of {bytes}): {last}"));
    }
    if !v6.contains("refused") {
        return Fail(format!("the IPv6 peer: {v6}, expected connection refused"));
    }
    env.diag(&format!("zcrx-nc -l -k -w 1 ... 192.0.2.1 {port}: {} + {} byte-exact and zero-copy", mib(quiet), mib(bytes)));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
