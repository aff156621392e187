//! The MAK sender (seed 000 §3.2, Figure 6): its buffer of unacknowledged
//! frames, the member set and each member's progress and round trip, ACK
//! requests and the ACK-wait timer, the idle sender's position
//! advertisements and idle ACK round ([`TailPolicy`]), the repair queue and
//! its token budget.
//!
//! Owns: [`MakSender`], [`SenderState`] and the sender's private state
//! (`Slot`, `Member`). May not touch: the receiver (`super::receiver`); it
//! reads only the shared [`MakConfig`] and [`NakTimer`] of `super`, and
//! speaks to receivers only through the frames it returns.

use std::collections::VecDeque;

use super::feedback::id_range;
use super::{MakConfig, TailPolicy};
use crate::api::header_for;
use crate::rtt::{backed_off, echo_rtt, RttEstimator};
use crate::time::earliest;
use crate::window::SeqWindow;
use crate::{
    BufId, Counters, Dest, Duration, Endpoint, Event, FeedbackTree, Instant, OutFrame, RxBody,
    SendError, Sender, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq};

/// ACK-wait expiries a member stays silent through, its tree neighbour
/// answering, before the sender asks the member itself (docs/protocol.md
/// §3.4, "The sender").
const ASK_DIRECT_AFTER: u32 = 3;

/// The sender's states (seed 000 Figure 6). RESEND is passed through, never
/// rested in: a resend is queued and the sender returns to its previous state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderState {
    /// The buffer has room: new frames go out.
    Send,
    /// The buffer is full: waiting for every member's ACK, with the timer running.
    Wait,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    buf: BufId,
    len: u16,
    /// Flags of the original transmission (fragment bits, LAST, ACK_REQ).
    flags: Flags,
    /// When this frame was last repaired, for the hold-off.
    repaired_at: Option<Instant>,
    /// Queued in `repairs` already.
    repair_queued: bool,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    node: NodeId,
    /// Cumulative: the member holds everything before this.
    acked: Seq,
    /// Its round trip, from the echoes in its ACKs.
    rtt: RttEstimator,
    /// ACK-wait expiries in a row that found it not having acknowledged
    /// the request (reset by any ACK from it): [`Sender::unresponsive`].
    unanswered: u32,
    /// When it joined the stream, or opened it again, on this sender's
    /// clock (microseconds, as ACK echoes carry it): an ACK echoing an
    /// earlier time was sent by the receive stream it had before, and
    /// counts for nothing (it could free frames the new stream lacks).
    /// `None` for the members the stream was opened with.
    since_us: Option<u32>,
    /// When an ACK last credited it (its own or a report covering it).
    heard_at: Option<Instant>,
}

impl Member {
    /// Whether feedback with an echo (flag ACK_VALID) was sent by this
    /// member's current receive stream: its echo is at or after the
    /// (re)join, in wrapping time order.
    fn echoes_since_join(&self, header: &Header) -> bool {
        header.flags.contains(Flags::ACK_VALID)
            && self
                .since_us
                .is_none_or(|since| header.tstamp_us.wrapping_sub(since) < 1 << 31)
    }
}

/// The idle sender while frames are unacknowledged
/// ([`TailPolicy::Advertise`]): when its last new frame left, and the
/// heartbeats sent since. Its deadlines derive from these and the GRTT
/// (`MakSender::tail_deadlines`), so a frame leaving costs one store.
#[derive(Debug, Clone, Copy)]
struct Tail {
    since: Instant,
    adverts: u32,
}

/// The MAK sender.
#[derive(Debug)]
pub struct MakSender {
    /// `pub(super)`: the tests read its initial sequence.
    pub(super) stream: StreamConfig,
    cfg: MakConfig,
    /// Unacknowledged frames from the lowest not ACKed by every member.
    buffer: SeqWindow<Slot>,
    next_seq: Seq,
    members: Vec<Member>,
    /// The highest sequence an ACK was requested for, and whether every member has answered.
    ack_request: Option<Seq>,
    last_request_seq: Seq,
    /// The highest request that has left (a frame flagged ACK_REQ or an
    /// ACK_REQ frame).
    request_sent: Option<Seq>,
    /// The ACK-wait deadline and the request it runs for: the oldest one
    /// left while the timer was idle, or the newest when the slowest member
    /// last made progress (`request_left`, `release_acknowledged`). Members
    /// that have not acknowledged that request when it expires have not
    /// answered.
    ack_timer: Option<(Instant, Seq)>,
    /// Expiries since the last ACK with a round-trip sample.
    ack_backoff: u32,
    /// New frames not yet transmitted, in order.
    fresh: VecDeque<Seq>,
    /// When the last new frame left, and the gap before it: a round-trip
    /// sample shorter than that gap may bring the GRTT down fast
    /// ([`RttEstimator::sample_paced`]).
    last_original_at: Option<Instant>,
    send_gap: Duration,
    /// Frames to repair, in the order NAKed.
    repairs: VecDeque<Seq>,
    /// A timer resend is due: the last frame again, then an ACK_REQ.
    resend_due: bool,
    ack_req_due: bool,
    /// Members to ask again one by one (unicast ACK_REQ) after the timer
    /// expired without their answer, when they are at most half the group,
    /// and the request they did not answer (the timer runs for it again).
    ask: VecDeque<NodeId>,
    ask_seq: Seq,
    /// The feedback tree ([`Endpoint::set_tree`]): reports of subtrees
    /// come from the sender's neighbours in it.
    tree: Option<FeedbackTree>,
    /// The request the sender last asked tree neighbours about, and when:
    /// at the next expiry for the same request, a neighbour not heard from
    /// since is silent, and the members behind it are asked themselves.
    asked: Option<(Seq, Instant)>,
    /// Levels of the tree below the sender: each adds a hop to a round.
    tree_levels: u32,
    /// Idle with frames unacknowledged: heartbeats and the idle ACK round
    /// are scheduled ([`TailPolicy::Advertise`]; `None` under the paper's).
    tail: Option<Tail>,
    advert_due: bool,
    tokens: f64,
    tokens_at: Instant,
    deferred: bool,
    /// The group round trip: the largest member's smoothed round trip.
    grtt: Duration,
    /// The slowest member's timeout, before the NAK window and the backoff.
    members_rto: Duration,
    events: VecDeque<Event>,
    counters: Counters,
}

impl MakSender {
    /// A sender for `stream` whose ACK set is `members`.
    pub fn new(stream: StreamConfig, cfg: MakConfig, members: &[NodeId]) -> MakSender {
        let w = stream.window_frames;
        let mut s = MakSender {
            stream,
            cfg,
            buffer: SeqWindow::new(stream.initial_seq, w),
            next_seq: stream.initial_seq,
            members: Vec::new(),
            ack_request: None,
            last_request_seq: stream.initial_seq.sub(1),
            request_sent: None,
            ack_timer: None,
            ack_backoff: 0,
            fresh: VecDeque::with_capacity(w as usize),
            last_original_at: None,
            send_gap: Duration::ZERO,
            repairs: VecDeque::with_capacity(w as usize),
            resend_due: false,
            ack_req_due: false,
            ask: VecDeque::new(),
            ask_seq: stream.initial_seq,
            tree: None,
            asked: None,
            tree_levels: 0,
            tail: None,
            advert_due: false,
            tokens: f64::from(cfg.retransmit_burst.min(w)),
            tokens_at: Instant::ZERO,
            deferred: false,
            grtt: cfg.initial_grtt,
            members_rto: cfg.ack_wait.initial,
            events: VecDeque::with_capacity(2 * w as usize),
            counters: Counters::default(),
        };
        s.install_members(None, members);
        s
    }

    /// How long the sender now waits for every ACK of a request: the slowest
    /// member's timeout plus the receivers' NAK window (a receiver that lost a
    /// frame before the request answers only once its NAK was repaired),
    /// within the bounds, doubled per expiry without any ACK since.
    pub fn ack_wait(&self) -> Duration {
        let cfg = &self.cfg.ack_wait;
        let nak = self.cfg.nak_timer.window(self.grtt, self.group_size());
        // Through the feedback tree, the reports climb one hop a level
        // (each sample is the round trip to a neighbour only).
        let tree = self.grtt / 2 * self.tree_levels;
        let base = (self.members_rto + nak + tree).clamp(cfg.min, cfg.max.max(cfg.min));
        backed_off(base, self.ack_backoff, cfg)
    }

    /// Recomputes the group round trip and the slowest member's timeout.
    fn refresh_estimates(&mut self) {
        let cfg = &self.cfg;
        self.grtt = self
            .members
            .iter()
            .filter_map(|m| m.rtt.srtt())
            .max()
            .map_or(cfg.initial_grtt, |g| g.clamp(cfg.grtt_min, cfg.grtt_max));
        self.members_rto = self
            .members
            .iter()
            .map(|m| m.rtt.base_rto(&cfg.ack_wait))
            .max()
            .unwrap_or(cfg.ack_wait.initial);
    }

    /// SEND or WAIT (seed 000 Figure 6).
    pub fn state(&self) -> SenderState {
        if self.window_full() {
            SenderState::Wait
        } else {
            SenderState::Send
        }
    }

    /// The current group round-trip estimate.
    pub fn grtt(&self) -> Duration {
        self.grtt
    }

    /// The current members, in node order.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().map(|m| m.node)
    }

    fn is_member(&self, node: NodeId) -> bool {
        self.members.binary_search_by_key(&node, |m| m.node).is_ok()
    }

    fn window_full(&self) -> bool {
        self.next_seq.distance(self.buffer.base()) as u32 >= self.buffer.capacity()
    }

    fn request_interval(&self) -> u32 {
        let w = self.buffer.capacity();
        match self.cfg.ack_watermark_percent {
            0 => w,
            p => (w * u32::from(p.min(100)) / 100).max(1),
        }
    }

    fn install_members(&mut self, now: Option<Instant>, members: &[NodeId]) {
        let mut next: Vec<Member> = members
            .iter()
            .filter(|&&n| n != self.stream.local && n != 0)
            .map(|&node| {
                // A member that was there keeps its progress and its round
                // trip; a new one joins at the oldest frame still held (the
                // join point) and owes everything from there.
                let known = self.members.iter().find(|m| m.node == node);
                Member {
                    node,
                    acked: known.map_or(self.buffer.base(), |m| m.acked),
                    rtt: known.map_or(RttEstimator::new(), |m| m.rtt),
                    unanswered: known.map_or(0, |m| m.unanswered),
                    since_us: match known {
                        Some(m) => m.since_us,
                        None => now.map(Instant::as_micros_u32),
                    },
                    heard_at: known.and_then(|m| m.heard_at),
                }
            })
            .collect();
        next.sort_by_key(|m| m.node);
        next.dedup_by_key(|m| m.node);
        self.members = next;
        self.refresh_estimates();
    }

    fn group_size(&self) -> u16 {
        u16::try_from(self.members.len()).unwrap_or(u16::MAX)
    }

    /// Frees every frame all members have acknowledged; settles the request.
    fn release_acknowledged(&mut self, now: Instant) {
        let floor = self
            .members
            .iter()
            .map(|m| m.acked)
            .reduce(Seq::min)
            .unwrap_or(self.next_seq);
        // No member can have acknowledged past what was sent.
        let floor = if floor.after(self.next_seq) {
            self.next_seq
        } else {
            floor
        };
        let events = &mut self.events;
        self.buffer
            .advance_to(floor, |_, slot| events.push_back(Event::Release(slot.buf)));
        if self.ack_request.is_some_and(|r| floor.after(r)) {
            self.ack_request = None;
        }
        if self.request_sent.is_some_and(|r| floor.after(r)) {
            // Every member answered: the timer stops and its backoff ends.
            self.request_sent = None;
            self.ack_timer = None;
            self.ack_backoff = 0;
        } else if self.ack_timer.is_some_and(|(_, r)| floor.after(r)) {
            // Every member answered the timed request, not yet the newest:
            // the slowest made progress, so the timer starts again, for the
            // newest. A member that stops answering is noticed one wait after
            // its last progress however often requests leave.
            self.ack_timer = self.request_sent.map(|r| (now + self.ack_wait(), r));
        }
        while self.repairs.front().is_some_and(|s| s.before(floor)) {
            self.repairs.pop_front();
        }
        if self.buffer.is_empty() {
            // Every member holds everything sent: nothing to advertise.
            self.tail = None;
            self.advert_due = false;
        }
    }

    /// The idle sender's next heartbeat and its idle ACK round: heartbeat k
    /// (from 0) at `first · g · (2^(k+1) − 1)` after the last new frame
    /// (2, 6, 14… GRTTs with the default: each wait twice the one before),
    /// the round at `clamp(idle_ack_grtts · g, min, max)`.
    fn tail_deadlines(&self) -> Option<(Instant, Instant)> {
        let tail = self.tail?;
        let TailPolicy::Advertise {
            first_grtts,
            idle_ack_grtts,
            idle_ack_min,
            idle_ack_max,
        } = self.cfg.tail
        else {
            return None;
        };
        let waits = (1u32 << (tail.adverts + 1).min(31)) - 1;
        let advert = tail.since + self.grtt * first_grtts.max(1) * waits;
        let idle_ack =
            (self.grtt * idle_ack_grtts).clamp(idle_ack_min, idle_ack_max.max(idle_ack_min));
        Some((advert, tail.since + idle_ack))
    }

    /// The idle sender's deadlines: a heartbeat, then after twice the wait
    /// another, until the idle ACK round, unless a request naming the
    /// highest frame sent is being waited for already (its timer resends).
    fn tail_timeout(&mut self, now: Instant) {
        let Some((advert_at, ack_at)) = self.tail_deadlines() else {
            return;
        };
        let Some(highest) = self.highest_sent() else {
            // Everything sent is acknowledged; what is held has not left
            // yet, and its departure schedules the tail again.
            self.tail = None;
            return;
        };
        if ack_at <= now {
            self.tail = None;
            let covered =
                self.ack_timer.is_some() && self.request_sent.is_some_and(|r| !highest.after(r));
            self.ack_req_due |= !covered;
        } else if advert_at <= now {
            if let Some(t) = self.tail.as_mut() {
                t.adverts += 1;
            }
            self.advert_due = true;
        }
    }

    fn refill_tokens(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.tokens_at);
        self.tokens_at = now;
        self.tokens = (self.tokens
            + elapsed.as_secs_f64() * f64::from(self.cfg.retransmit_floor_per_sec))
        .min(f64::from(self.cfg.retransmit_burst).max(self.tokens));
    }

    fn budget_enabled(&self) -> bool {
        self.cfg.retransmit_share > 0.0 && self.cfg.retransmit_share < 1.0
    }

    /// The most tokens originals can bank: the larger of the burst and the window.
    fn token_cap(&self) -> f64 {
        f64::from(self.cfg.retransmit_burst.max(self.buffer.capacity()))
    }

    /// Tokens an original frame earns: repairs / (repairs + originals) <= share.
    fn tokens_per_original(&self) -> f64 {
        let share = self.cfg.retransmit_share;
        share / (1.0 - share)
    }

    fn data_header(&self, now: Instant, seq: Seq, flags: Flags, len: u16) -> Header {
        let mut h = header_for(&self.stream, Kind::Data);
        h.seq = seq;
        h.flags = flags;
        h.payload_len = len;
        h.tstamp_us = now.as_micros_u32();
        h.grtt_ns = u32::try_from(self.grtt.as_nanos()).unwrap_or(u32::MAX);
        h.group_size = self.group_size();
        h
    }

    /// A header-only frame naming `seq` (`seq` and `ack`): an ACK_REQ or a
    /// heartbeat, to the group or one member.
    fn control(&self, now: Instant, kind: Kind, seq: Seq, dest: Dest) -> Transmit {
        let mut h = self.data_header(now, seq, Flags::NONE, 0);
        h.kind = kind;
        h.ack = seq;
        if let Dest::Node(n) = dest {
            h.peer = n;
        }
        Transmit {
            dest,
            header: h,
            body: TxBody::None,
        }
    }

    fn data_transmit(
        &self,
        now: Instant,
        seq: Seq,
        extra: Flags,
        strip: Flags,
    ) -> Option<Transmit> {
        let slot = self.buffer.get(seq)?;
        let flags = slot.flags.without(strip).with(extra);
        Some(Transmit {
            dest: Dest::Group,
            header: self.data_header(now, seq, flags, slot.len),
            body: TxBody::Buf(slot.buf),
        })
    }

    /// The first frame accepted by `send` but not yet on the wire: frames wait
    /// in `fresh` while the driver cannot take them (its TX ring is full).
    fn first_unsent(&self) -> Seq {
        self.fresh.front().copied().unwrap_or(self.next_seq)
    }

    /// The highest frame actually transmitted and still held. Only it may be
    /// resent or named in an ACK_REQ: naming a frame still queued here would
    /// make every receiver NAK frames that are merely not sent yet.
    fn highest_sent(&self) -> Option<Seq> {
        let limit = self.first_unsent();
        limit.after(self.buffer.base()).then(|| limit.sub(1))
    }

    /// A request for ACKs up to `seq` has just left. An idle ACK-wait timer
    /// starts now, for it; a running one is not pushed back by newer
    /// requests (a sender that asks every 64 frames would otherwise never
    /// notice a member that stopped answering before its window filled).
    fn request_left(&mut self, now: Instant, seq: Seq) {
        if self.request_sent.is_none_or(|r| seq.after(r)) {
            self.request_sent = Some(seq);
        }
        if self.ack_timer.is_none() {
            self.ack_timer = Some((now + self.ack_wait(), seq));
        }
    }

    /// An ACK: from one member, or a report of a subtree of the feedback
    /// tree naming the members it covers (docs/protocol.md §3.4). Each
    /// covered member holds everything before `ack`.
    fn handle_ack(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        self.counters.acks_received += 1;
        if header.flags.contains(Flags::ACK_REQ) {
            // A poll travels away from the sender, never to it.
            self.counters.rejected += 1;
            return;
        }
        let ack = header.ack;
        if ack.after(self.next_seq) {
            self.counters.rejected += 1;
            return;
        }
        let rtt = if header.flags.contains(Flags::ACK_VALID) {
            echo_rtt(now, header.tstamp_us)
        } else {
            None
        };
        let mut credited = false;
        let mut sampled = false;
        match body {
            RxBody::Ranges(_) if !self.is_member(header.src) => {
                // Only a member's report may speak for others.
                self.counters.rejected += 1;
            }
            RxBody::Ranges(covered) => {
                for r in covered.iter() {
                    let (first, end) = id_range(r);
                    // Only members can be credited: walk the members in the
                    // range, not the range (a forged one may be huge).
                    let from = self.members.partition_point(|m| u64::from(m.node) < first);
                    let to = self.members.partition_point(|m| u64::from(m.node) < end);
                    for i in from..to {
                        match self.credit(now, i, header, ack, rtt) {
                            Some(s) => {
                                credited = true;
                                sampled |= s;
                            }
                            None => self.counters.acks_stale += 1,
                        }
                    }
                }
            }
            _ => match self.members.binary_search_by_key(&header.src, |m| m.node) {
                Ok(i) => match self.credit(now, i, header, ack, rtt) {
                    Some(s) => {
                        credited = true;
                        sampled = s;
                    }
                    None => self.counters.acks_stale += 1,
                },
                Err(_) => self.counters.rejected += 1,
            },
        }
        if sampled {
            self.refresh_estimates();
            // A member answers within the link's round trip: the wait is
            // the estimate's again. The backoff is for a timer shorter
            // than the link (no answer at all), not for members still
            // repairing gaps or whose ACKs were lost.
            self.ack_backoff = 0;
        }
        if credited {
            self.release_acknowledged(now);
        }
    }

    /// Credits member `i` with `ack` and the round-trip sample; `None` when
    /// the ACK was sent by the receive stream the member had before it
    /// (re)joined, else whether a sample was taken.
    fn credit(
        &mut self,
        now: Instant,
        i: usize,
        header: &Header,
        ack: Seq,
        rtt: Option<Duration>,
    ) -> Option<bool> {
        let m = &mut self.members[i];
        if m.since_us.is_some() && !m.echoes_since_join(header) {
            return None;
        }
        // The ACK echoes the request's timestamp, adjusted by the time the
        // receiver held it: the difference is the network round trip
        // (through the tree, for a report).
        if let Some(rtt) = rtt {
            m.rtt.sample_paced(rtt, self.send_gap);
        }
        m.unanswered = 0;
        m.heard_at = Some(now);
        if ack.after(m.acked) {
            m.acked = ack;
        }
        Some(rtt.is_some())
    }

    /// With a feedback tree, whom to ask about the members silent on
    /// `timed`: the tree neighbour each reports through, if it answered
    /// since it was last asked (it is alive: a report was lost or its
    /// subtree is repairing), else the member itself. Returns false without
    /// a tree (the caller asks as the paper's sender does).
    fn ask_through_tree(&mut self, now: Instant, timed: Seq) -> bool {
        let Some(tree) = self.tree.as_ref() else {
            return false;
        };
        let local = self.stream.local;
        let asked_at = self.asked.filter(|&(r, _)| r == timed).map(|(_, at)| at);
        let heard_since = |m: &Member| match (asked_at, m.heard_at) {
            (None, _) => true,
            (Some(asked), Some(heard)) => heard >= asked,
            (Some(_), None) => false,
        };
        let mut ask: Vec<NodeId> = Vec::new();
        for m in self.members.iter().filter(|m| !m.acked.after(timed)) {
            let hop = tree.upstream(m.node, local).unwrap_or(m.node);
            let alive = self
                .members
                .binary_search_by_key(&hop, |x| x.node)
                .is_ok_and(|i| heard_since(&self.members[i]));
            // A silent neighbour is asked again too, so the tree recovers.
            ask.push(hop);
            // A member still silent after its neighbour answered for it
            // [`ASK_DIRECT_AFTER`] times is asked itself: the neighbour
            // may have merged a report made for an older tree, whose
            // subtree did not hold the member (a re-parenting in flight).
            if !alive || m.unanswered >= ASK_DIRECT_AFTER {
                ask.push(m.node);
            }
        }
        ask.sort_unstable();
        ask.dedup();
        self.asked = Some((timed, now));
        self.ask.clear();
        self.ask_seq = timed;
        self.ask.extend(ask);
        true
    }

    /// A NAK echoing the stamp of the last data frame its member had (flag
    /// ACK_VALID): a round-trip sample of that member, as an ACK's is. The
    /// estimate then follows the path while frames are lost, when the NAK
    /// timers and repair waits derived from it matter, even if no ACK
    /// round has run since the load changed.
    fn nak_sample(&mut self, now: Instant, header: &Header) {
        let Ok(i) = self.members.binary_search_by_key(&header.src, |m| m.node) else {
            return;
        };
        let m = &mut self.members[i];
        if !m.echoes_since_join(header) {
            return;
        }
        if let Some(rtt) = echo_rtt(now, header.tstamp_us) {
            m.rtt.sample_paced(rtt, self.send_gap);
            self.counters.nak_rtt_samples += 1;
            self.refresh_estimates();
        }
    }

    fn handle_nak(&mut self, now: Instant, ranges: &RangeList) {
        self.counters.naks_received += 1;
        let holdoff = self.grtt * self.cfg.repair_holdoff_grtts;
        for r in ranges.iter() {
            for i in 0..r.count.min(self.buffer.capacity()) {
                let seq = r.start.add(i);
                if !seq.before(self.first_unsent()) {
                    self.counters.rejected += 1;
                    break;
                }
                let Some(slot) = self.buffer.get_mut(seq) else {
                    // Acknowledged by every member already: only a non-member can miss it.
                    self.counters.naks_unrepairable += 1;
                    continue;
                };
                if slot.repair_queued
                    || slot
                        .repaired_at
                        .is_some_and(|t| now.saturating_duration_since(t) < holdoff)
                {
                    self.counters.repairs_suppressed += 1;
                    continue;
                }
                slot.repair_queued = true;
                self.repairs.push_back(seq);
            }
        }
    }
}

impl Endpoint for MakSender {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        if header.epoch != self.stream.epoch {
            self.counters.wrong_epoch_dropped += 1;
            return;
        }
        match (header.kind, body) {
            (Kind::Ack, body) => self.handle_ack(now, header, body),
            (Kind::Nak, RxBody::Ranges(ranges)) => {
                self.nak_sample(now, header);
                self.handle_nak(now, ranges);
            }
            (_, RxBody::Data(buf)) => {
                self.counters.rejected += 1;
                self.events.push_back(Event::Release(buf));
            }
            _ => self.counters.rejected += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        // The budget's deadline: bank the tokens now, so that the next deadline
        // is in the future even if the driver cannot take frames yet (its TX
        // ring is full) and does not call poll_transmit.
        if !self.repairs.is_empty() && self.budget_enabled() {
            self.refill_tokens(now);
        }
        self.tail_timeout(now);
        if let Some((_, timed)) = self.ack_timer.filter(|&(t, _)| t <= now) {
            // WAIT -> RESEND: the timer expired without every ACK. Resend the
            // last frame (a receiver that lost the tail now sees the gap) and
            // ask again (seed 000 §3.1, Figure 6). The timer restarts, twice
            // as long, when that request leaves.
            self.counters.timeouts += 1;
            self.ack_timer = None;
            let mut silent = 0;
            for m in self.members.iter_mut().filter(|m| !m.acked.after(timed)) {
                m.unanswered = m.unanswered.saturating_add(1);
                silent += 1;
            }
            // The wait doubles while nothing comes back (a timer shorter
            // than the link, a partition): when every member left the
            // request unanswered. Members that answered it show the link
            // works; the silent ones are asked again at the same wait, so
            // one that died is reported after as many waits as before
            // (they are no longer asked with the others, whose answers
            // used to end the backoff).
            if silent == self.members.len() {
                self.ack_backoff = self.ack_backoff.saturating_add(1);
            }
            if self.highest_sent().is_some() {
                self.resend_due = true;
                // Ask again only who has not answered: a multicast request
                // has every member ACK again, which at 512 receivers and 1 %
                // loss (some ACK of a round is nearly always lost) made
                // every round two. One unicast request per silent member
                // while they are at most half the group and the window is
                // not full. It names the highest frame sent, so they report
                // all they hold, but the timer runs again for the request
                // they did not answer: the others were never asked for a
                // newer one. A full window asks everybody: the sender is
                // stalled, and every member's newest position may open it
                // (in saturation under loss, the unicast-only rule cost up
                // to 20 % of the throughput).
                if silent > 0 && !self.window_full() && self.ask_through_tree(now, timed) {
                    // In the tree, a report was lost or a subtree is slow:
                    // the neighbours it comes through answer at once with
                    // what they have and poll their own subtree. With the
                    // window full, the multicast below has every node report
                    // again: the stalled sender needs every lost report
                    // replaced now (asking only the neighbours left it 30 %
                    // slower at 512 receivers and 1 % loss).
                } else if silent > 0 && 2 * silent <= self.members.len() && !self.window_full() {
                    self.ask.clear();
                    self.ask_seq = timed;
                    let silent = self.members.iter().filter(|m| !m.acked.after(timed));
                    self.ask.extend(silent.map(|m| m.node));
                } else {
                    self.ack_req_due = true;
                }
            }
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        // Repairs first: they unblock receivers. The budget bounds them.
        if !self.repairs.is_empty() {
            self.refill_tokens(now);
            if !self.budget_enabled() || self.tokens >= 1.0 {
                while let Some(seq) = self.repairs.pop_front() {
                    let Some(slot) = self.buffer.get_mut(seq) else {
                        continue;
                    };
                    slot.repair_queued = false;
                    slot.repaired_at = Some(now);
                    if self.budget_enabled() {
                        self.tokens -= 1.0;
                    }
                    self.deferred = false;
                    self.counters.data_retransmitted += 1;
                    return self.data_transmit(now, seq, Flags::RETRANSMIT, Flags::NONE);
                }
            } else if !self.deferred {
                self.deferred = true;
                self.counters.repairs_deferred += 1;
            }
        }
        if self.resend_due {
            self.resend_due = false;
            if let Some(seq) = self.highest_sent() {
                self.counters.data_retransmitted += 1;
                if let Some(slot) = self.buffer.get_mut(seq) {
                    // A resend is a repair too: NAKs in flight for it are answered.
                    slot.repaired_at = Some(now);
                }
                return self.data_transmit(now, seq, Flags::RETRANSMIT, Flags::ACK_REQ);
            }
        }
        if self.ack_req_due {
            self.ack_req_due = false;
            if let Some(seq) = self.highest_sent() {
                self.counters.ack_reqs_sent += 1;
                self.request_left(now, seq);
                return Some(self.control(now, Kind::AckReq, seq, Dest::Group));
            }
        }
        while let Some(node) = self.ask.pop_front() {
            // Still a member, and the timed request still unanswered by
            // somebody (everything it names is held).
            let seq = self.ask_seq;
            if !self.is_member(node) || seq.before(self.buffer.base()) {
                continue;
            }
            self.counters.ack_reqs_sent += 1;
            self.request_left(now, seq);
            // Without a tree a member reports all it holds; in the tree, a
            // newer request than the one timed would start a new round of
            // the whole subtree (every node polled) for one lost report.
            let upto = match self.tree {
                Some(_) => seq,
                None => self.highest_sent().unwrap_or(seq),
            };
            return Some(self.control(now, Kind::AckReq, upto, Dest::Node(node)));
        }
        if self.advert_due {
            self.advert_due = false;
            // Only while idle: a new frame about to leave tells as much.
            if let (true, Some(seq)) = (self.fresh.is_empty(), self.highest_sent()) {
                self.counters.adverts_sent += 1;
                return Some(self.control(now, Kind::Heartbeat, seq, Dest::Group));
            }
        }
        while let Some(seq) = self.fresh.pop_front() {
            if let Some(t) = self.data_transmit(now, seq, Flags::NONE, Flags::NONE) {
                self.counters.data_sent += 1;
                if let Some(last) = self.last_original_at.replace(now) {
                    self.send_gap = now.saturating_duration_since(last);
                }
                // Not idle: the heartbeats and the idle round count from now.
                self.tail = (self.cfg.tail != TailPolicy::AckLast).then_some(Tail {
                    since: now,
                    adverts: 0,
                });
                self.advert_due = false;
                if t.header.flags.contains(Flags::ACK_REQ) {
                    self.counters.ack_reqs_sent += 1;
                    self.request_left(now, seq);
                }
                return Some(t);
            }
        }
        None
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let token_at = (!self.repairs.is_empty() && self.budget_enabled() && self.tokens < 1.0)
            .then(|| {
                // Rounded up, plus a nanosecond: at that instant the refill
                // must reach a whole token, or a driver would be woken again
                // and again at the same time with nothing to send.
                let per_sec = f64::from(self.cfg.retransmit_floor_per_sec.max(1));
                let wait_ns = ((1.0 - self.tokens) / per_sec * 1e9).ceil() as u64 + 1;
                self.tokens_at + Duration::from_nanos(wait_ns)
            });
        let tail_at = self.tail_deadlines().map(|(advert, ack)| advert.min(ack));
        earliest(earliest(self.ack_timer.map(|(t, _)| t), token_at), tail_at)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn group_rtt(&self) -> Option<Duration> {
        Some(self.grtt)
    }

    fn held_buffers(&self) -> usize {
        self.buffer.len()
    }

    fn release_all(&mut self) {
        let events = &mut self.events;
        self.buffer
            .drain(|_, slot| events.push_back(Event::Release(slot.buf)));
        self.fresh.clear();
        self.repairs.clear();
        self.ack_request = None;
        self.request_sent = None;
        self.ack_timer = None;
        self.tail = None;
        self.advert_due = false;
        self.ask.clear();
    }

    fn set_tree(&mut self, tree: Option<&FeedbackTree>) {
        self.tree = tree.cloned();
        self.tree_levels = tree.map_or(0, |t| t.levels_below(self.stream.local, self.stream.local));
    }
}

impl Sender for MakSender {
    fn send(&mut self, now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if self.members.is_empty() {
            return Err(SendError::NoMembers(frame.buf));
        }
        if self.window_full() {
            self.counters.window_full += 1;
            return Err(SendError::WindowFull(frame.buf));
        }
        let seq = self.next_seq;
        let mut flags = Flags(frame.frag.0 & Flags::PAYLOAD.0);
        // The paper asks at each burst's last frame; advertising senders
        // ask once idle instead (`tail_timeout`).
        let ask_last = frame.last && self.cfg.tail == TailPolicy::AckLast;
        if ask_last {
            flags = flags.with(Flags::LAST);
        }
        let full_after = seq.next().distance(self.buffer.base()) as u32 >= self.buffer.capacity();
        let watermark = seq.distance(self.last_request_seq) as u32 >= self.request_interval();
        if ask_last || full_after || watermark {
            // SEND -> WAIT when the buffer is now full: the request rides on the frame.
            // The ACK-wait timer starts when the frame leaves (poll_transmit):
            // frames queued here have not even reached the wire.
            flags = flags.with(Flags::ACK_REQ);
            self.last_request_seq = seq;
            self.ack_request = Some(seq);
            if full_after {
                self.counters.stalls += 1;
            }
        }
        let slot = Slot {
            buf: frame.buf,
            len: frame.len,
            flags,
            repaired_at: None,
            repair_queued: false,
        };
        let stored = self.buffer.insert(seq, slot);
        debug_assert!(stored.is_ok(), "window checked above");
        self.next_seq = seq.next();
        self.fresh.push_back(seq);
        if self.budget_enabled() {
            self.refill_tokens(now);
            self.tokens = (self.tokens + self.tokens_per_original()).min(self.token_cap());
        }
        Ok(seq)
    }

    fn can_send(&self) -> bool {
        !self.members.is_empty() && !self.window_full()
    }

    fn is_idle(&self) -> bool {
        self.buffer.is_empty() && self.fresh.is_empty()
    }

    fn acked_until(&self) -> Option<Seq> {
        // Frames leave the buffer once every member's cumulative ACK
        // passed them (`release_acknowledged`).
        Some(self.buffer.base())
    }

    fn set_members(&mut self, now: Instant, members: &[NodeId]) {
        self.install_members(Some(now), members);
        // A departed member no longer holds frames back.
        self.release_acknowledged(now);
    }

    fn resume_point(&mut self, now: Instant, member: NodeId) -> Option<Seq> {
        // Every frame from the slowest member's position on is held. What
        // its old stream still sends no longer counts.
        let m = self.members.iter_mut().find(|m| m.node == member)?;
        m.since_us = Some(now.as_micros_u32());
        Some(m.acked)
    }

    fn join_point(&self) -> Option<Seq> {
        Some(self.buffer.base())
    }

    fn unresponsive(&self, after: u32, out: &mut Vec<NodeId>) {
        out.extend(
            self.members
                .iter()
                .filter(|m| m.unanswered >= after)
                .map(|m| m.node),
        );
    }
}
