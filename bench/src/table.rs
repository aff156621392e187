//! The scaling table: MAK beside plain NAK as the group grows, and the
//! per-run report both `run` and `table` print.

use std::time::Duration;

use mcast_sim::{Algorithm, Faults, SimConfig, SimReport};

/// One row of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub algo: Algorithm,
    pub receivers: u32,
    pub loss: f64,
    pub messages: u64,
    /// The fewest messages any receiver delivered.
    pub delivered_min: u64,
    pub needing_repair: u64,
    pub retransmissions: u64,
    pub naks: u64,
    pub acks: u64,
    /// When the last receiver delivered the last message, if every one did
    /// (the sender may free its buffer later, at its last ACK round).
    pub completion: Option<Duration>,
    pub wall: Duration,
}

impl Row {
    pub fn retx_per_repair(&self) -> Option<f64> {
        ratio(self.retransmissions, self.needing_repair)
    }

    pub fn naks_per_repair(&self) -> Option<f64> {
        ratio(self.naks, self.needing_repair)
    }

    pub fn acks_per_1000(&self) -> f64 {
        self.acks as f64 * 1000.0 / self.messages.max(1) as f64
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// The window of the table's runs: at 10 Gbit/s a 64-byte frame takes about
/// 0.1 µs, so 1,024 frames cover the round trip plus a NAK backoff and a repair
/// (about 100 µs): the sender keeps sending while losses are repaired.
pub(crate) const TABLE_WINDOW: u32 = 1024;

/// The configuration of one table cell: 64-byte messages in saturation, on the
/// simulator's default 10 Gbit/s, 10 µs segment.
pub(crate) fn cell_config(
    algo: Algorithm,
    receivers: u32,
    loss: f64,
    messages: u64,
    seed: u64,
    window_frames: u32,
) -> SimConfig {
    let mut cfg = SimConfig {
        algorithm: algo,
        receivers,
        messages,
        min_size: 64,
        max_size: 64,
        seed,
        faults: Faults {
            loss,
            ..Faults::default()
        },
        window_frames,
        ..SimConfig::default()
    };
    if algo == Algorithm::Nak {
        // Plain NAK can never free its buffer (seed 000 §3.1): give it room for
        // the whole run, or it would stop at the first full window.
        cfg.window_frames = cfg
            .window_frames
            .max(u32::try_from(cfg.total_frames()).unwrap_or(u32::MAX));
        // It also never detects a lost last frame: stop one liveness bound
        // after the last activity rather than run to the time limit.
        cfg.faults.faults_until = None;
        cfg.max_virtual_time = Duration::from_secs(5);
    }
    cfg
}

pub(crate) fn measure(cfg: &SimConfig) -> Result<Row, String> {
    let (result, wall) = crate::timed(|| mcast_sim::run(cfg));
    let report = result.map_err(|f| f.to_string())?;
    Ok(row_of(cfg, &report, wall))
}

fn row_of(cfg: &SimConfig, r: &SimReport, wall: Duration) -> Row {
    Row {
        algo: cfg.algorithm,
        receivers: cfg.receivers,
        loss: cfg.faults.loss,
        messages: cfg.messages,
        delivered_min: r.delivered_messages.iter().copied().min().unwrap_or(0),
        needing_repair: r.frames_needing_repair,
        retransmissions: r.wire.data_retransmit,
        naks: r.wire.nak,
        acks: r.wire.ack,
        completion: r.delivered_time.map(|t| Duration::from_nanos(t.as_nanos())),
        wall,
    }
}

pub(crate) fn run(
    receivers: &[u32],
    losses: &[f64],
    messages: u64,
    algos: &[Algorithm],
    seed: u64,
    window_frames: u32,
) -> Result<(), String> {
    println!(
        "{messages} messages of 64 B, 1 sender, simulated 10 Gbit/s segment with 10 us latency, seed {seed}, independent loss per frame copy, MAK window {window_frames} frames"
    );
    println!("retx/lost: retransmitted frames per frame that some receiver lost; NAK/lost: NAK frames per such frame\n");
    println!("{}", header());
    for &n in receivers {
        for &loss in losses {
            for &algo in algos {
                let row = measure(&cell_config(algo, n, loss, messages, seed, window_frames))?;
                println!("{}", format_row(&row));
            }
        }
    }
    Ok(())
}

pub(crate) fn header() -> String {
    format!(
        "{:<9} {:>5} {:>5} {:>13} {:>9} {:>9} {:>9} {:>10} {:>12} {:>8}",
        "algo",
        "rcvrs",
        "loss",
        "delivered",
        "lost",
        "retx/lost",
        "NAK/lost",
        "ACK/1000",
        "virtual",
        "wall"
    )
}

pub(crate) fn format_row(r: &Row) -> String {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    let completion = r.completion.map_or_else(
        || "never".to_string(),
        |d| format!("{:.3} ms", d.as_secs_f64() * 1e3),
    );
    format!(
        "{:<9} {:>5} {:>4}% {:>13} {:>9} {:>9} {:>9} {:>10.1} {:>12} {:>7.2}s",
        r.algo.name(),
        r.receivers,
        r.loss * 100.0,
        format!("{}/{}", r.delivered_min, r.messages),
        r.needing_repair,
        opt(r.retx_per_repair()),
        opt(r.naks_per_repair()),
        r.acks_per_1000(),
        completion,
        r.wall.as_secs_f64()
    )
}

/// Messages delivered per receiver, summarized: min, median and max, and
/// the receivers (node ids) that did not deliver every message (at most 10
/// named). A 1,024-receiver run needs no 1,024 numbers.
fn receivers_summary(delivered: &[u64], messages: u64) -> String {
    let mut sorted = delivered.to_vec();
    sorted.sort_unstable();
    let (Some(min), Some(max)) = (sorted.first(), sorted.last()) else {
        return "no receivers".to_string();
    };
    let median = sorted[sorted.len() / 2];
    let short: Vec<String> = delivered
        .iter()
        .enumerate()
        .filter(|&(_, &d)| d < messages)
        .map(|(i, d)| format!("node {}: {d}", i + 2))
        .collect();
    let differ = match short.len() {
        0 => "every receiver delivered every message".to_string(),
        n if n <= 10 => format!("short: {}", short.join(", ")),
        n => format!("{n} short, first: {}", short[..10].join(", ")),
    };
    format!("min {min} median {median} max {max} of {messages}; {differ}")
}

/// The report of one run, for `run`.
pub(crate) fn print_report(cfg: &SimConfig, r: &SimReport, wall: Duration) {
    let row = row_of(cfg, r, wall);
    println!("\n{}\n{}", header(), format_row(&row));
    println!("\nstopped: {:?} after {} steps", r.stop, r.steps);
    if let Some(t) = r.delivered_time {
        println!(
            "last delivery at {:.3} ms (completion also waits for the last ACK round)",
            t.0 as f64 / 1e6
        );
    }
    println!(
        "delivered per receiver: {}",
        receivers_summary(&r.delivered_messages, cfg.messages)
    );
    let s = &r.sender_counters;
    let c = &r.receiver_counters;
    println!(
        "sender:    data {} retransmitted {} | NAKs received {} repairs suppressed {} deferred {} | ACKs received {} ACK requests {} heartbeats {} | timeouts {} stalls {}",
        s.data_sent, s.data_retransmitted, s.naks_received, s.repairs_suppressed, s.repairs_deferred, s.acks_received,
        s.ack_reqs_sent, s.adverts_sent, s.timeouts, s.stalls
    );
    println!(
        "receivers: delivered {} duplicates {} | NAKs sent {} suppressed {} entries suppressed {} | ACKs sent {} | checksum failures {}",
        c.delivered, c.duplicates_dropped, c.naks_sent, c.naks_suppressed, c.nak_entries_suppressed, c.acks_sent,
        r.checksum_failures
    );
    println!(
        "wire: {} frames ({} data, {} repairs, {} NAK, {} ACK, {} ACK_REQ, {} HEARTBEAT), {} copies lost, {} corrupted, {} duplicated",
        r.wire.frames(),
        r.wire.data_original,
        r.wire.data_retransmit,
        r.wire.nak,
        r.wire.ack,
        r.wire.ack_req,
        r.wire.advert,
        r.wire.copies_lost,
        r.wire.copies_corrupted,
        r.wire.copies_duplicated
    );
    println!(
        "buffers: sender held at most {}, a receiver at most {}",
        r.max_sender_buffers, r.max_receiver_buffers
    );
}
