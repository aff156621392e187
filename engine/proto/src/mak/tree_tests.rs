//! Unit tests of MAK over a feedback tree (docs/protocol.md §3.4) at the
//! sender: what a report credits, whom a silent round is asked of; driven by
//! hand on a virtual clock. A node's rounds and polls are tested in
//! `feedback`, whole trees in the simulator (`engine/sim/tests/tree.rs`).
//!
//! Owns: these tests. May not touch: anything outside `mak` (it tests
//! through the module's items only).

use super::tests::{drain_tx, out, stream, us, SENDER, W};
use super::*;
use crate::api::header_for;
use crate::{Dest, Endpoint, Event, FeedbackTree, RxBody, Sender, Transmit};
use mcast_wire::{Flags, Header, Kind, NodeId, RangeList, Seq, SeqRange};

/// A report from `src` that every node in `covered` holds everything before `ack`.
fn report(src: NodeId, ack: Seq, echo_us: u32) -> Header {
    let mut h = header_for(&stream(src), Kind::Ack);
    h.ack = ack;
    h.flags = Flags::ACK_VALID;
    h.tstamp_us = echo_us;
    h
}

fn nodes(ids: &[(u32, u32)]) -> RangeList {
    let mut l = RangeList::new();
    for &(start, count) in ids {
        l.push(SeqRange {
            start: Seq(start),
            count,
        });
    }
    l
}

fn released(s: &mut MakSender) -> usize {
    std::iter::from_fn(|| s.poll_event())
        .filter(|e| matches!(e, Event::Release(_)))
        .count()
}

/// A sender to members 2..=7 with `frames` frames sent.
fn sent(frames: u32) -> MakSender {
    let mut s = MakSender::new(stream(SENDER), MakConfig::default(), &[2, 3, 4, 5, 6, 7]);
    // Root 1 (the sender), fanout 2: 1 → 2, 3; 2 → 4, 5; 3 → 6, 7.
    s.set_tree(Some(&FeedbackTree::new(SENDER, &[1, 2, 3, 4, 5, 6, 7], 2)));
    for i in 0..frames {
        s.send(us(0), out(i, false)).unwrap();
    }
    drain_tx(&mut s, us(0));
    s
}

#[test]
fn a_report_credits_every_member_it_covers_and_no_one_else() {
    let mut s = sent(2);
    let first = s.stream.initial_seq;
    let all = first.add(2);
    // Node 2 speaks for its subtree (2, 4, 5) and names ids that are not
    // members (8 and up, and 0): only members are credited.
    let covered = nodes(&[(0, 1), (2, 1), (4, 2), (8, 1000)]);
    s.handle_frame(us(50), &report(2, all, 0), RxBody::Ranges(&covered));
    assert_eq!(released(&mut s), 0, "3, 6 and 7 have not acknowledged");
    // A report from a node that is not a member is refused, whatever it covers.
    let everyone = nodes(&[(1, 100)]);
    let rejected = s.counters().rejected;
    s.handle_frame(us(60), &report(9, all, 0), RxBody::Ranges(&everyone));
    assert_eq!(s.counters().rejected, rejected + 1);
    assert_eq!(released(&mut s), 0, "a non-member's report frees nothing");
    // Node 3's report for 3, 6, 7 completes the round: both frames go.
    s.handle_frame(
        us(70),
        &report(3, all, 0),
        RxBody::Ranges(&nodes(&[(3, 1), (6, 2)])),
    );
    assert_eq!(released(&mut s), 2);
    assert!(s.is_idle());
}

/// A sender with half a window sent (the watermark request left with the
/// frames: the ACK-wait timer runs) and node 3's subtree (3, 6, 7)
/// reported; returns it and the position that acknowledges everything.
fn half_sent_3_reported() -> (MakSender, Seq) {
    let mut s = sent(W / 2);
    let all = s.stream.initial_seq.add(W / 2);
    s.handle_frame(
        us(10),
        &report(3, all, 0),
        RxBody::Ranges(&nodes(&[(3, 1), (6, 2)])),
    );
    (s, all)
}

#[test]
fn a_silent_subtree_is_asked_through_its_neighbour_then_past_it() {
    let (mut s, _) = half_sent_3_reported();
    // Node 2's subtree (2, 4, 5) never reports. At the first expiry, the
    // sender asks node 2, the neighbour those members report through, the
    // request the timer ran for.
    let mut asks = asks_at_expiries(&mut s);
    assert_eq!(asks.next(), Some(vec![2]));
    // Node 2 stays silent: at the next expiry it is asked again, and so is
    // each member behind it, directly.
    assert_eq!(asks.next(), Some(vec![2, 4, 5]));
}

/// The nodes each ACK-wait expiry's unicast ACK_REQs go to, expiry by
/// expiry (heartbeats and the other timers in between are run and left out).
fn asks_at_expiries(s: &mut MakSender) -> impl Iterator<Item = Vec<NodeId>> + '_ {
    std::iter::from_fn(move || {
        for _ in 0..100 {
            let at = s.poll_timeout()?;
            s.handle_timeout(at);
            let mut to: Vec<NodeId> = drain_tx(s, at)
                .into_iter()
                .filter(|t| t.header.kind == Kind::AckReq)
                .filter_map(|t| match t.dest {
                    Dest::Node(n) => Some(n),
                    Dest::Group => None,
                })
                .collect();
            if !to.is_empty() {
                to.sort_unstable();
                return Some(to);
            }
        }
        None
    })
}

#[test]
fn a_member_its_answering_neighbour_leaves_out_is_asked_itself_after_three_asks() {
    let (mut s, all) = half_sent_3_reported();
    // Node 2 answers every ask, but for 2 and 5 only (a report it merged
    // under an older tree, where 4 was not below it): 4 stays silent.
    let mut expiries = Vec::new();
    for _ in 0..3 {
        let mut asks = asks_at_expiries(&mut s);
        let to = asks.next().expect("an expiry asks");
        drop(asks);
        let at = s.poll_timeout().map_or(us(0), |t| t);
        s.handle_frame(
            at,
            &report(2, all, 0),
            RxBody::Ranges(&nodes(&[(2, 1), (5, 1)])),
        );
        expiries.push(to);
    }
    assert_eq!(expiries, vec![vec![2], vec![2], vec![2, 4]]);
    // 4's own answer completes the round.
    s.handle_frame(us(100_000), &report(4, all, 0), RxBody::None);
    assert!(released(&mut s) > 0);
}

#[test]
fn a_poll_that_crossed_the_complete_report_is_not_answered_twice() {
    // The chain 1 → 2 → 4 rooted at the sender: 4's upstream is 2.
    let tree = FeedbackTree::new(SENDER, &[1, 2, 4], 1);
    let mut r = MakReceiver::new(stream(4), MakConfig::default());
    r.set_tree(Some(&tree));
    let mut s = MakSender::new(stream(SENDER), MakConfig::default(), &[2, 4]);
    s.send(us(0), out(0, false)).unwrap();
    let data = drain_tx(&mut s, us(0));
    // The frame, asking for an ACK, reaches 4: a leaf, it reports to 2.
    let mut h = data[0].header;
    h.flags = h.flags.with(Flags::ACK_REQ);
    r.handle_frame(us(10), &h, RxBody::Data(crate::BufId(0)));
    let sent: Vec<Transmit> = drain_tx(&mut r, us(10));
    let reports: Vec<&Transmit> = sent.iter().filter(|t| t.header.kind == Kind::Ack).collect();
    assert_eq!(reports.len(), 1, "{sent:?}");
    assert_eq!(reports[0].dest, Dest::Node(2));
    // 2's poll for that request, sent before the report reached it, arrives
    // within a round trip: not answered again.
    let mut poll = header_for(&stream(2), Kind::Ack);
    poll.flags = Flags::ACK_REQ;
    poll.seq = h.seq;
    poll.ack = h.seq;
    r.handle_frame(us(12), &poll, RxBody::None);
    assert!(
        drain_tx(&mut r, us(12)).is_empty(),
        "the poll crossed the report"
    );
    // A poll a long while later means the report was lost: answered.
    r.handle_frame(us(10_000), &poll, RxBody::None);
    let again = drain_tx(&mut r, us(10_000));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(
        (again[0].header.kind, again[0].dest),
        (Kind::Ack, Dest::Node(2))
    );
}
