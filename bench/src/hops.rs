//! `mcast-bench hops`: where a message's microseconds go on the user's
//! path (docs/mcastd.md "Where the time goes"). For each receiver count and
//! loss, the same cluster (a publisher on node 1, a subscriber on each other
//! node, defaults throughout) is started again and again, alternately with
//! `trace = false` and `trace = true`. Each start paces messages at a fixed
//! rate and measures the one-way latency from the payload's own stamps
//! (publish call to the subscriber's read, as `mcast-bench auth` and `order`
//! do); the traced starts also read each hop's quantiles from every daemon's
//! `mcast stat` and every subscriber's client library. Then the goodput of
//! the same cluster, so both costs of tracing show as ratios in the same
//! run. Receiver-side hops are per subscriber node: the table gives the
//! median over nodes of their p50 and the largest of their p99; over starts,
//! medians. Needs root.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use mcast_cli::testbed::Cluster;
use mcast_ipc::trace::HopSummary;
use mcast_ipc::{Client, Request, Response};
use mcast_wire::ETHERTYPE_DEFAULT;
use serde_json::{json, Value};

use crate::auth::paced;
use crate::host::{CpuTimes, Idle, Split};
use crate::path::{self, median, micros, spread};

/// What to run.
#[derive(Debug, Clone)]
pub struct HopsConfig {
    pub receivers: Vec<usize>,
    pub loss: Vec<f64>,
    pub size: usize,
    pub rate: u64,
    pub paced_messages: u64,
    /// Messages of the goodput run after the paced one.
    pub messages: u64,
    pub repeat: usize,
    /// Lines added to every node's mcastd.toml (to try settings; the
    /// figures that count are those of the defaults).
    pub daemon_config: Vec<String>,
}

/// The hops in path order: (name, where its figures come from, stats key).
const HOPS: [(&str, Side, &str); 5] = [
    ("publish → taken", Side::Sender, "publish_to_taken"),
    ("taken → sent", Side::Sender, "taken_to_sent"),
    ("sent → received", Side::Receiver, "sent_to_received"),
    ("received → ring", Side::Receiver, "received_to_ring"),
    ("ring → read", Side::Client, ""),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Node 1's daemon.
    Sender,
    /// Each subscriber node's daemon.
    Receiver,
    /// Each subscriber's client library.
    Client,
}

/// One start's figures.
#[derive(Debug, Clone, Default)]
struct Start {
    p50: f64,
    p99: f64,
    goodput: f64,
    /// Per hop (traced starts): (p50, p99) in µs, over the subscriber
    /// nodes as the module says.
    hops: Vec<(f64, f64)>,
    /// Per paced message, at the publisher's node: the feedback its send
    /// stream exchanged (position adverts and ACK requests sent, ACKs
    /// received) and the sleeps of its engine and of node 2's: what wakes
    /// the daemons between two messages.
    per_message: [f64; 5],
}

/// What [`Start::per_message`] holds, in order.
const PER_MESSAGE: [&str; 5] = [
    "adverts",
    "ACK requests",
    "ACKs in",
    "sleeps node 1",
    "sleeps node 2",
];

/// Every start of one (receivers, loss) cell.
#[derive(Debug, Clone, Default)]
struct Cell {
    receivers: usize,
    loss: f64,
    plain: Vec<Start>,
    traced: Vec<Start>,
    /// How the host's CPUs spent the cell's time.
    host: Option<Split>,
}

pub fn run(cfg: &HopsConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "hops needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if !(16..=8192).contains(&cfg.size)
        || cfg.receivers.iter().any(|r| !(1..=5).contains(r))
        || cfg.loss.iter().any(|l| !(0.0..0.5).contains(l))
        || cfg.repeat == 0
        || cfg.rate == 0
        || cfg.paced_messages == 0
    {
        return Err(
            "--size: 16 to 8,192 bytes; --receivers: 1 to 5; --loss: 0 to 0.5; --repeat, --rate and --paced-messages at least 1"
                .into(),
        );
    }
    let mcastd = path::mcastd_binary()?;
    let idle = Idle::read();
    println!("host: {}", idle.describe());
    let mut cells = Vec::new();
    for &r in &cfg.receivers {
        for &loss in &cfg.loss {
            let mut cell = Cell {
                receivers: r,
                loss,
                ..Cell::default()
            };
            let before = CpuTimes::read();
            for i in 0..cfg.repeat {
                for traced in [false, true] {
                    eprintln!(
                        "  {r} receiver(s), {}% loss, start {} of {}, trace {traced}",
                        loss * 100.0,
                        i + 1,
                        cfg.repeat
                    );
                    let s = one_start(cfg, &mcastd, r, loss, traced)?;
                    if traced {
                        cell.traced.push(s);
                    } else {
                        cell.plain.push(s);
                    }
                }
            }
            cell.host = CpuTimes::read()
                .zip(before)
                .and_then(|(now, then)| now.split_since(&then));
            print_cell(cfg, &cell);
            cells.push(cell);
        }
    }
    if let Some(p) = json_out {
        path::write_json(p, &to_json(cfg, &idle, &cells))?;
    }
    Ok(())
}

fn one_start(
    cfg: &HopsConfig,
    mcastd: &std::path::Path,
    r: usize,
    loss: f64,
    traced: bool,
) -> Result<Start, String> {
    let extra = format!("trace = {traced}\n{}", cfg.daemon_config.join("\n"));
    let cluster = Cluster::start(mcastd, "bench-hops", r, |_| extra.clone())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut publisher, mut subscribers, group) = path::bench_group(&cluster, r)?;
    cluster.topology().set_loss(ETHERTYPE_DEFAULT, loss)?;
    let (p50, p99) = paced(
        &mut publisher,
        &mut subscribers,
        group,
        cfg.size,
        cfg.rate,
        cfg.paced_messages,
    )?;
    let hops = if traced {
        hops(&cluster, r, &subscribers)?
    } else {
        Vec::new()
    };
    let per_message = per_message(&cluster, cfg.paced_messages)?;
    let (goodput, _) = path::one_run(
        &mut publisher,
        &mut subscribers,
        group,
        0,
        cfg.messages,
        cfg.size,
    )?;
    eprintln!(
        "    at {}/s p50 {p50:.1} µs, p99 {p99:.1} µs; {goodput:.0} msg/s",
        cfg.rate
    );
    Ok(Start {
        p50,
        p99,
        goodput,
        hops,
        per_message,
    })
}

/// [`Start::per_message`], read after the paced run (the fresh cluster's
/// start adds a handful).
fn per_message(cluster: &Cluster, n: u64) -> Result<[f64; 5], String> {
    let (one, two) = (stats(cluster, 1)?, stats(cluster, 2)?);
    let sender = one["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["name"] == "bench"))
        .map(|g| g["sender"].clone())
        .unwrap_or(Value::Null);
    let per = |v: &Value| v.as_u64().unwrap_or(0) as f64 / n as f64;
    Ok([
        per(&sender["adverts_sent"]),
        per(&sender["ack_reqs_sent"]),
        per(&sender["acks_received"]),
        per(&one["engine"]["sleeps"]),
        per(&two["engine"]["sleeps"]),
    ])
}

/// What `mcast stat --json` shows of `node`.
fn stats(cluster: &Cluster, node: u32) -> Result<Value, String> {
    let mut c = Client::connect(cluster.socket(node), "bench-stat")
        .map_err(|e| format!("connect to node {node}: {e}"))?;
    match c.request(Request::Stats).map_err(|e| e.to_string())? {
        Response::Json(v) => Ok(v),
        _ => Err(format!("node {node}'s mcastd answered Stats without JSON")),
    }
}

/// Each hop's (p50, p99) in µs after the paced run.
fn hops(cluster: &Cluster, r: usize, subscribers: &[Client]) -> Result<Vec<(f64, f64)>, String> {
    let trace_of = |node: u32| -> Result<Value, String> {
        let v = stats(cluster, node)?;
        match &v["trace"] {
            t if t.is_object() => Ok(t.clone()),
            _ => Err(format!("node {node}'s mcastd reports no trace")),
        }
    };
    let sender = trace_of(1)?;
    let receivers = (2..=r as u32 + 1)
        .map(trace_of)
        .collect::<Result<Vec<_>, _>>()?;
    let clients: Vec<HopSummary> = subscribers
        .iter()
        .map(|c| c.read_hop().ok_or("a subscriber's client does not trace"))
        .collect::<Result<_, _>>()?;
    let parse = |v: &Value| -> Result<HopSummary, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("a hop in mcast stat: {e}"))
    };
    HOPS.iter()
        .map(|&(_, side, key)| {
            let per_node: Vec<HopSummary> = match side {
                Side::Sender => vec![parse(&sender[key])?],
                Side::Receiver => receivers
                    .iter()
                    .map(|t| parse(&t[key]))
                    .collect::<Result<_, _>>()?,
                Side::Client => clients.clone(),
            };
            let p50s: Vec<f64> = per_node.iter().map(|h| h.p50_ns as f64 / 1e3).collect();
            let p99 = per_node.iter().map(|h| h.p99_ns).max().unwrap_or(0) as f64 / 1e3;
            Ok((median(&p50s).unwrap_or(0.0), p99))
        })
        .collect()
}

fn print_cell(cfg: &HopsConfig, c: &Cell) {
    println!(
        "{} receiver(s), {}% loss, {} B at {}/s, {} start(s) per setting: medians [min-max]",
        c.receivers,
        c.loss * 100.0,
        cfg.size,
        cfg.rate,
        cfg.repeat
    );
    if let Some(h) = &c.host {
        println!("host over the cell: {}", h.describe());
    }
    println!("{:<18} {:>22} {:>22}", "hop", "p50 µs", "p99 µs");
    let mut sum = 0.0;
    for (k, (name, _, _)) in HOPS.iter().enumerate() {
        let p50: Vec<f64> = c.traced.iter().map(|s| s.hops[k].0).collect();
        let p99: Vec<f64> = c.traced.iter().map(|s| s.hops[k].1).collect();
        sum += median(&p50).unwrap_or(0.0);
        println!(
            "{:<18} {:>22} {:>22}",
            name,
            micros(&p50, 1),
            micros(&p99, 1)
        );
    }
    let e2e = |v: &[Start], f: fn(&Start) -> f64| v.iter().map(f).collect::<Vec<f64>>();
    println!(
        "{:<18} {:>22} {:>22}   (sum of the hops' p50: {sum:.1})",
        "end to end, traced",
        micros(&e2e(&c.traced, |s| s.p50), 1),
        micros(&e2e(&c.traced, |s| s.p99), 1)
    );
    println!(
        "{:<18} {:>22} {:>22}",
        "end to end, plain",
        micros(&e2e(&c.plain, |s| s.p50), 1),
        micros(&e2e(&c.plain, |s| s.p99), 1)
    );
    let all: Vec<&Start> = c.plain.iter().chain(&c.traced).collect();
    let per: Vec<String> = PER_MESSAGE
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let v: Vec<f64> = all.iter().map(|s| s.per_message[k]).collect();
            format!("{name} {:.2}", median(&v).unwrap_or(0.0))
        })
        .collect();
    println!("per paced message (all starts): {}", per.join(", "));
    let (gt, gp) = (e2e(&c.traced, |s| s.goodput), e2e(&c.plain, |s| s.goodput));
    println!(
        "goodput traced {} plain {} msg/s: traced/plain {}; p50 traced/plain {}, p99 {}",
        spread(&gt),
        spread(&gp),
        path::ratio(median(&gt), median(&gp)),
        path::ratio(
            median(&e2e(&c.traced, |s| s.p50)),
            median(&e2e(&c.plain, |s| s.p50))
        ),
        path::ratio(
            median(&e2e(&c.traced, |s| s.p99)),
            median(&e2e(&c.plain, |s| s.p99))
        ),
    );
}

fn to_json(cfg: &HopsConfig, idle: &Idle, cells: &[Cell]) -> Value {
    let start = |s: &Start| {
        json!({
            "p50_us": s.p50, "p99_us": s.p99, "goodput": s.goodput,
            "per_message": PER_MESSAGE.iter().zip(s.per_message).map(|(k, v)| json!({"what": k, "value": v})).collect::<Vec<_>>(),
            "hops": HOPS.iter().zip(&s.hops).map(|((name, _, _), (p50, p99))| {
                json!({"hop": name, "p50_us": p50, "p99_us": p99})
            }).collect::<Vec<_>>(),
        })
    };
    json!({
        "bench": "hops",
        "host": idle.to_json(),
        "size": cfg.size,
        "rate": cfg.rate,
        "paced_messages": cfg.paced_messages,
        "messages": cfg.messages,
        "repeat": cfg.repeat,
        "cells": cells.iter().map(|c| json!({
            "receivers": c.receivers, "loss": c.loss,
            "host_cpus": c.host.map(|h| h.to_json()),
            "plain": c.plain.iter().map(start).collect::<Vec<_>>(),
            "traced": c.traced.iter().map(start).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
