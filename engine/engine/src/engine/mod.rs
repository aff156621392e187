//! The polling engine: one per interface queue, owned by one thread.
//!
//! What it does, each [`Engine::poll`]: reaps TX completions (kept frames go
//! back to their machine), drains one RX batch, checks each frame
//! (`Frame::new_checked`; a checksum failure is counted and the frame is
//! treated as lost), routes it by [`stream_of`](mcast_proto::stream_of) to the send machine or the
//! receive machine of that stream, fires due timers, feeds queued fragments
//! to the sender while its window is open, drains events (deliveries are
//! copied once into the application's message, then the frame is freed;
//! releases free the frame), and drains `poll_transmit` into TX batches
//! (flushed at `batch` frames, >= 32). [`Engine::run_once`] adds adaptive
//! waiting: busy-poll for `spin`, then sleep in `poll()`/`ppoll()` until a
//! frame arrives or `deadline_spin` before the next protocol deadline, and
//! busy-poll to the deadline (with a 1 µs timer slack, so the sleep itself
//! ends on time).
//!
//! Zero copy: a published fragment is written once into a transport frame at
//! [`FRAME_OVERHEAD`]; the send machine holds that frame index as its
//! retransmission buffer, and the engine writes only headers in place
//! (`Frame::emit`). A frame staged or in flight is never rewritten: a
//! retransmission of it is deferred until its completion is reaped. Received
//! data frames go to the machine by index. The one exception is the iterative
//! baseline to two or more receivers, whose per-receiver headers make the
//! engine copy the payload (frame to frame, once) into a fresh frame for each
//! receiver (docs/protocol.md §4.3); to a single receiver (Go-Back-N unicast)
//! it sends in place like the multicast algorithms.
//!
//! Groups: one engine carries any number of groups over its one transport
//! (one NIC queue). Each group has its own algorithm, window and send queue,
//! at most one send stream (this node's) and one receive stream per sending
//! node; frames are routed by (group, [`stream_of`](mcast_proto::stream_of)). [`Engine::new`] opens
//! the configuration's group (unless it is 0); [`Engine::add_group`] and
//! [`Engine::remove_group`] change the set while the engine runs. The
//! single-group calls (`open_sender`, `publish`, ...) act on the
//! configuration's group; the `*_in` calls name the group.
//!
//! Delivery: by default the engine reassembles messages and queues them
//! ([`Engine::recv_message`]): one copy from the frame into the message. A
//! caller that wants the fragments themselves (the daemon, which copies each
//! straight into a client's shared-memory ring) passes a [`Deliver`] sink to
//! [`Engine::poll_deliver`]: the sink sees each payload in place in the frame.
//!
//! What it never does: it reads the clock only here (CLOCK_MONOTONIC, passed
//! to the machines as `Instant`), never lets the protocol core see bytes, never
//! loses track of a frame ([`Engine::check_conservation`]), and never blocks
//! except in [`Engine::run_once`]'s wait and the `*_blocking` calls.
//!
//! The module map (each submodule says what it owns and may not touch):
//!
//! - `config`: [`EngineConfig`], [`GroupOptions`], [`StreamStart`].
//! - `streams`: the stream table: groups, send and receive streams, members.
//! - `poll`: the poll loop (completions, RX, timers, feeding, events, TX) and
//!   the adaptive wait.
//! - `rx` and `tx`: the receive and transmit paths of one frame.
//! - `frames`: the frame accounting (where each UMEM frame is), the
//!   conservation check and shutdown.
//! - `delivery`: fragments to a [`Deliver`] sink or whole [`Message`]s.
//! - `publish`: the application's send side.
//! - `beats`: unreliable liveness frames.
//! - `stats`: the counters.
//!
//! This file keeps the [`Engine`] struct (all of its state, which the
//! submodules share), its construction and its plain accessors.
//! It may not hold any concern's logic. The per-frame functions one
//! submodule calls in another (`handle_rx`, `drain_events`,
//! `drain_transmits`, `free`, `release_from_machine`, `group_index`,
//! `accept_sender`) are `#[inline]`, so that they stay inlinable into the
//! poll loop as they were when the engine was one module.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use mcast_proto::{Instant, NodeId, Transmit};
use mcast_wire::{max_payload_for_mtu, MacAddr, FRAME_OVERHEAD};

use crate::sys;
use crate::transport::{RxDesc, Transport, TxDesc};
use crate::EngineError;

mod auth;
mod beats;
mod config;
mod delivery;
mod frames;
mod poll;
mod publish;
mod rx;
mod stats;
mod streams;
mod trace;
mod tx;

pub use auth::{AuthConfig, MAX_SENDERS};
pub use beats::MAX_BEAT;
pub use config::{Accept, EngineConfig, GroupOptions, StreamStart};
pub use delivery::{Batch, Deliver, Fragment, Message, RawFrame};
pub use frames::{FrameLedger, ShutdownReport};
pub use stats::{EngineCounters, EngineStats, GroupStats, SendTally};
pub use trace::MAX_SENT_STAMPS;

use frames::FrameTable;
use streams::GroupState;

/// The polling engine over transport `T`.
#[derive(Debug)]
pub struct Engine<T: Transport> {
    transport: T,
    cfg: EngineConfig,
    mac: MacAddr,
    max_payload: usize,
    /// Where each frame is, and what the engine keeps about it.
    frames: FrameTable,
    groups: Vec<GroupState>,
    peers: NodeMap<MacAddr>,
    deferred: VecDeque<Transmit>,
    tx_keep: Vec<TxDesc>,
    tx_copy: Vec<TxDesc>,
    rx_batch: Vec<RxDesc>,
    kept: Vec<u32>,
    messages: VecDeque<Message>,
    counters: EngineCounters,
    /// When the last poll started (CLOCK_MONOTONIC ns): what `idle` reads
    /// instead of the clock, right after a poll that found nothing to do.
    polled_at: u64,
    idle_since: Option<u64>,
    /// The group whose machines `drain_transmits` asks first (round-robin).
    turn: usize,
    /// Beat frames received (sender, payload), oldest first; bounded.
    beats: VecDeque<(NodeId, Vec<u8>)>,
    /// Frame authentication, when the configuration has keys.
    auth: Option<auth::Auth>,
    /// Per-hop stamps, when the configuration traces.
    trace: Option<Box<trace::Tracer>>,
}

/// A map keyed by node number, hashed with [`NodeHasher`].
type NodeMap<V> = HashMap<NodeId, V, BuildHasherDefault<NodeHasher>>;

/// Hashes a node number for the peers map and the replay windows: every received frame looks up
/// its sender there and every unicast frame sent its destination, and the
/// default SipHash cost more than the rest of the lookup. Node numbers are
/// not attacker-chosen keys here (a peer could only slow its own entry).
#[derive(Debug, Default, Clone, Copy)]
struct NodeHasher(u64);

impl Hasher for NodeHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl<T: Transport> Engine<T> {
    /// An engine over `transport`; opens the configuration's group (unless it
    /// is 0) and, if `config.cpu` is set, pins the calling thread (the
    /// polling thread).
    pub fn new(transport: T, config: EngineConfig) -> Result<Engine<T>, EngineError> {
        if config.batch < 32 {
            return Err(EngineError::Config(format!(
                "batch {} is below 32 (AF_XDP copy mode sends 32 frames per kick)",
                config.batch
            )));
        }
        if config.node == 0 {
            return Err(EngineError::Config("node 0 is reserved".into()));
        }
        // With authentication every frame ends in a trailer.
        let trailer = config.auth.as_ref().map_or(0, |_| mcast_auth::TRAILER_LEN);
        let max_payload = max_payload_for_mtu(config.mtu).saturating_sub(trailer);
        if max_payload == 0 || FRAME_OVERHEAD + max_payload + trailer > transport.frame_size() {
            return Err(EngineError::Config(format!(
                "MTU {} does not fit {}-byte frames",
                config.mtu,
                transport.frame_size()
            )));
        }
        if let Some(cpu) = config.cpu {
            sys::pin_current_thread(cpu).map_err(|e| EngineError::Io {
                operation: "pinning the polling thread (sched_setaffinity)",
                source: e,
            })?;
        }
        let n = transport.frame_count() as usize;
        let mut engine = Engine {
            mac: transport.mac(),
            max_payload,
            frames: FrameTable::new(n),
            trace: config.trace.then(|| Box::new(trace::Tracer::new(n))),
            groups: Vec::new(),
            peers: config.peers.iter().copied().collect(),
            deferred: VecDeque::new(),
            tx_keep: Vec::with_capacity(config.batch),
            tx_copy: Vec::with_capacity(config.batch),
            rx_batch: Vec::with_capacity(config.batch),
            kept: Vec::new(),
            messages: VecDeque::new(),
            counters: EngineCounters::default(),
            polled_at: 0,
            idle_since: None,
            turn: 0,
            beats: VecDeque::new(),
            auth: config
                .auth
                .as_ref()
                .map(|a| auth::Auth::new(a, config.node)),
            transport,
            cfg: config,
        };
        if engine.cfg.group != 0 {
            let opts = engine.cfg.group_options();
            engine.add_group(engine.cfg.group, opts)?;
        }
        Ok(engine)
    }

    /// Largest payload of one fragment.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutable (e.g. for its loss knob).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    fn now(&self) -> Instant {
        Instant(sys::monotonic_ns())
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
