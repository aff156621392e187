//! Total order for real (the total-order mode, docs/mcastd.md "Group
//! modes", docs/protocol.md §6.4): four daemons in network namespaces on
//! one bridge, AF_XDP on veth, groups with `mode = "total"`. Root only (CI
//! runs as root); without privileges the test skips with a message, and
//! with CI=true a skip is a failure.
//! One concern: that several senders, each multicasting its own stream
//! with no sequencer, reach every member in one order, each sender's
//! messages complete and in its order, and that the order outlives a
//! sender's death.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::ordered::{
    all_senders_to_all, assert_one_order, connect, message, mode, per_sender_in_order, receive,
};

const CONFIG: &str = "subscriber_buffer = 67108864\nmode = \"total\"";

#[test]
fn three_senders_reach_all_four_nodes_in_one_order_without_a_sequencer() {
    let Some(cluster) = common::start("tot", CONFIG) else {
        return;
    };
    const N: u64 = 5_000;
    let senders = [2u32, 3, 4];
    let (orders, group) = all_senders_to_all(&cluster, "tot", &senders, N);
    assert_one_order(&orders);
    // Interleaved: the senders sent at once, not one after another.
    let order = &orders[0].1;
    let switches = order.windows(2).filter(|w| w[0].0 != w[1].0).count();
    assert!(
        switches > 2,
        "the senders' messages did not interleave: {switches}"
    );
    for node in 1..=4u32 {
        let m = mode(&cluster, node, group);
        let published = if senders.contains(&node) { N } else { 0 };
        assert_eq!(m["mode"], "total", "node {node}: {m:#}");
        assert_eq!(m["published"], published, "node {node}: {m:#}");
        assert_eq!(m["delivered"], N * 3, "node {node}: {m:#}");
        assert_eq!(m["held"], 0, "node {node}: {m:#}");
        assert_eq!(m["malformed"], 0, "node {node}: {m:#}");
    }
    // Node 1 sent nothing: its beacons let the others deliver.
    let idle = mode(&cluster, 1, group);
    assert!(
        idle["beacons_sent"].as_u64().unwrap() > 0,
        "node 1: {idle:#}"
    );
    eprintln!(
        "{} messages in one order, {switches} switches between senders; node 1 sent {} beacons",
        order.len(),
        idle["beacons_sent"]
    );
}

#[test]
fn a_sender_killed_mid_stream_leaves_the_survivors_one_order() {
    let Some(mut cluster) = common::start("tot-kill", CONFIG) else {
        return;
    };
    const N: u64 = 4_000;
    let nodes = [1u32, 2, 3, 4];
    let victim = 4;
    let survivors = [1u32, 2, 3];
    let mut subs: Vec<(u32, mcast_ipc::Client, mcast_ipc::Membership)> = survivors
        .iter()
        .map(|&n| {
            let mut c = connect(&cluster, n, "subscriber");
            let m = c.join("tot-kill").expect("join");
            (n, c, m)
        })
        .collect();
    let mut pubs: Vec<(u32, mcast_ipc::Client, u32)> = nodes
        .iter()
        .map(|&n| {
            let mut p = connect(&cluster, n, "publisher");
            let m = p.join("tot-kill").expect("join");
            (n, p, m.group)
        })
        .collect();
    for (_, c, m) in &mut subs {
        mcast_cli::stream::wait_nodes(c, m.group, &m.view, 4, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let group = pubs[0].2;
    let watched = survivors[0];
    // What the watched survivor has: all messages, and the victim's.
    let progress = AtomicU64::new(0);
    let from_victim = AtomicU64::new(0);
    // The survivors send their last quarter once the victim has left
    // every survivor's barrier, so the event of the view without it falls
    // among messages.
    let killed = AtomicBool::new(false);
    let mut orders: Vec<(u32, Vec<(u32, u64)>)> = Vec::new();
    std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c, _)| {
                let (progress, from_victim) = (&progress, &from_victim);
                s.spawn(move || {
                    let got = receive(&mut c, node, &survivors, N, Duration::from_secs(30), |g| {
                        if node == watched {
                            let theirs = g.iter().filter(|(f, _)| *f == victim).count();
                            from_victim.store(theirs as u64, Ordering::Relaxed);
                            progress.store(g.len() as u64, Ordering::Relaxed);
                        }
                    });
                    (node, c, got)
                })
            })
            .collect();
        for (from, mut p, g) in pubs.drain(..) {
            let (from_victim, killed) = (&from_victim, &killed);
            s.spawn(move || {
                // The victim joined last and sends nothing before every other
                // node has stamped in its view: the others start once its
                // first message is through, so its messages interleave with
                // theirs instead of trailing them.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while from != victim && from_victim.load(Ordering::Relaxed) == 0 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "node {victim} never sent"
                    );
                    std::thread::yield_now();
                }
                for i in 0..N {
                    while from != victim && i == N * 3 / 4 && !killed.load(Ordering::Relaxed) {
                        assert!(std::time::Instant::now() < deadline + Duration::from_secs(60));
                        std::thread::yield_now();
                    }
                    let r = p.publish_blocking(g, &message(from, i), Some(Duration::from_secs(30)));
                    if let (true, Err(e)) = (from == victim, &r) {
                        eprintln!("node {victim}'s publisher stopped at {i}: {e}");
                        return; // its daemon was killed
                    }
                    r.unwrap_or_else(|e| panic!("node {from} publish {i}: {e}"));
                }
            });
        }
        // Killed once a survivor has half of the four senders' messages,
        // a tenth of the victim's among them (the victim, the last to join,
        // waits for the others' stamps before its first message).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while progress.load(Ordering::Relaxed) < 2 * N
            || from_victim.load(Ordering::Relaxed) < N / 10
        {
            if std::time::Instant::now() >= deadline {
                for n in nodes {
                    eprintln!("node {n}: {}", mode(&cluster, n, group));
                    for line in cluster.daemons[n as usize - 1].log_text().lines() {
                        if line.contains("level=warn") {
                            eprintln!("  {line}");
                        }
                    }
                }
                panic!(
                    "no progress to kill at: {} messages at node {watched}, {} of node {victim}",
                    progress.load(Ordering::Relaxed),
                    from_victim.load(Ordering::Relaxed)
                );
            }
            std::thread::yield_now();
        }
        eprintln!(
            "node {victim} before it is killed: {}",
            mode(&cluster, victim, group)
        );
        cluster.kill(victim);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        for n in survivors {
            while mode(&cluster, n, group)["barrier_lag_us"]
                .get(victim.to_string())
                .is_some()
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "node {n} keeps {victim}"
                );
                std::thread::yield_now();
            }
        }
        killed.store(true, Ordering::Relaxed);
        for h in receivers {
            let (node, mut c, mut got) = h.join().unwrap();
            // Once the dead sender has left this node's barrier (its flush
            // over) and nothing is held, every message and event this node
            // will deliver is in the ring.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                let m = mode(&cluster, node, group);
                let gone = m["barrier_lag_us"].get(victim.to_string()).is_none();
                if gone && m["held"] == 0 && m["events_unplaced"] == 0 {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "node {node}: {m:#}");
                std::thread::yield_now();
            }
            got.extend(receive(
                &mut c,
                node,
                &[victim],
                u64::MAX,
                Duration::ZERO,
                |_| {},
            ));
            orders.push((node, got));
        }
    });
    for (node, got) in &orders {
        let counts = per_sender_in_order(*node, got);
        for &s in &survivors {
            assert_eq!(counts.get(&s), Some(&N), "node {node} from {s}: {counts:?}");
        }
        assert!(
            counts.get(&victim).is_some_and(|&n| n > 0),
            "node {node}: {counts:?}"
        );
    }
    // One order among the survivors, the dead sender's last messages and
    // the event that says it is gone included, the event after them all.
    assert_one_order(&orders);
    let order = &orders[0].1;
    let first_message = order.iter().position(|e| e.0 != 0).expect("messages");
    let gone = first_message
        + order[first_message..]
            .iter()
            .position(|e| e.0 == 0)
            .expect("the event of the view without the victim, among the messages");
    assert!(
        order[gone..].iter().all(|e| e.0 != victim),
        "a message of node {victim} after the event that says it is gone"
    );
    let m = mode(&cluster, survivors[0], group);
    assert!(m["events"].as_u64().unwrap() > 0, "{m:#}");
    assert_eq!(m["held"], 0, "{m:#}");
    let departing = m["departing"].as_array().cloned().unwrap_or_default();
    assert!(!departing.contains(&victim.into()), "{m:#}");
    eprintln!(
        "node {victim} killed: {} delivered in one order ({} of its own), the event at {gone} of them, {} of its messages stamped after it dropped",
        orders[0].1.len(),
        orders[0].1.iter().filter(|(f, _)| *f == victim).count(),
        m["cut"]
    );
}
