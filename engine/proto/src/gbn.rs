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
            // Only the fragment bits are the caller's; the rest are ours.
            frag: Flags(frame.frag.0 & Flags::WHOLE.0),
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
mod tests {
    use super::*;
    use crate::RtoConfig;

    const SENDER: NodeId = 1;
    const RECEIVER: NodeId = 2;
    const GROUP: u32 = 7;
    const EPOCH: u32 = 3;
    const RTO_US: u64 = 500;

    fn t(us: u64) -> Instant {
        Instant(us * 1_000)
    }

    fn stream(local: NodeId, initial: u32, window: u32) -> StreamConfig {
        StreamConfig {
            group: GROUP,
            local,
            sender: SENDER,
            epoch: EPOCH,
            initial_seq: Seq(initial),
            window_frames: window,
            seed: 1,
        }
    }

    fn cfg(ack_policy: AckPolicy) -> GbnConfig {
        GbnConfig {
            rto: RtoConfig::fixed(Duration::from_micros(RTO_US)),
            ack_policy,
        }
    }

    fn sender(initial: u32, window: u32) -> GbnSender {
        GbnSender::new(
            stream(SENDER, initial, window),
            RECEIVER,
            cfg(AckPolicy::Immediate),
        )
    }

    fn receiver(initial: u32, policy: AckPolicy) -> GbnReceiver {
        GbnReceiver::new(stream(RECEIVER, initial, 8), cfg(policy))
    }

    fn frame(b: u32) -> OutFrame {
        OutFrame {
            buf: BufId(b),
            len: 100 + b as u16,
            frag: Flags::WHOLE,
            last: true,
        }
    }

    /// A Pack or Nack from the receiver to the sender.
    fn feedback(kind: Kind, ack: u32) -> Header {
        let mut h = Header::new(kind);
        h.group = GROUP;
        h.src = RECEIVER;
        h.peer = SENDER;
        h.epoch = EPOCH;
        h.ack = Seq(ack);
        h
    }

    /// A data frame from the sender to the receiver.
    fn data(seq: u32) -> Header {
        let mut h = Header::new(Kind::GbnData);
        h.group = GROUP;
        h.src = SENDER;
        h.peer = RECEIVER;
        h.epoch = EPOCH;
        h.seq = Seq(seq);
        h.flags = Flags::WHOLE;
        h.payload_len = 10;
        h
    }

    /// Expects a data frame `seq` carrying `BufId(buf)`.
    #[track_caller]
    fn expect_data(s: &mut GbnSender, now: Instant, seq: u32, buf: u32, retransmit: bool) {
        let tx = s.poll_transmit(now).expect("a data frame");
        assert_eq!(tx.dest, Dest::Node(RECEIVER));
        assert_eq!(tx.header.kind, Kind::GbnData);
        assert_eq!(
            (tx.header.src, tx.header.peer, tx.header.epoch),
            (SENDER, RECEIVER, EPOCH)
        );
        assert_eq!(tx.header.seq, Seq(seq));
        assert_eq!(tx.body, TxBody::Buf(BufId(buf)));
        assert_eq!(tx.header.payload_len, 100 + buf as u16);
        assert!(tx.header.flags.contains(Flags::WHOLE));
        assert_eq!(tx.header.flags.contains(Flags::RETRANSMIT), retransmit);
    }

    /// Expects a Pack or Nack with `ack`.
    #[track_caller]
    fn expect_control(r: &mut GbnReceiver, now: Instant, kind: Kind, ack: u32) {
        let tx = r.poll_transmit(now).expect("a control frame");
        assert_eq!(tx.dest, Dest::Node(SENDER));
        assert_eq!(tx.body, TxBody::None);
        assert_eq!(
            (tx.header.kind, tx.header.ack, tx.header.payload_len),
            (kind, Seq(ack), 0)
        );
        assert_eq!(
            (tx.header.src, tx.header.peer, tx.header.epoch),
            (RECEIVER, SENDER, EPOCH)
        );
        // The driver routes it back to the sender's stream.
        assert_eq!(crate::stream_of(&tx.header), SENDER);
    }

    #[track_caller]
    fn expect_nothing<E: Endpoint>(e: &mut E, now: Instant) {
        assert_eq!(e.poll_transmit(now), None);
    }

    fn released<E: Endpoint>(e: &mut E) -> Vec<u32> {
        core::iter::from_fn(|| e.poll_event())
            .map(|ev| match ev {
                Event::Release(b) => b.0,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    /// `(seq, buf)` of each delivery; panics on a release.
    fn delivered(r: &mut GbnReceiver) -> Vec<(u32, u32)> {
        core::iter::from_fn(|| r.poll_event())
            .map(|ev| match ev {
                Event::Deliver {
                    stream, seq, buf, ..
                } => {
                    assert_eq!(stream, SENDER);
                    (seq.0, buf.0)
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    /// Sends bufs `first..first+n` at `now` and transmits them in order.
    fn send_and_transmit(s: &mut GbnSender, now: Instant, initial: u32, first: u32, n: u32) {
        for b in first..first + n {
            assert_eq!(s.send(now, frame(b)), Ok(Seq(initial.wrapping_add(b))));
        }
        for b in first..first + n {
            expect_data(s, now, initial.wrapping_add(b), b, false);
        }
    }

    #[test]
    fn window_fills_and_refuses() {
        let mut s = sender(100, 4);
        assert!(s.is_idle() && s.can_send());
        send_and_transmit(&mut s, t(1000), 100, 0, 4);
        assert!(!s.can_send());
        assert_eq!(
            s.send(t(1000), frame(4)),
            Err(SendError::WindowFull(BufId(4)))
        );
        expect_nothing(&mut s, t(1000));
        assert_eq!(s.counters().window_full, 1);
        assert_eq!(s.counters().data_sent, 4);
        assert_eq!(s.held_buffers(), 4);
        assert_eq!(s.poll_timeout(), Some(t(1000 + RTO_US)));
    }

    #[test]
    fn pack_slides_the_window_and_releases() {
        let mut s = sender(100, 4);
        send_and_transmit(&mut s, t(1000), 100, 0, 4);
        s.handle_frame(t(1010), &feedback(Kind::Pack, 102), RxBody::None);
        assert_eq!(released(&mut s), vec![0, 1]);
        assert_eq!(s.outstanding(), 2);
        assert!(s.can_send());
        assert_eq!(s.send(t(1010), frame(4)), Ok(Seq(104)));
        expect_data(&mut s, t(1010), 104, 4, false);
        // A stale Pack changes nothing; a Pack beyond what was sent is rejected.
        s.handle_frame(t(1020), &feedback(Kind::Pack, 101), RxBody::None);
        s.handle_frame(t(1020), &feedback(Kind::Pack, 110), RxBody::None);
        assert_eq!(released(&mut s), Vec::<u32>::new());
        assert_eq!(s.counters().rejected, 1);
        s.handle_frame(t(1030), &feedback(Kind::Pack, 105), RxBody::None);
        assert_eq!(released(&mut s), vec![2, 3, 4]);
        assert!(s.is_idle());
        assert_eq!(s.poll_timeout(), None);
        assert_eq!(s.counters().packs_received, 4);
    }

    #[test]
    fn nack_goes_back_resends_all_outstanding_and_stalls() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 4);
        // The receiver lacks 101: 100 arrived (the Nack is cumulative too).
        s.handle_frame(t(1020), &feedback(Kind::Nack, 101), RxBody::None);
        assert_eq!(released(&mut s), vec![0]);
        assert!(s.is_stalled());
        expect_data(&mut s, t(1020), 101, 1, true);
        expect_data(&mut s, t(1020), 102, 2, true);
        expect_data(&mut s, t(1020), 103, 3, true);
        expect_nothing(&mut s, t(1020));
        // In Stall new frames are accepted but nothing new goes out.
        assert_eq!(s.send(t(1030), frame(4)), Ok(Seq(104)));
        expect_nothing(&mut s, t(1030));
        // A Pack that acknowledges nothing new does not end Stall.
        s.handle_frame(t(1040), &feedback(Kind::Pack, 101), RxBody::None);
        assert!(s.is_stalled());
        expect_nothing(&mut s, t(1040));
        // The first Pack ends it.
        s.handle_frame(t(1050), &feedback(Kind::Pack, 102), RxBody::None);
        assert!(!s.is_stalled());
        assert_eq!(released(&mut s), vec![1]);
        expect_data(&mut s, t(1050), 104, 4, false);
        expect_nothing(&mut s, t(1050));
        let c = s.counters();
        assert_eq!(
            (
                c.stalls,
                c.nacks_received,
                c.data_sent,
                c.data_retransmitted
            ),
            (1, 1, 5, 3)
        );
    }

    /// A Pack or Nack echoing the send stamp `echo_us`.
    fn echoed(kind: Kind, ack: u32, echo_us: u64) -> Header {
        let mut h = feedback(kind, ack);
        h.flags = Flags::ACK_VALID;
        h.tstamp_us = echo_us as u32;
        h
    }

    #[test]
    fn timeout_retransmits_only_the_oldest_frame_as_a_probe() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 1);
        send_and_transmit(&mut s, t(1200), 100, 1, 1);
        // One timer, for the oldest frame, from its departure.
        assert_eq!(s.poll_timeout(), Some(t(1500)));
        s.handle_timeout(t(1499));
        expect_nothing(&mut s, t(1499));
        s.handle_timeout(t(1500));
        expect_data(&mut s, t(1500), 100, 0, true);
        expect_nothing(&mut s, t(1500));
        assert!(!s.is_stalled());
        // The timer restarts when the probe leaves; the second frame has no
        // timer of its own.
        assert_eq!(s.poll_timeout(), Some(t(2000)));
        assert_eq!(s.counters().timeouts, 1);
        assert_eq!(s.counters().stalls, 0);
    }

    #[test]
    fn an_answered_probe_goes_back_over_what_was_sent_before_it() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 3);
        s.handle_timeout(t(1500));
        expect_data(&mut s, t(1500), 100, 0, true);
        // A frame sent after the probe is not part of what it recovers.
        assert_eq!(s.send(t(1510), frame(3)), Ok(Seq(103)));
        expect_data(&mut s, t(1510), 103, 3, false);
        // The Pack echoes the probe's stamp: the original 100 was lost, and the
        // in-order receiver dropped 101 and 102 behind it.
        s.handle_frame(t(1600), &echoed(Kind::Pack, 101, 1500), RxBody::None);
        assert_eq!(released(&mut s), vec![0]);
        expect_data(&mut s, t(1600), 101, 1, true);
        expect_data(&mut s, t(1600), 102, 2, true);
        expect_nothing(&mut s, t(1600));
        assert_eq!(s.counters().data_retransmitted, 3);
        // Progress: the timeout is the estimate's again, not doubled.
        assert_eq!(s.poll_timeout(), Some(t(2100)));
    }

    #[test]
    fn a_probe_overtaken_by_the_original_is_a_spurious_timeout() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 3);
        s.handle_timeout(t(1500));
        expect_data(&mut s, t(1500), 100, 0, true);
        // The original's Pack, late: nothing was lost, nothing more is resent.
        s.handle_frame(t(1600), &echoed(Kind::Pack, 101, 1000), RxBody::None);
        assert_eq!(released(&mut s), vec![0]);
        expect_nothing(&mut s, t(1600));
        s.handle_frame(t(1610), &echoed(Kind::Pack, 103, 1000), RxBody::None);
        assert_eq!(released(&mut s), vec![1, 2]);
        // The probe's own answer (a duplicate re-acknowledged) changes nothing.
        s.handle_frame(t(1620), &echoed(Kind::Pack, 103, 1500), RxBody::None);
        expect_nothing(&mut s, t(1620));
        assert!(s.is_idle());
        assert_eq!(s.counters().data_retransmitted, 1);
    }

    #[test]
    fn timeout_in_stall_probes_and_stays_stalled() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 3);
        s.handle_frame(t(1100), &feedback(Kind::Nack, 100), RxBody::None);
        for b in 0..3 {
            expect_data(&mut s, t(1100), 100 + b, b, true);
        }
        assert_eq!(s.send(t(1100), frame(3)), Ok(Seq(103)));
        // Every retransmission was lost. The timer restarted when the first
        // of them left.
        assert_eq!(s.poll_timeout(), Some(t(1600)));
        s.handle_timeout(t(1600));
        expect_data(&mut s, t(1600), 100, 0, true);
        expect_nothing(&mut s, t(1600));
        assert!(s.is_stalled());
        // The probe is answered: the rest goes again, and Stall ends.
        s.handle_frame(t(1700), &echoed(Kind::Pack, 101, 1600), RxBody::None);
        assert_eq!(released(&mut s), vec![0]);
        assert!(!s.is_stalled());
        expect_data(&mut s, t(1700), 101, 1, true);
        expect_data(&mut s, t(1700), 102, 2, true);
        expect_data(&mut s, t(1700), 103, 3, false);
        let c = s.counters();
        assert_eq!((c.stalls, c.timeouts, c.data_retransmitted), (1, 1, 6));
    }

    #[test]
    fn an_unanswered_probe_is_followed_by_the_whole_window() {
        // The receiver has 100 (its Pack was lost) and is stalled on 101 (its
        // Nack was lost too): it drops the probe of 100 silently, so only
        // resending 101 can move things.
        let mut s = sender(100, 8);
        let mut r = receiver(100, AckPolicy::Immediate);
        send_and_transmit(&mut s, t(1000), 100, 0, 3);
        r.handle_frame(t(1005), &data(100), RxBody::Data(BufId(10)));
        r.handle_frame(t(1005), &data(102), RxBody::Data(BufId(12)));
        assert!(r.is_stalled());
        s.handle_timeout(t(1500));
        expect_data(&mut s, t(1500), 100, 0, true);
        r.handle_frame(t(1505), &data(100), RxBody::Data(BufId(20)));
        s.handle_timeout(t(2000));
        expect_data(&mut s, t(2000), 100, 0, true);
        expect_data(&mut s, t(2000), 101, 1, true);
        expect_data(&mut s, t(2000), 102, 2, true);
        expect_nothing(&mut s, t(2000));
        assert_eq!(s.counters().timeouts, 2);
    }

    /// The sender of the adaptive-timer tests: the default RTO bounds.
    fn adaptive_sender(window: u32) -> GbnSender {
        GbnSender::new(stream(SENDER, 100, window), RECEIVER, GbnConfig::default())
    }

    #[test]
    fn the_timeout_follows_the_echoed_round_trip() {
        let mut s = adaptive_sender(8);
        send_and_transmit(&mut s, t(1000), 100, 0, 1);
        // Before any sample: the initial 500 us.
        assert_eq!(s.poll_timeout(), Some(t(1500)));
        // A slow link: the Pack comes after 3 ms (not a timeout yet in this
        // test: the driver only calls handle_timeout when asked).
        s.handle_frame(t(4000), &echoed(Kind::Pack, 101, 1000), RxBody::None);
        assert_eq!(s.rtt().srtt(), Some(Duration::from_micros(3000)));
        // SRTT + 4·RTTVAR = 3 + 4·1.5 ms.
        assert_eq!(s.rto(), Duration::from_micros(9000));
        for i in 1..40u32 {
            let at = 4000 + u64::from(i) * 3000;
            send_and_transmit(&mut s, t(at), 100, i, 1);
            s.handle_frame(t(at + 3000), &echoed(Kind::Pack, 101 + i, at), RxBody::None);
        }
        // Steady: twice the 3 ms round trip.
        assert_eq!(s.rto(), Duration::from_micros(6000));
        assert_eq!(s.counters().timeouts, 0);
    }

    #[test]
    fn a_window_draining_through_a_slow_link_does_not_time_out() {
        // 16 frames leave at once into a link that delivers one every 1 ms;
        // each Pack comes 1 ms after the previous one. Timed from its own
        // departure, the last frame would wait 16 ms; the timer instead
        // restarts at each Pack.
        let mut s = adaptive_sender(16);
        send_and_transmit(&mut s, t(0), 100, 0, 1);
        s.handle_frame(t(1100), &echoed(Kind::Pack, 101, 0), RxBody::None);
        send_and_transmit(&mut s, t(1100), 100, 1, 15);
        for i in 1..16u32 {
            let at = 1100 + u64::from(i) * 1000;
            let due = s.poll_timeout().expect("frames outstanding");
            assert!(due > t(at), "timer at {due:?} before the Pack at {at} us");
            s.handle_timeout(t(at));
            s.handle_frame(t(at), &echoed(Kind::Pack, 101 + i, 1100), RxBody::None);
        }
        assert!(s.is_idle());
        assert_eq!(s.counters().timeouts, 0);
        assert_eq!(s.counters().data_retransmitted, 0);
    }

    #[test]
    fn unanswered_timeouts_back_off_until_progress() {
        let mut s = adaptive_sender(8);
        send_and_transmit(&mut s, t(0), 100, 0, 1);
        let mut now = 0;
        for k in 0..5 {
            let due = s.poll_timeout().expect("running");
            assert_eq!(due, t(now + (500 << k)), "expiry {k}");
            now += 500 << k;
            s.handle_timeout(t(now));
            expect_data(&mut s, t(now), 100, 0, true);
        }
        assert_eq!(s.counters().timeouts, 5);
        s.handle_frame(t(now + 30), &echoed(Kind::Pack, 101, now), RxBody::None);
        assert_eq!(s.rtt().backoff(), 0);
    }

    #[test]
    fn packs_and_nacks_echo_the_stamp_of_the_frame_that_caused_them() {
        let mut r = receiver(100, AckPolicy::Immediate);
        let mut d = data(100);
        d.tstamp_us = 777;
        r.handle_frame(t(1000), &d, RxBody::Data(BufId(1)));
        let pack = r.poll_transmit(t(1000)).expect("a Pack");
        assert_eq!(pack.header.kind, Kind::Pack);
        assert!(pack.header.flags.contains(Flags::ACK_VALID));
        assert_eq!(pack.header.tstamp_us, 777);
        let mut d = data(105);
        d.tstamp_us = 888;
        r.handle_frame(t(1000), &d, RxBody::Data(BufId(2)));
        let nack = r.poll_transmit(t(1000)).expect("a Nack");
        assert_eq!(nack.header.kind, Kind::Nack);
        assert!(nack.header.flags.contains(Flags::ACK_VALID));
        assert_eq!(nack.header.tstamp_us, 888);
    }

    #[test]
    fn second_nack_goes_back_again_without_a_second_stall() {
        let mut s = sender(100, 8);
        send_and_transmit(&mut s, t(1000), 100, 0, 3);
        s.handle_frame(t(1100), &feedback(Kind::Nack, 100), RxBody::None);
        for b in 0..3 {
            expect_data(&mut s, t(1100), 100 + b, b, true);
        }
        s.handle_frame(t(1200), &feedback(Kind::Nack, 101), RxBody::None);
        assert_eq!(released(&mut s), vec![0]);
        expect_data(&mut s, t(1200), 101, 1, true);
        expect_data(&mut s, t(1200), 102, 2, true);
        // A stale Nack (before the base) is ignored; one naming an unsent frame is rejected.
        s.handle_frame(t(1300), &feedback(Kind::Nack, 100), RxBody::None);
        s.handle_frame(t(1300), &feedback(Kind::Nack, 103), RxBody::None);
        expect_nothing(&mut s, t(1300));
        assert_eq!((s.counters().stalls, s.counters().rejected), (1, 1));
    }

    #[test]
    fn sequence_numbers_wrap() {
        let initial = u32::MAX - 1;
        let mut s = sender(initial, 4);
        let mut r = receiver(initial, AckPolicy::Immediate);
        send_and_transmit(&mut s, t(1000), initial, 0, 4);
        for (seq, buf, ack) in [
            (u32::MAX - 1, 10, u32::MAX),
            (u32::MAX, 11, 0),
            (0, 12, 1),
            (1, 13, 2),
        ] {
            r.handle_frame(t(1010), &data(seq), RxBody::Data(BufId(buf)));
            assert_eq!(delivered(&mut r), vec![(seq, buf)]);
            expect_control(&mut r, t(1010), Kind::Pack, ack);
        }
        s.handle_frame(t(1020), &feedback(Kind::Pack, 2), RxBody::None);
        assert_eq!(released(&mut s), vec![0, 1, 2, 3]);
        assert!(s.is_idle());
        assert_eq!(s.send(t(1020), frame(4)), Ok(Seq(2)));
    }

    #[test]
    fn epoch_mismatch_and_strangers_are_dropped() {
        let mut s = sender(100, 4);
        send_and_transmit(&mut s, t(1000), 100, 0, 2);
        let mut old = feedback(Kind::Pack, 102);
        old.epoch = EPOCH - 1;
        s.handle_frame(t(1010), &old, RxBody::None);
        let mut stranger = feedback(Kind::Nack, 100);
        stranger.src = 9;
        s.handle_frame(t(1010), &stranger, RxBody::None);
        s.handle_frame(t(1010), &data(100), RxBody::Data(BufId(50)));
        assert_eq!(
            released(&mut s),
            vec![50],
            "a data buffer comes straight back"
        );
        expect_nothing(&mut s, t(1010));
        assert!(!s.is_stalled());
        assert_eq!(s.outstanding(), 2);
        assert_eq!(
            (s.counters().wrong_epoch_dropped, s.counters().rejected),
            (1, 2)
        );

        let mut r = receiver(100, AckPolicy::Immediate);
        let mut old = data(100);
        old.epoch = EPOCH + 1;
        r.handle_frame(t(1010), &old, RxBody::Data(BufId(1)));
        let mut stranger = data(100);
        stranger.src = 9;
        r.handle_frame(t(1010), &stranger, RxBody::Data(BufId(2)));
        r.handle_frame(t(1010), &feedback(Kind::Pack, 1), RxBody::None);
        assert_eq!(released(&mut r), vec![1, 2]);
        expect_nothing(&mut r, t(1010));
        assert_eq!(r.next_expected(), Seq(100));
        assert_eq!(
            (r.counters().wrong_epoch_dropped, r.counters().rejected),
            (1, 2)
        );
    }

    #[test]
    fn receiver_nacks_once_stalls_silently_and_resumes_in_order() {
        let mut r = receiver(100, AckPolicy::Immediate);
        r.handle_frame(t(1000), &data(100), RxBody::Data(BufId(1)));
        assert_eq!(delivered(&mut r), vec![(100, 1)]);
        expect_control(&mut r, t(1000), Kind::Pack, 101);
        expect_nothing(&mut r, t(1000));
        // 101 lost: 102 is out of order -> one Nack naming 101, Stall.
        r.handle_frame(t(1010), &data(102), RxBody::Data(BufId(3)));
        assert_eq!(released(&mut r), vec![3]);
        assert!(r.is_stalled());
        expect_control(&mut r, t(1010), Kind::Nack, 101);
        expect_nothing(&mut r, t(1010));
        // More out-of-order frames and duplicates: dropped without a word.
        r.handle_frame(t(1020), &data(103), RxBody::Data(BufId(4)));
        r.handle_frame(t(1020), &data(100), RxBody::Data(BufId(5)));
        assert_eq!(released(&mut r), vec![4, 5]);
        expect_nothing(&mut r, t(1020));
        // The go-back's first frame: delivered, acknowledged, Stall over.
        r.handle_frame(t(1030), &data(101), RxBody::Data(BufId(6)));
        assert_eq!(delivered(&mut r), vec![(101, 6)]);
        assert!(!r.is_stalled());
        expect_control(&mut r, t(1030), Kind::Pack, 102);
        // Out of Stall a duplicate is re-acknowledged (our Pack may have been lost).
        r.handle_frame(t(1040), &data(101), RxBody::Data(BufId(7)));
        assert_eq!(released(&mut r), vec![7]);
        expect_control(&mut r, t(1040), Kind::Pack, 102);
        // A new loss is a new Stall with its own Nack.
        r.handle_frame(t(1050), &data(104), RxBody::Data(BufId(8)));
        assert_eq!(released(&mut r), vec![8]);
        expect_control(&mut r, t(1050), Kind::Nack, 102);
        let c = r.counters();
        assert_eq!(
            (c.data_received, c.delivered, c.duplicates_dropped),
            (7, 2, 2)
        );
        assert_eq!((c.out_of_window_dropped, c.stalls), (3, 2));
        assert_eq!((c.packs_sent, c.nacks_sent), (3, 2));
        assert_eq!(r.held_buffers(), 0);
    }

    #[test]
    fn nack_overtaken_before_the_poll_is_not_sent() {
        let mut r = receiver(100, AckPolicy::Immediate);
        r.handle_frame(t(1000), &data(101), RxBody::Data(BufId(1)));
        r.handle_frame(t(1000), &data(100), RxBody::Data(BufId(2)));
        expect_control(&mut r, t(1000), Kind::Pack, 101);
        expect_nothing(&mut r, t(1000));
        assert_eq!(r.counters().nacks_sent, 0);
    }

    #[test]
    fn receiver_delivery_keeps_the_frame_flags() {
        let mut r = receiver(100, AckPolicy::Immediate);
        let mut h = data(100);
        h.flags = Flags::FRAG_FIRST.with(Flags::RETRANSMIT);
        h.payload_len = 33;
        r.handle_frame(t(1000), &h, RxBody::Data(BufId(1)));
        assert_eq!(
            r.poll_event(),
            Some(Event::Deliver {
                stream: SENDER,
                seq: Seq(100),
                buf: BufId(1),
                len: 33,
                flags: Flags::FRAG_FIRST.with(Flags::RETRANSMIT),
            })
        );
    }

    #[test]
    fn delayed_ack_every_k_frames_or_after_max_delay() {
        let policy = AckPolicy::Delayed {
            every: 3,
            max_delay: Duration::from_micros(100),
        };
        let mut r = receiver(100, policy);
        r.handle_frame(t(1000), &data(100), RxBody::Data(BufId(1)));
        expect_nothing(&mut r, t(1000));
        assert_eq!(r.poll_timeout(), Some(t(1100)));
        r.handle_frame(t(1010), &data(101), RxBody::Data(BufId(2)));
        expect_nothing(&mut r, t(1010));
        assert_eq!(r.poll_timeout(), Some(t(1100)), "timer runs from the first");
        r.handle_frame(t(1020), &data(102), RxBody::Data(BufId(3)));
        expect_control(&mut r, t(1020), Kind::Pack, 103);
        assert_eq!(r.poll_timeout(), None);
        // One more frame: no k-th frame comes, the timer sends the Pack.
        r.handle_frame(t(2000), &data(103), RxBody::Data(BufId(4)));
        expect_nothing(&mut r, t(2000));
        r.handle_timeout(t(2099));
        expect_nothing(&mut r, t(2099));
        r.handle_timeout(t(2100));
        expect_control(&mut r, t(2100), Kind::Pack, 104);
        expect_nothing(&mut r, t(2100));
        assert_eq!(delivered(&mut r).len(), 4);
        assert_eq!(r.counters().packs_sent, 2);
    }

    #[test]
    fn delayed_ack_answers_a_requested_frame_at_once() {
        let mut r = receiver(100, AckPolicy::DEFAULT);
        r.handle_frame(t(1000), &data(100), RxBody::Data(BufId(1)));
        expect_nothing(&mut r, t(1000));
        assert_eq!(r.poll_timeout(), Some(t(1050)), "the default waits 50 us");
        // The end of the sender's burst asks: the Pack goes now, covering both.
        let mut asking = data(101);
        asking.flags = asking.flags.with(Flags::ACK_REQ);
        r.handle_frame(t(1010), &asking, RxBody::Data(BufId(2)));
        expect_control(&mut r, t(1010), Kind::Pack, 102);
        assert_eq!(r.poll_timeout(), None, "nothing left to acknowledge");
        // Sixteen unflagged frames make a Pack without a request.
        for k in 0..16 {
            r.handle_frame(t(2000 + k), &data(102 + k as u32), RxBody::Data(BufId(3)));
            if k < 15 {
                expect_nothing(&mut r, t(2000 + k));
            }
        }
        expect_control(&mut r, t(2015), Kind::Pack, 118);
        assert_eq!(r.counters().packs_sent, 2);
    }

    #[test]
    fn stall_exit_acknowledges_at_once_under_a_delayed_policy() {
        let policy = AckPolicy::Delayed {
            every: 8,
            max_delay: Duration::from_micros(100),
        };
        let mut r = receiver(100, policy);
        r.handle_frame(t(1000), &data(101), RxBody::Data(BufId(1)));
        expect_control(&mut r, t(1000), Kind::Nack, 100);
        r.handle_frame(t(1010), &data(100), RxBody::Data(BufId(2)));
        expect_control(&mut r, t(1010), Kind::Pack, 101);
    }

    #[test]
    fn piggyback_ack_rides_reverse_traffic_or_goes_alone() {
        let policy = AckPolicy::Piggyback {
            max_delay: Duration::from_micros(200),
        };
        let mut r = receiver(100, policy);
        let mut s = sender(100, 4);
        send_and_transmit(&mut s, t(1000), 100, 0, 2);
        assert_eq!(r.take_piggyback_ack(), None, "nothing to acknowledge yet");
        r.handle_frame(t(1010), &data(100), RxBody::Data(BufId(10)));
        r.handle_frame(t(1010), &data(101), RxBody::Data(BufId(11)));
        expect_nothing(&mut r, t(1010));
        assert_eq!(r.poll_timeout(), Some(t(1210)));
        // Reverse traffic takes the acknowledgment: no standalone Pack.
        assert_eq!(r.take_piggyback_ack(), Some(Seq(102)));
        assert_eq!(r.take_piggyback_ack(), None);
        assert_eq!(r.poll_timeout(), None);
        r.handle_timeout(t(1210));
        expect_nothing(&mut r, t(1210));
        s.handle_piggyback_ack(t(1020), Seq(102));
        assert_eq!(released(&mut s), vec![0, 1]);
        assert!(s.is_idle());
        // No reverse traffic within max_delay: the Pack goes alone.
        send_and_transmit(&mut s, t(1300), 100, 2, 1);
        r.handle_frame(t(1310), &data(102), RxBody::Data(BufId(12)));
        r.handle_timeout(t(1510));
        expect_control(&mut r, t(1510), Kind::Pack, 103);
        assert_eq!(r.take_piggyback_ack(), None);
        assert_eq!(r.counters().packs_sent, 1);
    }

    /// Sends `n` frames and transmits them all; returns whether each asked for a Pack.
    fn ack_requests(s: &mut GbnSender, now: Instant, first: u32, n: u32) -> Vec<bool> {
        for b in first..first + n {
            s.send(now, frame(b)).expect("window has room");
        }
        core::iter::from_fn(|| s.poll_transmit(now))
            .map(|tx| tx.header.flags.contains(Flags::ACK_REQ))
            .collect()
    }

    #[test]
    fn sender_asks_for_a_pack_at_the_end_of_a_burst_and_every_quarter_window() {
        let mut s = sender(100, 8); // a quarter window: 2 frames
        assert_eq!(
            ack_requests(&mut s, t(1000), 0, 5),
            [false, true, false, true, true]
        );
        // A lone frame ends its burst at once.
        s.handle_frame(t(1010), &feedback(Kind::Pack, 105), RxBody::None);
        assert_eq!(ack_requests(&mut s, t(1020), 5, 1), [true]);
        // A go-back resend is a burst too: its last frame asks.
        assert_eq!(ack_requests(&mut s, t(1030), 6, 1), [true]);
        s.handle_frame(t(1040), &feedback(Kind::Nack, 105), RxBody::None);
        let tx: Vec<_> = core::iter::from_fn(|| s.poll_transmit(t(1040))).collect();
        assert_eq!(tx.len(), 2);
        assert!(tx
            .iter()
            .all(|t| t.header.flags.contains(Flags::RETRANSMIT)));
        assert!(tx[1].header.flags.contains(Flags::ACK_REQ));
    }

    #[test]
    fn under_packs_on_request_the_timer_waits_for_a_requested_frame() {
        let mut s = GbnSender::new(stream(SENDER, 100, 8), RECEIVER, cfg(AckPolicy::OnRequest));
        for b in 0..5 {
            s.send(t(1000), frame(b)).unwrap();
        }
        // The first frame does not ask (more follow): no Pack is due for it,
        // so no timer; the second asks (a quarter window) and starts it.
        let first = s.poll_transmit(t(1000)).unwrap();
        assert!(!first.header.flags.contains(Flags::ACK_REQ));
        assert_eq!(s.poll_timeout(), None);
        let second = s.poll_transmit(t(1100)).unwrap();
        assert!(second.header.flags.contains(Flags::ACK_REQ));
        assert_eq!(s.poll_timeout(), Some(t(1100 + RTO_US)));
        // Its Pack comes; what follows is unrequested again: the timer stops.
        s.handle_frame(t(1200), &feedback(Kind::Pack, 102), RxBody::None);
        assert_eq!(s.poll_timeout(), None);
        let third = s.poll_transmit(t(1200)).unwrap();
        assert!(!third.header.flags.contains(Flags::ACK_REQ));
        assert_eq!(s.poll_timeout(), None);
        // Under the default policy every frame is answered: the first one
        // starts the timer.
        let mut s = sender(100, 8);
        for b in 0..5 {
            s.send(t(1000), frame(b)).unwrap();
        }
        s.poll_transmit(t(1000)).unwrap();
        assert_eq!(s.poll_timeout(), Some(t(1000 + RTO_US)));
    }

    #[test]
    fn on_request_policy_packs_only_flagged_frames_duplicates_and_stall_exits() {
        let mut r = receiver(100, AckPolicy::OnRequest);
        let asked = |seq: u32| {
            let mut h = data(seq);
            h.flags = h.flags.with(Flags::ACK_REQ);
            h
        };
        r.handle_frame(t(1000), &data(100), RxBody::Data(BufId(1)));
        r.handle_frame(t(1000), &data(101), RxBody::Data(BufId(2)));
        expect_nothing(&mut r, t(1000));
        assert_eq!(r.poll_timeout(), None, "no timer");
        r.handle_frame(t(1010), &asked(102), RxBody::Data(BufId(3)));
        expect_control(&mut r, t(1010), Kind::Pack, 103);
        expect_nothing(&mut r, t(1010));
        // A duplicate: its Pack was lost or is late; answer at once.
        r.handle_frame(t(1020), &data(101), RxBody::Data(BufId(4)));
        expect_control(&mut r, t(1020), Kind::Pack, 103);
        // A gap: one Nack; the first in-order frame ends Stall with a Pack.
        r.handle_frame(t(1030), &data(104), RxBody::Data(BufId(5)));
        expect_control(&mut r, t(1030), Kind::Nack, 103);
        r.handle_frame(t(1040), &data(103), RxBody::Data(BufId(6)));
        expect_control(&mut r, t(1040), Kind::Pack, 104);
        assert_eq!(r.counters().packs_sent, 3);
        // Unflagged in-order frames can still ride on reverse traffic.
        r.handle_frame(t(1050), &data(104), RxBody::Data(BufId(7)));
        assert_eq!(r.take_piggyback_ack(), Some(Seq(105)));
    }

    #[test]
    fn every_buffer_comes_back_once() {
        // Sender: sent, go-back, timeouts, then everything acknowledged.
        let mut s = sender(u32::MAX - 2, 4);
        let initial = u32::MAX - 2;
        let mut back = Vec::new();
        send_and_transmit(&mut s, t(1000), initial, 0, 4);
        s.handle_frame(t(1010), &feedback(Kind::Nack, u32::MAX - 1), RxBody::None);
        back.extend(released(&mut s));
        while s.poll_transmit(t(1010)).is_some() {}
        s.handle_timeout(t(1510));
        while s.poll_transmit(t(1510)).is_some() {}
        s.handle_frame(t(1600), &feedback(Kind::Pack, 1), RxBody::None);
        back.extend(released(&mut s));
        back.sort_unstable();
        assert_eq!(back, vec![0, 1, 2, 3]);
        assert_eq!(s.held_buffers(), 0);
    }
}
