//! Go-Back-N (seed 001 §4.2.1) and the iterative baseline (seed 000 §2 (1)) run
//! end to end over a lossy in-test channel, in virtual time, with bounded
//! iterations. Checked: every receiver delivers every message in order exactly
//! once, every buffer handed to a machine comes back exactly once, and the
//! iterative sender releases a buffer only after every member has it.

use std::collections::{BTreeMap, BTreeSet};

use mcast_proto::gbn::{AckPolicy, GbnConfig, GbnReceiver, GbnSender};
use mcast_proto::iterative::IterativeSender;
use mcast_proto::{
    BufId, Dest, Duration, Endpoint, Event, Flags, Instant, Kind, NodeId, OutFrame, Rng, RxBody,
    Sender, Seq, StreamConfig, Transmit, TxBody,
};

const SENDER: NodeId = 1;
const LATENCY: Duration = Duration::from_micros(5);
const MAX_ITERATIONS: usize = 200_000;
/// Receiver-side buffers are numbered from here (the driver copies each frame
/// that arrives into a fresh buffer).
const RX_BUF_BASE: u32 = 1_000_000;

fn stream(local: NodeId, initial: u32, window: u32) -> StreamConfig {
    StreamConfig {
        group: 5,
        local,
        sender: SENDER,
        epoch: 11,
        initial_seq: Seq(initial),
        window_frames: window,
        seed: 99,
    }
}

/// A frame in flight.
struct InFlight {
    at: Instant,
    order: u64,
    tx: Transmit,
}

/// Everything a run needs; `S` is a [`GbnSender`] or an [`IterativeSender`].
struct Run<S: Sender> {
    sender: S,
    receivers: BTreeMap<NodeId, GbnReceiver>,
    /// Receivers the sender currently addresses (a removed one stays on the wire).
    members: Vec<NodeId>,
    rng: Rng,
    loss: f64,
    wire: Vec<InFlight>,
    order: u64,
    now: Instant,
    /// Sender buffers handed over and not yet released.
    tx_live: BTreeSet<u32>,
    /// The members each message was sent to.
    addressed: BTreeMap<u32, Vec<NodeId>>,
    tx_released: Vec<u32>,
    /// Receiver buffers handed over and not yet returned -> the message they carry.
    rx_live: BTreeMap<u32, u32>,
    next_rx_buf: u32,
    delivered: BTreeMap<NodeId, Vec<u32>>,
    /// `(dest, seq)` of every data frame the sender emitted, in order.
    data_log: Vec<(NodeId, Seq)>,
}

impl<S: Sender> Run<S> {
    fn new(sender: S, receivers: &[NodeId], cfg: GbnConfig, initial: u32, window: u32) -> Self {
        Run {
            sender,
            receivers: receivers
                .iter()
                .map(|&r| (r, GbnReceiver::new(stream(r, initial, window), cfg)))
                .collect(),
            members: receivers.to_vec(),
            rng: Rng::new(0),
            loss: 0.0,
            wire: Vec::new(),
            order: 0,
            now: Instant(1_000_000),
            tx_live: BTreeSet::new(),
            addressed: BTreeMap::new(),
            tx_released: Vec::new(),
            rx_live: BTreeMap::new(),
            next_rx_buf: RX_BUF_BASE,
            delivered: receivers.iter().map(|&r| (r, Vec::new())).collect(),
            data_log: Vec::new(),
        }
    }

    fn put_on_wire(&mut self, tx: Transmit) {
        assert!(matches!(tx.dest, Dest::Node(_)), "GBN is unicast: {tx:?}");
        if self.rng.chance(self.loss) {
            return;
        }
        self.order += 1;
        self.wire.push(InFlight {
            at: self.now + LATENCY,
            order: self.order,
            tx,
        });
    }

    /// Delivers every frame due by `now`, in send order.
    fn deliver_due(&mut self) {
        let now = self.now;
        let mut due: Vec<InFlight> = Vec::new();
        let mut i = 0;
        while i < self.wire.len() {
            if self.wire[i].at <= now {
                due.push(self.wire.swap_remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|f| (f.at, f.order));
        for f in due {
            let Dest::Node(dest) = f.tx.dest else {
                unreachable!()
            };
            if dest == SENDER {
                self.sender.handle_frame(now, &f.tx.header, RxBody::None);
                continue;
            }
            let r = self.receivers.get_mut(&dest).expect("a known receiver");
            let TxBody::Buf(BufId(msg)) = f.tx.body else {
                panic!("data without a buffer: {:?}", f.tx)
            };
            let rx = self.next_rx_buf;
            self.next_rx_buf += 1;
            self.rx_live.insert(rx, msg);
            r.handle_frame(now, &f.tx.header, RxBody::Data(BufId(rx)));
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        if self.sender.poll_timeout().is_some_and(|d| d <= now) {
            self.sender.handle_timeout(now);
        }
        for r in self.receivers.values_mut() {
            if r.poll_timeout().is_some_and(|d| d <= now) {
                r.handle_timeout(now);
            }
        }
    }

    fn drain(&mut self) {
        let now = self.now;
        while let Some(tx) = self.sender.poll_transmit(now) {
            assert_eq!(tx.header.kind, Kind::GbnData);
            let Dest::Node(dest) = tx.dest else {
                unreachable!()
            };
            assert_eq!(tx.header.peer, dest);
            self.data_log.push((dest, tx.header.seq));
            self.put_on_wire(tx);
        }
        let ids: Vec<NodeId> = self.receivers.keys().copied().collect();
        for id in ids {
            while let Some(tx) = self.receivers.get_mut(&id).unwrap().poll_transmit(now) {
                assert!(matches!(tx.header.kind, Kind::Pack | Kind::Nack));
                assert_eq!(mcast_proto::stream_of(&tx.header), SENDER);
                self.put_on_wire(tx);
            }
            while let Some(ev) = self.receivers.get_mut(&id).unwrap().poll_event() {
                match ev {
                    Event::Deliver {
                        stream,
                        seq: _,
                        buf,
                        len,
                        flags,
                    } => {
                        assert_eq!(stream, SENDER);
                        let msg = self.rx_live.remove(&buf.0).expect("returned once");
                        assert_eq!(len, msg as u16 + 1);
                        assert!(flags.contains(Flags::WHOLE));
                        self.delivered.get_mut(&id).unwrap().push(msg);
                    }
                    Event::Release(buf) => {
                        assert!(self.rx_live.remove(&buf.0).is_some(), "returned once");
                    }
                }
            }
        }
        while let Some(ev) = self.sender.poll_event() {
            let Event::Release(BufId(b)) = ev else {
                panic!("a sender delivers nothing: {ev:?}")
            };
            assert!(self.tx_live.remove(&b), "buffer {b} released twice");
            let addressed = self.addressed.remove(&b).unwrap();
            for m in addressed.iter().filter(|m| self.members.contains(m)) {
                assert!(
                    self.delivered[m].contains(&b),
                    "buffer {b} released before member {m} had it"
                );
            }
            self.tx_released.push(b);
        }
    }

    /// Sends messages `0..n` (message i in buffer i, `i + 1` bytes), calling
    /// `at_send(run, i)` before each send.
    fn run(&mut self, n: u32, mut at_send: impl FnMut(&mut Self, u32)) {
        let mut next = 0;
        for _ in 0..MAX_ITERATIONS {
            self.deliver_due();
            self.fire_timers();
            while next < n && self.sender.can_send() {
                at_send(self, next);
                let frame = OutFrame {
                    buf: BufId(next),
                    len: next as u16 + 1,
                    frag: Flags::WHOLE,
                    last: next + 1 == n,
                };
                self.sender
                    .send(self.now, frame)
                    .expect("can_send said yes");
                self.tx_live.insert(next);
                self.addressed.insert(next, self.members.clone());
                next += 1;
            }
            self.drain();
            if next == n && self.sender.is_idle() && self.wire.is_empty() {
                return;
            }
            let deadlines = self
                .wire
                .iter()
                .map(|f| f.at)
                .chain(self.sender.poll_timeout())
                .chain(self.receivers.values().filter_map(|r| r.poll_timeout()));
            let wake = deadlines.min().expect("stuck: nothing in flight, no timer");
            assert!(wake >= self.now, "a deadline in the past: {wake:?}");
            self.now = wake;
        }
        panic!(
            "not finished after {MAX_ITERATIONS} iterations: sent {next} of {n}, loss {}",
            self.loss
        );
    }

    fn check_complete(&self, n: u32) {
        let all: Vec<u32> = (0..n).collect();
        for m in &self.members {
            assert_eq!(self.delivered[m], all, "receiver {m}");
        }
        assert!(self.tx_live.is_empty(), "unreleased: {:?}", self.tx_live);
        assert!(self.rx_live.is_empty(), "unreturned: {:?}", self.rx_live);
        assert_eq!(self.sender.held_buffers(), 0);
        for r in self.receivers.values() {
            assert_eq!(r.held_buffers(), 0);
        }
        let mut released = self.tx_released.clone();
        released.sort_unstable();
        assert_eq!(released, all, "each buffer released exactly once");
    }
}

fn policies() -> [AckPolicy; 4] {
    [
        AckPolicy::Immediate,
        AckPolicy::OnRequest,
        AckPolicy::Delayed {
            every: 4,
            max_delay: Duration::from_micros(50),
        },
        AckPolicy::Piggyback {
            max_delay: Duration::from_micros(30),
        },
    ]
}

#[test]
fn gbn_pair_over_a_lossy_link_delivers_everything_once_in_order() {
    let n = 300;
    let (mut stalls, mut timeouts) = (0, 0);
    for (i, policy) in policies().into_iter().enumerate() {
        for (j, loss) in [0.0, 0.05, 0.2, 0.4].into_iter().enumerate() {
            for seed in 0..4u64 {
                let initial = u32::MAX - 100;
                let cfg = GbnConfig {
                    ack_policy: policy,
                    ..GbnConfig::default()
                };
                let s = GbnSender::new(stream(SENDER, initial, 16), 2, cfg);
                let mut run = Run::new(s, &[2], cfg, initial, 16);
                run.loss = loss;
                run.rng = Rng::new(1000 * seed + (i * 10 + j) as u64);
                run.run(n, |_, _| {});
                run.check_complete(n);
                let c = *run.sender.counters();
                assert_eq!(c.data_sent, u64::from(n));
                if loss > 0.0 {
                    assert!(c.data_retransmitted > 0, "{policy:?} loss {loss}: {c:?}");
                } else {
                    assert_eq!(c.data_retransmitted, 0, "{policy:?}: {c:?}");
                }
                stalls += c.stalls;
                timeouts += c.timeouts;
            }
        }
    }
    // Both recovery paths of seed 001 were taken: Nack go-back and timeouts.
    assert!(
        stalls > 0 && timeouts > 0,
        "stalls {stalls} timeouts {timeouts}"
    );
}

#[test]
fn iterative_lossless_sends_in_turn_and_releases_after_all_acked() {
    let members = [2, 3, 4];
    let cfg = GbnConfig::default();
    let s = IterativeSender::new(stream(SENDER, 7, 8), cfg, &members);
    let mut run = Run::new(s, &members, cfg, 7, 8);
    run.run(100, |_, _| {});
    run.check_complete(100);
    // "In turn": the first message goes to r1, r2, r3, then the second.
    assert_eq!(
        &run.data_log[..6],
        &[
            (2, Seq(7)),
            (3, Seq(7)),
            (4, Seq(7)),
            (2, Seq(8)),
            (3, Seq(8)),
            (4, Seq(8))
        ]
    );
    let c = run.sender.counters();
    assert_eq!((c.data_sent, c.data_retransmitted), (300, 0));
    // Frames that arrive together share one cumulative Pack; none is lost.
    let packs_sent: u64 = run
        .receivers
        .values()
        .map(|r| r.counters().packs_sent)
        .sum();
    assert_eq!(c.packs_received, packs_sent);
    assert!(c.packs_received >= 3 && c.nacks_received == 0);
    assert!(run.sender.is_idle());
}

#[test]
fn iterative_over_lossy_links_delivers_everything_at_every_member() {
    let members = [2, 3, 4];
    for (i, loss) in [0.05, 0.2, 0.35].into_iter().enumerate() {
        for (k, policy) in policies().into_iter().enumerate() {
            let initial = u32::MAX - 20;
            let cfg = GbnConfig {
                ack_policy: policy,
                ..GbnConfig::default()
            };
            let s = IterativeSender::new(stream(SENDER, initial, 8), cfg, &members);
            let mut run = Run::new(s, &members, cfg, initial, 8);
            run.loss = loss;
            run.rng = Rng::new(77 + (i * 3 + k) as u64);
            run.run(150, |_, _| {});
            run.check_complete(150);
            let c = run.sender.counters();
            assert_eq!(c.data_sent, 450);
            assert!(c.data_retransmitted > 0);
        }
    }
}

#[test]
fn iterative_member_removed_mid_stream_releases_its_references() {
    let members = [2, 3, 4];
    let cfg = GbnConfig::default();
    let s = IterativeSender::new(stream(SENDER, 0, 8), cfg, &members);
    let mut run = Run::new(s, &members, cfg, 0, 8);
    run.loss = 0.1;
    run.rng = Rng::new(5);
    let removed_at = 40u32;
    run.run(120, |run, i| {
        if i == removed_at {
            // The view drops receiver 4 (it stays on the wire: frames in
            // flight still reach it and its late Packs are rejected).
            run.members = vec![2, 3];
            run.sender.set_members(run.now, &[2, 3]);
        }
    });
    run.check_complete(120);
    let r4 = &run.delivered[&4];
    assert!(
        r4.len() as u32 <= removed_at + 8,
        "4 got at most what was in flight"
    );
    assert_eq!(*r4, (0..r4.len() as u32).collect::<Vec<_>>());
    assert_eq!(run.sender.members().collect::<Vec<_>>(), vec![2, 3]);
    assert!(run.sender.member(4).is_none());
}

#[test]
fn iterative_member_added_mid_stream_starts_at_the_next_message() {
    let cfg = GbnConfig::default();
    let s = IterativeSender::new(stream(SENDER, 0, 8), cfg, &[2, 3]);
    let mut run = Run::new(s, &[2, 3, 5], cfg, 0, 8);
    run.members = vec![2, 3];
    run.loss = 0.1;
    run.rng = Rng::new(6);
    run.run(60, |run, i| {
        if i == 20 {
            run.members = vec![2, 3, 5];
            run.sender.set_members(run.now, &[2, 3, 5]);
        }
    });
    // 5 starts its own sequence space at initial_seq with message 20.
    assert_eq!(run.delivered[&5], (20..60).collect::<Vec<_>>());
    run.members = vec![2, 3];
    run.check_complete(60);
}

#[test]
fn iterative_refuses_without_members_and_when_any_window_is_full() {
    let cfg = GbnConfig::default();
    let mut s = IterativeSender::new(stream(SENDER, 0, 2), cfg, &[]);
    let frame = |b| OutFrame {
        buf: BufId(b),
        len: 1,
        frag: Flags::WHOLE,
        last: true,
    };
    assert!(s.is_idle() && !s.can_send());
    assert_eq!(
        s.send(Instant::ZERO, frame(0)),
        Err(mcast_proto::SendError::NoMembers(BufId(0)))
    );
    s.set_members(Instant::ZERO, &[2, 3, SENDER, 2]);
    assert_eq!(s.members().collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.send(Instant::ZERO, frame(0)), Ok(Seq(0)));
    assert_eq!(s.send(Instant::ZERO, frame(1)), Ok(Seq(1)));
    assert_eq!(
        s.send(Instant::ZERO, frame(2)),
        Err(mcast_proto::SendError::WindowFull(BufId(2)))
    );
    assert_eq!(s.counters().window_full, 1);
    assert_eq!(s.held_buffers(), 2, "distinct buffers, not per member");
    // Dropping every member releases everything.
    s.set_members(Instant::ZERO, &[]);
    let released: Vec<Event> = core::iter::from_fn(|| s.poll_event()).collect();
    assert_eq!(
        released,
        vec![Event::Release(BufId(0)), Event::Release(BufId(1))]
    );
    assert!(s.is_idle());
    assert_eq!(s.held_buffers(), 0);
}
