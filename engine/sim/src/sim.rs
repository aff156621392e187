//! The simulation proper: [`run_with`] builds the endpoints and the world,
//! and the drive loop (`Sim`) takes the event queue's entries in order and
//! hands each to its endpoint: a frame copy arrives (`receive`), a timer
//! fires, a NIC has room again, the application wakes. After each input the
//! endpoint is drained into the world (`drain`) and checked.
//!
//! The rest, by concern:
//! - `world`: the event queue, the segment (NICs, links, faults) and the trace;
//! - `app`: the sender's application, which offers the run's messages;
//! - `checks`: the checkers, run after every step.
//!
//! Owns: the order of events and which endpoint gets each, the run's stop
//! reason and its report. May not touch: how frames cross the segment (it
//! hands transmissions to `world` and takes arriving copies from its
//! queue), the checkers' verdicts, or an endpoint's state except through
//! `Sender` and `Endpoint`.

mod app;
mod checks;
mod world;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use mcast_proto::{
    stream_of, Counters, Duration, Endpoint, FeedbackTree, Instant, Kind, NodeId, RangeList, Rng,
    RxBody, Sender, Seq, StreamConfig,
};
use mcast_wire::{Frame, ETHERTYPE_DEFAULT};

use crate::config::{SimConfig, SENDER};
use crate::pool::Owner;
use crate::report::{SimFailure, SimReport, StopReason};
use world::{Batch, Copies, What, World};

/// The session epoch every simulated stream uses.
const EPOCH: u32 = 1;
/// Timer expiries of one node at one instant before the run fails as a livelock.
const TIMER_SPIN_LIMIT: u32 = 10_000;

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
    let (mut sender, mut receivers) = (sender, receivers);
    let mut retree = None;
    if cfg.protocol.mak.tree_fanout > 0 {
        // Every node computes the same tree from the same view.
        let mut nodes = members.clone();
        nodes.push(SENDER);
        let mak = &cfg.protocol.mak;
        let fanout = FeedbackTree::fanout_for(nodes.len(), mak.tree_fanout, mak.tree_max_depth);
        let tree = FeedbackTree::new(cfg.tree_root, &nodes, fanout);
        sender.set_tree(Some(&tree));
        for r in &mut receivers {
            r.set_tree(Some(&tree));
        }
        if let Some(r) = cfg.retree {
            // Each node takes the new view at its own instant.
            let mut rng = Rng::new(cfg.seed ^ 0x7e7e_0000_0000_0000);
            for node in nodes.iter().copied() {
                let spread = u64::try_from(r.spread.as_nanos()).unwrap_or(u64::MAX - 1);
                let late = rng.range(0, spread + 1);
                world.push(r.at + Duration::from_nanos(late), What::Retree { node });
            }
            retree = Some(moved(&tree, &nodes, r.node));
        }
    }
    let mut sim = Sim {
        sender,
        receivers,
        w: world,
        batch: None,
        retree,
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

/// `tree` after `node` left its place and took a new leaf place (seed 004
/// §2.2): its children are adopted by its parent; when it was the root, the
/// node at the lowest place takes the root's place (the agent role moved).
fn moved(tree: &FeedbackTree, nodes: &[NodeId], node: NodeId) -> FeedbackTree {
    let at = |n: NodeId| tree.place(n).expect("in the tree") as u32;
    let placed: Vec<(NodeId, u32)> = nodes
        .iter()
        .map(|&n| {
            (
                n,
                if n == node {
                    tree.places() as u32
                } else {
                    at(n)
                },
            )
        })
        .collect();
    let root = if node == tree.root() {
        let others = nodes.iter().copied().filter(|&n| n != node);
        others.min_by_key(|&n| at(n)).unwrap_or(node)
    } else {
        tree.root()
    };
    FeedbackTree::with_places(root, &placed, tree.fanout())
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
    /// The tree each node installs at its `Retree` event.
    retree: Option<FeedbackTree>,
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
            if self.w.done_receivers == cfg.receivers && self.w.delivered_time.is_none() {
                self.w.delivered_time = Some(self.w.now);
            }
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
                What::Retree { node } => {
                    self.w.step += 1;
                    let tree = self.retree.as_ref();
                    self.w
                        .trace_line(|| format!("{node} installs the re-parented tree"));
                    if node == SENDER {
                        self.sender.set_tree(tree);
                        self.sender_step(None)?;
                    } else {
                        let ep = &mut self.receivers[node as usize - 2];
                        ep.set_tree(tree);
                        drain(ep, &mut self.w, node)?;
                        self.w.check_node(ep, node)?;
                    }
                }
            }
        };
        Ok(stop)
    }

    /// One step: a copy of a frame from `from` reaches `to`.
    fn copy_arrives(
        &mut self,
        from: NodeId,
        to: NodeId,
        bytes: &Rc<[u8]>,
    ) -> Result<(), SimFailure> {
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
    fn sender_step(&mut self, input: Option<(NodeId, &Rc<[u8]>)>) -> Result<(), SimFailure> {
        if let Some((from, bytes)) = input {
            receive(&mut self.sender, &mut self.w, from, SENDER, bytes)?;
        }
        self.pump_app()?;
        drain(&mut self.sender, &mut self.w, SENDER)?;
        self.w.check_node(&self.sender, SENDER)
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
            delivered_time: w.delivered_time,
            end_time: w.now,
            steps: w.step,
            delivered_messages: w.checks.iter().map(|c| c.msg).collect(),
            sent_messages: w.app.msg,
            data_frames: w.app.frames,
            batched_frames: w.app.batched_frames,
            batched_messages: w.app.batched_messages,
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
    bytes: &Rc<[u8]>,
) -> Result<(), SimFailure> {
    let frame = match Frame::new_checked(&bytes[..], ETHERTYPE_DEFAULT) {
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
            let window = w.cfg.window_frames;
            let st = &mut w.nodes[node as usize - 1];
            if ep.keeps_copies() {
                // The copy a repair of a tree neighbour is written from
                // (docs/protocol.md §3.5): the sender holds at most a
                // window unacknowledged, so a window of copies covers
                // every frame a neighbour can still miss.
                st.copies.get_or_insert_with(|| Copies::new(window)).keep(
                    header.seq,
                    header.flags,
                    bytes,
                    header.payload_len,
                );
            }
            let (buf, slot) = st.pool.alloc(Owner::Endpoint, payload.len());
            slot.copy_from_slice(payload);
            ep.handle_frame(now, &header, RxBody::Data(buf));
        }
        // A NAK's missing frames, or the nodes a merged ACK covers.
        Kind::Nak | Kind::Ack if header.kind == Kind::Nak || header.payload_len > 0 => {
            match RangeList::parse(frame.payload()) {
                Ok(list) => ep.handle_frame(now, &header, RxBody::Ranges(&list)),
                Err(_) => w.malformed_dropped += 1,
            }
        }
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
