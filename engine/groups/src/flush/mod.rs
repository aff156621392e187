//! Agreement among the survivors on what a departed sender sent: the
//! flush of virtual synchrony, for one sender's data stream in one group.
//!
//! Every receiver delivers a sender's stream in order, so what a member has
//! delivered from sender X is a prefix of X's stream, ending before its
//! `next` sequence number. When X leaves the view (it failed, was evicted or
//! left), the prefixes of the survivors may differ: X may have died with
//! frames that reached some members and not others. The flush makes every
//! survivor deliver the longest prefix any survivor delivered:
//!
//! 1. Each survivor closes its receive stream from X and sends every other
//!    survivor a *state*: its `next` for X's stream (or none if it had no
//!    stream from X).
//! 2. A survivor that hears a state behind its own sends that peer the
//!    frames it lacks, from the peer's `next` to its own, over the reliable
//!    links.
//! 3. A survivor delivers a flushed frame if it is exactly its `next` (a
//!    frame sent by two peers is taken once) and serves it on to any peer
//!    still behind.
//! 4. A survivor behind what every survivor ahead of it still keeps
//!    *jumps*: once all have reported, the one keeping the oldest frames
//!    sends it all it keeps, and it takes them from the first whole
//!    message on. What it passes over, the sender sent while it did not
//!    count this node a member, or before it took this node out (the window
//!    argument below): this node was taken out by a view it never installed,
//!    or the start that would have moved its stream on was lost with the
//!    sender. The daemon tells the clients how many frames it passed over.
//! 5. The flush is over when every survivor has reported and this node has
//!    caught up with every report, or a survivor leaves the view too, or the
//!    deadline passes (counted: the survivors may then differ).
//!
//! Why keeping the last `window_frames` delivered frames ([`Retained`])
//! suffices: a sender never has more than `window_frames` frames that some
//! member has not acknowledged, so any frame more than a window behind what
//! this node delivered has been acknowledged, and therefore delivered, by
//! every member. No wire field is needed to tell receivers what is stable.
//!
//! No I/O, no clock: time (ns) is an argument.
//!
//! This module owns the set of flushes at this node ([`Flushes`]: one per
//! departed sender's stream, the states held from before this node's view
//! change, the counters) and the flush messages; one stream's state machine
//! is in `stream`, the retained window in `retained`. It never touches the
//! group service's state (the daemon connects the two).

mod retained;
mod stream;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};

use mcast_wire::Seq;

use crate::{GroupId, NodeId};

/// Identifies one sender's stream in one group: the flush of that stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlushKey {
    pub group: GroupId,
    pub sender: NodeId,
    /// The sender's session epoch (its stream start's epoch).
    pub epoch: u32,
}

/// One frame of the sender's stream, as it was delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushFrame {
    pub seq: Seq,
    /// The first fragment of a message.
    pub first: bool,
    /// The last fragment of a message.
    pub last: bool,
    /// The frame holds several whole messages (docs/protocol.md §1.10).
    pub batch: bool,
    pub data: Vec<u8>,
}

/// What a flush sends to a peer (over the reliable links).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlushMsg {
    /// This node's `next` for the stream: what it has delivered ends before
    /// it. `None`: no stream from that sender here. `from`: the first frame
    /// it can send a peer behind it (it keeps a window of frames, from its
    /// own start at the earliest); a peer further behind does not wait for
    /// it.
    State {
        key: FlushKey,
        next: Option<Seq>,
        from: Option<Seq>,
    },
    /// A frame the peer lacks.
    Data { key: FlushKey, frame: FlushFrame },
}

impl FlushMsg {
    /// A state of `None`: no stream of `key` here to flush with the peer.
    pub fn nothing(key: FlushKey) -> FlushMsg {
        FlushMsg::State {
            key,
            next: None,
            from: None,
        }
    }
}

/// A flush that ended: [`Flushes::poll_ended`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub key: FlushKey,
    pub outcome: Outcome,
    /// Where this node's copy of the stream stops: the frame after the last
    /// it delivered, from the stream or the flush (`None`: it delivered
    /// nothing and knew no start). The stream must never be opened again
    /// before it, or those frames would be delivered twice.
    pub next: Option<Seq>,
    /// The survivors whose states this outcome took into account: they
    /// reported and did not leave the view before the end.
    pub with: Vec<NodeId>,
}

/// How a flush ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every survivor reported and this node holds everything any delivered.
    Agreed {
        /// Frames this node delivered from the flush.
        recovered: u64,
    },
    /// The deadline passed first; `waiting` survivors had not reported, or
    /// this node was still behind a report.
    TimedOut { waiting: usize, recovered: u64 },
}

/// What happened to a peer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateTaken {
    /// Applied to this node's flush of the stream.
    Applied,
    /// Kept until this node starts the flush of that stream (its view
    /// without the sender has not arrived yet). A state of another epoch
    /// than this node's running flush is applied to it as "nothing" and
    /// then held or answered like any other.
    Held,
    /// This node's flush of that stream had ended; the peer, behind it,
    /// was sent this node's state and the frames it lacks from the record
    /// that flush ended with (in `out`).
    Served,
    /// This node has no flush of that stream and never will: it answers
    /// with a state of `None` (in `out`), unless the state it got was
    /// `None` itself (nothing to give it, and two such nodes would answer
    /// each other for ever). A node that had a stream reports a position
    /// (see [`Retained::starting_at`]), so its states are always answered.
    Unknown,
}

pub use retained::Retained;
use stream::{Flush, Peer};

/// Counters of every flush at this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushCounters {
    pub started: u64,
    pub agreed: u64,
    pub timed_out: u64,
    /// Frames delivered from flushes (a survivor had them, this node not).
    pub frames_recovered: u64,
    /// Frames sent to survivors that lacked them.
    pub frames_served: u64,
    /// States kept because they came before this node's own view change.
    pub states_held: u64,
    /// Peers ahead of this node that no longer kept what it lacked (frames
    /// their sender sent while it did not count this node a member): this
    /// node ends behind them.
    pub beyond_reach: u64,
    /// Flushes in which this node jumped forward: no survivor kept what it
    /// lacked, so it took in what the one keeping the oldest frames held.
    pub jumps: u64,
    /// Frames such jumps passed over (sent while the sender did not count
    /// this node a member).
    pub frames_skipped: u64,
    /// Flushes that ended without survivors never heard live, after the
    /// sender came back into the view ([`Flushes::sender_back`]).
    pub ended_sender_back: u64,
    /// States of a member that flushed a stream after this node's flush of
    /// it had ended, answered with the frames it lacked from the record
    /// that flush ended with ([`Flushes::on_state`]).
    pub served_after_end: u64,
    /// Streams opened again where their flush ended, going on with the
    /// record it ended with ([`Flushes::resume`]).
    pub resumed: u64,
}

/// How long a flush whose sender came back into the view still waits for
/// survivors not heard live (their states may be on their way): 100 ms.
pub const SENDER_BACK_GRACE_NS: u64 = 100_000_000;

/// States held at most (from peers whose view change came first).
pub const MAX_HELD_STATES: usize = 4096;

/// Records of ended flushes kept at most, one window each
/// ([`Flushes::resume`]). A sender gone for good leaves its record until
/// this many more flushes have ended, its group is forgotten, or a stream
/// of it opens here.
pub const MAX_ENDED_RECORDS: usize = 32;

/// Every flush of this node, keyed by group and sender (one at a time per
/// stream: a sender's newer epoch replaces an older flush).
#[derive(Debug, Default)]
pub struct Flushes {
    active: BTreeMap<(GroupId, NodeId), Flush>,
    held: VecDeque<(NodeId, FlushKey, Option<Seq>, Option<Seq>)>,
    counters: FlushCounters,
    /// Frames taken from `Flush::early`, for the caller to deliver
    /// ([`Flushes::take_ready`]).
    ready: Vec<Ready>,
    /// The record each of the last flushes ended with (oldest first, one
    /// per group and sender): see [`Flushes::resume`].
    ended: VecDeque<(FlushKey, Retained)>,
}

/// A flushed frame taken after it came (it came ahead of a state that
/// allowed it): the caller delivers it as one returned by
/// [`Flushes::on_data`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub key: FlushKey,
    pub frame: FlushFrame,
    /// Frames it passes over (0 but for a jump).
    pub skipped: u64,
}

impl Flushes {
    pub fn new() -> Flushes {
        Flushes::default()
    }

    /// `key.sender` left the view of `key.group`: this node's receive stream
    /// from it is closed, having delivered `kept` (`None`: there was no
    /// stream). Sends this node's state to each of `survivors` (the other
    /// member nodes of both the old and the new view) and applies the
    /// states that came early.
    pub fn start(
        &mut self,
        key: FlushKey,
        kept: Option<Retained>,
        survivors: &[NodeId],
        deadline: u64,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) {
        let before = out.len();
        let mut kept = kept.unwrap_or_else(|| Retained::new(1));
        let (next, from) = (kept.next(), kept.serves_from());
        let window = kept.max_frames;
        // While it takes in what it lacks, it keeps what it said it sends.
        kept.max_frames = kept.max_frames.saturating_mul(2);
        let mut flush = Flush {
            key,
            kept,
            peers: survivors
                .iter()
                .map(|&n| {
                    let peer = Peer {
                        told: next,
                        ..Peer::default()
                    };
                    (n, peer)
                })
                .collect(),
            deadline,
            recovered: 0,
            reported: (next, from),
            gone: Vec::new(),
            early: Vec::new(),
            back_at: None,
            window,
        };
        for &n in survivors {
            out.push((n, FlushMsg::State { key, next, from }));
        }
        let mut early = Vec::new();
        self.held.retain(|&(peer, k, next, from)| {
            if k == key {
                early.push((peer, next, from));
                false
            } else {
                true
            }
        });
        for (peer, next, from) in early {
            if !flush.peers.contains_key(&peer) {
                // Held for a flush that does not count it (another
                // departure's, or this node's views do not hold it): not
                // taken in, but answered, or it would wait for this node
                // until its deadline (seed 1100). With where this node is:
                // "nothing" would end that peer's flush without sending
                // this node what it lacks, though this node opened the
                // stream and then took its frames in (seed 718).
                out.push((
                    peer,
                    FlushMsg::State {
                        key,
                        next: flush.kept.next(),
                        from: flush.kept.serves_from(),
                    },
                ));
                continue;
            }
            if flush.on_state(peer, (next, from), false, true, out) {
                self.counters.beyond_reach += 1;
            }
        }
        self.counters.started += 1;
        self.active.insert((key.group, key.sender), flush);
        self.count_served(out, before);
    }

    /// A peer's state. `has_stream`: this node still has a receive stream
    /// from `key.sender` in `key.group` (so its own view change is still on
    /// its way and the state is held for it).
    pub fn on_state(
        &mut self,
        peer: NodeId,
        key: FlushKey,
        (next, from): (Option<Seq>, Option<Seq>),
        has_stream: bool,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) -> StateTaken {
        if let Some(f) = self.active.get_mut(&(key.group, key.sender)) {
            let same = f.key.epoch == key.epoch;
            // Another epoch of the sender's stream: nothing in common, for
            // this node's flush (unless the peer reported on this epoch
            // too); the peer's flush is answered below.
            let before = out.len();
            if f.on_state(peer, (next, from), true, same, out) {
                self.counters.beyond_reach += 1;
            }
            let at = self.ready.len();
            f.take_early(out, &mut self.ready);
            self.count_ready(at);
            self.count_served(out, before);
            if same {
                return StateTaken::Applied;
            }
        }
        if !has_stream {
            if let Some(theirs) = next {
                if self.serve_ended(peer, key, theirs, out) {
                    return StateTaken::Served;
                }
            }
        }
        if !has_stream || next.is_none() {
            // A peer with nothing tells only a running flush anything.
            if next.is_some() {
                out.push((peer, FlushMsg::nothing(key)));
            }
            return StateTaken::Unknown;
        }
        if self.held.len() >= MAX_HELD_STATES {
            self.held.pop_front();
        }
        self.held.push_back((peer, key, next, from));
        self.counters.states_held += 1;
        StateTaken::Held
    }

    /// A flushed frame from a peer. `Some` when the caller must deliver it
    /// (it is the next frame of the stream here, or the first of a jump):
    /// the number of frames it passes over, 0 but for a jump. A duplicate or
    /// a frame of no active flush is ignored (`None`).
    pub fn on_data(
        &mut self,
        key: FlushKey,
        frame: &FlushFrame,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) -> Option<u64> {
        let f = self.active.get_mut(&(key.group, key.sender))?;
        if f.key != key {
            return None;
        }
        let before = out.len();
        let taken = f.on_data(frame, out);
        let at = self.ready.len();
        if taken.is_some() {
            f.take_early(out, &mut self.ready);
        }
        self.count_ready(at);
        self.count_served(out, before);
        let skipped = taken?;
        self.count_taken(skipped);
        Some(skipped)
    }

    /// The frames taken since the last call that came before they could be
    /// (see [`Ready`]), in the order taken. The caller delivers them after
    /// any call that takes a state, a frame or a departure, and after the
    /// frame [`Flushes::on_data`] returned.
    pub fn take_ready(&mut self) -> Vec<Ready> {
        std::mem::take(&mut self.ready)
    }

    fn count_ready(&mut self, from: usize) {
        for i in from..self.ready.len() {
            self.count_taken(self.ready[i].skipped);
        }
    }

    fn count_taken(&mut self, skipped: u64) {
        self.counters.frames_recovered += 1;
        if skipped > 0 {
            self.counters.jumps += 1;
            self.counters.frames_skipped += skipped;
        }
    }

    /// `node` left the view of `group` too: no flush of the group waits for
    /// it. What the others now may be sent (a jump that waited for its
    /// state) goes into `out`.
    pub fn peer_gone(&mut self, group: GroupId, node: NodeId, out: &mut Vec<(NodeId, FlushMsg)>) {
        self.drop_peer(|g| g == group, node, out);
    }

    /// `node` was declared failed: no flush waits for it (its views may
    /// never show it leave, e.g. when the group's number changed with a
    /// new registry). As [`Flushes::peer_gone`] for `out`.
    pub fn node_failed(&mut self, node: NodeId, out: &mut Vec<(NodeId, FlushMsg)>) {
        self.drop_peer(|_| true, node, out);
    }

    fn drop_peer(
        &mut self,
        in_group: impl Fn(GroupId) -> bool,
        node: NodeId,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) {
        let before = out.len();
        let at = self.ready.len();
        for ((g, _), f) in &mut self.active {
            if !in_group(*g) {
                continue;
            }
            if !f.gone.contains(&node) {
                f.gone.push(node);
            }
            if f.peers.remove(&node).is_some() {
                f.serve(out);
                f.take_early(out, &mut self.ready);
            }
        }
        self.count_ready(at);
        self.count_served(out, before);
    }

    /// Forgets every flush of `group` (this node no longer carries it).
    pub fn forget_group(&mut self, group: GroupId) {
        self.active.retain(|(g, _), _| *g != group);
        self.held.retain(|(_, k, _, _)| k.group != group);
        self.ended.retain(|(k, _)| k.group != group);
    }

    /// The record for the stream `key` opening here at `start`: the one its
    /// last flush ended with, when `start` goes on exactly where that flush
    /// ended, else an empty one from `start` (the record of that group and
    /// sender is let go either way). Keeps at most `window` frames.
    ///
    /// A record is of a stream, not of one opening of it: a member the
    /// flush did not wait for (its view still held the sender, or its
    /// detector had declared it failed while it was only paused) may flush
    /// the same stream later, when the sender leaves its view again, and
    /// need the frames this node delivered before the flush. Started afresh,
    /// the record had let them go (data-path seeds 12084 and 3543: the
    /// sender came back, died, and nobody kept what that member lacked).
    pub fn resume(&mut self, key: FlushKey, start: Seq, window: u32) -> Retained {
        let at = self
            .ended
            .iter()
            .position(|(k, _)| k.group == key.group && k.sender == key.sender);
        match at.and_then(|i| self.ended.remove(i)) {
            Some((k, mut r)) if k == key && r.next() == Some(start) => {
                self.counters.resumed += 1;
                r.limit(window as usize);
                r
            }
            _ => Retained::starting_at(window, start),
        }
    }

    /// Keeps the record of `key`'s receive stream, closed here without a
    /// flush because this node stopped carrying the group (it was taken
    /// out of the view, or its last member left), as an ended flush's
    /// record is kept: if the node carries the group again and the stream
    /// opens where it stopped, [`Flushes::resume`] goes on with it, and
    /// meanwhile a survivor behind it is served from it. The frames it
    /// delivered were delivered to its clients: a member that was owed
    /// them too must be able to get them in a flush, though this node's
    /// stream closed (data-path seed 30585: taken out of the view and back,
    /// the node had let the last frames it delivered go, the sender died,
    /// and another member never got them). Call after
    /// [`Flushes::forget_group`].
    pub fn keep_record(&mut self, key: FlushKey, kept: Retained) {
        self.keep_ended(key, kept);
    }

    /// The records of ended flushes kept ([`Flushes::resume`]): how many,
    /// and their payload bytes.
    pub fn ended_records(&self) -> (usize, usize) {
        let bytes = self.ended.iter().map(|(_, r)| r.bytes()).sum();
        (self.ended.len(), bytes)
    }

    fn keep_ended(&mut self, key: FlushKey, kept: Retained) {
        self.ended
            .retain(|(k, _)| !(k.group == key.group && k.sender == key.sender));
        if self.ended.len() >= MAX_ENDED_RECORDS {
            self.ended.pop_front();
        }
        self.ended.push_back((key, kept));
    }

    /// A member's state for a stream whose flush ended here and has not
    /// opened again: if the member is behind the record the flush ended
    /// with, it is sent this node's state and the frames it lacks (all the
    /// record keeps, when it is behind even that: the frames of a jump,
    /// which its flush takes only if no survivor can do better). Nothing is
    /// sent to a member level with or ahead of the record, so two nodes
    /// without a running flush never answer each other for ever.
    fn serve_ended(
        &mut self,
        peer: NodeId,
        key: FlushKey,
        theirs: Seq,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) -> bool {
        let Some((_, rec)) = self.ended.iter().find(|(k, _)| *k == key) else {
            return false;
        };
        let (Some(mine), Some(front)) = (rec.next(), rec.serves_from()) else {
            return false;
        };
        if !theirs.before(mine) {
            return false;
        }
        let before = out.len();
        out.push((
            peer,
            FlushMsg::State {
                key,
                next: Some(mine),
                from: Some(front),
            },
        ));
        let from = if theirs.before(front) { front } else { theirs };
        for frame in rec.frames_from(from) {
            out.push((peer, FlushMsg::Data { key, frame }));
        }
        self.counters.served_after_end += 1;
        self.count_served(out, before);
        true
    }

    /// Forgets the states held for `sender`'s stream in `group`: this node
    /// opened that stream again, so they belong to a departure it will not
    /// flush (one it never saw), not to the next one. `keep`: the epoch of
    /// a stream opened here for the first time (from a start that came
    /// before this node's view): states of that epoch were held for the
    /// departure of this very stream, which the view may show next (seed
    /// 1168), and stay.
    ///
    /// The peers that sent them wait for this node's state: each is sent a
    /// state of `None` for its stream in `out` ("no flush of it here, nor
    /// ever"), or it would wait until its deadline (seed 185).
    pub fn forget_held(
        &mut self,
        group: GroupId,
        sender: NodeId,
        keep: Option<u32>,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) {
        self.held.retain(|&(peer, key, _, _)| {
            if key.group != group || key.sender != sender || Some(key.epoch) == keep {
                return true;
            }
            let none = FlushMsg::nothing(key);
            if !out.contains(&(peer, none.clone())) {
                out.push((peer, none));
            }
            false
        });
    }

    /// True while this node flushes a stream of `sender` in `group`, of
    /// any epoch.
    pub fn running_from(&self, group: GroupId, sender: NodeId) -> bool {
        self.active.contains_key(&(group, sender))
    }

    /// True while this node's flush of exactly `key` is under way.
    pub fn running(&self, key: FlushKey) -> bool {
        self.active
            .get(&(key.group, key.sender))
            .is_some_and(|f| f.key == key)
    }

    /// True while a flush of `group` is under way.
    pub fn pending_in(&self, group: GroupId) -> bool {
        self.active.keys().any(|(g, _)| *g == group)
    }

    /// The next flush that ended, removed, with where the stream stops here.
    pub fn poll_ended(&mut self, now: u64) -> Option<Ended> {
        let (&k, outcome) = self
            .active
            .iter()
            .find_map(|(k, f)| f.outcome(now).map(|o| (k, o)))?;
        let f = self.active.remove(&k).expect("found");
        match outcome {
            Outcome::Agreed { .. } => self.counters.agreed += 1,
            Outcome::TimedOut { .. } => self.counters.timed_out += 1,
        }
        if f.back_at.is_some_and(|t| now >= t) && f.peers.values().any(|p| !p.live) {
            self.counters.ended_sender_back += 1;
        }
        let next = f.kept.next();
        let with = f
            .peers
            .iter()
            .filter(|(_, p)| p.live)
            .map(|(&n, _)| n)
            .collect();
        let mut kept = f.kept;
        kept.limit(f.window);
        self.keep_ended(f.key, kept);
        Some(Ended {
            key: f.key,
            outcome,
            next,
            with,
        })
    }

    /// The earliest deadline of the flushes under way.
    pub fn next_deadline(&self) -> Option<u64> {
        self.active
            .values()
            .map(|f| f.back_at.map_or(f.deadline, |t| t.min(f.deadline)))
            .min()
    }

    /// `sender` is in the view of `group` again (dropped and added back,
    /// alive), still with the stream whose flush runs here (`same` holds
    /// for that stream's epoch: the sender's incarnation is unchanged). The
    /// flush stops waiting, `SENDER_BACK_GRACE_NS` from `now`, for the
    /// survivors not heard live: a survivor that never saw the sender
    /// leave still receives its stream, and holds this node's state for a
    /// flush of its own that never comes (its stream was opened while its
    /// views lacked the sender, so the views that dropped the sender did
    /// not close it: seeds 4109 and 4727 waited until the deadline). What
    /// this node lacks and they have, the sender, alive, still sends it.
    pub fn sender_back(
        &mut self,
        group: GroupId,
        sender: NodeId,
        same: impl Fn(u32) -> bool,
        now: u64,
    ) {
        if let Some(f) = self.active.get_mut(&(group, sender)) {
            if same(f.key.epoch) && f.back_at.is_none() {
                f.back_at = Some(now.saturating_add(SENDER_BACK_GRACE_NS));
            }
        }
    }

    pub fn counters(&self) -> FlushCounters {
        self.counters
    }

    /// Counts the frames queued for peers in `out` since `before`.
    fn count_served(&mut self, out: &[(NodeId, FlushMsg)], before: usize) {
        let n = out[before..]
            .iter()
            .filter(|(_, m)| matches!(m, FlushMsg::Data { .. }))
            .count();
        self.counters.frames_served += n as u64;
    }
}
