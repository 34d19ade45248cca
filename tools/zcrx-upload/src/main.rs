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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use zcrx::tokio::ZcrxStream;
use zcrx::Context;

use http::{Event, Head, Parser};

struct Opts {
    dev: String,
    queue: u32,
    port: u16,
    dir: PathBuf,
    area_mib: usize,
    requests: Option<u64>,
}

fn usage() -> ! {
    eprintln!(
        "usage: zcrx-upload --dev IFNAME --queue N [--port 8080] [--dir DIR] [--area MIB] [--requests N]\n\
         \n  --dir DIR       where bodies are written (default: the current directory)\
         \n  --area MIB      the zero-copy area (default 64)\
         \n  --requests N    exit after N requests"
    );
    std::process::exit(2);
}

fn parse_opts() -> Opts {
    let mut o = Opts { dev: String::new(), queue: u32::MAX, port: 8080, dir: ".".into(), area_mib: 64, requests: None };
    let mut a = std::env::args().skip(1);
    while let Some(k) = a.next() {
        let mut v = || a.next().unwrap_or_else(|| usage());
        match k.as_str() {
            "--dev" => o.dev = v(),
            "--queue" => o.queue = v().parse().unwrap_or_else(|_| usage()),
            "--port" => o.port = v().parse().unwrap_or_else(|_| usage()),
            "--dir" => o.dir = v().into(),
            "--area" => o.area_mib = v().parse().unwrap_or_else(|_| usage()),
            "--requests" => o.requests = Some(v().parse().unwrap_or_else(|_| usage())),
            _ => usage(),
        }
    }
    if o.dev.is_empty() || o.queue == u32::MAX {
        usage();
    }
    o
}

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

/// One upload in progress.
struct Upload {
    name: String,
    tmp: PathBuf,
    file: File,
    sha: Sha256,
    bytes: u64,
    zc: u64,
    copied: u64,
    close: bool,
}

struct Server {
    dir: PathBuf,
    seq: AtomicU64,
    done: AtomicU64,
    want: Option<u64>,
    finished: tokio::sync::Notify,
}

fn reply(status: u16, reason: &str, extra: &str, body: &str, close: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}{}\r\n{body}",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

impl Server {
    fn start(&self, h: &Head) -> Result<Upload, Vec<u8>> {
        if h.method != "PUT" && h.method != "POST" {
            return Err(reply(405, "Method Not Allowed", "Allow: PUT, POST\r\n", "PUT or POST a body\n", true));
        }
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = file_name(&h.target, n);
        let tmp = self.dir.join(format!(".{name}.{n}.part"));
        // create_new: never through a link someone planted at that name
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| reply(500, "Internal Server Error", "", &format!("cannot create {}: {e}\n", tmp.display()), true))?;
        Ok(Upload { name, tmp, file, sha: Sha256::new(), bytes: 0, zc: 0, copied: 0, close: h.close })
    }

    fn finish(&self, u: Upload) -> Vec<u8> {
        let Upload { name, tmp, file, sha, bytes, zc, copied, close } = u;
        drop(file);
        let dst = self.dir.join(&name);
        if let Err(e) = std::fs::rename(&tmp, &dst) {
            return reply(500, "Internal Server Error", "", &format!("cannot rename to {}: {e}\n", dst.display()), true);
        }
        let hex: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
        println!("{name}: {bytes} bytes, {zc} zero-copy, {copied} copied, sha256 {hex}");
        let extra = format!("X-Zcrx-Zero-Copy: {zc}\r\nX-Zcrx-Copied: {copied}\r\n");
        reply(201, "Created", &extra, &format!("{hex}  {name}\n"), close)
    }

    /// `n` more requests answered (their replies written).
    fn answered(&self, n: u64) {
        let done = self.done.fetch_add(n, Ordering::Relaxed) + n;
        if n > 0 && self.want.is_some_and(|w| done >= w) {
            self.finished.notify_one();
        }
    }
}

/// Serves one connection: requests one after another until the client
/// closes or asks to.
async fn serve(srv: Arc<Server>, ctx: Context, sock: TcpStream) -> Result<(), String> {
    let peer = sock.peer_addr().map(|a| a.to_string()).unwrap_or_default();
    let mut stream = ZcrxStream::new(ctx, sock);
    let mut parser = Parser::default();
    let mut up: Option<Upload> = None;
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut close = false;
    while !close {
        let batch = match stream.recv(256).await {
            Ok(b) => b,
            // Every buffer is in the stack (this task holds none across
            // an await): they come back as the stack frees them.
            Err(e) if e.kind() == zcrx::ErrorKind::NoBuffers => {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            }
            Err(e) => return Err(format!("{peer}: {e}")),
        };
        let mut completed = 0;
        if batch.is_eof() {
            if parser.mid_request() {
                if let Some(u) = up.take() {
                    let _ = std::fs::remove_file(&u.tmp);
                }
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
                            u.sha.update(b);
                            if let Err(e) = u.file.write_all(b) {
                                out.push(reply(500, "Internal Server Error", "", &format!("write: {e}\n"), true));
                                let _ = std::fs::remove_file(&u.tmp);
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
                            out.push(reply(status, "Bad Request", "", &format!("{why}\n"), true));
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
            stream.get_mut().write_all(&r).await.map_err(|e| format!("{peer}: reply: {e}"))?;
        }
        srv.answered(completed);
    }
    if let Some(u) = up.take() {
        let _ = std::fs::remove_file(&u.tmp);
    }
    let _ = stream.get_mut().shutdown().await;
    Ok(())
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

async fn run(o: Opts) -> Result<(), String> {
    if !Path::new(&o.dir).is_dir() {
        return Err(format!("{}: not a directory", o.dir.display()));
    }
    let ctx = Context::open(o.area_mib << 20).map_err(|e| e.to_string())?;
    ctx.bind(&o.dev, o.queue).map_err(|e| format!("{} queue {}: {e}", o.dev, o.queue))?;
    let listener = TcpListener::bind(("::", o.port)).await.map_err(|e| format!("listen on port {}: {e}", o.port))?;
    let srv = Arc::new(Server {
        dir: o.dir.clone(),
        seq: AtomicU64::new(0),
        done: AtomicU64::new(0),
        want: o.requests,
        finished: tokio::sync::Notify::new(),
    });
    println!("listening on port {}, bodies zero-copy from {} queue {} into {}", o.port, o.dev, o.queue, o.dir.display());
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            a = listener.accept() => {
                let sock = match a {
                    Ok((sock, _)) => sock,
                    Err(e) => {
                        // ECONNABORTED, EMFILE, ...: not the listener's end
                        eprintln!("zcrx-upload: accept: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let (srv, ctx) = (srv.clone(), ctx.clone());
                tasks.spawn(async move {
                    if let Err(e) = serve(srv, ctx, sock).await {
                        eprintln!("zcrx-upload: {e}");
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = srv.finished.notified() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    // Connections still open finish their replies (with --requests the
    // clients close once answered); ^C does not wait.
    if srv.want.is_some() {
        while tasks.join_next().await.is_some() {}
    }
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
