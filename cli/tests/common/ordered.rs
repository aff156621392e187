//! What the tests of the modes that give one order (sequenced, total)
//! share: clients, numbered messages that name their sender, a receiver
//! that checks every byte, and the checks of each sender's order.

use std::sync::Barrier;
use std::time::Duration;

use mcast_ipc::{Client, Membership, MessageKind, Request, Response};
use serde_json::Value;

use super::Cluster;

pub fn connect(c: &Cluster, node: u32, name: &str) -> Client {
    Client::connect(c.socket(node), name).unwrap_or_else(|e| panic!("connect to node {node}: {e}"))
}

/// `group`'s mode in a node's stats.
pub fn mode(c: &Cluster, node: u32, group: u32) -> Value {
    let Response::Json(v) = connect(c, node, "stat").request(Request::Stats).unwrap() else {
        panic!("stats of node {node}")
    };
    v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["group"] == group)
        .map(|g| g["mode"].clone())
        .unwrap_or_else(|| panic!("group {group} not in {v:#}"))
}

/// Message `i` of node `from`: who and which, then filler.
pub fn message(from: u32, i: u64) -> Vec<u8> {
    let mut m = from.to_be_bytes().to_vec();
    m.extend_from_slice(&i.to_be_bytes());
    m.resize(200, (i % 251) as u8);
    m
}

/// A subscriber on each of `nodes`, joined to `name`: (node, client, its
/// membership).
pub fn subscribers(cluster: &Cluster, nodes: &[u32], name: &str) -> Vec<(u32, Client, Membership)> {
    nodes
        .iter()
        .map(|&n| {
            let mut c = connect(cluster, n, "subscriber");
            let m = c.join(name).expect("join");
            (n, c, m)
        })
        .collect()
}

/// Receives until every node of `senders` has `want` messages here (or
/// `idle` passes with nothing new): the (node, index) of each, in order,
/// and each membership event as (0, its view's epoch).
/// `progress` is told what came so far after each batch.
pub fn receive(
    c: &mut Client,
    node: u32,
    senders: &[u32],
    want: u64,
    idle: Duration,
    mut progress: impl FnMut(&[(u32, u64)]),
) -> Vec<(u32, u64)> {
    let mut got: Vec<(u32, u64)> = Vec::new();
    let count = |got: &[(u32, u64)], s: u32| got.iter().filter(|(f, _)| *f == s).count() as u64;
    while senders.iter().any(|&s| count(&got, s) < want) {
        let n = c
            .recv_batch_timeout(256, Some(idle), |m| {
                if m.kind == MessageKind::Membership {
                    let e: serde_json::Value = serde_json::from_slice(m.data).expect("an event");
                    got.push((0, e["epoch"].as_u64().unwrap_or(0)));
                    return;
                }
                let from = u32::from_be_bytes(m.data[..4].try_into().unwrap());
                let i = u64::from_be_bytes(m.data[4..12].try_into().unwrap());
                assert_eq!(
                    m.source, from,
                    "node {node}: message {i} of {from} from {}",
                    m.source
                );
                assert_eq!(
                    m.data,
                    message(from, i),
                    "node {node}: {from}:{i} corrupted"
                );
                got.push((from, i));
            })
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        if n == 0 {
            break;
        }
        progress(&got);
    }
    got
}

/// Each sender's messages in `got` are 0, 1, 2... (none lost, repeated or
/// reordered); how many of each.
pub fn per_sender_in_order(node: u32, got: &[(u32, u64)]) -> std::collections::BTreeMap<u32, u64> {
    let mut next = std::collections::BTreeMap::new();
    for &(from, i) in got.iter().filter(|(from, _)| *from != 0) {
        let n = next.entry(from).or_insert(0);
        assert_eq!(i, *n, "node {node}: {from}:{i} where {from}:{n} was due");
        *n += 1;
    }
    next
}

/// One order per node: the (sender, index) of every message it received.
pub type Orders = Vec<(u32, Vec<(u32, u64)>)>;

/// A subscriber on each of nodes 1..=4 and a publisher on each of
/// `senders`, all in group `name`; once every subscriber sees the four
/// nodes, each publisher sends `n` messages. What each subscriber received
/// (every byte checked), and the group's number.
pub fn all_senders_to_all(
    cluster: &Cluster,
    name: &str,
    senders: &[u32],
    n: u64,
) -> (Orders, u32, Vec<Client>) {
    let ready = Barrier::new(4 + senders.len());
    let mut orders = Vec::new();
    let mut group = 0;
    // Every client stays a member until the caller drops them: the views
    // of their leaving would otherwise race the caller's checks.
    let mut members = Vec::new();
    std::thread::scope(|s| {
        let subs: Vec<_> = (1..=4u32)
            .map(|node| {
                let ready = &ready;
                s.spawn(move || {
                    let mut c = connect(cluster, node, "subscriber");
                    let m = c.join(name).expect("join");
                    mcast_cli::stream::wait_nodes(
                        &mut c,
                        m.group,
                        &m.view,
                        4,
                        Duration::from_secs(20),
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                    ready.wait();
                    let got = receive(&mut c, node, senders, n, Duration::from_secs(30), |_| {});
                    (node, m.group, got, c)
                })
            })
            .collect();
        let mut pubs = Vec::new();
        for &from in senders {
            let ready = &ready;
            pubs.push(s.spawn(move || {
                let mut p = connect(cluster, from, "publisher");
                let m = p.join(name).expect("join");
                ready.wait();
                for i in 0..n {
                    p.publish_blocking(m.group, &message(from, i), Some(Duration::from_secs(20)))
                        .unwrap_or_else(|e| panic!("node {from} publish {i}: {e}"));
                }
                p
            }));
        }
        for h in subs {
            let (node, g, got, c) = h.join().unwrap();
            group = g;
            orders.push((node, got));
            members.push(c);
        }
        members.extend(pubs.into_iter().map(|h| h.join().unwrap()));
    });
    for (node, got) in &orders {
        let counts = per_sender_in_order(*node, got);
        for s in senders {
            assert_eq!(counts.get(s), Some(&n), "node {node} from {s}: {counts:?}");
        }
    }
    (orders, group, members)
}

/// The messages of each order, without the membership events.
pub fn messages_only(orders: &Orders) -> Orders {
    orders
        .iter()
        .map(|(node, got)| (*node, got.iter().copied().filter(|e| e.0 != 0).collect()))
        .collect()
}

/// Every node received the first node's sequence, whole, from the first
/// message to the last (the events before are of joins, which each
/// subscriber sees from its own on; those after, of clients leaving as
/// the test ends, may still be on their way).
pub fn assert_one_order(orders: &Orders) {
    let from_first_message = |got: &[(u32, u64)]| -> Vec<(u32, u64)> {
        let end = got.iter().rposition(|e| e.0 != 0).map_or(0, |i| i + 1);
        got[..end]
            .iter()
            .copied()
            .skip_while(|e| e.0 == 0)
            .collect()
    };
    let (first, order) = &orders[0];
    let order = &from_first_message(order);
    for (node, got) in &orders[1..] {
        let got = &from_first_message(got);
        let at = order.iter().zip(got).position(|(a, b)| a != b);
        assert_eq!(at, None, "nodes {first} and {node} differ at {at:?}");
        assert_eq!(order.len(), got.len(), "nodes {first} and {node}");
    }
}
