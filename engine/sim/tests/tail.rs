//! MAK's tail (docs/protocol.md §3.1, "The idle sender"): an idle sender
//! advertises its position instead of asking every receiver to ACK every
//! burst, so a lost last frame is still repaired, within the bound the spec
//! states, and ACK rounds no longer follow the message rate.
//!
//! A failing seed prints its replay command (`mcast-bench run ...`).

use mcast_proto::mak::{NakTimer, TailPolicy};
use mcast_proto::{Duration, Instant, Rng};
use mcast_sim::{run, Algorithm, Faults, LinkConfig, Partition, SimConfig};

/// Paced lone frames to `receivers`, lossless.
fn paced(receivers: u32, messages: u64, rate: u64) -> SimConfig {
    SimConfig {
        algorithm: Algorithm::Mak,
        receivers,
        messages,
        min_size: 64,
        max_size: 1000,
        messages_per_sec: Some(rate),
        window_frames: 1024,
        ..SimConfig::default()
    }
}

/// The spec's bound on repairing a lost tail when nothing else is lost: the
/// first heartbeat leaves `first_grtts` GRTTs after the last frame, the
/// receiver NAKs within its NAK window, the repair comes back: with the GRTT
/// `g`, `first_grtts · g + W_nak(g, n) + 3 one-way delays`, plus the frames'
/// time on the wire.
fn tail_bound(cfg: &SimConfig, g: Duration) -> Duration {
    let TailPolicy::Advertise { first_grtts, .. } = cfg.protocol.mak.tail else {
        unreachable!("advertising runs only")
    };
    let n = u16::try_from(cfg.receivers).unwrap_or(u16::MAX);
    g * first_grtts
        + cfg.protocol.mak.nak_timer.window(g, n)
        + cfg.link.latency * 3
        + Duration::from_micros(5)
}

/// One seeded run: paced messages, and one receiver cut off for the moment
/// the last frame passes, so only that frame is lost, and only there.
fn lost_tail(seed: u64) -> SimConfig {
    let mut rng = Rng::new(seed ^ 0x7a11_0000);
    let receivers = rng.range(1, 32) as u32;
    let messages = rng.range(20, 200);
    let rate = rng.range(2_000, 100_000);
    let mut cfg = paced(receivers, messages, rate);
    cfg.seed = seed;
    cfg.window_frames = rng.range(16, 256) as u32;
    let victim = rng.range(2, u64::from(receivers) + 1) as u32;
    let last = cfg.last_offer_time();
    // The frame reaches the receivers one link latency after its offer
    // (plus its time on the wire): the cut covers that instant only.
    let until = last + cfg.link.latency + Duration::from_micros(3);
    cfg.faults = Faults {
        partitions: vec![Partition {
            node: victim,
            from: last,
            until,
        }],
        faults_until: Some(until),
        ..Faults::default()
    };
    cfg
}

#[test]
fn a_lost_last_frame_is_repaired_within_the_specified_bound() {
    let mut slowest = Duration::ZERO;
    for seed in 0..1_000 {
        let cfg = lost_tail(seed);
        let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
        let replay = cfg.replay_command();
        assert!(r.completed, "seed {seed}: {:?}\nreplay: {replay}", r.stop);
        assert!(
            r.frames_needing_repair >= 1,
            "seed {seed}: the tail was not cut\nreplay: {replay}"
        );
        let took = r.delivered_time.expect("completed") - cfg.last_offer_time();
        // The sender's GRTT is the initial 100 us until measured, and the
        // measured one on this 10 us segment is smaller.
        let bound = tail_bound(&cfg, cfg.protocol.mak.initial_grtt);
        assert!(
            took <= bound,
            "seed {seed}: the tail took {took:?} to repair, the bound is {bound:?}\nreplay: {replay}"
        );
        assert!(
            r.sender_counters.adverts_sent >= 1,
            "seed {seed}\nreplay: {replay}"
        );
        slowest = slowest.max(took);
    }
    println!("slowest tail repair over 1,000 seeds: {slowest:?}");
}

#[test]
fn the_paper_recovers_a_lost_tail_only_at_its_ack_wait() {
    // The comparison: the same cut with the paper's tail waits for the
    // ACK-wait timer (at least its 200 us floor), as docs/protocol.md says.
    let mut cfg = lost_tail(1);
    let advertise = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
    cfg.protocol.mak.tail = TailPolicy::AckLast;
    let paper = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
    let last = cfg.last_offer_time();
    let a = advertise.delivered_time.expect("completed") - last;
    let p = paper.delivered_time.expect("completed") - last;
    assert!(p >= cfg.protocol.mak.ack_wait.min, "paper: {p:?}");
    assert!(a < p, "advertising {a:?}, the paper {p:?}");
}

#[test]
fn paced_acks_follow_the_window_not_the_message_rate() {
    // 64 receivers, 2,000 lone messages at 10,000/s: a round per half window
    // (and none per message), where the paper has every receiver ACK every
    // message.
    let receivers = 64;
    let cfg = paced(receivers, 2_000, 10_000);
    let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
    assert!(r.completed);
    let rounds = 2_000u64.div_ceil(u64::from(cfg.window_frames / 2)) + 1;
    assert!(
        r.wire.ack <= rounds * u64::from(receivers),
        "{} ACK frames for 2,000 messages, at most {} expected",
        r.wire.ack,
        rounds * u64::from(receivers)
    );
    assert!(r.sender_counters.ack_reqs_sent <= rounds);
    // The heartbeats: at most one per message here (each message leaves
    // before the second heartbeat of the gap before it would be due).
    assert!(r.wire.advert <= 2_000, "{} heartbeats", r.wire.advert);
    let mut paper_cfg = cfg.clone();
    paper_cfg.protocol.mak.tail = TailPolicy::AckLast;
    let paper = run(&paper_cfg).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(paper.wire.ack, 2_000 * u64::from(receivers));
    assert_eq!(paper.wire.advert, 0);
}

#[test]
fn lost_acks_are_asked_for_again_from_their_members_only() {
    // At 1 % loss some ACK of a 64-receiver round is nearly always lost: a
    // multicast request at each expiry had every receiver ACK again. The
    // silent ones are asked one by one, so the ACKs stay within a tenth of
    // one per receiver per round.
    let receivers = 64u64;
    for seed in 0..4 {
        let mut cfg = paced(receivers as u32, 2_000, 10_000);
        cfg.seed = seed;
        cfg.faults.loss = 0.01;
        cfg.faults.faults_until = Some(Instant(u64::MAX));
        let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
        assert!(r.completed, "seed {seed}\nreplay: {}", cfg.replay_command());
        let rounds = 2_000u64.div_ceil(u64::from(cfg.window_frames / 2)) + 1;
        assert!(
            r.wire.ack * 10 <= rounds * receivers * 11,
            "seed {seed}: {} ACK frames for {rounds} rounds of {receivers}\nreplay: {}",
            r.wire.ack,
            cfg.replay_command()
        );
    }
}

#[test]
fn the_tail_survives_random_faults_with_both_policies() {
    // The sweep's faults (loss, duplication, corruption, partitions, jitter)
    // on paced and saturated runs, each policy on every seed.
    let mut failures = Vec::new();
    for seed in 0..300 {
        for tail in [TailPolicy::ADVERTISE, TailPolicy::AckLast] {
            let mut cfg = SimConfig::random(seed, Algorithm::Mak);
            cfg.protocol.mak.tail = tail;
            if let Err(f) = run(&cfg) {
                failures.push(format!("{f}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn an_idle_sender_with_a_slow_link_still_asks_once() {
    // A far receiver (1 ms away): the watermark rounds (every 8 frames)
    // measure the GRTT at about 2 ms, and the idle round waits 16 GRTTs,
    // not the 1 ms floor.
    let mut cfg = paced(2, 50, 1_000);
    cfg.window_frames = 16;
    cfg.receiver_latency = vec![(3, Duration::from_millis(1))];
    cfg.link = LinkConfig::default();
    cfg.protocol.mak.nak_timer = NakTimer::Fixed {
        min: Duration::from_micros(10),
        max: Duration::from_micros(10),
    };
    let r = run(&cfg).unwrap_or_else(|f| panic!("{f}"));
    assert!(r.completed);
    let idle = r.completion_time.expect("completed") - Instant::ZERO;
    let delivered = r.delivered_time.expect("delivered") - Instant::ZERO;
    // Completion (the idle round answered) comes 16 GRTTs after the last
    // frame at the earliest: well over the 1 ms floor, and within the 100 ms
    // ceiling and the answer's round trip.
    let after = idle - delivered;
    assert!(
        after >= Duration::from_millis(16) && after <= Duration::from_millis(103),
        "delivered at {delivered:?}, idle at {idle:?}"
    );
}
