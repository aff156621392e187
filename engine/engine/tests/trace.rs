//! Per-hop stamps (`EngineConfig::trace`, docs/mcastd.md "Where the time
//! goes"), over the in-memory segment: a traced sender hands one (queued,
//! sent) sample per data frame it sends for the first time, a traced
//! receiver tells its sink when it read each frame and the sender's stamp,
//! and an engine without tracing does neither; and a frame that ends an
//! engine's sleep is delivered in the same call. No privileges needed.

use std::sync::Arc;

use mcast_engine::{
    Algorithm, Deliver, Engine, EngineConfig, Fragment, MemorySegment, MemoryTransport, RawFrame,
};
use mcast_wire::{node_mac, NodeId};

const GROUP: u32 = 7;

fn engine(seg: &Arc<MemorySegment>, node: NodeId, trace: bool) -> Engine<MemoryTransport> {
    let mut cfg = EngineConfig::new(node, GROUP, Algorithm::Mak);
    cfg.peers = (1..=2).map(|n| (n, node_mac(n))).collect();
    cfg.trace = trace;
    cfg.spin = std::time::Duration::ZERO;
    cfg.max_sleep = std::time::Duration::from_secs(10);
    Engine::new(seg.port(node_mac(node), 1024, 2048, 4096), cfg).expect("engine")
}

#[derive(Default)]
struct Frames {
    /// (rx_ns, sent_us) of every frame delivered.
    stamps: Vec<(u64, u32)>,
    messages: usize,
}

impl Deliver for Frames {
    fn deliver(&mut self, f: Fragment<'_>) {
        self.messages += usize::from(f.last);
    }
    fn frame(&mut self, f: RawFrame<'_>) {
        self.stamps.push((f.rx_ns, f.sent_us));
    }
}

/// Sends `n` messages one poll apart (one frame each) from node 1 to node
/// 2; returns the sender's samples and what the receiver's sink saw.
fn run(trace: bool, n: usize) -> (Vec<(u64, u64)>, Frames) {
    let seg = MemorySegment::new();
    let (mut tx, mut rx) = (engine(&seg, 1, trace), engine(&seg, 2, trace));
    tx.open_sender(&[2]).unwrap();
    rx.open_receiver(1).unwrap();
    assert_eq!((tx.traces(), rx.traces()), (trace, trace));
    let (mut samples, mut sink) = (Vec::new(), Frames::default());
    for i in 0..n {
        tx.publish(&[i as u8; 100]).unwrap();
        tx.poll().unwrap();
        rx.poll_deliver(&mut sink).unwrap();
        tx.drain_sent_stamps(|g, q, s| {
            assert_eq!(g, GROUP);
            samples.push((q, s))
        });
    }
    for _ in 0..1000 {
        tx.poll().unwrap();
        rx.poll_deliver(&mut sink).unwrap();
        tx.drain_sent_stamps(|g, q, s| {
            assert_eq!(g, GROUP);
            samples.push((q, s))
        });
    }
    (samples, sink)
}

#[test]
fn a_traced_engine_stamps_each_frame_queued_sent_and_received() {
    let (samples, sink) = run(true, 20);
    assert_eq!(sink.messages, 20);
    // One sample per frame sent for the first time: the ACK rounds and any
    // resend add none.
    assert_eq!(samples.len(), 20, "{samples:?}");
    let now = mcast_engine::sys::monotonic_ns();
    for &(queued, sent) in &samples {
        assert!(
            0 < queued && queued <= sent && sent <= now,
            "{queued} {sent} {now}"
        );
    }
    assert_eq!(sink.stamps.len(), 20);
    for (&(rx_ns, sent_us), &(_, sent)) in sink.stamps.iter().zip(&samples) {
        // The frame carries the sending poll's clock, in µs.
        assert_eq!(sent_us, (sent / 1000) as u32);
        assert!(rx_ns >= sent && rx_ns <= now, "{rx_ns} {sent} {now}");
    }
}

#[test]
fn an_engine_without_tracing_stamps_nothing() {
    let (samples, sink) = run(false, 5);
    assert_eq!(sink.messages, 5);
    assert!(samples.is_empty());
    assert!(sink.stamps.iter().all(|&(rx, sent)| rx == 0 && sent == 0));
}

/// A frame that wakes a sleeping engine is delivered by the call that
/// slept, not by the next one (mcastd's round does much else in between).
#[test]
fn a_frame_that_ends_a_sleep_is_delivered_by_that_call() {
    let seg = MemorySegment::new();
    let mut rx = engine(&seg, 2, false);
    rx.open_receiver(1).unwrap();
    let mut cfg = EngineConfig::new(1, GROUP, Algorithm::Mak);
    cfg.peers = vec![(2, node_mac(2))];
    let tx = Engine::new(seg.port(node_mac(1), 1024, 2048, 4096), cfg).expect("engine");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let sender = std::thread::spawn(move || {
        let mut tx = tx;
        tx.open_sender(&[2]).unwrap();
        ready_rx.recv().unwrap();
        // The receiver is, by now, asleep on the segment (a frame sent
        // before it sleeps is delivered by its first poll, and the call
        // passes too, without testing the wake-up).
        std::thread::sleep(std::time::Duration::from_millis(20));
        tx.publish(b"wake up").unwrap();
        for _ in 0..100 {
            tx.poll().unwrap();
        }
    });
    let mut sink = Frames::default();
    ready_tx.send(()).unwrap();
    // No spin: the first poll finds nothing and the engine sleeps at once,
    // until the frame comes (or 10 s, the engine's own bound).
    let woke = rx
        .run_once_deliver(&mut sink, &[], Some(std::time::Duration::from_secs(10)))
        .unwrap();
    sender.join().unwrap();
    assert!(woke, "the call that slept reports the work it did");
    assert_eq!(sink.messages, 1, "delivered by the call that slept");
}
