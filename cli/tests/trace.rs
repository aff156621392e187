//! Where the time goes, for real (`trace = true`, docs/mcastd.md): two
//! daemons in network namespaces on one bridge, AF_XDP on veth. Root only
//! (CI runs as root); without privileges the test skips with a message,
//! and with CI=true a skip is a failure.
//! One concern: that every hop of every message is timed exactly once with
//! tracing on (the publisher's daemon: publish → taken per message, taken →
//! sent per data frame; the subscriber's daemon: sent → received and
//! received → ring per frame; the subscriber's client: ring → read per
//! message), and that nothing is timed or stamped with it off.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::Duration;

use mcast_ipc::{Client, MessageKind, Request, Response};
use serde_json::Value;

const MESSAGES: u64 = 300;

fn stats(c: &common::Cluster, node: u32) -> Value {
    let mut client = Client::connect(c.socket(node), "stat").expect("connect");
    let Response::Json(v) = client.request(Request::Stats).expect("stats") else {
        panic!("stats of node {node}")
    };
    v
}

/// Node 1 publishes [`MESSAGES`] to node 2's subscriber, a few per call so
/// that some share frames; returns the subscriber once it has them all.
fn exchange(c: &common::Cluster) -> Client {
    let mut publ = Client::connect(c.socket(1), "publisher").expect("connect");
    let m = publ.join("hops").expect("join");
    let mut sub = Client::connect(c.socket(2), "subscriber").expect("connect");
    sub.join("hops").expect("join");
    mcast_cli::stream::wait_nodes(&mut publ, m.group, &m.view, 2, Duration::from_secs(20))
        .expect("both nodes in the view");
    let msgs: Vec<Vec<u8>> = (0..MESSAGES).map(|i| i.to_be_bytes().repeat(20)).collect();
    for chunk in msgs.chunks(3) {
        let taken = publ
            .publish_batch_blocking(m.group, chunk, Some(Duration::from_secs(10)))
            .expect("publish");
        // 60-byte messages in a 4 MiB ring: a chunk is taken whole.
        assert_eq!(taken, chunk.len());
    }
    let mut got = 0u64;
    while got < MESSAGES {
        let n = sub
            .recv_batch_timeout(64, Some(Duration::from_secs(10)), |r| {
                if r.kind == MessageKind::Data {
                    assert_eq!(r.data, msgs[got as usize], "message {got}");
                    got += 1;
                }
            })
            .expect("receive");
        assert!(n > 0, "nothing for 10 s after {got} messages");
    }
    sub
}

/// The group's counters on `node`.
fn group(v: &Value) -> &Value {
    v["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["name"] == "hops")
        .unwrap_or_else(|| panic!("no group hops in {v:#}"))
}

#[test]
fn with_tracing_every_hop_of_every_message_is_timed_once() {
    let mcastd = Path::new(env!("CARGO_BIN_EXE_mcastd"));
    let Some(c) = common::Cluster::start(mcastd, "trace-on", 1, |_| "trace = true".into()) else {
        return;
    };
    let sub = exchange(&c);
    let (one, two) = (stats(&c, 1), stats(&c, 2));
    let (t1, t2) = (&one["trace"], &two["trace"]);
    // Every publication record is stamped and timed when taken.
    assert_eq!(t1["publish_to_taken"]["count"], MESSAGES, "{t1:#}");
    // Every data frame once, at its first transmission: as many as the
    // frames the send stream handed to its machine.
    let frames = group(&one)["batching"]["frames"].as_u64().expect("frames");
    assert!(frames > 0 && frames <= MESSAGES);
    assert_eq!(t1["taken_to_sent"]["count"], frames, "{t1:#}");
    // The subscriber's daemon: every frame it delivered, once.
    assert_eq!(t2["sent_to_received"]["count"], frames, "{t2:#}");
    assert_eq!(t2["received_to_ring"]["count"], frames, "{t2:#}");
    // One host, one clock; every send sample kept for the daemon's round.
    assert_eq!(t2["sent_to_received"]["backwards"], 0, "{t2:#}");
    assert_eq!(t1["sent_samples_dropped"], 0, "{t1:#}");
    for (t, hop) in [
        (t1, "publish_to_taken"),
        (t1, "taken_to_sent"),
        (t2, "sent_to_received"),
        (t2, "received_to_ring"),
    ] {
        let p50 = t[hop]["p50_ns"].as_u64().unwrap();
        // Above zero, and below a second: a real duration, not a raw clock.
        assert!(p50 > 0 && p50 < 1_000_000_000, "{hop}: {t:#}");
    }
    // The client library times the last hop of every message it read.
    let read = sub.read_hop().expect("the subscriber traces");
    assert_eq!(read.count, MESSAGES);
    assert!(read.p50_ns > 0 && read.max_ns < 10_000_000_000);
    // The node that only published has nothing received to time.
    assert_eq!(t1["received_to_ring"]["count"], 0, "{t1:#}");
}

#[test]
fn without_tracing_nothing_is_stamped_or_timed() {
    let mcastd = Path::new(env!("CARGO_BIN_EXE_mcastd"));
    let Some(c) = common::Cluster::start(mcastd, "trace-off", 1, |_| String::new()) else {
        return;
    };
    let sub = exchange(&c);
    assert!(sub.read_hop().is_none());
    assert!(stats(&c, 1)["trace"].is_null());
    assert!(stats(&c, 2)["trace"].is_null());
}
