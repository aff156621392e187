//! `mcast-bench auth`: what frame authentication costs users, through
//! mcastd (issue 23 part 1's targets). The same cluster is started again
//! and again, alternately with a cluster key and with `insecure = true`, so
//! that both see the same hour of this noisy host; each start measures
//! goodput at every message size (as `mcast-bench path` does: every message
//! checked at every subscriber) and the one-way latency of messages paced
//! at a fixed rate (publish to the subscriber's read, one process, one
//! clock). Reports medians, the spread, and keyed/insecure ratios.
#![allow(clippy::disallowed_methods, reason = "a benchmark measures wall time")]

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mcast_cli::testbed::Cluster;
use mcast_ipc::{Client, MessageKind};
use serde_json::{json, Value};

use crate::path::{self, median, spread};

/// What to run.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub receivers: usize,
    pub sizes: Vec<usize>,
    pub messages: u64,
    /// Cluster starts per mode (alternating keyed, insecure).
    pub repeat: usize,
    /// Paced rate of the latency runs, messages/s.
    pub rate: u64,
    pub paced_messages: u64,
}

/// Figures of one mode.
#[derive(Debug, Clone, Default)]
struct Mode {
    /// Per size: messages/s at the slowest subscriber, one per start.
    goodput: Vec<Vec<f64>>,
    /// Per size: (p50, p99) one-way latency in µs, one per start.
    latency: Vec<Vec<(f64, f64)>>,
}

pub fn run(cfg: &AuthConfig, json_out: Option<&str>) -> Result<(), String> {
    if let Some(why) = mcast_engine::bench::missing_privileges() {
        return Err(format!(
            "auth needs root ({why}): it runs mcastd clusters in network namespaces"
        ));
    }
    if cfg.sizes.iter().any(|s| !(16..=8192).contains(s)) || cfg.repeat == 0 || cfg.rate == 0 {
        return Err("--sizes: 16 to 8,192 bytes each; --repeat and --rate at least 1".into());
    }
    let mcastd = path::mcastd_binary()?;
    let prims = primitives();
    let alone = engine_alone(cfg);
    let mut keyed = Mode::default();
    let mut insecure = Mode::default();
    for m in [&mut keyed, &mut insecure] {
        m.goodput = vec![Vec::new(); cfg.sizes.len()];
        m.latency = vec![Vec::new(); cfg.sizes.len()];
    }
    for i in 0..cfg.repeat {
        for (name, extra, mode) in [
            ("keyed", "", &mut keyed),
            ("insecure", "insecure = true", &mut insecure),
        ] {
            eprintln!("  start {} of {}: {name}", i + 1, cfg.repeat);
            one_cluster(cfg, &mcastd, extra, mode)?;
        }
    }
    print(cfg, &keyed, &insecure, &alone, &prims);
    if let Some(p) = json_out {
        path::write_json(p, &to_json(cfg, &keyed, &insecure, &alone, &prims))?;
    }
    Ok(())
}

fn one_cluster(
    cfg: &AuthConfig,
    mcastd: &std::path::Path,
    extra: &str,
    mode: &mut Mode,
) -> Result<(), String> {
    let r = cfg.receivers;
    let cluster = Cluster::start(mcastd, "bench-auth", r, |_| extra.to_owned())
        .ok_or("cannot start the mcastd testbed")?;
    let (mut publisher, mut subscribers, group) = path::bench_group(&cluster, r)?;
    let mut next = 0u64;
    for (k, &size) in cfg.sizes.iter().enumerate() {
        let (slowest, _) = path::one_run(
            &mut publisher,
            &mut subscribers,
            group,
            next,
            cfg.messages,
            size,
        )?;
        next += cfg.messages;
        let lat = paced(
            &mut publisher,
            &mut subscribers,
            group,
            size,
            cfg.rate,
            cfg.paced_messages,
        )?;
        eprintln!(
            "    {size} B: {slowest:.0} msg/s at the slowest subscriber; at {}/s p50 {:.1} µs, p99 {:.1} µs",
            cfg.rate, lat.0, lat.1
        );
        mode.goodput[k].push(slowest);
        mode.latency[k].push(lat);
    }
    Ok(())
}

/// Publishes `n` messages at `rate`, each carrying its send time; every
/// subscriber checks order and content and records publish-to-read latency.
/// Returns (p50, p99) in µs over all subscribers.
pub(crate) fn paced(
    publisher: &mut Client,
    subscribers: &mut [Client],
    group: u32,
    size: usize,
    rate: u64,
    n: u64,
) -> Result<(f64, f64), String> {
    let origin = Instant::now();
    let gap = Duration::from_nanos(1_000_000_000 / rate);
    let hists: Vec<Result<Histogram<u64>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = subscribers
            .iter_mut()
            .map(|c| s.spawn(move || receive_stamped(c, group, n, size, origin)))
            .collect();
        let sent = (0..n).try_for_each(|i| {
            // Sleeps as `mcast send --rate` does: the publisher's thread
            // leaves the CPUs to the daemons between messages.
            let due = origin + gap * i as u32;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let mut m = vec![0u8; size];
            m[..8].copy_from_slice(&i.to_be_bytes());
            let t = origin.elapsed().as_nanos() as u64;
            m[8..16].copy_from_slice(&t.to_be_bytes());
            publisher
                .publish_blocking(group, &m, Some(Duration::from_secs(30)))
                .map_err(|e| format!("publish {i}: {e}"))
        });
        let mut out: Vec<_> = hs
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
    let mut all = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for h in hists {
        all.add(h?).map_err(|e| e.to_string())?;
    }
    Ok((
        all.value_at_quantile(0.5) as f64 / 1e3,
        all.value_at_quantile(0.99) as f64 / 1e3,
    ))
}

fn receive_stamped(
    c: &mut Client,
    group: u32,
    n: u64,
    size: usize,
    origin: Instant,
) -> Result<Histogram<u64>, String> {
    let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut next = 0;
    while next < n {
        let m = c
            .recv_timeout(Duration::from_secs(30))
            .map_err(|e| format!("receive after {next}: {e}"))?
            .ok_or_else(|| format!("nothing for 30 s after {next} paced messages"))?;
        let now = origin.elapsed().as_nanos() as u64;
        if m.group != group || m.kind != MessageKind::Data {
            continue;
        }
        if m.data.len() != size {
            return Err(format!(
                "a paced message of {} bytes, not {size}",
                m.data.len()
            ));
        }
        let i = u64::from_be_bytes(m.data[..8].try_into().expect("8 bytes"));
        if i != next {
            return Err(format!("paced message {i} where {next} was due"));
        }
        let t = u64::from_be_bytes(m.data[8..16].try_into().expect("8 bytes"));
        h.record(now.saturating_sub(t)).map_err(|e| e.to_string())?;
        next += 1;
    }
    Ok(h)
}

fn print(cfg: &AuthConfig, keyed: &Mode, insecure: &Mode, alone: &[Alone], prims: &[Primitive]) {
    println!(
        "{} receiver(s); {} starts per mode, alternating; goodput: {} messages per run, medians [min-max], msg/s at the slowest subscriber; latency: {} messages at {}/s, one way, medians of the runs' percentiles",
        cfg.receivers, cfg.repeat, cfg.messages, cfg.paced_messages, cfg.rate
    );
    println!(
        "{:>6}  {:>18} {:>18} {:>7}  {:>14} {:>14} {:>9}  {:>14} {:>14}",
        "size",
        "keyed",
        "insecure",
        "ratio",
        "p50 keyed",
        "p50 insecure",
        "p50 added",
        "p99 keyed",
        "p99 insecure"
    );
    for (k, size) in cfg.sizes.iter().enumerate() {
        let (gk, gi) = (median(&keyed.goodput[k]), median(&insecure.goodput[k]));
        let p = |m: &Mode, f: fn(&(f64, f64)) -> f64| {
            median(&m.latency[k].iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
        };
        let (p50k, p50i) = (p(keyed, |l| l.0), p(insecure, |l| l.0));
        println!(
            "{:>5}B  {:>18} {:>18} {:>7}  {:>11.1} µs {:>11.1} µs {:>6.1} µs  {:>11.1} µs {:>11.1} µs",
            size,
            spread(&keyed.goodput[k]),
            spread(&insecure.goodput[k]),
            path::ratio(gk, gi),
            p50k,
            p50i,
            p50k - p50i,
            p(keyed, |l| l.1),
            p(insecure, |l| l.1),
        );
    }
    println!("the tag alone, per call (ns): seal / open with the sender's kept session key / derive a session key / keyed BLAKE3 of the frame (nonce-free candidate)");
    for p in prims {
        println!(
            "{:>5}B  {:.0} / {:.0} / {:.0} / {:.0}",
            p.size, p.seal_ns, p.open_ns, p.derive_ns, p.blake3_ns
        );
    }
    println!(
        "the engine alone (sender and receiver engines in one thread over the in-memory segment, {ALONE_MESSAGES} messages, medians of {ALONE_RUNS} alternating runs): CPU per message"
    );
    for a in alone {
        println!(
            "{:>5}B  keyed {:.2} µs, insecure {:.2} µs: {:+.2} µs per message for sealing it and its ACKs and opening them",
            a.size,
            a.keyed_us,
            a.insecure_us,
            a.keyed_us - a.insecure_us
        );
    }
}

/// The tag alone, per call, on frames of the sizes they carry: what
/// protocol.md §1.9's choice of AES-256-GCM rests on.
#[derive(Debug, Clone)]
struct Primitive {
    size: usize,
    /// `SessionKey::seal` with the sender's kept session key (the engine's
    /// send path).
    seal_ns: f64,
    /// `Trailer::read` and `SessionKey::verify` with the sender's kept key
    /// (the engine's receive path).
    open_ns: f64,
    /// `SessionKey::derive`: once per sender and run at a receiver.
    derive_ns: f64,
    /// Keyed BLAKE3 over the same frame (the nonce-free candidate).
    blake3_ns: f64,
}

fn primitives() -> Vec<Primitive> {
    use mcast_engine::auth::{ClusterKey, SessionKey, Trailer};
    const CALLS: u32 = 100_000;
    let key = ClusterKey::from_bytes(&[1; 32]);
    let per_call = |f: &mut dyn FnMut(u32)| {
        let t = Instant::now();
        for i in 0..CALLS {
            f(i);
        }
        t.elapsed().as_nanos() as f64 / f64::from(CALLS)
    };
    [64usize, 1024, 1420]
        .into_iter()
        .map(|size| {
            let mut frame = vec![7u8; mcast_wire::FRAME_OVERHEAD + size + 64];
            frame[mcast_wire::field::PAYLOAD_LEN].copy_from_slice(&(size as u16).to_be_bytes());
            let src = mcast_engine::auth::header_src(&frame);
            let end = mcast_wire::FRAME_OVERHEAD + size;
            let sk = SessionKey::derive(&key, src, 1);
            let mut sink = 0u8;
            let seal_ns = per_call(&mut |i| {
                sk.seal(&mut frame, end, u64::from(i) + 1).expect("room");
            });
            let sealed = frame[..end + mcast_engine::auth::TRAILER_LEN].to_vec();
            let open_ns = per_call(&mut |_| {
                let t = Trailer::read(&sealed).expect("a trailer");
                sink ^= u8::from(sk.verify(&sealed, &t));
            });
            assert!(mcast_engine::auth::open(
                &sealed,
                &mcast_engine::auth::Keys::new(key.clone(), None)
            )
            .is_ok());
            let derive_ns = per_call(&mut |i| {
                let k = SessionKey::derive(&key, src, u64::from(i));
                sink ^= u8::from(k.is_for(0, 0, 0));
            });
            let blake3_ns = per_call(&mut |i| {
                frame[mcast_wire::FRAME_OVERHEAD] = i as u8;
                sink ^= blake3::keyed_hash(&[1; 32], &frame[..end]).as_bytes()[0];
            });
            std::hint::black_box(sink);
            Primitive {
                size,
                seal_ns,
                open_ns,
                derive_ns,
                blake3_ns,
            }
        })
        .collect()
}

/// Messages per engine-alone run.
const ALONE_MESSAGES: u64 = 100_000;
/// Runs per mode of the engine alone.
const ALONE_RUNS: usize = 3;

/// The engine alone at one size: µs of CPU per message.
#[derive(Debug, Clone)]
struct Alone {
    size: usize,
    keyed_us: f64,
    insecure_us: f64,
}

/// A sending and a receiving engine polled in turn by this thread over the
/// in-memory segment: everything the engines do per message (publish, seal,
/// open, deliver, ACKs) and nothing else, so the difference is the CPU
/// authentication costs.
fn engine_alone(cfg: &AuthConfig) -> Vec<Alone> {
    use mcast_engine::auth::{ClusterKey, Keys};
    use mcast_engine::{Algorithm, Engine, EngineConfig, MemorySegment};
    let one = |size: usize, keyed: bool| -> f64 {
        let seg = MemorySegment::new();
        let make = |node: u32, session: u64| {
            let mut c = EngineConfig::new(node, 7, Algorithm::Mak);
            c.window_frames = 1024;
            c.max_queued_frames = 1024;
            c.auth = keyed.then(|| mcast_engine::AuthConfig {
                keys: Keys::new(ClusterKey::from_bytes(&[1; 32]), None),
                session,
            });
            Engine::new(seg.port(mcast_wire::node_mac(node), 4096, 2048, 8192), c)
                .expect("an engine over the in-memory segment")
        };
        let (mut tx, mut rx) = (make(1, 1), make(11, 2));
        tx.open_sender(&[11]).expect("sender");
        rx.open_receiver(1).expect("receiver");
        let msg = vec![5u8; size];
        let (mut sent, mut got) = (0, 0);
        let t = Instant::now();
        while got < ALONE_MESSAGES {
            while sent < ALONE_MESSAGES && tx.publish(&msg).is_ok() {
                sent += 1;
            }
            tx.poll().expect("sender poll");
            rx.poll().expect("receiver poll");
            while rx.recv_message().is_some() {
                got += 1;
            }
        }
        t.elapsed().as_secs_f64() * 1e6 / ALONE_MESSAGES as f64
    };
    cfg.sizes
        .iter()
        .map(|&size| {
            let (mut k, mut i) = (Vec::new(), Vec::new());
            for _ in 0..ALONE_RUNS {
                k.push(one(size, true));
                i.push(one(size, false));
            }
            Alone {
                size,
                keyed_us: median(&k).unwrap_or(f64::NAN),
                insecure_us: median(&i).unwrap_or(f64::NAN),
            }
        })
        .collect()
}

fn to_json(
    cfg: &AuthConfig,
    keyed: &Mode,
    insecure: &Mode,
    alone: &[Alone],
    prims: &[Primitive],
) -> Value {
    let mode = |m: &Mode| {
        json!(cfg
            .sizes
            .iter()
            .enumerate()
            .map(|(k, s)| json!({
                "size": s,
                "slowest_msgs_per_sec": m.goodput[k],
                "paced_p50_us": m.latency[k].iter().map(|l| l.0).collect::<Vec<_>>(),
                "paced_p99_us": m.latency[k].iter().map(|l| l.1).collect::<Vec<_>>(),
            }))
            .collect::<Vec<_>>())
    };
    json!({
        "receivers": cfg.receivers,
        "messages": cfg.messages,
        "repeat": cfg.repeat,
        "rate": cfg.rate,
        "paced_messages": cfg.paced_messages,
        "kernel": mcast_engine::bench::kernel_release(),
        "keyed": mode(keyed),
        "insecure": mode(insecure),
        "primitives_ns_per_call": prims.iter().map(|p| json!({
            "size": p.size, "seal": p.seal_ns, "open": p.open_ns, "derive": p.derive_ns, "blake3_keyed": p.blake3_ns,
        })).collect::<Vec<_>>(),
        "engine_alone_us_per_msg": alone.iter().map(|a| json!({
            "size": a.size, "keyed": a.keyed_us, "insecure": a.insecure_us,
        })).collect::<Vec<_>>(),
    })
}
