//! Go-Back-N reliable unicast with window flow control (seed 001 §4.2.1,
//! Figure 4.1): the building block of the iterative baseline.
//!
//! The sender keeps a credit window of W_FC frames (the stream's
//! `window_frames`) and a retransmission timer. The receiver accepts in order
//! only: it holds no reorder buffer.
//!
//! Sender states (Figure 4.1 (a)):
//! - **Normal**: new frames go out while the window has credit. A Pack slides
//!   the window (cumulatively). A timeout retransmits the oldest outstanding
//!   frame and resets the timer. A Nack backs up to the frame it names, resends
//!   every outstanding frame from there and enters Stall.
//! - **Stall**: no new frame goes out (they are accepted into the window but
//!   held) until the first Pack that acknowledges something new; timeouts
//!   retransmit as in Normal; a further Nack goes back again.
//!
//! Acknowledgment requests: the sender flags [`Flags::ACK_REQ`] on a data
//! frame when it needs credit back: the last frame of a burst (nothing else
//! is ready to go after it) and, within a long burst, every quarter window.
//! Under [`AckPolicy::OnRequest`] the receiver sends a Pack only
//! for those frames (and for duplicates and at the end of Stall, as always),
//! so bulk transfer costs one Pack per quarter window instead of one per
//! frame, while a lone message is still acknowledged at once. The default,
//! [`AckPolicy::DEFAULT`] (`Delayed`), answers those requests at once too,
//! and otherwise every 16 frames or 50 µs after an unanswered one
//! (docs/protocol.md §5.2).
//!
//! Receiver logic (Figure 4.1 (b)):
//! - **Receiving**: the expected frame is delivered and acknowledged with a Pack
//!   (per [`AckPolicy`]); the first out-of-order frame is dropped, produces one
//!   Nack naming the expected sequence number, and moves the receiver to Stall.
//! - **Stall**: out-of-order frames are dropped without a Nack; the first
//!   in-order frame is delivered, acknowledged at once, and ends Stall.
//!
//! # The retransmission timer (not static: seed 001's "static timeout value"
//! was sized for one link)
//!
//! Every Pack and Nack echoes the send stamp of the data frame that caused it
//! (`tstamp_us`, flag `ACK_VALID`), so the sender measures the round trip of
//! each copy, retransmissions included, and keeps an RFC 6298 estimate
//! ([`crate::rtt`]). One timer guards the oldest outstanding frame (RFC 6298
//! §5): armed when a frame leaves and it is not running, restarted whenever a
//! Pack or Nack acknowledges something new, stopped when nothing sent is
//! outstanding or the oldest frame is queued to be sent again (a Nack's go
//! back: the timer then times the new copy, from its departure). Timing the
//! oldest frame from the last progress, rather than each frame from its own
//! departure, keeps a window queued behind a slow link from timing out frame
//! by frame while it drains. The timer runs only while a Pack is due: under
//! [`AckPolicy::OnRequest`] that is while a frame flagged ACK_REQ is in flight
//! (the receiver answers no other, so a timer running from the first
//! unflagged frame expired between the quarter window's requests).
//!
//! On expiry the oldest outstanding frame alone is retransmitted, the timeout
//! doubles until the next progress, and that retransmission is a **probe**:
//! the echo in the answer says which copy arrived. An answer to the probe
//! proves the original was lost, and since an in-order receiver drops
//! everything after a gap, every frame sent before the probe is sent again (go
//! back N). An answer to an original shows the timeout was spurious (the
//! network was just slow, as in Eifel, RFC 3522): nothing more is resent. If
//! the timer expires again before the probe is answered (the probe or its
//! answer was lost, or the receiver already had the frame and, stalled on a
//! later gap, drops duplicates silently), every outstanding frame is sent
//! again: seed 001's per-frame timeouts, all at once.
//!
//! Performs no I/O and reads no clock: time is an argument.

use std::collections::VecDeque;

use crate::api::header_for;
use crate::rtt::{echo_rtt, RtoConfig, RttEstimator, DEFAULT_RTO};
use crate::window::SeqWindow;
use crate::{
    BufId, Counters, Dest, Duration, Endpoint, Event, Instant, OutFrame, RxBody, SendError, Sender,
    StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, Seq};

/// When the receiver acknowledges: chosen by the layer above (seed 001 §4.2.1:
/// "immediate acknowledgment, piggyback acknowledgment, or delay acknowledgment").
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AckPolicy {
    /// A Pack for every in-order frame. Frames that arrive before the driver
    /// polls [`Endpoint::poll_transmit`] share one (cumulative) Pack.
    Immediate,
    /// A Pack for in-order frames the sender flagged [`Flags::ACK_REQ`] (the
    /// end of each burst, every quarter window within one); the others are
    /// covered by the next. No timer: the sender asks when it needs credit.
    OnRequest,
    /// A Pack after every `every` in-order frames, for a frame the sender
    /// flagged [`Flags::ACK_REQ`] (the end of a burst: the sender is waiting),
    /// or `max_delay` after the first unacknowledged one. `every == 0` behaves
    /// as 1. The default, as [`AckPolicy::DEFAULT`].
    Delayed { every: u32, max_delay: Duration },
    /// Carried on reverse traffic when there is some within `max_delay`, else sent
    /// alone. The layer above takes the acknowledgment with
    /// [`GbnReceiver::take_piggyback_ack`] and hands it to the other side's
    /// [`GbnSender::handle_piggyback_ack`].
    Piggyback { max_delay: Duration },
}

impl AckPolicy {
    /// The default: [`AckPolicy::Delayed`], a Pack per 16 in-order frames, at
    /// once for a frame flagged ACK_REQ, 50 µs after an unacknowledged frame
    /// at the latest. Against [`AckPolicy::Immediate`] (a Pack per receive
    /// poll: one per 2-3 frames when the receiver keeps up) it cut the Go-Back-N
    /// sender's CPU per 1 KiB message over AF_XDP by about 140 ns, each Pack
    /// costing the sender a cache miss on the frame, its CRC and its ring
    /// work (docs/benchmarks.md); a Nack still goes out at once, so loss
    /// recovery is as fast, and 50 µs is well under the 200 µs least
    /// retransmission timeout.
    pub const DEFAULT: AckPolicy = AckPolicy::Delayed {
        every: 16,
        max_delay: Duration::from_micros(50),
    };
}

/// Configuration of a Go-Back-N endpoint. The credit window W_FC is the stream's
/// `window_frames`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GbnConfig {
    /// The retransmission timeout: measured from the echoed round trips
    /// (see the module docs). [`RtoConfig::fixed`] restores seed 001's static
    /// timeout.
    pub rto: RtoConfig,
    /// When the receiver sends Packs.
    pub ack_policy: AckPolicy,
}

impl Default for GbnConfig {
    fn default() -> Self {
        GbnConfig {
            rto: DEFAULT_RTO,
            ack_policy: AckPolicy::DEFAULT,
        }
    }
}

/// One frame in the sender's window.
#[derive(Debug, Clone, Copy)]
struct Slot {
    buf: BufId,
    len: u16,
    frag: Flags,
    /// Sent already and queued to be sent again.
    queued: bool,
    /// Its last transmission was flagged ACK_REQ and has not been answered or
    /// queued again: a Pack for it is due whatever the receiver's policy.
    requested: bool,
}

/// A timer retransmission of the oldest frame whose answer is awaited.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// The send stamp of the first probe (wire microseconds): an echo at or
    /// after it answers a probe, an earlier one an original.
    stamp_us: u32,
    /// Frames before this had been sent when the timer expired: they are the
    /// ones to send again if the original is proven lost.
    recover: Seq,
}

/// True when the wire stamp `a` is at or after `b` (32-bit microseconds, wrapping).
fn stamp_at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Go-Back-N sender towards one peer (seed 001 §4.2.1, Figure 4.1 (a)).
///
/// Sequence numbers: `[base, next_new)` have been sent at least once and are
/// outstanding; `[next_new, next_seq)` are accepted but not yet sent;
/// `next_seq - base <= W_FC`.
#[derive(Debug)]
pub struct GbnSender {
    stream: StreamConfig,
    peer: NodeId,
    cfg: GbnConfig,
    /// The retransmission buffer: W_FC slots, base = oldest unacknowledged.
    window: SeqWindow<Slot>,
    /// The first sequence number never sent.
    next_new: Seq,
    /// The sequence number the next [`Sender::send`] gets.
    next_seq: Seq,
    /// Seed 001's Stall state: no new frames until the first Pack.
    stalled: bool,
    /// Frames in `[base, next_new)` waiting to be retransmitted, and the lowest
    /// sequence number that may be one (a scan hint).
    retx_pending: u32,
    retx_from: Seq,
    /// The retransmission timer (see the module docs).
    rto_deadline: Option<Instant>,
    rtt: RttEstimator,
    /// The timer expired: the next transmission of the oldest frame is a probe
    /// (`recover` as in [`Probe`]).
    probe_due: Option<Seq>,
    probe: Option<Probe>,
    /// Frames transmitted since the last one flagged ACK_REQ.
    since_ack_req: u32,
    /// Frames in flight whose last transmission asked for a Pack.
    requested: u32,
    events: VecDeque<Event>,
    counters: Counters,
}

impl GbnSender {
    /// A sender of `stream` to `peer`, starting at `stream.initial_seq`, with a
    /// window of `stream.window_frames` (W_FC) allocated here.
    pub fn new(stream: StreamConfig, peer: NodeId, cfg: GbnConfig) -> GbnSender {
        let w = stream.window_frames;
        GbnSender {
            stream,
            peer,
            cfg,
            window: SeqWindow::new(stream.initial_seq, w),
            next_new: stream.initial_seq,
            next_seq: stream.initial_seq,
            stalled: false,
            retx_pending: 0,
            retx_from: stream.initial_seq,
            rto_deadline: None,
            rtt: RttEstimator::new(),
            probe_due: None,
            probe: None,
            since_ack_req: 0,
            requested: 0,
            events: VecDeque::with_capacity(w as usize),
            counters: Counters::default(),
        }
    }

    /// Whether the frame about to go out asks for a Pack: it ends the burst
    /// (nothing else could be transmitted right after it), or a quarter of the
    /// window went out since the last request. Call after the frame's own
    /// bookkeeping (`retx_pending`, `next_new`) is updated.
    fn ack_request(&mut self) -> bool {
        let more = self.retx_pending > 0 || (!self.stalled && self.next_new != self.next_seq);
        self.since_ack_req += 1;
        if !more || self.since_ack_req >= (self.window.capacity() / 4).max(1) {
            self.since_ack_req = 0;
            return true;
        }
        false
    }

    /// The receiver this sender sends to.
    pub fn peer(&self) -> NodeId {
        self.peer
    }

    /// True in seed 001's Stall state (after a Nack, until the first Pack).
    pub fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// Frames accepted and not yet acknowledged (sent or waiting to be sent).
    pub fn outstanding(&self) -> u32 {
        self.next_seq.distance(self.window.base()) as u32
    }

    /// The round-trip estimate.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The retransmission timeout now in force (backoff included).
    pub fn rto(&self) -> Duration {
        self.rtt.rto(&self.cfg.rto)
    }

    /// An acknowledgment piggy-backed on the peer's reverse traffic (the layer
    /// above read it from a frame flagged [`Flags::ACK_VALID`]): handled exactly
    /// as a Pack whose `ack` is `ack` (without an echo, so without a round-trip
    /// sample), and counted in `packs_received`.
    pub fn handle_piggyback_ack(&mut self, now: Instant, ack: Seq) {
        self.counters.packs_received += 1;
        self.on_pack(now, ack, None);
    }

    /// True when some frame has been sent and not acknowledged.
    fn in_flight(&self) -> bool {
        self.window.base().before(self.next_new)
    }

    /// True when a Pack is due for some frame in flight, so the timer may
    /// run: under [`AckPolicy::OnRequest`] the receiver answers only frames
    /// flagged ACK_REQ (and the newest frame sent always asks unless another
    /// goes out right after it), under the other policies every frame.
    fn pack_due(&self) -> bool {
        if self.cfg.ack_policy == AckPolicy::OnRequest {
            self.requested > 0
        } else {
            self.in_flight()
        }
    }

    /// A Pack or Nack acknowledged something new: the timeout is the
    /// estimate's again and the timer restarts for the new oldest frame.
    fn progress(&mut self, now: Instant) {
        self.rtt.reset_backoff();
        self.rto_deadline = self.pack_due().then(|| now + self.rto());
        if self
            .probe
            .is_some_and(|p| !self.window.base().before(p.recover))
        {
            self.probe = None;
        }
        if self
            .probe_due
            .is_some_and(|r| !self.window.base().before(r))
        {
            self.probe_due = None;
        }
    }

    /// Pack: `ack` is the next sequence number the receiver expects. A Pack that
    /// acknowledges something new slides the window and ends Stall (seed 001:
    /// "until the first Pack reply is returned"). A Pack at the window base (a
    /// receiver re-acknowledging a duplicate) does not end Stall: it shows the
    /// receiver still lacks the frame that caused the Nack. `echo`: the send
    /// stamp the Pack echoes.
    fn on_pack(&mut self, now: Instant, ack: Seq, echo: Option<u32>) {
        if ack.after(self.next_new) {
            // Acknowledges frames never sent: hostile or corrupt.
            self.counters.rejected += 1;
            return;
        }
        if !ack.after(self.window.base()) {
            return; // stale or duplicate
        }
        let probe = self.probe.take();
        self.slide_to(ack);
        self.stalled = false;
        self.progress(now);
        if let (Some(p), Some(e)) = (probe, echo) {
            if stamp_at_or_after(e, p.stamp_us) {
                // The probe was answered, not the original: the original was
                // lost, and an in-order receiver dropped what followed it.
                self.go_back(p.recover);
            }
            // An echo of an original: the timeout was spurious; nothing more.
        } else if probe.is_some_and(|p| self.window.base().before(p.recover)) {
            // No echo to decide by: keep waiting for one.
            self.probe = probe;
        }
    }

    /// Nack: `ack` is the first frame the receiver lacks. Everything before it
    /// arrived, so the window slides to it first (a Nack is cumulative too);
    /// then the sender "backs up to the first error packet ... and resends all
    /// outstanding packets. Then it transits into the Stall state" (seed 001).
    fn on_nack(&mut self, now: Instant, ack: Seq) {
        if !ack.before(self.next_new) {
            // Names a frame never sent: hostile or corrupt.
            self.counters.rejected += 1;
            return;
        }
        if ack.before(self.window.base()) {
            return; // stale: that frame was acknowledged since
        }
        if ack.after(self.window.base()) {
            self.slide_to(ack);
            self.progress(now);
        }
        // Everything outstanding goes again: no probe to wait for.
        self.probe = None;
        self.probe_due = None;
        self.go_back(self.next_new);
        if !self.stalled {
            self.stalled = true;
            self.counters.stalls += 1;
        }
    }

    /// Queues every sent frame from the base up to `until` for retransmission.
    /// The timer stops: it restarts when the first of them leaves, so that it
    /// times the new copies, not the lost ones.
    fn go_back(&mut self, until: Seq) {
        let mut seq = self.window.base();
        while seq.before(until) && seq.before(self.next_new) {
            self.mark_for_retransmit(seq);
            seq = seq.next();
        }
        if self
            .window
            .get(self.window.base())
            .is_some_and(|s| s.queued)
        {
            self.rto_deadline = None;
        }
    }

    /// Acknowledges everything before `ack` (callers check `ack <= next_new`),
    /// releasing the buffers.
    fn slide_to(&mut self, ack: Seq) {
        debug_assert!(!ack.after(self.next_new));
        let events = &mut self.events;
        let (mut was_pending, mut was_requested) = (0, 0);
        self.window.advance_to(ack, |_, slot| {
            if slot.queued {
                was_pending += 1;
            }
            if slot.requested {
                was_requested += 1;
            }
            events.push_back(Event::Release(slot.buf));
        });
        self.retx_pending -= was_pending;
        self.requested -= was_requested;
    }

    fn mark_for_retransmit(&mut self, seq: Seq) {
        if let Some(slot) = self.window.get_mut(seq) {
            if !slot.queued {
                slot.queued = true;
                self.retx_pending += 1;
            }
            if slot.requested {
                slot.requested = false;
                self.requested -= 1;
            }
            if seq.before(self.retx_from) {
                self.retx_from = seq;
            }
        }
    }

    /// The next frame to retransmit, lowest sequence number first.
    fn next_retransmit(&mut self) -> Option<Seq> {
        if self.retx_pending == 0 {
            return None;
        }
        let base = self.window.base();
        let mut seq = if self.retx_from.before(base) {
            base
        } else {
            self.retx_from
        };
        while seq.before(self.next_new) {
            if self.window.get(seq).is_some_and(|s| s.queued) {
                self.retx_from = seq.next();
                return Some(seq);
            }
            seq = seq.next();
        }
        debug_assert!(false, "retx_pending {} but none found", self.retx_pending);
        self.retx_pending = 0;
        self.retx_from = self.next_new;
        None
    }

    fn data_transmit(&mut self, now: Instant, seq: Seq, retransmit: bool) -> Transmit {
        // A resend of the oldest frame (a timeout's probe) always asks for a
        // Pack: under AckPolicy::OnRequest nothing else would answer it.
        let ack_req = self.ack_request() || (retransmit && seq == self.window.base());
        // The timer waits for a Pack that is due (under AckPolicy::OnRequest
        // only a flagged frame gets one): it starts with the first such frame.
        let answered = ack_req || self.cfg.ack_policy != AckPolicy::OnRequest;
        if answered && self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto());
        }
        if retransmit && seq == self.window.base() {
            if let Some(recover) = self.probe_due.take() {
                self.probe = Some(Probe {
                    stamp_us: now.as_micros_u32(),
                    recover,
                });
            }
        }
        let slot = self
            .window
            .get_mut(seq)
            .expect("transmitting a frame outside the window");
        slot.queued = false;
        if ack_req && !slot.requested {
            slot.requested = true;
            self.requested += 1;
        }
        let mut header = header_for(&self.stream, Kind::GbnData);
        header.peer = self.peer;
        header.seq = seq;
        header.flags = slot.frag;
        if retransmit {
            header.flags = header.flags.with(Flags::RETRANSMIT);
        }
        if ack_req {
            header.flags = header.flags.with(Flags::ACK_REQ);
        }
        header.payload_len = slot.len;
        header.tstamp_us = now.as_micros_u32();
        Transmit {
            dest: Dest::Node(self.peer),
            header,
            body: TxBody::Buf(slot.buf),
        }
    }
}

impl Endpoint for GbnSender {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        if let RxBody::Data(buf) = body {
            // The sender takes no data; hand the buffer straight back.
            self.events.push_back(Event::Release(buf));
            self.counters.rejected += 1;
            return;
        }
        if header.epoch != self.stream.epoch {
            self.counters.wrong_epoch_dropped += 1;
            return;
        }
        if header.src != self.peer
            || header.peer != self.stream.local
            || header.group != self.stream.group
            || !matches!(body, RxBody::None)
            || !matches!(header.kind, Kind::Pack | Kind::Nack)
        {
            self.counters.rejected += 1;
            return;
        }
        // The echo of the data frame that caused this feedback: a round trip.
        let echo = header
            .flags
            .contains(Flags::ACK_VALID)
            .then_some(header.tstamp_us);
        if let Some(rtt) = echo.and_then(|e| echo_rtt(now, e)) {
            self.rtt.sample(rtt);
        }
        if header.kind == Kind::Pack {
            self.counters.packs_received += 1;
            self.on_pack(now, header.ack, echo);
        } else {
            self.counters.nacks_received += 1;
            self.on_nack(now, header.ack);
        }
    }

    /// Seed 001: "On receiving a timeout incident, the sender retransmits the
    /// corresponding packet and reset its timer" — in Normal and in Stall
    /// alike. The timed-out frame is the oldest outstanding one; it goes out as
    /// a probe (module docs) and the timer restarts when it actually leaves,
    /// with the timeout doubled.
    fn handle_timeout(&mut self, now: Instant) {
        if self.rto_deadline.is_none_or(|d| d > now) {
            return;
        }
        self.rto_deadline = None;
        if !self.in_flight() || !self.pack_due() {
            return;
        }
        let base = self.window.base();
        if self.window.get(base).is_some_and(|s| s.queued) {
            return; // already waiting to go out: the timer restarts when it does
        }
        self.counters.timeouts += 1;
        self.rtt.back_off();
        if self.probe.take().is_some() {
            // The probe went unanswered too (lost, or a duplicate that a
            // stalled receiver drops silently): go back over everything.
            self.go_back(self.next_new);
        } else {
            self.mark_for_retransmit(base);
            self.probe_due = Some(self.next_new);
        }
    }

    /// Retransmissions first (lowest sequence number first), then new frames in
    /// order, but no new frame in Stall.
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(seq) = self.next_retransmit() {
            self.retx_pending -= 1;
            self.counters.data_retransmitted += 1;
            return Some(self.data_transmit(now, seq, true));
        }
        if self.stalled || self.next_new == self.next_seq {
            return None;
        }
        let seq = self.next_new;
        self.next_new = seq.next();
        self.counters.data_sent += 1;
        Some(self.data_transmit(now, seq, false))
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.rto_deadline
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.window.len()
    }

    fn release_all(&mut self) {
        let events = &mut self.events;
        self.window.advance_to(self.next_seq, |_, slot| {
            events.push_back(Event::Release(slot.buf))
        });
        self.next_new = self.next_seq;
        self.retx_pending = 0;
        self.requested = 0;
        self.retx_from = self.next_seq;
        self.rto_deadline = None;
        self.probe = None;
        self.probe_due = None;
        self.stalled = false;
    }
}

impl Sender for GbnSender {
    /// Accepts the frame while fewer than W_FC frames are outstanding (seed 001:
    /// the credit window). In Stall the frame is accepted but held until the
    /// Stall ends. `frame.last` has no meaning for Go-Back-N and is ignored.
    fn send(&mut self, _now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if !self.can_send() {
            self.counters.window_full += 1;
            return Err(SendError::WindowFull(frame.buf));
        }
        let seq = self.next_seq;
        let slot = Slot {
            buf: frame.buf,
            len: frame.len,
            // Only the payload bits (fragment, batch) are the caller's; the rest are ours.
            frag: Flags(frame.frag.0 & Flags::PAYLOAD.0),
            queued: false,
            requested: false,
        };
        let stored = self.window.insert(seq, slot);
        assert!(stored.is_ok(), "window slot {seq:?} checked free");
        self.next_seq = seq.next();
        Ok(seq)
    }

    fn can_send(&self) -> bool {
        self.outstanding() < self.window.capacity()
    }

    fn is_idle(&self) -> bool {
        self.window.is_empty()
    }

    /// A unicast sender has exactly one receiver, fixed at construction. A
    /// one-element view equal to the peer is accepted (a no-op); any other view
    /// is ignored: membership changes are handled a level up (the iterative
    /// sender adds and drops whole `GbnSender`s).
    fn set_members(&mut self, _now: Instant, _members: &[NodeId]) {}
}

/// Go-Back-N receiver from one sender (seed 001 §4.2.1, Figure 4.1 (b)):
/// in-order accept, no reorder buffer.
#[derive(Debug)]
pub struct GbnReceiver {
    stream: StreamConfig,
    cfg: GbnConfig,
    /// Everything before this has been delivered.
    expected: Seq,
    /// Seed 001's Stall state for this sender: a Nack went out, out-of-order
    /// frames are dropped silently until the next in-order frame.
    stalled: bool,
    /// A standalone Pack is due; `pack_seq` is the data frame that caused it
    /// and `pack_echo` that frame's send stamp, echoed for the round trip.
    pack_due: bool,
    pack_seq: Seq,
    pack_echo: u32,
    /// A Nack is due: `(seq of the out-of-order frame, expected when it came,
    /// the frame's send stamp)`.
    nack_due: Option<(Seq, Seq, u32)>,
    /// In-order frames not acknowledged yet (delayed, on-request and
    /// piggy-backed policies).
    unacked: u32,
    /// When a standalone Pack must go out for them.
    ack_deadline: Option<Instant>,
    events: VecDeque<Event>,
    counters: Counters,
}

impl GbnReceiver {
    /// A receiver of `stream` (from `stream.sender`), expecting
    /// `stream.initial_seq` first.
    pub fn new(stream: StreamConfig, cfg: GbnConfig) -> GbnReceiver {
        GbnReceiver {
            stream,
            cfg,
            expected: stream.initial_seq,
            stalled: false,
            pack_due: false,
            pack_seq: stream.initial_seq,
            pack_echo: 0,
            nack_due: None,
            unacked: 0,
            ack_deadline: None,
            events: VecDeque::with_capacity(stream.window_frames.min(1024) as usize),
            counters: Counters::default(),
        }
    }

    /// The next sequence number the receiver will deliver.
    pub fn next_expected(&self) -> Seq {
        self.expected
    }

    /// True in seed 001's Stall state (after a Nack, until an in-order frame).
    pub fn is_stalled(&self) -> bool {
        self.stalled
    }

    /// The layer above is sending reverse traffic to the data sender: it takes
    /// the cumulative acknowledgment to carry (set `ack` to it and flag
    /// [`Flags::ACK_VALID`]). Returns `None` when nothing is waiting to be
    /// acknowledged. Taking it cancels the pending standalone Pack (seed 001
    /// piggyback acknowledgment). Works under every [`AckPolicy`].
    pub fn take_piggyback_ack(&mut self) -> Option<Seq> {
        if !self.pack_due && self.unacked == 0 {
            return None;
        }
        self.pack_due = false;
        self.unacked = 0;
        self.ack_deadline = None;
        Some(self.expected)
    }

    fn on_data(&mut self, now: Instant, header: &Header, buf: BufId) {
        self.counters.data_received += 1;
        let seq = header.seq;
        if seq == self.expected {
            self.counters.delivered += 1;
            self.events.push_back(Event::Deliver {
                stream: self.stream.sender,
                seq,
                buf,
                len: header.payload_len,
                flags: header.flags,
            });
            self.expected = seq.next();
            self.pack_seq = seq;
            self.pack_echo = header.tstamp_us;
            if self.stalled {
                // "Resumes the acknowledging process" at the first in-order
                // frame: acknowledge at once whatever the policy, since the
                // sender sends nothing new until this Pack arrives.
                self.stalled = false;
                self.pack_due = true;
            } else {
                self.ack_in_order(now, header.flags.contains(Flags::ACK_REQ));
            }
        } else if seq.before(self.expected) {
            // An old frame: our Pack for it was lost or is late. Re-acknowledge
            // so the sender does not time out forever on the last frame of a
            // burst; in Stall stay silent (seed 001 minimises control frames,
            // and the expected frame's own timeout recovers).
            self.counters.duplicates_dropped += 1;
            self.events.push_back(Event::Release(buf));
            if !self.stalled {
                self.pack_seq = seq;
                self.pack_echo = header.tstamp_us;
                self.pack_due = true;
            }
        } else {
            // Out of order: in-order accept drops it (GBN's receive window is one
            // frame, so this counts as out of window).
            self.counters.out_of_window_dropped += 1;
            self.events.push_back(Event::Release(buf));
            if !self.stalled {
                self.stalled = true;
                self.counters.stalls += 1;
                self.nack_due = Some((seq, self.expected, header.tstamp_us));
            }
        }
    }

    /// Applies the [`AckPolicy`] to one in-order frame (`requested`: it was
    /// flagged ACK_REQ).
    fn ack_in_order(&mut self, now: Instant, requested: bool) {
        match self.cfg.ack_policy {
            AckPolicy::Immediate => self.pack_due = true,
            AckPolicy::OnRequest => {
                self.unacked += 1;
                if requested {
                    self.pack_due = true;
                }
            }
            AckPolicy::Delayed { every, max_delay } => {
                self.unacked += 1;
                if requested || self.unacked >= every.max(1) {
                    self.pack_due = true;
                } else if self.ack_deadline.is_none() {
                    self.ack_deadline = Some(now + max_delay);
                }
            }
            AckPolicy::Piggyback { max_delay } => {
                self.unacked += 1;
                if self.ack_deadline.is_none() {
                    self.ack_deadline = Some(now + max_delay);
                }
            }
        }
    }

    /// A Pack or Nack caused by data frame `seq`, echoing its send stamp.
    fn control(&self, kind: Kind, seq: Seq, ack: Seq, echo: u32) -> Transmit {
        let mut header = header_for(&self.stream, kind);
        header.peer = self.stream.sender;
        header.seq = seq;
        header.ack = ack;
        header.tstamp_us = echo;
        header.flags = Flags::ACK_VALID;
        header.payload_len = 0;
        Transmit {
            dest: Dest::Node(self.stream.sender),
            header,
            body: TxBody::None,
        }
    }
}

impl Endpoint for GbnReceiver {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        let buf = match body {
            RxBody::Data(buf) => Some(buf),
            _ => None,
        };
        let verdict = if header.epoch != self.stream.epoch {
            Err(&mut self.counters.wrong_epoch_dropped)
        } else if header.kind != Kind::GbnData
            || buf.is_none()
            || header.src != self.stream.sender
            || header.peer != self.stream.local
            || header.group != self.stream.group
        {
            Err(&mut self.counters.rejected)
        } else {
            Ok(())
        };
        match (verdict, buf) {
            (Ok(()), Some(buf)) => self.on_data(now, header, buf),
            (Err(counter), buf) => {
                *counter += 1;
                if let Some(buf) = buf {
                    self.events.push_back(Event::Release(buf));
                }
            }
            (Ok(()), None) => unreachable!("checked above"),
        }
    }

    /// The delayed or piggy-backed acknowledgment is due: send it alone.
    fn handle_timeout(&mut self, now: Instant) {
        if self.ack_deadline.is_some_and(|d| d <= now) {
            self.ack_deadline = None;
            self.pack_due = true;
        }
    }

    /// The Pack first (it carries the newest cumulative state), then the Nack
    /// if it still names the expected frame; a Nack overtaken by an in-order
    /// frame before the driver polled is obsolete and dropped.
    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        if self.pack_due {
            self.pack_due = false;
            self.unacked = 0;
            self.ack_deadline = None;
            self.counters.packs_sent += 1;
            return Some(self.control(Kind::Pack, self.pack_seq, self.expected, self.pack_echo));
        }
        if let Some((seq, ack, echo)) = self.nack_due.take() {
            if ack == self.expected {
                self.counters.nacks_sent += 1;
                return Some(self.control(Kind::Nack, seq, ack, echo));
            }
        }
        None
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ack_deadline
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    /// In-order accept holds nothing: every frame is delivered or released at once.
    fn held_buffers(&self) -> usize {
        0
    }

    fn release_all(&mut self) {
        // In-order accept holds nothing: every frame is delivered or released
        // as it arrives. Only pending acknowledgments are forgotten.
        self.pack_due = false;
        self.nack_due = None;
        self.ack_deadline = None;
    }
}

#[cfg(test)]
mod tests;
