//! `mcast-bench order`: what one order for every member costs, through
//! mcastd (the sequenced mode, docs/protocol.md §6.3). The same cluster is
//! started again and again, alternately with `mode = "fifo"` (each sender's
//! own stream) and `mode = "sequenced"` (every message through the tree's
//! root), so both see the same minutes of this noisy host. The root is the
//! group's agent, the node of the first member to join: a subscriber on
//! node 1 joins first, and the publisher sits on the last node, so in the
//! sequenced mode its messages take the extra hop to the root. Each start
//! measures goodput (every message checked at every subscriber, as
//! `mcast-bench path` does) and the one-way latency of messages paced at a
//! fixed rate. Reports medians, the spread and the sequenced/fifo ratios.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::time::Duration;

use mcast_cli::testbed::Cluster;
use mcast_ipc::Client;
use serde_json::{json, Value};

use crate::auth::paced;
use crate::path::{self, median, micros, spread};

/// What to run.
#[derive(Debug, Clone)]
pub struct OrderConfig {
    /// Subscriber nodes (the publisher's node comes on top).
    pub receivers: usize,
    pub size: usize,
    pub messages: u64,
    /// Cluster starts per mode (the modes alternate).
    pub repeat: usize,
    pub rate: u64,
    pub paced_messages: u64,
}

/// One mode's figures, one entry per start.
#[derive(Debug, Clone, Default)]
struct Figures {
    goodput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

const MODES: [&str; 2] = ["fifo", "sequenced"];

pub fn run(cfg: &OrderConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "order needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if !(16..=8192).contains(&cfg.size)
        || !(1..=5).contains(&cfg.receivers)
        || cfg.repeat == 0
        || cfg.rate == 0
        || cfg.messages == 0
        || cfg.paced_messages == 0
    {
        return Err(
            "--size: 16 to 8,192 bytes; --receivers: 1 to 5; --repeat, --rate, --messages and --paced-messages at least 1"
                .into(),
        );
    }
    let mcastd = path::mcastd_binary()?;
    let figs = path::alternate(&MODES, cfg.repeat, |mode, f| {
        one_cluster(cfg, &mcastd, mode, f)
    })?;
    print(cfg, &figs);
    if let Some(p) = json_out {
        path::write_json(p, &to_json(cfg, &figs))?;
    }
    Ok(())
}

fn one_cluster(
    cfg: &OrderConfig,
    mcastd: &std::path::Path,
    mode: &str,
    f: &mut Figures,
) -> Result<(), String> {
    let extra = format!("mode = \"{mode}\"");
    let cluster = Cluster::start(mcastd, "bench-order", cfg.receivers, |_| extra.clone())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut publisher, mut subscribers, group) = group_off_the_root(&cluster, cfg.receivers)?;
    let (goodput, _) = path::one_run(
        &mut publisher,
        &mut subscribers,
        group,
        0,
        cfg.messages,
        cfg.size,
    )?;
    let (p50, p99) = paced(
        &mut publisher,
        &mut subscribers,
        group,
        cfg.size,
        cfg.rate,
        cfg.paced_messages,
    )?;
    eprintln!(
        "    {mode}: {goodput:.0} msg/s; at {}/s p50 {p50:.1} µs, p99 {p99:.1} µs",
        cfg.rate
    );
    f.goodput.push(goodput);
    f.p50.push(p50);
    f.p99.push(p99);
    Ok(())
}

/// The group "bench" with a subscriber on each of nodes 1..=r (node 1's
/// first: its node is the agent, the root) and the publisher on node r + 1,
/// once the group has all r + 1 nodes.
fn group_off_the_root(cluster: &Cluster, r: usize) -> Result<(Client, Vec<Client>, u32), String> {
    let connect = |node: u32, name: &str| {
        Client::connect(cluster.socket(node), name)
            .map_err(|e| format!("connect to node {node}'s mcastd: {e}"))
    };
    let mut subscribers = Vec::new();
    for node in 1..=r as u32 {
        let mut c = connect(node, "bench-subscriber")?;
        c.join("bench").map_err(|e| e.to_string())?;
        subscribers.push(c);
    }
    let mut publisher = connect(r as u32 + 1, "bench-publisher")?;
    let joined = publisher.join("bench").map_err(|e| e.to_string())?;
    mcast_cli::stream::wait_nodes(
        &mut publisher,
        joined.group,
        &joined.view,
        r + 1,
        Duration::from_secs(20),
    )?;
    Ok((publisher, subscribers, joined.group))
}

fn print(cfg: &OrderConfig, figs: &[Figures; 2]) {
    println!(
        "{} subscriber node(s), publisher on another, {} B; medians of {} start(s) per mode [min-max]",
        cfg.receivers, cfg.size, cfg.repeat
    );
    println!(
        "{:<10} {:>22} {:>22} {:>22}",
        "mode", "msg/s (slowest)", "p50 µs", "p99 µs"
    );
    for (mode, f) in MODES.iter().zip(figs) {
        println!(
            "{:<10} {:>22} {:>22} {:>22}",
            mode,
            spread(&f.goodput),
            micros(&f.p50, 0),
            micros(&f.p99, 0)
        );
    }
    let [fifo, seq] = figs;
    println!(
        "sequenced/fifo: goodput {}, p50 {}, p99 {}",
        path::ratio(median(&seq.goodput), median(&fifo.goodput)),
        path::ratio(median(&seq.p50), median(&fifo.p50)),
        path::ratio(median(&seq.p99), median(&fifo.p99)),
    );
}

fn to_json(cfg: &OrderConfig, figs: &[Figures; 2]) -> Value {
    let modes: Vec<Value> = MODES
        .iter()
        .zip(figs)
        .map(|(m, f)| json!({"mode": m, "goodput": f.goodput, "p50_us": f.p50, "p99_us": f.p99}))
        .collect();
    json!({
        "bench": "order",
        "receivers": cfg.receivers,
        "size": cfg.size,
        "messages": cfg.messages,
        "repeat": cfg.repeat,
        "rate": cfg.rate,
        "paced_messages": cfg.paced_messages,
        "modes": modes,
    })
}
