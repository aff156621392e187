//! The output folder: `table.txt`, `results.json`, `hgrm/*.hgrm`
//! (HdrHistogram percentile distributions, the format of Java's
//! `outputPercentileDistribution`, values in microseconds), `hlog/*.hlog`
//! (interval logs, compressed V2 histograms, which `HistogramLogProcessor`
//! reads) and `plots/*.svg`.
#![allow(
    clippy::disallowed_methods,
    reason = "the interval logs record their wall-clock start time"
)]

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::svg::{self, Chart, Series};
use super::{blast_of, growth, order, table, write, Backend, Env, ModeKind, RunResult, PAPER_1K};

/// Writes everything; returns how many files.
pub fn write_all(dir: &Path, env: &Env, results: &[RunResult]) -> Result<usize, String> {
    let mut files = 0;
    for r in results {
        let stem = r.stem();
        let hists: [(&str, Option<&Histogram<u64>>); 4] = [
            ("", Some(&r.completion)),
            (".oneway", Some(&r.one_way)),
            (".acked", r.acked.as_ref()),
            (".echo", r.echo.as_ref()),
        ];
        for (suffix, h) in hists {
            if let Some(h) = h.filter(|h| !h.is_empty()) {
                write(
                    &dir.join("hgrm"),
                    &format!("{stem}{suffix}.hgrm"),
                    &hgrm(h, 1000.0),
                )?;
                files += 1;
            }
        }
        let log = hlog(r)?;
        std::fs::write(dir.join("hlog").join(format!("{stem}.hlog")), log)
            .map_err(|e| format!("writing {stem}.hlog: {e}"))?;
        files += 1;
    }
    write(dir, "table.txt", &table(env, results))?;
    let v = to_json(env, results);
    write(
        dir,
        "results.json",
        &(serde_json::to_string_pretty(&v).map_err(|e| e.to_string())? + "\n"),
    )?;
    files += 2;
    for (name, chart) in plots(results, env.link_rate.as_deref()) {
        write(&dir.join("plots"), &name, &svg::render(&chart))?;
        files += 1;
    }
    Ok(files)
}

/// A percentile distribution in the text format of HdrHistogram's
/// `outputPercentileDistribution` (5 ticks per half distance), values
/// divided by `scale` (1000: ns to µs).
pub fn hgrm(h: &Histogram<u64>, scale: f64) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let value = v.value_iterated_to() as f64 / scale;
        let q = v.quantile_iterated_to();
        if q < 1.0 {
            let _ = writeln!(
                s,
                "{value:>12.3} {q:>2.12} {total:>10} {:>14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(s, "{value:>12.3} {q:>2.12} {total:>10}");
        }
    }
    let _ = writeln!(
        s,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        h.mean() / scale,
        h.stdev() / scale
    );
    let _ = writeln!(
        s,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        h.max() as f64 / scale,
        h.len()
    );
    // As HdrHistogram computes them: sub-buckets enough for the precision.
    let sub_buckets = 2u64.pow((2.0 * 10f64.powi(i32::from(h.sigfig()))).log2().ceil() as u32);
    let _ = writeln!(
        s,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets
    );
    s
}

/// The interval log of a run: its completion latencies (echo runs: its
/// round trips) by send-time interval.
fn hlog(r: &RunResult) -> Result<Vec<u8>, String> {
    let what = if r.mode == ModeKind::Echo {
        "echo round trip"
    } else {
        "completion latency"
    };
    let mut buf = Vec::new();
    let mut ser = V2DeflateSerializer::new();
    let now = std::time::SystemTime::now();
    let mut w = IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "mcast-bench paper {}: {what} (ns) per message, by send-time interval",
            r.stem()
        ))
        .with_start_time(now)
        .with_base_time(now)
        .with_max_value_divisor(1000.0)
        .begin_log_with(&mut buf, &mut ser)
        .map_err(|e| format!("interval log: {e}"))?;
    let tag = r.stem();
    for (start, dur, h) in &r.intervals {
        w.write_histogram(
            h,
            std::time::Duration::from_secs_f64(*start),
            std::time::Duration::from_secs_f64(*dur),
            Tag::new(&tag),
        )
        .map_err(|e| format!("interval log: {e}"))?;
    }
    Ok(buf)
}

fn hist_json(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return Value::Null;
    }
    json!({
        "samples": h.len(),
        "p50_ns": h.value_at_quantile(0.5),
        "p90_ns": h.value_at_quantile(0.9),
        "p99_ns": h.value_at_quantile(0.99),
        "p999_ns": h.value_at_quantile(0.999),
        "max_ns": h.max(),
        "mean_ns": h.mean(),
        "significant_figures": 3,
    })
}

fn to_json(env: &Env, results: &[RunResult]) -> Value {
    let runs: Vec<Value> = results
        .iter()
        .map(|r| {
            let stem = r.stem();
            let blast = blast_of(results, r);
            let mut e = env.json();
            e["message_len"] = json!(r.len);
            e["receivers"] = json!(r.receivers);
            e["backend"] = json!(r.backend.name());
            json!({
                "backend": r.backend.name(),
                "mode": r.mode.name(),
                "offered_rate_per_sec": r.rate,
                "algo": r.algo,
                "receivers": r.receivers,
                "message_len": r.len,
                "messages": r.messages,
                "delivered_min": r.delivered_min,
                "completion": hist_json(&r.completion),
                "one_way": hist_json(&r.one_way),
                "acked_round_trip": r.acked.as_ref().map_or(Value::Null, hist_json),
                "echo_round_trip": r.echo.as_ref().map_or(Value::Null, hist_json),
                "echo_replies": r.echo.as_ref().map(|_| r.replies),
                "echo_p50_over_blast": r.echo.as_ref().filter(|h| !h.is_empty()).and_then(|h| {
                    let b = blast.filter(|_| r.algo != "blast")?.echo.as_ref()?;
                    (!b.is_empty()).then(|| {
                        h.value_at_quantile(0.5) as f64 / b.value_at_quantile(0.5) as f64
                    })
                }),
                "seconds": r.secs,
                "msgs_per_sec": r.msgs_per_sec,
                "mb_per_sec": r.mb_per_sec,
                "msgs_per_sec_over_blast": blast
                    .filter(|b| b.msgs_per_sec > 0.0)
                    .map(|b| r.msgs_per_sec / b.msgs_per_sec),
                "hgrm": format!("hgrm/{stem}.hgrm"),
                "hlog": format!("hlog/{stem}.hlog"),
                "environment": e,
            })
        })
        .collect();
    let growth_json = |mode: ModeKind| -> Vec<Value> {
        growth(results, mode)
            .iter()
            .map(|x| {
                json!({
                    "backend": x.backend.name(),
                    "mode": x.mode.name(),
                    "message_len": x.len,
                    "algo": x.algo,
                    "from_receivers": x.from_rx,
                    "to_receivers": x.to_rx,
                    "from_p50_us": x.from_us,
                    "to_p50_us": x.to_us,
                    "growth": x.ratio(),
                    "us_per_receiver": x.slope_us,
                    "acked_round_trip_p50_us": x.acked_us.map(|(a, b)| json!({"from": a, "to": b})),
                    "p50_over_blast": x.over_blast.map(|(a, b)| json!({"from": a, "to": b})),
                })
            })
            .collect()
    };
    let paper: Vec<Value> = PAPER_1K
        .iter()
        .map(|p| json!({"algo": p.0, "one_receiver_us": p.1, "six_receivers_us": p.2, "growth": p.3}))
        .collect();
    json!({
        "scenario": "paper",
        "environment": env.json(),
        "runs": runs,
        "growth": growth_json(ModeKind::PingPong),
        "echo_growth": growth_json(ModeKind::Echo),
        "paper_1024B": paper,
    })
}

fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    h.iter_quantiles(5)
        .filter(|v| v.quantile_iterated_to() < 0.99999)
        .map(|v| {
            (
                1.0 / (1.0 - v.quantile_iterated_to()),
                v.value_iterated_to() as f64 / 1e3,
            )
        })
        .collect()
}

/// The plots: per backend and size, latency against receivers (ping-pong),
/// the echo round trip against receivers, percentile curves at the most
/// receivers (ping-pong, echo, offered rate) and throughput against
/// receivers (saturation).
fn plots(results: &[RunResult], link_rate: Option<&str>) -> Vec<(String, Chart)> {
    let mut out = Vec::new();
    let mut keys: Vec<(Backend, usize)> = results.iter().map(|r| (r.backend, r.len)).collect();
    keys.sort_by_key(|k| (k.0.name(), k.1));
    keys.dedup();
    let algos_of = |b: Backend, len: usize, mode: ModeKind| {
        let mut a: Vec<&'static str> = results
            .iter()
            .filter(|r| r.backend == b && r.len == len && r.mode == mode && r.algo != "gbn")
            .map(|r| r.algo)
            .collect();
        a.sort_by_key(|x| order(x));
        a.dedup();
        a
    };
    let pick = |b: Backend, len: usize, mode: ModeKind, algo: &str| {
        let mut v: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.backend == b && r.len == len && r.mode == mode && r.algo == algo)
            .collect();
        v.sort_by_key(|r| r.receivers);
        v
    };
    for (b, len) in keys {
        let where_ = match (b, link_rate) {
            (Backend::Sim, _) => "simulator".to_owned(),
            (Backend::Xdp, None) => "AF_XDP".to_owned(),
            (Backend::Xdp, Some(r)) => format!("AF_XDP, links at {r}"),
        };
        // Latency against receivers.
        let algos = algos_of(b, len, ModeKind::PingPong);
        if !algos.is_empty() {
            let mut series: Vec<Series> = algos
                .iter()
                .map(|a| Series {
                    name: a.to_string(),
                    points: pick(b, len, ModeKind::PingPong, a)
                        .iter()
                        .filter(|r| !r.completion.is_empty())
                        .map(|r| {
                            (
                                r.receivers as f64,
                                r.completion.value_at_quantile(0.5) as f64 / 1e3,
                            )
                        })
                        .collect(),
                    dashed: false,
                })
                .collect();
            if len == 1024 {
                for p in PAPER_1K {
                    if let (Some(a), Some(z)) = (p.1, p.2) {
                        series.push(Series {
                            name: format!("paper {}", p.0),
                            points: vec![(1.0, a), (6.0, z)],
                            dashed: true,
                        });
                    }
                }
            }
            out.push((
                format!("{}-pingpong-latency-vs-receivers-{len}B.svg", b.name()),
                Chart {
                    title: format!("Send-and-wait latency, {len} B messages ({where_})"),
                    x_label: "receivers".into(),
                    y_label: "median latency to the last receiver (us)".into(),
                    x_log: false,
                    y_log: true,
                    x_percentile: false,
                    stacked: true,
                    series,
                },
            ));
        }
        // The echo round trip against receivers.
        let algos = algos_of(b, len, ModeKind::Echo);
        if !algos.is_empty() {
            let series: Vec<Series> = algos
                .iter()
                .map(|a| Series {
                    name: a.to_string(),
                    points: pick(b, len, ModeKind::Echo, a)
                        .iter()
                        .filter_map(|r| {
                            let h = r.echo.as_ref().filter(|h| !h.is_empty())?;
                            Some((r.receivers as f64, h.value_at_quantile(0.5) as f64 / 1e3))
                        })
                        .collect(),
                    dashed: false,
                })
                .collect();
            out.push((
                format!("{}-echo-rtt-vs-receivers-{len}B.svg", b.name()),
                Chart {
                    title: format!("Echo round trip, {len} B messages ({where_})"),
                    x_label: "receivers (the last one replies)".into(),
                    y_label: "median round trip, send to reply (us)".into(),
                    x_log: false,
                    y_log: true,
                    x_percentile: false,
                    stacked: true,
                    series,
                },
            ));
        }
        // Percentile curves at the most receivers.
        for mode in [ModeKind::PingPong, ModeKind::Echo, ModeKind::Rate] {
            let algos = algos_of(b, len, mode);
            let Some(max_rx) = results
                .iter()
                .filter(|r| r.backend == b && r.len == len && r.mode == mode)
                .map(|r| r.receivers)
                .max()
            else {
                continue;
            };
            let series: Vec<Series> = algos
                .iter()
                .filter_map(|a| {
                    let r = pick(b, len, mode, a)
                        .into_iter()
                        .find(|r| r.receivers == max_rx)?;
                    let h = match mode {
                        ModeKind::Echo => r.echo.as_ref()?,
                        _ => &r.completion,
                    };
                    Some(Series {
                        name: a.to_string(),
                        points: percentile_points(h),
                        dashed: false,
                    })
                })
                .filter(|s| !s.points.is_empty())
                .collect();
            let rate = results
                .iter()
                .find(|r| r.mode == mode && r.backend == b)
                .and_then(|r| r.rate)
                .map(|r| format!(" at {r}/s"))
                .unwrap_or_default();
            out.push((
                format!(
                    "{}-{}-percentiles-{len}B-{max_rx}rx.svg",
                    b.name(),
                    mode.name()
                ),
                Chart {
                    title: format!(
                        "{}: {}{rate}, {len} B, {max_rx} receivers ({where_})",
                        if mode == ModeKind::Echo {
                            "Round-trip percentiles"
                        } else {
                            "Latency percentiles"
                        },
                        match mode {
                            ModeKind::Rate => "offered rate",
                            ModeKind::Echo => "echo",
                            _ => "send-and-wait",
                        }
                    ),
                    x_label: "percentile".into(),
                    y_label: if mode == ModeKind::Echo {
                        "round trip, send to reply (us)".into()
                    } else {
                        "latency to the last receiver (us)".into()
                    },
                    x_log: true,
                    y_log: true,
                    x_percentile: true,
                    stacked: false,
                    series,
                },
            ));
        }
        // Throughput against receivers.
        let algos = algos_of(b, len, ModeKind::Saturation);
        if !algos.is_empty() {
            let series = algos
                .iter()
                .map(|a| Series {
                    name: a.to_string(),
                    points: pick(b, len, ModeKind::Saturation, a)
                        .iter()
                        .map(|r| (r.receivers as f64, r.msgs_per_sec))
                        .collect(),
                    dashed: false,
                })
                .collect();
            out.push((
                format!("{}-saturation-throughput-{len}B.svg", b.name()),
                Chart {
                    title: format!("Saturation throughput, {len} B messages ({where_})"),
                    x_label: "receivers".into(),
                    y_label: "messages/s at the slowest receiver".into(),
                    x_log: false,
                    y_log: true,
                    x_percentile: false,
                    stacked: true,
                    series,
                },
            ));
        }
    }
    out
}
