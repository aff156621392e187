//! Unit tests of local recovery over the feedback tree (docs/protocol.md
//! §3.5) at the receivers: whom a loss is asked of, the repair from a copy,
//! the owed frame, and the way to the group; driven by hand on a virtual
//! clock. The whole protocol runs in the simulator's sweeps.
//!
//! Owns: these tests. May not touch: anything outside `mak` (it tests
//! through the module's items only).

use super::receiver::NEAR_TRIES;
use super::tests::{deliver, drain_tx, stream, us, SENDER};
use super::*;
use crate::api::header_for;
use crate::{BufId, Dest, Endpoint, Event, FeedbackTree, Instant, RxBody, Transmit, TxBody};
use mcast_wire::{Flags, Header, Kind, NodeId, Seq};

/// Root 1 (the sender), fanout 2: 1 → 2, 3; 2 → 4, 5; 4 → 8, 9; …
fn tree() -> FeedbackTree {
    FeedbackTree::new(SENDER, &(1..=15).collect::<Vec<NodeId>>(), 2)
}

/// A receiver at `local` in [`tree`], its NAK timer fixed at 10 µs.
fn receiver(local: NodeId) -> MakReceiver {
    let d = Duration::from_micros(10);
    let cfg = MakConfig {
        nak_timer: NakTimer::Fixed { min: d, max: d },
        ..MakConfig::default()
    };
    let mut r = MakReceiver::new(stream(local), cfg);
    r.set_tree(Some(&tree()));
    r
}

fn seq(i: u32) -> Seq {
    stream(SENDER).initial_seq.add(i)
}

/// The sender's data frame `i` (GRTT 100 µs).
fn data(i: u32) -> Header {
    let mut h = header_for(&stream(SENDER), Kind::Data);
    h.seq = seq(i);
    h.flags = Flags::WHOLE;
    h.payload_len = 100;
    h.grtt_ns = 100_000;
    h.group_size = 14;
    h
}

fn give(r: &mut MakReceiver, now: Instant, i: u32) {
    r.handle_frame(now, &data(i), RxBody::Data(BufId(i)));
}

fn delivered(r: &mut MakReceiver) -> Vec<Seq> {
    std::iter::from_fn(|| r.poll_event())
        .filter_map(|e| match e {
            Event::Deliver { seq, .. } => Some(seq),
            Event::Release(_) => None,
        })
        .collect()
}

/// Fires the NAK timer and returns what left.
fn fire(r: &mut MakReceiver, now: Instant) -> Vec<Transmit> {
    let at = r.poll_timeout().expect("a timer runs");
    let now = now.max(at);
    r.handle_timeout(now);
    drain_tx(r, now)
}

/// Both receivers take frames 0 and 2 (frame 1 is lost at both); `asker`'s
/// NAK timer then fires: its near NAK.
fn both_miss_frame_1(asker: &mut MakReceiver, other: &mut MakReceiver) -> Transmit {
    for r in [&mut *asker, &mut *other] {
        give(r, us(0), 0);
        give(r, us(1), 2);
    }
    fire(asker, us(2)).remove(0)
}

/// Frame `i` relayed by node `src`, as its driver writes it (`flags` added).
fn relay_from(src: NodeId, i: u32, flags: Flags) -> Header {
    let mut h = data(i);
    h.src = src;
    h.peer = SENDER;
    h.tstamp_us = 0;
    h.flags = Flags::WHOLE
        .with(Flags::NEAR)
        .with(Flags::RETRANSMIT)
        .with(flags);
    h
}

/// What a driver holding the copy of frame `i` sends for a relay.
fn relayed(t: &Transmit, i: u32) -> Header {
    assert_eq!(t.body, TxBody::Relay(seq(i)), "a relay of frame {i}: {t:?}");
    let mut h = t.header;
    h.flags = h.flags.with(Flags::WHOLE);
    h.payload_len = 100;
    h
}

#[test]
fn a_loss_is_asked_of_the_repairer_alone_and_repaired_from_its_copy() {
    let (mut r4, mut r2) = (receiver(4), receiver(2));
    assert!(r4.keeps_copies() && r2.keeps_copies());
    for i in [0, 2] {
        give(&mut r4, us(i.into()), i);
    }
    for i in 0..3 {
        give(&mut r2, us(i.into()), i);
    }
    assert_eq!(delivered(&mut r2).len(), 3);
    assert_eq!(delivered(&mut r4), vec![seq(0)], "frame 1 is missing");
    let tx = fire(&mut r4, us(3));
    assert_eq!(tx.len(), 1, "{tx:?}");
    let nak = &tx[0];
    assert_eq!(
        nak.dest,
        Dest::Node(2),
        "node 4 asks its parent, not the group"
    );
    assert_eq!(nak.header.kind, Kind::Nak);
    assert!(nak.header.flags.contains(Flags::NEAR));
    assert_eq!((nak.header.src, nak.header.peer), (4, SENDER));
    assert_eq!(
        (r4.counters().near_naks_sent, r4.counters().naks_sent),
        (1, 0)
    );

    // Node 2 holds frame 1: it relays it from its copy, straight to 4.
    deliver(&mut r2, us(20), nak, 0);
    let tx = drain_tx(&mut r2, us(20));
    assert_eq!(tx.len(), 1, "{tx:?}");
    let relay = &tx[0];
    assert_eq!(relay.dest, Dest::Node(4));
    assert_eq!(relay.header.kind, Kind::Data);
    assert!(relay
        .header
        .flags
        .contains(Flags::NEAR.with(Flags::RETRANSMIT)));
    assert_eq!(
        (relay.header.src, relay.header.peer, relay.header.seq),
        (2, SENDER, seq(1))
    );
    assert_eq!(r2.counters().relays_sent, 1);

    // The relay fills node 4's gap: 1 and 2 are delivered, in order.
    r4.handle_frame(us(30), &relayed(relay, 1), RxBody::Data(BufId(101)));
    assert_eq!(delivered(&mut r4), vec![seq(1), seq(2)]);
    assert_eq!(r4.counters().relays_received, 1);
    assert_eq!(r4.missing_count(), 0);
    assert!(
        r4.poll_timeout().is_none(),
        "nothing left to ask: {:?}",
        r4.poll_timeout()
    );
}

#[test]
fn a_neighbour_of_the_sender_asks_its_own_child() {
    let mut r2 = receiver(2);
    give(&mut r2, us(0), 0);
    give(&mut r2, us(1), 2);
    let tx = fire(&mut r2, us(2));
    assert_eq!(tx.len(), 1);
    assert_eq!(
        tx[0].dest,
        Dest::Node(4),
        "the sender would hear every loss of its neighbours again"
    );
}

#[test]
fn the_group_is_asked_after_three_unanswered_near_naks() {
    let mut r4 = receiver(4);
    give(&mut r4, us(0), 0);
    give(&mut r4, us(1), 2);
    let mut now = us(2);
    for n in 1..=u64::from(NEAR_TRIES) {
        let tx = fire(&mut r4, now);
        assert_eq!(tx.len(), 1, "try {n}: {tx:?}");
        assert_eq!(tx[0].dest, Dest::Node(2), "try {n} asks the parent");
        assert_eq!(r4.counters().near_naks_sent, n);
        // The repair wait (2 GRTT) passes without the repair.
        now = r4.poll_timeout().expect("the repair is awaited");
        r4.handle_timeout(now);
        assert!(drain_tx(&mut r4, now).is_empty());
    }
    let tx = fire(&mut r4, now);
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0].dest, Dest::Group, "then the group (and the sender)");
    assert!(!tx[0].header.flags.contains(Flags::NEAR));
    assert_eq!(r4.counters().naks_sent, 1);
}

#[test]
fn a_repairer_missing_the_frame_too_asks_its_own_at_once_and_repairs_when_it_comes() {
    let (mut r8, mut r4) = (receiver(8), receiver(4));
    let nak = both_miss_frame_1(&mut r8, &mut r4);
    assert_eq!(nak.dest, Dest::Node(4));
    // Node 4 misses frame 1 too (its own timer has not fired yet): nothing
    // to relay, and its own ask leaves now, to its repairer 2.
    deliver(&mut r4, us(3), &nak, 0);
    assert!(drain_tx(&mut r4, us(3)).is_empty());
    assert_eq!(r4.poll_timeout(), Some(us(3)), "its NAK is due at once");
    let tx = fire(&mut r4, us(3));
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0].dest, Dest::Node(2));
    // Node 2's relay reaches 4, which delivers it and pays what it owes 8.
    let from2 = relay_from(2, 1, Flags::NONE);
    r4.handle_frame(us(10), &from2, RxBody::Data(BufId(50)));
    assert_eq!(delivered(&mut r4).len(), 3);
    let tx = drain_tx(&mut r4, us(10));
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0].dest, Dest::Node(8));
    assert_eq!(tx[0].body, TxBody::Relay(seq(1)));
}

#[test]
fn asked_by_its_own_repairer_for_a_frame_it_misses_it_asks_the_group() {
    // 2's repairer is 4 and 4's is 2: neither can help the other.
    let (mut r2, mut r4) = (receiver(2), receiver(4));
    let nak = both_miss_frame_1(&mut r4, &mut r2);
    assert_eq!(nak.dest, Dest::Node(2));
    deliver(&mut r2, us(3), &nak, 0);
    let tx = fire(&mut r2, us(3));
    assert_eq!(tx.len(), 1, "{tx:?}");
    assert_eq!(tx[0].dest, Dest::Group);
}

#[test]
fn a_relay_of_a_request_owes_the_ack_with_the_last_stamp_from_the_sender() {
    let mut r4 = receiver(4);
    let mut d0 = data(0);
    d0.tstamp_us = 5_000;
    r4.handle_frame(us(10), &d0, RxBody::Data(BufId(0)));
    // Frame 1 carried the round's request and was lost; 2 came.
    give(&mut r4, us(11), 2);
    let from2 = relay_from(2, 1, Flags::ACK_REQ);
    r4.handle_frame(us(40), &from2, RxBody::Data(BufId(9)));
    assert_eq!(r4.counters().ack_reqs_received, 1, "the request is taken");
    let tx = drain_tx(&mut r4, us(40));
    let reports: Vec<_> = tx.iter().filter(|t| t.header.kind == Kind::Ack).collect();
    assert_eq!(reports.len(), 0, "node 4 waits for its children's reports");
    // Without the tree's children, a leaf reports at once: node 8.
    let mut r8 = receiver(8);
    r8.handle_frame(us(10), &d0, RxBody::Data(BufId(0)));
    let via4 = relay_from(4, 1, Flags::ACK_REQ);
    r8.handle_frame(us(40), &via4, RxBody::Data(BufId(9)));
    let tx = drain_tx(&mut r8, us(40));
    let report = tx
        .iter()
        .find(|t| t.header.kind == Kind::Ack)
        .expect("the leaf reports the request");
    assert_eq!(report.dest, Dest::Node(4));
    assert_eq!(report.header.seq, seq(1));
    // The echo: the last stamp from the sender (5,000 µs) plus the 30 µs
    // since it came, not the relay's empty stamp.
    assert_eq!(report.header.tstamp_us, 5_030);
}
