//! Total order for real (the total-order mode, docs/mcastd.md "Group
//! modes", docs/protocol.md §6.4): four daemons in network namespaces on
//! one bridge, AF_XDP on veth, groups with `mode = "total"`. Root only (CI
//! runs as root); without privileges the test skips with a message, and
//! with CI=true a skip is a failure.
//! One concern: that several senders, each multicasting its own stream
//! with no sequencer, reach every member in one order, each sender's
//! messages complete and in its order, and that the order outlives a
//! sender's death; a scattering's parts included.
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
    subscribers, Progress,
};
use mcast_ipc::{Client, Notice};

const CONFIG: &str = "subscriber_buffer = 67108864\nmode = \"total\"";

/// What subscriber `c` on `node` still gets once the dead `victim` has left
/// the node's barrier (its flush over) with nothing held and no event
/// waiting for its place: then every message and event the node will
/// deliver is in the ring.
fn rest_after(
    cluster: &common::Cluster,
    c: &mut Client,
    node: u32,
    group: u32,
    victim: u32,
) -> Vec<(u32, u64)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let m = mode(cluster, node, group);
        let gone = m["barrier_lag_us"].get(victim.to_string()).is_none();
        if gone && m["held"] == 0 && m["events_unplaced"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node {node}: {m:#}");
        std::thread::yield_now();
    }
    receive(c, node, &[victim], u64::MAX, Duration::ZERO, |_| {})
}

/// The error notice `c` gets next (other notices skipped), within 10 s.
fn error_notice(c: &mut Client) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        c.wait_notice(Duration::from_millis(100)).unwrap();
        for n in c.notices() {
            if let Notice::Error { message } = n {
                return message;
            }
        }
    }
    panic!("no error notice");
}

#[test]
fn three_senders_reach_all_four_nodes_in_one_order_without_a_sequencer() {
    let Some(cluster) = common::start("tot", CONFIG) else {
        return;
    };
    const N: u64 = 5_000;
    let senders = [2u32, 3, 4];
    let (orders, group, _members) = all_senders_to_all(&cluster, "tot", &senders, N, true);
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
    let mut subs = subscribers(&cluster, &survivors, "tot-kill");
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
    let progress = Progress::default();
    // The survivors send their last quarter once the victim has left
    // every survivor's barrier, so the event of the view without it falls
    // among messages.
    let killed = AtomicBool::new(false);
    let mut orders: Vec<(u32, Vec<(u32, u64)>)> = Vec::new();
    // The clients stay members until the checks at the end: the views of
    // their leaving would race them.
    let mut members = Vec::new();
    std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c, _)| {
                let progress = &progress;
                s.spawn(move || {
                    let got = receive(&mut c, node, &survivors, N, Duration::from_secs(30), |g| {
                        if node == watched {
                            progress.note(g, victim);
                        }
                    });
                    (node, c, got)
                })
            })
            .collect();
        let mut publishers = Vec::new();
        for (from, mut p, g) in pubs.drain(..) {
            let (progress, killed) = (&progress, &killed);
            publishers.push(s.spawn(move || {
                // The victim joined last and sends nothing before every other
                // node has stamped in its view: the others start once its
                // first message is through, so its messages interleave with
                // theirs instead of trailing them.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while from != victim && progress.victims() == 0 {
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
                        return None; // its daemon was killed
                    }
                    r.unwrap_or_else(|e| panic!("node {from} publish {i}: {e}"));
                }
                Some(p)
            }));
        }
        // Killed once a survivor has half of the four senders' messages,
        // a tenth of the victim's among them (the victim, the last to join,
        // waits for the others' stamps before its first message).
        progress.wait(2 * N, N / 10, || {
            for n in nodes {
                eprintln!("node {n}: {}", mode(&cluster, n, group));
                for line in cluster.daemons[n as usize - 1].log_text().lines() {
                    if line.contains("level=warn") {
                        eprintln!("  {line}");
                    }
                }
            }
            format!("at node {watched}, the victim node {victim}")
        });
        eprintln!(
            "node {victim} before it is killed: {}",
            mode(&cluster, victim, group)
        );
        cluster.kill(victim);
        let killed_at = std::time::Instant::now();
        let deadline = killed_at + Duration::from_secs(30);
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
        eprintln!(
            "node {victim} out of every survivor's barrier {:?} after the kill",
            killed_at.elapsed()
        );
        killed.store(true, Ordering::Relaxed);
        for h in receivers {
            let (node, mut c, mut got) = h.join().unwrap();
            got.extend(rest_after(&cluster, &mut c, node, group, victim));
            orders.push((node, got));
            members.push(c);
        }
        members.extend(publishers.into_iter().filter_map(|h| h.join().unwrap()));
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
    // The survivors' messages sent after the kill waited for the victim's
    // stamp: some survivor reported it silent to the failure detector
    // after ten beacon intervals (and probed it at once).
    let reports: u64 = survivors
        .iter()
        .map(|&n| mode(&cluster, n, group)["silent_reports"].as_u64().unwrap())
        .sum();
    assert!(reports > 0, "no survivor reported node {victim} silent");
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

#[test]
fn a_scattering_gives_each_member_its_part_in_one_order_and_all_or_none_when_its_sender_dies() {
    let config = format!("{CONFIG}\n[[group]]\nname = \"plain\"\nmode = \"fifo\"");
    let Some(mut cluster) = common::start("tot-scat", &config) else {
        return;
    };
    const N: u64 = 3_000;
    let victim = 4;
    let survivors = [1u32, 2, 3];
    let mut subs = subscribers(&cluster, &survivors, "scat");
    let mut scatterer = connect(&cluster, victim, "scatterer");
    let group = scatterer.join("scat").expect("join").group;
    let mut plain = connect(&cluster, 1, "publisher");
    plain.join("scat").expect("join");
    for (_, c, m) in &mut subs {
        mcast_cli::stream::wait_nodes(c, m.group, &m.view, 4, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    // Refused with a reason: a part for a client not in the group, and a
    // scattering to a group that is not in total order.
    scatterer
        .publish_scatter(group, &[(1, 12_345, b"x")])
        .unwrap();
    let why = error_notice(&mut scatterer);
    assert!(
        why.contains("member 12345 of node 1") && why.contains("view"),
        "{why}"
    );
    let mut fifo = connect(&cluster, 1, "fifo");
    let fifo_group = fifo.join("plain").expect("join").group;
    fifo.publish_scatter(fifo_group, &[(1, fifo.id(), b"x")])
        .unwrap();
    let why = error_notice(&mut fifo);
    assert!(why.contains("total-order group"), "{why}");

    // Each subscriber's part of scattering i is the same bytes, so the
    // subscribers' sequences (parts and node 1's messages) compare whole.
    let members: Vec<(u32, u64)> = subs.iter().map(|(n, c, _)| (*n, c.id())).collect();
    let parts_in = AtomicU64::new(0);
    let killed = AtomicBool::new(false);
    let mut orders: Vec<(u32, Vec<(u32, u64)>)> = Vec::new();
    std::thread::scope(|s| {
        let receivers: Vec<_> = subs
            .drain(..)
            .map(|(node, mut c, _)| {
                let parts_in = &parts_in;
                s.spawn(move || {
                    let got = receive(&mut c, node, &[1], N, Duration::from_secs(30), |g| {
                        if node == survivors[0] {
                            let parts = g.iter().filter(|(f, _)| *f == victim).count();
                            parts_in.store(parts as u64, Ordering::Relaxed);
                        }
                    });
                    (node, c, got)
                })
            })
            .collect();
        let members = &members;
        s.spawn(move || {
            for i in 0..N {
                let m = message(victim, i);
                let parts: Vec<mcast_ipc::scatter::Part<'_>> =
                    members.iter().map(|&(n, id)| (n, id, &m[..])).collect();
                let r = scatterer.publish_scatter_blocking(
                    group,
                    &parts,
                    Some(Duration::from_secs(30)),
                );
                if let Err(e) = r {
                    eprintln!("node {victim}'s scatterer stopped at {i}: {e}");
                    return; // its daemon was killed
                }
            }
        });
        let (parts_in, killed) = (&parts_in, &killed);
        s.spawn(move || {
            // Node 1's messages start once scatterings come (node 4, the
            // last to join, waits for the others' stamps first), and their
            // last quarter waits for the kill: the receivers stop at node
            // 1's last message.
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            for i in 0..N {
                while parts_in.load(Ordering::Relaxed) == 0
                    || i == N * 3 / 4 && !killed.load(Ordering::Relaxed)
                {
                    assert!(std::time::Instant::now() < deadline, "no kill");
                    std::thread::yield_now();
                }
                plain
                    .publish_blocking(group, &message(1, i), Some(Duration::from_secs(30)))
                    .unwrap_or_else(|e| panic!("node 1 publish {i}: {e}"));
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while parts_in.load(Ordering::Relaxed) < N / 10 {
            assert!(std::time::Instant::now() < deadline, "no scatterings came");
            std::thread::yield_now();
        }
        cluster.kill(victim);
        killed.store(true, Ordering::Relaxed);
        for h in receivers {
            let (node, mut c, mut got) = h.join().unwrap();
            got.extend(rest_after(&cluster, &mut c, node, group, victim));
            orders.push((node, got));
        }
    });
    // Every survivor has node 1's messages and the same scatterings, each
    // its own part, from the first on with no gap (all or none of each),
    // and all of it in one order.
    let mut parts = Vec::new();
    for (node, got) in &orders {
        let counts = per_sender_in_order(*node, got);
        assert_eq!(counts.get(&1), Some(&N), "node {node}: {counts:?}");
        parts.push(counts.get(&victim).copied().unwrap_or(0));
    }
    assert!(
        parts[0] > 0 && parts.iter().all(|&p| p == parts[0]),
        "{parts:?}"
    );
    assert_one_order(&orders);
    eprintln!(
        "node {victim} killed after {} of its {N} scatterings reached every survivor, one order of {} deliveries",
        parts[0],
        orders[0].1.len()
    );
}

/// Three senders' 2,000 messages each to all four nodes of a group that
/// commits (`extra`: more of the daemons' configuration), on cluster
/// `cluster` in group `group`: one order everywhere, every message
/// delivered and nothing held at every node; then each node's mode as
/// `mcast stat` shows it. None: skipped.
fn three_senders_committing(
    cluster: &str,
    group: &str,
    extra: &str,
) -> Option<Vec<serde_json::Value>> {
    three_senders(cluster, group, true, extra)
}

/// Three senders to all four nodes in one order, `commit` as given and
/// `extra` in the configuration; each node's mode at the end.
fn three_senders(
    cluster: &str,
    group: &str,
    commit: bool,
    extra: &str,
) -> Option<Vec<serde_json::Value>> {
    let config = format!("{CONFIG}\ncommit = {commit}{extra}");
    let cluster = common::start(cluster, &config)?;
    const N: u64 = 2_000;
    let (orders, group, _members) = all_senders_to_all(&cluster, group, &[2, 3, 4], N, true);
    assert_one_order(&orders);
    let modes = (1..=4u32).map(|node| {
        let m = mode(&cluster, node, group);
        assert_eq!(m["commit"], commit, "node {node}: {m:#}");
        assert_eq!(m["delivered"], N * 3, "node {node}: {m:#}");
        assert_eq!(m["held"], 0, "node {node}: {m:#}");
        m
    });
    Some(modes.collect())
}

#[test]
fn with_commit_three_senders_still_reach_all_four_nodes_in_one_order() {
    let Some(modes) = three_senders_committing("tot-commit", "totc", "") else {
        return;
    };
    for m in modes {
        // Every other node's report came (each says what it has).
        let reports = m["report_lag_us"].as_object().map_or(0, |r| r.len());
        assert_eq!(reports, 3, "{m:#}");
        assert_eq!(m["commit_tree"]["on"], false, "4 members, below 17: {m:#}");
    }
}

#[test]
fn with_commit_over_a_tree_three_senders_reach_all_four_nodes_in_one_order() {
    // The tree from two members (by default from 17): the reports climb it
    // as link messages, and the root's stable point comes down in beacons.
    let tree = "\ncommit_tree_from = 2";
    let Some(modes) = three_senders_committing("tot-ctree", "totct", tree) else {
        return;
    };
    assert_one_tree_carrying(&modes, "reports");
}

/// Every node's mode used one tree that carried `what` (`reports` or
/// `claims`): one root, which received from the others, each of which sent
/// up and received the root's stable points; nothing dropped.
fn assert_one_tree_carrying(modes: &[serde_json::Value], what: &str) {
    let mut roots = 0;
    for m in modes {
        let t = &m["commit_tree"];
        assert_eq!(t["on"], true, "{m:#}");
        assert_eq!(t["carries"], what, "{m:#}");
        assert_eq!(t["ups_dropped"], 0, "{m:#}");
        if t["root"] == true {
            roots += 1;
            assert!(t["ups_received"].as_u64() > Some(0), "{m:#}");
        } else {
            assert!(t["ups_sent"].as_u64() > Some(0), "{m:#}");
            assert!(t["stables_received"].as_u64() > Some(0), "{m:#}");
        }
    }
    assert_eq!(roots, 1, "one root");
}

#[test]
fn over_a_tree_of_claims_three_senders_reach_all_four_nodes_in_one_order() {
    // Without commit the tree carries claims: what MAK's acknowledgments
    // say every member has, up the links; the root's least claim and busy
    // members down in its beacons.
    let tree = "\ncommit_tree_from = 2";
    let Some(modes) = three_senders("tot-claims", "totcl", false, tree) else {
        return;
    };
    assert_one_tree_carrying(&modes, "claims");
}
