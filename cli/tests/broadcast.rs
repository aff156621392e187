//! Groups on a fabric without multicast for real (`mode = "broadcast"`,
//! docs/mcastd.md "Broadcast groups", docs/protocol.md §8): four daemons in
//! network namespaces on one bridge that drops every frame to a group
//! address, AF_XDP on veth. Root only (CI runs as root); without privileges
//! the test skips with a message, and with CI=true a skip is a failure.
//! One concern: that every sender's messages reach every member, in its
//! order, over the daemons' unicast links alone, and that a member killed
//! mid-stream costs the survivors nothing and leaves them agreeing on its
//! messages.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::ordered::{
    all_senders_to_all, connect, message, mode, per_sender_in_order, publish_until_killed, receive,
    subscribers, Progress,
};
use mcast_ipc::Client;

fn config(algorithm: &str) -> String {
    format!("subscriber_buffer = 67108864\nmode = \"broadcast\"\nbroadcast = \"{algorithm}\"")
}

/// Four daemons whose groups broadcast by `algorithm`, on a segment that
/// drops every frame to a group address (None: the test skips).
fn start_without_multicast(test: &str, algorithm: &str) -> Option<common::Cluster> {
    let cluster = common::start(test, &config(algorithm))?;
    cluster
        .topology()
        .drop_multicast(true)
        .unwrap_or_else(|e| panic!("{e}"));
    Some(cluster)
}

#[test]
fn every_senders_messages_reach_every_member_in_order_with_multicast_dropped() {
    let Some(cluster) = start_without_multicast("bcast", "rsbcast") else {
        return;
    };
    let topo = cluster.topology();
    // The segment carries no multicast now: a broadcast and a group
    // frame sent from node 1's namespace are dropped on the bridge.
    let raw = topo
        .sender
        .run(|| mcast_netns::RawSender::open(mcast_netns::IFNAME))
        .expect("a raw socket");
    for dst in [[0xff; 6], [0x03, 0, 0, 0, 0, 1]] {
        let mut frame = dst.to_vec();
        frame.extend_from_slice(&topo.sender.mac.0);
        frame.extend_from_slice(&0x88b5u16.to_be_bytes());
        frame.resize(60, 0);
        raw.send(&frame).expect("send");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while topo.multicast_dropped() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the bridge forwarded group frames"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    const N: u64 = 3_000;
    let senders = [1u32, 2, 3, 4];
    let (_orders, group, _members) = all_senders_to_all(&cluster, "bcast", &senders, N, false);
    for node in senders {
        // No engine stream, so no peer is asked for a stream start.
        let Ok(mcast_ipc::Response::Json(stats)) =
            connect(&cluster, node, "stat").request(mcast_ipc::Request::Stats)
        else {
            panic!("stats of node {node}")
        };
        assert_eq!(stats["daemon"]["start_requests_sent"], 0, "node {node}");
        let m = mode(&cluster, node, group);
        assert_eq!(m["mode"], "broadcast", "{m:#}");
        assert_eq!(m["published"], N, "node {node}: {m:#}");
        // Every message by the tree: two hops to the farthest member.
        assert_eq!(m["chosen"]["rsbcast"], N, "node {node}: {m:#}");
        assert!(
            m["transfers_sent"].as_u64() >= Some(N),
            "node {node}: {m:#}"
        );
        assert_eq!(m["open_rounds"], 0, "node {node}: {m:#}");
    }
    eprintln!(
        "{} frames to group addresses dropped on the segment",
        cluster.topology().multicast_dropped()
    );
}

#[test]
fn a_member_killed_mid_stream_costs_the_survivors_nothing_and_they_agree_on_its_messages() {
    let Some(mut cluster) = start_without_multicast("bcast-kill", "scatter-collect") else {
        return;
    };
    const N: u64 = 3_000;
    let nodes = [1u32, 2, 3, 4];
    let victim = 3;
    let survivors = [1u32, 2, 4];
    let mut subs = subscribers(&cluster, &nodes, "bcast-kill");
    for (_, c, m) in &mut subs {
        mcast_cli::stream::wait_nodes(c, m.group, &m.view, 4, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut subs: Vec<(u32, Client)> = subs
        .into_iter()
        .filter(|(n, _, _)| *n != victim)
        .map(|(n, c, _)| (n, c))
        .collect();
    let mut pubs: Vec<(u32, Client, u32)> = nodes
        .iter()
        .map(|&n| {
            let mut p = connect(&cluster, n, "publisher");
            let m = p.join("bcast-kill").expect("join");
            (n, p, m.group)
        })
        .collect();
    let group = pubs[0].2;
    let progress = Progress::default();
    let mut orders: Vec<(u32, Vec<(u32, u64)>)> = Vec::new();
    let mut clients = Vec::new();
    std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c)| {
                let progress = &progress;
                s.spawn(move || {
                    let got = receive(&mut c, node, &survivors, N, Duration::from_secs(30), |g| {
                        if node == 1 {
                            progress.note(g, victim);
                        }
                    });
                    (node, got, c)
                })
            })
            .collect();
        for (from, mut p, g) in pubs.drain(..) {
            s.spawn(move || publish_until_killed(&mut p, from, g, N, victim));
        }
        // Killed once node 1 has half of the four senders' messages, some
        // of them the victim's.
        progress.wait(2 * N, 1, || "at node 1".into());
        cluster.kill(victim);
        for h in receivers {
            clients.push(h.join().unwrap());
        }
    });
    // The survivors' round for the victim (after the view that removes it)
    // may still re-send its last messages: wait until every survivor is
    // done with it, then take what came.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let done = survivors.iter().all(|&n| {
            let m = mode(&cluster, n, group);
            m["departure_rounds"].as_u64() >= Some(1) && m["open_rounds"] == 0
        });
        if done {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the survivors' round for the victim did not end: {:?}",
            survivors.map(|n| mode(&cluster, n, group))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for (node, mut got, mut c) in clients {
        got.extend(receive(
            &mut c,
            node,
            &[victim],
            u64::MAX,
            Duration::from_millis(300),
            |_| {},
        ));
        orders.push((node, got));
    }
    let mut from_victim = Vec::new();
    for (node, got) in &orders {
        let counts = per_sender_in_order(*node, got);
        for s in survivors {
            assert_eq!(counts.get(&s), Some(&N), "node {node} from {s}: {counts:?}");
        }
        from_victim.push((*node, counts.get(&victim).copied().unwrap_or(0)));
    }
    // The survivors agree on the victim's messages: the same prefix of its
    // sequence everywhere (each in order, checked above).
    assert!(
        from_victim.windows(2).all(|w| w[0].1 == w[1].1),
        "the survivors disagree on the victim's messages: {from_victim:?}"
    );
    assert!(
        from_victim[0].1 > 0,
        "the victim sent nothing before it died"
    );
    for node in survivors {
        let m = mode(&cluster, node, group);
        assert_eq!(m["chosen"]["scatter-collect"], N, "node {node}: {m:#}");
    }
    eprintln!("from the victim, each survivor: {from_victim:?}");
}

#[test]
fn a_node_whose_only_member_leaves_and_comes_back_gets_a_gapless_suffix_and_the_others_everything()
{
    // DEF with 3 segments: seed 003's fences on the 2×2 mesh of four
    // members, the chain it becomes on a line while node 4 is out.
    let Some(cluster) = start_without_multicast("bcast-churn", "def:3") else {
        return;
    };
    const N: u64 = 4_000;
    let mut subs = subscribers(&cluster, &[2, 3, 4], "bcast-churn");
    for (_, c, m) in &mut subs {
        mcast_cli::stream::wait_nodes(c, m.group, &m.view, 3, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut publisher = connect(&cluster, 1, "publisher");
    let joined = publisher.join("bcast-churn").expect("join");
    mcast_cli::stream::wait_nodes(
        &mut publisher,
        joined.group,
        &joined.view,
        4,
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let group = joined.group;
    let (_, mut leaver, _) = subs.pop().expect("node 4's");
    let progress = AtomicU64::new(0);
    std::thread::scope(|s| {
        let cluster_ref = &cluster;
        let steady: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c, _)| {
                s.spawn(move || {
                    let got = receive(&mut c, node, &[1], N, Duration::from_secs(10), |_| {});
                    let got = per_sender_in_order(node, &got).get(&1).copied();
                    if got != Some(N) {
                        let modes: Vec<String> = (1..=4)
                            .map(|n| format!("node {n}: {}", mode(cluster_ref, n, group)))
                            .collect();
                        panic!("node {node} got {got:?} of {N}:\n{}", modes.join("\n"));
                    }
                })
            })
            .collect();
        let (progress, cluster) = (&progress, &cluster);
        let churn = s.spawn(move || {
            // Node 4's member takes a third, leaves (its node stops carrying
            // the group), and a new one joins there and takes the rest.
            let first = receive(&mut leaver, 4, &[1], N / 3, Duration::from_secs(30), |_| {});
            progress.store(1, Ordering::Relaxed);
            leaver.leave(group).expect("leave");
            drop(leaver);
            let mut again = connect(cluster, 4, "subscriber-again");
            again.join("bcast-churn").expect("join again");
            let got = receive(&mut again, 4, &[1], N, Duration::from_secs(3), |_| {});
            (first, got)
        });
        for i in 0..N {
            publisher
                .publish_blocking(group, &message(1, i), Some(Duration::from_secs(30)))
                .unwrap_or_else(|e| panic!("publish {i}: {e}"));
        }
        for h in steady {
            h.join().unwrap();
        }
        let (first, got) = churn.join().unwrap();
        // (A batch may take it past a third.)
        let before = per_sender_in_order(4, &first).get(&1).copied().unwrap_or(0);
        assert!(before >= N / 3, "node 4's first member got {before}");
        // From its join point on: consecutive, to the end, nothing twice.
        let seqs: Vec<u64> = got.iter().filter(|m| m.0 == 1).map(|m| m.1).collect();
        let from = *seqs.first().expect("the new member got some");
        assert_eq!(seqs, (from..N).collect::<Vec<_>>(), "node 4's new member");
        assert!(
            from >= before,
            "the new member got what was sent before it joined: {from}"
        );
        eprintln!("node 4's new member joined at message {from}");
    });
    let m = mode(&cluster, 1, group);
    assert_eq!(m["chosen"]["def"], N, "every message by DEF: {m:#}");
    // Everything published reached every member: the publisher may leave.
    publisher.leave(group).expect("the publisher leaves");
}
