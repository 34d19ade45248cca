// SPDX-License-Identifier: GPL-2.0
// Copyright (C) 2026 The zcrx-rs developers.

//! A small hand-written SVG line chart: a grid of panels, each with a
//! logarithmic x axis (the points' labels, evenly spaced), a linear y
//! axis from 0, and one polyline per series with its values marked.

use std::fmt::Write;

/// One line of a panel.
pub struct Line {
    pub name: String,
    /// One value per x label; `None` leaves a gap.
    pub values: Vec<Option<f64>>,
}

/// One panel.
pub struct Panel {
    pub title: String,
    pub x_title: String,
    pub y_title: String,
    pub x_labels: Vec<String>,
    pub lines: Vec<Line>,
}

const COLOURS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];
const PW: f64 = 360.0;
const PH: f64 = 220.0;
const ML: f64 = 64.0;
const MT: f64 = 36.0;
const MB: f64 = 48.0;
const MR: f64 = 16.0;

/// A "nice" upper bound for the y axis and its step: 1, 2 or 5 × 10^k.
fn nice(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The chart: `panels` in rows of `cols`, a title and a legend on top.
pub fn svg(title: &str, note: &str, panels: &[Panel], cols: usize) -> String {
    let cols = cols.max(1);
    let rows = panels.len().div_ceil(cols);
    let (cw, ch) = (ML + PW + MR, MT + PH + MB);
    let (w, h) = (cw * cols as f64, 56.0 + ch * rows as f64);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(o, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(o, "<text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">{}</text>", w / 2.0, esc(title));
    let _ = writeln!(o, "<text x=\"{}\" y=\"38\" text-anchor=\"middle\" fill=\"#555\">{}</text>", w / 2.0, esc(note));
    // Legend: the lines of the first panel.
    if let Some(p) = panels.first() {
        let mut x = 12.0;
        for (i, l) in p.lines.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let _ = writeln!(
                o,
                "<line x1=\"{x}\" y1=\"50\" x2=\"{}\" y2=\"50\" stroke=\"{c}\" stroke-width=\"2.5\"/>\
                 <text x=\"{}\" y=\"54\">{}</text>",
                x + 22.0,
                x + 27.0,
                esc(&l.name)
            );
            x += 40.0 + 7.0 * l.name.len() as f64;
        }
    }
    for (k, p) in panels.iter().enumerate() {
        let (ox, oy) = (cw * (k % cols) as f64 + ML, 56.0 + ch * (k / cols) as f64 + MT);
        let max = p.lines.iter().flat_map(|l| l.values.iter().flatten()).copied().fold(0.0, f64::max);
        let (top, step) = nice(max * 1.05);
        let n = p.x_labels.len().max(1);
        let xs = |i: usize| if n == 1 { ox + PW / 2.0 } else { ox + 20.0 + (PW - 40.0) * i as f64 / (n - 1) as f64 };
        let ys = |v: f64| oy + PH - PH * v / top;
        let _ = writeln!(
            o,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{}</text>",
            ox + PW / 2.0,
            oy - 10.0,
            esc(&p.title)
        );
        let _ = writeln!(o, "<rect x=\"{ox}\" y=\"{oy}\" width=\"{PW}\" height=\"{PH}\" fill=\"none\" stroke=\"#888\"/>");
        let mut v = 0.0;
        while v <= top + step / 2.0 {
            let y = ys(v);
            let _ = writeln!(
                o,
                "<line x1=\"{ox}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                ox + PW,
                ox - 4.0,
                y + 4.0,
                trim(v)
            );
            v += step;
        }
        for (i, l) in p.x_labels.iter().enumerate() {
            let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>", xs(i), oy + PH + 16.0, esc(l));
        }
        let _ = writeln!(o, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>", ox + PW / 2.0, oy + PH + 34.0, esc(&p.x_title));
        let _ = writeln!(
            o,
            "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
            ox - 48.0,
            oy + PH / 2.0,
            esc(&p.y_title)
        );
        for (j, l) in p.lines.iter().enumerate() {
            let c = COLOURS[j % COLOURS.len()];
            // One polyline per run of points with values: a missing
            // value breaks the line.
            let mut runs: Vec<Vec<String>> = vec![Vec::new()];
            for (i, v) in l.values.iter().enumerate() {
                match v {
                    Some(v) => runs.last_mut().unwrap().push(format!("{:.1},{:.1}", xs(i), ys(*v))),
                    None => runs.push(Vec::new()),
                }
            }
            for pts in runs.iter().filter(|p| p.len() > 1) {
                let _ = writeln!(o, "<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2.5\"/>", pts.join(" "));
            }
            for (i, v) in l.values.iter().enumerate() {
                if let Some(v) = v {
                    let _ = writeln!(
                        o,
                        "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{c}\"><title>{}: {}</title></circle>",
                        xs(i),
                        ys(*v),
                        esc(&l.name),
                        trim(*v)
                    );
                }
            }
        }
    }
    o.push_str("</svg>\n");
    o
}

/// A value with as few decimals as it needs (at most 4 significant).
fn trim(v: f64) -> String {
    let s = if v == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        let d = (3 - v.abs().log10().floor() as i32).clamp(0, 6) as usize;
        format!("{v:.d$}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_bounds() {
        assert_eq!(nice(0.9), (1.0, 0.5));
        assert_eq!(nice(0.17), (0.2, 0.05));
        assert_eq!(nice(7.0), (8.0, 2.0));
    }

    #[test]
    fn trims() {
        assert_eq!(trim(0.0812), "0.0812");
        assert_eq!(trim(0.5), "0.5");
        assert_eq!(trim(12.0), "12");
    }

    #[test]
    fn draws_every_point() {
        let p = Panel {
            title: "t".into(),
            x_title: "x".into(),
            y_title: "y".into(),
            x_labels: vec!["1".into(), "8".into(), "64".into()],
            lines: vec![
                Line { name: "a<b".into(), values: vec![Some(1.0), Some(2.0), None] },
                Line { name: "c".into(), values: vec![Some(0.5), Some(0.7), Some(0.9)] },
            ],
        };
        let s = svg("T", "n", &[p], 2);
        assert_eq!(s.matches("<circle").count(), 5);
        // The gap: "a" is one segment of two points, "c" one of three.
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("a&lt;b"));
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
    }
}
