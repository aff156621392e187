//! Unit tests of Go-Back-N: the sender and receiver machines driven by
//! hand, frame by frame, on a virtual clock.
//!
//! Owns: these tests and their helpers. May not touch: anything outside
//! `gbn` (it tests through the module's items only).

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
