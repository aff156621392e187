//! `mcast-bench`: runs the engine's protocols and says what happened.
//!
//! Four scenarios run in the deterministic simulator (`mcast-sim`):
//! `demo` tells one lossy multicast step by step, `run` performs (or replays)
//! one seeded run, `sweep` checks thousands of seeds with random faults, and
//! `table` prints the MAK-versus-plain-NAK scaling table. `xdp` is the one
//! real-kernel scenario: AF_XDP across network namespaces (needs root); so
//! is most of `paper`. Both remove their namespaces when interrupted (SIGINT
//! or SIGTERM: see [`clean_up_on_signals`]). Wall time is read here, in the
//! binary, never in the protocol core.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mcast_sim::{Algorithm, SimConfig};

mod auth;
mod batch;
mod bcast;
mod bcast_xdp;
mod demo;
mod hops;
mod host;
mod order;
mod paper;
mod path;
mod queues;
mod soak;
mod sweep;
mod table;
mod toc;
mod total;
mod xdp;

#[derive(Parser, Debug)]
#[command(
    name = "mcast-bench",
    version,
    about = "Measure the reliable-multicast protocols (MAK, ACK, NAK, iterative, Go-Back-N)",
    long_about = "Measure the reliable-multicast protocols.\n\n\
        `demo`, `run`, `sweep` and `table` run in the deterministic network simulator: \
        virtual time, real frame bytes (CRC32C-checked), one seed for every random choice, \
        and checkers after every step (in order, exactly once, intact, bounded memory, \
        liveness after the faults stop); a failing run prints the command that replays it. \
        `xdp` runs over real AF_XDP in network namespaces it creates (root).",
    after_help = "Examples:\n  \
        mcast-bench demo\n  \
        mcast-bench run --algo mak --receivers 64 --loss 0.01 --messages 10000\n  \
        mcast-bench sweep --seeds 1000 [--batch]\n  \
        mcast-bench table --receivers 1,8,64,512 --loss 0,0.01,0.05\n  \
        mcast-bench xdp --json xdp.json          # as root\n  \
        mcast-bench path --receivers 1,4 --loss 0,0.01   # as root, mcastd built beside it\n  \
        mcast-bench order --receivers 3             # as root: the sequenced mode's cost\n  \
        mcast-bench total --senders 4               # as root: total order against fifo and the sequencer\n  \
        mcast-bench bcast --members 6,64 --sizes 1K,16M  # broadcast without multicast, simulated\n  \
        mcast-bench bcast-xdp --nodes 6          # as root: the same through mcastd, multicast dropped\n  \
        mcast-bench paper --out target/bench-paper  # as root"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What `total` and `queues` share: the messages, the pacing, the loss, the
/// daemons' extra settings and the JSON output.
#[derive(clap::Args, Debug)]
struct ClusterRun {
    /// Message size (24 to 8,192 bytes).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Messages per publisher per goodput run.
    #[arg(long, default_value_t = 50_000)]
    messages: u64,
    /// Cluster starts per mode (the modes, or the arms, alternate).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Messages/s per publisher in the paced latency runs.
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Messages per publisher per paced latency run.
    #[arg(long, default_value_t = 10_000)]
    paced_messages: u64,
    /// Loss on the segment once the group has formed: a fraction of every frame copy, every
    /// kind, both directions, dropped by the bridge (0.01 = 1 %).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// A line added to every node's mcastd.toml, e.g. "beacon_us = 50" (repeatable), to
    /// try a setting; the defaults are what users get.
    #[arg(long, value_name = "TOML_LINE")]
    daemon_config: Vec<String>,
    /// Also write every start's figures to this JSON file.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
}

impl ClusterRun {
    fn config(self, senders: usize, stats_dir: Option<std::path::PathBuf>) -> total::TotalConfig {
        total::TotalConfig {
            senders,
            size: self.size,
            messages: self.messages,
            repeat: self.repeat,
            rate: self.rate,
            paced_messages: self.paced_messages,
            daemon_config: self.daemon_config,
            loss: self.loss,
            stats_dir,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// A simulated multicast with loss, told step by step: 1 sender, 8 receivers, 2% loss.
    Demo {
        /// Receivers in the group.
        #[arg(long, default_value_t = 8)]
        receivers: u32,
        /// Independent loss probability on every frame copy, each direction.
        #[arg(long, default_value_t = 0.02)]
        loss: f64,
        /// Messages to send (64 B to 4 KiB: the larger ones are fragmented).
        #[arg(long, default_value_t = 2000)]
        messages: u64,
        /// Trace lines to show.
        #[arg(long, default_value_t = 30)]
        trace: usize,
        /// The seed of every random choice.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// One seeded simulator run; `run --algo mak --seed 7 ...` is also what a failing run prints to replay it.
    #[command(after_help = SIM_FLAGS)]
    Run {
        /// Simulator flags (see below), each followed by its value.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "FLAG VALUE"
        )]
        args: Vec<String>,
    },
    /// Many seeds, every algorithm, random faults (loss, duplication, reordering, corruption, partitions).
    Sweep {
        /// How many seeds.
        #[arg(long, default_value_t = 1000)]
        seeds: u64,
        /// The first seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Only this algorithm (mak, ack, nak, iterative); default: all four in turn.
        #[arg(long)]
        algo: Option<Algorithm>,
        /// Worker threads (default: the number of CPUs).
        #[arg(long)]
        jobs: Option<usize>,
        /// Batching runs: mostly small messages (some fragmented) packed into shared frames;
        /// a failure's replay command carries `--batch true`.
        #[arg(long)]
        batch: bool,
    },
    /// MAK beside plain NAK as the group grows: repairs, NAKs and ACKs per lost frame, completion time.
    Table {
        /// Group sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64,512")]
        receivers: Vec<u32>,
        /// Loss probabilities, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "0,0.01,0.05")]
        loss: Vec<f64>,
        /// Messages per run (64 bytes each).
        #[arg(long, default_value_t = 10_000)]
        messages: u64,
        /// Algorithms, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "mak,nak")]
        algos: Vec<Algorithm>,
        /// The seed of every run.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The window (frames) of the MAK runs; plain NAK always gets the whole run, since it never frees.
        #[arg(long, default_value_t = table::TABLE_WINDOW)]
        window_frames: u32,
    },
    /// Real kernel, needs root: AF_XDP across network namespaces (1 sender, 3 receivers on a
    /// bridge). Raw multicast and unicast blasts, MAK and GBN at 0% and 1% loss, their ratios,
    /// and one-way latency percentiles at fixed offered rates.
    Xdp {
        /// Messages (1 KiB each) per throughput run; 8 runs in all (the default takes about a minute on 2 vCPUs).
        #[arg(long, default_value_t = 200_000)]
        messages: usize,
        /// Messages per latency run (3 runs: 10,000/s, then 5,000/s twice).
        #[arg(long, default_value_t = 20_000)]
        latency_messages: usize,
        /// Also write the results, each with its environment, to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
    },
    /// Real kernel, needs root: the user's path, client library -> mcastd -> AF_XDP -> mcastd ->
    /// client, with R subscribers on R nodes and loss injected on the segment (every frame kind,
    /// both directions, by the bridge); beside it, in the same run and on the same topology and
    /// loss, the engine alone (MAK) and the raw blast, so each layer's cost is a ratio. Needs
    /// mcastd built beside mcast-bench (`cargo build --release -p mcast-cli -p mcast-bench`).
    Path {
        /// Receiver counts, comma-separated (1 to 16; one subscriber node each).
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        receivers: Vec<usize>,
        /// Loss on the segment, comma-separated fractions (0.01 = 1 % of every frame copy).
        #[arg(long, value_delimiter = ',', default_value = "0,0.01")]
        loss: Vec<f64>,
        /// Bytes per message (16 to 8,192).
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Messages per run.
        #[arg(long, default_value_t = 50_000)]
        messages: u64,
        /// Runs per cell (medians and the spread are reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Only through mcastd: skip the engine-alone and blast runs.
        #[arg(long)]
        daemon_only: bool,
        /// A line added to every node's mcastd.toml, e.g. "window_frames = 4096" (repeatable), to
        /// try a setting; the defaults are what users get.
        #[arg(long, value_name = "TOML_LINE")]
        daemon_config: Vec<String>,
        /// Also write every run to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
    },
    /// Real kernel, needs root: what frame authentication costs through mcastd. Starts the
    /// same cluster (1 publisher, R subscriber nodes) again and again, alternately with a
    /// cluster key and with `insecure = true`, and measures goodput at each message size and
    /// the one-way latency of paced messages; prints keyed/insecure ratios (issue 23's targets:
    /// goodput >= 0.9x, p50 added <= 2 µs). Needs mcastd built beside mcast-bench.
    Auth {
        /// Subscriber nodes.
        #[arg(long, default_value_t = 1)]
        receivers: usize,
        /// Message sizes, comma-separated (16 to 8,192 bytes).
        #[arg(long, value_delimiter = ',', default_value = "64,1024")]
        sizes: Vec<usize>,
        /// Messages per goodput run (a run of 50,000 at 1 KiB lasts a tenth of a second:
        /// too short to tell a 10 % difference on a noisy host).
        #[arg(long, default_value_t = 1_000_000)]
        messages: u64,
        /// Cluster starts per mode (keyed and insecure alternate).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Rate of the paced latency runs, messages/s.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// Messages per paced latency run.
        #[arg(long, default_value_t = 10_000)]
        paced_messages: u64,
        /// Also write every run to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
    },
    /// Real kernel, needs root: what batching small messages into shared frames gives users,
    /// through mcastd. Starts the same cluster (1 publisher, R subscriber nodes) again and again,
    /// alternately with the default `batch = true` and with `batch = false` (one message per
    /// frame), and measures at each size goodput lossless and at --loss on the segment, messages
    /// per frame, and the one-way latency of paced messages; prints on/off ratios (issue 25's
    /// targets: 64 B >= 15 per frame in saturation, at 1 % loss >= 0.8x lossless, 1 KiB and
    /// paced latency no worse). Needs mcastd built beside mcast-bench.
    Batch {
        /// Subscriber node counts, comma-separated (1 to 6).
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        receivers: Vec<usize>,
        /// Message sizes, comma-separated (16 to 8,192 bytes).
        #[arg(long, value_delimiter = ',', default_value = "64,1024")]
        sizes: Vec<usize>,
        /// Loss on the segment (every frame kind, both directions) for the second goodput run.
        #[arg(long, default_value_t = 0.01)]
        loss: f64,
        /// Messages per goodput run.
        #[arg(long, default_value_t = 500_000)]
        messages: u64,
        /// Cluster starts per mode (on and off alternate).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Rate of the paced latency runs, messages/s.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// Messages per paced latency run.
        #[arg(long, default_value_t = 10_000)]
        paced_messages: u64,
        /// Also write every run to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
        /// A line added to every daemon's configuration in both modes, e.g.
        /// 'tree_fanout = 2' to measure the path with the feedback tree.
        #[arg(long, value_name = "LINE")]
        daemon_config: Option<String>,
    },
    /// Real kernel, needs root: what one order costs when every member sends (issue 20).
    /// Starts a cluster of S nodes, each with a publisher and a subscriber, again and again,
    /// alternately with `mode = "fifo"`, `mode = "total"` (one order from timestamps, no
    /// sequencer) and `mode = "sequenced"` (the fixed sequencer: every message through the
    /// root); measures all senders' goodput at the slowest subscriber (every message checked,
    /// and in the ordered modes every subscriber's whole sequence the same) and the one-way
    /// latency of paced messages (p50, p99, p99.9); prints total/fifo and total/sequenced.
    /// Needs mcastd built beside mcast-bench.
    Total {
        /// Nodes (2 to 6), each with a publisher and a subscriber.
        #[arg(long, default_value_t = 4)]
        senders: usize,
        #[command(flatten)]
        run: ClusterRun,
        /// Also write every node's `mcast stat --json` after each start's goodput phase and
        /// after its paced phase into this directory, as MODE-START-PHASE-nodeN.json (GRTT,
        /// retransmissions, what the kernel dropped...), and every paced message's latency at
        /// each subscriber as MODE-START-paced-latency-nodeN.txt (when it was sent, its latency,
        /// its publisher: where in the phase the slow ones were).
        #[arg(long, value_name = "DIR")]
        stats_dir: Option<std::path::PathBuf>,
    },
    /// Real kernel, needs root: what serving several NIC queues gives through mcastd. The
    /// cluster of `total` (every node a publisher and a subscriber, one FIFO group) on veths
    /// with QUEUES queues, started again and again, alternately with every daemon serving one
    /// queue (all frames on queue 0) and all of them (the bridge spreads frames over the
    /// queues by the CPU they were sent from, each daemon pinned to its own CPU, as a NIC's
    /// RSS spreads flows); native XDP in both. Measures goodput, paced latency and the share of
    /// frames through the extra queues' threads; prints all/1 ratios. Needs mcastd built beside
    /// mcast-bench, and 2 CPUs or more.
    Queues {
        /// RX queues per veth (2 to 8).
        #[arg(long, default_value_t = 2)]
        queues: u32,
        /// Nodes (2 to 6), each with a publisher and a subscriber.
        #[arg(long, default_value_t = 3)]
        senders: usize,
        #[command(flatten)]
        run: ClusterRun,
    },
    /// Real kernel, needs root: what one order for every member costs through mcastd. Starts
    /// the same cluster (R subscriber nodes, the first of them the group's root, and a publisher
    /// on one more node) again and again, alternately with `mode = "fifo"` and `mode =
    /// "sequenced"` (every message through the root of the group's tree), and measures goodput
    /// and the one-way latency of paced messages; prints sequenced/fifo ratios. Needs mcastd
    /// built beside mcast-bench.
    Order {
        /// Subscriber nodes (1 to 5); the publisher's node is one more.
        #[arg(long, default_value_t = 3)]
        receivers: usize,
        /// Message size (16 to 8,192 bytes).
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Messages per goodput run.
        #[arg(long, default_value_t = 300_000)]
        messages: u64,
        /// Cluster starts per mode (the modes, or the arms, alternate).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Rate of the paced latency runs, messages/s.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// Messages per paced latency run.
        #[arg(long, default_value_t = 10_000)]
        paced_messages: u64,
        /// Also write every run to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
    },
    /// Real kernel, needs root: where a message's microseconds go through mcastd (docs/mcastd.md
    /// "Where the time goes"). Starts the same cluster (a publisher on node 1, a subscriber on
    /// each other node) again and again, alternately with `trace = false` and `trace = true`;
    /// each start paces messages and measures their one-way latency, the traced ones also each
    /// hop (publish → taken → sent → received → ring → read: p50 and p99 from every daemon's
    /// `mcast stat` and every subscriber), then goodput. Prints the breakdown, and what tracing
    /// costs as traced/plain ratios. Needs mcastd built beside mcast-bench.
    Hops {
        /// Subscriber node counts to run (1 to 5 each).
        #[arg(long, value_delimiter = ',', default_value = "1,4")]
        receivers: Vec<usize>,
        /// Loss fractions injected on the segment after the group forms (every frame kind,
        /// both directions), e.g. 0,0.01.
        #[arg(long, value_delimiter = ',', default_value = "0")]
        loss: Vec<f64>,
        /// Message size (16 to 8,192 bytes).
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Rate of the paced runs, messages/s.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// Messages per paced run.
        #[arg(long, default_value_t = 10_000)]
        paced_messages: u64,
        /// Messages per goodput run (after the paced one).
        #[arg(long, default_value_t = 100_000)]
        messages: u64,
        /// Cluster starts per setting (trace off and on alternate).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Also write every start to this JSON file.
        #[arg(long, value_name = "FILE")]
        json: Option<String>,
        /// A line added to every daemon's configuration (repeatable), e.g. 'spin_us = 0' to
        /// see what a setting does to each hop.
        #[arg(long, value_name = "LINE")]
        daemon_config: Vec<String>,
    },
    /// Seed 002's evaluation (Figures 1 and 2) in virtual time: the daemon's own group modes
    /// (fifo, total, total with commit, sequenced), unchanged, on a modelled switch (10 Gb/s
    /// ports, 1.5 µs port to port, 0.5 µs of CPU per frame, MAK's repairs modelled). Figure 1:
    /// the group's throughput as processes grow to 512, each multicasting as fast as it may.
    /// Figure 1b: latency as processes grow, paced. Figure 2: latency against loss, paced.
    /// Figure 3: a process crashes; when the survivors' total-order modes report it silent to the
    /// failure detector, in beacon intervals. Every run checks that every process delivered
    /// every message once, in each sender's order, and in an ordered mode in one order
    /// everywhere. Writes toc.txt, toc.json and SVG charts into --out.
    Toc {
        /// Process counts of Figure 1.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "2,4,8,16,32,64,128,256,512"
        )]
        nodes: Vec<u32>,
        /// Messages in all per Figure 1 run (split over the processes, at least 4 each).
        #[arg(long, default_value_t = 4096)]
        messages: u64,
        /// Loss rates of Figure 2 (each copy, every frame kind).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "0,0.00001,0.0001,0.001,0.01"
        )]
        loss: Vec<f64>,
        /// Processes of Figure 2 (from 128 on, total order's beacons alone load every node:
        /// see Figure 1b).
        #[arg(long, default_value_t = 64)]
        loss_nodes: u32,
        /// Process counts of Figure 1b (paced latency; with commit it collapses from 256 on,
        /// and 512 runs for many minutes).
        #[arg(long, value_delimiter = ',', default_value = "2,8,32,64,128,256")]
        latency_nodes: Vec<u32>,
        /// Process counts of Figure 3 (one crashes; beacon intervals of 25 to 200 µs).
        #[arg(long, value_delimiter = ',', default_value = "8,64")]
        crash_nodes: Vec<u32>,
        /// The total-order groups' beacon interval in Figures 1, 1b and 2 (mcastd's `beacon_us`;
        /// the default is the daemon's).
        #[arg(long, default_value_t = mcast_cli::daemon::mode::total::DEFAULT_BEACON_NS / 1_000)]
        beacon_us: u64,
        /// Messages/s each process sends in Figure 2.
        #[arg(long, default_value_t = 1000)]
        rate: u64,
        /// Messages each process sends in a paced run (Figures 1b and 2; at 1,000/s, 20 are
        /// 20 ms, which at 256 processes and more is mostly the start: the trees and the
        /// claims settle in the first milliseconds).
        #[arg(long, default_value_t = 20)]
        paced_messages: u64,
        /// Seeds per point (the median is reported, Figure 1 also the spread).
        #[arg(long, default_value_t = 3)]
        seeds: u64,
        /// The output folder.
        #[arg(long, default_value = "target/bench-toc")]
        out: std::path::PathBuf,
    },
    /// Seed 003 without multicast: the broadcast algorithms (iterative, the naive and the
    /// conflict-free hypercube, MST, RSbcast, the chain pipeline, 1-D and 2-D scatter-collect) on
    /// the simulator's topology mode, each member on its own switch of an r x c mesh (XY routing)
    /// or all on one switch. For each group size and message size: completion time against the
    /// alpha-beta model, link conflicts, and what `auto` chooses. Exits non-zero when a claim of
    /// the seed does not hold (conflict-free runs within 10 % of the model, RSbcast without
    /// conflicts, the naive hypercube with them, auto within 10 % of the best).
    Bcast {
        /// Group sizes, comma-separated (2 or more each).
        #[arg(long, value_delimiter = ',', default_value = "4,6,16,64,100,256,1024")]
        members: Vec<u32>,
        /// Message sizes, comma-separated: bytes, or with K, M or G (powers of 1024).
        #[arg(long, value_delimiter = ',', default_value = "64,1K,16K,256K,4M,64M")]
        sizes: Vec<String>,
        /// The fabric.
        #[arg(long, value_enum, default_value_t = bcast::FabricKind::Mesh)]
        fabric: bcast::FabricKind,
        /// alpha: the start-up cost of one transfer, microseconds.
        #[arg(long, default_value_t = 10.0)]
        alpha_us: f64,
        /// beta: nanoseconds per byte (1.0 is 1 GB/s; 0.8 is 10 Gbit/s).
        #[arg(long, default_value_t = 0.8)]
        beta_ns: f64,
        /// Also write every cell as JSON here.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
    },
    /// Real kernel, needs root: seed 003's broadcasts through mcastd over AF_XDP on a segment
    /// that drops multicast, against the iterative baseline (Go-Back-N to each member) in the
    /// same run. One group per algorithm; node 1 publishes one message at a time, the algorithms
    /// taking turns; completion = the last subscriber has it whole. Medians [p10-p90], speed-ups,
    /// where the curves cross, and the model's speed-ups with alpha and beta fitted from the
    /// baseline's times.
    BcastXdp {
        /// Daemons, the publisher's included (3 to 16).
        #[arg(long, default_value_t = 6)]
        nodes: usize,
        /// Message sizes, comma-separated: bytes, or with K or M.
        #[arg(long, value_delimiter = ',', default_value = "1K,16K,256K,1M,4M,16M")]
        sizes: Vec<String>,
        /// Messages per algorithm and size (fewer for large sizes: at most --budget each, at least 3).
        #[arg(long, default_value_t = 100)]
        trials: usize,
        /// Bytes per algorithm and size at most (with K, M or G).
        #[arg(long, default_value = "256M")]
        budget: String,
        /// Cap every node's link at this tc rate in each direction (e.g. 200mbit): the network,
        /// not the host's two CPUs, is then what the algorithms share, as in seed 003's model.
        #[arg(long)]
        link_rate: Option<String>,
        /// Also write the figures as JSON here.
        #[arg(long)]
        json: Option<String>,
    },
    /// Seed 000 §4's comparison (Figures 8-10): iterative, ACK, NAK and MAK to 1..6 receivers at
    /// 512 and 1,024 B, plus Go-Back-N and the raw blast, over the simulator and AF_XDP (root),
    /// send-and-wait, echo round-trip, offered-rate and saturation modes. Writes a table, JSON,
    /// .hgrm percentile distributions, .hlog interval logs and SVG plots into --out.
    Paper {
        /// The output folder.
        #[arg(long, default_value = "target/bench-paper")]
        out: std::path::PathBuf,
        /// A smaller grid (1 and 6 receivers, fewer messages): about a minute.
        #[arg(long)]
        quick: bool,
        /// Backends, comma-separated: sim, xdp (xdp needs root).
        #[arg(long, value_delimiter = ',', default_value = "sim,xdp")]
        backends: Vec<paper::Backend>,
        /// Modes, comma-separated: pingpong (the paper's send-and-wait), echo (the last receiver
        /// replies to each message; the round trip), rate, saturation.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "pingpong,echo,rate,saturation"
        )]
        modes: Vec<paper::ModeKind>,
        /// Receiver counts, comma-separated (default 1,2,4,6 as in the paper; --quick: 1,6).
        #[arg(long, value_delimiter = ',')]
        receivers: Option<Vec<usize>>,
        /// Message sizes in bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "512,1024")]
        sizes: Vec<usize>,
        /// Messages per send-and-wait and per echo run (default 300; --quick: 100).
        #[arg(long)]
        pingpong_messages: Option<usize>,
        /// Messages per simulated saturation run, and per offered-rate run up to 3 s of load
        /// (default 2000, with --link-rate 300; --quick: 500).
        #[arg(long)]
        messages: Option<usize>,
        /// Messages per saturation run over AF_XDP (default 20000, with --link-rate 300; --quick:
        /// 5000). Plain NAK's sender never frees, so its runs hold the whole run in the window:
        /// each engine gets a UMEM of (messages + 4,160) x 2 KiB (47 MiB at 20,000); at most 32,768.
        #[arg(long)]
        xdp_saturation_messages: Option<usize>,
        /// Offered rate, messages per second (default 1000; with --link-rate, 100).
        #[arg(long)]
        rate: Option<u32>,
        /// Offered rate in the simulator, messages per second (its segment runs at 10 Mbit/s).
        #[arg(long, default_value_t = 100)]
        sim_rate: u32,
        /// Cap every namespace link with a tbf qdisc at this tc rate, e.g. 10mbit (the paper's Ethernet).
        #[arg(long)]
        link_rate: Option<String>,
        /// The simulated segment's rate, bit/s (default: the paper's 10 Mbit/s).
        #[arg(long, default_value_t = 10_000_000)]
        sim_bandwidth_bps: u64,
        /// The simulated one-way latency, ns.
        #[arg(long, default_value_t = 10_000)]
        sim_latency_ns: u64,
        /// No progress bar.
        #[arg(long)]
        no_progress: bool,
        /// The longest one AF_XDP protocol run may take, seconds; what was delivered by then counts
        /// (plain NAK never recovers a lost tail, e.g. when a capped link drops).
        #[arg(long, default_value_t = 15)]
        deadline_secs: u64,
    },
    /// The traffic and the checker of scripts/soak.sh: `soak client` (a publisher and/or
    /// subscriber that checks every message it receives), `soak check DIR` (the verdict).
    Soak {
        #[command(subcommand)]
        command: soak::SoakCommand,
    },
}

const SIM_FLAGS: &str = "Simulator flags (defaults in brackets):
  --algo mak|ack|nak|iterative   the algorithm [mak]
  --seed N                       the seed of every random choice [0]
  --receivers N                  receivers; the sender is node 1, receivers 2..=N+1 [3]
  --messages N                   messages to send [100]
  --min-size B / --max-size B    message sizes, uniform in [min, max] bytes [64 / 64]
  --max-payload B                payload bytes per frame; larger messages fragment [1456]
  --window-frames N              the window: sender and receiver buffers [256]
  --initial-seq N                the first sequence number [2^32 - 101: runs cross the wrap]
  --rate N                       offered messages per second [saturation]
  --bandwidth-bps N              each NIC's rate [10 Gbit/s]
  --latency-ns N / --jitter-ns N one-way latency and its random extra (reorders) [10 us / 0]
  --tx-queue-ns N                the most send time a NIC queue holds; beyond it frames wait in the machine [50 us]
  --loss P                       loss probability per frame copy, both directions [0]
  --loss-at NODE=P               a receiver's own loss probability (repeatable)
  --latency-at NODE=NS           a far receiver: extra one-way latency on its link (repeatable)
  --duplicate P / --corrupt P    duplication and corruption probabilities [0 / 0]
  --partition NODE:FROM_NS:UNTIL_NS   cut a node off for a while (repeatable)
  --faults-until-ns T            faults stop at T; the run must then complete in the liveness bound
  --liveness-bound-ns N          [1 s]    --max-virtual-time-ns N [60 s]    --max-steps N
  --trace-lines N                print the first N trace lines [0]
  --batch true|false             pack small whole messages into shared frames, as the engine does [false]
  --tail advertise|ack-last      MAK: an idle sender advertises its position and asks for ACKs once,
                                 or (the paper) every burst's last frame asks for ACKs [advertise]
  --tree-fanout K                MAK: receivers' ACKs climb a feedback tree of fanout K, merged on the
                                 way (docs/protocol.md §3.4); 0: each receiver ACKs the sender [0]
  --tree-max-depth D             the tree is widened until it is at most D levels deep; 0: never [4]
  --near-repairs on|off          MAK with a tree: a receiver asks a tree neighbour first, which repairs
                                 from its copy; off: every NAK goes to the group (docs/protocol.md §3.5) [on]
  --tree-root NODE               the tree's root (mcastd: the group agent) [1, the sender]
  --retree NODE@AT_NS+SPREAD_NS  with a tree: at AT_NS, NODE leaves its place for a new leaf place
                                 (seed 004 §2.2) and each node installs the new tree within SPREAD_NS";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Xdp { .. }
            | Command::Paper { .. }
            | Command::Path { .. }
            | Command::Auth { .. }
            | Command::Batch { .. }
            | Command::Order { .. }
            | Command::Total { .. }
            | Command::Queues { .. }
            | Command::Hops { .. }
    ) {
        if let Err(e) = clean_up_on_signals() {
            eprintln!("mcast-bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result =
        match cli.command {
            Command::Demo {
                receivers,
                loss,
                messages,
                trace,
                seed,
            } => demo::run(receivers, loss, messages, trace, seed),
            Command::Run { args } => run_one(&args),
            Command::Sweep {
                seeds,
                start,
                algo,
                jobs,
                batch,
            } => sweep::run(start, seeds, algo, jobs, batch),
            Command::Table {
                receivers,
                loss,
                messages,
                algos,
                seed,
                window_frames,
            } => table::run(&receivers, &loss, messages, &algos, seed, window_frames),
            Command::Xdp {
                messages,
                latency_messages,
                json,
            } => xdp::run(messages, latency_messages, json.as_deref()),
            Command::Path {
                receivers,
                loss,
                size,
                messages,
                repeat,
                daemon_only,
                daemon_config,
                json,
            } => path::run(
                &path::PathConfig {
                    receivers,
                    loss,
                    size,
                    messages,
                    repeat,
                    layers: !daemon_only,
                    daemon_config,
                },
                json.as_deref(),
            ),
            Command::Auth {
                receivers,
                sizes,
                messages,
                repeat,
                rate,
                paced_messages,
                json,
            } => auth::run(
                &auth::AuthConfig {
                    receivers,
                    sizes,
                    messages,
                    repeat,
                    rate,
                    paced_messages,
                },
                json.as_deref(),
            ),
            Command::Batch {
                receivers,
                sizes,
                loss,
                messages,
                repeat,
                rate,
                paced_messages,
                json,
                daemon_config,
            } => batch::run(
                &batch::BatchConfig {
                    receivers,
                    sizes,
                    loss,
                    messages,
                    repeat,
                    rate,
                    paced_messages,
                    daemon_config: daemon_config.unwrap_or_default(),
                },
                json.as_deref(),
            ),
            Command::Order {
                receivers,
                size,
                messages,
                repeat,
                rate,
                paced_messages,
                json,
            } => order::run(
                &order::OrderConfig {
                    receivers,
                    size,
                    messages,
                    repeat,
                    rate,
                    paced_messages,
                },
                json.as_deref(),
            ),
            Command::Total {
                senders,
                run,
                stats_dir,
            } => {
                let json = run.json.clone();
                total::run(&run.config(senders, stats_dir), json.as_deref())
            }
            Command::Queues {
                queues,
                senders,
                run,
            } => {
                let json = run.json.clone();
                queues::run(&run.config(senders, None), queues, json.as_deref())
            }
            Command::Hops {
                receivers,
                loss,
                size,
                rate,
                paced_messages,
                messages,
                repeat,
                json,
                daemon_config,
            } => hops::run(
                &hops::HopsConfig {
                    receivers,
                    loss,
                    size,
                    rate,
                    paced_messages,
                    messages,
                    repeat,
                    daemon_config,
                },
                json.as_deref(),
            ),
            Command::Toc {
                nodes,
                messages,
                loss,
                loss_nodes,
                latency_nodes,
                crash_nodes,
                beacon_us,
                rate,
                paced_messages,
                seeds,
                out,
            } => toc::run(&toc::TocConfig {
                crash_nodes,
                beacon_us,
                nodes,
                loss,
                loss_nodes,
                latency_nodes,
                messages,
                rate,
                paced_messages,
                seeds,
                out,
            }),
            Command::Bcast {
                members,
                sizes,
                fabric,
                alpha_us,
                beta_ns,
                json,
            } => bcast::parse_sizes(&sizes).and_then(|sizes| {
                if !(alpha_us > 0.0 && beta_ns > 0.0) {
                    return Err("--alpha-us and --beta-ns must be positive".into());
                }
                let held = bcast::run(&bcast::Settings {
                    members: &members,
                    sizes: &sizes,
                    fabric,
                    link: mcast_sim::topology::Link {
                        alpha: alpha_us * 1e-6,
                        beta: beta_ns * 1e-9,
                    },
                    json: json.as_deref(),
                })?;
                if held {
                    Ok(())
                } else {
                    Err("a claim of seed 003 did not hold (NOT MET above)".into())
                }
            }),
            Command::BcastXdp {
                nodes,
                sizes,
                trials,
                budget,
                link_rate,
                json,
            } => bcast::parse_sizes(&sizes).and_then(|sizes| {
                bcast_xdp::run(
                    &bcast_xdp::XdpConfig {
                        nodes,
                        sizes,
                        trials,
                        budget: bcast::parse_size(&budget)?,
                        link_rate,
                    },
                    json.as_deref(),
                )
            }),
            Command::Paper {
                out,
                quick,
                backends,
                modes,
                receivers,
                sizes,
                pingpong_messages,
                messages,
                xdp_saturation_messages,
                rate,
                sim_rate,
                link_rate,
                sim_bandwidth_bps,
                sim_latency_ns,
                no_progress,
                deadline_secs,
            } => paper::run(&paper::Opts {
                out,
                backends,
                modes,
                receivers: receivers.unwrap_or_else(|| {
                    if quick {
                        vec![1, 6]
                    } else {
                        vec![1, 2, 4, 6]
                    }
                }),
                sizes,
                pingpong_messages: pingpong_messages.unwrap_or(if quick { 100 } else { 300 }),
                messages: messages.unwrap_or(if quick {
                    500
                } else if link_rate.is_some() {
                    300
                } else {
                    2000
                }),
                xdp_saturation_messages: xdp_saturation_messages.unwrap_or(if quick {
                    5000
                } else if link_rate.is_some() {
                    300
                } else {
                    20_000
                }),
                rate: rate.unwrap_or(if link_rate.is_some() { 100 } else { 1000 }),
                sim_rate,
                link_rate,
                sim_link: paper::SimLink {
                    bandwidth_bps: sim_bandwidth_bps,
                    latency: Duration::from_nanos(sim_latency_ns),
                },
                command: std::iter::once("mcast-bench".to_owned())
                    .chain(std::env::args().skip(1))
                    .collect::<Vec<_>>()
                    .join(" "),
                progress: !no_progress,
                deadline: Duration::from_secs(deadline_secs),
            }),
            Command::Soak { command } => soak::run(command),
        };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcast-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// On the first SIGINT or SIGTERM: stop, remove every network namespace
/// this process created (their `Drop` would not run: the process exits from
/// the handler's thread) and exit with 128 + the signal's number and a
/// message saying so. A second signal during that cleanup exits at once.
fn clean_up_on_signals() -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let cleaning = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, cleaning.clone())
            .map_err(|e| format!("installing the signal handler: {e}"))?;
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("installing the signal handler: {e}"))?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Some(sig) = signals.forever().next() else {
                return;
            };
            cleaning.store(true, std::sync::atomic::Ordering::SeqCst);
            let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
            eprintln!("
mcast-bench: interrupted by {name}: stopping and removing the network namespaces");
            let removed = mcast_engine::harness::netns::remove_all_for_exit();
            eprintln!(
                "mcast-bench: interrupted by {name}: the run stopped, no results written; removed {} network namespace(s){}",
                removed.len(),
                if removed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", removed.join(", "))
                }
            );
            std::process::exit(128 + sig);
        })
        .map_err(|e| format!("starting the signal thread: {e}"))?;
    Ok(())
}

fn run_one(args: &[String]) -> Result<(), String> {
    let cfg =
        SimConfig::parse_args(args).map_err(|e| format!("{e}\n\nSee: mcast-bench run --help"))?;
    let (result, wall) = timed(|| mcast_sim::run(&cfg));
    let report = result.map_err(|f| f.to_string())?;
    for line in &report.trace {
        println!("{line}");
    }
    println!("{}", cfg.replay_command());
    table::print_report(&cfg, &report, wall);
    if cfg.guarantees_completion() && !report.completed {
        return Err(format!("the run did not complete ({:?})", report.stop));
    }
    Ok(())
}

/// Runs `f` and measures its wall time (the one place the bench reads a clock).
#[allow(clippy::disallowed_methods)]
pub(crate) fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = std::time::Instant::now();
    let v = f();
    (v, start.elapsed())
}
