//! The engine over the in-memory segment: every algorithm end to end with
//! four engines on four threads, with and without loss, plus the error and
//! back-pressure paths. No privileges needed.

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::scenario::{self, Control, Spec, GROUP, SENDER};
use mcast_engine::{
    Algorithm, Engine, EngineConfig, MemorySegment, MemoryTransport, PublishError, Transport,
    TxDesc,
};
use mcast_wire::{group_mac, node_mac, Flags, Frame, Header, Kind, NodeId, Seq, ETHERTYPE_DEFAULT};

const FRAMES: u32 = 4096;

fn receivers(n: u32) -> Vec<(NodeId, mcast_wire::MacAddr)> {
    (0..n).map(|i| (11 + i, node_mac(11 + i))).collect()
}

fn port(seg: &Arc<MemorySegment>, node: NodeId) -> MemoryTransport {
    seg.port(node_mac(node), FRAMES, 2048, 8192)
}

fn run(name: &str, spec: Spec) {
    let seg = MemorySegment::new();
    let ctl = Control::new(&spec);
    let sender =
        Engine::new(port(&seg, SENDER), scenario::config(&spec, SENDER)).expect("sender engine");
    let rx: Vec<_> = spec
        .receivers
        .iter()
        .map(|&(n, _)| {
            (
                n,
                Engine::new(port(&seg, n), scenario::config(&spec, n)).expect("receiver engine"),
            )
        })
        .collect();
    let (s, r) = std::thread::scope(|sc| {
        let hs: Vec<_> = rx
            .into_iter()
            .map(|(n, e)| {
                let (spec, ctl) = (&spec, &ctl);
                sc.spawn(move || scenario::run_receiver(e, n, spec, ctl))
            })
            .collect();
        let s = scenario::run_sender(sender, &spec, &ctl);
        let r: Vec<_> = hs
            .into_iter()
            .map(|h| h.join().expect("receiver thread"))
            .collect();
        (s, r)
    });
    scenario::report(name, &spec, &s, &r);
}

fn spec(algorithm: Algorithm, messages: usize, loss: f64) -> Spec {
    Spec {
        algorithm,
        messages,
        loss,
        receivers: receivers(3),
        window_frames: 512,
        fence: false,
        fixed_len: None,
        tuning: Default::default(),
        deadline: Duration::from_secs(60),
    }
}

#[test]
fn memory_mak_0_and_2_percent_loss() {
    run("memory mak 0%", spec(Algorithm::Mak, 1500, 0.0));
    run("memory mak 2%", spec(Algorithm::Mak, 1500, 0.02));
}

#[test]
fn memory_ack_0_and_2_percent_loss() {
    run("memory ack 0%", spec(Algorithm::Ack, 800, 0.0));
    run("memory ack 2%", spec(Algorithm::Ack, 800, 0.02));
}

#[test]
fn memory_iterative_0_and_2_percent_loss() {
    let mut s = spec(Algorithm::Iterative, 500, 0.0);
    s.window_frames = 128;
    run("memory iterative 0%", s.clone());
    s.loss = 0.02;
    run("memory iterative 2%", s);
}

#[test]
fn memory_gbn_unicast_0_and_2_percent_loss() {
    let mut s = spec(Algorithm::Iterative, 800, 0.0);
    s.receivers = receivers(1);
    s.window_frames = 128;
    run("memory gbn 0%", s.clone());
    s.loss = 0.02;
    run("memory gbn 2%", s);
}

#[test]
fn memory_nak_with_a_fence_message() {
    // Plain NAK never frees its window: the run must fit in it. Deliberately
    // not a power of two: the stream crosses the 2^32 wrap, where windows that
    // do not divide 2^32 once broke `SeqWindow`.
    let window = 3000;
    let mut s = spec(
        Algorithm::Nak,
        scenario::messages_fitting(1000, window as usize - 10),
        0.0,
    );
    s.window_frames = window;
    s.fence = true;
    run("memory nak 0%", s.clone());
    s.loss = 0.02;
    run("memory nak 2%", s);
}

fn lone_engine(algorithm: Algorithm) -> (Engine<MemoryTransport>, Arc<MemorySegment>) {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(SENDER, GROUP, algorithm);
    cfg.window_frames = 64;
    cfg.max_queued_frames = 64;
    let e = Engine::new(seg.port(node_mac(SENDER), 256, 2048, 1024), cfg).expect("engine");
    (e, seg)
}

#[test]
fn publish_reports_back_pressure_and_limits() {
    let (mut e, _seg) = lone_engine(Algorithm::Mak);
    assert!(matches!(e.publish(b"x"), Err(PublishError::NoSendStream)));
    e.open_sender(&[11]).expect("sender");
    assert!(matches!(
        e.publish(&vec![0u8; (1 << 20) + 1]),
        Err(PublishError::TooLarge { limit }) if limit == 1 << 20
    ));
    // Nobody acknowledges: the window (64) and the queue ahead of it (64) fill up.
    let mut accepted = 0;
    for _ in 0..1000 {
        match e.publish(&[7u8; 1000]) {
            Ok(()) => accepted += 1,
            Err(PublishError::WouldBlock) => {
                e.poll().expect("poll");
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert!(
        (64..=64 + 64 + 1).contains(&accepted),
        "accepted {accepted}"
    );
    // Small messages still join the last queued frame while it has room
    // (batching spends no frame: the bound holds), then block too.
    let mut packed = 0;
    while e.publish(&[1u8; 10]).is_ok() {
        packed += 1;
        assert!(packed <= 40, "a 1,000-byte frame takes at most 37 more");
    }
    assert_eq!(
        packed,
        (1456 - 1000 - 4) / 12,
        "records of 12 bytes after the first's 2"
    );
    assert!(matches!(
        e.publish_blocking(&[1u8; 10], Duration::from_millis(20)),
        Err(PublishError::TimedOut)
    ));
    e.check_conservation()
        .expect("conservation with a full window");
    let (report, _) = e.shutdown().expect("shutdown");
    assert_eq!(report.ledger.transport.held, 0);
    assert!(report.stats.engine.publish_would_block > 0);
}

#[test]
fn corrupted_and_foreign_frames_are_counted_and_dropped() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(11, GROUP, Algorithm::Mak);
    cfg.window_frames = 64;
    let mut rx = Engine::new(seg.port(node_mac(11), 256, 2048, 1024), cfg).expect("engine");
    rx.open_receiver(SENDER).expect("receiver");
    let mut raw = seg.port(node_mac(SENDER), 64, 2048, 64);

    let mut send = |mutate: &dyn Fn(&mut [u8]), group: u32| {
        let mut h = Header::new(Kind::Data);
        h.flags = Flags::WHOLE;
        h.group = group;
        h.src = SENDER;
        h.epoch = 1;
        h.seq = Seq(0);
        send_raw(&mut raw, group_mac(GROUP), &h, b"abc", mutate);
    };
    send(&|b| b[60] ^= 0x01, GROUP); // payload bit flip: CRC fails
    send(&|b| b[14] = 9, GROUP); // unknown version
    send(&|_| {}, GROUP + 1); // another group (same MAC in this test)
    for _ in 0..10 {
        rx.poll().expect("poll");
    }
    let c = rx.stats().engine;
    assert_eq!(c.rx_checksum_failures, 1, "{c:?}");
    assert_eq!(c.rx_malformed, 1, "{c:?}");
    assert_eq!(c.rx_other_group, 1, "{c:?}");
    assert!(rx.recv_message().is_none(), "a bad frame is a lost frame");
    send(&|_| {}, GROUP);
    let m = rx
        .recv_message_blocking(Duration::from_secs(1))
        .expect("engine")
        .expect("message");
    assert_eq!(m.data, b"abc");
    let (report, _) = rx.shutdown().expect("shutdown");
    assert_eq!(report.ledger.transport.held, 0);
}

#[test]
fn configuration_errors_say_what_is_wrong() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(1, GROUP, Algorithm::Mak);
    cfg.batch = 16;
    let e = Engine::new(seg.port(node_mac(1), 256, 2048, 64), cfg.clone()).unwrap_err();
    assert!(e.to_string().contains("batch 16"), "{e}");
    cfg.batch = 64;
    cfg.mtu = 9000;
    let e = Engine::new(seg.port(node_mac(2), 256, 2048, 64), cfg.clone()).unwrap_err();
    assert!(e.to_string().contains("MTU 9000"), "{e}");
    cfg.mtu = 1500;
    cfg.window_frames = 256;
    let e = Engine::new(seg.port(node_mac(3), 256, 2048, 64), cfg).unwrap_err();
    assert!(e.to_string().contains("window"), "{e}");
}

/// Go-Back-N (iterative with one member) sends its buffers in place, without
/// a copy; when a second member joins mid-stream the engine switches to a copy
/// per receiver, deferring frames still on their way out in place. Loss on
/// both receivers makes retransmissions of such frames likely.
#[test]
fn iterative_switches_from_in_place_to_copies_when_a_member_joins() {
    for loss in [0.0, 0.05] {
        let seg = MemorySegment::new();
        let config = |node: NodeId| {
            let mut c = EngineConfig::new(node, GROUP, Algorithm::Iterative);
            c.window_frames = 64;
            c.peers = receivers(2);
            c.protocol.gbn.rto = mcast_proto::rtt::RtoConfig::fixed(Duration::from_millis(2));
            c
        };
        let mut s = Engine::new(port(&seg, SENDER), config(SENDER)).expect("sender");
        let mut r: Vec<Engine<MemoryTransport>> = [11, 12]
            .iter()
            .map(|&n| {
                let mut e = Engine::new(port(&seg, n), config(n)).expect("receiver");
                e.transport_mut().set_drop_ratio(loss).expect("loss");
                e
            })
            .collect();
        s.open_sender(&[11]).expect("sender");
        r[0].open_receiver(SENDER).expect("receiver 11");
        let (total, join_at) = (600usize, 300usize);
        let mut got: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        let mut i = 0;
        let mut copies_before_join = None;
        let mut spins = 0u64;
        let index = |m: &Vec<u8>| scenario::which_message(m).expect("a harness message");
        while got[0].len() < total || got[1].last().map(index) != Some(total - 1) {
            if i == join_at && copies_before_join.is_none() {
                copies_before_join = Some(s.stats().engine.tx_payload_copies);
                let start = s.set_members_in(GROUP, &[11, 12]).expect("join");
                r[1].open_receiver_in(GROUP, SENDER, start)
                    .expect("receiver 12");
            }
            if i < total {
                let msg = scenario::message_bytes(i, 100 + i % 1400);
                if s.publish(msg).is_ok() {
                    i += 1;
                }
            }
            s.poll().expect("sender poll");
            for (k, e) in r.iter_mut().enumerate() {
                e.poll().expect("receiver poll");
                while let Some(m) = e.recv_message() {
                    got[k].push(m.data);
                }
            }
            spins += 1;
            if spins % 500 == 0 {
                s.check_conservation().expect("sender conservation");
            }
            assert!(
                spins < 5_000_000,
                "stuck at {i} published, got {} and {}",
                got[0].len(),
                got[1].len()
            );
        }
        assert_eq!(copies_before_join, Some(0), "one member: no payload copy");
        assert!(
            s.stats().engine.tx_payload_copies > 0,
            "two members: copies"
        );
        // The newcomer gets every message fed to the machine after it joined:
        // some published before the join may still have been queued then.
        let first_new = index(&got[1][0]);
        assert!(first_new <= join_at, "receiver 12 started at {first_new}");
        for (k, g) in got.iter().enumerate() {
            let first = if k == 0 { 0 } else { first_new };
            for (j, m) in g.iter().enumerate() {
                let n = first + j;
                let msg = scenario::message_bytes(n, 100 + n % 1400);
                assert_eq!(*m, msg, "receiver {k}, message {n}, loss {loss}");
            }
        }
        assert!(
            s.flush(Duration::from_secs(5)).expect("flush"),
            "sender idle"
        );
        let (report, _) = s.shutdown().expect("sender shutdown");
        assert_eq!(report.ledger.transport.held + report.ledger.transport.tx, 0);
        for e in r {
            let (report, _) = e.shutdown().expect("receiver shutdown");
            assert_eq!(report.ledger.transport.held, 0);
        }
    }
}

#[test]
fn a_beat_addressed_to_another_node_is_not_taken() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(11, GROUP, Algorithm::Mak);
    cfg.window_frames = 64;
    let mut rx = Engine::new(seg.port(node_mac(11), 256, 2048, 1024), cfg).expect("engine");
    let mut raw = seg.port(node_mac(SENDER), 64, 2048, 64);
    for (to, body) in [(99, &b"for 99"[..]), (11, &b"for 11"[..])] {
        let mut h = Header::new(Kind::Beat);
        h.src = SENDER;
        h.peer = to;
        // Sent to node 11's MAC either way: a segment that floods unicast.
        send_raw(&mut raw, node_mac(11), &h, body, &|_| {});
    }
    for _ in 0..10 {
        rx.poll().expect("poll");
    }
    assert_eq!(rx.poll_beat(), Some((SENDER, b"for 11".to_vec())));
    assert_eq!(rx.poll_beat(), None);
    let c = rx.stats().engine;
    assert_eq!((c.rx_beats, c.rx_unrouted), (1, 1), "{c:?}");
}

/// Writes a frame by hand on `raw`: header `h` (its payload length set
/// here) and `payload`, to `dst`, from the sender's MAC; `mutate` may spoil
/// the bytes before they go.
fn send_raw(
    raw: &mut MemoryTransport,
    dst: mcast_wire::MacAddr,
    h: &Header,
    payload: &[u8],
    mutate: &dyn Fn(&mut [u8]),
) {
    let f = raw.alloc().expect("frame");
    let buf = raw.frame_mut(f);
    let h = Header {
        payload_len: payload.len() as u16,
        ..*h
    };
    buf[58..58 + payload.len()].copy_from_slice(payload);
    let (_, len) = Frame::emit(&mut buf[..], dst, node_mac(SENDER), ETHERTYPE_DEFAULT, &h).unwrap();
    mutate(&mut buf[..len]);
    raw.transmit(
        &[TxDesc {
            frame: f,
            len: len as u32,
        }],
        false,
    )
    .unwrap();
    let mut kept = Vec::new();
    raw.reap(&mut kept).unwrap();
}

#[test]
fn a_poll_stops_sending_to_read_frames_that_wait() {
    let seg = MemorySegment::new();
    let engine = |node: NodeId, peer: NodeId| {
        let mut cfg = EngineConfig::new(node, GROUP, Algorithm::Mak);
        cfg.window_frames = 1024;
        cfg.max_queued_frames = 1024;
        cfg.batch_messages = false;
        cfg.peers = vec![(peer, node_mac(peer))];
        Engine::new(port(&seg, node), cfg).expect("engine")
    };
    let (mut s, mut r) = (engine(SENDER, 11), engine(11, SENDER));
    s.open_sender(&[11]).unwrap();
    r.open_receiver(SENDER).unwrap();
    let batch = EngineConfig::new(SENDER, GROUP, Algorithm::Mak).batch as u64;
    // Frames on the wire in one poll, and new data frames among them (a
    // heartbeat may join them once the sender has been idle long enough:
    // a loaded machine between two polls).
    let polled_both = |s: &mut Engine<MemoryTransport>| {
        let originals = |s: &Engine<MemoryTransport>| s.stats().sender.map_or(0, |c| c.data_sent);
        let (tx, data) = (s.stats().engine.tx_frames, originals(s));
        assert!(s.poll().unwrap(), "work was done");
        (s.stats().engine.tx_frames - tx, originals(s) - data)
    };
    let polled = |s: &mut Engine<MemoryTransport>| polled_both(s).0;
    let publish = |s: &mut Engine<MemoryTransport>, from: u32| {
        for i in from..from + 300 {
            s.publish(&i.to_be_bytes()).unwrap();
        }
    };
    // Nothing to read: the window's 300 frames leave in one poll.
    publish(&mut s, 0);
    assert_eq!(polled(&mut s), 300);
    // More frames wait than one receive batch takes (frames of another
    // group, dropped): a poll sends one TX batch and stops to read them.
    let mut raw = seg.port(node_mac(12), 256, 2048, 64);
    let mut h = Header::new(Kind::Data);
    (h.flags, h.group, h.src, h.epoch) = (Flags::WHOLE, GROUP + 1, 12, 1);
    for _ in 0..batch + 10 {
        send_raw(&mut raw, node_mac(SENDER), &h, b"x", &|_| {});
    }
    publish(&mut s, 300);
    // One TX batch, of new data frames but for a heartbeat that may join.
    let (tx, first) = polled_both(&mut s);
    assert_eq!(tx, batch);
    assert!(first == batch || first + 1 == batch, "{first} new of {tx}");
    let (tx, data) = polled_both(&mut s);
    assert_eq!(data, 300 - first, "the rest once all is read");
    assert!(tx >= data && tx <= data + 1, "{tx} frames for {data}");
    assert_eq!(s.stats().engine.rx_other_group, batch + 10);
    let mut got = Vec::new();
    for _ in 0..1_000 {
        s.poll().unwrap();
        r.poll().unwrap();
        while let Some(m) = r.recv_message() {
            got.push(u32::from_be_bytes(m.data[..].try_into().unwrap()));
        }
        if got.len() == 600 && s.send_idle() {
            break;
        }
    }
    assert_eq!(got, (0..600).collect::<Vec<_>>());
}

#[test]
fn frames_from_counts_each_senders_stream_frames_for_the_failure_detector() {
    let seg = MemorySegment::new();
    let engine = |node: NodeId, peers: &[NodeId]| {
        let mut cfg = EngineConfig::new(node, GROUP, Algorithm::Mak);
        cfg.batch_messages = false; // a frame a message
        cfg.peers = peers.iter().map(|&p| (p, node_mac(p))).collect();
        Engine::new(port(&seg, node), cfg).expect("engine")
    };
    let (mut s, mut r) = (engine(SENDER, &[11]), engine(11, &[SENDER]));
    s.open_sender(&[11]).unwrap();
    r.open_receiver(SENDER).unwrap();
    let mut counts = Vec::new();
    r.frames_from(&mut counts);
    assert_eq!(counts, [(SENDER, 0)], "a stream, nothing from it yet");
    for i in 0..20u32 {
        s.publish(&i.to_be_bytes()).unwrap();
    }
    let mut got = 0;
    for _ in 0..1_000 {
        s.poll().unwrap();
        r.poll().unwrap();
        while r.recv_message().is_some() {
            got += 1;
        }
        if got == 20 && s.send_idle() {
            break;
        }
    }
    assert_eq!(got, 20);
    r.frames_from(&mut counts);
    let (node, n) = counts[0];
    assert_eq!(node, SENDER);
    assert!(n >= 20, "every data frame counts: {n}");
    // The sender receives no stream: nothing to say about its peer.
    s.frames_from(&mut counts);
    assert!(counts.is_empty());
}

/// Data frame `seq` of SENDER's stream (one message, its number), from `raw`.
fn data_frame(raw: &mut MemoryTransport, seq: u32) {
    let mut h = Header::new(Kind::Data);
    (h.flags, h.group, h.src, h.epoch, h.seq) = (Flags::WHOLE, GROUP, SENDER, 1, Seq(seq));
    send_raw(raw, group_mac(GROUP), &h, &seq.to_be_bytes(), &|_| {});
}

#[test]
fn a_receiver_short_of_frames_keeps_the_one_it_delivers_next_and_drops_those_that_would_wait() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(11, GROUP, Algorithm::Mak);
    cfg.window_frames = 63; // a receive window the size of the pool
    let mut rx = Engine::new(seg.port(node_mac(11), 64, 2048, 1024), cfg).expect("engine");
    rx.open_receiver(SENDER).expect("receiver");
    let mut raw = seg.port(node_mac(SENDER), 256, 2048, 1024);
    // Frame 0 is lost; 1..63 come and wait for it.
    for seq in 1..63 {
        data_frame(&mut raw, seq);
        rx.poll().expect("poll");
    }
    let c = rx.stats();
    assert!(
        c.engine.rx_dropped_scarce > 0,
        "the waiting frames stop before the pool is gone: {:?}",
        c.engine
    );
    assert!(c.frames.free >= 64 / 4 - 1, "{:?}", c.frames);
    // So frame 0 can still be received: it and the frames kept after it
    // are delivered.
    data_frame(&mut raw, 0);
    let mut got = Vec::new();
    for _ in 0..10 {
        rx.poll().expect("poll");
        while let Some(m) = rx.recv_message() {
            got.push(u32::from_be_bytes(m.data[..].try_into().unwrap()));
        }
    }
    let kept = 63 - c.engine.rx_dropped_scarce as u32;
    assert_eq!(got, (0..kept).collect::<Vec<_>>());
}

#[test]
fn publishing_leaves_a_quarter_of_the_frames_for_receiving() {
    let seg = MemorySegment::new();
    let mut cfg = EngineConfig::new(SENDER, GROUP, Algorithm::Mak);
    (cfg.window_frames, cfg.max_queued_frames, cfg.batch_messages) = (128, 250, false);
    cfg.peers = vec![(11, node_mac(11))];
    let mut s = Engine::new(seg.port(node_mac(SENDER), 256, 2048, 1024), cfg).expect("engine");
    s.open_sender(&[11]).unwrap();
    let mut published = 0;
    while s.publish(b"m").is_ok() {
        published += 1;
    }
    let c = s.stats();
    assert_eq!(c.engine.publish_rx_reserve, 1, "{:?}", c.engine);
    assert!(c.frames.free >= 256 / 4, "{:?}", c.frames);
    assert!(published >= 256 / 2, "{published}");
}
