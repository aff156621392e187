//! Unit tests of MAK: the sender and receiver machines driven by hand,
//! frame by frame, on a virtual clock.
//!
//! Owns: these tests and their helpers (the ones `tail_tests` shares are
//! `pub(super)`). May not touch: anything outside `mak` (it tests through
//! the module's items only).

use super::*;
use crate::api::header_for;
use crate::{
    BufId, Dest, Duration, Endpoint, Event, Instant, OutFrame, RxBody, SendError, Sender,
    StreamConfig, Transmit, TxBody,
};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq};

pub(super) const SENDER: NodeId = 1;
pub(super) const W: u32 = 8;

pub(super) fn stream(local: NodeId) -> StreamConfig {
    StreamConfig {
        group: 7,
        local,
        sender: SENDER,
        epoch: 3,
        initial_seq: Seq(u32::MAX - 2),
        window_frames: W,
        seed: 11,
    }
}

/// The paper's tail (an ACK round at each burst's last frame): what most of
/// these tests drive, since it exercises the ACK machinery frame by frame.
fn paper() -> MakConfig {
    MakConfig {
        tail: TailPolicy::AckLast,
        ..MakConfig::default()
    }
}

fn fixed(us: u64) -> MakConfig {
    let d = Duration::from_micros(us);
    MakConfig {
        nak_timer: NakTimer::Fixed { min: d, max: d },
        ..paper()
    }
}

pub(super) fn us(n: u64) -> Instant {
    Instant(n * 1_000)
}

pub(super) fn out(buf: u32, last: bool) -> OutFrame {
    OutFrame {
        buf: BufId(buf),
        len: 100,
        frag: Flags::WHOLE,
        last,
    }
}

pub(super) fn drain_tx(e: &mut impl Endpoint, now: Instant) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

fn drain_events(e: &mut impl Endpoint) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// Hands a transmitted frame to an endpoint the way a driver would.
pub(super) fn deliver(e: &mut impl Endpoint, now: Instant, t: &Transmit, rx_buf: u32) {
    match t.body {
        TxBody::Buf(_) | TxBody::Relay(_) => {
            e.handle_frame(now, &t.header, RxBody::Data(BufId(rx_buf)))
        }
        TxBody::Ranges(ref l) => e.handle_frame(now, &t.header, RxBody::Ranges(l)),
        TxBody::None => e.handle_frame(now, &t.header, RxBody::None),
    }
}

fn delivered_seqs(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Deliver { seq, .. } => Some(seq.0),
            Event::Release(_) => None,
        })
        .collect()
}

fn released(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Release(b) => Some(b.0),
            Event::Deliver { .. } => None,
        })
        .collect()
}

fn nak_ranges(t: &Transmit) -> Vec<(u32, u32)> {
    match &t.body {
        TxBody::Ranges(l) => l.iter().map(|r| (r.start.0, r.count)).collect(),
        _ => panic!("not a NAK: {t:?}"),
    }
}

#[test]
fn lossless_burst_is_acked_at_its_last_frame_and_released() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let mut r2 = MakReceiver::new(stream(2), paper());
    let mut r3 = MakReceiver::new(stream(3), paper());
    for i in 0..3 {
        s.send(us(1), out(i, i == 2)).unwrap();
    }
    let tx = drain_tx(&mut s, us(1));
    assert_eq!(tx.len(), 3);
    assert_eq!(
        tx.iter().map(|t| t.header.seq.0).collect::<Vec<_>>(),
        vec![u32::MAX - 2, u32::MAX - 1, u32::MAX]
    );
    assert!(tx
        .iter()
        .all(|t| t.dest == Dest::Group && t.header.kind == Kind::Data && t.header.epoch == 3));
    assert!(
        tx[2]
            .header
            .flags
            .contains(Flags::LAST.with(Flags::ACK_REQ)),
        "the burst's last frame asks for ACKs"
    );
    assert!(!tx[0].header.flags.contains(Flags::ACK_REQ));
    assert_eq!(tx[0].header.group_size, 2);
    for (i, t) in tx.iter().enumerate() {
        deliver(&mut r2, us(10), t, 10 + i as u32);
        deliver(&mut r3, us(10), t, 20 + i as u32);
    }
    assert_eq!(
        delivered_seqs(&drain_events(&mut r2)),
        vec![u32::MAX - 2, u32::MAX - 1, u32::MAX]
    );
    assert_eq!(drain_events(&mut r3).len(), 3);
    let acks: Vec<_> = drain_tx(&mut r2, us(10))
        .into_iter()
        .chain(drain_tx(&mut r3, us(10)))
        .collect();
    assert_eq!(acks.len(), 2, "one ACK per receiver, no NAK");
    assert!(acks
        .iter()
        .all(|a| a.header.kind == Kind::Ack && a.dest == Dest::Node(SENDER)));
    assert_eq!(acks[0].header.ack, Seq(0), "cumulative across the wrap");
    deliver(&mut s, us(20), &acks[0], 0);
    assert!(
        drain_events(&mut s).is_empty(),
        "one member still owes its ACK"
    );
    deliver(&mut s, us(20), &acks[1], 0);
    assert_eq!(released(&drain_events(&mut s)), vec![0, 1, 2]);
    assert!(s.is_idle());
    assert_eq!(
        s.poll_timeout(),
        None,
        "no timer once everything is acknowledged"
    );
    // The first sample (19 us, echoed stamp to ACK) replaces the 100 us guess.
    assert_eq!(
        s.grtt(),
        Duration::from_micros(19),
        "measured from the echoed timestamp"
    );
}

#[test]
fn the_papers_nak_example_nak_2_4_5_becomes_nak_1_5() {
    // Recv-1 misses 4 and 5, Recv-2 misses 4. Recv-2's timer fires first and
    // it multicasts nak[1,4]; Recv-1 hears it and NAKs only 5 (seed 000 §3.1).
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let mut r1 = MakReceiver::new(stream(2), fixed(50));
    let mut r2 = MakReceiver::new(stream(3), fixed(20));
    for i in 0..7 {
        s.send(us(1), out(i, false)).unwrap();
    }
    let tx = drain_tx(&mut s, us(1));
    for (i, t) in tx.iter().enumerate() {
        if i != 4 && i != 5 {
            deliver(&mut r1, us(10), t, i as u32);
        }
        if i != 4 {
            deliver(&mut r2, us(10), t, 100 + i as u32);
        }
    }
    assert_eq!(r1.state(), ReceiverState::Wait);
    assert_eq!(r1.missing_count(), 2);
    let early: Vec<_> = drain_tx(&mut r1, us(10))
        .into_iter()
        .chain(drain_tx(&mut r2, us(10)))
        .collect();
    assert!(
        early.iter().all(|t| t.header.kind == Kind::Ack),
        "NAKs wait for their timers: {early:?}"
    );
    assert_eq!(r2.poll_timeout(), Some(us(30)));
    r2.handle_timeout(us(30));
    let nak2 = drain_tx(&mut r2, us(30));
    assert_eq!(nak2.len(), 1);
    assert_eq!(
        nak2[0].dest,
        Dest::Group,
        "MAK NAKs are multicast so others can suppress"
    );
    assert_eq!(
        nak_ranges(&nak2[0]),
        vec![(s.stream.initial_seq.add(4).0, 1)]
    );
    deliver(&mut r1, us(31), &nak2[0], 0);
    r1.handle_timeout(us(60));
    let nak1 = drain_tx(&mut r1, us(60));
    assert_eq!(
        nak_ranges(&nak1[0]),
        vec![(s.stream.initial_seq.add(5).0, 1)],
        "nak[2,4,5] became nak[1,5]"
    );
    assert_eq!(r1.counters().nak_entries_suppressed, 1);
    // The sender repairs both, once each; the receivers complete.
    deliver(&mut s, us(32), &nak2[0], 0);
    deliver(&mut s, us(61), &nak1[0], 0);
    let repairs = drain_tx(&mut s, us(61));
    assert_eq!(repairs.len(), 2);
    assert!(repairs
        .iter()
        .all(|t| t.header.flags.contains(Flags::RETRANSMIT)));
    for t in &repairs {
        deliver(&mut r1, us(70), t, 50 + t.header.seq.0 % 8);
    }
    assert_eq!(r1.state(), ReceiverState::Receive);
    assert_eq!(delivered_seqs(&drain_events(&mut r1)).len(), 7);
}

#[test]
fn a_burst_of_identical_naks_yields_one_repair() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3, 4]);
    for i in 0..4 {
        s.send(us(1), out(i, false)).unwrap();
    }
    drain_tx(&mut s, us(1));
    let mut list = RangeList::new();
    list.push_seq(s.stream.initial_seq.add(1));
    let mut h = header_for(&stream(2), Kind::Nak);
    for src in [2, 3, 4] {
        h.src = src;
        s.handle_frame(us(5), &h, RxBody::Ranges(&list));
    }
    assert_eq!(drain_tx(&mut s, us(5)).len(), 1);
    assert_eq!(s.counters().repairs_suppressed, 2);
    // A NAK inside the hold-off (one GRTT, 100 us before measurement) is answered by that repair.
    s.handle_frame(us(50), &h, RxBody::Ranges(&list));
    assert!(drain_tx(&mut s, us(50)).is_empty());
    // After it, the repair must have been lost: resend.
    s.handle_frame(us(200), &h, RxBody::Ranges(&list));
    assert_eq!(drain_tx(&mut s, us(200)).len(), 1);
    assert_eq!(s.counters().data_retransmitted, 2);
}

#[test]
fn full_buffer_waits_then_resends_the_last_frame_and_asks_again() {
    let cfg = MakConfig {
        ack_watermark_percent: 0,
        ..paper()
    };
    let mut s = MakSender::new(stream(SENDER), cfg, &[2]);
    let mut r = MakReceiver::new(stream(2), cfg);
    for i in 0..W {
        assert_eq!(s.state(), SenderState::Send);
        s.send(us(1), out(i, false)).unwrap();
    }
    assert_eq!(s.state(), SenderState::Wait);
    assert_eq!(
        s.send(us(1), out(99, false)),
        Err(SendError::WindowFull(BufId(99)))
    );
    let tx = drain_tx(&mut s, us(1));
    let reqs: Vec<_> = tx
        .iter()
        .filter(|t| t.header.flags.contains(Flags::ACK_REQ))
        .collect();
    assert_eq!(reqs.len(), 1, "the paper asks only when the buffer is full");
    assert_eq!(reqs[0].header.seq, s.stream.initial_seq.add(W - 1));
    // The requesting frame is lost: the receiver cannot know it exists.
    for t in &tx[..W as usize - 1] {
        deliver(&mut r, us(10), t, t.header.seq.0 % 64);
    }
    assert!(drain_tx(&mut r, us(10)).is_empty());
    // Nothing measured yet: the initial wait, from the request's departure.
    let due = us(1) + s.ack_wait();
    assert_eq!(s.poll_timeout(), Some(due));
    assert!(s.ack_wait() >= Duration::from_micros(500));
    s.handle_timeout(due);
    let resend = drain_tx(&mut s, due);
    assert_eq!(
        resend.len(),
        2,
        "RESEND: the last frame, then an ACK request"
    );
    assert!(resend[0].header.flags.contains(Flags::RETRANSMIT));
    assert_eq!(resend[0].header.seq, s.stream.initial_seq.add(W - 1));
    assert_eq!(resend[1].header.kind, Kind::AckReq);
    for t in &resend {
        deliver(&mut r, us(510), t, 63);
    }
    let ack = drain_tx(&mut r, us(510));
    assert_eq!(ack.len(), 1);
    deliver(&mut s, us(520), &ack[0], 0);
    assert_eq!(released(&drain_events(&mut s)).len(), W as usize);
    assert_eq!(s.state(), SenderState::Send);
    assert_eq!(s.counters().timeouts, 1);
}

#[test]
fn the_watermark_asks_before_the_buffer_fills() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    for i in 0..W {
        s.send(us(1), out(i, false)).unwrap();
    }
    let flagged: Vec<i32> = drain_tx(&mut s, us(1))
        .iter()
        .filter(|t| t.header.flags.contains(Flags::ACK_REQ))
        .map(|t| t.header.seq.distance(s.stream.initial_seq))
        .collect();
    assert_eq!(flagged, vec![3, 7], "every half window");
}

/// An ACK from `node` up to `ack`, echoing the stamp `echo_us`.
fn ack_echo(node: NodeId, ack: Seq, echo_us: u64) -> Header {
    let mut h = header_for(&stream(node), Kind::Ack);
    h.ack = ack;
    h.flags = Flags::ACK_VALID;
    h.tstamp_us = echo_us as u32;
    h
}

#[test]
fn the_ack_wait_starts_when_the_request_leaves() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    for i in 0..W {
        s.send(us(0), out(i, false)).unwrap();
    }
    // Nothing has left yet: no timer, however long the frames wait.
    assert_eq!(s.poll_timeout(), None);
    // The link takes one frame per 100 us; the watermark request is the
    // fourth frame.
    for k in 0..4u64 {
        let t = s.poll_transmit(us(100 * k)).unwrap();
        assert_eq!(t.header.flags.contains(Flags::ACK_REQ), k == 3);
    }
    assert_eq!(s.poll_timeout(), Some(us(300) + s.ack_wait()));
}

#[test]
fn the_grtt_is_the_slowest_members_smoothed_round_trip() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let first = s.stream.initial_seq;
    let mut now = 0;
    for i in 0..40u32 {
        s.send(us(now), out(i % W, true)).unwrap();
        drain_tx(&mut s, us(now));
        let next = first.add(i + 1);
        // Receiver 2 answers in 20 us, receiver 3 in 50 us.
        s.handle_frame(us(now + 20), &ack_echo(2, next, now), RxBody::None);
        s.handle_frame(us(now + 50), &ack_echo(3, next, now), RxBody::None);
        drain_events(&mut s);
        now += 100;
    }
    assert_eq!(s.grtt(), Duration::from_micros(50), "the slower member's");
    // One sample 5 ms late (a receiver descheduled) moves it by an eighth.
    s.send(us(now), out(0, true)).unwrap();
    drain_tx(&mut s, us(now));
    let next = first.add(41);
    s.handle_frame(us(now + 20), &ack_echo(2, next, now), RxBody::None);
    s.handle_frame(us(now + 5000), &ack_echo(3, next, now), RxBody::None);
    let g = s.grtt();
    assert!(
        g > Duration::from_micros(600) && g < Duration::from_micros(700),
        "{g:?}: 50 us + (5 ms - 50 us) / 8"
    );
}

#[test]
fn the_ack_wait_doubles_only_while_nothing_comes_back() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    let first_seq = s.stream.initial_seq;
    s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    let first = s.ack_wait();
    let mut due = s.poll_timeout().unwrap();
    for k in 1..4u32 {
        s.handle_timeout(due);
        let resend = drain_tx(&mut s, due);
        assert_eq!(resend.len(), 2, "the last frame and an ACK_REQ");
        assert_eq!(s.ack_wait(), first * (1 << k));
        assert_eq!(s.poll_timeout(), Some(due + first * (1 << k)));
        due = s.poll_timeout().unwrap();
    }
    // An ACK (of anything) shows the members are there: back to the estimate.
    let echo = due.as_nanos() / 1_000;
    s.handle_frame(due, &ack_echo(2, first_seq, echo), RxBody::None);
    assert!(s.ack_wait() < first * 2, "{:?}", s.ack_wait());
}

#[test]
fn a_member_that_leaves_requests_unanswered_is_reported_unresponsive() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let first_seq = s.stream.initial_seq;
    s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    let unresponsive = |s: &MakSender| {
        let mut v = Vec::new();
        s.unresponsive(2, &mut v);
        v
    };
    // Member 2 answers every request; member 3 never does.
    let mut due = s.poll_timeout().unwrap();
    s.handle_frame(due, &ack_echo(2, first_seq.add(1), 0), RxBody::None);
    for k in 1..=2 {
        assert!(unresponsive(&s).is_empty(), "after {} expiries", k - 1);
        s.handle_timeout(due);
        drain_tx(&mut s, due);
        due = s.poll_timeout().unwrap();
        s.handle_frame(due, &ack_echo(2, first_seq.add(1), 0), RxBody::None);
    }
    assert_eq!(
        unresponsive(&s),
        vec![3],
        "two requests in a row unanswered"
    );
    // Any ACK from it, even one that acknowledges nothing new, clears it.
    s.handle_frame(due, &ack_echo(3, first_seq, 0), RxBody::None);
    assert!(unresponsive(&s).is_empty());
    // Silent again for two requests: reported again, and a view that
    // still has it keeps the count; a view without it drops it.
    for _ in 0..2 {
        due = s.poll_timeout().unwrap();
        s.handle_timeout(due);
        drain_tx(&mut s, due);
    }
    assert_eq!(unresponsive(&s), vec![3]);
    s.set_members(due, &[2, 3]);
    assert_eq!(unresponsive(&s), vec![3]);
    s.set_members(due, &[2]);
    assert!(unresponsive(&s).is_empty());
}

#[test]
fn newer_requests_do_not_push_back_the_wait_for_a_silent_member() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let first = s.stream.initial_seq;
    let wait = s.ack_wait();
    // A request leaves every 100 us (a burst ends each time); member 2
    // answers each, member 3 has stopped.
    for k in 0..4u32 {
        let t = us(100 * u64::from(k));
        s.send(t, out(k, true)).unwrap();
        drain_tx(&mut s, t);
        s.handle_frame(
            t + Duration::from_micros(50),
            &ack_echo(2, first.add(k + 1), 0),
            RxBody::None,
        );
    }
    // The timer still runs for the first request: member 3 is noticed one
    // wait after it, not one wait after the newest request.
    assert_eq!(s.poll_timeout(), Some(us(0) + wait));
    s.handle_timeout(us(0) + wait);
    let mut v = Vec::new();
    s.unresponsive(1, &mut v);
    assert_eq!(v, vec![3], "only the member that did not answer");
}

#[test]
fn the_wait_starts_again_when_the_slowest_member_makes_progress() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let first = s.stream.initial_seq;
    s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    s.send(us(100), out(1, true)).unwrap();
    drain_tx(&mut s, us(100));
    // Both answer the first request at 300 us, the second not yet: the
    // timer runs again from then, for the second.
    for m in [2, 3] {
        s.handle_frame(us(300), &ack_echo(m, first.add(1), 0), RxBody::None);
    }
    assert_eq!(s.poll_timeout(), Some(us(300) + s.ack_wait()));
    // Both answer the second: the timer stops.
    for m in [2, 3] {
        s.handle_frame(us(350), &ack_echo(m, first.add(2), 0), RxBody::None);
    }
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn a_lost_last_frame_is_recovered_by_the_sender_timer() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    let mut r = MakReceiver::new(stream(2), paper());
    s.send(us(0), out(0, false)).unwrap();
    s.send(us(0), out(1, true)).unwrap();
    let tx = drain_tx(&mut s, us(0));
    deliver(&mut r, us(10), &tx[0], 5);
    assert_eq!(drain_events(&mut r).len(), 1);
    let due = s.poll_timeout().expect("the request left");
    s.handle_timeout(due);
    for t in drain_tx(&mut s, due) {
        deliver(&mut r, us(510), &t, 6);
    }
    assert_eq!(
        delivered_seqs(&drain_events(&mut r)),
        vec![s.stream.initial_seq.add(1).0]
    );
    let ack = drain_tx(&mut r, us(510));
    deliver(&mut s, us(520), &ack[0], 0);
    assert!(s.is_idle());
}

#[test]
fn a_gap_at_the_tail_revealed_by_an_ack_request_is_naked() {
    let mut r = MakReceiver::new(stream(2), fixed(10));
    let mut h = header_for(&stream(SENDER), Kind::AckReq);
    h.ack = stream(2).initial_seq.add(2);
    r.handle_frame(us(0), &h, RxBody::None);
    assert_eq!(r.missing_count(), 3);
    r.handle_timeout(us(10));
    let nak = drain_tx(&mut r, us(10));
    assert_eq!(nak_ranges(&nak[0]), vec![(stream(2).initial_seq.0, 3)]);
}

/// Receiver 2 (NAK timer 10 us) and a sender that has sent `frames` frames
/// at t=0, and those frames.
fn sent_to_one(frames: u32) -> (MakReceiver, MakSender, Vec<Transmit>) {
    let r = MakReceiver::new(stream(2), fixed(10));
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    for i in 0..frames {
        s.send(us(0), out(i, false)).unwrap();
    }
    let tx = drain_tx(&mut s, us(0));
    (r, s, tx)
}

#[test]
fn unanswered_naks_are_repeated_after_the_repair_wait() {
    let (mut r, s, tx) = sent_to_one(3);
    deliver(&mut r, us(1), &tx[0], 0);
    deliver(&mut r, us(1), &tx[2], 2);
    r.handle_timeout(us(11));
    assert_eq!(drain_tx(&mut r, us(11)).len(), 1);
    // The repair is lost. After 3 GRTTs (300 us) the frame is pending again.
    assert_eq!(r.poll_timeout(), Some(us(311)));
    r.handle_timeout(us(311));
    assert_eq!(r.poll_timeout(), Some(us(321)));
    r.handle_timeout(us(321));
    assert_eq!(
        nak_ranges(&drain_tx(&mut r, us(321))[0]),
        vec![(s.stream.initial_seq.add(1).0, 1)]
    );
    assert_eq!(r.counters().naks_sent, 2);
    // The second NAK is not answered either: the wait doubles (600 us).
    assert_eq!(r.poll_timeout(), Some(us(921)));
    r.handle_timeout(us(921));
    assert_eq!(r.poll_timeout(), Some(us(931)));
    r.handle_timeout(us(931));
    assert_eq!(drain_tx(&mut r, us(931)).len(), 1);
    assert_eq!(r.poll_timeout(), Some(us(931 + 1200)), "and doubles again");
}

#[test]
fn a_lost_repair_is_asked_again_at_one_wait_while_the_sender_repairs() {
    let (mut r, mut s, tx) = sent_to_one(5);
    let first = s.stream.initial_seq;
    let seq = |i: u32| first.add(i);
    // Frames 1 and 3 are lost; one NAK asks for both.
    for i in [0, 2, 4] {
        deliver(&mut r, us(1), &tx[i], i as u32);
    }
    r.handle_timeout(us(11));
    let nak = drain_tx(&mut r, us(11));
    assert_eq!(
        nak_ranges(&nak[0]),
        vec![(seq(1).0, 1), (seq(3).0, 1)],
        "one NAK for both"
    );
    // Frame 1's repair comes; frame 3's is lost on the way.
    // The NAK takes 100 us to the sender and echoes frame 4's stamp plus
    // the 10 us the receiver held it: the sender measures 100 us.
    deliver(&mut s, us(111), &nak[0], 0);
    let repairs = drain_tx(&mut s, us(111));
    assert_eq!(repairs.len(), 2);
    assert_eq!(s.counters().nak_rtt_samples, 1);
    deliver(&mut r, us(121), &repairs[0], 10);
    // After the repair wait (3 GRTTs; the sender measured the round trip
    // from the NAK's echo, and the repair advertises it) frame 3 is asked
    // again...
    let measured = r.grtt.as_micros();
    assert!((95..=110).contains(&measured), "{measured} us");
    r.handle_timeout(us(311));
    r.handle_timeout(us(321));
    let again = drain_tx(&mut r, us(321));
    assert_eq!(nak_ranges(&again[0]), vec![(seq(3).0, 1)]);
    // ... and since the sender was repairing, its repair is awaited one
    // wait again, not two: the loss was on the way, not at the sender.
    assert_eq!(r.poll_timeout(), Some(us(321) + r.grtt * 3));
}

/// A sender (one receiver) that has sent a full window at t=0 and, at
/// t=1 us, heard one NAK for all of it: a NAK storm for the budget tests.
fn nak_storm(cfg: MakConfig) -> MakSender {
    let mut s = MakSender::new(stream(SENDER), cfg, &[2]);
    for i in 0..W {
        s.send(us(0), out(i, false)).unwrap();
    }
    drain_tx(&mut s, us(0));
    let mut list = RangeList::new();
    list.push(mcast_wire::SeqRange {
        start: s.stream.initial_seq,
        count: W,
    });
    s.handle_frame(
        us(1),
        &header_for(&stream(2), Kind::Nak),
        RxBody::Ranges(&list),
    );
    s
}

#[test]
fn the_retransmission_budget_defers_a_nak_storm() {
    let cfg = MakConfig {
        retransmit_share: 0.01,
        retransmit_burst: 2,
        retransmit_floor_per_sec: 1_000,
        ..paper()
    };
    let mut s = nak_storm(cfg);
    assert_eq!(drain_tx(&mut s, us(1)).len(), 2, "the burst allowance");
    assert_eq!(s.counters().repairs_deferred, 1);
    let next = s.poll_timeout().unwrap();
    assert!(
        next > us(1) && next <= us(1001),
        "one token a millisecond: {next:?}"
    );
    assert!(drain_tx(&mut s, us(500)).is_empty());
    assert_eq!(drain_tx(&mut s, us(1001)).len(), 1);
}

#[test]
fn the_budget_deadline_always_finds_a_token() {
    // Awkward rates whose token time is not a whole number of nanoseconds.
    for floor in [7u32, 999_983, 333_333, 1_000_003] {
        let cfg = MakConfig {
            retransmit_share: 0.01,
            retransmit_burst: 1,
            retransmit_floor_per_sec: floor,
            ..paper()
        };
        let mut s = nak_storm(cfg);
        let mut now = us(1);
        let mut repaired = std::collections::HashSet::new();
        let note = |repaired: &mut std::collections::HashSet<u32>, tx: Vec<Transmit>| {
            for t in tx {
                if t.header.kind == Kind::Data {
                    repaired.insert(t.header.seq.0);
                }
            }
        };
        note(&mut repaired, drain_tx(&mut s, now));
        for _ in 0..100_000 {
            let Some(next) = s.poll_timeout() else { break };
            assert!(next > now, "floor {floor}: the deadline moves forward");
            now = next;
            s.handle_timeout(now);
            note(&mut repaired, drain_tx(&mut s, now));
            if repaired.len() == W as usize {
                break;
            }
        }
        let sent = repaired.len();
        assert_eq!(sent, W as usize, "floor {floor}: every repair went out");
    }
}

#[test]
fn a_driver_that_cannot_transmit_is_not_woken_again_and_again() {
    let cfg = MakConfig {
        retransmit_share: 0.01,
        retransmit_burst: 1,
        ..paper()
    };
    let mut s = nak_storm(cfg);
    assert!(s.poll_transmit(us(1)).is_some());
    assert!(s.poll_transmit(us(1)).is_none(), "the budget is spent");
    // The driver's TX ring is full: it handles the deadline but takes no frame.
    let t = s.poll_timeout().unwrap();
    s.handle_timeout(t);
    let next = s.poll_timeout().unwrap();
    assert!(next > t, "the next deadline is later: {next:?} after {t:?}");
}

#[test]
fn frames_not_yet_on_the_wire_are_never_named_or_repaired() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    for i in 0..W {
        s.send(us(0), out(i, false)).unwrap();
    }
    // The driver's TX ring takes only four frames (the fourth asks for
    // ACKs at the watermark).
    let sent: Vec<_> = (0..4).map(|_| s.poll_transmit(us(0)).unwrap()).collect();
    assert!(sent[3].header.flags.contains(Flags::ACK_REQ));
    let due = s.poll_timeout().expect("the request left");
    s.handle_timeout(due);
    let resend = s.poll_transmit(due).unwrap();
    assert_eq!(
        resend.header.seq, sent[3].header.seq,
        "the last frame sent, not the last queued"
    );
    let req = s.poll_transmit(due).unwrap();
    assert_eq!(req.header.kind, Kind::AckReq);
    assert_eq!(req.header.ack, sent[3].header.seq);
    // A NAK naming a queued frame is not a repair request.
    let mut list = RangeList::new();
    list.push(mcast_wire::SeqRange {
        start: sent[0].header.seq,
        count: 6,
    });
    s.handle_frame(
        due,
        &header_for(&stream(2), Kind::Nak),
        RxBody::Ranges(&list),
    );
    let next: Vec<_> = drain_tx(&mut s, due);
    let repairs = next
        .iter()
        .filter(|t| t.header.flags.contains(Flags::RETRANSMIT))
        .count();
    assert_eq!(
        repairs, 3,
        "only the transmitted, not-just-repaired frames #0..#2 are repaired"
    );
    assert_eq!(
        next.len(),
        3 + W as usize - 4,
        "then the queued frames, once each"
    );
}

#[test]
fn adaptive_backoff_scales_with_grtt_and_skews_with_group_size() {
    let mean = |grtt_us: u32, group: u16| {
        let mut r = MakReceiver::new(stream(2), paper());
        r.grtt = Duration::from_micros(u64::from(grtt_us));
        r.group_size = group;
        let draws: Vec<Duration> = (0..2000).map(|_| r.draw_backoff()).collect();
        assert!(draws
            .iter()
            .all(|d| *d <= Duration::from_micros(u64::from(grtt_us) * 2)));
        draws.iter().sum::<Duration>().as_secs_f64() / 2000.0
    };
    let small = mean(20, 1);
    let large = mean(20, 512);
    assert!(
        large > small,
        "with many receivers most wait longer: {small} vs {large}"
    );
    assert!(
        mean(200, 8) > 5.0 * mean(20, 8),
        "scales with the group round trip"
    );
}

#[test]
fn a_departed_member_no_longer_holds_the_buffer() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    let mut ack = header_for(&stream(2), Kind::Ack);
    ack.ack = s.stream.initial_seq.add(1);
    s.handle_frame(us(5), &ack, RxBody::None);
    assert!(drain_events(&mut s).is_empty());
    s.set_members(us(6), &[2]);
    assert_eq!(released(&drain_events(&mut s)), vec![0]);
    assert!(s.is_idle());
}

#[test]
fn a_member_that_lost_its_stream_resumes_where_it_acknowledged() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2, 3]);
    let first = s.stream.initial_seq;
    assert_eq!(
        s.resume_point(us(0), 2),
        Some(first),
        "a new member owes nothing before"
    );
    for b in 0..3 {
        s.send(us(0), out(b, b == 2)).unwrap();
    }
    drain_tx(&mut s, us(0));
    // Member 2 holds the first frame only; member 3 all three.
    s.handle_frame(us(5), &ack_echo(2, first.add(1), 0), RxBody::None);
    s.handle_frame(us(5), &ack_echo(3, first.add(3), 0), RxBody::None);
    assert_eq!(s.resume_point(us(6), 2), Some(first.add(1)));
    assert_eq!(s.resume_point(us(6), 3), Some(first.add(3)));
    assert_eq!(s.resume_point(us(6), 4), None, "not a member");
    // Member 2 opens its stream again there: the sender's next request
    // shows it the gap, and the repairs come from the buffer.
    let mut cfg = stream(2);
    cfg.initial_seq = s.resume_point(us(6), 2).unwrap();
    let mut r = MakReceiver::new(cfg, fixed(10));
    let due = s.poll_timeout().expect("waiting for member 2");
    s.handle_timeout(due);
    for t in drain_tx(&mut s, due) {
        deliver(&mut r, due, &t, 7);
    }
    assert_eq!(delivered_seqs(&drain_events(&mut r)), Vec::<u32>::new());
    let later = due + Duration::from_micros(10);
    r.handle_timeout(later);
    let nak = drain_tx(&mut r, later);
    assert_eq!(nak_ranges(&nak[0]), vec![(first.add(1).0, 1)]);
    deliver(&mut s, later, &nak[0], 0);
    for t in drain_tx(&mut s, later) {
        deliver(&mut r, later, &t, 8);
    }
    let got = delivered_seqs(&drain_events(&mut r));
    assert_eq!(got, vec![first.add(1).0, first.add(2).0]);
}

/// A sender to member 2 that sent three frames, of which member 2
/// acknowledged the first (released): the other two are held for it.
fn sender_holding_two_of_three() -> (MakSender, Seq) {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    let first = s.stream.initial_seq;
    for b in 0..3 {
        s.send(us(0), out(b, b == 2)).unwrap();
    }
    drain_tx(&mut s, us(0));
    s.handle_frame(us(5), &ack_echo(2, first.add(1), 0), RxBody::None);
    assert_eq!(released(&drain_events(&mut s)), vec![0]);
    (s, first)
}

#[test]
fn a_new_member_joins_at_the_oldest_frame_still_held() {
    let (mut s, first) = sender_holding_two_of_three();
    assert_eq!(s.join_point(), Some(first.add(1)));
    // Member 3 joins there, owes those two and gets them: if the sender
    // dies, member 2 can take what it lacks from member 3 in a flush.
    s.set_members(us(6), &[2, 3]);
    assert_eq!(s.resume_point(us(6), 3), Some(first.add(1)));
    let mut cfg = stream(3);
    cfg.initial_seq = s.join_point().unwrap();
    let mut r = MakReceiver::new(cfg, fixed(10));
    let due = s.poll_timeout().expect("waiting for members");
    s.handle_timeout(due);
    for t in drain_tx(&mut s, due) {
        deliver(&mut r, due, &t, 7);
    }
    let later = due + Duration::from_micros(10);
    r.handle_timeout(later);
    for nak in drain_tx(&mut r, later) {
        deliver(&mut s, later, &nak, 0);
    }
    for t in drain_tx(&mut s, later) {
        deliver(&mut r, later, &t, 8);
    }
    let got = delivered_seqs(&drain_events(&mut r));
    assert_eq!(got, vec![first.add(1).0, first.add(2).0]);
    // Until member 3 acknowledges them, they stay held.
    s.handle_frame(us(900), &ack_echo(2, first.add(3), 0), RxBody::None);
    assert!(released(&drain_events(&mut s)).is_empty());
    // An ACK its node sent before it joined (echoing an earlier time)
    // is from a stream it no longer has: it frees nothing.
    s.handle_frame(us(901), &ack_echo(3, first.add(3), 5), RxBody::None);
    assert!(released(&drain_events(&mut s)).is_empty());
    assert_eq!(s.counters().acks_stale, 1);
    s.handle_frame(us(902), &ack_echo(3, first.add(3), 900), RxBody::None);
    assert_eq!(released(&drain_events(&mut s)), vec![1, 2]);
}

#[test]
fn a_resumed_member_s_acks_from_its_old_stream_free_nothing() {
    let (mut s, first) = sender_holding_two_of_three();
    // Member 2 lost its stream and opens it again at its position; its
    // old stream's ACK for everything, still on the way, must not free
    // the frames the new one has to receive.
    assert_eq!(s.resume_point(us(10), 2), Some(first.add(1)));
    s.handle_frame(us(11), &ack_echo(2, first.add(3), 4), RxBody::None);
    assert!(released(&drain_events(&mut s)).is_empty());
    assert_eq!(s.resume_point(us(12), 2), Some(first.add(1)));
    s.handle_frame(us(30), &ack_echo(2, first.add(3), 20), RxBody::None);
    assert_eq!(released(&drain_events(&mut s)), vec![1, 2]);
}

#[test]
fn release_all_returns_every_buffer() {
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    let mut r = MakReceiver::new(stream(2), paper());
    for i in 0..3 {
        s.send(us(0), out(i, false)).unwrap();
    }
    let tx = drain_tx(&mut s, us(0));
    deliver(&mut r, us(1), &tx[2], 42);
    s.release_all();
    r.release_all();
    assert_eq!(released(&drain_events(&mut s)), vec![0, 1, 2]);
    assert_eq!(released(&drain_events(&mut r)), vec![42]);
    assert_eq!((s.held_buffers(), r.held_buffers()), (0, 0));
}

#[test]
fn foreign_epochs_and_strangers_are_dropped_and_counted() {
    let mut r = MakReceiver::new(stream(2), paper());
    let mut h = header_for(&stream(SENDER), Kind::Data);
    h.epoch = 4;
    r.handle_frame(us(0), &h, RxBody::Data(BufId(1)));
    h.epoch = 3;
    h.src = 9;
    r.handle_frame(us(0), &h, RxBody::Data(BufId(2)));
    assert_eq!(
        released(&drain_events(&mut r)),
        vec![1, 2],
        "buffers come back"
    );
    assert_eq!(
        (r.counters().wrong_epoch_dropped, r.counters().rejected),
        (1, 1)
    );
    let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
    let mut ack = header_for(&stream(9), Kind::Ack);
    ack.ack = s.stream.initial_seq;
    s.handle_frame(us(0), &ack, RxBody::None);
    assert_eq!(s.counters().rejected, 1, "an ACK from a non-member");
}

#[test]
fn a_timeout_asks_again_only_the_members_that_did_not_answer() {
    // Four members; after the request, `answering` of them ACK. At the
    // timer's expiry the silent ones are asked one by one (unicast) while
    // they are at most half the group; more, and
    // one multicast request asks everybody, as the paper does.
    for (answering, unicast) in [(3usize, true), (2, true), (1, false)] {
        let members = [2, 3, 4, 5];
        let mut s = MakSender::new(stream(SENDER), paper(), &members);
        s.send(us(0), out(0, false)).unwrap();
        let req = s.send(us(0), out(1, true)).unwrap();
        let tx = drain_tx(&mut s, us(0));
        for &m in &members[..answering] {
            let mut r = MakReceiver::new(stream(m), paper());
            for (i, t) in tx.iter().enumerate() {
                deliver(&mut r, us(10), t, i as u32);
            }
            for a in drain_tx(&mut r, us(10)) {
                deliver(&mut s, us(20), &a, 0);
            }
        }
        let due = s.poll_timeout().expect("the ACK wait");
        s.handle_timeout(due);
        let again = drain_tx(&mut s, due);
        assert_eq!(again[0].header.seq, req, "the last frame is resent");
        assert_eq!(again[0].dest, Dest::Group);
        let asks: Vec<_> = again[1..]
            .iter()
            .map(|t| {
                assert_eq!(t.header.kind, Kind::AckReq);
                assert_eq!(t.header.ack, req, "the highest frame sent");
                t.dest
            })
            .collect();
        if unicast {
            let silent: Vec<_> = members[answering..]
                .iter()
                .map(|&m| Dest::Node(m))
                .collect();
            assert_eq!(asks, silent, "{answering} answered");
        } else {
            assert_eq!(asks, vec![Dest::Group], "{answering} answered");
        }
        assert_eq!(s.counters().ack_reqs_sent, 1 + asks.len() as u64);
    }
}

#[test]
fn a_silent_member_is_asked_again_at_the_same_wait_while_the_others_answer() {
    // Members 2 and 3 answer the request, 4 never does: each expiry asks 4
    // alone, and the wait does not double (the link works). With nobody
    // answering it doubles, as before.
    for (answering, doubles) in [(2usize, false), (0, true)] {
        let members = [2, 3, 4];
        let mut s = MakSender::new(stream(SENDER), paper(), &members);
        s.send(us(0), out(0, true)).unwrap();
        let tx = drain_tx(&mut s, us(0));
        for &m in &members[..answering] {
            let mut r = MakReceiver::new(stream(m), paper());
            deliver(&mut r, us(10), &tx[0], 0);
            for a in drain_tx(&mut r, us(10)) {
                deliver(&mut s, us(20), &a, 0);
            }
        }
        let first = s.ack_wait();
        let mut at = s.poll_timeout().expect("the ACK wait");
        for expiry in 1..=3u32 {
            s.handle_timeout(at);
            drain_tx(&mut s, at);
            let wait = s.ack_wait();
            let expected = if doubles {
                first * (1 << expiry)
            } else {
                first
            };
            assert_eq!(wait, expected, "{answering} answering, expiry {expiry}");
            at = s.poll_timeout().expect("asked again");
        }
        let mut silent = Vec::new();
        s.unresponsive(3, &mut silent);
        assert_eq!(silent, members[answering..].to_vec());
    }
}

#[test]
fn a_timeout_with_the_window_full_asks_every_member() {
    // The sender is stalled: everybody's newest position may open the
    // window, so the request is multicast even with one member silent.
    let members = [2, 3, 4];
    let mut s = MakSender::new(stream(SENDER), paper(), &members);
    for i in 0..W {
        s.send(us(0), out(i, false)).unwrap();
    }
    assert_eq!(s.state(), SenderState::Wait);
    let tx = drain_tx(&mut s, us(0));
    for &m in &members[..2] {
        let mut r = MakReceiver::new(stream(m), paper());
        for (i, t) in tx.iter().enumerate() {
            deliver(&mut r, us(10), t, i as u32);
        }
        // They answered an older request only (the first half window).
        let acks = drain_tx(&mut r, us(10));
        deliver(&mut s, us(20), &acks[0], 0);
    }
    let due = s.poll_timeout().expect("the ACK wait");
    s.handle_timeout(due);
    let again = drain_tx(&mut s, due);
    let asks: Vec<_> = again
        .iter()
        .filter(|t| t.header.kind == Kind::AckReq)
        .map(|t| t.dest)
        .collect();
    assert_eq!(asks, vec![Dest::Group]);
}

#[test]
fn a_naks_echo_is_a_round_trip_sample_so_the_grtt_follows_the_path_under_loss() {
    let (mut r, mut s, tx) = sent_to_one(3);
    // The receiver's NAK echoes the stamp of the last frame it had, plus
    // the time it held it.
    deliver(&mut r, us(1), &tx[0], 0);
    deliver(&mut r, us(1), &tx[2], 2);
    r.handle_timeout(us(11));
    let nak = drain_tx(&mut r, us(11));
    assert!(nak[0].header.flags.contains(Flags::ACK_VALID));
    assert_eq!(nak[0].header.tstamp_us, tx[2].header.tstamp_us + 10);
    // A NAK from member 2, `rtt` after the echoed stamp.
    let mut list = RangeList::new();
    list.push_seq(s.stream.initial_seq.add(1));
    let nak_at = |s: &mut MakSender, at_us: u64, rtt_us: u64, valid: bool| {
        let mut h = header_for(&stream(2), Kind::Nak);
        if valid {
            h.flags = Flags::ACK_VALID;
            h.tstamp_us = (at_us - rtt_us) as u32;
        }
        s.handle_frame(us(at_us), &h, RxBody::Ranges(&list));
    };
    // A round trip measured while the path was loaded: 5 ms.
    nak_at(&mut s, 10_000, 5_000, true);
    assert_eq!(s.grtt(), Duration::from_millis(5));
    // Without the echo, no sample.
    nak_at(&mut s, 20_000, 100, false);
    assert_eq!(s.grtt(), Duration::from_millis(5));
    assert_eq!(s.counters().nak_rtt_samples, 1);
    // The load is gone: the NAKs of the next losses bring it down.
    for i in 0..24 {
        nak_at(&mut s, 30_000 + i * 1_000, 100, true);
    }
    assert!(s.grtt() < Duration::from_micros(500), "{:?}", s.grtt());
}

#[test]
fn a_paced_sender_s_grtt_comes_down_in_a_handful_of_naks_a_saturating_one_s_does_not() {
    // A GRTT of 5 ms measured in a burst, then the NAKs of a drained path
    // (100 µs): a sender whose frames leave a millisecond apart takes them
    // fast; one whose frames leave back to back smooths them (its own
    // frames keep the queues it measures).
    let grtt_after = |gap_us: u64| {
        let mut s = MakSender::new(stream(SENDER), paper(), &[2]);
        for i in 0..3 {
            s.send(us(i * gap_us), out(i as u32, false)).unwrap();
            drain_tx(&mut s, us(i * gap_us));
        }
        let mut list = RangeList::new();
        list.push_seq(s.stream.initial_seq.add(1));
        for (k, rtt) in std::iter::once(5_000).chain([100; 10]).enumerate() {
            let at = 10_000 + k as u64 * 1_000;
            let mut h = header_for(&stream(2), Kind::Nak);
            h.flags = Flags::ACK_VALID;
            h.tstamp_us = (at - rtt) as u32;
            s.handle_frame(us(at), &h, RxBody::Ranges(&list));
        }
        s.grtt()
    };
    let paced = grtt_after(1_000);
    let saturating = grtt_after(0);
    assert!(paced < Duration::from_micros(200), "{paced:?}");
    assert!(saturating > Duration::from_millis(1), "{saturating:?}");
}
