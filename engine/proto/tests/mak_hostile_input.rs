//! Anything a peer can send is hostile input: arbitrary sequences of frames and
//! timeouts never panic a MAK machine nor break its invariants (each buffer
//! comes back at most once, deliveries are consecutive, memory stays within the
//! window).

use std::collections::HashSet;

use mcast_proto::mak::{MakConfig, MakReceiver, MakSender};
use mcast_proto::{
    BufId, Endpoint, Event, FeedbackTree, Instant, OutFrame, RxBody, Sender, StreamConfig,
};
use mcast_wire::{Flags, Header, Kind, RangeList, Seq, SeqRange};
use proptest::prelude::*;

const W: u32 = 16;
const START: u32 = u32::MAX - 5;

fn stream(local: u32) -> StreamConfig {
    StreamConfig {
        group: 1,
        local,
        sender: 1,
        epoch: 1,
        initial_seq: Seq(START),
        window_frames: W,
        seed: 5,
    }
}

#[derive(Debug, Clone)]
enum Input {
    Data {
        off: i32,
        flags: u16,
        src: u32,
        epoch: u32,
    },
    Nak {
        src: u32,
        ranges: Vec<(i32, u32)>,
    },
    AckReq {
        off: i32,
    },
    /// A position advertisement, anywhere in sequence space.
    Heartbeat {
        off: i32,
    },
    Ack {
        src: u32,
        off: i32,
        ts: u32,
    },
    /// A feedback-tree report (an ACK naming the nodes it covers), or a
    /// poll (an ACK flagged ACK_REQ), from anyone.
    Report {
        src: u32,
        off: i32,
        covered: Vec<(u32, u32)>,
        poll: bool,
    },
    Send {
        last: bool,
    },
    Advance {
        us: u16,
    },
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        4 => (-40i32..60, any::<u16>(), prop_oneof![Just(1u32), 0u32..5], prop_oneof![Just(1u32), any::<u32>()])
            .prop_map(|(off, flags, src, epoch)| Input::Data { off, flags, src, epoch }),
        2 => (0u32..5, proptest::collection::vec((-40i32..60, 1u32..40), 1..8))
            .prop_map(|(src, ranges)| Input::Nak { src, ranges }),
        1 => (-40i32..60).prop_map(|off| Input::AckReq { off }),
        1 => prop_oneof![-40i32..60, any::<i32>()].prop_map(|off| Input::Heartbeat { off }),
        2 => (0u32..5, -40i32..60, any::<u32>()).prop_map(|(src, off, ts)| Input::Ack { src, off, ts }),
        2 => (0u32..6, -40i32..60, proptest::collection::vec((0u32..8, 1u32..u32::MAX), 1..6), any::<bool>())
            .prop_map(|(src, off, covered, poll)| Input::Report { src, off, covered, poll }),
        3 => any::<bool>().prop_map(|last| Input::Send { last }),
        2 => any::<u16>().prop_map(|us| Input::Advance { us }),
    ]
}

fn header(kind: Kind, src: u32, off: i32) -> Header {
    let mut h = Header::new(kind);
    h.group = 1;
    h.src = src;
    h.peer = 1;
    h.epoch = 1;
    h.seq = Seq(START).add(off as u32);
    h.ack = h.seq;
    h
}

#[derive(Default)]
struct Ledger {
    given: HashSet<u32>,
    returned: HashSet<u32>,
    last_delivered: Option<Seq>,
}

impl Ledger {
    fn drain(&mut self, e: &mut impl Endpoint) -> Result<(), TestCaseError> {
        while let Some(ev) = e.poll_event() {
            let buf = match ev {
                Event::Deliver { seq, buf, .. } => {
                    if let Some(prev) = self.last_delivered {
                        prop_assert_eq!(seq, prev.next(), "deliveries are consecutive");
                    } else {
                        prop_assert_eq!(seq, Seq(START));
                    }
                    self.last_delivered = Some(seq);
                    buf
                }
                Event::Release(buf) => buf,
            };
            prop_assert!(self.given.contains(&buf.0), "unknown buffer {:?}", buf);
            prop_assert!(
                self.returned.insert(buf.0),
                "buffer {:?} returned twice",
                buf
            );
        }
        prop_assert!(e.held_buffers() <= W as usize);
        Ok(())
    }
}

fn node_list(ranges: &[(u32, u32)]) -> RangeList {
    let mut l = RangeList::new();
    for &(start, count) in ranges {
        l.push(SeqRange {
            start: Seq(start),
            count,
        });
    }
    l
}

/// The tree the machines run with when `tree` is drawn: nodes 1 to 5,
/// rooted at the receiver (node 2), whose upstream is then the sender
/// (node 1) and whose downstream node 3 has its reports merged.
fn feedback_tree() -> FeedbackTree {
    FeedbackTree::new(2, &[1, 2, 3, 4, 5], 2)
}

fn report(src: u32, off: i32, poll: bool) -> Header {
    let mut h = header(Kind::Ack, src, off);
    h.flags = if poll {
        Flags::ACK_REQ
    } else {
        Flags::ACK_VALID
    };
    h
}

fn nak_list(ranges: &[(i32, u32)]) -> RangeList {
    let mut l = RangeList::new();
    for &(off, count) in ranges {
        l.push(SeqRange {
            start: Seq(START).add(off as u32),
            count,
        });
    }
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn receiver_survives_anything(
        inputs in proptest::collection::vec(input(), 1..120),
        tree in any::<bool>(),
    ) {
        let mut r = MakReceiver::new(stream(2), MakConfig::default());
        if tree {
            r.set_tree(Some(&feedback_tree()));
        }
        let mut ledger = Ledger::default();
        let mut now = Instant(0);
        let mut next_buf = 0u32;
        for i in inputs {
            match i {
                Input::Data { off, flags, src, epoch } => {
                    let mut h = header(Kind::Data, src, off);
                    h.flags = Flags(flags);
                    h.epoch = epoch;
                    next_buf += 1;
                    ledger.given.insert(next_buf);
                    r.handle_frame(now, &h, RxBody::Data(BufId(next_buf)));
                }
                Input::Nak { src, ranges } => {
                    let l = nak_list(&ranges);
                    r.handle_frame(now, &header(Kind::Nak, src, 0), RxBody::Ranges(&l));
                }
                Input::AckReq { off } => r.handle_frame(now, &header(Kind::AckReq, 1, off), RxBody::None),
                Input::Heartbeat { off } => r.handle_frame(now, &header(Kind::Heartbeat, 1, off), RxBody::None),
                Input::Ack { src, off, .. } => r.handle_frame(now, &header(Kind::Ack, src, off), RxBody::None),
                Input::Report { src, off, covered, poll } => {
                    let l = node_list(&covered);
                    r.handle_frame(now, &report(src, off, poll), RxBody::Ranges(&l));
                }
                Input::Send { .. } => {}
                Input::Advance { us } => {
                    now += std::time::Duration::from_micros(u64::from(us));
                    if r.poll_timeout().is_some_and(|t| t <= now) {
                        r.handle_timeout(now);
                    }
                }
            }
            while let Some(t) = r.poll_transmit(now) {
                prop_assert!(matches!(t.header.kind, Kind::Nak | Kind::Ack));
            }
            ledger.drain(&mut r)?;
            prop_assert!(r.missing_count() <= W as usize);
        }
        r.release_all();
        ledger.drain(&mut r)?;
        prop_assert_eq!(&ledger.given, &ledger.returned, "every buffer comes back");
    }

    #[test]
    fn sender_survives_anything(
        inputs in proptest::collection::vec(input(), 1..120),
        tree in any::<bool>(),
    ) {
        let mut s = MakSender::new(stream(1), MakConfig::default(), &[2, 3]);
        if tree {
            s.set_tree(Some(&feedback_tree()));
        }
        let mut ledger = Ledger::default();
        let mut now = Instant(0);
        let mut next_buf = 0u32;
        for i in inputs {
            match i {
                Input::Send { last } => {
                    next_buf += 1;
                    ledger.given.insert(next_buf);
                    let f = OutFrame { buf: BufId(next_buf), len: 10, frag: Flags::WHOLE, last };
                    if let Err(e) = s.send(now, f) {
                        ledger.given.remove(&e.buf().0);
                    }
                }
                Input::Nak { src, ranges } => {
                    let l = nak_list(&ranges);
                    s.handle_frame(now, &header(Kind::Nak, src, 0), RxBody::Ranges(&l));
                }
                Input::Ack { src, off, ts } => {
                    let mut h = header(Kind::Ack, src, off);
                    h.tstamp_us = ts;
                    h.flags = Flags::ACK_VALID;
                    s.handle_frame(now, &h, RxBody::None);
                }
                Input::Report { src, off, covered, poll } => {
                    let l = node_list(&covered);
                    s.handle_frame(now, &report(src, off, poll), RxBody::Ranges(&l));
                }
                Input::Data { off, .. } => {
                    next_buf += 1;
                    ledger.given.insert(next_buf);
                    s.handle_frame(now, &header(Kind::Data, 2, off), RxBody::Data(BufId(next_buf)));
                }
                Input::AckReq { off } => s.handle_frame(now, &header(Kind::AckReq, 2, off), RxBody::None),
                Input::Heartbeat { off } => s.handle_frame(now, &header(Kind::Heartbeat, 2, off), RxBody::None),
                Input::Advance { us } => {
                    now += std::time::Duration::from_micros(u64::from(us));
                    if s.poll_timeout().is_some_and(|t| t <= now) {
                        s.handle_timeout(now);
                    }
                }
            }
            let mut sent = 0;
            while let Some(t) = s.poll_transmit(now) {
                prop_assert!(matches!(t.header.kind, Kind::Data | Kind::AckReq | Kind::Heartbeat));
                sent += 1;
                prop_assert!(sent <= 4 * W, "transmissions are bounded");
            }
            ledger.drain(&mut s)?;
        }
        s.release_all();
        ledger.drain(&mut s)?;
        prop_assert_eq!(&ledger.given, &ledger.returned, "every buffer comes back");
    }
}
