//! `mcast-bench batch`: what batching small messages into shared frames
//! (docs/protocol.md §1.10) gives users, through mcastd (issue 25's
//! targets). The same cluster is started again and again, alternately with
//! the default `batch = true` and with `batch = false` (one message per
//! frame, as before batching), so both see the same minutes of this noisy
//! host. Each start measures, per message size, goodput lossless and at
//! the asked loss on the segment (as `mcast-bench path` does: every message
//! checked at every subscriber, the client library's batch calls), the
//! messages per frame the sender's `mcast stat` reports, and the one-way
//! latency of messages paced at a fixed rate. Reports medians, the spread
//! and the on/off ratios.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use mcast_cli::testbed::Cluster;
use mcast_ipc::{Client, Request, Response};
use serde_json::{json, Value};

use crate::auth::paced;
use crate::path::{self, median, spread};

/// What to run.
#[derive(Debug, Clone)]
pub struct BatchConfig {
    pub receivers: Vec<usize>,
    pub sizes: Vec<usize>,
    /// Loss on the segment for the second goodput run of each size (0: none).
    pub loss: f64,
    pub messages: u64,
    /// Cluster starts per mode (batching on and off alternate).
    pub repeat: usize,
    pub rate: u64,
    pub paced_messages: u64,
    /// A line added to every daemon's configuration (both modes).
    pub daemon_config: String,
}

/// The figures of one (receivers, size) cell in one mode, one entry per start.
#[derive(Debug, Clone, Default)]
struct Figures {
    lossless: Vec<f64>,
    lossy: Vec<f64>,
    per_frame: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

const MODES: [(&str, &str); 2] = [("on", ""), ("off", "batch = false")];

pub fn run(cfg: &BatchConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "batch needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if cfg.sizes.iter().any(|s| !(16..=8192).contains(s))
        || cfg.repeat == 0
        || cfg.rate == 0
        || !(0.0..1.0).contains(&cfg.loss)
        || cfg.receivers.iter().any(|r| !(1..=6).contains(r))
    {
        return Err(
            "--sizes: 16 to 8,192 bytes; --receivers: 1 to 6; --loss below 1; --repeat and --rate at least 1"
                .into(),
        );
    }
    let mcastd = path::mcastd_binary()?;
    // [receivers][size][mode]
    let mut figs =
        vec![vec![[Figures::default(), Figures::default()]; cfg.sizes.len()]; cfg.receivers.len()];
    for i in 0..cfg.repeat {
        for (ri, &r) in cfg.receivers.iter().enumerate() {
            for (mi, (name, extra)) in MODES.iter().enumerate() {
                eprintln!(
                    "  start {} of {}: {r} receiver(s), batching {name}",
                    i + 1,
                    cfg.repeat
                );
                let extra = format!("{extra}\n{}", cfg.daemon_config);
                one_cluster(cfg, &mcastd, r, &extra, &mut figs[ri], mi)?;
            }
        }
    }
    print(cfg, &figs);
    if let Some(p) = json_out {
        path::write_json(p, &to_json(cfg, &figs))?;
    }
    Ok(())
}

fn one_cluster(
    cfg: &BatchConfig,
    mcastd: &std::path::Path,
    r: usize,
    extra: &str,
    figs: &mut [[Figures; 2]],
    mode: usize,
) -> Result<(), String> {
    let cluster = Cluster::start(mcastd, "bench-batch", r, |_| extra.to_owned())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut publisher, mut subscribers, group) = path::bench_group(&cluster, r)?;
    let mut next = 0u64;
    for (k, &size) in cfg.sizes.iter().enumerate() {
        let f = &mut figs[k][mode];
        let before = batching(&mut publisher)?;
        let lossless = goodput(
            &mut publisher,
            &mut subscribers,
            group,
            &mut next,
            cfg,
            size,
        )?;
        let after = batching(&mut publisher)?;
        let per_frame = (after.0 - before.0) / (after.1 - before.1).max(1.0);
        let mut lossy = f64::NAN;
        if cfg.loss > 0.0 {
            cluster
                .topology()
                .set_loss(mcast_wire::ETHERTYPE_DEFAULT, cfg.loss)?;
            lossy = goodput(
                &mut publisher,
                &mut subscribers,
                group,
                &mut next,
                cfg,
                size,
            )?;
            cluster
                .topology()
                .set_loss(mcast_wire::ETHERTYPE_DEFAULT, 0.0)?;
        }
        let (p50, p99) = paced(
            &mut publisher,
            &mut subscribers,
            group,
            size,
            cfg.rate,
            cfg.paced_messages,
        )?;
        eprintln!(
            "    {size} B: {lossless:.0} msg/s lossless ({per_frame:.1} per frame), {lossy:.0} at {}% loss; at {}/s p50 {p50:.1} µs, p99 {p99:.1} µs",
            cfg.loss * 100.0,
            cfg.rate
        );
        f.lossless.push(lossless);
        f.lossy.push(lossy);
        f.per_frame.push(per_frame);
        f.p50.push(p50);
        f.p99.push(p99);
    }
    Ok(())
}

/// Goodput of messages `*next..` (`cfg.messages` of them) at the slowest
/// subscriber; moves `next` past them.
fn goodput(
    publisher: &mut Client,
    subscribers: &mut [Client],
    group: u32,
    next: &mut u64,
    cfg: &BatchConfig,
    size: usize,
) -> Result<f64, String> {
    let (slowest, _) = path::one_run(publisher, subscribers, group, *next, cfg.messages, size)?;
    *next += cfg.messages;
    Ok(slowest)
}

/// The sender's (messages, frames) so far in the bench group, from `mcast stat`.
fn batching(c: &mut Client) -> Result<(f64, f64), String> {
    let Response::Json(v) = c.request(Request::Stats).map_err(|e| e.to_string())? else {
        return Err("mcast stat gave no JSON".into());
    };
    let b = v["groups"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "bench"))
        .map(|g| &g["batching"])
        .ok_or("no bench group in mcast stat")?;
    let n = |k: &str| b[k].as_f64().unwrap_or(0.0);
    Ok((n("messages"), n("frames")))
}

fn ratio_of(a: &[f64], b: &[f64]) -> String {
    path::ratio(median(a), median(b))
}

fn print(cfg: &BatchConfig, figs: &[Vec<[Figures; 2]>]) {
    println!(
        "medians of {} start(s) per mode [min-max], msg/s at the slowest subscriber; on = batch = true (the default), off = batch = false",
        cfg.repeat
    );
    println!(
        "{:>2} {:>5}  {:>18} {:>18} {:>6} {:>8}  {:>18} {:>8}  {:>15} {:>15}",
        "rx",
        "size",
        "on",
        "off",
        "on/off",
        "msg/fr",
        "on, loss",
        "vs lossl",
        "p50 on/off µs",
        "p99 on/off µs"
    );
    for (ri, r) in cfg.receivers.iter().enumerate() {
        for (k, size) in cfg.sizes.iter().enumerate() {
            let [on, off] = &figs[ri][k];
            let m = |v: &[f64]| median(v).unwrap_or(f64::NAN);
            println!(
                "{:>2} {:>5}  {:>18} {:>18} {:>6} {:>8.1}  {:>18} {:>8}  {:>15} {:>15}",
                r,
                size,
                spread(&on.lossless),
                spread(&off.lossless),
                ratio_of(&on.lossless, &off.lossless),
                m(&on.per_frame),
                spread(&on.lossy),
                ratio_of(&on.lossy, &on.lossless),
                format!("{:.0} / {:.0}", m(&on.p50), m(&off.p50)),
                format!("{:.0} / {:.0}", m(&on.p99), m(&off.p99)),
            );
        }
    }
}

fn to_json(cfg: &BatchConfig, figs: &[Vec<[Figures; 2]>]) -> Value {
    let mut cells = Vec::new();
    for (ri, r) in cfg.receivers.iter().enumerate() {
        for (k, size) in cfg.sizes.iter().enumerate() {
            for (mi, (name, _)) in MODES.iter().enumerate() {
                let f = &figs[ri][k][mi];
                cells.push(json!({
                    "receivers": r, "size": size, "batch": name,
                    "lossless": f.lossless, "lossy": f.lossy, "loss": cfg.loss,
                    "messages_per_frame": f.per_frame, "p50_us": f.p50, "p99_us": f.p99,
                }));
            }
        }
    }
    json!({
        "bench": "batch",
        "messages": cfg.messages,
        "repeat": cfg.repeat,
        "rate": cfg.rate,
        "paced_messages": cfg.paced_messages,
        "cells": cells,
    })
}
