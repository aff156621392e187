//! Receive streams: the stream starts senders announce over the links
//! (held until the view that makes this node a member, deferred behind a
//! flush of the same stream, moved past what was delivered before), start
//! requests, closing streams, and where closed streams stopped so that no
//! message is delivered twice.
//!
//! Owns: [`Streams`]: starts waiting for their group, stopped positions,
//! the groups a rejoin will want them for, where this node's send
//! streams stopped, and what each group's mode had delivered at a rejoin
//! (for a mode that delivers by origin, not by stream: the sequenced one).
//! Does not touch: views ([`membership`](super::membership) installs them),
//! the send streams (the group's [`mode`](super::mode) opens them).

use std::collections::{HashMap, HashSet};

use mcast_engine::{EngineError, StreamStart, Transport};
use mcast_groups::flush::FlushKey;
use mcast_groups::Limits;
use mcast_wire::{GroupId, NodeId, Seq};

use super::flush::Kept;
use super::mode::Delivered;
use super::stats::MAX_RETIRED;
use super::Daemon;
use crate::config::Config;
use crate::stopped::{Room, StoppedPositions};

/// Stream starts held for groups not joined yet, per group.
const MAX_PENDING_STARTS: usize = 1024;

/// Groups whose send position is remembered after this node stops carrying them.
const MAX_SEND_RESUME: usize = 4096;
/// Closed receive streams whose last position is remembered (`stopped`), at
/// the least: the bound is twice the (group, sender) pairs this node can
/// carry or rejoin (`max_groups` each, times the cluster's nodes) when that
/// is more.
const MIN_STOPPED: usize = 4096;

/// What this node remembers of streams beyond their life.
#[derive(Debug)]
pub(super) struct Streams {
    /// Starts received for groups this node does not carry yet.
    pub(super) pending_starts: HashMap<GroupId, Vec<(NodeId, StreamStart)>>,
    /// Where each closed receive stream stopped (its deliveries and its
    /// flush's): (epoch, next frame). A start of that stream behind it opens
    /// there instead, so a client never gets a message twice.
    stopped: StoppedPositions,
    /// Groups this node stopped carrying to rejoin them (after it was
    /// declared failed): their clients still want their stopped positions.
    pub(super) rejoin_groups: HashSet<GroupId>,
    /// Where each group's send stream stopped when this node stopped
    /// carrying the group: a send stream opened again continues there, so
    /// within one incarnation (the streams' epoch) no sequence number names
    /// two frames.
    pub(super) send_resume: HashMap<GroupId, Seq>,
    /// What each group's mode had delivered when this node was declared
    /// failed ([`GroupMode::delivered`](super::mode::GroupMode::delivered)),
    /// for the mode that carries the group again after the rejoin.
    pub(super) recalled: HashMap<GroupId, Delivered>,
}

impl Streams {
    /// Node `n` was declared failed here: the starts it sent for groups
    /// this node does not carry yet go. While the link is down it may start
    /// its stream for this node again further on (a view that dropped and
    /// re-added this node there); opened at the old start when the view
    /// comes, the stream would sit behind the sender's window, every frame
    /// outside the receiver's, and never acknowledge, so the sender's
    /// window would stop for good (the data-path simulation, seed 20894).
    /// Without it, the view's start request asks for the current start.
    pub(super) fn forget_starts_from(&mut self, n: NodeId) {
        for q in self.pending_starts.values_mut() {
            q.retain(|&(from, _)| from != n);
        }
        self.pending_starts.retain(|_, q| !q.is_empty());
    }

    pub(super) fn new(cfg: &Config) -> Streams {
        Streams {
            pending_starts: HashMap::new(),
            stopped: StoppedPositions::new(
                MIN_STOPPED.max(2 * Limits::default().max_groups * (cfg.peers.len() + 1)),
            ),
            rejoin_groups: HashSet::new(),
            send_resume: HashMap::new(),
            recalled: HashMap::new(),
        }
    }

    /// Remembers where `group`'s send stream stopped.
    pub(super) fn note_send_resume(&mut self, group: GroupId, seq: Seq) {
        if self.send_resume.len() >= MAX_SEND_RESUME && !self.send_resume.contains_key(&group) {
            // Bounded: a group carried again after this starts at 0, which
            // is safe once every receiver has closed its old stream.
            self.send_resume.clear();
        }
        self.send_resume.insert(group, seq);
    }

    /// Remembers what `group`'s mode had delivered at a rejoin.
    pub(super) fn note_recalled(&mut self, group: GroupId, delivered: Delivered) {
        if self.recalled.len() >= MAX_SEND_RESUME && !self.recalled.contains_key(&group) {
            // Bounded as the send positions are: a group rejoined after
            // this may deliver again what a paused root delivered.
            self.recalled.clear();
        }
        self.recalled.insert(group, delivered);
    }
}

/// What a start announced by a sender does to the receive stream of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// The open stream already holds everything from there on (a repeated
    /// start, or a view change this node never saw): opening it again would
    /// deliver those frames twice.
    Ignore,
    /// Behind where the closed stream of the same epoch stopped: it opens
    /// there instead, so no message is delivered twice.
    MovedForward(StreamStart),
    /// Opens at `start`; `passed_over` frames after what this node delivered
    /// of the same stream (its epoch) come before it and will never come.
    At {
        start: StreamStart,
        passed_over: u64,
    },
}

/// Where a receive stream opens for `start`, given the open stream of the
/// same sender (its epoch and the frame after the last it delivered) and
/// where a closed one of `start`'s epoch stopped.
fn where_to_open(
    kept: Option<(u32, Option<Seq>)>,
    stopped: Option<Seq>,
    start: StreamStart,
) -> Opening {
    let delivered_to = match kept {
        Some((epoch, next)) if epoch == start.epoch => {
            if next.is_some_and(|n| !start.seq.after(n)) {
                return Opening::Ignore;
            }
            next
        }
        Some(_) => None,
        None => {
            if let Some(next) = stopped.filter(|&n| start.seq.before(n)) {
                return Opening::MovedForward(StreamStart { seq: next, ..start });
            }
            stopped
        }
    };
    let passed_over = delivered_to.map_or(0, |n| start.seq.distance(n).max(0) as u64);
    Opening::At { start, passed_over }
}

impl<T: Transport> Daemon<T> {
    /// Node `from` says where its stream in `group` starts for us.
    pub(super) fn stream_start(
        &mut self,
        from: NodeId,
        group: GroupId,
        start: StreamStart,
    ) -> Result<(), EngineError> {
        if !self.local.contains_key(&group) {
            // The view that makes us a member may still be on its way.
            let q = self.streams.pending_starts.entry(group).or_default();
            q.retain(|(n, _)| *n != from);
            if q.len() < MAX_PENDING_STARTS {
                q.push((from, start));
            }
            return Ok(());
        }
        let key = FlushKey {
            group,
            sender: from,
            epoch: start.epoch,
        };
        if self.flush.flushes.running(key) {
            // The flush still delivers this stream's last frames: opening it
            // now would deliver them twice. It opens when the flush ends.
            self.flush.deferred_starts.insert(key, start);
            // Links keep order: the start last heard is the newest, and a
            // held one of an earlier stream must not open after it.
            self.local
                .get_mut(&group)
                .expect("checked above")
                .held_starts
                .retain(|(n, _)| *n != from);
            self.counters.starts_deferred += 1;
            return Ok(());
        }
        let flushed = self.flush.flushes.running_from(group, from);
        let lg = self.local.get_mut(&group).expect("checked above");
        if flushed || lg.held_gone.contains(&from) {
            // Its messages would overtake what the flush of its earlier
            // stream still delivers, or the membership event held for the
            // group's flushes that says it left (a sender gone and back:
            // soak seed 905167957). It opens once the group's flushes are
            // over and their events out, and replaces any earlier start of
            // the sender, held or deferred. Other senders' starts open at
            // once: held behind a flush that waits out its deadline, their
            // streams stalled (data-path seed 1027).
            lg.held_starts.retain(|(n, _)| *n != from);
            lg.held_starts.push((from, start));
            self.flush
                .deferred_starts
                .retain(|k, _| !(k.group == group && k.sender == from));
            self.counters.starts_deferred += 1;
            return Ok(());
        }
        let kept = self
            .flush
            .kept
            .get(&(group, from))
            .map(|k| (k.epoch, k.frames.next()));
        let stopped = self.streams.stopped.get(group, from, start.epoch);
        let (start, passed_over) = match where_to_open(kept, stopped, start) {
            Opening::Ignore => return Ok(()),
            Opening::MovedForward(start) => {
                self.counters.starts_moved_forward += 1;
                (start, 0)
            }
            Opening::At { start, passed_over } => (start, passed_over),
        };
        let first = !self.flush.kept.contains_key(&(group, from));
        self.close_receiver(group, from)?;
        let mut out = Vec::new();
        self.flush
            .flushes
            .forget_held(group, from, first.then_some(start.epoch), &mut out);
        self.send_flush(out);
        // A start of an older stream of this sender, waiting for that
        // stream's flush, must not replace this one when it ends.
        self.flush
            .deferred_starts
            .retain(|k, _| !(k.group == group && k.sender == from));
        self.engine.open_receiver_in(group, from, start)?;
        let window = self.local[&group].window_frames;
        let frames = self.flush.flushes.resume(key, start.seq, window);
        self.flush.kept.insert(
            (group, from),
            Kept {
                epoch: start.epoch,
                frames,
            },
        );
        self.log.debug(
            "receive stream opened",
            &[("group", &group), ("from", &from), ("seq", &start.seq.0)],
        );
        if passed_over > 0 {
            self.counters.starts_passed_over += 1;
            self.counters.frames_passed_over += passed_over;
            // The sender counted this node a member again only from
            // `start` on: the frames before it were sent while it did not
            // (a view this node left and joined again), and nobody will
            // give them. The clients are told, as for a flush's jump.
            self.log.warn(
                "stream started again past frames this node never delivered: the sender sent them while it did not count this node a member",
                &[("group", &group), ("sender", &from), ("skipped_frames", &passed_over)],
            );
            let members = self.local[&group].members.clone();
            self.skipped_event(group, from, passed_over, &members);
        }
        Ok(())
    }

    /// `from` carries `group` and holds no stream from this node: if this
    /// node's send stream counts it a member, it is told where to open one
    /// (it lost the stream while this node's views never showed it leave).
    pub(super) fn start_request(
        &mut self,
        from: NodeId,
        group: GroupId,
    ) -> Result<(), EngineError> {
        if self.resume_member(group, from)? {
            self.counters.start_requests_answered += 1;
        }
        Ok(())
    }

    /// The local groups whose view holds node `n`.
    pub(super) fn groups_with(&self, n: NodeId) -> Vec<GroupId> {
        self.local
            .iter()
            .filter(|(_, lg)| lg.view.as_ref().is_some_and(|v| v.has_node(n)))
            .map(|(&g, _)| g)
            .collect()
    }

    /// Notes where a receive stream stopped (see `stopped`).
    pub(super) fn note_stopped(
        &mut self,
        group: GroupId,
        sender: NodeId,
        epoch: u32,
        next: Option<Seq>,
    ) {
        let Some(next) = next else {
            return;
        };
        // A position matters only while clients of this node may receive
        // the stream again: in a group it carries, or rejoins for them.
        if !self.live.rejoins.under_way() {
            self.streams.rejoin_groups.clear();
        }
        let (local, rejoin) = (&self.local, &self.streams.rejoin_groups);
        let wanted = |g| local.contains_key(&g) || rejoin.contains(&g);
        if let Room::Cleared(n) = self
            .streams
            .stopped
            .note(group, sender, epoch, next, wanted)
        {
            self.log.warn(
                "too many stopped stream positions: forgot them all, a stream started behind one may repeat messages",
                &[("positions", &n)],
            );
        }
    }

    /// Closes the receive stream of `from` in `group`, keeping its final
    /// counters for `mcast stat`.
    pub(super) fn close_receiver(
        &mut self,
        group: GroupId,
        from: NodeId,
    ) -> Result<(), EngineError> {
        if let Some(k) = self.flush.kept.get(&(group, from)) {
            let (epoch, next) = (k.epoch, k.frames.next());
            self.note_stopped(group, from, epoch, next);
        }
        let stats = self.engine.stats();
        let closed = stats
            .groups
            .iter()
            .filter(|g| g.group == group)
            .flat_map(|g| g.receivers.iter())
            .find(|(n, _)| *n == from);
        if let (Some((_, c)), Some(lg)) = (closed, self.local.get_mut(&group)) {
            if lg.closed.len() >= MAX_RETIRED {
                lg.closed.remove(0);
            }
            lg.closed.push((from, *c));
        }
        self.engine.close_receiver_in(group, from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(seq: u32) -> StreamStart {
        StreamStart {
            epoch: 7,
            seq: Seq(seq),
        }
    }

    #[test]
    fn a_start_at_or_behind_the_open_stream_is_ignored() {
        assert_eq!(
            where_to_open(Some((7, Some(Seq(10)))), None, start(10)),
            Opening::Ignore
        );
        assert_eq!(
            where_to_open(Some((7, Some(Seq(10)))), None, start(3)),
            Opening::Ignore
        );
    }

    #[test]
    fn a_start_past_what_was_delivered_counts_the_frames_passed_over() {
        // Open stream of the same epoch, delivered up to 9: a start at 22
        // passes over 10..=21.
        assert_eq!(
            where_to_open(Some((7, Some(Seq(10)))), None, start(22)),
            Opening::At {
                start: start(22),
                passed_over: 12
            }
        );
        // The same across the wrap of sequence numbers.
        assert_eq!(
            where_to_open(Some((7, Some(Seq(u32::MAX - 1)))), None, start(3)),
            Opening::At {
                start: start(3),
                passed_over: 5
            }
        );
        // A closed stream of the epoch stopped at 10.
        assert_eq!(
            where_to_open(None, Some(Seq(10)), start(15)),
            Opening::At {
                start: start(15),
                passed_over: 5
            }
        );
    }

    #[test]
    fn a_start_behind_a_closed_stream_opens_where_it_stopped() {
        assert_eq!(
            where_to_open(None, Some(Seq(10)), start(4)),
            Opening::MovedForward(start(10))
        );
    }

    #[test]
    fn a_new_epoch_or_a_first_stream_passes_nothing_over() {
        // The sender restarted (another epoch): its old stream is the
        // flush's business.
        assert_eq!(
            where_to_open(Some((6, Some(Seq(10)))), None, start(40)),
            Opening::At {
                start: start(40),
                passed_over: 0
            }
        );
        assert_eq!(
            where_to_open(None, None, start(40)),
            Opening::At {
                start: start(40),
                passed_over: 0
            }
        );
        // Open but nothing delivered yet.
        assert_eq!(
            where_to_open(Some((7, None)), None, start(40)),
            Opening::At {
                start: start(40),
                passed_over: 0
            }
        );
    }
}
