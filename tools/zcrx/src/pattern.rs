// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A verifiable byte stream: the byte at stream offset `i` is a function of
//! `i` and a seed, so a receiver can check every byte it gets without the
//! sender's help, and a shift, a repeat or a gap shows at once.

/// The pattern with `seed`.
#[derive(Clone, Copy, Debug)]
pub struct Pattern {
    seed: u64,
}

#[inline]
fn mix(mut z: u64) -> u64 {
    // splitmix64
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pattern {
    /// The pattern of `seed`.
    pub fn new(seed: u64) -> Self {
        Pattern { seed }
    }

    #[inline]
    fn word(&self, w: u64) -> u64 {
        mix(w ^ self.seed)
    }

    /// Fills `buf` with the stream's bytes from offset `off`.
    pub fn fill(&self, off: u64, buf: &mut [u8]) {
        let mut i = 0;
        let mut o = off;
        while i < buf.len() {
            let w = self.word(o / 8).to_le_bytes();
            let s = (o % 8) as usize;
            let n = (8 - s).min(buf.len() - i);
            buf[i..i + n].copy_from_slice(&w[s..s + n]);
            i += n;
            o += n as u64;
        }
    }

    /// Checks `buf` against the stream from offset `off`: the offset of the
    /// first wrong byte, if any.
    pub fn check(&self, off: u64, buf: &[u8]) -> Option<u64> {
        let mut i = 0;
        let mut o = off;
        while i < buf.len() {
            let w = self.word(o / 8).to_le_bytes();
            let s = (o % 8) as usize;
            let n = (8 - s).min(buf.len() - i);
            if buf[i..i + n] != w[s..s + n] {
                let k = (0..n).find(|&k| buf[i + k] != w[s + k]).unwrap_or(0);
                return Some(o + k as u64);
            }
            i += n;
            o += n as u64;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_at_any_offset() {
        let p = Pattern::new(7);
        for off in [0u64, 1, 7, 8, 4095, 1 << 33] {
            let mut b = vec![0u8; 1000];
            p.fill(off, &mut b);
            assert_eq!(p.check(off, &b), None);
            // The same bytes at another offset are wrong.
            assert!(p.check(off + 1, &b).is_some());
        }
    }

    #[test]
    fn pieces_concatenate() {
        let p = Pattern::new(1);
        let mut whole = vec![0u8; 100];
        p.fill(3, &mut whole);
        let mut a = vec![0u8; 37];
        let mut b = vec![0u8; 63];
        p.fill(3, &mut a);
        p.fill(40, &mut b);
        assert_eq!([a, b].concat(), whole);
    }

    #[test]
    fn reports_first_bad_byte() {
        let p = Pattern::new(3);
        let mut b = vec![0u8; 64];
        p.fill(100, &mut b);
        b[17] ^= 1;
        assert_eq!(p.check(100, &b), Some(117));
    }

    #[test]
    fn seeds_differ() {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        Pattern::new(1).fill(0, &mut a);
        Pattern::new(2).fill(0, &mut b);
        assert_ne!(a, b);
    }
}
