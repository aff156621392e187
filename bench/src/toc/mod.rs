//! `mcast-bench toc`: seed 002's evaluation (Figures 1–3) in virtual time,
//! with the daemon's own group modes on a modelled switched segment
//! ([`world`]): the group's throughput as processes grow to 512, latency as
//! loss grows, and how long a silent member goes unnoticed, in beacon
//! intervals. Prints tables, writes JSON and SVG charts.
//!
//! Owns: the experiments, their tables and charts. The model is
//! [`world`]'s.

mod tally;
#[cfg(test)]
mod tests;
mod token;
mod world;

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::paper::svg::{render, Chart, Series};
use world::{Kind, Params};

/// The experiments to run.
#[derive(Debug, Clone)]
pub struct TocConfig {
    /// Process counts of Figure 1.
    pub nodes: Vec<u32>,
    /// Loss rates of Figure 2.
    pub loss: Vec<f64>,
    /// Processes of Figure 2.
    pub loss_nodes: u32,
    /// Process counts of Figure 1b (paced latency).
    pub latency_nodes: Vec<u32>,
    /// Process counts of Figure 3 (a crash).
    pub crash_nodes: Vec<u32>,
    /// The total-order groups' beacon interval in Figures 1 and 2 (µs).
    pub beacon_us: u64,
    /// Messages in all per Figure 1 run (split over the processes).
    pub messages: u64,
    /// Messages/s each process sends in Figure 2.
    pub rate: u64,
    /// Messages each process sends in a paced run (Figures 1b and 2).
    pub paced_messages: u64,
    /// Seeds per point (medians, min and max reported).
    pub seeds: u64,
    pub out: std::path::PathBuf,
}

const KINDS: [Kind; 6] = [
    Kind::Fifo,
    Kind::Total { commit: false },
    Kind::TotalDirect,
    Kind::Total { commit: true },
    Kind::CommitDirect,
    Kind::Sequenced,
];

/// Figure 1's modes: the others and the seed's token baseline.
const FIG1_KINDS: [Kind; 7] = [
    Kind::Fifo,
    Kind::Total { commit: false },
    Kind::TotalDirect,
    Kind::Total { commit: true },
    Kind::CommitDirect,
    Kind::Sequenced,
    Kind::Token,
];

/// A table's header: `first` (right-aligned in `first_width`), then each
/// kind's name in `width` columns.
fn header(first: &str, first_width: usize, kinds: &[Kind], width: usize) -> String {
    let mut h = format!("{first:>first_width$}");
    for k in kinds {
        let _ = write!(h, " {:>width$}", k.name());
    }
    h
}

/// The median, least and largest of `v`.
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

pub fn run(cfg: &TocConfig) -> Result<(), String> {
    if !(1..=1_000_000).contains(&cfg.beacon_us) {
        return Err(format!(
            "--beacon-us {} is out of range: 1 to 1,000,000 µs, as mcastd's beacon_us",
            cfg.beacon_us
        ));
    }
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let mut json_rows = Vec::new();
    let mut text = String::new();

    // Figure 1: throughput as the processes grow, every process sending.
    let _ = writeln!(
        text,
        "Figure 1: every process multicasts as fast as it may ({} messages in all, 1 KiB); \
         the group's throughput (messages/s every process delivers) and the p50 latency",
        cfg.messages
    );
    let _ = writeln!(text, "{}", header("procs", 6, &FIG1_KINDS, 24));
    let mut fig1: Vec<Series> = FIG1_KINDS
        .iter()
        .map(|k| Series {
            name: k.name().into(),
            points: Vec::new(),
            dashed: false,
        })
        .collect();
    for &n in &cfg.nodes {
        let mut line = format!("{n:>6}");
        for (i, &kind) in FIG1_KINDS.iter().enumerate() {
            let mut tput = Vec::new();
            let mut p50 = Vec::new();
            for seed in 1..=cfg.seeds {
                let mut p = Params::new(kind, n);
                p.beacon_ns = cfg.beacon_us * 1_000;
                p.messages = (cfg.messages / u64::from(n)).max(4);
                p.seed = seed;
                let o = world::run(&p).map_err(|e| format!("figure 1, {}: {e}", kind.name()))?;
                tput.push(o.throughput());
                p50.push(o.latency.value_at_quantile(0.5) as f64 / 1e3);
                json_rows.push(json!({
                    "figure": 1, "mode": kind.name(), "processes": n, "seed": seed,
                    "messages": o.messages, "throughput": o.throughput(),
                    "p50_us": o.latency.value_at_quantile(0.5) as f64 / 1e3,
                    "p99_us": o.latency.value_at_quantile(0.99) as f64 / 1e3,
                    "data_frames": o.data_frames, "beacon_frames": o.beacon_frames,
                    "link_frames": o.link_frames, "events": o.events,
                }));
            }
            let (t, tmin, tmax) = spread(tput);
            let (l, _, _) = spread(p50);
            let _ = write!(
                line,
                " {:>9.0}k [{:.0}–{:.0}] {:>5.0}µs",
                t / 1e3,
                tmin / 1e3,
                tmax / 1e3,
                l
            );
            fig1[i].points.push((f64::from(n), t));
        }
        let _ = writeln!(text, "{line}");
        eprintln!("{line}");
    }

    // Figure 1b: latency as the processes grow, paced.
    let _ = writeln!(
        text,
        "\nFigure 1b: every process sends {} messages/s, {} each; latency p50 / p99 (µs) as \
         the processes grow",
        cfg.rate, cfg.paced_messages
    );
    let _ = writeln!(
        text,
        "{} {:>20}",
        header("procs", 6, &KINDS, 20),
        "beacons/msg (direct)"
    );
    let mut fig1b: Vec<Series> = KINDS
        .iter()
        .map(|k| Series {
            name: format!("{} p50", k.name()),
            points: Vec::new(),
            dashed: false,
        })
        .collect();
    for &n in &cfg.latency_nodes {
        let mut line = format!("{n:>6}");
        let (mut beacons, mut direct) = (0.0, 0.0);
        for (i, &kind) in KINDS.iter().enumerate() {
            let (a, b, o) = paced(kind, n, 0.0, cfg, 1, &mut json_rows, "1b")?;
            let _ = write!(line, " {a:>9.1} / {b:>8.1}");
            fig1b[i].points.push((f64::from(n), a));
            let per_msg = o.beacon_frames as f64 / o.data_frames.max(1) as f64;
            match kind {
                Kind::Total { commit: false } => beacons = per_msg,
                Kind::TotalDirect => direct = per_msg,
                _ => {}
            }
        }
        let _ = write!(line, " {beacons:>11.2} ({direct:>6.2})");
        let _ = writeln!(text, "{line}");
        eprintln!("{line}");
    }

    // Figure 2: latency as loss grows, paced.
    let _ = writeln!(
        text,
        "\nFigure 2: {} processes each sending {} messages/s, {} each; latency p50 / p99 (µs) \
         against the loss of every copy",
        cfg.loss_nodes, cfg.rate, cfg.paced_messages
    );
    let _ = writeln!(text, "{}", header("loss", 8, &KINDS, 20));
    let mut fig2: Vec<Series> = Vec::new();
    for k in KINDS {
        for q in ["p50", "p99"] {
            fig2.push(Series {
                name: format!("{} {q}", k.name()),
                points: Vec::new(),
                dashed: q == "p99",
            });
        }
    }
    for &loss in &cfg.loss {
        let mut line = format!("{loss:>8}");
        for (i, &kind) in KINDS.iter().enumerate() {
            let mut p50 = Vec::new();
            let mut p99 = Vec::new();
            for seed in 1..=cfg.seeds {
                let n = cfg.loss_nodes;
                let (a, b, _) = paced(kind, n, loss, cfg, seed, &mut json_rows, "2")?;
                p50.push(a);
                p99.push(b);
            }
            let (a, _, _) = spread(p50);
            let (b, _, _) = spread(p99);
            let _ = write!(line, " {a:>9.1} / {b:>8.1}");
            // A log axis has no 0: lossless sits at 1e-6.
            let x = if loss > 0.0 { loss } else { 1e-6 };
            fig2[2 * i].points.push((x, a));
            fig2[2 * i + 1].points.push((x, b));
        }
        let _ = writeln!(text, "{line}");
        eprintln!("{line}");
    }

    // Figure 3: how long a crashed node goes unnoticed, in beacon intervals.
    let d = mcast_groups::detector::DetectorConfig::default();
    let probes_ms = (u64::from(d.probes) * d.probe_interval) as f64 / 1e6;
    let beat_ms = d.interval as f64 / 1e6;
    let _ = writeln!(
        text,
        "\nFigure 3: a process crashes 10 ms into a paced run ({} messages/s each, total order); \
         when a survivor's mode first reports it silent, in beacon intervals (median [min–max] of \
         {} seeds), and when the detector then declares it failed (it takes a report once the \
         process has been silent a beat interval, {beat_ms} ms, then its {} probes, {probes_ms} \
         ms; heartbeats alone: {} ms)",
        cfg.rate,
        cfg.seeds,
        d.probes,
        d.detection_bound() / 1_000_000
    );
    let _ = writeln!(
        text,
        "{:>6} {:>10} {:>26} {:>14} {:>14}",
        "procs", "beacon µs", "reported after (intervals)", "failed at ms", "false reports"
    );
    let mut fig3: Vec<Series> = Vec::new();
    for &n in &cfg.crash_nodes {
        let mut series = Series {
            name: format!("{n} processes"),
            points: Vec::new(),
            dashed: false,
        };
        for beacon_us in [25u64, 50, 100, 200] {
            let mut after = Vec::new();
            let mut false_reports = 0;
            for seed in 1..=cfg.seeds {
                let mut p = Params::new(Kind::Total { commit: false }, n);
                p.rate = Some(cfg.rate);
                p.messages = 40;
                p.beacon_ns = beacon_us * 1_000;
                p.crash_at = Some(10_000_000);
                p.seed = seed;
                let o = world::run(&p).map_err(|e| format!("figure 3: {e}"))?;
                let Some(ns) = o.silent_after_ns else {
                    return Err(format!(
                        "figure 3, seed {seed}, {n} processes, beacon {beacon_us} µs: the crash \
                         was never reported"
                    ));
                };
                let intervals = ns as f64 / p.beacon_ns as f64;
                after.push(intervals);
                false_reports += o.false_reports;
                json_rows.push(json!({
                    "figure": 3, "processes": n, "beacon_us": beacon_us, "seed": seed,
                    "silent_after_us": ns as f64 / 1e3, "intervals": intervals,
                    "false_reports": o.false_reports,
                }));
            }
            let (m, lo, hi) = spread(after);
            let failed = (m * beacon_us as f64 / 1e3).max(beat_ms) + probes_ms;
            let _ = writeln!(
                text,
                "{n:>6} {beacon_us:>10} {:>26} {failed:>14.1} {false_reports:>14}",
                format!("{m:.1} [{lo:.1}–{hi:.1}]")
            );
            series.points.push((beacon_us as f64, m));
        }
        fig3.push(series);
    }

    print!("{text}");
    write(&cfg.out.join("toc.txt"), &text)?;
    let rows = serde_json::to_string_pretty(&json_rows).map_err(|e| e.to_string())?;
    write(&cfg.out.join("toc.json"), &rows)?;
    let chart1 = Chart {
        title: "Throughput as processes grow (seed 002 Figure 1a)".into(),
        x_label: "processes".into(),
        y_label: "messages/s every process delivers".into(),
        x_log: true,
        y_log: false,
        x_percentile: false,
        stacked: false,
        series: fig1,
    };
    write(&cfg.out.join("toc-fig1.svg"), &render(&chart1))?;
    let chart2 = Chart {
        title: format!(
            "Latency against loss, {} processes (seed 002 Figure 2)",
            cfg.loss_nodes
        ),
        x_label: "loss of every copy (lossless drawn at 1e-6)".into(),
        y_label: "latency µs".into(),
        x_log: true,
        y_log: true,
        x_percentile: false,
        stacked: false,
        series: fig2,
    };
    write(&cfg.out.join("toc-fig2.svg"), &render(&chart2))?;
    let chart1b = Chart {
        title: format!(
            "Latency as processes grow, {} msg/s each (seed 002 Figure 1b)",
            cfg.rate
        ),
        x_label: "processes".into(),
        y_label: "p50 latency µs".into(),
        x_log: true,
        y_log: true,
        x_percentile: false,
        stacked: false,
        series: fig1b,
    };
    write(&cfg.out.join("toc-fig1b.svg"), &render(&chart1b))?;
    let chart3 = Chart {
        title: "A crashed process reported silent (seed 002 Figure 3)".into(),
        x_label: "beacon interval µs".into(),
        y_label: "beacon intervals from the crash to the first report".into(),
        x_log: true,
        y_log: false,
        x_percentile: false,
        stacked: false,
        series: fig3,
    };
    write(&cfg.out.join("toc-fig3.svg"), &render(&chart3))?;
    eprintln!(
        "wrote {}/toc.{{txt,json}}, toc-fig1.svg, toc-fig1b.svg, toc-fig2.svg, toc-fig3.svg",
        cfg.out.display()
    );
    Ok(())
}

/// One paced run (20 messages a process at `cfg.rate`): its p50 and p99
/// (µs), recorded in `rows` under `figure`.
fn paced(
    kind: Kind,
    nodes: u32,
    loss: f64,
    cfg: &TocConfig,
    seed: u64,
    rows: &mut Vec<serde_json::Value>,
    figure: &str,
) -> Result<(f64, f64, world::Outcome), String> {
    let mut p = Params::new(kind, nodes);
    p.beacon_ns = cfg.beacon_us * 1_000;
    p.rate = Some(cfg.rate);
    p.messages = cfg.paced_messages;
    p.loss = loss;
    p.seed = seed;
    let o = world::run(&p).map_err(|e| format!("figure {figure}, {}: {e}", kind.name()))?;
    let us = |q| o.latency.value_at_quantile(q) as f64 / 1e3;
    let (a, b) = (us(0.5), us(0.99));
    rows.push(json!({
        "figure": figure, "mode": kind.name(), "processes": nodes, "loss": loss,
        "seed": seed, "rate": cfg.rate, "p50_us": a, "p99_us": b, "p999_us": us(0.999),
        "lost": o.lost, "data_frames": o.data_frames, "beacon_frames": o.beacon_frames,
    }));
    Ok((a, b, o))
}

fn write(path: &Path, s: &str) -> Result<(), String> {
    std::fs::write(path, s).map_err(|e| format!("{}: {e}", path.display()))
}
