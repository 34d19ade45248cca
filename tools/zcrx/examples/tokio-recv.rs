// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A tokio receiver: `tokio-recv IFNAME QUEUE PORT` accepts connections and
//! counts each one's bytes, zero-copy and copied, on one shared context.

use std::error::Error;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let a: Vec<String> = std::env::args().collect();
    let [_, ifname, queue, port] = &a[..] else {
        return Err("usage: tokio-recv IFNAME QUEUE PORT".into());
    };
    let ctx = zcrx::Context::open(16 << 20)?;
    ctx.bind(ifname, queue.parse()?)?;
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
                    Err(e) => return eprintln!("{peer}: {e}"),
                }
            }
            println!("{peer}: {zc} bytes zero-copy, {copied} copied");
        });
    }
}
