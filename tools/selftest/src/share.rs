// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! One context, two processes: a context fd passed over `SCM_RIGHTS` serves
//! another process safely. One process receives; another, which got the fd
//! and mapped the refill ring through it, gives the buffers back; either
//! may close first.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::uapi::zcrx_rs_rqe;
use zcrx::{Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, mib, vm_pinned_kb, wait_idle};
use crate::net::{addr_a, in_netns, join, sender, Nsim, NS_A};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("context_shared_across_processes", context_shared_across_processes)];

/// `--child-refill`: the other process. Its stdin is a `SOCK_SEQPACKET`
/// Unix socket. The first message brings the context fd (`SCM_RIGHTS`) and
/// the ring's layout (head, tail, entries offsets, entry count, mmap
/// length); it maps the ring through that fd and from then on writes every
/// message's area offsets (u64 each) as refill entries, after the current
/// tail. A one-byte message asks how many it has written (reply: u64).
/// When the socket closes it unmaps, closes the fd and exits.
pub fn child_refill() -> ! {
    // SAFETY: fd 0 is our stdin, which the parent made a Unix socket; we
    // take it over for good.
    let sock = unsafe { OwnedFd::from_raw_fd(0) };
    let mut hdr = [0u8; 24];
    let (ctx, n) = zcrx::sys::recv_fd(&sock, &mut hdr).unwrap_or_else(|e| {
        eprintln!("child-refill: no context fd: {e}");
        std::process::exit(1)
    });
    if n != 24 {
        eprintln!("child-refill: layout message of {n} bytes");
        std::process::exit(1);
    }
    let w = |i: usize| u32::from_ne_bytes(hdr[i * 4..i * 4 + 4].try_into().unwrap());
    let (head, tail, rqes, entries) = (w(0) as usize, w(1) as usize, w(2) as usize, w(3));
    let len = u64::from_ne_bytes(hdr[16..24].try_into().unwrap()) as usize;
    // SAFETY: maps the context's ring at offset 0, as its owner does; the
    // kernel checks the length.
    let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, ctx.as_raw_fd(), 0) };
    if map == libc::MAP_FAILED {
        eprintln!("child-refill: mmap: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let base = map.cast::<u8>();
    // SAFETY: head and tail are u32 words inside the mapping (the uAPI's
    // offsets), shared with the kernel: only accessed atomically.
    let (head, tail) = unsafe { (&*base.add(head).cast::<AtomicU32>(), &*base.add(tail).cast::<AtomicU32>()) };
    // We are the producer now: continue from where the last one stopped.
    let mut t = tail.load(Ordering::Acquire);
    let mut written = 0u64;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // SAFETY: recv into our buffer.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n <= 0 {
            break;
        }
        let n = n as usize;
        if n == 1 {
            // SAFETY: send from a local.
            unsafe { libc::send(sock.as_raw_fd(), (&written as *const u64).cast(), 8, 0) };
            continue;
        }
        for off in buf[..n].chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())) {
            // Room: the kernel frees entries as the pool or RECV takes them.
            while entries - t.wrapping_sub(head.load(Ordering::Acquire)) == 0 {
                sleep(Duration::from_millis(1));
            }
            let i = (t & (entries - 1)) as usize;
            // SAFETY: entry `i` is inside the mapping and ours until `tail`
            // moves past it.
            unsafe { base.add(rqes).cast::<zcrx_rs_rqe>().add(i).write(zcrx_rs_rqe { off, len: 0, flags: 0 }) };
            t = t.wrapping_add(1);
            written += 1;
        }
        tail.store(t, Ordering::Release);
    }
    // SAFETY: our mapping, unmapped once.
    unsafe { libc::munmap(map, len) };
    drop(ctx);
    println!("refilled {written}");
    std::process::exit(0);
}

/// Starts a `--child-refill` process and hands it the context `z`.
fn spawn_refiller(z: &Zcrx) -> Result<(Child, UnixStream), String> {
    // SOCK_SEQPACKET keeps each batch one message.
    let mut sv = [0i32; 2];
    // SAFETY: plain socketpair into our array.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds are ours now.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = Command::new(exe)
        .arg("--child-refill")
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn the refiller: {e}"))?;
    let (o, entries) = z.ring_layout().ok_or("not bound")?;
    let (_, len) = z.ring_mapping().ok_or("no ring mapping")?;
    let mut hdr = Vec::with_capacity(24);
    for v in [o.head, o.tail, o.rqes, entries] {
        hdr.extend_from_slice(&v.to_ne_bytes());
    }
    hdr.extend_from_slice(&(len as u64).to_ne_bytes());
    let raw = z.raw_fd();
    // SAFETY: borrowed for the call only; `z` keeps the fd open.
    let ctx = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    zcrx::sys::send_fd(&ours, &ctx, &hdr).map_err(|e| format!("SCM_RIGHTS: {e}"))?;
    Ok((child, UnixStream::from(ours)))
}

/// How many entries the refiller has written (all it was sent before).
fn refilled(ctl: &UnixStream) -> Result<u64, String> {
    let mut s = ctl;
    std::io::Write::write_all(&mut s, &[1]).map_err(|e| e.to_string())?;
    let mut b = [0u8; 8];
    s.read_exact(&mut b).map_err(|e| format!("refiller's count: {e}"))?;
    Ok(u64::from_ne_bytes(b))
}

/// Waits for the refiller to exit (after its socket closed): its count.
fn refiller_exit(mut child: Child) -> Result<u64, String> {
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("the refiller failed: {st}"));
    }
    out.trim().strip_prefix("refilled ").and_then(|n| n.parse().ok()).ok_or(format!("refiller said {out:?}"))
}

/// Receives one connection to its end through `z`, checking every byte,
/// and sends every record's offset to the refiller instead of refilling.
fn receive_sharing(z: &mut Zcrx, l: &std::net::TcpListener, pat: &Pattern, ctl: &UnixStream) -> Result<(u64, u64, u64), String> {
    let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
    let mut recs = vec![Rec::default(); 128];
    let (mut off, mut zc, mut sent) = (0u64, 0u64, 0u64);
    loop {
        let got = match z.recv(s.as_raw_fd(), &mut recs, 0) {
            Ok(g) => g,
            // The pool is dry and the buffers are on their way to the
            // refiller, which gives them back: wait for it.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("RECV at {off}: {e}")),
        };
        if got.bytes == 0 {
            return Ok((off, zc, sent));
        }
        let mut msg = Vec::with_capacity(got.records * 8);
        for r in &recs[..got.records] {
            if let Some(bad) = pat.check(off, z.data(r)) {
                return Err(format!("payload mismatch at stream offset {bad}"));
            }
            off += u64::from(r.len);
            if r.flags & zcrx::uapi::ZCRX_RS_REC_COPY == 0 {
                crate::devlog::note(z.data(r))?;
                zc += u64::from(r.len);
            }
            msg.extend_from_slice(&r.off.to_ne_bytes());
        }
        let mut c = ctl;
        std::io::Write::write_all(&mut c, &msg).map_err(|e| format!("to the refiller: {e}"))?;
        sent += got.records as u64;
    }
}

/// A context received in this process and refilled by two others in turn,
/// each given the context fd over `SCM_RIGHTS`: the first refiller closes
/// before the receiver, the receiver closes before the second. The streams
/// are larger than the area, so zero-copy beyond the area's size proves the
/// buffers came back through the other process's ring writes (this process
/// never writes the ring). Afterwards: the module idle, this process's
/// VmPin back where it was.
fn context_shared_across_processes(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let feat = tryo!(crate::common::info()).features;
    if feat & u64::from(zcrx::uapi::ZCRX_RS_FEATURE_SHARE) == 0 {
        return Fail(format!("INFO lacks ZCRX_RS_FEATURE_SHARE: {feat:#x}"));
    }
    let pinned0 = tryo!(vm_pinned_kb());
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let log = tryo!(crate::devlog::DmaLog::start());
    let (a_idx, port) = (n.a_idx, 7130u16);
    let area = 4usize << 20;
    let bytes = env.bytes(32 << 20).max(3 * area as u64);
    let pats = [Arc::new(Pattern::new(61)), Arc::new(Pattern::new(62))];
    let p2 = pats.clone();
    let rx = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| format!("open: {e}"))?;
        z.register_area(area).map_err(|e| format!("register: {e}"))?;
        z.bind(a_idx, 0, 0).map_err(|e| format!("bind: {e}"))?;
        let l = std::net::TcpListener::bind(("::", port)).map_err(|e| format!("listen: {e}"))?;
        let mut lines = Vec::new();
        // Refiller 1: it closes first, the context stays ours.
        let (c1, ctl1) = spawn_refiller(&z)?;
        let (b1, zc1, sent1) = receive_sharing(&mut z, &l, &p2[0], &ctl1)?;
        let w1 = refilled(&ctl1)?;
        drop(ctl1);
        let e1 = refiller_exit(c1)?;
        if w1 != sent1 || e1 != sent1 {
            return Err(format!("refiller 1 wrote {w1} (exit: {e1}) of {sent1} entries"));
        }
        lines.push(format!("refiller 1 gave back {sent1} buffers, then exited; {} received, {} zero-copy", mib(b1), mib(zc1)));
        // Refiller 2 takes over the ring where refiller 1 left it; then we
        // close first and it still holds the context.
        let (c2, ctl2) = spawn_refiller(&z)?;
        let (b2, zc2, sent2) = receive_sharing(&mut z, &l, &p2[1], &ctl2)?;
        let w2 = refilled(&ctl2)?;
        drop(z);
        drop(ctl2);
        let e2 = refiller_exit(c2)?;
        if w2 != sent2 || e2 != sent2 {
            return Err(format!("refiller 2 wrote {w2} (exit: {e2}) of {sent2} entries"));
        }
        lines.push(format!(
            "refiller 2 gave back {sent2} buffers and closed after the receiver; {} received, {} zero-copy",
            mib(b2),
            mib(zc2)
        ));
        Ok((b1, zc1, b2, zc2, lines))
    });
    let tx1 = sender(addr_a(true, port), bytes, pats[0].clone(), 0);
    let s1 = join(tx1);
    let tx2 = sender(addr_a(true, port), bytes, pats[1].clone(), 0);
    let s2 = join(tx2);
    let (b1, zc1, b2, zc2, lines) = tryo!(join(rx));
    tryo!(s1);
    tryo!(s2);
    if b1 != bytes || b2 != bytes {
        return Fail(format!("received {b1} and {b2} of {bytes} bytes"));
    }
    // All zero-copy (netdevsim drops when the pool is dry, it never
    // copies), and more than the area holds: its buffers were recycled,
    // and only the other processes wrote the ring.
    if zc1 != bytes || zc2 != bytes {
        return Fail(format!("zero-copy {} and {} of {} each: {}", mib(zc1), mib(zc2), mib(bytes), lines.join("; ")));
    }
    let check = tryo!(log.check(0, zc1 + zc2));
    tryo!(wait_idle(Duration::from_secs(30)));
    let pinned = tryo!(vm_pinned_kb());
    if pinned != pinned0 {
        return Fail(format!("VmPin {pinned} kB after, {pinned0} kB before"));
    }
    env.diag(&format!("{}; module idle, VmPin back to {pinned} kB", lines.join("; ")));
    env.diag(&check);
    Pass
}
