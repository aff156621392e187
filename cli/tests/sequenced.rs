//! Many-to-many through the root for real (the sequenced mode, docs/mcastd.md
//! "Group modes", docs/protocol.md §6.3): four daemons in network namespaces
//! on one bridge, AF_XDP on veth, groups with `mode = "sequenced"`. Root
//! only (CI runs as root); without privileges the test skips with a
//! message, and with CI=true a skip is a failure.
//! One concern: that several senders' messages reach every member in one
//! order, each sender's complete and in its order, and that the order and
//! the survivors' messages outlive the root's death.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::ordered::{
    all_senders_to_all, assert_one_order, connect, messages_only, mode, per_sender_in_order,
    publish_until_killed, receive, subscribers, Progress,
};
use mcast_ipc::Client;

const CONFIG: &str = "subscriber_buffer = 67108864\nmode = \"sequenced\"";

#[test]
fn three_senders_reach_all_four_nodes_in_one_order() {
    let Some(cluster) = common::start("seq", CONFIG) else {
        return;
    };
    const N: u64 = 5_000;
    let senders = [2u32, 3, 4];
    let (orders, group, _members) = all_senders_to_all(&cluster, "seq", &senders, N, false);
    // One order: the root's.
    assert_one_order(&messages_only(&orders));
    let order = &orders[0].1;
    // Interleaved: the senders did share the root (not one after another).
    let switches = order.windows(2).filter(|w| w[0].0 != w[1].0).count();
    assert!(
        switches > 2,
        "the senders' messages did not interleave: {switches}"
    );
    let root = mode(&cluster, 1, group)["root"].as_u64().unwrap() as u32;
    let sequenced = mode(&cluster, root, group)["sequenced"].as_u64().unwrap();
    assert_eq!(sequenced, N * 3, "the root {root} multicast {sequenced}");
    for &s in senders.iter().filter(|&&s| s != root) {
        let m = mode(&cluster, s, group);
        assert_eq!(m["forwarded"], N, "node {s}: {m:#}");
        assert_eq!(m["pending"], 0, "node {s}: {m:#}");
    }
    eprintln!(
        "root {root}: {} messages in one order, {switches} switches between senders",
        order.len()
    );
}

#[test]
fn the_root_killed_mid_stream_costs_the_survivors_nothing_and_keeps_one_order() {
    let Some(mut cluster) = common::start("seq-kill", CONFIG) else {
        return;
    };
    const N: u64 = 4_000;
    let nodes = [1u32, 2, 3, 4];
    // Everyone joined, then the root is known (every node computes the same).
    let mut subs = subscribers(&cluster, &nodes, "seq-kill");
    for (_, c, m) in &mut subs {
        mcast_cli::stream::wait_nodes(c, m.group, &m.view, 4, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut subs: Vec<(u32, Client)> = subs.into_iter().map(|(n, c, _)| (n, c)).collect();
    let mut pubs: Vec<(u32, Client, u32)> = nodes
        .iter()
        .map(|&n| {
            let mut p = connect(&cluster, n, "publisher");
            let m = p.join("seq-kill").expect("join");
            (n, p, m.group)
        })
        .collect();
    let group = pubs[0].2;
    let root = mode(&cluster, 1, group)["root"].as_u64().unwrap() as u32;
    let survivors: Vec<u32> = nodes.iter().copied().filter(|&n| n != root).collect();
    let watched = survivors[0];
    subs.retain(|(n, _)| *n != root);
    let progress = Progress::default();
    let mut orders: Vec<(u32, Vec<(u32, u64)>)> = Vec::new();
    std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c)| {
                let (survivors, progress) = (&survivors, &progress);
                s.spawn(move || {
                    let got = receive(&mut c, node, survivors, N, Duration::from_secs(30), |g| {
                        if node == watched {
                            progress.note(g, root);
                        }
                    });
                    (node, got)
                })
            })
            .collect();
        for (from, mut p, g) in pubs.drain(..) {
            s.spawn(move || publish_until_killed(&mut p, from, g, N, root));
        }
        // Killed once a survivor has half of the four senders' messages
        // (the rest are then on their way through the root), some of the
        // root's own among them.
        progress.wait(2 * N, 1, || format!("at node {watched}"));
        eprintln!(
            "the root before it is killed: {}",
            mode(&cluster, root, group)
        );
        cluster.kill(root);
        for h in receivers {
            orders.push(h.join().unwrap());
        }
    });
    for (node, got) in &orders {
        let counts = per_sender_in_order(*node, got);
        for &s in &survivors {
            assert_eq!(counts.get(&s), Some(&N), "node {node} from {s}: {counts:?}");
        }
        // The root's own messages took their turn with the others' until it died.
        assert!(
            counts.get(&root).is_some_and(|&n| n > 0),
            "node {node}: {counts:?}"
        );
    }
    // One order among the survivors, the dead root's last messages included.
    assert_one_order(&messages_only(&orders));
    let order = &orders[0].1;
    let new_root = mode(&cluster, survivors[0], group)["root"].clone();
    let resent: u64 = survivors
        .iter()
        .map(|&n| mode(&cluster, n, group)["resent"].as_u64().unwrap())
        .sum();
    eprintln!(
        "root {root} killed: new root {new_root}, {resent} messages sent again to it, {} delivered in one order ({} of the root's own)",
        order.len(),
        order.iter().filter(|(f, _)| *f == root).count()
    );
}
