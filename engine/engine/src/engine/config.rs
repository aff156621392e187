//! The engine's configuration: [`EngineConfig`] (fixed at construction),
//! [`GroupOptions`] (how one group is carried) and [`StreamStart`] (where a
//! stream starts).
//!
//! Owns: these plain settings types and their defaults. May not touch: the
//! engine's state; nothing here runs on the per-frame path.

use std::time::Duration;

use mcast_proto::any::{Algorithm, ProtocolConfig};
use mcast_proto::{GroupId, NodeId, Seq};
use mcast_wire::{MacAddr, ETHERTYPE_DEFAULT};

use super::AuthConfig;

#[cfg(doc)]
use super::Engine;

/// Configuration of one engine. Sizes are fixed at construction.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node.
    pub node: NodeId,
    /// The group [`Engine::new`] opens with the settings below (0: none; the
    /// caller adds groups with [`Engine::add_group`]).
    pub group: GroupId,
    pub ethertype: u16,
    /// The interface MTU; fragments carry at most `max_payload_for_mtu(mtu)` bytes.
    pub mtu: usize,
    pub algorithm: Algorithm,
    pub protocol: ProtocolConfig,
    /// The window of every stream (sender buffer and receiver reorder buffer).
    pub window_frames: u32,
    pub epoch: u32,
    pub initial_seq: Seq,
    pub seed: u64,
    /// Known peers' MACs (unicast destinations). Others are learnt from the
    /// frames they send.
    pub peers: Vec<(NodeId, MacAddr)>,
    /// TX batch size (frames per transmit call, >= 32).
    pub batch: usize,
    /// Busy-poll this long without work before sleeping.
    pub spin: Duration,
    /// Never sleep longer than this (wakes to re-check the send queue).
    pub max_sleep: Duration,
    /// Wake this long before a protocol deadline and busy-poll to it, so that
    /// timers (a NAK's wait is tens of microseconds) fire on time rather than
    /// a scheduler's wake-up late. Zero sleeps to the deadline itself.
    pub deadline_spin: Duration,
    /// Give the CPU up between busy-poll rounds that find no work
    /// (`sched_yield`) instead of spinning on it, once `spin_yield_after`
    /// has passed without work. Free when no other thread wants the CPU (the
    /// call returns at once); where polling threads outnumber CPUs it lets a
    /// thread woken by a frame run now rather than when the spinner's
    /// scheduler slice ends: four engines busy-polling on two vCPUs had a
    /// one-way p50 of 3.2 ms without it and 15 µs with it, and MAK's
    /// throughput there rose by about a fifth (docs/benchmarks.md). Turn it
    /// off only for a thread alone on an isolated CPU.
    pub spin_yield: bool,
    /// How long an idle busy-poll keeps the CPU before it starts yielding
    /// (with `spin_yield`). Zero, the default, yields from the first empty
    /// round: best for throughput where threads outnumber CPUs, since a
    /// receiver between two frames lets the sender run. 10 µs keeps the CPU
    /// across the short gaps of a stream: in alternating runs on two vCPUs it
    /// put MAK's p99 at 10,000 msg/s and 1 % loss lower (1,085 µs against
    /// 1,265 µs for never yielding, about 1.7 ms for yielding at once; the
    /// host's own swing is as large) but cost MAK a tenth of its throughput.
    pub spin_yield_after: Duration,
    /// Pin the thread that creates the engine to this CPU.
    pub cpu: Option<usize>,
    /// Largest message accepted and reassembled.
    pub max_message: usize,
    /// Fragments queued ahead of the send window at most (back-pressure).
    pub max_queued_frames: usize,
    /// Groups open at once at most.
    pub max_groups: usize,
    /// Pack small messages published while a frame waits ahead of the window
    /// into that frame (docs/protocol.md §1.10). On by default; off sends one
    /// message per frame, as before batching existed (for comparisons).
    pub batch_messages: bool,
    /// Seal every frame sent and refuse every frame received that is not
    /// sealed with an accepted key, or is a replay (docs/protocol.md §1.9).
    /// `None` (the default): frames carry no trailer and any frame of the
    /// EtherType is taken. The keys here are those the engine starts with;
    /// [`Engine::keys`] says which are in use after a rotation.
    pub auth: Option<AuthConfig>,
    /// Stamp data frames for per-hop timing (`trace`: queued, sent,
    /// received). Off by default: then no clock is read for it and no
    /// memory kept.
    pub trace: bool,
}

impl EngineConfig {
    /// Defaults for `node` in `group` running `algorithm`.
    pub fn new(node: NodeId, group: GroupId, algorithm: Algorithm) -> EngineConfig {
        EngineConfig {
            node,
            group,
            ethertype: ETHERTYPE_DEFAULT,
            mtu: 1500,
            algorithm,
            protocol: ProtocolConfig::default(),
            window_frames: 512,
            epoch: 1,
            initial_seq: Seq(0),
            seed: 1,
            peers: Vec::new(),
            batch: 64,
            spin: Duration::from_micros(20),
            max_sleep: Duration::from_millis(1),
            deadline_spin: Duration::from_micros(50),
            spin_yield: true,
            spin_yield_after: Duration::ZERO,
            cpu: None,
            max_message: 1 << 20,
            max_queued_frames: 256,
            max_groups: 256,
            batch_messages: true,
            auth: None,
            trace: false,
        }
    }

    /// Where the configuration group's streams start.
    pub fn start(&self) -> StreamStart {
        StreamStart {
            epoch: self.epoch,
            seq: self.initial_seq,
        }
    }

    /// The settings of the configuration's own group.
    pub fn group_options(&self) -> GroupOptions {
        GroupOptions {
            algorithm: self.algorithm,
            protocol: self.protocol,
            window_frames: self.window_frames,
            subscribe: true,
            accept_senders: Accept::Opened,
            max_queued_frames: self.max_queued_frames,
            batch_messages: self.batch_messages,
        }
    }
}

/// Whose first data frame opens a receive stream in a group by itself,
/// from sequence 0, and starts it afresh when the sender's frames show a
/// newer epoch (a restarted peer): for the daemons' unicast links, where
/// the sender always starts at 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Accept {
    /// Nobody's: receive streams are opened only by
    /// [`Engine::open_receiver_in`].
    #[default]
    Opened,
    /// Any node's.
    Any,
    /// These nodes' only (a daemon's configured peers): a data frame of
    /// another node is dropped (`rx_sender_refused`), so frames claiming a
    /// million sender ids, where frames are not authenticated, open no
    /// stream.
    Only(Vec<NodeId>),
}

impl Accept {
    /// True when a data frame of `sender` may open its receive stream.
    #[inline]
    pub fn admits(&self, sender: NodeId) -> bool {
        match self {
            Accept::Opened => false,
            Accept::Any => true,
            Accept::Only(nodes) => nodes.contains(&sender),
        }
    }
}

/// How one group is carried.
#[derive(Debug, Clone)]
pub struct GroupOptions {
    pub algorithm: Algorithm,
    pub protocol: ProtocolConfig,
    /// The window of every stream of the group.
    pub window_frames: u32,
    /// Receive frames sent to the group's MAC (false for unicast-only groups).
    pub subscribe: bool,
    /// Whose data frames open a receive stream by themselves.
    pub accept_senders: Accept,
    /// Fragments queued ahead of the group's send window at most.
    pub max_queued_frames: usize,
    /// Pack small messages into the frame waiting at the back of the send
    /// queue (docs/protocol.md §1.10).
    pub batch_messages: bool,
}

/// Where a send stream starts: its session epoch and first sequence number
/// (or, for a receiver added later, the first one it is owed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    pub epoch: u32,
    pub seq: Seq,
}
