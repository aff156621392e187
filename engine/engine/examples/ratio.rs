//! Performance as a ratio against the ceiling, on one topology in one run:
//! 1 sender and 3 receivers in network namespaces on a bridge, AF_XDP (SKB
//! mode, copy mode on veth), 1 KiB messages, at 0 % and 1 % injected loss.
//!
//! 1. A raw unreliable AF_XDP multicast blast (no protocol, no ACKs): the
//!    ceiling of this machine's kernel path.
//! 2. MAK through the engine.
//! 3. Go-Back-N to each receiver in turn (the iterative baseline) through the engine.
//!
//! Prints goodput (payload bits per second delivered to every receiver),
//! frames/s and each protocol's ratio against the blast. Needs root:
//! `sudo -E cargo run --release -p mcast-engine --example ratio [MESSAGES]`.

#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark measures wall time; no protocol state reads this clock"
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use mcast_engine::harness::netns::Topology;
use mcast_engine::harness::runs::{run_nodes, xdp};
use mcast_engine::harness::scenario::{self, Spec, GROUP, SENDER};
use mcast_engine::{Algorithm, Transport, TxDesc};
use mcast_wire::{group_mac, Flags, Frame, Header, Kind, Seq, ETHERTYPE_DEFAULT, FRAME_OVERHEAD};

const LEN: usize = 1024;

/// Goodput (Mbit/s of payload at the slowest receiver) and frames/s.
#[derive(Debug, Clone, Copy)]
struct Figures {
    mbps: f64,
    frames_per_sec: f64,
    /// Blast only: the fraction of sent frames the slowest receiver got.
    delivered: f64,
}

fn blast(topo: &Topology, frames: usize, loss: f64) -> Figures {
    let start = Barrier::new(4);
    let done = AtomicBool::new(false);
    let open = xdp(4096);
    std::thread::scope(|sc| {
        let rx: Vec<_> = topo
            .receivers
            .iter()
            .map(|ns| {
                let (start, done, open) = (&start, &done, &open);
                sc.spawn(move || {
                    ns.enter();
                    let mut t = open(ns);
                    t.subscribe(group_mac(GROUP)).expect("subscribe");
                    t.set_drop_ratio(loss).expect("drop ratio");
                    start.wait();
                    let (mut n, mut first, mut last) = (0usize, None, Instant::now());
                    let mut batch = Vec::new();
                    let mut quiet = Instant::now();
                    loop {
                        batch.clear();
                        t.recv(&mut batch).expect("recv");
                        if batch.is_empty() {
                            if done.load(Ordering::SeqCst)
                                && quiet.elapsed() > Duration::from_millis(200)
                            {
                                break;
                            }
                            t.wait(Duration::from_millis(1)).expect("wait");
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
                    }
                    let secs = (last - first.unwrap_or(last)).as_secs_f64().max(1e-9);
                    (n, secs)
                })
            })
            .collect();
        sc.spawn(|| {
            topo.sender.enter();
            let mut t = open(&topo.sender);
            let src = t.mac();
            start.wait();
            let mut sent = 0usize;
            let mut batch = Vec::with_capacity(64);
            let mut kept = Vec::new();
            while sent < frames {
                t.reap(&mut kept).expect("reap");
                batch.clear();
                while batch.len() < 64 && sent + batch.len() < frames {
                    let Some(f) = t.alloc() else { break };
                    let buf = t.frame_mut(f);
                    let mut h = Header::new(Kind::Data);
                    h.flags = Flags::WHOLE;
                    h.group = GROUP;
                    h.src = SENDER;
                    h.seq = Seq((sent + batch.len()) as u32);
                    h.payload_len = LEN as u16;
                    buf[FRAME_OVERHEAD..FRAME_OVERHEAD + LEN].fill(0x5a);
                    let (_, len) =
                        Frame::emit(&mut buf[..], group_mac(GROUP), src, ETHERTYPE_DEFAULT, &h)
                            .expect("emit");
                    batch.push(TxDesc {
                        frame: f,
                        len: len as u32,
                    });
                }
                let n = t.transmit(&batch, false).expect("transmit");
                for d in &batch[n..] {
                    t.release(d.frame);
                }
                sent += n;
            }
            done.store(true, Ordering::SeqCst);
        });
        let results: Vec<(usize, f64)> = rx
            .into_iter()
            .map(|h| h.join().expect("receiver"))
            .collect();
        let worst = results
            .iter()
            .map(|&(n, secs)| n as f64 / secs)
            .fold(f64::INFINITY, f64::min);
        let fewest = results.iter().map(|&(n, _)| n).min().unwrap_or(0);
        Figures {
            mbps: worst * LEN as f64 * 8.0 / 1e6,
            frames_per_sec: worst,
            delivered: fewest as f64 / frames as f64,
        }
    })
}

fn protocol(topo: &Topology, algorithm: Algorithm, messages: usize, loss: f64) -> Figures {
    let spec = Spec {
        algorithm,
        messages,
        loss,
        receivers: topo
            .receivers
            .iter()
            .enumerate()
            .map(|(i, r)| (11 + i as u32, r.mac))
            .collect(),
        window_frames: if algorithm == Algorithm::Iterative {
            128
        } else {
            512
        },
        fence: false,
        deadline: Duration::from_secs(300),
        fixed_len: Some(LEN),
    };
    let name = format!("{algorithm} {}%", loss * 100.0);
    let (s, r) = run_nodes(&name, topo, spec.clone(), xdp(4096));
    scenario::report(&name, &spec, &s, &r);
    let secs = r
        .iter()
        .map(|n| n.elapsed.as_secs_f64())
        .fold(0.0, f64::max)
        .max(1e-9);
    Figures {
        mbps: (messages * LEN) as f64 * 8.0 / secs / 1e6,
        frames_per_sec: messages as f64 / secs,
        delivered: 1.0,
    }
}

fn main() {
    let messages: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("MESSAGES is a number"))
        .unwrap_or(200_000);
    let Some(topo) = Topology::new("ratio") else {
        std::process::exit(2);
    };
    let mut rows = Vec::new();
    for loss in [0.0, 0.01] {
        let ceiling = blast(&topo, messages, loss);
        let mak = protocol(&topo, Algorithm::Mak, messages, loss);
        let gbn = protocol(&topo, Algorithm::Iterative, messages, loss);
        rows.push((loss, ceiling, mak, gbn));
    }
    println!(
        "1 sender -> 3 receivers, AF_XDP SKB/copy mode on veth+bridge, {LEN}-byte messages, {messages} per run"
    );
    println!(
        "{:>5} | {:>36} | {:>30} | {:>30}",
        "loss", "raw blast (ceiling), got/sent", "MAK, ratio", "GBN to each in turn, ratio"
    );
    for (loss, c, m, g) in rows {
        println!(
            "{:>4}% | {:>7.1} Mb/s {:>7.0} f/s {:>5.1}% got | {:>7.1} Mb/s {:>7.0} f/s {:>5.1}% | {:>7.1} Mb/s {:>7.0} f/s {:>5.1}%",
            loss * 100.0,
            c.mbps,
            c.frames_per_sec,
            100.0 * c.delivered,
            m.mbps,
            m.frames_per_sec,
            100.0 * m.mbps / c.mbps,
            g.mbps,
            g.frames_per_sec,
            100.0 * g.mbps / c.mbps,
        );
    }
}
