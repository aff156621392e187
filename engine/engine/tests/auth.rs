//! Frame authentication in the engine (docs/protocol.md §1.9) over the
//! in-memory segment: keyed engines talk, and frames that are unsealed,
//! sealed with another key, altered or replayed are refused and counted
//! before anything else reads them. No privileges needed.

mod common;

use std::sync::Arc;

use mcast_engine::auth::{seal, ClusterKey, Keys, TRAILER_LEN};
use mcast_engine::{
    Algorithm, AuthConfig, Engine, EngineConfig, MemorySegment, MemoryTransport, Transport, TxDesc,
};
use mcast_wire::{
    max_payload_for_mtu, node_mac, Flags, Frame, Header, Kind, NodeId, ETHERTYPE_DEFAULT,
};

const GROUP: u32 = 7;
const SENDER: NodeId = 1;
const RECEIVER: NodeId = 11;

fn key(b: u8) -> ClusterKey {
    ClusterKey::from_bytes(&[b; 32])
}

fn auth(send: u8, also: Option<u8>, session: u64) -> Option<AuthConfig> {
    Some(AuthConfig {
        keys: Keys::new(key(send), also.map(key)),
        session,
    })
}

fn engine(
    seg: &Arc<MemorySegment>,
    node: NodeId,
    a: Option<AuthConfig>,
) -> Engine<MemoryTransport> {
    let mut cfg = EngineConfig::new(node, GROUP, Algorithm::Mak);
    cfg.window_frames = 64;
    cfg.auth = a;
    Engine::new(seg.port(node_mac(node), 256, 2048, 1024), cfg).expect("engine")
}

/// Publishes `msgs` from `tx` and polls both engines until `rx` has them all.
fn exchange(tx: &mut Engine<MemoryTransport>, rx: &mut Engine<MemoryTransport>, msgs: &[Vec<u8>]) {
    let mut got = Vec::new();
    let mut next = 0;
    for _ in 0..200_000 {
        if next < msgs.len() && tx.publish(&msgs[next]).is_ok() {
            next += 1;
        }
        tx.poll().expect("sender poll");
        rx.poll().expect("receiver poll");
        while let Some(m) = rx.recv_message() {
            got.push(m.data);
        }
        if got.len() == msgs.len() {
            break;
        }
    }
    assert_eq!(got.len(), msgs.len(), "messages delivered");
    assert!(got == msgs, "the messages arrived altered or out of order");
}

#[test]
fn keyed_engines_exchange_messages_and_fragments_make_room_for_the_trailer() {
    let seg = MemorySegment::new();
    let mut tx = engine(&seg, SENDER, auth(1, None, 100));
    let mut rx = engine(&seg, RECEIVER, auth(1, None, 200));
    assert_eq!(tx.max_payload(), max_payload_for_mtu(1500) - TRAILER_LEN);
    tx.open_sender(&[RECEIVER]).unwrap();
    rx.open_receiver(SENDER).unwrap();
    let msgs: Vec<Vec<u8>> = (0..300u32)
        .map(|i| vec![i as u8; (i as usize * 37) % 5000 + 1])
        .collect();
    exchange(&mut tx, &mut rx, &msgs);
    let (t, r) = (tx.stats().engine, rx.stats().engine);
    for c in [t, r] {
        assert_eq!(
            (c.rx_auth_failed, c.rx_auth_unknown_key, c.rx_replayed),
            (0, 0, 0),
            "{c:?}"
        );
    }
    // The ACKs came back sealed too: the sender frees its window at its
    // idle ACK round, which the receiver answers.
    let deadline = mcast_engine::sys::monotonic_ns() + 2_000_000_000;
    while !tx.group_send_idle(GROUP) {
        assert!(
            mcast_engine::sys::monotonic_ns() < deadline,
            "the window was never freed"
        );
        tx.poll().expect("sender poll");
        rx.poll().expect("receiver poll");
    }
}

#[test]
fn during_a_rotation_either_key_is_accepted() {
    // Phase 2 of docs/mcastd.md's rotation: some nodes seal with the new key
    // (2), others still with the old (1); all accept both.
    let seg = MemorySegment::new();
    let mut tx = engine(&seg, SENDER, auth(2, Some(1), 100));
    let mut rx = engine(&seg, RECEIVER, auth(1, Some(2), 200));
    tx.open_sender(&[RECEIVER]).unwrap();
    rx.open_receiver(SENDER).unwrap();
    let msgs: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 100]).collect();
    exchange(&mut tx, &mut rx, &msgs);
    assert_eq!(rx.stats().engine.rx_auth_unknown_key, 0);
}

#[test]
fn an_engine_without_the_key_hears_nothing_and_says_why() {
    let seg = MemorySegment::new();
    let mut tx = engine(&seg, SENDER, auth(1, None, 100));
    let mut rx = engine(&seg, RECEIVER, auth(3, None, 200));
    tx.open_sender(&[RECEIVER]).unwrap();
    rx.open_receiver(SENDER).unwrap();
    tx.publish(b"secret").unwrap();
    for _ in 0..100 {
        tx.poll().unwrap();
        rx.poll().unwrap();
    }
    assert!(rx.recv_message().is_none());
    let c = rx.stats().engine;
    assert!(c.rx_auth_unknown_key > 0, "{c:?}");
    assert_eq!(
        c.rx_malformed + c.rx_unrouted,
        0,
        "refused before parsing: {c:?}"
    );
}

/// A node on the segment that writes frames by hand.
struct Raw {
    port: MemoryTransport,
}

impl Raw {
    /// A DATA frame of the sender's stream, seq `seq`, payload `p`; `seal`
    /// gets the buffer and the frame's length and returns the length to send.
    fn data(
        &mut self,
        seq: u32,
        p: &[u8],
        seal_with: &dyn Fn(&mut [u8], usize) -> usize,
    ) -> Vec<u8> {
        let f = self.port.alloc().expect("frame");
        let len = common::write_data(&mut self.port, f, (GROUP, SENDER), seq, Flags::WHOLE, p);
        let buf = self.port.frame_mut(f);
        let len = seal_with(buf, len);
        let bytes = buf[..len].to_vec();
        self.send(f, len);
        bytes
    }

    /// Sends these bytes verbatim (a replay).
    fn replay(&mut self, bytes: &[u8]) {
        let f = self.port.alloc().expect("frame");
        self.port.frame_mut(f)[..bytes.len()].copy_from_slice(bytes);
        self.send(f, bytes.len());
    }

    fn send(&mut self, f: u32, len: usize) {
        self.port
            .transmit(
                &[TxDesc {
                    frame: f,
                    len: len as u32,
                }],
                false,
            )
            .unwrap();
        let mut kept = Vec::new();
        self.port.reap(&mut kept).unwrap();
    }
}

fn settle(rx: &mut Engine<MemoryTransport>) -> Vec<Vec<u8>> {
    for _ in 0..10 {
        rx.poll().unwrap();
    }
    std::iter::from_fn(|| rx.recv_message().map(|m| m.data)).collect()
}

#[test]
fn forged_altered_and_replayed_frames_are_refused_and_counted() {
    let seg = MemorySegment::new();
    let mut rx = engine(&seg, RECEIVER, auth(1, None, 200));
    rx.open_receiver(SENDER).unwrap();
    let mut raw = Raw {
        port: seg.port(node_mac(SENDER), 64, 2048, 64),
    };
    let good = |session: u64, counter: u64| {
        move |b: &mut [u8], len: usize| seal(b, len, &key(1), session, counter).unwrap()
    };

    // Unsealed, as every frame was before authentication.
    raw.data(0, b"forged", &|_, len| len);
    // Sealed with a key the receiver does not hold.
    raw.data(0, b"forged", &|b, len| {
        seal(b, len, &key(9), 10, 1).unwrap()
    });
    // Sealed with the cluster key, then one payload byte altered.
    raw.data(0, b"forged", &|b, len| {
        let n = seal(b, len, &key(1), 10, 1).unwrap();
        b[58] ^= 0x20;
        n
    });
    assert!(settle(&mut rx).is_empty());
    let c = rx.stats().engine;
    assert_eq!(
        (c.rx_auth_failed, c.rx_auth_unknown_key, c.rx_replayed),
        (2, 1, 0),
        "{c:?}"
    );
    assert_eq!(
        c.rx_checksum_failures + c.rx_malformed,
        0,
        "never parsed: {c:?}"
    );

    // Genuine: delivered.
    let first = raw.data(0, b"one", &good(10, 1));
    assert_eq!(settle(&mut rx), vec![b"one".to_vec()]);
    // The same bytes again: a replay, refused before the protocol sees it.
    raw.replay(&first);
    // A genuine frame of an earlier session (a previous run of node 1)...
    raw.data(1, b"old run", &good(9, 5));
    // ...and a reused counter with a new sequence number.
    raw.data(1, b"reused", &good(10, 1));
    assert!(settle(&mut rx).is_empty());
    assert_eq!(rx.stats().engine.rx_replayed, 3);
    // The stream goes on.
    raw.data(1, b"two", &good(10, 2));
    assert_eq!(settle(&mut rx), vec![b"two".to_vec()]);
    let c = rx.stats().engine;
    assert_eq!(
        (c.rx_auth_failed, c.rx_auth_unknown_key, c.rx_replayed),
        (2, 1, 3),
        "{c:?}"
    );

    // Checked with the session key the receiver keeps for node 1 now: an
    // altered frame of that session fails, and so does a frame of that
    // session in another node's name (its key is not node 1's).
    raw.data(2, b"three", &|b, len| {
        let n = seal(b, len, &key(1), 10, 3).unwrap();
        b[len - 1] ^= 1;
        n
    });
    raw.data(2, b"three", &|b, len| {
        b[mcast_wire::field::SRC].copy_from_slice(&RECEIVER.to_be_bytes());
        let n = seal(b, len, &key(1), 10, 4).unwrap();
        b[mcast_wire::field::SRC].copy_from_slice(&SENDER.to_be_bytes());
        n
    });
    assert!(settle(&mut rx).is_empty());
    assert_eq!(rx.stats().engine.rx_auth_failed, 4);
    // Node 1 restarts (a later session, a new key): heard, and from then on
    // its previous run's frames are replays.
    raw.data(2, b"three", &good(11, 1));
    raw.data(3, b"late", &good(10, 5));
    raw.data(3, b"four", &good(11, 2));
    assert_eq!(settle(&mut rx), vec![b"three".to_vec(), b"four".to_vec()]);
    let c = rx.stats().engine;
    assert_eq!((c.rx_auth_failed, c.rx_replayed), (4, 4), "{c:?}");
}

#[test]
fn beats_are_sealed_and_forged_beats_never_reach_the_caller() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(SENDER, GROUP, Algorithm::Mak);
    cfg.peers = vec![(RECEIVER, node_mac(RECEIVER))];
    cfg.window_frames = 64;
    cfg.auth = auth(1, None, 100);
    let mut a = Engine::new(seg.port(node_mac(SENDER), 256, 2048, 1024), cfg).unwrap();
    let mut b = engine(&seg, RECEIVER, auth(1, None, 200));
    assert!(a.send_beat(RECEIVER, b"alive").unwrap());
    a.poll().unwrap();
    for _ in 0..10 {
        b.poll().unwrap();
    }
    assert_eq!(b.poll_beat(), Some((SENDER, b"alive".to_vec())));

    // A forged beat: right layout, no key.
    let mut raw = seg.port(node_mac(99), 64, 2048, 64);
    let f = raw.alloc().unwrap();
    let buf = raw.frame_mut(f);
    let mut h = Header::new(Kind::Beat);
    h.src = SENDER;
    h.peer = RECEIVER;
    h.payload_len = 5;
    buf[58..63].copy_from_slice(b"dead!");
    let (_, len) = Frame::emit(
        &mut buf[..],
        node_mac(RECEIVER),
        node_mac(99),
        ETHERTYPE_DEFAULT,
        &h,
    )
    .unwrap();
    raw.transmit(
        &[TxDesc {
            frame: f,
            len: len as u32,
        }],
        false,
    )
    .unwrap();
    for _ in 0..10 {
        b.poll().unwrap();
    }
    assert_eq!(b.poll_beat(), None);
    assert_eq!(b.stats().engine.rx_auth_failed, 1);
}

/// Issue 23 (found by cli/tests/hostile_peers.rs): a genuine group frame
/// of a node, captured and sent back to that very node by another host,
/// passed the tag, and the node's replay window (it keeps none for itself)
/// took it as new. A node never receives its own frames: refused and
/// counted as a replay, never parsed.
#[test]
fn a_node_s_own_frame_sent_back_to_it_is_a_replay() {
    let seg = MemorySegment::new();
    let mut node = engine(&seg, SENDER, auth(1, None, 100));
    node.open_sender(&[RECEIVER]).unwrap();
    // Another host on the segment, sending the node's frame back to it.
    let mut raw = Raw {
        port: seg.port(node_mac(99), 64, 2048, 64),
    };
    raw.data(0, b"mine", &|b, len| seal(b, len, &key(1), 100, 1).unwrap());
    for _ in 0..10 {
        node.poll().unwrap();
    }
    let c = node.stats().engine;
    assert_eq!(
        (c.rx_auth_failed, c.rx_replayed, c.rx_unrouted),
        (0, 1, 0),
        "{c:?}"
    );
}
