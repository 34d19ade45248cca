// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `--report`: medians per mode, buffer size and MTU, and the ratios the
//! project tracks per buffer size, from the JSON lines of the runs (one
//! flat object per run).

use std::collections::BTreeMap;

use crate::chart;

/// The fields of one run's JSON object, each as text: a string's
/// contents, a number or an array as JSON writes it. Empty if the line is
/// not a JSON object (a run that died mid-line is skipped, not misread).
pub fn fields(line: &str) -> BTreeMap<String, String> {
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(line) else {
        return BTreeMap::new();
    };
    obj.into_iter()
        .map(|(k, v)| {
            let t = match v {
                serde_json::Value::String(s) => s,
                v => v.to_string(),
            };
            (k, t)
        })
        .collect()
}

/// A number for the summaries' JSON: 4 decimals (the runs' spread is far
/// wider), null when there is none (NaN, infinite).
fn jnum(v: f64) -> serde_json::Value {
    if v.is_finite() {
        serde_json::json!((v * 1e4).round() / 1e4)
    } else {
        serde_json::Value::Null
    }
}

/// Median of `v` (mean of the middle two for even counts).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `median (min-max)` of `v`, with `prec` decimals.
fn spread(v: &[f64], prec: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.prec$} ({lo:.prec$}-{hi:.prec$})", median(v.to_vec()))
}

const MODES: [&str; 6] = ["copy", "trunc", "iouring-zcrx", "zcrx-rs", "zcrx-rs-nomerge", "zcrx-rs-copy"];

/// Modes with an area of buffers (`M@b`: mode M with a second module).
fn has_area(mode: &str) -> bool {
    matches!(mode.trim_end_matches("@b"), "iouring-zcrx" | "zcrx-rs" | "zcrx-rs-nomerge" | "zcrx-rs-copy")
}

/// `4 KiB`, `32 KiB`, `2 MiB`; `-` for 0 (no buffers of its own).
fn size_label(b: u64) -> String {
    match b {
        0 => "-".into(),
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// What a row of the table is: a mode at a buffer size (0 for the modes
/// without an area) and an MTU (unknown in results from before it was
/// recorded).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Key {
    mode: String,
    buf: u64,
    mtu: Option<u64>,
}

/// Medians of one row.
struct Row {
    key: Key,
    runs: usize,
    gbps: f64,
    cpu: f64,
    zc: f64,
}

/// The key of one run. Results from before `buf_size` was recorded ran
/// every zero-copy mode at 4 KiB (a page).
fn key_of(r: &BTreeMap<String, String>) -> Option<Key> {
    let mode = r.get("mode")?.clone();
    let buf = match r.get("buf_size").and_then(|v| v.parse().ok()) {
        Some(b) => b,
        None if has_area(&mode) => 4096,
        None => 0,
    };
    let mtu = r.get("mtu").and_then(|v| v.parse().ok());
    Some(Key { mode, buf, mtu })
}

/// Prints the table for the runs in `path` and writes `path.summary.json`.
///
/// One row per (mode, buffer size, MTU). Rows come in groups, one per
/// buffer size of the zero-copy modes (a column of the ratio table): the
/// modes without buffers (copy, trunc) at that group's MTU, then the
/// zero-copy modes at that buffer size. The ratios compare medians within
/// a group: zcrx-rs against io_uring zcrx at the same buffer size and MTU,
/// and against copy and trunc at the same MTU.
pub fn report(path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let lines: Vec<_> = text.lines().filter(|l| l.trim_start().starts_with('{')).collect();
    let runs: Vec<_> = lines.iter().map(|l| fields(l)).filter(|r| !r.is_empty()).collect();
    if runs.len() < lines.len() {
        // a run that died mid-line, or a field a script left empty
        eprintln!("{path}: {} of {} run lines are not JSON objects: left out", lines.len() - runs.len(), lines.len());
    }
    let num = |r: &BTreeMap<String, String>, k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
    let mut vcpus: Vec<&str> = runs.iter().filter_map(|r| r.get("vcpus").map(|c| c.as_str())).collect();
    vcpus.sort();
    vcpus.dedup();
    if !vcpus.is_empty() {
        println!("vCPUs: {}", vcpus.join(", "));
    }
    let mut clocks: Vec<&str> = runs.iter().filter_map(|r| r.get("clock").map(|c| c.as_str())).collect();
    clocks.sort();
    clocks.dedup();
    println!(
        "clock: {}\n",
        match clocks.as_slice() {
            [] | ["wall"] => "wall (guest time follows the host's clock: the host's load and speed show)".to_string(),
            [c] => format!("{c} (QEMU counts instructions: CPU time means instructions executed)"),
            cs => format!("mixed ({}): do not compare these rows", cs.join(", ")),
        }
    );
    if runs.iter().any(|r| r.contains_key("series")) {
        return scale_report(path, &runs);
    }
    // The known modes in their order, then any others (`M@b`: mode M with
    // a second module build) in the order they first ran.
    let mut modes: Vec<String> = MODES.iter().map(|m| m.to_string()).collect();
    let mut keys: Vec<Key> = Vec::new();
    for r in &runs {
        let Some(k) = key_of(r) else { continue };
        if !modes.contains(&k.mode) {
            modes.push(k.mode.clone());
        }
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mode_idx = |m: &str| modes.iter().position(|x| x == m).unwrap_or(usize::MAX);
    // The groups: each buffer size (with its MTU) the zero-copy modes ran at.
    let mut groups: Vec<(u64, Option<u64>)> = keys.iter().filter(|k| k.buf > 0).map(|k| (k.buf, k.mtu)).collect();
    groups.sort();
    groups.dedup();
    let group_of = |k: &Key| -> (usize, Option<u64>) {
        let g = if k.buf > 0 {
            groups.iter().position(|&(b, m)| b == k.buf && m == k.mtu)
        } else {
            groups.iter().position(|&(_, m)| m == k.mtu)
        };
        // Rows of no group (copy and trunc only) last, by MTU.
        (g.unwrap_or(groups.len()), if g.is_some() { None } else { k.mtu })
    };
    keys.sort_by_key(|k| (group_of(k), k.buf, mode_idx(&k.mode)));

    println!(
        "| mode | buffer | MTU | runs | throughput (Gbit/s): median (min-max) | receiver CPU per GiB (s): median (min-max) | zero-copy share |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut rows: Vec<Row> = Vec::new();
    for k in &keys {
        let rs: Vec<_> = runs.iter().filter(|r| key_of(r).as_ref() == Some(k)).collect();
        let gs: Vec<f64> = rs.iter().filter_map(|r| num(r, "gbps")).collect();
        let cs: Vec<f64> = rs.iter().filter_map(|r| num(r, "cpu_per_gib")).collect();
        let base = k.mode.trim_end_matches("@b");
        // zcrx-rs knows per record what was copied; the io_uring zcrx CQEs
        // do not say, so its share comes from netdevsim's DMA counter.
        let zc = median(
            rs.iter()
                .filter_map(|r| {
                    let b = num(r, "bytes")?.max(1.0);
                    match base {
                        "iouring-zcrx" => Some(num(r, "nsim_dma_bytes")?.min(b) / b),
                        "trunc" => Some(0.0),
                        _ => Some(1.0 - num(r, "copied_bytes")? / b),
                    }
                })
                .collect(),
        );
        let share = if base == "trunc" { "- (discarded)".into() } else { format!("{:.1}%", zc * 100.0) };
        let mtu = k.mtu.map_or("-".into(), |m| m.to_string());
        println!("| {} | {} | {mtu} | {} | {} | {} | {share} |", k.mode, size_label(k.buf), rs.len(), spread(&gs, 3), spread(&cs, 4));
        rows.push(Row { key: k.clone(), runs: rs.len(), gbps: median(gs), cpu: median(cs), zc });
    }

    // A row's medians: (throughput, CPU per GiB).
    let find = |mode: &str, buf: u64, mtu: Option<u64>| {
        rows.iter().find(|r| r.key.mode == mode && r.key.buf == buf && r.key.mtu == mtu).map(|r| (r.gbps, r.cpu))
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    };
    // Per ratio line: its name, the target, and the value in each group
    // (None: a median is missing; infinity: the line's reference group).
    type Line = (String, &'static str, Vec<Option<f64>>);
    let mut lines: Vec<Line> = Vec::new();
    let mut add = |name: String, target: &'static str, f: &dyn Fn(u64, Option<u64>) -> Option<f64>| {
        let v: Vec<_> = groups.iter().map(|&(b, m)| f(b, m)).collect();
        lines.push((name, target, v));
    };
    let g = |m: &str, b: u64, mtu: Option<u64>| find(m, b, mtu).map(|x| x.0);
    let c = |m: &str, b: u64, mtu: Option<u64>| find(m, b, mtu).map(|x| x.1);
    add("throughput zcrx-rs / iouring-zcrx".into(), ">= 1.0", &|b, m| ratio(g("zcrx-rs", b, m), g("iouring-zcrx", b, m)));
    add("CPU/GiB zcrx-rs / iouring-zcrx".into(), "<= 0.85", &|b, m| ratio(c("zcrx-rs", b, m), c("iouring-zcrx", b, m)));
    add("CPU/GiB zcrx-rs / copy".into(), "<= 0.10", &|b, m| ratio(c("zcrx-rs", b, m), c("copy", 0, m)));
    add("CPU/GiB zcrx-rs / trunc".into(), "<= 1.3 (4 KiB), <= 1.0 (32 KiB)", &|b, m| ratio(c("zcrx-rs", b, m), c("trunc", 0, m)));
    if keys.iter().any(|k| k.mode == "zcrx-rs-nomerge") {
        add("CPU/GiB zcrx-rs / zcrx-rs-nomerge".into(), "-", &|b, m| ratio(c("zcrx-rs", b, m), c("zcrx-rs-nomerge", b, m)));
        add("CPU/GiB zcrx-rs-nomerge / iouring-zcrx".into(), "-", &|b, m| ratio(c("zcrx-rs-nomerge", b, m), c("iouring-zcrx", b, m)));
    }
    if modes.iter().any(|m| m == "zcrx-rs-copy") && keys.iter().any(|k| k.mode == "zcrx-rs-copy") {
        add("CPU/GiB zcrx-rs-copy / copy".into(), "-", &|b, m| ratio(c("zcrx-rs-copy", b, m), c("copy", 0, m)));
    }
    for m in modes.iter().filter(|m| m.ends_with("@b")) {
        let a = m.trim_end_matches("@b");
        add(format!("throughput {m} / {a}"), "-", &|b, mtu| ratio(g(m, b, mtu), g(a, b, mtu)));
        add(format!("CPU/GiB {m} / {a}"), "-", &|b, mtu| ratio(c(m, b, mtu), c(a, b, mtu)));
    }
    // Against the first group (the smallest buffers): what larger buffers
    // (and the MTU that goes with them) save each mode; trunc shows the
    // MTU's part, the stack's cost without buffers.
    if groups.len() > 1 {
        let (b0, m0) = groups[0];
        for m in ["iouring-zcrx", "zcrx-rs"] {
            add(format!("CPU/GiB {m} / {m} at {}", size_label(b0)), "-", &|b, mtu| {
                if (b, mtu) == (b0, m0) {
                    Some(f64::INFINITY) // the reference: "-"
                } else {
                    ratio(c(m, b, mtu), c(m, b0, m0))
                }
            });
        }
        if groups.iter().any(|&(_, m)| m != m0) {
            add(format!("CPU/GiB trunc / trunc at MTU {}", m0.map_or("-".into(), |m| m.to_string())), "-", &|_, mtu| {
                if mtu == m0 {
                    Some(f64::INFINITY)
                } else {
                    ratio(c("trunc", 0, mtu), c("trunc", 0, m0))
                }
            });
        }
    }
    let col = |&(b, m): &(u64, Option<u64>)| match m {
        Some(m) => format!("{}, MTU {m}", size_label(b)),
        None => size_label(b),
    };
    let fmt = |v: Option<f64>| match v {
        Some(v) if v.is_infinite() => "-".into(),
        Some(v) => format!("{v:.3}"),
        None => "n/a".into(),
    };
    if !groups.is_empty() {
        println!();
        println!("| ratio (medians, same run) | {} | target |", groups.iter().map(col).collect::<Vec<_>>().join(" | "));
        println!("|---|{}---|", "---|".repeat(groups.len()));
        for (name, target, v) in &lines {
            println!("| {name} | {} | {target} |", v.iter().map(|&x| fmt(x)).collect::<Vec<_>>().join(" | "));
        }
    }

    breakdown(&runs, &keys);

    let rows_j: Vec<_> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "mode": r.key.mode,
                "buf_size": r.key.buf,
                "mtu": r.key.mtu,
                "runs": r.runs,
                "gbps_median": jnum(r.gbps),
                "cpu_per_gib_median": jnum(r.cpu),
                "zc_share": jnum(r.zc),
            })
        })
        .collect();
    let mut ratios_j = Vec::new();
    for (name, target, v) in &lines {
        for (&(b, m), x) in groups.iter().zip(v) {
            ratios_j.push(serde_json::json!({
                "ratio": name,
                "buf_size": b,
                "mtu": m,
                "value": x.map_or(serde_json::Value::Null, jnum),
                "target": target,
            }));
        }
    }
    let json = serde_json::json!({ "rows": rows_j, "ratios": ratios_j }).to_string();
    let out = format!("{path}.summary.json");
    std::fs::write(&out, json + "\n").map_err(|e| format!("{out}: {e}"))?;
    println!("\nsummary: {out}");
    Ok(())
}

/// Where each mode's run time went, per GiB (medians): the receiver (its
/// thread and ksoftirqd), the NAPI threads of the receiving device
/// (netdevsim's emulated DMA, GRO, page-pool allocations, TCP up to the
/// socket), the other NAPI threads (the sending device: ACKs), the sender
/// (writes, the transmit path in its context), and the rest. On one vCPU
/// the parts share the CPU, so they add up to the run's time and a mode's
/// throughput is set by their sum; the rest is what ran in no measured
/// context (interrupts, timers) and idle time. Printed only for results
/// that carry the NAPI and sender fields.
fn breakdown(runs: &[BTreeMap<String, String>], keys: &[Key]) {
    let num = |r: &BTreeMap<String, String>, k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
    if !runs.iter().any(|r| r.contains_key("napi_dev_secs") && r.contains_key("sender_cpu_secs")) {
        return;
    }
    println!();
    if runs.iter().any(|r| r.get("vcpus").is_some_and(|v| v != "1")) {
        println!("(more than one vCPU: the parts ran side by side, so they do not add up to the run time; ignore \"rest\")\n");
    }
    println!(
        "| where the time went, s/GiB (medians) | buffer | MTU | run time | receiver | NAPI, receiving device | NAPI, others | sender | rest |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for k in keys {
        let rs: Vec<_> = runs.iter().filter(|r| key_of(r).as_ref() == Some(k)).collect();
        let parts = time_parts(&rs);
        if parts[0].is_none() || parts[2].is_none() {
            continue;
        }
        let cells: Vec<String> = parts.iter().map(|v| v.map_or("n/a".into(), |v| format!("{v:.4}"))).collect();
        println!("| {} | {} | {} | {} |", k.mode, size_label(k.buf), k.mtu.map_or("-".into(), |m| m.to_string()), cells.join(" | "));
    }
    // --split: the receiver's CPU inside and outside its receive calls.
    if !runs.iter().any(|r| r.contains_key("in_calls_secs")) {
        return;
    }
    println!();
    println!(
        "| receiver CPU, split (medians) | buffer | MTU | s/GiB | in receive calls | outside (user code) | ns per 4 KiB in calls | ns per 4 KiB outside | calls per GiB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for k in keys {
        let rs: Vec<_> = runs.iter().filter(|r| key_of(r).as_ref() == Some(k) && r.contains_key("in_calls_secs")).collect();
        if rs.is_empty() {
            continue;
        }
        let per = |unit: f64, f: &dyn Fn(&BTreeMap<String, String>) -> Option<f64>| {
            median(rs.iter().filter_map(|r| Some(f(r)? / (num(r, "bytes")? / unit).max(1e-12))).collect())
        };
        let gib = (1u64 << 30) as f64;
        let inside = |r: &BTreeMap<String, String>| num(r, "in_calls_secs");
        // The clock reads' own cost is in neither part (split_overhead_secs).
        let outside = |r: &BTreeMap<String, String>| {
            Some(num(r, "cpu_secs")? - num(r, "in_calls_secs")? - num(r, "split_overhead_secs").unwrap_or(0.0))
        };
        println!(
            "| {} | {} | {} | {:.4} | {:.4} | {:.4} | {:.0} | {:.0} | {:.0} |",
            k.mode,
            size_label(k.buf),
            k.mtu.map_or("-".into(), |m| m.to_string()),
            per(gib, &|r| num(r, "cpu_secs")),
            per(gib, &inside),
            per(gib, &outside),
            per(4096.0, &inside) * 1e9,
            per(4096.0, &outside) * 1e9,
            per(gib, &|r| num(r, "calls"))
        );
    }
}

/// Medians per GiB of `rs`'s run time, receiver, receiving device's NAPI,
/// other NAPI, sender and the rest (run time minus the others); None where
/// no run has the fields.
fn time_parts(rs: &[&BTreeMap<String, String>]) -> [Option<f64>; 6] {
    let num = |r: &BTreeMap<String, String>, k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
    let per_gib = |f: &dyn Fn(&BTreeMap<String, String>) -> Option<f64>| {
        let v: Vec<f64> = rs.iter().filter_map(|r| Some(f(r)? / (num(r, "bytes")? / (1u64 << 30) as f64).max(1e-12))).collect();
        (!v.is_empty()).then(|| median(v))
    };
    const PARTS: [&str; 4] = ["cpu_secs", "napi_dev_secs", "napi_other_secs", "sender_cpu_secs"];
    [
        per_gib(&|r| num(r, "secs")),
        per_gib(&|r| num(r, PARTS[0])),
        per_gib(&|r| num(r, PARTS[1])),
        per_gib(&|r| num(r, PARTS[2])),
        per_gib(&|r| num(r, PARTS[3])),
        per_gib(&|r| PARTS.iter().try_fold(num(r, "secs")?, |acc, k| Some(acc - num(r, k)?))),
    ]
}

/// The x values of each series of `--scale` runs.
const SERIES: [(&str, &str, [u64; 3]); 3] = [
    ("write_size", "sender's write size (1 flow)", [4096, 65536, 1 << 20]),
    ("flows", "flows on the queue (64 KiB writes)", [1, 8, 64]),
    ("queues", "bound queues (8 flows, RSS)", [1, 2, 4]),
];

/// `--scale` results: per series, per x value, per mode the medians of
/// receiver CPU per GiB and throughput; a table each, `.scale.json` and an
/// SVG chart (`.svg`) next to the results.
fn scale_report(path: &str, runs: &[BTreeMap<String, String>]) -> Result<(), String> {
    let num = |r: &BTreeMap<String, String>, k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
    let mut modes: Vec<String> = Vec::new();
    for r in runs {
        if let Some(m) = r.get("mode") {
            if !modes.contains(m) {
                modes.push(m.clone());
            }
        }
    }
    modes.sort_by_key(|m| MODES.iter().position(|x| x == m).unwrap_or(usize::MAX));
    let bufs: Vec<u64> = runs.iter().filter_map(|r| num(r, "buf_size")).map(|b| b as u64).collect();
    let buf = bufs.first().copied().unwrap_or(0);
    // The runs of a point: the flows series' 1-flow point is the
    // write-size series' run at 64 KiB; the queues series ran on devices
    // of its own (4 queues), so its runs count for it alone.
    let at = |series: &str, x: u64, mode: &str| -> Vec<&BTreeMap<String, String>> {
        let (flows, ws, queues) = match series {
            "flows" => (x, 65536, 1),
            "queues" => (8, 65536, x),
            _ => (1, x, 1),
        };
        runs.iter()
            .filter(|r| {
                r.get("mode").map(|m| m.as_str()) == Some(mode)
                    && (r.get("series").map(|s| s.as_str()) == Some("queues")) == (series == "queues")
                    && num(r, "flows").map(|f| f as u64) == Some(flows)
                    && num(r, "write_size").map(|w| w as u64) == Some(ws)
                    && num(r, "queues").map_or(1, |q| q as u64) == queues
            })
            .collect()
    };
    // The busiest queue's share of a run's bytes (the queues series: how
    // evenly RSS spread the flows), from netdevsim's per-queue counters.
    let busiest = |r: &BTreeMap<String, String>| -> Option<f64> {
        let v: Vec<f64> = r
            .get("nsim_dma_bytes_per_queue")?
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect();
        let sum: f64 = v.iter().sum();
        (sum > 0.0).then(|| v.iter().copied().fold(0.0, f64::max) / sum)
    };
    let med = |rs: &[&BTreeMap<String, String>], k: &str| -> Option<f64> {
        let v: Vec<f64> = rs.iter().filter_map(|r| num(r, k)).collect();
        (!v.is_empty()).then(|| median(v))
    };
    let label = |series: &str, x: u64| if series == "write_size" { size_label(x) } else { x.to_string() };
    let fmt = |v: Option<f64>, p: usize| v.map_or("n/a".into(), |v| format!("{v:.p$}"));
    let mut series_j = Vec::new();
    let mut panels = Vec::new();
    let mut si = 0;
    for (series, title, xs) in SERIES.iter() {
        // Results from before a series existed: no table, no panel.
        if xs.iter().all(|&x| modes.iter().all(|m| at(series, x, m).is_empty())) {
            continue;
        }
        println!("{title}, {} buffers:\n", size_label(buf));
        let head: Vec<String> = modes.iter().map(|m| format!("{m} CPU/GiB (s), runs")).collect();
        let gh: Vec<String> = modes.iter().map(|m| format!("{m} Gbit/s")).collect();
        let spread_col = *series == "queues";
        println!(
            "| {} | {} | CPU zcrx-rs / iouring-zcrx | {} |{}",
            series.replace('_', " "),
            head.join(" | "),
            gh.join(" | "),
            if spread_col { format!(" busiest queue's share of the bytes, median ({}) |", modes.join(" / ")) } else { String::new() }
        );
        println!("|---|{}---|{}{}", "---|".repeat(modes.len()), "---|".repeat(modes.len()), if spread_col { "---|" } else { "" });
        let mut cpu_lines: Vec<Vec<Option<f64>>> = vec![Vec::new(); modes.len()];
        let mut gbps_lines: Vec<Vec<Option<f64>>> = vec![Vec::new(); modes.len()];
        let mut points_j = Vec::new();
        for &x in xs.iter() {
            let mut cells = Vec::new();
            let mut gcells = Vec::new();
            let mut cpu_of = BTreeMap::new();
            let mut modes_j = serde_json::Map::new();
            for (mi, m) in modes.iter().enumerate() {
                let rs = at(series, x, m);
                let (cpu, g) = (med(&rs, "cpu_per_gib"), med(&rs, "gbps"));
                cells.push(format!("{} ({})", fmt(cpu, 4), rs.len()));
                gcells.push(fmt(g, 3));
                cpu_lines[mi].push(cpu);
                gbps_lines[mi].push(g);
                cpu_of.insert(m.as_str(), cpu);
                let j = |v: Option<f64>| v.map_or(serde_json::Value::Null, jnum);
                modes_j.insert(m.clone(), serde_json::json!({ "runs": rs.len(), "cpu_per_gib_median": j(cpu), "gbps_median": j(g) }));
            }
            points_j.push(serde_json::json!({ "x": x, "modes": modes_j }));
            let r = match (cpu_of.get("zcrx-rs").copied().flatten(), cpu_of.get("iouring-zcrx").copied().flatten()) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "n/a".into(),
            };
            let spread = if spread_col {
                let per_mode: Vec<String> = modes
                    .iter()
                    .map(|m| {
                        let v: Vec<f64> = at(series, x, m).into_iter().filter_map(&busiest).collect();
                        if v.is_empty() {
                            "n/a".into()
                        } else {
                            format!("{:.0}%", median(v) * 100.0)
                        }
                    })
                    .collect();
                format!(" {} |", per_mode.join(" / "))
            } else {
                String::new()
            };
            println!("| {} | {} | {r} | {} |{spread}", label(series, x), cells.join(" | "), gcells.join(" | "));
        }
        series_j.push(serde_json::json!({ "series": series, "points": points_j }));
        println!();
        // Where each point's run time went (see `breakdown`).
        if xs.iter().any(|&x| modes.iter().any(|m| at(series, x, m).iter().any(|r| r.contains_key("napi_dev_secs")))) {
            println!(
                "| {} | mode | where the time went, s/GiB: run time | receiver | NAPI, receiving device | NAPI, others | sender | rest |",
                series.replace('_', " ")
            );
            println!("|---|---|---|---|---|---|---|---|");
            for &x in xs.iter() {
                for m in &modes {
                    let rs = at(series, x, m);
                    let parts = time_parts(&rs);
                    if parts[2].is_none() {
                        continue;
                    }
                    let cells: Vec<String> = parts.iter().map(|&v| fmt(v, 4)).collect();
                    println!("| {} | {m} | {} |", label(series, x), cells.join(" | "));
                }
            }
            println!();
        }
        let labels: Vec<String> = xs.iter().map(|&x| label(series, x)).collect();
        let lines = |v: &[Vec<Option<f64>>]| -> Vec<chart::Line> {
            modes.iter().zip(v).map(|(m, v)| chart::Line { name: m.clone(), values: v.clone() }).collect()
        };
        si += 1;
        panels.push((
            si,
            chart::Panel {
                title: format!("receiver CPU per GiB vs {}", title),
                x_title: title.to_string(),
                y_title: "CPU s per GiB".into(),
                x_labels: labels.clone(),
                lines: lines(&cpu_lines),
            },
            chart::Panel {
                title: format!("throughput vs {}", title),
                x_title: title.to_string(),
                y_title: "Gbit/s".into(),
                x_labels: labels,
                lines: lines(&gbps_lines),
            },
        ));
    }
    let json = serde_json::json!({ "buf_size": buf, "series": series_j }).to_string() + "\n";
    let out = format!("{path}.scale.json");
    std::fs::write(&out, json).map_err(|e| format!("{out}: {e}"))?;
    // Row 1: CPU per GiB per series; row 2: throughput.
    let (mut cpu, mut thr) = (Vec::new(), Vec::new());
    for (_, c, t) in panels {
        cpu.push(c);
        thr.push(t);
    }
    let n = cpu.len();
    cpu.extend(thr);
    let clock = runs.iter().find_map(|r| r.get("clock").cloned()).unwrap_or_else(|| "wall".into());
    let vcpus = runs.iter().find_map(|r| r.get("vcpus").cloned()).unwrap_or_else(|| "2".into());
    let svg = chart::svg(
        &format!("zcrx-bench --scale: {} buffers, medians", size_label(buf)),
        &format!("clock {clock}, {vcpus} vCPU(s); receiver CPU = its thread + its CPU's ksoftirqd; lower CPU is better"),
        &cpu,
        n,
    );
    let svg_out = format!("{path}.svg");
    std::fs::write(&svg_out, svg).map_err(|e| format!("{svg_out}: {e}"))?;
    println!("tables: {out}\nchart: {svg_out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arrays_whole() {
        let f = fields(r#"{"a":1,"q":[3,4,5],"b":"x"}"#);
        assert_eq!(f["q"], "[3,4,5]");
        assert_eq!(f["b"], "x");
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn refuses_what_is_not_an_object() {
        assert!(fields("{\"mode\":\"copy\",\"bytes\":1").is_empty());
        assert!(fields("[1,2]").is_empty());
        assert_eq!(fields(r#"{"mode":"a,b:c"}"#)["mode"], "a,b:c");
    }

    #[test]
    fn parses_flat_objects() {
        let f = fields("{\"mode\":\"copy\",\"bytes\":10,\"gbps\":1.5}");
        assert_eq!(f["mode"], "copy");
        assert_eq!(f["bytes"], "10");
        assert_eq!(f["gbps"], "1.5");
    }

    #[test]
    fn spreads() {
        assert_eq!(spread(&[2.0, 1.0, 4.0], 1), "2.0 (1.0-4.0)");
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(0), "-");
        assert_eq!(size_label(4096), "4 KiB");
        assert_eq!(size_label(32768), "32 KiB");
        assert_eq!(size_label(2 << 20), "2 MiB");
    }

    #[test]
    fn old_results_ran_at_a_page() {
        let k = key_of(&fields("{\"mode\":\"zcrx-rs\",\"gbps\":1.0}")).unwrap();
        assert_eq!((k.buf, k.mtu), (4096, None));
        let k = key_of(&fields("{\"mode\":\"copy\",\"mtu\":4168}")).unwrap();
        assert_eq!((k.buf, k.mtu), (0, Some(4168)));
        let k = key_of(&fields("{\"mode\":\"iouring-zcrx\",\"buf_size\":32768,\"mtu\":32840}")).unwrap();
        assert_eq!((k.buf, k.mtu), (32768, Some(32840)));
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
