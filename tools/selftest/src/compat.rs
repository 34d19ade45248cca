// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! The uAPI keeps its promise to programs written against the first
//! released header: `tools/uapi-compat/v1-recv.c`, written against 1.0's
//! `<linux/zcrx_rs.h>` (reserved fields zeroed by name, one refill entry
//! per record), built against today's header by `scripts/uapi-compat.sh`
//! (which also checks every 1.0 name's offset, size and value on the host),
//! receives a stream on today's module zero-copy and byte-exact.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::Pattern;

use crate::clients::spawn_server;
use crate::common::{ensure_loaded, wait_idle};
use crate::devlog::{DmaLog, RecNote};
use crate::net::{addr_a, join, sender, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("uapi_v1_program_receives_zero_copy", uapi_v1_program_receives_zero_copy)];

/// The 1.0 receiver on one header-split queue with a 64 MiB area: every
/// byte it wrote to its file must be the sender's, all of it zero-copy by
/// its records (and by the module's STATS, which it prints), every
/// zero-copy piece in a write netdevsim made.
fn uapi_v1_program_receives_zero_copy(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let exe = tryo!(std::env::current_exe().map_err(|e| e.to_string()));
    let prog = exe.with_file_name("zcrx-uapi-v1-recv");
    if !prog.exists() {
        return Fail(format!("{} not built (make tools)", prog.display()));
    }
    let out = std::env::temp_dir().join(format!("zcrx-uapi-v1-{}", std::process::id()));
    let r = run_v1(env, &prog, &out);
    let _ = std::fs::remove_file(&out);
    let d = tryo!(r);
    env.diag(&d);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}

fn run_v1(env: &Env, prog: &std::path::Path, out: &std::path::Path) -> Result<String, String> {
    let n = Nsim::up(1)?;
    n.hds(true)?;
    let before = n.stats(1, 0)?;
    let port = 7123u16;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", NS_A]).arg(prog);
    cmd.args([n.a.as_str(), "0", &port.to_string(), "64"]).arg(out);
    let note = RecNote::new("uapi-v1")?;
    cmd.envs(note.env());
    let log = DmaLog::start()?;
    let (mut child, rx) = spawn_server(cmd, "listening")?;
    // Not a multiple of the page: the last record is a partial buffer.
    let len = env.bytes(16 << 20) + 1234;
    let pat = Arc::new(Pattern::new(0x0100));
    let sent = join(sender(addr_a(false, port), len, pat.clone(), 1));
    let line = rx.recv_timeout(Duration::from_secs(120));
    if line.is_err() {
        // No summary: do not wait for ever on a receiver that hangs.
        let _ = child.kill();
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let sent = sent?;
    if sent != len {
        return Err(format!("sent {sent} of {len}"));
    }
    let line = line.map_err(|_| format!("no summary from the 1.0 program ({st}); stderr: {}", err.trim()))?;
    if !st.success() {
        return Err(format!("the 1.0 program: {st}; stderr: {}", err.trim()));
    }
    // bytes B zero-copy Z copied C records R stats-zc Y stats-copy Y
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize, key: &str| -> Result<u64, String> {
        match (w.get(i - 1), w.get(i).map(|v| v.parse::<u64>())) {
            (Some(k), Some(Ok(v))) if *k == key => Ok(v),
            _ => Err(format!("unexpected summary: {line}")),
        }
    };
    let (bytes, zc, copied, records) = (num(1, "bytes")?, num(3, "zero-copy")?, num(5, "copied")?, num(7, "records")?);
    let (stats_zc, stats_copy) = (num(9, "stats-zc")?, num(11, "stats-copy")?);
    let data = std::fs::read(out).map_err(|e| format!("{}: {e}", out.display()))?;
    if bytes != len || data.len() as u64 != len || zc + copied != bytes {
        return Err(format!("{line}; file {} B; sent {len} B", data.len()));
    }
    if let Some(off) = pat.check(0, &data) {
        return Err(format!("byte {off} of {len} differs from what was sent"));
    }
    // One queue with header split, an area far larger than the socket:
    // nothing may be copied; the module's own counters must agree.
    if copied != 0 || stats_zc != zc || stats_copy != 0 {
        return Err(format!("all {len} B must be zero-copy, by the records and STATS alike: {line}"));
    }
    let d = n.stats(1, 0)?.since(&before);
    if d.dma_bytes < zc {
        return Err(format!("netdevsim DMA'd {} B < {zc} B the records say came zero-copy", d.dma_bytes));
    }
    let dev = log.check_process(0, zc, &note)?;
    Ok(format!(
        "1.0 program on today's header and module: {len} B byte-exact in {records} records, {zc} B zero-copy, \
         {copied} B copied; netdevsim DMA'd {} B; {dev}",
        d.dma_bytes
    ))
}
