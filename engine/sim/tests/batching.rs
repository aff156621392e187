//! Batching under the simulator (issue 25): the sender's application packs
//! small whole messages into shared DATA frames as the engine's send queue
//! does (`SimConfig::batch`), and the checkers take every record of a
//! batched frame apart: the next message, its exact length and bytes.

use mcast_proto::{Duration, Instant};
use mcast_sim::sweep::{sweep, SweepPlan};
use mcast_sim::{run, Algorithm, Faults, SimConfig, SimReport};

/// Seeds of a batching sweep: `default` (sized so each sweep takes a
/// second or two in a debug build), or `MCAST_BATCH_SWEEP_SEEDS=N`.
fn sweep_seeds(default: u64) -> u64 {
    std::env::var("MCAST_BATCH_SWEEP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `sweep_seeds(seeds)` runs of [`SimConfig::random_batched`] for `algo`: up to
/// 1,000 messages, mostly small (some fragmented), random receivers,
/// windows and rates, under loss, duplication, jitter (reordering),
/// corruption and partitions, every checker on at every step and liveness
/// once the faults stop. Panics with the failures, each with its seed and
/// its replay command (which carries `--batch true`).
fn batching_sweep(algo: Algorithm, seeds: u64) {
    let seeds = sweep_seeds(seeds);
    let plan = SweepPlan {
        seeds: 0..seeds,
        algorithms: vec![algo],
        jobs: 2,
        batch: true,
    };
    let outcome = sweep(&plan, |_, _| {});
    eprintln!("{}", outcome.summary());
    if let Err(e) = outcome.check() {
        panic!("{e}");
    }
    let t = outcome.tallies[0];
    assert_eq!(t.runs, seeds);
    if mcast_sim::guarantees_completion(algo) {
        assert_eq!(
            t.completed, t.runs,
            "every run completes once the faults stop"
        );
    } else {
        assert!(
            t.completed > 0,
            "plain NAK completes when no tail frame is lost"
        );
    }
    // Batching happened, a lot: fewer frames than messages over the sweep.
    assert!(
        t.batched_messages * 3 > t.messages && t.frames < t.messages,
        "{t:?}"
    );
    // And fragmented messages were mixed in: without batching, the frames
    // would outnumber the messages.
    assert!(t.frames + t.batched_messages > t.messages, "{t:?}");
}

#[test]
fn mak_batching_survives_random_faults() {
    batching_sweep(Algorithm::Mak, 500);
}

#[test]
fn ack_batching_survives_random_faults() {
    batching_sweep(Algorithm::Ack, 200);
}

#[test]
fn nak_batching_stays_safe_under_random_faults() {
    batching_sweep(Algorithm::Nak, 60);
}

#[test]
fn iterative_batching_survives_random_faults() {
    // Unicast Go-Back-N to each receiver in turn: the slowest by far.
    batching_sweep(Algorithm::Iterative, 40);
}

fn completes(cfg: &SimConfig) -> SimReport {
    let r = run(cfg).unwrap_or_else(|f| panic!("{f}"));
    assert!(r.completed, "{:?}", r.stop);
    assert_eq!(
        r.delivered_messages,
        vec![cfg.messages; cfg.receivers as usize]
    );
    assert_eq!(r.sent_messages, cfg.messages);
    r
}

/// Saturation: every message is due at once, so each frame is filled: 22
/// records of 2 + 64 bytes fit in 1456, 23 do not.
#[test]
fn saturation_fills_each_frame_with_small_messages() {
    for algo in [Algorithm::Mak, Algorithm::Ack] {
        let cfg = SimConfig {
            algorithm: algo,
            receivers: 3,
            messages: 2000,
            batch: true,
            faults: Faults {
                loss: 0.02,
                duplicate: 0.01,
                corrupt: 0.01,
                faults_until: Some(Instant(5_000_000)),
                ..Faults::default()
            },
            link: mcast_sim::LinkConfig {
                jitter: Duration::from_micros(5),
                ..Default::default()
            },
            seed: 25,
            ..SimConfig::default()
        };
        let r = completes(&cfg);
        assert!(r.messages_per_frame() >= 10.0, "{algo}: {r:?}");
        assert_eq!(r.data_frames, 2000_u64.div_ceil(22), "{algo}");
        assert_eq!(r.batched_frames, r.data_frames, "{algo}");
        assert_eq!(r.batched_messages, 2000 - r.data_frames, "{algo}");
        assert!(r.wire.data_retransmit > 0, "{algo}: batches were repaired");
        // The same run without batching: one frame a message.
        let plain = completes(&SimConfig {
            batch: false,
            ..cfg.clone()
        });
        assert_eq!(plain.data_frames, 2000, "{algo}");
        assert_eq!(plain.batched_messages, 0, "{algo}");
    }
}

/// Messages offered one at a time, far apart (100 µs, a round trip is
/// 20 µs): each leaves alone, at once, as the engine sends a lone message.
#[test]
fn messages_that_come_one_at_a_time_are_not_batched() {
    let cfg = SimConfig {
        algorithm: Algorithm::Mak,
        receivers: 3,
        messages: 300,
        batch: true,
        messages_per_sec: Some(10_000),
        faults: Faults {
            loss: 0.01,
            faults_until: Some(Instant(10_000_000)),
            ..Faults::default()
        },
        seed: 26,
        ..SimConfig::default()
    };
    let r = completes(&cfg);
    assert_eq!(r.data_frames, 300, "{r:?}");
    assert_eq!((r.batched_frames, r.batched_messages), (0, 0));
}

/// At an offered rate above what a small window lets through, the frame the
/// sender refused takes the messages that fall due while it waits (the only
/// way messages offered one at a time come to share a frame).
#[test]
fn a_refused_frame_takes_the_messages_due_while_it_waits() {
    let cfg = SimConfig {
        algorithm: Algorithm::Ack,
        receivers: 2,
        messages: 1000,
        min_size: 1,
        max_size: 100,
        window_frames: 4,
        batch: true,
        messages_per_sec: Some(2_000_000),
        seed: 27,
        trace_lines: 400,
        ..SimConfig::default()
    };
    let r = completes(&cfg);
    assert!(r.batched_messages > 500, "{r:?}");
    assert!(r.data_frames < 500, "{r:?}");
    assert!(
        r.trace
            .iter()
            .any(|l| l.contains("DATA") && l.contains(" batch")),
        "the trace names batched frames"
    );
}

/// A message of exactly one frame, or larger, is never packed; the small
/// ones between them still are. Payloads of 100 bytes, messages of 0 to
/// 250: whole, batched and fragmented messages alternate.
#[test]
fn fragmented_and_full_frame_messages_never_share_a_frame() {
    let cfg = SimConfig {
        algorithm: Algorithm::Mak,
        receivers: 2,
        messages: 1000,
        min_size: 0,
        max_size: 250,
        max_payload: 100,
        window_frames: 16,
        batch: true,
        faults: Faults {
            loss: 0.03,
            faults_until: Some(Instant(2_000_000)),
            ..Faults::default()
        },
        seed: 28,
        ..SimConfig::default()
    };
    let r = completes(&cfg);
    let unbatched = cfg.total_frames();
    assert_eq!(r.data_frames + r.batched_messages, unbatched, "{r:?}");
    assert!(r.batched_messages > 50 && unbatched > cfg.messages, "{r:?}");
}
