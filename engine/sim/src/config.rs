//! What a run simulates: the group, the application's traffic, the link and the
//! faults. Everything random about a run comes from [`SimConfig::seed`].

use core::fmt::Write as _;

use mcast_proto::any::{Algorithm, ProtocolConfig};
use mcast_proto::frag::fragments;
use mcast_proto::mak::TailPolicy;
use mcast_proto::{Duration, GroupId, Instant, NodeId, Rng};

use crate::content::message_len;

/// The node id of the data sender. Receivers are `2..=receivers + 1`.
pub const SENDER: NodeId = 1;

/// The link every node shares: one Ethernet segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Each node's NIC serializes its own transmissions at this rate (bits per second).
    pub bandwidth_bps: u64,
    /// Propagation and switching delay added to every copy.
    pub latency: Duration,
    /// Each copy is further delayed by a uniform random amount in `[0, jitter]`;
    /// copies of the same frame (and successive frames) may then be reordered.
    /// Jitter stops at [`Faults::faults_until`] like the faults: a healed
    /// segment delivers each node's frames in order.
    pub jitter: Duration,
    /// The most transmission time a NIC's queue may hold: while its backlog is
    /// longer, the driver stops taking frames from the machine (as an engine
    /// stops draining `poll_transmit` when the AF_XDP TX ring is full) and the
    /// frames wait inside the machine. A real NIC's ring is finite; without
    /// this bound a sender whose timers fire faster than its link drains
    /// queues without end (congestion collapse in the simulator alone).
    pub tx_queue: Duration,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            bandwidth_bps: 10_000_000_000,
            latency: Duration::from_micros(10),
            jitter: Duration::ZERO,
            tx_queue: Duration::from_micros(50),
        }
    }
}

/// A node cut off from the segment: every copy sent to or from `node` while
/// `from <= t < until` (t = the time the frame is handed to the NIC) is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub node: NodeId,
    pub from: Instant,
    pub until: Instant,
}

/// Faults injected on the segment. All stop at `faults_until` (the network heals).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Faults {
    /// Probability that a copy to or from a receiver is lost (each receiver independently).
    pub loss: f64,
    /// Receivers whose loss probability differs from `loss`.
    pub per_receiver_loss: Vec<(NodeId, f64)>,
    /// Probability that a copy arrives twice (the second copy with its own jitter).
    pub duplicate: f64,
    /// Probability that one random byte of a copy is flipped (caught by the CRC32C).
    pub corrupt: f64,
    /// Intervals during which one node hears nothing and is heard by no one.
    pub partitions: Vec<Partition>,
    /// From this instant on no loss, duplication, corruption, partition or
    /// jitter happens: the liveness phase. `None`: faults last for the whole run.
    pub faults_until: Option<Instant>,
}

impl Faults {
    /// True when no fault is configured at all.
    pub fn is_none(&self) -> bool {
        self.loss == 0.0
            && self.per_receiver_loss.iter().all(|&(_, p)| p == 0.0)
            && self.duplicate == 0.0
            && self.corrupt == 0.0
            && self.partitions.is_empty()
    }

    /// The loss probability of copies to or from `node` (a receiver).
    pub fn loss_of(&self, node: NodeId) -> f64 {
        self.per_receiver_loss
            .iter()
            .rev()
            .find(|&&(n, _)| n == node)
            .map_or(self.loss, |&(_, p)| p)
    }

    /// Random faults for sweep tests over `receivers` receivers: loss 0–10 %,
    /// sometimes different per receiver, duplication 0–5 %, corruption 0–2 %,
    /// sometimes one receiver partitioned for up to 5 ms; faults stop at some
    /// point in the first 20 ms, after which liveness is checked.
    pub fn random(rng: &mut Rng, receivers: u32) -> Faults {
        let pct = |rng: &mut Rng, max_tenths: u64| rng.range(0, max_tenths) as f64 / 1000.0;
        let loss = pct(rng, 100);
        let mut per_receiver_loss = Vec::new();
        if rng.chance(0.3) {
            for _ in 0..rng.range(1, u64::from(receivers.min(3))) {
                let node = rng.range(2, u64::from(receivers) + 1) as NodeId;
                per_receiver_loss.push((node, pct(rng, 150)));
            }
        }
        let duplicate = pct(rng, 50);
        let corrupt = pct(rng, 20);
        let mut partitions = Vec::new();
        if rng.chance(0.25) {
            let node = rng.range(2, u64::from(receivers) + 1) as NodeId;
            let from = Instant(rng.range(0, 5_000_000));
            let until = Instant(from.0 + rng.range(1, 5_000_000));
            partitions.push(Partition { node, from, until });
        }
        let faults_until = Some(Instant(rng.range(1_000_000, 20_000_000)));
        Faults {
            loss,
            per_receiver_loss,
            duplicate,
            corrupt,
            partitions,
            faults_until,
        }
    }
}

/// Everything that defines one simulated run. Two runs with equal configs are
/// identical, step for step.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub algorithm: Algorithm,
    /// Number of receivers (nodes `2..=receivers + 1`); the sender is node 1.
    pub receivers: u32,
    /// Messages the sender's application sends.
    pub messages: u64,
    /// Message sizes are drawn uniformly in `[min_size, max_size]` bytes.
    pub min_size: usize,
    pub max_size: usize,
    /// Payload bytes per frame; larger messages are fragmented.
    pub max_payload: usize,
    /// The stream's window (see [`mcast_proto::StreamConfig::window_frames`]).
    pub window_frames: u32,
    /// The first sequence number: near wrap-around by default, to exercise it.
    pub initial_seq: u32,
    pub group: GroupId,
    pub protocol: ProtocolConfig,
    pub link: LinkConfig,
    pub faults: Faults,
    /// Offered rate: message `i` becomes available at `i / rate` seconds.
    /// `None`: saturation, as fast as the window allows.
    pub messages_per_sec: Option<u64>,
    /// The one seed of every random choice in the run.
    pub seed: u64,
    /// Once the network is healed (and every message offered), the run must
    /// complete within this much virtual time, else it fails with "no
    /// progress". The time the link needs to carry the run
    /// ([`SimConfig::wire_time`]) is added: a slow link is not a stall.
    pub liveness_bound: Duration,
    /// The run stops (not completed) at this virtual time.
    pub max_virtual_time: Duration,
    /// The run stops (not completed) after this many steps (events processed).
    pub max_steps: u64,
    /// Keep the first this-many trace lines in the report (0: no trace).
    pub trace_lines: usize,
    /// Receivers farther away: extra one-way latency on every copy to or from
    /// them (a property of their link, so it stays after the faults stop).
    pub receiver_latency: Vec<(NodeId, Duration)>,
    /// Batching, as the engine's send queue does it (docs/protocol.md §1.10):
    /// the application packs the messages already due behind a small whole
    /// message into its frame (flag `BATCH`, records `u16 len | bytes`), and
    /// messages that fall due while a frame waits for the window join it;
    /// fragmented messages never share a frame. Off by default, so existing
    /// sweeps and replay commands keep their meaning (`--batch true`).
    pub batch: bool,
    /// The root of MAK's feedback tree (the group agent in mcastd); the
    /// tree's fanout is the protocol's `mak.tree_fanout` (0: no tree).
    pub tree_root: NodeId,
    /// A re-parenting mid-run (seed 004 §2.2), with a tree only.
    pub retree: Option<Retree>,
}

/// A node leaves its place in the feedback tree and takes a new leaf place,
/// as a node that left and joined again does in mcastd: its children are
/// adopted by its parent (when it was the root, the node at the lowest
/// place becomes the root, as the agent role moves). Views reach nodes at
/// different times, so each node installs the new tree at its own instant
/// in `at ..= at + spread`, while the rounds of the old tree are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retree {
    /// The node that moves.
    pub node: NodeId,
    /// When the first node may install the new tree.
    pub at: Instant,
    /// How much later the last one may.
    pub spread: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            algorithm: Algorithm::Mak,
            receivers: 3,
            messages: 100,
            min_size: 64,
            max_size: 64,
            max_payload: 1456,
            window_frames: 256,
            initial_seq: u32::MAX - 100,
            group: 1,
            protocol: ProtocolConfig::default(),
            link: LinkConfig::default(),
            faults: Faults::default(),
            messages_per_sec: None,
            seed: 0,
            liveness_bound: Duration::from_secs(1),
            max_virtual_time: Duration::from_secs(60),
            max_steps: 200_000_000,
            trace_lines: 0,
            receiver_latency: Vec::new(),
            batch: false,
            tree_root: SENDER,
            retree: None,
        }
    }
}

/// True when `algo` promises that every receiver eventually delivers every
/// message once the network heals. Plain NAK does not: a receiver cannot
/// detect that the last frames were lost, and the sender never learns that it
/// may free them (seed 000 §2 (3)); for it only safety is checked.
pub fn guarantees_completion(algo: Algorithm) -> bool {
    !matches!(algo, Algorithm::Nak)
}

impl SimConfig {
    /// A random configuration for sweep tests: a few receivers, tens to
    /// hundreds of messages of random sizes (some fragmented), a random window,
    /// jitter 0–50 µs, sometimes an offered rate, and [`Faults::random`].
    pub fn random(seed: u64, algorithm: Algorithm) -> SimConfig {
        let mut rng = Rng::new(seed ^ 0x5eed_c0f1_6000_0000);
        let receivers = rng.range(1, 8) as u32;
        let messages = rng.range(1, 300);
        let max_size = if rng.chance(0.3) {
            rng.range(1, 5000) as usize
        } else {
            rng.range(1, 1200) as usize
        };
        let min_size = rng.range(0, max_size as u64) as usize;
        let max_payload = if rng.chance(0.3) {
            rng.range(64, 1456) as usize
        } else {
            1456
        };
        let mut window_frames = rng.range(4, 256) as u32;
        let link = LinkConfig {
            jitter: Duration::from_nanos(rng.range(0, 50_000)),
            ..LinkConfig::default()
        };
        let messages_per_sec = rng.chance(0.3).then(|| rng.range(10_000, 2_000_000));
        // Sometimes one receiver sits far away: the group round trip is its.
        let receiver_latency = if rng.chance(0.3) {
            let node = rng.range(2, u64::from(receivers) + 1) as NodeId;
            vec![(node, Duration::from_nanos(rng.range(1_000, 200_000)))]
        } else {
            Vec::new()
        };
        let faults = Faults::random(&mut rng, receivers);
        let initial_seq = u32::MAX - rng.range(0, 300) as u32;
        let mut cfg = SimConfig {
            algorithm,
            receivers,
            messages,
            min_size,
            max_size,
            max_payload,
            window_frames,
            initial_seq,
            link,
            faults,
            messages_per_sec,
            seed,
            receiver_latency,
            ..SimConfig::default()
        };
        // The paper's tail (an ACK round per burst) in a quarter of MAK's
        // runs, drawn last so the other draws of a seed stay as they were.
        if algorithm == Algorithm::Mak && rng.chance(0.25) {
            cfg.protocol.mak.tail = TailPolicy::AckLast;
        }
        // The feedback tree: flat in a quarter of the runs, else a fanout
        // of 1 to 3 rooted at any node (the direction of feedback depends
        // on where the sender sits in it).
        if algorithm == Algorithm::Mak {
            cfg.protocol.mak.tree_fanout = match rng.range(0, 8) {
                0 | 1 => 0,
                2 => 1,
                3 => 3,
                _ => 2,
            };
            cfg.tree_root = rng.range(1, u64::from(receivers) + 1) as NodeId;
            // A re-parenting in half of the tree runs, at any time while
            // frames are sent, to any node (the sender and the root too).
            if cfg.protocol.mak.tree_fanout > 0 && rng.chance(0.5) {
                let busy = cfg.wire_time().max(cfg.last_offer_time() - Instant::ZERO);
                cfg.retree = Some(Retree {
                    node: rng.range(1, u64::from(receivers) + 1) as NodeId,
                    at: Instant::ZERO + Duration::from_nanos(rng.range(0, nanos(busy) + 2_000_000)),
                    spread: Duration::from_nanos(rng.range(0, 2_000_000)),
                });
            }
        }
        if !guarantees_completion(algorithm) {
            // Plain NAK never frees the tail of its window: give it room for
            // the whole run so back-pressure never blocks it forever.
            window_frames = window_frames.max(cfg.total_frames().min(u64::from(u32::MAX)) as u32);
            cfg.window_frames = window_frames;
        }
        cfg
    }

    /// A random configuration with [`SimConfig::batch`] on, for batching
    /// sweeps: [`SimConfig::random`]'s receivers, window, rate, link and
    /// faults, with up to 1,000 messages. In most runs they are small (0–200
    /// bytes, so many share each frame); in the rest, frames of 64–512 bytes
    /// and messages up to two frames, so whole messages that share a frame
    /// and fragmented ones that never do alternate. The runs of
    /// [`SimConfig::random`] for the same seed are left as they were.
    pub fn random_batched(seed: u64, algorithm: Algorithm) -> SimConfig {
        let mut cfg = SimConfig::random(seed, algorithm);
        let mut rng = Rng::new(seed ^ 0xba7c_4ed0_0000_0000);
        cfg.batch = true;
        cfg.messages = rng.range(1, 1000);
        cfg.min_size = rng.range(0, 1) as usize;
        if rng.chance(0.6) {
            cfg.max_payload = if rng.chance(0.5) {
                1456
            } else {
                rng.range(64, 1456) as usize
            };
            cfg.max_size = rng.range(1, 200) as usize;
        } else {
            cfg.max_payload = rng.range(64, 512) as usize;
            cfg.max_size = cfg.max_payload + rng.range(1, cfg.max_payload as u64) as usize;
        }
        if !guarantees_completion(algorithm) {
            // As in `random`: room for the whole run (unbatched, so ample).
            let frames = cfg.total_frames().min(u64::from(u32::MAX)) as u32;
            cfg.window_frames = cfg.window_frames.max(frames);
        }
        cfg
    }

    /// Frames the whole run sends (every message's fragments, once).
    pub fn total_frames(&self) -> u64 {
        (0..self.messages)
            .map(|i| fragments(self.message_len(i), self.max_payload).count() as u64)
            .sum()
    }

    /// The size of message `i`.
    pub fn message_len(&self, i: u64) -> usize {
        message_len(self.seed, i, self.min_size, self.max_size)
    }

    /// See [`guarantees_completion`].
    pub fn guarantees_completion(&self) -> bool {
        guarantees_completion(self.algorithm)
    }

    /// When the network is healed: `faults_until`, or the start when there are
    /// no faults; `None` when faults last forever.
    pub fn heal_time(&self) -> Option<Instant> {
        if self.faults.is_none() {
            Some(Instant::ZERO)
        } else {
            self.faults.faults_until
        }
    }

    /// The time the sender's NIC needs to put every data frame of the run on
    /// the wire once (once per receiver for iterative, which unicasts a copy
    /// to each): no run can complete sooner, whatever its protocol.
    pub fn wire_time(&self) -> Duration {
        let frame_bytes: u64 = (0..self.messages)
            .flat_map(|i| fragments(self.message_len(i), self.max_payload))
            .map(|(_, len, _)| (mcast_wire::ETH_HEADER_LEN + mcast_wire::HEADER_LEN + len) as u64)
            .sum();
        let copies = if self.algorithm == Algorithm::Iterative {
            u64::from(self.receivers)
        } else {
            1
        };
        let bits = u128::from(frame_bytes * copies) * 8;
        let ns = (bits * 1_000_000_000).div_ceil(u128::from(self.link.bandwidth_bps.max(1)));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// When the application has offered its last message (zero in saturation).
    pub fn last_offer_time(&self) -> Instant {
        match self.messages_per_sec {
            Some(rate) if self.messages > 0 => offer_time(self.messages - 1, rate),
            _ => Instant::ZERO,
        }
    }

    /// The arguments of `mcast-bench run` that rebuild this config:
    /// `--algo` and `--seed`, then every parameter that differs from its
    /// default. [`SimConfig::parse_args`] is the inverse.
    pub fn replay_args(&self) -> String {
        let d = SimConfig::default();
        let mut s = format!("--algo {} --seed {}", self.algorithm, self.seed);
        macro_rules! opt {
            ($flag:literal, $field:expr, $default:expr) => {
                if $field != $default {
                    let _ = write!(s, concat!(" --", $flag, " {}"), $field);
                }
            };
        }
        opt!("receivers", self.receivers, d.receivers);
        opt!("messages", self.messages, d.messages);
        opt!("min-size", self.min_size, d.min_size);
        opt!("max-size", self.max_size, d.max_size);
        opt!("max-payload", self.max_payload, d.max_payload);
        opt!("window-frames", self.window_frames, d.window_frames);
        opt!("initial-seq", self.initial_seq, d.initial_seq);
        opt!("group", self.group, d.group);
        opt!(
            "bandwidth-bps",
            self.link.bandwidth_bps,
            d.link.bandwidth_bps
        );
        opt!(
            "latency-ns",
            nanos(self.link.latency),
            nanos(d.link.latency)
        );
        opt!("jitter-ns", nanos(self.link.jitter), nanos(d.link.jitter));
        opt!(
            "tx-queue-ns",
            nanos(self.link.tx_queue),
            nanos(d.link.tx_queue)
        );
        opt!("loss", self.faults.loss, d.faults.loss);
        for (node, p) in &self.faults.per_receiver_loss {
            let _ = write!(s, " --loss-at {node}={p}");
        }
        opt!("duplicate", self.faults.duplicate, d.faults.duplicate);
        opt!("corrupt", self.faults.corrupt, d.faults.corrupt);
        for p in &self.faults.partitions {
            let _ = write!(s, " --partition {}:{}:{}", p.node, p.from.0, p.until.0);
        }
        if let Some(t) = self.faults.faults_until {
            let _ = write!(s, " --faults-until-ns {}", t.0);
        }
        if let Some(r) = self.messages_per_sec {
            let _ = write!(s, " --rate {r}");
        }
        opt!(
            "liveness-bound-ns",
            nanos(self.liveness_bound),
            nanos(d.liveness_bound)
        );
        opt!(
            "max-virtual-time-ns",
            nanos(self.max_virtual_time),
            nanos(d.max_virtual_time)
        );
        opt!("max-steps", self.max_steps, d.max_steps);
        opt!("trace-lines", self.trace_lines, d.trace_lines);
        opt!("batch", self.batch, d.batch);
        opt!("tree-root", self.tree_root, d.tree_root);
        if let Some(r) = self.retree {
            let _ = write!(s, " --retree {}@{}+{}", r.node, r.at.0, nanos(r.spread));
        }
        for (node, extra) in &self.receiver_latency {
            let _ = write!(s, " --latency-at {node}={}", nanos(*extra));
        }
        let mut protocol = self.protocol;
        opt!(
            "tree-fanout",
            protocol.mak.tree_fanout,
            d.protocol.mak.tree_fanout
        );
        protocol.mak.tree_fanout = d.protocol.mak.tree_fanout;
        opt!(
            "tree-max-depth",
            protocol.mak.tree_max_depth,
            d.protocol.mak.tree_max_depth
        );
        protocol.mak.tree_max_depth = d.protocol.mak.tree_max_depth;
        if protocol.mak.near_repairs != d.protocol.mak.near_repairs {
            let _ = write!(s, " --near-repairs {}", on_off(protocol.mak.near_repairs));
            protocol.mak.near_repairs = d.protocol.mak.near_repairs;
        }
        if protocol.mak.tail == TailPolicy::AckLast {
            s.push_str(" --tail ack-last");
            protocol.mak.tail = d.protocol.mak.tail;
        }
        if protocol != d.protocol {
            // The protocol's tuning has no flags (yet): say so rather than
            // print a command that silently replays something else.
            let _ = write!(
                s,
                " # with a non-default ProtocolConfig: {:?}",
                self.protocol
            );
        }
        s
    }

    /// The whole shell command that replays this run.
    pub fn replay_command(&self) -> String {
        format!(
            "cargo run --release -p mcast-bench -- run {}",
            self.replay_args()
        )
    }

    /// Parses the arguments [`SimConfig::replay_args`] writes (flag then value,
    /// each its own item) into a config, starting from the defaults. For the
    /// bench's command line, so a printed replay command rebuilds the run.
    pub fn parse_args<I, S>(args: I) -> Result<SimConfig, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        fn num<T: core::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: cannot parse {v:?} as a number"))
        }
        let mut cfg = SimConfig::default();
        let mut it = args.into_iter();
        while let Some(flag) = it.next() {
            let flag = flag.as_ref();
            if flag == "#" {
                return Err("a non-default ProtocolConfig cannot be given as flags".into());
            }
            let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let v = value.as_ref();
            let ns = |v: &str| num::<u64>(flag, v).map(Duration::from_nanos);
            match flag {
                "--algo" => cfg.algorithm = v.parse()?,
                "--seed" => cfg.seed = num(flag, v)?,
                "--receivers" => cfg.receivers = num(flag, v)?,
                "--messages" => cfg.messages = num(flag, v)?,
                "--min-size" => cfg.min_size = num(flag, v)?,
                "--max-size" => cfg.max_size = num(flag, v)?,
                "--max-payload" => cfg.max_payload = num(flag, v)?,
                "--window-frames" => cfg.window_frames = num(flag, v)?,
                "--initial-seq" => cfg.initial_seq = num(flag, v)?,
                "--group" => cfg.group = num(flag, v)?,
                "--bandwidth-bps" => cfg.link.bandwidth_bps = num(flag, v)?,
                "--latency-ns" => cfg.link.latency = ns(v)?,
                "--jitter-ns" => cfg.link.jitter = ns(v)?,
                "--tx-queue-ns" => cfg.link.tx_queue = ns(v)?,
                "--loss" => cfg.faults.loss = num(flag, v)?,
                "--loss-at" => {
                    let (n, p) = v
                        .split_once('=')
                        .ok_or_else(|| format!("{flag}: expected NODE=PROBABILITY, got {v:?}"))?;
                    cfg.faults
                        .per_receiver_loss
                        .push((num(flag, n)?, num(flag, p)?));
                }
                "--duplicate" => cfg.faults.duplicate = num(flag, v)?,
                "--corrupt" => cfg.faults.corrupt = num(flag, v)?,
                "--partition" => {
                    let parts: Vec<&str> = v.split(':').collect();
                    let [n, from, until] = parts[..] else {
                        return Err(format!("{flag}: expected NODE:FROM_NS:UNTIL_NS, got {v:?}"));
                    };
                    cfg.faults.partitions.push(Partition {
                        node: num(flag, n)?,
                        from: Instant(num(flag, from)?),
                        until: Instant(num(flag, until)?),
                    });
                }
                "--faults-until-ns" => cfg.faults.faults_until = Some(Instant(num(flag, v)?)),
                "--rate" => cfg.messages_per_sec = Some(num(flag, v)?),
                "--liveness-bound-ns" => cfg.liveness_bound = ns(v)?,
                "--max-virtual-time-ns" => cfg.max_virtual_time = ns(v)?,
                "--max-steps" => cfg.max_steps = num(flag, v)?,
                "--trace-lines" => cfg.trace_lines = num(flag, v)?,
                "--batch" => {
                    cfg.batch = v
                        .parse()
                        .map_err(|_| format!("{flag}: expected true or false, got {v:?}"))?;
                }
                "--tail" => {
                    cfg.protocol.mak.tail = match v {
                        "advertise" => TailPolicy::ADVERTISE,
                        "ack-last" => TailPolicy::AckLast,
                        _ => {
                            return Err(format!(
                                "{flag}: expected advertise or ack-last, got {v:?}"
                            ))
                        }
                    }
                }
                "--tree-fanout" => cfg.protocol.mak.tree_fanout = num(flag, v)?,
                "--tree-root" => cfg.tree_root = num(flag, v)?,
                "--retree" => {
                    let bad = || format!("{flag}: expected NODE@AT_NS+SPREAD_NS, got {v:?}");
                    let (node, rest) = v.split_once('@').ok_or_else(bad)?;
                    let (at, spread) = rest.split_once('+').ok_or_else(bad)?;
                    cfg.retree = Some(Retree {
                        node: num(flag, node)?,
                        at: Instant(num(flag, at)?),
                        spread: Duration::from_nanos(num(flag, spread)?),
                    });
                }
                "--tree-max-depth" => cfg.protocol.mak.tree_max_depth = num(flag, v)?,
                "--near-repairs" => {
                    cfg.protocol.mak.near_repairs = match v {
                        "on" => true,
                        "off" => false,
                        _ => return Err(format!("{flag}: expected on or off, got {v:?}")),
                    }
                }
                "--latency-at" => {
                    let (n, ns) = v
                        .split_once('=')
                        .ok_or_else(|| format!("{flag}: expected NODE=NANOSECONDS, got {v:?}"))?;
                    cfg.receiver_latency
                        .push((num(flag, n)?, Duration::from_nanos(num(flag, ns)?)));
                }
                other => return Err(format!("unknown simulator flag {other:?}")),
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks that the config describes a run the simulator can perform.
    pub fn validate(&self) -> Result<(), String> {
        if self.receivers == 0 {
            return Err("at least one receiver is needed".into());
        }
        if self.min_size > self.max_size {
            return Err(format!(
                "min_size {} exceeds max_size {}",
                self.min_size, self.max_size
            ));
        }
        if self.max_payload == 0 || self.max_payload > usize::from(u16::MAX) {
            return Err(format!(
                "max_payload {} is not in 1..=65535",
                self.max_payload
            ));
        }
        if self.link.bandwidth_bps == 0 {
            return Err("bandwidth_bps must be positive".into());
        }
        if self.messages_per_sec == Some(0) {
            return Err("messages_per_sec must be positive".into());
        }
        let prob = |name: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(format!("{name} {p} is not a probability"))
            }
        };
        prob("loss", self.faults.loss)?;
        prob("duplicate", self.faults.duplicate)?;
        prob("corrupt", self.faults.corrupt)?;
        if !(1..=self.receivers + 1).contains(&self.tree_root) {
            return Err(format!(
                "tree root {} is not a node (1 is the sender, 2..={} the receivers)",
                self.tree_root,
                self.receivers + 1
            ));
        }
        if let Some(r) = self.retree {
            if self.protocol.mak.tree_fanout == 0 || self.algorithm != Algorithm::Mak {
                return Err(
                    "a re-parenting (--retree) needs MAK with a tree (--tree-fanout)".into(),
                );
            }
            if !(1..=self.receivers + 1).contains(&r.node) {
                return Err(format!(
                    "re-parented node {} is not a node (1 is the sender, 2..={} the receivers)",
                    r.node,
                    self.receivers + 1
                ));
            }
        }
        for &(node, _) in &self.receiver_latency {
            if !(2..=self.receivers + 1).contains(&node) {
                return Err(format!(
                    "latency given for node {node}, which is not a receiver"
                ));
            }
        }
        for &(node, p) in &self.faults.per_receiver_loss {
            prob("per-receiver loss", p)?;
            if !(2..=self.receivers + 1).contains(&node) {
                return Err(format!(
                    "loss given for node {node}, which is not a receiver"
                ));
            }
        }
        Ok(())
    }
}

/// When message `i` becomes available at `rate` messages a second.
pub(crate) fn offer_time(i: u64, rate: u64) -> Instant {
    Instant((u128::from(i) * 1_000_000_000 / u128::from(rate)) as u64)
}

/// A switch as its flag spells it.
fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_args_roundtrip_through_parse_args() {
        for seed in 0..200 {
            for algo in Algorithm::ALL {
                let cfg = SimConfig::random(seed, algo);
                let args = cfg.replay_args();
                let parsed = SimConfig::parse_args(args.split(' ')).unwrap();
                assert_eq!(parsed, cfg, "{args}");
            }
        }
        assert_eq!(
            SimConfig::default().replay_args(),
            "--algo mak --seed 0",
            "defaults are left out"
        );
    }

    #[test]
    fn batching_replays_with_its_flag() {
        let cfg = SimConfig::random_batched(7, Algorithm::Mak);
        let args = cfg.replay_args();
        assert!(args.contains(" --batch true"), "{args}");
        assert_eq!(SimConfig::parse_args(args.split(' ')).unwrap(), cfg);
        assert!(!SimConfig::random(7, Algorithm::Mak)
            .replay_args()
            .contains("batch"));
        assert!(SimConfig::parse_args(["--batch", "yes"]).is_err());
    }

    #[test]
    fn random_batched_configs_mix_small_and_fragmented_messages() {
        let (mut small, mut mixed) = (0, 0);
        for seed in 0..200 {
            for algo in Algorithm::ALL {
                let cfg = SimConfig::random_batched(seed, algo);
                assert!(cfg.batch && cfg.validate().is_ok());
                assert_eq!(
                    SimConfig::parse_args(cfg.replay_args().split(' ')).unwrap(),
                    cfg
                );
                if algo == Algorithm::Nak {
                    assert!(u64::from(cfg.window_frames) >= cfg.total_frames());
                }
                if cfg.max_size > cfg.max_payload {
                    mixed += 1;
                } else {
                    small += 1;
                }
            }
            // The unbatched sweep's configs stay what they were.
            let plain = SimConfig::random(seed, Algorithm::Mak);
            assert!(!plain.batch);
        }
        assert!(small > 200 && mixed > 200, "{small} small, {mixed} mixed");
    }

    #[test]
    fn random_nak_configs_have_room_for_the_whole_run() {
        for seed in 0..50 {
            let cfg = SimConfig::random(seed, Algorithm::Nak);
            assert!(u64::from(cfg.window_frames) >= cfg.total_frames());
            assert!(cfg.heal_time().is_some());
        }
    }

    #[test]
    fn bad_configs_are_refused() {
        assert!(SimConfig::parse_args(["--receivers", "0"]).is_err());
        assert!(SimConfig::parse_args(["--loss", "1.5"]).is_err());
        assert!(SimConfig::parse_args(["--bogus", "1"]).is_err());
        assert!(SimConfig::parse_args(["--loss-at", "9=0.1"]).is_err());
    }
}
