// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! `--report`: medians per mode and the ratios the project tracks, from
//! the JSON lines of the runs (one flat object per run).

use std::collections::BTreeMap;

/// The numeric fields of a flat JSON object (no nesting, no arrays).
pub fn fields(line: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let body = line.trim().trim_start_matches('{').trim_end_matches('}');
    for kv in body.split(',') {
        let Some((k, v)) = kv.split_once(':') else { continue };
        m.insert(k.trim().trim_matches('"').to_string(), v.trim().trim_matches('"').to_string());
    }
    m
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

const MODES: [&str; 5] = ["copy", "trunc", "iouring-zcrx", "zcrx-rs", "zcrx-rs-copy"];

/// Prints the table for the runs in `path` and writes `path.summary.json`.
pub fn report(path: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let runs: Vec<_> = text.lines().filter(|l| l.trim_start().starts_with('{')).map(fields).collect();
    let num = |r: &BTreeMap<String, String>, k: &str| r.get(k).and_then(|v| v.parse::<f64>().ok());
    let mut med: BTreeMap<&str, (f64, f64, f64, usize)> = BTreeMap::new();
    println!("| mode | runs | throughput (Gbit/s): median (min-max) | receiver CPU per GiB (s): median (min-max) | zero-copy share |");
    println!("|---|---|---|---|---|");
    // The known modes in their order, then any others (`M@b`: mode M with
    // a second module build) in the order they first ran.
    let mut modes: Vec<&str> = MODES.to_vec();
    for r in &runs {
        if let Some(m) = r.get("mode") {
            if !modes.contains(&m.as_str()) {
                modes.push(m.as_str());
            }
        }
    }
    for m in modes.iter().copied() {
        let rs: Vec<_> = runs.iter().filter(|r| r.get("mode").map(String::as_str) == Some(m)).collect();
        if rs.is_empty() {
            continue;
        }
        let gs: Vec<f64> = rs.iter().filter_map(|r| num(r, "gbps")).collect();
        let cs: Vec<f64> = rs.iter().filter_map(|r| num(r, "cpu_per_gib")).collect();
        let (g, c) = (median(gs.clone()), median(cs.clone()));
        // zcrx-rs knows per record what was copied; the io_uring zcrx CQEs
        // do not say, so its share comes from netdevsim's DMA counter.
        let zc = median(
            rs.iter()
                .filter_map(|r| {
                    let b = num(r, "bytes")?.max(1.0);
                    match m {
                        "iouring-zcrx" => Some(num(r, "nsim_dma_bytes")?.min(b) / b),
                        "trunc" => Some(0.0),
                        _ => Some(1.0 - num(r, "copied_bytes")? / b),
                    }
                })
                .collect(),
        );
        med.insert(m, (g, c, zc, rs.len()));
        let share = if m == "trunc" { "- (discarded)".into() } else { format!("{:.1}%", zc * 100.0) };
        println!("| {m} | {} | {} | {} | {share} |", rs.len(), spread(&gs, 3), spread(&cs, 3));
    }
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "n/a".into(),
    };
    let g = |m: &str| med.get(m).map(|x| x.0);
    let c = |m: &str| med.get(m).map(|x| x.1);
    let mut lines: Vec<(String, String, &str)> = vec![
        ("throughput zcrx-rs / iouring-zcrx".into(), ratio(g("zcrx-rs"), g("iouring-zcrx")), ">= 1.0"),
        ("CPU/GiB zcrx-rs / iouring-zcrx".into(), ratio(c("zcrx-rs"), c("iouring-zcrx")), "<= 1.0"),
        ("CPU/GiB zcrx-rs / copy".into(), ratio(c("zcrx-rs"), c("copy")), "<= 0.25"),
        ("CPU/GiB zcrx-rs / trunc".into(), ratio(c("zcrx-rs"), c("trunc")), "<= 1.5"),
    ];
    if med.contains_key("zcrx-rs-copy") {
        lines.push(("CPU/GiB zcrx-rs-copy / copy".into(), ratio(c("zcrx-rs-copy"), c("copy")), "-"));
    }
    for m in modes.iter().copied().filter(|m| m.ends_with("@b")) {
        let a = m.trim_end_matches("@b");
        lines.push((format!("throughput {m} / {a}"), ratio(g(m), g(a)), "-"));
        lines.push((format!("CPU/GiB {m} / {a}"), ratio(c(m), c(a)), "-"));
    }
    println!();
    println!("| ratio (medians, same run) | value | target |");
    println!("|---|---|---|");
    let mut json = String::from("{");
    for (i, (k, v, t)) in lines.iter().enumerate() {
        println!("| {k} | {v} | {t} |");
        json.push_str(&format!("{}\"{k}\":\"{v}\"", if i > 0 { "," } else { "" }));
    }
    for (m, (g, c, zc, n)) in &med {
        json.push_str(&format!(
            ",\"{m}\":{{\"runs\":{n},\"gbps_median\":{g:.4},\"cpu_per_gib_median\":{c:.4},\"zc_share\":{zc:.4}}}"
        ));
    }
    json.push('}');
    let out = format!("{path}.summary.json");
    std::fs::write(&out, json + "\n").map_err(|e| format!("{out}: {e}"))?;
    println!("\nsummary: {out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
