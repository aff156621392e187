//! What the tests of the modes that give one order (sequenced, total)
//! share: clients, numbered messages that name their sender, a receiver
//! that checks every byte, and the checks of each sender's order.

use std::time::Duration;

use mcast_ipc::{Client, MessageKind, Request, Response};
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

/// Receives until every node of `senders` has `want` messages here (or
/// `idle` passes with nothing new): the (node, index) of each, in order.
/// `progress` is told how many after each batch.
pub fn receive(
    c: &mut Client,
    node: u32,
    senders: &[u32],
    want: u64,
    idle: Duration,
    mut progress: impl FnMut(u64),
) -> Vec<(u32, u64)> {
    let mut got: Vec<(u32, u64)> = Vec::new();
    let count = |got: &[(u32, u64)], s: u32| got.iter().filter(|(f, _)| *f == s).count() as u64;
    while senders.iter().any(|&s| count(&got, s) < want) {
        let n = c
            .recv_batch_timeout(256, Some(idle), |m| {
                if m.kind == MessageKind::Membership {
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
        progress(got.len() as u64);
    }
    got
}

/// Each sender's messages in `got` are 0, 1, 2... (none lost, repeated or
/// reordered); how many of each.
pub fn per_sender_in_order(node: u32, got: &[(u32, u64)]) -> std::collections::BTreeMap<u32, u64> {
    let mut next = std::collections::BTreeMap::new();
    for &(from, i) in got {
        let n = next.entry(from).or_insert(0);
        assert_eq!(i, *n, "node {node}: {from}:{i} where {from}:{n} was due");
        *n += 1;
    }
    next
}
