// SPDX-License-Identifier: LGPL-2.1-or-later OR MIT
// Copyright (C) 2026 The zcrx-rs developers.

//! A verifiable byte stream: the byte at stream offset `i` is a function of
//! `i` and a seed, so a receiver can check every byte it gets without the
//! sender's help. The stream repeats with a prime period of about 1 MiB,
//! precomputed once, so filling and checking are memcpy/memcmp fast (the
//! tests push GiBs through an emulated CPU); a shift, a repeat or a gap of
//! anything but a multiple of the period shows at once.

/// Period of the stream in bytes (a prime, so it is no multiple of any
/// buffer or segment size).
pub const PERIOD: usize = 1_048_573;

/// The pattern with a seed.
#[derive(Clone)]
pub struct Pattern {
    /// Two periods back to back, so any window up to a period is contiguous.
    table: Vec<u8>,
}

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
        let mut table = vec![0u8; 2 * PERIOD];
        for (w, chunk) in table[..PERIOD].chunks_mut(8).enumerate() {
            let v = mix(w as u64 ^ seed.rotate_left(17)).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        table.copy_within(..PERIOD, PERIOD);
        Pattern { table }
    }

    /// The stream's bytes from offset `off`, at most one period.
    pub fn slice(&self, off: u64, len: usize) -> &[u8] {
        let s = (off % PERIOD as u64) as usize;
        &self.table[s..s + len.min(PERIOD)]
    }

    /// Fills `buf` with the stream's bytes from offset `off`.
    pub fn fill(&self, off: u64, buf: &mut [u8]) {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(PERIOD);
            buf[done..done + n].copy_from_slice(self.slice(off + done as u64, n));
            done += n;
        }
    }

    /// Checks `buf` against the stream from offset `off`: the offset of the
    /// first wrong byte, if any.
    pub fn check(&self, off: u64, buf: &[u8]) -> Option<u64> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(PERIOD);
            let want = self.slice(off + done as u64, n);
            let got = &buf[done..done + n];
            if got != want {
                let k = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
                return Some(off + (done + k) as u64);
            }
            done += n;
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
        for off in [0u64, 1, 7, 8, 4095, PERIOD as u64 - 3, 1 << 33] {
            let mut b = vec![0u8; 3000];
            p.fill(off, &mut b);
            assert_eq!(p.check(off, &b), None);
            // The same bytes one byte later are wrong.
            assert!(p.check(off + 1, &b).is_some());
        }
    }

    #[test]
    fn pieces_concatenate_across_the_period() {
        let p = Pattern::new(1);
        let start = PERIOD as u64 - 50;
        let mut whole = vec![0u8; 100];
        p.fill(start, &mut whole);
        let mut a = vec![0u8; 37];
        let mut b = vec![0u8; 63];
        p.fill(start, &mut a);
        p.fill(start + 37, &mut b);
        assert_eq!([a, b].concat(), whole);
    }

    #[test]
    fn longer_than_a_period() {
        let p = Pattern::new(5);
        let mut b = vec![0u8; PERIOD * 2 + 10];
        p.fill(3, &mut b);
        assert_eq!(p.check(3, &b), None);
        b[PERIOD + 4] ^= 0x80;
        assert_eq!(p.check(3, &b), Some(PERIOD as u64 + 7));
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
