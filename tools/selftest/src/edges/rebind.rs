// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Binding again: after UNBIND on the same queue and another, on another
//! device, and with another area after UNREGISTER_AREA.

use super::*;

/// Re-register without reopening (`ZCRX_RS_IOC_UNREGISTER_AREA`, feature
/// bit in INFO): a 4 MiB area streams zero-copy with some buffers kept;
/// UNREGISTER answers EBUSY while bound and while the user holds buffers,
/// then (buffers back, the old pools drained) gives the area up: INFO shows
/// it gone and EINVAL for a second UNREGISTER or a BIND without an area.
/// An 8 MiB area registered on the same context then streams zero-copy.
pub(super) fn unregister_then_register_another_area(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let i0 = tryo!(info());
    if i0.features & u64::from(ZCRX_RS_FEATURE_UNREGISTER_AREA) == 0 {
        return Fail(format!("INFO features {:#x} lack ZCRX_RS_FEATURE_UNREGISTER_AREA", i0.features));
    }
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    let part = env.bytes(8 << 20);
    let pats = [Arc::new(Pattern::new(881)), Arc::new(Pattern::new(882))];
    let port = 7304;
    let p2 = pats.clone();
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let mut lines = Vec::new();
        let mut zc = 0u64;
        for (phase, area) in [(0usize, 4usize << 20), (1, 8 << 20)] {
            z.register_area(area).map_err(|e| format!("phase {phase}: register {}: {e}", mib(area as u64)))?;
            z.bind(a_idx, 0, 0).map_err(|e| format!("phase {phase}: bind: {e}"))?;
            let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            // Keep the first records out.
            let mut recs = vec![Rec::default(); 8];
            let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("phase {phase}: RECV: {e}"))?;
            let mut got = 0u64;
            for r in &recs[..first.records] {
                if let Some(bad) = p2[phase].check(got, z.data(r)) {
                    return Err(format!("phase {phase}: payload mismatch at {bad}"));
                }
                if r.flags & ZCRX_RS_REC_COPY == 0 {
                    crate::devlog::note(z.data(r))?;
                }
                got += u64::from(r.len);
            }
            let held = recs[..first.records].to_vec();
            let rx = receive_from(&mut z, &s, &p2[phase], got, None)?;
            // Every byte zero-copy, the records kept out too.
            let first_copied = recs[..first.records].iter().any(|r| r.flags & ZCRX_RS_REC_COPY != 0);
            if got + rx.bytes != part || rx.zc_bytes != rx.bytes || first_copied {
                return Err(format!(
                    "phase {phase}: {} of {part} bytes, {} of the last {} zero-copy, first records copied: {first_copied}",
                    got + rx.bytes,
                    rx.zc_bytes,
                    rx.bytes
                ));
            }
            zc += rx.zc_bytes + first.bytes;
            lines.push(format!("area {}: {} byte-exact, {} zero-copy", mib(area as u64), mib(part), mib(rx.zc_bytes + first.bytes)));
            drop(s);
            if phase == 1 {
                z.refill(&held).map_err(|e| e.to_string())?;
                break;
            }
            let busy = |what: &str, r: std::io::Result<()>| match r {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(()),
                other => Err(format!("UNREGISTER {what}: {other:?}, expected EBUSY")),
            };
            busy("while bound", z.unregister_area())?;
            z.unbind().map_err(|e| format!("unbind: {e}"))?;
            busy(&format!("with {} records held", held.len()), z.unregister_area())?;
            z.refill(&held).map_err(|e| e.to_string())?;
            // The old pools give their buffers back as they go (a bound, not
            // a deadline).
            let t0 = std::time::Instant::now();
            let mut tries = 0;
            loop {
                tries += 1;
                match z.unregister_area() {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < Duration::from_secs(60) => {
                        kick_softirqs();
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(format!("UNREGISTER after UNBIND and refill: {e} ({tries} tries)")),
                }
            }
            let mut raw = Zcrx::open().map_err(|e| e.to_string())?;
            let again = z.unregister_area();
            if again.as_ref().err().and_then(|e| e.raw_os_error()) != Some(libc::EINVAL) {
                return Err(format!("a second UNREGISTER: {again:?}, expected EINVAL"));
            }
            if raw.bind(a_idx, 0, 0).err().and_then(|e| e.raw_os_error()) != Some(libc::EINVAL) {
                return Err("BIND without an area did not answer EINVAL".into());
            }
            drop(raw);
            lines.push(format!("UNREGISTER: EBUSY while bound and while holding, ok after refill ({tries} tries)"));
        }
        Ok((lines, zc))
    });
    let tx = in_netns(NS_B, move || {
        for pat in &pats {
            let mut s = connect(addr_a(true, port), Duration::from_secs(60))?;
            let mut go = [0u8];
            std::io::Read::read_exact(&mut s, &mut go).map_err(|e| format!("go: {e}"))?;
            let mut off = 0;
            while off < part {
                let k = ((part - off) as usize).min(256 << 10);
                s.write_all(pat.slice(off, k)).map_err(|e| format!("send: {e}"))?;
                off += k as u64;
            }
        }
        Ok(())
    });
    let sent = join(tx);
    let (lines, zc) = tryo!(join(rx));
    tryo!(sent);
    env.diag(&lines.join("; "));
    // Both areas' records in writes netdevsim logged (the second area
    // may reuse the first one's pages: each buffer's writes in order).
    env.diag(&tryo!(log.check(0, zc)));
    drop(log);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}

/// UNBIND, then BIND again — the same queue and the other one — with
/// buffers still held from the first binding: every stream byte-exact and
/// all of it zero-copy on each binding (each record in a write netdevsim
/// logged on one of the two queues, each queue's logged bytes equal to its
/// counter), the held buffers go back through the new ring, and everything
/// is released at the end.
pub(super) fn unbind_then_bind_again(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    // Two queues; each phase has its own connection and port, which an
    // ntuple rule steers to the queue bound in that phase. (XPS alone, the
    // sender pinned to CPU q, put 0.2-0.5 MiB of each 8 MiB phase on the
    // other queue, where it could only be copied: a retransmission or an
    // ACK-clocked send from another CPU's softirq takes its tx queue.)
    let n = tryo!(Nsim::up(2));
    tryo!(n.hds(true));
    let a_idx = n.a_idx;
    const PHASES: [(u32, u32, u16); 3] = [(0, 0, 7302), (1, 0, 7310), (2, 1, 7311)];
    for (_, q, port) in PHASES {
        let (q, port) = (q.to_string(), port.to_string());
        tryo!(crate::net::ethtool_in(NS_A, &["-N", &n.a, "flow-type", "tcp6", "dst-port", &port, "action", &q]));
    }
    let before = [tryo!(n.stats(1, 0)), tryo!(n.stats(1, 1))];
    let log = tryo!(crate::devlog::DmaLog::start());
    let part = env.bytes(8 << 20);
    let pat = Arc::new(Pattern::new(777));
    let p2 = pat.clone();
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(16 << 20).map_err(|e| e.to_string())?;
        let ls = PHASES
            .iter()
            .map(|p| std::net::TcpListener::bind(("::", p.2)).map_err(|e| format!("listen on {}: {e}", p.2)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut lines = Vec::new();
        let mut held: Vec<Rec> = Vec::new();
        let mut zc = 0u64;
        // Phase p: bind queue q, accept the connection to its port (steered
        // to q), receive `part`.
        for ((phase, q, _), l) in PHASES.into_iter().zip(&ls) {
            z.bind(a_idx, q, 0).map_err(|e| format!("phase {phase}: BIND queue {q}: {e}"))?;
            if !held.is_empty() {
                // Buffers of the earlier binding go back through this ring.
                z.refill(&held).map_err(|e| format!("refill held: {e}"))?;
                held.clear();
            }
            let (mut s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
            // Bound and ready: tell the sender to start.
            s.write_all(b"g").map_err(|e| format!("go: {e}"))?;
            let before = z.stats().map_err(|e| e.to_string())?;
            // Keep a few buffers of this phase out until the next binding.
            let mut recs = vec![Rec::default(); 8];
            let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("phase {phase}: first RECV: {e}"))?;
            let mut got = 0u64;
            for r in &recs[..first.records] {
                if let Some(bad) = p2.check(got, z.data(r)) {
                    return Err(format!("phase {phase}: payload mismatch at {bad}"));
                }
                if r.flags & ZCRX_RS_REC_COPY != 0 {
                    return Err(format!("phase {phase} (queue {q}): first records copied: all must be zero-copy"));
                }
                crate::devlog::note(z.data(r))?;
                got += u64::from(r.len);
            }
            held.extend_from_slice(&recs[..first.records]);
            let rx = receive_from(&mut z, &s, &p2, got, None)?;
            if got + rx.bytes != part {
                return Err(format!("phase {phase}: received {} of {part} bytes", got + rx.bytes));
            }
            let st = z.stats().map_err(|e| e.to_string())?;
            // The flow steered to the bound queue, header split on: nothing
            // may be copied.
            if rx.copy_bytes != 0 {
                return Err(format!("phase {phase} (queue {q}): {} bytes of {} copied: all must be zero-copy", rx.copy_bytes, mib(part)));
            }
            zc += got + rx.zc_bytes;
            lines.push(format!(
                "phase {phase}: queue {q}, {} byte-exact, all zero-copy (records); STATS zc {}, copied {}, pool ran \
                 dry {} times",
                mib(part),
                mib(st.zc_bytes.saturating_sub(before.zc_bytes)),
                mib(st.copy_bytes.saturating_sub(before.copy_bytes)),
                st.alloc_fail.saturating_sub(before.alloc_fail)
            ));
            drop(s);
            z.unbind().map_err(|e| format!("phase {phase}: UNBIND: {e}"))?;
        }
        // Give the last phase's held buffers back: with nothing bound the
        // ring is drained by the next copy RECV or at close; close now.
        let held_n = held.len();
        drop(z);
        lines.push(format!("{held_n} buffers still held at close, taken back by the close"));
        Ok((lines, zc))
    });
    let tx = in_netns(NS_B, move || {
        for (phase, q, port) in PHASES {
            // Send from CPU q too (XPS puts most of the flow on tx queue
            // q, netdevsim's peer rx queue q); the rule steers the rest.
            zcrx::sys::pin_to_cpu(q as usize).map_err(|e| format!("pin to CPU {q}: {e}"))?;
            let mut c = connect(addr_a(true, port), Duration::from_secs(60))?;
            let mut go = [0u8; 1];
            std::io::Read::read_exact(&mut c, &mut go).map_err(|e| format!("phase {phase}: waiting for go: {e}"))?;
            let mut off = 0u64;
            let mut buf = vec![0u8; 64 << 10];
            while off < part {
                let k = (part - off).min(buf.len() as u64) as usize;
                pat.fill(off, &mut buf[..k]);
                c.write_all(&buf[..k]).map_err(|e| format!("send: {e}"))?;
                off += k as u64;
            }
            c.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            // Wait for the receiver to close before the next phase's bind.
            let mut b = [0u8; 1];
            let _ = std::io::Read::read(&mut c, &mut b);
        }
        Ok::<_, String>(())
    });
    let sent = join(tx);
    let (lines, zc) = tryo!(join(rx));
    tryo!(sent);
    for l in lines {
        env.diag(&l);
    }
    for q in 0..2 {
        let a = tryo!(n.stats(1, q));
        env.diag(&format!(
            "netdevsim rx queue {q}: DMA'd {} in {} packets, {} packets ({}) unsplit",
            mib(a.dma_bytes - before[q as usize].dma_bytes),
            a.dma_packets - before[q as usize].dma_packets,
            a.fallback_packets - before[q as usize].fallback_packets,
            mib(a.fallback_bytes - before[q as usize].fallback_bytes)
        ));
    }
    // Every zero-copy piece in a write netdevsim made on the queue bound
    // at the time (one area: either queue's writes may match).
    env.diag(&tryo!(log.check_queues(&[0, 1], zc)));
    drop(log);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}

/// BIND `z` to queue 0 of `ifindex` in namespace `ns`, retrying while the
/// area is still mapped for the device of an earlier binding whose pool is
/// being torn down (EBUSY); the number of attempts.
fn bind_when_free(z: Zcrx, ns: &'static str, ifindex: u32) -> Result<(Zcrx, u32), String> {
    join(in_netns(ns, move || {
        let mut z = z;
        let t0 = std::time::Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match z.bind(ifindex, 0, 0) {
                Ok(()) => return Ok((z, tries)),
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(format!("BIND in {ns} after {tries} tries: {e}")),
            }
        }
    }))
}

/// After UNBIND the area can serve another device: the earlier binding's
/// DMA share is given back at UNBIND (with the refill ring drained), and
/// the mapping goes once its last pool is gone. Device A with traffic (a
/// few buffers held across UNBIND and given back through the old ring
/// after it), then device B, then A again, one context and one area.
pub(super) fn bind_other_device_after_unbind(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let (a_idx, b_idx) = (n.a_idx, n.b_idx);
    tryo!(join(in_netns(NS_B, move || { zcrx::ethtool::set_header_split(b_idx, true).map_err(|e| format!("header split on B: {e}")) })));
    let bytes = 1u64 << 20;
    let pat = Arc::new(Pattern::new(31337));
    let p2 = pat.clone();
    let port = 7307;
    let log = tryo!(crate::devlog::DmaLog::start());
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| e.to_string())?;
        z.register_area(4 << 20).map_err(|e| e.to_string())?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("BIND A: {e}"))?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        // Hold the first records' buffers across UNBIND.
        let mut recs = vec![Rec::default(); 8];
        let first = z.recv(s.as_raw_fd(), &mut recs, 0).map_err(|e| format!("first RECV: {e}"))?;
        let mut off = 0u64;
        for r in &recs[..first.records] {
            if let Some(bad) = p2.check(off, z.data(r)) {
                return Err(format!("payload mismatch at {bad}"));
            }
            if r.flags & ZCRX_RS_REC_COPY == 0 {
                crate::devlog::note(z.data(r))?;
            }
            off += u64::from(r.len);
        }
        let mut got = receive_from(&mut z, &s, &p2, off, None)?;
        // One queue, bound, header split on: every byte zero-copy, the
        // records held across UNBIND too.
        let first_copied = recs[..first.records].iter().any(|r| r.flags & ZCRX_RS_REC_COPY != 0);
        if got.copy_bytes != 0 || first_copied {
            return Err(format!(
                "device A: {} bytes copied after the first records (which were copied: {first_copied}): all must be zero-copy",
                got.copy_bytes
            ));
        }
        got.bytes += off;
        got.zc_bytes += off;
        drop(s);
        z.unbind().map_err(|e| format!("UNBIND A: {e}"))?;
        // Give them back through the old ring: the next BIND takes them.
        z.refill(&recs[..first.records]).map_err(|e| format!("refill after UNBIND: {e}"))?;
        Ok((z, got))
    });
    let tx = crate::net::sender(addr_a(true, port), bytes, pat, 0);
    let sent = join(tx);
    let (z, got) = tryo!(join(rx));
    let sent = tryo!(sent);
    if got.bytes != sent || got.zc_bytes != got.bytes {
        return Fail(format!("device A: received {} of {sent} bytes, {} zero-copy", got.bytes, got.zc_bytes));
    }
    // Every record on A in a write netdevsim 1 logged.
    env.diag(&tryo!(log.check(0, got.zc_bytes)));
    drop(log);
    let (z, tries_b) = tryo!(bind_when_free(z, NS_B, b_idx));
    tryo!(join(in_netns(NS_B, move || {
        let z = z;
        let r = z.unbind().map_err(|e| format!("UNBIND B: {e}"));
        r.map(|()| z)
    }))
    .and_then(|z| bind_when_free(z, NS_A, a_idx))
    .map(|(z, tries_a)| {
        env.diag(&format!(
            "{} byte-exact on A ({} zero-copy), unbound; bound B after {tries_b} tries, unbound; A again after \
             {tries_a} tries",
            mib(got.bytes),
            mib(got.zc_bytes)
        ));
        drop(z);
    }));
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
