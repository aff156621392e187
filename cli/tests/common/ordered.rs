//! What the tests of the modes that give one order (sequenced, total)
//! share: clients, numbered messages that name their sender, a receiver
//! that checks every byte, and the checks of each sender's order.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

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

/// A barrier for the threads of a test that fails, rather than hangs, when
/// one of them panics before it arrives (or nobody comes for a minute).
pub struct Ready {
    /// (arrived, a party panicked first)
    state: Mutex<(usize, bool)>,
    cv: Condvar,
    parties: usize,
}

/// One thread's place at a [`Ready`].
pub struct Party<'a> {
    ready: &'a Ready,
    arrived: bool,
}

impl Ready {
    pub fn new(parties: usize) -> Ready {
        Ready {
            state: Mutex::new((0, false)),
            cv: Condvar::new(),
            parties,
        }
    }

    /// A thread's place: [`Party::wait`] there; dropped in a panic before,
    /// it fails everyone's wait.
    pub fn party(&self) -> Party<'_> {
        Party {
            ready: self,
            arrived: false,
        }
    }
}

impl Party<'_> {
    /// Waits until every party has arrived.
    pub fn wait(&mut self) {
        self.arrived = true;
        let r = self.ready;
        let mut st = r.state.lock().unwrap();
        st.0 += 1;
        r.cv.notify_all();
        let deadline = Instant::now() + Duration::from_secs(60);
        while st.0 < r.parties {
            assert!(
                !st.1,
                "another thread of the test failed before it was ready"
            );
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "{} of {} threads ready after 60 s",
                st.0,
                r.parties
            );
            st = r.cv.wait_timeout(st, left).unwrap().0;
        }
    }
}

impl Drop for Party<'_> {
    fn drop(&mut self) {
        if !self.arrived && std::thread::panicking() {
            if let Ok(mut st) = self.ready.state.lock() {
                st.1 = true;
            }
            self.ready.cv.notify_all();
        }
    }
}

/// A subscriber on each of nodes 1..=4 and a publisher on each of
/// `senders`, all in group `name`; once every subscriber sees the view
/// with every client (with its event, in a group that places events in
/// its order, `events_in_order`), each publisher sends `n` messages. What
/// each subscriber received (every byte checked), and the group's number.
pub fn all_senders_to_all(
    cluster: &Cluster,
    name: &str,
    senders: &[u32],
    n: u64,
    events_in_order: bool,
) -> (Orders, u32, Vec<Client>) {
    let ready = Ready::new(4 + senders.len());
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
                    let mut party = ready.party();
                    let mut c = connect(cluster, node, "subscriber");
                    let m = c.join(name).expect("join");
                    // The view with every client (placed in the order here,
                    // where events are: what this node stamps from now on
                    // follows every join).
                    let all = 4 + senders.len();
                    // (The join's view counts where its notice does not
                    // come with its event.)
                    let initial = (!events_in_order).then_some(&m.view);
                    let enough = |members: &[mcast_ipc::Member]| members.len() >= all;
                    let timeout = Duration::from_secs(20);
                    let seen =
                        mcast_cli::stream::wait_view(&mut c, m.group, initial, enough, timeout);
                    assert_eq!(
                        seen,
                        Ok(true),
                        "node {node}: no view of {all} members in 20 s"
                    );
                    party.wait();
                    let got = receive(&mut c, node, senders, n, Duration::from_secs(30), |_| {});
                    (node, m.group, got, c)
                })
            })
            .collect();
        let mut pubs = Vec::new();
        for &from in senders {
            let ready = &ready;
            pubs.push(s.spawn(move || {
                let mut party = ready.party();
                let mut p = connect(cluster, from, "publisher");
                let m = p.join(name).expect("join");
                party.wait();
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

/// Every node received, up to the last message, the sequence of the node
/// that joined first from the event of the view it joined in on: events
/// and messages in one order (the events after the last message, of
/// clients leaving as the test ends, may still be on their way). Orders
/// without events ([`messages_only`]) compare whole.
pub fn assert_one_order(orders: &Orders) {
    let to_last_message = |got: &[(u32, u64)]| -> Vec<(u32, u64)> {
        let end = got.iter().rposition(|e| e.0 != 0).map_or(0, |i| i + 1);
        got[..end].to_vec()
    };
    let trimmed: Vec<(u32, Vec<(u32, u64)>)> = orders
        .iter()
        .map(|(node, got)| (*node, to_last_message(got)))
        .collect();
    let (first, order) = trimmed
        .iter()
        .max_by_key(|(_, got)| got.len())
        .expect("orders");
    let with_events = order.iter().any(|e| e.0 == 0);
    for (node, got) in &trimmed {
        assert!(
            !with_events || got.first().is_some_and(|e| e.0 == 0),
            "node {node} did not begin with the event of the view it joined in: {:?}",
            &got[..got.len().min(5)]
        );
        let Some(from) = order.iter().position(|e| *e == got[0]) else {
            panic!(
                "node {node} begins with event {:?}, which node {first} lacks",
                got[0]
            );
        };
        let theirs = &order[from..];
        let at = theirs.iter().zip(got).position(|(a, b)| a != b);
        assert_eq!(
            at, None,
            "nodes {first} (from {from}) and {node} differ at {at:?}"
        );
        assert_eq!(
            theirs.len(),
            got.len(),
            "nodes {first} (from {from}) and {node}"
        );
    }
}

/// Publishes messages 0..`n` of node `from` in group `g`. The publisher of
/// `victim`, the node a test kills mid-stream, stops at its first error
/// (its daemon is gone) and the call returns false; any other error fails
/// the test.
pub fn publish_until_killed(p: &mut Client, from: u32, g: u32, n: u64, victim: u32) -> bool {
    for i in 0..n {
        let r = p.publish_blocking(g, &message(from, i), Some(Duration::from_secs(30)));
        if let (true, Err(e)) = (from == victim, &r) {
            eprintln!("node {from}'s publisher stopped at {i}: {e}");
            return false;
        }
        r.unwrap_or_else(|e| panic!("node {from} publish {i}: {e}"));
    }
    true
}

/// Waits until `done()` (other threads' progress, read from atomics);
/// after a minute without it, fails the test with `why()`.
pub fn wait_until(done: impl Fn() -> bool, why: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{}", why());
        std::thread::yield_now();
    }
}

/// How far one watched subscriber got in a test that kills a sender: its
/// messages, and the victim's among them (read from other threads).
#[derive(Debug, Default)]
pub struct Progress {
    all: std::sync::atomic::AtomicU64,
    victims: std::sync::atomic::AtomicU64,
}

impl Progress {
    /// Notes what the watched subscriber has so far (`receive`'s progress).
    pub fn note(&self, got: &[(u32, u64)], victim: u32) {
        use std::sync::atomic::Ordering::Relaxed;
        let theirs = got.iter().filter(|(f, _)| *f == victim).count();
        self.victims.store(theirs as u64, Relaxed);
        self.all.store(got.len() as u64, Relaxed);
    }

    /// The victim's messages the watched subscriber has.
    pub fn victims(&self) -> u64 {
        self.victims.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until the watched subscriber has `all` messages, `victims` of
    /// them the victim's: a victim killed before its first message got
    /// through (its publisher may start last, and on a loaded host does)
    /// would leave the test nothing to check of it. After a minute, fails
    /// with both counts and what `more` says.
    pub fn wait(&self, all: u64, victims: u64, more: impl Fn() -> String) {
        let now = || self.all.load(std::sync::atomic::Ordering::Relaxed);
        wait_until(
            || now() >= all && self.victims() >= victims,
            || {
                format!(
                    "no progress to kill at: {} messages, {} of them the victim's; {}",
                    now(),
                    self.victims(),
                    more()
                )
            },
        );
    }
}
