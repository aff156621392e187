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
    /// This node has no flush of that stream and never will: it answers
    /// with a state of `None` (in `out`), unless the state it got was
    /// `None` itself (nothing to give it, and two such nodes would answer
    /// each other for ever). A node that had a stream reports a position
    /// (see [`Retained::starting_at`]), so its states are always answered.
    Unknown,
}

/// The last frames delivered from one sender, kept for a flush. At most
/// `max_frames` frames (one window); payload bytes in one ring, so keeping a
/// frame is one copy and no allocation once the ring has grown.
#[derive(Debug, Clone)]
pub struct Retained {
    meta: VecDeque<Meta>,
    bytes: VecDeque<u8>,
    max_frames: usize,
    next: Option<Seq>,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    seq: Seq,
    first: bool,
    last: bool,
    len: u32,
}

impl Retained {
    /// Keeps the last `max_frames` frames (at least one).
    pub fn new(max_frames: u32) -> Retained {
        Retained {
            meta: VecDeque::new(),
            bytes: VecDeque::new(),
            max_frames: (max_frames as usize).max(1),
            next: None,
        }
    }

    /// Keeps the last `max_frames` frames of a stream that starts at
    /// `start` for this node: before any frame is delivered it reports
    /// `start` as its position, so a survivor that delivered more sends it
    /// everything from there.
    pub fn starting_at(max_frames: u32, start: Seq) -> Retained {
        Retained {
            next: Some(start),
            ..Retained::new(max_frames)
        }
    }

    /// A frame delivered in order. A frame that does not follow the last one
    /// (the stream was opened again elsewhere) starts the record afresh.
    pub fn push(&mut self, seq: Seq, first: bool, last: bool, data: &[u8]) {
        if self.next.is_some_and(|n| n != seq) {
            self.meta.clear();
            self.bytes.clear();
        }
        if self.meta.len() == self.max_frames {
            let old = self.meta.pop_front().expect("full");
            self.bytes.drain(..old.len as usize);
        }
        self.bytes.extend(data);
        self.meta.push_back(Meta {
            seq,
            first,
            last,
            len: data.len() as u32,
        });
        self.next = Some(seq.next());
    }

    /// The sequence number after the last frame delivered, if any was.
    pub fn next(&self) -> Option<Seq> {
        self.next
    }

    /// The first frame this record can give a peer: the oldest kept, or
    /// `next` when none is (`None`: no position at all).
    pub fn serves_from(&self) -> Option<Seq> {
        self.meta.front().map(|m| m.seq).or(self.next)
    }

    /// Frames kept.
    pub fn frames(&self) -> usize {
        self.meta.len()
    }

    /// Payload bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// True when every frame from `from` to the last is kept.
    pub fn covers(&self, from: Seq) -> bool {
        match (self.meta.front(), self.next) {
            (Some(m), Some(next)) => !from.before(m.seq) && !from.after(next),
            (None, Some(next)) => from == next,
            _ => false,
        }
    }

    /// Copies of the frames from `from` to the last (empty unless
    /// [`Retained::covers`] `from`).
    pub fn frames_from(&self, from: Seq) -> Vec<FlushFrame> {
        if !self.covers(from) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut offset = 0usize;
        for m in &self.meta {
            let len = m.len as usize;
            if !m.seq.before(from) {
                out.push(FlushFrame {
                    seq: m.seq,
                    first: m.first,
                    last: m.last,
                    data: self.bytes.range(offset..offset + len).copied().collect(),
                });
            }
            offset += len;
        }
        out
    }
}

/// One stream's flush at this node.
#[derive(Debug)]
struct Flush {
    key: FlushKey,
    kept: Retained,
    peers: BTreeMap<NodeId, Peer>,
    deadline: u64,
    recovered: u64,
    /// The state this node reported, `next` and `from` (a jump is only
    /// awaited from that `next`: peers serve a jump from what was
    /// reported).
    reported: (Option<Seq>, Option<Seq>),
    /// Survivors that left the view or failed: a state of theirs still on
    /// its way is not taken.
    gone: Vec<NodeId>,
    /// Frames ahead of `kept.next()` that could not be taken when they came:
    /// a jump's frames that overtook the state of a survivor not yet heard
    /// (seed 3940: they were dropped, the survivor that sent them had ended
    /// its flush, and this node ended behind them). At most
    /// `kept.max_frames`; taken when they follow or the jump is allowed.
    early: Vec<FlushFrame>,
    /// The sender is in the view again with this stream (it was dropped and
    /// added back, alive): from this time on, survivors not heard live are
    /// not waited for ([`Flushes::sender_back`]).
    back_at: Option<u64>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Peer {
    /// `None` until the peer's state arrives: then its `next` and `from`.
    reported: Option<(Option<Seq>, Option<Seq>)>,
    /// A state came while this flush ran. One held from before (the peer's
    /// view change came first) is tentative: it may belong to a departure
    /// this node never saw, so the flush waits for a live one as well.
    live: bool,
    /// `reported` came from a state of this flush's epoch. A state of
    /// another epoch counts as "nothing" only until one does: it is the
    /// peer's answer about another stream of the sender and says nothing of
    /// what the peer holds of this one (seed 638: it wiped a peer's report
    /// of 11 frames, and the flush ended without them).
    own_epoch: bool,
    /// Frames before this have been sent to the peer.
    sent_to: Option<Seq>,
    /// The `next` this node last told the peer.
    told: Option<Seq>,
}

impl Flush {
    /// A peer's state, `live` unless it was held from before this flush.
    /// The first live state from a peer is answered with this node's own:
    /// the one this node sent at its start may have been held there, and
    /// the peer waits for a live one too. True when the peer is ahead of
    /// this node but can no longer send it what it lacks (beyond its reach:
    /// frames a MAK sender sent while it did not count this node a member).
    fn on_state(
        &mut self,
        peer: NodeId,
        (next, from): (Option<Seq>, Option<Seq>),
        live: bool,
        own_epoch: bool,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) -> bool {
        if !self.peers.contains_key(&peer) {
            // Only a live state takes a node in: a held one may be another
            // departure's (seed 942).
            if !live || self.gone.contains(&peer) {
                return false;
            }
            // A node that counts this one a survivor though this one's
            // views did not count it (it came back between them): it
            // waits for this node's state, and takes part from now on.
            self.peers.insert(peer, Peer::default());
        }
        let p = self.peers.get_mut(&peer).expect("inserted");
        if own_epoch {
            p.reported = Some((next, from));
            p.own_epoch = true;
        } else if !p.own_epoch {
            p.reported = Some((None, None));
        }
        let (next, from) = p.reported.expect("just set");
        let first_live = live && !p.live;
        if first_live {
            p.live = true;
            // Where this node is now, not where it began: a peer behind
            // what it took in since would end its flush at the old `next`,
            // with the frames after it still on their way (seed 98).
            let (next, from) = (self.kept.next(), self.kept.serves_from());
            p.told = next;
            out.push((
                peer,
                FlushMsg::State {
                    key: self.key,
                    next,
                    from,
                },
            ));
        }
        self.serve(out);
        let mine = self.kept.next();
        first_live
            && matches!((mine, next), (Some(m), Some(n)) if m.before(n) && !reachable(m, from))
    }

    /// Sends every reported peer that is behind the frames it lacks. A peer
    /// behind what this node still keeps is sent all it keeps instead, if
    /// no survivor can bring that peer in order and this node keeps the
    /// oldest frames of those ahead of it (see [`Flush::may_jump`]).
    fn serve(&mut self, out: &mut Vec<(NodeId, FlushMsg)>) {
        let (Some(mine), Some(front)) = (self.kept.next(), self.kept.serves_from()) else {
            return;
        };
        let jumps: Vec<NodeId> = self
            .peers
            .iter()
            .filter_map(|(&node, p)| match p.reported {
                Some((Some(theirs), _))
                    if p.sent_to.is_none()
                        && theirs.before(front)
                        && self.may_jump(theirs)
                        && self.keeps_oldest_ahead_of(theirs, front) =>
                {
                    Some(node)
                }
                _ => None,
            })
            .collect();
        for (&node, p) in &mut self.peers {
            let Some((Some(theirs), _)) = p.reported else {
                continue;
            };
            let from = if jumps.contains(&node) {
                front
            } else {
                p.sent_to.map_or(theirs, |s| s.max(theirs))
            };
            if !from.before(mine) || !self.kept.covers(from) {
                continue;
            }
            if p.told != Some(mine) {
                // The peer ends its flush at the `next` it was told: it
                // learns the new one before the frames up to it arrive.
                p.told = Some(mine);
                out.push((
                    node,
                    FlushMsg::State {
                        key: self.key,
                        next: Some(mine),
                        from: Some(front),
                    },
                ));
            }
            for frame in self.kept.frames_from(from) {
                out.push((
                    node,
                    FlushMsg::Data {
                        key: self.key,
                        frame,
                    },
                ));
            }
            p.sent_to = Some(mine);
        }
    }

    /// True when a node at `at` may jump forward: every survivor reported,
    /// and none ahead of `at` still keeps the frame at `at`. The frames it
    /// skips were then acknowledged by every member the sender counted
    /// (a sender never has more than a window unacknowledged, and each
    /// survivor keeps its last window), so the sender did not count that
    /// node when it sent them: they were never its to deliver.
    fn may_jump(&self, at: Seq) -> bool {
        self.peers.values().all(|p| match p.reported {
            None => false,
            Some(_) if !p.live => false,
            Some((Some(next), from)) if at.before(next) => !reachable(at, from),
            Some(_) => true,
        })
    }

    /// True when no survivor ahead of `at` keeps frames older than `front`:
    /// this node is one of those that serve a jump from `at`.
    fn keeps_oldest_ahead_of(&self, at: Seq, front: Seq) -> bool {
        self.peers.values().all(|p| match p.reported {
            Some((Some(next), Some(from))) if at.before(next) => !from.before(front),
            _ => true,
        })
    }

    fn on_data(&mut self, frame: &FlushFrame, out: &mut Vec<(NodeId, FlushMsg)>) -> Option<u64> {
        let mine = self.kept.next()?;
        let Some(skipped) = self.takes(mine, frame) else {
            let ahead = mine.before(frame.seq) && !self.early.iter().any(|f| f.seq == frame.seq);
            if ahead && self.early.len() < self.kept.max_frames {
                self.early.push(frame.clone());
            }
            return None;
        };
        self.kept
            .push(frame.seq, frame.first, frame.last, &frame.data);
        self.recovered += 1;
        self.serve(out);
        Some(skipped)
    }

    /// Whether this node, at `mine`, takes `frame` now: `Some` with the
    /// frames it passes over (0 but for a jump).
    fn takes(&self, mine: Seq, frame: &FlushFrame) -> Option<u64> {
        if mine == frame.seq {
            Some(0)
        } else if mine.before(frame.seq) && frame.first && self.may_jump(mine) {
            // The first whole message a jump brings: what is before it
            // was never this node's (see `may_jump`).
            Some(u64::from(frame.seq.0.wrapping_sub(mine.0)))
        } else {
            None
        }
    }

    /// Takes the early frames that can be taken now, in order, into `ready`.
    fn take_early(&mut self, out: &mut Vec<(NodeId, FlushMsg)>, ready: &mut Vec<Ready>) {
        while let Some(mine) = self.kept.next() {
            self.early.retain(|f| mine.before(f.seq) || f.seq == mine);
            let pick = self
                .early
                .iter()
                .enumerate()
                .filter_map(|(i, f)| self.takes(mine, f).map(|s| (i, s)))
                .min_by_key(|&(_, s)| s);
            let Some((i, skipped)) = pick else {
                break;
            };
            let frame = self.early.swap_remove(i);
            self.kept
                .push(frame.seq, frame.first, frame.last, &frame.data);
            self.recovered += 1;
            self.serve(out);
            ready.push(Ready {
                key: self.key,
                frame,
                skipped,
            });
        }
    }

    fn waiting(&self, now: u64) -> usize {
        let silent_ok = self.back_at.is_some_and(|t| now >= t);
        let mine = self.kept.next();
        // Still where it reported, and nobody ahead can bring it in order:
        // those ahead that keep frames send it a jump.
        let jump = mine.is_some_and(|m| self.reported.0 == Some(m) && self.may_jump(m));
        self.peers
            .values()
            .filter(|p| match p.reported {
                None => !silent_ok,
                Some(_) if !p.live => !silent_ok,
                Some((None, _)) => false,
                Some((Some(theirs), from)) => mine.is_some_and(|m| {
                    m.before(theirs) && (reachable(m, from) || (jump && from.is_some()))
                }),
            })
            .count()
    }

    fn outcome(&self, now: u64) -> Option<Outcome> {
        let waiting = self.waiting(now);
        if waiting == 0 {
            Some(Outcome::Agreed {
                recovered: self.recovered,
            })
        } else if now >= self.deadline {
            Some(Outcome::TimedOut {
                waiting,
                recovered: self.recovered,
            })
        } else {
            None
        }
    }
}

/// True when a peer that sends from `from` can bring a node at `mine`.
fn reachable(mine: Seq, from: Option<Seq>) -> bool {
    from.is_some_and(|f| !mine.before(f))
}

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
}

/// How long a flush whose sender came back into the view still waits for
/// survivors not heard live (their states may be on their way): 100 ms.
pub const SENDER_BACK_GRACE_NS: u64 = 100_000_000;

/// States held at most (from peers whose view change came first).
pub const MAX_HELD_STATES: usize = 4096;

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
        Some(Ended {
            key: f.key,
            outcome,
            next: f.kept.next(),
            with: f
                .peers
                .iter()
                .filter(|(_, p)| p.live)
                .map(|(&n, _)| n)
                .collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: FlushKey = FlushKey {
        group: 7,
        sender: 9,
        epoch: 3,
    };

    /// Frames `from..to` of the sender's stream, each one byte: its seq's low byte.
    /// The next flush that ended, as key and outcome.
    fn done(f: &mut Flushes, now: u64) -> Option<(FlushKey, Outcome)> {
        f.poll_ended(now).map(|e| (e.key, e.outcome))
    }

    /// A frame that is a whole message.
    fn whole(seq: Seq, data: Vec<u8>) -> FlushFrame {
        FlushFrame {
            seq,
            first: true,
            last: true,
            data,
        }
    }

    fn kept(from: u32, to: u32, window: u32) -> Retained {
        let mut r = Retained::new(window);
        for s in from..to {
            r.push(Seq(s), s % 2 == 0, s % 2 == 1, &[s as u8, 0xee]);
        }
        r
    }

    /// Survivors 1, 2, 3 with what each delivered; runs the flush to the end
    /// and returns what each delivered from it, in order.
    struct Net {
        nodes: BTreeMap<NodeId, Flushes>,
        queue: VecDeque<(NodeId, NodeId, FlushMsg)>,
        delivered: BTreeMap<NodeId, Vec<FlushFrame>>,
        /// Nodes whose messages are lost (crashed mid-flush).
        dead: Vec<NodeId>,
    }

    impl Net {
        fn new(prefixes: &[(NodeId, Option<Retained>)]) -> Net {
            let all: Vec<NodeId> = prefixes.iter().map(|p| p.0).collect();
            let mut net = Net {
                nodes: BTreeMap::new(),
                queue: VecDeque::new(),
                delivered: BTreeMap::new(),
                dead: Vec::new(),
            };
            for (n, _) in prefixes {
                net.nodes.insert(*n, Flushes::new());
                net.delivered.insert(*n, Vec::new());
            }
            for (n, k) in prefixes.iter().cloned() {
                let others: Vec<NodeId> = all.iter().copied().filter(|&o| o != n).collect();
                let mut out = Vec::new();
                net.nodes
                    .get_mut(&n)
                    .unwrap()
                    .start(KEY, k, &others, 1_000, &mut out);
                net.send(n, out);
            }
            net
        }

        fn send(&mut self, from: NodeId, out: Vec<(NodeId, FlushMsg)>) {
            if self.dead.contains(&from) {
                return;
            }
            for (to, m) in out {
                self.queue.push_back((from, to, m));
            }
        }

        fn run(&mut self) {
            self.run_dropping(|_, _| false);
        }

        /// Runs until nothing is in flight; messages for which `lost` holds
        /// are dropped. Every frame delivered is recorded.
        fn run_dropping(&mut self, lost: impl Fn(NodeId, NodeId) -> bool) {
            let mut steps = 0;
            while let Some((from, to, m)) = self.queue.pop_front() {
                steps += 1;
                assert!(steps < 10_000, "the flush never quiesces");
                if self.dead.contains(&to) || lost(from, to) {
                    continue;
                }
                let mut out = Vec::new();
                let f = self.nodes.get_mut(&to).unwrap();
                match m {
                    FlushMsg::State {
                        key,
                        next,
                        from: f0,
                    } => {
                        f.on_state(from, key, (next, f0), false, &mut out);
                    }
                    FlushMsg::Data { key, frame } => {
                        if f.on_data(key, &frame, &mut out).is_some() {
                            self.delivered.get_mut(&to).unwrap().push(frame);
                        }
                    }
                }
                // As the daemon: what was taken of the frames that came early.
                let ready = f.take_ready().into_iter().map(|r| r.frame);
                self.delivered.get_mut(&to).unwrap().extend(ready);
                self.send(to, out);
            }
        }

        /// The sequence numbers `node` delivered from the flush.
        fn seqs_of(&self, node: NodeId) -> Vec<Seq> {
            self.delivered[&node].iter().map(|f| f.seq).collect()
        }
    }

    fn seqs(from: u32, to: u32) -> Vec<Seq> {
        (from..to).map(Seq).collect()
    }

    #[test]
    fn retained_keeps_the_last_window_in_order() {
        let r = kept(0, 10, 4);
        assert_eq!(r.frames(), 4);
        assert_eq!(r.bytes(), 8);
        assert_eq!(r.next(), Some(Seq(10)));
        assert!(r.covers(Seq(6)) && r.covers(Seq(10)));
        assert!(!r.covers(Seq(5)), "frame 5 fell out of the window");
        assert!(!r.covers(Seq(11)));
        let f = r.frames_from(Seq(8));
        assert_eq!(f.len(), 2);
        assert_eq!(
            f[0],
            FlushFrame {
                seq: Seq(8),
                first: true,
                last: false,
                data: vec![8, 0xee]
            }
        );
        assert_eq!(f[1].data, vec![9, 0xee]);
        assert!(r.frames_from(Seq(2)).is_empty(), "not covered: nothing");
        // A frame that does not follow starts afresh.
        let mut r = r;
        r.push(Seq(50), true, true, b"x");
        assert_eq!((r.frames(), r.bytes(), r.next()), (1, 1, Some(Seq(51))));
        assert!(!r.covers(Seq(9)));
    }

    #[test]
    fn a_stream_that_delivered_nothing_reports_its_start_and_is_served_from_it() {
        let r = Retained::starting_at(8, Seq(20));
        assert_eq!(r.next(), Some(Seq(20)));
        assert!(r.covers(Seq(20)) && !r.covers(Seq(19)));
        let mut net = Net::new(&[(1, Some(r)), (2, Some(kept(18, 23, 64)))]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(20, 23));
        let mut r = Retained::starting_at(8, Seq(20));
        r.push(Seq(20), true, true, b"a");
        assert_eq!((r.frames(), r.next()), (1, Some(Seq(21))));
    }

    #[test]
    fn retained_crosses_the_sequence_wrap() {
        let mut r = Retained::new(8);
        for i in 0..6u32 {
            r.push(Seq(u32::MAX - 2).add(i), true, true, &[i as u8]);
        }
        assert!(r.covers(Seq(u32::MAX)));
        let f = r.frames_from(Seq(u32::MAX));
        assert_eq!(
            f.iter().map(|f| f.data[0]).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
        assert_eq!(r.next(), Some(Seq(3)));
    }

    #[test]
    fn every_survivor_ends_with_the_longest_prefix() {
        let mut net = Net::new(&[
            (1, Some(kept(0, 10, 64))),
            (2, Some(kept(0, 14, 64))),
            (3, Some(kept(0, 7, 64))),
        ]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(10, 14));
        assert_eq!(net.seqs_of(2), Vec::<Seq>::new());
        assert_eq!(net.seqs_of(3), seqs(7, 14), "once each, in order");
        for (n, f) in &mut net.nodes {
            let done = done(f, 0);
            let recovered = net.delivered[n].len() as u64;
            assert_eq!(done, Some((KEY, Outcome::Agreed { recovered })), "node {n}");
            assert!(!f.pending_in(KEY.group));
        }
        let served: u64 = net.nodes.values().map(|f| f.counters().frames_served).sum();
        let recovered: u64 = net
            .nodes
            .values()
            .map(|f| f.counters().frames_recovered)
            .sum();
        assert_eq!(recovered, 4 + 7);
        assert!(
            served >= recovered,
            "{served} served for {recovered} recovered"
        );
    }

    #[test]
    fn the_frames_keep_their_bytes_and_fragment_flags() {
        let mut net = Net::new(&[(1, Some(kept(0, 3, 64))), (2, Some(kept(0, 6, 64)))]);
        net.run();
        let want = kept(0, 6, 64).frames_from(Seq(3));
        assert_eq!(net.delivered[&1], want);
    }

    #[test]
    fn a_survivor_without_the_stream_reports_none_and_is_sent_nothing() {
        let mut net = Net::new(&[
            (1, None),
            (2, Some(kept(0, 5, 64))),
            (3, Some(kept(0, 5, 64))),
        ]);
        net.run();
        assert!(net.delivered.values().all(Vec::is_empty));
        for f in net.nodes.values_mut() {
            assert_eq!(done(f, 0), Some((KEY, Outcome::Agreed { recovered: 0 })));
            assert_eq!(f.counters().frames_served, 0);
        }
    }

    #[test]
    fn a_state_before_this_nodes_view_change_is_held_and_applied_at_start() {
        let mut f = Flushes::new();
        let mut out = Vec::new();
        // Node 2 is ahead and reports first; we still receive from the sender.
        let taken = f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), true, &mut out);
        assert_eq!(taken, StateTaken::Held);
        assert!(out.is_empty());
        // No stream and no flush: answered with None.
        let other = FlushKey { sender: 4, ..KEY };
        assert_eq!(
            f.on_state(2, other, (Some(Seq(1)), Some(Seq(0))), false, &mut out),
            StateTaken::Unknown
        );
        let none = FlushMsg::State {
            key: other,
            next: None,
            from: None,
        };
        assert_eq!(out, vec![(2, none.clone())]);
        out.clear();
        assert_eq!(
            f.on_state(2, other, (None, None), false, &mut out),
            StateTaken::Unknown
        );
        assert!(out.is_empty(), "a None is never answered");
        f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
        assert_eq!(
            out,
            vec![(
                2,
                FlushMsg::State {
                    key: KEY,
                    next: Some(Seq(5)),
                    from: Some(Seq(0)),
                }
            )]
        );
        assert_eq!(
            done(&mut f, 0),
            None,
            "behind node 2's report: waits for its frames"
        );
        // The held state may be another departure's: node 2's live one is
        // awaited too (node 2 sends it on hearing ours), and answered.
        let mut out = Vec::new();
        f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
        assert_eq!(out.len(), 1, "our state again: {out:?}");
        out.clear();
        f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
        assert!(out.is_empty(), "answered once: {out:?}");
        for s in 5..7 {
            let frame = whole(Seq(s), vec![s as u8]);
            assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0));
            assert!(
                f.on_data(KEY, &frame, &mut out).is_none(),
                "a duplicate is taken once"
            );
        }
        assert_eq!(
            done(&mut f, 0),
            None,
            "still one frame behind (node 2 delivered up to 7)"
        );
        let eight = whole(Seq(8), vec![]);
        assert!(
            f.on_data(KEY, &eight, &mut out).is_none(),
            "a frame after a gap is not delivered"
        );
        assert!(f.take_ready().is_empty(), "nor taken");
        let frame = whole(Seq(7), vec![]);
        assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0));
        let ready = f.take_ready();
        assert_eq!(
            ready,
            vec![Ready {
                key: KEY,
                frame: eight,
                skipped: 0
            }],
            "the frame after the gap, once the gap is filled"
        );
        assert_eq!(
            done(&mut f, 0),
            Some((KEY, Outcome::Agreed { recovered: 4 }))
        );
        assert_eq!(f.counters().states_held, 1);
        // A held state is forgotten when the stream is opened again.
        let mut f = Flushes::new();
        f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), true, &mut out);
        let mut told = Vec::new();
        f.forget_held(KEY.group, KEY.sender, None, &mut told);
        assert_eq!(
            told,
            vec![(2, FlushMsg::nothing(KEY))],
            "node 2 stops waiting for this node"
        );
        out.clear();
        f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
        assert_eq!(
            out.len(),
            1,
            "only our own state: nothing applied, nothing served"
        );
        assert_eq!(done(&mut f, 0), None, "node 2 must report again");

        // A stream opened for the first time keeps the states held for its
        // own epoch (seed 1168: they came before this node's first view,
        // which opened the stream and then showed the sender gone).
        let mut f = Flushes::new();
        f.on_state(2, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
        let mut told = Vec::new();
        f.forget_held(KEY.group, KEY.sender, Some(KEY.epoch), &mut told);
        assert!(told.is_empty(), "{told:?}");
        out.clear();
        f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
        assert!(
            out.iter()
                .any(|(n, m)| *n == 2 && matches!(m, FlushMsg::Data { .. })),
            "the held state was applied: node 2 is served: {out:?}"
        );
    }

    #[test]
    fn another_epoch_of_the_sender_has_nothing_in_common() {
        let mut f = Flushes::new();
        let mut out = Vec::new();
        f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
        out.clear();
        let newer = FlushKey {
            epoch: KEY.epoch + 1,
            ..KEY
        };
        // Node 2 counts as having nothing of this epoch; this node has no
        // flush of node 2's epoch, so it answers that with None (seed 503:
        // node 2 waited for it until the deadline).
        assert_eq!(
            f.on_state(2, newer, (Some(Seq(1)), Some(Seq(0))), false, &mut out),
            StateTaken::Unknown
        );
        assert!(
            out.contains(&(
                2,
                FlushMsg::State {
                    key: newer,
                    next: None,
                    from: None
                }
            )),
            "{out:?}"
        );
        let mut held = Vec::new();
        assert_eq!(
            f.on_state(3, newer, (Some(Seq(1)), Some(Seq(0))), true, &mut held),
            StateTaken::Held,
            "kept for this node's own flush of that epoch, which will come"
        );
        assert!(
            out.iter().all(|(_, m)| matches!(m, FlushMsg::State { .. })),
            "no frames sent to a peer of another epoch (only our state, so it stops waiting for us): {out:?}"
        );
        assert_eq!(
            done(&mut f, 0),
            Some((KEY, Outcome::Agreed { recovered: 0 }))
        );
        let frame = whole(Seq(5), vec![]);
        assert_eq!(f.on_data(newer, &frame, &mut out), None);
    }

    #[test]
    fn another_epochs_state_does_not_wipe_what_a_peer_reported_of_this_one() {
        // Seed 638: node 2 reported frames 0..11 of this epoch, then its
        // answer about the sender's older stream (`None`) arrived; the
        // flush took it as "node 2 has nothing" and ended without them.
        let mut f = Flushes::new();
        let mut out = Vec::new();
        f.start(
            KEY,
            Some(Retained::starting_at(64, Seq(0))),
            &[2],
            1_000,
            &mut out,
        );
        f.on_state(2, KEY, (Some(Seq(11)), Some(Seq(0))), true, &mut out);
        let older = FlushKey {
            epoch: KEY.epoch - 1,
            ..KEY
        };
        f.on_state(2, older, (None, None), false, &mut out);
        assert_eq!(done(&mut f, 0), None, "still behind node 2's report");
        for s in 0..11 {
            let frame = whole(Seq(s), vec![s as u8]);
            assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0), "frame {s}");
        }
        assert_eq!(
            done(&mut f, 0),
            Some((KEY, Outcome::Agreed { recovered: 11 }))
        );

        // Before any report of this epoch, the other epoch's still counts
        // as "nothing here", and a later report of this epoch replaces it.
        let mut f = Flushes::new();
        f.start(
            KEY,
            Some(Retained::starting_at(64, Seq(0))),
            &[2],
            1_000,
            &mut out,
        );
        f.on_state(2, older, (None, None), false, &mut out);
        f.on_state(2, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
        assert_eq!(done(&mut f, 0), None, "behind node 2's report");
    }

    #[test]
    fn a_peer_behind_is_told_where_this_node_is_now_before_it_is_sent_the_frames() {
        // Seed 98: this node began at 5, took frame 5 from node 1 (which
        // then left) and answered node 4 with the 5 it began at. Node 4
        // ended its flush at 5, with frame 5 still on its way.
        let mut a = Flushes::new();
        let mut out = Vec::new();
        a.start(KEY, Some(kept(0, 5, 64)), &[1, 4], 1_000, &mut out);
        a.on_state(1, KEY, (Some(Seq(6)), Some(Seq(0))), true, &mut out);
        let five = whole(Seq(5), vec![5]);
        assert_eq!(a.on_data(KEY, &five, &mut out), Some(0));
        a.peer_gone(KEY.group, 1, &mut out);
        out.clear();
        a.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
        let to_4: Vec<&FlushMsg> = out
            .iter()
            .filter(|(n, _)| *n == 4)
            .map(|(_, m)| m)
            .collect();
        assert!(
            matches!(
                to_4[0],
                FlushMsg::State {
                    next: Some(Seq(6)),
                    ..
                }
            ),
            "answered with where it is now: {to_4:?}"
        );

        // Node 4's side: it takes the answer, then the frames, and ends
        // only with frame 5.
        let mut b = Flushes::new();
        let mut ignored = Vec::new();
        b.start(KEY, Some(kept(0, 3, 64)), &[1, 2], 1_000, &mut ignored);
        b.peer_gone(KEY.group, 1, &mut ignored);
        b.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), true, &mut ignored);
        for m in to_4 {
            match m.clone() {
                FlushMsg::State { key, next, from } => {
                    b.on_state(2, key, (next, from), true, &mut ignored);
                }
                FlushMsg::Data { key, frame } => {
                    assert_eq!(done(&mut b, 0), None, "ended before frame {:?}", frame.seq);
                    assert_eq!(b.on_data(key, &frame, &mut ignored), Some(0));
                }
            }
        }
        assert_eq!(
            done(&mut b, 0),
            Some((KEY, Outcome::Agreed { recovered: 3 }))
        );

        // A frame this node takes in while a peer behind is served: the
        // peer is told the new `next` before the frame.
        let mut a = Flushes::new();
        a.start(KEY, Some(kept(0, 5, 64)), &[1, 4], 1_000, &mut out);
        a.on_state(1, KEY, (Some(Seq(6)), Some(Seq(0))), true, &mut out);
        a.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
        out.clear();
        assert_eq!(a.on_data(KEY, &five, &mut out), Some(0));
        let to_4: Vec<&FlushMsg> = out
            .iter()
            .filter(|(n, _)| *n == 4)
            .map(|(_, m)| m)
            .collect();
        assert!(
            matches!(
                to_4[..],
                [
                    FlushMsg::State {
                        next: Some(Seq(6)),
                        ..
                    },
                    FlushMsg::Data { .. }
                ]
            ),
            "{to_4:?}"
        );
    }

    #[test]
    fn a_silent_survivor_holds_the_flush_until_it_leaves_the_view_or_the_deadline() {
        let mut f = Flushes::new();
        let mut out = Vec::new();
        f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000, &mut out);
        f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
        assert_eq!(done(&mut f, 999), None);
        assert_eq!(f.next_deadline(), Some(1_000));
        assert_eq!(
            done(&mut f, 1_000),
            Some((
                KEY,
                Outcome::TimedOut {
                    waiting: 1,
                    recovered: 0
                }
            ))
        );
        assert_eq!(f.counters().timed_out, 1);
        // The same, but node 3 leaves the view.
        f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000, &mut out);
        f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
        f.peer_gone(KEY.group, 3, &mut Vec::new());
        assert_eq!(
            done(&mut f, 0),
            Some((KEY, Outcome::Agreed { recovered: 0 }))
        );
        assert_eq!(f.counters().agreed, 1);
    }

    #[test]
    fn a_sender_back_in_the_view_ends_the_wait_for_survivors_never_heard() {
        // Seed 4109: node 3 never saw the sender leave (it holds this
        // node's state for a flush it never starts); the sender, alive with
        // the same stream, is back in the view at t=10.
        let mut f = Flushes::new();
        let mut out = Vec::new();
        f.start(
            KEY,
            Some(kept(0, 5, 64)),
            &[2, 3],
            2 * SENDER_BACK_GRACE_NS,
            &mut out,
        );
        f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
        f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch + 1, 10);
        assert_eq!(
            f.next_deadline(),
            Some(2 * SENDER_BACK_GRACE_NS),
            "another stream"
        );
        f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch, 10);
        let grace = 10 + SENDER_BACK_GRACE_NS;
        assert_eq!(f.next_deadline(), Some(grace));
        assert_eq!(done(&mut f, grace - 1), None, "its state may be on its way");
        let ended = f.poll_ended(grace).expect("no longer waits for node 3");
        assert_eq!(ended.outcome, Outcome::Agreed { recovered: 0 });
        assert_eq!(ended.with, vec![2]);
        assert_eq!(f.counters().ended_sender_back, 1);
        // A survivor heard live and ahead is still waited for: only the
        // silent ones are let go.
        f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000_000_000, &mut out);
        f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
        f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch, 0);
        assert_eq!(
            done(&mut f, SENDER_BACK_GRACE_NS),
            None,
            "frames 5..8 to come"
        );
        for s in 5..8 {
            f.on_data(KEY, &whole(Seq(s), vec![s as u8]), &mut out);
        }
        assert_eq!(
            done(&mut f, SENDER_BACK_GRACE_NS),
            Some((KEY, Outcome::Agreed { recovered: 3 }))
        );
    }

    #[test]
    fn a_peer_behind_what_this_node_kept_is_sent_nothing_while_another_keeps_its_next() {
        // Node 1 kept only frames 6..10 (window 4); node 2 is at 2; node 3
        // delivered 0..4 and keeps them all.
        let mut f = Flushes::new();
        let mut out = Vec::new();
        f.start(KEY, Some(kept(0, 10, 4)), &[2, 3], 1_000, &mut out);
        out.clear();
        f.on_state(2, KEY, (Some(Seq(2)), Some(Seq(0))), false, &mut out);
        f.on_state(3, KEY, (Some(Seq(4)), Some(Seq(0))), false, &mut out);
        let to_2 = out
            .iter()
            .filter(|(n, m)| *n == 2 && matches!(m, FlushMsg::Data { .. }))
            .count();
        assert_eq!(to_2, 0, "a partial range would leave node 2 a gap");
        // Run to the end: node 3 brings node 2 to 4. Node 1 keeps from 6
        // and node 2 never jumps to it: node 3 brought it in order, and
        // once at 4 nobody is ahead that could have kept 4 and 5 but node
        // 1, which did not, so node 2 ends at 4 beside node 3.
        let mut net = Net::new(&[
            (1, Some(kept(0, 10, 4))),
            (2, Some(kept(0, 2, 4))),
            (3, Some(kept(0, 4, 8))),
        ]);
        net.run();
        assert_eq!(net.seqs_of(2), seqs(2, 4), "in order from node 3 only");
        assert_eq!(net.nodes[&2].counters().jumps, 0);
    }

    #[test]
    fn a_recovered_frame_is_served_on_when_the_one_that_had_it_dies() {
        // Node 2 is ahead, serves node 1, and dies before serving node 3;
        // node 1 serves node 3 what it recovered.
        let mut net = Net::new(&[
            (1, Some(kept(0, 4, 64))),
            (2, Some(kept(0, 8, 64))),
            (3, Some(kept(0, 2, 64))),
        ]);
        // Everything arrives except messages from 2 to 3.
        net.run_dropping(|from, to| from == 2 && to == 3);
        net.dead.push(2);
        net.nodes
            .get_mut(&3)
            .unwrap()
            .peer_gone(KEY.group, 2, &mut Vec::new());
        assert_eq!(net.seqs_of(1), seqs(4, 8));
        assert_eq!(
            net.seqs_of(3),
            seqs(2, 8),
            "node 1 passed on what node 2 sent it"
        );
        let f3 = net.nodes.get_mut(&3).unwrap();
        assert_eq!(done(f3, 0), Some((KEY, Outcome::Agreed { recovered: 6 })));
    }

    #[test]
    fn a_node_behind_every_kept_window_jumps_to_the_oldest_kept_message() {
        // Node 1 delivered 0..5; node 2 delivered 0..50 but keeps only the
        // last 8 (42..50): its sender went on without node 1 as a member,
        // so 5..42 were acknowledged by every member and were not node 1's.
        let mut net = Net::new(&[(1, Some(kept(0, 5, 8))), (2, Some(kept(0, 50, 8)))]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(42, 50), "all node 2 kept");
        // It does not end between the states and the jump.
        let mut f = Flushes::new();
        f.start(KEY, Some(kept(0, 5, 8)), &[2], 1_000, &mut Vec::new());
        f.on_state(
            2,
            KEY,
            (Some(Seq(50)), Some(Seq(42))),
            false,
            &mut Vec::new(),
        );
        assert_eq!(f.poll_ended(0), None, "the jump is on its way");
        let f1 = net.nodes.get_mut(&1).unwrap();
        let ended = f1.poll_ended(0).expect("caught up");
        assert_eq!(ended.outcome, Outcome::Agreed { recovered: 8 });
        assert_eq!(ended.next, Some(Seq(50)), "it ends with node 2");
        assert_eq!(f1.counters().beyond_reach, 1);
        assert_eq!(f1.counters().jumps, 1);
        assert_eq!(f1.counters().frames_skipped, 37);
        let f2 = net.nodes.get_mut(&2).unwrap();
        assert_eq!(f2.poll_ended(0).map(|e| e.next), Some(Some(Seq(50))));
        assert_eq!(f2.counters().beyond_reach, 0);
        // Kept from the middle of a message (43 is a last fragment): the
        // jump lands on the next first fragment, 44.
        let mut net = Net::new(&[(1, Some(kept(0, 5, 8))), (2, Some(kept(0, 50, 7)))]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(44, 50));
        assert_eq!(net.nodes[&1].counters().frames_skipped, 39);
        // Within reach (node 2 keeps from 42, node 1 is at 45): no jump,
        // it gets 45..50.
        let mut net = Net::new(&[(1, Some(kept(40, 45, 8))), (2, Some(kept(0, 50, 8)))]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(45, 50));
        let f1 = net.nodes.get_mut(&1).unwrap();
        assert_eq!(f1.poll_ended(0).map(|e| e.next), Some(Some(Seq(50))));
        assert_eq!(f1.counters().beyond_reach, 0);
        assert_eq!(f1.counters().jumps, 0);
        // Two survivors ahead: only the one keeping the oldest frames
        // (node 3, from 40) serves the jump, and node 1 gets 40..50 from it
        // and nothing twice.
        let mut net = Net::new(&[
            (1, Some(kept(0, 5, 8))),
            (2, Some(kept(0, 50, 8))),
            (3, Some(kept(0, 50, 10))),
        ]);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(40, 50));
        // A jump waits for every survivor's state: node 3 never reports.
        let mut net = Net::new(&[
            (1, Some(kept(0, 5, 8))),
            (2, Some(kept(0, 50, 8))),
            (3, Some(kept(0, 5, 8))),
        ]);
        net.queue.retain(|(from, _, _)| *from != 3);
        net.dead.push(3);
        net.run();
        assert!(net.delivered[&1].is_empty(), "node 3 might have kept 5");
        assert_eq!(net.nodes[&1].counters().jumps, 0);
    }

    #[test]
    fn a_jump_that_overtakes_a_survivor_s_state_is_taken_when_it_comes() {
        // Seed 3940: node 1 (at 5) counts nodes 2 and 3. Node 2 keeps 42..50
        // and sends the jump as soon as it has node 1's state; the frames
        // come before node 3's state, and node 1 may not jump until it has
        // heard everyone (node 3 might have kept 5). Node 2 has ended by
        // then: the frames must not be lost.
        let mut net = Net::new(&[
            (1, Some(kept(0, 5, 8))),
            (2, Some(kept(0, 50, 8))),
            (3, None),
        ]);
        // Node 3's messages to node 1 wait until everything else is done.
        let mut later = Vec::new();
        net.queue.retain(|(from, to, m)| {
            let hold = *from == 3 && *to == 1;
            if hold {
                later.push((*from, *to, m.clone()));
            }
            !hold
        });
        net.run_dropping(|from, to| from == 3 && to == 1);
        assert!(net.delivered[&1].is_empty(), "not before node 3 is heard");
        assert_eq!(
            net.nodes.get_mut(&2).unwrap().poll_ended(0).map(|e| e.next),
            Some(Some(Seq(50))),
            "node 2 sent the jump and ended"
        );
        net.queue.extend(later);
        net.run();
        assert_eq!(net.seqs_of(1), seqs(42, 50), "taken when node 3 is heard");
        let f1 = net.nodes.get_mut(&1).unwrap();
        assert_eq!(f1.counters().jumps, 1);
        assert_eq!(f1.counters().frames_recovered, 8);
        let ended = f1.poll_ended(0).expect("caught up");
        assert_eq!(ended.outcome, Outcome::Agreed { recovered: 8 });
        assert_eq!(ended.next, Some(Seq(50)));
    }

    #[test]
    fn a_state_from_a_node_this_one_did_not_count_takes_it_in() {
        // Node 1's views did not count node 3 a survivor; node 3's did, and
        // waits for node 1's state. Node 1 is ahead of it.
        let mut f1 = Flushes::new();
        let mut f3 = Flushes::new();
        let mut to_3 = Vec::new();
        f1.start(KEY, Some(kept(0, 10, 8)), &[2], 1_000, &mut Vec::new());
        let mut from_3 = Vec::new();
        f3.start(KEY, Some(kept(0, 7, 8)), &[1], 1_000, &mut from_3);
        let (_, FlushMsg::State { next, from, .. }) = from_3[0].clone() else {
            panic!("a state first");
        };
        f1.on_state(3, KEY, (next, from), false, &mut to_3);
        let states = to_3
            .iter()
            .filter(|(n, m)| *n == 3 && matches!(m, FlushMsg::State { .. }))
            .count();
        let frames: Vec<Seq> = to_3
            .iter()
            .filter_map(|(_, m)| match m {
                FlushMsg::Data { frame, .. } => Some(frame.seq),
                _ => None,
            })
            .collect();
        assert_eq!(states, 1, "node 3 is told node 1's state");
        assert_eq!(frames, seqs(7, 10), "and sent what it lacks");
        for (_, m) in to_3 {
            match m {
                FlushMsg::State { key, next, from } => {
                    f3.on_state(1, key, (next, from), false, &mut Vec::new());
                }
                FlushMsg::Data { key, frame } => {
                    assert_eq!(f3.on_data(key, &frame, &mut Vec::new()), Some(0));
                }
            }
        }
        let ended = f3
            .poll_ended(0)
            .expect("node 3 does not wait for the deadline");
        assert_eq!(ended.outcome, Outcome::Agreed { recovered: 3 });
        assert_eq!(ended.next, Some(Seq(10)));
        // A node gone from the view is not taken in by a late state.
        let mut f = Flushes::new();
        f.start(KEY, Some(kept(0, 10, 8)), &[2, 4], 1_000, &mut Vec::new());
        f.peer_gone(KEY.group, 4, &mut Vec::new());
        let mut out = Vec::new();
        f.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), false, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // A state held from a node the flush does not count is not taken
        // in, but answered with where this node is: that node stops waiting
        // for this one (seed 1100: it waited until its deadline), and sends
        // it what it lacks (seed 718: "nothing" ended that node's flush
        // without sending this one the frames it delivered past it).
        let mut f = Flushes::new();
        f.on_state(4, KEY, (Some(Seq(32)), Some(Seq(0))), true, &mut out);
        let mut out = Vec::new();
        let mine = kept(0, 10, 8);
        let here = FlushMsg::State {
            key: KEY,
            next: mine.next(),
            from: mine.serves_from(),
        };
        f.start(KEY, Some(mine), &[2], 1_000, &mut out);
        assert!(out.contains(&(4, here)), "{out:?}");
        assert!(out
            .iter()
            .all(|(n, m)| *n != 4 || matches!(m, FlushMsg::State { .. })));
    }
}
