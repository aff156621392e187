//! `mcast-bench total`: what one order costs when every member sends
//! (issue 20's targets), through mcastd. A cluster of S nodes, each with a
//! publisher and a subscriber in one group, is started again and again,
//! alternately with `mode = "fifo"` (each sender's own stream, each
//! sender's order only), `mode = "total"` (each sender's own stream, one
//! order from the stamps; docs/protocol.md §6.4), `mode = "sequenced"`
//! (every message through the root, the fixed sequencer; §6.3) and
//! "total+commit" (`mode = "total"`, `commit = true`: delivered once every
//! member has it), so all four see the same minutes of this noisy host.
//! Each start measures:
//! - goodput: every publisher sends its messages as fast as the group
//!   takes them; every subscriber checks every byte and each sender's
//!   order, and, in the modes that promise one order, that its whole
//!   sequence is every other subscriber's (a digest of the sequence);
//! - latency: every publisher paces its messages at `rate`; the one-way
//!   latency of every message at every subscriber (p50, p99, p99.9).
//!
//! Reports medians, the spread, and the ratios the issue names.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mcast_cli::testbed::Cluster;
use mcast_ipc::{Client, MessageKind};
use serde_json::{json, Value};

use crate::path::{self, is_message, median, micros, spread};

/// What to run.
#[derive(Debug, Clone)]
pub struct TotalConfig {
    /// Nodes, each with a publisher and a subscriber.
    pub senders: usize,
    pub size: usize,
    /// Messages per publisher per goodput run.
    pub messages: u64,
    pub repeat: usize,
    /// Messages/s per publisher in the paced runs.
    pub rate: u64,
    /// Messages per publisher per paced run.
    pub paced_messages: u64,
    /// Lines added to every node's mcastd.toml.
    pub daemon_config: Vec<String>,
    /// Loss on the segment once the group has formed (every frame kind,
    /// both directions, by the bridge), a fraction.
    pub loss: f64,
    /// Where each node's stats go after each phase (None: nowhere).
    pub stats_dir: Option<std::path::PathBuf>,
}

/// The modes compared; "total+commit" is `mode = "total"` with `commit =
/// true` (a message delivered only once every member has it).
const MODES: [&str; 4] = ["fifo", "total", "sequenced", "total+commit"];

/// Bytes of each subscriber's ring (see `one_cluster`).
pub(crate) const SUBSCRIBER_BUFFER: u64 = 64 << 20;

/// One mode's figures, one entry per start.
#[derive(Debug, Clone, Default)]
struct Figures {
    /// Messages/s (all senders' together) at the slowest subscriber.
    goodput: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    p999: Vec<f64>,
}

/// Message `i` of the sender on `node`, as numbered on the wire: the node
/// in the high bits, so a message names its sender.
fn number(node: u32, i: u64) -> u64 {
    (u64::from(node) << 40) | i
}

pub fn run(cfg: &TotalConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "total needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if !(24..=8192).contains(&cfg.size)
        || !(0.0..0.5).contains(&cfg.loss)
        || !(2..=6).contains(&cfg.senders)
        || cfg.repeat == 0
        || cfg.rate == 0
        || cfg.messages == 0
        || cfg.paced_messages == 0
    {
        return Err(
            "--size: 24 to 8,192 bytes; --senders: 2 to 6; --loss: 0 to 0.5 (a fraction); --repeat, --rate, --messages and --paced-messages at least 1"
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
    cfg: &TotalConfig,
    mcastd: &std::path::Path,
    mode: &str,
    f: &mut Figures,
) -> Result<(), String> {
    // Every node sending at full rate into subscribers that share two vCPUs
    // with four daemons and the publishers outruns the default 4 MiB ring,
    // and the default slow-subscriber policy cuts the subscriber off; the
    // namespace tests of the ordered modes use the same 64 MiB.
    let setting = match mode {
        "total+commit" => "mode = \"total\"\ncommit = true".to_owned(),
        m => format!("mode = \"{m}\""),
    };
    let mut extra = format!("{setting}\nsubscriber_buffer = {SUBSCRIBER_BUFFER}\n");
    for line in &cfg.daemon_config {
        extra.push_str(line);
        extra.push('\n');
    }
    let cluster = Cluster::start(mcastd, "bench-total", cfg.senders - 1, |_| extra.clone())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut pubs, mut subs, group) = clients(&cluster, cfg.senders)?;
    cluster
        .topology()
        .set_loss(mcast_wire::ETHERTYPE_DEFAULT, cfg.loss)?;
    let ordered = mode != "fifo";
    let start = f.goodput.len() + 1;
    let figures = saturate(cfg, &mut pubs, &mut subs, group, ordered).and_then(|g| {
        dump_stats(cfg, &cluster, mode, start, "saturated")?;
        let dump = cfg.stats_dir.as_deref().map(|d| (d, mode, start));
        let latency = paced(cfg, &mut pubs, &mut subs, group, dump)?;
        dump_stats(cfg, &cluster, mode, start, "paced")?;
        Ok((g, latency))
    });
    let (goodput, (p50, p99, p999)) = figures.map_err(|e| {
        // What the daemons warned of (a peer declared failed, a subscriber
        // cut off...) says why.
        for (i, d) in cluster.daemons.iter().enumerate() {
            for line in d.log_text().lines() {
                if !line.contains("level=info") && !line.contains("level=debug") {
                    eprintln!("    node {}: {line}", i + 1);
                }
            }
        }
        format!("mode {mode}: {e}")
    })?;
    eprintln!(
        "    {mode}: {goodput:.0} msg/s; at {}/s per sender p50 {p50:.1} µs, p99 {p99:.1} µs, p99.9 {p999:.1} µs",
        cfg.rate
    );
    f.goodput.push(goodput);
    f.p50.push(p50);
    f.p99.push(p99);
    f.p999.push(p999);
    Ok(())
}

/// With `--stats-dir`: every node's stats (`mcast stat --json`) after
/// `phase` of start `start` of `mode`, as MODE-START-PHASE-nodeN.json.
fn dump_stats(
    cfg: &TotalConfig,
    cluster: &Cluster,
    mode: &str,
    start: usize,
    phase: &str,
) -> Result<(), String> {
    let Some(dir) = &cfg.stats_dir else {
        return Ok(());
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for n in 1..=cfg.senders as u32 {
        let mut c = Client::connect(cluster.socket(n), "stat").map_err(|e| e.to_string())?;
        let Ok(mcast_ipc::Response::Json(v)) = c.request(mcast_ipc::Request::Stats) else {
            return Err(format!("node {n} gave no stats"));
        };
        let file = dir.join(format!("{mode}-{start}-{phase}-node{n}.json"));
        let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

/// A publisher and a subscriber on each node, in group "bench", once the
/// group has every node: (node, client) each.
#[allow(clippy::type_complexity)]
pub(crate) fn clients(
    cluster: &Cluster,
    nodes: usize,
) -> Result<(Vec<(u32, Client)>, Vec<(u32, Client)>, u32), String> {
    let connect = |node: u32, name: &str| {
        Client::connect(cluster.socket(node), name)
            .map_err(|e| format!("connect to node {node}'s mcastd: {e}"))
    };
    let (mut pubs, mut subs) = (Vec::new(), Vec::new());
    let mut joined = None;
    for node in 1..=nodes as u32 {
        let mut s = connect(node, "bench-subscriber")?;
        joined = Some(s.join("bench").map_err(|e| e.to_string())?);
        subs.push((node, s));
        let mut p = connect(node, "bench-publisher")?;
        p.join("bench").map_err(|e| e.to_string())?;
        pubs.push((node, p));
    }
    let joined = joined.expect("a node");
    let (_, last) = subs.last_mut().expect("a node");
    mcast_cli::stream::wait_nodes(
        last,
        joined.group,
        &joined.view,
        nodes,
        Duration::from_secs(20),
    )?;
    Ok((pubs, subs, joined.group))
}

/// Every publisher sends `messages` as fast as the group takes them; every
/// subscriber checks them. All senders' messages/s at the slowest.
pub(crate) fn saturate(
    cfg: &TotalConfig,
    pubs: &mut [(u32, Client)],
    subs: &mut [(u32, Client)],
    group: u32,
    ordered: bool,
) -> Result<f64, String> {
    let senders: Vec<u32> = pubs.iter().map(|(n, _)| *n).collect();
    let start = Instant::now();
    let results: Vec<Result<(f64, u64), String>> = std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .iter_mut()
            .map(|(node, c)| {
                let senders = &senders;
                s.spawn(move || receive_all(c, *node, group, senders, cfg, start))
            })
            .collect();
        let publishers: Vec<_> = pubs
            .iter_mut()
            .map(|(node, c)| {
                s.spawn(move || path::publish(c, group, number(*node, 0), cfg.messages, cfg.size))
            })
            .collect();
        joined(receivers, publishers)
    });
    let results: Vec<(f64, u64)> = results.into_iter().collect::<Result<_, _>>()?;
    if ordered && results.windows(2).any(|w| w[0].1 != w[1].1) {
        return Err(format!(
            "the subscribers' sequences differ in a mode that promises one order (digests {:x?})",
            results.iter().map(|r| r.1).collect::<Vec<_>>()
        ));
    }
    Ok(results.iter().map(|r| r.0).fold(f64::INFINITY, f64::min))
}

/// Receives every sender's messages, each checked; messages/s since
/// `start`, and a digest of the whole sequence (FNV-1a over the numbers).
fn receive_all(
    c: &mut Client,
    node: u32,
    group: u32,
    senders: &[u32],
    cfg: &TotalConfig,
    start: Instant,
) -> Result<(f64, u64), String> {
    let want = cfg.messages * senders.len() as u64;
    let mut next: std::collections::BTreeMap<u32, u64> = senders.iter().map(|&s| (s, 0)).collect();
    let (mut got, mut digest, mut bad) = (0u64, 0xcbf2_9ce4_8422_2325u64, None);
    // A membership event in a run: a view changed (a node declared failed).
    let mut event = None;
    while got < want {
        let n = c
            .recv_batch_timeout(1024, Some(Duration::from_secs(30)), |m| {
                if m.kind == MessageKind::Membership {
                    event = Some(String::from_utf8_lossy(m.data).into_owned());
                }
                if bad.is_some() || m.group != group || m.kind != MessageKind::Data {
                    return;
                }
                let Some(k) = m.data.get(..8).map(|b| u64::from_be_bytes(b.try_into().expect("8"))) else {
                    bad = Some(format!("node {node}: a short message"));
                    return;
                };
                let from = (k >> 40) as u32;
                let due = next.get_mut(&from);
                match due {
                    Some(due) if number(from, *due) == k && is_message(m.data, k, cfg.size) => {
                        *due += 1;
                    }
                    _ => {
                        bad = Some(format!(
                            "node {node}: message {} of node {from} lost, repeated, reordered or corrupted",
                            k & ((1 << 40) - 1)
                        ));
                        return;
                    }
                }
                digest = (digest ^ k).wrapping_mul(0x0100_0000_01b3);
                got += 1;
            })
            .map_err(|e| format!("node {node} receive after {got}: {e}"))?;
        if let Some(b) = bad {
            return Err(format!("{b} (the last membership event here: {event:?})"));
        }
        if n == 0 {
            return Err(format!(
                "node {node}: nothing for 30 s after {got} messages (the last membership event here: {event:?})"
            ));
        }
    }
    Ok((got as f64 / start.elapsed().as_secs_f64(), digest))
}

/// Every publisher paces `paced_messages` at `rate`, each stamped; the
/// one-way latency of every message at every subscriber: p50, p99 and
/// p99.9 in µs. With `dump` (`--stats-dir`, the mode and the start): every
/// message's latency at each subscriber too, in
/// MODE-START-paced-latency-nodeN.txt.
pub(crate) fn paced(
    cfg: &TotalConfig,
    pubs: &mut [(u32, Client)],
    subs: &mut [(u32, Client)],
    group: u32,
    dump: Option<(&std::path::Path, &str, usize)>,
) -> Result<(f64, f64, f64), String> {
    let origin = Instant::now();
    let want = cfg.paced_messages * pubs.len() as u64;
    let hists: Vec<Result<Received, String>> = std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .iter_mut()
            .map(|(node, c)| s.spawn(move || receive_stamped(c, *node, group, want, origin)))
            .collect();
        let publishers: Vec<_> = pubs
            .iter_mut()
            .map(|(node, c)| {
                s.spawn(move || {
                    let gap = Duration::from_nanos(1_000_000_000 / cfg.rate);
                    let mut m = vec![0u8; cfg.size];
                    for i in 0..cfg.paced_messages {
                        // Sleeps between messages, as `mcast send --rate` does.
                        let due = origin + gap * i as u32;
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        m[..8].copy_from_slice(&number(*node, i).to_be_bytes());
                        let t = origin.elapsed().as_nanos() as u64;
                        m[8..16].copy_from_slice(&t.to_be_bytes());
                        c.publish_blocking(group, &m, Some(Duration::from_secs(30)))
                            .map_err(|e| format!("node {node} paced publish {i}: {e}"))?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        joined(receivers, publishers)
    });
    let mut all = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for (i, h) in hists.into_iter().enumerate() {
        let r = h?;
        all.add(&r.hist).map_err(|e| e.to_string())?;
        if let Some((dir, mode, start)) = dump {
            let node = subs[i].0;
            let file = dir.join(format!("{mode}-{start}-paced-latency-node{node}.txt"));
            let mut text = String::from("# sent_ns_since_phase_start latency_ns from_node\n");
            for (sent, latency, from) in r.each {
                text.push_str(&format!("{sent} {latency} {from}\n"));
            }
            std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        }
    }
    let q = |q: f64| all.value_at_quantile(q) as f64 / 1e3;
    Ok((q(0.5), q(0.99), q(0.999)))
}

/// What one subscriber received of the paced messages.
struct Received {
    hist: Histogram<u64>,
    /// Each message: when it was sent (ns since the phase began), its
    /// latency (ns) and its publisher's node.
    each: Vec<(u64, u64, u64)>,
}

fn receive_stamped(
    c: &mut Client,
    node: u32,
    group: u32,
    want: u64,
    origin: Instant,
) -> Result<Received, String> {
    let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut each = Vec::with_capacity(want as usize);
    let mut got = 0;
    while got < want {
        let n = c
            .recv_batch_timeout(256, Some(Duration::from_secs(30)), |m| {
                let now = origin.elapsed().as_nanos() as u64;
                if m.group != group || m.kind != MessageKind::Data || m.data.len() < 16 {
                    return;
                }
                let t = u64::from_be_bytes(m.data[8..16].try_into().expect("8 bytes"));
                let _ = h.record(now.saturating_sub(t));
                let from = u64::from_be_bytes(m.data[..8].try_into().expect("8 bytes")) >> 40;
                each.push((t, now.saturating_sub(t), from));
                got += 1;
            })
            .map_err(|e| format!("node {node} paced receive after {got}: {e}"))?;
        if n == 0 {
            return Err(format!(
                "node {node}: nothing for 30 s after {got} paced messages"
            ));
        }
    }
    Ok(Received { hist: h, each })
}

/// The subscribers' results, then any publisher's error.
fn joined<T>(
    receivers: Vec<std::thread::ScopedJoinHandle<'_, Result<T, String>>>,
    publishers: Vec<std::thread::ScopedJoinHandle<'_, Result<(), String>>>,
) -> Vec<Result<T, String>> {
    let mut out: Vec<_> = receivers
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err("a subscriber panicked".into()))
        })
        .collect();
    for p in publishers {
        if let Err(e) = p
            .join()
            .unwrap_or_else(|_| Err("a publisher panicked".into()))
        {
            out.push(Err(e));
        }
    }
    out
}

fn print(cfg: &TotalConfig, figs: &[Figures; 4]) {
    println!(
        "{} nodes, each a publisher and a subscriber (rings of {} MiB), {} B, {:.1} % loss on the segment; goodput: {} messages per publisher, all senders' msg/s at the slowest subscriber; latency: {}/s per publisher, one way, every message at every subscriber; medians of {} start(s) per mode [min-max]",
        cfg.senders,
        SUBSCRIBER_BUFFER >> 20,
        cfg.size,
        cfg.loss * 100.0,
        cfg.messages,
        cfg.rate,
        cfg.repeat
    );
    println!(
        "{:<13} {:>22} {:>20} {:>20} {:>20}",
        "mode", "msg/s (slowest)", "p50 µs", "p99 µs", "p99.9 µs"
    );
    for (mode, f) in MODES.iter().zip(figs) {
        println!(
            "{:<13} {:>22} {:>20} {:>20} {:>20}",
            mode,
            spread(&f.goodput),
            micros(&f.p50, 1),
            micros(&f.p99, 0),
            micros(&f.p999, 0)
        );
    }
    let [fifo, total, seq, commit] = figs;
    println!(
        "total/fifo goodput {} (target >= 0.8); total/sequenced goodput {} (target >= 2)",
        path::ratio(median(&total.goodput), median(&fifo.goodput)),
        path::ratio(median(&total.goodput), median(&seq.goodput)),
    );
    if let (Some(t), Some(f)) = (median(&total.p50), median(&fifo.p50)) {
        println!(
            "total p50 - fifo p50: {:.1} µs (target <= one beacon interval + 20 µs)",
            t - f
        );
    }
    println!(
        "total+commit/total goodput {}",
        path::ratio(median(&commit.goodput), median(&total.goodput)),
    );
    if let (Some(c), Some(t)) = (median(&commit.p50), median(&total.p50)) {
        println!("total+commit p50 - total p50: {:.1} µs", c - t);
    }
}

fn to_json(cfg: &TotalConfig, figs: &[Figures; 4]) -> Value {
    let modes: Vec<Value> = MODES
        .iter()
        .zip(figs)
        .map(|(m, f)| {
            json!({"mode": m, "goodput": f.goodput, "p50_us": f.p50, "p99_us": f.p99, "p999_us": f.p999})
        })
        .collect();
    let mut v = cfg.json("total");
    v["modes"] = json!(modes);
    v
}

impl TotalConfig {
    /// The run's settings, as the JSON output of `bench` starts.
    pub(crate) fn json(&self, bench: &str) -> Value {
        json!({
            "bench": bench,
            "senders": self.senders,
            "loss": self.loss,
            "size": self.size,
            "messages": self.messages,
            "repeat": self.repeat,
            "rate": self.rate,
            "paced_messages": self.paced_messages,
            "daemon_config": self.daemon_config,
        })
    }
}
