// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! Header/data split through ethtool netlink, for systems whose `ethtool`
//! is too old to set it (bookworm's 6.1 cannot): a minimal generic netlink
//! client that resolves the "ethtool" family and sends one `RINGS_SET`.
//! The constants are uAPI (`<linux/ethtool_netlink_generated.h>`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const ETHTOOL_MSG_RINGS_SET: u8 = 16;
const ETHTOOL_A_RINGS_HEADER: u16 = 1;
const ETHTOOL_A_HEADER_DEV_INDEX: u16 = 1;
const ETHTOOL_A_RINGS_TCP_DATA_SPLIT: u16 = 11;
const ETHTOOL_A_RINGS_HDS_THRESH: u16 = 17;
const ETHTOOL_TCP_DATA_SPLIT_DISABLED: u8 = 1;
const ETHTOOL_TCP_DATA_SPLIT_ENABLED: u8 = 2;
const NLA_F_NESTED: u16 = 1 << 15;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_CAPPED: u16 = 0x100;
const NLM_F_ACK_TLVS: u16 = 0x200;
const SOL_NETLINK: libc::c_int = 270;
const NETLINK_EXT_ACK: libc::c_int = 11;

/// Appends a netlink attribute (padded to 4 bytes).
pub(crate) fn attr(buf: &mut Vec<u8>, ty: u16, payload: &[u8]) {
    let len = 4 + payload.len();
    buf.extend_from_slice(&(len as u16).to_ne_bytes());
    buf.extend_from_slice(&ty.to_ne_bytes());
    buf.extend_from_slice(payload);
    buf.resize(buf.len().next_multiple_of(4), 0);
}

/// A complete generic netlink request.
fn genl_msg(family: u16, cmd: u8, seq: u32, attrs: &[u8]) -> Vec<u8> {
    genl_msg_flags(family, cmd, seq, NLM_F_REQUEST | NLM_F_ACK, attrs)
}

/// A complete generic netlink message with netlink flags `flags`.
fn genl_msg_flags(family: u16, cmd: u8, seq: u32, flags: u16, attrs: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    let len = 16 + 4 + attrs.len();
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, 1, 0, 0]); // genlmsghdr: cmd, version
    m.extend_from_slice(attrs);
    m
}

/// The `RINGS_SET` attributes for header split on/off, threshold 0.
fn rings_set_attrs(ifindex: u32, on: bool) -> Vec<u8> {
    let mut hdr = Vec::new();
    attr(&mut hdr, ETHTOOL_A_HEADER_DEV_INDEX, &ifindex.to_ne_bytes());
    let mut a = Vec::new();
    attr(&mut a, ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED, &hdr);
    let mode = if on { ETHTOOL_TCP_DATA_SPLIT_ENABLED } else { ETHTOOL_TCP_DATA_SPLIT_DISABLED };
    attr(&mut a, ETHTOOL_A_RINGS_TCP_DATA_SPLIT, &[mode]);
    attr(&mut a, ETHTOOL_A_RINGS_HDS_THRESH, &0u32.to_ne_bytes());
    a
}

/// Walks the attributes of `buf`, calling `f(type, payload)`.
pub(crate) fn for_each_attr(mut buf: &[u8], mut f: impl FnMut(u16, &[u8])) {
    while buf.len() >= 4 {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let ty = u16::from_ne_bytes([buf[2], buf[3]]) & !NLA_F_NESTED;
        if len < 4 || len > buf.len() {
            return;
        }
        f(ty, &buf[4..len]);
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The netlink messages answering request `seq` in `buf` (one datagram),
/// whole (header included), in order; an error if one is truncated.
fn messages_of(mut buf: &[u8], seq: u32) -> io::Result<Vec<&[u8]>> {
    let mut v = Vec::new();
    while buf.len() >= 16 {
        let len = u32_at(buf, 0) as usize;
        if len < 16 || len > buf.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "truncated netlink message"));
        }
        let msg = &buf[..len];
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
        if u32_at(msg, 8) == seq {
            v.push(msg);
        }
    }
    Ok(v)
}

/// The messages of dump `seq` in `buf` (one datagram), appended to `out`
/// (each one's payload: the generic netlink header and the attributes);
/// `true` once its `NLMSG_DONE` came, the error of an `NLMSG_ERROR`.
fn dump_part(buf: &[u8], seq: u32, out: &mut Vec<Vec<u8>>) -> io::Result<bool> {
    for msg in messages_of(buf, seq)? {
        match u16::from_ne_bytes([msg[4], msg[5]]) {
            // its payload: the dump's own error, 0 if it ended well (a
            // callback that failed part way reports here)
            NLMSG_DONE if msg.len() >= 20 && u32_at(msg, 16) != 0 => {
                let err = u32_at(msg, 16) as i32;
                return Err(io::Error::from_raw_os_error(-err));
            }
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                // an error ends the dump; reply_of() decodes it (with the
                // kernel's text)
                reply_of(msg, seq)?;
                return Ok(true);
            }
            _ => out.push(msg[16..].to_vec()),
        }
    }
    Ok(false)
}

/// The answer to request `seq` among the netlink messages of `buf` (one
/// datagram): `Some(payload)` for its reply or a zero acknowledgement
/// (empty), the error of an `NLMSG_ERROR`, `None` if the datagram has
/// only messages of other requests.
fn reply_of(buf: &[u8], seq: u32) -> io::Result<Option<Vec<u8>>> {
    if let Some(msg) = messages_of(buf, seq)?.into_iter().next() {
        if u16::from_ne_bytes([msg[4], msg[5]]) != NLMSG_ERROR {
            return Ok(Some(msg[16..].to_vec()));
        }
        if msg.len() < 20 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "short netlink error message"));
        }
        let err = u32_at(msg, 16) as i32;
        if err == 0 {
            return Ok(Some(Vec::new()));
        }
        // The extended ack message, if the kernel sent one
        // (NLM_F_ACK_TLVS): after the error code and the request, whole or
        // only its header (NLM_F_CAPPED); NLMSGERR_ATTR_MSG is 1.
        let mut text = String::new();
        let flags = u16::from_ne_bytes([msg[6], msg[7]]);
        if flags & NLM_F_ACK_TLVS != 0 && msg.len() >= 36 {
            let inner = if flags & NLM_F_CAPPED != 0 { 16 } else { u32_at(msg, 20) as usize };
            let start = (16 + 4 + inner).min(msg.len());
            for_each_attr(&msg[start..], |t, p| {
                if t == 1 {
                    text = String::from_utf8_lossy(p).trim_end_matches('\0').to_string();
                }
            });
        }
        let e = io::Error::from_raw_os_error(-err);
        return Err(if text.is_empty() { e } else { io::Error::new(e.kind(), format!("{e}: {text}")) });
    }
    Ok(None)
}

/// A generic netlink socket (also used by [`crate::netdev`]).
pub(crate) struct Genl {
    fd: OwnedFd,
    seq: u32,
}

impl Genl {
    pub(crate) fn open() -> io::Result<Self> {
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_GENERIC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: we just created it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Ask for the kernel's error text (extended ack); best effort.
        let one: libc::c_int = 1;
        // SAFETY: setsockopt reads an int from a live local.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                SOL_NETLINK,
                NETLINK_EXT_ACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        Ok(Genl { fd, seq: 1 })
    }

    /// Sends a request and returns its reply (payload after the netlink
    /// header: the generic netlink header and the attributes; empty for a
    /// request answered by an acknowledgement alone), or the error of an
    /// `NLMSG_ERROR` reply. Messages of earlier requests (the
    /// acknowledgement that follows a reply) are skipped by sequence number.
    pub(crate) fn request(&mut self, family: u16, cmd: u8, attrs: &[u8]) -> io::Result<Vec<u8>> {
        self.seq += 1;
        let m = genl_msg(family, cmd, self.seq, attrs);
        // SAFETY: sending our buffer on our socket (to the kernel, addr 0).
        let r = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 16384];
        loop {
            // SAFETY: receiving into our buffer.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(reply) = reply_of(&buf[..n as usize], self.seq)? {
                return Ok(reply);
            }
        }
    }

    /// Sends a dump request and returns the payload of each message of
    /// the dump (the generic netlink header and the attributes), or the
    /// error that ended it.
    pub(crate) fn dump(&mut self, family: u16, cmd: u8, attrs: &[u8]) -> io::Result<Vec<Vec<u8>>> {
        self.seq += 1;
        let m = genl_msg_flags(family, cmd, self.seq, NLM_F_REQUEST | NLM_F_DUMP, attrs);
        // SAFETY: sending our buffer on our socket (to the kernel, addr 0).
        let r = unsafe { libc::send(self.fd.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 32768];
        let mut out = Vec::new();
        loop {
            // SAFETY: receiving into our buffer.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if dump_part(&buf[..n as usize], self.seq, &mut out)? {
                return Ok(out);
            }
        }
    }

    pub(crate) fn family_id(&mut self, name: &str) -> io::Result<u16> {
        let mut a = Vec::new();
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        attr(&mut a, CTRL_ATTR_FAMILY_NAME, &n);
        let reply = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, &a)?;
        let mut id = None;
        for_each_attr(reply.get(4..).unwrap_or(&[]), |t, p| {
            if t == CTRL_ATTR_FAMILY_ID && p.len() >= 2 {
                id = Some(u16::from_ne_bytes([p[0], p[1]]));
            }
        });
        id.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no genetlink family {name}")))
    }
}

/// `ethtool -G IFACE tcp-data-split on|off hds-thresh 0` for the device
/// `ifindex` of the caller's network namespace.
pub fn set_header_split(ifindex: u32, on: bool) -> io::Result<()> {
    let mut g = Genl::open()?;
    let fam = g.family_id("ethtool")?;
    g.request(fam, ETHTOOL_MSG_RINGS_SET, &rings_set_attrs(ifindex, on)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_and_nested() {
        let a = rings_set_attrs(7, true);
        // header nest (4 + 8), data split (4 + 1 -> 8), thresh (4 + 4)
        assert_eq!(a.len(), 12 + 8 + 8);
        assert_eq!(u16::from_ne_bytes([a[2], a[3]]), ETHTOOL_A_RINGS_HEADER | NLA_F_NESTED);
        assert_eq!(u32::from_ne_bytes([a[8], a[9], a[10], a[11]]), 7);
        assert_eq!(a[16], ETHTOOL_TCP_DATA_SPLIT_ENABLED);
        let mut seen = Vec::new();
        for_each_attr(&a, |t, p| seen.push((t, p.len())));
        assert_eq!(seen, vec![(1, 8), (11, 1), (17, 4)]);
    }

    /// A netlink message of type `ty` answering `seq`, with `payload`.
    fn msg(ty: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn replies_are_matched_by_sequence() {
        // The acknowledgement of request 2, then the reply to request 3.
        let mut d = msg(NLMSG_ERROR, 2, &[0u8; 20]);
        d.extend(msg(0x20, 3, &[7, 1, 0, 0]));
        assert_eq!(reply_of(&d, 3).unwrap(), Some(vec![7, 1, 0, 0]));
        // A datagram with only the old acknowledgement: keep reading.
        assert_eq!(reply_of(&msg(NLMSG_ERROR, 2, &[0u8; 20]), 3).unwrap(), None);
        // An acknowledgement alone answers a request without a reply.
        assert_eq!(reply_of(&msg(NLMSG_ERROR, 3, &[0u8; 20]), 3).unwrap(), Some(Vec::new()));
        // An error.
        let mut e = (-libc::EOPNOTSUPP).to_ne_bytes().to_vec();
        e.extend_from_slice(&[0u8; 16]);
        let err = reply_of(&msg(NLMSG_ERROR, 3, &e), 3).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EOPNOTSUPP));
        // An error with the kernel's text, the request capped to its header.
        let mut e = (-libc::EINVAL).to_ne_bytes().to_vec();
        let mut req = msg(0x20, 3, &[0u8; 40]); // the request echoed: a header claiming 56 bytes
        req.truncate(16);
        e.extend_from_slice(&req);
        attr(&mut e, 1, b"no header split here\0");
        let mut m = msg(NLMSG_ERROR, 3, &e);
        m[6..8].copy_from_slice(&(NLM_F_CAPPED | NLM_F_ACK_TLVS).to_ne_bytes());
        let err = reply_of(&m, 3).unwrap_err();
        assert_eq!(err.raw_os_error(), None);
        assert!(err.to_string().ends_with(": no header split here"), "{err}");
    }

    #[test]
    fn dumps_end_at_done() {
        let mut d = msg(0x20, 4, &[1, 1, 0, 0]);
        d.extend(msg(0x20, 3, &[9, 9, 9, 9])); // another request's
        d.extend(msg(0x20, 4, &[2, 1, 0, 0]));
        let mut out = Vec::new();
        assert!(!dump_part(&d, 4, &mut out).unwrap());
        assert_eq!(out, vec![vec![1, 1, 0, 0], vec![2, 1, 0, 0]]);
        assert!(dump_part(&msg(NLMSG_DONE, 4, &[0u8; 4]), 4, &mut out).unwrap());
        assert_eq!(out.len(), 2);
        // a dump that failed part way says so in its DONE
        let e = dump_part(&msg(NLMSG_DONE, 4, &(-libc::EMSGSIZE).to_ne_bytes()), 4, &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
        let mut e = (-libc::EPERM).to_ne_bytes().to_vec();
        e.extend_from_slice(&[0u8; 16]);
        assert_eq!(dump_part(&msg(NLMSG_ERROR, 4, &e), 4, &mut out).unwrap_err().raw_os_error(), Some(libc::EPERM));
        let m = genl_msg_flags(0x20, 1, 4, NLM_F_REQUEST | NLM_F_DUMP, &[]);
        assert_eq!(u16::from_ne_bytes([m[6], m[7]]), 0x301);
    }

    #[test]
    fn message_header() {
        let m = genl_msg(0x20, ETHTOOL_MSG_RINGS_SET, 5, &[0u8; 8]);
        assert_eq!(u32::from_ne_bytes([m[0], m[1], m[2], m[3]]) as usize, m.len());
        assert_eq!(u16::from_ne_bytes([m[4], m[5]]), 0x20);
        assert_eq!(m[16], ETHTOOL_MSG_RINGS_SET);
    }
}
