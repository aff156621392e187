//! A seeded simulation of the barrier (`barrier`, docs/protocol.md §6.2)
//! over many seeds: nodes of one group, each with one member passing a
//! number of barriers, reliable FIFO links between every pair (the daemons'
//! links), views that reach each node at its own time, and crashes of any
//! node, the root (the agent) included, which moves the root to the lowest
//! surviving node. The tree is the daemon's: each node at the place the
//! view gives it, so a crashed node's children are re-parented to its parent
//! (seed 004 §2.2) while barriers are in flight. The order of every event
//! is drawn from the seed.
//!
//! Checked at every release and at the end: nobody leaves barrier k before
//! every member still alive has called it k times; each call is answered
//! exactly once; once the crashes are over and everything is delivered,
//! every survivor has passed every barrier. 2,000 seeds a run
//! (`BARRIER_SEEDS=N` for more); a failure prints its seed and how to run
//! it alone (`BARRIER_SEED=S cargo test -p mcast-cli --lib barrier_sweep`).
//!
//! Owns: this simulation. May not touch: the barrier's state (it drives
//! `GroupBarrier` through its methods only).

use std::collections::{BTreeMap, VecDeque};

use mcast_ipc::ClientId;
use mcast_proto::{FeedbackTree, Rng};
use mcast_wire::NodeId;

use super::barrier::{Act, GroupBarrier, Place};
use crate::links::BarrierMsg;

/// Barriers each member passes.
const ROUNDS: u64 = 4;

/// A barrier message in flight: what, number, node ids.
type Msg = (BarrierMsg, u64, Vec<NodeId>);

/// A view: its nodes, and each node's place in the tree.
#[derive(Clone, Debug)]
struct View {
    nodes: Vec<NodeId>,
    places: Vec<(NodeId, u32)>,
}

impl View {
    /// Nodes 1..=n at places 0..n.
    fn first(n: u32) -> View {
        View {
            nodes: (1..=n).collect(),
            places: (1..=n).map(|v| (v, v - 1)).collect(),
        }
    }

    /// The view without `victim`, whose place falls vacant; when it was
    /// the root, the lowest survivor takes the root's place (the agent role
    /// moves, as `View::make_root` does in the group service).
    fn without(&self, victim: NodeId) -> View {
        let nodes: Vec<NodeId> = self
            .nodes
            .iter()
            .copied()
            .filter(|&n| n != victim)
            .collect();
        let mut places: Vec<(NodeId, u32)> = self
            .places
            .iter()
            .copied()
            .filter(|&(n, _)| n != victim)
            .collect();
        if self.places.contains(&(victim, 0)) {
            if let Some(&root) = nodes.first() {
                for p in &mut places {
                    if p.0 == root {
                        p.1 = 0;
                    }
                }
            }
        }
        View { nodes, places }
    }
}

struct Node {
    barrier: GroupBarrier,
    /// The view this node holds (it lags the truth until updated).
    view: View,
    /// The node carries the group: false until its first view arrives (a
    /// joining node), and barrier messages to it are lost meanwhile, as
    /// the daemon drops those of a group it does not carry.
    carried: bool,
    /// Calls made, and calls answered.
    calls: u64,
    answered: u64,
    waiting: bool,
}

struct World {
    rng: Rng,
    fanout: u16,
    nodes: BTreeMap<NodeId, Node>,
    /// FIFO per (from, to).
    links: BTreeMap<(NodeId, NodeId), VecDeque<Msg>>,
    /// The agent's view.
    agent_view: View,
    /// Views not yet delivered, per node, in order.
    views: BTreeMap<NodeId, VecDeque<View>>,
    crashes_left: u32,
    log: Vec<String>,
    /// Virtual time, for [`timed`]: None in the sweep.
    clock: Option<Clock>,
}

/// Virtual time: every link message takes `delay`.
#[derive(Default)]
struct Clock {
    now: u64,
    delay: u64,
    /// Messages in flight, by arrival time (sends happen in time order).
    in_flight: VecDeque<(u64, NodeId, NodeId)>,
    /// Per barrier: the last call and the last release.
    last_call: BTreeMap<u64, u64>,
    last_release: BTreeMap<u64, u64>,
}

impl World {
    fn truth(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Runs one barrier step at `node` against its own view.
    fn step(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut GroupBarrier, Place<'_>) -> Vec<Act>,
    ) -> Result<(), String> {
        let Some(n) = self.nodes.get_mut(&node) else {
            return Ok(());
        };
        if !n.carried {
            self.log
                .push(format!("{node} does not carry the group: dropped"));
            return Ok(());
        }
        // The agent is the lowest node of the view (the root moves with it).
        let root = n.view.nodes[0];
        let tree = FeedbackTree::with_places(root, &n.view.places, self.fanout);
        let children = tree.children(node);
        let members = [ClientId(u64::from(node))];
        let view = n.view.nodes.clone();
        let at = Place {
            node,
            parent: tree.parent(node),
            children: &children,
            members: &members,
            view: &view,
        };
        let acts = f(&mut n.barrier, at);
        for act in acts {
            match act {
                Act::Send(to, what, number, dropped) => {
                    self.log
                        .push(format!("{node}->{to} {what:?} {number} {dropped:?}"));
                    if self.nodes.contains_key(&to) {
                        self.links
                            .entry((node, to))
                            .or_default()
                            .push_back((what, number, dropped));
                        if let Some(c) = &mut self.clock {
                            c.in_flight.push_back((c.now + c.delay, node, to));
                        }
                    }
                }
                Act::Release { clients, .. } => {
                    for (c, _) in clients {
                        let m = c.0 as NodeId;
                        self.log.push(format!("release {m}"));
                        self.released(m)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `node`'s member calls its next barrier.
    fn call(&mut self, node: NodeId) -> Result<(), String> {
        let n = self.nodes.get_mut(&node).expect("a caller is alive");
        n.calls += 1;
        n.waiting = true;
        let k = n.calls;
        self.log.push(format!("call {node} #{k}"));
        if let Some(c) = &mut self.clock {
            c.last_call.insert(k, c.now);
        }
        self.step(node, |b, at| b.wait(ClientId(u64::from(node)), 1, at))
    }

    fn released(&mut self, m: NodeId) -> Result<(), String> {
        let k = {
            let n = self.nodes.get_mut(&m).ok_or("a crashed member released")?;
            if !n.waiting {
                return Err(format!("member {m} answered twice for one call"));
            }
            n.waiting = false;
            n.answered += 1;
            n.answered
        };
        if let Some(c) = &mut self.clock {
            c.last_release.insert(k, c.now);
        }
        // Every member still alive has called barrier k.
        if let Some((x, n)) = self.nodes.iter().find(|(_, n)| n.calls < k) {
            return Err(format!(
                "member {m} released from barrier {k} while member {x} has made {} calls",
                n.calls
            ));
        }
        Ok(())
    }

    fn crash(&mut self, victim: NodeId) {
        self.log.push(format!("crash {victim}"));
        self.nodes.remove(&victim);
        self.views.remove(&victim);
        self.links.retain(|&(a, b), _| a != victim && b != victim);
        self.agent_view = self.agent_view.without(victim);
        let view = self.agent_view.clone();
        for q in self.views.values_mut() {
            q.push_back(view.clone());
        }
    }

    /// One random event; false when nothing is left to happen.
    fn event(&mut self) -> Result<bool, String> {
        let mut choices: Vec<u8> = Vec::new();
        let callers: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.carried && !n.waiting && n.calls < ROUNDS)
            .map(|(&k, _)| k)
            .collect();
        let links: Vec<(NodeId, NodeId)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&k, _)| k)
            .collect();
        let viewers: Vec<NodeId> = self
            .views
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&k, _)| k)
            .collect();
        if !callers.is_empty() {
            choices.push(0);
        }
        if !links.is_empty() {
            choices.extend([1, 1, 1]);
        }
        if !viewers.is_empty() {
            choices.push(2);
        }
        if self.crashes_left > 0 && self.nodes.len() > 1 {
            choices.push(3);
        }
        if choices.is_empty() {
            return Ok(false);
        }
        let pick = |rng: &mut Rng, n: usize| rng.range(0, n as u64 - 1) as usize;
        match choices[pick(&mut self.rng, choices.len())] {
            0 => {
                let node = callers[pick(&mut self.rng, callers.len())];
                self.call(node)?;
            }
            1 => {
                let (from, to) = links[pick(&mut self.rng, links.len())];
                let (what, number, dropped) = self
                    .links
                    .get_mut(&(from, to))
                    .and_then(VecDeque::pop_front)
                    .expect("non-empty");
                self.step(to, |b, at| b.message(from, what, number, &dropped, at))?;
            }
            2 => {
                let node = viewers[pick(&mut self.rng, viewers.len())];
                let view = self
                    .views
                    .get_mut(&node)
                    .and_then(VecDeque::pop_front)
                    .expect("non-empty");
                self.log.push(format!("view {node} {:?}", view.places));
                if let Some(n) = self.nodes.get_mut(&node) {
                    n.view = view;
                    n.carried = true;
                }
                self.step(node, |b, at| b.view_changed(at))?;
            }
            _ => {
                let alive = self.truth();
                let victim = alive[pick(&mut self.rng, alive.len())];
                self.crashes_left -= 1;
                self.crash(victim);
            }
        }
        Ok(true)
    }
}

/// `n` nodes of tree fanout `fanout`, every link message taking `delay`,
/// each member calling its next barrier as soon as it is released, for
/// `rounds` barriers: per barrier, the time from its last call to its last
/// release, and the depth of the tree.
fn timed(n: u32, fanout: u16, rounds: u64, delay: u64) -> Result<(Vec<u64>, u32), String> {
    let view = View::first(n);
    let node = |_| Node {
        barrier: GroupBarrier::default(),
        view: view.clone(),
        carried: true,
        calls: 0,
        answered: 0,
        waiting: false,
    };
    let mut w = World {
        rng: Rng::new(0),
        fanout,
        nodes: view.nodes.iter().map(|&v| (v, node(v))).collect(),
        links: BTreeMap::new(),
        agent_view: view.clone(),
        views: BTreeMap::new(),
        crashes_left: 0,
        log: Vec::new(),
        clock: Some(Clock {
            delay,
            ..Clock::default()
        }),
    };
    loop {
        let idle: Vec<NodeId> = w
            .nodes
            .iter()
            .filter(|(_, n)| !n.waiting && n.calls < rounds)
            .map(|(&k, _)| k)
            .collect();
        for node in idle {
            w.call(node)?;
        }
        let clock = w.clock.as_mut().expect("timed");
        let Some((at, from, to)) = clock.in_flight.pop_front() else {
            break;
        };
        clock.now = at;
        let (what, number, dropped) = w
            .links
            .get_mut(&(from, to))
            .and_then(VecDeque::pop_front)
            .expect("in flight");
        w.step(to, |b, at| b.message(from, what, number, &dropped, at))?;
    }
    if let Some((x, n)) = w.nodes.iter().find(|(_, n)| n.answered < rounds) {
        return Err(format!(
            "member {x} passed {} of {rounds} barriers",
            n.answered
        ));
    }
    let c = w.clock.expect("timed");
    let latency = (1..=rounds)
        .map(|k| c.last_release[&k] - c.last_call[&k])
        .collect();
    let depth = FeedbackTree::new(1, &view.nodes, fanout).levels_below(1, 1);
    Ok((latency, depth))
}

/// Barrier latency against the model: with every link message taking d, a
/// barrier whose number the members know completes 2 × depth × d after its
/// last call (arrivals up the tree, the release down it; the seed's
/// version, whose release is one multicast followed by acknowledgments up
/// the tree, takes 2 × depth × d plus the multicast to complete, and
/// releases the last member at depth × d plus the multicast). The first
/// barrier takes depth × d more: the members learn its number from the
/// root's ASK on the way down.
#[test]
fn barrier_latency_matches_the_model() {
    const D: u64 = 50_000; // ns: 50 µs per link message
    for (n, fanout) in [
        (2, 2),
        (4, 2),
        (7, 2),
        (8, 2),
        (15, 2),
        (16, 4),
        (64, 4),
        (100, 2),
    ] {
        let (latency, depth) = timed(n, fanout, 5, D).unwrap_or_else(|e| panic!("{n} nodes: {e}"));
        let depth = u64::from(depth);
        assert_eq!(
            latency[0],
            3 * depth * D,
            "{n} nodes, fanout {fanout}: {latency:?}"
        );
        for (k, &l) in latency.iter().enumerate().skip(1) {
            assert_eq!(
                l,
                2 * depth * D,
                "{n} nodes, fanout {fanout}, barrier {}: {latency:?}",
                k + 1
            );
        }
    }
}

fn run(seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let n = rng.range(2, 9) as u32;
    let fanout = rng.range(2, 3) as u16;
    let crashes = rng.range(0, u64::from(n.min(3)) - 1) as u32;
    let view = View::first(n);
    // Some nodes have just joined: the others' views hold them, their own
    // first view is still on its way.
    let late: Vec<NodeId> = view
        .nodes
        .iter()
        .copied()
        .filter(|_| rng.chance(0.3))
        .collect();
    let mut w = World {
        rng,
        fanout,
        nodes: view
            .nodes
            .iter()
            .map(|&v| {
                (
                    v,
                    Node {
                        barrier: GroupBarrier::default(),
                        view: view.clone(),
                        carried: !late.contains(&v),
                        calls: 0,
                        answered: 0,
                        waiting: false,
                    },
                )
            })
            .collect(),
        links: BTreeMap::new(),
        agent_view: view.clone(),
        views: view
            .nodes
            .iter()
            .map(|&v| {
                let first = late.contains(&v).then(|| view.clone());
                (v, first.into_iter().collect())
            })
            .collect(),
        crashes_left: crashes,
        log: Vec::new(),
        clock: None,
    };
    let fail = |w: &World, e: String| {
        let tail: Vec<&String> = w.log.iter().rev().take(80).collect();
        format!("seed {seed} ({n} nodes, fanout {fanout}, {crashes} crashes): {e}\nlast events, newest first: {tail:#?}\nreplay: BARRIER_SEED={seed} cargo test -p mcast-cli --lib barrier_sweep")
    };
    let mut steps = 0;
    loop {
        match w.event() {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(fail(&w, e)),
        }
        steps += 1;
        if steps > 100_000 {
            return Err(fail(&w, "no end after 100,000 events".into()));
        }
    }
    // Quiet: every survivor passed every barrier.
    if let Some((x, n)) = w.nodes.iter().find(|(_, n)| n.answered < ROUNDS) {
        return Err(fail(
            &w,
            format!(
                "member {x} passed {} of {ROUNDS} barriers (waiting: {})",
                n.answered, n.waiting
            ),
        ));
    }
    Ok(())
}

#[test]
fn barrier_sweep() {
    // BARRIER_SEEDS=N for a longer sweep, BARRIER_SEED=S to replay one.
    crate::daemon::seeds::sweep("BARRIER", 2_000, run);
}
