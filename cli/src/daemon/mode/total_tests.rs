//! Unit tests of the total-order mode: one node's mode, driven by hand.

use std::cell::Cell;
use std::rc::Rc;

use super::*;
use crate::daemon::mode::fake::Fake;

const GROUP: GroupId = 4;

/// One node's mode with its engine streams, view and wall clock.
struct Rig {
    mode: TotalOrder,
    streams: Fake,
    remote: Vec<NodeId>,
    view_epoch: u64,
    settled: bool,
    wall: Rc<Cell<u64>>,
    /// Delivered here: (source, message, the client it skipped).
    got: Vec<(NodeId, Vec<u8>, To)>,
    /// The link messages the mode sent.
    outbox: Vec<(NodeId, LinkMessage)>,
}

impl Rig {
    fn new(node: NodeId, remote: &[NodeId]) -> Rig {
        let wall = Rc::new(Cell::new(1_000));
        let w = Rc::clone(&wall);
        let mut r = Rig {
            mode: TotalOrder::new(GROUP, node, Seq(0), Box::new(move || w.get()), 100),
            streams: Fake::default(),
            remote: remote.to_vec(),
            view_epoch: 1,
            settled: true,
            wall,
            got: Vec::new(),
            outbox: Vec::new(),
        };
        let added = r.remote.clone();
        r.call(|m, cx, _| m.members_changed(cx, &added).unwrap());
        r
    }

    /// [`Rig::new`] for a group that commits (`commit = true`), its wall
    /// clock standing at 1,000.
    fn committing(node: NodeId, remote: &[NodeId]) -> Rig {
        Rig::committing_from(node, remote, commit_tree::DEFAULT_FROM_NODES)
    }

    /// [`Rig::committing`] over a commit tree whatever the view's size.
    fn committing_over_a_tree(node: NodeId, remote: &[NodeId]) -> Rig {
        Rig::committing_from(node, remote, 2)
    }

    /// [`Rig::committing`] with its reports over a tree from `tree_from`
    /// members (its stream takes no acknowledgments, as NAK's: the tree
    /// carries reports).
    fn committing_from(node: NodeId, remote: &[NodeId], tree_from: usize) -> Rig {
        Rig::built(node, remote, |m| {
            m.committing(true)
                .acknowledged(false)
                .commit_tree_from(tree_from)
        })
    }

    /// [`Rig::new`] whose stream acknowledges (the default), with the
    /// commit tree in every view: the members' claims climb it.
    fn claiming_over_a_tree(node: NodeId, remote: &[NodeId]) -> Rig {
        Rig::built(node, remote, |m| m.commit_tree_from(2))
    }

    /// [`Rig::new`] with its mode built further by `build`.
    fn built(node: NodeId, remote: &[NodeId], build: impl FnOnce(TotalOrder) -> TotalOrder) -> Rig {
        let mut r = Rig::new(node, remote);
        let w = Rc::clone(&r.wall);
        r.mode = build(TotalOrder::new(
            GROUP,
            node,
            Seq(0),
            Box::new(move || w.get()),
            100,
        ));
        let added = r.remote.clone();
        r.call(|m, cx, _| m.members_changed(cx, &added).unwrap());
        r
    }

    fn call<R>(
        &mut self,
        f: impl FnOnce(&mut TotalOrder, &mut ModeCx<'_>, &mut Out<'_>) -> R,
    ) -> R {
        let outbox = &mut self.outbox;
        let mut cx = ModeCx {
            group: GROUP,
            node: 1,
            epoch: 1,
            remote: &self.remote,
            root: Some(1),
            settled: self.settled,
            view_epoch: self.view_epoch,
            streams: &mut self.streams,
            outbox,
        };
        let got = &mut self.got;
        f(&mut self.mode, &mut cx, &mut |hdr, data, except| {
            got.push((hdr.source, data.to_vec(), except))
        })
    }

    fn publish(&mut self, msg: &[u8]) -> Published {
        self.call(|m, cx, out| m.publish(cx, ClientId(7), msg, out).unwrap())
    }

    fn poll(&mut self, now: u64) -> bool {
        self.call(|m, cx, out| m.poll(cx, now, out).unwrap())
    }

    fn fragment(&mut self, from: NodeId, first: bool, last: bool, data: &[u8]) {
        let f = Fragment {
            group: GROUP,
            stream: from,
            seq: Seq(0),
            first,
            last,
            data,
        };
        self.call(|m, _, out| m.deliver(&f, out));
    }

    fn data(&mut self, from: NodeId, ts: u64, msg: &[u8]) {
        let mut buf = Vec::new();
        encode(TAG_DATA, ts, 1, 0, msg, &mut buf);
        self.fragment(from, true, true, &buf);
    }

    fn beacon(&mut self, from: NodeId, ts: u64, epoch: u64) {
        self.beacon_wanting(from, ts, epoch, 0);
    }

    /// A beacon from a node that holds messages up to `wants` waiting.
    fn beacon_wanting(&mut self, from: NodeId, ts: u64, epoch: u64, wants: u64) {
        let mut buf = Vec::new();
        encode_beacon(ts, epoch, 0, wants, None, &mut buf);
        self.fragment(from, true, true, &buf);
    }

    /// Installs view `epoch` of `remote` (`added` new in it) and gives the
    /// mode its event, "E<epoch>".
    fn view(&mut self, epoch: u64, remote: &[NodeId], added: &[NodeId]) {
        self.view_epoch = epoch;
        self.remote = remote.to_vec();
        self.call(|m, cx, _| m.members_changed(cx, added).unwrap());
        let event = format!("E{epoch}");
        assert!(self.call(|m, cx, _| m.place_event(cx, event.as_bytes())));
    }

    /// A message from `from` stamped `ts`, ready for view `epoch`.
    fn data_in(&mut self, from: NodeId, ts: u64, epoch: u64, msg: &[u8]) {
        let mut buf = Vec::new();
        encode(TAG_DATA, ts, epoch, 0, msg, &mut buf);
        self.fragment(from, true, true, &buf);
    }

    /// The epoch (readiness) the last thing this node sent carries.
    fn sent_epoch(&self) -> u64 {
        let b = self.streams.published.last().expect("sent");
        u64::from_be_bytes(b[9..17].try_into().unwrap())
    }

    /// Whatever the barrier passes now (a poll long after any beacon).
    fn release_now(&mut self) {
        self.poll(0);
    }

    /// The messages delivered, as text.
    fn texts(&self) -> Vec<String> {
        self.got
            .iter()
            .map(|(n, m, _)| format!("{n}:{}", String::from_utf8_lossy(m)))
            .collect()
    }

    /// What this node sent in its stream: (tag, stamp).
    fn sent(&self) -> Vec<(u8, u64)> {
        self.streams
            .published
            .iter()
            .map(|b| (b[0], u64::from_be_bytes(b[1..9].try_into().unwrap())))
            .collect()
    }
}

#[test]
fn messages_are_delivered_in_stamp_order_once_every_node_has_stamped_past_them() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(2, 10, 1);
    r.beacon(3, 10, 1);
    // Node 3's stream brings a later message before node 2's earlier one.
    r.data(3, 60, b"c");
    assert!(r.got.is_empty(), "node 2 may still send below 60");
    r.data(2, 50, b"b");
    assert_eq!(r.texts(), ["2:b"], "50 is below both nodes' stamps");
    // Same stamp from two nodes: the lower node first.
    r.data(2, 60, b"b2");
    assert_eq!(r.texts(), ["2:b", "2:b2", "3:c"]);
    // A stamp far ahead of this node's clock: the clock follows it, so the
    // node's own bound never holds back what others stamped.
    r.wall.set(100);
    r.beacon(2, 5_000, 1);
    r.data(3, 4_000, b"d");
    assert_eq!(r.texts(), ["2:b", "2:b2", "3:c", "3:d"]);
}

#[test]
fn a_joining_node_sends_no_message_before_every_node_has_stamped_in_its_view() {
    let mut r = Rig::new(1, &[2, 3]);
    assert_eq!(r.publish(b"x"), Published::WouldBlock);
    // Its first beacon goes at once, so nobody waits for it.
    assert!(r.poll(0));
    assert_eq!(r.sent().len(), 1);
    assert_eq!(r.sent()[0].0, TAG_BEACON);
    // A stamp from an earlier view does not count; one from this view does.
    r.view_epoch = 1;
    r.beacon(2, 10, 0);
    r.beacon(3, 11, 1);
    assert_eq!(r.publish(b"x"), Published::WouldBlock);
    r.beacon(2, 12, 1);
    assert_eq!(r.publish(b"x"), Published::Sent);
    let (tag, ts) = r.sent()[1];
    assert_eq!(tag, TAG_DATA);
    assert!(ts > 12, "stamped after every stamp seen: {ts}");
    // Held until both others have stamped past it; its publisher skipped.
    assert!(r.got.is_empty());
    r.beacon(2, ts + 1, 1);
    r.beacon(3, ts + 1, 1);
    assert_eq!(r.got, [(1, b"x".to_vec(), To::AllBut(Some(ClientId(7))))]);
}

#[test]
fn beacons_go_only_while_others_wait_and_at_most_once_an_interval() {
    let mut r = Rig::new(1, &[2]);
    r.poll(0);
    r.beacon(2, 10, 1);
    // The joining node's wait is over: a stamp above everything the
    // others may hold for it.
    assert!(r.poll(0));
    let sent = r.sent().len();
    assert_eq!(sent, 2);
    assert!(r.sent()[1].1 > 10);
    // Nothing waits: no beacon however long the node is idle.
    assert!(!r.poll(1_000_000));
    assert_eq!(r.mode.poll_at(), None);
    // A message from node 2 waits for this node's stamp: a beacon at once
    // (the last was long ago) that passes it.
    r.data(2, 2_000, b"m");
    assert_eq!(r.mode.poll_at(), Some(100));
    assert!(r.poll(1_000_000));
    assert_eq!(r.sent().len(), sent + 1);
    assert!(r.sent()[sent].1 > 2_000);
    // The next waits for the interval.
    r.data(2, 3_000, b"n");
    assert_eq!(r.mode.poll_at(), Some(1_000_100));
    r.poll(1_000_050);
    assert_eq!(r.sent().len(), sent + 1);
    r.poll(1_000_100);
    assert_eq!(r.sent().len(), sent + 2);
    // This node's own message is a stamp too: no beacon after it (it is
    // watched while it waits, below).
    r.beacon(2, 4_000, 1);
    let before = r.sent().len();
    assert_eq!(r.publish(b"o"), Published::Sent);
    assert_eq!(r.sent().len(), before + 1);
    r.poll(2_000_000);
    assert_eq!(r.sent().len(), before + 1);
}

#[test]
fn a_node_whose_messages_wait_says_so_and_the_node_behind_answers() {
    let mut r = Rig::new(1, &[2]);
    r.beacon(2, 10, 1);
    r.poll(0);
    // Its own message waits for node 2, which never saw what it waits for
    // (here: node 2 is simply idle and its stamp is old).
    assert_eq!(r.publish(b"o"), Published::Sent);
    let ts = r.sent().last().unwrap().1;
    r.poll(1_000);
    assert_eq!(r.mode.poll_at(), Some(1_200), "watched for two intervals");
    let sent = r.sent().len();
    r.poll(1_199);
    assert_eq!(r.sent().len(), sent);
    r.poll(1_200);
    assert_eq!(
        r.sent().len(),
        sent + 1,
        "a beacon that says what it waits for"
    );
    let b = &r.streams.published[sent];
    assert_eq!(b[0], TAG_BEACON);
    assert_eq!(u64::from_be_bytes(b[HEADER_LEN..].try_into().unwrap()), ts);
    // Said once: no more beacons for the same wait. (After each poll the
    // daemon asks for silent nodes: node 2, idle, is one.)
    r.poll(5_000);
    assert_eq!(r.sent().len(), sent + 1);
    assert!(r.mode.silent(5_000).is_empty(), "half-way: stamps noted");
    assert_eq!(r.mode.silent(5_500), vec![2]);
    // Woken next only to look at the silence again, after the backoff.
    assert_eq!(r.mode.poll_at(), Some(5_500 + 100 * 100 - 5 * 100));

    // The other side: a beacon that waits for stamps up to 5,000 is
    // answered with a stamp above them, and only once.
    let mut r = Rig::new(1, &[2]);
    r.beacon(2, 10, 1);
    r.poll(0);
    let sent = r.sent().len();
    r.beacon_wanting(2, 20, 1, 5_000);
    r.poll(1_000);
    assert_eq!(r.sent().len(), sent + 1);
    assert!(r.sent()[sent].1 > 5_000);
    r.poll(2_000);
    assert_eq!(r.sent().len(), sent + 1);
}

#[test]
fn a_departed_node_holds_the_barrier_until_its_flush_is_over() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(2, 10, 1);
    r.beacon(3, 10, 1);
    r.data(2, 40, b"a");
    assert!(r.got.is_empty());
    // Node 3 leaves; a flush runs: its last messages may still come.
    r.remote = vec![2];
    r.view_epoch = 2;
    r.settled = false;
    r.call(|m, cx, _| m.members_changed(cx, &[]).unwrap());
    r.poll(0);
    assert!(r.got.is_empty());
    r.data(3, 30, b"z");
    assert_eq!(r.texts(), ["3:z"], "below 30 nothing else can come");
    // The flush is over: node 3 no longer holds anyone back.
    r.settled = true;
    assert!(r.mode.wants_round());
    r.poll(0);
    assert_eq!(r.texts(), ["3:z", "2:a"]);
    assert!(!r.mode.wants_round());
    // What node 3 sends now is not delivered: it waits for a view that
    // adds node 3 again.
    r.data(3, 50, b"late");
    assert_eq!(r.got.len(), 2);
    assert_eq!(r.mode.stats_json()["early"], 1);
}

#[test]
fn what_a_node_sends_before_the_view_that_adds_it_waits_for_that_view() {
    let mut r = Rig::new(1, &[2]);
    r.beacon(2, 10, 1);
    // Node 3's stream started here before the view that adds it: its
    // beacon and messages are kept, not delivered, and do not count yet.
    r.beacon(3, 20, 2);
    r.data(3, 30, b"early");
    r.beacon(2, 100, 1);
    assert!(r.got.is_empty());
    assert_eq!(r.mode.stats_json()["early"], 2);
    // The view adds node 3: its message takes its place in the order.
    r.remote = vec![2, 3];
    r.view_epoch = 2;
    r.call(|m, cx, _| m.members_changed(cx, &[3]).unwrap());
    r.release_now();
    assert_eq!(r.texts(), ["3:early"]);
    assert_eq!(r.mode.stats_json()["early"], 0);
}

#[test]
fn a_fragmented_message_counts_for_the_barrier_only_once_whole() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(2, 10, 1);
    r.beacon(3, 10, 1);
    let mut first = Vec::new();
    encode(TAG_DATA, 60, 1, 0, b"big-", &mut first);
    r.fragment(2, true, false, &first);
    // Node 3's message at the same stamp comes after node 2's.
    r.data(3, 60, b"small");
    r.beacon(3, 70, 1);
    assert!(r.got.is_empty(), "node 2's message at 60 is not whole yet");
    r.fragment(2, false, true, b"message");
    assert_eq!(r.texts(), ["2:big-message", "3:small"]);
}

#[test]
fn stamps_that_do_not_grow_and_bad_headers_are_dropped_and_counted() {
    let mut r = Rig::new(1, &[2]);
    r.beacon(2, 10, 1);
    r.data(2, 20, b"a");
    r.data(2, 20, b"again");
    r.data(2, 15, b"back");
    r.fragment(2, true, true, b"short");
    r.fragment(2, false, true, b"no first");
    assert_eq!(r.mode.stats_json()["malformed"], 4);
    r.beacon(2, 30, 1);
    assert_eq!(r.texts(), ["2:a"]);
}

#[test]
fn a_node_alone_delivers_its_own_at_once_and_holds_at_most_its_bound() {
    let mut r = Rig::new(1, &[]);
    assert_eq!(r.publish(b"solo"), Published::Sent);
    assert_eq!(
        r.got,
        [(1, b"solo".to_vec(), To::AllBut(Some(ClientId(7))))]
    );
    assert!(r.streams.published.is_empty());
    // With a silent other node, own messages are held up to the bound.
    let mut r = Rig::new(1, &[2]);
    r.beacon(2, 10, 1);
    let big = vec![0u8; MAX_OWN_HELD_BYTES / 2];
    assert_eq!(r.publish(&big), Published::Sent);
    assert_eq!(r.publish(&big), Published::Sent);
    assert_eq!(r.publish(b"one more"), Published::WouldBlock);
    r.beacon(2, u64::MAX / 2, 1);
    assert_eq!(r.got.len(), 2);
    assert_eq!(r.publish(b"one more"), Published::Sent);
}

#[test]
fn a_views_event_comes_after_all_that_any_member_stamped_before_it_knew_of_the_view() {
    let mut r = Rig::new(1, &[2, 3]);
    r.poll(0);
    r.beacon(2, 1_100, 1);
    r.beacon(3, 1_100, 1);
    r.data_in(2, 1_200, 1, b"a");
    // View 2 (a member joined elsewhere: same nodes). This node's next
    // stamp is ready for it.
    r.view(2, &[2, 3], &[]);
    r.poll(0);
    assert_eq!(r.sent_epoch(), 2);
    let mine = r.sent().last().unwrap().1;
    assert!(mine > 1_200 && mine < 1_400, "{mine}");
    // Node 2 stamped one more before it knew of the view, then one ready.
    r.data_in(2, 1_300, 1, b"b");
    r.beacon(2, 1_400, 2);
    // Node 3 too: its stamps below 1,350 pass, the event waits for its
    // first stamp ready for view 2 though the barrier is past it.
    r.data_in(3, 1_250, 1, b"c");
    r.data_in(3, 1_350, 1, b"c2");
    assert_eq!(r.texts(), ["2:a", "3:c", "2:b", "3:c2"]);
    r.data_in(2, 1_450, 2, b"d");
    r.beacon(3, 1_500, 2);
    r.data_in(2, 1_600, 2, b"f");
    r.data_in(3, 1_550, 2, b"e");
    assert_eq!(
        r.texts(),
        ["2:a", "3:c", "2:b", "3:c2", "2:d", "0:E2", "3:e"],
        "the event at node 3's 1,500, the largest first stamp"
    );
    assert_eq!(r.mode.stats_json()["events"], 1);
}

#[test]
fn a_departed_nodes_messages_stamped_after_its_event_are_dropped() {
    let mut r = Rig::new(1, &[2, 3]);
    r.poll(0);
    r.beacon(2, 1_100, 1);
    r.beacon(3, 1_100, 1);
    // Node 3 is gone; its flush runs.
    r.settled = false;
    r.view(2, &[2], &[]);
    r.poll(0);
    r.beacon(2, 2_000, 2);
    // The flush brings node 3's last messages: one stamped before the
    // event's place, one after (its clock ran ahead).
    r.data_in(3, 1_500, 1, b"kept");
    r.data_in(3, 2_500, 1, b"late");
    r.settled = true;
    r.poll(0);
    r.beacon(2, 3_000, 2);
    assert_eq!(r.texts(), ["3:kept", "0:E2"]);
    let s = r.mode.stats_json();
    assert_eq!(s["cut"], 1);
    assert_eq!(s["held"], 0);
}

#[test]
fn a_node_is_ready_for_a_view_only_once_the_earlier_views_events_are_placed() {
    let mut r = Rig::new(1, &[2]);
    r.poll(0);
    r.beacon(2, 1_100, 1);
    r.view(2, &[2], &[]);
    r.view(3, &[2], &[]);
    r.poll(0);
    assert_eq!(r.sent_epoch(), 2, "view 2's event waits for node 2");
    assert_eq!(r.mode.stats_json()["events_unplaced"], 2);
    // Node 2's first stamp ready for view 2: that event is placed, and this
    // node's next stamp is ready for view 3.
    r.beacon(2, 1_200, 2);
    assert_eq!(r.mode.stats_json()["events_unplaced"], 1);
    assert_eq!(r.mode.poll_at(), Some(0));
    r.poll(0);
    assert_eq!(r.sent_epoch(), 3);
    r.beacon(2, 5_000, 3);
    r.release_now();
    assert_eq!(r.texts(), ["0:E2", "0:E3"]);
}

#[test]
fn a_joining_node_sends_nothing_before_its_joins_event_is_placed() {
    let mut r = Rig::new(1, &[2, 3]);
    assert!(r.call(|m, cx, _| m.place_event(cx, b"E1")));
    r.poll(0);
    r.beacon(2, 1_100, 1);
    // Node 3 leaves before it stamped for the view this node joined in:
    // the wait for it ends, but the event's place waits for its flush.
    r.settled = false;
    r.view(2, &[2], &[]);
    r.poll(0);
    assert_eq!(r.mode.stats_json()["awaiting"], json!([]), "node 2 stamped");
    assert_eq!(r.publish(b"x"), Published::WouldBlock);
    r.settled = true;
    r.poll(0);
    assert_eq!(r.publish(b"x"), Published::Sent);
}

#[test]
fn nothing_passes_a_view_event_whose_place_is_not_known() {
    let mut r = Rig::new(1, &[2, 3]);
    r.poll(0);
    r.view(2, &[2, 3], &[]);
    r.poll(0);
    // Node 3 is ready for view 2 at 1,400; node 2, whose clock runs ahead,
    // stamps far above before it knew of the view, and then fails.
    r.beacon(3, 1_400, 2);
    r.data_in(2, 5_000, 1, b"ahead");
    r.data_in(3, 1_500, 2, b"x");
    assert!(
        r.got.is_empty(),
        "the barrier passes 1,500, but the event may still go at 1,400"
    );
    r.view(3, &[3], &[]);
    r.poll(0);
    r.beacon(3, 6_000, 3);
    r.release_now();
    assert_eq!(r.texts()[..2], ["0:E2", "3:x"]);
}

#[test]
fn a_scattering_takes_one_stamp_and_each_part_goes_to_its_member_only() {
    let mut r = Rig::new(1, &[2]);
    r.poll(0);
    r.beacon(2, 500, 1);
    let mut body = Vec::new();
    scatter::encode(
        &[(1, 21, b"for 21"), (2, 5, b"elsewhere"), (1, 11, b"for 11")],
        &mut body,
    );
    let sent = r.call(|m, cx, out| m.publish_scatter(cx, ClientId(7), &body, out).unwrap());
    assert_eq!(sent, Published::Sent);
    let (tag, ts) = *r.sent().last().unwrap();
    assert_eq!(tag, TAG_SCATTER, "one message, one stamp, for all parts");
    // A scattering from node 2, stamped below this node's.
    let mut theirs = Vec::new();
    scatter::encode(&[(1, 11, b"from 2"), (2, 11, b"not here")], &mut theirs);
    let mut buf = Vec::new();
    encode(TAG_SCATTER, ts - 1, 1, 0, &theirs, &mut buf);
    r.fragment(2, true, true, &buf);
    r.beacon(2, ts + 1, 1);
    let hdr_from = |n| data_record(GROUP, n, true, true).source;
    assert_eq!(
        r.got,
        [
            (hdr_from(2), b"from 2".to_vec(), To::Only(ClientId(11))),
            (hdr_from(1), b"for 21".to_vec(), To::Only(ClientId(21))),
            (hdr_from(1), b"for 11".to_vec(), To::Only(ClientId(11))),
        ]
    );
    assert_eq!(r.mode.stats_json()["scatterings"], 1);
    // A broken one from a peer is dropped and counted.
    encode(TAG_SCATTER, ts + 2, 1, 0, b"junk", &mut buf);
    r.fragment(2, true, true, &buf);
    r.beacon(2, ts + 3, 1);
    assert_eq!(r.got.len(), 3);
    assert_eq!(r.mode.stats_json()["malformed"], 1);
}

#[test]
fn with_commit_a_message_waits_until_every_member_reports_having_it() {
    let mut r = Rig::committing(1, &[2, 3]);
    r.poll(0);
    // A beacon from `from` at `ts` reporting its barrier `report`.
    let report = |r: &mut Rig, from, ts: u64, report: u64| report_beacon(r, from, ts, report, None);
    report(&mut r, 2, 1_100, 0);
    report(&mut r, 3, 1_100, 0);
    r.data(2, 1_200, b"a");
    report(&mut r, 3, 1_300, 0);
    r.release_now();
    assert!(r.got.is_empty(), "ordered, but nobody said it has it");
    // This node's barrier passed it: it reports so, once.
    let last = r.streams.published.last().unwrap().clone();
    assert_eq!(last[0], TAG_BEACON);
    assert_eq!(u64::from_be_bytes(last[17..25].try_into().unwrap()), 1_200);
    let sent = r.sent().len();
    r.poll(150);
    assert_eq!(r.sent().len(), sent, "no report again without news");
    report(&mut r, 2, 1_400, 1_200);
    assert!(r.got.is_empty(), "node 3 has not said so");
    report(&mut r, 3, 1_500, 1_250);
    assert_eq!(r.texts(), ["2:a"]);
    assert_eq!(r.mode.stats_json()["commit"], true);
}

#[test]
fn a_node_waited_on_for_ten_beacon_intervals_without_a_stamp_is_reported_once() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(2, 1_100, 1);
    r.beacon(3, 1_100, 1);
    // Node 3's message stamped 2,000 waits for node 2 (the rig's beacon
    // interval is 100 ns).
    r.wall.set(2_000);
    r.data(3, 2_000, b"m");
    r.poll(2_000);
    assert!(r.got.is_empty());
    assert!(
        r.mode.poll_at().is_some_and(|t| t <= 2_500),
        "woken to check"
    );
    assert!(r.mode.silent(2_500).is_empty(), "half-way: stamps noted");
    assert!(r.mode.silent(2_900).is_empty(), "nine intervals");
    assert_eq!(r.mode.silent(3_000), vec![2], "node 3 is not waited on");
    assert!(r.mode.silent(3_500).is_empty(), "once per held message");
    assert_eq!(r.mode.stats_json()["silent_reports"], 1);
    // Node 2's beacon releases it; nothing is held, nothing reported.
    r.beacon(2, 3_100, 1);
    r.poll(3_100);
    assert_eq!(r.got.len(), 1);
    r.wall.set(9_000);
    assert!(r.mode.silent(9_000).is_empty());
}

#[test]
fn a_node_past_the_held_message_or_still_stamping_below_it_is_not_reported() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(2, 1_100, 1);
    r.beacon(3, 1_100, 1);
    r.wall.set(2_000);
    // Node 2's message at 2,500 waits for node 3; node 2 is past it.
    r.data(2, 2_500, b"m");
    r.poll(2_000);
    assert!(r.mode.silent(2_500).is_empty(), "half-way: stamps noted");
    // Node 3 beacons, still below the message (it lacks it): alive.
    r.beacon(3, 1_500, 1);
    assert!(r.mode.silent(3_000).is_empty());
    assert_eq!(r.mode.stats_json()["silent_reports"], 0);
}

#[test]
fn with_commit_no_report_goes_above_what_is_known_of_a_joining_views_place() {
    let mut r = Rig::committing(1, &[2, 3]);
    r.view(2, &[2, 3, 4], &[4]);
    // Node 4 joined in view 2 and stamps in it; nodes 2 and 3 have not
    // installed it yet: what they stamp before they do is not on their
    // streams to node 4, and may be above the view's place.
    r.beacon(4, 1_350, 2);
    r.beacon(4, 1_600, 2);
    r.beacon(2, 1_500, 1);
    r.data_in(3, 1_450, 1, b"not node 4's");
    r.beacon(3, 1_500, 1);
    assert_eq!(r.mode.barrier(), Some(1_500));
    assert_eq!(
        r.mode.report(),
        1_350,
        "this node has everything to 1,500, but the order above 1,350 may count node 4"
    );
    // Once the view's event has its place, the cap goes.
    r.beacon(2, 1_700, 2);
    r.beacon(3, 1_700, 2);
    r.poll(0);
    assert_eq!(r.mode.stats_json()["events_unplaced"], 0);
    assert_eq!(r.mode.report(), r.mode.barrier().unwrap());
}

#[test]
fn a_skipped_notice_comes_after_the_senders_held_messages_from_before_the_jump() {
    let mut r = Rig::new(1, &[2, 3]);
    r.beacon(3, 10, 1);
    r.data(2, 20, b"a");
    r.data(2, 30, b"b");
    assert!(r.got.is_empty(), "node 3 may still send below 20");
    // Node 2's stream jumps here: the notice waits behind "a" and "b".
    let placed = r.call(|m, _, out| m.place_skipped(2, b"S", out));
    assert!(placed);
    assert!(r.got.is_empty(), "not ahead of what it follows");
    r.data(2, 40, b"c");
    r.beacon(3, 100, 1);
    let notice_src = r.got[2].0;
    assert_eq!(
        r.texts(),
        ["2:a", "2:b", &format!("{notice_src}:S"), "2:c"],
        "the notice between node 2's messages from before and after the jump"
    );
    assert_eq!(r.got[2].2, To::AllBut(None), "a notice, not a view's event");
    // A node the barrier does not wait for: nothing of it is held.
    assert!(!r.call(|m, _, out| m.place_skipped(9, b"S", out)));
}

/// A beacon from `from` at `ts` reporting barrier `report`, and (from a
/// commit tree's root) the stable point `stable` of view `view`.
fn report_beacon(r: &mut Rig, from: NodeId, ts: u64, report: u64, stable: Option<(u64, u64)>) {
    root_beacon(r, from, ts, report, stable, &[]);
}

/// [`report_beacon`] whose stable point goes with the busy members `busy`.
fn root_beacon(
    r: &mut Rig,
    from: NodeId,
    ts: u64,
    report: u64,
    stable: Option<(u64, u64)>,
    busy: &[NodeId],
) {
    let mut buf = Vec::new();
    encode_beacon(
        ts,
        1,
        report,
        0,
        stable.map(|(v, p)| (v, p, busy)),
        &mut buf,
    );
    r.fragment(from, true, true, &buf);
}

#[test]
fn over_a_commit_tree_the_root_delivers_once_every_subtree_reported_and_says_so() {
    // Root 1, its children 2 and 3.
    let mut r = Rig::committing_over_a_tree(1, &[2, 3]);
    r.poll(0);
    r.data(2, 1_200, b"a");
    report_beacon(&mut r, 3, 1_300, 0, None);
    r.release_now();
    assert!(r.got.is_empty(), "ordered, but no member said it has it");
    let up = |r: &mut Rig, from, view, report| {
        let body = commit_tree::encode_up(view, report, &[]);
        r.call(|m, cx, out| m.on_link(cx, from, &body, out))
    };
    up(&mut r, 2, 1, 1_250).unwrap();
    assert!(r.got.is_empty(), "node 3's subtree has not reported");
    up(&mut r, 3, 2, 1_300).unwrap();
    assert!(r.got.is_empty(), "a report for another view");
    assert!(up(&mut r, 9, 1, 1_300).is_err(), "not a child");
    up(&mut r, 3, 1, 1_300).unwrap();
    assert_eq!(r.texts(), ["2:a"]);
    // The stable point goes out in a beacon: view 1, at 1,200 (this node's
    // own barrier, node 2's stamp).
    r.poll(1_000);
    let last = r.streams.published.last().unwrap().clone();
    assert_eq!((last[0], last.len()), (TAG_BEACON, STABLE_BEACON_LEN));
    let word = |at: usize| u64::from_be_bytes(last[at..at + 8].try_into().unwrap());
    assert_eq!((word(BEACON_LEN), word(BEACON_LEN + 8)), (1, 1_200));
    assert!(
        !r.outbox
            .iter()
            .any(|(_, m)| matches!(m, LinkMessage::Mode { .. })),
        "the root sends nothing up"
    );
    let tree = &r.mode.stats_json()["commit_tree"];
    assert_eq!(
        (tree["on"].as_bool(), tree["root"].as_bool()),
        (Some(true), Some(true))
    );
}

#[test]
fn a_commit_tree_member_reports_to_its_parent_and_takes_the_roots_stable_point() {
    // Root 1, its children 2 (this node) and 3.
    let mut r = Rig::committing_over_a_tree(2, &[1, 3]);
    r.poll(0);
    r.data(3, 1_200, b"a");
    report_beacon(&mut r, 1, 1_300, 0, None);
    r.poll(1_000);
    assert_eq!(ups(&r), [(1, 1, 1_200)], "its barrier, to its parent");
    report_beacon(&mut r, 3, 1_400, 0, Some((1, 1_200)));
    assert!(r.got.is_empty(), "a stable point from a node not the root");
    report_beacon(&mut r, 1, 1_500, 0, Some((2, 1_200)));
    assert!(r.got.is_empty(), "a stable point of another view");
    report_beacon(&mut r, 1, 1_600, 0, Some((1, 1_200)));
    assert_eq!(r.texts(), ["3:a"]);
}

/// The link messages `r`'s mode sent up the commit tree: (to, view, report).
fn ups(r: &Rig) -> Vec<(NodeId, u64, u64)> {
    r.outbox
        .iter()
        .filter_map(|(to, m)| match m {
            LinkMessage::Mode { body, .. } => {
                let (view, report, _) = commit_tree::decode_up(body).ok()?;
                Some((*to, view, report))
            }
            _ => None,
        })
        .collect()
}

/// Node 2 of a commit tree rooted at 1, whose children are 2 to 9; node
/// 2's are 10 and 11. Every node stamped past node 3's message "m", which
/// waits for the stable point from poll 1,000 on.
fn a_member_waiting_for_the_stable_point() -> Rig {
    let remote: Vec<NodeId> = [1].into_iter().chain(3..=11).collect();
    let mut r = Rig::committing_over_a_tree(2, &remote);
    for &n in &remote {
        r.beacon(n, 1_100, 1);
    }
    r.data(3, 1_200, b"m");
    for &n in &remote {
        r.beacon(n, 1_300, 1);
    }
    r.poll(1_000);
    r
}

/// Child `from`'s report for view 1 to `r`.
fn up_from(r: &mut Rig, from: NodeId, report: u64) {
    let body = commit_tree::encode_up(1, report, &[]);
    r.call(|m, cx, out| m.on_link(cx, from, &body, out))
        .unwrap();
}

#[test]
fn over_a_commit_tree_a_stuck_member_shows_it_lives_and_reports_a_silent_child() {
    let mut r = a_member_waiting_for_the_stable_point();
    assert!(r.got.is_empty(), "no stable point yet");
    assert!(ups(&r).is_empty(), "its children have not reported");
    // Stuck two intervals (the rig's is 100 ns): its last report again,
    // then every two intervals.
    r.poll(1_200);
    assert_eq!(ups(&r), [(1, 1, 0)]);
    r.poll(1_300);
    assert_eq!(ups(&r).len(), 1, "not before two intervals");
    assert!(r.mode.poll_at().is_some_and(|t| t <= 1_400));
    r.poll(1_400);
    assert_eq!(ups(&r).len(), 2);
    // Child 10 reports; child 11 never does; the root beacons.
    up_from(&mut r, 10, 1_150);
    assert!(r.mode.silent(1_500).is_empty(), "half-way: noted");
    up_from(&mut r, 10, 1_150);
    report_beacon(&mut r, 1, 1_700, 0, None);
    assert_eq!(
        r.mode.silent(2_000),
        vec![11],
        "the child that sent nothing"
    );
}

#[test]
fn over_a_commit_tree_a_stuck_member_reports_a_root_that_stopped_beaconing() {
    let mut r = a_member_waiting_for_the_stable_point();
    up_from(&mut r, 10, 1_150);
    up_from(&mut r, 11, 1_150);
    assert!(r.mode.silent(1_500).is_empty(), "half-way: noted");
    up_from(&mut r, 10, 1_250);
    up_from(&mut r, 11, 1_250);
    assert_eq!(r.mode.silent(2_000), vec![1], "the root, its stamps still");
}

#[test]
fn a_stuck_commit_tree_root_beacons_every_interval() {
    let remote: Vec<NodeId> = (2..=11).collect();
    let mut r = Rig::committing_over_a_tree(1, &remote);
    r.data(3, 1_200, b"m");
    r.poll(1_000);
    let before = r.sent().len();
    for t in [1_200, 1_300, 1_400, 1_500] {
        r.poll(t);
    }
    assert!(r.got.is_empty());
    assert_eq!(r.sent().len(), before + 4, "{:?}", r.sent());
}

#[test]
fn over_the_tree_a_busy_member_says_so_and_its_claim_follows_once_all_is_acknowledged() {
    // Root 1, its children 2 (this node) and 3; the claims climb the tree.
    let mut r = Rig::claiming_over_a_tree(2, &[1, 3]);
    r.poll(0);
    r.beacon(1, 1_010, 1);
    r.beacon(3, 1_020, 1);
    r.poll(0); // (its stamp owed to the view, past the others')
               // The root's first point: from here the claims cover the view.
    root_beacon(&mut r, 1, 1_030, 0, Some((1, 1_025)), &[]);
    r.wall.set(1_100);
    r.streams.unacked = 1;
    assert_eq!(r.publish(b"x"), Published::Sent);
    r.data(3, 1_150, b"y");
    let sent = r.sent().len();
    r.wall.set(1_200);
    r.poll(1_000);
    assert_eq!(
        ups(&r),
        [(1, 1, u64::MAX)],
        "busy: no claim that would wait for the acknowledgments"
    );
    assert_eq!(last_up_busy(&r), [2], "its own stamps bound it");
    assert_eq!(
        r.sent().len(),
        sent + 1,
        "busy, it stamps for node 3's message: its own stamps bound it"
    );
    r.streams.unacked = 0;
    r.poll(1_010);
    assert_eq!(ups(&r).len(), 1, "at most one up a quarter interval");
    r.poll(1_025);
    assert_eq!(
        ups(&r)[1],
        (1, 1, 1_201),
        "all acknowledged: the clock's floor (past its beacon's stamp)"
    );
    assert!(last_up_busy(&r).is_empty());
    assert!(r.got.is_empty(), "the view's least claim is not known yet");
    // The root's point, node 3 busy: its stamps (1,150) bound it, and the
    // root's own (1,040) would not let "x" through. ("z" is stamped past
    // the clock's floor, 1,201.)
    assert_eq!(r.publish(b"z"), Published::Sent);
    root_beacon(&mut r, 1, 1_040, 0, Some((1, 1_250)), &[3]);
    assert_eq!(
        r.texts(),
        ["2:x", "3:y"],
        "not \"z\": node 3 may still send below it"
    );
    r.beacon(3, 1_210, 1);
    assert_eq!(r.texts(), ["2:x", "3:y", "2:z"]);
    // Idle (all acknowledged) and covered by the root's point: a message
    // of node 3's waits on its claim, not on its stamps.
    r.poll(1_100);
    let sent = r.sent().len();
    r.data(3, 1_300, b"w");
    r.poll(1_300);
    assert_eq!(r.sent().len(), sent, "no beacon for node 3's message");
    let tree = &r.mode.stats_json()["commit_tree"];
    assert_eq!(
        (&tree["carries"], &tree["busy"]),
        (&json!("claims"), &json!(1))
    );
}

/// The busy members of the last report `r`'s mode sent up the tree.
fn last_up_busy(r: &Rig) -> Vec<NodeId> {
    r.outbox
        .iter()
        .rev()
        .find_map(|(_, m)| match m {
            LinkMessage::Mode { body, .. } => commit_tree::decode_up(body).ok().map(|u| u.2),
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn over_the_tree_the_root_delivers_at_the_least_claim_and_multicasts_it() {
    let mut r = Rig::claiming_over_a_tree(1, &[2, 3]);
    r.poll(0);
    r.data(2, 1_200, b"a");
    r.release_now();
    assert!(r.got.is_empty());
    r.wall.set(1_500);
    up_from(&mut r, 2, 1_250);
    assert!(r.got.is_empty(), "node 3 has not claimed");
    up_from(&mut r, 3, 1_300);
    assert_eq!(
        r.texts(),
        ["2:a"],
        "its own claim passed 1,200 on seeing it"
    );
    r.poll(1_000);
    let last = r.streams.published.last().unwrap().clone();
    assert_eq!((last[0], last.len()), (TAG_BEACON, STABLE_BEACON_LEN));
    let word = |at: usize| u64::from_be_bytes(last[at..at + 8].try_into().unwrap());
    assert_eq!(
        (word(BEACON_LEN), word(BEACON_LEN + 8)),
        (1, 1_250),
        "view 1's least claim, node 2's"
    );
}

#[test]
fn over_the_tree_a_stuck_member_suspects_no_member_for_its_missing_stamps() {
    // Node 2 (children 10 and 11) holds node 3's message; nodes 4 to 9
    // are idle and send nothing: their claims climb other branches.
    let remote: Vec<NodeId> = [1].into_iter().chain(3..=11).collect();
    let mut r = Rig::claiming_over_a_tree(2, &remote);
    for &n in &remote {
        r.beacon(n, 1_100, 1); // each one's stamp of the view
    }
    r.data(3, 1_200, b"m");
    r.poll(1_000);
    up_from(&mut r, 10, 1_250);
    up_from(&mut r, 11, 1_250);
    report_beacon(&mut r, 1, 1_300, 0, Some((1, 1_150)));
    assert!(r.mode.silent(1_500).is_empty(), "half-way: noted");
    up_from(&mut r, 10, 1_260);
    up_from(&mut r, 11, 1_260);
    report_beacon(&mut r, 1, 1_400, 0, Some((1, 1_150)));
    assert!(
        r.mode.silent(2_000).is_empty(),
        "children and root live; the others owe no stamp"
    );
    assert!(r.got.is_empty(), "still waiting for the root's point");
}
