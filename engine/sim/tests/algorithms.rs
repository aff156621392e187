//! The real algorithms under the simulator: smoke runs, then seeded sweeps of
//! random configurations with faults, each checked step by step and, once the
//! network heals, for completion.

use mcast_sim::sweep::SweepPlan;
use mcast_sim::{run, Algorithm, Faults, SimConfig};

#[test]
fn mak_with_three_receivers_and_two_percent_loss_completes() {
    let cfg = SimConfig {
        algorithm: Algorithm::Mak,
        receivers: 3,
        messages: 1000,
        faults: Faults {
            loss: 0.02,
            faults_until: Some(mcast_proto::Instant(50_000_000)),
            ..Faults::default()
        },
        seed: 1,
        ..SimConfig::default()
    };
    let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
    assert!(r.completed, "{r:#?}");
    assert_eq!(r.delivered_messages, vec![1000; 3]);
    assert!(r.frames_needing_repair > 0);
    assert!(r.wire.data_retransmit > 0);
    assert!(r.wire.nak > 0);
    eprintln!("{r:#?}");
}

/// Messages of a mebibyte and more cross the network in hundreds of fragments,
/// under loss, and are reassembled byte for byte (the checker compares every
/// fragment and reassembles whole messages).
#[test]
fn one_mebibyte_messages_survive_loss_with_every_algorithm() {
    for algo in Algorithm::ALL {
        let cfg = SimConfig {
            algorithm: algo,
            receivers: 3,
            messages: 3,
            min_size: 1 << 20,
            max_size: (1 << 20) + 1000,
            window_frames: 512,
            faults: Faults {
                loss: 0.01,
                faults_until: Some(mcast_proto::Instant(20_000_000)),
                ..Faults::default()
            },
            seed: 20,
            ..SimConfig::default()
        };
        let cfg = if algo == Algorithm::Nak {
            // Plain NAK never frees: room for the whole run.
            SimConfig {
                window_frames: 4096,
                ..cfg
            }
        } else {
            cfg
        };
        let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
        if mcast_sim::guarantees_completion(algo) {
            assert!(r.completed, "{algo}: {:?}", r.stop);
            assert_eq!(r.delivered_messages, vec![3; 3], "{algo}");
        }
        assert!(
            r.wire.data_original >= 3 * 721,
            "{algo}: fragmented into 1456-byte frames"
        );
    }
}

/// Seeds per algorithm in the sweeps below: 1,000 by default (the issue's
/// floor), more with `MCAST_SWEEP_SEEDS=N`.
fn sweep_seeds() -> u64 {
    std::env::var("MCAST_SWEEP_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// Runs `sweep_seeds()` random configurations of `algo` (random receivers,
/// sizes, windows, rates and faults: loss, duplication, reordering, corruption,
/// partitions), every checker on at every step, and liveness once the faults
/// stop for the algorithms that promise completion. Panics with the failures,
/// each with its seed and replay command.
fn sweep(algo: Algorithm) {
    let plan = SweepPlan {
        seeds: 0..sweep_seeds(),
        algorithms: vec![algo],
        jobs: 1,
        batch: false,
    };
    let outcome = mcast_sim::sweep::sweep(&plan, |_, _| {});
    eprintln!("{}", outcome.summary());
    if let Err(e) = outcome.check() {
        panic!("{e}");
    }
    assert_eq!(outcome.runs, sweep_seeds());
    let t = outcome.tallies[0];
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
}

#[test]
fn mak_survives_random_faults() {
    sweep(Algorithm::Mak);
}

#[test]
fn ack_survives_random_faults() {
    sweep(Algorithm::Ack);
}

#[test]
fn nak_stays_safe_under_random_faults() {
    sweep(Algorithm::Nak);
}

#[test]
fn iterative_survives_random_faults() {
    sweep(Algorithm::Iterative);
}

/// A bug the simulator found in `mcast-proto`: with a window of 51 frames and
/// the stream starting at u32::MAX - 100, `SeqWindow` mapped u32::MAX and 50 to
/// the same slot (`seq % 51`). Fixed; this keeps it fixed for every algorithm.
#[test]
fn windows_that_do_not_divide_2_pow_32_survive_wrap_around() {
    let failures: Vec<String> = Algorithm::ALL
        .into_iter()
        .filter_map(|algo| run(&SimConfig::random(5, algo)).err())
        .map(|f| f.to_string())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The scale target: 512 receivers, 10,000 messages of 64 bytes, 1 % loss.
/// Run it in release mode: `cargo test --release -p mcast-sim --test
/// algorithms -- --ignored five_hundred_twelve --nocapture`.
#[test]
#[ignore = "slow in debug builds; run with --release"]
fn five_hundred_twelve_receivers_ten_thousand_messages() {
    // Plain NAK at this scale is a NAK implosion that never ends (no
    // completion guarantee) and iterative Go-Back-N takes minutes: the
    // scale target is the multicast algorithms that complete.
    for algo in [Algorithm::Mak, Algorithm::Ack] {
        let cfg = SimConfig {
            algorithm: algo,
            receivers: 512,
            messages: 10_000,
            faults: Faults {
                loss: 0.01,
                faults_until: Some(mcast_proto::Instant(1_000_000_000)),
                ..Faults::default()
            },
            liveness_bound: mcast_proto::Duration::from_secs(10),
            seed: 512,
            ..SimConfig::default()
        };
        let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
        eprintln!(
            "{algo}: {:?}, {} steps, virtual {:?}, frames {:?}, needing repair {}",
            r.stop, r.steps, r.end_time, r.wire, r.frames_needing_repair
        );
        if mcast_sim::guarantees_completion(algo) {
            assert!(r.completed);
        }
    }
}
