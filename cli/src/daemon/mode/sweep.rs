//! A seeded simulation of the modes that give one order for all (the
//! sequenced mode, docs/protocol.md §6.3, and the total-order mode, §6.4)
//! over many seeds: nodes of one group, each with a publishing and a
//! subscribing client; reliable FIFO links between every pair (the
//! daemons' links); each node's send stream with a window, delivered to
//! each member at its own pace, and only as the daemon lets it (the root's
//! stream of the node's own view, once no flush runs there); views that
//! reach each node at its own time; crashes of any node, the root (the
//! agent, the lowest node) included, one at a time, each followed by the
//! flush of the departed node's stream (every survivor ends at the furthest
//! any survivor got); nodes joining mid-run; pauses past the failure
//! detector (the node is evicted while it sleeps: its link messages are
//! dropped by every peer, docs/protocol.md §6.0; it wakes, acts on what
//! waited for it, then rejoins as a new incarnation whose mode recalls what
//! its clients had, liveness.rs `rejoin`); time that passes between events,
//! and (total order) wall clocks that disagree by up to a second; half the
//! total-order runs commit, and half (drawn apart) use the commit tree
//! (`mode::commit_tree`) in every view: the members' claims climb it
//! (`mode::claims`), or where the group commits their reports. The order of every event is
//! drawn from the seed.
//!
//! Checked once everything is delivered: every survivor's subscriber
//! received the same messages in the same order; a node that joined or
//! rejoined, the same from where it joined (but for what its clients had
//! before the eviction and its own old incarnation's); each origin's
//! messages in its order, none twice (across a node's evictions too), and
//! every message a survivor's mode took is there (an evicted origin's old
//! incarnation may lose its last ones); what an evicted node's clients had
//! before its pause in the survivors' order (but for what only its own
//! frames decided, §6.3 and §6.4); no publisher received its own message;
//! nothing is held any more. 2,000 seeds a run per mode
//! (`SEQUENCED_SEEDS=N`, `TOTAL_SEEDS=N` for more; 30,000 each pass), and
//! the seeds that found bugs (`mode_sweep_regressions`); a failure prints
//! its seed and how to run it alone (e.g.
//! `TOTAL_SEED=S cargo test -p mcast-cli --lib total_sweep`).
//!
//! Owns: this simulation (the verdict on a run is `check`). May not touch:
//! the modes' state (it drives them through [`GroupMode`] only).

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use mcast_engine::{EngineError, Fragment, PublishError, StreamStart};
use mcast_ipc::ClientId;
use mcast_proto::Rng;
use mcast_wire::{GroupId, NodeId, Seq};

mod check;

use super::join_gate::JoinGate;
use super::sequenced::Sequenced;
use super::total::TotalOrder;
use super::{GroupMode, ModeCx, Published, StreamOps};
use crate::links::LinkMessage;

const GROUP: GroupId = 9;
const PUBLISHER: ClientId = ClientId(1);
const SUBSCRIBER: ClientId = ClientId(2);

/// One node's send stream: every message it took, and its ACK set.
#[derive(Debug, Default)]
struct Stream {
    log: Vec<Vec<u8>>,
    members: Vec<NodeId>,
}

/// A node's send stream as the mode sees it: full when `window` messages
/// are not yet delivered to every member of its ACK set.
struct Ops<'a> {
    stream: &'a mut Stream,
    /// Delivered to every member of the ACK set.
    acked: usize,
    window: usize,
}

impl StreamOps for Ops<'_> {
    fn open_sender(&mut self, _: GroupId, m: &[NodeId], _: StreamStart) -> Result<(), EngineError> {
        self.stream.members = m.to_vec();
        Ok(())
    }
    fn publish(&mut self, _: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        if self.stream.log.len() - self.acked >= self.window {
            return Err(PublishError::WouldBlock);
        }
        self.stream.log.push(msg.to_vec());
        Ok(())
    }
    fn set_members(&mut self, _: GroupId, m: &[NodeId]) -> Result<StreamStart, EngineError> {
        self.stream.members = m.to_vec();
        Ok(self.position())
    }
    fn resume_member(
        &mut self,
        _: GroupId,
        _: NodeId,
        _: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        Ok(self.position())
    }
    fn sender_position(&self, _: GroupId) -> Option<StreamStart> {
        Some(self.position())
    }
    fn send_idle(&self, _: GroupId) -> bool {
        self.stream.log.len() == self.acked
    }
    fn acked_messages(&mut self, _: GroupId) -> Option<u64> {
        Some(self.acked as u64)
    }
}

impl Ops<'_> {
    fn position(&self) -> StreamStart {
        StreamStart {
            epoch: 1,
            seq: Seq(self.stream.log.len() as u32),
        }
    }
}

/// What a client received: (source, message), in order.
type Received = Vec<(NodeId, Vec<u8>)>;

struct Node {
    mode: Box<dyn GroupMode>,
    /// The view this node holds (it lags the truth until updated): its
    /// root (the agent) first; and its epoch.
    view: Vec<NodeId>,
    view_epoch: u64,
    /// Per sender: how much of its stream was delivered here.
    cursor: BTreeMap<NodeId, usize>,
    /// Departed senders whose flush runs here.
    flushing: BTreeSet<NodeId>,
    /// Messages the publisher has yet to publish, and those the mode took.
    to_publish: u64,
    taken: u64,
    /// What each local client received: (source, message); a membership
    /// event placed by the mode as (0, "view:EPOCH").
    got: BTreeMap<ClientId, Received>,
    /// The epochs of the views whose event the mode took to place.
    placed: Vec<u64>,
    /// (Total order) the clients wait for the event of the node's first
    /// view, as a daemon's local members for that of the view they joined in.
    gate: JoinGate<()>,
    /// The epoch of the node's first view (0 before it).
    joined_in: u64,
    /// Its wall clock's lead on the simulation's time (total order).
    skew: u64,
}

impl Node {
    /// The node installs its first view, of `epoch`: its clients join.
    fn join(&mut self, epoch: u64, kind: Kind) {
        self.joined_in = epoch;
        if let Kind::Total { .. } = kind {
            self.gate.joined(PUBLISHER, epoch);
            self.gate.joined(SUBSCRIBER, epoch);
        }
    }
}

struct World {
    rng: Rng,
    window: usize,
    nodes: BTreeMap<NodeId, Node>,
    /// Every node's send stream, kept after a crash for the flush.
    streams: BTreeMap<NodeId, Stream>,
    /// FIFO per (from, to).
    links: BTreeMap<(NodeId, NodeId), VecDeque<LinkMessage>>,
    /// Views not yet delivered, per node, in order, with their epochs.
    views: BTreeMap<NodeId, VecDeque<(u64, Vec<NodeId>)>>,
    /// The epoch of the latest view.
    view_epoch: u64,
    /// Every view's nodes, by epoch.
    history: BTreeMap<u64, Vec<NodeId>>,
    /// Per departed node: how far the survivors' flush of its stream goes.
    flush_to: BTreeMap<NodeId, usize>,
    /// Messages each node's mode took (alive or not).
    taken: BTreeMap<NodeId, u64>,
    /// What each crashed node's subscriber had received when it crashed.
    crashed_got: BTreeMap<NodeId, Received>,
    /// The scatterings the modes took, (origin, index), and the nodes
    /// whose subscriber each has a part for.
    scatterings: BTreeMap<(NodeId, u64), BTreeSet<NodeId>>,
    /// The agent, the root of the true view.
    root: NodeId,
    crashes_left: u32,
    /// Moves of the agent role to another live node, the old root staying.
    moves_left: u32,
    log: Vec<String>,
    /// Virtual time (ns): every mode's monotonic clock, and with each
    /// node's skew its wall clock.
    now: Rc<Cell<u64>>,
    /// Nodes that join later (total order): how many, and the next id.
    joins_left: u32,
    next_id: NodeId,
    /// The nodes there from the start (their streams start at 0).
    founders: u32,
    /// Pauses past the failure detector left: the node is declared failed
    /// and evicted while it sleeps, wakes, acts on what waited for it, then
    /// learns of its eviction and rejoins as a new incarnation.
    pauses_left: u32,
    /// Evicted nodes still asleep.
    paused: BTreeSet<NodeId>,
    /// Per evicted node: how many messages its subscriber had at its pause.
    paused_at: BTreeMap<NodeId, usize>,
    /// Evicted nodes that have not rejoined yet (asleep or awake): out of
    /// the views, their link messages dropped by every peer.
    evicted: BTreeSet<NodeId>,
    /// Nodes that rejoined: each a new member (its streams start where
    /// the view that adds it found the others').
    rejoined: BTreeSet<NodeId>,
    /// Per node: its incarnation (1 until it rejoins).
    incarnation: BTreeMap<NodeId, u32>,
    /// Per rejoined node: the number of its first message of each later
    /// incarnation (those of earlier ones may be lost at its eviction).
    boundaries: BTreeMap<NodeId, Vec<u64>>,
    /// What each rejoined node's subscriber received before each of its
    /// evictions: before its pause, and between waking and rejoining.
    evictions: BTreeMap<NodeId, Vec<(Received, Received)>>,
    /// (Sequenced) per evicted node: what it multicast as the root that no
    /// survivor got from its stream (the flush ends before): delivered to
    /// its clients at once, the next root may order it otherwise.
    unstable: BTreeMap<NodeId, BTreeSet<Vec<u8>>>,
    /// Per rejoined node: the scatterings taken before its last rejoin
    /// (its old incarnation may have missed its part).
    scattered_before: BTreeMap<NodeId, BTreeSet<(NodeId, u64)>>,
    /// Where a sender's stream starts for a node that joined later (the
    /// sender's position when it installed the view that adds the node).
    starts: BTreeMap<(NodeId, NodeId), usize>,
    kind: Kind,
}

impl World {
    /// The true view: the root first.
    fn truth(&self) -> Vec<NodeId> {
        let others = self.live().filter(|&n| n != self.root);
        std::iter::once(self.root).chain(others).collect()
    }

    /// The nodes in the views: not crashed, not evicted.
    fn live(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.nodes
            .keys()
            .copied()
            .filter(|n| !self.evicted.contains(n))
    }

    /// A node that started afresh or joined after the group formed.
    fn joined_later(&self, id: NodeId) -> bool {
        id > self.founders || self.rejoined.contains(&id)
    }

    /// Every node's view becomes (eventually) the truth.
    fn new_view(&mut self) {
        self.view_epoch += 1;
        let view = (self.view_epoch, self.truth());
        self.history.insert(view.0, view.1.clone());
        for q in self.views.values_mut() {
            q.push_back(view.clone());
        }
    }

    /// Delivered to every live member of `sender`'s ACK set.
    fn acked(&self, sender: NodeId) -> usize {
        let Some(s) = self.streams.get(&sender) else {
            return 0;
        };
        self.delivered(sender)
            .map(|(_, at)| at)
            .min()
            .unwrap_or(s.log.len())
    }

    /// How much of `sender`'s stream was delivered at each live member of
    /// its ACK set.
    fn delivered(&self, sender: NodeId) -> impl Iterator<Item = (NodeId, usize)> + '_ {
        self.streams
            .get(&sender)
            .into_iter()
            .flat_map(|s| &s.members)
            .filter_map(move |m| {
                let n = self.nodes.get(m)?;
                let start = self.start(sender, *m).unwrap_or(0);
                Some((*m, n.cursor.get(&sender).copied().unwrap_or(start)))
            })
    }

    /// Runs `f` on `node`'s mode with its view, then sends what it queued
    /// and hands its records to the node's clients.
    fn step<R>(
        &mut self,
        node: NodeId,
        f: impl FnOnce(&mut dyn GroupMode, &mut ModeCx<'_>, &mut super::Out<'_>) -> R,
    ) -> Option<R> {
        let acked = self.acked(node);
        let window = self.window;
        let epoch = self.incarnation.get(&node).copied().unwrap_or(1);
        let n = self.nodes.get_mut(&node)?;
        let remote: Vec<NodeId> = n.view.iter().copied().filter(|&v| v != node).collect();
        let root = n.view.first().copied();
        let mut outbox = Vec::new();
        let mut ops = Ops {
            stream: self.streams.entry(node).or_default(),
            acked,
            window,
        };
        let mut cx = ModeCx {
            group: GROUP,
            node,
            epoch,
            remote: &remote,
            root,
            settled: n.flushing.is_empty(),
            view_epoch: n.view_epoch,
            streams: &mut ops,
            outbox: &mut outbox,
        };
        let (got, gate) = (&mut n.got, &mut n.gate);
        let r = f(n.mode.as_mut(), &mut cx, &mut |hdr, data, to| {
            gate.pass(to);
            for c in [PUBLISHER, SUBSCRIBER] {
                if gate.admits(c, to) {
                    got.entry(c).or_default().push((hdr.source, data.to_vec()));
                }
            }
        });
        // Every peer drops an evicted node's link messages (§6.0).
        let dropped = self.evicted.contains(&node);
        for (to, m) in outbox {
            if dropped {
                self.log.push(format!("{node}->{to} dropped: evicted"));
                continue;
            }
            if let LinkMessage::Mode { .. } = m {
                self.log.push(format!("{node}->{to} forward"));
                if self.nodes.contains_key(&to) {
                    self.links.entry((node, to)).or_default().push_back(m);
                }
            }
        }
        Some(r)
    }

    /// `node`'s mode learns of the view it now holds, and its event.
    fn install(&mut self, node: NodeId, added: &[NodeId]) {
        let r = self.step(node, |m, cx, _| {
            m.members_changed(cx, added).expect("a view");
            let event = format!("view:{}", cx.view_epoch).into_bytes();
            m.place_event(cx, &event).then_some(cx.view_epoch)
        });
        if let Some(Some(epoch)) = r {
            self.nodes.get_mut(&node).expect("alive").placed.push(epoch);
        }
    }

    fn deliver(&mut self, node: NodeId, sender: NodeId, index: usize) {
        let data = self.streams[&sender].log[index].clone();
        self.step(node, |m, _, out| {
            let f = Fragment {
                group: GROUP,
                stream: sender,
                seq: Seq(index as u32),
                first: true,
                last: true,
                data: &data,
            };
            m.deliver(&f, out)
        });
        *self
            .nodes
            .get_mut(&node)
            .expect("alive")
            .cursor
            .entry(sender)
            .or_default() = index + 1;
    }

    /// `victims` crash together (one view without them all).
    fn crash(&mut self, victims: &[NodeId]) {
        self.log.push(format!("crash {victims:?}"));
        for v in victims {
            let n = self.nodes.remove(v).expect("alive");
            self.crashed_got
                .insert(*v, n.got.get(&SUBSCRIBER).cloned().unwrap_or_default());
            self.views.remove(v);
            self.links.retain(|&(a, b), _| a != *v && b != *v);
        }
        self.depart(victims);
    }

    /// `victim` sleeps past the failure detector: the others evict it. It
    /// keeps its state and what waits for it; what it sent and had not
    /// arrived is dropped with everything it sends until it rejoins.
    fn pause(&mut self, victim: NodeId) {
        self.log.push(format!("pause {victim}: evicted"));
        self.paused.insert(victim);
        let had = self.nodes[&victim].got.get(&SUBSCRIBER).map_or(0, Vec::len);
        self.paused_at.insert(victim, had);
        self.evicted.insert(victim);
        self.views.remove(&victim);
        self.links.retain(|&(a, _), _| a != victim);
        self.depart(&[victim]);
        if let Kind::Sequenced = self.kind {
            let log = self.streams.get(&victim).map_or(&[][..], |s| &s.log[..]);
            let beyond = log.get(self.flush_to[&victim]..).unwrap_or_default();
            let texts = beyond
                .iter()
                .filter_map(|b| super::sequenced::decode(super::sequenced::TAG_DATA, b))
                .map(|(_, m)| m.to_vec());
            let unstable = self.unstable.entry(victim).or_default();
            unstable.extend(texts);
        }
    }

    /// The evicted `id` learns of it and starts afresh (liveness.rs
    /// `rejoin`): a new incarnation whose mode recalls what its clients
    /// had; its clients join again; its links and streams start anew.
    fn rejoin(&mut self, id: NodeId) {
        let inc = self.incarnation.entry(id).or_insert(1);
        *inc += 1;
        let inc = *inc;
        self.log.push(format!("{id} rejoins as incarnation {inc}"));
        let n = self.nodes.get_mut(&id).expect("evicted, not crashed");
        let delivered = n.mode.delivered();
        n.mode = self.kind.mode(id, &self.now, n.skew, inc);
        if let Some(d) = delivered {
            n.mode.recall_delivered(d);
        }
        let mut before = n.got.remove(&SUBSCRIBER).unwrap_or_default();
        let awake = before.split_off(self.paused_at.remove(&id).unwrap_or(0));
        self.evictions.entry(id).or_default().push((before, awake));
        let taken = self.scatterings.keys().copied().collect();
        self.scattered_before.insert(id, taken);
        n.got.clear();
        n.view.clear();
        n.view_epoch = 0;
        n.cursor.clear();
        n.flushing.clear();
        n.placed.clear();
        n.gate = JoinGate::default();
        n.joined_in = 0;
        self.boundaries.entry(id).or_default().push(n.taken);
        self.streams.insert(id, Stream::default());
        for other in self.nodes.values_mut() {
            other.cursor.remove(&id);
        }
        self.starts.retain(|&(a, b), _| a != id && b != id);
        self.links.retain(|&(a, b), _| a != id && b != id);
        self.evicted.remove(&id);
        self.rejoined.insert(id);
        self.views.insert(id, VecDeque::new());
        self.new_view();
    }

    /// The view without `victims` (crashed or evicted), and the flush of
    /// each one's stream.
    fn depart(&mut self, victims: &[NodeId]) {
        for &victim in victims {
            // The flush ends at the furthest any survivor got, counting
            // frames still in flight that one survivor gets after the crash
            // (after it installed the view without the victim, perhaps).
            let furthest = self
                .nodes
                .iter()
                .filter(|(id, _)| !self.evicted.contains(id))
                .filter_map(|(_, n)| n.cursor.get(&victim).copied())
                .max();
            if let Some(furthest) = furthest {
                let sent = self.streams.get(&victim).map_or(0, |s| s.log.len());
                let in_flight = self.rng.range(0, (sent - furthest) as u64) as usize;
                self.flush_to.insert(victim, furthest + in_flight);
            } else {
                self.flush_to.insert(victim, 0);
            }
        }
        if victims.contains(&self.root) {
            let survivor = self.live().next();
            self.root = survivor.expect("a survivor");
        }
        self.new_view();
    }

    /// What the daemon does without being asked: it opens the stream of
    /// every node that opened one (the start it sent), once no flush of it
    /// runs here, from the stream's beginning.
    fn open_streams(&mut self) {
        let alive: Vec<NodeId> = self.live().collect();
        let mut opens = Vec::new();
        for (&id, n) in &self.nodes {
            if !n.flushing.is_empty() || n.view_epoch == 0 || self.evicted.contains(&id) {
                continue;
            }
            for (&s, st) in &self.streams {
                let may = alive.contains(&s);
                if s != id && may && !st.members.is_empty() && !n.cursor.contains_key(&s) {
                    if let Some(at) = self.start(s, id) {
                        opens.push((id, s, at));
                    }
                }
            }
        }
        for (id, s, at) in opens {
            self.log.push(format!("{id} opens {s}'s stream at {at}"));
            self.nodes.get_mut(&id).expect("alive").cursor.insert(s, at);
        }
    }

    /// Where `sender`'s stream starts for `node` (None: not yet known).
    fn start(&self, sender: NodeId, node: NodeId) -> Option<usize> {
        if !self.joined_later(node) {
            Some(0)
        } else {
            self.starts.get(&(sender, node)).copied()
        }
    }

    /// One random event; false when nothing is left to happen.
    fn event(&mut self) -> bool {
        #[derive(Clone, Copy)]
        enum E {
            Publish(NodeId),
            Link(NodeId, NodeId),
            Stream(NodeId, NodeId),
            View(NodeId),
            FlushEnd(NodeId, NodeId),
            Poll(NodeId),
            Crash,
            Move,
            Join,
            Pause,
            Wake(NodeId),
            Rejoin(NodeId),
        }
        self.open_streams();
        let mut choices = Vec::new();
        for (&id, n) in &self.nodes {
            if self.paused.contains(&id) {
                choices.push(E::Wake(id));
                continue;
            }
            if n.to_publish > 0 && n.view_epoch > 0 {
                choices.push(E::Publish(id));
            }
            if let Some(&d) = n.flushing.first() {
                choices.push(E::FlushEnd(id, d));
            }
            let now = self.now.get();
            if n.mode.wants_round() || n.mode.poll_at().is_some_and(|t| t <= now) {
                choices.push(E::Poll(id));
            }
            // An open stream of a live sender delivers what it sent.
            for (&s, &at) in &n.cursor {
                let sent = self.streams.get(&s).map_or(0, |st| st.log.len());
                let live = self.nodes.contains_key(&s) && !self.evicted.contains(&s);
                if s != id && live && at < sent {
                    choices.extend([E::Stream(id, s); 3]);
                }
            }
        }
        for (&(a, b), q) in &self.links {
            if !q.is_empty() && !self.paused.contains(&b) {
                choices.extend([E::Link(a, b); 3]);
            }
        }
        for (&id, q) in &self.views {
            if !q.is_empty() {
                choices.push(E::View(id));
            }
        }
        let quiet_views = self.views.values().all(VecDeque::is_empty)
            && self.nodes.values().all(|n| n.flushing.is_empty());
        let live = self.live().count();
        if self.crashes_left > 0 && live > 1 && quiet_views {
            choices.push(E::Crash);
        }
        // One node evicted at a time.
        if self.pauses_left > 0 && live > 1 && quiet_views && self.evicted.is_empty() {
            choices.push(E::Pause);
        }
        // Joins and moves of the root may come while a flush runs.
        let views_in = self.views.values().all(VecDeque::is_empty);
        // An evicted node rejoins once its flush ended everywhere (the
        // daemons close its old incarnation's streams before they open
        // the new one's).
        for &id in self.evicted.difference(&self.paused) {
            let flushed = self.nodes.values().all(|n| !n.flushing.contains(&id));
            if views_in && flushed {
                choices.push(E::Rejoin(id));
            }
        }
        if self.moves_left > 0 && live > 1 && views_in {
            choices.push(E::Move);
        }
        if self.joins_left > 0 && views_in {
            choices.push(E::Join);
        }
        if choices.is_empty() {
            // Nothing to do but wait for a mode's timer.
            let next = self.nodes.values().filter_map(|n| n.mode.poll_at()).min();
            return match next {
                Some(t) if t > self.now.get() => {
                    self.now.set(t);
                    true
                }
                _ => false,
            };
        }
        let pick = |rng: &mut Rng, n: usize| rng.range(0, n as u64 - 1) as usize;
        // Time passes between events (up to a beacon interval and a half).
        self.now.set(self.now.get() + self.rng.range(0, 150));
        match choices[pick(&mut self.rng, choices.len())] {
            E::Publish(id) => {
                let k = self.nodes[&id].taken;
                let msg = format!("{id}:{k}").into_bytes();
                // (Total order) a quarter are scatterings to some of the
                // view's nodes' subscribers, each part the same bytes.
                let view = self.nodes[&id].view.clone();
                let to: BTreeSet<NodeId> = match self.kind {
                    Kind::Total { .. } if self.rng.range(0, 3) == 0 => view
                        .iter()
                        .copied()
                        .filter(|_| self.rng.range(0, 1) == 0)
                        .collect(),
                    _ => BTreeSet::new(),
                };
                let from = PUBLISHER;
                let r = if to.is_empty() {
                    self.step(id, |m, cx, out| m.publish(cx, from, &msg, out))
                } else {
                    let parts: Vec<mcast_ipc::scatter::Part<'_>> =
                        to.iter().map(|&d| (d, SUBSCRIBER.0, &msg[..])).collect();
                    let mut body = Vec::new();
                    mcast_ipc::scatter::encode(&parts, &mut body);
                    self.step(id, |m, cx, out| m.publish_scatter(cx, from, &body, out))
                };
                let sent = matches!(r, Some(Ok(Published::Sent)));
                self.log
                    .push(format!("publish {id}:{k} to {to:?} sent={sent}"));
                if sent && !to.is_empty() {
                    self.scatterings.insert((id, k), to);
                }
                if sent {
                    let n = self.nodes.get_mut(&id).expect("alive");
                    n.taken += 1;
                    n.to_publish -= 1;
                    *self.taken.entry(id).or_default() += 1;
                }
            }
            E::Link(from, to) => {
                let m = self
                    .links
                    .get_mut(&(from, to))
                    .and_then(VecDeque::pop_front)
                    .expect("non-empty");
                if let LinkMessage::Mode { body, .. } = m {
                    self.log.push(format!("{from}->{to} arrives"));
                    let r = self.step(to, |mode, cx, out| mode.on_link(cx, from, &body, out));
                    if let Some(Err(e)) = r {
                        self.log.push(format!("on_link error {e}"));
                    }
                }
            }
            E::Stream(id, sender) => {
                let at = self.nodes[&id].cursor.get(&sender).copied().unwrap_or(0);
                self.log.push(format!("{sender}=>{id} #{at}"));
                self.deliver(id, sender, at);
            }
            E::View(id) => {
                let (epoch, view) = self
                    .views
                    .get_mut(&id)
                    .and_then(VecDeque::pop_front)
                    .expect("non-empty");
                self.log.push(format!("view {id} {view:?}"));
                let n = self.nodes.get_mut(&id).expect("alive");
                // A departed sender whose stream was delivered here is flushed.
                for d in n.view.iter().filter(|d| !view.contains(d)) {
                    if n.cursor.contains_key(d) {
                        n.flushing.insert(*d);
                    }
                }
                let added: Vec<NodeId> = view
                    .iter()
                    .copied()
                    .filter(|v| *v != id && !n.view.contains(v))
                    .collect();
                if n.view_epoch == 0 {
                    n.join(epoch, self.kind);
                }
                n.view = view;
                n.view_epoch = epoch;
                // The added nodes start where this node's stream is now.
                let at = self.streams.get(&id).map_or(0, |st| st.log.len());
                for &a in &added {
                    self.starts.entry((id, a)).or_insert(at);
                }
                self.install(id, &added);
            }
            E::FlushEnd(id, d) => {
                let (from, to) = (self.nodes[&id].cursor[&d], self.flush_to[&d]);
                self.log
                    .push(format!("flush of {d} ends at {id}: {from}..{to}"));
                for i in from..to {
                    self.deliver(id, d, i);
                }
                let n = self.nodes.get_mut(&id).expect("alive");
                n.flushing.remove(&d);
                // The daemon polls the mode as the group's last flush ends
                // (flush.rs), before any frame of a stream started then.
                if n.flushing.is_empty() {
                    let now = self.now.get();
                    self.step(id, |m, cx, out| m.poll(cx, now, out));
                }
            }
            E::Poll(id) => {
                let now = self.now.get();
                self.step(id, |m, cx, out| m.poll(cx, now, out));
            }
            E::Move => {
                let others: Vec<NodeId> = self.live().filter(|&n| n != self.root).collect();
                self.root = others[pick(&mut self.rng, others.len())];
                self.moves_left -= 1;
                self.log.push(format!("the root moves to {}", self.root));
                self.new_view();
            }
            E::Join => {
                let id = self.next_id;
                self.next_id += 1;
                self.joins_left -= 1;
                let to_publish = self.rng.range(0, 12);
                let skew = self.rng.range(0, 1_000_000_000);
                let node = Node {
                    mode: self.kind.mode(id, &self.now, skew, 1),
                    view: Vec::new(),
                    view_epoch: 0,
                    cursor: BTreeMap::new(),
                    flushing: BTreeSet::new(),
                    to_publish,
                    taken: 0,
                    got: BTreeMap::new(),
                    placed: Vec::new(),
                    gate: JoinGate::default(),
                    joined_in: 0,
                    skew,
                };
                self.log.push(format!("{id} joins"));
                self.nodes.insert(id, node);
                self.views.insert(id, VecDeque::new());
                self.new_view();
            }
            E::Crash => {
                let mut alive = self.truth();
                let victim = alive.remove(pick(&mut self.rng, alive.len()));
                let mut victims = vec![victim];
                // Sometimes two at once (a member that delivered a message
                // and its sender, say), when one would still be left.
                if self.crashes_left >= 2 && alive.len() >= 2 && self.rng.range(0, 1) == 0 {
                    victims.push(alive[pick(&mut self.rng, alive.len())]);
                }
                self.crashes_left -= victims.len() as u32;
                self.crash(&victims);
            }
            E::Pause => {
                let alive = self.truth();
                let victim = alive[pick(&mut self.rng, alive.len())];
                self.pauses_left -= 1;
                self.pause(victim);
            }
            E::Wake(id) => {
                self.log.push(format!("{id} wakes"));
                self.paused.remove(&id);
            }
            E::Rejoin(id) => self.rejoin(id),
        }
        true
    }
}

/// The mode a sweep runs.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Sequenced,
    /// (`commit`: delivering only what every member has, seed 002's TOC-Re;
    /// `tree`: the commit tree in every view, which carries the claims, or
    /// where the group commits the reports.)
    Total {
        commit: bool,
        tree: bool,
    },
}

impl Kind {
    /// Node `v`'s mode; (total order) its wall clock is the simulation's
    /// time plus `skew`, a beacon every 100 ns of it.
    /// `incarnation` counts from 1, a rejoin past an eviction adding one.
    fn mode(
        self,
        v: NodeId,
        now: &Rc<Cell<u64>>,
        skew: u64,
        incarnation: u32,
    ) -> Box<dyn GroupMode> {
        match self {
            Kind::Sequenced => Box::new(Sequenced::new(v, incarnation, Seq(0))),
            Kind::Total { commit, tree } => {
                let now = Rc::clone(now);
                Box::new(
                    TotalOrder::new(GROUP, v, Seq(0), Box::new(move || now.get() + skew), 100)
                        .committing(commit)
                        .commit_tree_from(if tree { 2 } else { usize::MAX }),
                )
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Sequenced => "SEQUENCED",
            Kind::Total { .. } => "TOTAL",
        }
    }
}

fn run(kind: Kind, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let now = Rc::new(Cell::new(0u64));
    let n = rng.range(2, 6) as u32;
    let crashes = rng.range(0, u64::from(n) - 1).min(2) as u32;
    let window = rng.range(1, 8) as usize;
    let moves = rng.range(0, 2) as u32;
    let joins = rng.range(0, 2) as u32;
    // Up to two pauses past the failure detector, one at a time.
    let pauses = rng.range(0, 2) as u32;
    // Half the total-order runs deliver only what every member has; half
    // of all over a commit tree (drawn apart, so that each seed's events
    // stay what they were before the tree).
    let kind = match kind {
        Kind::Total { .. } => {
            let commit = rng.range(0, 1) == 1;
            let tree = Rng::new(seed ^ 0x7ee0_c0de).range(0, 1) == 1;
            Kind::Total { commit, tree }
        }
        k => k,
    };
    let view: Vec<NodeId> = (1..=n).collect();
    let mut nodes = BTreeMap::new();
    for &v in &view {
        let to_publish = rng.range(0, 12);
        // Wall clocks up to a second apart.
        let skew = rng.range(0, 1_000_000_000);
        let mut node = Node {
            mode: kind.mode(v, &now, skew, 1),
            view: view.clone(),
            view_epoch: 1,
            cursor: BTreeMap::new(),
            flushing: BTreeSet::new(),
            to_publish,
            taken: 0,
            got: BTreeMap::new(),
            placed: Vec::new(),
            gate: JoinGate::default(),
            joined_in: 0,
            skew,
        };
        node.join(1, kind);
        nodes.insert(v, node);
    }
    let mut w = World {
        rng,
        window,
        nodes,
        streams: BTreeMap::new(),
        links: BTreeMap::new(),
        views: view.iter().map(|&v| (v, VecDeque::new())).collect(),
        flush_to: BTreeMap::new(),
        taken: BTreeMap::new(),
        crashed_got: BTreeMap::new(),
        scatterings: BTreeMap::new(),
        view_epoch: 1,
        history: BTreeMap::from([(1, view.clone())]),
        root: 1,
        crashes_left: crashes,
        moves_left: moves,
        log: Vec::new(),
        now,
        joins_left: joins,
        next_id: n + 1,
        founders: n,
        starts: BTreeMap::new(),
        kind,
        pauses_left: pauses,
        paused: BTreeSet::new(),
        paused_at: BTreeMap::new(),
        evicted: BTreeSet::new(),
        rejoined: BTreeSet::new(),
        incarnation: BTreeMap::new(),
        boundaries: BTreeMap::new(),
        evictions: BTreeMap::new(),
        scattered_before: BTreeMap::new(),
        unstable: BTreeMap::new(),
    };
    // The first view, at every node.
    for &v in &view {
        let added: Vec<NodeId> = view.iter().copied().filter(|&o| o != v).collect();
        w.install(v, &added);
    }
    let fail = |w: &World, e: String| {
        let tail: Vec<&String> = w.log.iter().rev().take(600).collect();
        format!("seed {seed} ({kind:?}, {n} nodes, window {window}, {crashes} crashes, {pauses} pauses, {moves} moves of the root, {joins} joins): {e}\nlast events, newest first: {tail:#?}\nreplay: {name}_SEED={seed} cargo test -p mcast-cli --lib {test}", name = kind.name(), test = kind.name().to_lowercase() + "_sweep")
    };
    let mut steps = 0;
    while w.event() {
        steps += 1;
        if steps > 100_000 {
            let modes: Vec<String> = w
                .nodes
                .iter()
                .map(|(id, n)| {
                    format!(
                        "{id}: poll at {:?} (now {}), {}",
                        n.mode.poll_at(),
                        w.now.get(),
                        n.mode.stats_json()
                    )
                })
                .collect();
            return Err(fail(&w, format!("no end after 100,000 events: {modes:#?}")));
        }
    }
    if let Some((id, n)) = w.nodes.iter().find(|(_, n)| n.to_publish > 0) {
        return Err(fail(
            &w,
            format!(
                "node {id} could not publish {} messages: {}",
                n.to_publish,
                n.mode.stats_json()
            ),
        ));
    }
    w.check().map_err(|e| {
        let modes: Vec<String> = w
            .nodes
            .iter()
            .map(|(id, n)| format!("{id}: {}", n.mode.stats_json()))
            .collect();
        fail(&w, format!("{e}\nthe modes at the end: {modes:#?}"))
    })
}

#[test]
fn sequenced_sweep() {
    // SEQUENCED_SEEDS=N for a longer sweep, SEQUENCED_SEED=S to replay one.
    crate::daemon::seeds::sweep("SEQUENCED", 2_000, |s| run(Kind::Sequenced, s));
}

/// Seeds that found bugs, each run whatever the sweep's range: a new
/// incarnation's forward or stamp taken for the old one's, a joined root
/// sequencing again what came before it joined, an old incarnation's
/// message sequenced after the new one's, a departed node left in the
/// barrier until the next poll (seed 9548 is beyond the default range), a
/// commit-tree member holding its own join event that never sent its
/// report up (seed 241: nothing was "wanted" of it); over a tree of claims,
/// a member that polled for ever for a claim nobody waited on (130, 176),
/// and a root that committed its own message past a pending join event's
/// place, which the survivors then cut (2617).
#[test]
fn mode_sweep_regressions() {
    for seed in [5, 85, 158, 346, 393, 770] {
        run(Kind::Sequenced, seed).unwrap_or_else(|e| panic!("{e}"));
    }
    for seed in [
        1, 3, 130, 162, 176, 182, 241, 313, 919, 2617, 3846, 9548, 83551, 3175507,
    ] {
        run(
            Kind::Total {
                commit: false,
                tree: false,
            },
            seed,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn total_sweep() {
    // TOTAL_SEEDS=N for a longer sweep, TOTAL_SEED=S to replay one.
    crate::daemon::seeds::sweep("TOTAL", 2_000, |s| {
        run(
            Kind::Total {
                commit: false,
                tree: false,
            },
            s,
        )
    });
}
