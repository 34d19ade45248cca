// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! zcrx-upload: an HTTP/1.1 upload server whose request bodies arrive
//! zero-copy. `PUT` or `POST` a body (Content-Length or chunked, with or
//! without `Expect: 100-continue`) and it is written to `--dir` under the
//! target's last path segment; the reply's body is the sha256 of what was
//! received, in `sha256sum`'s format. Any HTTP client works:
//!
//! ```text
//! zcrx-upload --dev eth0 --queue 3 --port 8080 --dir /srv/uploads
//! curl -T file.bin http://server:8080/        # prints "<sha256>  file.bin"
//! ```
//!
//! One zcrx context, bound to one rx queue, serves every connection; each
//! connection is a tokio task that waits for readability in the reactor and
//! takes records without blocking. Each request is logged on stdout with
//! its zero-copy and copied byte counts (also in the reply headers
//! `X-Zcrx-Zero-Copy` and `X-Zcrx-Copied`).

mod http;

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use zcrx::tokio::ZcrxStream;
use zcrx::Context;

use http::{reason, Event, Head, Parser};

const USAGE: &str = "usage: zcrx-upload --dev IFNAME --queue N [options]
       zcrx-upload --no-bind [options]

An HTTP/1.1 server that stores PUT and POST bodies, received zero-copy
from rx queue N of IFNAME (header split on, the flows steered there).

  --dev IFNAME          the device whose queue receives the uploads
  --queue N             its rx queue (zero-copy: bound to this server)
  --no-bind             no queue: every byte copied (any socket, loopback)
  --listen ADDR         the address to listen on (default ::, all)
  --port PORT           the port (default 8080)
  --dir DIR             where bodies are stored (default: the current
                        directory); an existing file is not replaced
  --overwrite           replace existing files
  --max-size BYTES      largest body (default 16G; K, M, G suffixes): 413
  --max-conns N         connections served at once (default: one per
                        4 MiB of the area): 503 beyond
  --area MIB            the zero-copy area (default 64)
  --header-timeout SEC  time to send a request head (default 30): 408
  --idle-timeout SEC    longest silence of a client, and longest wait for
                        it to take a reply (default 60)
  --requests N          exit after N requests
  -h, --help            this text
  -V, --version         the version
";

struct Opts {
    dev: Option<String>,
    queue: Option<u32>,
    no_bind: bool,
    listen: IpAddr,
    port: u16,
    dir: PathBuf,
    overwrite: bool,
    max_size: u64,
    max_conns: Option<usize>,
    area_mib: usize,
    header_timeout: Duration,
    idle_timeout: Duration,
    requests: Option<u64>,
}

fn parse_opts() -> Opts {
    cliopt::parse("zcrx-upload", parse_args)
}

fn parse_args(p: &mut lexopt::Parser) -> Result<Opts, lexopt::Error> {
    use lexopt::prelude::*;
    let mut o = Opts {
        dev: None,
        queue: None,
        no_bind: false,
        listen: IpAddr::from([0u16; 8]),
        port: 8080,
        dir: ".".into(),
        overwrite: false,
        max_size: 16 << 30,
        max_conns: None,
        area_mib: 64,
        header_timeout: Duration::from_secs(30),
        idle_timeout: Duration::from_secs(60),
        requests: None,
    };
    fn secs(v: &str) -> Result<Duration, &'static str> {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Duration::from_secs(n)),
            _ => Err("want a number of seconds above 0"),
        }
    }
    // the option being handled, for errors about its value
    let mut at = String::new();
    let r = (|| {
        while let Some(arg) = p.next()? {
            at = cliopt::name(&arg);
            match arg {
                Long("dev") => o.dev = Some(p.value()?.string()?),
                Long("queue") => o.queue = Some(p.value()?.parse()?),
                Long("no-bind") => o.no_bind = true,
                Long("listen") => o.listen = p.value()?.parse()?,
                Long("port") => o.port = p.value()?.parse()?,
                Long("dir") => o.dir = p.value()?.into(),
                Long("overwrite") => o.overwrite = true,
                Long("max-size") => {
                    o.max_size = p.value()?.parse_with(|v| zcrx::sys::parse_size(v).ok_or("want a size such as 100M or 16G"))? as u64
                }
                Long("max-conns") => o.max_conns = Some(p.value()?.parse::<usize>()?.max(1)),
                Long("area") => o.area_mib = p.value()?.parse::<usize>()?.max(1),
                Long("header-timeout") => o.header_timeout = p.value()?.parse_with(secs)?,
                Long("idle-timeout") => o.idle_timeout = p.value()?.parse_with(secs)?,
                Long("requests") => o.requests = Some(p.value()?.parse()?),
                Short('h') | Long("help") => cliopt::help(USAGE),
                Short('V') | Long("version") => cliopt::version("zcrx-upload", env!("CARGO_PKG_VERSION")),
                _ => return Err(arg.unexpected()),
            }
            at.clear();
        }
        Ok(())
    })();
    cliopt::named(&at, r)?;
    match (o.no_bind, &o.dev, o.queue) {
        (true, None, None) | (false, Some(_), Some(_)) => Ok(o),
        (true, _, _) => Err("--no-bind takes no --dev or --queue".into()),
        _ => Err("--dev and --queue are needed (or --no-bind)".into()),
    }
}

/// Each connection's SO_SNDBUF (the kernel doubles it).
const SNDBUF: usize = 32 << 10;

/// Longest file name stored: NAME_MAX less room for the temporary name.
const NAME_MAX: usize = 200;

/// The file name for a request target: its last path segment, restricted
/// to a safe alphabet (never a path); "upload-N" if nothing is left.
fn file_name(target: &str, n: u64) -> String {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let last = path.rsplit('/').next().unwrap_or("");
    let name: String = last.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if name.is_empty() || name.starts_with('.') {
        format!("upload-{n}")
    } else {
        name
    }
}

/// One upload in progress. Until it is stored, its temporary file goes
/// when it is dropped: on an error, a client that goes away, ^C.
struct Upload {
    name: String,
    tmp: PathBuf,
    file: Option<File>,
    sha: Sha256,
    bytes: u64,
    zc: u64,
    copied: u64,
    close: bool,
}

impl Drop for Upload {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

struct Server {
    dir: PathBuf,
    overwrite: bool,
    max_size: u64,
    header_timeout: Duration,
    idle_timeout: Duration,
    seq: AtomicU64,
    done: AtomicU64,
    want: Option<u64>,
    finished: tokio::sync::Notify,
    conns: AtomicUsize,
}

fn reply(status: u16, extra: &str, body: &str, close: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}{}\r\n{body}",
        reason(status),
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

impl Server {
    fn start(&self, h: &Head) -> Result<Upload, Vec<u8>> {
        if h.method != "PUT" && h.method != "POST" {
            return Err(reply(405, "Allow: PUT, POST\r\n", "PUT or POST a body\n", true));
        }
        if h.content_length.is_some_and(|n| n > self.max_size) {
            return Err(reply(413, "", &format!("bodies up to {} bytes\n", self.max_size), true));
        }
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = file_name(&h.target, n);
        if name.len() > NAME_MAX {
            return Err(reply(400, "", &format!("file name longer than {NAME_MAX} bytes\n"), true));
        }
        if !self.overwrite && self.dir.join(&name).symlink_metadata().is_ok() {
            return Err(reply(409, "", &format!("{name} exists\n"), true));
        }
        let tmp = self.dir.join(format!(".{name}.{n}.part"));
        // create_new: never through a link someone planted at that name
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| reply(500, "", &format!("cannot create {}: {e}\n", tmp.display()), true))?;
        Ok(Upload { name, tmp, file: Some(file), sha: Sha256::new(), bytes: 0, zc: 0, copied: 0, close: h.close })
    }

    /// Stores a complete upload under its name; the reply.
    fn finish(&self, mut u: Upload) -> Vec<u8> {
        drop(u.file.take());
        let dst = self.dir.join(&u.name);
        // Not over an existing file unless asked: link(2) fails if the
        // name is taken (an upload of the same name that finished first).
        let stored = if self.overwrite { std::fs::rename(&u.tmp, &dst) } else { std::fs::hard_link(&u.tmp, &dst) };
        let _ = std::fs::remove_file(&u.tmp);
        match stored {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return reply(409, "", &format!("{} exists\n", u.name), true),
            Err(e) => return reply(500, "", &format!("cannot store {}: {e}\n", dst.display()), true),
        }
        let hex: String = std::mem::take(&mut u.sha).finalize().iter().map(|b| format!("{b:02x}")).collect();
        println!("{}: {} bytes, {} zero-copy, {} copied, sha256 {hex}", u.name, u.bytes, u.zc, u.copied);
        let extra = format!("X-Zcrx-Zero-Copy: {}\r\nX-Zcrx-Copied: {}\r\n", u.zc, u.copied);
        reply(201, &extra, &format!("{hex}  {}\n", u.name), u.close)
    }

    /// `n` more requests answered (their replies written).
    fn answered(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if n > 0 && self.want.is_some_and(|w| done >= w) {
            self.finished.notify_one();
        }
    }
}

/// Writes `r` to the client within the idle timeout. A client that takes
/// nothing for that long is reset when the connection drops (`SO_LINGER`
/// 0, like nginx's `reset_timedout_connection`): an orderly close would
/// queue the FIN behind replies it never takes, and the kernel would keep
/// the orphaned socket and its send buffer through its retries.
async fn send(stream: &mut ZcrxStream, r: &[u8], t: Duration) -> Result<(), String> {
    match tokio::time::timeout(t, stream.get_mut().write_all(r)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("reply: {e}")),
        Err(_) => {
            let reset = match stream.get_ref().set_zero_linger() {
                Ok(()) => "reset",
                Err(_) => "closed",
            };
            Err(format!("the client took no reply for {} s: {reset}", t.as_secs()))
        }
    }
}

/// Serves one connection: requests one after another until the client
/// closes or asks to. A head must come within the header timeout, and the
/// client may not stay silent longer than the idle timeout.
async fn serve(srv: Arc<Server>, ctx: Context, sock: TcpStream, peer: String) -> Result<(), String> {
    let mut stream = ZcrxStream::new(ctx, sock);
    let mut parser = Parser::default();
    let mut up: Option<Upload> = None;
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut close = false;
    let mut head_by = tokio::time::Instant::now() + srv.header_timeout;
    while !close {
        // waiting for a head (a new one, or one begun): the header
        // timeout; inside a body: the idle timeout
        let in_head = up.is_none();
        let wait = if in_head { head_by.saturating_duration_since(tokio::time::Instant::now()) } else { srv.idle_timeout };
        let batch = match tokio::time::timeout(wait, stream.recv(256)).await {
            Err(_) if in_head && parser.mid_request() => {
                let _ = send(&mut stream, &reply(408, "", "the request head took too long\n", true), srv.idle_timeout).await;
                return Err(format!("{peer}: no complete request head within {} s", srv.header_timeout.as_secs()));
            }
            // an idle keep-alive connection: closed without a word
            Err(_) if in_head => break,
            Err(_) => return Err(format!("{peer}: silent for {} s in a body", srv.idle_timeout.as_secs())),
            Ok(Ok(b)) => b,
            // Every buffer is in the stack (this task holds none across
            // an await): they come back as the stack frees them.
            Ok(Err(e)) if e.kind() == zcrx::ErrorKind::NoBuffers => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            Ok(Err(e)) => return Err(format!("{peer}: {e}")),
        };
        let mut completed = 0;
        if batch.is_eof() {
            if parser.mid_request() {
                return Err(format!("{peer}: the client closed in the middle of a request"));
            }
            break;
        }
        // The body goes from the area straight into the file and the hash.
        tokio::task::block_in_place(|| {
            for rec in batch.iter() {
                let data = rec.data();
                for ev in parser.feed(data) {
                    match ev {
                        Event::Head(h) => match srv.start(&h) {
                            Ok(u) => {
                                if h.expect_continue {
                                    out.push(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec());
                                }
                                up = Some(u);
                            }
                            Err(r) => {
                                out.push(r);
                                close = true;
                            }
                        },
                        Event::Body(r) => {
                            let Some(u) = up.as_mut() else { continue };
                            let b = &data[r];
                            if u.bytes + b.len() as u64 > srv.max_size {
                                out.push(reply(413, "", &format!("bodies up to {} bytes\n", srv.max_size), true));
                                up = None;
                                close = true;
                                break;
                            }
                            u.sha.update(b);
                            let w = u.file.as_mut().map(|f| f.write_all(b));
                            if let Some(Err(e)) = w {
                                out.push(reply(500, "", &format!("write: {e}\n"), true));
                                up = None;
                                close = true;
                                break;
                            }
                            u.bytes += b.len() as u64;
                            if rec.is_copy() {
                                u.copied += b.len() as u64;
                            } else {
                                u.zc += b.len() as u64;
                            }
                        }
                        Event::End => {
                            if let Some(u) = up.take() {
                                close |= u.close;
                                out.push(srv.finish(u));
                                completed += 1;
                            }
                        }
                        Event::Bad(status, why) => {
                            out.push(reply(status, "", &format!("{why}\n"), true));
                            up = None;
                            close = true;
                        }
                    }
                    if close {
                        break;
                    }
                }
                if close {
                    break;
                }
            }
        });
        // Buffers back to the ring before waiting on the client.
        drop(batch);
        for r in out.drain(..) {
            send(&mut stream, &r, srv.idle_timeout).await.map_err(|e| format!("{peer}: {e}"))?;
        }
        srv.answered(completed);
        if completed > 0 {
            head_by = tokio::time::Instant::now() + srv.header_timeout;
        }
    }
    let _ = stream.get_mut().shutdown().await;
    linger(&stream).await;
    drain_or_reset(stream.get_ref(), srv.idle_timeout).await;
    Ok(())
}

/// Before the socket closes: waits up to `t` for the client to take what
/// is still queued (the last replies, the FIN), and resets the connection
/// if it has not, as for a reply it takes too long to take (see send()),
/// rather than leave the kernel an orphan probing a closed window.
async fn drain_or_reset(sock: &TcpStream, t: Duration) {
    let until = tokio::time::Instant::now() + t;
    while unsent(sock) > 0 {
        if tokio::time::Instant::now() >= until {
            let _ = sock.set_zero_linger();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Bytes of `sock`'s send queue not yet acknowledged (`SIOCOUTQ`).
fn unsent(sock: &TcpStream) -> i32 {
    let mut n: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int to the pointer given,
    // which points at `n`; the fd is `sock`'s, open for this call.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n as *mut libc::c_int) };
    if r == 0 {
        n
    } else {
        0
    }
}

/// After the last reply (the write side shut down), takes what the client
/// still sends for a moment and drops it: closing with unread data would
/// reset the connection, and the client could lose the reply (a 409 or
/// 413 sent while it was still sending its body).
async fn linger(stream: &ZcrxStream) {
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut taken = 0u64;
    while taken < (64 << 20) {
        match tokio::time::timeout_at(until, stream.recv(256)).await {
            Ok(Ok(b)) if !b.is_eof() => taken += b.bytes(),
            Ok(Err(e)) if e.kind() == zcrx::ErrorKind::NoBuffers => tokio::time::sleep(Duration::from_millis(1)).await,
            _ => return,
        }
    }
}

fn main() {
    let o = parse_opts();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    let rt = rt.unwrap_or_else(|e| {
        eprintln!("zcrx-upload: tokio runtime: {e}");
        std::process::exit(1)
    });
    if let Err(e) = rt.block_on(run(o)) {
        eprintln!("zcrx-upload: {e}");
        std::process::exit(1);
    }
}

/// Holds one of the `--max-conns` places while a connection is served.
struct ConnSlot(Arc<Server>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.conns.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn run(o: Opts) -> Result<(), String> {
    if !Path::new(&o.dir).is_dir() {
        return Err(format!("{}: not a directory", o.dir.display()));
    }
    let area = o.area_mib << 20;
    let ctx = Context::open(area).map_err(|e| e.to_string())?;
    let source = match (&o.dev, o.queue) {
        (Some(dev), Some(q)) => {
            ctx.bind(dev, q).map_err(|e| format!("{dev} queue {q}: {e}"))?;
            format!("zero-copy from {dev} queue {q}")
        }
        _ => {
            ctx.bind_nodev().map_err(|e| format!("copy-only context: {e}"))?;
            "copied (--no-bind)".to_string()
        }
    };
    // Half the area for what the sockets may queue, the rest for what the
    // server holds and what is on its way (Documentation/zcrx-rs.rst,
    // "Sizing the area"): each connection's receive buffer is its share
    // of that half (the kernel doubles SO_RCVBUF), so that a few bulk or
    // out-of-order peers cannot hold the whole area and stall the rest.
    let max_conns = o.max_conns.unwrap_or((o.area_mib / 4).max(1));
    // (an int in the kernel)
    let rcvbuf = (area / 4 / max_conns).clamp(64 << 10, i32::MAX as usize / 2);
    let addr = SocketAddr::new(o.listen, o.port);
    let sock = if addr.is_ipv6() { TcpSocket::new_v6() } else { TcpSocket::new_v4() }.map_err(|e| format!("socket: {e}"))?;
    sock.set_reuseaddr(true).map_err(|e| format!("SO_REUSEADDR: {e}"))?;
    // accepted sockets inherit it, the window scale included
    sock.set_recv_buffer_size(rcvbuf as u32).map_err(|e| format!("SO_RCVBUF: {e}"))?;
    // what the kernel granted: net.core.rmem_max caps it (it reports double)
    let granted = sock.recv_buffer_size().map_err(|e| format!("SO_RCVBUF: {e}"))? as usize / 2;
    // Replies are a few hundred bytes: a fixed send buffer (no autotuning)
    // bounds what a client that never reads them holds in the kernel
    // until the idle timeout closes it.
    sock.set_send_buffer_size(SNDBUF as u32).map_err(|e| format!("SO_SNDBUF: {e}"))?;
    sock.bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    let listener = sock.listen(1024).map_err(|e| format!("listen on {addr}: {e}"))?;
    let srv = Arc::new(Server {
        dir: o.dir.clone(),
        overwrite: o.overwrite,
        max_size: o.max_size,
        header_timeout: o.header_timeout,
        idle_timeout: o.idle_timeout,
        seq: AtomicU64::new(0),
        done: AtomicU64::new(0),
        want: o.requests,
        finished: tokio::sync::Notify::new(),
        conns: AtomicUsize::new(0),
    });
    let capped = if granted < rcvbuf { format!(" (asked for {} KiB: net.core.rmem_max caps it)", rcvbuf >> 10) } else { String::new() };
    println!(
        "listening on {addr}, bodies {source} into {}; at most {max_conns} connections, SO_RCVBUF {} KiB each{capped}, \
         SO_SNDBUF {} KiB",
        o.dir.display(),
        granted >> 10,
        SNDBUF >> 10
    );
    let mut tasks = tokio::task::JoinSet::new();
    // one listener for the whole loop: a SIGINT between two turns of the
    // loop is not lost
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            a = listener.accept() => {
                let (sock, peer) = match a {
                    Ok(v) => v,
                    Err(e) => {
                        // ECONNABORTED, EMFILE, ...: not the listener's end
                        eprintln!("zcrx-upload: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                if srv.conns.fetch_add(1, Ordering::Relaxed) >= max_conns {
                    srv.conns.fetch_sub(1, Ordering::Relaxed);
                    let t = srv.idle_timeout;
                    tasks.spawn(async move {
                        let mut sock = sock;
                        let r = reply(503, "Retry-After: 1\r\n", "too many connections\n", true);
                        let _ = tokio::time::timeout(t, sock.write_all(&r)).await;
                        let _ = sock.shutdown().await;
                    });
                    continue;
                }
                let (srv, ctx) = (srv.clone(), ctx.clone());
                let slot = ConnSlot(srv.clone());
                tasks.spawn(async move {
                    let _slot = slot;
                    if let Err(e) = serve(srv, ctx, sock, peer.to_string()).await {
                        eprintln!("zcrx-upload: {e}");
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = srv.finished.notified() => break,
            _ = &mut ctrl_c => break,
        }
    }
    // Connections still open finish their replies (with --requests the
    // clients close once answered); ^C does not wait, and dropping the
    // tasks removes their unfinished files.
    if srv.want.is_some() {
        while tasks.join_next().await.is_some() {}
    }
    drop(tasks);
    let s = ctx.stats().map_err(|e| e.to_string())?;
    println!("total: {} requests, {} bytes zero-copy, {} copied", srv.done.load(Ordering::Relaxed), s.zc_bytes, s.copy_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::file_name;

    #[test]
    fn file_names_never_leave_the_directory() {
        assert_eq!(file_name("/a.bin", 0), "a.bin");
        assert_eq!(file_name("/x/../../etc/passwd", 1), "passwd");
        assert_eq!(file_name("/..", 2), "upload-2");
        assert_eq!(file_name("/", 3), "upload-3");
        assert_eq!(file_name("/f%2F..?q=1", 4), "f_2F..");
        assert_eq!(file_name("/.hidden", 5), "upload-5");
    }
}
