//! The `mcast-bench xdp` scenario: throughput (raw blasts, MAK, Go-Back-N,
//! at 0 % and 1 % loss) and one-way latency at fixed offered rates, all on
//! one namespace topology in one run (see the parent module).
//!
//! Owns: the scenario's configuration, its runs and its report. May not
//! touch: the topology beyond its engines, or the paper runs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mcast_wire::{group_mac, MacAddr, NodeId};

use crate::harness::netns::{Netns, Topology};
use crate::harness::runs::{run_nodes, xdp};
use crate::harness::scenario::{self, Tuning, GROUP, SENDER};
use crate::sys::monotonic_ns;
use crate::{Algorithm, Engine, PublishError, Transport};

use super::{
    send_blast_batch, spec, BLAST_SPIN, FRAME_COUNT, STAMP_LEN, THROUGHPUT_FRAMES,
    THROUGHPUT_MAK_WINDOW,
};

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
        "mak" => protocol(topo, Algorithm::Mak, all.len(), messages, len, loss, tuning),
        "gbn" => protocol(topo, Algorithm::Iterative, 1, messages, len, loss, tuning),
        other => return Err(format!("unknown throughput run {other:?}")),
    })
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
