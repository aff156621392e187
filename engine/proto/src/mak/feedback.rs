//! ACK aggregation in the feedback tree (seed 004 §2.1), at one receiver of
//! one stream: the reports of its downstream neighbours, the round it is
//! merging, and the polls of the neighbours that have not reported.
//!
//! A *report* is an ACK frame (docs/protocol.md §3.4): `ack` is the lowest
//! position over the members it covers (each holds everything before it),
//! `seq` the highest ACK request its whole subtree has completed, `tstamp`
//! the latest echo of its subtree, and its payload the covered node ids as
//! a range list (a leaf's report covers only its source and has none). A
//! node reports a request upstream once its own part is complete and every
//! downstream neighbour has reported it complete; one whose report is late
//! is polled (an ACK frame flagged ACK_REQ, sent downstream) with backoff,
//! and after [`PARTIAL_AFTER_POLLS`] polls the node reports what it has,
//! so the sender learns exactly who is missing. A poll is answered at once
//! with the current report, complete or not: an answer says the subtree is
//! alive, so its parent keeps waiting instead of leaving it out.
//!
//! Owns: [`Feedback`] and [`Report`]. May not touch: the receiver's data
//! state (the receiver tells it when its own part is complete and sends
//! what it returns).

use crate::time::Duration;
use crate::tree::FeedbackTree;
use crate::Instant;
use mcast_wire::{NodeId, RangeList, Seq, SeqRange};

/// Polls of a silent neighbour before a node reports without it.
pub(super) const PARTIAL_AFTER_POLLS: u32 = 3;

/// The receiver's estimates the poll wait derives from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// One way across the segment (half the group round trip).
    pub hop: Duration,
    /// A NAK backoff window and one repair.
    pub repair: Duration,
}

/// What a node says upstream about its subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Report {
    /// Every covered member holds everything before this.
    pub ack: Seq,
    /// The highest request the whole subtree has completed.
    pub seq: Seq,
    /// The echo for the sender's round-trip sample (wrapping microseconds).
    pub echo: u32,
    /// The members covered, as node-id ranges.
    pub covered: RangeList,
}

#[derive(Debug, Clone, Copy)]
struct Neighbour {
    node: NodeId,
    report: Option<Report>,
}

/// A request being merged: this node's part is complete.
#[derive(Debug, Clone, Copy)]
struct Round {
    seq: Seq,
    /// The request's stamp and when it reached this node: a report echoes
    /// the stamp plus the time held here, so the sender's sample is the
    /// round trip to its neighbour, not the tree's aggregation time.
    tstamp: u32,
    arrived: Instant,
    poll_at: Instant,
    polls: u32,
    partial_sent: bool,
}

/// One receiver's place in the tree for one stream.
#[derive(Debug, Clone)]
pub(super) struct Feedback {
    local: NodeId,
    up: NodeId,
    down: Vec<Neighbour>,
    levels: u32,
    round: Option<Round>,
    /// The highest request this node's complete report named.
    done: Seq,
    /// When that report left (`None`: not since the tree was installed).
    done_at: Option<Instant>,
}

impl Feedback {
    /// `local`'s place for `sender`'s stream, or `None` when either is not
    /// in the tree.
    pub(super) fn new(
        tree: &FeedbackTree,
        sender: NodeId,
        local: NodeId,
        done: Seq,
    ) -> Option<Feedback> {
        let up = tree.upstream(sender, local)?;
        Some(Feedback {
            local,
            up,
            down: tree
                .downstream(sender, local)
                .into_iter()
                .map(|node| Neighbour { node, report: None })
                .collect(),
            levels: tree.levels_below(sender, local),
            round: None,
            done,
            done_at: None,
        })
    }

    /// Where this node's reports go.
    pub(super) fn up(&self) -> NodeId {
        self.up
    }

    /// The first downstream neighbour, if any.
    pub(super) fn first_down(&self) -> Option<NodeId> {
        self.down.first().map(|n| n.node)
    }

    /// True when `node` is a downstream neighbour.
    pub(super) fn is_down(&self, node: NodeId) -> bool {
        self.down.iter().any(|n| n.node == node)
    }

    /// How long a node waits for its subtree's reports before it polls:
    /// one hop per level below it and one for the reports to come back up,
    /// plus the time `t.repair` a member takes to repair a loss before it
    /// can report (at 1 % loss most members of a 512-frame round lose a
    /// frame: polling them sooner only has them say they are alive).
    pub(super) fn wait(&self, t: Timing) -> Duration {
        t.hop * (3 * self.levels + 1) + t.repair
    }

    /// The poll deadline, if a round is waiting.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.round.map(|r| r.poll_at)
    }

    /// This node holds everything up to request `seq`; `echo` is its own
    /// echo for it. Returns the complete report if the subtree has
    /// reported too.
    pub(super) fn own_ready(
        &mut self,
        now: Instant,
        t: Timing,
        own_ack: Seq,
        seq: Seq,
        request: (u32, Instant),
    ) -> Option<Report> {
        match self.round.as_mut() {
            // A newer request: the round moves on to it, and a poll already
            // due stays due (asking again must not put the polls off).
            Some(r) if seq.after(r.seq) => {
                r.seq = seq;
                r.tstamp = request.0;
                r.arrived = request.1;
            }
            Some(_) => {}
            None => {
                self.round = Some(Round {
                    seq,
                    tstamp: request.0,
                    arrived: request.1,
                    poll_at: now + self.wait(t),
                    polls: 0,
                    partial_sent: false,
                })
            }
        }
        self.complete(now, own_ack)
    }

    /// A downstream neighbour's report. Returns this node's complete report
    /// if the round it waited for is now complete.
    pub(super) fn child_report(
        &mut self,
        now: Instant,
        t: Timing,
        from: NodeId,
        report: Report,
        own_ack: Seq,
    ) -> Option<Report> {
        let n = self.down.iter_mut().find(|n| n.node == from)?;
        // The newer request wins; for the same request, the later report.
        if n.report.is_none_or(|r| !r.seq.after(report.seq)) {
            n.report = Some(report);
        }
        let wait = self.wait(t);
        if let Some(r) = self.round.as_mut().filter(|r| r.polls > 0) {
            // An answer: the subtree is alive (repairing, or its report was
            // lost): the backoff, which is for silence, starts over.
            r.polls = 0;
            r.poll_at = now + wait;
        }
        self.complete(now, own_ack)
    }

    fn complete(&mut self, now: Instant, own_ack: Seq) -> Option<Report> {
        let round = self.round?;
        let all = self
            .down
            .iter()
            .all(|n| n.report.is_some_and(|r| !r.seq.before(round.seq)));
        if !all {
            return None;
        }
        self.round = None;
        self.done = round.seq;
        self.done_at = Some(now);
        Some(self.merge(own_ack, round.seq, echo(round.tstamp, round.arrived, now)))
    }

    /// True when a poll for request `seq` crossed this node's complete
    /// report of it: the report left less than `rtt` ago, so the poll may
    /// have been sent before the report arrived. Answering it would send the
    /// same report twice (every ancestor of a slow member polls about when
    /// its subtree completes); if the report was lost, the next poll, after
    /// the poller's backoff, is answered.
    pub(super) fn crossed(&self, now: Instant, seq: Seq, rtt: Duration) -> bool {
        !seq.after(self.done)
            && self
                .done_at
                .is_some_and(|t| now.saturating_duration_since(t) < rtt)
    }

    /// The report of what is known now, complete or not (a poll's answer,
    /// or the partial report after the polls); `request` is the stamp and
    /// arrival of the request it answers when no round is open.
    pub(super) fn status(&self, now: Instant, own_ack: Seq, request: (u32, Instant)) -> Report {
        let (tstamp, arrived) = self.round.map_or(request, |r| (r.tstamp, r.arrived));
        self.merge(own_ack, self.done, echo(tstamp, arrived, now))
    }

    fn merge(&self, own_ack: Seq, seq: Seq, echo: u32) -> Report {
        let mut ack = own_ack;
        let mut ranges = vec![(u64::from(self.local), u64::from(self.local) + 1)];
        for r in self.down.iter().filter_map(|n| n.report) {
            ack = ack.min(r.ack);
            ranges.extend(r.covered.iter().map(id_range));
        }
        Report {
            ack,
            seq,
            echo,
            covered: coalesce(ranges),
        }
    }

    /// The poll timer fired: the neighbours to poll for the round's request
    /// (with the echo to send), and a partial report when the polls have
    /// gone unanswered long enough. The next poll waits twice as long.
    pub(super) fn expire(
        &mut self,
        now: Instant,
        t: Timing,
        own_ack: Seq,
        poll: &mut Vec<NodeId>,
    ) -> Option<(Seq, u32, Option<Report>)> {
        let mut round = self.round.filter(|r| r.poll_at <= now)?;
        let stamp = echo(round.tstamp, round.arrived, now);
        poll.extend(
            self.down
                .iter()
                .filter(|n| n.report.is_none_or(|r| r.seq.before(round.seq)))
                .map(|n| n.node),
        );
        round.polls += 1;
        round.poll_at = now + self.wait(t) * (1u32 << round.polls.min(6));
        let partial = (round.polls >= PARTIAL_AFTER_POLLS && !round.partial_sent).then(|| {
            round.partial_sent = true;
            self.status(now, own_ack, (round.tstamp, round.arrived))
        });
        self.round = Some(round);
        Some((round.seq, stamp, partial))
    }
}

/// The echo of a request stamped `tstamp` that reached this node at
/// `arrived`, sent at `now`: the stamp plus the time held here, so that
/// `now − echo` at the sender is the network round trip.
pub(super) fn echo(tstamp: u32, arrived: Instant, now: Instant) -> u32 {
    tstamp.wrapping_add(now.saturating_duration_since(arrived).as_micros() as u32)
}

/// A covered range's node ids `[start, end)`, without wrapping (a hostile
/// count may run past the last id).
pub(super) fn id_range(r: &SeqRange) -> (u64, u64) {
    let start = u64::from(r.start.0);
    (start, (start + u64::from(r.count)).min(1 << 32))
}

/// Node-id ranges `[start, end)` as a range list, merged and in order. Ranges
/// past the list's capacity are left out: a member left out is one the sender
/// thinks has not answered, never one it wrongly thinks holds a frame.
fn coalesce(mut ranges: Vec<(u64, u64)>) -> RangeList {
    ranges.sort_unstable();
    let mut out = RangeList::new();
    let mut push = |(s, e): (u64, u64)| {
        if e > s {
            out.push(SeqRange {
                start: Seq(s as u32),
                count: (e - s).min(u64::from(u32::MAX)) as u32,
            });
        }
    };
    let mut cur: Option<(u64, u64)> = None;
    for (s, e) in ranges {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some(c) => {
                push(c);
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some(c) = cur {
        push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &RangeList) -> Vec<u32> {
        list.iter().flat_map(|r| r.start.0..r.end().0).collect()
    }

    #[test]
    fn covered_ranges_merge_and_stay_in_order() {
        let l = coalesce(vec![(5, 6), (1, 3), (3, 4), (10, 12), (2, 3)]);
        // A hostile count past the last id is cut there, never wrapped.
        let wide = SeqRange {
            start: Seq(u32::MAX - 1),
            count: 5,
        };
        assert_eq!(id_range(&wide), (u64::from(u32::MAX) - 1, 1 << 32));
        assert_eq!(ids(&l), vec![1, 2, 3, 5, 10, 11]);
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn ranges_beyond_the_capacity_are_left_out_never_invented() {
        let many: Vec<(u64, u64)> = (0..200).map(|i| (2 * i, 2 * i + 1)).collect();
        let l = coalesce(many);
        assert!(l.is_full());
        assert!(ids(&l).iter().all(|n| n % 2 == 0));
    }

    const TIMING: Timing = Timing {
        hop: Duration::from_micros(10),
        repair: Duration::from_micros(30),
    };

    fn leaf_report(node: NodeId, ack: u32, seq: u32) -> Report {
        Report {
            ack: Seq(ack),
            seq: Seq(seq),
            echo: 7,
            covered: coalesce(vec![(u64::from(node), u64::from(node) + 1)]),
        }
    }

    #[test]
    fn a_node_reports_once_its_part_and_every_child_are_complete() {
        // 1 is the sender and the root; 2's children are 4 and 5.
        let tree = FeedbackTree::new(1, &[1, 2, 3, 4, 5], 2);
        let mut f = Feedback::new(&tree, 1, 2, Seq(0)).unwrap();
        assert_eq!(f.up(), 1);
        let t = TIMING;
        assert!(f
            .child_report(Instant::ZERO, t, 4, leaf_report(4, 11, 10), Seq(12))
            .is_none());
        assert!(
            f.own_ready(Instant::ZERO, t, Seq(12), Seq(10), (5, Instant::ZERO))
                .is_none(),
            "5 is missing"
        );
        // A report for an older request does not complete the round.
        assert!(f
            .child_report(Instant::ZERO, t, 5, leaf_report(5, 9, 8), Seq(12))
            .is_none());
        let r = f
            .child_report(Instant::ZERO, t, 5, leaf_report(5, 11, 10), Seq(12))
            .unwrap();
        assert_eq!((r.ack, r.seq), (Seq(11), Seq(10)));
        assert_eq!(ids(&r.covered), vec![2, 4, 5]);
        assert!(f.deadline().is_none(), "the round is over");
        // A third node is not a child: ignored.
        assert!(f
            .child_report(Instant::ZERO, t, 3, leaf_report(3, 11, 10), Seq(12))
            .is_none());
    }

    #[test]
    fn a_poll_that_crossed_the_report_is_told_apart_and_waits_cover_the_levels_below() {
        // 2 (children 4 and 5) completes request 10 at 100 us.
        let tree = FeedbackTree::new(1, &[1, 2, 3, 4, 5], 2);
        let mut f = Feedback::new(&tree, 1, 2, Seq(0)).unwrap();
        let (t, us) = (TIMING, |n| Instant::ZERO + Duration::from_micros(n));
        let rtt = Duration::from_micros(20);
        assert!(!f.crossed(us(0), Seq(10), rtt), "nothing reported yet");
        f.child_report(us(0), t, 4, leaf_report(4, 11, 10), Seq(12));
        f.own_ready(us(0), t, Seq(12), Seq(10), (5, us(0)));
        assert!(f
            .child_report(us(100), t, 5, leaf_report(5, 11, 10), Seq(12))
            .is_some());
        // A poll for it within a round trip crossed the report; later, or
        // for a newer request, it is a poll to answer.
        assert!(f.crossed(us(119), Seq(10), rtt));
        assert!(f.crossed(us(119), Seq(9), rtt));
        assert!(!f.crossed(us(120), Seq(10), rtt));
        assert!(!f.crossed(us(110), Seq(11), rtt));
        // Three hops a level below, one back up, and a repair: a node one
        // level up waits out its child's poll, the answer and its report.
        assert_eq!(f.wait(t), Duration::from_micros(10 * 4 + 30));
        // On the chain 1-2-3-4 with the source at 1, 2 has two levels below.
        let chain = FeedbackTree::new(1, &[1, 2, 3, 4], 1);
        let two = Feedback::new(&chain, 1, 2, Seq(0)).unwrap();
        assert_eq!(two.wait(t), Duration::from_micros(10 * 7 + 30));
    }

    #[test]
    fn a_silent_child_is_polled_with_backoff_then_left_out_of_a_partial_report() {
        let tree = FeedbackTree::new(1, &[1, 2, 3, 4, 5], 2);
        let mut f = Feedback::new(&tree, 1, 2, Seq(0)).unwrap();
        let t = TIMING;
        f.child_report(Instant::ZERO, t, 4, leaf_report(4, 11, 10), Seq(12));
        f.own_ready(Instant::ZERO, t, Seq(12), Seq(10), (5, Instant::ZERO));
        let mut at = f.deadline().unwrap();
        assert_eq!(at, Instant::ZERO + f.wait(t));
        let mut waits = Vec::new();
        for poll in 1..=PARTIAL_AFTER_POLLS {
            let mut polled = Vec::new();
            let (seq, _, partial) = f.expire(at, t, Seq(12), &mut polled).unwrap();
            assert_eq!((seq, polled), (Seq(10), vec![5]));
            assert_eq!(partial.is_some(), poll == PARTIAL_AFTER_POLLS);
            if let Some(p) = partial {
                assert_eq!(ids(&p.covered), vec![2, 4], "5 is named by its absence");
                assert_eq!(p.seq, Seq(0), "a partial report completes nothing");
            }
            let next = f.deadline().unwrap();
            waits.push(next.saturating_duration_since(at));
            at = next;
        }
        assert!(waits.windows(2).all(|w| w[1] == w[0] * 2), "{waits:?}");
        // The late child completes the round after all.
        let r = f
            .child_report(Instant::ZERO, t, 5, leaf_report(5, 11, 10), Seq(12))
            .unwrap();
        assert_eq!(ids(&r.covered), vec![2, 4, 5]);
    }
}
