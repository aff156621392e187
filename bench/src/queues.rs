//! `mcast-bench queues`: what serving several NIC queues gives (issue 22
//! part 4), through mcastd. The cluster of `mcast-bench total` (every node
//! a publisher and a subscriber of one FIFO group) on veths with `queues`
//! queues each, started again and again, alternately with every daemon
//! serving one queue (the bridge puts every frame on queue 0) and serving
//! all of them (the bridge puts what it forwards on CPU c on queue c, as a
//! NIC's RSS spreads flows, and node n's daemon is pinned to CPU
//! (n − 1) mod CPUs, so its frames reach every other node on that queue).
//! Native XDP in both arms, the same minutes of this noisy host. Each start
//! measures goodput and paced latency as `total` does, and the share of
//! the frames that came through the extra queues' threads.
//!
//! Reports medians, the spread and the ratio of the two arms.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use mcast_cli::testbed::Cluster;
use mcast_ipc::Client;
use serde_json::{json, Value};

use crate::path::{self, median, micros, spread};
use crate::total::{self, TotalConfig};

/// One arm's figures, one entry per start.
#[derive(Debug, Clone, Default)]
struct Figures {
    goodput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
    /// Of the frames every daemon received, the share through the extra
    /// queues' threads.
    extra_share: Vec<f64>,
}

const ARMS: [&str; 2] = ["1 queue", "all queues"];

pub fn run(cfg: &TotalConfig, queues: u32, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "queues needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !(2..=8).contains(&queues) || !(2..=6).contains(&cfg.senders) || cfg.repeat == 0 {
        return Err("--queues: 2 to 8; --senders: 2 to 6; --repeat at least 1".into());
    }
    if cpus < 2 {
        return Err("queues needs 2 CPUs or more: one CPU puts every frame on one queue".into());
    }
    let mcastd = path::mcastd_binary()?;
    let figs = path::alternate(&ARMS, cfg.repeat, |arm, f| {
        let used = if arm == ARMS[0] { 1 } else { queues };
        one_cluster(cfg, &mcastd, queues, used, cpus, f)
    })?;
    print(cfg, queues, &figs);
    if let Some(p) = json_out {
        path::write_json(p, &to_json(cfg, queues, &figs))?;
    }
    Ok(())
}

fn one_cluster(
    cfg: &TotalConfig,
    mcastd: &std::path::Path,
    queues: u32,
    used: u32,
    cpus: usize,
    f: &mut Figures,
) -> Result<(), String> {
    let mut base = format!(
        "mode = \"fifo\"\nsubscriber_buffer = {}\nxdp_mode = \"native\"\nqueues = {used}\n",
        total::SUBSCRIBER_BUFFER
    );
    for line in &cfg.daemon_config {
        base.push_str(line);
        base.push('\n');
    }
    let extra = |node: u32| format!("{base}cpu = {}\n", (node as usize - 1) % cpus);
    let cluster =
        Cluster::start_with_queues(mcastd, "bench-queues", cfg.senders - 1, queues, extra)
            .ok_or("cannot start the mcastd testbed")?;
    for endpoint in 0..cfg.senders {
        cluster.topology().steer_by_cpu(endpoint, used, queues)?;
    }
    let (mut pubs, mut subs, group) = total::clients(&cluster, cfg.senders)?;
    cluster
        .topology()
        .set_loss(mcast_wire::ETHERTYPE_DEFAULT, cfg.loss)?;
    let goodput = total::saturate(cfg, &mut pubs, &mut subs, group, false)?;
    let (p50, p99, p999) = total::paced(cfg, &mut pubs, &mut subs, group, None)?;
    let (mut all, mut extra_frames) = (0u64, 0u64);
    for n in 1..=cfg.senders as u32 {
        let mut c = Client::connect(cluster.socket(n), "stat").map_err(|e| e.to_string())?;
        let Ok(mcast_ipc::Response::Json(v)) = c.request(mcast_ipc::Request::Stats) else {
            return Err(format!("node {n} gave no stats"));
        };
        all += v["engine"]["rx_frames"].as_u64().unwrap_or(0);
        extra_frames += v["transport"]["queues"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|q| q["frames"].as_u64().unwrap_or(0))
            .sum::<u64>();
    }
    let share = extra_frames as f64 / all.max(1) as f64;
    eprintln!(
        "    {used} queue(s): {goodput:.0} msg/s; p50 {p50:.1} µs, p99 {p99:.1} µs, p99.9 {p999:.1} µs; {:.0} % of the frames through the extra queues",
        share * 100.0
    );
    f.goodput.push(goodput);
    f.p50.push(p50);
    f.p99.push(p99);
    f.p999.push(p999);
    f.extra_share.push(share);
    Ok(())
}

fn print(cfg: &TotalConfig, queues: u32, figs: &[Figures; 2]) {
    println!(
        "{} nodes, each a publisher and a subscriber of one FIFO group, on veths of {queues} queues, native XDP, node n pinned to CPU (n-1) mod CPUs; {} B, {:.1} % loss; goodput: {} messages per publisher, all senders' msg/s at the slowest subscriber; latency: {}/s per publisher; medians of {} start(s) per arm [min-max]",
        cfg.senders,
        cfg.size,
        cfg.loss * 100.0,
        cfg.messages,
        cfg.rate,
        cfg.repeat
    );
    println!(
        "{:<11} {:>22} {:>18} {:>18} {:>18} {:>16}",
        "arm", "msg/s (slowest)", "p50 µs", "p99 µs", "p99.9 µs", "extra queues"
    );
    for (arm, f) in ARMS.iter().zip(figs) {
        let share: Vec<f64> = f.extra_share.iter().map(|s| s * 100.0).collect();
        println!(
            "{:<11} {:>22} {:>18} {:>18} {:>18} {:>15}%",
            arm,
            spread(&f.goodput),
            micros(&f.p50, 1),
            micros(&f.p99, 0),
            micros(&f.p999, 0),
            micros(&share, 0)
        );
    }
    println!(
        "all queues / 1 queue: goodput {}, p50 {}",
        path::ratio(median(&figs[1].goodput), median(&figs[0].goodput)),
        path::ratio(median(&figs[1].p50), median(&figs[0].p50)),
    );
}

fn to_json(cfg: &TotalConfig, queues: u32, figs: &[Figures; 2]) -> Value {
    let arms: Vec<Value> = ARMS
        .iter()
        .zip(figs)
        .map(|(a, f)| {
            json!({"arm": a, "goodput": f.goodput, "p50_us": f.p50, "p99_us": f.p99,
                   "p999_us": f.p999, "extra_queue_share": f.extra_share})
        })
        .collect();
    let mut v = cfg.json("queues");
    v["queues"] = json!(queues);
    v["arms"] = json!(arms);
    v
}
