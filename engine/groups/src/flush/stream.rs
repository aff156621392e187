//! One stream's flush at this node: the state machine of one departed
//! sender's stream (the peers' reported states, what was sent to whom,
//! frames that came early, when it is over).
//!
//! Owns a [`Flush`] and its [`Peer`]s. Never sees another stream's flush,
//! the held states or the counters: [`Flushes`](super::Flushes) owns those
//! and drives this machine.

use std::collections::BTreeMap;

use mcast_wire::Seq;

use super::{FlushFrame, FlushKey, FlushMsg, Outcome, Ready, Retained};
use crate::NodeId;

/// One stream's flush at this node.
#[derive(Debug)]
pub(super) struct Flush {
    pub(super) key: FlushKey,
    pub(super) kept: Retained,
    pub(super) peers: BTreeMap<NodeId, Peer>,
    pub(super) deadline: u64,
    pub(super) recovered: u64,
    /// The state this node reported, `next` and `from` (a jump is only
    /// awaited from that `next`: peers serve a jump from what was
    /// reported).
    pub(super) reported: (Option<Seq>, Option<Seq>),
    /// Survivors that left the view or failed: a state of theirs still on
    /// its way is not taken.
    pub(super) gone: Vec<NodeId>,
    /// Frames ahead of `kept.next()` that could not be taken when they came:
    /// a jump's frames that overtook the state of a survivor not yet heard
    /// (seed 3940: they were dropped, the survivor that sent them had ended
    /// its flush, and this node ended behind them). At most
    /// `kept.max_frames`; taken when they follow or the jump is allowed.
    pub(super) early: Vec<FlushFrame>,
    /// The sender is in the view again with this stream (it was dropped and
    /// added back, alive): from this time on, survivors not heard live are
    /// not waited for ([`Flushes::sender_back`]).
    pub(super) back_at: Option<u64>,
    /// The stream's window: what `kept` keeps once the flush is over (it
    /// keeps two while the flush runs).
    pub(super) window: usize,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Peer {
    /// `None` until the peer's state arrives: then its `next` and `from`.
    pub(super) reported: Option<(Option<Seq>, Option<Seq>)>,
    /// A state came while this flush ran. One held from before (the peer's
    /// view change came first) is tentative: it may belong to a departure
    /// this node never saw, so the flush waits for a live one as well.
    pub(super) live: bool,
    /// `reported` came from a state of this flush's epoch. A state of
    /// another epoch counts as "nothing" only until one does: it is the
    /// peer's answer about another stream of the sender and says nothing of
    /// what the peer holds of this one (seed 638: it wiped a peer's report
    /// of 11 frames, and the flush ended without them).
    pub(super) own_epoch: bool,
    /// Frames before this have been sent to the peer.
    pub(super) sent_to: Option<Seq>,
    /// The `next` this node last told the peer.
    pub(super) told: Option<Seq>,
}

impl Flush {
    /// A peer's state, `live` unless it was held from before this flush.
    /// The first live state from a peer is answered with this node's own:
    /// the one this node sent at its start may have been held there, and
    /// the peer waits for a live one too. True when the peer is ahead of
    /// this node but can no longer send it what it lacks (beyond its reach:
    /// frames a MAK sender sent while it did not count this node a member).
    pub(super) fn on_state(
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
    pub(super) fn serve(&mut self, out: &mut Vec<(NodeId, FlushMsg)>) {
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

    pub(super) fn on_data(
        &mut self,
        frame: &FlushFrame,
        out: &mut Vec<(NodeId, FlushMsg)>,
    ) -> Option<u64> {
        let mine = self.kept.next()?;
        let Some(skipped) = self.takes(mine, frame) else {
            let ahead = mine.before(frame.seq) && !self.early.iter().any(|f| f.seq == frame.seq);
            if ahead && self.early.len() < self.kept.max_frames {
                self.early.push(frame.clone());
            }
            return None;
        };
        self.kept
            .push(frame.seq, frame.first, frame.last, frame.batch, &frame.data);
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
    pub(super) fn take_early(&mut self, out: &mut Vec<(NodeId, FlushMsg)>, ready: &mut Vec<Ready>) {
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
                .push(frame.seq, frame.first, frame.last, frame.batch, &frame.data);
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
                // A jump comes only from a peer that keeps frames: one whose
                // record is empty (`from` is its `next`) has none to send
                // (seed 1603: a peer answering from the record of its ended
                // flush, which had opened the stream again and delivered
                // nothing since, was waited for until the deadline).
                Some((Some(theirs), from)) => mine.is_some_and(|m| {
                    m.before(theirs)
                        && (reachable(m, from) || (jump && from.is_some_and(|f| f.before(theirs))))
                }),
            })
            .count()
    }

    pub(super) fn outcome(&self, now: u64) -> Option<Outcome> {
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
