//! The total-order mode (seed 002, TOC; docs/protocol.md §6.4): every
//! member delivers every sender's messages in one order, the order of
//! their timestamps, without a sequencer. Each node stamps its messages
//! with its hybrid logical clock ([`hlc`](super::hlc)) and multicasts them
//! in its own MAK stream, which repairs losses and keeps each sender's
//! order. A node holds what it receives; its *barrier* is the smallest,
//! over the view's other nodes, of the largest stamp it has from each
//! (stamps only grow in a stream), and its own clock; what is stamped at
//! or below the barrier can no longer be overtaken, so it is delivered, in
//! (stamp, node) order. A node whose stamp others' messages wait on sends
//! a *beacon* (a stamp without a message) in its stream, at most one a
//! beacon interval, so an idle node holds nobody back; a node whose held
//! messages stay stuck says in its beacon what it waits for (`wants`), for
//! the node behind that never saw them.
//!
//! Views: a departed node stays in the barrier until no flush runs here
//! (the flush brings its last messages, the same at every survivor), then
//! leaves it. A node joining the group sends a beacon at once but no
//! message until every other node has sent it a stamp from a view that
//! holds it: each sends one when it installs that view, after everything
//! it delivered without the new node, so the new node's first message is
//! stamped after all of it. What a node's stream brings before the view
//! that adds it is kept until that view.
//!
//! Owns: the clock, the largest stamp per node, the held messages, the
//! beacons and what they ask for, the wait of a joining node, and what
//! came early; what the commit tree carries up and brings down is its
//! child module `tree` (`total_tree.rs`), where membership events sit in
//! the order and what a departed node keeps its child module `events`
//! (`total_events.rs`). Does not touch: the flush (the
//! daemon's: it delivers a departed node's last messages through
//! [`GroupMode::deliver`]; `ModeCx::settled` says when it is over), views,
//! the streams' repairs and ACKs.

use std::collections::{BTreeMap, HashMap};

use mcast_engine::{EngineError, Fragment};
use mcast_ipc::{scatter, ClientId};
use mcast_wire::{GroupId, NodeId, Seq};
use serde_json::json;

use super::claims::Claims;
use super::commit_tree::{self, CommitTree};
use super::hlc::{Hlc, Wall};
use super::least::Least;
use super::send_stream::SendStream;
use super::silence::Silence;
pub use super::total_wire::HEADER_LEN;
use super::total_wire::{
    busy_ids, decode, encode, encode_beacon, Opening, MAX_BUSY, TAG_DATA, TAG_SCATTER,
};
#[cfg(test)]
use super::total_wire::{BEACON_LEN, STABLE_BEACON_LEN, TAG_BEACON};
use super::{GroupMode, ModeCx, Out, Published, To};
use crate::daemon::deliver::{data_record, event_record};
use crate::links::LinkMessage;

/// The default beacon interval: at most one beacon per interval from a
/// node, and only while others' messages wait for it.
pub const DEFAULT_BEACON_NS: u64 = 100_000;
/// Bytes of this node's own messages held before they are delivered here:
/// a publication beyond waits in the client's ring (WouldBlock).
pub const MAX_OWN_HELD_BYTES: usize = 4 << 20;
/// Bytes of messages kept from nodes not yet in the view here; beyond,
/// they are dropped (`stale`).
pub const MAX_EARLY_BYTES: usize = 4 << 20;

/// A stamp as it came: (stamp, ready epoch, the message or None for a
/// beacon).
type Stamped = (u64, u64, Option<Message>);

/// A message's bytes, and whether they are a scattering's parts.
#[derive(Debug)]
struct Message {
    bytes: Vec<u8>,
    scatter: bool,
}

/// What waits for the barrier: a message, or a membership event placed
/// in the order.
#[derive(Debug)]
enum Held {
    Message {
        msg: Message,
        /// This node's own: the local client that published it (it does
        /// not get it back).
        from: Option<ClientId>,
    },
    Event(Vec<u8>),
    /// A `skipped` notice about one sender's stream, placed after what
    /// came of that sender before the jump.
    Notice(Vec<u8>),
}

/// Where a held item sits in the order: (stamp, node, 0) for a message;
/// (stamp, [`EVENT_NODE`], view epoch) for a membership event, after every
/// message of its stamp.
type Key = (u64, NodeId, u64);

/// The node an event's key names: above every node.
const EVENT_NODE: NodeId = NodeId::MAX;

/// The third part of a notice's key: this bit and a count (above every
/// view epoch, so never an event's key).
const NOTICE_KEY: u64 = 1 << 63;

/// A view's membership event whose place in the order is not known yet.
/// Its place is the largest of the view's members' first stamps in a view
/// at least this new: every member delivered only what was stamped below
/// its own before it knew of the view, and every member of the view,
/// joining ones included, knows the same stamps (a member that leaves
/// without one never sent it to any survivor: the flush says so).
#[derive(Debug)]
struct PendingEvent {
    epoch: u64,
    event: Vec<u8>,
    /// Members whose first stamp of this view (or a later one) has not come.
    first_from: Vec<NodeId>,
    /// Nodes gone from the view: their messages stamped above the event's
    /// place are dropped everywhere (their failure stamp).
    gone: Vec<NodeId>,
    /// The held messages of gone nodes that came back as new members
    /// before the event's place was known: those above it are dropped (the
    /// new incarnation's are not cut).
    gone_keys: Vec<Key>,
    /// The largest of the stamps known so far: the event's place is at
    /// or above it.
    at: u64,
    /// The view adds a node (this one, if it is the first view here).
    adds: bool,
}

/// A message of a remote stream whose later fragments are still coming.
#[derive(Debug)]
struct Partial {
    ts: u64,
    epoch: u64,
    msg: Message,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    /// Own messages stamped and sent.
    published: u64,
    /// Messages delivered here in the total order (own included).
    delivered: u64,
    beacons_sent: u64,
    beacons_received: u64,
    /// Publications refused for a while: the node was joining, or held too
    /// much of its own.
    blocked: u64,
    /// Fragments without a valid header, or stamps that did not grow.
    malformed: u64,
    /// Messages of nodes not in the barrier beyond [`MAX_EARLY_BYTES`],
    /// and last messages cut short by a departure, dropped.
    stale: u64,
    /// Beacons the stream refused for another reason than a full window.
    beacon_errors: u64,
    /// Most messages held at once.
    held_max: u64,
    /// Membership events delivered at their place in the order.
    events: u64,
    /// Messages of a departed node stamped after the event that says it
    /// is gone, dropped (at every survivor alike).
    cut: u64,
    /// Scatterings this node's clients published.
    scatterings: u64,
    /// `skipped` notices placed in the order ([`GroupMode::place_skipped`]).
    skipped_notices: u64,
    /// Nodes reported silent to the failure detector ([`Silence`]).
    silent_reports: u64,
}

/// A group in total order.
pub struct TotalOrder {
    node: NodeId,
    group: GroupId,
    clock: Hlc,
    stream: SendStream,
    beacon_ns: u64,
    /// The nodes the barrier waits on (the view's others, and those gone
    /// whose flush may still run), each with its largest stamp (None: none
    /// yet in this view).
    senders: Least,
    /// Nodes gone from the view, still in the barrier until no flush runs.
    /// Each with the epoch of the view it left in: a stamp of it for that
    /// view or a later one is a new incarnation's (the old one never
    /// installed the view), kept until the view adds it again.
    departing: BTreeMap<NodeId, u64>,
    /// What came from nodes not in the barrier here (their stream started
    /// before the view that adds them reached this node), in order: (stamp,
    /// view epoch, the message or None for a beacon). Taken in when the
    /// view adds them; at most [`MAX_EARLY_BYTES`] of messages.
    early: BTreeMap<NodeId, Vec<Stamped>>,
    early_bytes: usize,
    /// The view epoch at which this node started carrying the group, and
    /// the nodes whose stamp from a view at least that new it waits for
    /// before its first message.
    joined_epoch: Option<u64>,
    /// The view just installed adds a node (for its event).
    view_adds: bool,
    awaiting: Vec<NodeId>,
    held: BTreeMap<Key, Held>,
    held_bytes: usize,
    own_held_bytes: usize,
    partial: HashMap<NodeId, Partial>,
    /// The largest stamp this node sent.
    advertised: u64,
    /// The largest stamp of a message from another node seen here: when it
    /// exceeds `advertised`, the others hold messages that wait on this
    /// node's next stamp.
    demand: u64,
    /// A new view here: a joining node waits for a stamp of it.
    beacon_owed: bool,
    /// When the last beacon went (monotonic ns).
    last_beacon_ns: Option<u64>,
    /// The oldest held message and since when it has been the oldest
    /// (monotonic ns): one held two beacon intervals is stuck.
    oldest: Option<(Key, u64)>,
    /// The watch for nodes the oldest held message waits on that send
    /// nothing (reported to the failure detector).
    silence: Silence<Key>,
    /// The largest `wants` this node's beacons said.
    wanted: u64,
    /// The view epoch this node installed last.
    installed: u64,
    /// The ready epoch (`ready`) of the last stamp this node sent: a
    /// beacon is owed when it grows.
    announced: u64,
    /// Per node (this one too), the first stamp of each view epoch it
    /// stamped in, as (epoch, stamp), while a pending event may need it.
    firsts: BTreeMap<NodeId, Vec<(u64, u64)>>,
    /// Membership events not yet placed, in view order.
    events: std::collections::VecDeque<PendingEvent>,
    /// Per departed node, the place of the event that says it is gone:
    /// its messages stamped later are dropped.
    cuts: BTreeMap<NodeId, u64>,
    /// Deliver only what every member has (seed 002's TOC-Re): what the
    /// barrier passed and every other member's last barrier report too.
    commit: bool,
    /// Each node's last barrier report (the barrier in its last frame):
    /// it has every message stamped at or below it.
    reports: BTreeMap<NodeId, u64>,
    /// The last reports of the barrier's nodes not departing (None: none
    /// yet): their least is the others' part of the stable point.
    counted: Least,
    /// The barrier this node put in its last frame (or sent up the
    /// commit tree).
    reported: u64,
    /// The commit tree, in views large enough for one: it carries the
    /// members' claims (`claims_on`), else (a committing group whose
    /// stream takes no acknowledgments) their barrier reports.
    commit_tree: CommitTree,
    /// The stream's algorithm acknowledges what every member has: claims
    /// can be made ([`Claims`]).
    claims_on: bool,
    /// This node's claim and the stamps it waits on.
    claims: Claims,
    /// When the claim was last refreshed (monotonic ns; it is refreshed
    /// at most every quarter beacon interval while one is wanted).
    claim_checked_ns: Option<u64>,
    /// The largest claim this node sent up the tree (or, its root,
    /// multicast) while not busy, in any view.
    claimed: u64,
    /// The last value it sent up said it was busy.
    sent_busy: bool,
    /// The largest `wants` a stuck node's beacon said: the claims must
    /// reach it, though this node may hold nothing of it.
    asked: u64,
    /// The largest stamp of this node's own messages.
    own_max: u64,
    scratch: Vec<u8>,
    counters: Counters,
}

impl std::fmt::Debug for TotalOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TotalOrder")
            .field("node", &self.node)
            .field("senders", &self.senders)
            .field("held", &self.held.len())
            .finish_non_exhaustive()
    }
}

impl TotalOrder {
    /// The mode of `group` at `node`, stamping from `wall`, a beacon at most
    /// every `beacon_ns`.
    pub fn new(
        group: GroupId,
        node: NodeId,
        first_seq: Seq,
        wall: Wall,
        beacon_ns: u64,
    ) -> TotalOrder {
        TotalOrder {
            node,
            group,
            clock: Hlc::new(wall),
            stream: SendStream::new(first_seq),
            beacon_ns,
            senders: Least::default(),
            departing: BTreeMap::new(),
            early: BTreeMap::new(),
            early_bytes: 0,
            joined_epoch: None,
            view_adds: false,
            awaiting: Vec::new(),
            held: BTreeMap::new(),
            held_bytes: 0,
            own_held_bytes: 0,
            partial: HashMap::new(),
            advertised: 0,
            demand: 0,
            beacon_owed: false,
            last_beacon_ns: None,
            oldest: None,
            silence: Silence::default(),
            wanted: 0,
            installed: 0,
            announced: 0,
            firsts: BTreeMap::new(),
            events: std::collections::VecDeque::new(),
            cuts: BTreeMap::new(),
            commit: false,
            reports: BTreeMap::new(),
            counted: Least::default(),
            reported: 0,
            commit_tree: CommitTree::new(commit_tree::DEFAULT_FROM_NODES),
            claims_on: true,
            claims: Claims::default(),
            claim_checked_ns: None,
            claimed: 0,
            sent_busy: false,
            asked: 0,
            own_max: 0,
            scratch: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// The mode delivers only what every member has (`commit = true`).
    pub fn committing(mut self, commit: bool) -> TotalOrder {
        self.commit = commit;
        self
    }

    /// Views of at least `nodes` members use the commit tree
    /// ([`commit_tree`]; `usize::MAX`: never); the default is
    /// [`commit_tree::DEFAULT_FROM_NODES`].
    pub fn commit_tree_from(mut self, nodes: usize) -> TotalOrder {
        self.commit_tree = CommitTree::new(nodes);
        self
    }

    /// Whether the stream's algorithm acknowledges every frame (MAK, ACK,
    /// iterative; not NAK; the default is yes): then the commit tree
    /// carries the members' claims ([`Claims`]), for every total-order
    /// group; otherwise only a committing group uses it, for its reports.
    pub fn acknowledged(mut self, yes: bool) -> TotalOrder {
        self.claims_on = yes;
        self
    }

    /// Below or at this, nothing can arrive any more: the least of the
    /// largest stamps come from each node, or where the tree carries
    /// claims, the view's least claim bounded by its busy members' stamps
    /// if larger (but for departing nodes, whose last messages come by
    /// their flush: their stamps still bound it). None while neither is
    /// known.
    fn barrier(&mut self) -> Option<u64> {
        let floor = self.clock.floor();
        let direct = self.senders.least();
        let Some(point) = self.tree_point() else {
            return Some(floor.min(direct?));
        };
        let mut bound = direct.map_or(point, |d| d.max(point));
        for &d in self.departing.keys() {
            bound = bound.min(self.senders.get(d).flatten()?);
        }
        Some(floor.min(bound))
    }

    /// Delivers what the barrier passed, in (stamp, node) order, up to
    /// the place of the first event not yet placed.
    fn release(&mut self, out: &mut Out<'_>) {
        if self.held.is_empty() {
            return; // (no clock to read)
        }
        let passed = if self.commit {
            self.stable()
        } else {
            self.barrier()
        };
        let Some(passed) = passed else {
            return;
        };
        let mut bound = passed;
        if let Some(e) = self.events.front() {
            // Its place is at or above this; it sorts after every message
            // stamped there.
            bound = bound.min(e.at);
        }
        while let Some((&key, _)) = self.held.first_key_value() {
            if key.0 > bound || self.commit && self.fate_place(key).is_some_and(|p| p > passed) {
                break;
            }
            let h = self.held.remove(&key).expect("the first entry");
            let (_, node, epoch) = key;
            match h {
                Held::Message { msg, from } => {
                    self.held_bytes -= msg.bytes.len();
                    if node == self.node {
                        self.own_held_bytes -= msg.bytes.len();
                    }
                    self.counters.delivered += 1;
                    let hdr = data_record(self.group, node, true, true);
                    if !msg.scatter {
                        out(hdr, &msg.bytes, To::AllBut(from));
                        continue;
                    }
                    // Its part to each member (a node checked them before
                    // sending: a bad one here came from a broken peer).
                    match scatter::decode(&msg.bytes) {
                        Ok(parts) => {
                            let here = parts.into_iter().filter(|p| p.0 == self.node);
                            for (_, member, part) in here {
                                out(hdr, part, To::Only(ClientId(member)));
                            }
                        }
                        Err(_) => self.counters.malformed += 1,
                    }
                }
                Held::Event(event) => {
                    self.counters.events += 1;
                    out(event_record(self.group), &event, To::Event(epoch));
                }
                Held::Notice(notice) => {
                    out(event_record(self.group), &notice, To::AllBut(None));
                }
            }
        }
    }

    /// The highest stamp this node waits for the others to pass: the
    /// highest held, and in a group that commits the place the first held
    /// message's fate waits on ([`Self::fate_place`]).
    fn wait_target(&self) -> u64 {
        let held = self.held_max();
        match self.held.first_key_value() {
            Some((&k, _)) if self.commit => held.max(self.fate_place(k).unwrap_or(0)),
            _ => held,
        }
    }

    fn hold(&mut self, ts: u64, node: NodeId, msg: Message, from: Option<ClientId>) {
        self.held_bytes += msg.bytes.len();
        if node == self.node {
            self.own_held_bytes += msg.bytes.len();
        }
        self.held.insert((ts, node, 0), Held::Message { msg, from });
        self.counters.held_max = self.counters.held_max.max(self.held.len() as u64);
    }

    /// A stamp from `node`, with its message (None: a beacon's): held, or
    /// kept for when the view adds the node.
    fn arrived(&mut self, node: NodeId, ts: u64, epoch: u64, msg: Option<Message>) {
        let reborn = self.departing.get(&node).is_some_and(|&e| epoch >= e);
        if !self.senders.contains(node) || reborn {
            let kept = self.early.entry(node).or_default();
            match msg {
                // Only the latest beacon matters.
                None if matches!(kept.last(), Some((_, _, None))) => {
                    *kept.last_mut().expect("there") = (ts, epoch, None);
                }
                Some(m) if self.early_bytes + m.bytes.len() > MAX_EARLY_BYTES => {
                    self.counters.stale += 1;
                }
                msg => {
                    self.early_bytes += msg.as_ref().map_or(0, |m| m.bytes.len());
                    kept.push((ts, epoch, msg));
                }
            }
            return;
        }
        if self.stamp_seen(node, ts, epoch, msg.is_some()) {
            if let Some(m) = msg {
                if self.cuts.get(&node).is_some_and(|&cut| ts > cut) {
                    self.counters.cut += 1;
                } else {
                    self.hold(ts, node, m, None);
                }
            }
        }
    }

    /// A stamp from `node`, in the barrier (a message's when `data`):
    /// false when it must be dropped (a stamp that did not grow).
    fn stamp_seen(&mut self, node: NodeId, ts: u64, epoch: u64, data: bool) -> bool {
        let Some(largest) = self.senders.get(node) else {
            return false;
        };
        if largest.is_some_and(|m| ts <= m) {
            self.counters.malformed += 1;
            return false;
        }
        self.senders.set(node, Some(ts));
        self.clock.witness(ts);
        self.note_first(node, epoch, ts);
        if data {
            self.demand = self.demand.max(ts);
        }
        if self.joined_epoch.is_some_and(|j| epoch >= j) {
            self.stop_awaiting(|&n| n != node);
        }
        true
    }

    /// Keeps awaiting the nodes `keep` says. When the wait ends, a beacon
    /// is owed: stamped above every member's stamp of the joining view,
    /// so above every message a member sent before it counted this node
    /// (those are not in this node's part of the streams, so no demand
    /// here would ever say the members hold them waiting for it).
    fn stop_awaiting(&mut self, keep: impl FnMut(&NodeId) -> bool) {
        let waited = !self.awaiting.is_empty();
        self.awaiting.retain(keep);
        if waited && self.awaiting.is_empty() {
            self.beacon_owed = true;
        }
    }

    /// Sends a beacon now. False when the window is full.
    fn beacon(&mut self, cx: &mut ModeCx<'_>, now_ns: u64) -> Result<bool, EngineError> {
        let ts = self.clock.stamp();
        let wants = if self.stuck(now_ns) {
            self.wait_target()
        } else {
            0
        };
        let report = self.report();
        // A commit tree's root says the view's stable point in each beacon.
        let stable = self
            .commit_tree
            .is_root()
            .then(|| self.commit_tree.stable())
            .flatten();
        let view = self.commit_tree.epoch();
        let busy: Vec<NodeId> = if self.claims_mode() {
            self.commit_tree.stable_busy().to_vec()
        } else {
            Vec::new()
        };
        // Most members busy (or too many for a frame): the point 0, and
        // the members stamp for each other meanwhile, as without the tree
        // (busy members do anyway, and the claims would save little).
        let crowded = busy.len() > MAX_BUSY || 2 * busy.len() > cx.remote.len() + 1;
        let (stable, busy) = if crowded && self.claims_mode() {
            (stable.map(|_| 0), Vec::new())
        } else {
            (stable, busy)
        };
        encode_beacon(
            ts,
            self.ready(),
            report,
            wants,
            stable.map(|s| (view, s, &busy[..])),
            &mut self.scratch,
        );
        // A beacon that places nothing (this node's first stamp of its view
        // went out before, and no event waits for its place) carries no
        // message, so its late arrival orders nothing: the claim need not
        // wait for its acknowledgment, or a busy node's beacons would keep
        // it busy.
        let bare = self.events.is_empty() && self.first_since(self.node, self.ready()).is_some();
        let sent = match self.stream.publish(cx, &self.scratch)? {
            Published::Sent => true,
            Published::WouldBlock => return Ok(false),
            // Cannot happen to a stream open to the view (a beacon is
            // small): counted, and tried again at the next interval.
            Published::Dropped(_) => false,
        };
        self.beacon_owed = false;
        self.last_beacon_ns = Some(now_ns);
        if sent {
            if bare {
                self.claims.published_bare();
            } else {
                self.claims.published(ts);
            }
            self.reported = self.reported.max(report);
            self.announced = self.ready();
            self.note_first(self.node, self.announced, ts);
            self.advertised = ts;
            self.wanted = self.wanted.max(wants);
            self.counters.beacons_sent += 1;
            if let Some(s) = stable {
                self.note_sent(s, busy, now_ns);
            }
        } else {
            self.counters.beacon_errors += 1;
        }
        Ok(sent)
    }

    /// True when others wait on this node's next stamp and the beacon
    /// interval since the last has passed (or the view owes one).
    fn beacon_due(&mut self, now_ns: u64) -> bool {
        let waited = self
            .last_beacon_ns
            .is_none_or(|t| now_ns >= t + self.beacon_ns);
        // (A commit tree's root beacons while stuck: its stamps are the
        // evidence of life the members watch, `Self::silent`.)
        let root_stuck = self.commit_tree.is_root() && self.stuck(now_ns);
        // (Where the tree carries claims, the others' messages wait for
        // this node's claim up the tree, not for its beacon.)
        self.beacon_owed
            || self.ready() > self.announced
            || waited
                && (self.demand > self.advertised && self.stamps_wanted()
                    || self.wants_more(now_ns)
                    || self.report_due()
                    || root_stuck)
    }

    /// The highest stamp held here (0: none).
    fn held_max(&self) -> u64 {
        self.held.last_key_value().map_or(0, |((ts, _, _), _)| *ts)
    }

    /// The oldest held message has waited two beacon intervals: the node
    /// holding the barrier back may not know it is waited for (it never
    /// saw those messages: sent before its part of the streams began, or by
    /// a node that left), so this node's beacon says what it waits for.
    fn stuck(&self, now_ns: u64) -> bool {
        self.oldest
            .is_some_and(|(_, since)| now_ns >= since + 2 * self.beacon_ns)
    }

    /// Stuck, with more to wait for ([`Self::wait_target`]) than this
    /// node's beacons have asked for.
    fn wants_more(&self, now_ns: u64) -> bool {
        self.wait_target() > self.wanted && self.stuck(now_ns)
    }

    /// A local client's message (a scattering's parts when `scatter`),
    /// stamped, into the stream, and held here until the barrier passes it
    /// (WouldBlock while this node joins, or holds too much of its own,
    /// and a scattering while an event of a view installed here waits for
    /// its place: [`Self::scatter_waits`]).
    fn publish_stamped(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        msg: &[u8],
        scatter: bool,
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        let full = self.own_held_bytes > 0 && self.own_held_bytes + msg.len() > MAX_OWN_HELD_BYTES;
        if !self.awaiting.is_empty()
            || self.join_event_unplaced()
            || full
            || (scatter && self.scatter_waits())
        {
            self.counters.blocked += 1;
            return Ok(Published::WouldBlock);
        }
        let ts = self.clock.stamp();
        let ready = self.ready();
        if !cx.remote.is_empty() {
            let tag = if scatter { TAG_SCATTER } else { TAG_DATA };
            let report = self.report();
            encode(tag, ts, ready, report, msg, &mut self.scratch);
            match self.stream.publish(cx, &self.scratch)? {
                Published::Sent => {
                    self.claims.published(ts);
                    self.advertised = ts;
                    self.reported = self.reported.max(report);
                }
                refused => return Ok(refused),
            }
        }
        self.announced = ready;
        self.own_max = ts;
        self.note_first(self.node, ready, ts);
        self.counters.published += 1;
        let msg = Message {
            bytes: msg.to_vec(),
            scatter,
        };
        self.hold(ts, self.node, msg, Some(from));
        self.release(out);
        Ok(Published::Sent)
    }

    /// A scattering is stamped only once this node's stamps are ready for
    /// every view it installed. Its parts are for members of the installed
    /// view, one of which may have joined in it; stamped earlier, it would
    /// sort before that node's join event, where the joining node lets its
    /// part through (its client takes nothing else from before) without
    /// knowing what the others cut there: if this node then fails with its
    /// stamps never ready for an earlier view that added a node, the
    /// survivors drop what it stamped above that event's place
    /// ([`Self::gone_unready`]) and the joining node delivers its part.
    /// Found by the total-order sweep (seed 83551); the wait lasts until
    /// the pending events are placed, a view change at most.
    fn scatter_waits(&self) -> bool {
        self.ready() < self.installed
    }

    /// Notes the oldest held message at `now_ns`.
    fn watch_oldest(&mut self, now_ns: u64) {
        let first = self.held.first_key_value().map(|(k, _)| *k);
        self.oldest = match (first, self.oldest) {
            (Some(k), Some((o, since))) if k == o => Some((o, since)),
            (Some(k), _) => Some((k, now_ns)),
            (None, _) => None,
        };
    }
}

impl GroupMode for TotalOrder {
    fn name(&self) -> &'static str {
        "total"
    }

    /// Stamped, into the stream, and held here until the barrier passes it
    /// (WouldBlock while this node joins, or holds too much of its own).
    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        msg: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        self.publish_stamped(cx, from, msg, false, out)
    }

    /// One stamp for all parts: stamped, sent and held like a message;
    /// each part delivered to its member when the barrier passes it.
    fn publish_scatter(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        parts: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        self.counters.scatterings += 1;
        self.publish_stamped(cx, from, parts, true, out)
    }

    fn loops_back(&self) -> bool {
        false
    }

    /// (Commit tree) a child's report for its subtree; at the root it may
    /// raise the view's stable point, and what it passes is delivered.
    fn on_link(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: NodeId,
        body: &[u8],
        out: &mut Out<'_>,
    ) -> Result<(), String> {
        let _ = cx;
        if !self.tree_used() {
            return Err(format!(
                "a total-order group over NAK that does not commit takes no mode messages (from node {from})"
            ));
        }
        let (epoch, report, busy) = commit_tree::decode_up(body)?;
        self.commit_tree.up_received(from, epoch, report, busy)?;
        self.release(out);
        Ok(())
    }

    /// New nodes enter the barrier; departed ones stay in it until no
    /// flush runs here. Every view is answered with a stamp of it: a node
    /// that joined in it waits for one from every other node. A node's
    /// first view starts that wait.
    fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        self.stream.members_changed(cx, added)?;
        self.installed = self.installed.max(cx.view_epoch);
        if self.tree_used() {
            self.commit_tree
                .view(cx.view_epoch, cx.root, self.node, cx.remote);
        }
        self.view_adds = !added.is_empty() || self.joined_epoch.is_none();
        if self.joined_epoch.is_none() {
            self.joined_epoch = Some(cx.view_epoch);
            self.awaiting = cx.remote.to_vec();
        }
        self.beacon_owed = !cx.remote.is_empty();
        let remote = cx.remote;
        for n in self.senders.nodes() {
            if !remote.contains(&n) && !self.departing.contains_key(&n) {
                self.departing.insert(n, cx.view_epoch);
                self.counted.remove(n);
            }
        }
        for &n in remote {
            if self.departing.remove(&n).is_some() {
                // Back before its flush ended: a new member from here on.
                self.senders.remove(n);
                self.left_barrier(n);
            }
            if self.senders.add(n) {
                self.counted.set(n, self.reports.get(&n).copied());
                // A new member: nothing of it is cut, but for its old
                // incarnation's messages (all it holds of the node now)
                // above the place of an event that says it left.
                self.cuts.remove(&n);
                if self.events.iter().any(|e| e.gone.contains(&n)) {
                    let old: Vec<Key> = self.held.keys().filter(|k| k.1 == n).copied().collect();
                    for e in self.events.iter_mut().filter(|e| e.gone.contains(&n)) {
                        e.gone.retain(|&d| d != n);
                        e.gone_keys.extend(&old);
                    }
                }
                for (ts, epoch, msg) in self.early.remove(&n).unwrap_or_default() {
                    self.early_bytes -= msg.as_ref().map_or(0, |m| m.bytes.len());
                    self.arrived(n, ts, epoch, msg);
                }
            }
        }
        self.stop_awaiting(|n| remote.contains(n));
        Ok(())
    }

    fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError> {
        self.stream.resume_member(cx, to)
    }

    /// A fragment of a remote node's stream: a beacon raises its stamp; a
    /// message is held (whole) until the barrier passes it; then whatever
    /// the barrier now passes is delivered.
    fn deliver(&mut self, f: &Fragment<'_>, out: &mut Out<'_>) {
        let node = f.stream;
        let complete = if f.first {
            self.partial.remove(&node);
            match decode(f.data) {
                None => {
                    self.counters.malformed += 1;
                    None
                }
                Some(Opening::Beacon {
                    ts,
                    epoch,
                    report,
                    wants,
                    stable,
                    busy,
                }) => {
                    self.note_report(node, report);
                    if let Some((view, point)) = stable.filter(|_| self.tree_used()) {
                        let busy = self
                            .claims_mode()
                            .then(|| busy_ids(busy).collect::<Vec<NodeId>>());
                        self.commit_tree.stable_heard(node, view, point, busy);
                    }
                    self.counters.beacons_received += 1;
                    // A node holds messages up to `wants` waiting: for this
                    // node's stamp too, perhaps.
                    self.demand = self.demand.max(wants);
                    self.asked = self.asked.max(wants);
                    self.clock.witness(wants);
                    self.arrived(node, ts, epoch, None);
                    None
                }
                Some(Opening::Data {
                    ts,
                    epoch,
                    report,
                    msg,
                    scatter,
                }) => {
                    // (A report counts at once: it says what the node has,
                    // whatever comes after it in this message.)
                    self.note_report(node, report);
                    let msg = Message {
                        bytes: msg.to_vec(),
                        scatter,
                    };
                    if f.last {
                        Some((ts, epoch, msg))
                    } else {
                        self.partial.insert(node, Partial { ts, epoch, msg });
                        None
                    }
                }
            }
        } else {
            match self.partial.get_mut(&node) {
                Some(p) => {
                    p.msg.bytes.extend_from_slice(f.data);
                    if f.last {
                        let p = self.partial.remove(&node).expect("there");
                        Some((p.ts, p.epoch, p.msg))
                    } else {
                        None
                    }
                }
                None => {
                    self.counters.malformed += 1;
                    None
                }
            }
        };
        // A message counts for the barrier once whole: one stamped the same
        // from a higher node must not pass it.
        if let Some((ts, epoch, msg)) = complete {
            self.arrived(node, ts, epoch, Some(msg));
        }
        self.release(out);
    }

    fn poll_at(&self) -> Option<u64> {
        if self.beacon_owed || self.ready() > self.announced {
            return Some(0);
        }
        let next_beacon = self.last_beacon_ns.map_or(0, |t| t + self.beacon_ns);
        let tree_on = self.commit_tree.on();
        let demand = (self.demand > self.advertised && self.stamps_wanted()
            || self.report_wanted() && !tree_on)
            .then_some(next_beacon);
        // (Commit tree) a report up, or the root's stable point out.
        let up = self.commit_tree.due_at(
            self.own_up_peek(),
            self.own_busy(),
            self.up_wanted(),
            self.beacon_ns,
        );
        // (Claims) while busy, or while a claim is wanted, the claim is
        // looked at again every quarter interval: acknowledgments raise it
        // unseen.
        let looked = self.own_busy().is_some() || self.claim_wanted() > self.claims.current();
        let claim = (self.tree_claims() && looked)
            .then(|| self.claim_checked_ns.map_or(0, |t| t + self.beacon_ns / 4));
        // (Commit tree) a stuck member's report again, or its root's beacon.
        let alive = self
            .oldest
            .filter(|_| self.commit_tree.on())
            .and_then(|(_, since)| {
                let stuck = since + 2 * self.beacon_ns;
                if self.commit_tree.is_root() {
                    Some(stuck.max(next_beacon))
                } else {
                    Some(stuck.max(self.commit_tree.keepalive_at(self.beacon_ns)?))
                }
            });
        // Held messages are watched until they pass or this node has said
        // what it waits for.
        let watch = (self.wait_target() > self.wanted).then(|| match self.oldest {
            None => 0,
            Some((_, since)) => (since + 2 * self.beacon_ns).max(next_beacon),
        });
        let silence = self.silence.due(self.oldest, self.beacon_ns);
        [demand, watch, silence, up, alive, claim]
            .into_iter()
            .flatten()
            .min()
    }

    fn wants_round(&self) -> bool {
        !self.departing.is_empty()
    }

    /// The nodes of the view the oldest held message has waited
    /// [`SILENT_INTERVALS`](super::silence::SILENT_INTERVALS) beacon
    /// intervals for, that sent nothing in the last half of that wait
    /// ([`Silence`]).
    fn silent(&mut self, now_ns: u64) -> Vec<NodeId> {
        let (senders, departing, reports) = (&self.senders, &self.departing, &self.reports);
        let (tree, me) = (&self.commit_tree, self.node);
        // Over a commit tree the others' reports do not come here: a node
        // watches its children's reports (each repeats its last while stuck)
        // and the root's stamps (it beacons while stuck).
        let commit = self.commit && !tree.on();
        // Where the tree carries claims, nobody beacons for another's
        // message: a stamp that does not come says nothing.
        let by_stamps = !self.claims_cover();
        let oldest = self.oldest;
        let waited_on = || {
            let Some(((ts, _, _), _)) = oldest else {
                return Vec::new();
            };
            let mut waited: Vec<(NodeId, u64)> = senders
                .iter()
                .filter(|_| by_stamps)
                .filter(|(n, _)| !departing.contains_key(n))
                .filter_map(|(n, largest)| {
                    let largest = largest?;
                    let report = reports.get(&n).copied().unwrap_or(0);
                    (largest < ts || commit && report < ts).then_some((n, largest))
                })
                .collect();
            if tree.on() && tree.stable().is_none_or(|s| s < ts) {
                waited.extend(tree.lagging(ts));
                if let Some(root) = tree.root().filter(|&r| r != me) {
                    waited.push((root, senders.get(root).flatten().unwrap_or(0)));
                }
            }
            if !by_stamps {
                // The busy members bound the point with their stamps (each
                // beacons while others wait on it).
                for &q in tree.stable_busy() {
                    if let Some(Some(largest)) = senders.get(q) {
                        if q != me && largest < ts && !departing.contains_key(&q) {
                            waited.push((q, largest));
                        }
                    }
                }
            }
            waited
        };
        let silent = self
            .silence
            .check(now_ns, self.oldest, self.beacon_ns, waited_on);
        self.counters.silent_reports += silent.len() as u64;
        silent
    }

    /// Held until its place in the order is known (`PendingEvent`), then
    /// delivered there like a message.
    fn orders_events(&self) -> bool {
        true
    }

    /// Held right after the largest stamp come from `sender`: its
    /// messages from before the jump are at or below it, those after it
    /// above (stamps grow in a stream), so every member that is told sees
    /// the notice between the two.
    fn place_skipped(&mut self, sender: NodeId, notice: &[u8], out: &mut Out<'_>) -> bool {
        let Some(largest) = self.senders.get(sender) else {
            // Not (or no longer) in the barrier: nothing of it is held.
            return false;
        };
        self.counters.skipped_notices += 1;
        let key = (
            largest.unwrap_or(0),
            EVENT_NODE,
            NOTICE_KEY | self.counters.skipped_notices,
        );
        self.held.insert(key, Held::Notice(notice.to_vec()));
        self.release(out);
        true
    }

    fn place_event(&mut self, cx: &mut ModeCx<'_>, event: &[u8]) -> bool {
        let epoch = cx.view_epoch;
        let mut e = PendingEvent {
            epoch,
            event: event.to_vec(),
            first_from: Vec::new(),
            gone: self.departing.keys().copied().collect(),
            gone_keys: Vec::new(),
            at: 0,
            adds: std::mem::take(&mut self.view_adds),
        };
        for &n in cx.remote.iter().chain([&self.node]) {
            match self.first_since(n, epoch) {
                Some(ts) => e.at = e.at.max(ts),
                None => e.first_from.push(n),
            }
        }
        self.events.push_back(e);
        self.place_events();
        true
    }

    /// Departed nodes leave the barrier once no flush runs; a beacon when
    /// one is due; then what the barrier passes is delivered.
    fn poll(
        &mut self,
        cx: &mut ModeCx<'_>,
        now_ns: u64,
        out: &mut Out<'_>,
    ) -> Result<bool, EngineError> {
        let mut work = false;
        if cx.settled && !self.departing.is_empty() {
            for d in std::mem::take(&mut self.departing).into_keys() {
                self.gone_unready(d);
                self.senders.remove(d);
                // A last message cut short: no survivor has it whole.
                if self.partial.remove(&d).is_some() {
                    self.counters.stale += 1;
                }
                self.left_barrier(d);
            }
            work = true;
        }
        let before = self.counters.delivered + self.counters.events;
        if cx.remote.is_empty() {
            // Alone: nobody waits for this node's stamp or report.
            self.beacon_owed = false;
            self.advertised = self.advertised.max(self.demand);
            self.reported = self.reported.max(self.demand.max(self.own_max));
            // Each stamp may place an event, which makes it readier.
            while self.ready() > self.announced {
                let ts = self.clock.stamp();
                self.announced = self.ready();
                self.note_first(self.node, self.announced, ts);
            }
        } else {
            let stable_due = self.tree_used() && self.send_up(cx, now_ns);
            if stable_due || self.beacon_due(now_ns) {
                work |= self.beacon(cx, now_ns)?;
            }
        }
        self.release(out);
        self.watch_oldest(now_ns);
        Ok(work || self.counters.delivered + self.counters.events != before)
    }

    fn stats_json(&self) -> serde_json::Value {
        let c = &self.counters;
        let now = self.clock.peek();
        let lag: BTreeMap<String, Option<u64>> = self
            .senders
            .iter()
            .map(|(n, m)| (n.to_string(), m.map(|m| now.saturating_sub(m) / 1_000)))
            .collect();
        // (Commit) how far each node's last report is behind this clock.
        let reports: BTreeMap<String, u64> = self
            .reports
            .iter()
            .filter(|(n, _)| self.senders.contains(**n))
            .map(|(n, r)| (n.to_string(), now.saturating_sub(*r) / 1_000))
            .collect();
        json!({
            "mode": self.name(),
            "commit": self.commit,
            "report_lag_us": if self.commit { json!(reports) } else { json!(null) },
            "commit_tree": if self.tree_used() { self.commit_tree_json(now) } else { json!(null) },
            "sender_open": self.stream.is_open(),
            "held": self.held.len(),
            "held_bytes": self.held_bytes,
            "own_held_bytes": self.own_held_bytes,
            "barrier_lag_us": lag,
            "awaiting": self.awaiting,
            "departing": self.departing.keys().collect::<Vec<_>>(),
            "published": c.published,
            "delivered": c.delivered,
            "beacons_sent": c.beacons_sent,
            "beacons_received": c.beacons_received,
            "blocked": c.blocked,
            "malformed": c.malformed,
            "stale": c.stale,
            "beacon_errors": c.beacon_errors,
            "held_max": c.held_max,
            "events": c.events,
            "events_unplaced": self.events.len(),
            "events_waiting_for": self.events.iter().map(|e| json!({"epoch": e.epoch, "nodes": e.first_from})).collect::<Vec<_>>(),
            "cut": c.cut,
            "scatterings": c.scatterings,
            "skipped_notices": c.skipped_notices,
            "silent_reports": c.silent_reports,
            "early": self.early.values().map(Vec::len).sum::<usize>(),
            "early_bytes": self.early_bytes,
        })
    }
}

#[path = "total_events.rs"]
mod events;

#[path = "total_tree.rs"]
mod tree;

#[cfg(test)]
#[path = "total_tests.rs"]
mod tests;
