// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A randomized, multi-threaded driver of the whole uAPI (`make fuzz`; a
//! short run in `make check`).
//!
//! Worker threads open and close contexts, register areas (good memory,
//! and addresses and lengths that must be refused), bind and unbind queues
//! with good and bad arguments, receive from live TCP streams, from wrong
//! fds and into bad record arrays, give buffers back (and scribble on the
//! refill ring: bad entries, a random tail), map and unmap the ring with
//! odd arguments, send random ioctls, fork children that use the inherited
//! context, and pass contexts over `SCM_RIGHTS`. Meanwhile a sender streams
//! into the receiver's queues and a chaos thread restarts netdevsim's
//! queues (every reset mode). At the end the device is deleted under the
//! bound contexts, everything is closed, and the module must be back to
//! zero live objects, the process's pinned memory back to where it was,
//! and `rmmod` must succeed. The VM runner fails the run on any splat.
//!
//! The seed is printed first; `--fuzz-seed S` replays a run's choices (the
//! threads' interleaving is the scheduler's). Memory the kernel may write
//! (areas, record arrays) is always memory set aside for it: "random"
//! addresses are unmapped, non-canonical, kernel, read-only or ring
//! addresses, never the fuzzer's own heap.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use zcrx::ktap::Outcome::{self, *};
use zcrx::sys::{errno_name, ioctl};
use zcrx::uapi::*;
use zcrx::{dev::page_size, Pattern, Rec, Zcrx};

use crate::common::{ensure_loaded, info, mib, rmmod_eventually, vm_pinned_kb, wait_idle};
use crate::net::{addr_a, connect, in_netns, join, Nsim, NS_A, NS_B};
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("fuzz_uapi", fuzz_uapi)];

/// SplitMix64: small, seedable, good enough to pick actions.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub(crate) fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    pub(crate) fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
}

/// Counts of what happened, by operation and outcome.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    fn note<T>(&mut self, op: &str, r: &std::io::Result<T>) {
        let k = match r {
            Ok(_) => format!("{op} ok"),
            Err(e) => match e.raw_os_error() {
                Some(c) if errno_name(c).starts_with("E?") || errno_name(c) == "?" => format!("{op} errno {c}"),
                Some(c) => format!("{op} {}", errno_name(c)),
                None => format!("{op} {:?}", e.kind()),
            },
        };
        *self.0.entry(k).or_default() += 1;
    }
    fn add(&mut self, o: &Tally) {
        for (k, v) in &o.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }
}

/// An anonymous mapping set aside for the kernel (area or scratch).
struct Map(*mut libc::c_void, usize);

// SAFETY: a plain mapping address; only passed to the kernel.
unsafe impl Send for Map {}

impl Map {
    fn new(len: usize, prot: i32) -> Option<Map> {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        (p != libc::MAP_FAILED).then_some(Map(p, len))
    }
    fn addr(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

/// A context and what the worker keeps for it.
struct Ctx {
    z: Zcrx,
    /// Records received and not given back yet.
    held: Vec<Rec>,
    /// Memory registered with `register_raw` (kept mapped while the context
    /// lives: the kernel pinned it).
    raw_area: Option<Map>,
    lib_area: bool,
    bound: bool,
}

/// Shared between the workers: sockets with data, ring mappings to offer
/// as areas, counters.
struct Shared {
    socks: Mutex<Vec<Arc<TcpStream>>>,
    rings: Mutex<Vec<(u64, usize)>>,
    stop: AtomicBool,
    bytes: AtomicU64,
    zc_bytes: AtomicU64,
    a_idx: u32,
}

const NR_MAX: u32 = 1 << 16;

fn worker(sh: Arc<Shared>, seed: u64, id: u64) -> Result<(Tally, Vec<Ctx>), String> {
    let mut rng = Rng(seed ^ id.wrapping_mul(0xA076_1D64_78BD_642F));
    let mut t = Tally::default();
    let mut ctxs: Vec<Ctx> = Vec::new();
    let ps = page_size();
    let ro = Map::new(ps, libc::PROT_READ).ok_or("mmap")?;
    let scratch = Map::new(ps, libc::PROT_READ | libc::PROT_WRITE).ok_or("mmap")?;
    let udp = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let bad_addrs = [0u64, 1, 0x7ff0_0000_0000, 0xffff_8880_0000_0000, 0xdead_beef_0000_0000, ro.addr()];
    // Worker 0 spends most of its operations on one context it keeps set
    // up and receiving, so that every run moves data whatever the dice
    // say: the others' random set-ups seldom get that far (a 20 s run on
    // the debug kernel had 2 successful receives in 1556 operations, and
    // one had none).
    let mut steady: Option<Ctx> = None;
    while !sh.stop.load(Ordering::Relaxed) {
        if id == 0 && rng.pct(80) {
            steady_step(&sh, &mut steady, &mut t, &mut rng);
            continue;
        }
        let op = rng.below(100);
        let ci = if ctxs.is_empty() { None } else { Some(rng.below(ctxs.len() as u64) as usize) };
        match (op, ci) {
            (0..=4, _) | (_, None) if ctxs.len() < 6 => {
                let r = Zcrx::open();
                t.note("open", &r);
                if let Ok(z) = r {
                    ctxs.push(Ctx { z, held: Vec::new(), raw_area: None, lib_area: false, bound: false });
                }
            }
            (5..=7, Some(i)) => {
                forget_ring(&sh, &ctxs[i]);
                ctxs.swap_remove(i);
                t.note("close", &Ok::<(), std::io::Error>(()));
            }
            (8..=17, Some(i)) => {
                let c = &mut ctxs[i];
                if rng.pct(60) {
                    let len = (1 + rng.below(512)) as usize * ps;
                    let r = c.z.register_area(len);
                    t.note("register", &r);
                    c.lib_area |= r.is_ok();
                } else {
                    let (addr, len, keep) = match rng.below(5) {
                        0 => {
                            let m = Map::new(4 * ps, libc::PROT_READ | libc::PROT_WRITE).ok_or("mmap")?;
                            (m.addr() + rng.pick(&[0, 1, 4095]), rng.pick(&[0u64, 4 * ps as u64, 4 * ps as u64 + 1]), Some(m))
                        }
                        1 => {
                            // A live refill ring (kernel memory) must never
                            // become an area. The list holds only rings still
                            // mapped: their owners take them out (under this
                            // lock) before unmapping, so the address cannot
                            // be reused meanwhile (by our own heap, say).
                            let rings = sh.rings.lock().unwrap();
                            match rings.first().copied() {
                                Some((a, l)) => {
                                    // SAFETY: a mapping this context keeps (raw_area) that no Rust object lives in, or memory the module must refuse (unmapped, a ring): nothing else of ours is ever written.
                                    let r = unsafe { c.z.register_raw(a, l as u64) };
                                    t.note("register_ring", &r);
                                    continue;
                                }
                                None => (rng.pick(&bad_addrs), ps as u64, None),
                            }
                        }
                        _ => {
                            let any = rng.next();
                            (rng.pick(&bad_addrs), rng.pick(&[0u64, ps as u64, u64::MAX, (1 << 32) + ps as u64, any]), None)
                        }
                    };
                    // SAFETY: a mapping this context keeps (raw_area) that no Rust object lives in, or memory the module must refuse (unmapped, a ring): nothing else of ours is ever written.
                    let r = unsafe { c.z.register_raw(addr, len) };
                    t.note("register_raw", &r);
                    if r.is_ok() {
                        c.raw_area = keep;
                    }
                }
            }
            (18..=27, Some(i)) => {
                let c = &mut ctxs[i];
                if rng.pct(70) {
                    let rxq = rng.pick(&[0u32, 0, 1, 1, 7]);
                    let ent = rng.pick(&[0u32, 1, 64, 4096, 40000]);
                    // A successful bind replaces (unmaps) the old ring.
                    forget_ring(&sh, c);
                    // One in five a copy-only context (no queue).
                    let nodev = rng.pct(20);
                    let r = if nodev { c.z.bind_nodev(ent) } else { c.z.bind(sh.a_idx, rxq, ent) };
                    t.note(if nodev { "bind_nodev" } else { "bind" }, &r);
                    if r.is_ok() {
                        c.bound = !nodev;
                        if let Some(m) = c.z.ring_mapping() {
                            let mut rings = sh.rings.lock().unwrap();
                            rings.insert(0, m);
                            rings.truncate(4);
                        }
                    }
                } else {
                    let mut b = zcrx_rs_bind {
                        ifindex: rng.pick(&[sh.a_idx, 1, 0, u32::MAX]),
                        rxq: rng.below(4) as u32,
                        rq_entries: rng.next() as u32,
                        flags: rng.pick(&[0, 1, u32::MAX]),
                        mmap_len: rng.pick(&[0, 1]),
                        ..Default::default()
                    };
                    b.offsets.head = rng.pick(&[0, 4]);
                    let r = ioctl(&c.z.raw_fd(), IOC_BIND as _, &mut b as *mut _ as usize);
                    t.note("bind_raw", &r);
                }
            }
            (28..=57, Some(i)) => {
                let sock = sh.socks.lock().unwrap().get(rng.below(8) as usize).cloned();
                let c = &mut ctxs[i];
                let fd = match (rng.below(10), &sock) {
                    (0, _) => rng.pick(&[-1, 0, 9999]),
                    (1, _) => udp.as_raw_fd(),
                    (_, Some(s)) => s.as_raw_fd(),
                    (_, None) => udp.as_raw_fd(),
                };
                let flags = rng.pick(&[ZCRX_RS_RECV_DONTWAIT, ZCRX_RS_RECV_DONTWAIT, 0, 0x80]);
                if rng.pct(80) && c.lib_area {
                    let mut recs = vec![Rec::default(); (1 + rng.below(256)) as usize];
                    let r = c.z.recv(fd, &mut recs, flags);
                    t.note("recv", &r);
                    if let Ok(g) = &r {
                        take(&sh, c, &recs[..g.records], g.bytes);
                    }
                } else {
                    let recs = rng.pick(&[0u64, ro.addr(), 0xdead_beef_0000_0000, scratch.addr()]);
                    let nr = rng.pick(&[0u32, 1, 256, NR_MAX, NR_MAX + 1]);
                    let nr = if recs == scratch.addr() { nr.min((ps / 16) as u32) } else { nr };
                    let mut r = zcrx_rs_recv { sockfd: fd, flags, recs, nr_recs: nr, ..Default::default() };
                    if rng.pct(10) {
                        r.__resv[0] = 1;
                    }
                    let res = ioctl(&c.z.raw_fd(), IOC_RECV as _, &mut r as *mut _ as usize);
                    t.note("recv_raw", &res);
                    // Records written into `scratch` hold buffers: give them
                    // back through the ring when it is ours, else they stay
                    // held until the context closes (the scrub).
                    if res.is_ok() && recs == scratch.addr() && c.z.ring_mapping().is_some() && c.lib_area {
                        let n = (r.nr_recs as usize).min(ps / 16);
                        // SAFETY: the kernel wrote `n` records into `scratch`.
                        let got = unsafe { std::slice::from_raw_parts(scratch.0 as *const Rec, n) };
                        c.held.extend_from_slice(got);
                    }
                }
            }
            (58..=72, Some(i)) => {
                let c = &mut ctxs[i];
                match rng.below(4) {
                    0 | 1 if !c.held.is_empty() => {
                        let k = 1 + rng.below(c.held.len() as u64) as usize;
                        let give: Vec<Rec> = c.held.drain(..k).collect();
                        let r = c.z.refill(&give);
                        t.note("refill", &r);
                    }
                    2 => {
                        let offs: Vec<u64> = (0..1 + rng.below(8)).map(|_| rng.next() & !0xfff).collect();
                        let r = c.z.refill_raw(&offs, rng.pick(&[0, 0, 1]));
                        t.note("refill_garbage", &r);
                    }
                    _ => {
                        if let Some((addr, len)) = c.z.ring_mapping() {
                            // Scribble on the ring: a random tail or entry.
                            let entry = 128 + 16 * rng.below(8) as usize;
                            let off = rng.pick(&[64usize, 0, entry]).min(len - 8);
                            // SAFETY: inside our own mapping of the ring.
                            unsafe { ((addr as usize + off) as *mut u32).write_volatile(rng.next() as u32) };
                            t.note("scribble", &Ok::<(), std::io::Error>(()));
                        }
                    }
                }
            }
            (73..=77, Some(i)) => {
                let c = &mut ctxs[i];
                match rng.below(3) {
                    0 => t.note("stats", &c.z.stats()),
                    1 => t.note("info", &c.z.info()),
                    _ => {
                        let r = c.z.unbind();
                        t.note("unbind", &r);
                    }
                }
            }
            (78..=82, Some(i)) => {
                let fd = ctxs[i].z.raw_fd();
                let len = rng.pick(&[ps, 2 * ps, 1 << 20, 0]);
                let off = rng.pick(&[0i64, 0, ps as i64]);
                let fl = rng.pick(&[libc::MAP_SHARED, libc::MAP_SHARED, libc::MAP_PRIVATE]);
                let prot = rng.pick(&[libc::PROT_READ | libc::PROT_WRITE, libc::PROT_READ | libc::PROT_EXEC]);
                // SAFETY: maps the device (or fails); unmapped right away.
                let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, fl, fd, off) };
                let r = if p == libc::MAP_FAILED { Err(std::io::Error::last_os_error()) } else { Ok(()) };
                t.note("mmap", &r);
                if p != libc::MAP_FAILED {
                    // SAFETY: our mapping.
                    unsafe { libc::munmap(p, len) };
                }
            }
            (83..=87, Some(i)) => {
                let fd = ctxs[i].z.raw_fd();
                let dir = rng.pick(&[0u64, 1, 2, 3]) << 30;
                let size = rng.below(512) << 16;
                let cmd = dir | size | u64::from(ZCRX_RS_IOC_MAGIC) << 8 | rng.below(12);
                let arg = rng.pick(&[0u64, scratch.addr(), ro.addr(), 0xdead_beef_0000_0000]);
                // Only the scratch page may be written by a command; zeroed,
                // so a command that reads a struct from it finds NULL
                // pointers, never an address of ours.
                // SAFETY: our own scratch mapping.
                unsafe { std::ptr::write_bytes(scratch.0.cast::<u8>(), 0, ps) };
                let r = ioctl(&fd, cmd as _, arg as usize);
                t.note("ioctl_random", &r);
            }
            (88..=90, Some(i)) => {
                // fork: the child uses the inherited context (syscalls only,
                // no allocation) and exits; the parent waits.
                let fd = ctxs[i].z.raw_fd();
                let sfd = sh.socks.lock().unwrap().first().map_or(-1, |s| s.as_raw_fd());
                let mut r = zcrx_rs_recv {
                    sockfd: sfd,
                    flags: ZCRX_RS_RECV_DONTWAIT,
                    recs: scratch.addr(),
                    nr_recs: (ps / 16) as u32,
                    ..Default::default()
                };
                let mut st = zcrx_rs_stats::default();
                // SAFETY: the child only makes syscalls on memory that
                // exists in its copy of the address space, then _exits.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    // SAFETY: as above; no allocation, no locks.
                    unsafe {
                        libc::ioctl(fd, IOC_STATS as _, &mut st as *mut _ as usize);
                        libc::ioctl(fd, IOC_RECV as _, &mut r as *mut _ as usize);
                        libc::ioctl(fd, IOC_UNBIND as _, 0usize);
                        libc::close(fd);
                        libc::_exit(0);
                    }
                }
                if pid > 0 {
                    let mut status = 0;
                    // SAFETY: waiting for our child.
                    unsafe { libc::waitpid(pid, &mut status, 0) };
                }
                t.note("fork", &Ok::<(), std::io::Error>(()));
            }
            (91..=93, Some(i)) => {
                // SCM_RIGHTS: pass the context over a socketpair, use and
                // close the copy.
                let r = pass_fd(ctxs[i].z.raw_fd()).and_then(|fd| {
                    let mut st = zcrx_rs_stats::default();
                    ioctl(&fd, IOC_STATS as _, &mut st as *mut _ as usize).map(|_| ())
                });
                t.note("scm_rights", &r);
            }
            _ => {}
        }
    }
    ctxs.extend(steady);
    Ok((t, ctxs))
}

/// One operation of worker 0's steady context (see [`worker`]): set it up
/// (open, an area, a queue of the device or else copy-only), then receive
/// from the connections without blocking and give the records back; now
/// and then close it and start over.
fn steady_step(sh: &Shared, steady: &mut Option<Ctx>, t: &mut Tally, rng: &mut Rng) {
    let Some(c) = steady.as_mut() else {
        let r = Zcrx::open();
        t.note("steady_open", &r);
        if let Ok(z) = r {
            *steady = Some(Ctx { z, held: Vec::new(), raw_area: None, lib_area: false, bound: false });
        }
        return;
    };
    if !c.lib_area {
        let r = c.z.register_area(256 * page_size());
        t.note("steady_register", &r);
        c.lib_area = r.is_ok();
        return;
    }
    if c.z.ring_mapping().is_none() {
        // queue 0 mostly: the others take it two times in five
        let r = c.z.bind(sh.a_idx, rng.pick(&[0u32, 0, 0, 1]), 0);
        t.note("steady_bind", &r);
        c.bound = r.is_ok();
        if r.is_err() {
            // the queue is another context's, or restarting: copy-only
            t.note("steady_bind_nodev", &c.z.bind_nodev(0));
        }
        return;
    }
    if rng.pct(1) {
        // start over (the context's records go back with it)
        *steady = None;
        return;
    }
    if c.held.len() > 32 || (!c.held.is_empty() && rng.pct(30)) {
        let give = std::mem::take(&mut c.held);
        t.note("steady_refill", &c.z.refill(&give));
        return;
    }
    let Some(sock) = sh.socks.lock().unwrap().get(rng.below(8) as usize).cloned() else {
        return;
    };
    let mut recs = vec![Rec::default(); 64];
    let r = c.z.recv(sock.as_raw_fd(), &mut recs, ZCRX_RS_RECV_DONTWAIT);
    t.note("steady_recv", &r);
    if let Ok(g) = &r {
        take(sh, c, &recs[..g.records], g.bytes);
    }
}

/// Counts what a receive of `bytes` in `recs` got, touches the bytes (they
/// are readable, and in the area) and keeps the records, held, in `c`.
fn take(sh: &Shared, c: &mut Ctx, recs: &[Rec], bytes: u64) {
    sh.bytes.fetch_add(bytes, Ordering::Relaxed);
    for rec in recs {
        let _ = c.z.data(rec).first();
        if rec.flags & ZCRX_RS_REC_COPY == 0 {
            sh.zc_bytes.fetch_add(u64::from(rec.len), Ordering::Relaxed);
        }
    }
    c.held.extend_from_slice(recs);
}

/// Takes `c`'s ring out of the shared list before it may be unmapped.
fn forget_ring(sh: &Shared, c: &Ctx) {
    if let Some((addr, _)) = c.z.ring_mapping() {
        sh.rings.lock().unwrap().retain(|r| r.0 != addr);
    }
}

/// Sends `fd` over a new socketpair and returns the received copy.
fn pass_fd(fd: i32) -> std::io::Result<OwnedFd> {
    let mut sv = [0i32; 2];
    // SAFETY: plain socketpair into our array.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM, 0, sv.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds are ours now.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
    zcrx::sys::send_fd(&a, &fd, &[0])?;
    zcrx::sys::recv_fd(&b, &mut [0u8; 1]).map(|(fd, _)| fd)
}

fn fuzz_uapi(env: &Env) -> Outcome {
    if env.fuzz_seconds == 0 {
        return Skip("no --fuzz-seconds given".into());
    }
    tryo!(ensure_loaded(env));
    let seed = env.fuzz_seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        t ^ u64::from(std::process::id()) << 32
    });
    env.diag(&format!("fuzz: seed {seed} ({} s; replay with --fuzz-seed {seed})", env.fuzz_seconds));
    let pinned0 = tryo!(vm_pinned_kb());
    let n = tryo!(Nsim::up(2));
    tryo!(n.hds(true));
    let sh = Arc::new(Shared {
        socks: Mutex::new(Vec::new()),
        rings: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        bytes: AtomicU64::new(0),
        zc_bytes: AtomicU64::new(0),
        a_idx: n.a_idx,
    });
    // Receiver side: accept connections into the pool the workers read.
    let port = 7501;
    let sh2 = sh.clone();
    let acceptor = in_netns(NS_A, move || -> Result<(), String> {
        let l = TcpListener::bind(("::", port)).map_err(|e| e.to_string())?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        while !sh2.stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((s, _)) => {
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(50)));
                    let mut v = sh2.socks.lock().unwrap();
                    v.insert(0, Arc::new(s));
                    v.truncate(8);
                }
                Err(_) => sleep(Duration::from_millis(20)),
            }
        }
        sh2.socks.lock().unwrap().clear();
        Ok(())
    });
    // Sender: streams of random sizes, one after another, from both CPUs.
    let sh3 = sh.clone();
    let sender = in_netns(NS_B, move || -> Result<u64, String> {
        let mut rng = Rng(seed ^ 0x5EED);
        let pat = Pattern::new(seed);
        let mut sent = 0u64;
        while !sh3.stop.load(Ordering::Relaxed) {
            let _ = zcrx::sys::pin_to_cpu(rng.below(2) as usize);
            let Ok(mut c) = connect(addr_a(true, port), Duration::from_secs(2)) else {
                sleep(Duration::from_millis(50));
                continue;
            };
            let len = 64 * 1024 * (1 + rng.below(64));
            let mut off = 0u64;
            while off < len && !sh3.stop.load(Ordering::Relaxed) {
                let k = (len - off).min(64 << 10) as usize;
                if c.write_all(pat.slice(off, k)).is_err() {
                    break;
                }
                off += k as u64;
            }
            sent += off;
        }
        Ok(sent)
    });
    // Chaos: restart netdevsim's rx queues in every reset mode.
    let sh4 = sh.clone();
    let chaos = std::thread::spawn(move || {
        let mut rng = Rng(seed ^ 0xC4A05);
        let mut resets = 0u64;
        let path = "/sys/kernel/debug/netdevsim/netdevsim1/ports/0/queue_reset";
        while !sh4.stop.load(Ordering::Relaxed) {
            sleep(Duration::from_millis(100 + rng.below(400)));
            let cmd = format!("{} {}", rng.below(2), rng.below(4));
            if std::fs::write(path, cmd).is_ok() {
                resets += 1;
            }
        }
        resets
    });
    let workers: Vec<_> = (0..4)
        .map(|id| {
            let sh = sh.clone();
            in_netns(NS_A, move || worker(sh, seed, id))
        })
        .collect();
    let t0 = Instant::now();
    let mut last = Instant::now();
    while t0.elapsed() < Duration::from_secs(env.fuzz_seconds) {
        sleep(Duration::from_millis(200));
        if last.elapsed() > Duration::from_secs(30) {
            last = Instant::now();
            eprintln!(
                "fuzz: {} s of {}, {} received ({} zero-copy)",
                t0.elapsed().as_secs(),
                env.fuzz_seconds,
                mib(sh.bytes.load(Ordering::Relaxed)),
                mib(sh.zc_bytes.load(Ordering::Relaxed))
            );
        }
    }
    sh.stop.store(true, Ordering::Relaxed);
    let mut tally = Tally::default();
    let mut left = Vec::new();
    let mut errs = Vec::new();
    for w in workers {
        match join(w) {
            Ok((t, c)) => {
                tally.add(&t);
                left.extend(c);
            }
            Err(e) => errs.push(e),
        }
    }
    let resets = chaos.join().map_err(|_| "the queue-reset thread panicked".to_string());
    let accepted = join(acceptor);
    // Writes fail when a worker closes a socket (that is the point); the
    // sender itself must not.
    let sent = join(sender);
    if !errs.is_empty() {
        return Fail(format!("workers: {}", errs.join("; ")));
    }
    let (resets, sent) = (tryo!(resets), tryo!(sent));
    tryo!(accepted.map_err(|e| format!("acceptor: {e}")));
    // The run did what it says: traffic, reads, queue restarts. (Whether
    // a random worker reads zero-copy in a short run is chance: a run of
    // 20 s had none; the share is reported, not required.)
    let (got, zc) = (sh.bytes.load(Ordering::Relaxed), sh.zc_bytes.load(Ordering::Relaxed));
    if sent == 0 || got == 0 || resets == 0 {
        return Fail(format!("the run did nothing: sent {sent}, received {got} ({zc} zero-copy), {resets} queue resets"));
    }
    if let Some(n) = tally.0.get("register_ring ok") {
        return Fail(format!("a refill ring was accepted as an area {n} times"));
    }
    // The device goes under whatever is still bound, then everything closes.
    let bound = left.iter().filter(|c| c.bound).count();
    tryo!(n.delete(1));
    drop(left);
    drop(n);
    tryo!(wait_idle(Duration::from_secs(60)));
    let pinned = tryo!(vm_pinned_kb());
    if pinned != pinned0 {
        return Fail(format!("VmPin {pinned} kB after the run, {pinned0} kB before"));
    }
    let i = tryo!(info());
    tryo!(rmmod_eventually(Duration::from_secs(30)));
    tryo!(ensure_loaded(env));
    let total: u64 = tally.0.values().sum();
    env.diag(&format!(
        "fuzz: seed {seed}, {} s, {total} operations, {} queue resets; sent {}, received {} ({} zero-copy); \
         device deleted under {bound} bound contexts; afterwards contexts {} (the probe), areas {}, pinned {}, \
         pools {}, VmPin {pinned} kB; rmmod ok",
        env.fuzz_seconds,
        resets,
        mib(sent),
        mib(sh.bytes.load(Ordering::Relaxed)),
        mib(sh.zc_bytes.load(Ordering::Relaxed)),
        i.contexts,
        i.areas,
        i.pinned_pages,
        i.pools
    ));
    let mut line = String::new();
    for (k, v) in &tally.0 {
        if line.len() > 100 {
            env.diag(&format!("fuzz: {line}"));
            line.clear();
        }
        line.push_str(&format!("{k}: {v}; "));
    }
    env.diag(&format!("fuzz: {line}"));
    Pass
}
