// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! tracefs: where it is, and packets the kernel freed with one drop reason
//! (the `skb:kfree_skb` tracepoint), counted in a trace instance of the
//! test's own so that nothing else tracing at the same time is disturbed.

use std::sync::atomic::{AtomicU32, Ordering};

/// The tracefs root, mounted if it is not yet.
pub(crate) fn root() -> Result<String, String> {
    let dir = "/sys/kernel/tracing";
    if !std::path::Path::new(&format!("{dir}/events")).exists() {
        let _ = crate::net::run("mount", &["-t", "tracefs", "nodev", dir], "");
    }
    for d in [dir, "/sys/kernel/debug/tracing"] {
        if std::path::Path::new(&format!("{d}/events")).exists() {
            return Ok(d.to_string());
        }
    }
    Err("no tracefs (CONFIG_TRACING off?)".into())
}

/// The value of drop reason `name` (`SKB_DROP_REASON_<name>`), from the
/// tracepoint's print format: `__print_symbolic(REC->reason, { 2,
/// "NOT_SPECIFIED" }, ...)`.
fn reason_value(format: &str, name: &str) -> Option<u32> {
    let at = format.find(&format!("\"{name}\" }}"))?;
    let open = format[..at].rfind('{')?;
    format[open + 1..at].trim().trim_end_matches(',').trim().parse().ok()
}

/// Counts the skbs freed with one drop reason, from the moment it is made
/// to the moment it is dropped (which removes its trace instance).
pub(crate) struct DropWatch {
    dir: String,
    reason: String,
}

impl DropWatch {
    /// Watches drop reason `reason` (as the tracepoint prints it, e.g.
    /// `TCP_HASH_UNREADABLE`). Fails if the kernel does not know it.
    pub(crate) fn new(reason: &str) -> Result<DropWatch, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = root()?;
        let dir = format!("{root}/instances/zcrx_drops_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
        std::fs::create_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
        // From here on, drop() removes the instance whatever fails.
        let w = DropWatch { dir, reason: reason.to_string() };
        let ev = format!("{}/events/skb/kfree_skb", w.dir);
        let fmt = std::fs::read_to_string(format!("{ev}/format")).map_err(|e| format!("kfree_skb format: {e}"))?;
        let v = reason_value(&fmt, reason).ok_or(format!("the kernel has no drop reason {reason}"))?;
        std::fs::write(format!("{ev}/filter"), format!("reason == {v}")).map_err(|e| format!("kfree_skb filter: {e}"))?;
        // Reading `trace` must not pause recording (the default), or drops
        // while count() reads would be lost.
        std::fs::write(format!("{}/options/pause-on-trace", w.dir), "0").map_err(|e| format!("pause-on-trace: {e}"))?;
        std::fs::write(format!("{ev}/enable"), "1").map_err(|e| format!("enable kfree_skb: {e}"))?;
        Ok(w)
    }

    /// Skbs freed with the reason so far (all namespaces; the instance's
    /// buffer, a few MiB, holds tens of thousands of events, more than a
    /// test drops).
    pub(crate) fn count(&self) -> Result<u64, String> {
        let t = std::fs::read_to_string(format!("{}/trace", self.dir)).map_err(|e| format!("trace: {e}"))?;
        let tag = format!("reason: {}", self.reason);
        Ok(t.lines().filter(|l| !l.starts_with('#') && l.contains(&tag)).count() as u64)
    }
}

impl Drop for DropWatch {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("{}/events/skb/kfree_skb/enable", self.dir), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::reason_value;

    #[test]
    fn reason_from_print_format() {
        let f = r#"print fmt: "skbaddr=%p reason: %s", REC->skbaddr, __print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 33, "TCP_AOFAILURE" }, { 34, "TCP_HASH_UNREADABLE" }, { 35, "SOCKET_BACKLOG" })"#;
        assert_eq!(reason_value(f, "NOT_SPECIFIED"), Some(2));
        assert_eq!(reason_value(f, "TCP_HASH_UNREADABLE"), Some(34));
        assert_eq!(reason_value(f, "SOCKET_BACKLOG"), Some(35));
        assert_eq!(reason_value(f, "NO_SUCH"), None);
        // A prefix of another name does not match it.
        assert_eq!(reason_value(f, "TCP_HASH"), None);
    }
}
