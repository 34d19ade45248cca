// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Lifetimes: every way a context, a binding or a device can go away while
//! in use. After each: the module's counters back to baseline, this
//! process's locked memory back, `rmmod` refused while anything is in use
//! and possible after, the queue carrying traffic again without us. The
//! kernel log is scanned for splats by the VM runner.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::{dev::page_size, kmod, Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, mib, rmmod_eventually, rmmod_refused, vm_pinned_kb, wait_idle, MODULE};
use crate::devlog::DmaLog;
use crate::net::{addr_a, in_netns, join, receive, receive_from, sender, sender_timeout, with_receiver, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[
    ("rmmod_at_every_stage", rmmod_at_every_stage),
    ("close_mid_stream_holding_buffers", close_mid_stream_holding_buffers),
    ("kill9_receiver_mid_stream", kill9_receiver_mid_stream),
    ("unbind_under_traffic", unbind_under_traffic),
    ("netdev_deleted_while_bound", netdev_deleted_while_bound),
];

/// A plain TCP stream on the pair (no provider involved): byte-exact, and
/// netdevsim DMA'd nothing for it.
pub fn plain_stream_ok(n: &Nsim, port: u16) -> Result<(), String> {
    let before = n.stats(1, 0)?;
    let pat = Arc::new(Pattern::new(99));
    let p2 = pat.clone();
    // Enough to see the queue carry traffic again; kept small because the
    // debug kernel moves IPv6 at about 1 MiB/s under TCG.
    let bytes = 2u64 << 20;
    let rx = in_netns(NS_A, move || {
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0u64;
        loop {
            let k = s.read(&mut buf).map_err(|e| format!("read: {e}"))?;
            if k == 0 {
                return Ok(off);
            }
            if let Some(bad) = p2.check(off, &buf[..k]) {
                return Err(format!("plain stream mismatch at {bad}"));
            }
            off += k as u64;
        }
    });
    join(sender(addr_a(true, port), bytes, pat, 0))?;
    let got = join(rx)?;
    let after = n.stats(1, 0)?;
    if got != bytes {
        return Err(format!("plain stream: {got} of {bytes} bytes"));
    }
    if after.dma_bytes != before.dma_bytes {
        return Err(format!("plain stream: netdevsim DMA'd {} bytes with no provider", after.dma_bytes - before.dma_bytes));
    }
    Ok(())
}

fn rmmod_at_every_stage(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let pat = Arc::new(Pattern::new(5));
    let p2 = pat.clone();
    let log = tryo!(DmaLog::start());
    // Each stage: rmmod must be refused.
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        rmmod_refused().map_err(|e| format!("context open: {e}"))?;
        z.register_area(1024 * page_size()).map_err(|e| e.to_string())?;
        rmmod_refused().map_err(|e| format!("area registered: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        rmmod_refused().map_err(|e| format!("bound: {e}"))?;
        let l = std::net::TcpListener::bind(("::", 7101)).map_err(|e| e.to_string())?;
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        let rx = receive(&mut z, &s, &p2, Some(4 << 20))?;
        if rx.bytes == 0 || rx.zc_bytes != rx.bytes {
            return Err(format!("bound: {} received, {} zero-copy: all must be", rx.bytes, rx.zc_bytes));
        }
        rmmod_refused().map_err(|e| format!("streaming: {e}"))?;
        z.unbind().map_err(|e| format!("unbind: {e}"))?;
        rmmod_refused().map_err(|e| format!("unbound, context open: {e}"))?;
        // The stream continues after unbind (as copies); finish it.
        let rest = receive_from(&mut z, &s, &p2, rx.bytes, None)?;
        Ok((rx.bytes + rest.bytes, rx.zc_bytes + rest.zc_bytes))
    });
    let bytes = env.bytes(16 << 20);
    let tx = sender(addr_a(true, 7101), bytes, pat, 0);
    let sent = join(tx);
    let (got, zc) = tryo!(join(h).map_err(|e| format!("receiver: {e}; sender: {:?}", sent.as_ref().err())));
    let sent = tryo!(sent);
    if sent != bytes || got != bytes {
        return Fail(format!("sent {sent}, received {got} of {bytes}"));
    }
    // The zero-copy records (before the unbind, and those in flight
    // after it) in writes netdevsim logged.
    env.diag(&tryo!(log.check(0, zc)));
    drop(log);
    // The context is closed; the old page pool may linger a second.
    tryo!(wait_idle(Duration::from_secs(10)));
    tryo!(rmmod_eventually(Duration::from_secs(10)));
    if kmod::is_loaded(MODULE) {
        return Fail("still loaded after rmmod".into());
    }
    env.diag(&format!(
        "rmmod refused with a context, an area, a binding, a stream, after unbind; succeeded after close ({} received)",
        mib(got)
    ));
    tryo!(plain_stream_ok(&n, 7102));
    tryo!(ensure_loaded(env));
    Pass
}

fn close_mid_stream_holding_buffers(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let pat = Arc::new(Pattern::new(6));
    let p2 = pat.clone();
    let h = in_netns(NS_A, move || {
        let base = vm_pinned_kb()?;
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(2048 * page_size()).map_err(|e| e.to_string())?;
        let charged = vm_pinned_kb()?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", 7103)).map_err(|e| e.to_string())?;
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        receive(&mut z, &s, &p2, Some(4 << 20))?;
        // Take more and keep it: buffers held by the user at close.
        let mut recs = vec![Rec::default(); 64];
        let got = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| e.to_string())?;
        let held = z.stats().map_err(|e| e.to_string())?.user_held;
        drop(z);
        drop(s);
        // The charge goes when the area does: after the old pool is gone,
        // which may wait for deferred skb frees (see kick_softirqs).
        let t0 = Instant::now();
        let mut kicked = Instant::now();
        while vm_pinned_kb()? != base && t0.elapsed() < Duration::from_secs(15) {
            if kicked.elapsed() > Duration::from_secs(2) {
                crate::common::kick_softirqs();
                kicked = Instant::now();
            }
            sleep(Duration::from_millis(100));
        }
        Ok((base, charged, vm_pinned_kb()?, got.records, held))
    });
    let _ = join(sender(addr_a(true, 7103), env.bytes(64 << 20), pat, 0));
    let (base, charged, after, recs, held) = tryo!(join(h));
    env.diag(&format!("VmPin {base} kB -> {charged} kB with the area -> {after} kB after close with {held} buffers held ({recs} records)"));
    if charged < base + 2048 * page_size() as u64 / 1024 {
        return Fail(format!("area not charged to locked memory: {base} -> {charged} kB"));
    }
    if after != base || held == 0 {
        return Fail(format!("VmPin {after} kB after close, expected {base}; held {held}"));
    }
    tryo!(wait_idle(Duration::from_secs(10)));
    tryo!(plain_stream_ok(&n, 7104));
    Pass
}

fn kill9_receiver_mid_stream(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let mut child = tryo!(crate::nc::spawn_nc(&n, 7105, 7));
    let pat = Arc::new(Pattern::new(7));
    let tx = sender(addr_a(true, 7105), 1 << 30, pat, 0);
    // Let it stream, then kill it with buffers in hand.
    let t0 = Instant::now();
    let before = tryo!(n.stats(1, 0)).dma_bytes;
    let first = env.bytes(8 << 20);
    while tryo!(n.stats(1, 0)).dma_bytes < before + first {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            return Fail("the stream did not start within 60 s".into());
        }
        sleep(Duration::from_millis(50));
    }
    tryo!(rmmod_refused());
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let st = tryo!(child.wait().map_err(|e| e.to_string()));
    let _ = join(tx); // the sender sees a reset: expected
    env.diag(&format!("receiver killed by signal ({st}) after {} DMA'd", mib(tryo!(n.stats(1, 0)).dma_bytes - before)));
    tryo!(wait_idle(Duration::from_secs(10)));
    tryo!(plain_stream_ok(&n, 7106));
    // And the queue takes a provider again.
    let pat = Arc::new(Pattern::new(8));
    let p2 = pat.clone();
    let log = tryo!(DmaLog::start());
    let rx = with_receiver(n.a_idx, 0, 8 << 20, 7107, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        receive(z, &s, &p2, None)
    });
    tryo!(join(sender(addr_a(true, 7107), env.bytes(8 << 20), pat, 0)));
    let rx = tryo!(join(rx));
    if rx.zc_bytes != rx.bytes {
        return Fail(format!("after the kill a new binding got only {} of {} zero-copy", rx.zc_bytes, rx.bytes));
    }
    env.diag(&tryo!(log.check(0, rx.zc_bytes)));
    drop(log);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

fn unbind_under_traffic(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let pat = Arc::new(Pattern::new(9));
    let p2 = pat.clone();
    let total_bytes = env.bytes(64 << 20);
    let first_part = total_bytes / 4;
    let log = tryo!(DmaLog::start());
    let rx = with_receiver(n.a_idx, 0, 16 << 20, 7108, true, move |z, l| {
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        let first = receive(z, &s, &p2, Some(first_part))?;
        z.unbind().map_err(|e| format!("unbind: {e}"))?;
        // The rest of the stream: what was in flight zero-copy, then copies.
        let rest = receive_from(z, &s, &p2, first.bytes, None)?;
        Ok((first, (first.bytes + rest.bytes, rest.zc_bytes, rest.copy_bytes)))
    });
    tryo!(join(sender(addr_a(true, 7108), total_bytes, pat, 0)));
    let (first, (total, zc_after, copy_after)) = tryo!(join(rx));
    env.diag(&format!(
        "before unbind {} ({} zero-copy); after: {} zero-copy (in flight), {} copied; {} in all, byte-exact",
        mib(first.bytes),
        mib(first.zc_bytes),
        mib(zc_after),
        mib(copy_after),
        mib(total)
    ));
    if total != total_bytes {
        return Fail(format!("received {total} bytes"));
    }
    if copy_after == 0 {
        return Fail("nothing was copied after unbind: was the queue really unbound?".into());
    }
    // Bound, header split on: nothing copied before the unbind; every
    // zero-copy record, before it and in flight after it, in a write
    // netdevsim logged.
    if first.zc_bytes != first.bytes {
        return Fail(format!("before unbind only {} of {} bytes zero-copy", first.zc_bytes, first.bytes));
    }
    env.diag(&tryo!(log.check(0, first.zc_bytes + zc_after)));
    drop(log);
    tryo!(wait_idle(Duration::from_secs(10)));
    tryo!(plain_stream_ok(&n, 7109));
    Pass
}

fn netdev_deleted_while_bound(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let pat = Arc::new(Pattern::new(10));
    let p2 = pat.clone();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (del_tx, del_rx) = std::sync::mpsc::channel::<()>();
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4096 * page_size()).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", 7110)).map_err(|e| e.to_string())?;
        let (s, _) = l.accept().map_err(|e| e.to_string())?;
        receive(&mut z, &s, &p2, Some(4 << 20))?;
        // Hold some buffers, then let the device go.
        let mut recs = vec![Rec::default(); 32];
        let _ = z.recv(s.as_raw_fd(), &mut recs, 0);
        let _ = go_tx.send(());
        let _ = del_rx.recv_timeout(Duration::from_secs(30));
        // The context still answers: UNBIND says the device is gone,
        // STATS works, and it may bind again: to the gone ifindex, that
        // finds no device.
        let unbind = z.unbind().err().and_then(|e| e.raw_os_error());
        let st = z.stats().map_err(|e| format!("stats after delete: {e}"))?;
        let rebind = z.bind(a_idx, 0, 0).err().and_then(|e| e.raw_os_error());
        Ok((unbind, rebind, st.user_held))
    });
    // The device goes mid-stream: the sender stalls, let it give up soon.
    let tx = sender_timeout(addr_a(true, 7110), 1 << 30, pat, 0, Duration::from_secs(3));
    if go_rx.recv_timeout(Duration::from_secs(120)).is_err() {
        return Fail(format!("receiver did not get going: {:?}", join(h).err()));
    }
    tryo!(n.delete(1));
    let _ = del_tx.send(());
    let _ = join(tx);
    let (unbind, rebind, held) = tryo!(join(h));
    env.diag(&format!("after the device went: UNBIND errno {unbind:?}, BIND errno {rebind:?}, {held} buffers held at close"));
    if unbind != Some(libc::ENODEV) {
        return Fail(format!("UNBIND after delete: {unbind:?}, expected ENODEV"));
    }
    if rebind != Some(libc::ENODEV) {
        return Fail(format!("BIND again after delete: {rebind:?}, expected ENODEV (no such device)"));
    }
    tryo!(wait_idle(Duration::from_secs(15)));
    drop(n);
    // A fresh pair works, zero-copy.
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    tryo!(plain_stream_ok(&n, 7111));
    Pass
}
