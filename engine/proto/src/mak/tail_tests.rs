//! Unit tests of the idle sender's tail ([`TailPolicy::Advertise`], the
//! default): position advertisements instead of an ACK round per burst,
//! their backoff, and the one idle ACK round, driven by hand on a virtual
//! clock.
//!
//! Owns: these tests. May not touch: anything outside `mak` (it tests
//! through the module's items only); the paper's tail is tested in `tests`,
//! whose frame helpers these share.

use super::tests::{deliver, drain_tx, out, stream, us, SENDER, W};
use super::*;
use crate::{BufId, Duration, Endpoint, Event, Instant, Sender, Transmit};
use mcast_wire::{Flags, Kind, Seq};

/// The default configuration (advertising), with a fixed 10 us NAK timer.
fn advertising() -> MakConfig {
    let d = Duration::from_micros(10);
    MakConfig {
        nak_timer: NakTimer::Fixed { min: d, max: d },
        ..MakConfig::default()
    }
}

/// Runs the sender's timers until `until`, returning what it sent and when.
fn idle_until(s: &mut MakSender, until: Instant) -> Vec<(Instant, Transmit)> {
    let mut sent = Vec::new();
    while let Some(at) = s.poll_timeout().filter(|&t| t <= until) {
        s.handle_timeout(at);
        sent.extend(drain_tx(s, at).into_iter().map(|t| (at, t)));
    }
    sent
}

#[test]
fn the_last_frame_of_a_burst_asks_for_nothing() {
    let mut s = MakSender::new(stream(SENDER), advertising(), &[2, 3]);
    s.send(us(0), out(0, false)).unwrap();
    s.send(us(0), out(1, true)).unwrap();
    let tx = drain_tx(&mut s, us(0));
    assert_eq!(tx.len(), 2);
    assert!(
        tx.iter()
            .all(|t| !t.header.flags.contains(Flags::ACK_REQ)
                && !t.header.flags.contains(Flags::LAST))
    );
    // A receiver holding everything owes no ACK.
    let mut r = MakReceiver::new(stream(2), advertising());
    for (i, t) in tx.iter().enumerate() {
        deliver(&mut r, us(10), t, i as u32);
    }
    assert!(drain_tx(&mut r, us(10)).is_empty(), "no ACK per burst");
}

#[test]
fn an_idle_sender_advertises_with_backoff_then_asks_once() {
    let mut s = MakSender::new(stream(SENDER), advertising(), &[2]);
    let last = s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    // GRTT is the initial 100 us: heartbeats at 2, 2 + 4, 2 + 4 + 8 GRTTs;
    // the idle ACK round at 16 GRTTs (1.6 ms, above the 1 ms floor).
    let sent = idle_until(&mut s, us(1_600));
    let kinds: Vec<(u64, Kind, Seq)> = sent
        .iter()
        .map(|(at, t)| {
            let pos = if t.header.kind == Kind::AckReq {
                t.header.ack
            } else {
                t.header.seq
            };
            (at.0 / 1_000, t.header.kind, pos)
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (200, Kind::Heartbeat, last),
            (600, Kind::Heartbeat, last),
            (1_400, Kind::Heartbeat, last),
            (1_600, Kind::AckReq, last),
        ]
    );
    assert_eq!(s.counters().adverts_sent, 3);
    assert_eq!(s.counters().ack_reqs_sent, 1);
    // A receiver holding the frame answers the round.
    let mut r = MakReceiver::new(stream(2), advertising());
    let mut s2 = MakSender::new(stream(SENDER), advertising(), &[2]);
    s2.send(us(0), out(0, true)).unwrap();
    deliver(&mut r, us(10), &drain_tx(&mut s2, us(0))[0], 1);
    deliver(&mut r, us(1_610), &sent[3].1, 0);
    let ack = drain_tx(&mut r, us(1_610));
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].header.kind, Kind::Ack);
}

#[test]
fn the_idle_ack_round_frees_the_buffer_and_stops_the_timers() {
    let mut s = MakSender::new(stream(SENDER), advertising(), &[2]);
    let mut r = MakReceiver::new(stream(2), advertising());
    s.send(us(0), out(0, true)).unwrap();
    for t in drain_tx(&mut s, us(0)) {
        deliver(&mut r, us(10), &t, 9);
    }
    let sent = idle_until(&mut s, us(1_600));
    let req = &sent.last().expect("the idle ACK round").1;
    deliver(&mut r, us(1_610), req, 0);
    for t in drain_tx(&mut r, us(1_610)) {
        deliver(&mut s, us(1_620), &t, 0);
    }
    assert!(s.is_idle(), "everything acknowledged");
    assert_eq!(s.poll_timeout(), None, "no heartbeat for an empty buffer");
    let released: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(released, vec![Event::Release(BufId(0))]);
}

#[test]
fn a_receiver_that_lost_the_tail_naks_it_on_the_first_heartbeat() {
    let mut s = MakSender::new(stream(SENDER), advertising(), &[2]);
    let mut r = MakReceiver::new(stream(2), advertising());
    s.send(us(0), out(0, false)).unwrap();
    let tail = s.send(us(0), out(1, true)).unwrap();
    let tx = drain_tx(&mut s, us(0));
    deliver(&mut r, us(10), &tx[0], 0); // the last frame is lost
    assert_eq!(r.missing_count(), 0, "nothing says the tail exists yet");
    let sent = idle_until(&mut s, us(200));
    assert_eq!(sent.len(), 1);
    deliver(&mut r, us(210), &sent[0].1, 0);
    assert_eq!(r.missing_count(), 1);
    assert_eq!(r.counters().adverts_received, 1);
    let at = r.poll_timeout().expect("the NAK timer");
    r.handle_timeout(at);
    let nak = drain_tx(&mut r, at);
    assert_eq!(nak.len(), 1);
    assert_eq!(nak[0].header.kind, Kind::Nak);
    // The repair follows the NAK, long before any ACK round.
    deliver(&mut s, at, &nak[0], 0);
    let repair = drain_tx(&mut s, at);
    assert_eq!(repair.len(), 1);
    assert_eq!(repair[0].header.seq, tail);
    assert!(repair[0].header.flags.contains(Flags::RETRANSMIT));
}

#[test]
fn a_new_frame_postpones_the_heartbeat() {
    let mut s = MakSender::new(stream(SENDER), advertising(), &[2]);
    s.send(us(0), out(0, true)).unwrap();
    drain_tx(&mut s, us(0));
    assert_eq!(s.poll_timeout(), Some(us(200)));
    s.send(us(150), out(1, true)).unwrap();
    drain_tx(&mut s, us(150));
    assert_eq!(
        s.poll_timeout(),
        Some(us(350)),
        "counted from the newest frame"
    );
    assert!(idle_until(&mut s, us(349)).is_empty());
}

#[test]
fn paced_messages_are_acknowledged_per_watermark_not_per_message() {
    // 40 lone messages 50 us apart (each the last of its burst, each sent
    // before the previous one's heartbeat was due), to 2 receivers.
    for (cfg, acks_per_receiver) in [
        // A round at every watermark (W/2 frames); the last one named the
        // last frame, so the idle round was not needed.
        (advertising(), 40 / (W / 2) as u64),
        (
            MakConfig {
                tail: TailPolicy::AckLast,
                ..advertising()
            },
            40,
        ),
    ] {
        let mut s = MakSender::new(stream(SENDER), cfg, &[2, 3]);
        let mut rs = [
            MakReceiver::new(stream(2), cfg),
            MakReceiver::new(stream(3), cfg),
        ];
        let mut now = us(0);
        for i in 0..40u32 {
            now = us(50 * u64::from(i));
            let mut wire = idle_until(&mut s, now);
            s.send(now, out(i, true)).unwrap();
            wire.extend(drain_tx(&mut s, now).into_iter().map(|t| (now, t)));
            for (at, t) in wire {
                for r in rs.iter_mut() {
                    deliver(r, at, &t, 0);
                    for a in drain_tx(r, at) {
                        deliver(&mut s, at, &a, 0);
                    }
                }
            }
        }
        // Idle: the heartbeats and the idle round end the stream.
        for (at, t) in idle_until(&mut s, now + Duration::from_millis(5)) {
            for r in rs.iter_mut() {
                deliver(r, at, &t, 0);
                for a in drain_tx(r, at) {
                    deliver(&mut s, at, &a, 0);
                }
            }
        }
        assert!(s.is_idle(), "{:?}: every frame acknowledged", cfg.tail);
        for r in &rs {
            assert_eq!(r.counters().delivered, 40);
            assert_eq!(
                r.counters().acks_sent,
                acks_per_receiver,
                "{:?}: ACKs per receiver",
                cfg.tail
            );
        }
    }
}
