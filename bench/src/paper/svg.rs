//! A small hand-written SVG line chart: axes (linear or log), grid, ticks,
//! one polyline with markers per series, a legend. Enough for the paper's
//! plots without a plotting crate. Every series is a `<g class="series">`
//! (the test counts them).

use std::fmt::Write;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Draw the line dashed (a reference, such as the paper's figures).
    pub dashed: bool,
}

/// A chart to draw.
#[derive(Debug, Clone)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    /// Tick labels of a log x axis drawn as percentiles (x = 1/(1-q)).
    pub x_percentile: bool,
    /// Draw earlier solid lines wider, so that lines that coincide show as
    /// stacked bands (for few points; percentile curves cross too often).
    pub stacked: bool,
    pub series: Vec<Series>,
}

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f", "#8c564b", "#17becf",
];

/// A fixed colour per algorithm (the paper's reference lines, named
/// `"paper <algo>"`, take their algorithm's colour).
fn color_of(name: &str) -> Option<&'static str> {
    let algo = name.strip_prefix("paper ").unwrap_or(name);
    Some(match algo {
        "blast" => "#7f7f7f",
        "iterative" => "#1f77b4",
        "ack" => "#d62728",
        "nak" => "#2ca02c",
        "mak" => "#9467bd",
        "gbn" => "#8c564b",
        _ => return None,
    })
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An axis: maps data to pixels and proposes ticks.
struct Axis {
    log: bool,
    lo: f64,
    hi: f64,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = (1.0, 10.0);
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil());
            if hi <= lo {
                hi = lo * 10.0;
            }
        } else {
            let step = nice_step(hi - lo.min(0.0));
            lo = if lo >= 0.0 {
                0.0
            } else {
                (lo / step).floor() * step
            };
            hi = ((hi / step).ceil() * step).max(lo + step);
        }
        Axis { log, lo, hi }
    }

    /// 0..1 along the axis.
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.lo * 1e-3).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let decades = (self.hi / self.lo).log10().round() as i32;
            let mults: &[f64] = if decades <= 2 {
                &[1.0, 2.0, 5.0]
            } else {
                &[1.0]
            };
            let mut t = Vec::new();
            let mut d = self.lo;
            while d <= self.hi * 1.0001 {
                for m in mults {
                    if d * m <= self.hi * 1.0001 {
                        t.push(d * m);
                    }
                }
                d *= 10.0;
            }
            t
        } else {
            let step = nice_step(self.hi - self.lo);
            let mut t = Vec::new();
            let mut v = self.lo;
            while v <= self.hi + step * 1e-6 {
                t.push(v);
                v += step;
            }
            t
        }
    }
}

fn nice_step(span: f64) -> f64 {
    let raw = (span / 6.0).max(1e-12);
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    mag * if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    }
}

fn label(v: f64) -> String {
    if v >= 1000.0 && v.fract() == 0.0 {
        let s = format!("{}", v as u64);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else if v >= 1.0 || v == 0.0 {
        format!("{}", (v * 100.0).round() / 100.0)
    } else {
        format!("{v:.3}")
    }
}

fn percentile_label(x: f64) -> String {
    // x = 1/(1-q): 1 -> 0%, 10 -> 90%, 100 -> 99%, ...
    let q = 100.0 * (1.0 - 1.0 / x);
    let s = format!("{q:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

/// Renders `chart` as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let pts = || chart.series.iter().flat_map(|s| s.points.iter());
    let xa = Axis::new(pts().map(|p| p.0), chart.x_log);
    let ya = Axis::new(pts().map(|p| p.1), chart.y_log);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let px = |x: f64| LEFT + xa.frac(x) * pw;
    let py = |y: f64| TOP + ph - ya.frac(y) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{W}" height="{H}" fill="white"/>
<text x="{:.1}" y="22" text-anchor="middle" font-size="{}" font-weight="bold">{}</text>"#,
        W / 2.0,
        if chart.title.len() > 70 { 13 } else { 15 },
        esc(&chart.title)
    );
    // Grid and ticks.
    s.push_str("<g class=\"axes\" stroke=\"#ddd\" stroke-width=\"1\">\n");
    for t in xa.ticks() {
        let x = px(t);
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}"/>"#,
            TOP + ph
        );
    }
    for t in ya.ticks() {
        let y = py(t);
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}"/>"#,
            LEFT + pw
        );
    }
    s.push_str("</g>\n<g class=\"labels\" fill=\"#222\">\n");
    for t in xa.ticks() {
        let text = if chart.x_percentile {
            percentile_label(t)
        } else {
            label(t)
        };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(t),
            TOP + ph + 18.0,
            esc(&text)
        );
    }
    for t in ya.ticks() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            py(t) + 4.0,
            esc(&label(t))
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>
<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>
</g>
<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##,
        LEFT + pw / 2.0,
        H - 16.0,
        esc(&chart.x_label),
        TOP + ph / 2.0,
        TOP + ph / 2.0,
        esc(&chart.y_label)
    );
    // Series and legend.
    let solid = chart.series.iter().filter(|s| !s.dashed).count();
    for (i, se) in chart.series.iter().enumerate() {
        let color = color_of(&se.name).unwrap_or(COLORS[i % COLORS.len()]);
        // Earlier solid lines are drawn wider, so lines that coincide show
        // as stacked bands instead of hiding each other.
        let width = if se.dashed || !chart.stacked {
            2.0
        } else {
            2.0 + 2.0 * (solid.saturating_sub(i + 1)) as f64
        };
        let dash = if se.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<g class="series" data-name="{}" stroke="{color}" fill="{color}">"#,
            esc(&se.name)
        );
        let line: Vec<String> = se
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke-width="{width}" stroke-opacity="0.85"{dash} points="{}"/>"#,
            line.join(" ")
        );
        if se.points.len() <= 40 {
            for p in &line {
                let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(s, r#"<circle cx="{x}" cy="{y}" r="3"/>"#);
            }
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + pw + 14.0;
        let _ = writeln!(
            s,
            r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke-width="2"{dash}/>
<text x="{:.1}" y="{:.1}" stroke="none" fill="#222">{}</text>
</g>"##,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            esc(&se.name)
        );
    }
    s.push_str("</svg>\n");
    s
}
