// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! A tokio receiver: `tokio-recv IFNAME QUEUE PORT` accepts connections and
//! counts each one's bytes, zero-copy and copied, on one shared context.
//! A task awaits the context's events and says on stderr when the refill
//! ring ran dry (at most once a second) or data was copied (once).

use std::error::Error;
use std::time::Duration;

use zcrx::Events;

/// Says what the context's events tell, without polling the counters: the
/// watcher's future wakes only when an armed event fires.
async fn watch(w: zcrx::tokio::EventWatcher) {
    let mut arm = Events::ALLOC_FAIL | Events::COPY;
    loop {
        let st = match w.wait(arm).await {
            Ok(st) => st,
            Err(e) => return eprintln!("events: {e}"),
        };
        arm = Events::empty();
        if st.fired.contains(Events::COPY) {
            eprintln!("zcrx: data was copied, not placed by the NIC: steer the flows to the queue");
        }
        if st.fired.contains(Events::ALLOC_FAIL) {
            let n = w.context().ring_stats().map_or(0, |s| s.alloc_fail); // no syscall
            eprintln!("zcrx: the refill ring ran dry (failed allocations so far: {n}): return buffers sooner");
            tokio::time::sleep(Duration::from_secs(1)).await; // a storm: one line
            arm = Events::ALLOC_FAIL;
        }
        if arm.is_empty() && st.armed.is_empty() {
            return; // COPY said once, ALLOC_FAIL not armed: nothing left to hear
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let a: Vec<String> = std::env::args().collect();
    let [_, ifname, queue, port] = &a[..] else {
        return Err("usage: tokio-recv IFNAME QUEUE PORT".into());
    };
    let ctx = zcrx::Context::open(16 << 20)?;
    ctx.bind(ifname, queue.parse()?)?;
    if ctx.info()?.events() {
        tokio::spawn(watch(zcrx::tokio::EventWatcher::new(ctx.clone())?));
    }
    let listener = tokio::net::TcpListener::bind(("::", port.parse::<u16>()?)).await?;
    loop {
        let (sock, peer) = listener.accept().await?;
        let stream = zcrx::tokio::ZcrxStream::new(ctx.clone(), sock);
        tokio::spawn(async move {
            let (mut zc, mut copied) = (0, 0);
            loop {
                match stream.recv(256).await {
                    Ok(b) if b.is_eof() => break,
                    Ok(b) => {
                        let (z, c) = b.split_counts();
                        (zc, copied) = (zc + z, copied + c);
                    } // the batch goes back to the ring here
                    // Other tasks hold every buffer for now: not the end.
                    Err(e) if e.kind() == zcrx::ErrorKind::NoBuffers => {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => return eprintln!("{peer}: {e}"),
                }
            }
            println!("{peer}: {zc} bytes zero-copy, {copied} copied");
        });
    }
}
