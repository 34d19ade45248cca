// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! The blocking API: `recv IFNAME QUEUE PORT` accepts one connection,
//! receives it zero-copy and prints how many bytes came zero-copy and how
//! many were copied. Each `Batch` goes back to the refill ring when dropped.
//! A thread blocks on the context's events and says on stderr when the
//! refill ring ran dry (at most once a second).

use std::error::Error;
use std::net::TcpListener;
use std::time::Duration;

use zcrx::Events;

fn main() -> Result<(), Box<dyn Error>> {
    let a: Vec<String> = std::env::args().collect();
    let [_, ifname, queue, port] = &a[..] else {
        return Err("usage: recv IFNAME QUEUE PORT".into());
    };
    let ctx = zcrx::Context::open(16 << 20)?;
    ctx.bind(ifname, queue.parse()?)?;
    if ctx.info()?.events() {
        let ctx = ctx.clone(); // the same context: Send + Sync
        std::thread::spawn(move || {
            while let Ok(st) = ctx.wait_events(Events::ALLOC_FAIL, None) {
                if st.fired.contains(Events::ALLOC_FAIL) {
                    let n = ctx.ring_stats().map_or(0, |s| s.alloc_fail); // no syscall
                    eprintln!("zcrx: the refill ring ran dry (failed allocations so far: {n})");
                    std::thread::sleep(Duration::from_secs(1)); // a storm: one line
                }
            }
        });
    }
    let (sock, peer) = TcpListener::bind(("::", port.parse::<u16>()?))?.accept()?;
    let (mut zc, mut copied) = (0, 0);
    loop {
        let batch = ctx.recv(&sock, 256)?;
        if batch.is_eof() {
            break;
        }
        for rec in batch.iter() {
            let _data: &[u8] = rec.data(); // the payload, in place
        }
        let (z, c) = batch.split_counts();
        (zc, copied) = (zc + z, copied + c);
    }
    println!("{peer}: {zc} bytes zero-copy, {copied} copied");
    Ok(())
}
