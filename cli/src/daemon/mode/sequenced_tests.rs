//! Unit tests of the sequenced mode (`sequenced`): framing, a member's
//! forward and echo, the root's queue and what it waits for, root moves,
//! a node's own messages from before its rejoin.

use super::*;
use crate::daemon::mode::fake::Fake;
use mcast_engine::StreamStart;
use mcast_ipc::RecordHeader;

type Got = Vec<(RecordHeader, Vec<u8>, Option<ClientId>)>;

fn cx<'a>(
    node: NodeId,
    remote: &'a [NodeId],
    streams: &'a mut Fake,
    outbox: &'a mut Vec<(NodeId, LinkMessage)>,
) -> ModeCx<'a> {
    ModeCx {
        group: 3,
        node,
        epoch: 7,
        remote,
        root: Some(1),
        settled: true,
        view_epoch: 1,
        streams,
        outbox,
    }
}

fn frag(stream: NodeId, first: bool, last: bool, data: &[u8]) -> Fragment<'_> {
    Fragment {
        group: 3,
        stream,
        seq: Seq(0),
        first,
        last,
        data,
    }
}

fn framed(tag: u8, node: NodeId, seq: u64, msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let o = Origin {
        node,
        epoch: 7,
        seq,
    };
    encode(tag, o, msg, &mut v);
    v
}

/// A FORWARD of node `node`'s message `seq`, its oldest on the way, sent
/// in the first view.
fn forward(node: NodeId, seq: u64, msg: &[u8]) -> Vec<u8> {
    let o = Origin {
        node,
        epoch: 7,
        seq,
    };
    encode_forward(o, seq, 1, msg)
}

/// A READY or HANDOFF for view epoch `epoch`.
fn word(tag: u8, epoch: u64) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&epoch.to_be_bytes());
    v
}

/// The link messages in `outbox`: (to, tag).
fn tags(outbox: &[(NodeId, LinkMessage)]) -> Vec<(NodeId, u8)> {
    outbox
        .iter()
        .map(|(n, m)| match m {
            LinkMessage::Mode { body, .. } => (*n, body[0]),
            other => (*n, format!("{other:?}").as_bytes()[0]),
        })
        .collect()
}

#[test]
fn the_header_round_trips_and_a_short_or_foreign_buffer_is_refused() {
    let v = framed(TAG_DATA, 4, 1 << 40, b"hi");
    assert_eq!(v.len(), HEADER_LEN + 2);
    let (o, msg) = decode(TAG_DATA, &v).unwrap();
    assert_eq!((o.node, o.epoch, o.seq, msg), (4, 7, 1 << 40, &b"hi"[..]));
    assert!(decode(TAG_FORWARD, &v).is_none());
    assert!(decode(TAG_DATA, &v[..HEADER_LEN - 1]).is_none());
    // A FORWARD carries its base, never past its own number, and its view.
    let o = Origin {
        node: 4,
        epoch: 7,
        seq: 9,
    };
    let f = encode_forward(o, 5, 1 << 33, b"m");
    let want = Forward {
        origin: o,
        base: 5,
        view: 1 << 33,
        msg: b"m",
    };
    assert_eq!(decode_forward(&f), Some(want));
    assert!(decode_forward(&encode_forward(o, 10, 1, b"m")).is_none());
    assert!(decode_forward(&f[..HEADER_LEN + 15]).is_none());
}

#[test]
fn a_member_forwards_to_the_root_and_its_publisher_does_not_get_its_message_back() {
    let mut mode = Sequenced::new(2, 7, Seq(0));
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    let remote = [1, 3];
    let mut c = cx(2, &remote, &mut streams, &mut outbox);
    mode.members_changed(&mut c, &[]).unwrap();
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    assert_eq!(
        mode.publish(&mut c, ClientId(5), b"a", &mut out).unwrap(),
        Published::Sent
    );
    // READY to the root for the first view, then the message, framed
    // with this node's origin; nothing delivered yet.
    match &c.outbox[..] {
        [(
            1,
            LinkMessage::Mode {
                group: 3,
                body: ready,
            },
        ), (1, LinkMessage::Mode { group: 3, body })] => {
            assert_eq!(*ready, word(TAG_READY, 1));
            assert_eq!(*body, forward(2, 0, b"a"));
        }
        other => panic!("{other:?}"),
    }
    // The root's stream: another's message, then this one back, in two fragments.
    mode.deliver(
        &frag(1, true, true, &framed(TAG_DATA, 3, 0, b"x")),
        &mut out,
    );
    let back = framed(TAG_DATA, 2, 0, b"a");
    mode.deliver(&frag(1, true, false, &back), &mut out);
    mode.deliver(&frag(1, false, true, b"-tail"), &mut out);
    // Delivered again (a new root's copy): skipped whole.
    mode.deliver(&frag(1, true, false, &back), &mut out);
    mode.deliver(&frag(1, false, true, b"-tail"), &mut out);
    let got: Vec<_> = got
        .iter()
        .map(|(h, d, e)| (h.source, h.flags, d.clone(), *e))
        .collect();
    let (first, last) = (mcast_ipc::ring::FIRST, mcast_ipc::ring::LAST);
    assert_eq!(
        got,
        [
            (3, first | last, b"x".to_vec(), None),
            (2, first, b"a".to_vec(), Some(ClientId(5))),
            (2, last, b"-tail".to_vec(), Some(ClientId(5))),
        ]
    );
    let s = mode.stats_json();
    assert_eq!(
        (s["pending"].as_u64(), s["duplicates"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(mode.send_idle(&streams, 3));
}

#[test]
fn the_root_multicasts_forwards_in_order_and_its_own_wait_behind_them() {
    let mut mode = Sequenced::new(1, 7, Seq(4));
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    let remote = [2, 3];
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    let mut full = Fake {
        full: true,
        ..Fake::default()
    };
    {
        let mut c = cx(1, &remote, &mut streams, &mut outbox);
        mode.members_changed(&mut c, &[]).unwrap();
        // Until both members are READY, and while a flush runs here,
        // forwards wait, and so does its own.
        mode.on_link(&mut c, 2, &word(TAG_READY, 1), &mut out)
            .unwrap();
        c.settled = false;
        mode.on_link(&mut c, 2, &forward(2, 0, b"f0"), &mut out)
            .unwrap();
        assert!(mode.wants_round());
        assert_eq!(
            mode.publish(&mut c, ClientId(9), b"own", &mut out).unwrap(),
            Published::Sent
        );
        c.settled = true;
        assert!(
            !mode.poll(&mut c, 0, &mut out).unwrap(),
            "node 3 is not READY"
        );
        // A READY of an older view does not count; this view's does.
        mode.on_link(&mut c, 3, &word(TAG_READY, 0), &mut out)
            .unwrap();
        assert!(!mode.poll(&mut c, 0, &mut out).unwrap());
        mode.on_link(&mut c, 3, &word(TAG_READY, 1), &mut out)
            .unwrap();
        // A forward repeated, one claiming another node, and a malformed one.
        mode.on_link(&mut c, 2, &forward(2, 0, b"f0"), &mut out)
            .unwrap();
        assert!(mode
            .on_link(&mut c, 3, &forward(2, 1, b"no"), &mut out)
            .is_err());
        assert!(mode.on_link(&mut c, 3, b"F", &mut out).is_err());
        // The window full: its own waits its turn in the queue.
        c.streams = &mut full;
        assert_eq!(
            mode.publish(&mut c, ClientId(9), b"own2", &mut out)
                .unwrap(),
            Published::Sent
        );
        assert!(mode.wants_round());
    }
    assert_eq!(streams.opened, [(vec![2, 3], at_seq(4))]);
    assert_eq!(
        streams.published,
        [
            framed(TAG_DATA, 2, 0, b"f0"),
            framed(TAG_DATA, 1, 0, b"own")
        ]
    );
    let got: Vec<_> = got
        .iter()
        .map(|(h, d, e)| (h.source, d.clone(), *e))
        .collect();
    assert_eq!(
        got,
        [
            (2, b"f0".to_vec(), None),
            (1, b"own".to_vec(), Some(ClientId(9))),
        ]
    );
    assert_eq!(mode.stats_json()["queued"], 1);
}

#[test]
fn a_new_root_is_sent_what_is_still_on_its_way_and_a_full_pending_list_blocks() {
    let mut mode = Sequenced::new(2, 7, Seq(0));
    let (mut streams, mut outbox): (Fake, Vec<_>) = Default::default();
    let remote = [1, 3];
    let mut c = cx(2, &remote, &mut streams, &mut outbox);
    mode.members_changed(&mut c, &[]).unwrap();
    let mut out = |_: RecordHeader, _: &[u8], _: To| {};
    for _ in 0..MAX_PENDING {
        assert_eq!(
            mode.publish(&mut c, ClientId(5), b"m", &mut out).unwrap(),
            Published::Sent
        );
    }
    assert_eq!(
        mode.publish(&mut c, ClientId(5), b"m", &mut out).unwrap(),
        Published::WouldBlock
    );
    c.outbox.clear();
    // Root 1 departs: node 3 is the root, and gets all of them again,
    // then READY for this view.
    let remote = [3];
    c.remote = &remote;
    c.root = Some(3);
    c.view_epoch = 2;
    mode.members_changed(&mut c, &[]).unwrap();
    assert_eq!(c.outbox.len(), MAX_PENDING + 1);
    assert!(c.outbox.iter().all(|(to, _)| *to == 3));
    assert_eq!(tags(c.outbox).last(), Some(&(3, TAG_READY)));
    assert!(!mode.send_idle(c.streams, 3));
    // Node 2 becomes the root while node 3 stays: its own messages wait
    // to be multicast until node 3 has handed off (all of node 3's
    // stream delivered everywhere) and is READY.
    c.outbox.clear();
    c.root = Some(2);
    c.view_epoch = 3;
    mode.members_changed(&mut c, &[]).unwrap();
    assert!(mode.wants_round() && c.outbox.is_empty());
    let s = mode.stats_json();
    assert_eq!(
        (s["queued"].as_u64(), &s["awaiting"]),
        (Some(1024), &json!([3]))
    );
    // A HANDOFF of an earlier term does not count.
    mode.on_link(&mut c, 3, &word(TAG_HANDOFF, 2), &mut out)
        .unwrap();
    mode.on_link(&mut c, 3, &word(TAG_READY, 3), &mut out)
        .unwrap();
    assert_eq!(mode.stats_json()["awaiting"], json!([3]));
    mode.on_link(&mut c, 3, &word(TAG_HANDOFF, 3), &mut out)
        .unwrap();
    assert_eq!(mode.stats_json()["queued"], 0, "all multicast");
    // It stops being the root: it hands off once its stream is idle.
    c.outbox.clear();
    c.root = Some(3);
    c.view_epoch = 4;
    mode.members_changed(&mut c, &[]).unwrap();
    assert_eq!(tags(c.outbox), [(3, TAG_HANDOFF), (3, TAG_READY)]);
}

#[test]
fn its_own_messages_from_before_a_rejoin_are_not_delivered_here() {
    // Node 2 in incarnation 7; the root multicasts one of node 2's
    // messages from incarnation 6 (before node 2 was declared failed).
    let mut mode = Sequenced::new(2, 7, Seq(0));
    let mut got: Got = Vec::new();
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    let old = Origin {
        node: 2,
        epoch: 6,
        seq: 40,
    };
    let mut v = Vec::new();
    encode(TAG_DATA, old, b"before", &mut v);
    mode.deliver(&frag(1, true, false, &v), &mut out);
    mode.deliver(&frag(1, false, true, b"-rest"), &mut out);
    // Another node's message of an older incarnation is delivered.
    encode(TAG_DATA, Origin { node: 3, ..old }, b"theirs", &mut v);
    mode.deliver(&frag(1, true, true, &v), &mut out);
    let got: Vec<_> = got.iter().map(|(h, d, _)| (h.source, d.clone())).collect();
    assert_eq!(got, [(3, b"theirs".to_vec())]);
    assert_eq!(mode.stats_json()["stale_own"], 1);
}

#[test]
fn what_a_paused_root_delivered_before_the_rejoin_is_not_delivered_again() {
    // Node 2 is the root; paused past the failure detector, it wakes and
    // sequences node 3's forwards 0-2 that waited for it, delivering them
    // here, before it learns it was declared failed.
    let mut root = Sequenced::new(2, 7, Seq(0));
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    let remote = [1, 3];
    {
        let mut c = cx(2, &remote, &mut streams, &mut outbox);
        c.root = Some(2);
        let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
        root.members_changed(&mut c, &[]).unwrap();
        for n in [1, 3] {
            root.on_link(&mut c, n, &word(TAG_READY, 1), &mut out)
                .unwrap();
        }
        for seq in 0..3 {
            root.on_link(&mut c, 3, &forward(3, seq, &[b'0' + seq as u8]), &mut out)
                .unwrap();
        }
    }
    let bodies = |got: &Got| -> Vec<u8> { got.iter().map(|(_, d, _)| d[0]).collect() };
    assert_eq!(bodies(&got), b"012");
    // The rejoin: a new incarnation carries the group again with what the
    // old one delivered. Node 1's stream, the new root's, brings 0-4 of
    // node 3 (node 3 sent its unechoed ones to node 1): only 3 and 4 are
    // new here.
    let mut mode = Sequenced::new(2, 8, Seq(0));
    mode.recall_delivered(root.delivered().unwrap());
    let mut got: Got = Vec::new();
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    for seq in 0..5 {
        mode.deliver(
            &frag(
                1,
                true,
                true,
                &framed(TAG_DATA, 3, seq, &[b'0' + seq as u8]),
            ),
            &mut out,
        );
    }
    assert_eq!(bodies(&got), b"34");
    assert_eq!(mode.stats_json()["recalled"], 3);
    // Should this node become the root before node 1 sequenced them, it
    // multicasts them for the others but does not deliver them here.
    let mut mode = Sequenced::new(2, 8, Seq(0));
    mode.recall_delivered(root.delivered().unwrap());
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    {
        let mut c = cx(2, &remote, &mut streams, &mut outbox);
        c.root = Some(2);
        let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
        mode.members_changed(&mut c, &[]).unwrap();
        for n in [1, 3] {
            mode.on_link(&mut c, n, &word(TAG_READY, 1), &mut out)
                .unwrap();
        }
        for seq in 1..4 {
            mode.on_link(
                &mut c,
                3,
                &encode_forward(
                    Origin {
                        node: 3,
                        epoch: 7,
                        seq,
                    },
                    1,
                    1,
                    &[b'0' + seq as u8],
                ),
                &mut out,
            )
            .unwrap();
        }
    }
    assert_eq!(streams.published.len(), 3);
    assert_eq!(bodies(&got), b"3", "only message 3 is new here");
}

fn at_seq(seq: u32) -> StreamStart {
    StreamStart {
        epoch: 7,
        seq: Seq(seq),
    }
}

/// A FORWARD with every field given.
fn forward_of(o: (NodeId, u32, u64), base: u64, view: u64, msg: &[u8]) -> Vec<u8> {
    let (node, epoch, seq) = o;
    encode_forward(Origin { node, epoch, seq }, base, view, msg)
}

#[test]
fn a_root_holds_a_forward_of_a_view_it_lacks_and_drops_an_old_incarnations() {
    let mut mode = Sequenced::new(1, 7, Seq(0));
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    let mut c = cx(1, &[2, 3], &mut streams, &mut outbox);
    mode.members_changed(&mut c, &[]).unwrap();
    for n in [2, 3] {
        mode.on_link(&mut c, n, &word(TAG_READY, 1), &mut out)
            .unwrap();
    }
    // Node 4 joined in view 2, which has not reached the root: sequenced
    // now, it would come before the root's stream starts for node 4.
    mode.on_link(&mut c, 4, &forward_of((4, 1, 0), 0, 2, b"new"), &mut out)
        .unwrap();
    // Node 3's message 5, sent after its 4 (which has not come): it waits.
    mode.on_link(&mut c, 3, &forward_of((3, 7, 5), 4, 1, b"old"), &mut out)
        .unwrap();
    assert_eq!(mode.stats_json()["sequenced"], 0);
    c.view_epoch = 2;
    c.remote = &[2, 3, 4];
    mode.members_changed(&mut c, &[4]).unwrap();
    mode.poll(&mut c, 0, &mut out).unwrap();
    assert_eq!(
        mode.stats_json()["sequenced"],
        1,
        "node 4's, once the view has it"
    );
    // Node 3 leaves (evicted) and comes back as a new incarnation before
    // the root could multicast its waiting message (no READY yet): that
    // one is lost with the old incarnation, not sequenced after the new
    // one's.
    c.view_epoch = 3;
    c.remote = &[2, 4];
    mode.members_changed(&mut c, &[]).unwrap();
    c.view_epoch = 4;
    c.remote = &[2, 3, 4];
    mode.members_changed(&mut c, &[3]).unwrap();
    let s = mode.stats_json();
    assert_eq!(
        (s["stale"].as_u64(), s["queued"].as_u64()),
        (Some(1), Some(0))
    );
    for n in [2, 4] {
        mode.on_link(&mut c, n, &word(TAG_READY, 4), &mut out)
            .unwrap();
    }
    mode.on_link(
        &mut c,
        3,
        &forward_of((3, 8, 0), 0, 4, b"3 again"),
        &mut out,
    )
    .unwrap();
    // A late one of the old incarnation, after the new one's: dropped.
    mode.on_link(&mut c, 3, &forward_of((3, 7, 6), 6, 1, b"late"), &mut out)
        .unwrap();
    mode.poll(&mut c, 0, &mut out).unwrap();
    assert_eq!(
        streams.published,
        [
            framed_as(TAG_DATA, (4, 1, 0), b"new"),
            framed_as(TAG_DATA, (3, 8, 0), b"3 again"),
        ]
    );
    let s = mode.stats_json();
    assert_eq!(
        (s["stale"].as_u64(), s["queued"].as_u64()),
        (Some(2), Some(0))
    );
}

/// [`framed`] of any origin.
fn framed_as(tag: u8, o: (NodeId, u32, u64), msg: &[u8]) -> Vec<u8> {
    let (node, epoch, seq) = o;
    let mut v = Vec::new();
    encode(tag, Origin { node, epoch, seq }, msg, &mut v);
    v
}

#[test]
fn a_member_sends_the_new_root_only_what_the_former_root_did_not_multicast() {
    let mut mode = Sequenced::new(2, 7, Seq(0));
    let (mut streams, mut outbox, mut got): (Fake, Vec<_>, Got) = Default::default();
    let mut out = |h: RecordHeader, d: &[u8], e: To| got.push((h, d.to_vec(), e.except()));
    let mut c = cx(2, &[1, 3], &mut streams, &mut outbox);
    mode.members_changed(&mut c, &[]).unwrap();
    mode.publish(&mut c, ClientId(5), b"a", &mut out).unwrap();
    c.outbox.clear();
    // The root moves to node 3; node 1 stays, and its stream may still
    // hold "a" (a root that joined later would not know it, and would
    // multicast it again as new): nothing goes to node 3 until node 1 has
    // handed off, not even what is published meanwhile.
    c.root = Some(3);
    c.view_epoch = 2;
    mode.members_changed(&mut c, &[]).unwrap();
    mode.publish(&mut c, ClientId(5), b"b", &mut out).unwrap();
    assert!(c.outbox.is_empty() && mode.wants_round());
    mode.deliver(
        &frag(1, true, true, &framed(TAG_DATA, 2, 0, b"a")),
        &mut out,
    );
    mode.poll(&mut c, 0, &mut out).unwrap();
    assert!(c.outbox.is_empty());
    mode.on_link(&mut c, 1, &word(TAG_HANDOFF, 2), &mut out)
        .unwrap();
    assert_eq!(tags(c.outbox), [(3, TAG_FORWARD), (3, TAG_READY)]);
    match &c.outbox[0].1 {
        LinkMessage::Mode { body, .. } => {
            assert_eq!(*body, forward_of((2, 7, 1), 1, 2, b"b"))
        }
        other => panic!("{other:?}"),
    }
    let s = mode.stats_json();
    assert_eq!(
        (s["forwarded"].as_u64(), s["resent"].as_u64()),
        (Some(1), Some(1))
    );
}
