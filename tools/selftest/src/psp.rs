// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! PSP (the PSP Security Protocol, `net/psp/`) with device memory on both
//! ends. netdevsim emulates PSP offload on both ports: the sending port
//! encapsulates what a PSP socket transmits (UDP, PSP header) and "sends"
//! it; the receiving port strips the encapsulation and tells the stack the
//! packet was decrypted (`nsim_do_psp()`). A PSP socket with a receive
//! association accepts data only from such packets.
//!
//! netdevsim finds a packet's association through its socket (`skb->sk`).
//! The series' devmem TX emulation (patch 33) transmits a copy of an skb
//! whose frags are dma-buf net_iovs: the copy has no socket of its own, so
//! it borrows the original's while PSP looks at it. Without that, a PSP
//! connection's devmem TX left unencapsulated while marked decrypted, and
//! the receiving socket dropped every segment: the stream stalled.
//!
//! The test: a connection from `nsb` to `nsa` gets PSP associations both
//! ways; `nsb` sends 1 MiB from a dma-buf (devmem TX); `nsa` receives it
//! through zcrx-rs on a header-split queue. The payload must arrive
//! byte-exact and zero-copy, and both devices' PSP counters (netdevsim's,
//! not the stack's) must have carried at least the payload's bytes.

use std::os::fd::AsFd;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};
use zcrx::psp::{self, Key, Stats, VERSION_GCM_128};
use zcrx::Pattern;

use crate::common::{ensure_loaded, mib, wait_idle};
use crate::devlog::DmaLog;
use crate::devmem_tx::{close_now, drain_errqueue, send_devmem, set_int, tx_dmabuf_of, SO_ZEROCOPY};
use crate::net::{self, addr_a, in_netns, join, receive_or_stall, with_receiver, Nsim, NS_A, NS_B};
use crate::tunnel::accept_within;
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("psp_devmem_tx_to_zero_copy_queue", psp_devmem_tx_to_zero_copy_queue)];

/// The payload of each connection: a dma-buf of this size, sent once.
const BYTES: usize = 1 << 20;

const T: Duration = Duration::from_secs(60);

/// Nothing received (or no room to send) for this long fails the test.
const STALL: Duration = Duration::from_secs(30);

/// Enables every version device `ifindex` of namespace `ns` supports;
/// returns its PSP device id, or why it has none (a kernel without
/// `CONFIG_INET_PSP`, a netdevsim that does not emulate PSP).
fn psp_up(ns: &'static str, ifindex: u32) -> Result<u32, String> {
    join(in_netns(ns, move || {
        let d = psp::device_of(ifindex).map_err(|e| format!("{ns}: psp dev-get: {e}"))?;
        if d.versions_cap & (1 << VERSION_GCM_128) == 0 {
            return Err(format!("{ns}: PSP device {} does not support AES-GCM-128 (caps {:#x})", d.id, d.versions_cap));
        }
        psp::enable(d.id, d.versions_cap).map_err(|e| format!("{ns}: psp dev-set: {e}"))?;
        Ok(d.id)
    }))
}

fn psp_stats(ns: &'static str, id: u32) -> Result<Stats, String> {
    join(in_netns(ns, move || psp::stats(id).map_err(|e| format!("{ns}: psp get-stats: {e}"))))
}

/// One connection, IPv4 or IPv6: PSP both ways, devmem TX, zero-copy
/// receive. Returns the diagnostics line.
fn one(n: &Nsim, v6: bool, port: u16, ids: (u32, u32), seed: u64) -> Result<String, String> {
    let fam = if v6 { "IPv6" } else { "IPv4" };
    let (a0, b0) = (psp_stats(NS_A, ids.0)?, psp_stats(NS_B, ids.1)?);
    let pat = Arc::new(Pattern::new(seed));
    let mut data = vec![0u8; BYTES];
    pat.fill(0, &mut data);
    // The keys cross between the two ends' threads; the sender starts
    // only once the receiver transmits with PSP too (its ACKs).
    let (a_key_tx, a_key_rx) = channel::<Key>();
    let (b_key_tx, b_key_rx) = channel::<Key>();
    let (go_tx, go_rx) = channel::<()>();
    let log = DmaLog::start()?;
    let p2 = pat.clone();
    let (a_dev, b_dev) = ids;
    let rx = with_receiver(n.a_idx, 0, 8 << 20, port, v6, move |z, l| {
        let s = accept_within(&l, T)?;
        let k = psp::rx_assoc(a_dev, s.as_fd(), VERSION_GCM_128).map_err(|e| format!("nsa: rx-assoc: {e}"))?;
        a_key_tx.send(k).map_err(|_| "the sender is gone")?;
        let kb = b_key_rx.recv_timeout(T).map_err(|_| "no key from the sender")?;
        psp::tx_assoc(a_dev, s.as_fd(), VERSION_GCM_128, &kb).map_err(|e| format!("nsa: tx-assoc: {e}"))?;
        let _ = go_tx.send(());
        // (a stall is the failure: without the fix every segment is dropped)
        receive_or_stall(z, &s, &p2, STALL)
    });
    let b_idx = n.b_idx;
    let tx = in_netns(NS_B, move || {
        let (b, _d, _m) = tx_dmabuf_of(b_idx, &data)?;
        let s = net::connect(addr_a(v6, port), T)?;
        let r = (|| -> Result<(), String> {
            let k = psp::rx_assoc(b_dev, s.as_fd(), VERSION_GCM_128).map_err(|e| format!("nsb: rx-assoc: {e}"))?;
            b_key_tx.send(k).map_err(|_| "the receiver is gone")?;
            let ka = a_key_rx.recv_timeout(T).map_err(|_| "no key from the receiver")?;
            psp::tx_assoc(b_dev, s.as_fd(), VERSION_GCM_128, &ka).map_err(|e| format!("nsb: tx-assoc: {e}"))?;
            go_rx.recv_timeout(T).map_err(|_| "the receiver never associated")?;
            set_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
            s.set_write_timeout(Some(STALL)).map_err(|e| format!("SO_SNDTIMEO: {e}"))?;
            let mut off = 0;
            while off < BYTES {
                off += send_devmem(&s, b.id(), off, BYTES - off, 0).map_err(|e| format!("devmem sendmsg at {off}: {e}"))?;
                drain_errqueue(&s);
            }
            net::wait_acked(&s, T)
        })();
        match r {
            Ok(()) => Ok(()),
            Err(e) => {
                // dma-buf data that cannot be sent must not keep the
                // binding's pages after the test
                let _ = close_now(s);
                Err(e)
            }
        }
    });
    let sent = join(tx);
    let got = join(rx).map_err(|e| format!("{fam}: receiver: {e}; sender: {:?}", sent.as_ref().err()))?;
    sent.map_err(|e| format!("{fam}: sender: {e}"))?;
    let (a1, b1) = (psp_stats(NS_A, ids.0)?, psp_stats(NS_B, ids.1)?);
    let (rx_p, rx_b, tx_p, tx_b) =
        (a1.rx_packets - a0.rx_packets, a1.rx_bytes - a0.rx_bytes, b1.tx_packets - b0.tx_packets, b1.tx_bytes - b0.tx_bytes);
    let line = format!(
        "{fam}: {} byte-exact, zero-copy {} copied {}; PSP: nsb encapsulated {tx_p} packets ({tx_b} bytes), \
         nsa decapsulated {rx_p} ({rx_b} bytes)",
        mib(got.bytes),
        mib(got.zc_bytes),
        mib(got.copy_bytes)
    );
    if got.bytes != BYTES as u64 {
        return Err(format!("{line}: {} of {BYTES} bytes arrived", got.bytes));
    }
    if got.zc_bytes != got.bytes {
        return Err(format!("{line}: not all of it came zero-copy"));
    }
    // The counters count TCP header and payload: at least the payload.
    if tx_b < BYTES as u64 || rx_b < BYTES as u64 {
        return Err(format!("{line}: less than the {BYTES} payload bytes went through PSP"));
    }
    let dma = log.check(0, got.zc_bytes)?;
    Ok(format!("{line}; {dma}"))
}

fn psp_devmem_tx_to_zero_copy_queue(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(n.hds(true));
    let ids = match (psp_up(NS_A, n.a_idx), psp_up(NS_B, n.b_idx)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            // Our configs enable PSP: missing, it is a failure, not a skip.
            return Fail(format!("{e} (CONFIG_INET_PSP is in scripts/config/base.config)"));
        }
    };
    for (k, v6) in [false, true].into_iter().enumerate() {
        let line = tryo!(one(&n, v6, 7441 + k as u16, ids, 0x7050 + k as u64));
        env.diag(&line);
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(30)));
    Pass
}
