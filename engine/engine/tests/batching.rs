//! Small messages share frames (docs/protocol.md §1.10), over the in-memory
//! segment: messages that wait for the window are packed into the frame at
//! the back of the send queue, a lone message still leaves at once, every
//! message arrives whole and in order (through `recv_message` and through a
//! sink) under loss and with sealed frames, and a malformed batch is refused
//! on receipt. One thread drives all engines. No privileges needed.

mod common;

use std::sync::Arc;

use mcast_engine::auth::{ClusterKey, Keys};
use mcast_engine::{
    Algorithm, AuthConfig, Engine, EngineConfig, Fragment, MemorySegment, MemoryTransport,
    SendTally, Transport, TxDesc,
};
use mcast_wire::{node_mac, Flags, NodeId};

const GROUP: u32 = 7;
const SENDER: NodeId = 1;

fn engine(
    seg: &Arc<MemorySegment>,
    node: NodeId,
    batch: bool,
    keyed: bool,
) -> Engine<MemoryTransport> {
    let mut cfg = EngineConfig::new(node, GROUP, Algorithm::Mak);
    cfg.window_frames = 128;
    cfg.max_queued_frames = 256;
    cfg.max_message = 70 << 10;
    cfg.batch_messages = batch;
    cfg.peers = (1..=4).map(|n| (n, node_mac(n))).collect();
    if keyed {
        cfg.auth = Some(AuthConfig {
            keys: Keys::new(ClusterKey::from_bytes(&[5; 32]), None),
            session: 100 + u64::from(node),
        });
    }
    Engine::new(seg.port(node_mac(node), 1024, 2048, 4096), cfg).expect("engine")
}

/// A sender and `receivers` receivers (nodes 2, 3, ...) of its stream.
fn cluster(receivers: u32, batch: bool, keyed: bool) -> Vec<Engine<MemoryTransport>> {
    let seg = MemorySegment::new();
    let mut e: Vec<_> = (1..=receivers + 1)
        .map(|n| engine(&seg, n, batch, keyed))
        .collect();
    let members: Vec<NodeId> = (2..=receivers + 1).collect();
    e[0].open_sender(&members).unwrap();
    for r in &mut e[1..] {
        r.open_receiver(SENDER).unwrap();
    }
    e
}

/// Message `i`: its index, then filler, `len` bytes in all.
fn message(i: u32, len: usize) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.resize(len.max(4), (i % 251) as u8);
    m.truncate(len);
    m
}

/// Publishes every message as fast as the sender takes them, polling every
/// engine; returns what each receiver got (receiver 1 through a sink that
/// reassembles fragments, the others through `recv_message`). `step` sees
/// the engines and what each receiver got after every round of polls.
fn exchange(
    e: &mut [Engine<MemoryTransport>],
    msgs: &[Vec<u8>],
    mut step: impl FnMut(&mut [Engine<MemoryTransport>], &[Vec<Vec<u8>>]),
) -> Vec<Vec<Vec<u8>>> {
    let mut got = vec![Vec::new(); e.len()];
    let mut partial = Vec::new();
    let mut next = 0;
    for _ in 0..2_000_000 {
        // Everything the queue takes now goes in before the next poll.
        while next < msgs.len() && e[0].publish(&msgs[next]).is_ok() {
            next += 1;
        }
        e[0].poll().unwrap();
        let (sink_rx, rest) = e[1..].split_at_mut(1);
        sink_rx[0]
            .poll_deliver(&mut |f: Fragment<'_>| {
                if f.first {
                    partial.clear();
                }
                partial.extend_from_slice(f.data);
                if f.last {
                    got[1].push(std::mem::take(&mut partial));
                }
            })
            .unwrap();
        for (i, r) in rest.iter_mut().enumerate() {
            r.poll().unwrap();
            while let Some(m) = r.recv_message() {
                got[i + 2].push(m.data);
            }
        }
        step(e, &got);
        if got[1..].iter().all(|g| g.len() >= msgs.len()) && e[0].send_idle() {
            return got;
        }
    }
    panic!(
        "not delivered: {:?} of {} messages",
        got.iter().map(Vec::len).collect::<Vec<_>>(),
        msgs.len()
    );
}

fn tally(e: &Engine<MemoryTransport>) -> SendTally {
    e.stats().groups[0].tally.expect("a send stream")
}

fn check_all_delivered(got: &[Vec<Vec<u8>>], msgs: &[Vec<u8>]) {
    for (r, g) in got.iter().enumerate().skip(1) {
        assert_eq!(g.len(), msgs.len(), "receiver {r}: messages delivered");
        if let Some(i) = (0..msgs.len()).find(|&i| g[i] != msgs[i]) {
            panic!(
                "receiver {r}: message {i} differs ({} bytes, expected {})",
                g[i].len(),
                msgs[i].len()
            );
        }
    }
}

#[test]
fn small_messages_waiting_for_the_window_share_frames_and_arrive_in_order() {
    let mut e = cluster(2, true, false);
    let msgs: Vec<_> = (0..20_000).map(|i| message(i, 64)).collect();
    let got = exchange(&mut e, &msgs, |_, _| {});
    check_all_delivered(&got, &msgs);
    let t = tally(&e[0]);
    assert_eq!(t.messages, 20_000);
    assert_eq!(t.payload_bytes, 20_000 * 64);
    assert_eq!(t.messages, t.batched + t.frames, "{t:?}");
    // 21 records of 66 bytes fit 1,456: a full queue packs frames full.
    assert!(t.messages_per_frame() >= 15.0, "{t:?}");
    assert!(t.wire_per_payload_byte() < 1.2, "{t:?}");
    for r in &e[1..] {
        assert_eq!(r.stats().engine.messages_delivered, 20_000);
        assert_eq!(r.stats().groups[0].grtt_ns, None, "no send stream here");
    }
    // The sender's group round trip, measured from the ACKs (wall time
    // between these polls), within grtt_min and grtt_max, and no longer
    // the initial 100 µs it starts from.
    let grtt = e[0].stats().groups[0]
        .grtt_ns
        .expect("MAK's sender has one");
    assert!((5_000..=100_000_000).contains(&grtt), "{grtt} ns");
    assert_ne!(grtt, 100_000, "never measured");
    for x in e {
        x.check_conservation().unwrap();
    }
}

#[test]
fn a_lone_message_leaves_at_once_in_a_frame_of_its_own() {
    let mut e = cluster(1, true, false);
    e[0].publish(b"alone").unwrap();
    // One poll sends it: nothing waits for company.
    e[0].poll().unwrap();
    assert_eq!(tally(&e[0]).frames, 1);
    let mut got = None;
    for _ in 0..100 {
        e[1].poll().unwrap();
        if let Some(m) = e[1].recv_message() {
            got = Some(m.data);
            break;
        }
    }
    assert_eq!(got.as_deref(), Some(&b"alone"[..]));
    assert_eq!(tally(&e[0]).batched, 0);
}

#[test]
fn off_it_sends_one_message_per_frame() {
    let mut e = cluster(2, false, false);
    let msgs: Vec<_> = (0..2_000).map(|i| message(i, 64)).collect();
    let got = exchange(&mut e, &msgs, |_, _| {});
    check_all_delivered(&got, &msgs);
    let t = tally(&e[0]);
    assert_eq!((t.frames, t.batched), (2_000, 0), "{t:?}");
}

#[test]
fn mixed_sizes_under_loss_with_sealed_frames_arrive_whole_and_in_order() {
    let mut e = cluster(3, true, true);
    // 0 B to 64 KiB, small ones in runs so they batch, large ones fragmented
    // between them (a fragmented message never shares a frame).
    let mut rng = mcast_proto::Rng::new(25);
    let msgs: Vec<_> = (0..3_000u32)
        .map(|i| {
            let len = match rng.range(0, 9) {
                0 => rng.range(0, 64 << 10) as usize,
                1 => rng.range(1_400, 1_500) as usize,
                _ => rng.range(0, 200) as usize,
            };
            message(i, len)
        })
        .collect();
    for r in &mut e {
        r.transport_mut().set_drop_ratio(0.05).unwrap();
    }
    let got = exchange(&mut e, &msgs, |_, _| {});
    check_all_delivered(&got, &msgs);
    let t = tally(&e[0]);
    assert!(t.batched > 1_000, "{t:?}");
    let s = e[0].stats();
    assert!(
        s.sender.unwrap().data_retransmitted > 0,
        "the loss was felt: {s:?}"
    );
    for r in &e[1..] {
        let c = r.stats().engine;
        assert_eq!(
            (c.rx_auth_failed, c.rx_malformed, c.reassembly_errors),
            (0, 0, 0),
            "{c:?}"
        );
    }
    for x in e {
        x.check_conservation().unwrap();
    }
}

/// Sends one DATA frame of the sender's stream with `flags` and payload `p`,
/// written by hand from another port with the sender's MAC.
fn raw_data(seg: &Arc<MemorySegment>, seq: u32, flags: Flags, p: &[u8]) {
    let mut port = seg.port(node_mac(SENDER), 8, 2048, 8);
    let f = port.alloc().expect("frame");
    let len = common::write_data(&mut port, f, (GROUP, SENDER), seq, flags, p);
    port.transmit(
        &[TxDesc {
            frame: f,
            len: len as u32,
        }],
        false,
    )
    .unwrap();
    port.reap(&mut Vec::new()).unwrap();
}

#[test]
fn a_malformed_batch_is_refused_on_receipt_and_a_good_one_delivered() {
    let seg = MemorySegment::new();
    let mut rx = engine(&seg, 2, true, false);
    rx.open_receiver(SENDER).unwrap();
    let batch = Flags::WHOLE.with(Flags::BATCH);
    // A record longer than the payload, and a batch that is not whole.
    raw_data(&seg, 0, batch, b"\x00\x09abc");
    raw_data(&seg, 0, Flags::FRAG_FIRST.with(Flags::BATCH), b"\x00\x01a");
    for _ in 0..10 {
        rx.poll().unwrap();
    }
    assert!(rx.recv_message().is_none());
    assert_eq!(rx.stats().engine.rx_malformed, 2);
    // The same sequence number, well formed: two messages, the empty one too.
    raw_data(&seg, 0, batch, b"\x00\x03abc\x00\x00");
    let mut got = Vec::new();
    for _ in 0..10 {
        rx.poll().unwrap();
        while let Some(m) = rx.recv_message() {
            got.push(m.data);
        }
    }
    assert_eq!(got, [b"abc".to_vec(), Vec::new()]);
}

#[test]
fn the_acknowledged_message_count_never_runs_ahead_of_a_receiver_and_reaches_every_message() {
    // What the total-order mode's claims stand on (docs/protocol.md §6.4):
    // the first N messages of the stream, batched or fragmented, are
    // acknowledged by every member only once every member has them.
    let mut e = cluster(3, true, false);
    let mut rng = mcast_proto::Rng::new(41);
    let msgs: Vec<_> = (0..2_000u32)
        .map(|i| {
            let len = match rng.range(0, 8) {
                0 => rng.range(2_000, 20_000) as usize,
                _ => rng.range(0, 100) as usize,
            };
            message(i, len)
        })
        .collect();
    for r in &mut e {
        r.transport_mut().set_drop_ratio(0.03).unwrap();
    }
    let mut rises = 0;
    let mut last = 0;
    let got = exchange(&mut e, &msgs, |e, got| {
        let acked = e[0].group_acked_messages(GROUP).expect("MAK says");
        let fewest = got[1..].iter().map(Vec::len).min().unwrap() as u64;
        assert!(
            acked <= fewest,
            "{acked} messages acknowledged, a receiver has {fewest}"
        );
        assert!(acked >= last, "the count went back: {last} then {acked}");
        rises += u64::from(acked > last);
        last = acked;
    });
    check_all_delivered(&got, &msgs);
    assert_eq!(e[0].group_acked_messages(GROUP), Some(msgs.len() as u64));
    assert!(rises > 10, "the count rose in {rises} steps only");
    assert!(tally(&e[0]).batched > 500, "{:?}", tally(&e[0]));
}
