//! The simulation proper: the event queue, the segment, the sender's
//! application, the drive loop and the checkers.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use mcast_proto::frag::Reassembler;
use mcast_proto::{
    stream_of, BufId, Counters, Dest, Endpoint, Event, Flags, Header, Instant, Kind, NodeId,
    OutFrame, RangeList, Rng, RxBody, SendError, Sender, Seq, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{field, group_mac, node_mac, Frame, ETHERTYPE_DEFAULT, ETH_HEADER_LEN};

use crate::config::{offer_time, SimConfig, SENDER};
use crate::content::{fill_message, matches_message};
use crate::pool::{Owner, Pool};
use crate::report::{SimFailure, SimReport, StopReason, WireStats};

/// The session epoch every simulated stream uses.
const EPOCH: u32 = 1;
/// Timer expiries of one node at one instant before the run fails as a livelock.
const TIMER_SPIN_LIMIT: u32 = 10_000;
/// Trace lines kept for a failure's report.
const TRACE_TAIL: usize = 40;

/// Runs `cfg` with endpoints built by the two factories: `make_sender` gets the
/// sender's stream config and the receivers' ids, `make_receiver` each
/// receiver's stream config (in node order). [`crate::run`] is this with the
/// algorithm's [`mcast_proto::any::AnySender`] and `AnyReceiver`.
pub fn run_with<S, R>(
    cfg: &SimConfig,
    make_sender: impl FnOnce(StreamConfig, &[NodeId]) -> S,
    mut make_receiver: impl FnMut(StreamConfig) -> R,
) -> Result<SimReport, SimFailure>
where
    S: Sender,
    R: Endpoint,
{
    let mut world = World::new(cfg);
    if let Err(reason) = cfg.validate() {
        return Err(world.failure(format!("invalid configuration: {reason}")));
    }
    let mut master = Rng::new(cfg.seed);
    world.net_rng = master.fork();
    let endpoint_seed = master.next_u64();
    let stream = |local| StreamConfig {
        group: cfg.group,
        local,
        sender: SENDER,
        epoch: EPOCH,
        initial_seq: Seq(cfg.initial_seq),
        window_frames: cfg.window_frames,
        seed: endpoint_seed,
    };
    let members: Vec<NodeId> = (2..=cfg.receivers + 1).collect();
    let built = catch_unwind(AssertUnwindSafe(|| {
        let sender = make_sender(stream(SENDER), &members);
        let receivers: Vec<R> = members.iter().map(|&n| make_receiver(stream(n))).collect();
        (sender, receivers)
    }));
    let (sender, receivers) = match built {
        Ok(built) => built,
        Err(panic) => {
            return Err(world.failure(format!(
                "building the endpoints panicked: {}",
                panic_message(&*panic)
            )))
        }
    };
    let mut sim = Sim {
        sender,
        receivers,
        w: world,
        batch: None,
    };
    // A panic inside a machine (a failed assertion) is a failure like any
    // other: it gets the seed, the step and the replay command.
    match catch_unwind(AssertUnwindSafe(|| sim.drive())) {
        Ok(Ok(stop)) => Ok(sim.report(stop)),
        Ok(Err(failure)) => Err(failure),
        Err(panic) => Err(sim
            .w
            .failure(format!("panicked: {}", panic_message(&*panic)))),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_string()
    }
}

struct Sim<'c, S, R> {
    sender: S,
    receivers: Vec<R>,
    w: World<'c>,
    /// A batch of copies being delivered at the current instant.
    batch: Option<Box<Batch>>,
}

/// Everything but the endpoints, so an endpoint and the world can be borrowed
/// at once.
struct World<'c> {
    cfg: &'c SimConfig,
    now: Instant,
    step: u64,
    heap: BinaryHeap<Entry>,
    order: u64,
    net_rng: Rng,
    /// Index `id - 1`.
    nodes: Vec<NodeState>,
    /// Index `id - 2`.
    checks: Vec<RxCheck>,
    done_receivers: u32,
    app: App,
    /// Loss probability of copies to or from each node, index `id - 1`.
    loss: Vec<f64>,
    /// Extra one-way latency of each node's link, index `id - 1`.
    extra_latency_ns: Vec<u64>,
    scratch: Vec<u8>,
    wire: WireStats,
    needing_repair: HashSet<u32>,
    foreign_dropped: u64,
    malformed_dropped: u64,
    completion_time: Option<Instant>,
    trace: Vec<String>,
    trace_tail: VecDeque<String>,
}

struct NodeState {
    pool: Pool,
    /// When this node's NIC finishes sending what it has queued.
    nic_free_at: Instant,
    /// The instant of this node's live "NIC has room" entry, if any.
    nic_wake_at: Option<Instant>,
    /// The instant of this node's live timer entry in the heap, if any.
    timer_at: Option<Instant>,
    /// The last instant its timer fired at, and how many times in a row.
    last_fire: Option<Instant>,
    fires_at_last: u32,
    checksum_failures: u64,
    max_held: usize,
}

/// The sender's application: messages offered in order, fragment by fragment.
#[derive(Default)]
struct App {
    /// The message whose fragment is offered next, and that fragment's offset.
    msg: u64,
    offset: usize,
    /// A fragment the sender refused (window full), held by the simulator.
    pending: Option<BufId>,
    /// The instant of the live wake-up entry (offered-rate mode).
    wake_at: Option<Instant>,
}

/// What a receiver has delivered so far, for the checkers.
struct RxCheck {
    /// The message in progress and the bytes of it delivered.
    msg: u64,
    offset: usize,
    last_seq: Option<Seq>,
    reassembler: Reassembler,
}

struct Entry {
    at: Instant,
    order: u64,
    what: What,
}

enum What {
    /// A copy of a frame reaches `to`.
    Copy {
        from: NodeId,
        to: NodeId,
        bytes: Rc<[u8]>,
    },
    /// Copies of one frame reaching several nodes at the same instant, in
    /// order: the same as one `Copy` entry each, inserted one after the
    /// other (nothing can come between them), at a fraction of the cost.
    Batch(Box<Batch>),
    /// `node`'s timer, if `at` is still its deadline.
    Timer { node: NodeId },
    /// `node`'s NIC queue has room again: take more frames from its machine.
    NicReady { node: NodeId },
    /// The next message becomes available to the sender's application.
    AppWake,
}

struct Batch {
    from: NodeId,
    to: Vec<NodeId>,
    bytes: Rc<[u8]>,
    /// The next destination to deliver to.
    next: usize,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed: the heap pops the earliest, ties in insertion order.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

impl<S: Sender, R: Endpoint> Sim<'_, S, R> {
    fn drive(&mut self) -> Result<StopReason, SimFailure> {
        let cfg = self.w.cfg;
        // Time zero: the application offers what it may, every machine says
        // what it wants to send and when it wants to wake.
        self.sender_step(None)?;
        for i in 0..self.receivers.len() {
            let node = i as NodeId + 2;
            drain(&mut self.receivers[i], &mut self.w, node)?;
            self.w.check_node(&self.receivers[i], node)?;
        }
        let liveness_deadline = match cfg.heal_time() {
            Some(heal) if cfg.guarantees_completion() => {
                Some(heal.max(cfg.last_offer_time()) + cfg.wire_time() + cfg.liveness_bound)
            }
            _ => None,
        };
        let max_time = Instant::ZERO + cfg.max_virtual_time;
        let stop = loop {
            if self.w.done_receivers == cfg.receivers && self.sender.is_idle() {
                self.w.completion_time = Some(self.w.now);
                break StopReason::Completed;
            }
            if let Some(b) = self.batch.as_mut() {
                if self.w.step >= cfg.max_steps {
                    break StopReason::MaxSteps;
                }
                let (from, to, bytes) = (b.from, b.to[b.next], b.bytes.clone());
                b.next += 1;
                if b.next == b.to.len() {
                    self.batch = None;
                }
                self.w.step += 1;
                self.copy_arrives(from, to, &bytes)?;
                continue;
            }
            let next = self.w.heap.peek().map(|e| e.at);
            if let Some(deadline) = liveness_deadline {
                if next.is_none_or(|t| t > deadline) && deadline <= max_time {
                    self.w.now = self.w.now.max(deadline);
                    return Err(self.no_progress(next.is_none()));
                }
            }
            let Some(at) = next else {
                if cfg.guarantees_completion() {
                    return Err(self.no_progress(true));
                }
                break StopReason::Quiescent;
            };
            if at > max_time {
                self.w.now = max_time;
                break StopReason::MaxVirtualTime;
            }
            if self.w.step >= cfg.max_steps {
                break StopReason::MaxSteps;
            }
            let e = self.w.heap.pop().expect("peeked");
            self.w.now = e.at;
            match e.what {
                What::Timer { node } => {
                    let st = &mut self.w.nodes[node as usize - 1];
                    if st.timer_at != Some(e.at) {
                        continue; // stale: the deadline moved since
                    }
                    st.timer_at = None;
                    // A deadline that handle_timeout never moves past would
                    // spin here forever without virtual time advancing.
                    if st.last_fire == Some(e.at) {
                        st.fires_at_last += 1;
                        if st.fires_at_last >= TIMER_SPIN_LIMIT {
                            self.w.step += 1;
                            return Err(self.w.failure(format!(
                                "timer livelock: node {node}'s deadline stayed at {:?} through \
                                 {TIMER_SPIN_LIMIT} calls of handle_timeout",
                                e.at
                            )));
                        }
                    } else {
                        st.last_fire = Some(e.at);
                        st.fires_at_last = 1;
                    }
                    self.w.step += 1;
                    if node == SENDER {
                        self.sender.handle_timeout(self.w.now);
                        self.w.trace_line(|| format!("{SENDER} timeout"));
                        self.sender_step(None)?;
                    } else {
                        let ep = &mut self.receivers[node as usize - 2];
                        ep.handle_timeout(self.w.now);
                        self.w.trace_line(|| format!("{node} timeout"));
                        drain(ep, &mut self.w, node)?;
                        self.w.check_node(ep, node)?;
                    }
                }
                What::NicReady { node } => {
                    let st = &mut self.w.nodes[node as usize - 1];
                    if st.nic_wake_at != Some(e.at) {
                        continue;
                    }
                    st.nic_wake_at = None;
                    self.w.step += 1;
                    if node == SENDER {
                        self.sender_step(None)?;
                    } else {
                        let ep = &mut self.receivers[node as usize - 2];
                        drain(ep, &mut self.w, node)?;
                        self.w.check_node(ep, node)?;
                    }
                }
                What::AppWake => {
                    if self.w.app.wake_at != Some(e.at) {
                        continue;
                    }
                    self.w.app.wake_at = None;
                    self.w.step += 1;
                    self.sender_step(None)?;
                }
                What::Copy { from, to, bytes } => {
                    self.w.step += 1;
                    self.copy_arrives(from, to, &bytes)?;
                }
                What::Batch(b) => self.batch = Some(b),
            }
        };
        Ok(stop)
    }

    /// One step: a copy of a frame from `from` reaches `to`.
    fn copy_arrives(&mut self, from: NodeId, to: NodeId, bytes: &[u8]) -> Result<(), SimFailure> {
        if to == SENDER {
            return self.sender_step(Some((from, bytes)));
        }
        let ep = &mut self.receivers[to as usize - 2];
        receive(ep, &mut self.w, from, to, bytes)?;
        drain(ep, &mut self.w, to)?;
        self.w.check_node(ep, to)
    }

    /// One step at the sender: the input (a frame copy, or nothing for a
    /// timeout already handled or an application wake-up), then the
    /// application offers what it may, then everything is drained and checked.
    fn sender_step(&mut self, input: Option<(NodeId, &[u8])>) -> Result<(), SimFailure> {
        if let Some((from, bytes)) = input {
            receive(&mut self.sender, &mut self.w, from, SENDER, bytes)?;
        }
        self.pump_app()?;
        drain(&mut self.sender, &mut self.w, SENDER)?;
        self.w.check_node(&self.sender, SENDER)
    }

    /// Offers fragments to the sender until it refuses one, the run's messages
    /// are all offered, or (offered-rate mode) the next message is not yet due.
    fn pump_app(&mut self) -> Result<(), SimFailure> {
        let w = &mut self.w;
        let cfg = w.cfg;
        loop {
            if w.app.msg >= cfg.messages {
                return Ok(());
            }
            if let Some(rate) = cfg.messages_per_sec {
                let due = offer_time(w.app.msg, rate);
                if due > w.now && w.app.pending.is_none() {
                    if w.app.wake_at != Some(due) {
                        w.app.wake_at = Some(due);
                        w.push(due, What::AppWake);
                    }
                    return Ok(());
                }
            }
            let size = cfg.message_len(w.app.msg);
            let len = (size - w.app.offset).min(cfg.max_payload);
            let mut frag = Flags::NONE;
            if w.app.offset == 0 {
                frag = frag.with(Flags::FRAG_FIRST);
            }
            let last_frag = w.app.offset + len == size;
            if last_frag {
                frag = frag.with(Flags::FRAG_LAST);
            }
            let buf = match w.app.pending.take() {
                Some(buf) => buf,
                None => {
                    let (buf, bytes) = w.nodes[0].pool.alloc(Owner::App, len);
                    fill_message(cfg.seed, w.app.msg, w.app.offset, bytes);
                    buf
                }
            };
            // Nothing queued behind this fragment: the message's end, with the
            // next message not yet due (or none left).
            let next_due = w.app.msg + 1 < cfg.messages
                && cfg
                    .messages_per_sec
                    .is_none_or(|rate| offer_time(w.app.msg + 1, rate) <= w.now);
            let frame = OutFrame {
                buf,
                len: len as u16,
                frag,
                last: last_frag && !next_due,
            };
            match self.sender.send(w.now, frame) {
                Ok(_) => {
                    w.nodes[0].pool.set_owner(buf, Owner::Endpoint);
                    if last_frag {
                        w.app.msg += 1;
                        w.app.offset = 0;
                    } else {
                        w.app.offset += len;
                    }
                }
                Err(SendError::WindowFull(b)) if b == buf => {
                    w.app.pending = Some(buf);
                    return Ok(());
                }
                Err(e) => {
                    return Err(w.failure(format!(
                        "the sender refused {buf:?} with {e:?} (expected WindowFull of that buffer)"
                    )))
                }
            }
        }
    }

    fn no_progress(&mut self, quiescent: bool) -> SimFailure {
        let cfg = self.w.cfg;
        let behind: Vec<String> = self
            .w
            .checks
            .iter()
            .enumerate()
            .filter(|(_, c)| c.msg < cfg.messages)
            .take(8)
            .map(|(i, c)| format!("node {} at message {}", i + 2, c.msg))
            .collect();
        let why = if quiescent {
            "nothing left to happen (no frame in flight, no timer)".to_string()
        } else {
            format!(
                "not complete {:?} after the network healed (plus {:?}, the link's time for the run)",
                cfg.liveness_bound,
                cfg.wire_time()
            )
        };
        self.w.failure(format!(
            "no progress: {why}; {}/{} receivers done{}{}; sender idle: {}; application at message {}/{}",
            self.w.done_receivers,
            cfg.receivers,
            if behind.is_empty() { "" } else { ", behind: " },
            behind.join(", "),
            self.sender.is_idle(),
            self.w.app.msg,
            cfg.messages,
        ))
    }

    fn report(self, stop: StopReason) -> SimReport {
        let w = self.w;
        let mut sender_counters = *self.sender.counters();
        sender_counters.checksum_failures += w.nodes[0].checksum_failures;
        let mut receiver_counters = Counters::default();
        for (ep, st) in self.receivers.iter().zip(&w.nodes[1..]) {
            receiver_counters.accumulate(ep.counters());
            receiver_counters.checksum_failures += st.checksum_failures;
        }
        SimReport {
            completed: stop == StopReason::Completed,
            stop,
            completion_time: w.completion_time,
            end_time: w.now,
            steps: w.step,
            delivered_messages: w.checks.iter().map(|c| c.msg).collect(),
            sender_counters,
            receiver_counters,
            checksum_failures: w.nodes.iter().map(|n| n.checksum_failures).sum(),
            foreign_dropped: w.foreign_dropped,
            malformed_dropped: w.malformed_dropped,
            wire: w.wire,
            frames_needing_repair: w.needing_repair.len() as u64,
            max_sender_buffers: w.nodes[0].max_held,
            max_receiver_buffers: w.nodes[1..].iter().map(|n| n.max_held).max().unwrap_or(0),
            trace: w.trace,
        }
    }
}

/// A copy of a frame arrives at `node`: checked like a NIC driver would, then
/// routed to the node's endpoint by its stream.
fn receive<E: Endpoint>(
    ep: &mut E,
    w: &mut World<'_>,
    from: NodeId,
    node: NodeId,
    bytes: &[u8],
) -> Result<(), SimFailure> {
    let frame = match Frame::new_checked(bytes, ETHERTYPE_DEFAULT) {
        Ok(f) => f,
        Err(e) => {
            // Seed 000: a frame that fails its checksum counts as lost.
            w.nodes[node as usize - 1].checksum_failures += 1;
            w.trace_line(|| format!("{node} dropped a frame from {from}: {e}"));
            return Ok(());
        }
    };
    let header = frame.header().expect("a checked frame has a valid kind");
    if header.group != w.cfg.group || stream_of(&header) != SENDER {
        w.foreign_dropped += 1;
        return Ok(());
    }
    let now = w.now;
    match header.kind {
        k if k.carries_data() => {
            let payload = frame.payload();
            let (buf, slot) = w.nodes[node as usize - 1]
                .pool
                .alloc(Owner::Endpoint, payload.len());
            slot.copy_from_slice(payload);
            ep.handle_frame(now, &header, RxBody::Data(buf));
        }
        Kind::Nak => match RangeList::parse(frame.payload()) {
            Ok(list) => ep.handle_frame(now, &header, RxBody::Nak(&list)),
            Err(_) => w.malformed_dropped += 1,
        },
        _ => ep.handle_frame(now, &header, RxBody::None),
    }
    Ok(())
}

/// Drains what an endpoint wants done after an input, then re-arms its timer.
fn drain<E: Endpoint>(ep: &mut E, w: &mut World<'_>, node: NodeId) -> Result<(), SimFailure> {
    let now = w.now;
    loop {
        let mut progressed = false;
        while w.nic_has_room(node) {
            let Some(tx) = ep.poll_transmit(now) else {
                break;
            };
            w.transmit(node, &tx)?;
            progressed = true;
        }
        while let Some(ev) = ep.poll_event() {
            w.event(node, ev)?;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    let want = ep.poll_timeout().map(|t| t.max(now));
    let st = &mut w.nodes[node as usize - 1];
    if want != st.timer_at {
        st.timer_at = want;
        if let Some(t) = want {
            w.push(t, What::Timer { node });
        }
    }
    Ok(())
}

impl<'c> World<'c> {
    fn new(cfg: &'c SimConfig) -> World<'c> {
        let nodes = (0..=cfg.receivers)
            .map(|_| NodeState {
                pool: Pool::default(),
                nic_free_at: Instant::ZERO,
                nic_wake_at: None,
                timer_at: None,
                last_fire: None,
                fires_at_last: 0,
                checksum_failures: 0,
                max_held: 0,
            })
            .collect();
        let checks = (0..cfg.receivers)
            .map(|_| RxCheck {
                msg: 0,
                offset: 0,
                last_seq: None,
                reassembler: Reassembler::new(cfg.max_size),
            })
            .collect();
        let mut loss = vec![0.0];
        loss.extend((2..=cfg.receivers + 1).map(|n| cfg.faults.loss_of(n)));
        let extra_latency_ns = (1..=cfg.receivers + 1)
            .map(|n| {
                cfg.receiver_latency
                    .iter()
                    .filter(|(node, _)| *node == n)
                    .map(|(_, d)| nanos(*d))
                    .sum()
            })
            .collect();
        World {
            cfg,
            now: Instant::ZERO,
            step: 0,
            heap: BinaryHeap::new(),
            order: 0,
            net_rng: Rng::new(cfg.seed),
            nodes,
            checks,
            // With no messages to send, every receiver is done from the start.
            done_receivers: if cfg.messages == 0 { cfg.receivers } else { 0 },
            app: App::default(),
            loss,
            extra_latency_ns,
            scratch: Vec::new(),
            wire: WireStats::default(),
            needing_repair: HashSet::new(),
            foreign_dropped: 0,
            malformed_dropped: 0,
            completion_time: None,
            trace: Vec::new(),
            trace_tail: VecDeque::new(),
        }
    }

    fn push(&mut self, at: Instant, what: What) {
        self.order += 1;
        self.heap.push(Entry {
            at,
            order: self.order,
            what,
        });
    }

    fn failure(&self, reason: String) -> SimFailure {
        SimFailure {
            reason,
            algorithm: self.cfg.algorithm,
            seed: self.cfg.seed,
            step: self.step,
            time: self.now,
            replay: self.cfg.replay_command(),
            trace_tail: self.trace_tail.iter().cloned().collect(),
        }
    }

    fn tracing(&self) -> bool {
        self.cfg.trace_lines > 0
    }

    /// Adds a trace line (built only when tracing is on).
    fn trace_line(&mut self, line: impl FnOnce() -> String) {
        if !self.tracing() {
            return;
        }
        let line = format!("{:?} {}", self.now, line());
        if self.trace.len() < self.cfg.trace_lines {
            self.trace.push(line.clone());
        }
        if self.trace_tail.len() == TRACE_TAIL {
            self.trace_tail.pop_front();
        }
        self.trace_tail.push_back(line);
    }

    /// True when `node`'s NIC backlog is within [`LinkConfig::tx_queue`];
    /// otherwise schedules a wake-up for when it will be, and says no.
    fn nic_has_room(&mut self, node: NodeId) -> bool {
        let limit = nanos(self.cfg.link.tx_queue);
        let st = &mut self.nodes[node as usize - 1];
        let room_at = Instant(st.nic_free_at.0.saturating_sub(limit));
        if room_at <= self.now {
            return true;
        }
        if st.nic_wake_at != Some(room_at) {
            st.nic_wake_at = Some(room_at);
            self.push(room_at, What::NicReady { node });
        }
        false
    }

    /// Puts a frame on the segment: its bytes are built once, the NIC
    /// serializes it, and each destination gets its copy (or loses it).
    fn transmit(&mut self, node: NodeId, tx: &Transmit) -> Result<(), SimFailure> {
        let cfg = self.cfg;
        let h = &tx.header;
        if h.src != node {
            return Err(self.failure(format!("node {node} sent a frame with src {}", h.src)));
        }
        let last_node = cfg.receivers + 1;
        if let Dest::Node(n) = tx.dest {
            if n == node || !(1..=last_node).contains(&n) {
                return Err(self.failure(format!("node {node} sent a frame to node {n}")));
            }
        }
        let dst = match tx.dest {
            Dest::Group => group_mac(cfg.group),
            Dest::Node(n) => node_mac(n),
        };
        let payload_len = usize::from(h.payload_len);
        let bytes: Rc<[u8]> = match &tx.body {
            &TxBody::Buf(buf) => {
                let pool = &mut self.nodes[node as usize - 1].pool;
                let owner = pool.owner(buf);
                if owner != Owner::Endpoint {
                    return Err(self.failure(format!(
                        "node {node} transmitted from {buf:?}, which it does not hold (owner: {owner:?})"
                    )));
                }
                let have = pool.payload(buf).len();
                if payload_len > have {
                    return Err(self.failure(format!(
                        "node {node} sent {payload_len} payload bytes from {buf:?}, which holds {have}"
                    )));
                }
                // The zero-copy path: the header is written in front of the
                // payload in the buffer itself, then the frame is shared.
                let slot = pool.frame_mut(buf);
                let (_, len) =
                    Frame::emit(&mut slot[..], dst, node_mac(node), ETHERTYPE_DEFAULT, h)
                        .expect("the slot holds the payload");
                Rc::from(&slot[..len])
            }
            TxBody::Nak(list) => {
                if payload_len != list.wire_len() || list.is_empty() {
                    return Err(self.failure(format!(
                        "node {node} sent a NAK of {} ranges with payload_len {payload_len}",
                        list.len()
                    )));
                }
                self.emit_scratch(node, dst, h, |p| {
                    list.emit(p).expect("sized to the list");
                })
            }
            TxBody::None => {
                if payload_len != 0 {
                    return Err(self.failure(format!(
                        "node {node} sent a {:?} without a body but payload_len {payload_len}",
                        h.kind
                    )));
                }
                self.emit_scratch(node, dst, h, |_| {})
            }
        };
        self.count_kind(h);
        self.wire.bytes += bytes.len() as u64;

        // The NIC sends its frames one after another at the link's rate.
        let st = &mut self.nodes[node as usize - 1];
        let ser_ns = ((bytes.len() as u128 * 8 * 1_000_000_000)
            .div_ceil(u128::from(cfg.link.bandwidth_bps))) as u64;
        let depart = Instant(st.nic_free_at.0.max(self.now.0) + ser_ns);
        st.nic_free_at = depart;
        let arrive = depart + cfg.link.latency;

        let faults = cfg.faults.faults_until.is_none_or(|t| self.now < t);
        let healed = !faults;
        let original_data = h.kind.carries_data() && !h.flags.contains(Flags::RETRANSMIT);
        let mut lost_at = Vec::new();
        let mut dup_at = Vec::new();
        let mut corrupt_at = Vec::new();
        let tracing = self.tracing();
        let (first, last) = match tx.dest {
            Dest::Group => (1, last_node),
            Dest::Node(n) => (n, n),
        };
        // Copies that arrive together, intact: one heap entry for them all.
        let mut together = Vec::new();
        for to in first..=last {
            if to == node {
                continue;
            }
            self.wire.copies += 1;
            if faults && self.lost(node, to) {
                self.wire.copies_lost += 1;
                if original_data {
                    self.needing_repair.insert(h.seq.0);
                }
                if tracing {
                    lost_at.push(to);
                }
                continue;
            }
            let copies = if faults && self.net_rng.chance(cfg.faults.duplicate) {
                self.wire.copies_duplicated += 1;
                if tracing {
                    dup_at.push(to);
                }
                2
            } else {
                1
            };
            let mut intact = false;
            for _ in 0..copies {
                // Jitter (and the reordering it brings) heals with the rest:
                // after faults_until the segment is FIFO again.
                let jitter = if healed {
                    0
                } else {
                    self.net_rng.range(0, nanos(cfg.link.jitter))
                };
                // A far receiver's extra latency, either end of the copy.
                let delay = jitter
                    + self.extra_latency_ns[node as usize - 1]
                    + self.extra_latency_ns[to as usize - 1];
                let copy = if faults && self.net_rng.chance(cfg.faults.corrupt) {
                    self.wire.copies_corrupted += 1;
                    if tracing {
                        corrupt_at.push(to);
                    }
                    self.corrupted(&bytes)
                } else {
                    intact = true;
                    if delay == 0 {
                        together.push(to);
                        continue;
                    }
                    bytes.clone()
                };
                self.push(
                    Instant(arrive.0 + delay),
                    What::Copy {
                        from: node,
                        to,
                        bytes: copy,
                    },
                );
            }
            if !intact && original_data {
                self.needing_repair.insert(h.seq.0);
            }
        }
        match together[..] {
            [] => {}
            [to] => self.push(
                arrive,
                What::Copy {
                    from: node,
                    to,
                    bytes,
                },
            ),
            _ => self.push(
                arrive,
                What::Batch(Box::new(Batch {
                    from: node,
                    to: together,
                    bytes,
                    next: 0,
                })),
            ),
        }
        if tracing {
            let dest = match tx.dest {
                Dest::Group => "group".to_string(),
                Dest::Node(n) => n.to_string(),
            };
            let mut line = format!("{node}->{dest} {}", describe(h));
            if let TxBody::Nak(list) = &tx.body {
                let ranges: Vec<String> = list
                    .iter()
                    .map(|r| match r.count {
                        1 => format!("{}", r.start.0),
                        n => format!("{}+{}", r.start.0, n),
                    })
                    .collect();
                let _ = write!(line, " missing [{}]", ranges.join(" "));
            }
            for (what, at) in [
                ("lost", &lost_at),
                ("dup", &dup_at),
                ("corrupt", &corrupt_at),
            ] {
                if !at.is_empty() {
                    let list: Vec<String> = at.iter().map(|n| n.to_string()).collect();
                    let _ = write!(line, " {what} at {}", list.join(","));
                }
            }
            self.trace_line(|| line);
        }
        Ok(())
    }

    fn emit_scratch(
        &mut self,
        node: NodeId,
        dst: mcast_wire::MacAddr,
        h: &Header,
        write_payload: impl FnOnce(&mut [u8]),
    ) -> Rc<[u8]> {
        let len = field::PAYLOAD + usize::from(h.payload_len);
        self.scratch.clear();
        self.scratch.resize(len, 0);
        write_payload(&mut self.scratch[field::PAYLOAD..]);
        Frame::emit(
            &mut self.scratch[..],
            dst,
            node_mac(node),
            ETHERTYPE_DEFAULT,
            h,
        )
        .expect("sized to the frame");
        Rc::from(&self.scratch[..])
    }

    /// True when the copy from `from` to `to` is lost (faults are active).
    fn lost(&mut self, from: NodeId, to: NodeId) -> bool {
        let now = self.now;
        let partitioned = self
            .cfg
            .faults
            .partitions
            .iter()
            .any(|p| (p.node == from || p.node == to) && p.from <= now && now < p.until);
        partitioned
            || self.net_rng.chance(self.loss[from as usize - 1])
            || self.net_rng.chance(self.loss[to as usize - 1])
    }

    /// A private copy of `bytes` with one byte flipped, past the Ethernet
    /// header: the NIC's FCS would drop damaged MACs; what the CRC32C of our
    /// header guards is everything after them.
    fn corrupted(&mut self, bytes: &[u8]) -> Rc<[u8]> {
        let mut v = bytes.to_vec();
        let at = self
            .net_rng
            .range(ETH_HEADER_LEN as u64, v.len() as u64 - 1) as usize;
        v[at] ^= self.net_rng.range(1, 255) as u8;
        Rc::from(v)
    }

    fn count_kind(&mut self, h: &Header) {
        let s = &mut self.wire;
        match h.kind {
            Kind::Data | Kind::GbnData if h.flags.contains(Flags::RETRANSMIT) => {
                s.data_retransmit += 1
            }
            Kind::Data | Kind::GbnData => s.data_original += 1,
            Kind::Nak => s.nak += 1,
            Kind::Ack => s.ack += 1,
            Kind::AckReq => s.ack_req += 1,
            Kind::Pack => s.pack += 1,
            Kind::Nack => s.nack += 1,
            Kind::Heartbeat | Kind::Beat => s.other += 1,
        }
    }

    /// An endpoint's event: a delivery is checked against the sender's stream,
    /// then its buffer freed; a release frees the buffer.
    fn event(&mut self, node: NodeId, ev: Event) -> Result<(), SimFailure> {
        match ev {
            Event::Release(buf) => self.free(node, buf, "released"),
            Event::Deliver {
                stream,
                seq,
                buf,
                len,
                flags,
            } => {
                if node == SENDER {
                    return Err(self.failure(format!("the sender delivered {seq:?}")));
                }
                if stream != SENDER {
                    return Err(self.failure(format!(
                        "node {node} delivered {seq:?} of stream {stream}, not {SENDER}"
                    )));
                }
                let owner = self.nodes[node as usize - 1].pool.owner(buf);
                if owner != Owner::Endpoint {
                    return Err(self.failure(format!(
                        "node {node} delivered {seq:?} in {buf:?}, which it does not hold (owner: {owner:?})"
                    )));
                }
                self.check_delivery(node, seq, buf, len, flags)?;
                self.free(node, buf, "delivered")
            }
        }
    }

    fn free(&mut self, node: NodeId, buf: BufId, how: &str) -> Result<(), SimFailure> {
        match self.nodes[node as usize - 1]
            .pool
            .free(buf, Owner::Endpoint)
        {
            Ok(()) => Ok(()),
            Err(Owner::Free) => Err(self.failure(format!(
                "node {node} {how} {buf:?}, which is not allocated (released twice, or never lent)"
            ))),
            Err(owner) => Err(self.failure(format!(
                "node {node} {how} {buf:?}, which is not its own (owner: {owner:?})"
            ))),
        }
    }

    /// Safety: the frame is the next fragment of the sender's stream, in
    /// order, once, intact; whole messages reassemble byte-identical.
    fn check_delivery(
        &mut self,
        node: NodeId,
        seq: Seq,
        buf: BufId,
        len: u16,
        flags: Flags,
    ) -> Result<(), SimFailure> {
        let cfg = self.cfg;
        let payload = self.nodes[node as usize - 1].pool.payload(buf);
        let c = &mut self.checks[node as usize - 2];
        let mut problem = None;
        match c.last_seq {
            Some(prev) if seq != prev.next() => {
                problem = Some(format!(
                    "delivered {seq:?} right after {prev:?}: out of order, duplicated or skipped"
                ));
            }
            None if seq.0 != cfg.initial_seq => {
                problem = Some(format!(
                    "delivered {seq:?} first, not the initial #{}: out of order or skipped",
                    cfg.initial_seq
                ));
            }
            _ => {}
        }
        if problem.is_none() && c.msg >= cfg.messages {
            problem = Some(format!(
                "delivered {seq:?} after all {} messages were delivered",
                cfg.messages
            ));
        }
        let size = cfg.message_len(c.msg);
        let want_len = (size.saturating_sub(c.offset)).min(cfg.max_payload);
        let mut want_flags = Flags::NONE;
        if c.offset == 0 {
            want_flags = want_flags.with(Flags::FRAG_FIRST);
        }
        if c.offset + want_len == size {
            want_flags = want_flags.with(Flags::FRAG_LAST);
        }
        let frag_bits = flags.0 & Flags::WHOLE.0;
        if problem.is_none()
            && (usize::from(len) != want_len
                || payload.len() != want_len
                || frag_bits != want_flags.0)
        {
            problem = Some(format!(
                "delivered {seq:?} as {len} bytes (buffer {}) with fragment flags {frag_bits:#x}, \
                 expected {want_len} bytes at offset {} of message {} with {:#x}",
                payload.len(),
                c.offset,
                c.msg,
                want_flags.0
            ));
        }
        if problem.is_none() && !matches_message(cfg.seed, c.msg, c.offset, payload) {
            problem = Some(format!(
                "delivered {seq:?} with bytes that differ from offset {} of message {}",
                c.offset, c.msg
            ));
        }
        if let Some(p) = problem {
            let msg = c.msg;
            return Err(self.failure(format!("node {node}, at message {msg}: {p}")));
        }
        c.last_seq = Some(seq);
        c.offset += want_len;
        let msg = c.msg;
        match c.reassembler.push(flags, payload) {
            Ok(None) => {}
            Ok(Some(m)) => {
                // A one-fragment message was compared whole just above.
                let whole = flags.contains(Flags::WHOLE);
                if m.len() != size || (!whole && !matches_message(cfg.seed, msg, 0, m)) {
                    let got = m.len();
                    return Err(self.failure(format!(
                        "node {node}: message {msg} reassembled wrong ({got} bytes, expected {size})"
                    )));
                }
                c.msg += 1;
                c.offset = 0;
                if c.msg == cfg.messages {
                    self.done_receivers += 1;
                }
            }
            Err(e) => {
                return Err(self.failure(format!(
                    "node {node}: message {msg} failed to reassemble: {e}"
                )));
            }
        }
        Ok(())
    }

    /// Bounds and conservation at one node, after a step that touched it.
    /// Every allocated buffer of a node is owned by exactly one party: its
    /// endpoint (`held_buffers`), or the simulator on the application's behalf
    /// (the sender's one refused fragment). Delivered buffers are freed by the
    /// simulator within the step, so none is counted between steps.
    fn check_node<E: Endpoint>(&mut self, ep: &E, node: NodeId) -> Result<(), SimFailure> {
        let held = ep.held_buffers();
        let window = self.cfg.window_frames as usize;
        let sim_held = usize::from(node == SENDER && self.app.pending.is_some());
        let st = &mut self.nodes[node as usize - 1];
        st.max_held = st.max_held.max(held);
        let allocated = st.pool.allocated();
        if held > window {
            return Err(self.failure(format!(
                "node {node} holds {held} buffers, more than its window of {window}"
            )));
        }
        if allocated != held + sim_held {
            return Err(self.failure(format!(
                "buffer conservation at node {node}: {allocated} allocated, but the endpoint holds \
                 {held} and the simulator {sim_held} (a buffer leaked or was counted wrong)"
            )));
        }
        Ok(())
    }
}

fn nanos(d: mcast_proto::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A header in a trace line: kind, sequence, and the flags that matter.
fn describe(h: &Header) -> String {
    let kind = match h.kind {
        Kind::Data => "DATA",
        Kind::Nak => "NAK",
        Kind::Ack => "ACK",
        Kind::AckReq => "ACK_REQ",
        Kind::GbnData => "GBN_DATA",
        Kind::Pack => "PACK",
        Kind::Nack => "NACK",
        Kind::Heartbeat => "HEARTBEAT",
        Kind::Beat => "BEAT",
    };
    let mut s = format!("{kind} {:?}", h.seq);
    if h.kind.carries_data() {
        let _ = write!(s, " len={}", h.payload_len);
    } else {
        let _ = write!(s, " ack={:?}", h.ack);
    }
    for (flag, name) in [
        (Flags::RETRANSMIT, "rexmit"),
        (Flags::LAST, "last"),
        (Flags::ACK_REQ, "ack_req"),
    ] {
        if h.flags.contains(flag) {
            let _ = write!(s, " {name}");
        }
    }
    s
}
