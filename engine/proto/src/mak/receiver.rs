//! The MAK receiver (seed 000 §3.2, Figure 7): in-order delivery, the error
//! table of missing frames, the randomized NAK timer and NAK suppression by
//! overheard NAKs, repair waits, and ACKs when the sender asks for them.
//!
//! Owns: [`MakReceiver`], [`ReceiverState`] and the error table's entries
//! (`Missing`). May not touch: the sender (`super::sender`); it reads only
//! the shared [`MakConfig`] and [`NakTimer`] of `super`, and speaks to the
//! sender only through the frames it returns.

use std::collections::VecDeque;

use super::feedback::{echo, Feedback, Report, Timing};
use super::{MakConfig, NakTimer};
use crate::api::{header_for, rng_for};
use crate::recv::{Accepted, InOrder};
use crate::time::earliest;
use crate::window::SeqWindow;
use crate::{
    BufId, Counters, Dest, Duration, Endpoint, Event, FeedbackTree, Instant, Rng, RxBody,
    StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq, SeqRange, MAX_NAK_RANGES};

/// Frames one NAK from a neighbour may have repaired from our copies.
const MAX_RELAYS_PER_NAK: usize = 128;
/// Frames owed to neighbours (asked of us while we missed them too).
const MAX_OWED: usize = 64;
/// NAKs to the tree neighbour for one frame before the group is asked: a
/// lost NAK or repair on the way (a 2 % chance at 1 % loss) is asked
/// again of the neighbour, not of the sender.
pub(super) const NEAR_TRIES: u8 = 3;

/// The receiver's states (seed 000 Figure 7). NAK, MODIFY-ERROR-TABLE and ACK
/// are passed through on the way back to RECEIVE or WAIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverState {
    /// Nothing missing.
    Receive,
    /// Frames missing: the error table is not empty and a timer runs.
    Wait,
}

/// One entry of the error table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Waiting for our own NAK timer; `tries` NAKs of ours to the group
    /// asked for it already, and `near` NAKs to our tree neighbour
    /// (docs/protocol.md §3.5): after [`NEAR_TRIES`], the group is asked.
    Pending { tries: u8, near: u8 },
    /// NAKed (by us or overheard from another receiver) at a time: the repair
    /// is awaited until `until`, then the frame is pending again.
    Requested { until: Instant, tries: u8, near: u8 },
}

impl Missing {
    const NEW: Missing = Missing::Pending { tries: 0, near: 0 };

    fn is_pending(self) -> bool {
        matches!(self, Missing::Pending { .. })
    }
}

/// The MAK receiver.
#[derive(Debug)]
pub struct MakReceiver {
    stream: StreamConfig,
    cfg: MakConfig,
    rng: Rng,
    inorder: InOrder,
    /// The error table (seed 000 §3.2 receiver state (4)): one entry per missing frame.
    errors: SeqWindow<Missing>,
    pending: usize,
    /// The highest frame whose gap has been entered in the table.
    scanned_to: Seq,
    nak_timer: Option<Instant>,
    retry_at: Option<Instant>,
    /// When the last repair (a RETRANSMIT frame) came from the sender: a
    /// sender that is repairing lost our repair; one that is not is
    /// overloaded or gone, and our NAKs back off (`expire_requests`).
    last_repair_at: Option<Instant>,
    /// An ACK owed: up to this sequence, answering a request stamped `tstamp_us` received at `at`.
    ack_owed: Option<(Seq, u32, Instant)>,
    /// The stamp of the last data frame from the sender and when it came:
    /// a NAK echoes it (plus the time it was held), so the sender measures
    /// its round trip to this node whenever there is loss, without a
    /// round of ACKs (docs/protocol.md §3.2).
    last_stamp: Option<(u32, Instant)>,
    /// This node's place in the feedback tree ([`Endpoint::set_tree`]):
    /// its ACKs go upstream, merged with its subtree's. `None`: straight
    /// to the sender (the paper).
    feedback: Option<Feedback>,
    /// The tree neighbour asked first for what this node misses (local
    /// recovery, docs/protocol.md §3.5); `None`: every NAK to the group.
    repairer: Option<NodeId>,
    /// Frames neighbours asked us for that we miss too: each is repaired
    /// to its asker from our copy when it arrives (oldest first, bounded).
    owed: VecDeque<(Seq, NodeId)>,
    /// `pub(super)` (with `group_size` and `draw_backoff`): the tests set
    /// both and sample the NAK timer.
    pub(super) grtt: Duration,
    pub(super) group_size: u16,
    tx: VecDeque<Transmit>,
    events: VecDeque<Event>,
    counters: Counters,
}

impl MakReceiver {
    /// A receiver of `stream`.
    pub fn new(stream: StreamConfig, cfg: MakConfig) -> MakReceiver {
        let w = stream.window_frames;
        MakReceiver {
            stream,
            cfg,
            rng: rng_for(&stream),
            inorder: InOrder::new(stream.sender, stream.initial_seq, w),
            errors: SeqWindow::new(stream.initial_seq, w),
            pending: 0,
            scanned_to: stream.initial_seq.sub(1),
            nak_timer: None,
            retry_at: None,
            last_repair_at: None,
            last_stamp: None,
            ack_owed: None,
            feedback: None,
            repairer: None,
            owed: VecDeque::new(),
            grtt: cfg.initial_grtt,
            group_size: 1,
            tx: VecDeque::with_capacity(4),
            events: VecDeque::with_capacity(2 * w as usize),
            counters: Counters::default(),
        }
    }

    /// RECEIVE or WAIT (seed 000 Figure 7).
    pub fn state(&self) -> ReceiverState {
        if self.errors.is_empty() {
            ReceiverState::Receive
        } else {
            ReceiverState::Wait
        }
    }

    /// Everything before this has been delivered.
    pub fn next_expected(&self) -> Seq {
        self.inorder.next_expected()
    }

    /// Frames in the error table.
    pub fn missing_count(&self) -> usize {
        self.errors.len()
    }

    /// Draws the NAK timer (seed 000 §3.1: "a random waiting time").
    pub(super) fn draw_backoff(&mut self) -> Duration {
        match self.cfg.nak_timer {
            NakTimer::Fixed { min, max } => {
                let ns = self.rng.range(min.as_nanos() as u64, max.as_nanos() as u64);
                Duration::from_nanos(ns)
            }
            NakTimer::Adaptive { .. } => {
                let n = self.nak_group();
                let t_max = self.cfg.nak_timer.window(self.grtt, n).as_secs_f64();
                // Inverse CDF of the truncated exponential of RFC 5740 §5.5:
                // t = T/λ · ln(1 + u(e^λ − 1)), λ = ln(group size) + 1.
                let lambda = f64::from(n.max(1)).ln() + 1.0;
                let u = self.rng.unit();
                let t = t_max / lambda * (1.0 + u * (lambda.exp() - 1.0)).ln();
                Duration::from_secs_f64(t.clamp(0.0, t_max))
            }
        }
    }

    /// The group size the NAK timer's window is drawn for. A NAK to our
    /// tree neighbour (docs/protocol.md §3.5) has no other receiver's NAK
    /// to wait for: the window of a group of two, a third of a round trip
    /// with the default factor, left for frames that come late rather than
    /// lost. (The rare NAK to the group after [`NEAR_TRIES`] is drawn from
    /// it too: the few receivers that get that far seldom miss one frame
    /// together.)
    fn nak_group(&self) -> u16 {
        if self.repairer.is_some() {
            2
        } else {
            self.group_size
        }
    }

    /// How long a NAK to our tree neighbour waits for its repair: one hop
    /// each way (a round trip, at most the group's), or one more exchange
    /// when it misses the frame too and asks its own at once.
    fn near_wait(&self) -> Duration {
        self.grtt * 2
    }

    fn repair_wait(&self) -> Duration {
        self.grtt * self.cfg.repair_wait_grtts.max(1)
    }

    fn arm_nak_timer(&mut self, now: Instant) {
        if self.pending > 0 && self.nak_timer.is_none() {
            self.nak_timer = Some(now + self.draw_backoff());
        }
    }

    /// Enters every newly revealed gap up to `upto` (exclusive) in the error table.
    fn scan_gaps(&mut self, upto: Seq, state: Missing) {
        let mut seq = self.scanned_to.next().max(self.inorder.next_expected());
        while seq.before(upto) {
            if !self.inorder.has(seq)
                && self.errors.insert(seq, state).is_ok()
                && state.is_pending()
            {
                self.pending += 1;
            }
            seq = seq.next();
        }
        if upto.sub(1).after(self.scanned_to) {
            self.scanned_to = upto.sub(1);
        }
    }

    /// The sender says frames up to `seq` exist (a heartbeat or an ACK_REQ):
    /// the ones missing enter the table as pending (tail-loss detection).
    /// A position beyond the window cannot come from the sender (it never
    /// has more than a window unacknowledged), so it reveals nothing.
    fn reveal(&mut self, seq: Seq) {
        let end = self.inorder.next_expected().add(self.errors.capacity());
        if seq.before(end) {
            self.inorder.note_exists(seq);
            self.scan_gaps(seq.next(), Missing::NEW);
        }
    }

    fn forget(&mut self, seq: Seq) {
        if let Some(m) = self.errors.remove(seq) {
            if m.is_pending() {
                self.pending -= 1;
                // Repaired before our timer fired: one entry fewer in our NAK.
                self.counters.nak_entries_suppressed += 1;
            }
        }
    }

    fn sync_table_base(&mut self) {
        let base = self.inorder.next_expected();
        let mut freed_pending = 0;
        self.errors.advance_to(base, |_, m| {
            if m.is_pending() {
                freed_pending += 1;
            }
        });
        self.pending -= freed_pending;
        if self.pending == 0 {
            self.nak_timer = None;
        }
        if self.errors.is_empty() {
            self.retry_at = None;
        }
    }

    /// A request for ACKs up to `upto` (an ACK_REQ, a poll, the sender's
    /// ask): frames up to it exist, and an ACK is owed.
    fn take_request(&mut self, now: Instant, upto: Seq, tstamp_us: u32) {
        self.reveal(upto);
        self.note_request(upto, (tstamp_us, now));
        self.arm_nak_timer(now);
    }

    /// A request for ACKs up to `upto`; `stamp` is the request's stamp and
    /// when it came, which the ACK echoes (plus the time held).
    fn note_request(&mut self, upto: Seq, stamp: (u32, Instant)) {
        self.counters.ack_reqs_received += 1;
        let newer = self.ack_owed.is_none_or(|(r, _, _)| !r.after(upto));
        if newer {
            self.ack_owed = Some((upto, stamp.0, stamp.1));
        }
    }

    /// ACK state (seed 000 Figure 7 (5)): everything up to the requested
    /// frame is here. Returns true when an ACK (or a complete report of the
    /// subtree) left.
    fn maybe_ack(&mut self, now: Instant) -> bool {
        let Some((upto, tstamp_us, at)) = self.ack_owed else {
            return false;
        };
        if !self.inorder.next_expected().after(upto) {
            return false;
        }
        self.ack_owed = None;
        let own = self.inorder.next_expected();
        if self.feedback.is_some() {
            let timing = self.poll_timing();
            let f = self.feedback.as_mut().expect("checked");
            // In the tree: merged with the subtree's reports, upstream.
            return match f.own_ready(now, timing, own, upto, (tstamp_us, at)) {
                Some(report) => {
                    let up = f.up();
                    self.send_report(up, report);
                    true
                }
                None => false,
            };
        }
        self.send_direct(upto, echo(tstamp_us, at, now));
        true
    }

    /// Answers the sender's request past the tree: its own position only,
    /// straight to the sender, once it holds what was asked for.
    fn ack_direct(&mut self, now: Instant) {
        let Some((upto, tstamp_us, at)) = self.ack_owed else {
            return;
        };
        if self.inorder.next_expected().after(upto) {
            self.send_direct(upto, echo(tstamp_us, at, now));
        }
    }

    /// A plain ACK of this node's own position to the sender.
    fn send_direct(&mut self, upto: Seq, echo: u32) {
        let mut h = header_for(&self.stream, Kind::Ack);
        h.ack = self.inorder.next_expected();
        h.seq = upto;
        h.tstamp_us = echo;
        h.flags = Flags::ACK_VALID;
        self.counters.acks_sent += 1;
        self.push_tx(Transmit {
            dest: Dest::Node(self.stream.sender),
            header: h,
            body: TxBody::None,
        });
    }

    /// What the feedback tree's poll wait derives from: half the group
    /// round trip a hop, and a NAK window plus a repair wait for a member
    /// repairing a loss.
    fn poll_timing(&self) -> Timing {
        let window = self.cfg.nak_timer.window(self.grtt, self.nak_group());
        let repair = if self.repairer.is_some() {
            // Asking a neighbour: room for one lost NAK or repair on the
            // way (about 2 % of them at 1 % loss) and the ask again.
            window * 2 + self.near_wait() + self.grtt
        } else {
            window + self.grtt
        };
        Timing {
            hop: self.grtt / 2,
            repair,
        }
    }

    /// A report of the subtree to `to` (docs/protocol.md §3.4): an ACK
    /// frame whose payload lists the nodes covered, none when it covers
    /// only this node.
    fn send_report(&mut self, to: NodeId, r: Report) {
        let mut h = header_for(&self.stream, Kind::Ack);
        h.ack = r.ack;
        h.seq = r.seq;
        h.tstamp_us = r.echo;
        h.flags = Flags::ACK_VALID;
        let only_us = r.covered.len() == 1
            && r.covered.iter().next()
                == Some(&SeqRange {
                    start: Seq(self.stream.local),
                    count: 1,
                });
        let body = if only_us {
            TxBody::None
        } else {
            h.payload_len = r.covered.wire_len() as u16;
            TxBody::Ranges(Box::new(r.covered))
        };
        self.counters.acks_sent += 1;
        self.push_tx(Transmit {
            dest: Dest::Node(to),
            header: h,
            body,
        });
    }

    /// A downstream neighbour's report (an ACK frame without ACK_REQ).
    fn on_report(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        self.counters.acks_received += 1;
        let covered = match body {
            RxBody::Ranges(list) => *list,
            _ => {
                let mut l = RangeList::new();
                l.push_seq(Seq(header.src));
                l
            }
        };
        let report = Report {
            ack: header.ack,
            seq: header.seq,
            echo: header.tstamp_us,
            covered,
        };
        let own = self.inorder.next_expected();
        let t = self.poll_timing();
        let Some(f) = self.feedback.as_mut() else {
            return;
        };
        if let Some(r) = f.child_report(now, t, header.src, report, own) {
            let up = f.up();
            self.send_report(up, r);
        }
    }

    /// A poll from upstream, or the sender asking this node alone: the
    /// request counts as received, and unless that completes the report,
    /// the current one answers at once (the subtree is alive).
    fn on_poll(&mut self, now: Instant, header: &Header, upto: Seq) {
        if header.src != self.stream.sender
            && self
                .feedback
                .as_ref()
                .is_some_and(|f| f.crossed(now, upto, self.grtt))
        {
            // The parent's poll crossed the complete report on its way up.
            self.counters.ack_reqs_received += 1;
            return;
        }
        self.take_request(now, upto, header.tstamp_us);
        if self.maybe_ack(now) || header.src != self.stream.sender {
            // A parent's poll is answered by the complete report only: a
            // subtree still repairing stays silent (the parent's backoff
            // waits for it), which halves the frames polls cost.
            return;
        }
        // The sender asks its neighbour: what is known now, so that it
        // knows the neighbour is alive and asks it, not its subtree, again.
        let own = self.inorder.next_expected();
        if let Some(f) = self.feedback.as_ref() {
            let status = f.status(now, own, (header.tstamp_us, now));
            self.send_report(header.src, status);
        }
    }

    /// The poll timer: poll the silent, and report without them at last.
    fn expire_polls(&mut self, now: Instant) {
        let t = self.poll_timing();
        let own = self.inorder.next_expected();
        let Some(f) = self.feedback.as_mut() else {
            return;
        };
        let mut polled = Vec::new();
        let Some((seq, echo, partial)) = f.expire(now, t, own, &mut polled) else {
            return;
        };
        let up = f.up();
        for child in polled {
            let mut h = header_for(&self.stream, Kind::Ack);
            h.seq = seq;
            h.ack = seq;
            h.tstamp_us = echo;
            h.flags = Flags::ACK_REQ;
            self.counters.ack_reqs_sent += 1;
            self.push_tx(Transmit {
                dest: Dest::Node(child),
                header: h,
                body: TxBody::None,
            });
        }
        if let Some(p) = partial {
            self.send_report(up, p);
        }
    }

    fn push_tx(&mut self, t: Transmit) {
        // At most one ACK, a few NAKs and one NAK's relays are ever queued
        // between polls; the bound keeps a driver that never polls from
        // growing this.
        if self.tx.len() < 64 + MAX_RELAYS_PER_NAK {
            self.tx.push_back(t);
        }
    }

    /// The sender's advertised GRTT and group size, which set the NAK timer.
    fn note_sender(&mut self, header: &Header) {
        if header.grtt_ns != 0 {
            let g = Duration::from_nanos(u64::from(header.grtt_ns));
            self.grtt = g.clamp(self.cfg.grtt_min, self.cfg.grtt_max);
        }
        self.group_size = header.group_size.max(1);
    }

    fn on_data(&mut self, now: Instant, header: &Header, buf: BufId) {
        self.note_sender(header);
        self.last_stamp = Some((header.tstamp_us, now));
        if header.flags.contains(Flags::RETRANSMIT) {
            self.last_repair_at = Some(now);
        }
        self.accept_data(now, header, buf, Some((header.tstamp_us, now)));
    }

    /// A tree neighbour's repair from its copy (docs/protocol.md §3.5):
    /// taken like the sender's frame, but its header says nothing of the
    /// sender (no stamp, GRTT or group size) nor of its repair budget. The
    /// original's request for ACKs (ACK_REQ, LAST) comes along: the ACK
    /// echoes the last stamp we had from the sender, as a NAK does (§3.2).
    fn on_relay(&mut self, now: Instant, header: &Header, buf: BufId) {
        self.counters.relays_received += 1;
        self.accept_data(now, header, buf, self.last_stamp);
    }

    /// A data frame of the stream, from the sender or relayed; `stamp` is
    /// what an ACK it requests echoes (none: the request is not taken).
    fn accept_data(
        &mut self,
        now: Instant,
        header: &Header,
        buf: BufId,
        stamp: Option<(u32, Instant)>,
    ) {
        let seq = header.seq;
        let was_missing = self.errors.contains(seq);
        let accepted = self.inorder.accept(
            seq,
            buf,
            header.payload_len,
            header.flags,
            &mut self.counters,
            &mut self.events,
        );
        match accepted {
            Accepted::Duplicate | Accepted::OutOfWindow => {}
            Accepted::InOrder | Accepted::Buffered => {
                if was_missing {
                    // MODIFY-ERROR-TABLE: the repair came.
                    self.forget(seq);
                }
                if !self.owed.is_empty() {
                    self.pay_owed(seq);
                }
                self.scan_gaps(seq, Missing::NEW);
                let asks =
                    header.flags.contains(Flags::ACK_REQ) || header.flags.contains(Flags::LAST);
                if let (true, Some(stamp)) = (asks, stamp) {
                    self.note_request(seq, stamp);
                }
            }
        }
        self.sync_table_base();
        self.arm_nak_timer(now);
        self.maybe_ack(now);
    }

    /// MODIFY-ERROR-TABLE on another receiver's NAK: what it asked for is no
    /// longer ours to ask for; wait for the repair instead.
    fn on_overheard_nak(&mut self, now: Instant, ranges: &RangeList) {
        self.counters.naks_received += 1;
        let until = now + self.repair_wait();
        let end = self.inorder.next_expected().add(self.errors.capacity());
        for r in ranges.iter() {
            for i in 0..r.count.min(self.errors.capacity()) {
                let seq = r.start.add(i);
                if seq.before(self.inorder.next_expected()) {
                    continue;
                }
                if !seq.before(end) {
                    break;
                }
                if seq.after(self.scanned_to) {
                    // A frame we did not know of yet: everything up to it is missing.
                    self.inorder.note_exists(seq);
                    let state = Missing::Requested {
                        until,
                        tries: 0,
                        near: 0,
                    };
                    self.scan_gaps(seq.next(), state);
                    continue;
                }
                if let Some(m) = self.errors.get_mut(seq) {
                    if let Missing::Pending { tries, near } = *m {
                        *m = Missing::Requested { until, tries, near };
                        self.pending -= 1;
                        self.counters.nak_entries_suppressed += 1;
                    }
                }
            }
        }
        self.retry_at = earliest(self.retry_at, Some(until));
        if self.pending == 0 {
            self.nak_timer = None;
        }
    }

    /// A tree neighbour asks us for frames it misses (docs/protocol.md
    /// §3.5): each we hold is repaired from our copy at once; each we miss
    /// too is owed, repaired when it comes, and our own ask for it leaves
    /// now: to the group if the asker is whom we would ask (it misses it
    /// too), else to our repairer.
    fn on_near_nak(&mut self, now: Instant, asker: NodeId, ranges: &RangeList) {
        self.counters.near_naks_received += 1;
        let next = self.inorder.next_expected();
        let end = next.add(self.errors.capacity());
        let mut budget = MAX_RELAYS_PER_NAK;
        let mut ask = false;
        let asking_back = self.repairer == Some(asker);
        for r in ranges.iter() {
            for i in 0..r.count.min(self.errors.capacity()) {
                let seq = r.start.add(i);
                if !seq.before(end) || budget == 0 {
                    break;
                }
                budget -= 1;
                if seq.before(next) || self.inorder.has(seq) {
                    self.relay(asker, seq);
                    continue;
                }
                if !self.owed.contains(&(seq, asker)) {
                    if self.owed.len() >= MAX_OWED {
                        self.owed.pop_front();
                    }
                    self.owed.push_back((seq, asker));
                }
                if seq.after(self.scanned_to) {
                    self.inorder.note_exists(seq);
                    self.scan_gaps(seq.next(), Missing::NEW);
                }
                if let Some(Missing::Pending { near, .. }) = self.errors.get_mut(seq) {
                    if asking_back {
                        // Whom we would ask misses it too: the group.
                        *near = NEAR_TRIES;
                    }
                    ask = true;
                }
            }
        }
        if ask {
            // Our own ask leaves now: someone is waiting on us.
            self.nak_timer = Some(now);
        }
    }

    /// Repairs frame `seq` to `to` from the driver's copy of it.
    fn relay(&mut self, to: NodeId, seq: Seq) {
        let mut h = header_for(&self.stream, Kind::Data);
        h.seq = seq;
        h.flags = Flags::RETRANSMIT.with(Flags::NEAR);
        self.counters.relays_sent += 1;
        self.push_tx(Transmit {
            dest: Dest::Node(to),
            header: h,
            body: TxBody::Relay(seq),
        });
    }

    /// Frame `seq` came: the neighbours that asked us for it get it.
    fn pay_owed(&mut self, seq: Seq) {
        let mut i = 0;
        while i < self.owed.len() {
            if self.owed[i].0 == seq {
                let (_, to) = self.owed.remove(i).expect("in range");
                self.relay(to, seq);
            } else {
                i += 1;
            }
        }
    }

    /// NAK state: the timer fired; ask for what is still pending. In a
    /// feedback tree, what our repairer has not been asked for yet goes to
    /// it alone (docs/protocol.md §3.5); the rest is multicast to the group.
    fn fire_nak(&mut self, now: Instant) {
        self.nak_timer = None;
        let mut near = RangeList::new();
        let mut group = RangeList::new();
        let wait = self.repair_wait();
        let near_wait = self.near_wait();
        let mut retry_at = None;
        let limit = self.cfg.max_nak_ranges.clamp(1, MAX_NAK_RANGES);
        let repairer = self.repairer;
        let base = self.errors.base();
        for i in 0..self.errors.capacity() {
            let seq = base.add(i);
            let Some(m) = self.errors.get_mut(seq) else {
                continue;
            };
            let Missing::Pending { tries, near: asked } = *m else {
                continue;
            };
            let to_near = repairer.is_some() && asked < NEAR_TRIES;
            let list = if to_near { &mut near } else { &mut group };
            let extends = list.iter().last().is_some_and(|r| r.end() == seq);
            if !extends && list.len() >= limit {
                // Entries beyond one NAK's capacity wait for another draw.
                continue;
            }
            list.push_seq(seq);
            let until = if to_near {
                now + near_wait
            } else {
                // Each NAK of ours the sender left unanswered (no repair at
                // all since: `expire_requests`) doubles the wait for its
                // repair (up to 16 times): a sender short of repair budget
                // is not met by a storm.
                now + wait * (1u32 << tries.min(4))
            };
            *m = Missing::Requested {
                until,
                tries: if to_near {
                    tries
                } else {
                    tries.saturating_add(1)
                },
                near: asked.saturating_add(u8::from(to_near)),
            };
            retry_at = earliest(retry_at, Some(until));
            self.pending -= 1;
        }
        if near.is_empty() && group.is_empty() {
            self.counters.naks_suppressed += 1;
        } else {
            self.retry_at = earliest(self.retry_at, retry_at);
        }
        if let (Some(to), false) = (repairer, near.is_empty()) {
            self.counters.near_naks_sent += 1;
            let mut h = self.nak_header(now, &near);
            h.flags = h.flags.with(Flags::NEAR);
            self.push_tx(Transmit {
                dest: Dest::Node(to),
                header: h,
                body: TxBody::Ranges(Box::new(near)),
            });
        }
        if !group.is_empty() {
            self.counters.naks_sent += 1;
            let h = self.nak_header(now, &group);
            self.push_tx(Transmit {
                dest: Dest::Group,
                header: h,
                body: TxBody::Ranges(Box::new(group)),
            });
        }
        self.arm_nak_timer(now);
    }

    /// A NAK's header for `list`: our position, and the echo of the last
    /// data frame's stamp (the sender's round-trip sample, §3.2).
    fn nak_header(&self, now: Instant, list: &RangeList) -> Header {
        let mut h = header_for(&self.stream, Kind::Nak);
        h.seq = self.inorder.next_expected();
        h.ack = self.inorder.next_expected();
        if let Some((stamp, at)) = self.last_stamp {
            h.tstamp_us = echo(stamp, at, now);
            h.flags = Flags::ACK_VALID;
        }
        h.payload_len = list.wire_len() as u16;
        h
    }

    /// Requested entries whose repair did not come in time are pending again.
    /// If the sender sent a repair within the last repair wait, it is
    /// answering NAKs and this entry's repair (or our NAK) was lost on the
    /// way: the entry starts over at one wait. Otherwise the sender is short
    /// of repair budget or gone, and the entry keeps its count, so each NAK
    /// of ours for it waits twice as long as the one before.
    fn expire_requests(&mut self, now: Instant) {
        self.retry_at = None;
        let answering = self
            .last_repair_at
            .is_some_and(|t| now.saturating_duration_since(t) < self.repair_wait());
        let base = self.errors.base();
        let mut next: Option<Instant> = None;
        for i in 0..self.errors.capacity() {
            let seq = base.add(i);
            let Some(m) = self.errors.get_mut(seq) else {
                continue;
            };
            if let Missing::Requested { until, tries, near } = *m {
                if until <= now {
                    let tries = if answering { 0 } else { tries };
                    *m = Missing::Pending { tries, near };
                    self.pending += 1;
                    self.counters.timeouts += 1;
                } else {
                    next = earliest(next, Some(until));
                }
            }
        }
        self.retry_at = next;
        self.arm_nak_timer(now);
    }
}

impl Endpoint for MakReceiver {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        if header.epoch != self.stream.epoch {
            self.counters.wrong_epoch_dropped += 1;
            if let RxBody::Data(buf) = body {
                self.events.push_back(Event::Release(buf));
            }
            return;
        }
        match (header.kind, body) {
            (Kind::Data, RxBody::Data(buf)) if header.src == self.stream.sender => {
                self.on_data(now, header, buf)
            }
            (Kind::Data, RxBody::Data(buf))
                if header.flags.contains(Flags::NEAR)
                    && header.peer == self.stream.sender
                    && header.src != self.stream.local =>
            {
                self.on_relay(now, header, buf)
            }
            (Kind::Nak, RxBody::Ranges(ranges))
                if header.flags.contains(Flags::NEAR) && header.src != self.stream.local =>
            {
                self.on_near_nak(now, header.src, ranges)
            }
            (Kind::Nak, RxBody::Ranges(ranges)) if header.src != self.stream.local => {
                self.on_overheard_nak(now, ranges)
            }
            (Kind::Heartbeat, _) if header.src == self.stream.sender => {
                // The idle sender's position: frames up to `seq` exist. A
                // lost tail becomes a gap, NAKed like any other; no ACK.
                self.counters.adverts_received += 1;
                self.note_sender(header);
                self.reveal(header.seq);
                self.arm_nak_timer(now);
            }
            (Kind::AckReq, _)
                if header.src == self.stream.sender
                    && header.peer == self.stream.local
                    && self.feedback.as_ref().is_some_and(|f| f.up() == header.src) =>
            {
                // The sender asks its tree neighbour: the subtree's report
                // did not come.
                self.on_poll(now, header, header.ack)
            }
            (Kind::AckReq, _)
                if header.src == self.stream.sender
                    && header.peer == self.stream.local
                    && self.feedback.is_some() =>
            {
                // The sender asks this member past the tree (the way up
                // was silent): it answers for itself, straight back.
                self.take_request(now, header.ack, header.tstamp_us);
                self.ack_direct(now);
            }
            (Kind::AckReq, _) if header.src == self.stream.sender => {
                // The sender's timer resend: a frame up to `ack` exists.
                self.take_request(now, header.ack, header.tstamp_us);
                self.maybe_ack(now);
            }
            (Kind::Ack, _) if header.flags.contains(Flags::ACK_REQ) => {
                if self.feedback.as_ref().is_some_and(|f| f.up() == header.src) {
                    self.on_poll(now, header, header.seq)
                } else {
                    self.counters.rejected += 1;
                }
            }
            (Kind::Ack, _)
                if self
                    .feedback
                    .as_ref()
                    .is_some_and(|f| f.is_down(header.src)) =>
            {
                self.on_report(now, header, body)
            }
            (_, RxBody::Data(buf)) => {
                self.counters.rejected += 1;
                self.events.push_back(Event::Release(buf));
            }
            _ => self.counters.rejected += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.retry_at.is_some_and(|t| t <= now) {
            self.expire_requests(now);
        }
        if self.nak_timer.is_some_and(|t| t <= now) {
            self.fire_nak(now);
        }
        if self
            .feedback
            .as_ref()
            .and_then(Feedback::deadline)
            .is_some_and(|t| t <= now)
        {
            self.expire_polls(now);
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.tx.pop_front()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let polls = self.feedback.as_ref().and_then(Feedback::deadline);
        earliest(earliest(self.nak_timer, self.retry_at), polls)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.inorder.held()
    }

    fn next_expected(&self) -> Option<Seq> {
        Some(self.inorder.next_expected())
    }

    fn release_all(&mut self) {
        self.inorder.release_all(&mut self.events);
    }

    fn set_tree(&mut self, tree: Option<&FeedbackTree>) {
        // The round in flight starts again with the new neighbours, whose
        // reports come with the next request (or the sender's ask).
        let none = self.stream.initial_seq.sub(1);
        self.feedback =
            tree.and_then(|t| Feedback::new(t, self.stream.sender, self.stream.local, none));
        // Local recovery asks the neighbour toward the sender, or, next to
        // the sender (which would hear every loss again), a downstream one.
        self.repairer = match &self.feedback {
            Some(f) if self.cfg.near_repairs => {
                if f.up() != self.stream.sender {
                    Some(f.up())
                } else {
                    f.first_down()
                }
            }
            _ => None,
        };
    }

    fn keeps_copies(&self) -> bool {
        self.feedback.is_some() && self.cfg.near_repairs
    }
}
