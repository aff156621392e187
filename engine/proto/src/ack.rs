//! The ACK baseline (seed 000 §2 (2), Figure 3): the sender multicasts each
//! frame and waits for an ACK from every receiver; a receiver that gets a
//! multicast frame immediately unicasts an ACK back; frames not acknowledged by
//! every receiver within the timeout are multicast again.
//!
//! The paper's form is stop-and-wait (seed 000 §4 (1): "前两种算法是利用停-等协议
//! 实现的"). Here the sender keeps up to `StreamConfig::window_frames` frames
//! unacknowledged; **a window of 1 is exactly the paper's algorithm**, a larger
//! window is the same rule pipelined.
//!
//! # Sender
//!
//! One state per frame in the window: *unsent* (queued, not yet on the wire),
//! *in flight* (sent, not yet acknowledged by every member). A frame is freed
//! ([`Event::Release`]) once the cumulative ACK of every current member has
//! passed it. One retransmission timer guards the window (go-back-N from the
//! oldest unacknowledged frame, seed 000 §2 (2): "发送方重新多播前一个数据包"):
//!
//! - armed when a frame leaves and the timer is not armed;
//! - restarted whenever the oldest unacknowledged frame advances and the new
//!   oldest has left; stopped when nothing sent is unacknowledged;
//! - on expiry every frame still in the window is multicast again (flagged
//!   RETRANSMIT), in sequence order, the timeout doubles until the next
//!   progress, and the timer is re-armed when the first of them leaves.
//!
//! The timeout is not fixed: every ACK echoes the send stamp of the data frame
//! that caused it, each member's round trip is estimated as in RFC 6298
//! ([`crate::rtt`]), and the timeout is the largest member's (the sender waits
//! for all of them). Restarting at each advance of the oldest frame means a
//! window queued behind a slow link is timed frame by frame as it drains, not
//! from its first departure.
//!
//! # Receiver
//!
//! Frames go through the shared in-order buffer (`recv::InOrder`). Every data
//! frame of the right epoch, new, duplicate or beyond the window, is answered by
//! one ACK carrying the cumulative next expected sequence number (so a lost ACK
//! is repaired by the next retransmission) and echoing the frame's send stamp.
//! The receiver has no timer.

use std::collections::VecDeque;

use crate::recv::InOrder;
use crate::rtt::{backed_off, echo_rtt, RtoConfig, RttEstimator, DEFAULT_RTO};
use crate::window::SeqWindow;
use crate::{
    api::header_for, BufId, Counters, Dest, Duration, Endpoint, Event, Instant, OutFrame, RxBody,
    SendError, Sender, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, Seq};

/// Configuration of the ACK baseline. The window is the stream's
/// `window_frames` (1 = the paper's stop-and-wait).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AckConfig {
    /// How long the sender waits for every ACK of its oldest unacknowledged
    /// frame before multicasting the window again: measured from the echoed
    /// round trips (module docs). [`RtoConfig::fixed`] gives a static timeout.
    pub rto: RtoConfig,
}

impl Default for AckConfig {
    fn default() -> Self {
        AckConfig { rto: DEFAULT_RTO }
    }
}

/// Sender of the ACK baseline (seed 000 §2 (2)).
#[derive(Debug)]
pub struct AckSender {
    stream: StreamConfig,
    cfg: AckConfig,
    /// Each member and its cumulative ACK (the next sequence it expects).
    members: Vec<Member>,
    /// Frames sent or queued and not yet acknowledged by every member:
    /// `[window.base(), next_seq)`.
    window: SeqWindow<Entry>,
    /// The sequence number of the next frame handed to `send`.
    next_seq: Seq,
    /// Every entry in `[window.base(), scan)` has nothing to transmit: where
    /// `poll_transmit` starts looking.
    scan: Seq,
    /// The retransmission timer (see the module docs).
    rto_deadline: Option<Instant>,
    /// Expiries since the oldest frame last advanced: each doubles the timeout.
    backoff: u32,
    events: VecDeque<Event>,
    counters: Counters,
}

#[derive(Debug, Clone, Copy)]
struct Member {
    node: NodeId,
    acked: Seq,
    rtt: RttEstimator,
    /// When it joined the stream, or opened it again, on this sender's
    /// clock (microseconds, as ACK echoes carry it): an ACK echoing an
    /// earlier time comes from the receive stream it had before and counts
    /// for nothing (its cumulative ACK could free frames the new stream
    /// lacks, and this baseline has no NAK to get them back). `None` for
    /// the members the stream was opened with.
    since_us: Option<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    buf: BufId,
    len: u16,
    frag: Flags,
    /// Has been on the wire at least once (a further copy is a retransmission).
    sent: bool,
    /// Must (again) be put on the wire.
    pending: bool,
}

impl AckSender {
    /// A sender for `stream` whose ACKs must come from `members`.
    pub fn new(stream: StreamConfig, cfg: AckConfig, members: &[NodeId]) -> AckSender {
        let mut s = AckSender {
            stream,
            cfg,
            members: Vec::with_capacity(members.len()),
            window: SeqWindow::new(stream.initial_seq, stream.window_frames),
            next_seq: stream.initial_seq,
            scan: stream.initial_seq,
            rto_deadline: None,
            backoff: 0,
            events: VecDeque::with_capacity(stream.window_frames as usize),
            counters: Counters::default(),
        };
        s.install_members(None, members);
        s
    }

    /// Frames in the window (sent or queued, not acknowledged by every member).
    fn in_window(&self) -> u32 {
        self.next_seq.distance(self.window.base()) as u32
    }

    /// `now`: when the members not known before join (`None` when the
    /// stream opens with them).
    fn install_members(&mut self, now: Option<Instant>, members: &[NodeId]) {
        let base = self.window.base();
        let old = core::mem::take(&mut self.members);
        for &node in members {
            if node == 0 || node == self.stream.local || self.members.iter().any(|m| m.node == node)
            {
                continue;
            }
            // A member we already know keeps its progress and its round
            // trip; a new one joins at the oldest frame still held (the
            // join point) and must acknowledge everything from there.
            let known = old.iter().find(|m| m.node == node);
            self.members.push(Member {
                node,
                acked: known.map_or(base, |m| m.acked.max(base)),
                rtt: known.map_or(RttEstimator::new(), |m| m.rtt),
                since_us: match known {
                    Some(m) => m.since_us,
                    None => now.map(Instant::as_micros_u32),
                },
            });
        }
    }

    /// The retransmission timeout: the largest member's (RFC 6298, the
    /// initial value for a member not measured yet), doubled per expiry
    /// since the last progress.
    pub fn rto(&self) -> Duration {
        let cfg = &self.cfg.rto;
        let base = self
            .members
            .iter()
            .map(|m| m.rtt.base_rto(cfg))
            .max()
            .unwrap_or(cfg.initial);
        backed_off(base, self.backoff, cfg)
    }

    /// Arms the timer for the oldest frame if it has left.
    fn restart_timer(&mut self, now: Instant) {
        let oldest_sent = self.window.get(self.window.base()).is_some_and(|e| e.sent);
        self.rto_deadline = oldest_sent.then(|| now + self.rto());
    }

    /// Frees every frame acknowledged by all members and restarts the timer on
    /// progress (seed 000 §2 (2): done when ACKs from every destination came).
    fn release_acknowledged(&mut self, now: Instant) {
        let all_acked = self
            .members
            .iter()
            .map(|m| m.acked)
            .reduce(Seq::min)
            .unwrap_or(self.next_seq);
        if !all_acked.after(self.window.base()) {
            return;
        }
        let events = &mut self.events;
        self.window
            .advance_to(all_acked, |_, e| events.push_back(Event::Release(e.buf)));
        self.scan = self.scan.max(self.window.base());
        self.backoff = 0;
        self.restart_timer(now);
    }

    fn handle_ack(&mut self, now: Instant, header: &Header) {
        let Some(i) = self.members.iter().position(|m| m.node == header.src) else {
            self.counters.rejected += 1;
            return;
        };
        if header.ack.after(self.next_seq) {
            // Acknowledges frames never sent: hostile or confused.
            self.counters.rejected += 1;
            return;
        }
        self.counters.acks_received += 1;
        let m = &mut self.members[i];
        if let Some(since) = m.since_us {
            // Wrapping time order: the echo is at or after the (re)join.
            let fresh = header.flags.contains(Flags::ACK_VALID)
                && header.tstamp_us.wrapping_sub(since) < 1 << 31;
            if !fresh {
                self.counters.acks_stale += 1;
                return;
            }
        }
        if header.flags.contains(Flags::ACK_VALID) {
            if let Some(rtt) = echo_rtt(now, header.tstamp_us) {
                m.rtt.sample(rtt);
            }
        }
        // An older cumulative ACK (reordered) carries no news.
        m.acked = m.acked.max(header.ack);
        self.release_acknowledged(now);
    }
}

impl Endpoint for AckSender {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        if let RxBody::Data(buf) = body {
            // Ours to return whatever it is: a sender takes no data.
            self.events.push_back(Event::Release(buf));
            self.counters.rejected += 1;
            return;
        }
        if header.epoch != self.stream.epoch {
            self.counters.wrong_epoch_dropped += 1;
            return;
        }
        match header.kind {
            Kind::Ack => self.handle_ack(now, header),
            _ => self.counters.rejected += 1,
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.rto_deadline {
            Some(d) if d <= now => {}
            _ => return,
        }
        self.rto_deadline = None;
        if self.window.is_empty() {
            return;
        }
        // Not every ACK came in time: multicast the window again, oldest first
        // (seed 000 §2 (2)), and wait twice as long for the answer.
        self.counters.timeouts += 1;
        self.backoff = self.backoff.saturating_add(1);
        for i in 0..self.in_window() {
            let seq = self.window.base().add(i);
            if let Some(e) = self.window.get_mut(seq) {
                e.pending = true;
            }
        }
        self.scan = self.window.base();
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        while self.scan.before(self.next_seq) {
            let seq = self.scan;
            self.scan = seq.next();
            let Some(e) = self.window.get_mut(seq) else {
                continue;
            };
            if !e.pending {
                continue;
            }
            e.pending = false;
            let mut flags = e.frag;
            if e.sent {
                flags = flags.with(Flags::RETRANSMIT);
                self.counters.data_retransmitted += 1;
            } else {
                e.sent = true;
                self.counters.data_sent += 1;
            }
            let (buf, len) = (e.buf, e.len);
            if self.rto_deadline.is_none() {
                self.rto_deadline = Some(now + self.rto());
            }
            let mut header = header_for(&self.stream, Kind::Data);
            header.seq = seq;
            header.flags = flags;
            header.payload_len = len;
            header.tstamp_us = now.as_micros_u32();
            header.group_size = u16::try_from(self.members.len()).unwrap_or(u16::MAX);
            return Some(Transmit {
                dest: Dest::Group,
                header,
                body: TxBody::Buf(buf),
            });
        }
        None
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
        self.window.advance_to(self.next_seq, |_, e| {
            events.push_back(Event::Release(e.buf))
        });
        self.scan = self.next_seq;
        self.rto_deadline = None;
    }
}

impl Sender for AckSender {
    fn send(&mut self, _now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if self.members.is_empty() {
            return Err(SendError::NoMembers(frame.buf));
        }
        if self.in_window() >= self.window.capacity() {
            self.counters.window_full += 1;
            return Err(SendError::WindowFull(frame.buf));
        }
        let seq = self.next_seq;
        let stored = self.window.insert(
            seq,
            Entry {
                buf: frame.buf,
                len: frame.len,
                frag: frame.frag,
                sent: false,
                pending: true,
            },
        );
        assert!(stored.is_ok(), "slot {seq:?} of a non-full window is free");
        self.next_seq = seq.next();
        Ok(seq)
    }

    fn can_send(&self) -> bool {
        !self.members.is_empty() && self.in_window() < self.window.capacity()
    }

    fn is_idle(&self) -> bool {
        self.window.is_empty()
    }

    fn set_members(&mut self, now: Instant, members: &[NodeId]) {
        self.install_members(Some(now), members);
        // A removed member no longer holds frames back.
        self.release_acknowledged(now);
    }

    fn resume_point(&mut self, now: Instant, member: NodeId) -> Option<Seq> {
        // The window holds everything from the slowest member's position on.
        // What its old stream still sends no longer counts.
        let m = self.members.iter_mut().find(|m| m.node == member)?;
        m.since_us = Some(now.as_micros_u32());
        Some(m.acked)
    }

    fn join_point(&self) -> Option<Seq> {
        Some(self.window.base())
    }
}

/// Receiver of the ACK baseline (seed 000 §2 (2)): delivers in order and ACKs
/// every data frame it receives.
#[derive(Debug)]
pub struct AckReceiver {
    stream: StreamConfig,
    rx: InOrder,
    /// ACKs owed, one per data frame received; each goes out carrying the
    /// cumulative next expected sequence at the time it leaves.
    acks_owed: u32,
    /// The send stamp of the latest data frame, echoed in the ACKs.
    echo_us: u32,
    events: VecDeque<Event>,
    counters: Counters,
}

impl AckReceiver {
    /// A receiver of `stream`'s data. `_cfg` is unused: the receiver has no timer.
    pub fn new(stream: StreamConfig, _cfg: AckConfig) -> AckReceiver {
        AckReceiver {
            stream,
            rx: InOrder::new(stream.sender, stream.initial_seq, stream.window_frames),
            acks_owed: 0,
            echo_us: 0,
            events: VecDeque::with_capacity(stream.window_frames as usize),
            counters: Counters::default(),
        }
    }
}

impl Endpoint for AckReceiver {
    fn handle_frame(&mut self, _now: Instant, header: &Header, body: RxBody<'_>) {
        let buf = match body {
            RxBody::Data(buf) => Some(buf),
            _ => None,
        };
        let reject = |events: &mut VecDeque<Event>| {
            if let Some(b) = buf {
                events.push_back(Event::Release(b));
            }
        };
        if header.epoch != self.stream.epoch {
            self.counters.wrong_epoch_dropped += 1;
            return reject(&mut self.events);
        }
        let (Kind::Data, Some(buf)) = (header.kind, buf) else {
            self.counters.rejected += 1;
            return reject(&mut self.events);
        };
        if header.src != self.stream.sender {
            self.counters.rejected += 1;
            return reject(&mut self.events);
        }
        let frag = header
            .flags
            .without(Flags::RETRANSMIT)
            .without(Flags::LAST)
            .without(Flags::ACK_REQ);
        self.rx.accept(
            header.seq,
            buf,
            header.payload_len,
            frag,
            &mut self.counters,
            &mut self.events,
        );
        // Receiver: "收到一个 multicast 包后,立即以点对点的通信方式给发送方返回一个
        // ack" (seed 000 §2 (2)), duplicates included, so a lost ACK is repaired.
        self.acks_owed = self.acks_owed.saturating_add(1);
        self.echo_us = header.tstamp_us;
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        if self.acks_owed == 0 {
            return None;
        }
        self.acks_owed -= 1;
        self.counters.acks_sent += 1;
        let mut header = header_for(&self.stream, Kind::Ack);
        header.ack = self.rx.next_expected();
        // The sender's stamp back, for its round-trip estimate.
        header.tstamp_us = self.echo_us;
        header.flags = Flags::ACK_VALID;
        Some(Transmit {
            dest: Dest::Node(self.stream.sender),
            header,
            body: TxBody::None,
        })
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn held_buffers(&self) -> usize {
        self.rx.held()
    }

    fn next_expected(&self) -> Option<Seq> {
        Some(self.rx.next_expected())
    }

    fn release_all(&mut self) {
        self.rx.release_all(&mut self.events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENDER: NodeId = 1;
    const EPOCH: u32 = 7;
    const RTO: Duration = Duration::from_micros(500);

    fn stream(local: NodeId, window: u32) -> StreamConfig {
        StreamConfig {
            group: 9,
            local,
            sender: SENDER,
            epoch: EPOCH,
            // Near the top of the sequence space: every test crosses the wrap.
            initial_seq: Seq(u32::MAX - 1),
            window_frames: window,
            seed: 1,
        }
    }

    fn cfg() -> AckConfig {
        AckConfig {
            rto: RtoConfig::fixed(RTO),
        }
    }

    /// An ACK echoing the send stamp `echo_us`.
    fn echoed(node: NodeId, ack: u32, echo_us: u64) -> Header {
        let mut h = ack_from(node, ack);
        h.flags = Flags::ACK_VALID;
        h.tstamp_us = echo_us as u32;
        h
    }

    fn t(us: u64) -> Instant {
        Instant(us * 1_000)
    }

    fn frame(buf: u32) -> OutFrame {
        OutFrame {
            buf: BufId(buf),
            len: 100,
            frag: Flags::WHOLE,
            last: false,
        }
    }

    fn ack_from(node: NodeId, ack: u32) -> Header {
        let mut h = Header::new(Kind::Ack);
        h.src = node;
        h.peer = SENDER;
        h.epoch = EPOCH;
        h.ack = Seq(ack);
        h
    }

    fn data(seq: u32) -> Header {
        let mut h = Header::new(Kind::Data);
        h.src = SENDER;
        h.epoch = EPOCH;
        h.seq = Seq(seq);
        h.flags = Flags::WHOLE;
        h.payload_len = 100;
        h
    }

    /// Asserts the next transmission is data `seq` from `buf`, flagged `retransmit` or not.
    fn expect_data(s: &mut AckSender, now: Instant, seq: u32, buf: u32, retransmit: bool) {
        let tx = s.poll_transmit(now).expect("a data frame");
        assert_eq!(tx.dest, Dest::Group);
        assert_eq!(tx.header.kind, Kind::Data);
        assert_eq!(tx.header.seq, Seq(seq));
        assert_eq!(tx.header.payload_len, 100);
        assert_eq!(tx.header.epoch, EPOCH);
        assert_eq!(tx.header.flags.contains(Flags::RETRANSMIT), retransmit);
        assert!(tx.header.flags.contains(Flags::WHOLE));
        assert_eq!(tx.body, TxBody::Buf(BufId(buf)));
    }

    fn events<E: Endpoint>(e: &mut E) -> Vec<Event> {
        core::iter::from_fn(|| e.poll_event()).collect()
    }

    #[test]
    fn stop_and_wait_across_the_wrap() {
        // Window 1: the paper's form. Two receivers.
        let mut s = AckSender::new(stream(SENDER, 1), cfg(), &[2, 3]);
        assert!(s.is_idle() && s.can_send());
        assert_eq!(s.send(t(1000), frame(10)), Ok(Seq(u32::MAX - 1)));
        assert!(!s.can_send());
        assert_eq!(
            s.send(t(1000), frame(11)),
            Err(SendError::WindowFull(BufId(11)))
        );
        expect_data(&mut s, t(1000), u32::MAX - 1, 10, false);
        assert_eq!(s.poll_transmit(t(1000)), None);
        assert_eq!(s.poll_timeout(), Some(t(1500)));

        s.handle_frame(t(1010), &ack_from(2, u32::MAX), RxBody::None);
        assert_eq!(events(&mut s), vec![], "receiver 3 has not acked");
        s.handle_frame(t(1020), &ack_from(3, u32::MAX), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(10))]);
        assert!(s.is_idle() && s.can_send());
        assert_eq!(s.poll_timeout(), None);

        assert_eq!(s.send(t(1030), frame(11)), Ok(Seq(u32::MAX)));
        expect_data(&mut s, t(1030), u32::MAX, 11, false);
        assert_eq!(
            s.send(t(1030), frame(12)),
            Err(SendError::WindowFull(BufId(12)))
        );
        s.handle_frame(t(1040), &ack_from(2, 0), RxBody::None);
        s.handle_frame(t(1040), &ack_from(3, 0), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(11))]);
        assert_eq!(s.send(t(1050), frame(12)), Ok(Seq(0)));
        expect_data(&mut s, t(1050), 0, 12, false);
        let c = *s.counters();
        assert_eq!((c.data_sent, c.acks_received, c.window_full), (3, 4, 2));
    }

    #[test]
    fn missing_ack_resends_the_window_on_timeout() {
        let mut s = AckSender::new(stream(SENDER, 4), cfg(), &[2, 3]);
        for b in 0..3 {
            s.send(t(1000), frame(b)).unwrap();
        }
        for (i, b) in (0..3).enumerate() {
            expect_data(
                &mut s,
                t(1000),
                (u32::MAX - 1).wrapping_add(i as u32),
                b,
                false,
            );
        }
        assert_eq!(s.poll_transmit(t(1000)), None);
        // Receiver 2 has everything, receiver 3 only the first.
        s.handle_frame(t(1010), &ack_from(2, 1), RxBody::None);
        s.handle_frame(t(1010), &ack_from(3, u32::MAX), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(0))]);
        assert_eq!(s.poll_timeout(), Some(t(1510)), "restarted on progress");
        s.handle_timeout(t(1400));
        assert_eq!(s.poll_transmit(t(1400)), None, "early call is harmless");
        s.handle_timeout(t(1510));
        // Go-back: both unacknowledged frames again, oldest first.
        expect_data(&mut s, t(1510), u32::MAX, 1, true);
        expect_data(&mut s, t(1510), 0, 2, true);
        assert_eq!(s.poll_transmit(t(1510)), None);
        assert_eq!(s.poll_timeout(), Some(t(2010)));
        s.handle_frame(t(1520), &ack_from(3, 1), RxBody::None);
        assert_eq!(
            events(&mut s),
            vec![Event::Release(BufId(1)), Event::Release(BufId(2))]
        );
        assert!(s.is_idle());
        assert_eq!(s.poll_timeout(), None);
        let c = *s.counters();
        assert_eq!((c.data_sent, c.data_retransmitted, c.timeouts), (3, 2, 1));
    }

    #[test]
    fn the_timeout_is_the_slowest_members_and_backs_off() {
        let mut s = AckSender::new(stream(SENDER, 1), AckConfig::default(), &[2, 3]);
        let mut now = 1000;
        for (i, b) in (0..20u32).enumerate() {
            s.send(t(now), frame(b)).unwrap();
            expect_data(
                &mut s,
                t(now),
                (u32::MAX - 1).wrapping_add(i as u32),
                b,
                false,
            );
            let ack = u32::MAX.wrapping_add(i as u32);
            // Receiver 2 answers in 100 us, receiver 3 in 2 ms.
            s.handle_frame(t(now + 100), &echoed(2, ack, now), RxBody::None);
            s.handle_frame(t(now + 2000), &echoed(3, ack, now), RxBody::None);
            now += 2000;
        }
        assert_eq!(s.counters().timeouts, 0);
        // Twice the 2 ms round trip: receiver 3's.
        assert_eq!(s.rto(), Duration::from_micros(4000));
        s.send(t(now), frame(20)).unwrap();
        expect_data(&mut s, t(now), 18, 20, false);
        assert_eq!(s.poll_timeout(), Some(t(now + 4000)));
        s.handle_timeout(t(now + 4000));
        expect_data(&mut s, t(now + 4000), 18, 20, true);
        assert_eq!(s.poll_timeout(), Some(t(now + 12000)), "doubled");
        s.handle_frame(t(now + 4100), &echoed(2, 19, now + 4000), RxBody::None);
        s.handle_frame(t(now + 6000), &echoed(3, 19, now + 4000), RxBody::None);
        assert!(s.is_idle());
        assert_eq!(s.rto(), Duration::from_micros(4000), "progress resets it");
    }

    #[test]
    fn a_window_queued_behind_a_slow_link_is_timed_as_it_drains() {
        // 32 frames leave at once; the link delivers one per millisecond.
        let mut s = AckSender::new(stream(SENDER, 32), AckConfig::default(), &[2]);
        for b in 0..32u32 {
            s.send(t(0), frame(b)).unwrap();
        }
        for b in 0..32u32 {
            expect_data(&mut s, t(0), (u32::MAX - 1).wrapping_add(b), b, false);
        }
        for b in 0..32u32 {
            let at = 1000 * u64::from(b + 1);
            // The initial 500 us timeout is shorter than one frame's time: the
            // first expiry is spurious; after it the measured round trip rules.
            if b > 0 {
                let due = s.poll_timeout().expect("frames outstanding");
                assert!(due > t(at), "frame {b}: timer {due:?} before its ACK");
            }
            s.handle_timeout(t(at));
            while s.poll_transmit(t(at)).is_some() {}
            s.handle_frame(t(at), &echoed(2, u32::MAX.wrapping_add(b), 0), RxBody::None);
        }
        assert!(s.is_idle());
        assert_eq!(s.counters().timeouts, 1);
    }

    #[test]
    fn acks_echo_the_send_stamp_of_the_latest_frame() {
        let mut r = AckReceiver::new(stream(2, 4), cfg());
        let mut d = data(u32::MAX - 1);
        d.tstamp_us = 4242;
        r.handle_frame(t(1000), &d, RxBody::Data(BufId(1)));
        let tx = r.poll_transmit(t(1001)).expect("an ACK");
        assert!(tx.header.flags.contains(Flags::ACK_VALID));
        assert_eq!(tx.header.tstamp_us, 4242);
    }

    #[test]
    fn removing_a_silent_member_releases_what_the_others_acked() {
        let mut s = AckSender::new(stream(SENDER, 4), cfg(), &[2, 3]);
        s.send(t(1000), frame(0)).unwrap();
        s.send(t(1000), frame(1)).unwrap();
        expect_data(&mut s, t(1000), u32::MAX - 1, 0, false);
        expect_data(&mut s, t(1000), u32::MAX, 1, false);
        s.handle_frame(t(1010), &ack_from(2, 0), RxBody::None);
        assert_eq!(events(&mut s), vec![]);
        s.set_members(t(1020), &[2]);
        assert_eq!(
            events(&mut s),
            vec![Event::Release(BufId(0)), Event::Release(BufId(1))]
        );
        assert!(s.is_idle());
        // A member added back must acknowledge what is sent from now on.
        s.set_members(t(1030), &[2, 3]);
        s.send(t(1030), frame(2)).unwrap();
        expect_data(&mut s, t(1030), 0, 2, false);
        s.handle_frame(t(1040), &ack_from(2, 1), RxBody::None);
        assert_eq!(events(&mut s), vec![]);
        s.handle_frame(t(1040), &echoed(3, 1, 1030), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(2))]);
        // Everyone gone: nothing can be sent.
        s.set_members(t(1050), &[]);
        assert_eq!(
            s.send(t(1050), frame(3)),
            Err(SendError::NoMembers(BufId(3)))
        );
    }

    #[test]
    fn a_new_member_joins_at_the_oldest_frame_held_and_its_old_acks_free_nothing() {
        let mut s = AckSender::new(stream(SENDER, 4), cfg(), &[2]);
        for b in 0..3 {
            s.send(t(1000), frame(b)).unwrap();
        }
        for (i, seq) in [u32::MAX - 1, u32::MAX, 0].into_iter().enumerate() {
            expect_data(&mut s, t(1000), seq, i as u32, false);
        }
        s.handle_frame(t(1010), &echoed(2, u32::MAX, 1000), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(0))]);
        // Member 3 joins where member 2 still lacks frames: it owes them
        // too, so a flush could give them to member 2 if the sender died.
        assert_eq!(s.join_point(), Some(Seq(u32::MAX)));
        s.set_members(t(1020), &[2, 3]);
        s.handle_frame(t(1030), &echoed(2, 1, 1000), RxBody::None);
        assert_eq!(events(&mut s), vec![]);
        // An ACK its node's earlier stream sent (echoing a time before it
        // joined) would free frames the new stream lacks: it counts for
        // nothing.
        s.handle_frame(t(1031), &echoed(3, 1, 1000), RxBody::None);
        assert_eq!(events(&mut s), vec![]);
        assert_eq!(s.counters().acks_stale, 1);
        s.handle_frame(t(1032), &echoed(3, 0, 1020), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(1))]);
        // Opened again (it lost its stream): the same rule from then on.
        assert_eq!(s.resume_point(t(1040), 3), Some(Seq(0)));
        s.handle_frame(t(1041), &echoed(3, 1, 1032), RxBody::None);
        assert_eq!(events(&mut s), vec![]);
        assert_eq!(s.counters().acks_stale, 2);
        s.handle_frame(t(1042), &echoed(3, 1, 1040), RxBody::None);
        assert_eq!(events(&mut s), vec![Event::Release(BufId(2))]);
    }

    #[test]
    fn hostile_acks_are_counted_and_ignored() {
        let mut s = AckSender::new(stream(SENDER, 4), cfg(), &[2]);
        s.send(t(1000), frame(0)).unwrap();
        expect_data(&mut s, t(1000), u32::MAX - 1, 0, false);
        s.handle_frame(t(1010), &ack_from(99, u32::MAX), RxBody::None);
        let mut wrong_epoch = ack_from(2, u32::MAX);
        wrong_epoch.epoch = EPOCH + 1;
        s.handle_frame(t(1010), &wrong_epoch, RxBody::None);
        s.handle_frame(t(1010), &ack_from(2, 5), RxBody::None);
        s.handle_frame(t(1010), &data(3), RxBody::Data(BufId(77)));
        assert_eq!(events(&mut s), vec![Event::Release(BufId(77))]);
        assert_eq!(s.held_buffers(), 1);
        let c = *s.counters();
        assert_eq!(
            (c.rejected, c.wrong_epoch_dropped, c.acks_received),
            (3, 1, 0)
        );
    }

    #[test]
    fn receiver_acks_every_frame_with_its_next_expected() {
        let mut r = AckReceiver::new(stream(2, 4), cfg());
        let expect_ack = |r: &mut AckReceiver, now: Instant, ack: u32| {
            let tx = r.poll_transmit(now).expect("an ACK");
            assert_eq!(tx.dest, Dest::Node(SENDER));
            assert_eq!(tx.header.kind, Kind::Ack);
            assert_eq!((tx.header.src, tx.header.peer), (2, SENDER));
            assert_eq!(tx.header.ack, Seq(ack));
            assert_eq!(tx.body, TxBody::None);
            assert_eq!(r.poll_transmit(now), None);
        };
        r.handle_frame(t(1000), &data(u32::MAX - 1), RxBody::Data(BufId(1)));
        expect_ack(&mut r, t(1000), u32::MAX);
        // u32::MAX lost; 0 is held ahead of the gap, the ACK stays put.
        r.handle_frame(t(1010), &data(0), RxBody::Data(BufId(2)));
        expect_ack(&mut r, t(1010), u32::MAX);
        assert_eq!(r.held_buffers(), 1);
        r.handle_frame(t(1020), &data(u32::MAX), RxBody::Data(BufId(3)));
        expect_ack(&mut r, t(1020), 1);
        // A duplicate is acknowledged again (its ACK may have been lost).
        r.handle_frame(t(1030), &data(0), RxBody::Data(BufId(4)));
        expect_ack(&mut r, t(1030), 1);
        let ev = events(&mut r);
        let delivered: Vec<(u32, u32)> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Deliver { seq, buf, .. } => Some((seq.0, buf.0)),
                Event::Release(_) => None,
            })
            .collect();
        assert_eq!(delivered, vec![(u32::MAX - 1, 1), (u32::MAX, 3), (0, 2)]);
        assert!(ev.contains(&Event::Release(BufId(4))));
        assert_eq!(r.poll_timeout(), None);
        let c = *r.counters();
        assert_eq!((c.acks_sent, c.delivered, c.duplicates_dropped), (4, 3, 1));
    }

    #[test]
    fn receiver_drops_foreign_frames_and_returns_their_buffers() {
        let mut r = AckReceiver::new(stream(2, 4), cfg());
        let mut wrong_epoch = data(u32::MAX - 1);
        wrong_epoch.epoch = EPOCH + 1;
        r.handle_frame(t(1000), &wrong_epoch, RxBody::Data(BufId(1)));
        let mut stranger = data(u32::MAX - 1);
        stranger.src = 42;
        r.handle_frame(t(1000), &stranger, RxBody::Data(BufId(2)));
        r.handle_frame(t(1000), &ack_from(3, 0), RxBody::None);
        assert_eq!(r.poll_transmit(t(1000)), None, "no ACK for dropped frames");
        assert_eq!(
            events(&mut r),
            vec![Event::Release(BufId(1)), Event::Release(BufId(2))]
        );
        let c = *r.counters();
        assert_eq!((c.wrong_epoch_dropped, c.rejected), (1, 2));
    }

    #[test]
    fn receiver_shutdown_returns_frames_held_out_of_order() {
        let mut r = AckReceiver::new(stream(2, 4), cfg());
        r.handle_frame(t(1000), &data(0), RxBody::Data(BufId(5)));
        r.handle_frame(t(1000), &data(1), RxBody::Data(BufId(6)));
        assert_eq!(r.held_buffers(), 2);
        assert_eq!(events(&mut r), vec![]);
        r.release_all();
        assert_eq!(
            events(&mut r),
            vec![Event::Release(BufId(5)), Event::Release(BufId(6))]
        );
        assert_eq!(r.held_buffers(), 0);
    }
}
