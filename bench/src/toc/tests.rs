//! The `toc` model's runs: every mode to the end under loss, in one order
//! where it promises one; the model's timing against its arithmetic.

use super::world::{run, Kind, Params};

const KINDS: [Kind; 6] = [
    Kind::Fifo,
    Kind::Total { commit: false },
    Kind::Total { commit: true },
    Kind::CommitDirect,
    Kind::Sequenced,
    Kind::Token,
];

#[test]
fn every_mode_delivers_everything_under_loss_in_one_order_where_it_promises_one() {
    for kind in KINDS {
        for seed in 1..=12 {
            let mut p = Params::new(kind, 6);
            p.messages = 30;
            p.loss = 0.03;
            p.seed = seed;
            p.skew_ns = 50_000;
            // (run checks each origin's order at every node, and in the
            // ordered modes one digest of the whole sequence everywhere.)
            let o = run(&p).unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
            assert_eq!(o.messages, 180, "{}", kind.name());
            assert!(o.lost > 0, "{} seed {seed}: loss was injected", kind.name());
        }
    }
}

/// Saturated FIFO on 4 nodes is port-bound: each node's port carries the
/// 3 others' frames, 1,102 bytes each at 10 Gb/s (881.6 ns), and each node
/// also has its own: 4/3 of the port's frame rate.
#[test]
fn saturated_throughput_is_the_port_rate_the_model_states() {
    let mut p = Params::new(Kind::Fifo, 4);
    p.messages = 500;
    let o = run(&p).expect("a run");
    let bound = 4.0 / 3.0 / 881.6e-9;
    let ratio = o.throughput() / bound;
    assert!(
        (0.97..=1.0).contains(&ratio),
        "{} of {bound}",
        o.throughput()
    );
}

/// The latency target, in the model: total order adds at most a
/// beacon interval and 20 µs to the FIFO p50 (paced, 8 senders).
#[test]
fn total_order_adds_at_most_a_beacon_interval_to_the_p50() {
    let p50 = |kind| {
        let mut p = Params::new(kind, 8);
        p.rate = Some(10_000);
        p.messages = 100;
        let o = run(&p).expect("a run");
        o.latency.value_at_quantile(0.5)
    };
    let (fifo, total) = (p50(Kind::Fifo), p50(Kind::Total { commit: false }));
    let beacon = Params::new(Kind::Fifo, 8).beacon_ns;
    assert!(
        total > fifo,
        "total order waits for a barrier: {total} vs {fifo}"
    );
    assert!(
        total <= fifo + beacon + 20_000,
        "{total} ns vs fifo {fifo} ns"
    );
}

/// Seed 002 Figure 3's point, in the model: a crashed process is reported
/// silent about ten beacon intervals after it stops, and no live one is.
#[test]
fn a_crashed_process_is_reported_silent_after_about_ten_beacon_intervals() {
    for seed in 1..=3 {
        let mut p = Params::new(Kind::Total { commit: false }, 16);
        p.rate = Some(10_000);
        p.messages = 200;
        p.crash_at = Some(10_000_000);
        p.seed = seed;
        let o = run(&p).expect("a run");
        let after = o.silent_after_ns.expect("reported") as f64 / p.beacon_ns as f64;
        assert!(
            (9.0..=12.0).contains(&after),
            "seed {seed}: {after} intervals"
        );
        assert_eq!(o.false_reports, 0, "seed {seed}");
    }
}

/// The same over 40 drawn runs (3 to 24 processes, 2,000 to 20,000
/// messages/s each, 0, 0.1 or 1 % loss, with or without commit): the crash
/// is reported within 16 intervals, and no live process ever is. A failure
/// prints the run's parameters (its seed among them); the sweep replays
/// with `cargo test -p mcast-bench toc::tests::silence_sweep`.
#[test]
fn silence_sweep() {
    let mut rng = mcast_proto::Rng::new(20);
    for seed in 1..=40 {
        let n = rng.range(3, 24) as u32;
        let commit = rng.range(0, 1) == 1;
        let mut p = Params::new(Kind::Total { commit }, n);
        p.rate = Some(rng.range(2_000, 20_000));
        p.messages = 150;
        p.loss = [0.0, 0.001, 0.01][rng.range(0, 2) as usize];
        p.crash_at = Some(5_000_000);
        p.seed = seed;
        assert_crash_reported(&p);
    }
}

/// `p`'s crashed node is reported silent within 16 beacon intervals, and
/// no live node is.
fn assert_crash_reported(p: &Params) {
    let o = run(p).unwrap_or_else(|e| panic!("{e}"));
    let after = o
        .silent_after_ns
        .unwrap_or_else(|| panic!("never reported: {p:?}"));
    let intervals = after as f64 / p.beacon_ns as f64;
    assert!(intervals < 16.0, "{intervals} intervals: {p:?}");
    assert_eq!(o.false_reports, 0, "{p:?}");
}

/// Over a commit tree (24 processes: the root 1, its children 2 to 9,
/// node 2's 10 to 17) a crashed root, inner node or leaf is reported by
/// the survivors' watch (children's reports, the root's stamps), and no
/// live process is.
#[test]
fn over_a_commit_tree_a_crashed_root_inner_node_or_leaf_is_reported() {
    for crash in [1, 2, 9, 24] {
        for seed in 1..=3 {
            let mut p = Params::new(Kind::Total { commit: true }, 24);
            p.rate = Some(5_000);
            p.messages = 150;
            p.crash_at = Some(5_000_000);
            p.crash_node = Some(crash);
            p.seed = seed;
            assert_crash_reported(&p);
        }
    }
}

/// The token baseline sends one node at a time: saturated on 8 nodes it
/// carries at most one sender's frame rate, with a gap at every turn,
/// where FIFO's senders together fill every receiver's port.
#[test]
fn the_token_ring_sends_one_node_at_a_time() {
    let tput = |kind| {
        let mut p = Params::new(kind, 8);
        p.messages = 200;
        run(&p).expect("a run").throughput()
    };
    let (fifo, token) = (tput(Kind::Fifo), tput(Kind::Token));
    // One sender's frame rate at most: 1 / 881.6 ns.
    assert!(token <= 1.0 / 881.6e-9 * 1.05, "token {token}");
    assert!(token < fifo * 0.75, "token {token} against fifo {fifo}");
}

/// From 17 members the commit reports climb a tree: under loss everything
/// is still delivered in one order and the children's reports go over the
/// links; in saturation at 128 processes the group carries more than when
/// every report goes to all (`mcast-bench toc`: 1.45× at 128, 2.4× at
/// 512).
#[test]
fn a_commit_tree_delivers_everything_and_carries_more_at_scale() {
    let run_as = |kind, nodes, loss| {
        let mut p = Params::new(kind, nodes);
        p.messages = 8;
        p.loss = loss;
        p.seed = 3;
        let o = run(&p).unwrap_or_else(|e| panic!("{}: {e}", kind.name()));
        assert_eq!(o.messages, 8 * u64::from(nodes), "{}", kind.name());
        (o.link_frames, o.throughput())
    };
    let (tree, direct) = (
        run_as(Kind::Total { commit: true }, 64, 0.01),
        run_as(Kind::CommitDirect, 64, 0.01),
    );
    assert!(tree.0 > 0, "reports up the tree: {tree:?}");
    assert_eq!(direct.0, 0, "no link messages without a tree");
    let (tree, direct) = (
        run_as(Kind::Total { commit: true }, 128, 0.0),
        run_as(Kind::CommitDirect, 128, 0.0),
    );
    assert!(tree.1 > 1.2 * direct.1, "tree {tree:?}, direct {direct:?}");
}
