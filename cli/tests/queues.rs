//! Several NIC queues through mcastd for real (docs/datapath.md "Several NIC
//! queues"): three daemons in network namespaces on one bridge, every veth
//! with two queues, every daemon serving both (`queues = 2`, native XDP).
//! Root only (CI runs as root); without privileges the test skips with a
//! message, and with CI=true a skip is a failure.
//! One concern: that frames arriving on the second queue reach the engine
//! through that queue's thread, and that nothing is lost, repeated or
//! reordered on the way.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use mcast_cli::testbed::Cluster;
use mcast_ipc::{Client, MessageKind, Request, Response};
use serde_json::Value;

fn connect(c: &Cluster, node: u32, name: &str) -> Client {
    Client::connect(c.socket(node), name).unwrap_or_else(|e| panic!("connect to node {node}: {e}"))
}

fn stats(c: &Cluster, node: u32) -> Value {
    let Response::Json(v) = connect(c, node, "stat").request(Request::Stats).unwrap() else {
        panic!("stats of node {node}")
    };
    v
}

/// Message `i` of publisher `node`: its number, then a pattern.
fn message(node: u32, i: u64) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.resize(1000, (i % 251) as u8 ^ node as u8);
    m
}

/// Receives `n` messages from each of `from`, each sender's in order, each
/// once and intact.
fn receive_all(c: &mut Client, node: u32, from: &[u32], n: u64) {
    let mut next = vec![0u64; from.len()];
    while next.iter().any(|&k| k < n) {
        let got = c
            .recv_batch_timeout(256, Some(Duration::from_secs(30)), |m| {
                if m.kind == MessageKind::Membership {
                    return;
                }
                let k = from
                    .iter()
                    .position(|&f| f == m.source)
                    .unwrap_or_else(|| panic!("node {node}: a message from node {}", m.source));
                let i = u64::from_be_bytes(m.data[..8].try_into().unwrap());
                assert_eq!(
                    i, next[k],
                    "node {node}: from node {}: lost, repeated or out of order",
                    m.source
                );
                assert_eq!(m.data, message(m.source, i), "node {node}: corrupted");
                next[k] += 1;
            })
            .unwrap_or_else(|e| panic!("node {node} after {next:?}: {e}"));
        assert!(got > 0, "node {node}: nothing for 30 s after {next:?}");
    }
}

/// Node 1 runs on CPU 1 and node 3 on CPU 0; the bridge sends what it
/// forwards on CPU q on each port's queue q. So node 2 takes node 1's
/// frames on its queue 1 (through that queue's thread) and node 3's on its
/// queue 0, and must deliver both streams whole.
#[test]
fn frames_on_the_second_queue_reach_the_engine_through_its_thread() {
    let Some(cluster) = Cluster::start_with_queues(
        Path::new(env!("CARGO_BIN_EXE_mcastd")),
        "queues",
        2,
        2,
        |node| {
            let cpu = match node {
                1 => "cpu = 1\n",
                3 => "cpu = 0\n",
                _ => "",
            };
            format!("queues = 2\nxdp_mode = \"native\"\nsubscriber_buffer = 67108864\n{cpu}")
        },
    ) else {
        return;
    };
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("queues: one CPU only, so no frame can reach a second queue; skipped");
        assert!(std::env::var("CI").is_err(), "CI=true: a skip is a failure");
        return;
    }
    for endpoint in 0..3 {
        cluster
            .topology()
            .steer_by_cpu(endpoint, 2, 2)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    const N: u64 = 20_000;
    let (ready, done) = (Barrier::new(3), Barrier::new(3));
    std::thread::scope(|s| {
        let (cluster, ready, done) = (&cluster, &ready, &done);
        s.spawn(move || {
            let mut c = connect(cluster, 2, "subscriber");
            let m = c.join("queues").expect("join");
            ready.wait();
            receive_all(&mut c, 2, &[1, 3], N);
            done.wait();
            drop(m);
        });
        for node in [1, 3] {
            s.spawn(move || {
                let mut p = connect(cluster, node, "publisher");
                let m = p.join("queues").expect("join");
                ready.wait();
                mcast_cli::stream::wait_nodes(&mut p, m.group, &m.view, 3, Duration::from_secs(20))
                    .unwrap_or_else(|e| panic!("{e}"));
                for i in 0..N {
                    p.publish_blocking(m.group, &message(node, i), Some(Duration::from_secs(20)))
                        .unwrap_or_else(|e| panic!("node {node}: publish {i}: {e}"));
                }
                done.wait();
            });
        }
    });
    let v = stats(&cluster, 2);
    let t = &v["transport"];
    let queues = t["queues"].as_array().expect("transport.queues");
    assert_eq!(queues.len(), 1, "one extra queue: {t:#}");
    assert_eq!(queues[0]["queue"], 1, "{t:#}");
    let second = queues[0]["frames"].as_u64().unwrap();
    let all = v["engine"]["rx_frames"].as_u64().unwrap();
    // Node 1's data came on queue 1, node 3's on queue 0.
    assert!(
        second >= N,
        "queue 1 carried {second} frames of {all}: {t:#}"
    );
    assert!(
        all - second >= N,
        "queue 0 carried {} frames of {all}: {t:#}",
        all - second
    );
    assert_eq!(queues[0]["rx_dropped"], 0, "{t:#}");
    // `mcast stat` prints the queue's line.
    let text = mcast_cli::render::render_stats(&v, None);
    assert!(
        text.contains(&format!("queue 1  frames {second}  starved")),
        "{text}"
    );
    eprintln!("node 2: {all} frames, {second} through queue 1's thread");
}
