// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx on tokio (feature `tokio`): [`ZcrxStream`] waits for the socket to
//! be readable through tokio's reactor (epoll) and receives records with a
//! non-blocking call, so no runtime thread ever blocks in the kernel.
//!
//! ```no_run
//! # async fn serve(ctx: zcrx::Context, listener: tokio::net::TcpListener) -> std::io::Result<()> {
//! let (sock, _) = listener.accept().await?;
//! let stream = zcrx::tokio::ZcrxStream::new(ctx.clone(), sock);
//! loop {
//!     let batch = stream.recv(256).await?;
//!     if batch.is_eof() {
//!         break;
//!     }
//!     for rec in batch.iter() {
//!         let _data: &[u8] = rec.data();
//!     }
//! }
//! # Ok(()) }
//! ```

use std::io;

use ::tokio::io::Interest;
use ::tokio::net::TcpStream;

use crate::error::{Error, ErrorKind, Result};
use crate::{Batch, Context};

/// A tokio TCP stream received through a zcrx [`Context`]. Writes go
/// through [`ZcrxStream::get_mut`] (the socket is an ordinary
/// `TcpStream`); reads must go through [`ZcrxStream::recv`] only.
pub struct ZcrxStream {
    ctx: Context,
    sock: TcpStream,
}

impl ZcrxStream {
    /// Receives `sock` through `ctx` (one context serves many streams).
    pub fn new(ctx: Context, sock: TcpStream) -> Self {
        ZcrxStream { ctx, sock }
    }

    /// Waits until data (or the end of the stream, or an error) is there
    /// and receives at most `max_records` records. An empty batch with
    /// [`Batch::is_eof`] is the end of the stream.
    pub async fn recv(&self, max_records: usize) -> Result<Batch> {
        loop {
            if let Err(e) = self.sock.readable().await {
                return Err(Error::new(crate::error::Op::Recv, e));
            }
            let mut failed = None;
            let r = self.sock.try_io(Interest::READABLE, || match self.ctx.try_recv(&self.sock, max_records) {
                Ok(b) => Ok(b),
                // tokio clears the readiness and we wait again
                Err(e) if e.kind() == ErrorKind::WouldBlock => Err(io::ErrorKind::WouldBlock.into()),
                Err(e) => {
                    failed = Some(e);
                    Err(io::Error::other("zcrx recv failed"))
                }
            });
            match r {
                Ok(b) => return Ok(b),
                Err(_) if failed.is_none() => continue,
                Err(_) => return Err(failed.expect("checked")),
            }
        }
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The socket (peer address, options).
    pub fn get_ref(&self) -> &TcpStream {
        &self.sock
    }

    /// The socket, to write replies (`AsyncWriteExt`). Do not read from it:
    /// bytes read there are not in the records.
    pub fn get_mut(&mut self) -> &mut TcpStream {
        &mut self.sock
    }

    /// The socket back.
    pub fn into_inner(self) -> TcpStream {
        self.sock
    }
}
