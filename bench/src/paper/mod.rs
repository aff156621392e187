//! `mcast-bench paper`: seed 000 §4's comparison (Figures 8-10) on our
//! engine. Iterative, ACK, NAK and MAK to 1..6 receivers at 512 and 1,024-byte
//! messages, plus Go-Back-N (one receiver) and the raw unreliable blast (the
//! ceiling), over the simulator and over real AF_XDP in network namespaces,
//! in four modes: the paper's send-one-and-wait ("ping-pong"), an echo round
//! trip (the last receiver answers each message, the sender sends the next
//! when the answer is in), a fixed offered rate and saturation. Everything lands in one folder: a table,
//! JSON, HdrHistogram percentile distributions (.hgrm) and interval logs
//! (.hlog), and SVG plots.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use mcast_engine::bench::{self as eb, PaperMode, PaperRaw};
use mcast_engine::harness::netns::Topology;
use mcast_sim::Algorithm;
use serde_json::{json, Value};

mod out;
mod sim;
pub mod svg;

pub use sim::SimLink;

/// Where a run happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sim,
    Xdp,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sim => "sim",
            Backend::Xdp => "xdp",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sim" => Ok(Backend::Sim),
            "xdp" => Ok(Backend::Xdp),
            _ => Err(format!("unknown backend {s:?} (sim, xdp)")),
        }
    }
}

/// The four ways of offering messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeKind {
    PingPong,
    Echo,
    Rate,
    Saturation,
}

impl ModeKind {
    pub fn name(self) -> &'static str {
        match self {
            ModeKind::PingPong => "pingpong",
            ModeKind::Echo => "echo",
            ModeKind::Rate => "rate",
            ModeKind::Saturation => "saturation",
        }
    }
}

impl std::str::FromStr for ModeKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pingpong" => Ok(ModeKind::PingPong),
            "echo" => Ok(ModeKind::Echo),
            "rate" => Ok(ModeKind::Rate),
            "saturation" => Ok(ModeKind::Saturation),
            _ => Err(format!(
                "unknown mode {s:?} (pingpong, echo, rate, saturation)"
            )),
        }
    }
}

/// Everything `mcast-bench paper` was asked to do.
#[derive(Debug, Clone)]
pub struct Opts {
    pub out: PathBuf,
    pub backends: Vec<Backend>,
    pub modes: Vec<ModeKind>,
    pub receivers: Vec<usize>,
    pub sizes: Vec<usize>,
    /// Messages per ping-pong and per echo run.
    pub pingpong_messages: usize,
    /// Messages per offered-rate (at most 3 s of load) and simulated saturation run.
    pub messages: usize,
    /// Messages per saturation run over AF_XDP (plain NAK: at most
    /// [`eb::PAPER_MAX_MESSAGES`]).
    pub xdp_saturation_messages: usize,
    /// The offered rate over AF_XDP, messages per second.
    pub rate: u32,
    /// The offered rate in the simulator, messages per second.
    pub sim_rate: u32,
    /// A `tc` rate for every link of the namespace topology (`10mbit`).
    pub link_rate: Option<String>,
    /// The simulated segment.
    pub sim_link: SimLink,
    /// The command line, recorded with the results.
    pub command: String,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// The longest one AF_XDP run may take.
    pub deadline: std::time::Duration,
}

/// The algorithms of the paper's figures, in its order.
const PAPER_ALGOS: [Algorithm; 4] = Algorithm::ALL;

/// One run to do.
#[derive(Debug, Clone)]
struct Job {
    backend: Backend,
    mode: ModeKind,
    /// "iterative", "ack", "nak", "mak", "gbn" or "blast".
    algo: &'static str,
    algorithm: Option<Algorithm>,
    receivers: usize,
    len: usize,
    messages: usize,
}

/// What one run gave.
#[derive(Debug)]
pub struct RunResult {
    pub backend: Backend,
    pub mode: ModeKind,
    pub rate: Option<u32>,
    pub algo: &'static str,
    pub receivers: usize,
    pub len: usize,
    pub messages: usize,
    /// Every delivery at every receiver, from (scheduled) send.
    pub one_way: Histogram<u64>,
    /// Per message, from (scheduled) send until the last receiver delivered
    /// it: the paper's multicast latency.
    pub completion: Histogram<u64>,
    /// Ping-pong, acknowledged algorithms: send until the sender held every
    /// ACK (the "acked" round trip).
    pub acked: Option<Histogram<u64>>,
    /// Echo: send until the last receiver's reply was delivered at the
    /// sender (the echo round trip).
    pub echo: Option<Histogram<u64>>,
    /// Echo: messages whose reply came back in time.
    pub replies: usize,
    /// The run's main latency (echo: the round trip; otherwise the
    /// completion) by the interval of the send time.
    pub intervals: Vec<(f64, f64, Histogram<u64>)>,
    pub delivered_min: usize,
    pub secs: f64,
    pub msgs_per_sec: f64,
    pub mb_per_sec: f64,
    pub xdp_modes: (String, String),
}

impl RunResult {
    /// The file name stem of this run's histogram files.
    pub fn stem(&self) -> String {
        format!(
            "{}-{}-{}-{}rx-{}B",
            self.backend.name(),
            self.mode.name(),
            self.algo,
            self.receivers,
            self.len
        )
    }
}

/// Latencies in nanoseconds, 1 ns to 1 hour, 3 significant figures.
pub fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")
}

/// Turns the raw times of a run into histograms and rates.
fn summarize(job: &Job, rate: Option<u32>, raw: PaperRaw) -> RunResult {
    let (mut one_way, mut completion) = (histogram(), histogram());
    let mut first_sent = u64::MAX;
    let mut last_delivered = 0u64;
    let n = raw.sent_ns.len();
    let mut done: Vec<(u64, u64)> = Vec::with_capacity(n);
    for (i, &sent) in raw.sent_ns.iter().enumerate() {
        first_sent = first_sent.min(sent);
        let mut last = Some(0u64);
        for r in &raw.delivered_ns {
            match r.get(i).copied() {
                Some(d) if d != u64::MAX => {
                    one_way.saturating_record(d.saturating_sub(sent).max(1));
                    last_delivered = last_delivered.max(d);
                    last = last.map(|l| l.max(d));
                }
                _ => last = None,
            }
        }
        if let Some(l) = last {
            let v = l.saturating_sub(sent).max(1);
            completion.saturating_record(v);
            done.push((sent, v));
        }
    }
    let delivered_min = raw
        .delivered_ns
        .iter()
        .map(|r| r.iter().filter(|&&d| d != u64::MAX).count())
        .min()
        .unwrap_or(0);
    let secs = if first_sent == u64::MAX || last_delivered <= first_sent {
        1e-9
    } else {
        (last_delivered - first_sent) as f64 / 1e9
    };
    let acked = (!raw.acked_ns.is_empty()).then(|| {
        let mut h = histogram();
        for &v in &raw.acked_ns {
            h.saturating_record(v.max(1));
        }
        h
    });
    let mut replies = 0;
    let echo = (job.mode == ModeKind::Echo).then(|| {
        let mut h = histogram();
        for &v in raw.echo_ns.iter().filter(|&&v| v != u64::MAX) {
            h.saturating_record(v.max(1));
            replies += 1;
        }
        h
    });
    if job.mode == ModeKind::Echo {
        // The interval log follows the round trip.
        done = raw
            .sent_ns
            .iter()
            .zip(&raw.echo_ns)
            .filter(|(_, &v)| v != u64::MAX)
            .map(|(&sent, &v)| (sent, v.max(1)))
            .collect();
    }
    // Interval histograms: tenths of the run, at least 1 ms each.
    let span_ns = done.iter().map(|d| d.0).max().unwrap_or(0).max(1);
    let step = (span_ns / 10).max(1_000_000);
    let mut intervals: Vec<(f64, f64, Histogram<u64>)> = Vec::new();
    for (sent, v) in done {
        let k = (sent / step) as usize;
        while intervals.len() <= k {
            let start = intervals.len() as u64 * step;
            intervals.push((start as f64 / 1e9, step as f64 / 1e9, histogram()));
        }
        intervals[k].2.saturating_record(v);
    }
    let msgs_per_sec = delivered_min as f64 / secs;
    RunResult {
        backend: job.backend,
        mode: job.mode,
        rate,
        algo: job.algo,
        receivers: job.receivers,
        len: job.len,
        messages: job.messages,
        one_way,
        completion,
        acked,
        echo,
        replies,
        intervals,
        delivered_min,
        secs,
        msgs_per_sec,
        mb_per_sec: msgs_per_sec * job.len as f64 / 1e6,
        xdp_modes: raw.modes,
    }
}

fn jobs(o: &Opts) -> Vec<Job> {
    let mut v = Vec::new();
    for &backend in &o.backends {
        for &mode in &o.modes {
            let messages = match mode {
                ModeKind::PingPong | ModeKind::Echo => o.pingpong_messages,
                // At most 3 s of offered load per run.
                ModeKind::Rate => o.messages.min(3 * rate_of(o, backend) as usize).max(1),
                ModeKind::Saturation if backend == Backend::Xdp => o.xdp_saturation_messages,
                ModeKind::Saturation => o.messages,
            };
            for &len in &o.sizes {
                let mut push = |algo, algorithm: Option<Algorithm>, receivers| {
                    // Plain NAK's sender never frees: its window holds the
                    // whole run, and its UMEM grows with it (bounded by
                    // the cap, see `eb::paper_frames`).
                    let messages = if algorithm == Some(Algorithm::Nak) {
                        messages.min(eb::PAPER_MAX_MESSAGES)
                    } else {
                        messages
                    };
                    v.push(Job {
                        backend,
                        mode,
                        algo,
                        algorithm,
                        receivers,
                        len,
                        messages,
                    })
                };
                if backend == Backend::Xdp {
                    for &r in &o.receivers {
                        push("blast", None, r);
                    }
                }
                for a in PAPER_ALGOS {
                    for &r in &o.receivers {
                        push(a.name(), Some(a), r);
                    }
                }
                // Go-Back-N: reliable unicast to one receiver (the iterative
                // machine with a group of one).
                push("gbn", Some(Algorithm::Iterative), 1);
            }
        }
    }
    v
}

fn mode_of(o: &Opts, b: Backend, m: ModeKind) -> PaperMode {
    match m {
        ModeKind::PingPong => PaperMode::PingPong,
        ModeKind::Echo => PaperMode::Echo,
        ModeKind::Rate => PaperMode::Rate(rate_of(o, b)),
        ModeKind::Saturation => PaperMode::Saturation,
    }
}

fn rate_of(o: &Opts, b: Backend) -> u32 {
    match b {
        Backend::Sim => o.sim_rate,
        Backend::Xdp => o.rate,
    }
}

fn bar(done: usize, total: usize, label: &str) {
    let width = 30;
    let filled = width * done / total.max(1);
    eprint!(
        "\r[{}{}] {done:>3}/{total} {label:<40}",
        "#".repeat(filled),
        ".".repeat(width - filled)
    );
}

/// The environment a whole invocation ran in.
#[derive(Debug, Clone)]
pub struct Env {
    pub kernel: String,
    pub xdp_mode: String,
    pub bind_mode: String,
    pub queues: u32,
    pub cpus: usize,
    pub build_profile: &'static str,
    pub link_rate: Option<String>,
    pub sim_link: SimLink,
    pub rate: u32,
    pub sim_rate: u32,
    pub wall_secs: f64,
    pub command: String,
}

impl Env {
    pub fn line(&self) -> String {
        format!(
            "kernel {}, XDP mode {}, bind mode {}, {} queue(s), {} CPUs, {} build, namespace links {}, \
             simulated segment {} Mbit/s with {} us one-way latency, offered rate {}/s (simulator {}/s)",
            self.kernel,
            self.xdp_mode,
            self.bind_mode,
            self.queues,
            self.cpus,
            self.build_profile,
            self.link_rate.as_deref().unwrap_or("uncapped (veth)"),
            self.sim_link.bandwidth_bps as f64 / 1e6,
            self.sim_link.latency.as_micros(),
            self.rate,
            self.sim_rate
        )
    }

    pub fn json(&self) -> Value {
        json!({
            "kernel": self.kernel,
            "xdp_mode": self.xdp_mode,
            "bind_mode": self.bind_mode,
            "queues": self.queues,
            "cpus": self.cpus,
            "build_profile": self.build_profile,
            "link_rate": self.link_rate,
            "sim_bandwidth_bps": self.sim_link.bandwidth_bps,
            "sim_latency_ns": self.sim_link.latency.as_nanos() as u64,
            "offered_rate_per_sec": self.rate,
            "sim_offered_rate_per_sec": self.sim_rate,
            "wall_secs": self.wall_secs,
            "command": self.command,
        })
    }
}

/// Runs the whole comparison and writes every output into `o.out`.
pub fn run(o: &Opts) -> Result<(), String> {
    if o.receivers.is_empty() || o.sizes.is_empty() || o.modes.is_empty() || o.backends.is_empty() {
        return Err(
            "nothing to run: receivers, sizes, modes and backends must not be empty".into(),
        );
    }
    if o.receivers.iter().any(|&r| r == 0 || r > 16) {
        return Err("receivers must be 1 to 16".into());
    }
    if o.sizes.iter().any(|&s| !(16..=1400).contains(&s)) {
        return Err("message sizes must be 16 to 1,400 bytes (one frame)".into());
    }
    if o.messages == 0 || o.pingpong_messages == 0 || o.xdp_saturation_messages == 0 {
        return Err("messages per run must be at least 1".into());
    }
    if o.backends.contains(&Backend::Xdp) {
        if let Some(why) = eb::missing_privileges() {
            return Err(format!(
                "the xdp backend needs root ({why}); run as root or pass --backends sim"
            ));
        }
    }
    std::fs::create_dir_all(o.out.join("hgrm")).map_err(|e| format!("{}: {e}", o.out.display()))?;
    std::fs::create_dir_all(o.out.join("hlog")).map_err(|e| format!("{}: {e}", o.out.display()))?;
    std::fs::create_dir_all(o.out.join("plots"))
        .map_err(|e| format!("{}: {e}", o.out.display()))?;
    let link_bps = match &o.link_rate {
        Some(r) => Some(parse_rate(r)?),
        None => None,
    };
    let all = jobs(o);
    let total = all.len();
    let max_rx = o.receivers.iter().copied().max().unwrap_or(1);
    let (results, wall) = crate::timed(|| -> Result<Vec<RunResult>, String> {
        let mut results = Vec::with_capacity(total);
        let topo = if o.backends.contains(&Backend::Xdp) {
            let t = Topology::with_receivers("mcast-bench paper", max_rx)
                .ok_or("could not build the namespace topology")?;
            if let Some(rate) = &o.link_rate {
                t.limit_rate(rate, "32kbit")?;
            }
            eprintln!("mcast-bench paper: {}", namespaces_line(&t));
            Some(t)
        } else {
            None
        };
        for (i, job) in all.iter().enumerate() {
            let label = format!(
                "{} {} {} {}rx {}B",
                job.backend.name(),
                job.mode.name(),
                job.algo,
                job.receivers,
                job.len
            );
            if o.progress {
                bar(i, total, &label);
            }
            let mode = mode_of(o, job.backend, job.mode);
            let raw = match job.backend {
                Backend::Sim => sim::run(
                    job.algorithm.expect("the simulator runs protocols"),
                    job.receivers,
                    job.len,
                    mode,
                    job.messages,
                    &o.sim_link,
                )?,
                Backend::Xdp => eb::paper_run(
                    topo.as_ref().expect("topology"),
                    &eb::PaperRun {
                        algorithm: job.algorithm,
                        receivers: job.receivers,
                        len: job.len,
                        mode,
                        messages: job.messages,
                        deadline: o.deadline,
                        link_bps,
                    },
                ),
            };
            let rate = (job.mode == ModeKind::Rate).then_some(rate_of(o, job.backend));
            results.push(summarize(job, rate, raw));
        }
        if o.progress {
            bar(total, total, "done");
            eprintln!();
        }
        Ok(results)
    });
    let results = results?;
    let modes = results
        .iter()
        .find(|r| !r.xdp_modes.0.is_empty() && r.backend == Backend::Xdp)
        .map(|r| r.xdp_modes.clone())
        .unwrap_or_else(|| {
            if o.backends.contains(&Backend::Xdp) {
                ("skb".into(), "copy".into())
            } else {
                ("none".into(), "none".into())
            }
        });
    let env = Env {
        kernel: eb::kernel_release(),
        xdp_mode: modes.0,
        bind_mode: modes.1,
        queues: 1,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        build_profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        link_rate: o.link_rate.clone(),
        sim_link: o.sim_link,
        rate: o.rate,
        sim_rate: o.sim_rate,
        wall_secs: wall.as_secs_f64(),
        command: o.command.clone(),
    };
    let written = out::write_all(&o.out, &env, &results)?;
    print!(
        "{}",
        std::fs::read_to_string(o.out.join("table.txt")).unwrap_or_default()
    );
    eprintln!(
        "wrote {} files under {} in {:.1} s",
        written,
        o.out.display(),
        wall.as_secs_f64()
    );
    Ok(())
}

/// Names the namespaces of `t`, for the log: what an interrupted run removes.
pub fn namespaces_line(t: &Topology) -> String {
    let names: Vec<&str> = [&t.bridge, &t.sender]
        .into_iter()
        .chain(&t.receivers)
        .map(|n| n.name.as_str())
        .collect();
    format!(
        "network namespaces {} created (removed at the end, or on SIGINT/SIGTERM)",
        names.join(" ")
    )
}

/// A `tc` rate (`10mbit`, `512kbit`, `1gbit`, `100000bit`) in bit/s.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let digits = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: f64 = num.parse().map_err(|_| format!("bad rate {s:?}"))?;
    let mult = match unit {
        "bit" | "" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return Err(format!("bad rate {s:?}: use bit, kbit, mbit or gbit")),
    };
    Ok((n * mult) as u64)
}

/// The growth of a send-and-wait latency (median) from the fewest to the
/// most receivers, per backend, size and algorithm: in ping-pong runs the
/// paper's latency (the send until the last receiver delivered), in echo
/// runs the round trip (the send until the reply was in).
#[derive(Debug, Clone)]
pub struct Growth {
    pub backend: Backend,
    pub mode: ModeKind,
    pub len: usize,
    pub algo: &'static str,
    pub from_rx: usize,
    pub to_rx: usize,
    pub from_us: f64,
    pub to_us: f64,
    /// Least-squares slope of the median over every receiver count, µs per receiver.
    pub slope_us: f64,
    /// Ping-pong: the median acked round trip (send until every ACK was in)
    /// at the fewest and the most receivers, for the acknowledged algorithms.
    pub acked_us: Option<(f64, f64)>,
    /// Echo: the median round trip over the blast's in the same run, at the
    /// fewest and the most receivers (AF_XDP only: the simulator has no blast).
    pub over_blast: Option<(f64, f64)>,
}

impl Growth {
    pub fn ratio(&self) -> f64 {
        self.to_us / self.from_us.max(1e-9)
    }
}

/// What the paper reports for 1,024-byte messages (seed 000 §4 (2), (3)):
/// (algorithm, latency at 1 receiver, at 6 receivers, µs per receiver).
pub const PAPER_1K: [(&str, Option<f64>, Option<f64>, &str); 4] = [
    ("iterative", Some(1790.0), Some(7210.0), "4.0x"),
    ("ack", Some(1883.0), Some(2800.0), "1.5x"),
    ("nak", None, None, "<1.15x, 31 us/receiver"),
    ("mak", None, None, "<1.15x, 14 us/receiver"),
];

/// The median a growth follows: ping-pong, the completion; echo, the round trip.
fn growth_median(r: &RunResult) -> Option<f64> {
    let h = match r.mode {
        ModeKind::Echo => r.echo.as_ref()?,
        _ => &r.completion,
    };
    (!h.is_empty()).then(|| h.value_at_quantile(0.5) as f64 / 1e3)
}

/// The growths of `mode`'s runs (ping-pong or echo).
pub fn growth(results: &[RunResult], mode: ModeKind) -> Vec<Growth> {
    let mut v = Vec::new();
    let mut keys: Vec<(Backend, usize, &'static str)> = results
        .iter()
        .filter(|r| r.mode == mode && r.algo != "gbn")
        .map(|r| (r.backend, r.len, r.algo))
        .collect();
    keys.sort_by_key(|k| (k.0.name(), k.1, order(k.2)));
    keys.dedup();
    let run = |backend: Backend, len: usize, algo: &str, rx: usize| {
        results.iter().find(|r| {
            r.mode == mode
                && r.backend == backend
                && r.len == len
                && r.algo == algo
                && r.receivers == rx
        })
    };
    for (backend, len, algo) in keys {
        let mut pts: Vec<(usize, f64)> = results
            .iter()
            .filter(|r| r.mode == mode && r.backend == backend && r.len == len && r.algo == algo)
            .filter_map(|r| Some((r.receivers, growth_median(r)?)))
            .collect();
        pts.sort_by_key(|p| p.0);
        let (Some(&first), Some(&last)) = (pts.first(), pts.last()) else {
            continue;
        };
        let acked_at = |rx: usize| {
            run(backend, len, algo, rx)
                .and_then(|r| r.acked.as_ref())
                .filter(|h| !h.is_empty())
                .map(|h| h.value_at_quantile(0.5) as f64 / 1e3)
        };
        let over_blast_at = |rx: usize, us: f64| {
            let b = growth_median(run(backend, len, "blast", rx)?)?;
            (algo != "blast" && mode == ModeKind::Echo).then(|| us / b.max(1e-9))
        };
        let n = pts.len() as f64;
        let mx = pts.iter().map(|p| p.0 as f64).sum::<f64>() / n;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = pts.iter().map(|p| (p.0 as f64 - mx).powi(2)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 as f64 - mx) * (p.1 - my)).sum();
        v.push(Growth {
            backend,
            mode,
            len,
            algo,
            from_rx: first.0,
            to_rx: last.0,
            from_us: first.1,
            to_us: last.1,
            slope_us: if sxx > 0.0 { sxy / sxx } else { 0.0 },
            acked_us: acked_at(first.0).zip(acked_at(last.0)),
            over_blast: over_blast_at(first.0, first.1).zip(over_blast_at(last.0, last.1)),
        });
    }
    v
}

/// Sort order of the algorithms in tables and legends.
pub fn order(algo: &str) -> usize {
    ["blast", "iterative", "ack", "nak", "mak", "gbn"]
        .iter()
        .position(|a| *a == algo)
        .unwrap_or(9)
}

/// Writes `text` to `dir/name`.
fn write(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let p = dir.join(name);
    std::fs::write(&p, text).map_err(|e| format!("writing {}: {e}", p.display()))
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        f64::NAN
    } else {
        h.value_at_quantile(q) as f64 / 1e3
    }
}

/// A compact duration for messages.
pub fn fmt_us(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The run of the raw blast beside `r` (same backend, mode, size and receivers).
fn blast_of<'a>(results: &'a [RunResult], r: &RunResult) -> Option<&'a RunResult> {
    results.iter().find(|b| {
        b.backend == r.backend
            && b.mode == r.mode
            && b.len == r.len
            && b.receivers == r.receivers
            && b.algo == "blast"
    })
}

/// `a / b` to two places, or "-".
fn ratio_text(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => format!("{:.2}", a / b),
        _ => "-".into(),
    }
}

/// The table, as text.
fn table(env: &Env, results: &[RunResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "mcast-bench paper: seed 000 §4 on our engine");
    let _ = writeln!(s, "command: {}", env.command);
    let _ = writeln!(s, "environment: {}", env.line());
    let _ = writeln!(s, "wall time: {:.1} s", env.wall_secs);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "latency: per message, from its (scheduled) send until the LAST receiver delivered it (the paper's\n\
         multicast latency), microseconds, HdrHistogram 3 significant figures; one-way p50 is per delivery at\n\
         any receiver; acked p50 (ping-pong, acknowledged algorithms) is the send until the sender held every\n\
         ACK; msgs/s and MB/s at the slowest receiver; 'got' is what the slowest receiver delivered.\n\
         echo tables: the round trip, from the send until the last receiver's reply (16 bytes, unicast back\n\
         over the same transport) was delivered at the sender; the next message goes when the reply is in;\n\
         'last rx p50' is the send until the last receiver delivered; 'x blast' is the p50 over the raw\n\
         blast's echo p50 in the same run."
    );
    let mut groups: Vec<(Backend, ModeKind)> =
        results.iter().map(|r| (r.backend, r.mode)).collect();
    groups.dedup();
    for (backend, mode) in groups {
        let _ = writeln!(s);
        let rate = results
            .iter()
            .find(|r| r.mode == mode && r.backend == backend)
            .and_then(|r| r.rate)
            .map(|r| format!(" at {r} msgs/s"))
            .unwrap_or_default();
        let mut rows: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.backend == backend && r.mode == mode)
            .collect();
        rows.sort_by_key(|r| (r.len, order(r.algo), r.receivers));
        if mode == ModeKind::Echo {
            let _ = writeln!(
                s,
                "== {} echo: round trip, send -> reply delivered at the sender ==",
                backend.name()
            );
            let _ = writeln!(
                s,
                "{:<10} {:>3} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>10} {:>8} {:>7}",
                "algo",
                "rx",
                "bytes",
                "rtt p50",
                "p90",
                "p99",
                "p99.9",
                "max",
                "last rx p50",
                "1way p50",
                "rtt/s",
                "replies",
                "x blast"
            );
            for r in rows {
                let Some(h) = r.echo.as_ref() else { continue };
                let blast = blast_of(results, r)
                    .filter(|_| r.algo != "blast")
                    .and_then(|b| b.echo.as_ref())
                    .filter(|b| !b.is_empty())
                    .map(|b| us(b, 0.5));
                let _ = writeln!(
                    s,
                    "{:<10} {:>3} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>10.0} {:>7.1}% {:>7}",
                    r.algo,
                    r.receivers,
                    r.len,
                    fmt_us(us(h, 0.5)),
                    fmt_us(us(h, 0.9)),
                    fmt_us(us(h, 0.99)),
                    fmt_us(us(h, 0.999)),
                    fmt_us(if h.is_empty() { f64::NAN } else { h.max() as f64 / 1e3 }),
                    fmt_us(us(&r.completion, 0.5)),
                    fmt_us(us(&r.one_way, 0.5)),
                    r.replies as f64 / r.secs,
                    100.0 * r.replies as f64 / r.messages.max(1) as f64,
                    ratio_text((!h.is_empty()).then(|| us(h, 0.5)), blast)
                );
            }
            continue;
        }
        let _ = writeln!(s, "== {} {}{} ==", backend.name(), mode.name(), rate);
        let _ = writeln!(
            s,
            "{:<10} {:>3} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>7} {:>7}",
            "algo",
            "rx",
            "bytes",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "1way p50",
            "acked p50",
            "msgs/s",
            "MB/s",
            "got",
            "x blast"
        );
        for r in rows {
            let c = &r.completion;
            let x = ratio_text(
                Some(r.msgs_per_sec).filter(|_| r.algo != "blast"),
                blast_of(results, r).map(|b| b.msgs_per_sec),
            );
            let _ = writeln!(
                s,
                "{:<10} {:>3} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10.0} {:>8.2} {:>6.1}% {:>7}",
                r.algo,
                r.receivers,
                r.len,
                fmt_us(us(c, 0.5)),
                fmt_us(us(c, 0.9)),
                fmt_us(us(c, 0.99)),
                fmt_us(us(c, 0.999)),
                fmt_us(if c.is_empty() { f64::NAN } else { c.max() as f64 / 1e3 }),
                fmt_us(us(&r.one_way, 0.5)),
                r.acked.as_ref().map_or_else(|| "-".into(), |h| fmt_us(us(h, 0.5))),
                r.msgs_per_sec,
                r.mb_per_sec,
                100.0 * r.delivered_min as f64 / r.messages.max(1) as f64,
                x
            );
        }
    }
    growth_table(
        &mut s,
        &growth(results, ModeKind::PingPong),
        "ping-pong latency (median, last receiver)",
        (
            "acked from->to us",
            19,
            "   paper (1,024 B, 1 -> 6 receivers)",
        ),
        |x| {
            let acked = x.acked_us.map_or_else(
                || "-".to_owned(),
                |(a, b)| format!("{}->{} {:.2}x", fmt_us(a), fmt_us(b), b / a.max(1e-9)),
            );
            let paper = PAPER_1K
                .iter()
                .find(|p| p.0 == x.algo && x.len == 1024)
                .map_or_else(String::new, |p| match (p.1, p.2) {
                    (Some(a), Some(b)) => format!("{a:.0} -> {b:.0} us, {}", p.3),
                    _ => p.3.to_owned(),
                });
            format!("{acked:>19}   {paper}")
        },
    );
    growth_table(
        &mut s,
        &growth(results, ModeKind::Echo),
        "echo round trip (median)",
        ("x blast from->to", 17, ""),
        |x| {
            let blast = x
                .over_blast
                .map_or_else(|| "-".to_owned(), |(a, b)| format!("{a:.2}->{b:.2}"));
            format!("{blast:>17}")
        },
    );
    s
}

/// One growth table: the columns every mode shares, then `last` (its
/// header, width and what follows it in the header line) filled by `cell`.
fn growth_table(
    s: &mut String,
    g: &[Growth],
    what: &str,
    last: (&str, usize, &str),
    cell: impl Fn(&Growth) -> String,
) {
    if g.is_empty() {
        return;
    }
    let (header, width, after) = last;
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "== growth of the {what} from the fewest to the most receivers =="
    );
    let _ = writeln!(
        s,
        "{:<7} {:>5} {:<10} {:>6} {:>10} {:>10} {:>7} {:>10} {header:>width$}{after}",
        "backend", "bytes", "algo", "rx", "from us", "to us", "growth", "us/rx",
    );
    for x in g {
        let line = format!(
            "{:<7} {:>5} {:<10} {:>6} {:>10} {:>10} {:>6.2}x {:>10.1} {}",
            x.backend.name(),
            x.len,
            x.algo,
            format!("{}->{}", x.from_rx, x.to_rx),
            fmt_us(x.from_us),
            fmt_us(x.to_us),
            x.ratio(),
            x.slope_us,
            cell(x),
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;

    /// The paper scenario end to end on the simulator with a tiny grid:
    /// every output file exists and its contents parse.
    #[test]
    fn paper_on_the_simulator_writes_every_output() {
        let out = std::env::temp_dir().join(format!("mcast-paper-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let o = Opts {
            out: out.clone(),
            backends: vec![Backend::Sim],
            modes: vec![
                ModeKind::PingPong,
                ModeKind::Echo,
                ModeKind::Rate,
                ModeKind::Saturation,
            ],
            receivers: vec![1, 2],
            sizes: vec![512],
            pingpong_messages: 20,
            messages: 50,
            xdp_saturation_messages: 50,
            rate: 1000,
            sim_rate: 100,
            link_rate: None,
            sim_link: SimLink {
                bandwidth_bps: 10_000_000,
                latency: std::time::Duration::from_micros(10),
            },
            command: "test".into(),
            progress: false,
            deadline: std::time::Duration::from_secs(10),
        };
        run(&o).expect("paper run");

        // The table: every algorithm, every mode, and the growth section.
        let table = std::fs::read_to_string(out.join("table.txt")).expect("table");
        for needle in [
            "== sim pingpong",
            "== sim echo: round trip",
            "== sim rate at 100",
            "== sim saturation",
            "growth of the ping-pong latency",
            "growth of the echo round trip",
        ] {
            assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
        }
        for algo in ["iterative", "ack", "nak", "mak", "gbn"] {
            assert!(table.contains(algo), "table lacks {algo}");
        }

        // The JSON: 4 modes x (4 algorithms x 2 receiver counts + gbn) runs,
        // each with its environment and a completion histogram.
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap())
                .expect("results.json parses");
        let runs = v["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 4 * (4 * 2 + 1));
        for r in runs {
            assert_eq!(r["delivered_min"], r["messages"], "{r}");
            assert!(r["completion"]["p50_ns"].as_u64().unwrap() > 0, "{r}");
            assert_eq!(r["environment"]["message_len"], 512);
            // The acked round trip only in ping-pong, and not for plain NAK.
            let acked = r["mode"] == "pingpong" && r["algo"] != "nak";
            assert_eq!(r["acked_round_trip"].is_object(), acked, "{r}");
            assert_eq!(r["echo_round_trip"].is_object(), r["mode"] == "echo", "{r}");
        }
        assert_eq!(v["growth"].as_array().unwrap().len(), 4);
        assert_eq!(v["echo_growth"].as_array().unwrap().len(), 4);

        // Echo: every message of every algorithm, plain NAK included, was
        // answered; the reply comes after the last receiver delivered, by
        // the reply's (and at most an ACK's) time on the 10 Mbit/s wire.
        let echo = |algo: &str, rx: u64| {
            runs.iter()
                .find(|r| r["mode"] == "echo" && r["algo"] == algo && r["receivers"] == rx)
                .unwrap_or_else(|| panic!("echo {algo} {rx}"))
        };
        let rtt = |algo: &str, rx: u64| {
            echo(algo, rx)["echo_round_trip"]["p50_ns"]
                .as_u64()
                .unwrap()
        };
        for algo in ["iterative", "ack", "nak", "mak"] {
            for rx in [1, 2] {
                let r = echo(algo, rx);
                assert_eq!(r["echo_replies"], 20, "{r}");
                assert_eq!(r["echo_round_trip"]["samples"], 20, "{r}");
                let last = r["completion"]["p50_ns"].as_u64().unwrap();
                let rtt = rtt(algo, rx);
                assert!(
                    rtt > last && rtt - last < 200_000,
                    "{algo} {rx}: rtt {rtt} ns, last receiver {last} ns"
                );
            }
        }
        assert_eq!(echo("gbn", 1)["echo_replies"], 20);
        // Iterative's reply waits for one more 512-byte copy (~0.5 ms at
        // 10 Mbit/s) per receiver; one multicast reaches both at once.
        assert!(rtt("iterative", 2) > rtt("iterative", 1) + 400_000);
        assert_eq!(rtt("nak", 2), rtt("nak", 1));
        assert_eq!(rtt("mak", 2), rtt("mak", 1));
        // Iterative sends one copy per receiver: two receivers take longer.
        let p50 = |algo: &str, rx: u64| {
            runs.iter()
                .find(|r| r["mode"] == "pingpong" && r["algo"] == algo && r["receivers"] == rx)
                .unwrap()["completion"]["p50_ns"]
                .as_u64()
                .unwrap()
        };
        assert!(p50("iterative", 2) > p50("iterative", 1) * 3 / 2);
        assert_eq!(p50("mak", 2), p50("mak", 1));

        // Every .hgrm has HdrHistogram's header and footer, and its last
        // percentile line is 100 % with the run's count.
        let hgrm = out.join("hgrm/sim-pingpong-mak-2rx-512B.hgrm");
        let text = std::fs::read_to_string(&hgrm).expect("hgrm");
        assert!(
            text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"),
            "{text}"
        );
        assert!(text.contains("#[Mean    ="), "{text}");
        assert!(text.contains("#[Buckets ="), "{text}");
        let last = text
            .lines()
            .rfind(|l| !l.starts_with('#') && !l.trim().is_empty())
            .unwrap();
        let cols: Vec<&str> = last.split_whitespace().collect();
        assert_eq!(cols[1], "1.000000000000");
        assert_eq!(cols[2], "20");
        assert!(out
            .join("hgrm/sim-pingpong-mak-2rx-512B.acked.hgrm")
            .exists());
        assert!(!out
            .join("hgrm/sim-pingpong-nak-2rx-512B.acked.hgrm")
            .exists());
        assert!(out.join("hgrm/sim-echo-nak-2rx-512B.echo.hgrm").exists());
        assert!(out.join("hgrm/sim-rate-nak-1rx-512B.oneway.hgrm").exists());

        // The interval log decodes back into histograms holding every message.
        let log = std::fs::read(out.join("hlog/sim-rate-mak-2rx-512B.hlog")).expect("hlog");
        let mut total = 0;
        let mut de = Deserializer::new();
        for entry in IntervalLogIterator::new(&log) {
            if let LogEntry::Interval(i) = entry.expect("log entry") {
                assert_eq!(i.tag().map(|t| t.as_str()), Some("sim-rate-mak-2rx-512B"));
                let bytes = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> =
                    de.deserialize(&mut bytes.as_slice()).expect("V2 histogram");
                total += h.len();
            }
        }
        assert_eq!(total, 50);
        // An echo run's interval log holds its round trips.
        let log = std::fs::read(out.join("hlog/sim-echo-nak-2rx-512B.hlog")).expect("hlog");
        let mut total = 0;
        for entry in IntervalLogIterator::new(&log) {
            if let LogEntry::Interval(i) = entry.expect("log entry") {
                let bytes = base64_decode(i.encoded_histogram());
                let h: Histogram<u64> =
                    de.deserialize(&mut bytes.as_slice()).expect("V2 histogram");
                total += h.len();
            }
        }
        assert_eq!(total, 20);

        // The plots are well-formed SVG with one series per algorithm.
        let plots: Vec<_> = std::fs::read_dir(out.join("plots"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        // Latency and echo round trip against receivers, percentiles of
        // ping-pong, echo and offered rate, saturation throughput.
        assert_eq!(plots.len(), 6, "{plots:?}");
        assert!(out
            .join("plots/sim-echo-rtt-vs-receivers-512B.svg")
            .exists());
        assert!(out.join("plots/sim-echo-percentiles-512B-2rx.svg").exists());
        for p in &plots {
            let text = std::fs::read_to_string(p).unwrap();
            let doc = roxmltree::Document::parse(&text)
                .unwrap_or_else(|e| panic!("{}: not XML: {e}", p.display()));
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            let series = doc
                .descendants()
                .filter(|n| n.attribute("class") == Some("series"))
                .count();
            assert_eq!(series, 4, "{}", p.display());
        }
        std::fs::remove_dir_all(&out).unwrap();
    }

    #[test]
    fn tc_rates_parse() {
        assert_eq!(parse_rate("10mbit"), Ok(10_000_000));
        assert_eq!(parse_rate("512kbit"), Ok(512_000));
        assert!(parse_rate("10mbps").is_err());
    }

    /// Standard base64 (the interval log's encoding), for the test only.
    fn base64_decode(s: &str) -> Vec<u8> {
        let val = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
        let mut out = Vec::new();
        for chunk in bytes.chunks(4) {
            let mut n = 0u32;
            for (i, &c) in chunk.iter().enumerate() {
                n |= u32::from(val(c)) << (18 - 6 * i);
            }
            out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
        }
        out
    }
}
