// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! IPsec crypto offload towards a provider-bound queue. A NIC with crypto
//! offload decrypts ESP before it splits headers from data, so what it
//! puts in the provider's buffers is the TCP payload and the ESP trailer
//! after it (padding, pad length, next header, ICV). The stack then reads
//! the trailer to strip it: before the kernel fix (`esp: drop a packet
//! whose trailer cannot be read instead of BUG()`) that read failed on
//! provider memory and `esp_remove_trailer()` hit `BUG()` in softirq, for
//! the first segment of any peer with the SA (a SYN is enough: its trailer
//! is in the data buffer too). Now the packet is dropped and counted
//! (`XfrmInStateProtoError`); the host lives.
//!
//! netdevsim emulates the offload on both ends (kernel series: `netdevsim:
//! emulate IPsec crypto offload on receive, and split what it decrypted`):
//! the sender's stack leaves the packet unencrypted for its NIC, and the
//! receiving netdevsim "decrypts" it by telling the stack so. The test
//! first shows that path carries a stream byte-exact while the queue has
//! no provider, then sends to the provider-bound queue.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use zcrx::ktap::Outcome::{self, *};

use crate::common::{ensure_loaded, wait_idle};
use crate::net::{addr_a, connect, in_netns, join, run, with_receiver, Nsim, NS_A, NS_B};
use crate::pkt::Snmp;
use crate::{Env, TestFn};

pub const TESTS: &[(&str, TestFn)] = &[("esp_offload_to_zero_copy_queue", esp_offload)];

/// rfc4106(gcm(aes)): a 128-bit key and a 32-bit salt.
const KEY: &str = "0x7a6372782d727320657370206b65792173616c74";

/// The SPIs of the IPv4 and the IPv6 SA [`esp_up`] creates.
pub(crate) const SPI4: u32 = 0x7a01;
pub(crate) const SPI6: u32 = 0x7a02;

/// ESP in transport mode from nsb to nsa, IPv4 (SPI [`SPI4`]) and IPv6
/// ([`SPI6`]), for TCP (to port `dport` only, if given), offloaded to the
/// netdevsim ports on both ends.
pub(crate) fn esp_up(n: &Nsim, dport: Option<u16>) -> Result<(), String> {
    let sel = dport.map(|p| format!(" dport {p}")).unwrap_or_default();
    let mut cmds = [String::new(), String::new()];
    for (src, dst, plen, spi) in [("192.0.2.2", "192.0.2.1", 32, SPI4), ("2001:db8::2", "2001:db8::1", 128, SPI6)] {
        for (i, dev, dir) in [(0, &n.b, "out"), (1, &n.a, "in")] {
            cmds[i] += &format!(
                "xfrm state add src {src} dst {dst} proto esp spi {spi:#x} reqid 7 mode transport \
                 aead rfc4106(gcm(aes)) {KEY} 128 offload dev {dev} dir {dir}\n\
                 xfrm policy add src {src}/{plen} dst {dst}/{plen} proto tcp{sel} dir {dir} \
                 tmpl src {src} dst {dst} proto esp reqid 7 mode transport\n"
            );
        }
    }
    run("ip", &["-n", NS_B, "-b", "-"], &cmds[0])?;
    run("ip", &["-n", NS_A, "-b", "-"], &cmds[1])?;
    Ok(())
}

/// netdevsim's count of packets it decrypted for receive SAs (device 1).
fn ipsec_rx() -> Result<u64, String> {
    let path = "/sys/kernel/debug/netdevsim/netdevsim1/ports/0/ipsec_rx";
    let t = std::fs::read_to_string(path).map_err(|e| format!("{path} (netdevsim without receive offload?): {e}"))?;
    t.trim().parse().map_err(|e| format!("{path}: {t:?}: {e}"))
}

fn esp_offload(env: &Env) -> Outcome {
    tryo!(ensure_loaded(env));
    let n = tryo!(Nsim::up(1));
    tryo!(esp_up(&n, None));
    // netdevsim decrypts only what its peer sends unsegmented (a GSO
    // packet gets its trailers per segment from the NIC)
    tryo!(run("ip", &["netns", "exec", NS_B, "ethtool", "-K", &n.b, "tso", "off", "gso", "off"], ""));

    // Without a provider: the emulated offload carries a stream, over
    // IPv4 and over IPv6.
    let mut rx1 = tryo!(ipsec_rx());
    let bytes = 256 << 10;
    for v6 in [false, true] {
        let rx0 = rx1;
        let plain = in_netns(NS_A, move || {
            let l = TcpListener::bind("[::]:7430").map_err(|e| format!("listen: {e}"))?;
            let mut s = crate::tunnel::accept_within(&l, Duration::from_secs(60))?;
            s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
            let mut got = Vec::new();
            s.read_to_end(&mut got).map_err(|e| format!("read: {e}"))?;
            Ok(got)
        });
        let data: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 251) as u8).collect();
        let d2 = data.clone();
        let sent = join(in_netns(NS_B, move || {
            let mut s = connect(addr_a(v6, 7430), Duration::from_secs(30))?;
            s.write_all(&d2).map_err(|e| format!("write: {e}"))
        }));
        let got = tryo!(join(plain));
        tryo!(sent);
        rx1 = tryo!(ipsec_rx());
        let fam = if v6 { "IPv6" } else { "IPv4" };
        env.diag(&format!("no provider, {fam}: {} of {bytes} bytes through ESP, netdevsim decrypted {} packets", got.len(), rx1 - rx0));
        if got != data {
            return Fail(format!("no provider, {fam}: received {} bytes, not the {bytes} sent byte for byte", got.len()));
        }
        if rx1 == rx0 {
            return Fail(format!("no provider, {fam}: netdevsim decrypted nothing (the SA was not offloaded?)"));
        }
    }

    // With zcrx-rs on the queue: the SYN's trailer is in the area. One
    // SYN (and its retransmission) per family, one family at a time, so
    // that the drops each causes show.
    tryo!(n.hds(true));
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let rx = with_receiver(n.a_idx, 0, 4 << 20, 7431, true, move |_z, l| {
        let _ = done_rx.recv_timeout(Duration::from_secs(60));
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(l.accept().is_ok())
    });
    let mut established = false;
    let mut lines = Vec::new();
    let r = (|| -> Result<(), String> {
        for v6 in [false, true] {
            let fam = if v6 { "IPv6" } else { "IPv4" };
            let before = n.stats(1, 0)?;
            let (snmp0, rx0) = (Snmp::read(NS_A)?, ipsec_rx()?);
            let c = join(in_netns(NS_B, move || {
                let to: SocketAddr = addr_a(v6, 7431);
                Ok(std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_ok())
            }))?;
            established |= c;
            let d = n.stats(1, 0)?.since(&before);
            let (err, rx) = (Snmp::read(NS_A)?.since(&snmp0, "XfrmInStateProtoError")?, ipsec_rx()? - rx0);
            lines.push(format!(
                "provider bound, {fam}: netdevsim decrypted {rx} and split {} packets ({} B after the headers), \
                 XfrmInStateProtoError +{err}, {}",
                d.dma_packets,
                d.dma_bytes,
                if c { "connected" } else { "no connection" }
            ));
            if d.dma_packets == 0 || rx == 0 {
                return Err(format!("provider bound, {fam}: netdevsim split or decrypted no ESP packet: the test proves nothing"));
            }
            if err == 0 {
                return Err(format!("provider bound, {fam}: ESP packets with their trailer in the area were not counted as dropped"));
            }
        }
        Ok(())
    })();
    let _ = done_tx.send(());
    let accepted = join(rx);
    for l in &lines {
        env.diag(l);
    }
    tryo!(r);
    if tryo!(accepted) || established {
        return Fail("provider bound: a connection was established through ESP whose trailers cannot be read".into());
    }
    drop(n);
    tryo!(wait_idle(Duration::from_secs(10)));
    Pass
}
