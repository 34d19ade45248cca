// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx on tokio (feature `tokio`): [`ZcrxStream`] waits for the socket to
//! be readable through tokio's reactor (epoll) and receives records with a
//! non-blocking call, so no runtime thread ever blocks in the kernel;
//! [`EventWatcher`] awaits the context's events (the refill ring ran dry,
//! data was copied) the same way.
//!
//! ```no_run
//! # async fn serve(ctx: zcrx::Context, listener: tokio::net::TcpListener) -> std::io::Result<()> {
//! let (sock, _) = listener.accept().await?;
//! let stream = zcrx::tokio::ZcrxStream::new(ctx.clone(), sock);
//! loop {
//!     let batch = match stream.recv(256).await {
//!         Ok(b) => b,
//!         // Other tasks hold every buffer for now (this one holds none).
//!         Err(e) if e.kind() == zcrx::ErrorKind::NoBuffers => {
//!             tokio::time::sleep(std::time::Duration::from_millis(1)).await;
//!             continue;
//!         }
//!         Err(e) => return Err(e.into()),
//!     };
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
use std::os::fd::{AsFd, OwnedFd};
use std::task::{ready, Context as TaskContext, Poll};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::net::TcpStream;

use crate::error::{Error, ErrorKind, Op, Result};
use crate::events::nothing_armed;
use crate::{Batch, Context, Events, EventsState};

/// A tokio TCP stream received through a zcrx [`Context`]. Writes go
/// through [`ZcrxStream::get_mut`] (the socket is an ordinary
/// `TcpStream`); reads must go through [`ZcrxStream::recv`],
/// [`ZcrxStream::poll_recv`] or `into_batches` (feature `stream`) only.
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
    /// [`Batch::is_eof`] is the end of the stream. Several tasks may wait
    /// on one stream at once (each is woken).
    ///
    /// [`ErrorKind::NoBuffers`]: nothing can be read while every buffer of
    /// the area is out and this program (any task of it, through this
    /// context) holds some. Not the end of the connection: drop what this
    /// task holds, if anything, and call again a little later (the module
    /// says so rather than sleep, lest a task that holds the last buffers
    /// wait for itself).
    pub async fn recv(&self, max_records: usize) -> Result<Batch> {
        loop {
            if let Err(e) = self.sock.readable().await {
                return Err(Error::new(Op::Recv, e));
            }
            if let Some(r) = self.try_recv_ready(max_records) {
                return r;
            }
        }
    }

    /// [`ZcrxStream::recv`] as a poll function, for hand-written futures
    /// and streams: `Pending` (the task is woken when the socket is
    /// readable) or what [`ZcrxStream::recv`] would return. Only the
    /// waker of the last call is kept (tokio's `poll_read_ready`): one
    /// task polls a stream this way, or the others may never be woken.
    pub fn poll_recv(&self, cx: &mut TaskContext<'_>, max_records: usize) -> Poll<Result<Batch>> {
        loop {
            if let Err(e) = ready!(self.sock.poll_read_ready(cx)) {
                return Poll::Ready(Err(Error::new(Op::Recv, e)));
            }
            if let Some(r) = self.try_recv_ready(max_records) {
                return Poll::Ready(r);
            }
        }
    }

    /// One receive without blocking once the socket was readable: `None`
    /// if there was nothing after all (tokio cleared the readiness; the
    /// next wait registers again), else what it returned.
    fn try_recv_ready(&self, max_records: usize) -> Option<Result<Batch>> {
        let mut failed = None;
        let r = self.sock.try_io(Interest::READABLE, || match self.ctx.try_recv(&self.sock, max_records) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err(io::ErrorKind::WouldBlock.into()),
            Err(e) => {
                failed = Some(e);
                Err(io::Error::other("zcrx recv failed"))
            }
        });
        match (r, failed) {
            (Ok(b), _) => Some(Ok(b)),
            (Err(_), None) => None,
            (Err(_), Some(e)) => Some(Err(e)),
        }
    }

    /// The stream as a [`futures_core::Stream`] of batches of at most
    /// `max_records` records (feature `stream`): for `StreamExt`
    /// combinators, `select!` over many connections, and bodies built from
    /// streams. It ends after the end of the stream (the empty EOF batch is
    /// not yielded) and after an error, except
    /// [`ErrorKind::NoBuffers`], which is yielded and not the end: drop
    /// what the task holds, wait a little, poll again. The connection
    /// stays open until the [`Batches`] (or what
    /// [`Batches::into_inner`] gives back) drops: replies can follow the
    /// end of the client's data.
    #[cfg(feature = "stream")]
    pub fn into_batches(self, max_records: usize) -> Batches {
        Batches { stream: self, max_records, done: false }
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

/// A [`ZcrxStream`] as a [`futures_core::Stream`] of [`Batch`]es
/// ([`ZcrxStream::into_batches`]; feature `stream`).
///
/// ```no_run
/// # async fn serve(stream: zcrx::tokio::ZcrxStream) -> zcrx::error::Result<u64> {
/// use futures_util::StreamExt;
/// let mut batches = stream.into_batches(256);
/// let mut n = 0;
/// while let Some(batch) = batches.next().await {
///     match batch {
///         Ok(b) => n += b.bytes(), // the buffers go back when `b` drops
///         // other tasks hold every buffer for now: not the end
///         Err(e) if e.kind() == zcrx::ErrorKind::NoBuffers => {
///             tokio::time::sleep(std::time::Duration::from_millis(1)).await
///         }
///         Err(e) => return Err(e),
///     }
/// }
/// Ok(n)
/// # }
/// ```
#[cfg(feature = "stream")]
pub struct Batches {
    stream: ZcrxStream,
    max_records: usize,
    /// The stream has ended: the end of the connection's data, or an error.
    done: bool,
}

#[cfg(feature = "stream")]
impl Batches {
    /// The stream (to write a reply: [`ZcrxStream::get_mut`]).
    pub fn get_ref(&self) -> &ZcrxStream {
        &self.stream
    }

    /// The stream, to write replies through [`ZcrxStream::get_mut`]. Do
    /// not receive from it while this [`Batches`] is polled.
    pub fn get_mut(&mut self) -> &mut ZcrxStream {
        &mut self.stream
    }

    /// The [`ZcrxStream`] back, ended or not.
    pub fn into_inner(self) -> ZcrxStream {
        self.stream
    }
}

#[cfg(feature = "stream")]
impl futures_core::Stream for Batches {
    type Item = Result<Batch>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Result<Batch>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        let r = ready!(this.stream.poll_recv(cx, this.max_records));
        match &r {
            Ok(b) if b.is_eof() => {
                this.done = true;
                return Poll::Ready(None);
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NoBuffers => {}
            Err(_) => this.done = true,
        }
        Poll::Ready(Some(r))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, if self.done { Some(0) } else { None })
    }
}

#[cfg(feature = "stream")]
impl futures_core::FusedStream for Batches {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl std::fmt::Debug for ZcrxStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZcrxStream").field("ctx", &self.ctx).field("sock", &self.sock).finish()
    }
}

#[cfg(feature = "stream")]
impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches").field("stream", &self.stream).field("max_records", &self.max_records).field("done", &self.done).finish()
    }
}

/// Awaits a [`Context`]'s events on tokio's reactor: the context's fd,
/// registered for `EPOLLPRI` ([`Interest::PRIORITY`]), wakes the task when
/// an armed event fires; no runtime thread blocks.
///
/// ```no_run
/// # async fn watch(ctx: zcrx::Context) -> zcrx::error::Result<()> {
/// use zcrx::Events;
/// let w = zcrx::tokio::EventWatcher::new(ctx)?;
/// loop {
///     let st = w.wait(Events::ALLOC_FAIL).await?; // arms it, awaits it
///     if st.fired.contains(Events::ALLOC_FAIL) {
///         let n = w.context().ring_stats().map_or(0, |s| s.alloc_fail);
///         eprintln!("the refill ring ran dry (failed allocations so far: {n})");
///     }
/// }
/// # }
/// ```
pub struct EventWatcher {
    ctx: Context,
    /// A duplicate of the context's fd: each watcher registers its own
    /// with the reactor. The fired events are the context's, and the first
    /// to collect them clears them: have one watcher per context, and
    /// share what it learns.
    fd: AsyncFd<OwnedFd>,
}

impl EventWatcher {
    /// Watches `ctx`. Call it inside a tokio runtime with I/O enabled
    /// (tokio panics otherwise). Needs the module's [`crate::Info::events`]:
    /// [`ErrorKind::Other`] with `EOPNOTSUPP` without it.
    pub fn new(ctx: Context) -> Result<Self> {
        if !ctx.info()?.events() {
            return Err(Error::with_kind(Op::Info, ErrorKind::Other, io::Error::from_raw_os_error(libc::EOPNOTSUPP)));
        }
        let fd = ctx.as_fd().try_clone_to_owned().map_err(|e| Error::new(Op::Events, e))?;
        // `with_interest` is deprecated from tokio 1.53.3 for the unsafe
        // `register_with_interest` (I/O safety: the fd must stay open while
        // registered), which the tokio this crate takes (1.40) lacks. The
        // `OwnedFd` it owns stays open until the `AsyncFd` drops: sound.
        #[allow(deprecated)]
        let fd = AsyncFd::with_interest(fd, Interest::PRIORITY).map_err(|e| Error::new(Op::Events, e))?;
        Ok(EventWatcher { ctx, fd })
    }

    /// Arms `arm` ([`Context::arm_events`]; [`Events::empty()`] arms
    /// nothing more), then waits until an armed event fires and collects
    /// it: `fired` holds what fired (never empty), `armed` what is still
    /// armed. Returns at once when an event had fired already. An event
    /// fires once: pass it again to the next call to hear of the next one
    /// (after a pause, to hear of a storm once).
    /// [`ErrorKind::InvalidArgument`] if nothing is armed (it would wait
    /// for ever).
    pub async fn wait(&self, arm: Events) -> Result<EventsState> {
        let first = self.ctx.arm_events(arm)?;
        wait_async(&self.fd, first, || self.ctx.collect_events()).await
    }

    /// The context watched.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

/// Awaits `EPOLLPRI` on `fd` (a context's, registered for
/// [`Interest::PRIORITY`]) and collects with `collect` until something
/// fired. `st`: the answer of the arming call, which may have collected
/// events already.
async fn wait_async(fd: &AsyncFd<OwnedFd>, mut st: EventsState, mut collect: impl FnMut() -> Result<EventsState>) -> Result<EventsState> {
    loop {
        if !st.fired.is_empty() {
            return Ok(st);
        }
        if st.armed.is_empty() {
            return Err(nothing_armed());
        }
        let mut guard = fd.ready(Interest::PRIORITY).await.map_err(|e| Error::new(Op::Events, e))?;
        st = collect()?;
        // Collected (or a stale wake-up): wait for the next edge. An event
        // firing after the collect is not lost: tokio keeps a readiness
        // newer than this guard's.
        guard.clear_ready();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::tests::{collect, fire, urgent_pair};
    use std::time::Duration;

    fn register(s: &std::net::TcpStream) -> AsyncFd<OwnedFd> {
        #[allow(deprecated)]
        AsyncFd::with_interest(s.as_fd().try_clone_to_owned().unwrap(), Interest::PRIORITY).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn async_wait_wakes_on_priority_readiness() {
        let (a, b) = urgent_pair();
        let fd = register(&a);
        let armed = EventsState { fired: Events::empty(), armed: Events::ALLOC_FAIL };
        // one fired before the registration's first wait: found
        fire(&b);
        let st = ::tokio::time::timeout(Duration::from_secs(30), wait_async(&fd, armed, || collect(&a))).await;
        assert_eq!(st.expect("woken").unwrap().fired, Events::ALLOC_FAIL);
        // nothing pending: no wake-up (the readiness was cleared)
        let idle = ::tokio::time::timeout(Duration::from_millis(100), wait_async(&fd, armed, || collect(&a))).await;
        assert!(idle.is_err(), "woke with nothing fired: {idle:?}");
        // fired while waiting, from another thread, three times over
        for _ in 0..3 {
            let b2 = b.try_clone().unwrap();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                fire(&b2);
            });
            let st = ::tokio::time::timeout(Duration::from_secs(30), wait_async(&fd, armed, || collect(&a))).await;
            assert_eq!(st.expect("woken").unwrap().fired, Events::ALLOC_FAIL);
            t.join().unwrap();
        }
        // nothing armed: an error at once
        let e = wait_async(&fd, EventsState::default(), || panic!("waited")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
