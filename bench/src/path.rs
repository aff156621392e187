//! `mcast-bench path`: the user's path, measured. One publisher on node 1
//! and subscribers on nodes 2..=R+1, each a client of its node's mcastd
//! (client library → publication ring → mcastd → AF_XDP → bridge → AF_XDP →
//! mcastd → subscription ring → client library), on the namespace testbed
//! of the namespace tests (`mcast_cli::testbed`). Loss is injected on the
//! segment by the bridge (`Topology::set_loss`: every frame kind, both
//! directions), outside the engine and the XDP program. In the same run,
//! on a topology of the same size and with the same loss, the engine alone
//! (`mcast-bench xdp`'s MAK run) and the raw unreliable blast, so the cost
//! of each layer shows as a ratio. Needs root.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use mcast_cli::testbed::Cluster;
use mcast_engine::bench as ebench;
use mcast_engine::harness::scenario::Tuning;
use mcast_ipc::{Client, MessageKind, Request, Response};
use mcast_netns::Topology;
use mcast_wire::ETHERTYPE_DEFAULT;
use serde_json::{json, Value};

use crate::host::{CpuTimes, Idle};

/// What to run.
#[derive(Debug, Clone)]
pub struct PathConfig {
    pub receivers: Vec<usize>,
    pub loss: Vec<f64>,
    pub size: usize,
    pub messages: u64,
    pub repeat: usize,
    /// Also measure the engine alone and the blast.
    pub layers: bool,
    /// Lines added to every node's mcastd.toml (to try settings; the
    /// figures that count are those of the defaults).
    pub daemon_config: Vec<String>,
}

/// One measurement through the daemons.
#[derive(Debug, Clone, Default)]
struct DaemonRun {
    /// Messages per second at the slowest subscriber (from the first
    /// publish to its last message).
    slowest: f64,
    /// The same at the fastest.
    fastest: f64,
    /// Counters of node 1's send stream in the run.
    sent: u64,
    retransmitted: u64,
    naks: u64,
    stalls: u64,
    ack_waits: u64,
    /// ACK-wait timeouts: rounds that waited for an ACK that did not come.
    timeouts: u64,
    /// Frames the bridge dropped in the run.
    dropped: u64,
    /// The sender's GRTT at the end of the run, µs (what every NAK and
    /// repair wait derived from).
    grtt_us: f64,
}

/// Every figure of one (receivers, loss) cell.
#[derive(Debug, Clone, Default)]
struct Cell {
    receivers: usize,
    loss: f64,
    blast: Vec<f64>,
    engine: Vec<f64>,
    daemon: Vec<DaemonRun>,
}

/// Runs the grid and prints it; writes `json` when given.
pub fn run(cfg: &PathConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = ebench::missing_privileges() {
        return Err(format!(
            "path needs root ({why}): it creates network namespaces, runs mcastd in them and \
             attaches XDP. Run it as root (with sudo where root is not the user: `sudo -E mcast-bench path`)"
        ));
    }
    check(cfg)?;
    let mcastd = mcastd_binary()?;
    eprintln!(
        "mcast-bench path: {} messages of {} B per run, {} run(s) per cell; mcastd {}",
        cfg.messages,
        cfg.size,
        cfg.repeat,
        mcastd.display()
    );
    let (idle, before) = (Idle::read(), CpuTimes::read());
    let mut cells = Vec::new();
    for &r in &cfg.receivers {
        let mut row: Vec<Cell> = cfg
            .loss
            .iter()
            .map(|&loss| Cell {
                receivers: r,
                loss,
                ..Cell::default()
            })
            .collect();
        if cfg.layers {
            layers(cfg, r, &mut row)?;
        }
        through_daemons(cfg, &mcastd, r, &mut row)?;
        cells.extend(row);
    }
    let split = CpuTimes::read()
        .zip(before)
        .and_then(|(now, then)| now.split_since(&then));
    print(cfg, &cells);
    match &split {
        Some(h) => println!("host: {}; over the run: {}", idle.describe(), h.describe()),
        None => println!("host: {}", idle.describe()),
    }
    if let Some(path) = json_out {
        let mut v = to_json(cfg, &cells);
        v["host"] = idle.to_json();
        v["host_cpus"] = split.map(|h| h.to_json()).into();
        write_json(path, &v)?;
    }
    Ok(())
}

/// Writes a bench's figures to `path` as pretty JSON, and says so.
pub(crate) fn write_json(path: &str, v: &Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("writing {path}: {e}"))?;
    eprintln!("wrote {path}");
    Ok(())
}

fn check(cfg: &PathConfig) -> Result<(), String> {
    if let Some(&r) = cfg
        .receivers
        .iter()
        .find(|&&r| !(1..=mcast_netns::MAX_RECEIVERS).contains(&r))
    {
        return Err(format!(
            "--receivers {r}: from 1 to {} receivers",
            mcast_netns::MAX_RECEIVERS
        ));
    }
    if let Some(l) = cfg.loss.iter().find(|l| !(0.0..0.5).contains(*l)) {
        return Err(format!(
            "--loss {l}: a fraction from 0 to 0.5 (0.01 is 1 %)"
        ));
    }
    if !(16..=8192).contains(&cfg.size) {
        return Err(format!(
            "--size {}: 16 to 8,192 bytes (a message carries its index)",
            cfg.size
        ));
    }
    if cfg.messages == 0 || cfg.repeat == 0 {
        return Err("--messages and --repeat must be at least 1".into());
    }
    Ok(())
}

/// mcastd, from beside this binary (`cargo build --release -p mcast-cli`
/// puts both in one folder).
pub(crate) fn mcastd_binary() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("where is mcast-bench? {e}"))?;
    let dir = me.parent().ok_or("mcast-bench has no folder")?;
    let mcastd = dir.join("mcastd");
    if mcastd.is_file() {
        return Ok(mcastd);
    }
    Err(format!(
        "no mcastd beside {}: build it with `cargo build --release -p mcast-cli` (the same profile as mcast-bench)",
        me.display()
    ))
}

/// The engine alone and the raw blast, on a topology of `r` receivers,
/// at each loss of the row.
fn layers(cfg: &PathConfig, r: usize, row: &mut [Cell]) -> Result<(), String> {
    let topo = Topology::with_receivers("bench-path-layers", r)
        .ok_or("cannot build the namespace topology")?;
    for cell in row.iter_mut() {
        topo.set_loss(ETHERTYPE_DEFAULT, cell.loss)?;
        for i in 0..cfg.repeat {
            let n = cfg.messages as usize;
            let blast =
                ebench::throughput_run(&topo, "blast", n, cfg.size, 0.0, Tuning::default())?;
            let engine = ebench::throughput_run(&topo, "mak", n, cfg.size, 0.0, Tuning::default())?;
            eprintln!(
                "  {r} receiver(s), {}% loss, run {}: blast {:.0}/s ({:.1}% delivered), engine {:.0}/s",
                cell.loss * 100.0,
                i + 1,
                blast.frames_per_sec,
                blast.delivered * 100.0,
                engine.frames_per_sec
            );
            cell.blast.push(blast.frames_per_sec);
            cell.engine.push(engine.frames_per_sec);
        }
    }
    topo.set_loss(ETHERTYPE_DEFAULT, 0.0)?;
    Ok(())
}

/// Through mcastd: a cluster of `r + 1` daemons, one group, at each loss.
fn through_daemons(
    cfg: &PathConfig,
    mcastd: &std::path::Path,
    r: usize,
    row: &mut [Cell],
) -> Result<(), String> {
    let extra = cfg.daemon_config.join("\n");
    let cluster = Cluster::start(mcastd, "bench-path", r, |_| extra.clone())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut publisher, mut subscribers, group) = bench_group(&cluster, r)?;
    let mut next = 0u64;
    for cell in row.iter_mut() {
        cluster.topology().set_loss(ETHERTYPE_DEFAULT, cell.loss)?;
        for i in 0..cfg.repeat {
            let before = send_counters(&mut publisher)?;
            let dropped = cluster.topology().loss_dropped();
            let (slowest, fastest) = one_run(
                &mut publisher,
                &mut subscribers,
                group,
                next,
                cfg.messages,
                cfg.size,
            )?;
            next += cfg.messages;
            let after = send_counters(&mut publisher)?;
            let c = |k: &str| {
                after["sender"][k].as_u64().unwrap_or(0) - before["sender"][k].as_u64().unwrap_or(0)
            };
            let run = DaemonRun {
                slowest,
                fastest,
                sent: c("data_sent"),
                retransmitted: c("data_retransmitted"),
                naks: c("naks_received"),
                stalls: c("stalls"),
                ack_waits: c("ack_reqs_sent"),
                timeouts: c("timeouts"),
                dropped: cluster.topology().loss_dropped() - dropped,
                grtt_us: after["grtt_us"].as_f64().unwrap_or(0.0),
            };
            eprintln!(
                "  {r} receiver(s), {}% loss, run {}: through mcastd {:.0} msg/s at the slowest subscriber \
                 ({} retransmitted, {} NAKs, {} stalls, {} ACK requests, {} ACK-wait timeouts, {} frames dropped on the segment, \
                 GRTT {:.0} µs at the end)",
                cell.loss * 100.0,
                i + 1,
                run.slowest,
                run.retransmitted,
                run.naks,
                run.stalls,
                run.ack_waits,
                run.timeouts,
                run.dropped,
                run.grtt_us
            );
            cell.daemon.push(run);
        }
    }
    cluster.topology().set_loss(ETHERTYPE_DEFAULT, 0.0)?;
    Ok(())
}

/// The group "bench" on `cluster`: a publisher on node 1 and a subscriber on
/// each of nodes 2..=r+1, returned once the group has all r + 1 nodes.
pub(crate) fn bench_group(
    cluster: &Cluster,
    r: usize,
) -> Result<(Client, Vec<Client>, u32), String> {
    let connect = |node: u32, name: &str| {
        Client::connect(cluster.socket(node), name)
            .map_err(|e| format!("connect to node {node}'s mcastd: {e}"))
    };
    let mut publisher = connect(1, "bench-publisher")?;
    let joined = publisher.join("bench").map_err(|e| e.to_string())?;
    let group = joined.group;
    let mut subscribers = Vec::new();
    for node in 2..=r as u32 + 1 {
        let mut c = connect(node, "bench-subscriber")?;
        c.join("bench").map_err(|e| e.to_string())?;
        subscribers.push(c);
    }
    mcast_cli::stream::wait_nodes(
        &mut publisher,
        group,
        &joined.view,
        r + 1,
        Duration::from_secs(20),
    )?;
    Ok((publisher, subscribers, group))
}

/// The group "bench" as node 1's `mcast stat` shows it: `sender` (its send
/// stream's counters) and `grtt_us`.
fn send_counters(c: &mut Client) -> Result<Value, String> {
    let Response::Json(stats) = c.request(Request::Stats).map_err(|e| e.to_string())? else {
        return Err("mcastd answered Stats without JSON".into());
    };
    Ok(stats["groups"]
        .as_array()
        .and_then(|gs| {
            gs.iter()
                .find(|g| g["name"] == "bench" && g["active"] == true)
        })
        .cloned()
        .unwrap_or(Value::Null))
}

/// Message `i` of the stream: its index, then bytes derived from it.
#[cfg(test)]
fn message(i: u64, len: usize) -> Vec<u8> {
    let mut m = Vec::new();
    write_message(&mut m, i, len);
    m
}

/// Writes message `i` into `m` (reusing its allocation).
pub(crate) fn write_message(m: &mut Vec<u8>, i: u64, len: usize) {
    m.clear();
    m.extend_from_slice(&i.to_be_bytes());
    m.extend((0..len - 8).map(|k| filler(i, k)));
}

fn filler(i: u64, k: usize) -> u8 {
    (i as usize).wrapping_mul(31).wrapping_add(k) as u8
}

/// Whether `data` is message `i` of `len` bytes (checked in place, every
/// byte). The filler's bytes are checked without an early exit, so the
/// compiler vectorizes it: on two shared vCPUs a byte-at-a-time check of
/// four subscribers' messages took a tenth of the host at 64 B, CPU the
/// path under test needs.
pub(crate) fn is_message(data: &[u8], i: u64, len: usize) -> bool {
    data.len() == len
        && data[..8] == i.to_be_bytes()
        && data[8..]
            .iter()
            .enumerate()
            .fold(0u8, |diff, (k, &b)| diff | (b ^ filler(i, k)))
            == 0
}

/// Messages handed to the client library per call, as an application that
/// has many ready would (`Client::publish_batch`, `Client::recv_batch`).
const CLIENT_BATCH: usize = 64;

/// Publishes messages `first..first + n`; every subscriber must receive
/// each once, in order and intact. Returns messages/s at the slowest and
/// the fastest subscriber.
pub(crate) fn one_run(
    publisher: &mut Client,
    subscribers: &mut [Client],
    group: u32,
    first: u64,
    n: u64,
    size: usize,
) -> Result<(f64, f64), String> {
    let start = Instant::now();
    let results: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let receivers: Vec<_> = subscribers
            .iter_mut()
            .map(|c| s.spawn(move || receive(c, group, first, n, size, start)))
            .collect();
        let sent = publish(publisher, group, first, n, size);
        let mut out: Vec<Result<f64, String>> = receivers
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a subscriber panicked".into()))
            })
            .collect();
        if let Err(e) = sent {
            out.push(Err(e));
        }
        out
    });
    let rates: Vec<f64> = results.into_iter().collect::<Result<_, _>>()?;
    let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let fastest = rates.iter().copied().fold(0.0, f64::max);
    Ok((slowest, fastest))
}

/// Publishes messages `first..first + n`, [`CLIENT_BATCH`] per call, into
/// buffers reused from batch to batch.
pub(crate) fn publish(
    c: &mut Client,
    group: u32,
    first: u64,
    n: u64,
    size: usize,
) -> Result<(), String> {
    let mut bufs: Vec<Vec<u8>> = (0..CLIENT_BATCH)
        .map(|_| Vec::with_capacity(size))
        .collect();
    let mut i = first;
    while i < first + n {
        let k = (CLIENT_BATCH as u64).min(first + n - i) as usize;
        for (j, b) in bufs[..k].iter_mut().enumerate() {
            write_message(b, i + j as u64, size);
        }
        let mut done = 0;
        while done < k {
            done += c
                .publish_batch_blocking(group, &bufs[done..k], Some(Duration::from_secs(30)))
                .map_err(|e| format!("publish {}: {e}", i + done as u64))?;
        }
        i += k as u64;
    }
    Ok(())
}

/// Receives messages `first..first + n` of `group`, checked in place in the
/// ring; messages/s since `start`.
fn receive(
    c: &mut Client,
    group: u32,
    first: u64,
    n: u64,
    size: usize,
    start: Instant,
) -> Result<f64, String> {
    let mut next = first;
    let mut bad = None;
    while next < first + n {
        let got = c
            .recv_batch_timeout(CLIENT_BATCH * 4, Some(Duration::from_secs(30)), |m| {
                if bad.is_some() || m.group != group || m.kind != MessageKind::Data {
                    return;
                }
                let Some(i) = m
                    .data
                    .get(..8)
                    .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
                else {
                    bad = Some("a short message".to_string());
                    return;
                };
                if i != next {
                    bad = Some(format!(
                        "message {i} where {next} was due: lost, repeated or reordered"
                    ));
                } else if !is_message(m.data, i, size) {
                    bad = Some(format!("message {i} corrupted"));
                }
                next += 1;
            })
            .map_err(|e| format!("receive after {}: {e}", next - first))?;
        if let Some(b) = bad {
            return Err(b);
        }
        if got == 0 {
            return Err(format!("nothing for 30 s after {} messages", next - first));
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Runs `start` for each of `modes` in turn, `repeat` rounds, so every
/// mode sees the same minutes of this noisy host: each mode's figures, in
/// the order of `modes`.
pub(crate) fn alternate<F: Default, const N: usize>(
    modes: &[&str; N],
    repeat: usize,
    mut start: impl FnMut(&str, &mut F) -> Result<(), String>,
) -> Result<[F; N], String> {
    let mut figs: [F; N] = std::array::from_fn(|_| F::default());
    for i in 0..repeat {
        for (mode, f) in modes.iter().zip(figs.iter_mut()) {
            eprintln!("  start {} of {repeat}: mode {mode}", i + 1);
            start(mode, f)?;
        }
    }
    Ok(figs)
}

pub(crate) fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

/// The median, the least and the largest of `v`; `None` when it is empty.
fn median_range(v: &[f64]) -> Option<(f64, f64, f64)> {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    median(v).map(|m| (m, lo, hi))
}

/// "median [min-max]" of rates, in thousands per second.
pub(crate) fn spread(v: &[f64]) -> String {
    match median_range(v) {
        Some((m, lo, hi)) => format!("{:.0}k [{:.0}-{:.0}]", m / 1e3, lo / 1e3, hi / 1e3),
        None => "-".into(),
    }
}

/// "median [min-max]" of microseconds, with `digits` decimals.
pub(crate) fn micros(v: &[f64], digits: usize) -> String {
    match median_range(v) {
        Some((m, lo, hi)) => format!("{m:.digits$} [{lo:.digits$}-{hi:.digits$}]"),
        None => "-".into(),
    }
}

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

fn slowest(cell: &Cell) -> Vec<f64> {
    cell.daemon.iter().map(|d| d.slowest).collect()
}

fn print(cfg: &PathConfig, cells: &[Cell]) {
    println!(
        "{} B messages, {} per run, medians of {} run(s) [min-max], messages/s at the slowest receiver",
        cfg.size, cfg.messages, cfg.repeat
    );
    if !cfg.daemon_config.is_empty() {
        println!("mcastd settings: {}", cfg.daemon_config.join("; "));
    }
    println!(
        "{:>3} {:>6}  {:>18} {:>18} {:>18}  {:>13} {:>13} {:>12}  {:>9} {:>6} {:>6}",
        "rx",
        "loss",
        "blast",
        "engine (MAK)",
        "through mcastd",
        "mcastd/engine",
        "engine/blast",
        "vs lossless",
        "retx/msg",
        "stalls",
        "NAKs"
    );
    for cell in cells {
        let lossless = cells
            .iter()
            .find(|c| c.receivers == cell.receivers && c.loss == 0.0)
            .and_then(|c| median(&slowest(c)));
        let d = median(&slowest(cell));
        let runs = cell.daemon.len().max(1) as f64;
        let sum = |f: fn(&DaemonRun) -> u64| cell.daemon.iter().map(f).sum::<u64>() as f64 / runs;
        println!(
            "{:>3} {:>5.1}%  {:>18} {:>18} {:>18}  {:>13} {:>13} {:>12}  {:>9.3} {:>6.0} {:>6.0}",
            cell.receivers,
            cell.loss * 100.0,
            spread(&cell.blast),
            spread(&cell.engine),
            spread(&slowest(cell)),
            ratio(d, median(&cell.engine)),
            ratio(median(&cell.engine), median(&cell.blast)),
            ratio(d, lossless),
            sum(|r| r.retransmitted) / cfg.messages as f64,
            sum(|r| r.stalls),
            sum(|r| r.naks),
        );
    }
}

fn to_json(cfg: &PathConfig, cells: &[Cell]) -> Value {
    json!({
        "message_len": cfg.size,
        "messages": cfg.messages,
        "repeat": cfg.repeat,
        "daemon_config": cfg.daemon_config,
        "kernel": ebench::kernel_release(),
        "cells": cells.iter().map(|c| json!({
            "receivers": c.receivers,
            "loss": c.loss,
            "blast_msgs_per_sec": c.blast,
            "engine_msgs_per_sec": c.engine,
            "daemon": c.daemon.iter().map(|d| json!({
                "slowest_msgs_per_sec": d.slowest,
                "fastest_msgs_per_sec": d.fastest,
                "data_sent": d.sent,
                "retransmitted": d.retransmitted,
                "naks_received": d.naks,
                "stalls": d.stalls,
                "ack_requests": d.ack_waits,
                "ack_wait_timeouts": d.timeouts,
                "grtt_us_at_end": d.grtt_us,
                "segment_drops": d.dropped,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_index_and_spreads_read_right() {
        let m = message(7, 64);
        assert_eq!(m.len(), 64);
        assert_eq!(u64::from_be_bytes(m[..8].try_into().unwrap()), 7);
        assert_ne!(message(8, 64)[8..], m[8..]);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(spread(&[100_000.0, 120_000.0, 90_000.0]), "100k [90-120]");
        assert_eq!(ratio(Some(1.0), Some(4.0)), "0.25");
        assert_eq!(ratio(None, Some(4.0)), "-");
    }

    #[test]
    fn the_check_takes_a_message_whole_and_refuses_any_wrong_byte() {
        for len in [16, 64, 1024] {
            let m = message(300, len);
            assert!(is_message(&m, 300, len));
            assert!(!is_message(&m, 301, len));
            assert!(!is_message(&m[..len - 1], 300, len));
            for at in 0..len {
                let mut bad = m.clone();
                bad[at] ^= 0x10;
                assert!(!is_message(&bad, 300, len), "byte {at} of {len} changed");
            }
        }
    }

    #[test]
    fn bad_arguments_are_named() {
        let ok = PathConfig {
            receivers: vec![1, 4],
            loss: vec![0.0, 0.01],
            size: 1024,
            messages: 10,
            repeat: 1,
            layers: true,
            daemon_config: Vec::new(),
        };
        assert!(check(&ok).is_ok());
        let e = check(&PathConfig {
            receivers: vec![0],
            ..ok.clone()
        });
        assert!(e.unwrap_err().contains("--receivers 0"));
        let e = check(&PathConfig {
            loss: vec![1.0],
            ..ok.clone()
        });
        assert!(e.unwrap_err().contains("--loss 1"));
        let e = check(&PathConfig { size: 8, ..ok });
        assert!(e.unwrap_err().contains("--size 8"));
    }
}
