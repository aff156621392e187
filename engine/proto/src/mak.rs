//! MAK reliable multicast (seed 000 §3): the product's protocol.
//!
//! The sender multicasts data and keeps every unacknowledged frame by handle.
//! Receivers detect gaps, wait a random time, and multicast a NAK listing what
//! is still missing after removing whatever another receiver already NAKed or
//! the sender already repaired (the paper's `nak[2,4,5]` becoming `nak[1,5]`).
//! ACKs flow only when the sender asks: when its buffer fills (the paper), at a
//! watermark before that (our extension, so the window keeps sliding), and for
//! the last frame of a burst.
//!
//! Beyond the paper, each configurable and explained in docs/protocol.md:
//! - ACK requests at a watermark ([`MakConfig::ack_watermark_percent`]);
//! - NAK timers derived from a measured group round-trip time and the group
//!   size, with the truncated-exponential backoff of RFC 5740 §5.5 / RFC 5401
//!   ([`NakTimer::Adaptive`]);
//! - a retransmission budget ([`MakConfig::retransmit_share`]) so a NAK storm
//!   cannot take more than a set share of the sender's rate;
//! - a repair hold-off: NAKs for a frame repaired less than one GRTT ago are
//!   answered by that repair already ("one repair per NAK round");
//! - an ACK-wait timer that follows the link (the paper's is a fixed time):
//!   each member's round trip is estimated as in RFC 6298 from the echoed
//!   stamps of its ACKs ([`crate::rtt`]), the timer runs from the moment the
//!   request actually leaves, waits the slowest member's timeout plus one NAK
//!   backoff window, and doubles while no ACK at all comes back.

use std::collections::VecDeque;

use crate::api::{header_for, rng_for};
use crate::recv::{Accepted, InOrder};
use crate::rtt::{backed_off, echo_rtt, RtoConfig, RttEstimator};
use crate::time::earliest;
use crate::window::SeqWindow;
use crate::{
    BufId, Counters, Dest, Duration, Endpoint, Event, Instant, OutFrame, Rng, RxBody, SendError,
    Sender, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq, MAX_NAK_RANGES};

/// How a receiver draws its NAK timer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NakTimer {
    /// Uniform in `[min, max]`: the paper's "random waiting time".
    Fixed { min: Duration, max: Duration },
    /// Truncated exponential over `[0, T]` with `T = factor × GRTT × s(N)`
    /// clamped to `[min, max]`, skewed by the group size N (RFC 5740 §5.5):
    /// with many receivers most wait close to `T` and a few fire early, so the
    /// early NAK suppresses the rest. `s(N) = min(1, ln N / ln full_group)`:
    /// the wait exists to suppress other receivers' NAKs for the same loss, of
    /// which a group of N can send at most N − 1, so small groups wait less and
    /// a single receiver NAKs at once.
    Adaptive {
        factor: f64,
        min: Duration,
        max: Duration,
        full_group: u16,
    },
}

impl NakTimer {
    /// The longest a receiver waits before it NAKs, for a group round trip
    /// `grtt` and `group_size` receivers.
    pub fn window(&self, grtt: Duration, group_size: u16) -> Duration {
        match *self {
            NakTimer::Fixed { max, .. } => max,
            NakTimer::Adaptive {
                factor,
                min,
                max,
                full_group,
            } => {
                let n = f64::from(group_size.max(1));
                let full = f64::from(full_group.max(2));
                let scale = (n.ln() / full.ln()).min(1.0);
                grtt.mul_f64(factor * scale).clamp(min, max.max(min))
            }
        }
    }
}

/// Configuration of MAK. The window is the stream's `window_frames` (the
/// paper's equal sender and receiver buffers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MakConfig {
    /// Ask for ACKs each time this percentage of the window has been sent since
    /// the last request. 0 asks only when the buffer is full (the paper).
    pub ack_watermark_percent: u8,
    /// The WAIT timer (seed 000 §3.2 sender state (2)): how long the sender
    /// waits for every ACK of a request before it resends the last frame and
    /// asks again. Measured (module docs): the slowest member's RFC 6298
    /// timeout plus one NAK window, within these bounds; `initial` for a
    /// member not measured yet. [`RtoConfig::fixed`] is the paper's fixed time.
    pub ack_wait: RtoConfig,
    /// How receivers draw the NAK timer.
    pub nak_timer: NakTimer,
    /// The group round-trip time assumed until the sender has measured one.
    pub initial_grtt: Duration,
    /// Bounds on the measured group round-trip time.
    pub grtt_min: Duration,
    pub grtt_max: Duration,
    /// After NAKing (or hearing a NAK for) a frame, a receiver waits this many
    /// GRTTs for the repair before it NAKs the frame again.
    pub repair_wait_grtts: u32,
    /// The sender answers NAKs for a frame it repaired less than this many
    /// GRTTs ago with that repair (one repair per NAK round).
    pub repair_holdoff_grtts: u32,
    /// Retransmissions may be at most this share of the frames the sender puts
    /// on the wire: each original frame earns `share / (1 - share)` tokens (1
    /// at the default 0.5) and a repair costs one. 0 (or 1 and more) disables
    /// the budget.
    pub retransmit_share: f64,
    /// Tokens the budget can save up from the floor rate while the sender is
    /// idle (the largest repair burst after a pause). Tokens earned by original
    /// frames are kept up to a whole window, since the repairs of a window's
    /// losses are due while that window is outstanding.
    pub retransmit_burst: u32,
    /// Tokens added per second whatever the sending rate, so repairs go out
    /// when the sender is idle (a lost tail).
    pub retransmit_floor_per_sec: u32,
    /// Ranges in one NAK (at most [`MAX_NAK_RANGES`]).
    pub max_nak_ranges: usize,
}

impl Default for MakConfig {
    fn default() -> Self {
        MakConfig {
            ack_watermark_percent: 50,
            ack_wait: RtoConfig {
                initial: Duration::from_micros(500),
                min: Duration::from_micros(200),
                max: Duration::from_secs(1),
            },
            nak_timer: NakTimer::Adaptive {
                factor: 2.0,
                min: Duration::from_micros(2),
                max: Duration::from_millis(50),
                full_group: 64,
            },
            initial_grtt: Duration::from_micros(100),
            grtt_min: Duration::from_micros(5),
            grtt_max: Duration::from_millis(100),
            repair_wait_grtts: 3,
            repair_holdoff_grtts: 1,
            retransmit_share: 0.5,
            retransmit_burst: 128,
            retransmit_floor_per_sec: 200_000,
            max_nak_ranges: MAX_NAK_RANGES,
        }
    }
}

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
}

/// The MAK sender.
#[derive(Debug)]
pub struct MakSender {
    stream: StreamConfig,
    cfg: MakConfig,
    /// Unacknowledged frames from the lowest not ACKed by every member.
    buffer: SeqWindow<Slot>,
    next_seq: Seq,
    members: Vec<Member>,
    /// The highest sequence an ACK was requested for, and whether every member has answered.
    ack_request: Option<Seq>,
    last_request_seq: Seq,
    /// The highest request that has left (a frame flagged ACK_REQ or an
    /// ACK_REQ frame): the ACK-wait timer runs for it.
    request_sent: Option<Seq>,
    ack_timer: Option<Instant>,
    /// Expiries since the last ACK with a round-trip sample.
    ack_backoff: u32,
    /// New frames not yet transmitted, in order.
    fresh: VecDeque<Seq>,
    /// Frames to repair, in the order NAKed.
    repairs: VecDeque<Seq>,
    /// A timer resend is due: the last frame again, then an ACK_REQ.
    resend_due: bool,
    ack_req_due: bool,
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
            repairs: VecDeque::with_capacity(w as usize),
            resend_due: false,
            ack_req_due: false,
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
        let base = (self.members_rto + nak).clamp(cfg.min, cfg.max.max(cfg.min));
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
    fn release_acknowledged(&mut self) {
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
        }
        while self.repairs.front().is_some_and(|s| s.before(floor)) {
            self.repairs.pop_front();
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

    /// A request for ACKs up to `seq` has just left: the ACK-wait timer runs
    /// from now for it.
    fn request_left(&mut self, now: Instant, seq: Seq) {
        if self.request_sent.is_none_or(|r| seq.after(r)) {
            self.request_sent = Some(seq);
        }
        self.ack_timer = Some(now + self.ack_wait());
    }

    fn handle_ack(&mut self, now: Instant, header: &Header) {
        self.counters.acks_received += 1;
        let Ok(i) = self.members.binary_search_by_key(&header.src, |m| m.node) else {
            self.counters.rejected += 1;
            return;
        };
        let ack = header.ack;
        if ack.after(self.next_seq) {
            self.counters.rejected += 1;
            return;
        }
        if let Some(since) = self.members[i].since_us {
            // Wrapping time order: the echo is at or after the (re)join.
            let fresh = header.flags.contains(Flags::ACK_VALID)
                && header.tstamp_us.wrapping_sub(since) < 1 << 31;
            if !fresh {
                self.counters.acks_stale += 1;
                return;
            }
        }
        // The ACK echoes the request's timestamp, adjusted by the time the
        // receiver held it: the difference is the network round trip.
        if header.flags.contains(Flags::ACK_VALID) {
            if let Some(rtt) = echo_rtt(now, header.tstamp_us) {
                self.members[i].rtt.sample(rtt);
                self.refresh_estimates();
                // A member answers within the link's round trip: the wait is
                // the estimate's again. The backoff is for a timer shorter
                // than the link (no answer at all), not for members still
                // repairing gaps or whose ACKs were lost.
                self.ack_backoff = 0;
            }
        }
        let m = &mut self.members[i];
        m.unanswered = 0;
        if ack.after(m.acked) {
            m.acked = ack;
            self.release_acknowledged();
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
            (Kind::Ack, _) => self.handle_ack(now, header),
            (Kind::Nak, RxBody::Nak(ranges)) => self.handle_nak(now, ranges),
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
        if self.ack_timer.is_some_and(|t| t <= now) {
            // WAIT -> RESEND: the timer expired without every ACK. Resend the
            // last frame (a receiver that lost the tail now sees the gap) and
            // ask again (seed 000 §3.1, Figure 6). The timer restarts, twice
            // as long, when that request leaves.
            self.counters.timeouts += 1;
            self.ack_timer = None;
            self.ack_backoff = self.ack_backoff.saturating_add(1);
            if let Some(r) = self.request_sent {
                for m in self.members.iter_mut().filter(|m| !m.acked.after(r)) {
                    m.unanswered = m.unanswered.saturating_add(1);
                }
            }
            if self.highest_sent().is_some() {
                self.resend_due = true;
                self.ack_req_due = true;
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
                let mut h = self.data_header(now, seq, Flags::NONE, 0);
                h.kind = Kind::AckReq;
                h.ack = seq;
                return Some(Transmit {
                    dest: Dest::Group,
                    header: h,
                    body: TxBody::None,
                });
            }
        }
        while let Some(seq) = self.fresh.pop_front() {
            if let Some(t) = self.data_transmit(now, seq, Flags::NONE, Flags::NONE) {
                self.counters.data_sent += 1;
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
        earliest(self.ack_timer, token_at)
    }

    fn counters(&self) -> &Counters {
        &self.counters
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
        let mut flags = Flags(frame.frag.0 & Flags::WHOLE.0);
        if frame.last {
            flags = flags.with(Flags::LAST);
        }
        let full_after = seq.next().distance(self.buffer.base()) as u32 >= self.buffer.capacity();
        let watermark = seq.distance(self.last_request_seq) as u32 >= self.request_interval();
        if frame.last || full_after || watermark {
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

    fn set_members(&mut self, now: Instant, members: &[NodeId]) {
        self.install_members(Some(now), members);
        // A departed member no longer holds frames back.
        self.release_acknowledged();
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
    /// Waiting for our own NAK timer; `tries` NAKs of ours asked for it already.
    Pending { tries: u8 },
    /// NAKed (by us or overheard from another receiver) at a time: the repair
    /// is awaited until `until`, then the frame is pending again.
    Requested { until: Instant, tries: u8 },
}

impl Missing {
    const NEW: Missing = Missing::Pending { tries: 0 };

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
    /// An ACK owed: up to this sequence, answering a request stamped `tstamp_us` received at `at`.
    ack_owed: Option<(Seq, u32, Instant)>,
    grtt: Duration,
    group_size: u16,
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
            ack_owed: None,
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
    fn draw_backoff(&mut self) -> Duration {
        match self.cfg.nak_timer {
            NakTimer::Fixed { min, max } => {
                let ns = self.rng.range(min.as_nanos() as u64, max.as_nanos() as u64);
                Duration::from_nanos(ns)
            }
            NakTimer::Adaptive { .. } => {
                let t_max = self
                    .cfg
                    .nak_timer
                    .window(self.grtt, self.group_size)
                    .as_secs_f64();
                // Inverse CDF of the truncated exponential of RFC 5740 §5.5:
                // t = T/λ · ln(1 + u(e^λ − 1)), λ = ln(group size) + 1.
                let lambda = f64::from(self.group_size.max(1)).ln() + 1.0;
                let u = self.rng.unit();
                let t = t_max / lambda * (1.0 + u * (lambda.exp() - 1.0)).ln();
                Duration::from_secs_f64(t.clamp(0.0, t_max))
            }
        }
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

    fn note_request(&mut self, now: Instant, upto: Seq, tstamp_us: u32) {
        self.counters.ack_reqs_received += 1;
        let newer = self.ack_owed.is_none_or(|(r, _, _)| !r.after(upto));
        if newer {
            self.ack_owed = Some((upto, tstamp_us, now));
        }
    }

    /// ACK state (seed 000 Figure 7 (5)): everything up to the requested frame is here.
    fn maybe_ack(&mut self, now: Instant) {
        let Some((upto, tstamp_us, at)) = self.ack_owed else {
            return;
        };
        if !self.inorder.next_expected().after(upto) {
            return;
        }
        self.ack_owed = None;
        let mut h = header_for(&self.stream, Kind::Ack);
        h.ack = self.inorder.next_expected();
        h.seq = upto;
        let held_us = now.saturating_duration_since(at).as_micros() as u32;
        h.tstamp_us = tstamp_us.wrapping_add(held_us);
        h.flags = Flags::ACK_VALID;
        self.counters.acks_sent += 1;
        self.push_tx(Transmit {
            dest: Dest::Node(self.stream.sender),
            header: h,
            body: TxBody::None,
        });
    }

    fn push_tx(&mut self, t: Transmit) {
        // At most one ACK and a few NAKs are ever queued between polls; the
        // bound keeps a driver that never polls from growing this.
        if self.tx.len() < 64 {
            self.tx.push_back(t);
        }
    }

    fn on_data(&mut self, now: Instant, header: &Header, buf: BufId) {
        if header.grtt_ns != 0 {
            let g = Duration::from_nanos(u64::from(header.grtt_ns));
            self.grtt = g.clamp(self.cfg.grtt_min, self.cfg.grtt_max);
        }
        self.group_size = header.group_size.max(1);
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
                self.scan_gaps(seq, Missing::NEW);
                if header.flags.contains(Flags::ACK_REQ) || header.flags.contains(Flags::LAST) {
                    self.note_request(now, seq, header.tstamp_us);
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
                    self.scan_gaps(seq.next(), Missing::Requested { until, tries: 0 });
                    continue;
                }
                if let Some(m) = self.errors.get_mut(seq) {
                    if let Missing::Pending { tries } = *m {
                        *m = Missing::Requested { until, tries };
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

    /// NAK state: the timer fired; multicast what is still pending.
    fn fire_nak(&mut self, now: Instant) {
        self.nak_timer = None;
        let mut list = RangeList::new();
        let wait = self.repair_wait();
        let mut retry_at = None;
        let limit = self.cfg.max_nak_ranges.clamp(1, MAX_NAK_RANGES);
        let base = self.errors.base();
        for i in 0..self.errors.capacity() {
            let seq = base.add(i);
            let Some(m) = self.errors.get_mut(seq) else {
                continue;
            };
            let Missing::Pending { tries } = *m else {
                continue;
            };
            let extends = list.iter().last().is_some_and(|r| r.end() == seq);
            if !extends && list.len() >= limit {
                break;
            }
            list.push_seq(seq);
            // Each unanswered NAK of ours doubles the wait for its repair (up to
            // 16 times): a sender short of repair budget is not met by a storm.
            let until = now + wait * (1u32 << tries.min(4));
            *m = Missing::Requested {
                until,
                tries: tries.saturating_add(1),
            };
            retry_at = earliest(retry_at, Some(until));
            self.pending -= 1;
        }
        if list.is_empty() {
            self.counters.naks_suppressed += 1;
        } else {
            self.counters.naks_sent += 1;
            self.retry_at = earliest(self.retry_at, retry_at);
            let mut h = header_for(&self.stream, Kind::Nak);
            h.seq = self.inorder.next_expected();
            h.ack = self.inorder.next_expected();
            h.payload_len = list.wire_len() as u16;
            self.push_tx(Transmit {
                dest: Dest::Group,
                header: h,
                body: TxBody::Nak(Box::new(list)),
            });
        }
        // Entries beyond one NAK's capacity wait for another draw.
        self.arm_nak_timer(now);
    }

    /// Requested entries whose repair did not come in time are pending again.
    fn expire_requests(&mut self, now: Instant) {
        self.retry_at = None;
        let base = self.errors.base();
        let mut next: Option<Instant> = None;
        for i in 0..self.errors.capacity() {
            let seq = base.add(i);
            let Some(m) = self.errors.get_mut(seq) else {
                continue;
            };
            if let Missing::Requested { until, tries } = *m {
                if until <= now {
                    *m = Missing::Pending { tries };
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
            (Kind::Nak, RxBody::Nak(ranges)) if header.src != self.stream.local => {
                self.on_overheard_nak(now, ranges)
            }
            (Kind::AckReq, _) if header.src == self.stream.sender => {
                // The sender's timer resend: a frame up to `ack` exists.
                self.inorder.note_exists(header.ack);
                self.scan_gaps(header.ack.next(), Missing::NEW);
                self.note_request(now, header.ack, header.tstamp_us);
                self.arm_nak_timer(now);
                self.maybe_ack(now);
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
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.tx.pop_front()
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(self.nak_timer, self.retry_at)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.inorder.held()
    }

    fn release_all(&mut self) {
        self.inorder.release_all(&mut self.events);
    }
}

#[cfg(test)]
mod tests;
