//! The feedback tree through mcastd for real (docs/protocol.md §3.4): four
//! daemons in network namespaces on one bridge, AF_XDP on veth, a group
//! configured with `tree_fanout = 2`. Root only (CI runs as root); without
//! privileges the test skips with a message, and with CI=true a skip is a
//! failure.
//! One concern: that receivers' ACKs climb the tree over the daemons' real
//! unicast path, that every node computes the same tree, and that nothing is
//! lost or repeated on the way.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::sync::Barrier;
use std::time::Duration;

use mcast_ipc::{Client, MessageKind, Request, Response};
use serde_json::Value;

fn connect(c: &common::Cluster, node: u32, name: &str) -> Client {
    Client::connect(c.socket(node), name).unwrap_or_else(|e| panic!("connect to node {node}: {e}"))
}

fn stats(c: &common::Cluster, node: u32) -> Value {
    let Response::Json(v) = connect(c, node, "stat").request(Request::Stats).unwrap() else {
        panic!("stats of node {node}")
    };
    v
}

/// `group`'s entry in a node's stats.
fn group(v: &Value, group: u32) -> Value {
    v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["group"] == group)
        .cloned()
        .unwrap_or_else(|| panic!("group {group} not in {v:#}"))
}

fn message(i: u64) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.resize(1000, (i % 251) as u8);
    m
}

/// Receives messages 0 to `n − 1` in order, each once and intact.
fn receive_all(c: &mut Client, node: u32, n: u64) {
    let mut next = 0;
    while next < n {
        let got = c
            .recv_batch_timeout(256, Some(Duration::from_secs(30)), |m| {
                if m.kind == MessageKind::Membership {
                    return;
                }
                let i = u64::from_be_bytes(m.data[..8].try_into().unwrap());
                assert_eq!(i, next, "node {node}: lost, repeated or out of order");
                assert_eq!(m.data, message(i), "node {node}: message {i} corrupted");
                next += 1;
            })
            .unwrap_or_else(|e| panic!("node {node} after {next}: {e}"));
        assert!(got > 0, "node {node}: nothing for 30 s after {next}");
    }
}

/// Node 1 publishes `N` messages to group `name` and nodes 2–4 receive
/// each once, in order, intact; `before` runs once every node is in the
/// view, before the first message. Returns each node's entry for the group
/// in its stats, read while every client is still a member (a client that
/// leaves changes the view, and the tree with it).
fn publish_to_three(cluster: &common::Cluster, name: &str, before: impl FnOnce()) -> Vec<Value> {
    const N: u64 = 20_000;
    let (ready, done, read) = (Barrier::new(4), Barrier::new(4), Barrier::new(4));
    let mut all: Vec<Value> = Vec::new();
    std::thread::scope(|s| {
        for node in 2..=4 {
            let (ready, done, read) = (&ready, &done, &read);
            s.spawn(move || {
                let mut c = connect(cluster, node, "subscriber");
                let m = c.join(name).expect("join");
                ready.wait();
                receive_all(&mut c, node, N);
                done.wait();
                read.wait();
                drop(m);
            });
        }
        let mut p = connect(cluster, 1, "publisher");
        ready.wait();
        let m = p.join(name).expect("join");
        mcast_cli::stream::wait_nodes(&mut p, m.group, &m.view, 4, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
        before();
        for i in 0..N {
            p.publish_blocking(m.group, &message(i), Some(Duration::from_secs(20)))
                .unwrap_or_else(|e| panic!("publish {i}: {e}"));
        }
        done.wait();
        all = (1..=4)
            .map(|n| group(&stats(cluster, n), m.group))
            .collect();
        read.wait();
    });
    all
}

/// A counter summed over nodes 2–4's receive streams of node 1's messages.
fn over_node_1s_stream(all: &[Value], counter: &str) -> u64 {
    all[1..]
        .iter()
        .flat_map(|g| g["receivers"].as_array().unwrap().clone())
        .filter(|r| r["from"] == 1)
        .map(|r| r["counters"][counter].as_u64().unwrap())
        .sum()
}

#[test]
fn acks_climb_the_tree_and_every_message_arrives_once_in_order() {
    let Some(cluster) = common::start("tree", "subscriber_buffer = 67108864\ntree_fanout = 2")
    else {
        return;
    };
    let all = publish_to_three(&cluster, "tree", || {});
    // Every node shows the same tree, and its parent/children agree.
    let root = all[0]["tree"]["root"].clone();
    for (i, g) in all.iter().enumerate() {
        let node = i as u64 + 1;
        let t = &g["tree"];
        assert_eq!(t["root"], root, "node {node}: {g:#}");
        assert_eq!(t["nodes"], 4, "node {node}: {g:#}");
        for child in t["children"].as_array().unwrap() {
            let c = child.as_u64().unwrap();
            assert_eq!(all[c as usize - 1]["tree"]["parent"], node, "{t:#}");
        }
    }
    // The publisher's stream: the ACKs its receivers sent, and those that
    // reached it. Only its tree neighbours report to it; the others' ACKs
    // were merged on the way (a node two hops away from node 1 exists in a
    // 4-node binary tree wherever the agent is).
    let sent_by_receivers = over_node_1s_stream(&all, "acks_sent");
    let merged_on_the_way = over_node_1s_stream(&all, "acks_received");
    let sender = &all[0]["sender"];
    let at_sender = sender["acks_received"].as_u64().unwrap();
    assert!(merged_on_the_way > 0, "no report was merged: {:#}", all[1]);
    assert!(
        at_sender < sent_by_receivers,
        "{at_sender} ACKs at the sender of {sent_by_receivers} sent: {sender:#}"
    );
    assert!(sender["data_sent"].as_u64().unwrap() > 0, "{sender:#}");
    eprintln!(
        "tree root {root}: {sent_by_receivers} reports sent, {merged_on_the_way} merged on the way, {at_sender} reached the sender"
    );
}

/// Local recovery (docs/protocol.md §3.5): with 1 % of every frame copy
/// lost on the segment, receivers ask a tree neighbour first, which repairs
/// from its copy; every message still arrives once, in order and intact.
#[test]
fn losses_are_repaired_by_tree_neighbours_from_their_copies() {
    let Some((asked, relayed, repaired)) = lossy_run("near", "") else {
        return;
    };
    // In a binary tree of four nodes, some receiver is two hops from node 1
    // wherever the root is: it asks a neighbour, not the group.
    assert!(asked > 0, "no receiver asked a neighbour");
    assert!(
        repaired > 0 && repaired <= relayed,
        "{repaired} relays received of {relayed} sent"
    );
}

/// `near_repairs = false`: the same losses, every NAK to the group.
#[test]
fn without_local_recovery_no_neighbour_is_asked() {
    let Some((asked, relayed, repaired)) = lossy_run("far", "near_repairs = false") else {
        return;
    };
    assert_eq!((asked, relayed, repaired), (0, 0, 0));
}

/// Node 1 publishes to three subscribers of group `name` with the tree and
/// 1 % of every frame copy dropped (`extra` added to each daemon's
/// configuration); returns the near NAKs sent, relays sent and relays
/// received over node 1's stream. `None`: skipped (no privileges).
fn lossy_run(name: &str, extra: &str) -> Option<(u64, u64, u64)> {
    let config = format!("subscriber_buffer = 67108864\ntree_fanout = 2\n{extra}");
    let cluster = common::start(name, &config)?;
    let all = publish_to_three(&cluster, name, || {
        cluster.topology().set_loss(0x88b5, 0.01).unwrap();
    });
    assert!(
        cluster.topology().loss_dropped() > 0,
        "the loss was injected"
    );
    let asked = over_node_1s_stream(&all, "near_naks_sent");
    let relayed = over_node_1s_stream(&all, "relays_sent");
    let repaired = over_node_1s_stream(&all, "relays_received");
    let sender = &all[0]["sender"];
    eprintln!(
        "{name}, 1 % loss: {asked} near NAKs, {relayed} relays sent, {repaired} received; the sender took {} NAKs and retransmitted {}",
        sender["naks_received"], sender["data_retransmitted"]
    );
    Some((asked, relayed, repaired))
}

#[test]
fn the_root_killed_mid_stream_loses_the_survivors_nothing() {
    kill_mid_stream("tree-kill-root", true);
}

/// Seed 004 §2.2, Figure 4: an interior node that fails has its children
/// adopted by its parent, and no other node moves.
#[test]
fn an_interior_node_killed_mid_stream_hands_its_children_to_its_parent() {
    kill_mid_stream("tree-kill", false);
}

/// Kills the tree's root (`root`) or an interior node that is neither the
/// root nor the publisher's node half-way through 20,000 messages: every
/// survivor still receives every message once, in order.
fn kill_mid_stream(name: &str, root: bool) {
    let Some(mut cluster) = common::start(name, "subscriber_buffer = 67108864\ntree_fanout = 2")
    else {
        return;
    };
    const N: u64 = 20_000;
    let mut subscribers: Vec<(u32, Client)> = (2..=4)
        .map(|n| {
            let mut c = connect(&cluster, n, "subscriber");
            c.join(name).expect("join");
            (n, c)
        })
        .collect();
    let mut p = connect(&cluster, 1, "publisher");
    let m = p.join(name).expect("join");
    mcast_cli::stream::wait_nodes(&mut p, m.group, &m.view, 4, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}"));
    // Every node's tree is the same (the first test): read each node's place.
    let trees: Vec<Value> = (1..=4)
        .map(|n| group(&stats(&cluster, n), m.group)["tree"].clone())
        .collect();
    let victim = (2..=4u32)
        .find(|&n| {
            let t = &trees[n as usize - 1];
            let interior = !t["children"].as_array().unwrap().is_empty();
            if root {
                t["parent"].is_null()
            } else {
                !t["parent"].is_null() && interior
            }
        })
        .unwrap_or_else(|| panic!("no such node (root: {root}) but the publisher: {trees:?}"));
    let survivors: Vec<(u32, Client)> = subscribers
        .drain(..)
        .filter(|(n, _)| *n != victim)
        .collect();
    // The subscribers stay members until the trees are read (a client that
    // goes leaves the group, and its node the tree).
    let _members: Vec<Client> = std::thread::scope(|s| {
        let receivers: Vec<_> = survivors
            .into_iter()
            .map(|(node, mut c)| {
                s.spawn(move || {
                    receive_all(&mut c, node, N);
                    c
                })
            })
            .collect();
        for i in 0..N {
            if i == N / 2 {
                cluster.kill(victim);
            }
            p.publish_blocking(m.group, &message(i), Some(Duration::from_secs(30)))
                .unwrap_or_else(|e| panic!("publish {i} (node {victim} killed at {}): {e}", N / 2));
        }
        receivers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every survivor's tree no longer holds the victim: its children hang
    // from its parent now (the agent's successor is the root when it was the
    // root), and every other node kept its parent.
    let alive: Vec<u32> = (1..=4).filter(|&n| n != victim).collect();
    let after = |n: u32| group(&stats(&cluster, n), m.group)["tree"].clone();
    // The publisher's view changed (its stream went on); the others' views
    // may still be on their way: ask each node until it has installed it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for &n in &alive {
        while after(n)["nodes"] != 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "node {n}: {}",
                after(n)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let victim_parent = trees[victim as usize - 1]["parent"].clone();
    for &n in &alive {
        let (before, now) = (&trees[n as usize - 1], after(n));
        assert_ne!(now["root"], victim, "node {n}: {now}");
        if !root {
            let expected = if before["parent"] == victim {
                victim_parent.clone()
            } else {
                before["parent"].clone()
            };
            assert_eq!(
                now["parent"], expected,
                "node {n} before {before} now {now}"
            );
        }
    }
    eprintln!(
        "killed {} node {victim} at message {}: node 1's tree now {}",
        if root { "root" } else { "interior" },
        N / 2,
        after(1)
    );
}
