//! A timing model of one group on a switched segment, driving the daemon's
//! own group modes (`mcast_cli::daemon::mode`: the FIFO, total-order and
//! sequenced modes, unchanged) in virtual time, for the seed 002 figures
//! (docs/benchmarks.md "Total order in the simulator").
//!
//! The model: `nodes` hosts, one port each on one output-queued switch.
//! A node's CPU handles one frame at a time (`cpu_ns` per frame it sends or
//! receives, in arrival order); its NIC serializes its frames at the link
//! rate; the switch copies a multicast frame to every other port, each port
//! serializing its copies at the link rate; a copy then arrives `latency_ns`
//! later. Each node's stream is a reliable FIFO stream (MAK's, modelled): a
//! copy is lost with probability `loss`; the receiver learns of the gap from
//! the next frame of that stream, or from the sender's idle advertisement
//! two group round trips after it (MAK's tail policy), waits the NAK timer
//! MAK would draw (`MakConfig::default().nak_timer`, truncated exponential
//! over the group's window) and gets the repair one round trip later (lost
//! again with the same probability); later frames of that stream wait for
//! it. A sender's window (`window` frames) frees as every member has
//! handled a frame, one latency later (its ACK). Unicast link messages (the
//! sequenced mode's forwards) travel the same way, one port only. Not
//! modelled: the cost of NAK, ACK and repair frames on the wire and at the
//! sender (repairs cost the receiver's CPU only), switch buffer limits.
//!
//! Every subscriber's deliveries are checked as they come: each origin's
//! messages in order, none twice, all of them by the end; in an ordered mode
//! every node's whole sequence the same (a running digest).
//!
//! Owns: the model and its run. Does not touch: the modes' state (driven
//! through [`GroupMode`] only, as the daemon drives them).

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::rc::Rc;

use hdrhistogram::Histogram;
use mcast_cli::daemon::mode::fifo::PerSenderFifo;
use mcast_cli::daemon::mode::sequenced::Sequenced;
use mcast_cli::daemon::mode::total::{TotalOrder, DEFAULT_BEACON_NS};
use mcast_cli::daemon::mode::{GroupMode, ModeCx, Published, StreamOps};
use mcast_cli::links::LinkMessage;
use mcast_engine::{EngineError, Fragment, PublishError, StreamStart};
use mcast_ipc::ClientId;
use mcast_proto::mak::MakConfig;
use mcast_proto::{Duration, Rng};
use mcast_wire::{GroupId, NodeId, Seq};

use super::tally::Tally;

const GROUP: GroupId = 7;
const PUBLISHER: ClientId = ClientId(1);
const SUBSCRIBER: ClientId = ClientId(2);
/// Bytes a frame carries besides its payload: Ethernet (header, FCS,
/// preamble, gap), the engine's header and the mode's.
const FRAME_OVERHEAD: usize = 38 + 40;
/// A message's bytes the model reads: origin, index, publish time.
const MARK: usize = 4 + 8 + 8;

/// The group's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Per-sender order (`mode = "fifo"`): the baseline.
    Fifo,
    /// One order from stamps and barriers (`mode = "total"`), with
    /// `commit = true` when `commit` (its reports over a commit tree from
    /// `mode::commit_tree::DEFAULT_FROM_NODES` members, as mcastd does).
    Total { commit: bool },
    /// `commit = true` with every member's report multicast to all
    /// whatever the group's size (no commit tree): the baseline of the
    /// tree.
    CommitDirect,
    /// `commit = false` with every member's stamps multicast to all
    /// whatever the group's size (no claims over the tree): the baseline
    /// of the stamps over the tree.
    TotalDirect,
    /// Every message through the root (`mode = "sequenced"`).
    Sequenced,
    /// One sender at a time, in turns (seed 002's token baseline; the
    /// model's own, [`super::token`]).
    Token,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Fifo => "fifo",
            Kind::Total { commit: false } => "total",
            Kind::Total { commit: true } => "total+commit",
            Kind::CommitDirect => "commit-direct",
            Kind::TotalDirect => "total-direct",
            Kind::Sequenced => "sequenced",
            Kind::Token => "token",
        }
    }

    fn ordered(self) -> bool {
        self != Kind::Fifo
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct Params {
    pub kind: Kind,
    pub nodes: u32,
    /// Message bytes (at least 20: the model's mark).
    pub size: usize,
    /// Messages each node publishes.
    pub messages: u64,
    /// Messages/s each node publishes at (None: as fast as it may).
    pub rate: Option<u64>,
    pub link_bps: u64,
    pub latency_ns: u64,
    pub cpu_ns: u64,
    pub loss: f64,
    pub window: usize,
    pub beacon_ns: u64,
    /// Each node's wall clock is off by up to this much.
    pub skew_ns: u64,
    pub seed: u64,
    /// `crash_node` crashes at this time (ns): it sends and handles
    /// nothing more. The run then ends when a survivor's mode reports it
    /// silent, or 100 ms later (deliveries are not checked: the view change
    /// and flush are the daemon's, not modelled).
    pub crash_at: Option<u64>,
    /// The node that crashes (None: the last).
    pub crash_node: Option<NodeId>,
}

impl Params {
    /// The model's defaults for `kind` on `nodes` nodes: 10 Gb/s ports,
    /// 1.5 µs from port to port, 0.5 µs of CPU per frame, 1 KiB messages,
    /// clocks within 1 µs, the daemon's beacon interval.
    pub fn new(kind: Kind, nodes: u32) -> Params {
        Params {
            kind,
            nodes,
            size: 1024,
            messages: 100,
            rate: None,
            link_bps: 10_000_000_000,
            latency_ns: 1_500,
            cpu_ns: 500,
            loss: 0.0,
            window: 1024,
            beacon_ns: DEFAULT_BEACON_NS,
            skew_ns: 1_000,
            seed: 1,
            crash_at: None,
            crash_node: None,
        }
    }
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// Messages every node delivered.
    pub messages: u64,
    /// First publication to the last delivery at the slowest node (ns).
    pub span_ns: u64,
    /// Publish to delivery, every (message, subscriber) pair, ns.
    pub latency: Histogram<u64>,
    /// Frames put on the wire: data, beacons, link messages; copies lost.
    pub data_frames: u64,
    pub beacon_frames: u64,
    pub link_frames: u64,
    pub lost: u64,
    pub events: u64,
    /// With a crash: how long after it a survivor's mode first reported
    /// the crashed node silent; reports of live nodes.
    pub silent_after_ns: Option<u64>,
    pub false_reports: u64,
}

impl Outcome {
    /// Messages per second every node delivered (the group's throughput).
    pub fn throughput(&self) -> f64 {
        self.messages as f64 * 1e9 / self.span_ns.max(1) as f64
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The node's publisher offers its next message.
    Publish(NodeId),
    /// A frame left its sender's NIC and reaches the switch.
    AtSwitch(usize),
    /// A copy of a frame reaches a node's port (then waits for its CPU).
    Arrive(NodeId, usize),
    /// A node's CPU has handled a copy.
    Handle(NodeId, usize),
    /// The receiver's idle advertisement check for a lost copy:
    /// (receiver, frame).
    Tail(NodeId, usize),
    /// A repaired copy reaches the receiver's port.
    Repair(NodeId, usize),
    Poll(NodeId),
}

/// A frame on the wire: a stream frame (multicast) or a link message to
/// one node, its place in its channel, and its bytes.
#[derive(Debug)]
struct Frame {
    from: NodeId,
    to: Option<NodeId>,
    seq: u64,
    bytes: Vec<u8>,
}

/// One receiver's end of one channel (a sender's stream, or a link).
#[derive(Debug, Default)]
struct Rx {
    next: u64,
    /// Arrived out of order, by seq.
    waiting: BTreeMap<u64, usize>,
    /// Lost copies, by seq: whether the repair is under way.
    lost: BTreeMap<u64, (usize, bool)>,
}

/// A node's send stream as its mode sees it.
struct Ops<'a> {
    sent: &'a mut Vec<Vec<u8>>,
    next_seq: u64,
    acked: u64,
    /// What the sender knows of `acked` (`Node::acks`).
    acked_seen: u64,
    window: usize,
}

impl StreamOps for Ops<'_> {
    fn open_sender(&mut self, _: GroupId, _: &[NodeId], _: StreamStart) -> Result<(), EngineError> {
        Ok(())
    }
    fn publish(&mut self, _: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        let in_flight = self.next_seq + self.sent.len() as u64 - self.acked;
        if in_flight >= self.window as u64 {
            return Err(PublishError::WouldBlock);
        }
        self.sent.push(msg.to_vec());
        Ok(())
    }
    fn set_members(&mut self, _: GroupId, _: &[NodeId]) -> Result<StreamStart, EngineError> {
        Ok(self.position())
    }
    fn resume_member(
        &mut self,
        _: GroupId,
        _: NodeId,
        _: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        Ok(self.position())
    }
    fn sender_position(&self, _: GroupId) -> Option<StreamStart> {
        Some(self.position())
    }
    fn send_idle(&self, _: GroupId) -> bool {
        self.next_seq + self.sent.len() as u64 == self.acked
    }
    fn acked_messages(&mut self, _: GroupId) -> Option<u64> {
        Some(self.acked_seen)
    }
}

impl Ops<'_> {
    fn position(&self) -> StreamStart {
        StreamStart {
            epoch: 1,
            seq: Seq((self.next_seq + self.sent.len() as u64) as u32),
        }
    }
}

struct Node {
    mode: Box<dyn GroupMode>,
    cpu_free: u64,
    nic_free: u64,
    port_free: u64,
    /// The next stream seq; per link peer, the next link seq.
    stream_seq: u64,
    link_seq: BTreeMap<NodeId, u64>,
    /// Per frame of this node's stream not yet handled everywhere: how
    /// many members handled it; `acked` frames before are.
    handled: VecDeque<u32>,
    acked: u64,
    /// (when the sender learns it, `acked` then): every member's ACK of a
    /// frame comes back one way later, and an idle stream's tail only
    /// with MAK's ACK round after its idle advertisement (two round
    /// trips): assumed for every frame, an upper bound.
    acks: VecDeque<(u64, u64)>,
    /// `acked` as the sender knows it now.
    acked_seen: u64,
    published: u64,
    blocked: bool,
    poll_at: u64,
    /// Per channel (sender, link?): this node's receiving end.
    rx: BTreeMap<(NodeId, bool), Rx>,
    /// Delivered here, checked.
    tally: Tally,
    last_delivery: u64,
}

struct World {
    p: Params,
    rng: Rng,
    now: Rc<Cell<u64>>,
    queue: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    order: u64,
    nodes: Vec<Node>,
    frames: Vec<Frame>,
    /// Frames' wire time at the link rate, by bytes.
    ser_per_byte_ps: u64,
    grtt: u64,
    nak_window: u64,
    out: Outcome,
    failure: Option<String>,
    start: u64,
    /// Nodes that delivered every message.
    complete: u32,
}

/// Runs `p`; Err says what a check found.
pub fn run(p: &Params) -> Result<Outcome, String> {
    assert!(
        p.size >= MARK,
        "messages carry the model's {MARK}-byte mark"
    );
    let now = Rc::new(Cell::new(0u64));
    let mut rng = Rng::new(p.seed);
    let view: Vec<NodeId> = (1..=p.nodes).collect();
    let mut nodes = Vec::new();
    for &v in &view {
        let skew = rng.range(0, p.skew_ns);
        let mode: Box<dyn GroupMode> = match p.kind {
            Kind::Fifo => Box::new(PerSenderFifo::new(Seq(0))),
            Kind::Sequenced => Box::new(Sequenced::new(v, 1, Seq(0))),
            Kind::Token => Box::new(super::token::TokenRing::new(GROUP, v)),
            Kind::Total { .. } | Kind::CommitDirect | Kind::TotalDirect => {
                let now = Rc::clone(&now);
                let wall = Box::new(move || now.get() + skew);
                let commit = matches!(p.kind, Kind::Total { commit: true } | Kind::CommitDirect);
                let mode = TotalOrder::new(GROUP, v, Seq(0), wall, p.beacon_ns).committing(commit);
                Box::new(match p.kind {
                    Kind::CommitDirect | Kind::TotalDirect => mode.commit_tree_from(usize::MAX),
                    _ => mode,
                })
            }
        };
        nodes.push(Node {
            mode,
            cpu_free: 0,
            nic_free: 0,
            port_free: 0,
            stream_seq: 0,
            link_seq: BTreeMap::new(),
            handled: VecDeque::new(),
            acked: 0,
            acks: VecDeque::new(),
            acked_seen: 0,
            published: 0,
            blocked: false,
            poll_at: u64::MAX,
            rx: BTreeMap::new(),
            tally: Tally::default(),
            last_delivery: 0,
        });
    }
    let ser_per_byte_ps = 8_000_000_000_000 / p.link_bps;
    let frame_ns = (p.size + FRAME_OVERHEAD) as u64 * ser_per_byte_ps / 1000;
    // A round trip: out and back, each a frame's time, the latency and a
    // CPU's turn.
    let grtt = 2 * (frame_ns + p.latency_ns + p.cpu_ns);
    let nak_window = MakConfig::default()
        .nak_timer
        .window(
            Duration::from_nanos(grtt),
            p.nodes.min(u32::from(u16::MAX)) as u16,
        )
        .as_nanos() as u64;
    let mut w = World {
        p: p.clone(),
        rng,
        now,
        queue: BinaryHeap::new(),
        order: 0,
        nodes,
        frames: Vec::new(),
        ser_per_byte_ps,
        grtt,
        nak_window,
        out: Outcome {
            messages: 0,
            span_ns: 0,
            latency: Histogram::new(3).expect("histogram"),
            data_frames: 0,
            beacon_frames: 0,
            link_frames: 0,
            lost: 0,
            events: 0,
            silent_after_ns: None,
            false_reports: 0,
        },
        failure: None,
        start: 0,
        complete: 0,
    };
    for &v in &view {
        let added: Vec<NodeId> = view.iter().copied().filter(|&o| o != v).collect();
        w.step(v, |m, cx, _| {
            m.members_changed(cx, &added).expect("the first view");
            m.place_event(cx, b"view:1");
        });
    }
    // Paced publishers start at random phases of their period.
    for &v in &view {
        let at = match p.rate {
            Some(r) => w.rng.range(0, 1_000_000_000 / r.max(1)),
            None => 0,
        };
        w.at(at, Ev::Publish(v));
    }
    w.start = 0;
    // Ends once every node delivered every message (the modes' timers
    // would tick on), or at a virtual minute: a run that takes that long
    // is stuck.
    while let Some(Reverse((t, _, ev))) = w.queue.pop() {
        if w.complete == p.nodes || t > 1_000_000_000 {
            break;
        }
        if let Some(c) = p.crash_at {
            if w.out.silent_after_ns.is_some() || t > c + 100_000_000 {
                return Ok(w.out);
            }
        }
        w.now.set(t);
        w.out.events += 1;
        w.event(ev);
        if let Some(f) = w.failure.take() {
            return Err(format!("seed {}: {f}", p.seed));
        }
    }
    w.finish()
}

impl World {
    fn at(&mut self, t: u64, ev: Ev) {
        self.order += 1;
        self.queue.push(Reverse((t, self.order, ev)));
    }

    fn node(&mut self, v: NodeId) -> &mut Node {
        &mut self.nodes[v as usize - 1]
    }

    fn ser(&self, bytes: usize) -> u64 {
        (bytes + FRAME_OVERHEAD) as u64 * self.ser_per_byte_ps / 1000
    }

    /// The crashed node, once it has crashed.
    fn dead(&self) -> Option<NodeId> {
        let c = self.p.crash_at?;
        (self.now.get() >= c).then_some(self.p.crash_node.unwrap_or(self.p.nodes))
    }

    fn event(&mut self, ev: Ev) {
        let now = self.now.get();
        if let Some(d) = self.dead() {
            match ev {
                Ev::Publish(v) | Ev::Poll(v) | Ev::Arrive(v, _) | Ev::Handle(v, _) if v == d => {
                    return
                }
                _ => {}
            }
        }
        match ev {
            Ev::Publish(v) => self.publish(v),
            Ev::AtSwitch(f) => {
                let (from, to) = (self.frames[f].from, self.frames[f].to);
                let ser = self.ser(self.frames[f].bytes.len());
                let half = self.p.latency_ns / 2;
                for r in 1..=self.p.nodes {
                    if r == from || to.is_some_and(|t| t != r) {
                        continue;
                    }
                    let n = self.node(r);
                    n.port_free = n.port_free.max(now) + ser;
                    let arrive = n.port_free + half;
                    if self.p.loss > 0.0 && self.rng.chance(self.p.loss) {
                        self.out.lost += 1;
                        self.lost(r, f, arrive);
                    } else {
                        self.at(arrive, Ev::Arrive(r, f));
                    }
                }
            }
            Ev::Arrive(r, f) | Ev::Repair(r, f) => {
                let cpu = self.p.cpu_ns;
                let n = self.node(r);
                n.cpu_free = n.cpu_free.max(now) + cpu;
                let done = n.cpu_free;
                self.at(done, Ev::Handle(r, f));
            }
            Ev::Handle(r, f) => self.handle(r, f),
            Ev::Tail(r, f) => {
                if let Some(l) = self.lost_copy(r, f) {
                    if !l.1 {
                        l.1 = true;
                        self.repair(r, f);
                    }
                }
            }
            Ev::Poll(v) => {
                if self.node(v).poll_at != now {
                    return;
                }
                self.node(v).poll_at = u64::MAX;
                let silent = self.step(v, |m, cx, out| {
                    m.poll(cx, now, out).expect("poll");
                    m.silent(now)
                });
                for n in silent {
                    match (self.dead(), self.p.crash_at) {
                        (Some(d), Some(c)) if n == d => {
                            self.out.silent_after_ns.get_or_insert(now - c);
                        }
                        _ => self.out.false_reports += 1,
                    }
                }
            }
        }
    }

    /// A copy of `f` for `r`, lost: `r` learns of it from a later frame of
    /// the channel, or from the idle advertisement two round trips on.
    fn lost(&mut self, r: NodeId, f: usize, due: u64) {
        let fr = &self.frames[f];
        let key = (fr.from, fr.to.is_some());
        let seq = fr.seq;
        self.node(r)
            .rx
            .entry(key)
            .or_default()
            .lost
            .insert(seq, (f, false));
        let tail = due + 2 * self.grtt;
        self.at(tail, Ev::Tail(r, f));
    }

    /// `r`'s record of its lost copy of `f` (None once repaired): the
    /// frame, and whether its repair is under way.
    fn lost_copy(&mut self, r: NodeId, f: usize) -> Option<&mut (usize, bool)> {
        let fr = &self.frames[f];
        let (key, seq) = ((fr.from, fr.to.is_some()), fr.seq);
        self.nodes[r as usize - 1]
            .rx
            .get_mut(&key)?
            .lost
            .get_mut(&seq)
    }

    /// `r` NAKs `f` after MAK's NAK timer; the repair comes a round trip
    /// later, or is lost too and asked for again.
    fn repair(&mut self, r: NodeId, f: usize) {
        let now = self.now.get();
        // Within MAK's NAK window, skewed toward its end as MAK's truncated
        // exponential is (most receivers wait long, a few NAK early).
        let u = self.rng.range(0, 1 << 20) as f64 / f64::from(1 << 20);
        let wait = (self.nak_window as f64 * (1.0 - (1.0 - u).powi(4))) as u64;
        let back = now + wait + self.grtt;
        if self.p.loss > 0.0 && self.rng.chance(self.p.loss) {
            self.out.lost += 1;
            self.at(back, Ev::Tail(r, f));
            // Asked again once the repair is overdue.
            if let Some(l) = self.lost_copy(r, f) {
                l.1 = false;
            }
        } else {
            self.at(back, Ev::Repair(r, f));
        }
    }

    /// `r`'s CPU has copy `f`: in its channel's order, to the mode.
    fn handle(&mut self, r: NodeId, f: usize) {
        let fr = &self.frames[f];
        let key = (fr.from, fr.to.is_some());
        let seq = fr.seq;
        let rx = self.node(r).rx.entry(key).or_default();
        if seq < rx.next || rx.waiting.contains_key(&seq) {
            return;
        }
        rx.lost.remove(&seq);
        rx.waiting.insert(seq, f);
        // A later frame shows the gaps before it: each is NAKed.
        let gaps: Vec<usize> = rx
            .lost
            .range(..seq)
            .filter(|(_, l)| !l.1)
            .map(|(_, l)| l.0)
            .collect();
        for (_, l) in rx.lost.range_mut(..seq) {
            l.1 = true;
        }
        let mut ready = Vec::new();
        while let Some(g) = rx.waiting.remove(&rx.next) {
            rx.next += 1;
            ready.push(g);
        }
        for g in gaps {
            self.repair(r, g);
        }
        for g in ready {
            self.take(r, g);
        }
    }

    /// Frame `f`, next in its channel, into `r`'s mode.
    fn take(&mut self, r: NodeId, f: usize) {
        let from = self.frames[f].from;
        let bytes = std::mem::take(&mut self.frames[f].bytes);
        if self.frames[f].to.is_some() {
            self.step(r, |m, cx, out| {
                if let Err(e) = m.on_link(cx, from, &bytes, out) {
                    panic!("a link message the mode refused: {e}");
                }
            });
        } else {
            let frag = Fragment {
                group: GROUP,
                stream: from,
                seq: Seq(self.frames[f].seq as u32),
                first: true,
                last: true,
                data: &bytes,
            };
            self.step(r, |m, _, out| m.deliver(&frag, out));
            // Its sender's window frees once every member has it.
            let members = self.p.nodes - 1;
            let latency = self.p.latency_ns;
            let now = self.now.get();
            let seq = self.frames[f].seq;
            let known = now + self.grtt / 2 + 2 * self.grtt;
            let s = self.node(from);
            let i = (seq - s.acked) as usize;
            s.handled[i] += 1;
            let mut freed = false;
            while s.handled.front() == Some(&members) {
                s.handled.pop_front();
                s.acked += 1;
                freed = true;
            }
            if freed {
                let acked = s.acked;
                s.acks.push_back((known, acked));
            }
            if freed && s.blocked {
                s.blocked = false;
                self.at(now + latency, Ev::Publish(from));
            }
        }
        self.frames[f].bytes = bytes;
    }

    /// `v`'s publisher offers its next message.
    fn publish(&mut self, v: NodeId) {
        let now = self.now.get();
        let k = self.node(v).published;
        if k >= self.p.messages {
            return;
        }
        let mut msg = vec![0u8; self.p.size];
        msg[..4].copy_from_slice(&v.to_be_bytes());
        msg[4..12].copy_from_slice(&k.to_be_bytes());
        msg[12..20].copy_from_slice(&now.to_be_bytes());
        let r = self.step(v, |m, cx, out| m.publish(cx, PUBLISHER, &msg, out));
        match r {
            Ok(Published::Sent) => {
                if self.node(v).mode.loops_back() {
                    self.delivered(v, &msg);
                }
                let rate = self.p.rate;
                let n = self.node(v);
                n.published += 1;
                let next = match rate {
                    Some(rate) => now + 1_000_000_000 / rate.max(1),
                    None => n.nic_free.max(n.cpu_free).max(now + 1),
                };
                self.at(next, Ev::Publish(v));
            }
            Ok(Published::WouldBlock) => {
                // A full window frees as frames are handled; else (the mode
                // holds it) try again after a frame's time.
                let window = self.p.window as u64;
                let n = self.node(v);
                let full = n.stream_seq - n.acked >= window;
                n.blocked = full;
                if !full {
                    let again = now + self.ser(self.p.size);
                    self.at(again, Ev::Publish(v));
                }
            }
            Ok(Published::Dropped(why)) => self.failure = Some(format!("node {v} dropped: {why}")),
            Err(e) => self.failure = Some(format!("node {v}: {e}")),
        }
    }

    /// Runs `f` on `v`'s mode, then sends what it queued, takes what it
    /// delivered, and schedules its next poll.
    fn step<R>(
        &mut self,
        v: NodeId,
        f: impl FnOnce(&mut dyn GroupMode, &mut ModeCx<'_>, &mut mcast_cli::daemon::mode::Out<'_>) -> R,
    ) -> R {
        let remote: Vec<NodeId> = (1..=self.p.nodes).filter(|&o| o != v).collect();
        let window = self.p.window;
        let mut sent = Vec::new();
        let mut outbox = Vec::new();
        let mut got = Vec::new();
        let now = self.now.get();
        let n = &mut self.nodes[v as usize - 1];
        while let Some(&(at, acked)) = n.acks.front() {
            if at > now {
                break;
            }
            n.acked_seen = acked;
            n.acks.pop_front();
        }
        let mut ops = Ops {
            sent: &mut sent,
            next_seq: n.stream_seq,
            acked: n.acked,
            acked_seen: n.acked_seen,
            window,
        };
        let mut cx = ModeCx {
            group: GROUP,
            node: v,
            epoch: 1,
            remote: &remote,
            root: Some(1),
            settled: true,
            view_epoch: 1,
            streams: &mut ops,
            outbox: &mut outbox,
        };
        let r = f(n.mode.as_mut(), &mut cx, &mut |hdr, data, to| {
            if to.reaches(SUBSCRIBER) && hdr.source != 0 {
                got.push(data.to_vec());
            }
        });
        let wants = n.mode.wants_round();
        let poll = n.mode.poll_at();
        for msg in got {
            self.delivered(v, &msg);
        }
        for bytes in sent {
            // (The total-order mode's beacons open with their tag.)
            let total = matches!(
                self.p.kind,
                Kind::Total { .. } | Kind::CommitDirect | Kind::TotalDirect
            );
            let beacon = total && bytes.first() == Some(&b'B');
            let n = self.node(v);
            let seq = n.stream_seq;
            n.stream_seq += 1;
            n.handled.push_back(0);
            if beacon {
                self.out.beacon_frames += 1;
            } else {
                self.out.data_frames += 1;
            }
            self.transmit(Frame {
                from: v,
                to: None,
                seq,
                bytes,
            });
        }
        for (to, m) in outbox {
            let LinkMessage::Mode { body, .. } = m else {
                continue;
            };
            let n = self.node(v);
            let seq = n.link_seq.entry(to).or_default();
            let s = *seq;
            *seq += 1;
            self.out.link_frames += 1;
            self.transmit(Frame {
                from: v,
                to: Some(to),
                seq: s,
                bytes: body,
            });
        }
        let now = self.now.get();
        let next = if wants { Some(now + 1_000) } else { poll };
        if let Some(t) = next {
            // A timer already due waits for the next round of the node's
            // loop (the daemon polls a due mode each round).
            let t = t.max(now + 1_000);
            if t < self.node(v).poll_at {
                self.node(v).poll_at = t;
                self.at(t, Ev::Poll(v));
            }
        }
        r
    }

    /// `fr` through its sender's CPU and NIC to the switch.
    fn transmit(&mut self, fr: Frame) {
        let now = self.now.get();
        let ser = self.ser(fr.bytes.len());
        let (cpu, half) = (self.p.cpu_ns, self.p.latency_ns / 2);
        let n = self.node(fr.from);
        n.cpu_free = n.cpu_free.max(now) + cpu;
        n.nic_free = n.nic_free.max(n.cpu_free) + ser;
        let at = n.nic_free + half;
        self.frames.push(fr);
        let f = self.frames.len() - 1;
        self.at(at, Ev::AtSwitch(f));
    }

    /// `v`'s subscriber got `msg`: checked and measured.
    fn delivered(&mut self, v: NodeId, msg: &[u8]) {
        let now = self.now.get();
        let origin = u32::from_be_bytes(msg[..4].try_into().expect("mark"));
        let k = u64::from_be_bytes(msg[4..12].try_into().expect("mark"));
        let at = u64::from_be_bytes(msg[12..20].try_into().expect("mark"));
        let want = u64::from(self.p.nodes) * self.p.messages;
        let n = &mut self.nodes[v as usize - 1];
        if let Err(e) = n.tally.take(origin, k) {
            self.failure = Some(format!("node {v}: {e}"));
            return;
        }
        n.last_delivery = now;
        if n.tally.delivered == want {
            self.complete += 1;
        }
        // Latency counts what crossed the network (a publisher's own
        // messages loop back in the FIFO mode at once).
        if origin != v {
            self.out
                .latency
                .record(now.saturating_sub(at).max(1))
                .expect("in range");
        }
    }

    fn finish(mut self) -> Result<Outcome, String> {
        let want = u64::from(self.p.nodes) * self.p.messages;
        let seed = self.p.seed;
        for (i, n) in self.nodes.iter().enumerate() {
            if n.tally.delivered != want {
                return Err(format!(
                    "seed {seed}: node {} delivered {} of {want} messages; its mode: {}",
                    i + 1,
                    n.tally.delivered,
                    n.mode.stats_json()
                ));
            }
            if self.p.kind.ordered() && n.tally.digest != self.nodes[0].tally.digest {
                return Err(format!(
                    "seed {seed}: node {} delivered another order than node 1",
                    i + 1
                ));
            }
        }
        let last = self
            .nodes
            .iter()
            .map(|n| n.last_delivery)
            .max()
            .unwrap_or(0);
        self.out.messages = want;
        self.out.span_ns = last - self.start;
        Ok(self.out)
    }
}
