//! The plain NAK baseline (seed 000 §2 (3), Figure 4): the sender multicasts
//! data; a receiver that detects lost frames immediately unicasts a NAK listing
//! them, and the sender retransmits every frame each NAK names. There are no
//! ACKs.
//!
//! It is built to keep the three weaknesses seed 000 §3.1 lists, because it is
//! the baseline MAK is measured against:
//!
//! 1. **The sender can never free its buffer.** Nothing tells it a frame
//!    arrived, so every frame stays held; once `StreamConfig::window_frames`
//!    frames were sent, [`Sender::send`] returns [`SendError::WindowFull`]
//!    forever. Only [`NakSender::release_all`] (shutdown) returns the buffers.
//! 2. **A lost last frame is never detected.** A receiver learns of a loss only
//!    from a later frame's sequence number; nothing follows the last one.
//! 3. **Duplicate NAKs cause duplicate retransmissions.** NAKs are unicast, with
//!    no random delay and no suppression; the sender resends once per NAK.
//!
//! # Sender
//!
//! Each held frame is *unsent* or *sent*, plus a count of retransmissions owed
//! (one per NAK naming it, never merged). No timer. [`Sender::is_idle`] is true
//! when nothing is owed to the wire: there is no acknowledgment to wait for.
//!
//! # Receiver
//!
//! States: *complete* (nothing missing up to the highest frame seen) and
//! *missing* (a gap). A frame whose sequence is beyond the highest seen + 1
//! reveals a new gap: one NAK listing **every** missing sequence (at most
//! [`MAX_NAK_RANGES`] ranges) is sent at once and the retry timer is armed.
//! Frames that do not open a new gap send nothing. The paper has no retry; here,
//! so a lost NAK or a lost repair cannot stall a receiver forever, the **retry
//! timer** re-sends a NAK of everything still missing while the receiver is in
//! *missing*; it is stopped on the return to *complete*. Its timeout follows
//! the link ([`crate::rtt`]): the round trip from a NAK to the first repair
//! that answers it is estimated as in RFC 6298, with Karn's rule (no sample
//! once a gap was NAKed again, since a repair may then answer either NAK); it
//! runs from the moment the NAK leaves and doubles for each retry, until a
//! repair gives a valid sample again (Karn's second half: the doubled timeout
//! is kept, so a timeout too short for the link grows until one NAK is
//! answered within it).

use std::collections::VecDeque;

use crate::recv::{Accepted, InOrder};
use crate::rtt::{RtoConfig, RttEstimator};
use crate::window::SeqWindow;
use crate::{
    api::header_for, BufId, Counters, Dest, Duration, Endpoint, Event, Instant, OutFrame, RxBody,
    SendError, Sender, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq, MAX_NAK_RANGES};

/// Configuration of the plain NAK baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NakConfig {
    /// How long a receiver waits, after a NAK, before NAKing what is still
    /// missing again (not in seed 000: it keeps a lost NAK or repair from
    /// stalling the receiver forever). Measured from NAK-to-repair round
    /// trips (module docs); [`RtoConfig::fixed`] gives a static wait.
    pub nak_retry: RtoConfig,
}

impl Default for NakConfig {
    fn default() -> Self {
        NakConfig {
            // 1 ms (about two ACK timeouts: a NAK's round trip plus the
            // repair) until measured, and never less: the baseline keeps its
            // retry rate on fast links and only waits longer on slow ones.
            nak_retry: RtoConfig {
                initial: Duration::from_millis(1),
                min: Duration::from_millis(1),
                max: Duration::from_secs(1),
            },
        }
    }
}

/// Sender of the plain NAK baseline (seed 000 §2 (3)).
#[derive(Debug)]
pub struct NakSender {
    stream: StreamConfig,
    /// Whose NAKs count. Nothing else depends on them: there are no ACKs.
    members: Vec<NodeId>,
    /// Every frame sent since the start (or the last [`NakSender::release_all`]):
    /// `[window.base(), next_seq)`. Never advanced by the protocol.
    window: SeqWindow<Entry>,
    next_seq: Seq,
    /// Every entry in `[window.base(), scan)` owes nothing to the wire.
    scan: Seq,
    events: VecDeque<Event>,
    counters: Counters,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    buf: BufId,
    len: u16,
    frag: Flags,
    /// Not yet on the wire.
    unsent: bool,
    /// Retransmissions owed: one per NAK naming this frame (no deduplication,
    /// seed 000 §3.1 weakness 3).
    resends: u32,
}

impl Entry {
    fn owes(&self) -> bool {
        self.unsent || self.resends > 0
    }
}

impl NakSender {
    /// A sender for `stream` that accepts NAKs from `members`.
    pub fn new(stream: StreamConfig, _cfg: NakConfig, members: &[NodeId]) -> NakSender {
        let mut s = NakSender {
            stream,
            members: Vec::with_capacity(members.len()),
            window: SeqWindow::new(stream.initial_seq, stream.window_frames),
            next_seq: stream.initial_seq,
            scan: stream.initial_seq,
            events: VecDeque::with_capacity(stream.window_frames as usize),
            counters: Counters::default(),
        };
        s.set_members(Instant::ZERO, members);
        s
    }

    fn in_window(&self) -> u32 {
        self.next_seq.distance(self.window.base()) as u32
    }

    /// Owes one more copy of every held frame `list` names, once per NAK
    /// (seed 000 §2 (3): "Sender 收到 nak 消息后,立即重发 nak 指定序号的数据包").
    fn handle_nak(&mut self, list: &RangeList) {
        self.counters.naks_received += 1;
        let named = list.seq_count();
        let mut repaired = 0u64;
        // Walk what we hold (at most the window) rather than the ranges, whose
        // lengths a peer chooses.
        for i in 0..self.in_window() {
            let seq = self.window.base().add(i);
            if !list.contains(seq) {
                continue;
            }
            if let Some(e) = self.window.get_mut(seq) {
                e.resends = e.resends.saturating_add(1);
                repaired += 1;
                self.scan = self.scan.min(seq);
            }
        }
        self.counters.naks_unrepairable += named.saturating_sub(repaired);
    }
}

impl Endpoint for NakSender {
    fn handle_frame(&mut self, _now: Instant, header: &Header, body: RxBody<'_>) {
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
        match (header.kind, body) {
            (Kind::Nak, RxBody::Ranges(list)) if self.members.contains(&header.src) => {
                self.handle_nak(list);
            }
            _ => self.counters.rejected += 1,
        }
    }

    /// The sender has no timer.
    fn handle_timeout(&mut self, _now: Instant) {}

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        while self.scan.before(self.next_seq) {
            let seq = self.scan;
            let Some(e) = self.window.get_mut(seq) else {
                self.scan = seq.next();
                continue;
            };
            if !e.owes() {
                self.scan = seq.next();
                continue;
            }
            let mut flags = e.frag;
            if e.unsent {
                e.unsent = false;
                self.counters.data_sent += 1;
            } else {
                e.resends -= 1;
                flags = flags.with(Flags::RETRANSMIT);
                self.counters.data_retransmitted += 1;
            }
            // `scan` stays put when this frame owes more copies.
            if !e.owes() {
                self.scan = seq.next();
            }
            let mut header = header_for(&self.stream, Kind::Data);
            header.seq = seq;
            header.flags = flags;
            header.payload_len = e.len;
            header.tstamp_us = now.as_micros_u32();
            header.group_size = u16::try_from(self.members.len()).unwrap_or(u16::MAX);
            return Some(Transmit {
                dest: Dest::Group,
                header,
                body: TxBody::Buf(e.buf),
            });
        }
        None
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
        self.window.len()
    }

    fn release_all(&mut self) {
        let events = &mut self.events;
        self.window.advance_to(self.next_seq, |_, e| {
            events.push_back(Event::Release(e.buf))
        });
        self.scan = self.next_seq;
    }
}

impl Sender for NakSender {
    fn send(&mut self, _now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if self.members.is_empty() {
            return Err(SendError::NoMembers(frame.buf));
        }
        if self.in_window() >= self.window.capacity() {
            // Seed 000 §3.1 weakness 1: nothing will ever free a slot.
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
                unsent: true,
                resends: 0,
            },
        );
        assert!(stored.is_ok(), "slot {seq:?} of a non-full window is free");
        self.next_seq = seq.next();
        Ok(seq)
    }

    fn can_send(&self) -> bool {
        !self.members.is_empty() && self.in_window() < self.window.capacity()
    }

    /// True when nothing is owed to the wire. Without ACKs there is nothing else
    /// to wait for: "idle" does not mean "received".
    fn is_idle(&self) -> bool {
        !self.window.iter().any(|(_, e)| e.owes())
    }

    /// Changes whose NAKs are accepted. Frames stay held either way.
    fn set_members(&mut self, _now: Instant, members: &[NodeId]) {
        self.members.clear();
        for &node in members {
            if node != 0 && node != self.stream.local && !self.members.contains(&node) {
                self.members.push(node);
            }
        }
    }

    /// Every frame ever sent is held: a member added now starts at the
    /// first, like those before it, and NAKs whatever it lacks.
    fn join_point(&self) -> Option<Seq> {
        Some(self.window.base())
    }
}

/// Receiver of the plain NAK baseline (seed 000 §2 (3)): delivers in order and
/// NAKs gaps at once, by unicast, retrying every `nak_retry`.
#[derive(Debug)]
pub struct NakReceiver {
    stream: StreamConfig,
    cfg: NakConfig,
    rx: InOrder,
    /// A NAK of everything missing must go out; `nak_retry` when it repeats one.
    nak_owed: bool,
    nak_retry: bool,
    /// The retry timer: armed while something is missing.
    retry_deadline: Option<Instant>,
    /// NAK-to-repair round trips, and the first NAK whose repair is awaited
    /// (`None` after a retry: Karn's rule).
    rtt: RttEstimator,
    nak_sent_at: Option<Instant>,
    events: VecDeque<Event>,
    counters: Counters,
}

impl NakReceiver {
    /// A receiver of `stream`'s data.
    pub fn new(stream: StreamConfig, cfg: NakConfig) -> NakReceiver {
        NakReceiver {
            stream,
            cfg,
            rx: InOrder::new(stream.sender, stream.initial_seq, stream.window_frames),
            nak_owed: false,
            nak_retry: false,
            retry_deadline: None,
            rtt: RttEstimator::new(),
            nak_sent_at: None,
            events: VecDeque::with_capacity(stream.window_frames as usize),
            counters: Counters::default(),
        }
    }

    /// The retry timeout now in force (backoff included).
    pub fn retry_timeout(&self) -> Duration {
        self.rtt.rto(&self.cfg.nak_retry)
    }

    /// True when nothing is missing up to the highest frame seen. A lost last
    /// frame leaves this true (seed 000 §3.1 weakness 2).
    pub fn is_complete(&self) -> bool {
        self.rx.is_complete()
    }

    /// The missing sequence numbers, as many ranges as one NAK carries.
    fn missing_list(&self) -> RangeList {
        let mut list = RangeList::new();
        for seq in self.rx.missing() {
            if !list.push_seq(seq) {
                break;
            }
        }
        debug_assert!(list.len() <= MAX_NAK_RANGES);
        list
    }
}

impl Endpoint for NakReceiver {
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
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
        let (Kind::Data, Some(buf), true) = (header.kind, buf, header.src == self.stream.sender)
        else {
            self.counters.rejected += 1;
            return reject(&mut self.events);
        };
        // The first sequence that would extend what we have seen without a gap.
        let in_sequence = match self.rx.highest_seen() {
            Some(h) if !h.before(self.rx.next_expected()) => h.next(),
            _ => self.rx.next_expected(),
        };
        let frag = header
            .flags
            .without(Flags::RETRANSMIT)
            .without(Flags::LAST)
            .without(Flags::ACK_REQ);
        let accepted = self.rx.accept(
            header.seq,
            buf,
            header.payload_len,
            frag,
            &mut self.counters,
            &mut self.events,
        );
        let fresh = matches!(accepted, Accepted::InOrder | Accepted::Buffered);
        if fresh && header.flags.contains(Flags::RETRANSMIT) {
            // A repair: the round trip of the NAK it answers, if unambiguous.
            // Karn: the doubled timeout stays until such a sample comes.
            if let Some(at) = self.nak_sent_at.take() {
                self.rtt.sample(now.saturating_duration_since(at));
                self.rtt.reset_backoff();
            }
        }
        if accepted == Accepted::Buffered && header.seq.after(in_sequence) {
            // A new gap: NAK at once, no random wait, no suppression (seed 000 §2 (3):
            // "Recv-1 马上给 Sender 方发送 nak 消息").
            self.nak_owed = true;
        }
        if self.rx.is_complete() {
            self.nak_owed = false;
            self.nak_retry = false;
            self.retry_deadline = None;
            self.nak_sent_at = None;
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self.retry_deadline {
            Some(d) if d <= now => {}
            _ => return,
        }
        if self.rx.is_complete() {
            self.retry_deadline = None;
            return;
        }
        // Still missing frames: the NAK or the repair was lost. NAK again,
        // and wait twice as long for the answer.
        self.counters.timeouts += 1;
        self.rtt.back_off();
        self.nak_owed = true;
        self.nak_retry = true;
        self.retry_deadline = None;
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if !self.nak_owed {
            return None;
        }
        self.nak_owed = false;
        let retry = core::mem::take(&mut self.nak_retry);
        let list = self.missing_list();
        if list.is_empty() {
            return None;
        }
        self.counters.naks_sent += 1;
        // The retry timer runs from the NAK's departure.
        self.retry_deadline = Some(now + self.retry_timeout());
        if retry {
            self.nak_sent_at = None; // Karn: a repair may answer either NAK
        } else if self.nak_sent_at.is_none() {
            self.nak_sent_at = Some(now);
        }
        let mut header = header_for(&self.stream, Kind::Nak);
        header.ack = self.rx.next_expected();
        header.tstamp_us = now.as_micros_u32();
        header.payload_len = list.wire_len() as u16;
        Some(Transmit {
            dest: Dest::Node(self.stream.sender),
            header,
            body: TxBody::Ranges(Box::new(list)),
        })
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.retry_deadline
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
    const RETRY: Duration = Duration::from_micros(1000);
    const START: u32 = u32::MAX - 1;

    fn stream(local: NodeId, window: u32) -> StreamConfig {
        StreamConfig {
            group: 9,
            local,
            sender: SENDER,
            epoch: EPOCH,
            // Near the top of the sequence space: every test crosses the wrap.
            initial_seq: Seq(START),
            window_frames: window,
            seed: 1,
        }
    }

    fn cfg() -> NakConfig {
        NakConfig {
            nak_retry: RtoConfig::fixed(RETRY),
        }
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

    /// The `i`-th sequence number of the stream.
    fn sq(i: u32) -> Seq {
        Seq(START).add(i)
    }

    fn data(i: u32) -> Header {
        let mut h = Header::new(Kind::Data);
        h.src = SENDER;
        h.epoch = EPOCH;
        h.seq = sq(i);
        h.flags = Flags::WHOLE;
        h.payload_len = 100;
        h
    }

    fn nak_header(node: NodeId, list: &RangeList) -> Header {
        let mut h = Header::new(Kind::Nak);
        h.src = node;
        h.peer = SENDER;
        h.epoch = EPOCH;
        h.payload_len = list.wire_len() as u16;
        h
    }

    fn list_of(seqs: &[u32]) -> RangeList {
        let mut l = RangeList::new();
        for &i in seqs {
            assert!(l.push_seq(sq(i)));
        }
        l
    }

    fn expect_data(s: &mut NakSender, now: Instant, i: u32, buf: u32, retransmit: bool) {
        let tx = s.poll_transmit(now).expect("a data frame");
        assert_eq!(tx.dest, Dest::Group);
        assert_eq!(tx.header.kind, Kind::Data);
        assert_eq!(tx.header.seq, sq(i));
        assert_eq!(tx.header.epoch, EPOCH);
        assert_eq!(tx.header.payload_len, 100);
        assert_eq!(tx.header.flags.contains(Flags::RETRANSMIT), retransmit);
        assert_eq!(tx.body, TxBody::Buf(BufId(buf)));
    }

    fn expect_nak(r: &mut NakReceiver, now: Instant, missing: &[u32]) {
        let tx = r.poll_transmit(now).expect("a NAK");
        assert_eq!(tx.dest, Dest::Node(SENDER));
        assert_eq!(tx.header.kind, Kind::Nak);
        assert_eq!(tx.header.peer, SENDER);
        let TxBody::Ranges(list) = tx.body else {
            panic!("a NAK carries a range list: {tx:?}");
        };
        assert_eq!(*list, list_of(missing));
        assert_eq!(usize::from(tx.header.payload_len), list.wire_len());
        assert_eq!(r.poll_transmit(now), None);
    }

    fn delivered<E: Endpoint>(e: &mut E) -> Vec<Seq> {
        core::iter::from_fn(|| e.poll_event())
            .filter_map(|ev| match ev {
                Event::Deliver { seq, .. } => Some(seq),
                Event::Release(_) => None,
            })
            .collect()
    }

    fn events<E: Endpoint>(e: &mut E) -> Vec<Event> {
        core::iter::from_fn(|| e.poll_event()).collect()
    }

    #[test]
    fn a_gap_is_naked_at_once_and_again_after_nak_retry() {
        let mut r = NakReceiver::new(stream(2, 16), cfg());
        r.handle_frame(t(1000), &data(0), RxBody::Data(BufId(0)));
        assert_eq!(r.poll_transmit(t(1000)), None);
        // 1 and 2 lost (across the wrap): 3 reveals them.
        r.handle_frame(t(1010), &data(3), RxBody::Data(BufId(3)));
        expect_nak(&mut r, t(1010), &[1, 2]);
        assert_eq!(r.poll_timeout(), Some(t(2010)));
        // 4 extends the gap's far side: nothing new, no NAK.
        r.handle_frame(t(1020), &data(4), RxBody::Data(BufId(4)));
        assert_eq!(r.poll_transmit(t(1020)), None);
        // 6 opens a second gap: NAK everything missing, at once.
        r.handle_frame(t(1030), &data(6), RxBody::Data(BufId(6)));
        expect_nak(&mut r, t(1030), &[1, 2, 5]);
        assert_eq!(r.poll_timeout(), Some(t(2030)));
        r.handle_frame(t(1040), &data(1), RxBody::Data(BufId(1)));
        assert_eq!(r.poll_transmit(t(1040)), None);
        // The repairs of 2 and 5 are lost: NAK them again on the retry timer.
        r.handle_timeout(t(2000));
        assert_eq!(r.poll_transmit(t(2000)), None, "early call is harmless");
        r.handle_timeout(t(2030));
        expect_nak(&mut r, t(2030), &[2, 5]);
        assert_eq!(r.poll_timeout(), Some(t(3030)));
        r.handle_frame(t(2040), &data(2), RxBody::Data(BufId(2)));
        r.handle_frame(t(2040), &data(5), RxBody::Data(BufId(5)));
        assert!(r.is_complete());
        assert_eq!(r.poll_timeout(), None, "complete: the timer stops");
        assert_eq!(delivered(&mut r), (0..7).map(sq).collect::<Vec<_>>());
        let c = *r.counters();
        assert_eq!((c.naks_sent, c.timeouts, c.delivered), (3, 1, 7));
    }

    /// A repair (flagged RETRANSMIT) of `seq`.
    fn repair(seq: u32) -> Header {
        let mut h = data(seq);
        h.flags = h.flags.with(Flags::RETRANSMIT);
        h
    }

    #[test]
    fn the_retry_follows_the_nak_round_trip_with_karns_rule() {
        let mut r = NakReceiver::new(stream(2, 64), NakConfig::default());
        assert_eq!(r.retry_timeout(), Duration::from_millis(1));
        // A slow link: every repair comes 4 ms after its NAK.
        let mut now = 1000;
        for k in 0..10u32 {
            let lost = 2 * k + 1;
            r.handle_frame(t(now), &data(lost - 1), RxBody::Data(BufId(lost - 1)));
            r.handle_frame(t(now), &data(lost + 1), RxBody::Data(BufId(lost + 1)));
            expect_nak(&mut r, t(now), &[lost]);
            now += 4000;
            r.handle_frame(t(now), &repair(lost), RxBody::Data(BufId(lost)));
            assert!(r.is_complete());
        }
        assert_eq!(r.counters().timeouts, 0);
        let measured = r.retry_timeout();
        assert!(
            measured >= Duration::from_millis(8),
            "twice the round trip at least: {measured:?}"
        );
        // A repair lost: the retry comes after the measured timeout, and the
        // repair that follows gives no sample (it may answer either NAK).
        let lost = 21;
        r.handle_frame(t(now), &data(lost - 1), RxBody::Data(BufId(100)));
        r.handle_frame(t(now), &data(lost + 1), RxBody::Data(BufId(101)));
        expect_nak(&mut r, t(now), &[lost]);
        let due = r.poll_timeout().unwrap();
        assert_eq!(due, t(now) + measured);
        r.handle_timeout(due);
        expect_nak(&mut r, due, &[lost]);
        assert_eq!(r.poll_timeout(), Some(due + 2 * measured), "doubled");
        r.handle_frame(
            due + Duration::from_micros(10),
            &repair(lost),
            RxBody::Data(BufId(102)),
        );
        assert_eq!(
            r.retry_timeout(),
            2 * measured,
            "no sample, so the doubled timeout stays (Karn)"
        );
    }

    #[test]
    fn a_lost_last_frame_is_never_detected() {
        // Seed 000 §3.1 weakness 2: frames 0..5 sent, only 4 (the last) is lost.
        let mut s = NakSender::new(stream(SENDER, 16), cfg(), &[2]);
        let mut r = NakReceiver::new(stream(2, 16), cfg());
        for i in 0..5 {
            s.send(t(1000), frame(i)).unwrap();
        }
        for tx in core::iter::from_fn(|| s.poll_transmit(t(1000))) {
            let TxBody::Buf(b) = tx.body else {
                unreachable!()
            };
            if tx.header.seq != sq(4) {
                r.handle_frame(t(1010), &tx.header, RxBody::Data(BufId(100 + b.0)));
            }
        }
        assert_eq!(delivered(&mut r), (0..4).map(sq).collect::<Vec<_>>());
        // However long we wait, nobody notices: the receiver believes it is
        // complete, the sender is idle, and frame 4 never arrives.
        let mut now = t(1020);
        for _ in 0..1000 {
            s.handle_timeout(now);
            r.handle_timeout(now);
            assert_eq!(r.poll_transmit(now), None, "never a NAK");
            assert_eq!(s.poll_transmit(now), None, "never a resend");
            assert_eq!(r.poll_event(), None, "never frame 4");
            now += RETRY;
        }
        assert!(r.is_complete(), "the receiver cannot tell");
        assert!(!r.rx.has(sq(4)));
        assert_eq!((r.poll_timeout(), s.poll_timeout()), (None, None));
        assert!(s.is_idle());
        assert_eq!(s.held_buffers(), 5, "and the sender cannot tell either");
        assert_eq!(r.counters().naks_sent, 0);
    }

    #[test]
    fn the_sender_never_frees_and_refuses_sends_once_the_window_is_full() {
        // Seed 000 §3.1 weakness 1, with no loss at all.
        const W: u32 = 4;
        let mut s = NakSender::new(stream(SENDER, W), cfg(), &[2, 3]);
        for i in 0..W {
            assert_eq!(s.send(t(1000), frame(i)), Ok(sq(i)));
            expect_data(&mut s, t(1000), i, i, false);
        }
        assert!(s.is_idle(), "nothing owed to the wire");
        assert_eq!(s.poll_timeout(), None);
        let mut now = t(1010);
        for b in 100..1100 {
            assert!(!s.can_send());
            assert_eq!(s.send(now, frame(b)), Err(SendError::WindowFull(BufId(b))));
            s.handle_timeout(now);
            assert_eq!(s.poll_transmit(now), None);
            assert_eq!(s.poll_event(), None, "nothing is ever released");
            assert_eq!(s.held_buffers(), W as usize);
            now += Duration::from_millis(1);
        }
        assert_eq!(s.counters().window_full, 1000);
        // Everything is held, so a member added now starts at the first
        // frame, as the members before it did.
        assert_eq!(s.join_point(), Some(sq(0)));
        // Only the application's shutdown returns the buffers.
        s.release_all();
        assert_eq!(
            events(&mut s),
            (0..W).map(|b| Event::Release(BufId(b))).collect::<Vec<_>>()
        );
        assert_eq!(s.held_buffers(), 0);
        assert_eq!(s.send(now, frame(9)), Ok(sq(W)), "sending may resume");
    }

    #[test]
    fn two_naks_for_one_frame_cost_two_retransmissions() {
        // Seed 000 §3.1 weakness 3: both receivers miss frame 1.
        let mut s = NakSender::new(stream(SENDER, 8), cfg(), &[2, 3]);
        let mut r2 = NakReceiver::new(stream(2, 8), cfg());
        let mut r3 = NakReceiver::new(stream(3, 8), cfg());
        for i in 0..3 {
            s.send(t(1000), frame(i)).unwrap();
        }
        let sent: Vec<Transmit> = core::iter::from_fn(|| s.poll_transmit(t(1000))).collect();
        assert_eq!(sent.len(), 3);
        let mut naks = vec![];
        for (r, base) in [(&mut r2, 10), (&mut r3, 20)] {
            for tx in sent.iter().filter(|tx| tx.header.seq != sq(1)) {
                let TxBody::Buf(b) = tx.body else {
                    unreachable!()
                };
                r.handle_frame(t(1010), &tx.header, RxBody::Data(BufId(base + b.0)));
            }
            naks.push(r.poll_transmit(t(1010)).expect("each receiver NAKs"));
        }
        for nak in &naks {
            let TxBody::Ranges(list) = &nak.body else {
                unreachable!()
            };
            assert_eq!(**list, list_of(&[1]));
            s.handle_frame(t(1020), &nak.header, RxBody::Ranges(list));
        }
        assert!(!s.is_idle());
        expect_data(&mut s, t(1020), 1, 1, true);
        expect_data(&mut s, t(1020), 1, 1, true);
        assert_eq!(s.poll_transmit(t(1020)), None);
        assert!(s.is_idle());
        let c = *s.counters();
        assert_eq!((c.naks_received, c.data_retransmitted), (2, 2));
    }

    #[test]
    fn sender_resends_what_it_holds_in_order_and_counts_the_rest() {
        let mut s = NakSender::new(stream(SENDER, 8), cfg(), &[2]);
        for i in 0..4 {
            s.send(t(1000), frame(i)).unwrap();
            expect_data(&mut s, t(1000), i, i, false);
        }
        // A NAK naming 3, 1 and two frames never sent; then a stranger's NAK.
        let mut list = list_of(&[1]);
        list.push(mcast_wire::SeqRange {
            start: sq(3),
            count: 3,
        });
        s.handle_frame(t(1010), &nak_header(2, &list), RxBody::Ranges(&list));
        s.handle_frame(t(1010), &nak_header(42, &list), RxBody::Ranges(&list));
        let mut wrong_epoch = nak_header(2, &list);
        wrong_epoch.epoch = EPOCH + 1;
        s.handle_frame(t(1010), &wrong_epoch, RxBody::Ranges(&list));
        expect_data(&mut s, t(1010), 1, 1, true);
        expect_data(&mut s, t(1010), 3, 3, true);
        assert_eq!(s.poll_transmit(t(1010)), None);
        let c = *s.counters();
        assert_eq!(
            (
                c.naks_received,
                c.naks_unrepairable,
                c.rejected,
                c.wrong_epoch_dropped
            ),
            (1, 2, 1, 1)
        );
        assert_eq!(
            s.send(t(1020), frame(9)).map(|_| ()),
            Ok(()),
            "window of 8 not yet full"
        );
        s.set_members(t(1020), &[]);
        assert_eq!(
            s.send(t(1020), frame(10)),
            Err(SendError::NoMembers(BufId(10)))
        );
    }

    #[test]
    fn receiver_drops_foreign_frames_and_returns_their_buffers() {
        let mut r = NakReceiver::new(stream(2, 8), cfg());
        let mut wrong_epoch = data(3);
        wrong_epoch.epoch = EPOCH + 1;
        r.handle_frame(t(1000), &wrong_epoch, RxBody::Data(BufId(1)));
        let mut stranger = data(3);
        stranger.src = 42;
        r.handle_frame(t(1000), &stranger, RxBody::Data(BufId(2)));
        assert_eq!(r.poll_transmit(t(1000)), None, "no gap was revealed");
        assert_eq!(
            events(&mut r),
            vec![Event::Release(BufId(1)), Event::Release(BufId(2))]
        );
        let c = *r.counters();
        assert_eq!((c.wrong_epoch_dropped, c.rejected), (1, 1));
    }

    #[test]
    fn receiver_shutdown_returns_frames_held_out_of_order() {
        let mut r = NakReceiver::new(stream(2, 8), cfg());
        r.handle_frame(t(1000), &data(2), RxBody::Data(BufId(5)));
        assert_eq!(r.held_buffers(), 1);
        r.release_all();
        assert_eq!(events(&mut r), vec![Event::Release(BufId(5))]);
        assert_eq!(r.held_buffers(), 0);
    }
}
