// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Test network: two netdevsim devices in two network namespaces, linked
//! (what one sends the other receives), with header/data split control and
//! netdevsim's header-split counters; threads that run in a namespace; a
//! pattern sender and a verifying zero-copy receiver.

use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::{self, sleep, JoinHandle};
use std::time::{Duration, Instant};

use zcrx::uapi::{ZCRX_RS_RECV_DONTWAIT, ZCRX_RS_RECV_MERGE, ZCRX_RS_REC_COPY};
use zcrx::{Pattern, Rec, Zcrx};

/// Receiver side namespace, device id 1, 192.0.2.1 / 2001:db8::1.
pub const NS_A: &str = "nsa";
/// Sender side namespace, device id 2, 192.0.2.2 / 2001:db8::2.
pub const NS_B: &str = "nsb";

/// Runs `prog` with `args` directly (no shell: on the debug kernel every
/// exec costs about 0.3 s), `input` on its stdin; Ok(output) on success.
pub fn run(prog: &str, args: &[&str], input: &str) -> Result<String, String> {
    let what = format!("{prog} {}", args.join(" "));
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).map_err(|e| format!("{what}: stdin: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("`{what}` failed ({}): {}", out.status, text.trim()))
    }
}

/// Moves the calling thread into network namespace `ns`.
pub fn enter_netns(ns: &str) -> io::Result<()> {
    let f = fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns on an open namespace fd affects only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on a new thread inside namespace `ns`.
pub fn in_netns<T: Send + 'static>(
    ns: &'static str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> JoinHandle<Result<T, String>> {
    thread::spawn(move || {
        enter_netns(ns).map_err(|e| format!("setns {ns}: {e}"))?;
        f()
    })
}

/// Joins a test thread, turning a panic into an error.
pub fn join<T>(h: JoinHandle<Result<T, String>>) -> Result<T, String> {
    h.join().unwrap_or_else(|_| Err("thread panicked".into()))
}

/// Header-split counters of one netdevsim rx queue.
#[derive(Debug, Default, Clone, Copy)]
pub struct HdsStats {
    pub dma_packets: u64,
    pub dma_bytes: u64,
    /// Delivered whole and readable because the pool was empty; only with
    /// the port's `hds_dry_fallback` debugfs knob set.
    pub fallback_packets: u64,
    pub fallback_bytes: u64,
    /// Dropped because the pool was empty (by default, like hardware).
    pub drop_no_buf: u64,
    /// Dropped: more than MAX_SKB_FRAGS buffers needed.
    pub drop_frags: u64,
    /// Dropped: the emulated DMA failed.
    pub drop_dma: u64,
    /// A checksum netdevsim checks (the TCP one, a tunnel's UDP or GRE
    /// one) was wrong: split all the same, and the stack checks from the
    /// first wrong one on (CHECKSUM_NONE, or a lower `csum_level`).
    pub csum_bad: u64,
    /// Delivered with CHECKSUM_COMPLETE (`hds_csum_complete`).
    pub csum_complete: u64,
}

impl HdsStats {
    /// Every counter of `self` minus `before`.
    pub fn since(&self, before: &HdsStats) -> HdsStats {
        HdsStats {
            dma_packets: self.dma_packets - before.dma_packets,
            dma_bytes: self.dma_bytes - before.dma_bytes,
            fallback_packets: self.fallback_packets - before.fallback_packets,
            fallback_bytes: self.fallback_bytes - before.fallback_bytes,
            drop_no_buf: self.drop_no_buf - before.drop_no_buf,
            drop_frags: self.drop_frags - before.drop_frags,
            drop_dma: self.drop_dma - before.drop_dma,
            csum_bad: self.csum_bad - before.csum_bad,
            csum_complete: self.csum_complete - before.csum_complete,
        }
    }
}

/// netdevsim's counters of rx queue `q` of device `id` (1: receiver), from
/// any thread.
pub fn hds_stats(id: u32, q: u32) -> Result<HdsStats, String> {
    let path = format!("/sys/kernel/debug/netdevsim/netdevsim{id}/ports/0/hds_stats");
    let text = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    let line = text.lines().find(|l| l.starts_with(&format!("queue {q} "))).ok_or(format!("{path}: no queue {q}"))?;
    let v: Vec<&str> = line.split_whitespace().collect();
    // A missing counter is an error, not a zero that passes every check.
    let get = |k: &str| -> Result<u64, String> {
        v.iter()
            .position(|x| *x == k)
            .and_then(|i| v.get(i + 1))
            .and_then(|s| s.parse().ok())
            .ok_or(format!("{path}: no counter {k} in {line:?} (netdevsim without our patches?)"))
    };
    Ok(HdsStats {
        dma_packets: get("dma_packets")?,
        dma_bytes: get("dma_bytes")?,
        fallback_packets: get("fallback_packets")?,
        fallback_bytes: get("fallback_bytes")?,
        drop_no_buf: get("drop_no_buf")?,
        drop_frags: get("drop_frags")?,
        drop_dma: get("drop_dma")?,
        csum_bad: get("csum_bad")?,
        csum_complete: get("csum_complete")?,
    })
}

/// netdevsim's `dma_offset` (series patch 56): its DMA addresses are this
/// far above the physical ones, above all of the guest's memory, so that a
/// physical address handed to the device as a DMA address finds no memory
/// (netdevsim drops the packet, `drop_dma`) and every data test fails.
/// scripts/guest-lib.sh and scripts/guest-tree-tests.sh use the same value.
pub const NSIM_DMA_OFFSET: u64 = 0x1000_0000_0000;

/// The linked pair.
pub struct Nsim {
    /// Receiver netdev (in `nsa`).
    pub a: String,
    /// Sender netdev (in `nsb`).
    pub b: String,
    /// The receiver's ifindex, in its namespace.
    pub a_idx: u32,
    /// The sender's ifindex, in its namespace.
    pub b_idx: u32,
    pub queues: u32,
}

fn nsim_dev(id: u32) -> Result<String, String> {
    let dir = format!("/sys/bus/netdevsim/devices/netdevsim{id}/net");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        if let Some(e) = fs::read_dir(&dir).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()) {
            return Ok(e.file_name().to_string_lossy().into_owned());
        }
        sleep(Duration::from_millis(50));
    }
    Err(format!("netdevsim{id} has no netdev"))
}

pub(crate) fn write_sys(path: &str, what: &str) -> Result<(), String> {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(what.as_bytes()))
        .map_err(|e| format!("write {what:?} to {path}: {e}"))
}

impl Nsim {
    /// Creates the pair with `queues` queues each, addresses, links up.
    pub fn up(queues: u32) -> Result<Nsim, String> {
        Self::up_steered(queues, None)
    }

    /// [`Nsim::up`], with the sender's whole traffic on tx queue `steer` if
    /// given, else spread: a thread pinned to CPU q sends on queue q. (XPS;
    /// netdevsim delivers tx queue q to the peer's rx queue q.)
    ///
    /// Process spawns cost about a second each in the debug kernel under
    /// emulation: everything that can be done without one is, and the `ip`
    /// commands go in batches.
    pub fn up_steered(queues: u32, steer: Option<u32>) -> Result<Nsim, String> {
        let build = std::env::var("ZCRX_BUILD").map_err(|_| "ZCRX_BUILD not set (run in the VM)")?;
        if !Path::new("/sys/bus/netdevsim").exists() {
            let off = format!("dma_offset={NSIM_DMA_OFFSET:#x}");
            run("insmod", &[&format!("{build}/drivers/net/netdevsim/netdevsim.ko"), &off], "")?;
        }
        // Every test runs with DMA addresses that are not physical ones.
        let p = "/sys/module/netdevsim/parameters/dma_offset";
        match fs::read_to_string(p).map(|v| v.trim().parse::<u64>()) {
            Ok(Ok(NSIM_DMA_OFFSET)) => {}
            r => return Err(format!("netdevsim was loaded without dma_offset={NSIM_DMA_OFFSET:#x} ({p}: {r:?})")),
        }
        Self::down_quiet();
        write_sys("/sys/bus/netdevsim/new_device", &format!("1 1 {queues}"))?;
        write_sys("/sys/bus/netdevsim/new_device", &format!("2 1 {queues}"))?;
        // No `udevadm settle`: the guest runs with net.ifnames=0 (vm.sh), so
        // udev does not rename these netdevs, and the names read are final.
        let a = nsim_dev(1)?;
        let b = nsim_dev(2)?;
        // XPS while the sender is still in this namespace's sysfs.
        // SAFETY: sysconf has no preconditions.
        let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.clamp(1, 63) as u32;
        // (XPS exists only on multi-queue devices.)
        for q in (0..queues).filter(|_| queues > 1) {
            let mask = match steer {
                Some(s) if s == q => (1u64 << ncpu) - 1,
                Some(_) => 0,
                None => 1u64 << (q % ncpu),
            };
            write_sys(&format!("/sys/class/net/{b}/queues/tx-{q}/xps_cpus"), &format!("{mask:x}"))?;
        }
        run("ip", &["-b", "-"], &format!("netns add {NS_A}\nnetns add {NS_B}\nlink set {a} netns {NS_A}\nlink set {b} netns {NS_B}\n"))?;
        let ifindex = |ns: &'static str, d: String| -> Result<u32, String> {
            join(in_netns(ns, move || zcrx::sys::ifindex(&d).map_err(|e| format!("if_nametoindex({d}): {e}"))))
        };
        let (a_idx, b_idx) = (ifindex(NS_A, a.clone())?, ifindex(NS_B, b.clone())?);
        let fa = fs::File::open(format!("/run/netns/{NS_A}")).map_err(|e| e.to_string())?;
        let fb = fs::File::open(format!("/run/netns/{NS_B}")).map_err(|e| e.to_string())?;
        write_sys("/sys/bus/netdevsim/link_device", &format!("{}:{a_idx} {}:{b_idx}", fa.as_raw_fd(), fb.as_raw_fd()))?;
        for (ns, d, v4, v6) in [(NS_A, &a, "192.0.2.1", "2001:db8::1"), (NS_B, &b, "192.0.2.2", "2001:db8::2")] {
            run(
                "ip",
                &["-n", ns, "-b", "-"],
                &format!("addr add {v4}/24 dev {d}\naddr add {v6}/64 dev {d} nodad\nlink set {d} up\nlink set lo up\n"),
            )?;
        }
        Ok(Nsim { a, b, a_idx, b_idx, queues })
    }

    fn down_quiet() {
        for id in [1, 2] {
            if Path::new(&format!("/sys/bus/netdevsim/devices/netdevsim{id}")).exists() {
                let _ = write_sys("/sys/bus/netdevsim/del_device", &id.to_string());
            }
        }
        // `ip netns del`, without spawning it.
        for ns in [NS_A, NS_B] {
            let p = format!("/run/netns/{ns}");
            if let Ok(c) = std::ffi::CString::new(p.clone()) {
                // SAFETY: a valid path; detaching a mount we created.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let _ = fs::remove_file(&p);
        }
    }

    /// Header/data split on the receiver, `hds-thresh 0` (ethtool netlink,
    /// `zcrx::ethtool`: bookworm's ethtool cannot set it).
    pub fn hds(&self, on: bool) -> Result<(), String> {
        let idx = self.a_idx;
        join(in_netns(NS_A, move || zcrx::ethtool::set_header_split(idx, on).map_err(|e| format!("ethtool rings-set tcp-data-split: {e}"))))
    }

    /// Sets the MTU of both devices.
    pub fn mtu(&self, mtu: u32) -> Result<(), String> {
        for (ns, d) in [(NS_A, &self.a), (NS_B, &self.b)] {
            run("ip", &["-n", ns, "link", "set", d, "mtu", &mtu.to_string()], "")?;
        }
        Ok(())
    }

    /// netdevsim's counters of rx queue `q` of device `id` (1: receiver).
    pub fn stats(&self, id: u32, q: u32) -> Result<HdsStats, String> {
        hds_stats(id, q)
    }

    /// netdevsim's `hds_dry_fallback` on device `id`: when its pool is
    /// empty, deliver packets whole and readable instead of dropping them.
    pub fn dry_fallback(&self, id: u32, on: bool) -> Result<(), String> {
        write_sys(&format!("/sys/kernel/debug/netdevsim/netdevsim{id}/ports/0/hds_dry_fallback"), if on { "1" } else { "0" })
    }

    /// netdevsim's `hds_copybreak` on device `id`: a TCP payload of at
    /// most `bytes` stays readable in the header buffer.
    pub fn copybreak(id: u32, bytes: u32) -> Result<(), String> {
        write_sys(&format!("/sys/kernel/debug/netdevsim/netdevsim{id}/ports/0/hds_copybreak"), &bytes.to_string())
    }

    /// netdevsim's `hds_csum_complete` on device `id`: split packets that
    /// are not GSO bursts come with CHECKSUM_COMPLETE over the frame.
    pub fn csum_complete(id: u32, on: bool) -> Result<(), String> {
        write_sys(&format!("/sys/kernel/debug/netdevsim/netdevsim{id}/ports/0/hds_csum_complete"), if on { "1" } else { "0" })
    }

    /// Deletes netdevsim device `id` (its netdev is unregistered).
    pub fn delete(&self, id: u32) -> Result<(), String> {
        write_sys("/sys/bus/netdevsim/del_device", &id.to_string())
    }
}

impl Drop for Nsim {
    fn drop(&mut self) {
        Self::down_quiet();
    }
}

/// The source tree of the kernel under test (YNL, specs): the build
/// directory's `source` link, so that it is the tree of whichever kernel
/// (7.2 or 7.3) the VM booted.
pub fn ksrc() -> Result<String, String> {
    let build = std::env::var("ZCRX_BUILD").map_err(|_| "ZCRX_BUILD not set (run in the VM)")?;
    Ok(format!("{build}/source"))
}

/// The start of a Python script on the tree's YNL library
/// (`tools/net/ynl/pyynl`) for the netdev family: it takes the kernel tree
/// and an ifindex as arguments, and leaves `ynl` and `ifindex` set.
pub const NETDEV_YNL: &str = "import sys
ksrc, ifindex = sys.argv[1], int(sys.argv[2])
sys.path.append(ksrc + '/tools/net/ynl/pyynl')
from lib import YnlFamily
ynl = YnlFamily(ksrc + '/Documentation/netlink/specs/netdev.yaml', schema='')
";

/// Runs [`NETDEV_YNL`] followed by `body` for `ifindex`, in the caller's
/// network namespace; its output.
pub fn netdev_ynl(body: &str, ifindex: u32) -> Result<String, String> {
    let script = format!("{NETDEV_YNL}{body}");
    run("/usr/bin/python3", &["-c", &script, &ksrc()?, &ifindex.to_string()], "")
}

/// The ethtool the toolchain fetched (bookworm's 6.1 cannot create RSS
/// contexts or set header split by netlink; the newer one can).
pub fn ethtool() -> Result<String, String> {
    let cache = std::env::var("ZCRX_CACHE").map_err(|_| "ZCRX_CACHE not set (run in the VM)")?;
    Ok(format!("{cache}/ethtool/root/usr/sbin/ethtool"))
}

/// Runs [`ethtool`] with `args` in namespace `ns`; its output.
pub fn ethtool_in(ns: &'static str, args: &[&str]) -> Result<String, String> {
    let ethtool = ethtool()?;
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    join(in_netns(ns, move || run(&ethtool, &args.iter().map(String::as_str).collect::<Vec<_>>(), "")))
}

/// Address of the receiver.
pub fn addr_a(v6: bool, port: u16) -> SocketAddr {
    let ip: IpAddr = if v6 { "2001:db8::1".parse().unwrap() } else { "192.0.2.1".parse().unwrap() };
    SocketAddr::new(ip, port)
}

/// Starts a sender in `nsb`: connects to `to` (retrying while the listener
/// comes up), sends `bytes` of `pat` from stream offset 0, closes. Pinned
/// to `cpu` (selects the tx queue, see [`Nsim::up`]).
pub fn sender(to: SocketAddr, bytes: u64, pat: Arc<Pattern>, cpu: usize) -> JoinHandle<Result<u64, String>> {
    sender_timeout(to, bytes, pat, cpu, Duration::from_secs(60))
}

/// [`sender`] whose writes give up after `timeout` without progress.
pub fn sender_timeout(to: SocketAddr, bytes: u64, pat: Arc<Pattern>, cpu: usize, timeout: Duration) -> JoinHandle<Result<u64, String>> {
    in_netns(NS_B, move || {
        let _ = zcrx::sys::pin_to_cpu(cpu);
        send_pattern(to, bytes, &pat, timeout)
    })
}

/// A sender in the caller's own network namespace (loopback tests):
/// `bytes` of `pat` to `to`, as [`sender`] does.
pub fn local_sender(to: SocketAddr, bytes: u64, pat: Arc<Pattern>) -> JoinHandle<Result<u64, String>> {
    std::thread::spawn(move || send_pattern(to, bytes, &pat, Duration::from_secs(60)))
}

/// Waits up to `t` until the peer has acknowledged everything written to
/// `s` (`SIOCOUTQ` is 0): the bytes are in the peer's socket.
pub fn wait_acked(s: &impl AsRawFd, t: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let mut outq: libc::c_int = 0;
        zcrx::sys::ioctl(s, libc::TIOCOUTQ as libc::c_ulong, &mut outq as *mut libc::c_int as usize)
            .map_err(|e| format!("SIOCOUTQ: {e}"))?;
        if outq == 0 {
            return Ok(());
        }
        if t0.elapsed() > t {
            return Err(format!("{outq} bytes not acknowledged after {t:?}"));
        }
        sleep(Duration::from_millis(2));
    }
}

/// The seed of a flow's data: `base` and the sender's port, so that every
/// connection of a test carries data of its own and a buffer delivered to
/// the wrong socket (or a stale one, at the same offset) fails the check.
/// The receiver finds the port in `accept()`'s peer address.
pub fn flow_seed(base: u64, port: u16) -> u64 {
    base ^ (u64::from(port) << 40)
}

/// [`sender`] whose data is seeded by [`flow_seed`]`(base, its own port)`.
pub fn flow_sender(to: SocketAddr, bytes: u64, base: u64, cpu: usize) -> JoinHandle<Result<u64, String>> {
    in_netns(NS_B, move || {
        let _ = zcrx::sys::pin_to_cpu(cpu);
        let s = connect(to, Duration::from_secs(60))?;
        let port = s.local_addr().map_err(|e| format!("local address: {e}"))?.port();
        send_on(s, bytes, &Pattern::new(flow_seed(base, port)))
    })
}

fn send_pattern(to: SocketAddr, bytes: u64, pat: &Pattern, timeout: Duration) -> Result<u64, String> {
    send_on(connect(to, timeout)?, bytes, pat)
}

fn send_on(mut s: TcpStream, bytes: u64, pat: &Pattern) -> Result<u64, String> {
    let mut off = 0u64;
    while off < bytes {
        let n = ((bytes - off) as usize).min(256 << 10);
        s.write_all(pat.slice(off, n)).map_err(|e| format!("send at {off}: {e}"))?;
        off += n as u64;
    }
    drop(s);
    Ok(off)
}

/// Connects to `to`, retrying for 10 s while the receiver sets up; writes
/// give up after `timeout` without progress (not after TCP's 15 minutes of
/// retransmissions).
pub fn connect(to: SocketAddr, timeout: Duration) -> Result<TcpStream, String> {
    let t0 = Instant::now();
    let s = loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(5)) {
            Ok(s) => break s,
            Err(_) if t0.elapsed() < Duration::from_secs(10) => sleep(Duration::from_millis(50)),
            Err(e) => return Err(format!("connect {to}: {e}")),
        }
    };
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    Ok(s)
}

/// What a receive loop saw.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rx {
    pub bytes: u64,
    pub zc_bytes: u64,
    pub copy_bytes: u64,
    pub records: u64,
    /// Buffers the zero-copy records touched (one reference each).
    pub zc_bufs: u64,
    /// Zero-copy records that span more than one buffer (merged).
    pub merged: u64,
    pub enobufs: u64,
    /// Most refill entries that waited for room on the ring at once.
    pub backlog_max: u64,
}

/// Receives `sock` to the end through `z`, checking every byte against
/// `pat`, giving every buffer back. `stop_after`: return early after that
/// many bytes (the rest stays in the socket).
pub fn receive(z: &mut Zcrx, sock: &TcpStream, pat: &Pattern, stop_after: Option<u64>) -> Result<Rx, String> {
    receive_from(z, sock, pat, 0, stop_after)
}

/// [`receive`] from stream offset `start` (what was received before, by an
/// earlier call); the returned counts are of this call only.
pub fn receive_from(z: &mut Zcrx, sock: &TcpStream, pat: &Pattern, start: u64, stop_after: Option<u64>) -> Result<Rx, String> {
    receive_flags(z, sock, pat, start, stop_after, 0)
}

/// [`receive_from`] with RECV flags `flags` (`ZCRX_RS_RECV_MERGE`).
pub fn receive_flags(z: &mut Zcrx, sock: &TcpStream, pat: &Pattern, start: u64, stop_after: Option<u64>, flags: u32) -> Result<Rx, String> {
    receive_inner(z, sock, pat, start, stop_after, flags, None)
}

/// [`receive`] that fails once nothing arrived for `stall` (at 10 s
/// granularity), for a test whose failure is a stall.
pub fn receive_or_stall(z: &mut Zcrx, sock: &TcpStream, pat: &Pattern, stall: Duration) -> Result<Rx, String> {
    receive_inner(z, sock, pat, 0, None, 0, Some(stall))
}

fn receive_inner(
    z: &mut Zcrx,
    sock: &TcpStream,
    pat: &Pattern,
    start: u64,
    stop_after: Option<u64>,
    flags: u32,
    stall: Option<Duration>,
) -> Result<Rx, String> {
    let bs = z.buf_size() as u64;
    let mut recs = vec![Rec::default(); 128];
    let mut rx = Rx::default();
    let t0 = Instant::now();
    let mut progress = Instant::now();
    // A blocking socket gets a bound: a stall is reported (below) instead
    // of hanging the VM until its outer timeout.
    if sock.read_timeout().map_err(|e| format!("SO_RCVTIMEO: {e}"))?.is_none() {
        sock.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
    }
    loop {
        if stop_after.is_some_and(|s| rx.bytes >= s) {
            return Ok(rx);
        }
        if t0.elapsed() > Duration::from_secs(300) {
            return Err(format!("receive timed out after {} bytes", rx.bytes));
        }
        if stall.is_some_and(|s| progress.elapsed() >= s) {
            return Err(format!("nothing received for {} s: {}", progress.elapsed().as_secs(), stall_report(z, sock, rx.bytes)));
        }
        let got = match z.recv(sock.as_raw_fd(), &mut recs, flags) {
            Ok(g) => g,
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                // SO_RCVTIMEO ran out with nothing received: say where
                // things stand, then keep waiting (the deadline above ends
                // it).
                eprintln!("# stall: nothing received for a while: {}", stall_report(z, sock, rx.bytes));
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                // Every buffer is in use (tiny area): we hold none, so they
                // are in flight; wait for the stack to let go.
                rx.enobufs += 1;
                sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(format!("recv after {} bytes: {e}", rx.bytes)),
        };
        if got.bytes == 0 {
            return Ok(rx);
        }
        progress = Instant::now();
        let mut sum = 0u64;
        for r in &recs[..got.records] {
            let data = z.data(r);
            if let Some(bad) = pat.check(start + rx.bytes, data) {
                return Err(format!("payload mismatch at stream offset {bad} (record off {} len {} flags {})", r.off, r.len, r.flags));
            }
            rx.bytes += u64::from(r.len);
            sum += u64::from(r.len);
            if r.flags & ZCRX_RS_REC_COPY != 0 {
                rx.copy_bytes += u64::from(r.len);
            } else {
                rx.zc_bytes += u64::from(r.len);
                crate::devlog::note(data)?;
                let bufs = (r.off + u64::from(r.len).max(1) - 1) / bs - r.off / bs + 1;
                rx.zc_bufs += bufs;
                rx.merged += u64::from(bufs > 1);
            }
            if flags & ZCRX_RS_RECV_MERGE == 0 && (r.off % bs) + u64::from(r.len) > bs {
                return Err(format!("record off {} len {} crosses a buffer without ZCRX_RS_RECV_MERGE", r.off, r.len));
            }
        }
        if sum != got.bytes {
            return Err(format!("records describe {sum} bytes, recv said {}", got.bytes));
        }
        rx.records += got.records as u64;
        z.refill(&recs[..got.records]).map_err(|e| format!("refill: {e}"))?;
        rx.backlog_max = rx.backlog_max.max(z.refill_backlog() as u64);
    }
}

/// `TCP_INFO` of socket `fd`.
fn tcp_info(fd: &impl AsRawFd) -> Result<libc::tcp_info, String> {
    // SAFETY: all-zero is a valid tcp_info.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `ti` is writable for `len` bytes.
    let r =
        unsafe { libc::getsockopt(fd.as_raw_fd(), libc::IPPROTO_TCP, libc::TCP_INFO, (&mut ti as *mut libc::tcp_info).cast(), &mut len) };
    if r != 0 {
        return Err(format!("TCP_INFO: {}", io::Error::last_os_error()));
    }
    Ok(ti)
}

/// The TCP state of socket `fd` (`TCP_ESTABLISHED` is 1), from `TCP_INFO`.
pub fn tcp_state(fd: &impl AsRawFd) -> Result<u8, String> {
    tcp_info(fd).map(|ti| ti.tcpi_state)
}

/// The kernel's view of a TCP socket, one line: state, retransmission and
/// backoff, what is in flight.
pub fn tcp_info_line(fd: &impl AsRawFd) -> String {
    let ti = match tcp_info(fd) {
        Ok(ti) => ti,
        Err(e) => return e,
    };
    format!(
        "state {} ca {} rto {} ms backoff {} probes {} retransmits {} unacked {} lost {} retrans {} total_retrans {} \
         cwnd {} rcv_space {} last_data_recv {} ms last_ack_recv {} ms",
        ti.tcpi_state,
        ti.tcpi_ca_state,
        ti.tcpi_rto / 1000,
        ti.tcpi_backoff,
        ti.tcpi_probes,
        ti.tcpi_retransmits,
        ti.tcpi_unacked,
        ti.tcpi_lost,
        ti.tcpi_retrans,
        ti.tcpi_total_retrans,
        ti.tcpi_snd_cwnd,
        ti.tcpi_rcv_space,
        ti.tcpi_last_data_recv,
        ti.tcpi_last_ack_recv
    ) + &meminfo(fd)
}

/// A socket's receive memory, from `SO_MEMINFO`.
#[derive(Debug, Clone, Copy)]
pub struct SkMem {
    /// What its receive and out-of-order queues hold (truesize).
    pub rmem_alloc: u32,
    pub rcvbuf: u32,
    pub backlog: u32,
    pub drops: u32,
}

/// `SO_MEMINFO` of socket `fd`.
pub fn sk_mem(fd: &impl AsRawFd) -> Result<SkMem, String> {
    let mut m = [0u32; 9];
    let mut len = std::mem::size_of_val(&m) as libc::socklen_t;
    // SAFETY: `m` is writable for `len` bytes.
    let r = unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO, m.as_mut_ptr().cast(), &mut len) };
    if r != 0 {
        return Err(format!("SO_MEMINFO: {}", io::Error::last_os_error()));
    }
    Ok(SkMem { rmem_alloc: m[0], rcvbuf: m[1], backlog: m[7], drops: m[8] })
}

/// The socket's memory (`SO_MEMINFO`): what its queues hold, the
/// out-of-order queue included, and what it dropped.
fn meminfo(fd: &impl AsRawFd) -> String {
    match sk_mem(fd) {
        Ok(m) => format!("; rmem_alloc {} rcvbuf {} backlog {} drops {}", m.rmem_alloc, m.rcvbuf, m.backlog, m.drops),
        Err(e) => format!("; {e}"),
    }
}

/// What a stalled receiver knows: its context's buffers and the socket.
pub fn stall_report(z: &Zcrx, sock: &TcpStream, bytes: u64) -> String {
    let st = match z.stats() {
        Ok(s) => format!(
            "area {} buffers, {} free, {} held by the user, alloc_fail {}, refill ok {} bad {}",
            s.area_buffers, s.free_buffers, s.user_held, s.alloc_fail, s.refill_ok, s.refill_bad
        ),
        Err(e) => format!("STATS: {e}"),
    };
    format!(
        "after {bytes} bytes: {st}; refill ring room {} backlog {}; socket: {}",
        z.refill_room(),
        z.refill_backlog(),
        tcp_info_line(sock)
    )
}

/// A receiver context in `nsa`: area of `area_bytes`, bound to `rxq`, and a
/// listener on `port` (v4 or v6). Runs `body(zcrx, listener)` there.
pub fn with_receiver<T: Send + 'static>(
    a_idx: u32,
    rxq: u32,
    area_bytes: usize,
    port: u16,
    v6: bool,
    body: impl FnOnce(&mut Zcrx, TcpListener) -> Result<T, String> + Send + 'static,
) -> JoinHandle<Result<T, String>> {
    with_receiver_rcvbuf(a_idx, rxq, area_bytes, port, v6, None, body)
}

/// [`with_receiver`] whose listener has `SO_RCVBUF` set to `rcvbuf` before
/// anyone can connect (accepted sockets inherit it).
pub fn with_receiver_rcvbuf<T: Send + 'static>(
    a_idx: u32,
    rxq: u32,
    area_bytes: usize,
    port: u16,
    v6: bool,
    rcvbuf: Option<i32>,
    body: impl FnOnce(&mut Zcrx, TcpListener) -> Result<T, String> + Send + 'static,
) -> JoinHandle<Result<T, String>> {
    let setup = move |l: &TcpListener| match rcvbuf {
        Some(b) => set_rcvbuf(l.as_raw_fd(), b),
        None => Ok(()),
    };
    with_receiver_setup(a_idx, rxq, area_bytes, port, v6, setup, body)
}

/// [`with_receiver`] that runs `setup` on the listener before anyone can
/// connect: socket options meant for the accepted connection must be set
/// there, as a connection the sender completes before `body` runs is
/// cloned from the listener as it was then (seen: `SO_RCVLOWAT` set in
/// `body` missing on the accepted socket once in a few hundred runs).
pub fn with_receiver_setup<T: Send + 'static>(
    a_idx: u32,
    rxq: u32,
    area_bytes: usize,
    port: u16,
    v6: bool,
    setup: impl FnOnce(&TcpListener) -> Result<(), String> + Send + 'static,
    body: impl FnOnce(&mut Zcrx, TcpListener) -> Result<T, String> + Send + 'static,
) -> JoinHandle<Result<T, String>> {
    // Returns once the receiver listens (or failed before): what the caller
    // does next (inject faults, restart the queue, connect) must not race
    // with the set-up. Seen: 2% of atomic allocations failing made listen()
    // fail with EADDRINUSE (the port's bind bucket could not be allocated).
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let h = in_netns(NS_A, move || {
        let mut z = Zcrx::open().map_err(|e| format!("open /dev/zcrx: {e}"))?;
        z.register_area(area_bytes).map_err(|e| format!("register area: {e}"))?;
        z.bind(a_idx, rxq, 0).map_err(|e| format!("bind queue {rxq}: {e}"))?;
        let any: SocketAddr =
            if v6 { (std::net::Ipv6Addr::UNSPECIFIED, port).into() } else { (std::net::Ipv4Addr::UNSPECIFIED, port).into() };
        let l = TcpListener::bind(any).map_err(|e| format!("listen: {e}"))?;
        setup(&l)?;
        // The caller may have stopped waiting only if it panicked.
        let _ = ready_tx.send(());
        body(&mut z, l)
    });
    // An error (the sender dropped unsent) means the thread failed before
    // listening; joining `h` reports why.
    let _ = ready_rx.recv();
    h
}

/// `SO_RCVBUF` of socket `fd` (the kernel doubles it).
pub fn set_rcvbuf(fd: std::os::fd::RawFd, bytes: i32) -> Result<(), String> {
    // SAFETY: the caller's open socket, borrowed for this call only.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let n = u32::try_from(bytes).map_err(|_| format!("SO_RCVBUF {bytes}: negative"))?;
    zcrx::sys::set_rcvbuf(&fd, n).map_err(|e| format!("SO_RCVBUF {bytes}: {e}"))
}

/// Non-blocking receive flag, re-exported for tests.
pub const DONTWAIT: u32 = ZCRX_RS_RECV_DONTWAIT;
