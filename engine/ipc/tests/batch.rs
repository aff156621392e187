//! The client's batch calls against the daemon's side of its rings, in one
//! thread once connected: the test plays mcastd by popping the client's
//! publication ring and pushing records into its subscription ring itself,
//! so every ring state (full, fragments, events, corruption) is exact.
// Tests bound their waits in wall time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{small_sizes, TempDir};
use mcast_ipc::ring::{RecordHeader, BATCH, EVENT, FIRST, LAST, OFF_HEAD, OFF_TAIL};
use mcast_ipc::{sys, Access, Client, ClientId, Error, Message, MessageKind, Server};

/// A client connected to a server this thread drives.
struct Harness {
    server: Server,
    id: ClientId,
    client: Client,
    _dir: TempDir,
}

/// Connects a client (on a helper thread, while this one answers its
/// Hello) and hands both ends back.
fn connected(tag: &str) -> Harness {
    let dir = TempDir::new(tag);
    let path = dir.socket();
    let mut server = Server::bind(&path, Access::own_uid("test"), small_sizes(), 4).unwrap();
    let connecting = std::thread::spawn(move || Client::connect(&path, "batch"));
    let (mut events, mut fds) = (Vec::new(), Vec::new());
    while !connecting.is_finished() {
        fds.clear();
        server.poll_fds(&mut fds);
        let mut p: Vec<_> = fds.iter().map(|f| sys::pollin(*f)).collect();
        sys::poll(&mut p, Some(Duration::from_millis(5))).unwrap();
        server.poll(&mut events);
    }
    let client = connecting.join().unwrap().unwrap();
    let id = server.clients()[0];
    Harness {
        server,
        id,
        client,
        _dir: dir,
    }
}

impl Harness {
    /// Every record in the publication ring: (header, payload), popped.
    fn take_publications(&mut self) -> Vec<(RecordHeader, Vec<u8>)> {
        let p = self.server.publications(self.id).unwrap();
        let mut out = Vec::new();
        while let Some(r) = p.peek().unwrap() {
            out.push((r.header, r.payload.to_vec()));
            p.pop().unwrap();
        }
        out
    }

    /// Pushes `script` into the subscription ring, as mcastd would.
    fn deliver(&mut self, script: &[(u32, u32, u32, &[u8])]) {
        deliver(&mut self.server, self.id, script);
    }
}

/// Pushes `script` (group, source, flags, bytes) into `id`'s subscription
/// ring, as mcastd would.
fn deliver(server: &mut Server, id: ClientId, script: &[(u32, u32, u32, &[u8])]) {
    let sub = server.subscription(id).unwrap();
    for &(group, source, flags, bytes) in script {
        let hdr = RecordHeader {
            group,
            source,
            flags,
            stamp: 0,
        };
        sub.try_push(hdr, &[bytes]).unwrap();
    }
}

fn numbered(i: usize) -> Vec<u8> {
    vec![i as u8; 1000]
}

#[test]
fn publish_batch_takes_what_fits_in_order_whole_then_would_block() {
    let mut h = connected("batch-pub");
    let msgs: Vec<Vec<u8>> = (0..20).map(numbered).collect();
    let all: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
    assert_eq!(h.client.publish_batch(7, Vec::<&[u8]>::new()).unwrap(), 0);
    // A 16 KiB ring holds sixteen 1016-byte records.
    assert_eq!(h.client.publish_batch(7, &all).unwrap(), 16);
    assert!(matches!(
        h.client.publish_batch(7, &all[16..]),
        Err(Error::WouldBlock)
    ));
    assert!(matches!(
        h.client.publish(7, all[16]),
        Err(Error::WouldBlock)
    ));
    // The daemon takes three: exactly three more fit (the first behind a
    // wrap marker), each whole.
    let p = h.server.publications(h.id).unwrap();
    for _ in 0..3 {
        assert!(p.pop().unwrap());
    }
    assert_eq!(h.client.publish_batch(7, &all[16..]).unwrap(), 3);
    assert!(matches!(
        h.client.publish_batch(7, &all[19..]),
        Err(Error::WouldBlock)
    ));
    let got = h.take_publications();
    assert_eq!(got.len(), 16);
    for (k, (hdr, bytes)) in got.iter().enumerate() {
        let i = k + 3;
        assert_eq!(
            *hdr,
            RecordHeader {
                group: 7,
                source: 0,
                flags: FIRST | LAST,
                stamp: 0,
            }
        );
        assert_eq!(*bytes, numbered(i), "message {i} in order and whole");
    }
    // Owned messages do as well as slices.
    assert_eq!(h.client.publish_batch(7, &msgs[19..]).unwrap(), 1);
    assert_eq!(h.take_publications()[0].1, numbered(19));
}

#[test]
fn publish_batch_stops_before_a_message_over_the_limit() {
    let mut h = connected("batch-large");
    let max = h.client.max_message();
    let (small, big) = (vec![1u8; 10], vec![2u8; max + 1]);
    let batch: [&[u8]; 3] = [&small, &big, &small];
    assert_eq!(h.client.publish_batch(3, &batch).unwrap(), 1);
    match h.client.publish_batch(3, &batch[1..]) {
        Err(Error::TooLarge { limit }) => assert_eq!(limit, max),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.client.publish_batch(3, &batch[2..]).unwrap(), 1);
    let got = h.take_publications();
    assert_eq!(got.len(), 2, "nothing of the large one went in");
    assert!(got.iter().all(|(_, b)| *b == small));
}

#[test]
fn publish_batch_blocking_times_out_then_sleeps_until_the_daemon_takes_one() {
    let mut h = connected("batch-block");
    let msgs: Vec<Vec<u8>> = (0..20).map(numbered).collect();
    let all: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
    assert_eq!(h.client.publish_batch(7, &all).unwrap(), 16);
    assert!(matches!(
        h.client
            .publish_batch_blocking(7, &all[16..], Some(Duration::from_millis(20))),
        Err(Error::TimedOut)
    ));
    let mut client = h.client;
    let publisher = std::thread::spawn(move || {
        let rest: Vec<&[u8]> = msgs[16..].iter().map(|m| &m[..]).collect();
        let n = client.publish_batch_blocking(7, &rest, None);
        (client, n)
    });
    // Room for three, and the producer woken if it already sleeps.
    let p = h.server.publications(h.id).unwrap();
    for _ in 0..3 {
        assert!(p.pop().unwrap());
    }
    h.server.wake_publishers(h.id);
    let (client, n) = publisher.join().unwrap();
    // As many as there was room for when it looked: it may have looked
    // after the first pop already.
    let n = n.unwrap();
    assert!((1..=3).contains(&n), "{n}");
    h.client = client;
    let got = h.take_publications();
    assert_eq!(got.len(), 13 + n);
    for (k, (_, bytes)) in got.iter().enumerate() {
        assert_eq!(*bytes, numbered(k + 3));
    }
}

const G: u32 = 9;
const VIEW_GONE_3: &[u8] = br#"{"epoch":4,"members":[],"joined":[],"gone":[3],"failed":[3]}"#;

/// Whole messages, fragments interleaved from two senders, stray
/// fragments, an empty message, an event that breaks one sender's partial
/// message, a fragmented event, and data after them.
const SCRIPT: &[(u32, u32, u32, &[u8])] = &[
    (G, 1, FIRST | LAST, b"whole one"),
    (G, 2, FIRST, b"frag"),
    (G, 3, FIRST, b"never "),
    (G, 2, 0, b"mented "),
    (G, 1, FIRST | LAST, b""),
    (G, 4, 0, b"stray middle"),
    (G, 4, LAST, b"stray last"),
    (G, 2, LAST, b"message"),
    (G, 3, 0, b"finished"),
    (G, 0, EVENT | FIRST | LAST, VIEW_GONE_3),
    (G, 3, LAST, b"after the event"),
    (G, 0, EVENT | FIRST, br#"{"epoch":5,"#),
    (G, 0, EVENT | LAST, br#""members":[]}"#),
    (G + 1, 3, FIRST | LAST, b"other group"),
    (G, 1, FIRST | LAST, b"last"),
];

fn expected() -> Vec<Message> {
    let m = |kind, source, data: &[u8]| Message {
        kind,
        group: G,
        source,
        data: data.to_vec(),
    };
    let mut other = m(MessageKind::Data, 3, b"other group");
    other.group = G + 1;
    vec![
        m(MessageKind::Data, 1, b"whole one"),
        m(MessageKind::Data, 1, b""),
        m(MessageKind::Data, 2, b"fragmented message"),
        m(MessageKind::Membership, 0, VIEW_GONE_3),
        m(MessageKind::Membership, 0, br#"{"epoch":5,"members":[]}"#),
        other,
        m(MessageKind::Data, 1, b"last"),
    ]
}

/// Whether the byte at `at` lies inside the client's shared mapping
/// (addresses compared, nothing read).
fn in_ring(client: &Client, at: *const u8) -> bool {
    let (map, _) = client.shared_rings();
    let all = map.slice(0, map.len()).unwrap();
    all.as_ptr_range().contains(&at)
}

#[test]
fn recv_batch_delivers_what_try_recv_does_whole_records_in_place() {
    let mut one = connected("batch-try");
    one.deliver(SCRIPT);
    let mut by_try = Vec::new();
    while let Some(m) = one.client.try_recv().unwrap() {
        by_try.push(m);
    }
    assert_eq!(by_try, expected());

    let mut many = connected("batch-recv");
    many.deliver(SCRIPT);
    let mut by_batch = Vec::new();
    let mut places = Vec::new();
    loop {
        let mut got = Vec::new();
        let n = many
            .client
            .recv_batch(3, |m| got.push((m.to_message(), m.data.as_ptr())))
            .unwrap();
        assert_eq!(n, got.len());
        assert!(n <= 3);
        if n == 0 {
            break;
        }
        for (m, at) in got {
            places.push(!m.data.is_empty() && in_ring(&many.client, at));
            by_batch.push(m);
        }
    }
    assert_eq!(by_batch, by_try);
    // Whole records were lent from the ring, reassembled ones from the
    // client's buffer (an empty message has no place to compare).
    assert_eq!(
        places,
        [true, false, false, true, false, true, true],
        "{by_batch:?}"
    );
    assert!(!in_ring(&many.client, b"not in the ring".as_ptr()));
    // Every record consumed: the space all went back to the daemon.
    let (map, layout) = many.client.shared_rings();
    let base = layout.subscription_offset();
    let head = map.atomic_u64(base + OFF_HEAD).load(Ordering::Acquire);
    let tail = map.atomic_u64(base + OFF_TAIL).load(Ordering::Acquire);
    assert_eq!(head, tail);
}

#[test]
fn recv_batch_stops_at_max_and_zero_takes_nothing() {
    let mut h = connected("batch-max");
    h.deliver(SCRIPT);
    assert_eq!(h.client.recv_batch(0, |_| panic!("max 0")).unwrap(), 0);
    let mut first = Vec::new();
    assert_eq!(
        h.client
            .recv_batch(2, |m| first.push(m.to_message()))
            .unwrap(),
        2
    );
    // The rest, one call: stops when the ring is empty.
    let mut rest = Vec::new();
    assert_eq!(
        h.client
            .recv_batch(100, |m| rest.push(m.to_message()))
            .unwrap(),
        5
    );
    first.extend(rest);
    assert_eq!(first, expected());
    assert_eq!(h.client.recv_batch(100, |_| panic!("empty")).unwrap(), 0);
}

#[test]
fn recv_batch_timeout_waits_for_data_or_the_time() {
    let mut h = connected("batch-wait");
    let n = h
        .client
        .recv_batch_timeout(8, Some(Duration::from_millis(20)), |_| panic!("none"))
        .unwrap();
    assert_eq!(n, 0);
    let Harness {
        mut server,
        id,
        mut client,
        _dir,
    } = h;
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let n = client.recv_batch_timeout(8, None, |m| got.push(m.data.to_vec()));
        (client, n.unwrap(), got)
    });
    deliver(&mut server, id, &[(G, 1, FIRST | LAST, b"wake up")]);
    let (_client, n, got) = receiver.join().unwrap();
    assert!(n >= 1);
    assert_eq!(got[0], b"wake up");
}

#[test]
fn a_corrupt_record_after_delivered_ones_ends_the_batch_then_is_reported() {
    let mut h = connected("batch-corrupt");
    h.deliver(&[
        (G, 1, FIRST | LAST, b"fine"),
        (G, 1, FIRST | LAST, b"scribbled"),
    ]);
    // The second record's length says more than the ring holds.
    let (map, layout) = h.client.shared_rings();
    let second = layout.subscription_offset() + mcast_ipc::ring::HEADER_BYTES + 24;
    map.atomic_u32(second)
        .unwrap()
        .store(1 << 20, Ordering::Relaxed);
    let mut got = Vec::new();
    assert_eq!(
        h.client
            .recv_batch(8, |m| got.push(m.data.to_vec()))
            .unwrap(),
        1
    );
    assert_eq!(got, [b"fine".to_vec()]);
    match h.client.recv_batch(8, |_| panic!("corrupt")) {
        Err(Error::Protocol(m)) => assert!(m.contains("corrupt"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(h.client.try_recv(), Err(Error::Protocol(_))));
}

#[test]
fn a_batch_record_is_lent_message_by_message_and_a_call_goes_on_inside_it() {
    let mut h = connected("batch-record");
    let frame = mcast_ipc::batch::encode([&b"a"[..], b"bb", b"", b"ccc"]);
    let second = mcast_ipc::batch::encode([&b"x"[..], b"yz"]);
    h.deliver(&[
        (G, 1, FIRST | LAST, b"before"),
        (G, 2, FIRST | LAST | BATCH, &frame),
        (G, 1, FIRST | LAST, b"after"),
        (G, 3, FIRST | LAST | BATCH, &second),
    ]);
    let (mut calls, mut places) = (Vec::new(), Vec::new());
    for max in [2, 2] {
        let mut got = Vec::new();
        let n = h
            .client
            .recv_batch(max, |m| {
                places.push(m.data.as_ptr());
                got.push((m.source, m.data.to_vec()));
            })
            .unwrap();
        assert_eq!(n, got.len());
        calls.push(got);
    }
    // Lent in place, from the ring (the empty message has no place).
    assert!([0, 1, 2].iter().all(|&i| in_ring(&h.client, places[i])));
    let one = h.client.try_recv().unwrap().expect("the batch's last");
    let rest = h.client.try_recv().unwrap().expect("the record after it");
    let mut last = Vec::new();
    let n = h
        .client
        .recv_batch(8, |m| last.push((m.source, m.data.to_vec())));
    assert_eq!(n.unwrap(), 2, "the second batch record, from its first");
    assert_eq!(last, [(3, b"x".to_vec()), (3, b"yz".to_vec())]);
    assert!(h.client.try_recv().unwrap().is_none());
    let v = |s: &[u8]| s.to_vec();
    assert_eq!(
        calls,
        [
            vec![(1, v(b"before")), (2, v(b"a"))],
            vec![(2, v(b"bb")), (2, v(b""))]
        ]
    );
    assert_eq!(
        (one.source, one.kind, one.data),
        (2, MessageKind::Data, v(b"ccc"))
    );
    assert_eq!((rest.source, rest.data), (1, v(b"after")));
    // The batch record left the ring once its last message was lent.
    let (map, layout) = h.client.shared_rings();
    let base = layout.subscription_offset();
    let head = map.atomic_u64(base + OFF_HEAD).load(Ordering::Acquire);
    let tail = map.atomic_u64(base + OFF_TAIL).load(Ordering::Acquire);
    assert_eq!(head, tail);
}

#[test]
fn a_batch_record_whose_lengths_run_past_it_is_corrupt() {
    let mut h = connected("batch-record-corrupt");
    h.deliver(&[
        (G, 1, FIRST | LAST | BATCH, &[0, 2, b'o', b'k', 0, 9, 1]),
        (G, 1, FIRST | LAST, b"never"),
    ]);
    let mut got = Vec::new();
    assert_eq!(
        h.client
            .recv_batch(8, |m| got.push(m.data.to_vec()))
            .unwrap(),
        1
    );
    assert_eq!(got, [b"ok".to_vec()]);
    match h.client.recv_batch(8, |_| panic!("corrupt")) {
        Err(Error::Protocol(m)) => assert!(m.contains("corrupt"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(h.client.try_recv(), Err(Error::Protocol(_))));
}

#[test]
fn records_before_a_cut_off_are_delivered_then_the_cut_off() {
    let mut h = connected("batch-cutoff");
    h.deliver(&[(G, 1, FIRST | LAST, b"before")]);
    h.server.disconnect(h.id, "test says bye");
    let mut got = Vec::new();
    assert_eq!(
        h.client
            .recv_batch(8, |m| got.push(m.data.to_vec()))
            .unwrap(),
        1
    );
    match h.client.recv_batch(8, |_| panic!("cut off")) {
        Err(Error::CutOff { reason }) => assert_eq!(reason, "test says bye"),
        other => panic!("{other:?}"),
    }
}
