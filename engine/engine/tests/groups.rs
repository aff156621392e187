//! Several groups on one engine, over the in-memory segment: different
//! members per group, views that change while data flows (late join, leave),
//! paused delivery, unicast links that accept any sender and restart with a
//! newer epoch, fragment delivery to a sink, and removal that frees every
//! frame. One thread drives all engines, so each test is deterministic in
//! what it checks. No privileges needed.

use std::sync::Arc;

use mcast_engine::{
    sys, Accept, Algorithm, Engine, EngineConfig, Fragment, GroupOptions, MemorySegment,
    MemoryTransport, Message, ProtocolConfig, StreamStart,
};
use mcast_wire::{node_mac, GroupId, NodeId, Seq};

const FRAMES: u32 = 2048;

fn engine(seg: &Arc<MemorySegment>, node: NodeId) -> Engine<MemoryTransport> {
    let mut c = EngineConfig::new(node, 0, Algorithm::Mak);
    c.peers = (1..=4).map(|n| (n, node_mac(n))).collect();
    c.max_message = 64 << 10;
    Engine::new(seg.port(node_mac(node), FRAMES, 2048, 4096), c).expect("engine")
}

fn opts(algorithm: Algorithm) -> GroupOptions {
    GroupOptions {
        algorithm,
        protocol: ProtocolConfig::default(),
        window_frames: 256,
        subscribe: true,
        accept_senders: Accept::Opened,
        max_queued_frames: 512,
        batch_messages: true,
    }
}

/// `opts`, one message per frame: for tests that count positions in frames.
fn unbatched(algorithm: Algorithm) -> GroupOptions {
    GroupOptions {
        batch_messages: false,
        ..opts(algorithm)
    }
}

fn start(seq: u32) -> StreamStart {
    StreamStart {
        epoch: 1,
        seq: Seq(seq),
    }
}

fn msg(group: GroupId, i: u32) -> Vec<u8> {
    let mut m = format!("g{group}-m{i}-").into_bytes();
    m.resize(40 + (i as usize % 200), b'x');
    m
}

/// Polls every engine until `done` holds (or fails after 20 s); collects
/// the messages each engine received, by index.
fn pump(
    engines: &mut [&mut Engine<MemoryTransport>],
    got: &mut [Vec<Message>],
    mut done: impl FnMut(&[&mut Engine<MemoryTransport>], &[Vec<Message>]) -> bool,
) {
    let deadline = sys::monotonic_ns() + 20_000_000_000;
    loop {
        for (i, e) in engines.iter_mut().enumerate() {
            e.poll().expect("poll");
            while let Some(m) = e.recv_message() {
                got[i].push(m);
            }
        }
        if done(engines, got) {
            return;
        }
        assert!(sys::monotonic_ns() < deadline, "no progress in 20 s");
    }
}

fn publish_all(e: &mut Engine<MemoryTransport>, group: GroupId, range: std::ops::Range<u32>) {
    for i in range {
        let deadline = sys::monotonic_ns() + 10_000_000_000;
        loop {
            match e.publish_in(group, &msg(group, i)) {
                Ok(()) => break,
                Err(mcast_engine::PublishError::WouldBlock) => {
                    e.poll().expect("poll");
                    assert!(sys::monotonic_ns() < deadline, "publish blocked for 10 s");
                }
                Err(err) => panic!("publish: {err}"),
            }
        }
    }
}

fn datas(got: &[Message], group: GroupId) -> Vec<Vec<u8>> {
    got.iter()
        .filter(|m| m.group == group)
        .map(|m| m.data.clone())
        .collect()
}

fn expected(group: GroupId, range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    range.map(|i| msg(group, i)).collect()
}

fn check_clean(e: Engine<MemoryTransport>) {
    e.check_conservation().expect("conservation while running");
    let (report, _) = e.shutdown().expect("shutdown");
    assert_eq!(report.ledger.transport.held, 0);
}

#[test]
fn two_groups_with_different_members_share_one_engine() {
    let seg = MemorySegment::new();
    let (mut a, mut b, mut c) = (engine(&seg, 1), engine(&seg, 2), engine(&seg, 3));
    // Group 10: node 1 sends to 2 and 3. Group 20: node 2 sends to 3 only.
    for e in [&mut a, &mut b, &mut c] {
        e.add_group(10, opts(Algorithm::Mak)).unwrap();
    }
    b.add_group(20, opts(Algorithm::Mak)).unwrap();
    c.add_group(20, opts(Algorithm::Mak)).unwrap();
    a.open_sender_in(10, &[2, 3], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    c.open_receiver_in(10, 1, start(0)).unwrap();
    b.open_sender_in(20, &[3], start(0)).unwrap();
    c.open_receiver_in(20, 2, start(0)).unwrap();
    // A third node outside group 20 never sees it.
    assert_eq!(a.receivers_in(20), Vec::<NodeId>::new());

    let mut got = vec![Vec::new(), Vec::new(), Vec::new()];
    publish_all(&mut a, 10, 0..400);
    publish_all(&mut b, 20, 0..300);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        g[2].len() == 700 && g[1].len() == 400 && e[0].send_idle() && e[1].send_idle()
    });
    assert_eq!(datas(&got[1], 10), expected(10, 0..400));
    assert_eq!(datas(&got[2], 10), expected(10, 0..400));
    assert_eq!(datas(&got[2], 20), expected(20, 0..300));
    assert!(datas(&got[1], 20).is_empty() && got[0].is_empty());
    assert_eq!(c.stats().groups.len(), 2);
    // Frames of group 20 reach node 1 only if it subscribed: it did not.
    assert_eq!(a.stats().engine.rx_other_group, 0);
    for e in [a, b, c] {
        check_clean(e);
    }
}

#[test]
fn a_late_joiner_starts_at_the_senders_position_and_a_leaver_holds_nothing_back() {
    let seg = MemorySegment::new();
    let (mut a, mut b, mut c) = (engine(&seg, 1), engine(&seg, 2), engine(&seg, 3));
    for e in [&mut a, &mut b] {
        e.add_group(10, unbatched(Algorithm::Mak)).unwrap();
    }
    a.open_sender_in(10, &[2], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    let mut got = vec![Vec::new(), Vec::new(), Vec::new()];
    publish_all(&mut a, 10, 0..150);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, _| {
        e[0].send_idle()
    });

    // Node 3 joins: the sender names where it starts; node 3 opens there.
    c.add_group(10, unbatched(Algorithm::Mak)).unwrap();
    let at = a.set_members_in(10, &[2, 3]).unwrap();
    assert_eq!(
        at,
        start(150),
        "the next frame after 150 one-frame messages"
    );
    c.open_receiver_in(10, 1, at).unwrap();
    publish_all(&mut a, 10, 150..300);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        e[0].send_idle() && g[2].len() == 150
    });
    assert_eq!(datas(&got[1], 10), expected(10, 0..300));
    assert_eq!(
        datas(&got[2], 10),
        expected(10, 150..300),
        "from its join point on"
    );

    // Node 3 leaves without a word; once the view drops it, the sender no
    // longer waits for it.
    c.remove_group(10).unwrap();
    a.set_members_in(10, &[2]).unwrap();
    publish_all(&mut a, 10, 300..400);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        e[0].send_idle() && g[1].len() == 400
    });
    assert_eq!(got[2].len(), 150, "nothing after it left");
    for e in [a, b, c] {
        check_clean(e);
    }
}

#[test]
fn a_member_that_lost_its_stream_resumes_where_it_acknowledged() {
    let seg = MemorySegment::new();
    let (mut a, mut b, mut c) = (engine(&seg, 1), engine(&seg, 2), engine(&seg, 3));
    for e in [&mut a, &mut b, &mut c] {
        e.add_group(10, unbatched(Algorithm::Mak)).unwrap();
    }
    a.open_sender_in(10, &[2, 3], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    c.open_receiver_in(10, 1, start(0)).unwrap();
    let mut got = vec![Vec::new(), Vec::new(), Vec::new()];
    publish_all(&mut a, 10, 0..100);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        e[0].send_idle() && g[2].len() == 100
    });

    // Node 3 drops its stream (it stopped carrying the group) while node 1
    // keeps counting it a member: node 1 cannot finish what it sends next.
    c.remove_group(10).unwrap();
    c.add_group(10, unbatched(Algorithm::Mak)).unwrap();
    publish_all(&mut a, 10, 100..200);
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |_, g| {
        g[1].len() == 200
    });
    assert!(!a.send_idle(), "waiting for node 3's acknowledgments");

    // Node 3 asks; node 1 names the first frame node 3 has not acknowledged
    // (it holds everything from there), and node 3 gets the rest once.
    let at = a.resume_member_in(10, 3, &[2, 3]).unwrap();
    assert_eq!(at, start(100));
    c.open_receiver_in(10, 1, at).unwrap();
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        e[0].send_idle() && g[2].len() == 200
    });
    assert_eq!(datas(&got[2], 10), expected(10, 0..200));
    assert!(a.resume_member_in(11, 3, &[2, 3]).is_err(), "no such group");
    for e in [a, b, c] {
        check_clean(e);
    }
}

#[test]
fn a_paused_group_holds_its_sender_back_and_catches_up_on_resume() {
    let seg = MemorySegment::new();
    let (mut a, mut b) = (engine(&seg, 1), engine(&seg, 2));
    for e in [&mut a, &mut b] {
        e.add_group(10, opts(Algorithm::Mak)).unwrap();
    }
    a.open_sender_in(10, &[2], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    b.set_paused(10, true).unwrap();
    let mut got = vec![Vec::new(), Vec::new()];
    publish_all(&mut a, 10, 0..100);
    // Run a while: the paused receiver drops everything, so nothing is
    // delivered and the sender cannot finish.
    pump(&mut [&mut a, &mut b], &mut got, |e, _| {
        e[1].stats().engine.rx_paused >= 100
    });
    assert!(got[1].is_empty());
    assert!(!a.send_idle(), "unacknowledged frames hold the sender");
    b.set_paused(10, false).unwrap();
    pump(&mut [&mut a, &mut b], &mut got, |e, g| {
        g[1].len() == 100 && e[0].send_idle()
    });
    assert_eq!(datas(&got[1], 10), expected(10, 0..100));
    for e in [a, b] {
        check_clean(e);
    }
}

#[test]
fn a_unicast_link_accepts_its_peer_and_restarts_with_a_newer_epoch() {
    let seg = MemorySegment::new();
    let (mut a, mut b) = (engine(&seg, 1), engine(&seg, 2));
    // Node 2's inbox: Go-Back-N (the iterative baseline to one member),
    // unicast, receive streams opened by the first frame.
    let inbox = 0x8000_0002;
    let link = GroupOptions {
        subscribe: false,
        accept_senders: Accept::Any,
        ..opts(Algorithm::Iterative)
    };
    a.add_group(inbox, link.clone()).unwrap();
    b.add_group(inbox, link).unwrap();
    a.open_sender_in(inbox, &[2], start(0)).unwrap();
    let mut got = vec![Vec::new(), Vec::new()];
    publish_all(&mut a, inbox, 0..50);
    pump(&mut [&mut a, &mut b], &mut got, |e, g| {
        g[1].len() == 50 && e[0].send_idle()
    });
    assert_eq!(b.stats().engine.rx_streams_opened, 1);

    // Node 1 "restarts": a new session epoch, sequence numbers from 0 again.
    a.close_sender_in(inbox).unwrap();
    a.open_sender_in(
        inbox,
        &[2],
        StreamStart {
            epoch: 2,
            seq: Seq(0),
        },
    )
    .unwrap();
    publish_all(&mut a, inbox, 50..80);
    pump(&mut [&mut a, &mut b], &mut got, |e, g| {
        g[1].len() == 80 && e[0].send_idle()
    });
    assert_eq!(datas(&got[1], inbox), expected(inbox, 0..80));
    assert_eq!(b.stats().engine.rx_streams_restarted, 1);
    for e in [a, b] {
        check_clean(e);
    }
}

#[test]
fn a_link_that_accepts_only_its_peers_opens_no_stream_for_another_sender() {
    let seg = MemorySegment::new();
    let (mut a, mut b, mut c) = (engine(&seg, 1), engine(&seg, 2), engine(&seg, 3));
    let inbox = 0x8000_0002;
    let link = GroupOptions {
        subscribe: false,
        accept_senders: Accept::Only(vec![1]),
        ..opts(Algorithm::Iterative)
    };
    for e in [&mut a, &mut b, &mut c] {
        e.add_group(inbox, link.clone()).unwrap();
    }
    // Node 3 is not one of node 2's peers (where frames are not
    // authenticated, anyone can claim to be it).
    for e in [&mut a, &mut c] {
        e.open_sender_in(inbox, &[2], start(0)).unwrap();
        publish_all(e, inbox, 0..20);
    }
    let mut got = vec![Vec::new(), Vec::new(), Vec::new()];
    pump(&mut [&mut a, &mut b, &mut c], &mut got, |e, g| {
        g[1].len() == 20 && e[0].send_idle() && e[1].stats().engine.rx_sender_refused > 0
    });
    let counters = b.stats().engine;
    assert_eq!(counters.rx_streams_opened, 1, "node 1's only");
    assert!(got[1].iter().all(|m| m.stream == 1));
    assert!(!c.send_idle(), "nothing of node 3's acknowledged");
    for e in [a, b] {
        check_clean(e);
    }
}

#[test]
fn a_sink_sees_every_fragment_in_place_and_in_order() {
    let seg = MemorySegment::new();
    let (mut a, mut b) = (engine(&seg, 1), engine(&seg, 2));
    for e in [&mut a, &mut b] {
        e.add_group(10, opts(Algorithm::Mak)).unwrap();
    }
    a.open_sender_in(10, &[2], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    let big: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    a.publish_in(10, &big).unwrap();
    a.publish_in(10, b"small").unwrap();
    let mut frags: Vec<(bool, bool, Vec<u8>)> = Vec::new();
    let deadline = sys::monotonic_ns() + 10_000_000_000;
    while !(a.send_idle() && frags.iter().filter(|f| f.1).count() == 2) {
        a.poll().unwrap();
        b.poll_deliver(&mut |f: Fragment<'_>| {
            assert_eq!((f.group, f.stream), (10, 1));
            frags.push((f.first, f.last, f.data.to_vec()));
        })
        .unwrap();
        assert!(sys::monotonic_ns() < deadline, "no progress in 10 s");
    }
    let n = 5000usize.div_ceil(b.max_payload());
    assert_eq!(frags.len(), n + 1);
    assert!(frags[0].0 && !frags[0].1 && frags[n - 1].1 && !frags[n - 1].0 || n == 1);
    let joined: Vec<u8> = frags[..n].iter().flat_map(|f| f.2.clone()).collect();
    assert_eq!(joined, big);
    assert_eq!(frags[n], (true, true, b"small".to_vec()));
    assert_eq!(
        b.pending_messages(),
        0,
        "a sink takes the place of the queue"
    );
    for e in [a, b] {
        check_clean(e);
    }
}

#[test]
fn removing_a_group_mid_stream_frees_every_frame_and_refuses_its_calls() {
    let seg = MemorySegment::new();
    let (mut a, mut b) = (engine(&seg, 1), engine(&seg, 2));
    for e in [&mut a, &mut b] {
        e.add_group(10, opts(Algorithm::Mak)).unwrap();
    }
    a.open_sender_in(10, &[2], start(0)).unwrap();
    b.open_receiver_in(10, 1, start(0)).unwrap();
    let mut got = vec![Vec::new(), Vec::new()];
    publish_all(&mut a, 10, 0..300);
    // Stop part-way: frames are queued, in the window and in flight.
    pump(&mut [&mut a, &mut b], &mut got, |_, g| g[1].len() >= 50);
    a.remove_group(10).unwrap();
    b.remove_group(10).unwrap();
    for e in [&a, &b] {
        let l = e.check_conservation().expect("conservation");
        assert_eq!(l.queued + l.machine + l.machines_report, 0, "{l:?}");
    }
    assert!(a.publish_in(10, b"x").is_err());
    assert!(a.open_sender_in(10, &[2], start(0)).is_err());
    assert!(
        a.add_group(10, opts(Algorithm::Mak)).is_ok(),
        "can come back"
    );
    // Duplicate and invalid groups are refused with a reason.
    let e = a.add_group(10, opts(Algorithm::Mak)).unwrap_err();
    assert!(e.to_string().contains("already open"), "{e}");
    let e = a
        .add_group(
            11,
            GroupOptions {
                window_frames: FRAMES,
                ..opts(Algorithm::Mak)
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    for e in [a, b] {
        check_clean(e);
    }
}
