//! The AF_XDP benchmark scenario: on ONE namespace topology in ONE run,
//! 1 sender and 3 receivers on a bridge (see [`crate::harness::netns`]),
//! AF_XDP in SKB mode (copy mode on veth), loss injected at every receiver by
//! the XDP drop-ratio knob.
//!
//! - Throughput, 1 KiB messages, at 0 % and 1 % loss: a raw unreliable
//!   multicast blast (no protocol: the ceiling of this kernel path), MAK
//!   through the engine, a raw unicast blast to one receiver, and Go-Back-N
//!   (the iterative algorithm with one receiver) through the engine.
//!   Performance is read as ratios against the blasts of the same run
//!   (shared/PLATFORM.md: the machine is noisy, absolute figures drift).
//! - One-way latency per message at a fixed offered rate: every namespace
//!   shares CLOCK_MONOTONIC, so the sender writes the message's scheduled
//!   send time into its payload and each receiver subtracts it from its clock
//!   at delivery. Stamping the *scheduled* time (not the time `publish`
//!   returned) counts a late sender against latency instead of hiding it
//!   (coordinated omission).
//!
//! It returns raw figures and latency samples in nanoseconds; the caller
//! (`mcast-bench xdp`) builds histograms and prints. It needs root.
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no protocol state reads this clock"
)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mcast_wire::{
    group_mac, Flags, Frame, Header, Kind, MacAddr, NodeId, Seq, ETHERTYPE_DEFAULT, FRAME_OVERHEAD,
};

use crate::harness::netns::{Netns, Topology};
use crate::harness::runs::{run_nodes, xdp};
use crate::harness::scenario::{self, Spec, Tuning, GROUP, SENDER};
use crate::sys::monotonic_ns;
use crate::{
    Algorithm, Engine, EngineConfig, GroupOptions, PublishError, StreamStart, Transport, TxDesc,
};

/// UMEM frames per socket (a stash of spares about twice the ring slots).
const FRAME_COUNT: u32 = 4096;

/// MAK's window in the throughput runs, and the UMEM of every throughput run
/// (blasts included, so all four use the same transport): twice the window,
/// which leaves the fill ring its frames while a receiver's reorder buffer
/// is full. See `spec` for why the window is this large.
const THROUGHPUT_MAK_WINDOW: u32 = 4096;
const THROUGHPUT_FRAMES: u32 = 2 * THROUGHPUT_MAK_WINDOW;

/// The blast receivers' busy-poll before sleeping: the engine's `spin` in
/// the throughput runs (`harness::scenario::config`).
const BLAST_SPIN: Duration = Duration::from_micros(10);

/// What to run.
#[derive(Debug, Clone)]
pub struct XdpBenchConfig {
    /// Messages per throughput run.
    pub messages: usize,
    /// Message length of the throughput runs, bytes.
    pub message_len: usize,
    /// Messages per latency run.
    pub latency_messages: usize,
}

impl Default for XdpBenchConfig {
    fn default() -> Self {
        XdpBenchConfig {
            messages: 200_000,
            message_len: 1024,
            latency_messages: 20_000,
        }
    }
}

/// Where and how the figures were measured.
#[derive(Debug, Clone)]
pub struct Environment {
    /// `uname -r`.
    pub kernel: String,
    /// The mode the XDP steering program was attached in.
    pub xdp_mode: String,
    /// AF_XDP copy or zero-copy.
    pub bind_mode: String,
    /// Queues per interface used (one socket on queue 0).
    pub queues: u32,
    /// CPUs available to this process.
    pub cpus: usize,
    /// "release" or "debug" (of this library).
    pub build_profile: &'static str,
    /// Receivers of the multicast runs.
    pub receivers: usize,
}

/// One throughput figure.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// "blast", "mak", "unicast-blast" or "gbn".
    pub name: &'static str,
    /// Receivers of this run.
    pub receivers: usize,
    /// Injected loss at each receiver (0.01 = 1 %).
    pub loss: f64,
    /// Messages (= frames: every message fits one frame) sent.
    pub messages: usize,
    /// Bytes per message.
    pub message_len: usize,
    /// Goodput: payload Mbit/s delivered to the slowest receiver.
    pub mbps: f64,
    /// Messages (one frame each) per second at the slowest receiver.
    pub frames_per_sec: f64,
    /// Fraction of the messages the receiver that got fewest delivered
    /// (1.0 for the reliable protocols; a blast loses what the kernel drops).
    pub delivered: f64,
    /// CPU time of the sending thread per message, ns (CLOCK_THREAD_CPUTIME_ID;
    /// includes the veth and bridge work the kernel does inside its sendto).
    pub sender_cpu_ns: f64,
    /// CPU time per message of the receiver thread that used most, ns.
    pub receiver_cpu_ns: f64,
}

/// One latency run: one-way latency samples of every message at every receiver.
#[derive(Debug, Clone)]
pub struct Latency {
    /// A short label ("mak-1k-10000/s-1%", ...).
    pub name: String,
    pub algorithm: Algorithm,
    /// Injected loss at each receiver.
    pub loss: f64,
    /// Offered load, messages per second.
    pub rate_per_sec: u32,
    /// Bytes per message.
    pub message_len: usize,
    /// The engine's busy-poll time before sleeping (`EngineConfig::spin`).
    pub spin: Duration,
    /// True when the engine busy-polls throughout.
    pub busy_poll: bool,
    /// Messages sent.
    pub messages: usize,
    /// Messages delivered at the receiver that got fewest.
    pub delivered_min: usize,
    /// One-way latency of each delivered message at each receiver, ns.
    pub samples_ns: Vec<u64>,
}

/// Everything one `run_xdp` measured.
#[derive(Debug, Clone)]
pub struct XdpReport {
    pub environment: Environment,
    pub message_len: usize,
    pub throughput: Vec<Throughput>,
    pub latency: Vec<Latency>,
}

impl XdpReport {
    /// The throughput figure named `name` at `loss`.
    pub fn get(&self, name: &str, loss: f64) -> Option<&Throughput> {
        self.throughput
            .iter()
            .find(|t| t.name == name && (t.loss - loss).abs() < 1e-9)
    }
}

/// Why privileges are missing, or None when the scenario can run.
pub fn missing_privileges() -> Option<String> {
    crate::harness::netns::missing_privileges()
}

/// Builds the topology, runs every measurement on it, removes it. `progress`
/// receives a line per finished step.
pub fn run_xdp(cfg: &XdpBenchConfig, mut progress: impl FnMut(&str)) -> Result<XdpReport, String> {
    if let Some(why) = missing_privileges() {
        return Err(format!("needs root ({why})"));
    }
    let topo = Topology::new("mcast-bench xdp").ok_or("could not build the topology")?;
    progress(&format!(
        "network namespaces {} {} {} created",
        topo.bridge.name,
        topo.sender.name,
        topo.receivers
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let len = cfg.message_len;
    let n = cfg.messages;
    let mut throughput = Vec::new();
    let mut info = None;
    let all: Vec<&Netns> = topo.receivers.iter().collect();
    let one = &topo.receivers[..1];
    for loss in [0.0, 0.01] {
        let (b, i) = blast(&topo, &all, group_mac(GROUP), n, len, loss);
        info.get_or_insert(i);
        progress(&line("blast", &b));
        throughput.push(b);
        let m = protocol(&topo, Algorithm::Mak, 3, n, len, loss, Tuning::default());
        progress(&line("mak", &m));
        throughput.push(m);
        let (u, _) = blast(&topo, &[&one[0]], one[0].mac, n, len, loss);
        progress(&line("unicast-blast", &u));
        throughput.push(u);
        let g = protocol(
            &topo,
            Algorithm::Iterative,
            1,
            n,
            len,
            loss,
            Tuning::default(),
        );
        progress(&line("gbn", &g));
        throughput.push(g);
    }
    let mut latency = Vec::new();
    let runs = [
        (
            Algorithm::Mak,
            10_000,
            1024,
            0.01,
            Duration::from_micros(10),
            "mak-1k-10000/s-1%",
        ),
        // 64-byte messages: busy polling throughout, then sleeping at once.
        (
            Algorithm::Mak,
            5_000,
            64,
            0.0,
            Duration::from_secs(3600),
            "mak-64b-5000/s-busy",
        ),
        (
            Algorithm::Mak,
            5_000,
            64,
            0.0,
            Duration::ZERO,
            "mak-64b-5000/s-sleep",
        ),
    ];
    for (algorithm, rate, len, loss, spin, name) in runs {
        let l = latency_run(
            &topo,
            algorithm,
            rate,
            len,
            loss,
            spin,
            cfg.latency_messages,
        );
        let l = Latency {
            name: name.to_owned(),
            ..l
        };
        progress(&format!(
            "{}: {} samples, {} of {} delivered at the slowest receiver",
            l.name,
            l.samples_ns.len(),
            l.delivered_min,
            l.messages
        ));
        latency.push(l);
    }
    let info = info.unwrap_or_default();
    Ok(XdpReport {
        environment: Environment {
            kernel: kernel_release(),
            xdp_mode: info.0,
            bind_mode: info.1,
            queues: 1,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            build_profile: if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            },
            receivers: topo.receivers.len(),
        },
        message_len: cfg.message_len,
        throughput,
        latency,
    })
}

/// One throughput measurement on an existing topology, by the name the
/// report uses ("blast", "mak", "unicast-blast" or "gbn"): what `run_xdp`
/// does for each row, for profiling one phase at a time and comparing
/// engine settings (`tuning`; `engine/engine/examples/xdp_phase.rs`).
pub fn throughput_run(
    topo: &Topology,
    name: &str,
    messages: usize,
    len: usize,
    loss: f64,
    tuning: Tuning,
) -> Result<Throughput, String> {
    let all: Vec<&Netns> = topo.receivers.iter().collect();
    let one = &topo.receivers[0];
    Ok(match name {
        "blast" => blast(topo, &all, group_mac(GROUP), messages, len, loss).0,
        "unicast-blast" => blast(topo, &[one], one.mac, messages, len, loss).0,
        "mak" => protocol(topo, Algorithm::Mak, 3, messages, len, loss, tuning),
        "gbn" => protocol(topo, Algorithm::Iterative, 1, messages, len, loss, tuning),
        other => return Err(format!("unknown throughput run {other:?}")),
    })
}

/// Writes up to `want` raw data frames of `len` bytes (sequence numbers from
/// `first`) and hands them to the transport as one batch; returns how many
/// it took (the rest go back to the pool).
fn send_blast_batch<T: Transport>(
    t: &mut T,
    batch: &mut Vec<TxDesc>,
    dst: MacAddr,
    src: MacAddr,
    first: usize,
    want: usize,
    len: usize,
) -> usize {
    batch.clear();
    while batch.len() < want {
        let Some(f) = t.alloc() else { break };
        let buf = t.frame_mut(f);
        let mut h = Header::new(Kind::Data);
        h.flags = Flags::WHOLE;
        h.group = GROUP;
        h.src = SENDER;
        h.seq = Seq((first + batch.len()) as u32);
        h.payload_len = len as u16;
        buf[FRAME_OVERHEAD..FRAME_OVERHEAD + len].fill(0x5a);
        let (_, flen) = Frame::emit(&mut buf[..], dst, src, ETHERTYPE_DEFAULT, &h).expect("emit");
        batch.push(TxDesc {
            frame: f,
            len: flen as u32,
        });
    }
    let n = t.transmit(batch, false).expect("transmit");
    for d in &batch[n..] {
        t.release(d.frame);
    }
    n
}

fn line(name: &str, t: &Throughput) -> String {
    format!(
        "{name} {}% loss, {} receiver(s): {:.1} Mbit/s, {:.0} frames/s, {:.1}% delivered; CPU per message: sender {:.0} ns, busiest receiver {:.0} ns",
        t.loss * 100.0,
        t.receivers,
        t.mbps,
        t.frames_per_sec,
        t.delivered * 100.0,
        t.sender_cpu_ns,
        t.receiver_cpu_ns,
    )
}

/// `uname -r`, read from procfs.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// A raw unreliable blast of `frames` frames of `len` payload bytes to `dst`
/// (the group MAC, or one receiver's MAC), received at `receivers`. Returns
/// the figures at the slowest receiver and the (XDP mode, bind mode) seen.
fn blast(
    topo: &Topology,
    receivers: &[&Netns],
    dst: MacAddr,
    frames: usize,
    len: usize,
    loss: f64,
) -> (Throughput, (String, String)) {
    let start = Barrier::new(receivers.len() + 1);
    let done = AtomicBool::new(false);
    let open = xdp(THROUGHPUT_FRAMES);
    std::thread::scope(|sc| {
        let rx: Vec<_> = receivers
            .iter()
            .map(|&ns| {
                let (start, done, open) = (&start, &done, &open);
                sc.spawn(move || {
                    ns.enter();
                    let mut t = open(ns);
                    t.subscribe(group_mac(GROUP)).expect("subscribe");
                    t.set_drop_ratio(loss).expect("drop ratio");
                    let info = t.info();
                    let modes = (
                        info.attach_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                        info.bind_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                    );
                    start.wait();
                    let cpu0 = crate::sys::thread_cpu_ns();
                    let mut cpu_last = cpu0;
                    let (mut n, mut first, mut last) = (0usize, None, Instant::now());
                    let mut batch = Vec::new();
                    let mut quiet = Instant::now();
                    loop {
                        batch.clear();
                        t.recv(&mut batch).expect("recv");
                        if batch.is_empty() {
                            let idle = quiet.elapsed();
                            if done.load(Ordering::SeqCst) && idle > Duration::from_millis(200) {
                                break;
                            }
                            // Busy-poll as long as the engine does (its `spin`,
                            // yielding as it does) before sleeping, so the
                            // ceiling is not lowered by wake-ups the engine
                            // runs would not pay.
                            if idle > BLAST_SPIN {
                                t.wait(Duration::from_millis(1)).expect("wait");
                            } else {
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        let now = Instant::now();
                        first.get_or_insert(now);
                        last = now;
                        quiet = now;
                        n += batch.len();
                        for d in &batch {
                            t.release(d.frame);
                        }
                        cpu_last = crate::sys::thread_cpu_ns();
                    }
                    let secs = (last - first.unwrap_or(last)).as_secs_f64().max(1e-9);
                    (n, secs, modes, cpu_last - cpu0)
                })
            })
            .collect();
        let tx = sc.spawn(|| {
            topo.sender.enter();
            let mut t = open(&topo.sender);
            let src = t.mac();
            start.wait();
            let cpu0 = crate::sys::thread_cpu_ns();
            let mut sent = 0usize;
            let mut batch = Vec::with_capacity(64);
            let mut kept = Vec::new();
            while sent < frames {
                t.reap(&mut kept).expect("reap");
                let want = 64.min(frames - sent);
                let n = send_blast_batch(&mut t, &mut batch, dst, src, sent, want, len);
                sent += n;
            }
            let cpu = crate::sys::thread_cpu_ns() - cpu0;
            done.store(true, Ordering::SeqCst);
            cpu
        });
        let sender_cpu = tx.join().expect("sender");
        let results: Vec<(usize, f64, (String, String), u64)> = rx
            .into_iter()
            .map(|h| h.join().expect("receiver"))
            .collect();
        let receiver_cpu = results.iter().map(|r| r.3).max().unwrap_or(0);
        let worst = results
            .iter()
            .map(|(n, secs, _, _)| *n as f64 / secs)
            .fold(f64::INFINITY, f64::min);
        let fewest = results.iter().map(|r| r.0).min().unwrap_or(0);
        let modes = results.first().map(|r| r.2.clone()).unwrap_or_default();
        let name = if receivers.len() == 1 && dst != group_mac(GROUP) {
            "unicast-blast"
        } else {
            "blast"
        };
        (
            Throughput {
                name,
                receivers: receivers.len(),
                loss,
                messages: frames,
                message_len: len,
                mbps: worst * len as f64 * 8.0 / 1e6,
                frames_per_sec: worst,
                delivered: fewest as f64 / frames as f64,
                sender_cpu_ns: sender_cpu as f64 / frames as f64,
                receiver_cpu_ns: receiver_cpu as f64 / frames as f64,
            },
            modes,
        )
    })
}

fn spec(
    topo: &Topology,
    algorithm: Algorithm,
    receivers: usize,
    messages: usize,
    len: usize,
    loss: f64,
) -> Spec {
    Spec {
        algorithm,
        messages,
        loss,
        receivers: topo
            .receivers
            .iter()
            .take(receivers)
            .enumerate()
            .map(|(i, r)| (11 + i as NodeId, r.mac))
            .collect(),
        // MAK's window must outlast a repair (NAK backoff, repair, ACK) at the
        // rate veth sustains here: 512 frames gave 0.58 of the lossless
        // goodput at 1 % loss, 2,048 about 0.7 (half the default UMEM). The
        // throughput runs use THROUGHPUT_MAK_WINDOW (`protocol`).
        window_frames: if algorithm == Algorithm::Iterative {
            128
        } else {
            2048
        },
        fence: false,
        deadline: Duration::from_secs(300),
        fixed_len: Some(len),
        tuning: Default::default(),
    }
}

/// A reliable run through the engine (every message checked at every receiver).
fn protocol(
    topo: &Topology,
    algorithm: Algorithm,
    receivers: usize,
    messages: usize,
    len: usize,
    loss: f64,
    tuning: Tuning,
) -> Throughput {
    let mut spec = spec(topo, algorithm, receivers, messages, len, loss);
    spec.tuning = tuning;
    if algorithm == Algorithm::Mak {
        // 4,096 frames (28 ms at 150,000 frames/s) against 2,048: MAK at 1 %
        // loss over MAK at 0 % rose from a median of 0.65 to 0.77 over four
        // interleaved pairs of runs, with the lossless rate unchanged; the
        // window still fills while the slowest repair of a window is
        // outstanding (the sender's ACK-wait timeouts).
        spec.window_frames = THROUGHPUT_MAK_WINDOW;
    }
    let name = format!("{algorithm} {}%", loss * 100.0);
    let (s, r) = run_nodes(&name, topo, spec.clone(), xdp(THROUGHPUT_FRAMES));
    scenario::report(&name, &spec, &s, &r);
    let secs = r
        .iter()
        .map(|n| n.elapsed.as_secs_f64())
        .fold(0.0, f64::max)
        .max(1e-9);
    Throughput {
        name: if algorithm == Algorithm::Mak {
            "mak"
        } else {
            "gbn"
        },
        receivers,
        loss,
        messages,
        message_len: len,
        mbps: (messages * len) as f64 * 8.0 / secs / 1e6,
        frames_per_sec: messages as f64 / secs,
        delivered: r.iter().map(|n| n.delivered).min().unwrap_or(0) as f64 / messages as f64,
        sender_cpu_ns: s.cpu.as_nanos() as f64 / messages as f64,
        receiver_cpu_ns: r.iter().map(|n| n.cpu.as_nanos()).max().unwrap_or(0) as f64
            / messages as f64,
    }
}

/// Bytes 0..8 of a latency message: its index; 8..16: its scheduled send
/// time (CLOCK_MONOTONIC ns). Needs 16 bytes at least.
const STAMP_LEN: usize = 16;

/// Shared between the threads of one latency run.
#[derive(Debug)]
struct LatencyControl {
    start: Barrier,
    receivers_done: AtomicUsize,
    sender_done: AtomicBool,
}

/// Publishes `messages` messages of `len` bytes at `rate` per second and
/// records each one's one-way latency at every receiver.
fn latency_run(
    topo: &Topology,
    algorithm: Algorithm,
    rate: u32,
    len: usize,
    loss: f64,
    spin: Duration,
    messages: usize,
) -> Latency {
    let len = len.max(STAMP_LEN);
    let spec = spec(topo, algorithm, topo.receivers.len(), messages, len, loss);
    let ctl = LatencyControl {
        start: Barrier::new(topo.receivers.len() + 1),
        receivers_done: AtomicUsize::new(0),
        sender_done: AtomicBool::new(false),
    };
    let open = xdp(FRAME_COUNT);
    let gap_ns = 1_000_000_000 / u64::from(rate.max(1));
    let config = |node: NodeId| {
        let mut c = scenario::config(&spec, node);
        c.spin = spin;
        // Never oversleep a send slot, nor a delivery by much.
        c.max_sleep = c.max_sleep.min(Duration::from_nanos(gap_ns));
        c
    };
    let deadline_ns = Duration::from_secs(60 + (messages as u64 / u64::from(rate.max(1))) * 2);
    let results: Vec<(usize, Vec<u64>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = spec
            .receivers
            .iter()
            .zip(&topo.receivers)
            .map(|(&(node, _), ns)| {
                let (ctl, open, config) = (&ctl, &open, &config);
                sc.spawn(move || {
                    ns.enter();
                    let mut e = Engine::new(open(ns), config(node))
                        .unwrap_or_else(|e| panic!("engine on {}: {e}", ns.name));
                    e.open_receiver(SENDER).expect("open receiver");
                    e.transport_mut().set_drop_ratio(loss).expect("drop ratio");
                    let mut samples = Vec::with_capacity(messages);
                    ctl.start.wait();
                    let deadline = monotonic_ns() + deadline_ns.as_nanos() as u64;
                    let mut got = 0usize;
                    while !ctl.sender_done.load(Ordering::SeqCst) && monotonic_ns() < deadline {
                        e.run_once().expect("engine");
                        while let Some(m) = e.recv_message() {
                            let now = monotonic_ns();
                            if let Some(b) = m.data.get(8..16) {
                                let sent = u64::from_le_bytes(b.try_into().expect("8 bytes"));
                                samples.push(now.saturating_sub(sent));
                            }
                            got += 1;
                            if got == messages {
                                ctl.receivers_done.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    let _ = e.shutdown();
                    (got, samples)
                })
            })
            .collect();
        sc.spawn(|| {
            topo.sender.enter();
            let mut e = Engine::new(open(&topo.sender), config(SENDER))
                .unwrap_or_else(|e| panic!("engine on {}: {e}", topo.sender.name));
            let members: Vec<NodeId> = spec.receivers.iter().map(|r| r.0).collect();
            e.open_sender(&members).expect("open sender");
            let mut msg = vec![0u8; len];
            ctl.start.wait();
            let t0 = monotonic_ns();
            let deadline = t0 + deadline_ns.as_nanos() as u64;
            for i in 0..messages {
                let at = t0 + i as u64 * gap_ns;
                // Wake for the send slot itself: a sleep that runs past it
                // (up to a whole gap) would count against the latency.
                loop {
                    let now = monotonic_ns();
                    if now >= at {
                        break;
                    }
                    e.run_once_for(Duration::from_nanos(at - now))
                        .expect("engine");
                }
                msg[..8].copy_from_slice(&(i as u64).to_le_bytes());
                msg[8..16].copy_from_slice(&at.to_le_bytes());
                loop {
                    match e.publish(&msg) {
                        Ok(()) => break,
                        Err(PublishError::WouldBlock) => {
                            e.run_once().expect("engine");
                        }
                        Err(err) => panic!("publish: {err}"),
                    }
                }
            }
            while ctl.receivers_done.load(Ordering::SeqCst) < members.len()
                && monotonic_ns() < deadline
            {
                e.run_once().expect("engine");
            }
            let _ = e.flush(Duration::from_secs(2));
            ctl.sender_done.store(true, Ordering::SeqCst);
            let _ = e.shutdown();
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let delivered_min = results.iter().map(|r| r.0).min().unwrap_or(0);
    Latency {
        name: String::new(),
        algorithm,
        loss,
        rate_per_sec: rate,
        message_len: len,
        spin,
        busy_poll: spin >= Duration::from_secs(1),
        messages,
        delivered_min,
        samples_ns: results.into_iter().flat_map(|r| r.1).collect(),
    }
}

// ---------------------------------------------------------------------------
// The paper's comparison (seed 000 §4, issue 6): one run of one algorithm
// (or the raw blast) to the first `receivers` receivers of a topology, in one
// of three modes. Raw times only; `mcast-bench paper` makes the histograms.
// ---------------------------------------------------------------------------

/// How the sender offers messages in a paper run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaperMode {
    /// The paper's measurement: send one message, wait until every receiver
    /// delivered it (and, for the acknowledged algorithms, until the sender
    /// holds every acknowledgment), then send the next.
    PingPong,
    /// A fixed offered rate, messages per second; latency counts from each
    /// message's scheduled send time (no coordinated omission).
    Rate(u32),
    /// As fast as the window allows; latency counts from the moment the
    /// application first tried to publish the message.
    Saturation,
    /// Ping-pong with a reply: send one message; the run's last receiver
    /// answers each message it delivers with a 16-byte reply, unicast back
    /// to the sender over the same engine and transport (a Go-Back-N stream
    /// in the sender's inbox group [`ECHO_GROUP`]; the blast answers with one
    /// raw frame); the sender sends the next message when the reply is in.
    /// The round trip is from the send until the reply was delivered at the
    /// sender. Works for every algorithm, plain NAK included.
    Echo,
}

/// The sender's inbox in an echo run: the replies' Go-Back-N stream (the
/// iterative machine with a group of one, unicast, opened by its first
/// frame, as the daemons' links are).
pub const ECHO_GROUP: u32 = 0x8000_0001;

/// Bytes of an echo reply: the message's index and its send time.
pub const ECHO_REPLY_LEN: usize = 16;

/// What a paper run measured, in CLOCK_MONOTONIC nanoseconds since the run
/// started. `u64::MAX` marks a message a receiver never delivered.
#[derive(Debug, Clone, Default)]
pub struct PaperRaw {
    /// Per message: when it was (to be) sent.
    pub sent_ns: Vec<u64>,
    /// Per receiver, per message: when that receiver delivered it.
    pub delivered_ns: Vec<Vec<u64>>,
    /// Ping-pong only, acknowledged algorithms only: per message, from the
    /// publish until the sender held every receiver's acknowledgment.
    pub acked_ns: Vec<u64>,
    /// Echo only: per message, from the send until the reply was delivered
    /// at the sender (`u64::MAX`: no reply in time). Empty in other modes.
    pub echo_ns: Vec<u64>,
    /// XDP attach mode and AF_XDP bind mode seen.
    pub modes: (String, String),
}

/// The UMEM of a paper run's engine (2 KiB frames: 16 MiB), plain NAK's
/// excepted (see [`paper_frames`]).
const PAPER_FRAMES: u32 = 8192;

/// UMEM frames an engine needs beyond its window: the fill and TX rings
/// (2,048 each), the messages queued ahead of the window and the spares
/// (the default socket's whole UMEM).
const PAPER_FRAMES_BEYOND_WINDOW: u32 = 4096;

/// The most messages one plain-NAK paper run may send. Its sender never
/// frees a frame (seed 000's first weakness), so its window holds the whole
/// run, and every engine of the run gets a UMEM of
/// [`paper_frames`]`(messages)` frames of 2 KiB: 47 MiB each for 20,000
/// messages (330 MiB for the 7 engines of a 6-receiver run), 72 MiB each at
/// this cap.
pub const PAPER_MAX_MESSAGES: usize = 32_768;

/// Plain NAK's window in a paper run of `messages` messages: all of them,
/// and room for the fence slack the harness keeps.
fn nak_window(messages: usize) -> u32 {
    messages as u32 + 64
}

/// The UMEM frames of each engine of a paper run of `algorithm` sending
/// `messages` messages: 8,192 (16 MiB), or for plain NAK its whole-run
/// window (messages + 64) plus 4,096 when that is more.
pub fn paper_frames(algorithm: Option<Algorithm>, messages: usize) -> u32 {
    match algorithm {
        Some(Algorithm::Nak) => PAPER_FRAMES.max(nak_window(messages) + PAPER_FRAMES_BEYOND_WINDOW),
        _ => PAPER_FRAMES,
    }
}

/// One paper run: `algorithm` (None: the raw unreliable blast) from the
/// topology's sender to its first `receivers` receivers, `messages`
/// messages of `len` bytes (at least 16) offered in `mode`. A protocol run
/// stops at `deadline` even if some receiver still misses messages (plain
/// NAK never recovers a lost tail); what was delivered by then is reported.
/// The window for a link capped at `bps` by `Topology::limit_rate`: half the
/// frames its tbf queues (50 ms at the rate plus a 4,000-byte bucket), shared
/// by the copies of each frame that pass the sender's port; 4 to 64 frames.
fn capped_window(bps: u64, len: usize, algorithm: Algorithm, receivers: usize) -> u32 {
    let queue_bytes = bps / 8 / 20 + 4_000;
    let frame_bytes = (len.min(1456) + mcast_wire::field::PAYLOAD) as u64;
    let copies = if algorithm == Algorithm::Iterative {
        receivers.max(1) as u64
    } else {
        1
    };
    (queue_bytes / frame_bytes / 2 / copies).clamp(4, 64) as u32
}

/// `link_bps`: the rate the topology's links are capped at, if they are.
#[derive(Debug, Clone, Copy)]
pub struct PaperRun {
    pub algorithm: Option<Algorithm>,
    pub receivers: usize,
    pub len: usize,
    pub mode: PaperMode,
    pub messages: usize,
    pub deadline: Duration,
    pub link_bps: Option<u64>,
}

/// Performs `run` on `topo` (see [`PaperRun`]).
pub fn paper_run(topo: &Topology, run: &PaperRun) -> PaperRaw {
    assert!(run.receivers >= 1 && run.receivers <= topo.receivers.len());
    assert!(run.algorithm != Some(Algorithm::Nak) || run.messages <= PAPER_MAX_MESSAGES);
    let run = PaperRun {
        len: run.len.max(STAMP_LEN),
        ..*run
    };
    match run.algorithm {
        Some(a) => paper_protocol(topo, a, &run),
        None => paper_blast(topo, run.receivers, run.len, run.mode, run.messages),
    }
}

/// Per-receiver progress shared with the sender: messages delivered so far.
fn counters(n: usize) -> Vec<AtomicUsize> {
    (0..n).map(|_| AtomicUsize::new(0)).collect()
}

fn all_reached(c: &[AtomicUsize], n: usize) -> bool {
    c.iter().all(|x| x.load(Ordering::Acquire) >= n)
}

/// The paper runs' sender sleeps at most this long in the engine, so that
/// it wakes in time for a scheduled send.
const SENDER_MAX_SLEEP: Duration = Duration::from_micros(100);

/// How long the ping-pong sender waits for a message before giving up on it.
const PING_TIMEOUT_NS: u64 = 200_000_000;

fn paper_protocol(topo: &Topology, algorithm: Algorithm, run: &PaperRun) -> PaperRaw {
    let PaperRun {
        receivers,
        len,
        mode,
        messages,
        deadline,
        link_bps,
        ..
    } = *run;
    let mut spec = spec(topo, algorithm, receivers, messages, len, 0.0);
    spec.window_frames = spec.window_frames.min(PAPER_FRAMES / 4);
    // On a capped link (`Topology::limit_rate`) the window must fit the
    // bottleneck's queue, with room to spare: a tbf queues `rate` x 50 ms
    // plus its 32 kbit bucket and drops what does not fit, and every copy of
    // the window passes the sender's port (iterative sends one per
    // receiver). A window that overflowed it lost its tail on every burst, and
    // Go-Back-N's go-back then burst into the still-full queue, losing its
    // first frame too, until the retransmission timer (backing off) probed:
    // with 64 frames of 1 KiB (the queue holds about 61) iterative and
    // Go-Back-N to one receiver ran at 33 messages/s, and at 1,164 with 32.
    // The protocol timers need nothing: they measure the capped link.
    if let Some(bps) = link_bps {
        if algorithm != Algorithm::Nak {
            spec.window_frames = spec
                .window_frames
                .min(capped_window(bps, len, algorithm, receivers));
        }
    }
    if algorithm == Algorithm::Nak {
        // Plain NAK never frees its buffer: give it the whole run.
        spec.window_frames = nak_window(messages);
    }
    let echo = mode == PaperMode::Echo;
    // The receiver that answers in an echo run: the last one, which the
    // iterative sender's last copy reaches.
    let replier = receivers - 1;
    let progress = counters(receivers);
    let start = Barrier::new(receivers + 1);
    let sender_done = AtomicBool::new(false);
    let t0 = std::sync::OnceLock::<u64>::new();
    let open = xdp(paper_frames(Some(algorithm), messages));
    let config = |node: NodeId| {
        let mut c = scenario::config(&spec, node);
        if node == SENDER {
            c.max_sleep = c.max_sleep.min(SENDER_MAX_SLEEP);
        } else {
            // The replier sends unicast to the sender from the start.
            c.peers.push((SENDER, topo.sender.mac));
        }
        c
    };
    // The replies' stream: Go-Back-N (the iterative machine to one member),
    // unicast; the sender opens its receive stream on the first reply.
    let echo_group = |c: &EngineConfig, accept_any_sender: bool| GroupOptions {
        algorithm: Algorithm::Iterative,
        protocol: c.protocol,
        window_frames: 64,
        subscribe: false,
        accept_any_sender,
        max_queued_frames: c.max_queued_frames,
    };
    let deadline_ns = deadline.as_nanos() as u64;
    let (sent, acked, echoed, delivered) = std::thread::scope(|sc| {
        let hs: Vec<_> = spec
            .receivers
            .iter()
            .zip(&topo.receivers)
            .enumerate()
            .map(|(ri, (&(node, _), ns))| {
                let (open, config, progress, start, sender_done, echo_group) =
                    (&open, &config, &progress, &start, &sender_done, &echo_group);
                sc.spawn(move || {
                    ns.enter();
                    let c = config(node);
                    let mut e = Engine::new(open(ns), c.clone())
                        .unwrap_or_else(|e| panic!("engine on {}: {e}", ns.name));
                    e.open_receiver(SENDER).expect("open receiver");
                    let replies = echo && ri == replier;
                    if replies {
                        e.add_group(ECHO_GROUP, echo_group(&c, false))
                            .expect("echo group");
                        let from_zero = StreamStart {
                            epoch: c.epoch,
                            seq: Seq(0),
                        };
                        e.open_sender_in(ECHO_GROUP, &[SENDER], from_zero)
                            .expect("echo stream");
                    }
                    let mut at = vec![u64::MAX; messages];
                    start.wait();
                    let mut got = 0usize;
                    while !sender_done.load(Ordering::SeqCst) {
                        e.run_once().expect("engine");
                        while let Some(m) = e.recv_message() {
                            let now = monotonic_ns();
                            if let Some(b) = m.data.get(..8) {
                                let i = u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
                                if i < messages {
                                    at[i] = now;
                                }
                            }
                            if replies {
                                // The reply: the message's index and send time.
                                let reply = &m.data[..ECHO_REPLY_LEN];
                                while let Err(err) = e.publish_in(ECHO_GROUP, reply) {
                                    assert!(
                                        matches!(err, PublishError::WouldBlock),
                                        "echo reply: {err}"
                                    );
                                    if sender_done.load(Ordering::SeqCst) {
                                        break;
                                    }
                                    e.run_once().expect("engine");
                                }
                            }
                            got += 1;
                            progress[ri].store(got, Ordering::Release);
                        }
                    }
                    let _ = e.shutdown();
                    at
                })
            })
            .collect();
        let s = sc.spawn(|| {
            topo.sender.enter();
            let c = config(SENDER);
            let mut e = Engine::new(open(&topo.sender), c.clone())
                .unwrap_or_else(|e| panic!("engine on {}: {e}", topo.sender.name));
            let members: Vec<NodeId> = spec.receivers.iter().map(|r| r.0).collect();
            e.open_sender(&members).expect("open sender");
            if echo {
                e.add_group(ECHO_GROUP, echo_group(&c, true))
                    .expect("echo group");
            }
            let mut msg = vec![0x5au8; len];
            let mut sent = vec![0u64; messages];
            let mut acked = Vec::new();
            let mut echoed = if echo {
                vec![u64::MAX; messages]
            } else {
                Vec::new()
            };
            start.wait();
            let base = monotonic_ns();
            let _ = t0.set(base);
            let deadline = base + deadline_ns;
            for (i, slot) in sent.iter_mut().enumerate() {
                let at = match mode {
                    PaperMode::Rate(rate) => {
                        let at = base + i as u64 * 1_000_000_000 / u64::from(rate.max(1));
                        // Sleep in the engine while the slot is far, then
                        // spin: never send late because of a long sleep.
                        loop {
                            let now = monotonic_ns();
                            if now >= at {
                                break;
                            }
                            if at - now > 2 * SENDER_MAX_SLEEP.as_nanos() as u64 {
                                e.run_once().expect("engine");
                            } else {
                                e.poll().expect("engine");
                            }
                        }
                        at
                    }
                    _ => monotonic_ns(),
                };
                *slot = at;
                msg[..8].copy_from_slice(&(i as u64).to_le_bytes());
                msg[8..16].copy_from_slice(&at.to_le_bytes());
                loop {
                    match e.publish(&msg) {
                        Ok(()) => break,
                        Err(PublishError::WouldBlock) => {
                            e.run_once().expect("engine");
                        }
                        Err(err) => panic!("publish: {err}"),
                    }
                    if monotonic_ns() > deadline {
                        break;
                    }
                }
                match mode {
                    PaperMode::PingPong => {
                        let give_up = monotonic_ns() + PING_TIMEOUT_NS;
                        let mut done = algorithm == Algorithm::Nak;
                        loop {
                            e.run_once().expect("engine");
                            if !done && e.send_idle() {
                                acked.push(monotonic_ns() - at);
                                done = true;
                            }
                            if (done && all_reached(&progress, i + 1)) || monotonic_ns() > give_up {
                                break;
                            }
                        }
                    }
                    PaperMode::Echo => {
                        let give_up = monotonic_ns() + PING_TIMEOUT_NS;
                        while echoed[i] == u64::MAX && monotonic_ns() <= give_up {
                            e.run_once().expect("engine");
                            while let Some(m) = e.recv_message() {
                                let now = monotonic_ns();
                                let index = m.data.get(..8).map(|b| {
                                    u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize
                                });
                                if m.group == ECHO_GROUP && index == Some(i) {
                                    echoed[i] = now - at;
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
            while !all_reached(&progress, messages) && monotonic_ns() < deadline {
                e.run_once().expect("engine");
            }
            if algorithm != Algorithm::Nak {
                let _ = e.flush(Duration::from_secs(2));
            }
            sender_done.store(true, Ordering::SeqCst);
            let _ = e.shutdown();
            (sent, acked, echoed)
        });
        let (sent, acked, echoed) = s.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let delivered: Vec<Vec<u64>> = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (sent, acked, echoed, delivered)
    });
    let base = t0.get().copied().unwrap_or(0);
    PaperRaw {
        acked_ns: acked,
        echo_ns: echoed,
        ..rebase(base, sent, delivered, (String::new(), String::new()))
    }
}

/// The raw times of a run, relative to its start `base` (acked and echo
/// round trips left empty).
fn rebase(
    base: u64,
    sent: Vec<u64>,
    delivered: Vec<Vec<u64>>,
    modes: (String, String),
) -> PaperRaw {
    let rel = |t: u64| {
        if t == u64::MAX {
            u64::MAX
        } else {
            t.saturating_sub(base)
        }
    };
    PaperRaw {
        sent_ns: sent.into_iter().map(rel).collect(),
        delivered_ns: delivered
            .into_iter()
            .map(|v| v.into_iter().map(rel).collect())
            .collect(),
        acked_ns: Vec::new(),
        echo_ns: Vec::new(),
        modes,
    }
}

/// The raw unreliable multicast blast in a paper run: frames straight onto
/// AF_XDP, no protocol. Ping-pong waits for every receiver or 20 ms; echo
/// waits up to 20 ms for the last receiver's reply, one raw 16-byte frame
/// unicast back to the sender as soon as the message arrived.
fn paper_blast(
    topo: &Topology,
    receivers: usize,
    len: usize,
    mode: PaperMode,
    messages: usize,
) -> PaperRaw {
    let progress = counters(receivers);
    let start = Barrier::new(receivers + 1);
    let done = AtomicBool::new(false);
    let t0 = std::sync::OnceLock::<u64>::new();
    let open = xdp(FRAME_COUNT);
    let echo = mode == PaperMode::Echo;
    let replier = receivers - 1;
    let (sent, echoed, delivered, modes) = std::thread::scope(|sc| {
        let hs: Vec<_> = topo.receivers[..receivers]
            .iter()
            .enumerate()
            .map(|(ri, ns)| {
                let (start, done, open, progress) = (&start, &done, &open, &progress);
                let sender_mac = topo.sender.mac;
                sc.spawn(move || {
                    ns.enter();
                    let mut t = open(ns);
                    t.subscribe(group_mac(GROUP)).expect("subscribe");
                    let info = t.info();
                    let modes = (
                        info.attach_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                        info.bind_mode
                            .map_or_else(|| "none".to_owned(), |m| format!("{m:?}").to_lowercase()),
                    );
                    let src = t.mac();
                    let replies = echo && ri == replier;
                    let mut at = vec![u64::MAX; messages];
                    start.wait();
                    let mut batch = Vec::new();
                    let mut reply = Vec::with_capacity(1);
                    let mut kept = Vec::new();
                    let mut quiet = monotonic_ns();
                    let mut got = 0usize;
                    loop {
                        batch.clear();
                        t.recv(&mut batch).expect("recv");
                        let now = monotonic_ns();
                        if batch.is_empty() {
                            if done.load(Ordering::SeqCst) && now - quiet > 100_000_000 {
                                break;
                            }
                            if now - quiet > BLAST_SPIN.as_nanos() as u64 {
                                t.wait(Duration::from_millis(1)).expect("wait");
                            } else {
                                std::thread::yield_now();
                            }
                            continue;
                        }
                        quiet = now;
                        for d in &batch {
                            let bytes =
                                &t.frame(d.frame)[d.offset as usize..(d.offset + d.len) as usize];
                            let mut new = None;
                            if let Ok(f) = Frame::new_checked(bytes, ETHERTYPE_DEFAULT) {
                                let i = f.seq().0 as usize;
                                if i < messages && at[i] == u64::MAX {
                                    at[i] = now;
                                    got += 1;
                                    new = Some(i);
                                }
                            }
                            t.release(d.frame);
                            if let (true, Some(i)) = (replies, new) {
                                t.reap(&mut kept).expect("reap");
                                let sent = send_blast_batch(
                                    &mut t,
                                    &mut reply,
                                    sender_mac,
                                    src,
                                    i,
                                    1,
                                    ECHO_REPLY_LEN,
                                );
                                assert_eq!(sent, 1, "the echo reply found no room");
                            }
                        }
                        progress[ri].store(got, Ordering::Release);
                    }
                    (at, modes)
                })
            })
            .collect();
        let s = sc.spawn(|| {
            topo.sender.enter();
            let mut t = open(&topo.sender);
            let src = t.mac();
            let mut sent = vec![0u64; messages];
            let mut echoed = if echo {
                vec![u64::MAX; messages]
            } else {
                Vec::new()
            };
            start.wait();
            let base = monotonic_ns();
            let _ = t0.set(base);
            let mut kept = Vec::new();
            let mut batch = Vec::with_capacity(64);
            let mut rx = Vec::new();
            let mut i = 0usize;
            while i < messages {
                t.reap(&mut kept).expect("reap");
                let at = match mode {
                    PaperMode::Rate(rate) => {
                        let at = base + i as u64 * 1_000_000_000 / u64::from(rate.max(1));
                        loop {
                            let now = monotonic_ns();
                            if now >= at {
                                break;
                            }
                            if at - now > 200_000 {
                                std::thread::sleep(Duration::from_nanos(at - now - 150_000));
                            } else {
                                // As the engine's sender spins to a deadline.
                                std::thread::yield_now();
                            }
                        }
                        at
                    }
                    _ => monotonic_ns(),
                };
                // Saturation sends batches of up to 64 frames per kick, as
                // the engine does; the other modes one frame at a time.
                let want = if mode == PaperMode::Saturation {
                    64.min(messages - i)
                } else {
                    1
                };
                let n = send_blast_batch(&mut t, &mut batch, group_mac(GROUP), src, i, want, len);
                for s in &mut sent[i..i + n] {
                    *s = at;
                }
                i += n;
                if n == 0 {
                    continue;
                }
                let give_up = monotonic_ns() + 20_000_000;
                match mode {
                    PaperMode::PingPong => {
                        while !all_reached(&progress, i) && monotonic_ns() < give_up {
                            t.reap(&mut kept).expect("reap");
                        }
                    }
                    PaperMode::Echo => {
                        // Poll the RX ring, yielding the CPU between polls:
                        // a sender spinning throughout starves the other
                        // receivers of a 2-CPU machine, and one sleeping on
                        // the socket pays a wake-up the engine's sender,
                        // whose sleeps end at its next deadline, mostly does
                        // not.
                        let want = i - 1;
                        while echoed[want] == u64::MAX && monotonic_ns() < give_up {
                            t.reap(&mut kept).expect("reap");
                            rx.clear();
                            t.recv(&mut rx).expect("recv");
                            let now = monotonic_ns();
                            if rx.is_empty() {
                                std::thread::yield_now();
                                continue;
                            }
                            for d in &rx {
                                let bytes = &t.frame(d.frame)
                                    [d.offset as usize..(d.offset + d.len) as usize];
                                if let Ok(f) = Frame::new_checked(bytes, ETHERTYPE_DEFAULT) {
                                    if f.seq().0 as usize == want {
                                        echoed[want] = now - at;
                                    }
                                }
                                t.release(d.frame);
                            }
                        }
                    }
                    _ => {}
                }
            }
            done.store(true, Ordering::SeqCst);
            (sent, echoed)
        });
        let (sent, echoed) = s.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let mut modes = (String::new(), String::new());
        let delivered: Vec<Vec<u64>> = hs
            .into_iter()
            .map(|h| {
                let (at, m) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                modes = m;
                at
            })
            .collect();
        (sent, echoed, delivered, modes)
    });
    let base = t0.get().copied().unwrap_or(0);
    PaperRaw {
        echo_ns: echoed,
        ..rebase(base, sent, delivered, modes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_window_fits_half_the_tbf_queue_per_copy() {
        // 10 Mbit/s: 62,500 bytes in 50 ms plus the 4,000-byte bucket.
        let ten = 10_000_000;
        // 1,082-byte frames: 61 fit, half of it.
        assert_eq!(capped_window(ten, 1024, Algorithm::Iterative, 1), 30);
        assert_eq!(capped_window(ten, 1024, Algorithm::Mak, 6), 30);
        // 570-byte frames: 116 fit.
        assert_eq!(capped_window(ten, 512, Algorithm::Ack, 4), 58);
        // Iterative to 6 sends 6 copies of each frame through the sender's port.
        assert_eq!(capped_window(ten, 1024, Algorithm::Iterative, 6), 5);
        // Never under 4, never over the uncapped 64.
        assert_eq!(capped_window(1_000_000, 1024, Algorithm::Iterative, 6), 4);
        assert_eq!(capped_window(1_000_000_000, 1024, Algorithm::Mak, 3), 64);
    }
}
