//! The simulator's own mechanics, checked with perfect-link test machines:
//! timing, addressing, faults, determinism, the checkers and the bounds.

mod common;

use common::{run_perfect, Bug, ReceiverOpts, SenderOpts};
use mcast_proto::{Dest, Duration, Instant};
use mcast_sim::{Algorithm, Faults, LinkConfig, Partition, SimConfig, StopReason};

/// A config whose label says "no completion guarantee", for runs that are
/// meant to end unfinished without a liveness failure.
fn unguaranteed(cfg: SimConfig) -> SimConfig {
    SimConfig {
        algorithm: Algorithm::Nak,
        ..cfg
    }
}

#[test]
fn a_frame_arrives_after_serialization_and_latency() {
    let cfg = SimConfig {
        receivers: 2,
        messages: 1,
        trace_lines: 10,
        ..SimConfig::default()
    };
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert!(r.completed, "{r:?}");
    // 58 + 64 bytes at 10 Gbit/s: 97.6 ns, rounded up, then 10 us of latency.
    assert_eq!(r.completion_time, Some(Instant(98 + 10_000)));
    assert_eq!(r.delivered_messages, vec![1, 1]);
    assert_eq!(r.wire.data_original, 1);
    assert_eq!(r.wire.copies, 2);
    assert_eq!(r.wire.bytes, 122);
    assert!(
        r.trace[0].starts_with("t=0.000us 1->group DATA #4294967195 len=64 last"),
        "{:?}",
        r.trace
    );
}

#[test]
fn a_far_receiver_hears_later_by_its_extra_latency() {
    let cfg = SimConfig {
        receivers: 2,
        messages: 1,
        receiver_latency: vec![(3, Duration::from_micros(40))],
        ..SimConfig::default()
    };
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert!(r.completed, "{r:?}");
    // Node 2 completes at 98 ns + 10 us; node 3 at 98 ns + 10 us + 40 us.
    assert_eq!(r.completion_time, Some(Instant(98 + 10_000 + 40_000)));
    let replay = cfg.replay_args();
    assert!(replay.contains("--latency-at 3=40000"), "{replay}");
    let args: Vec<&str> = replay.split(' ').collect();
    assert_eq!(
        SimConfig::parse_args(&args).unwrap(),
        cfg,
        "the replay rebuilds the config"
    );
}

#[test]
fn the_nic_serializes_back_to_back_frames() {
    let cfg = SimConfig {
        receivers: 1,
        messages: 10,
        min_size: 1192,
        max_size: 1192, // 1250-byte frames: 1 us each at 10 Gbit/s
        ..SimConfig::default()
    };
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_eq!(r.completion_time, Some(Instant(10 * 1_000 + 10_000)));
}

/// Runs until every frame has settled: the sender never idles, so the run
/// stops when nothing is left to happen rather than at completion.
fn settled(receivers: u32, messages: u64) -> (SimConfig, SenderOpts) {
    let cfg = unguaranteed(SimConfig {
        receivers,
        messages,
        ..SimConfig::default()
    });
    let s = SenderOpts {
        never_idle: true,
        ..SenderOpts::default()
    };
    (cfg, s)
}

#[test]
fn a_group_frame_reaches_every_node_but_its_sender() {
    let (cfg, s) = settled(3, 5);
    let opts = ReceiverOpts {
        ack_to: Some(Dest::Group),
        bug: None,
    };
    let r = run_perfect(&cfg, s, opts).unwrap();
    assert_eq!(r.delivered_messages, vec![5; 3]);
    assert_eq!(
        r.sender_counters.data_received, 0,
        "the sender never hears its own data"
    );
    assert_eq!(r.receiver_counters.data_received, 3 * 5);
    assert_eq!(r.sender_counters.acks_received, 3 * 5);
    assert_eq!(
        r.receiver_counters.acks_received,
        3 * 2 * 5,
        "each hears the two others"
    );
    assert_eq!(r.wire.ack, 15);
    assert_eq!(r.wire.copies, 5 * 3 + 15 * 3);
}

#[test]
fn a_node_frame_reaches_one_node() {
    let (cfg, s) = settled(3, 5);
    let opts = ReceiverOpts {
        ack_to: Some(Dest::Node(1)),
        bug: None,
    };
    let r = run_perfect(&cfg, s, opts).unwrap();
    assert_eq!(r.sender_counters.acks_received, 15);
    assert_eq!(r.receiver_counters.acks_received, 0);
    assert_eq!(r.wire.copies, 15 + 15);
}

#[test]
fn total_loss_at_one_receiver_delivers_nothing_there() {
    let cfg = unguaranteed(SimConfig {
        receivers: 3,
        messages: 50,
        faults: Faults {
            per_receiver_loss: vec![(3, 1.0)],
            ..Faults::default()
        },
        ..SimConfig::default()
    });
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_eq!(r.stop, StopReason::Quiescent);
    assert!(!r.completed);
    assert_eq!(r.delivered_messages, vec![50, 0, 50]);
    assert_eq!(r.wire.copies_lost, 50);
    assert_eq!(r.frames_needing_repair, 50);
}

#[test]
fn corruption_is_caught_by_the_crc_and_counted() {
    let cfg = unguaranteed(SimConfig {
        receivers: 2,
        messages: 10,
        faults: Faults {
            corrupt: 1.0,
            ..Faults::default()
        },
        trace_lines: 100,
        ..SimConfig::default()
    });
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_eq!(r.delivered_messages, vec![0, 0]);
    assert_eq!(r.checksum_failures, 20);
    assert_eq!(r.receiver_counters.checksum_failures, 20);
    assert_eq!(r.wire.copies_corrupted, 20);
    assert_eq!(r.frames_needing_repair, 10);
    assert!(r.trace.iter().any(|l| l.contains("corrupt at 2,3")));
    assert!(r.trace.iter().any(|l| l.contains("dropped a frame from 1")));

    // Some corruption: the run still checks out, and what was caught is counted.
    let cfg = SimConfig {
        messages: 200,
        faults: Faults {
            corrupt: 0.1,
            ..Faults::default()
        },
        trace_lines: 0,
        ..cfg
    };
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert!(r.checksum_failures > 0);
    assert_eq!(r.checksum_failures, r.wire.copies_corrupted);
}

#[test]
fn a_partition_drops_both_directions() {
    // One message every 10 us; node 2 is cut off from 25 us on. Data sent at
    // 0, 10 and 20 us reach it (and its ACKs of the first two leave before
    // 25 us); its ACK of the third, sent at 30.1 us, and all later data are lost.
    let cfg = unguaranteed(SimConfig {
        receivers: 2,
        messages: 10,
        messages_per_sec: Some(100_000),
        faults: Faults {
            partitions: vec![Partition {
                node: 2,
                from: Instant(25_000),
                until: Instant(1_000_000),
            }],
            ..Faults::default()
        },
        ..SimConfig::default()
    });
    let opts = ReceiverOpts {
        ack_to: Some(Dest::Node(1)),
        bug: None,
    };
    let r = run_perfect(&cfg, SenderOpts::default(), opts).unwrap();
    assert_eq!(r.delivered_messages, vec![3, 10]);
    assert_eq!(r.sender_counters.acks_received, 2 + 10);
    assert_eq!(r.receiver_counters.acks_sent, 3 + 10);
    assert_eq!(r.wire.copies_lost, 7 + 1);
}

#[test]
fn faults_stop_at_faults_until() {
    let cfg = unguaranteed(SimConfig {
        receivers: 2,
        messages: 10,
        messages_per_sec: Some(100_000),
        faults: Faults {
            loss: 1.0,
            faults_until: Some(Instant(45_000)),
            ..Faults::default()
        },
        ..SimConfig::default()
    });
    let r = run_perfect(&cfg, SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_eq!(
        r.wire.copies_lost,
        2 * 5,
        "messages sent at 0..=40 us are lost"
    );
}

fn faulty(seed: u64) -> SimConfig {
    unguaranteed(SimConfig {
        receivers: 4,
        messages: 300,
        min_size: 0,
        max_size: 3000,
        link: LinkConfig {
            jitter: Duration::from_micros(20),
            ..LinkConfig::default()
        },
        faults: Faults {
            loss: 0.01,
            duplicate: 0.05,
            corrupt: 0.01,
            ..Faults::default()
        },
        seed,
        trace_lines: 1000,
        ..SimConfig::default()
    })
}

#[test]
fn same_seed_same_run_other_seed_other_trace() {
    let a = run_perfect(&faulty(7), SenderOpts::default(), ReceiverOpts::default()).unwrap();
    let b = run_perfect(&faulty(7), SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_eq!(a, b);
    let c = run_perfect(&faulty(8), SenderOpts::default(), ReceiverOpts::default()).unwrap();
    assert_ne!(a.trace, c.trace);
}

fn expect_failure(cfg: &SimConfig, s: SenderOpts, bug: Bug, what: &str) {
    let r = ReceiverOpts {
        ack_to: None,
        bug: Some(bug),
    };
    let f = run_perfect(cfg, s, r).expect_err("the checker must catch the bug");
    let text = f.to_string();
    assert!(f.reason.contains(what), "{bug:?}: {text}");
    assert!(text.contains(&format!("seed: {}", cfg.seed)), "{text}");
    assert!(
        text.contains(&format!(
            "replay: cargo run --release -p mcast-bench -- run --algo {} --seed {}",
            cfg.algorithm, cfg.seed
        )),
        "{text}"
    );
    // The replay command rebuilds the same config.
    let args = f.replay.split_once(" -- run ").unwrap().1;
    assert_eq!(&SimConfig::parse_args(args.split(' ')).unwrap(), cfg);
}

#[test]
fn the_checkers_catch_broken_endpoints() {
    let dup = SimConfig {
        seed: 42,
        receivers: 2,
        faults: Faults {
            duplicate: 0.5,
            ..Faults::default()
        },
        ..SimConfig::default()
    };
    expect_failure(
        &dup,
        SenderOpts::default(),
        Bug::NoDedupe,
        "out of order, duplicated",
    );
    let clean = SimConfig {
        seed: 43,
        receivers: 2,
        ..SimConfig::default()
    };
    expect_failure(
        &clean,
        SenderOpts::default(),
        Bug::SwapPairs,
        "out of order",
    );
    expect_failure(
        &dup,
        SenderOpts::default(),
        Bug::DoubleRelease,
        "not allocated",
    );
    expect_failure(
        &dup,
        SenderOpts::default(),
        Bug::Leak,
        "buffer conservation",
    );
    let small = SimConfig {
        window_frames: 8,
        ..clean
    };
    let hoard = SenderOpts {
        hoard: true,
        ..SenderOpts::default()
    };
    let f = run_perfect(&small, hoard, ReceiverOpts::default()).unwrap_err();
    assert!(f.reason.contains("more than its window of 8"), "{f}");
    assert_eq!(f.seed, 43);
}

#[test]
fn bounds_stop_a_run_that_never_completes() {
    let endless = SenderOpts {
        never_idle: true,
        tick: Some(Duration::from_micros(100)),
        ..SenderOpts::default()
    };
    let cfg = SimConfig {
        messages: 3,
        max_virtual_time: Duration::from_millis(5),
        liveness_bound: Duration::from_secs(10),
        ..SimConfig::default()
    };
    let r = run_perfect(&cfg, endless, ReceiverOpts::default()).unwrap();
    assert_eq!(r.stop, StopReason::MaxVirtualTime);
    assert!(!r.completed);
    assert_eq!(r.end_time, Instant(5_000_000));
    assert_eq!(r.delivered_messages, vec![3, 3, 3]);

    let cfg = SimConfig {
        max_steps: 20,
        ..cfg
    };
    let r = run_perfect(&cfg, endless, ReceiverOpts::default()).unwrap();
    assert_eq!(r.stop, StopReason::MaxSteps);
    assert_eq!(r.steps, 20);

    // With a completion guarantee, the liveness bound fails it instead.
    let cfg = SimConfig {
        liveness_bound: Duration::from_millis(1),
        max_steps: u64::MAX,
        ..cfg
    };
    let f = run_perfect(&cfg, endless, ReceiverOpts::default()).unwrap_err();
    assert!(f.reason.starts_with("no progress"), "{f}");
    assert!(f.reason.contains("sender idle: false"), "{f}");
    // The bound counts from when the link could have carried the whole run.
    assert_eq!(f.time, Instant(1_000_000) + cfg.wire_time());
}

#[test]
fn back_pressure_and_fragments_check_out() {
    // A window of 4 and messages of up to 10 fragments: the application is
    // refused often and retries; every byte still arrives in order.
    let cfg = SimConfig {
        receivers: 3,
        messages: 100,
        min_size: 0,
        max_size: 1000,
        max_payload: 100,
        window_frames: 4,
        ..SimConfig::default()
    };
    let slow = SenderOpts {
        tick: Some(Duration::from_micros(1)),
        release_on_tick: true,
        ..SenderOpts::default()
    };
    let r = run_perfect(&cfg, slow, ReceiverOpts::default()).unwrap();
    assert!(r.completed);
    assert!(r.sender_counters.window_full > 0, "{r:?}");
    assert_eq!(r.delivered_messages, vec![100; 3]);
    assert_eq!(r.wire.data_original, cfg.total_frames());
    assert_eq!(r.max_sender_buffers, 4);
}

#[test]
fn a_timer_that_never_moves_is_a_livelock_failure() {
    let spin = SenderOpts {
        never_idle: true,
        tick: Some(Duration::ZERO),
        ..SenderOpts::default()
    };
    let cfg = SimConfig {
        seed: 9,
        ..SimConfig::default()
    };
    let f = run_perfect(&cfg, spin, ReceiverOpts::default()).unwrap_err();
    assert!(f.reason.starts_with("timer livelock: node 1"), "{f}");
    assert_eq!(f.time, Instant::ZERO);
}

#[test]
fn a_panicking_machine_is_a_failure_with_its_seed() {
    let cfg = SimConfig {
        seed: 11,
        receivers: 2,
        ..SimConfig::default()
    };
    let f = mcast_sim::run_with(
        &cfg,
        |stream, _| common::PerfectSender::new(stream, SenderOpts::default()),
        |stream| {
            let mut r = common::PerfectReceiver::new(stream, ReceiverOpts::default());
            r.panic_on_data = true;
            r
        },
    )
    .unwrap_err();
    assert!(f.reason.contains("panicked: the receiver broke"), "{f}");
    assert!(f.to_string().contains("seed: 11"));
    assert!(f.step > 0);
}
