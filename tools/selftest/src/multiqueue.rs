// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! One context, several rx queues (`ZCRX_RS_BIND_ADD_QUEUE`): a server's
//! flows spread over the queues by RSS all arrive zero-copy into one area,
//! and their buffers go back through one refill ring; every record lies
//! in a write netdevsim logged (`devlog`).

use std::net::{Ipv6Addr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::{Context, Pattern};

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::net::{self, addr_a, flow_seed, flow_sender, in_netns, join, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("one_context_four_queues_rss", one_context_four_queues_rss)];

/// What one connection brought: bytes, zero-copy bytes, copied bytes.
type Got = (u64, u64, u64);

/// How a connection is received: the crate's blocking `Context::recv`,
/// the same with each record made a `bytes::Bytes` (feature `bytes`), or a
/// tokio `ZcrxStream` as a `futures_core::Stream` of batches (feature
/// `stream`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    Recv,
    Bytes,
    Stream,
}

/// The ways the flows of a test are received, in turn.
const VIAS: [Via; 3] = [Via::Recv, Via::Bytes, Via::Stream];

/// Receives `s` to its end through `ctx`, checking every byte against
/// `pat` from stream offset 0 (see [`Via`]); records go back as each batch
/// drops, or each `bytes::Bytes` made of one is checked through a slice
/// that outlives the `Bytes` it was cut from.
fn receive_one(ctx: &Context, s: TcpStream, pat: &Pattern, via: Via) -> Result<Got, String> {
    if via == Via::Stream {
        return receive_stream(ctx, s, pat);
    }
    let (mut off, mut zc, mut copy) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    loop {
        let b = match ctx.recv(&s, 256) {
            Ok(b) => b,
            // Every buffer in flight (the others' sockets hold them): the
            // stack lets go as they are read.
            Err(e) if e.kind() == zcrx::ErrorKind::NoBuffers => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("recv after {off} bytes: {e}")),
        };
        if b.is_eof() {
            return Ok((off, zc, copy));
        }
        if via == Via::Bytes {
            for buf in b {
                let copied = buf.is_copy();
                let whole = bytes::Bytes::from(buf);
                let part = whole.slice(..);
                drop(whole);
                if let Some(bad) = pat.check(off, &part) {
                    return Err(format!("payload mismatch at stream offset {bad} (through Bytes)"));
                }
                let n = part.len() as u64;
                off += n;
                if copied {
                    copy += n;
                } else {
                    zc += n;
                    crate::devlog::note(&part)?;
                }
            }
            continue;
        }
        check_batch(&b, pat, &mut off, &mut zc, &mut copy)?;
        if t0.elapsed() > Duration::from_secs(600) {
            return Err(format!("no end after 600 s and {off} bytes"));
        }
    }
}

/// Checks `b`'s records against `pat` from stream offset `off`, counting
/// them zero-copy or copied and noting each zero-copy one for the device
/// check.
fn check_batch(b: &zcrx::Batch, pat: &Pattern, off: &mut u64, zc: &mut u64, copy: &mut u64) -> Result<(), String> {
    for r in b.iter() {
        if let Some(bad) = pat.check(*off, r.data()) {
            return Err(format!("payload mismatch at stream offset {bad}"));
        }
        let n = r.data().len() as u64;
        *off += n;
        if r.is_copy() {
            *copy += n;
        } else {
            *zc += n;
            crate::devlog::note(r.data())?;
        }
    }
    Ok(())
}

/// [`receive_one`] through `ZcrxStream::into_batches` on a tokio runtime
/// of this thread: the stream must end (`None`) after the last byte, and
/// stay ended.
fn receive_stream(ctx: &Context, s: TcpStream, pat: &Pattern) -> Result<Got, String> {
    use futures_core::{FusedStream, Stream};
    use std::pin::Pin;

    /// `StreamExt::next`, without futures-util.
    fn next(b: &mut zcrx::tokio::Batches) -> impl std::future::Future<Output = Option<zcrx::error::Result<zcrx::Batch>>> + '_ {
        std::future::poll_fn(move |cx| Pin::new(&mut *b).poll_next(cx))
    }

    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        s.set_nonblocking(true).map_err(|e| format!("O_NONBLOCK: {e}"))?;
        let sock = tokio::net::TcpStream::from_std(s).map_err(|e| format!("tokio TcpStream: {e}"))?;
        let mut batches = zcrx::tokio::ZcrxStream::new(ctx.clone(), sock).into_batches(256);
        let (mut off, mut zc, mut copy) = (0u64, 0u64, 0u64);
        loop {
            let item = tokio::time::timeout(Duration::from_secs(600), next(&mut batches))
                .await
                .map_err(|_| format!("stream: nothing for 600 s after {off} bytes"))?;
            match item {
                None => break,
                Some(Ok(b)) => check_batch(&b, pat, &mut off, &mut zc, &mut copy)?,
                Some(Err(e)) if e.kind() == zcrx::ErrorKind::NoBuffers => tokio::time::sleep(Duration::from_millis(1)).await,
                Some(Err(e)) => return Err(format!("stream after {off} bytes: {e}")),
            }
        }
        if !batches.is_terminated() || next(&mut batches).await.is_some() {
            return Err(format!("the stream of batches did not stay ended after {off} bytes"));
        }
        Ok((off, zc, copy))
    })
}

/// A 4-queue netdevsim pair spreading flows by RSS (`ethtool -X equal 4`);
/// one context binds queue 0, then adds 1, 2 and 3. Sixteen connections,
/// each received by its own thread through the one context (in turn: by
/// `Context::recv`, through `bytes::Bytes` made of its records, and as a
/// tokio `ZcrxStream`'s stream of batches), byte-exact;
/// all zero-copy; netdevsim DMA'd on several queues. The rules of adding a
/// queue are checked on the way: not before a binding (`EINVAL`), not a
/// queue already bound (`EEXIST`), not another device (`EXDEV`), not a
/// queue the device lacks (`ERANGE`), not on a copy-only context
/// (`EINVAL`); UNBIND unbinds them all.
fn one_context_four_queues_rss(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(4));
    tryo!(n.hds(true));
    tryo!(net::ethtool_in(NS_A, &["-X", &n.a, "equal", "4"]));

    const FLOWS: usize = 16;
    const PORT: u16 = 7130;
    // 64 MiB in all on the fast kernel, 8 MiB on the debug one.
    let per = env.bytes(64 << 20) / FLOWS as u64;
    let seed = 130u64;
    let before: Vec<_> = tryo!((0..4).map(|q| n.stats(1, q)).collect::<Result<Vec<_>, _>>());
    // Every record matched to a write netdevsim logged. The log holds
    // 2^20 writes; 64 MiB over IPv6 here took about 47000 (a write per
    // segment, retransmissions included). Should it fill, the check fails
    // ("lost N writes") rather than pass unchecked.
    let log = tryo!(DmaLog::start());
    let a_idx = n.a_idx;
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let rx = in_netns(NS_A, move || -> Result<(Vec<Got>, zcrx::Stats, String), String> {
        let fail = |what: &str, e: zcrx::Error| format!("{what}: {e}");
        let setup = || -> Result<(Context, TcpListener, String), String> {
            let ctx = Context::open(64 << 20).map_err(|e| fail("open", e))?;
            if !ctx.info().map_err(|e| fail("info", e))?.add_queue() {
                return Err("INFO lacks ZCRX_RS_FEATURE_ADD_QUEUE".into());
            }
            let want = |what: &str, r: Result<(), zcrx::Error>, errno: i32| -> Result<(), String> {
                match r {
                    Err(e) if e.raw_os_error() == Some(errno) => Ok(()),
                    other => Err(format!("{what}: {other:?}, expected errno {errno}")),
                }
            };
            want("ADD_QUEUE before any BIND", ctx.add_queue_ifindex(a_idx, 1), libc::EINVAL)?;
            want("ADD_QUEUE before any BIND, no such device", ctx.add_queue_ifindex(9999, 0), libc::EINVAL)?;
            ctx.bind_ifindex(a_idx, 0, 0).map_err(|e| fail("BIND queue 0", e))?;
            want("ADD_QUEUE of queue 0 again", ctx.add_queue_ifindex(a_idx, 0), libc::EEXIST)?;
            want("ADD_QUEUE of loopback", ctx.add_queue_ifindex(1, 0), libc::EXDEV)?;
            want("ADD_QUEUE of queue 4 of 4", ctx.add_queue_ifindex(a_idx, 4), libc::ERANGE)?;
            for q in 1..4 {
                ctx.add_queue_ifindex(a_idx, q).map_err(|e| fail(&format!("ADD_QUEUE {q}"), e))?;
            }
            // A copy-only context cannot add queues.
            let other = Context::open(1 << 20).map_err(|e| fail("open", e))?;
            other.bind_nodev().map_err(|e| fail("BIND NODEV", e))?;
            want("ADD_QUEUE on a copy-only context", other.add_queue_ifindex(a_idx, 1), libc::EINVAL)?;
            let l = TcpListener::bind((Ipv6Addr::UNSPECIFIED, PORT)).map_err(|e| format!("listen: {e}"))?;
            Ok((ctx, l, "EINVAL before BIND, EEXIST, EXDEV, ERANGE, EINVAL copy-only".into()))
        };
        let (ctx, l, rules) = match setup() {
            Ok(v) => {
                let _ = ready_tx.send(Ok(()));
                v
            }
            Err(e) => {
                let _ = ready_tx.send(Err(e.clone()));
                return Err(e);
            }
        };
        let mut threads = Vec::new();
        let mut accept_err = None;
        for _ in 0..FLOWS {
            let (s, peer) = match l.accept() {
                Ok(v) => v,
                Err(e) => {
                    accept_err = Some(format!("accept: {e}"));
                    break;
                }
            };
            // Each flow its own data: a buffer of another flow fails.
            let (c, p) = (ctx.clone(), Pattern::new(flow_seed(seed, peer.port())));
            let via = VIAS[threads.len() % VIAS.len()];
            threads.push(std::thread::spawn(move || receive_one(&c, s, &p, via)));
        }
        // Every receiver joined before any error returns: none may go on
        // noting records into a later test's DMA log.
        let joined: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
        if let Some(e) = accept_err {
            return Err(e);
        }
        let mut got = Vec::new();
        for j in joined {
            got.push(j.map_err(|_| "receiver thread panicked".to_string())??);
        }
        let st = ctx.stats().map_err(|e| fail("stats", e))?;
        ctx.unbind().map_err(|e| fail("UNBIND (all queues)", e))?;
        if ctx.unbind().map_err(|e| e.raw_os_error()) != Err(Some(libc::EINVAL)) {
            return Err("a second UNBIND did not answer EINVAL: queues left bound".into());
        }
        Ok((got, st, rules))
    });
    // The senders start once the context is bound and listening.
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = join(rx);
            return Fail(e);
        }
        Err(_) => return Fail(format!("receiver: {:?}", join(rx).err())),
    }
    let senders: Vec<_> = (0..FLOWS).map(|i| flow_sender(addr_a(true, PORT), per, seed, i % 2)).collect();
    let mut sent_err = None;
    for s in senders {
        match join(s) {
            Ok(b) if b == per => {}
            Ok(b) => sent_err = Some(format!("a sender sent {b} of {per} bytes")),
            Err(e) => sent_err = Some(format!("sender: {e}")),
        }
    }
    let (got, st, rules) = match join(rx) {
        Ok(v) => v,
        Err(e) => return Fail(format!("receiver: {e}; {}", sent_err.unwrap_or_default())),
    };
    if let Some(e) = sent_err {
        return Fail(e);
    }
    let after: Vec<_> = tryo!((0..4).map(|q| n.stats(1, q)).collect::<Result<Vec<_>, _>>());
    let dma: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a.since(b).dma_bytes).collect();
    let (bytes, zc, copy) = got.iter().fold((0, 0, 0), |t, g| (t.0 + g.0, t.1 + g.1, t.2 + g.2));
    let queues_used = dma.iter().filter(|&&d| d > 0).count();
    // flow i was received by VIAS[i % 3]
    let by_via = |k: usize| mib(got.iter().skip(k).step_by(VIAS.len()).map(|g| g.0).sum());
    env.diag(&format!(
        "{FLOWS} flows x {} over 4 queues by RSS, one context, one area: {} byte-exact ({} by recv, {} as Bytes, \
         {} as a tokio Stream), zero-copy {} ({:.2}%), copied {}; netdevsim DMA'd per queue: {}; module: zc {} copy {} \
         alloc_fail {}; add rules: {rules}",
        mib(per),
        mib(bytes),
        by_via(0),
        by_via(1),
        by_via(2),
        mib(zc),
        100.0 * zc as f64 / bytes.max(1) as f64,
        mib(copy),
        dma.iter().map(|&d| mib(d)).collect::<Vec<_>>().join(" / "),
        mib(st.zc_bytes),
        mib(st.copy_bytes),
        st.alloc_fail
    ));
    if got.iter().any(|g| g.0 != per) {
        return Fail(format!("expected {per} bytes on every connection: {got:?}"));
    }
    if zc != bytes || st.zc_bytes != zc || st.copy_bytes != copy {
        return Fail("not all zero-copy, or the module's counters disagree with the records".into());
    }
    if dma.iter().sum::<u64>() < zc {
        return Fail(format!("netdevsim DMA'd {} bytes < {zc} delivered zero-copy", dma.iter().sum::<u64>()));
    }
    env.diag(&tryo!(log.check_queues(&[0, 1, 2, 3], zc)));
    drop(log);
    // 16 flows hashed over 4 queues: all on one would be a 1 in 4^15 chance.
    if queues_used < 2 {
        return Fail(format!("RSS put every flow on one queue ({dma:?}): nothing shows several queues served"));
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
