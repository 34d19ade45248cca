// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! TCP sockets named by a file descriptor: lookup, the socket lock, and
//! reading the receive queue with `tcp_read_sock()`.

use core::{ffi::c_void, ptr::NonNull};

use kernel::{
    bindings,
    fs::file::LocalFile,
    new_spinlock_bh,
    prelude::*,
    sync::{aref::ARef, SpinLockBh}, //
};

use super::skb::SkBuff;

/// A TCP socket (IPv4 or IPv6), kept alive by a reference to its file.
///
/// # Invariants
///
/// `sk` is the `struct sock` of `file`'s socket, and its protocol is TCP
/// (`sk_prot->recvmsg == tcp_prot.recvmsg`).
pub(crate) struct TcpSocket {
    file: ARef<LocalFile>,
    sk: NonNull<bindings::sock>,
}

impl TcpSocket {
    /// The TCP socket behind `fd`: `EBADF` if there is no such fd, `ENOTSOCK`
    /// if it is not a socket, `EPROTONOSUPPORT` if it is not TCP.
    pub(crate) fn from_fd(fd: i32) -> Result<Self> {
        let fd = u32::try_from(fd).map_err(|_| EBADF)?;
        let file = LocalFile::fget(fd).map_err(|_| EBADF)?;
        // SAFETY: `file` is a live file; sock_from_file only looks at it.
        let sock = unsafe { bindings::sock_from_file(file.as_ptr()) };
        if sock.is_null() {
            return Err(ENOTSOCK);
        }
        // SAFETY: a live socket file has its socket, whose `sk` is set for
        // inet sockets; it lives as long as the file.
        let sk = NonNull::new(unsafe { (*sock).sk }).ok_or(ENOTSOCK)?;
        // SAFETY: `sk` is live (it belongs to the file we hold).
        if !unsafe { is_plain_tcp(sk) } {
            return Err(EPROTONOSUPPORT);
        }
        Ok(Self { file, sk })
    }

    /// Whether the socket file is in non-blocking mode (`O_NONBLOCK`).
    pub(crate) fn nonblocking(&self) -> bool {
        self.file.flags() & bindings::O_NONBLOCK != 0
    }

    /// Takes the socket lock (`lock_sock`), as a receive call does.
    /// `EPROTONOSUPPORT` if, by then, the socket is no longer read as plain
    /// TCP (an upper layer such as kTLS or a sockmap took it over since
    /// [`TcpSocket::from_fd`] looked; they switch under this lock).
    pub(crate) fn lock(&self) -> Result<LockedSock<'_>> {
        // SAFETY: the sock is live; lock_sock may sleep, we are in process context.
        unsafe { bindings::lock_sock(self.sk.as_ptr()) };
        // INVARIANT: checked under the lock, dropped (unlocking) on failure.
        let locked = LockedSock {
            sock: self,
            taken_over: false,
        };
        // SAFETY: the sock is live.
        if !unsafe { is_plain_tcp(self.sk) } {
            return Err(EPROTONOSUPPORT);
        }
        Ok(locked)
    }
}

/// Whether `sk` is a TCP socket read by TCP itself: its protocol's
/// `recvmsg` is `tcp_prot`'s (shared by IPv4 and IPv6), which kTLS with a
/// receive key, sockmap/BPF and other upper layers replace.
///
/// # Safety
///
/// `sk` is a live sock.
unsafe fn is_plain_tcp(sk: NonNull<bindings::sock>) -> bool {
    // SAFETY: `sk` is live; `sk_prot` is set for every sock and read once
    // (it is switched with WRITE_ONCE under the socket lock). `tcp_prot`
    // is exported.
    unsafe {
        let prot = core::ptr::addr_of!((*sk.as_ptr()).__sk_common.skc_prot).read_volatile();
        bindings::sk_is_tcp(sk.as_ptr())
            && (*prot).recvmsg.map(|f| f as usize) == bindings::tcp_prot.recvmsg.map(|f| f as usize)
    }
}

/// TCP connection states we care about.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum TcpState {
    /// Listening for connections.
    Listen,
    /// Closed (never connected, or connection gone).
    Close,
    /// Any other state.
    Other,
}

/// The receive queue's last skb when it was looked at (or none): compared
/// with the queue's tail by [`LockedSock::wait_data_or`], never dereferenced.
#[derive(Clone, Copy)]
pub(crate) struct QueueTail(*mut bindings::sk_buff);

/// How many receive calls of one [`Sleepers`] can sleep wakeable at once.
const SLEEPER_SLOTS: usize = 64;

/// Receive calls sleeping for data, to be woken for another reason
/// ([`Sleepers::wake_all`]: the buffers they receive into ran out). They
/// enter through [`LockedSock::wait_data_or`] only.
#[pin_data]
pub(crate) struct Sleepers {
    #[pin]
    slots: SpinLockBh<SleeperSlots>,
}

/// # Invariants
///
/// Every non-null slot is the wait queue of the socket of a [`LockedSock`]
/// for which a call of [`LockedSock::wait_data_or`] has not returned yet:
/// that call borrows the socket's [`TcpSocket`], whose file keeps the
/// socket, and so its wait queue, live. Slots are written only under the
/// lock.
struct SleeperSlots([*mut bindings::wait_queue_head; SLEEPER_SLOTS]);

// SAFETY: the pointers are plain addresses, dereferenced only by
// `Sleepers::wake_all` under the lock, on any CPU; nothing is tied to the
// thread that wrote them.
unsafe impl Send for SleeperSlots {}

impl Sleepers {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            slots <- new_spinlock_bh!(SleeperSlots([core::ptr::null_mut(); SLEEPER_SLOTS]), "Sleepers::slots"),
        })
    }

    /// Wakes every receive call sleeping in [`LockedSock::wait_data_or`]
    /// with these sleepers: a wake-up of its socket's wait queue, nothing
    /// else of the socket is touched (its callbacks may belong to whoever
    /// took it over meanwhile). Any context, softirq included.
    pub(crate) fn wake_all(&self) {
        let slots = self.slots.lock();
        for &wq in slots.0.iter().filter(|wq| !wq.is_null()) {
            // SAFETY: by the type invariant of `SleeperSlots` the wait
            // queue is live while it is in a slot, and the lock we hold
            // keeps it there. `__wake_up` takes the queue's own lock and
            // may be called from any context.
            unsafe {
                bindings::__wake_up(wq, bindings::TASK_INTERRUPTIBLE, 1, core::ptr::null_mut())
            };
        }
    }

    /// Puts `wq` in a free slot; `None` if there is none.
    fn enter(&self, wq: *mut bindings::wait_queue_head) -> Option<usize> {
        let mut slots = self.slots.lock();
        let i = slots.0.iter().position(|p| p.is_null())?;
        slots.0[i] = wq;
        Some(i)
    }

    fn leave(&self, i: usize) {
        self.slots.lock().0[i] = core::ptr::null_mut();
    }
}

/// A locked TCP socket, unlocked (`release_sock`) on drop.
///
/// # Invariants
///
/// We hold the socket lock, and while we do the socket is read by TCP
/// itself (checked under the lock at [`TcpSocket::lock`] and after every
/// wait that released it). Not `Send` (the lock is the task's).
pub(crate) struct LockedSock<'a> {
    sock: &'a TcpSocket,
    /// An upper layer took the socket over during a wait: nothing may be
    /// read any more.
    taken_over: bool,
}

/// What a read actor tells [`LockedSock::read`].
pub(crate) type ActorResult = core::result::Result<usize, Error>;

// `tcp_sk()` is a cast: the `struct sock` is the first member of `tcp_sock`.
const _: () = assert!(core::mem::offset_of!(bindings::tcp_sock, inet_conn.icsk_inet.sk) == 0);

impl LockedSock<'_> {
    fn sk(&self) -> *mut bindings::sock {
        self.sock.sk.as_ptr()
    }

    fn tp(&self) -> *mut bindings::tcp_sock {
        // By the type invariant the sock is TCP's, so it is the first member
        // of a `tcp_sock` (checked above).
        self.sk().cast()
    }

    /// Whether the next byte to read is at the urgent mark: urgent data is
    /// pending (announced or arrived) and the reader is at its sequence
    /// number, as `SIOCATMARK` reports it. `tcp_read_sock()` stops there if
    /// it read anything, and steps over the mark when a call starts at it.
    pub(crate) fn at_urgent_mark(&self) -> bool {
        let tp = self.tp();
        // The softirq side writes `urg_data` and `urg_seq` only under the
        // socket lock (segments wait in the backlog while we own it), and
        // `copied_seq` is the reader's, ours.
        // SAFETY: the sock is live and locked (see above); the volatile
        // reads are the C side's READ_ONCE.
        let (urg_data, urg_seq, copied_seq) = unsafe {
            (
                core::ptr::addr_of!((*tp).urg_data).read_volatile(),
                core::ptr::addr_of!((*tp).urg_seq).read_volatile(),
                core::ptr::addr_of!((*tp).copied_seq).read_volatile(),
            )
        };
        urg_data != 0 && urg_seq == copied_seq
    }

    /// The last skb of the receive queue (`skb_peek_tail()`), as an opaque
    /// token for [`LockedSock::wait_data_or`]: only compared, never followed.
    pub(crate) fn queue_tail(&self) -> QueueTail {
        // SAFETY: the sock is live. `list` is the named view of the queue
        // head's `next`/`prev` (a `struct_group`); reading `prev` volatile
        // is skb_peek_tail()'s READ_ONCE, which sk_wait_data() also does
        // without the socket lock ([`LockedSock::wait_data_or`] does).
        let (head, prev) = unsafe {
            let q = core::ptr::addr_of_mut!((*self.sk()).sk_receive_queue);
            let prev = core::ptr::addr_of!((*q).__bindgen_anon_1.list.prev).read_volatile();
            (q.cast::<bindings::sk_buff>(), prev)
        };
        let tail = if prev == head {
            core::ptr::null_mut()
        } else {
            prev
        };
        QueueTail(tail)
    }

    /// Connection state.
    pub(crate) fn state(&self) -> TcpState {
        // SAFETY: the sock is live and locked.
        let st = u32::from(unsafe { (*self.sk()).__sk_common.skc_state });
        match st {
            bindings::TCP_LISTEN => TcpState::Listen,
            bindings::TCP_CLOSE => TcpState::Close,
            _ => TcpState::Other,
        }
    }

    /// The peer finished sending and everything was read (`SOCK_DONE`).
    pub(crate) fn done(&self) -> bool {
        // SAFETY: the sock is live and locked.
        unsafe { bindings::sock_flag(self.sk(), bindings::sock_flags_SOCK_DONE) }
    }

    /// The receive side is shut down (FIN received or `shutdown(SHUT_RD)`).
    pub(crate) fn rcv_shutdown(&self) -> bool {
        // SAFETY: the sock is live and locked.
        u32::from(unsafe { (*self.sk()).sk_shutdown }) & bindings::RCV_SHUTDOWN != 0
    }

    /// Whether more data may still arrive: no end of stream, no pending
    /// error, not closed.
    pub(crate) fn may_get_more(&self) -> bool {
        // SAFETY: the sock is live and locked; `sk_err` is an int.
        let err = unsafe { core::ptr::addr_of!((*self.sk()).sk_err).read_volatile() };
        err == 0 && !self.done() && !self.rcv_shutdown() && self.state() != TcpState::Close
    }

    /// Takes the pending socket error, if any (`sock_error`), as a negative errno.
    pub(crate) fn take_error(&self) -> Option<Error> {
        // SAFETY: the sock is live and locked.
        let e = unsafe { bindings::sock_error(self.sk()) };
        (e != 0).then(|| Error::from_errno(e))
    }

    /// Bytes a blocking receive waits for before it returns (`SO_RCVLOWAT`,
    /// at least 1), like `sock_rcvlowat(sk, 0, INT_MAX)`.
    pub(crate) fn rcvlowat(&self) -> u64 {
        // SAFETY: the sock is live; `sk_rcvlowat` is an int that setsockopt
        // writes with WRITE_ONCE, so a volatile read is the READ_ONCE the C
        // code uses.
        let v = unsafe { core::ptr::addr_of!((*self.sk()).sk_rcvlowat).read_volatile() };
        u64::try_from(v).unwrap_or(0).max(1)
    }

    /// Receive timeout: 0 for non-blocking calls.
    pub(crate) fn rcvtimeo(&self, nonblock: bool) -> isize {
        // SAFETY: the sock is live.
        unsafe { bindings::sock_rcvtimeo(self.sk(), nonblock) }
    }

    /// Sleeps (releasing the lock) until the socket is woken (new data, an
    /// error, the end of the stream), `sleepers.wake_all()` is called or
    /// `stop()` holds, or for at most `timeo` jiffies, updating it; returns
    /// at once if the receive queue's tail is no longer `seen` (taken with
    /// [`LockedSock::queue_tail`] after the last read). Returns `Err` with
    /// the errno to report when a signal interrupted the wait. This is
    /// `sk_wait_data()` with `stop()` in its condition (without its
    /// `SOCKWQ_ASYNC_WAITDATA` bit: an `O_ASYNC` socket gets no `SIGIO` for
    /// data that arrives while a RECV sleeps on it).
    ///
    /// Passing the tail rather than none is what keeps a reader that cannot
    /// consume the queued data from spinning: with a NULL tail the wait
    /// returns at once while anything is queued.
    ///
    /// `stop()` is looked at once this call is on the socket's wait queue
    /// and in `sleepers` (with the socket lock released), so a wake-up for
    /// a condition `stop()` sees cannot fall between the caller's own check
    /// and the sleep: whoever makes `stop()` true and then calls
    /// `wake_all()` either is seen by `stop()` or wakes this call. With
    /// every slot taken (more than 64 sleepers) only data, `stop()` as
    /// first seen, the timeout or a signal end the wait.
    ///
    /// `EPROTONOSUPPORT` if an upper layer (kTLS, sockmap) took the socket
    /// over while the lock was released: nothing may be read any more.
    pub(crate) fn wait_data_or(
        &mut self,
        timeo: &mut isize,
        seen: QueueTail,
        sleepers: &Sleepers,
        stop: impl Fn() -> bool,
    ) -> Result {
        let sk = self.sk();
        // SAFETY: all-zero is a valid wait queue entry; we set what
        // `add_wait_queue` and `wait_woken` use (DEFINE_WAIT_FUNC).
        let mut wait: bindings::wait_queue_entry = unsafe { core::mem::zeroed() };
        // SAFETY: the current task is live while it runs this.
        wait.private = unsafe { bindings::get_current() }.cast();
        wait.func = Some(bindings::woken_wake_function);
        let wait = core::ptr::addr_of_mut!(wait);
        // SAFETY: the sock is live and locked; `sk_wq` (the union's plain
        // view; sk_sleep() reads it without RCU too) is its socket's wait
        // queue, set when the socket was made and live as long as the file
        // we hold. `wait`
        // stays in place on this stack frame until it is removed below.
        let wq = unsafe {
            let wq = core::ptr::addr_of_mut!((*(*sk).__bindgen_anon_1.sk_wq).wait);
            bindings::add_wait_queue(wq, wait);
            wq
        };
        // The slot is emptied before this returns, while `self` still
        // borrows the socket: the invariant of `SleeperSlots`.
        let slot = sleepers.enter(wq);
        // SAFETY: we hold the socket lock (the type invariant); it is taken
        // again below before anything else touches the socket.
        unsafe { bindings::release_sock(sk) };
        let ready = self.queue_tail().0 != seen.0 || stop();
        if !ready {
            // SAFETY: `wait` is on a wait queue, with this task and
            // `woken_wake_function`, as `wait_woken` requires.
            *timeo = unsafe { bindings::wait_woken(wait, bindings::TASK_INTERRUPTIBLE, *timeo) };
        }
        // SAFETY: the sock is live; process context (we slept above).
        unsafe { bindings::lock_sock(sk) };
        if let Some(i) = slot {
            sleepers.leave(i);
        }
        // SAFETY: `wait` was added to `wq` above and is still there.
        unsafe { bindings::remove_wait_queue(wq, wait) };
        // The lock was released: re-establish the type invariant.
        // SAFETY: the sock is live.
        if !unsafe { is_plain_tcp(self.sock.sk) } {
            self.taken_over = true;
            return Err(EPROTONOSUPPORT);
        }
        // SAFETY: reading the current task's signal state is always safe.
        if unsafe { bindings::signal_pending(bindings::get_current()) } != 0 {
            // SAFETY: pure computation on the timeout.
            return Err(Error::from_errno(unsafe {
                bindings::sock_intr_errno(*timeo)
            }));
        }
        Ok(())
    }

    /// Reads the receive queue with `tcp_read_sock()`, calling `actor` for
    /// each piece of data: `(skb, offset, len)`. The actor returns how many
    /// bytes it consumed (0 stops the read), or an error. Returns the bytes
    /// consumed in all, or the first error if nothing was consumed.
    pub(crate) fn read<F>(&mut self, actor: &mut F) -> Result<usize>
    where
        F: FnMut(&SkBuff, u32, usize) -> ActorResult,
    {
        if self.taken_over {
            return Err(EPROTONOSUPPORT);
        }
        let mut state = ActorState { actor, error: None };
        // SAFETY: all-zero is a valid read descriptor; we set what we use.
        let mut desc: bindings::read_descriptor_t = unsafe { core::mem::zeroed() };
        desc.count = usize::MAX;
        desc.arg.data = core::ptr::from_mut(&mut state).cast::<c_void>();
        // SAFETY: the sock is live and locked; `desc` and `state` outlive the
        // call; `read_actor::<F>` matches `state`'s type.
        let ret = unsafe { bindings::tcp_read_sock(self.sk(), &mut desc, Some(read_actor::<F>)) };
        if ret > 0 {
            Ok(ret as usize)
        } else if let Some(e) = state.error {
            Err(e)
        } else if ret < 0 {
            Err(Error::from_errno(ret))
        } else {
            Ok(0)
        }
    }
}

impl Drop for LockedSock<'_> {
    fn drop(&mut self) {
        // SAFETY: `lock()` took the socket lock.
        unsafe { bindings::release_sock(self.sk()) };
    }
}

struct ActorState<'a, F> {
    actor: &'a mut F,
    error: Option<Error>,
}

/// The `sk_read_actor_t` that [`LockedSock::read`] gives `tcp_read_sock()`.
///
/// # Safety
///
/// Called by `tcp_read_sock()` only, with the descriptor [`LockedSock::read`]
/// set up (its `arg.data` points to a live `ActorState<'_, F>`) and a live
/// skb of the locked socket.
unsafe extern "C" fn read_actor<F>(
    desc: *mut bindings::read_descriptor_t,
    skb: *mut bindings::sk_buff,
    offset: u32,
    len: usize,
) -> i32
where
    F: FnMut(&SkBuff, u32, usize) -> ActorResult,
{
    // SAFETY: `desc.arg.data` was set by `LockedSock::read` to its state.
    let state = unsafe { &mut *(*desc).arg.data.cast::<ActorState<'_, F>>() };
    // SAFETY: tcp_read_sock passes a live skb of the locked socket.
    let skb = unsafe { SkBuff::from_raw(skb) };
    // tcp_read_sock limits nothing itself: never report more than one call
    // can express.
    let len = len.min(i32::MAX as usize);
    match (state.actor)(skb, offset, len) {
        Ok(n) => n.min(len) as i32,
        Err(e) => {
            state.error = Some(e);
            0
        }
    }
}
