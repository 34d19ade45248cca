// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! The PSP generic netlink family (`<linux/psp.h>`), as much as a test of
//! a PSP connection needs: the devices of the caller's network namespace
//! (`dev-get`), their enabled versions (`dev-set`), a socket's receive and
//! transmit associations (`rx-assoc`, `tx-assoc`) and the device's
//! counters (`get-stats`). The constants are uAPI.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::ethtool::{attr, for_each_attr, Genl};

const PSP_CMD_DEV_GET: u8 = 1;
const PSP_CMD_DEV_SET: u8 = 4;
const PSP_CMD_RX_ASSOC: u8 = 8;
const PSP_CMD_TX_ASSOC: u8 = 9;
const PSP_CMD_GET_STATS: u8 = 10;
const PSP_A_DEV_ID: u16 = 1;
const PSP_A_DEV_IFINDEX: u16 = 2;
const PSP_A_DEV_PSP_VERSIONS_CAP: u16 = 3;
const PSP_A_DEV_PSP_VERSIONS_ENA: u16 = 4;
const PSP_A_DEV_BY_ASSOCIATION: u16 = 7;
const PSP_A_ASSOC_DEV_ID: u16 = 1;
const PSP_A_ASSOC_VERSION: u16 = 2;
const PSP_A_ASSOC_RX_KEY: u16 = 3;
const PSP_A_ASSOC_TX_KEY: u16 = 4;
const PSP_A_ASSOC_SOCK_FD: u16 = 5;
const PSP_A_KEYS_KEY: u16 = 1;
const PSP_A_KEYS_SPI: u16 = 2;
const PSP_A_STATS_DEV_ID: u16 = 1;
const PSP_A_STATS_RX_PACKETS: u16 = 4;
const PSP_A_STATS_RX_BYTES: u16 = 5;
const PSP_A_STATS_TX_PACKETS: u16 = 9;
const PSP_A_STATS_TX_BYTES: u16 = 10;
const NLA_F_NESTED: u16 = 1 << 15;

/// `PSP_VERSION_HDR0_AES_GCM_128`: a 16-byte key.
pub const VERSION_GCM_128: u32 = 0;

/// A PSP device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dev {
    /// Its id in the family.
    pub id: u32,
    /// The netdev it belongs to.
    pub ifindex: u32,
    /// Bit `v` set: version `v` is supported ...
    pub versions_cap: u32,
    /// ... and enabled.
    pub versions_ena: u32,
    /// A device of another network namespace, seen here by association
    /// (`ifindex` is of that namespace).
    pub foreign: bool,
}

/// One direction's key of an association: what `rx-assoc` hands out and
/// the peer's `tx-assoc` takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The key bytes.
    pub key: Vec<u8>,
    /// The security parameter index (a number in host order in netlink,
    /// big-endian in the packet).
    pub spi: u32,
}

/// A device's counters (`get-stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets and bytes the device decrypted ...
    pub rx_packets: u64,
    /// ...
    pub rx_bytes: u64,
    /// ... and encrypted.
    pub tx_packets: u64,
    /// ...
    pub tx_bytes: u64,
}

fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

fn u64_of(p: &[u8]) -> Option<u64> {
    match p.len() {
        4 => u32_of(p).map(u64::from),
        8 => Some(u64::from_ne_bytes(p.try_into().ok()?)),
        _ => None,
    }
}

fn open() -> io::Result<(Genl, u16)> {
    let mut g = Genl::open()?;
    let fam = g.family_id("psp")?;
    Ok((g, fam))
}

fn parse_dev(msg: &[u8]) -> Option<Dev> {
    let (mut id, mut ifindex, mut cap, mut ena, mut foreign) = (None, None, 0, 0, false);
    for_each_attr(msg.get(4..)?, |t, p| match t {
        PSP_A_DEV_BY_ASSOCIATION => foreign = true,
        PSP_A_DEV_ID => id = u32_of(p),
        PSP_A_DEV_IFINDEX => ifindex = u32_of(p),
        PSP_A_DEV_PSP_VERSIONS_CAP => cap = u32_of(p).unwrap_or(0),
        PSP_A_DEV_PSP_VERSIONS_ENA => ena = u32_of(p).unwrap_or(0),
        _ => {}
    });
    Some(Dev { id: id?, ifindex: ifindex?, versions_cap: cap, versions_ena: ena, foreign })
}

/// The PSP devices the caller's network namespace sees (`dev-get` dump),
/// those of other namespaces associated with it included (`foreign`).
pub fn devices() -> io::Result<Vec<Dev>> {
    let (mut g, fam) = open()?;
    Ok(g.dump(fam, PSP_CMD_DEV_GET, &[])?.iter().filter_map(|m| parse_dev(m)).collect())
}

/// The PSP device of netdev `ifindex`, `NotFound` if it has none.
pub fn device_of(ifindex: u32) -> io::Result<Dev> {
    devices()?
        .into_iter()
        .find(|d| d.ifindex == ifindex && !d.foreign)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("ifindex {ifindex} has no PSP device")))
}

/// Enables the versions of bit mask `versions` on device `id` (`dev-set`,
/// `CAP_NET_ADMIN`).
pub fn enable(id: u32, versions: u32) -> io::Result<()> {
    let (mut g, fam) = open()?;
    let mut a = Vec::new();
    attr(&mut a, PSP_A_DEV_ID, &id.to_ne_bytes());
    attr(&mut a, PSP_A_DEV_PSP_VERSIONS_ENA, &versions.to_ne_bytes());
    g.request(fam, PSP_CMD_DEV_SET, &a).map(|_| ())
}

fn assoc_attrs(dev: u32, sock: BorrowedFd<'_>, version: u32) -> Vec<u8> {
    let mut a = Vec::new();
    attr(&mut a, PSP_A_ASSOC_DEV_ID, &dev.to_ne_bytes());
    attr(&mut a, PSP_A_ASSOC_VERSION, &version.to_ne_bytes());
    attr(&mut a, PSP_A_ASSOC_SOCK_FD, &(sock.as_raw_fd() as u32).to_ne_bytes());
    a
}

/// Gives the connected TCP socket `sock` a receive association of
/// `version` on PSP device `dev` (the one its route leaves by; the kernel
/// refuses another): from now on it accepts only packets that device
/// decrypted (once the peer sends with PSP). Returns the key the peer
/// must transmit with.
pub fn rx_assoc(dev: u32, sock: BorrowedFd<'_>, version: u32) -> io::Result<Key> {
    let (mut g, fam) = open()?;
    let reply = g.request(fam, PSP_CMD_RX_ASSOC, &assoc_attrs(dev, sock, version))?;
    let mut key = None;
    for_each_attr(reply.get(4..).unwrap_or(&[]), |t, p| {
        if t == PSP_A_ASSOC_RX_KEY {
            let (mut k, mut spi) = (None, None);
            for_each_attr(p, |t, p| match t {
                PSP_A_KEYS_KEY => k = Some(p.to_vec()),
                PSP_A_KEYS_SPI => spi = u32_of(p),
                _ => {}
            });
            if let (Some(key_bytes), Some(spi)) = (k, spi) {
                key = Some(Key { key: key_bytes, spi });
            }
        }
    });
    key.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "rx-assoc reply without a key"))
}

/// Gives `sock` a transmit association of `version` on device `dev` with
/// the peer's receive key `key`: from now on its segments leave
/// PSP-encapsulated.
pub fn tx_assoc(dev: u32, sock: BorrowedFd<'_>, version: u32, key: &Key) -> io::Result<()> {
    let (mut g, fam) = open()?;
    let mut a = assoc_attrs(dev, sock, version);
    let mut k = Vec::new();
    attr(&mut k, PSP_A_KEYS_KEY, &key.key);
    attr(&mut k, PSP_A_KEYS_SPI, &key.spi.to_ne_bytes());
    attr(&mut a, PSP_A_ASSOC_TX_KEY | NLA_F_NESTED, &k);
    g.request(fam, PSP_CMD_TX_ASSOC, &a).map(|_| ())
}

/// The counters of device `id`.
pub fn stats(id: u32) -> io::Result<Stats> {
    let (mut g, fam) = open()?;
    let mut a = Vec::new();
    attr(&mut a, PSP_A_STATS_DEV_ID, &id.to_ne_bytes());
    let reply = g.request(fam, PSP_CMD_GET_STATS, &a)?;
    let mut s = Stats::default();
    for_each_attr(reply.get(4..).unwrap_or(&[]), |t, p| {
        let v = u64_of(p).unwrap_or(0);
        match t {
            PSP_A_STATS_RX_PACKETS => s.rx_packets = v,
            PSP_A_STATS_RX_BYTES => s.rx_bytes = v,
            PSP_A_STATS_TX_PACKETS => s.tx_packets = v,
            PSP_A_STATS_TX_BYTES => s.tx_bytes = v,
            _ => {}
        }
    });
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_reply() {
        let mut m = vec![PSP_CMD_DEV_GET, 1, 0, 0];
        attr(&mut m, PSP_A_DEV_ID, &3u32.to_ne_bytes());
        attr(&mut m, PSP_A_DEV_IFINDEX, &7u32.to_ne_bytes());
        attr(&mut m, PSP_A_DEV_PSP_VERSIONS_CAP, &15u32.to_ne_bytes());
        assert_eq!(parse_dev(&m), Some(Dev { id: 3, ifindex: 7, versions_cap: 15, versions_ena: 0, foreign: false }));
        assert_eq!(parse_dev(&m[..4]), None);
        attr(&mut m, PSP_A_DEV_BY_ASSOCIATION, &[]);
        assert!(parse_dev(&m).unwrap().foreign);
    }

    #[test]
    fn counters_are_u32_or_u64() {
        assert_eq!(u64_of(&5u32.to_ne_bytes()), Some(5));
        assert_eq!(u64_of(&(1u64 << 40).to_ne_bytes()), Some(1 << 40));
        assert_eq!(u64_of(&[1, 2]), None);
    }
}
