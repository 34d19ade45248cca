// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! Zero-copy asserted from the device: netdevsim logs each header-split
//! write it delivers (`hds_dma_log`, series patch 38: queue, DMA address,
//! length), and its DMA addresses are the physical ones plus
//! [`net::NSIM_DMA_OFFSET`] (patch 56). While a [`DmaLog`] is active,
//! [`net::receive`] and the receivers built on it note where each
//! zero-copy record's bytes are (`/proc/self/pagemap`, root only), and
//! [`DmaLog::check`] matches every such piece to a write netdevsim made:
//! a record that points at memory the device never wrote for it (bytes the
//! module copied and called zero-copy, a stale or misrouted buffer with
//! the right bytes) fails, whatever the module's own flags and counters
//! say.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::net;

const LOG: &str = "/sys/kernel/debug/netdevsim/netdevsim1/ports/0/hds_dma_log";
/// What patch 38 lets the log hold.
pub const CAPACITY: u64 = 1 << 20;

/// Set while a [`DmaLog`] is active: receivers then collect pieces.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The pieces receivers noted, in the order they received them (one lock:
/// a buffer goes back to the device only after its receiver noted it, so
/// the pieces of one buffer are in the order of its writes whatever the
/// number of receivers).
static PIECES: Mutex<Vec<Piece>> = Mutex::new(Vec::new());
static PAGEMAP: OnceLock<Result<fs::File, String>> = OnceLock::new();
/// A mapping pagemap cannot read (a dma-buf's: `VM_PFNMAP`, a hole to
/// pagemap) and another mapping of the same pages (the memfd a udmabuf
/// was made of): `(start, len, other start)`; see [`Alias`].
static ALIAS: Mutex<Option<(u64, u64, u64)>> = Mutex::new(None);

/// Called by receivers for each zero-copy record's bytes: notes where they
/// are while a [`DmaLog`] is active, does nothing otherwise.
pub fn note(data: &[u8]) -> Result<(), String> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return Ok(());
    }
    let pm = PAGEMAP
        .get_or_init(|| fs::File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}")))
        .as_ref()
        .map_err(Clone::clone)?;
    let mut v = PIECES.lock().unwrap_or_else(|e| e.into_inner());
    pieces_of(pm, data, &mut v)
}

/// While it lives, [`note`] finds the pages of bytes in the range `from`
/// through its own read-only mapping of `fd` (the same pages at the same
/// offsets): a udmabuf area (records read through the dma-buf's mapping,
/// which pagemap cannot read) seen through its memfd. The mapping is the
/// alias's own: it goes only after the alias is unset (a forgotten alias
/// leaks it, and stays valid).
pub struct Alias {
    map: *mut libc::c_void,
    len: usize,
}

impl Alias {
    /// `from`: the address and length of the range (only looked up, never
    /// read through).
    pub fn new(from: (*const u8, usize), fd: &std::os::fd::OwnedFd) -> Result<Alias, String> {
        use std::os::fd::AsRawFd;
        let len = from.1;
        // SAFETY: a new shared read-only mapping of our fd; nothing else is
        // at the address the kernel picks.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if map == libc::MAP_FAILED {
            return Err(format!("mmap for the alias: {}", std::io::Error::last_os_error()));
        }
        let alias = Alias { map, len };
        let mut a = ALIAS.lock().unwrap_or_else(|e| e.into_inner());
        if a.is_some() {
            return Err("an alias is already set".into());
        }
        *a = Some((from.0 as u64, len as u64, map as u64));
        Ok(alias)
    }
}

impl Drop for Alias {
    fn drop(&mut self) {
        let mut a = ALIAS.lock().unwrap_or_else(|e| e.into_inner());
        if a.is_some_and(|(_, _, to)| to == self.map as u64) {
            *a = None;
        }
        // SAFETY: our mapping, no longer in ALIAS (whose lock we hold, so
        // no reader is in it either).
        unsafe { libc::munmap(self.map, self.len) };
    }
}

/// One header-split write netdevsim logged: `(queue, DMA address, length)`.
pub type DmaWrite = (u32, u64, u32);

/// `(DMA address, length)` of a piece of a zero-copy record, split at page
/// boundaries (an area's pages need not be contiguous).
pub type Piece = (u64, u32);

/// netdevsim 1's DMA log, started empty; stopped (and emptied) on drop.
pub struct DmaLog(());

impl DmaLog {
    /// Starts the log of netdevsim 1 (the receiving device of [`Nsim`]).
    pub fn start() -> Result<DmaLog, String> {
        fs::write(LOG, CAPACITY.to_string()).map_err(|e| format!("{LOG}: {e}"))?;
        PIECES.lock().unwrap_or_else(|e| e.into_inner()).clear();
        ACTIVE.store(true, Ordering::Relaxed);
        Ok(DmaLog(()))
    }

    /// The log as netdevsim printed it: the writes logged so far, the
    /// payload bytes header split wrote per queue since the log started
    /// (counted with the writes, under one lock: the two are of one
    /// moment), and how many writes found the log full.
    pub fn read(&self) -> Result<Snapshot, String> {
        let t = fs::read_to_string(LOG).map_err(|e| format!("{LOG}: {e}"))?;
        let mut snap = Snapshot::default();
        let mut lost = None;
        let bad = |l: &str| format!("{LOG}: {l:?}");
        for l in t.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                ["queue", q, "dma", d, "len", n] => snap.writes.push((
                    q.parse().map_err(|_| bad(l))?,
                    u64::from_str_radix(d.trim_start_matches("0x"), 16).map_err(|_| bad(l))?,
                    n.parse().map_err(|_| bad(l))?,
                )),
                ["bytes", q, n] => {
                    snap.bytes.insert(q.parse().map_err(|_| bad(l))?, n.parse().map_err(|_| bad(l))?);
                }
                ["lost", n] => lost = Some(n.parse().map_err(|_| bad(l))?),
                _ => return Err(format!("{LOG}: unexpected line {l:?}")),
            }
        }
        snap.lost = lost.ok_or(format!("{LOG}: no lost line"))?;
        if snap.bytes.is_empty() {
            return Err(format!("{LOG}: no per-queue byte counts (netdevsim older than the series' patch 38?)"));
        }
        Ok(snap)
    }

    /// Checks the zero-copy records the receivers on queue `q` got since
    /// [`DmaLog::start`] (their pieces, [`note`]) against the log: the log
    /// lost nothing, its writes on `q` add up to the bytes netdevsim
    /// counted there, nothing was written on another queue, and every
    /// piece lies in a write of its buffer (see [`match_pieces`]).
    /// `zc_bytes`: what the receivers counted as zero-copy, which the
    /// pieces must add up to. Returns a line for the test's diagnostics.
    pub fn check(&self, q: u32, zc_bytes: u64) -> Result<String, String> {
        self.check_queues(&[q], zc_bytes)
    }

    /// [`DmaLog::check`] for receivers on several queues of netdevsim 1:
    /// each queue's writes add up to its count, nothing was written on a
    /// queue not listed, and every piece lies in a write of its buffer,
    /// whichever queue made it (one area serves them all).
    pub fn check_queues(&self, queues: &[u32], zc_bytes: u64) -> Result<String, String> {
        let pieces = std::mem::take(&mut *PIECES.lock().unwrap_or_else(|e| e.into_inner()));
        self.check_pieces(queues, zc_bytes, pieces)
    }

    /// [`DmaLog::check`] for a receiver in another process that ran with
    /// [`RecNote::env`]: its pieces are in the file `tools/selftest/recnote.c`
    /// wrote for it.
    pub fn check_process(&self, q: u32, zc_bytes: u64, note: &RecNote) -> Result<String, String> {
        let t = fs::read_to_string(&note.0).map_err(|e| format!("{}: {e} (did the receiver run with recnote?)", note.0))?;
        let mut pieces = Vec::new();
        for l in t.lines() {
            let w: Vec<&str> = l.splitn(3, ' ').collect();
            match w.as_slice() {
                ["piece", a, len] => pieces.push((
                    u64::from_str_radix(a.trim_start_matches("0x"), 16).map_err(|_| format!("{}: {l:?}", note.0))? + net::NSIM_DMA_OFFSET,
                    len.parse().map_err(|_| format!("{}: {l:?}", note.0))?,
                )),
                ["error", ..] => return Err(format!("recnote in the receiver: {l}")),
                _ => return Err(format!("{}: unexpected line {l:?}", note.0)),
            }
        }
        let line = self.check_pieces(&[q], zc_bytes, pieces)?;
        Ok(format!("{line}; noted in the receiver's process"))
    }

    fn check_pieces(&self, queues: &[u32], zc_bytes: u64, pieces: Vec<Piece>) -> Result<String, String> {
        let (pieces, writes, logged) = self.match_log(queues, zc_bytes, pieces)?;
        Ok(format!(
            "device check: {pieces} zero-copy pieces matched to {writes} netdevsim writes on {} queue(s) \
             ({logged} B logged = what netdevsim counted)",
            queues.len()
        ))
    }

    /// For a receiver that runs longer than the log holds (the soak): the
    /// [`DmaLog::check`] of queue `q`, at a moment no stream is open, then
    /// the log started again. Returns `(pieces, writes)` matched.
    pub fn check_segment(&self, q: u32, zc_bytes: u64) -> Result<(usize, usize), String> {
        let pieces = std::mem::take(&mut *PIECES.lock().unwrap_or_else(|e| e.into_inner()));
        let (p, w, _) = self.match_log(&[q], zc_bytes, pieces)?;
        self.restart()?;
        Ok((p, w))
    }

    /// Starts the log again, empty, and forgets the pieces noted so far.
    /// The log's counts start again with it, under netdevsim's lock: a
    /// late write is in both or in neither.
    pub fn restart(&self) -> Result<(), String> {
        fs::write(LOG, CAPACITY.to_string()).map_err(|e| format!("{LOG}: {e}"))?;
        PIECES.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    }

    /// The check itself: `(pieces, writes, bytes logged)`.
    fn match_log(&self, queues: &[u32], zc_bytes: u64, pieces: Vec<Piece>) -> Result<(usize, usize, u64), String> {
        let noted: u64 = pieces.iter().map(|p| u64::from(p.1)).sum();
        if noted != zc_bytes {
            return Err(format!("receivers noted {noted} zero-copy bytes for the device check, counted {zc_bytes}"));
        }
        let snap = self.read()?;
        if snap.lost != 0 {
            return Err(format!("the DMA log lost {} writes: the device check would be incomplete", snap.lost));
        }
        let mut logged_all = 0;
        for (&q, &counted) in &snap.bytes {
            let logged: u64 = snap.writes.iter().filter(|e| e.0 == q).map(|e| u64::from(e.2)).sum();
            if logged != counted {
                return Err(format!("the DMA log has {logged} bytes on queue {q}, netdevsim counted {counted}"));
            }
            if logged != 0 && !queues.contains(&q) {
                return Err(format!("the DMA log has {logged} bytes on queue {q}, which no receiver here was bound to"));
            }
            logged_all += logged;
        }
        if let Some(e) = snap.writes.iter().find(|e| !snap.bytes.contains_key(&e.0)) {
            return Err(format!("the DMA log has a write on queue {}, for which it has no count", e.0));
        }
        match_pieces(&pieces, &snap.writes)?;
        Ok((pieces.len(), snap.writes.len(), logged_all))
    }
}

/// What [`DmaLog::read`] read.
#[derive(Default)]
pub struct Snapshot {
    pub writes: Vec<DmaWrite>,
    /// Per queue: payload bytes header split wrote since the log started.
    pub bytes: BTreeMap<u32, u64>,
    pub lost: u64,
}

/// The file a receiver in another process notes its zero-copy pieces in
/// (`tools/selftest/recnote.c`, loaded with `LD_PRELOAD`); removed on drop.
pub struct RecNote(String, String);

impl RecNote {
    /// A new, empty note file for the receiver called `name`; fails if the
    /// shim is not built (`make tools`).
    pub fn new(name: &str) -> Result<RecNote, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let shim = exe.with_file_name("libzcrx-recnote.so");
        if !shim.exists() {
            return Err(format!("{} not built (make tools)", shim.display()));
        }
        let path = std::env::temp_dir().join(format!("zcrx-recnote-{name}-{}", std::process::id()));
        let path = path.to_string_lossy().into_owned();
        fs::write(&path, "").map_err(|e| format!("{path}: {e}"))?;
        Ok(RecNote(path, shim.to_string_lossy().into_owned()))
    }

    /// The environment that makes a receiver note its pieces here.
    pub fn env(&self) -> [(&'static str, &str); 2] {
        [("LD_PRELOAD", &self.1), ("ZCRX_RECNOTE", &self.0)]
    }
}

impl Drop for RecNote {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

impl Drop for DmaLog {
    fn drop(&mut self) {
        ACTIVE.store(false, Ordering::Relaxed);
        let _ = fs::write(LOG, "0");
    }
}

/// The pieces of `data` (a zero-copy record's bytes in this process),
/// appended to `out`.
fn pieces_of(pagemap: &fs::File, data: &[u8], out: &mut Vec<Piece>) -> Result<(), String> {
    let ps = zcrx::dev::page_size() as u64;
    let mut va = data.as_ptr() as u64;
    let mut left = data.len() as u64;
    // held while reading through the alias: its mapping goes only after
    // the alias is unset, under this lock
    let alias = ALIAS.lock().unwrap_or_else(|e| e.into_inner());
    while left > 0 {
        let chunk = left.min(ps - va % ps);
        let at = match *alias {
            Some((start, len, to)) if va >= start && va + chunk <= start + len => {
                let at = to + (va - start);
                // fault the page in (it is there: the exporter holds it), so
                // that pagemap sees it mapped here
                // SAFETY: `at` lies in the mapping of the `Alias` that set
                // ALIAS, which unmaps it only after unsetting ALIAS under the
                // lock we hold (and never, if the alias was forgotten).
                unsafe { std::ptr::read_volatile(at as *const u8) };
                at
            }
            _ => va,
        };
        out.push((phys_of(pagemap, at)? + net::NSIM_DMA_OFFSET, chunk as u32));
        va += chunk;
        left -= chunk;
    }
    Ok(())
}

/// The physical address of `va` in this process, or an error for a page
/// not present.
fn phys_of(pagemap: &fs::File, va: u64) -> Result<u64, String> {
    let ps = zcrx::dev::page_size() as u64;
    let mut e = [0u8; 8];
    pagemap.read_exact_at(&mut e, va / ps * 8).map_err(|e| format!("pagemap: {e}"))?;
    let e = u64::from_ne_bytes(e);
    let pfn = e & ((1 << 55) - 1);
    if e >> 63 == 0 || pfn == 0 {
        return Err(format!("pagemap: page of {va:#x} not present (entry {e:#x})"));
    }
    Ok(pfn * ps + va % ps)
}

/// Matches each piece, in the order received, to a logged write. The
/// writes of each buffer (its start address) are taken in log order. A
/// piece belongs to the buffer that starts at or before it (writes go to
/// whole buffers, which do not overlap); it is matched to the buffer's
/// current write if it comes after what that write already gave out, else
/// to the next write long enough: one write's bytes are not handed out
/// twice (a buffer handed out twice for one write, a stale buffer with the
/// right bytes, fails), and writes nobody received (duplicates TCP
/// dropped) are passed over.
fn match_pieces(pieces: &[Piece], log: &[DmaWrite]) -> Result<(), String> {
    let mut writes = BTreeMap::<u64, (Vec<u32>, Option<usize>, u64)>::new();
    for e in log {
        writes.entry(e.1).or_default().0.push(e.2);
    }
    for (i, &(dma, len)) in pieces.iter().enumerate() {
        let end = dma + u64::from(len);
        let Some((&start, (lens, cur, used))) = writes.range_mut(..=dma).next_back() else {
            return Err(format!("record piece {i} (DMA {dma:#x}, {len} B) is below every write netdevsim logged"));
        };
        let fits = |w: usize| end <= start + u64::from(lens[w]);
        match *cur {
            Some(w) if dma >= *used && fits(w) => {}
            _ => {
                let from = cur.map_or(0, |w| w + 1);
                let Some(w) = (from..lens.len()).find(|&w| fits(w)) else {
                    return Err(format!(
                        "record piece {i} (DMA {dma:#x}, {len} B): buffer {start:#x} has no write left for it \
                         ({} writes: {lens:?}; the last one matched: {cur:?})",
                        lens.len()
                    ));
                };
                *cur = Some(w);
            }
        }
        *used = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::match_pieces;

    // Two 4 KiB buffers at 0x1000 and 0x2000; buffer 0x1000 written twice.
    const LOG: [super::DmaWrite; 3] = [(0, 0x1000, 4096), (0, 0x2000, 1000), (0, 0x1000, 2000)];

    #[test]
    fn pieces_in_writes_match() {
        // each write handed out once, in order, a write in two pieces
        let pieces = [(0x1000, 2048), (0x1800, 2048), (0x2000, 1000), (0x1000, 2000)];
        assert_eq!(match_pieces(&pieces, &LOG), Ok(()));
        // a write nobody received (a duplicate TCP dropped) is passed over
        assert_eq!(match_pieces(&[(0x1000, 2000)], &LOG), Ok(()));
    }

    #[test]
    fn memory_the_device_did_not_write_fails() {
        // below every write (a copy buffer elsewhere in the area)
        assert!(match_pieces(&[(0x800, 100)], &LOG).is_err());
        // past the end of what was written into the buffer
        assert!(match_pieces(&[(0x2000, 1001)], &LOG).is_err());
    }

    #[test]
    fn one_write_handed_out_twice_fails() {
        // buffer 0x2000 has one write: a second record for it is stale
        assert!(match_pieces(&[(0x2000, 1000), (0x2000, 1000)], &LOG).is_err());
        // buffer 0x1000: two writes, three records of its start
        assert!(match_pieces(&[(0x1000, 100), (0x1000, 100), (0x1000, 100)], &LOG).is_err());
    }
}
