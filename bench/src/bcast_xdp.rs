//! `mcast-bench bcast-xdp`: seed 003's broadcasts through mcastd over
//! AF_XDP, on a segment that carries no multicast (the bridge drops every
//! frame to a group address), against the iterative baseline in the same
//! run.
//!
//! One cluster of `--nodes` daemons carries one group per algorithm: the
//! baseline (`algorithm = "iterative"`: Go-Back-N from the sender to each
//! member in turn, the only way a FIFO group works without multicast) and a
//! `mode = "broadcast"` group per schedule. Node 1 publishes; a subscriber
//! on every other node takes every message. For each size, the algorithms
//! take turns message by message (so all see the same moments of this noisy
//! host), each message published alone: its completion time is from just
//! before the publish to the moment the last subscriber has it whole. Reports
//! medians and the 10th–90th percentile spread, each algorithm's speed-up
//! over the baseline, where the curves cross, and α and β fitted from the
//! baseline's times (T = (p − 1)(α + nβ)) with the model's speed-ups and
//! crossover for them.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mcast_bcast::cost::{Fabric, Link, Model};
use mcast_bcast::Algorithm;
use mcast_cli::testbed::Cluster;
use mcast_ipc::{Client, MessageKind};
use serde_json::{json, Value};

use crate::bcast::human_size;
use crate::path;

/// What to run.
#[derive(Debug, Clone)]
pub struct XdpConfig {
    /// Daemons (the publisher's node included).
    pub nodes: usize,
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Messages per algorithm and size (fewer for large sizes: at most
    /// `budget` bytes per algorithm and size, at least 3).
    pub trials: usize,
    /// Bytes per algorithm and size at most.
    pub budget: u64,
    /// Every node's link capped at this `tc` rate in each direction.
    pub link_rate: Option<String>,
}

/// The groups: (name, what the algorithm is, its `[[group]]` lines). DEF
/// runs with 8 segments, near the model's best k from 256 KiB to 4 MiB on
/// six members (2×3) at the daemons' α and β.
const GROUPS: [(&str, &str); 7] = [
    ("iterative", "algorithm = \"iterative\""),
    ("rsbcast", "mode = \"broadcast\"\nbroadcast = \"rsbcast\""),
    ("mst", "mode = \"broadcast\"\nbroadcast = \"mst\""),
    (
        "scatter-collect",
        "mode = \"broadcast\"\nbroadcast = \"scatter-collect\"",
    ),
    (
        "scatter-collect-2d",
        "mode = \"broadcast\"\nbroadcast = \"scatter-collect-2d\"",
    ),
    ("auto", "mode = \"broadcast\"\nbroadcast = \"auto\""),
    ("def:8", "mode = \"broadcast\"\nbroadcast = \"def:8\""),
];

/// A receipt: (group index, message id, when, whole and intact).
type Receipt = (usize, u64, Instant, bool);

pub fn run(cfg: &XdpConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "bcast-xdp needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if !(3..=16).contains(&cfg.nodes) || cfg.trials == 0 || cfg.sizes.is_empty() {
        return Err("--nodes: 3 to 16; --trials at least 1; at least one size".into());
    }
    let largest = *cfg.sizes.iter().max().expect("one");
    if largest > 32 << 20 {
        return Err("sizes up to 32 MiB".into());
    }
    let mcastd = path::mcastd_binary()?;
    // Rings that hold the largest message several times over.
    let ring = (largest * 4).max(4 << 20).next_power_of_two();
    let mut extra = format!(
        "max_message = {}\nsubscriber_buffer = {ring}\npublication_buffer = {ring}\n",
        largest.max(1 << 20)
    );
    for (name, lines) in GROUPS {
        extra += &format!("[[group]]\nname = \"b-{name}\"\n{lines}\n");
    }
    let cluster = Cluster::start(&mcastd, "bench-bcast", cfg.nodes - 1, |_| extra.clone())
        .ok_or("cannot start the mcastd testbed")?;
    cluster.topology().drop_multicast(true)?;
    if let Some(rate) = &cfg.link_rate {
        cluster.topology().limit_rate_every_port(rate, "64kbit")?;
    }
    let connect = |node: u32, name: &str| {
        Client::connect(cluster.socket(node), name)
            .map_err(|e| format!("connect to node {node}'s mcastd: {e}"))
    };
    let mut publisher = connect(1, "bench-publisher")?;
    let mut groups = Vec::new();
    let mut subscribers = Vec::new();
    for node in 2..=cfg.nodes as u32 {
        subscribers.push(connect(node, "bench-subscriber")?);
    }
    for (name, _) in GROUPS {
        let joined = publisher
            .join(&format!("b-{name}"))
            .map_err(|e| e.to_string())?;
        for s in &mut subscribers {
            s.join(&format!("b-{name}")).map_err(|e| e.to_string())?;
        }
        mcast_cli::stream::wait_nodes(
            &mut publisher,
            joined.group,
            &joined.view,
            cfg.nodes,
            Duration::from_secs(20),
        )?;
        groups.push(joined.group);
    }
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<Receipt>();
    let mut times: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); cfg.sizes.len()]; GROUPS.len()];
    let result = std::thread::scope(|s| {
        for mut c in subscribers.drain(..) {
            let (tx, stop, groups) = (tx.clone(), &stop, &groups);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = c.recv_batch_timeout(64, Some(Duration::from_millis(50)), |m| {
                        if m.kind != MessageKind::Data || m.data.len() < 16 {
                            return;
                        }
                        let Some(gi) = groups.iter().position(|&g| g == m.group) else {
                            return;
                        };
                        let id = u64::from_be_bytes(m.data[..8].try_into().expect("8"));
                        let len = u64::from_be_bytes(m.data[8..16].try_into().expect("8"));
                        let whole = len == m.data.len() as u64
                            && m.data[16..].iter().all(|&b| b == (id % 251) as u8);
                        let _ = tx.send((gi, id, Instant::now(), whole));
                    });
                    if r.is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let r = measure(cfg, &mut publisher, &groups, &rx, &mut times);
        stop.store(true, Ordering::Relaxed);
        r
    });
    result?;
    let mut report = report(cfg, &times);
    // What `auto` chose at the publisher, and with what link.
    if let Ok(mcast_ipc::Response::Json(stats)) = publisher.request(mcast_ipc::Request::Stats) {
        let auto = stats["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|g| g["name"] == "b-auto")
            .map(|g| g["mode"].clone())
            .unwrap_or_default();
        report.0 += &format!(
            "auto at node 1: chose {}; link measured {} from {} samples ({}); last: {}\n",
            auto["chosen"],
            auto["link_measured"],
            auto["link_samples"],
            auto["link_round_trips"],
            auto["auto_last_choice"]
        );
        report.1["auto_stats"] = auto;
    }
    print!("{}", report.0);
    if let Some(p) = json_out {
        path::write_json(p, &report.1)?;
    }
    Ok(())
}

/// Every size, every trial, every algorithm in turn: one message, its
/// completion time (seconds) into `times[group][size]`.
fn measure(
    cfg: &XdpConfig,
    publisher: &mut Client,
    groups: &[u32],
    rx: &mpsc::Receiver<Receipt>,
    times: &mut [Vec<Vec<f64>>],
) -> Result<(), String> {
    let receivers = cfg.nodes - 1;
    let mut id = 0u64;
    let mut msg = Vec::new();
    for (si, &n) in cfg.sizes.iter().enumerate() {
        let n = n.max(16);
        let trials = (cfg.trials as u64).min(cfg.budget / n).max(3);
        eprintln!("{}: {trials} messages per algorithm", human_size(n));
        for _ in 0..trials {
            for (gi, &g) in groups.iter().enumerate() {
                id += 1;
                msg.clear();
                msg.extend_from_slice(&id.to_be_bytes());
                msg.extend_from_slice(&n.to_be_bytes());
                msg.resize(n as usize, (id % 251) as u8);
                let t0 = Instant::now();
                publisher
                    .publish_blocking(g, &msg, Some(Duration::from_secs(30)))
                    .map_err(|e| format!("publish to {}: {e}", GROUPS[gi].0))?;
                let mut got = 0;
                let mut last = t0;
                while got < receivers {
                    let (rgi, rid, at, whole) =
                        rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
                            format!(
                                "{} of {}: not everyone had it in 60 s",
                                GROUPS[gi].0,
                                human_size(n)
                            )
                        })?;
                    if (rgi, rid) != (gi, id) {
                        continue; // a late copy of an earlier one cannot come: ids are unique
                    }
                    if !whole {
                        return Err(format!(
                            "{} of {}: a damaged message",
                            GROUPS[gi].0,
                            human_size(n)
                        ));
                    }
                    got += 1;
                    last = last.max(at);
                }
                times[gi][si].push((last - t0).as_secs_f64());
            }
        }
    }
    Ok(())
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() - 1) as f64 * q).round() as usize]
}

fn t(s: f64) -> String {
    if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.0} us", s * 1e6)
    }
}

/// The table (text) and its JSON.
fn report(cfg: &XdpConfig, times: &[Vec<Vec<f64>>]) -> (String, Value) {
    let p = cfg.nodes as u32;
    let links = match &cfg.link_rate {
        Some(r) => format!("every node's link capped at {r} each way"),
        None => "links as fast as the host".into(),
    };
    let mut out = format!(
        "# seed 003 through mcastd over AF_XDP, {p} nodes, multicast dropped on the segment, {links};\n\
         # one message at a time from node 1, completion = the last subscriber has it whole;\n\
         # median [p10-p90], then the speed-up over iterative (its median / this median)\n\n| size |"
    );
    for (name, _) in GROUPS {
        out += &format!(" {name} |");
    }
    out += "\n|---|";
    out += &"---|".repeat(GROUPS.len());
    out += "\n";
    let med = |gi: usize, si: usize| quantile(&times[gi][si], 0.5);
    let mut json_rows = Vec::new();
    for (si, &n) in cfg.sizes.iter().enumerate() {
        out += &format!("| {} |", human_size(n));
        for gi in 0..GROUPS.len() {
            let v = &times[gi][si];
            let speedup = med(0, si) / med(gi, si);
            out += &format!(
                " {} [{}-{}] {speedup:.2}x |",
                t(med(gi, si)),
                t(quantile(v, 0.1)),
                t(quantile(v, 0.9))
            );
            json_rows.push(json!({
                "algorithm": GROUPS[gi].0, "bytes": n, "messages": v.len(),
                "median_s": med(gi, si), "p10_s": quantile(v, 0.1), "p90_s": quantile(v, 0.9),
                "speedup_over_iterative": speedup,
            }));
        }
        out += "\n";
    }
    // α and β from the baseline's medians, T/(p − 1) = α + nβ for each of
    // its copies: β from the two largest sizes (where bytes dominate), α
    // from the smallest (where they do not).
    let steps = f64::from(p - 1);
    let per_copy = |si: usize| med(0, si) / steps;
    let mut by_size: Vec<(u64, usize)> = cfg.sizes.iter().copied().zip(0..).collect();
    by_size.sort_unstable();
    let beta = match by_size.as_slice() {
        [.., (n1, s1), (n2, s2)] if n2 > n1 => (per_copy(*s2) - per_copy(*s1)) / (*n2 - *n1) as f64,
        _ => 0.0,
    };
    let (n0, s0) = by_size[0];
    let alpha = per_copy(s0) - n0 as f64 * beta;
    out += &format!(
        "\nfitted from iterative (T = (p - 1)(alpha + n beta); beta from the two largest sizes, alpha from the smallest): alpha {:.1} us, beta {:.2} ns/B ({:.0} MB/s)\n",
        alpha * 1e6,
        beta * 1e9,
        1e-6 / beta.max(1e-15)
    );
    // Without a positive α and β (a tbf bucket lets small messages through
    // at line rate, so the smallest size's copies look free) the model has
    // nothing to say: no figures rather than wrong ones.
    let model = (alpha > 0.0 && beta > 0.0).then_some(Model {
        link: Link { alpha, beta },
        fabric: Fabric::Switch,
    });
    match model {
        Some(_) => out += "the model's speed-up over iterative with them (measured in brackets):\n",
        None => out += "no positive alpha and beta: no model figures\n",
    }
    for (si, &n) in cfg.sizes.iter().enumerate() {
        let Some(model) = model else { break };
        let base = model.time(Algorithm::Iterative, p, n);
        let mut line = format!("  {}:", human_size(n));
        for (gi, (name, _)) in GROUPS.iter().enumerate().skip(1) {
            let alg = match *name {
                "rsbcast" => Algorithm::RsBcast,
                "mst" => Algorithm::Mst,
                "scatter-collect" => Algorithm::ScatterCollect,
                "scatter-collect-2d" => Algorithm::ScatterCollect2d,
                "def:8" => Algorithm::Def { segments: 8 },
                _ => mcast_bcast::choose(&model, p, n).algorithm,
            };
            line += &format!(
                " {name} {:.2}x ({:.2}x)",
                base / model.time(alg, p, n),
                med(0, si) / med(gi, si)
            );
        }
        out += &line;
        out += "\n";
    }
    // Where scatter-collect overtakes rsbcast: measured, and by the model.
    let measured = cfg
        .sizes
        .iter()
        .enumerate()
        .find(|&(si, _)| med(3, si) < med(1, si))
        .map(|(_, &n)| human_size(n));
    let model_cross = model.map(|model| {
        (6..=25)
            .map(|s| 1u64 << s)
            .find(|&n| {
                model.time(Algorithm::ScatterCollect, p, n) < model.time(Algorithm::RsBcast, p, n)
            })
            .map_or("beyond 32 MiB".to_owned(), human_size)
    });
    out += &format!(
        "scatter-collect first beats rsbcast at: measured {}, model {}\n",
        measured.as_deref().unwrap_or("no size run"),
        model_cross.as_deref().unwrap_or("not computed")
    );
    let best = |si: usize, names: &[&str]| {
        GROUPS
            .iter()
            .enumerate()
            .filter(|(_, g)| names.contains(&g.0))
            .map(|(gi, _)| med(0, si) / med(gi, si))
            .fold(0.0, f64::max)
    };
    let small = cfg.sizes.iter().position(|&n| n <= 1 << 10);
    let large = cfg.sizes.iter().rposition(|&n| n >= 1 << 20);
    if let Some(si) = small {
        let r = best(si, &["mst"]);
        out += &format!(
            "{}: mst {r:.2}x faster than iterative (target 2x: {})\n",
            human_size(cfg.sizes[si]),
            if r >= 2.0 { "met" } else { "NOT met" }
        );
    }
    if let Some(si) = large {
        let r = best(si, &["scatter-collect", "scatter-collect-2d"]);
        out += &format!(
            "{}: scatter-collect {r:.2}x faster than iterative (target 2x: {})\n",
            human_size(cfg.sizes[si]),
            if r >= 2.0 { "met" } else { "NOT met" }
        );
    }
    let v = json!({
        "nodes": p, "link_rate": cfg.link_rate, "rows": json_rows,
        "fitted": {"alpha_s": alpha, "beta_s_per_byte": beta},
        "crossover": {"measured": measured, "model": model_cross},
    });
    (out, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_speed_ups_over_the_baseline_and_says_which_targets_hold() {
        let cfg = XdpConfig {
            nodes: 6,
            sizes: vec![1 << 10, 4 << 20],
            trials: 3,
            budget: 1 << 30,
            link_rate: Some("200mbit".into()),
        };
        // Per group (in GROUPS order), per size: three completion times.
        let at = |small: f64, large: f64| vec![vec![small; 3], vec![large; 3]];
        let times = vec![
            at(100e-6, 0.9),  // iterative
            at(200e-6, 0.6),  // rsbcast
            at(40e-6, 0.6),   // mst: 2.5x at 1 KiB
            at(400e-6, 0.3),  // scatter-collect: 3x at 4 MiB
            at(300e-6, 0.45), // scatter-collect-2d
            at(200e-6, 0.25), // auto
            at(150e-6, 0.5),  // def:8
        ];
        let (text, json) = report(&cfg, &times);
        assert!(text.contains("capped at 200mbit"), "{text}");
        assert!(
            text.contains("1 KiB: mst 2.50x faster than iterative (target 2x: met)"),
            "{text}"
        );
        assert!(
            text.contains("4 MiB: scatter-collect 3.00x faster than iterative (target 2x: met)"),
            "{text}"
        );
        assert!(
            text.contains("scatter-collect first beats rsbcast at: measured 4 MiB"),
            "{text}"
        );
        let rows = json["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2 * GROUPS.len());
        let sc = rows
            .iter()
            .find(|r| r["algorithm"] == "scatter-collect" && r["bytes"] == 4 << 20)
            .unwrap();
        assert!((sc["speedup_over_iterative"].as_f64().unwrap() - 3.0).abs() < 1e-9);
        // 1 KiB costs less than its bytes at the fitted β: no model figures.
        assert!(
            text.contains("no positive alpha and beta: no model figures"),
            "{text}"
        );
        assert!(text.contains(", model not computed"), "{text}");
        assert!(json["crossover"]["model"].is_null());
        // β from the two sizes: (0.9 − 100 µs)/5 per copy over 4 MiB − 1 KiB.
        let beta = json["fitted"]["beta_s_per_byte"].as_f64().unwrap();
        assert!((beta - (0.9 - 100e-6) / 5.0 / ((4 << 20) - 1024) as f64).abs() < 1e-15);
        // With the baseline's 1 KiB at 1 ms, α is positive (about 156 µs),
        // and the model's crossing is 3.75 α/β, about 14 KB: 16 KiB.
        let mut slow = times.clone();
        slow[0][0] = vec![1e-3; 3];
        let (text, json) = report(&cfg, &slow);
        assert!(
            text.contains("the model's speed-up over iterative"),
            "{text}"
        );
        assert_eq!(json["crossover"]["model"], "16 KiB", "{text}");
    }
}
