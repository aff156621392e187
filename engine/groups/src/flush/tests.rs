//! Unit tests of the flush: the retained window and the flush state
//! machine, driven through `Flushes` as the daemon drives it. They own no
//! state and reach into nothing the flush module does not show its children.

use super::*;

const KEY: FlushKey = FlushKey {
    group: 7,
    sender: 9,
    epoch: 3,
};

/// Frames `from..to` of the sender's stream, each one byte: its seq's low byte.
/// The next flush that ended, as key and outcome.
fn done(f: &mut Flushes, now: u64) -> Option<(FlushKey, Outcome)> {
    f.poll_ended(now).map(|e| (e.key, e.outcome))
}

/// A frame that is a whole message.
fn whole(seq: Seq, data: Vec<u8>) -> FlushFrame {
    FlushFrame {
        seq,
        first: true,
        last: true,
        batch: false,
        data,
    }
}

fn kept(from: u32, to: u32, window: u32) -> Retained {
    let mut r = Retained::new(window);
    for s in from..to {
        r.push(Seq(s), s % 2 == 0, s % 2 == 1, false, &[s as u8, 0xee]);
    }
    r
}

/// Survivors 1, 2, 3 with what each delivered; runs the flush to the end
/// and returns what each delivered from it, in order.
struct Net {
    nodes: BTreeMap<NodeId, Flushes>,
    queue: VecDeque<(NodeId, NodeId, FlushMsg)>,
    delivered: BTreeMap<NodeId, Vec<FlushFrame>>,
    /// Nodes whose messages are lost (crashed mid-flush).
    dead: Vec<NodeId>,
}

impl Net {
    fn new(prefixes: &[(NodeId, Option<Retained>)]) -> Net {
        let all: Vec<NodeId> = prefixes.iter().map(|p| p.0).collect();
        let mut net = Net {
            nodes: BTreeMap::new(),
            queue: VecDeque::new(),
            delivered: BTreeMap::new(),
            dead: Vec::new(),
        };
        for (n, _) in prefixes {
            net.nodes.insert(*n, Flushes::new());
            net.delivered.insert(*n, Vec::new());
        }
        for (n, k) in prefixes.iter().cloned() {
            let others: Vec<NodeId> = all.iter().copied().filter(|&o| o != n).collect();
            let mut out = Vec::new();
            net.nodes
                .get_mut(&n)
                .unwrap()
                .start(KEY, k, &others, 1_000, &mut out);
            net.send(n, out);
        }
        net
    }

    fn send(&mut self, from: NodeId, out: Vec<(NodeId, FlushMsg)>) {
        if self.dead.contains(&from) {
            return;
        }
        for (to, m) in out {
            self.queue.push_back((from, to, m));
        }
    }

    fn run(&mut self) {
        self.run_dropping(|_, _| false);
    }

    /// Runs until nothing is in flight; messages for which `lost` holds
    /// are dropped. Every frame delivered is recorded.
    fn run_dropping(&mut self, lost: impl Fn(NodeId, NodeId) -> bool) {
        let mut steps = 0;
        while let Some((from, to, m)) = self.queue.pop_front() {
            steps += 1;
            assert!(steps < 10_000, "the flush never quiesces");
            if self.dead.contains(&to) || lost(from, to) {
                continue;
            }
            let mut out = Vec::new();
            let f = self.nodes.get_mut(&to).unwrap();
            match m {
                FlushMsg::State {
                    key,
                    next,
                    from: f0,
                } => {
                    f.on_state(from, key, (next, f0), false, &mut out);
                }
                FlushMsg::Data { key, frame } => {
                    if f.on_data(key, &frame, &mut out).is_some() {
                        self.delivered.get_mut(&to).unwrap().push(frame);
                    }
                }
            }
            // As the daemon: what was taken of the frames that came early.
            let ready = f.take_ready().into_iter().map(|r| r.frame);
            self.delivered.get_mut(&to).unwrap().extend(ready);
            self.send(to, out);
        }
    }

    /// The sequence numbers `node` delivered from the flush.
    fn seqs_of(&self, node: NodeId) -> Vec<Seq> {
        self.delivered[&node].iter().map(|f| f.seq).collect()
    }
}

fn seqs(from: u32, to: u32) -> Vec<Seq> {
    (from..to).map(Seq).collect()
}

#[test]
fn retained_keeps_the_last_window_in_order() {
    let r = kept(0, 10, 4);
    assert_eq!(r.frames(), 4);
    assert_eq!(r.bytes(), 8);
    assert_eq!(r.next(), Some(Seq(10)));
    assert!(r.covers(Seq(6)) && r.covers(Seq(10)));
    assert!(!r.covers(Seq(5)), "frame 5 fell out of the window");
    assert!(!r.covers(Seq(11)));
    let f = r.frames_from(Seq(8));
    assert_eq!(f.len(), 2);
    assert_eq!(
        f[0],
        FlushFrame {
            seq: Seq(8),
            first: true,
            last: false,
            batch: false,
            data: vec![8, 0xee]
        }
    );
    assert_eq!(f[1].data, vec![9, 0xee]);
    assert!(r.frames_from(Seq(2)).is_empty(), "not covered: nothing");
    // A frame that does not follow starts afresh.
    let mut r = r;
    r.push(Seq(50), true, true, false, b"x");
    assert_eq!((r.frames(), r.bytes(), r.next()), (1, 1, Some(Seq(51))));
    assert!(!r.covers(Seq(9)));
}

#[test]
fn a_stream_that_delivered_nothing_reports_its_start_and_is_served_from_it() {
    let r = Retained::starting_at(8, Seq(20));
    assert_eq!(r.next(), Some(Seq(20)));
    assert!(r.covers(Seq(20)) && !r.covers(Seq(19)));
    let mut net = Net::new(&[(1, Some(r)), (2, Some(kept(18, 23, 64)))]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(20, 23));
    let mut r = Retained::starting_at(8, Seq(20));
    r.push(Seq(20), true, true, false, b"a");
    assert_eq!((r.frames(), r.next()), (1, Some(Seq(21))));
}

#[test]
fn retained_crosses_the_sequence_wrap() {
    let mut r = Retained::new(8);
    for i in 0..6u32 {
        r.push(Seq(u32::MAX - 2).add(i), true, true, false, &[i as u8]);
    }
    assert!(r.covers(Seq(u32::MAX)));
    let f = r.frames_from(Seq(u32::MAX));
    assert_eq!(
        f.iter().map(|f| f.data[0]).collect::<Vec<_>>(),
        vec![2, 3, 4, 5]
    );
    assert_eq!(r.next(), Some(Seq(3)));
}

#[test]
fn every_survivor_ends_with_the_longest_prefix() {
    let mut net = Net::new(&[
        (1, Some(kept(0, 10, 64))),
        (2, Some(kept(0, 14, 64))),
        (3, Some(kept(0, 7, 64))),
    ]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(10, 14));
    assert_eq!(net.seqs_of(2), Vec::<Seq>::new());
    assert_eq!(net.seqs_of(3), seqs(7, 14), "once each, in order");
    for (n, f) in &mut net.nodes {
        let done = done(f, 0);
        let recovered = net.delivered[n].len() as u64;
        assert_eq!(done, Some((KEY, Outcome::Agreed { recovered })), "node {n}");
        assert!(!f.pending_in(KEY.group));
    }
    let served: u64 = net.nodes.values().map(|f| f.counters().frames_served).sum();
    let recovered: u64 = net
        .nodes
        .values()
        .map(|f| f.counters().frames_recovered)
        .sum();
    assert_eq!(recovered, 4 + 7);
    assert!(
        served >= recovered,
        "{served} served for {recovered} recovered"
    );
}

#[test]
fn the_frames_keep_their_bytes_and_fragment_flags() {
    let mut net = Net::new(&[(1, Some(kept(0, 3, 64))), (2, Some(kept(0, 6, 64)))]);
    net.run();
    let want = kept(0, 6, 64).frames_from(Seq(3));
    assert_eq!(net.delivered[&1], want);
}

#[test]
fn a_survivor_without_the_stream_reports_none_and_is_sent_nothing() {
    let mut net = Net::new(&[
        (1, None),
        (2, Some(kept(0, 5, 64))),
        (3, Some(kept(0, 5, 64))),
    ]);
    net.run();
    assert!(net.delivered.values().all(Vec::is_empty));
    for f in net.nodes.values_mut() {
        assert_eq!(done(f, 0), Some((KEY, Outcome::Agreed { recovered: 0 })));
        assert_eq!(f.counters().frames_served, 0);
    }
}

#[test]
fn a_state_before_this_nodes_view_change_is_held_and_applied_at_start() {
    let mut f = Flushes::new();
    let mut out = Vec::new();
    // Node 2 is ahead and reports first; we still receive from the sender.
    let taken = f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), true, &mut out);
    assert_eq!(taken, StateTaken::Held);
    assert!(out.is_empty());
    // No stream and no flush: answered with None.
    let other = FlushKey { sender: 4, ..KEY };
    assert_eq!(
        f.on_state(2, other, (Some(Seq(1)), Some(Seq(0))), false, &mut out),
        StateTaken::Unknown
    );
    let none = FlushMsg::State {
        key: other,
        next: None,
        from: None,
    };
    assert_eq!(out, vec![(2, none.clone())]);
    out.clear();
    assert_eq!(
        f.on_state(2, other, (None, None), false, &mut out),
        StateTaken::Unknown
    );
    assert!(out.is_empty(), "a None is never answered");
    f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
    assert_eq!(
        out,
        vec![(
            2,
            FlushMsg::State {
                key: KEY,
                next: Some(Seq(5)),
                from: Some(Seq(0)),
            }
        )]
    );
    assert_eq!(
        done(&mut f, 0),
        None,
        "behind node 2's report: waits for its frames"
    );
    // The held state may be another departure's: node 2's live one is
    // awaited too (node 2 sends it on hearing ours), and answered.
    let mut out = Vec::new();
    f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
    assert_eq!(out.len(), 1, "our state again: {out:?}");
    out.clear();
    f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
    assert!(out.is_empty(), "answered once: {out:?}");
    for s in 5..7 {
        let frame = whole(Seq(s), vec![s as u8]);
        assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0));
        assert!(
            f.on_data(KEY, &frame, &mut out).is_none(),
            "a duplicate is taken once"
        );
    }
    assert_eq!(
        done(&mut f, 0),
        None,
        "still one frame behind (node 2 delivered up to 7)"
    );
    let eight = whole(Seq(8), vec![]);
    assert!(
        f.on_data(KEY, &eight, &mut out).is_none(),
        "a frame after a gap is not delivered"
    );
    assert!(f.take_ready().is_empty(), "nor taken");
    let frame = whole(Seq(7), vec![]);
    assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0));
    let ready = f.take_ready();
    assert_eq!(
        ready,
        vec![Ready {
            key: KEY,
            frame: eight,
            skipped: 0
        }],
        "the frame after the gap, once the gap is filled"
    );
    assert_eq!(
        done(&mut f, 0),
        Some((KEY, Outcome::Agreed { recovered: 4 }))
    );
    assert_eq!(f.counters().states_held, 1);
    // A held state is forgotten when the stream is opened again.
    let mut f = Flushes::new();
    f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), true, &mut out);
    let mut told = Vec::new();
    f.forget_held(KEY.group, KEY.sender, None, &mut told);
    assert_eq!(
        told,
        vec![(2, FlushMsg::nothing(KEY))],
        "node 2 stops waiting for this node"
    );
    out.clear();
    f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
    assert_eq!(
        out.len(),
        1,
        "only our own state: nothing applied, nothing served"
    );
    assert_eq!(done(&mut f, 0), None, "node 2 must report again");

    // A stream opened for the first time keeps the states held for its
    // own epoch (seed 1168: they came before this node's first view,
    // which opened the stream and then showed the sender gone).
    let mut f = Flushes::new();
    f.on_state(2, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
    let mut told = Vec::new();
    f.forget_held(KEY.group, KEY.sender, Some(KEY.epoch), &mut told);
    assert!(told.is_empty(), "{told:?}");
    out.clear();
    f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
    assert!(
        out.iter()
            .any(|(n, m)| *n == 2 && matches!(m, FlushMsg::Data { .. })),
        "the held state was applied: node 2 is served: {out:?}"
    );
}

#[test]
fn another_epoch_of_the_sender_has_nothing_in_common() {
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(KEY, Some(kept(0, 5, 64)), &[2], 1_000, &mut out);
    out.clear();
    let newer = FlushKey {
        epoch: KEY.epoch + 1,
        ..KEY
    };
    // Node 2 counts as having nothing of this epoch; this node has no
    // flush of node 2's epoch, so it answers that with None (seed 503:
    // node 2 waited for it until the deadline).
    assert_eq!(
        f.on_state(2, newer, (Some(Seq(1)), Some(Seq(0))), false, &mut out),
        StateTaken::Unknown
    );
    assert!(
        out.contains(&(
            2,
            FlushMsg::State {
                key: newer,
                next: None,
                from: None
            }
        )),
        "{out:?}"
    );
    let mut held = Vec::new();
    assert_eq!(
        f.on_state(3, newer, (Some(Seq(1)), Some(Seq(0))), true, &mut held),
        StateTaken::Held,
        "kept for this node's own flush of that epoch, which will come"
    );
    assert!(
        out.iter().all(|(_, m)| matches!(m, FlushMsg::State { .. })),
        "no frames sent to a peer of another epoch (only our state, so it stops waiting for us): {out:?}"
    );
    assert_eq!(
        done(&mut f, 0),
        Some((KEY, Outcome::Agreed { recovered: 0 }))
    );
    let frame = whole(Seq(5), vec![]);
    assert_eq!(f.on_data(newer, &frame, &mut out), None);
}

#[test]
fn another_epochs_state_does_not_wipe_what_a_peer_reported_of_this_one() {
    // Seed 638: node 2 reported frames 0..11 of this epoch, then its
    // answer about the sender's older stream (`None`) arrived; the
    // flush took it as "node 2 has nothing" and ended without them.
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(
        KEY,
        Some(Retained::starting_at(64, Seq(0))),
        &[2],
        1_000,
        &mut out,
    );
    f.on_state(2, KEY, (Some(Seq(11)), Some(Seq(0))), true, &mut out);
    let older = FlushKey {
        epoch: KEY.epoch - 1,
        ..KEY
    };
    f.on_state(2, older, (None, None), false, &mut out);
    assert_eq!(done(&mut f, 0), None, "still behind node 2's report");
    for s in 0..11 {
        let frame = whole(Seq(s), vec![s as u8]);
        assert_eq!(f.on_data(KEY, &frame, &mut out), Some(0), "frame {s}");
    }
    assert_eq!(
        done(&mut f, 0),
        Some((KEY, Outcome::Agreed { recovered: 11 }))
    );

    // Before any report of this epoch, the other epoch's still counts
    // as "nothing here", and a later report of this epoch replaces it.
    let mut f = Flushes::new();
    f.start(
        KEY,
        Some(Retained::starting_at(64, Seq(0))),
        &[2],
        1_000,
        &mut out,
    );
    f.on_state(2, older, (None, None), false, &mut out);
    f.on_state(2, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
    assert_eq!(done(&mut f, 0), None, "behind node 2's report");
}

#[test]
fn a_peer_behind_is_told_where_this_node_is_now_before_it_is_sent_the_frames() {
    // Seed 98: this node began at 5, took frame 5 from node 1 (which
    // then left) and answered node 4 with the 5 it began at. Node 4
    // ended its flush at 5, with frame 5 still on its way.
    let mut a = Flushes::new();
    let mut out = Vec::new();
    a.start(KEY, Some(kept(0, 5, 64)), &[1, 4], 1_000, &mut out);
    a.on_state(1, KEY, (Some(Seq(6)), Some(Seq(0))), true, &mut out);
    let five = whole(Seq(5), vec![5]);
    assert_eq!(a.on_data(KEY, &five, &mut out), Some(0));
    a.peer_gone(KEY.group, 1, &mut out);
    out.clear();
    a.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
    let to_4: Vec<&FlushMsg> = out
        .iter()
        .filter(|(n, _)| *n == 4)
        .map(|(_, m)| m)
        .collect();
    assert!(
        matches!(
            to_4[0],
            FlushMsg::State {
                next: Some(Seq(6)),
                ..
            }
        ),
        "answered with where it is now: {to_4:?}"
    );

    // Node 4's side: it takes the answer, then the frames, and ends
    // only with frame 5.
    let mut b = Flushes::new();
    let mut ignored = Vec::new();
    b.start(KEY, Some(kept(0, 3, 64)), &[1, 2], 1_000, &mut ignored);
    b.peer_gone(KEY.group, 1, &mut ignored);
    b.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), true, &mut ignored);
    for m in to_4 {
        match m.clone() {
            FlushMsg::State { key, next, from } => {
                b.on_state(2, key, (next, from), true, &mut ignored);
            }
            FlushMsg::Data { key, frame } => {
                assert_eq!(done(&mut b, 0), None, "ended before frame {:?}", frame.seq);
                assert_eq!(b.on_data(key, &frame, &mut ignored), Some(0));
            }
        }
    }
    assert_eq!(
        done(&mut b, 0),
        Some((KEY, Outcome::Agreed { recovered: 3 }))
    );

    // A frame this node takes in while a peer behind is served: the
    // peer is told the new `next` before the frame.
    let mut a = Flushes::new();
    a.start(KEY, Some(kept(0, 5, 64)), &[1, 4], 1_000, &mut out);
    a.on_state(1, KEY, (Some(Seq(6)), Some(Seq(0))), true, &mut out);
    a.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), true, &mut out);
    out.clear();
    assert_eq!(a.on_data(KEY, &five, &mut out), Some(0));
    let to_4: Vec<&FlushMsg> = out
        .iter()
        .filter(|(n, _)| *n == 4)
        .map(|(_, m)| m)
        .collect();
    assert!(
        matches!(
            to_4[..],
            [
                FlushMsg::State {
                    next: Some(Seq(6)),
                    ..
                },
                FlushMsg::Data { .. }
            ]
        ),
        "{to_4:?}"
    );
}

#[test]
fn a_silent_survivor_holds_the_flush_until_it_leaves_the_view_or_the_deadline() {
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000, &mut out);
    f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
    assert_eq!(done(&mut f, 999), None);
    assert_eq!(f.next_deadline(), Some(1_000));
    assert_eq!(
        done(&mut f, 1_000),
        Some((
            KEY,
            Outcome::TimedOut {
                waiting: 1,
                recovered: 0
            }
        ))
    );
    assert_eq!(f.counters().timed_out, 1);
    // The same, but node 3 leaves the view.
    f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000, &mut out);
    f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
    f.peer_gone(KEY.group, 3, &mut Vec::new());
    assert_eq!(
        done(&mut f, 0),
        Some((KEY, Outcome::Agreed { recovered: 0 }))
    );
    assert_eq!(f.counters().agreed, 1);
}

#[test]
fn a_sender_back_in_the_view_ends_the_wait_for_survivors_never_heard() {
    // Seed 4109: node 3 never saw the sender leave (it holds this
    // node's state for a flush it never starts); the sender, alive with
    // the same stream, is back in the view at t=10.
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(
        KEY,
        Some(kept(0, 5, 64)),
        &[2, 3],
        2 * SENDER_BACK_GRACE_NS,
        &mut out,
    );
    f.on_state(2, KEY, (Some(Seq(5)), Some(Seq(0))), false, &mut out);
    f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch + 1, 10);
    assert_eq!(
        f.next_deadline(),
        Some(2 * SENDER_BACK_GRACE_NS),
        "another stream"
    );
    f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch, 10);
    let grace = 10 + SENDER_BACK_GRACE_NS;
    assert_eq!(f.next_deadline(), Some(grace));
    assert_eq!(done(&mut f, grace - 1), None, "its state may be on its way");
    let ended = f.poll_ended(grace).expect("no longer waits for node 3");
    assert_eq!(ended.outcome, Outcome::Agreed { recovered: 0 });
    assert_eq!(ended.with, vec![2]);
    assert_eq!(f.counters().ended_sender_back, 1);
    // A survivor heard live and ahead is still waited for: only the
    // silent ones are let go.
    f.start(KEY, Some(kept(0, 5, 64)), &[2, 3], 1_000_000_000, &mut out);
    f.on_state(2, KEY, (Some(Seq(8)), Some(Seq(0))), false, &mut out);
    f.sender_back(KEY.group, KEY.sender, |e| e == KEY.epoch, 0);
    assert_eq!(
        done(&mut f, SENDER_BACK_GRACE_NS),
        None,
        "frames 5..8 to come"
    );
    for s in 5..8 {
        f.on_data(KEY, &whole(Seq(s), vec![s as u8]), &mut out);
    }
    assert_eq!(
        done(&mut f, SENDER_BACK_GRACE_NS),
        Some((KEY, Outcome::Agreed { recovered: 3 }))
    );
}

#[test]
fn a_peer_behind_what_this_node_kept_is_sent_nothing_while_another_keeps_its_next() {
    // Node 1 kept only frames 6..10 (window 4); node 2 is at 2; node 3
    // delivered 0..4 and keeps them all.
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(KEY, Some(kept(0, 10, 4)), &[2, 3], 1_000, &mut out);
    out.clear();
    f.on_state(2, KEY, (Some(Seq(2)), Some(Seq(0))), false, &mut out);
    f.on_state(3, KEY, (Some(Seq(4)), Some(Seq(0))), false, &mut out);
    let to_2 = out
        .iter()
        .filter(|(n, m)| *n == 2 && matches!(m, FlushMsg::Data { .. }))
        .count();
    assert_eq!(to_2, 0, "a partial range would leave node 2 a gap");
    // Run to the end: node 3 brings node 2 to 4. Node 1 keeps from 6
    // and node 2 never jumps to it: node 3 brought it in order, and
    // once at 4 nobody is ahead that could have kept 4 and 5 but node
    // 1, which did not, so node 2 ends at 4 beside node 3.
    let mut net = Net::new(&[
        (1, Some(kept(0, 10, 4))),
        (2, Some(kept(0, 2, 4))),
        (3, Some(kept(0, 4, 8))),
    ]);
    net.run();
    assert_eq!(net.seqs_of(2), seqs(2, 4), "in order from node 3 only");
    assert_eq!(net.nodes[&2].counters().jumps, 0);
}

#[test]
fn a_recovered_frame_is_served_on_when_the_one_that_had_it_dies() {
    // Node 2 is ahead, serves node 1, and dies before serving node 3;
    // node 1 serves node 3 what it recovered.
    let mut net = Net::new(&[
        (1, Some(kept(0, 4, 64))),
        (2, Some(kept(0, 8, 64))),
        (3, Some(kept(0, 2, 64))),
    ]);
    // Everything arrives except messages from 2 to 3.
    net.run_dropping(|from, to| from == 2 && to == 3);
    net.dead.push(2);
    net.nodes
        .get_mut(&3)
        .unwrap()
        .peer_gone(KEY.group, 2, &mut Vec::new());
    assert_eq!(net.seqs_of(1), seqs(4, 8));
    assert_eq!(
        net.seqs_of(3),
        seqs(2, 8),
        "node 1 passed on what node 2 sent it"
    );
    let f3 = net.nodes.get_mut(&3).unwrap();
    assert_eq!(done(f3, 0), Some((KEY, Outcome::Agreed { recovered: 6 })));
}

#[test]
fn a_node_behind_every_kept_window_jumps_to_the_oldest_kept_message() {
    // Node 1 delivered 0..5; node 2 delivered 0..50 but keeps only the
    // last 8 (42..50): its sender went on without node 1 as a member,
    // so 5..42 were acknowledged by every member and were not node 1's.
    let mut net = Net::new(&[(1, Some(kept(0, 5, 8))), (2, Some(kept(0, 50, 8)))]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(42, 50), "all node 2 kept");
    // It does not end between the states and the jump.
    let mut f = Flushes::new();
    f.start(KEY, Some(kept(0, 5, 8)), &[2], 1_000, &mut Vec::new());
    f.on_state(
        2,
        KEY,
        (Some(Seq(50)), Some(Seq(42))),
        false,
        &mut Vec::new(),
    );
    assert_eq!(f.poll_ended(0), None, "the jump is on its way");
    let f1 = net.nodes.get_mut(&1).unwrap();
    let ended = f1.poll_ended(0).expect("caught up");
    assert_eq!(ended.outcome, Outcome::Agreed { recovered: 8 });
    assert_eq!(ended.next, Some(Seq(50)), "it ends with node 2");
    assert_eq!(f1.counters().beyond_reach, 1);
    assert_eq!(f1.counters().jumps, 1);
    assert_eq!(f1.counters().frames_skipped, 37);
    let f2 = net.nodes.get_mut(&2).unwrap();
    assert_eq!(f2.poll_ended(0).map(|e| e.next), Some(Some(Seq(50))));
    assert_eq!(f2.counters().beyond_reach, 0);
    // Kept from the middle of a message (43 is a last fragment): the
    // jump lands on the next first fragment, 44.
    let mut net = Net::new(&[(1, Some(kept(0, 5, 8))), (2, Some(kept(0, 50, 7)))]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(44, 50));
    assert_eq!(net.nodes[&1].counters().frames_skipped, 39);
    // Within reach (node 2 keeps from 42, node 1 is at 45): no jump,
    // it gets 45..50.
    let mut net = Net::new(&[(1, Some(kept(40, 45, 8))), (2, Some(kept(0, 50, 8)))]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(45, 50));
    let f1 = net.nodes.get_mut(&1).unwrap();
    assert_eq!(f1.poll_ended(0).map(|e| e.next), Some(Some(Seq(50))));
    assert_eq!(f1.counters().beyond_reach, 0);
    assert_eq!(f1.counters().jumps, 0);
    // Two survivors ahead: only the one keeping the oldest frames
    // (node 3, from 40) serves the jump, and node 1 gets 40..50 from it
    // and nothing twice.
    let mut net = Net::new(&[
        (1, Some(kept(0, 5, 8))),
        (2, Some(kept(0, 50, 8))),
        (3, Some(kept(0, 50, 10))),
    ]);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(40, 50));
    // A jump waits for every survivor's state: node 3 never reports.
    let mut net = Net::new(&[
        (1, Some(kept(0, 5, 8))),
        (2, Some(kept(0, 50, 8))),
        (3, Some(kept(0, 5, 8))),
    ]);
    net.queue.retain(|(from, _, _)| *from != 3);
    net.dead.push(3);
    net.run();
    assert!(net.delivered[&1].is_empty(), "node 3 might have kept 5");
    assert_eq!(net.nodes[&1].counters().jumps, 0);
}

#[test]
fn a_jump_that_overtakes_a_survivor_s_state_is_taken_when_it_comes() {
    // Seed 3940: node 1 (at 5) counts nodes 2 and 3. Node 2 keeps 42..50
    // and sends the jump as soon as it has node 1's state; the frames
    // come before node 3's state, and node 1 may not jump until it has
    // heard everyone (node 3 might have kept 5). Node 2 has ended by
    // then: the frames must not be lost.
    let mut net = Net::new(&[
        (1, Some(kept(0, 5, 8))),
        (2, Some(kept(0, 50, 8))),
        (3, None),
    ]);
    // Node 3's messages to node 1 wait until everything else is done.
    let mut later = Vec::new();
    net.queue.retain(|(from, to, m)| {
        let hold = *from == 3 && *to == 1;
        if hold {
            later.push((*from, *to, m.clone()));
        }
        !hold
    });
    net.run_dropping(|from, to| from == 3 && to == 1);
    assert!(net.delivered[&1].is_empty(), "not before node 3 is heard");
    assert_eq!(
        net.nodes.get_mut(&2).unwrap().poll_ended(0).map(|e| e.next),
        Some(Some(Seq(50))),
        "node 2 sent the jump and ended"
    );
    net.queue.extend(later);
    net.run();
    assert_eq!(net.seqs_of(1), seqs(42, 50), "taken when node 3 is heard");
    let f1 = net.nodes.get_mut(&1).unwrap();
    assert_eq!(f1.counters().jumps, 1);
    assert_eq!(f1.counters().frames_recovered, 8);
    let ended = f1.poll_ended(0).expect("caught up");
    assert_eq!(ended.outcome, Outcome::Agreed { recovered: 8 });
    assert_eq!(ended.next, Some(Seq(50)));
}

#[test]
fn a_state_from_a_node_this_one_did_not_count_takes_it_in() {
    // Node 1's views did not count node 3 a survivor; node 3's did, and
    // waits for node 1's state. Node 1 is ahead of it.
    let mut f1 = Flushes::new();
    let mut f3 = Flushes::new();
    let mut to_3 = Vec::new();
    f1.start(KEY, Some(kept(0, 10, 8)), &[2], 1_000, &mut Vec::new());
    let mut from_3 = Vec::new();
    f3.start(KEY, Some(kept(0, 7, 8)), &[1], 1_000, &mut from_3);
    let (_, FlushMsg::State { next, from, .. }) = from_3[0].clone() else {
        panic!("a state first");
    };
    f1.on_state(3, KEY, (next, from), false, &mut to_3);
    let states = to_3
        .iter()
        .filter(|(n, m)| *n == 3 && matches!(m, FlushMsg::State { .. }))
        .count();
    let frames: Vec<Seq> = to_3
        .iter()
        .filter_map(|(_, m)| match m {
            FlushMsg::Data { frame, .. } => Some(frame.seq),
            _ => None,
        })
        .collect();
    assert_eq!(states, 1, "node 3 is told node 1's state");
    assert_eq!(frames, seqs(7, 10), "and sent what it lacks");
    for (_, m) in to_3 {
        match m {
            FlushMsg::State { key, next, from } => {
                f3.on_state(1, key, (next, from), false, &mut Vec::new());
            }
            FlushMsg::Data { key, frame } => {
                assert_eq!(f3.on_data(key, &frame, &mut Vec::new()), Some(0));
            }
        }
    }
    let ended = f3
        .poll_ended(0)
        .expect("node 3 does not wait for the deadline");
    assert_eq!(ended.outcome, Outcome::Agreed { recovered: 3 });
    assert_eq!(ended.next, Some(Seq(10)));
    // A node gone from the view is not taken in by a late state.
    let mut f = Flushes::new();
    f.start(KEY, Some(kept(0, 10, 8)), &[2, 4], 1_000, &mut Vec::new());
    f.peer_gone(KEY.group, 4, &mut Vec::new());
    let mut out = Vec::new();
    f.on_state(4, KEY, (Some(Seq(3)), Some(Seq(0))), false, &mut out);
    assert!(out.is_empty(), "{out:?}");
    // A state held from a node the flush does not count is not taken
    // in, but answered with where this node is: that node stops waiting
    // for this one (seed 1100: it waited until its deadline), and sends
    // it what it lacks (seed 718: "nothing" ended that node's flush
    // without sending this one the frames it delivered past it).
    let mut f = Flushes::new();
    f.on_state(4, KEY, (Some(Seq(32)), Some(Seq(0))), true, &mut out);
    let mut out = Vec::new();
    let mine = kept(0, 10, 8);
    let here = FlushMsg::State {
        key: KEY,
        next: mine.next(),
        from: mine.serves_from(),
    };
    f.start(KEY, Some(mine), &[2], 1_000, &mut out);
    assert!(out.contains(&(4, here)), "{out:?}");
    assert!(out
        .iter()
        .all(|(n, m)| *n != 4 || matches!(m, FlushMsg::State { .. })));
}

/// A flush that ends at once: this node alone, with `r` delivered.
fn ended_alone(f: &mut Flushes, key: FlushKey, r: Retained) {
    let mut out = Vec::new();
    f.start(key, Some(r), &[], 1_000, &mut out);
    assert!(f.poll_ended(0).is_some(), "nobody to wait for");
}

#[test]
fn a_stream_opened_again_where_its_flush_ended_keeps_its_record() {
    // Seeds 12084 and 3543: the sender came back with the same stream and
    // the record started afresh; when it died again, a member the first
    // flush did not wait for needed frames 0..5, and nobody kept them.
    let mut f = Flushes::new();
    ended_alone(&mut f, KEY, kept(0, 5, 4));
    let r = f.resume(KEY, Seq(5), 4);
    assert_eq!(r.next(), Some(Seq(5)));
    assert_eq!(r.serves_from(), Some(Seq(1)), "one window: 1..5");
    assert_eq!(f.counters().resumed, 1);
    // Taken: a second opening starts afresh.
    assert_eq!(f.resume(KEY, Seq(5), 4).serves_from(), Some(Seq(5)));
    // Another epoch, or a start that does not go on where the flush ended,
    // starts afresh, and the record is let go.
    for (key, start) in [
        (FlushKey { epoch: 4, ..KEY }, Seq(5)),
        (KEY, Seq(7)),
        (KEY, Seq(3)),
    ] {
        ended_alone(&mut f, KEY, kept(0, 5, 4));
        let r = f.resume(key, start, 4);
        assert_eq!((r.next(), r.serves_from()), (Some(start), Some(start)));
        assert_eq!(f.resume(KEY, Seq(5), 4).serves_from(), Some(Seq(5)));
    }
    assert_eq!(f.counters().resumed, 1);
    // A window smaller than the record's keeps the newest frames.
    ended_alone(&mut f, KEY, kept(0, 5, 4));
    assert_eq!(f.resume(KEY, Seq(5), 2).serves_from(), Some(Seq(3)));
}

#[test]
fn a_stream_closed_without_a_flush_keeps_its_record_for_a_member_behind_and_a_reopening() {
    // Seed 30585: this node stopped carrying the group (taken out of its
    // view) having delivered up to 6; a member still at 2 flushes the
    // sender's departure before this node opens the stream again.
    let mut a = Flushes::new();
    a.forget_group(KEY.group);
    a.keep_record(KEY, kept(0, 6, 64));
    let mut out = Vec::new();
    let taken = a.on_state(2, KEY, (Some(Seq(2)), Some(Seq(0))), false, &mut out);
    assert_eq!(taken, StateTaken::Served);
    let sent: Vec<Seq> = out[1..]
        .iter()
        .map(|(_, m)| match m {
            FlushMsg::Data { frame, .. } => frame.seq,
            m => panic!("unexpected {m:?}"),
        })
        .collect();
    assert_eq!(sent, seqs(2, 6), "what the member lacks");
    // Back in the view, the stream opens where it stopped: the record
    // goes on.
    let r = a.resume(KEY, Seq(6), 64);
    assert_eq!((r.next(), r.serves_from()), (Some(Seq(6)), Some(Seq(0))));
}

#[test]
fn the_records_of_ended_flushes_are_bounded_and_forgotten_with_their_group() {
    let mut f = Flushes::new();
    for sender in 0..=MAX_ENDED_RECORDS as NodeId {
        ended_alone(&mut f, FlushKey { sender, ..KEY }, kept(0, 5, 4));
    }
    assert_eq!(
        f.ended_records(),
        (MAX_ENDED_RECORDS, MAX_ENDED_RECORDS * 4 * 2)
    );
    let first = FlushKey { sender: 0, ..KEY };
    assert_eq!(f.resume(first, Seq(5), 4).serves_from(), Some(Seq(5)));
    let second = FlushKey { sender: 1, ..KEY };
    assert_eq!(f.resume(second, Seq(5), 4).serves_from(), Some(Seq(1)));
    f.forget_group(KEY.group);
    let third = FlushKey { sender: 2, ..KEY };
    assert_eq!(f.resume(third, Seq(5), 4).serves_from(), Some(Seq(5)));
}

#[test]
fn a_member_that_flushes_after_this_nodes_flush_ended_is_served_from_its_record() {
    // Node 1's flush ended without node 2 (its view still held the
    // sender); node 2 flushes later, having delivered up to 2.
    let mut a = Flushes::new();
    ended_alone(&mut a, KEY, kept(0, 6, 64));
    let mut out = Vec::new();
    let taken = a.on_state(2, KEY, (Some(Seq(2)), Some(Seq(0))), false, &mut out);
    assert_eq!(taken, StateTaken::Served);
    let state = FlushMsg::State {
        key: KEY,
        next: Some(Seq(6)),
        from: Some(Seq(0)),
    };
    assert_eq!(out[0], (2, state.clone()), "its state before the frames");
    let sent: Vec<Seq> = out[1..]
        .iter()
        .map(|(to, m)| match m {
            FlushMsg::Data { frame, .. } if *to == 2 => frame.seq,
            m => panic!("unexpected {m:?}"),
        })
        .collect();
    assert_eq!(sent, seqs(2, 6));
    assert_eq!(a.counters().served_after_end, 1);
    assert_eq!(a.counters().frames_served, 4);
    // Node 2's flush takes them and ends agreed with node 1.
    let mut b = Flushes::new();
    let mut back = Vec::new();
    b.start(KEY, Some(kept(0, 2, 64)), &[1], 1_000, &mut back);
    let mut got = Vec::new();
    for (_, m) in out {
        match m {
            FlushMsg::State { key, next, from } => {
                b.on_state(1, key, (next, from), false, &mut back);
            }
            FlushMsg::Data { key, frame } => {
                if b.on_data(key, &frame, &mut back).is_some() {
                    got.push(frame.seq);
                }
            }
        }
    }
    assert_eq!(got, seqs(2, 6));
    assert_eq!(
        done(&mut b, 0),
        Some((KEY, Outcome::Agreed { recovered: 4 }))
    );
    // A member level with the record, or of another epoch, is not served,
    // and one with nothing is not answered.
    for (key, next) in [
        (KEY, Some(Seq(6))),
        (FlushKey { epoch: 4, ..KEY }, Some(Seq(2))),
        (KEY, None),
    ] {
        let mut out = Vec::new();
        let taken = a.on_state(2, key, (next, next), false, &mut out);
        assert_eq!(taken, StateTaken::Unknown);
        assert!(out
            .iter()
            .all(|(_, m)| matches!(m, FlushMsg::State { next: None, .. })));
    }
    // One behind even the record is sent all it keeps: a jump's frames,
    // taken only if no survivor can do better.
    let mut c = Flushes::new();
    ended_alone(&mut c, KEY, kept(10, 14, 64));
    let mut out = Vec::new();
    c.on_state(2, KEY, (Some(Seq(3)), Some(Seq(0))), false, &mut out);
    assert_eq!(out.len(), 5);
    assert!(matches!(&out[1].1, FlushMsg::Data { frame, .. } if frame.seq == Seq(10)));
}

#[test]
fn a_peer_ahead_that_keeps_nothing_is_not_waited_for_a_jump() {
    // Seed 1603: the only survivor ahead had opened the stream again at
    // #10 and delivered nothing since; it has no frames to send a jump.
    let mut f = Flushes::new();
    let mut out = Vec::new();
    f.start(KEY, Some(kept(0, 3, 64)), &[2], 1_000, &mut out);
    f.on_state(2, KEY, (Some(Seq(10)), Some(Seq(10))), false, &mut out);
    assert_eq!(
        done(&mut f, 0),
        Some((KEY, Outcome::Agreed { recovered: 0 }))
    );
    assert_eq!(f.counters().beyond_reach, 1);
    // One that keeps frames is waited for: they come as a jump.
    f.start(KEY, Some(kept(0, 3, 64)), &[2], 1_000, &mut out);
    f.on_state(2, KEY, (Some(Seq(10)), Some(Seq(8))), false, &mut out);
    assert_eq!(done(&mut f, 0), None);
}
