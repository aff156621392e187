//! The ACK and NAK baselines (seed 000 §2 (2), (3)) end to end: one sender and
//! three receivers joined by an in-test lossy, reordering channel, in virtual
//! time that jumps to the next arrival or deadline. After every step: buffers
//! stay within the window. At the end: every receiver delivered the whole
//! stream, in order, exactly once, and every `BufId` came back exactly once.
//! A failure names its seed; the seed replays it.

use std::collections::{HashMap, HashSet};

use mcast_proto::any::{Algorithm, AnyReceiver, AnySender, ProtocolConfig};
use mcast_proto::{
    BufId, Dest, Duration, Endpoint, Event, Flags, Header, Instant, OutFrame, RangeList, Rng,
    RxBody, Sender, Seq, StreamConfig, Transmit, TxBody,
};

const SENDER: u32 = 1;
const RECEIVERS: [u32; 3] = [2, 3, 4];
const MAX_STEPS: usize = 200_000;

#[derive(Debug, Clone)]
enum Payload {
    /// A data frame carrying message number `msg`.
    Data(u32),
    Nak(Box<RangeList>),
    None,
}

#[derive(Debug)]
struct InFlight {
    at: Instant,
    /// Index into `nodes`: 0 is the sender, 1.. the receivers.
    to: usize,
    header: Header,
    payload: Payload,
}

struct Run {
    seed: u64,
    rng: Rng,
    now: Instant,
    loss: f64,
    /// Extra random latency, 0 to this, in ns: reorders frames when positive.
    jitter_ns: u64,
    /// Data frames of this sequence number are never lost (NAK: the last frame,
    /// whose loss no receiver can detect, seed 000 §3.1).
    protect: Option<Seq>,
    inflight: Vec<InFlight>,
    next_buf: u32,
    /// Which message each live buffer holds.
    payload_of: HashMap<BufId, u32>,
    /// Buffers handed to a machine and not yet returned.
    outstanding: HashSet<BufId>,
    delivered: Vec<Vec<u32>>,
}

impl Run {
    fn new_buf(&mut self, msg: u32) -> BufId {
        let b = BufId(self.next_buf);
        self.next_buf += 1;
        self.payload_of.insert(b, msg);
        assert!(self.outstanding.insert(b));
        b
    }

    fn returned(&mut self, b: BufId) -> u32 {
        assert!(
            self.outstanding.remove(&b),
            "seed {}: {b:?} returned twice or never handed in",
            self.seed
        );
        self.payload_of[&b]
    }

    fn events(&mut self, node: usize, e: &mut dyn Endpoint) {
        while let Some(ev) = e.poll_event() {
            match ev {
                Event::Deliver { seq: _, buf, .. } => {
                    assert!(node > 0, "seed {}: the sender delivered", self.seed);
                    let msg = self.returned(buf);
                    self.delivered[node - 1].push(msg);
                }
                Event::Release(buf) => {
                    self.returned(buf);
                }
            }
        }
    }

    fn transmits(&mut self, e: &mut dyn Endpoint) {
        while let Some(tx) = e.poll_transmit(self.now) {
            self.post(tx);
        }
    }

    fn post(&mut self, tx: Transmit) {
        let payload = match tx.body {
            TxBody::Buf(b) => {
                assert!(
                    self.outstanding.contains(&b),
                    "seed {}: sent {b:?} it does not own",
                    self.seed
                );
                Payload::Data(self.payload_of[&b])
            }
            TxBody::Ranges(l) => Payload::Nak(l),
            TxBody::None => Payload::None,
            TxBody::Relay(_) => panic!("seed {}: a baseline relayed a repair", self.seed),
        };
        let targets: Vec<usize> = match tx.dest {
            Dest::Group => (1..=RECEIVERS.len()).collect(),
            Dest::Node(SENDER) => vec![0],
            Dest::Node(n) => vec![1 + RECEIVERS.iter().position(|r| *r == n).unwrap()],
        };
        for to in targets {
            let protected =
                matches!(payload, Payload::Data(_)) && Some(tx.header.seq) == self.protect;
            if !protected && self.rng.chance(self.loss) {
                continue;
            }
            // 5 µs, plus jitter enough to reorder back-to-back frames.
            let delay = 5_000 + self.rng.range(0, self.jitter_ns);
            let at = self.now + Duration::from_nanos(delay);
            self.inflight.push(InFlight {
                at,
                to,
                header: tx.header,
                payload: payload.clone(),
            });
        }
    }

    fn arrive(&mut self, f: InFlight, node: &mut dyn Endpoint) {
        match f.payload {
            Payload::Data(msg) => {
                let b = self.new_buf(msg);
                node.handle_frame(self.now, &f.header, RxBody::Data(b));
            }
            Payload::Nak(l) => node.handle_frame(self.now, &f.header, RxBody::Ranges(&l)),
            Payload::None => node.handle_frame(self.now, &f.header, RxBody::None),
        }
    }
}

/// Runs `messages` frames through `algo` with `loss` on every copy of every
/// frame and up to `jitter_ns` of reordering; returns the sender's
/// retransmissions.
fn run(algo: Algorithm, seed: u64, window: u32, messages: u32, loss: f64, jitter_ns: u64) -> u64 {
    let initial_seq = Seq(u32::MAX - messages / 2);
    let stream = |local| StreamConfig {
        group: 5,
        local,
        sender: SENDER,
        epoch: 3,
        initial_seq,
        window_frames: window,
        seed,
    };
    let cfg = ProtocolConfig::default();
    let mut sender = AnySender::new(algo, stream(SENDER), &cfg, &RECEIVERS);
    let mut receivers: Vec<AnyReceiver> = RECEIVERS
        .iter()
        .map(|&r| AnyReceiver::new(algo, stream(r), &cfg))
        .collect();
    let mut net = Run {
        seed,
        rng: Rng::new(seed),
        now: Instant(1_000_000),
        loss,
        jitter_ns,
        protect: (algo == Algorithm::Nak).then(|| initial_seq.add(messages - 1)),
        inflight: Vec::new(),
        next_buf: 0,
        payload_of: HashMap::new(),
        outstanding: HashSet::new(),
        delivered: vec![Vec::new(); RECEIVERS.len()],
    };
    let mut offered = 0;
    let mut done = false;
    for _ in 0..MAX_STEPS {
        while offered < messages && sender.can_send() {
            let buf = net.new_buf(offered);
            let frame = OutFrame {
                buf,
                len: 64,
                frag: Flags::WHOLE,
                last: offered + 1 == messages,
            };
            let seq = sender.send(net.now, frame).expect("can_send said yes");
            assert_eq!(seq, initial_seq.add(offered));
            offered += 1;
        }
        net.transmits(&mut sender);
        net.events(0, &mut sender);
        for (i, r) in receivers.iter_mut().enumerate() {
            net.transmits(r);
            net.events(i + 1, r);
        }
        assert!(sender.held_buffers() <= window as usize, "seed {seed}");
        for r in &receivers {
            assert!(r.held_buffers() <= window as usize, "seed {seed}");
        }
        let all_delivered = net.delivered.iter().all(|d| d.len() == messages as usize);
        if all_delivered && sender.is_idle() && net.inflight.is_empty() {
            done = true;
            break;
        }
        // Jump to the next arrival or deadline.
        let next = net
            .inflight
            .iter()
            .map(|f| f.at)
            .chain(sender.poll_timeout())
            .chain(receivers.iter().filter_map(|r| r.poll_timeout()))
            .min();
        let Some(next) = next else {
            panic!(
                "seed {seed}: {algo} stalled with nothing in flight and no timer; delivered {:?}",
                net.delivered.iter().map(Vec::len).collect::<Vec<_>>()
            );
        };
        net.now = net.now.max(next);
        let now = net.now;
        let (due, later): (Vec<_>, Vec<_>) = net.inflight.drain(..).partition(|f| f.at <= now);
        net.inflight = later;
        for f in due {
            let to = f.to;
            if to == 0 {
                net.arrive(f, &mut sender);
            } else {
                net.arrive(f, &mut receivers[to - 1]);
            }
        }
        sender.handle_timeout(now);
        for r in &mut receivers {
            r.handle_timeout(now);
        }
    }
    assert!(
        done,
        "seed {seed}: {algo} did not finish in {MAX_STEPS} steps"
    );
    let expected: Vec<u32> = (0..messages).collect();
    for (i, d) in net.delivered.iter().enumerate() {
        assert_eq!(
            d, &expected,
            "seed {seed}: receiver {i} delivered out of order or twice"
        );
    }
    if let AnySender::Nak(s) = &mut sender {
        // The NAK sender never frees a frame by itself (seed 000 §3.1): shut down.
        assert_eq!(s.held_buffers(), messages as usize);
        s.release_all();
    }
    net.events(0, &mut sender);
    assert_eq!(sender.held_buffers(), 0, "seed {seed}");
    assert!(
        net.outstanding.is_empty(),
        "seed {seed}: buffers never returned: {:?}",
        net.outstanding
    );
    sender.counters().data_retransmitted
}

#[test]
fn ack_baseline_delivers_everything_through_loss() {
    for seed in 0..10 {
        let resent = run(Algorithm::Ack, seed, 8, 300, 0.1, 10_000);
        assert!(resent > 0, "seed {seed}: the loss was exercised");
    }
}

#[test]
fn ack_baseline_stop_and_wait_delivers_everything_through_loss() {
    // Window 1: the paper's stop-and-wait form of seed 000 §2 (2).
    for seed in 100..105 {
        run(Algorithm::Ack, seed, 1, 100, 0.1, 10_000);
    }
}

#[test]
fn nak_baseline_delivers_everything_through_loss_unless_the_last_frame_is_lost() {
    // The window holds the whole stream: the NAK sender frees nothing.
    for seed in 0..10 {
        let resent = run(Algorithm::Nak, seed, 256, 200, 0.1, 10_000);
        assert!(resent > 0, "seed {seed}: the loss was exercised");
    }
}

#[test]
fn without_loss_or_reordering_nothing_is_resent() {
    assert_eq!(run(Algorithm::Ack, 7, 8, 100, 0.0, 0), 0);
    assert_eq!(run(Algorithm::Nak, 7, 128, 100, 0.0, 0), 0);
}

#[test]
fn reordering_alone_makes_the_nak_baseline_resend() {
    // A receiver NAKs the moment a frame arrives early (no random wait,
    // seed 000 §2 (3)), so reordering without any loss costs retransmissions;
    // the ACK baseline only resends on its timeout.
    assert!(run(Algorithm::Nak, 7, 128, 100, 0.0, 10_000) > 0);
    assert_eq!(run(Algorithm::Ack, 7, 8, 100, 0.0, 10_000), 0);
}
