//! The polling engine: one per interface queue, owned by one thread.
//!
//! What it does, each [`Engine::poll`]: reaps TX completions (kept frames go
//! back to their machine), drains one RX batch, checks each frame
//! (`Frame::new_checked`; a checksum failure is counted and the frame is
//! treated as lost), routes it by [`stream_of`] to the send machine or the
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
//! node; frames are routed by (group, [`stream_of`]). [`Engine::new`] opens
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

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::os::fd::RawFd;
use std::time::Duration;

use mcast_proto::any::{Algorithm, AnyReceiver, AnySender, ProtocolConfig};
use mcast_proto::frag::Reassembler;
use mcast_proto::{
    stream_of, BufId, Counters, Dest, Endpoint, Event, GroupId, Instant, NodeId, OutFrame, RxBody,
    SendError, Sender, Seq, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{
    group_mac, max_payload_for_mtu, Flags, Frame, Kind, MacAddr, RangeList, WireError,
    ETHERTYPE_DEFAULT, FRAME_OVERHEAD,
};
use mcast_xsk::{SocketStats, SteeringCounters};

use crate::sys;
use crate::transport::{RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::{EngineError, PublishError};

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
            accept_any_sender: false,
            max_queued_frames: self.max_queued_frames,
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
    /// Open a receive stream, from sequence 0, for any node whose data frame
    /// arrives, and start it afresh when that node's frames show a newer
    /// epoch (a restarted peer). For the daemons' unicast links, where the
    /// sender always starts at 0. Otherwise receive streams are opened only by
    /// [`Engine::open_receiver_in`].
    pub accept_any_sender: bool,
    /// Fragments queued ahead of the group's send window at most.
    pub max_queued_frames: usize,
}

/// Where a send stream starts: its session epoch and first sequence number
/// (or, for a receiver added later, the first one it is owed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    pub epoch: u32,
    pub seq: Seq,
}

/// One received fragment, in place in its frame, handed to a [`Deliver`] sink
/// in stream order. A message is the fragments from one with `first` to the
/// next with `last` (both on a message of one frame).
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    /// The frame's sequence number in that node's stream.
    pub seq: Seq,
    pub first: bool,
    pub last: bool,
    pub data: &'a [u8],
}

/// Takes received fragments as the engine delivers them (see [`Engine::poll_deliver`]).
pub trait Deliver {
    fn deliver(&mut self, fragment: Fragment<'_>);
}

impl<F: FnMut(Fragment<'_>)> Deliver for F {
    fn deliver(&mut self, fragment: Fragment<'_>) {
        self(fragment)
    }
}

/// A whole message received on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    pub data: Vec<u8>,
}

/// The engine's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub rx_frames: u64,
    /// Frames whose CRC32C did not match: dropped, handled as lost.
    pub rx_checksum_failures: u64,
    /// Frames that failed any other check (length, version, kind, NAK list).
    pub rx_malformed: u64,
    /// Frames of a group this engine does not carry.
    pub rx_other_group: u64,
    /// Data frames dropped because their group's delivery is paused.
    pub rx_paused: u64,
    /// Beat frames received, and dropped because the caller did not take them.
    pub rx_beats: u64,
    pub rx_beats_dropped: u64,
    /// Beat frames sent.
    pub tx_beats: u64,
    /// Receive streams opened on their first frame (`accept_any_sender`).
    pub rx_streams_opened: u64,
    /// Receive streams started afresh for a newer epoch of their sender.
    pub rx_streams_restarted: u64,
    /// Frames of a stream this engine neither sends nor receives.
    pub rx_unrouted: u64,
    /// Frames accepted by the transport for sending.
    pub tx_frames: u64,
    /// Transmit calls (each kicks the kernel at least once on AF_XDP).
    pub tx_batches: u64,
    /// Retransmissions deferred because their frame was still in flight.
    pub tx_deferred: u64,
    /// Payloads copied into a fresh frame (iterative: one per receiver).
    pub tx_payload_copies: u64,
    /// Control frames dropped because the pool had no free frame.
    pub tx_no_frame: u64,
    /// Frames dropped because the destination node's MAC is unknown.
    pub tx_no_route: u64,
    pub messages_published: u64,
    pub publish_would_block: u64,
    pub messages_delivered: u64,
    pub reassembly_errors: u64,
    pub polls: u64,
    pub sleeps: u64,
}

/// The counters of one group's streams.
#[derive(Debug, Clone)]
pub struct GroupStats {
    pub group: GroupId,
    pub algorithm: Algorithm,
    /// This node's send machine.
    pub sender: Option<Counters>,
    /// Each receive machine, by sending node.
    pub receivers: Vec<(NodeId, Counters)>,
    /// Fragments queued ahead of the send window.
    pub queued: usize,
    pub paused: bool,
}

/// Everything countable about a running engine.
#[derive(Debug, Clone)]
pub struct EngineStats {
    pub engine: EngineCounters,
    /// The configuration group's send machine.
    pub sender: Option<Counters>,
    /// The configuration group's receive machines, by sending node.
    pub receivers: Vec<(NodeId, Counters)>,
    /// Every group.
    pub groups: Vec<GroupStats>,
    pub transport: TransportInfo,
    /// AF_XDP: the steering program's counters.
    pub steering: Option<SteeringCounters>,
    /// AF_XDP: the kernel's counters of the socket.
    pub socket: Option<SocketStats>,
    pub frames: TransportCounts,
}

/// Where the frames are, by the engine's ledger, after a conservation check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameLedger {
    pub transport: TransportCounts,
    /// Received, being dispatched (0 between polls).
    pub rx: u32,
    /// Published fragments waiting for the send window.
    pub queued: u32,
    /// Held by a protocol machine (retransmission or reorder buffer).
    pub machine: u32,
    /// In the engine's TX batch, not yet accepted by the transport.
    pub staged: u32,
    /// Retransmission buffers in the TX ring or awaiting completion.
    pub in_tx_kept: u32,
    /// Sum of the machines' `held_buffers()`.
    pub machines_report: u32,
}

/// What shutdown returned.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    pub stats: EngineStats,
    /// The ledger after every frame came back.
    pub ledger: FrameLedger,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    /// The transport's: free, fill ring / kernel RX, or a non-kept frame in TX.
    Transport,
    Rx,
    Queued,
    Machine,
    /// In a TX batch. `keep`: a machine's buffer (in the kept batch); `back`:
    /// return it to the machine after completion (false once it released it).
    Staged {
        keep: bool,
        back: bool,
    },
    InTx {
        back: bool,
    },
}

#[derive(Debug)]
struct RecvStream {
    sender: NodeId,
    epoch: u32,
    machine: AnyReceiver,
    reassembler: Reassembler,
}

#[derive(Debug)]
struct SendStream {
    machine: AnySender,
    policy: TxPolicy,
    start: StreamStart,
    /// The sequence number the next frame fed to the machine gets.
    next_seq: Seq,
    /// Published fragments waiting for the window.
    queue: VecDeque<OutFrame>,
}

#[derive(Debug)]
struct GroupState {
    id: GroupId,
    opts: GroupOptions,
    sender: Option<SendStream>,
    receivers: Vec<RecvStream>,
    paused: bool,
}

/// How the send machine's data buffers reach the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxPolicy {
    /// Headers written in place in the machine's buffer (the multicast
    /// algorithms, and iterative with a single member: Go-Back-N unicast).
    InPlace,
    /// Payload copied into a fresh frame per transmit (iterative to two or
    /// more members: one header per receiver, possibly in flight at once).
    CopyPerTransmit,
}

/// The policy a send machine needs: only iterative to several members has
/// per-destination headers that could be on the wire at the same time.
fn tx_policy(machine: &AnySender) -> TxPolicy {
    match machine {
        AnySender::Iterative(s) if s.members().nth(1).is_some() => TxPolicy::CopyPerTransmit,
        _ => TxPolicy::InPlace,
    }
}

/// The polling engine over transport `T`.
#[derive(Debug)]
pub struct Engine<T: Transport> {
    transport: T,
    cfg: EngineConfig,
    mac: MacAddr,
    max_payload: usize,
    place: Vec<Place>,
    rx_offset: Vec<u32>,
    /// By frame: the CRC32C of the payload a publish wrote into it, computed
    /// while the payload was in cache; a transmission adds only the header's
    /// (`Frame::emit_with_payload_crc`).
    payload_crc: Vec<u32>,
    groups: Vec<GroupState>,
    peers: HashMap<NodeId, MacAddr, BuildHasherDefault<NodeHasher>>,
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
}

/// Hashes a node number for the peers map: every received frame looks up
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

/// Beat frames held for the caller at most (older ones are dropped).
const MAX_BEATS: usize = 1024;
/// Largest beat payload.
pub const MAX_BEAT: usize = 256;

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
        let max_payload = max_payload_for_mtu(config.mtu);
        if max_payload == 0 || FRAME_OVERHEAD + max_payload > transport.frame_size() {
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
            place: vec![Place::Transport; n],
            rx_offset: vec![0; n],
            payload_crc: vec![0; n],
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
            transport,
            cfg: config,
        };
        if engine.cfg.group != 0 {
            let opts = engine.cfg.group_options();
            engine.add_group(engine.cfg.group, opts)?;
        }
        Ok(engine)
    }

    /// Starts carrying `group` (subscribing its MAC if `opts.subscribe`).
    pub fn add_group(&mut self, group: GroupId, opts: GroupOptions) -> Result<(), EngineError> {
        if self.group_index(group).is_some() {
            return Err(EngineError::Config(format!(
                "group {group} is already open"
            )));
        }
        if self.groups.len() >= self.cfg.max_groups {
            return Err(EngineError::Config(format!(
                "{} groups are open, the limit (max_groups)",
                self.groups.len()
            )));
        }
        if opts.window_frames == 0 || opts.window_frames >= self.transport.frame_count() {
            return Err(EngineError::Config(format!(
                "window of {} frames does not fit a pool of {} frames",
                opts.window_frames,
                self.transport.frame_count()
            )));
        }
        if opts.subscribe {
            self.transport.subscribe(group_mac(group))?;
        }
        self.groups.push(GroupState {
            id: group,
            opts,
            sender: None,
            receivers: Vec::new(),
            paused: false,
        });
        Ok(())
    }

    /// Stops carrying `group`: its streams are closed (their frames freed,
    /// queued messages dropped) and its MAC unsubscribed.
    pub fn remove_group(&mut self, group: GroupId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        self.close_sender_in(group)?;
        while let Some(r) = self.groups[gi].receivers.last() {
            let sender = r.sender;
            self.close_receiver_in(group, sender)?;
        }
        let g = self.groups.remove(gi);
        self.messages.retain(|m| m.group != group);
        if g.opts.subscribe {
            self.transport.unsubscribe(group_mac(group))?;
        }
        Ok(())
    }

    /// The groups carried.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.iter().map(|g| g.id)
    }

    /// Opens this node's send stream in the configuration's group to `members`.
    pub fn open_sender(&mut self, members: &[NodeId]) -> Result<(), EngineError> {
        self.open_sender_in(self.cfg.group, members, self.cfg.start())
    }

    /// Opens this node's send stream in `group` to `members`, starting at `start`.
    pub fn open_sender_in(
        &mut self,
        group: GroupId,
        members: &[NodeId],
        start: StreamStart,
    ) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        if self.groups[gi].sender.is_some() {
            return Err(EngineError::Config(format!(
                "a send stream is already open in group {group}"
            )));
        }
        let stream = self.stream_config(gi, self.cfg.node, start);
        let g = &mut self.groups[gi];
        let machine = AnySender::new(g.opts.algorithm, stream, &g.opts.protocol, members);
        g.sender = Some(SendStream {
            policy: tx_policy(&machine),
            machine,
            start,
            next_seq: start.seq,
            queue: VecDeque::new(),
        });
        Ok(())
    }

    /// Installs a new view in `group`'s send stream: the members whose
    /// acknowledgments count from now on. Returns where a member added now
    /// starts (what its receive stream must be opened at).
    pub fn set_members_in(
        &mut self,
        group: GroupId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        let now = self.now();
        let gi = self.require_group(group)?;
        let Some(mut s) = self.groups[gi].sender.take() else {
            return Err(EngineError::Config(format!(
                "no send stream is open in group {group}"
            )));
        };
        s.machine.set_members(now, members);
        // Iterative with one member sends in place; with more, a copy each.
        // Frames already in flight in place are deferred by the copy path
        // until their completion, so a change is safe at any time.
        s.policy = tx_policy(&s.machine);
        let start = joining_position(self.groups[gi].opts.algorithm, &s);
        // Frames only departed members held are released now.
        let freed = self.absorb_releases(&mut s.machine);
        self.groups[gi].sender = Some(s);
        freed.map(|()| start)
    }

    /// Where `member`, which lost its receive stream of `group`'s send
    /// stream while this node kept counting it a member, opens it again:
    /// at the first frame it has not acknowledged, which the machine still
    /// holds (nothing it lacks is skipped). Algorithms that keep no such
    /// position take it out of `members` and add it back, so it starts
    /// where a new member would.
    pub fn resume_member_in(
        &mut self,
        group: GroupId,
        member: NodeId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        let now = self.now();
        let gi = self.require_group(group)?;
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return Err(EngineError::Config(format!(
                "no send stream is open in group {group}"
            )));
        };
        if let Some(seq) = s.machine.resume_point(now, member) {
            return Ok(StreamStart {
                epoch: s.start.epoch,
                seq,
            });
        }
        let others: Vec<NodeId> = members.iter().copied().filter(|&n| n != member).collect();
        self.set_members_in(group, &others)?;
        self.set_members_in(group, members)
    }

    /// Where a receiver added to `group`'s send stream now would start.
    pub fn sender_position(&self, group: GroupId) -> Option<StreamStart> {
        let g = &self.groups[self.group_index(group)?];
        g.sender
            .as_ref()
            .map(|s| joining_position(g.opts.algorithm, s))
    }

    /// Closes this node's send stream in `group`: frames not yet acknowledged
    /// are abandoned, messages queued behind the window dropped.
    pub fn close_sender_in(&mut self, group: GroupId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        let Some(mut s) = self.groups[gi].sender.take() else {
            return Ok(());
        };
        while let Some(of) = s.queue.pop_front() {
            self.free(of.buf.0);
        }
        s.machine.release_all();
        self.absorb_releases(&mut s.machine)
    }

    /// Opens a receive stream in the configuration's group for node `sender`'s data.
    pub fn open_receiver(&mut self, sender: NodeId) -> Result<(), EngineError> {
        self.open_receiver_in(self.cfg.group, sender, self.cfg.start())
    }

    /// Opens a receive stream in `group` for node `sender`'s data, expecting
    /// `start` first. Frames before it are history this stream never delivers.
    pub fn open_receiver_in(
        &mut self,
        group: GroupId,
        sender: NodeId,
        start: StreamStart,
    ) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        if sender == self.cfg.node || self.groups[gi].receivers.iter().any(|r| r.sender == sender) {
            return Err(EngineError::Config(format!(
                "a stream from node {sender} is already open in group {group}"
            )));
        }
        self.push_receiver(gi, sender, start);
        Ok(())
    }

    /// Closes the receive stream of `sender` in `group` (frames it held are
    /// freed, a message half reassembled is dropped).
    pub fn close_receiver_in(&mut self, group: GroupId, sender: NodeId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        let g = &mut self.groups[gi];
        let Some(i) = g.receivers.iter().position(|r| r.sender == sender) else {
            return Ok(());
        };
        let mut r = g.receivers.swap_remove(i);
        r.machine.release_all();
        self.absorb_releases(&mut r.machine)
    }

    /// The senders `group` has receive streams for.
    pub fn receivers_in(&self, group: GroupId) -> Vec<NodeId> {
        self.group_index(group)
            .map(|gi| self.groups[gi].receivers.iter().map(|r| r.sender).collect())
            .unwrap_or_default()
    }

    /// The members that left at least `after` acknowledgment requests in a
    /// row unanswered, per group, as `(group, node)` (see
    /// [`Sender::unresponsive`]): for the caller's failure detector.
    pub fn unresponsive(&self, after: u32, out: &mut Vec<(GroupId, NodeId)>) {
        let mut nodes = Vec::new();
        for g in &self.groups {
            if let Some(s) = &g.sender {
                nodes.clear();
                s.machine.unresponsive(after, &mut nodes);
                out.extend(nodes.iter().map(|&n| (g.id, n)));
            }
        }
    }

    /// Pauses (or resumes) `group`'s delivery: while paused, its data frames
    /// are dropped on arrival (and counted), so nothing more is delivered
    /// and its senders, missing this node's acknowledgments, hold back. On
    /// resume the receive machines recover the frames by their usual repair.
    pub fn set_paused(&mut self, group: GroupId, paused: bool) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        self.groups[gi].paused = paused;
        Ok(())
    }

    /// Sends an unreliable beat frame (liveness, outside every stream) with
    /// `payload` (at most [`MAX_BEAT`] bytes) to node `to`. False when it
    /// could not go: no MAC known for `to`, or no free frame.
    pub fn send_beat(&mut self, to: NodeId, payload: &[u8]) -> Result<bool, EngineError> {
        if payload.len() > MAX_BEAT {
            return Err(EngineError::Config(format!(
                "a beat of {} bytes exceeds {MAX_BEAT}",
                payload.len()
            )));
        }
        let Some(&dst) = self.peers.get(&to) else {
            self.counters.tx_no_route += 1;
            return Ok(false);
        };
        let Some(f) = self.transport.alloc() else {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        };
        let mut h = mcast_wire::Header::new(Kind::Beat);
        h.src = self.cfg.node;
        h.peer = to;
        h.payload_len = payload.len() as u16;
        let buf = self.transport.frame_mut(f);
        Frame::<&mut [u8]>::payload_area_mut(buf, payload.len())
            .map_err(|e| EngineError::Accounting(format!("beat does not fit: {e}")))?
            .copy_from_slice(payload);
        let (_, len) = Frame::emit(buf, dst, self.mac, self.cfg.ethertype, &h)
            .map_err(|e| EngineError::Accounting(format!("beat does not fit: {e}")))?;
        self.place[f as usize] = Place::Staged {
            keep: false,
            back: false,
        };
        self.tx_copy.push(TxDesc {
            frame: f,
            len: len as u32,
        });
        self.counters.tx_beats += 1;
        if self.tx_copy.len() + self.tx_keep.len() >= self.cfg.batch {
            self.flush_batches()?;
        }
        Ok(true)
    }

    /// The next beat received: (sending node, payload).
    pub fn poll_beat(&mut self) -> Option<(NodeId, Vec<u8>)> {
        self.beats.pop_front()
    }

    /// Largest payload of one fragment.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// [`Engine::publish_in`] the configuration's group.
    pub fn publish(&mut self, msg: &[u8]) -> Result<(), PublishError> {
        self.publish_in(self.cfg.group, msg)
    }

    /// Queues a message for reliable delivery in `group`: its fragments are
    /// written once into transport frames and fed to the send machine as its
    /// window opens. `WouldBlock` when the queue ahead of the window or the
    /// frame pool is full.
    pub fn publish_in(&mut self, group: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        let Some(gi) = self.group_index(group) else {
            return Err(PublishError::NoSendStream);
        };
        let limit = self.groups[gi].opts.max_queued_frames;
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return Err(PublishError::NoSendStream);
        };
        if msg.len() > self.cfg.max_message {
            return Err(PublishError::TooLarge {
                limit: self.cfg.max_message,
            });
        }
        let count = msg.len().div_ceil(self.max_payload).max(1);
        if !s.queue.is_empty() && s.queue.len() + count > limit {
            self.counters.publish_would_block += 1;
            return Err(PublishError::WouldBlock);
        }
        let first = s.queue.len();
        for (offset, len, frag) in mcast_proto::frag::fragments(msg.len(), self.max_payload) {
            let Some(f) = self.transport.alloc() else {
                // Not enough frames for the whole message: undo.
                for of in s.queue.drain(first..) {
                    self.place[of.buf.0 as usize] = Place::Transport;
                    self.transport.release(of.buf.0);
                }
                self.counters.publish_would_block += 1;
                return Err(PublishError::WouldBlock);
            };
            let area = Frame::<&mut [u8]>::payload_area_mut(self.transport.frame_mut(f), len)
                .expect("MTU checked against the frame size");
            let part = &msg[offset..offset + len];
            area.copy_from_slice(part);
            self.payload_crc[f as usize] = mcast_wire::payload_crc(part);
            self.place[f as usize] = Place::Queued;
            s.queue.push_back(OutFrame {
                buf: BufId(f),
                len: len as u16,
                frag,
                last: false,
            });
        }
        self.counters.messages_published += 1;
        Ok(())
    }

    /// [`Engine::publish`], running the engine until the message is accepted
    /// or `timeout` passes.
    pub fn publish_blocking(&mut self, msg: &[u8], timeout: Duration) -> Result<(), PublishError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        loop {
            match self.publish(msg) {
                Err(PublishError::WouldBlock) => {}
                other => return other,
            }
            if sys::monotonic_ns() >= deadline {
                return Err(PublishError::TimedOut);
            }
            self.run_once().map_err(PublishError::Engine)?;
        }
    }

    /// The next whole message received, if any.
    pub fn recv_message(&mut self) -> Option<Message> {
        self.messages.pop_front()
    }

    /// Runs the engine until a message arrives or `timeout` passes.
    pub fn recv_message_blocking(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<Message>, EngineError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        loop {
            if let Some(m) = self.messages.pop_front() {
                return Ok(Some(m));
            }
            if sys::monotonic_ns() >= deadline {
                return Ok(None);
            }
            self.run_once()?;
        }
    }

    /// Messages received and not yet taken.
    pub fn pending_messages(&self) -> usize {
        self.messages.len()
    }

    /// True when everything published has left the queues and every send
    /// machine is idle (every frame acknowledged, or for NAK: nothing left to send).
    pub fn send_idle(&self) -> bool {
        self.deferred.is_empty()
            && self.tx_keep.is_empty()
            && self.tx_copy.is_empty()
            && self.groups.iter().all(|g| {
                g.sender
                    .as_ref()
                    .is_none_or(|s| s.queue.is_empty() && s.machine.is_idle())
            })
    }

    /// True when `group`'s send stream has nothing queued or unacknowledged.
    pub fn group_send_idle(&self, group: GroupId) -> bool {
        self.group_index(group).is_none_or(|gi| {
            self.groups[gi]
                .sender
                .as_ref()
                .is_none_or(|s| s.queue.is_empty() && s.machine.is_idle())
        })
    }

    /// Fragments queued ahead of `group`'s send window.
    pub fn queued_in(&self, group: GroupId) -> usize {
        self.group_index(group)
            .and_then(|gi| self.groups[gi].sender.as_ref())
            .map_or(0, |s| s.queue.len())
    }

    /// Runs the engine until [`Engine::send_idle`] or `timeout`; returns whether idle.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool, EngineError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        while !self.send_idle() {
            if sys::monotonic_ns() >= deadline {
                return Ok(false);
            }
            self.run_once()?;
        }
        Ok(true)
    }

    /// One iteration without sleeping; received messages are reassembled
    /// and queued. Returns whether anything happened.
    pub fn poll(&mut self) -> Result<bool, EngineError> {
        self.poll_inner(None)
    }

    /// One iteration without sleeping; received fragments go to `sink`, in
    /// place (nothing is reassembled or queued).
    pub fn poll_deliver(&mut self, sink: &mut dyn Deliver) -> Result<bool, EngineError> {
        self.poll_inner(Some(sink))
    }

    fn poll_inner<'s>(
        &mut self,
        mut sink: Option<&mut (dyn Deliver + 's)>,
    ) -> Result<bool, EngineError> {
        self.counters.polls += 1;
        let now = self.now();
        self.polled_at = now.0;
        let mut work = false;

        // Completions: kept frames return to their machine (or to the pool if
        // the machine released them while they were in flight).
        self.kept.clear();
        self.transport.reap(&mut self.kept)?;
        for i in 0..self.kept.len() {
            let f = self.kept[i];
            match self.place[f as usize] {
                Place::InTx { back: true } => self.place[f as usize] = Place::Machine,
                Place::InTx { back: false } => self.free(f),
                other => {
                    return Err(EngineError::Accounting(format!(
                        "transport completed kept frame {f} that the engine has in {other:?}"
                    )))
                }
            }
            work = true;
        }

        // Receive one batch.
        let mut rx = std::mem::take(&mut self.rx_batch);
        rx.clear();
        let got = self.transport.recv(&mut rx);
        for d in &rx {
            self.handle_rx(now, *d)?;
        }
        work |= !rx.is_empty();
        self.rx_batch = rx;
        got?;

        // Timers.
        for g in &mut self.groups {
            if let Some(s) = g.sender.as_mut() {
                if s.machine.poll_timeout().is_some_and(|t| t <= now) {
                    s.machine.handle_timeout(now);
                    work = true;
                }
            }
            for r in &mut g.receivers {
                if r.machine.poll_timeout().is_some_and(|t| t <= now) {
                    r.machine.handle_timeout(now);
                    work = true;
                }
            }
        }

        work |= self.feed_senders(now);
        self.drain_events(sink.as_deref_mut())?;
        work |= self.drain_transmits(now)?;
        self.drain_events(sink)?;
        Ok(work)
    }

    /// One iteration with adaptive waiting: busy-polls for `spin` after the
    /// last work, then sleeps until a frame arrives or the next deadline.
    pub fn run_once(&mut self) -> Result<bool, EngineError> {
        self.run_once_for(self.cfg.max_sleep)
    }

    /// [`Engine::run_once`] sleeping at most `max_sleep` (and never longer
    /// than [`EngineConfig::max_sleep`]): for a caller with a deadline of its
    /// own, such as the next message a paced sender must publish.
    pub fn run_once_for(&mut self, max_sleep: Duration) -> Result<bool, EngineError> {
        if self.poll()? {
            self.idle_since = None;
            return Ok(true);
        }
        self.idle(&[], Some(max_sleep))?;
        Ok(false)
    }

    /// [`Engine::run_once`] delivering to `sink`, whose sleep also ends when
    /// one of `fds` becomes readable (or `max_sleep`, if given, passes).
    pub fn run_once_deliver(
        &mut self,
        sink: &mut dyn Deliver,
        fds: &[RawFd],
        max_sleep: Option<Duration>,
    ) -> Result<bool, EngineError> {
        if self.poll_deliver(sink)? {
            self.idle_since = None;
            return Ok(true);
        }
        self.idle(fds, max_sleep)?;
        Ok(false)
    }

    /// One round of busy-polling without work: yield the CPU or hint a spin.
    fn spin_round(&self) {
        if self.cfg.spin_yield {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// After a poll without work: spin a while, then sleep.
    fn idle(&mut self, fds: &[RawFd], max_sleep: Option<Duration>) -> Result<(), EngineError> {
        // The poll that just found no work read the clock a moment ago: one
        // clock read per busy-poll round instead of two.
        let now = self.polled_at;
        let since = *self.idle_since.get_or_insert(now);
        if now - since < nanos(self.cfg.spin) {
            // `spin_yield_after` of an idle spin keeps the CPU.
            if now - since < nanos(self.cfg.spin_yield_after) {
                std::hint::spin_loop();
            } else {
                self.spin_round();
            }
            return Ok(());
        }
        let mut timeout = max_sleep
            .unwrap_or(self.cfg.max_sleep)
            .min(self.cfg.max_sleep);
        if let Some(d) = self.next_deadline() {
            // Wake `deadline_spin` before the deadline and spin to it: a wake
            // from poll() takes tens of microseconds on a loaded host, all of
            // which a sleep to the deadline itself adds to the timer.
            let left = d.0.saturating_sub(now);
            let early = left.saturating_sub(nanos(self.cfg.deadline_spin));
            timeout = timeout.min(Duration::from_nanos(early));
        }
        if !self.tx_keep.is_empty() || !self.tx_copy.is_empty() || !self.deferred.is_empty() {
            // The TX ring was full or a frame is in flight: look again soon.
            timeout = timeout.min(Duration::from_micros(20));
        }
        if timeout.is_zero() {
            // Spinning to a deadline `deadline_spin` away.
            self.spin_round();
            return Ok(());
        }
        precise_sleeps();
        self.counters.sleeps += 1;
        match (fds.is_empty(), self.transport.wait_fd()) {
            (true, _) => self.transport.wait(timeout),
            (false, Some(fd)) => {
                let mut all = Vec::with_capacity(fds.len() + 1);
                all.push(fd);
                all.extend_from_slice(fds);
                sys::ppoll_any(&all, timeout)
                    .map(|_| ())
                    .map_err(|e| EngineError::Io {
                        operation: "poll on the transport and the caller's descriptors",
                        source: e,
                    })
            }
            // No transport descriptor to wait on with the caller's: wait on
            // theirs briefly, then look at the transport again.
            (false, None) => sys::ppoll_any(fds, timeout.min(Duration::from_micros(200)))
                .map(|_| ())
                .map_err(|e| EngineError::Io {
                    operation: "poll on the caller's descriptors",
                    source: e,
                }),
        }
    }

    /// The earliest protocol deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.groups
            .iter()
            .flat_map(|g| {
                let s = g.sender.as_ref().and_then(|s| s.machine.poll_timeout());
                g.receivers
                    .iter()
                    .filter_map(|r| r.machine.poll_timeout())
                    .chain(s)
            })
            .min()
    }

    /// Counters of the engine, its machines and its transport.
    pub fn stats(&self) -> EngineStats {
        let groups: Vec<GroupStats> = self
            .groups
            .iter()
            .map(|g| GroupStats {
                group: g.id,
                algorithm: g.opts.algorithm,
                sender: g.sender.as_ref().map(|s| *s.machine.counters()),
                receivers: g
                    .receivers
                    .iter()
                    .map(|r| {
                        let mut c = *r.machine.counters();
                        c.checksum_failures = self.counters.rx_checksum_failures;
                        (r.sender, c)
                    })
                    .collect(),
                queued: g.sender.as_ref().map_or(0, |s| s.queue.len()),
                paused: g.paused,
            })
            .collect();
        let own = groups.iter().find(|g| g.group == self.cfg.group);
        EngineStats {
            engine: self.counters,
            sender: own.and_then(|g| g.sender),
            receivers: own.map(|g| g.receivers.clone()).unwrap_or_default(),
            groups,
            transport: self.transport.info(),
            steering: self.transport.steering_counters(),
            socket: self.transport.socket_stats(),
            frames: self.transport.counts(),
        }
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutable (e.g. for its loss knob).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Checks that every frame is in exactly one place: the transport's own
    /// ledger holds, the engine's places agree with the transport's counts, and
    /// the machines hold exactly the frames the engine thinks they hold.
    pub fn check_conservation(&self) -> Result<FrameLedger, String> {
        let transport = self.transport.check_conservation()?;
        let mut l = FrameLedger {
            transport,
            ..FrameLedger::default()
        };
        let mut machine_owned = 0u32;
        for p in &self.place {
            match *p {
                Place::Transport => {}
                Place::Rx => l.rx += 1,
                Place::Queued => l.queued += 1,
                Place::Machine => {
                    l.machine += 1;
                    machine_owned += 1;
                }
                Place::Staged { back, .. } => {
                    l.staged += 1;
                    machine_owned += u32::from(back);
                }
                Place::InTx { back } => {
                    l.in_tx_kept += 1;
                    machine_owned += u32::from(back);
                }
            }
        }
        l.machines_report = self
            .groups
            .iter()
            .map(|g| {
                g.sender.as_ref().map_or(0, |s| s.machine.held_buffers()) as u32
                    + g.receivers
                        .iter()
                        .map(|r| r.machine.held_buffers() as u32)
                        .sum::<u32>()
            })
            .sum();
        let queued: usize = self
            .groups
            .iter()
            .filter_map(|g| g.sender.as_ref())
            .map(|s| s.queue.len())
            .sum();
        if queued as u32 != l.queued {
            return Err(format!(
                "send queues hold {queued} frames, the ledger {}: {l:?}",
                l.queued
            ));
        }
        let engine_held = l.rx + l.queued + l.machine + l.staged;
        if engine_held != transport.held {
            return Err(format!(
                "engine holds {engine_held} frames, transport says {}: {l:?}",
                transport.held
            ));
        }
        if l.in_tx_kept > transport.tx {
            return Err(format!(
                "{} kept frames in flight but the transport has {} in TX: {l:?}",
                l.in_tx_kept, transport.tx
            ));
        }
        if machine_owned != l.machines_report {
            return Err(format!(
                "machines report {} buffers, the engine's ledger {machine_owned}: {l:?}",
                l.machines_report
            ));
        }
        Ok(l)
    }

    /// Stops: waits (briefly) for frames in flight, has every machine hand
    /// back its buffers (`release_all`), and checks that every frame is back
    /// with the transport.
    pub fn shutdown(mut self) -> Result<(ShutdownReport, T), EngineError> {
        let _ = self.flush_batches();
        let deadline = sys::monotonic_ns() + 200_000_000;
        loop {
            let busy = self.transport.counts().tx > 0
                || self
                    .place
                    .iter()
                    .any(|p| matches!(p, Place::InTx { .. } | Place::Staged { .. }));
            if !busy || sys::monotonic_ns() >= deadline {
                break;
            }
            self.kept.clear();
            self.transport.reap(&mut self.kept)?;
            for i in 0..self.kept.len() {
                let f = self.kept[i];
                if let Place::InTx { back } = self.place[f as usize] {
                    self.place[f as usize] = if back {
                        Place::Machine
                    } else {
                        Place::Transport
                    };
                    if !back {
                        self.transport.release(f);
                    }
                }
            }
            let _ = self.flush_batches();
            std::thread::yield_now();
        }
        self.deferred.clear();
        let mut stats = self.stats();
        for gi in 0..self.groups.len() {
            if let Some(mut s) = self.groups[gi].sender.take() {
                while let Some(of) = s.queue.pop_front() {
                    self.free(of.buf.0);
                }
                s.machine.release_all();
                self.absorb_releases(&mut s.machine)?;
            }
            for mut r in std::mem::take(&mut self.groups[gi].receivers) {
                r.machine.release_all();
                self.absorb_releases(&mut r.machine)?;
            }
        }
        for f in 0..self.place.len() as u32 {
            match self.place[f as usize] {
                Place::Machine => {
                    return Err(EngineError::Accounting(format!(
                        "frame {f} still held by a machine after release_all"
                    )))
                }
                Place::Staged { .. } => self.free(f),
                Place::InTx { .. } => {
                    return Err(EngineError::Accounting(format!(
                        "frame {f} never completed its transmission"
                    )))
                }
                _ => {}
            }
        }
        self.tx_keep.clear();
        self.tx_copy.clear();
        let ledger = self.check_conservation().map_err(EngineError::Accounting)?;
        if ledger.transport.held != 0 || ledger.transport.tx != 0 {
            return Err(EngineError::Accounting(format!(
                "frames still held or in flight after shutdown: {ledger:?}"
            )));
        }
        stats.frames = ledger.transport;
        Ok((ShutdownReport { stats, ledger }, self.transport))
    }

    // ---- helpers -------------------------------------------------------

    fn now(&self) -> Instant {
        Instant(sys::monotonic_ns())
    }

    fn group_index(&self, group: GroupId) -> Option<usize> {
        self.groups.iter().position(|g| g.id == group)
    }

    fn require_group(&self, group: GroupId) -> Result<usize, EngineError> {
        self.group_index(group)
            .ok_or_else(|| EngineError::Config(format!("group {group} is not open")))
    }

    fn stream_config(&self, gi: usize, sender: NodeId, start: StreamStart) -> StreamConfig {
        StreamConfig {
            group: self.groups[gi].id,
            local: self.cfg.node,
            sender,
            epoch: start.epoch,
            initial_seq: start.seq,
            window_frames: self.groups[gi].opts.window_frames,
            seed: self.cfg.seed,
        }
    }

    fn push_receiver(&mut self, gi: usize, sender: NodeId, start: StreamStart) {
        let stream = self.stream_config(gi, sender, start);
        let g = &mut self.groups[gi];
        g.receivers.push(RecvStream {
            sender,
            epoch: start.epoch,
            machine: AnyReceiver::new(g.opts.algorithm, stream, &g.opts.protocol),
            reassembler: Reassembler::new(self.cfg.max_message),
        });
    }

    /// Takes a machine's events after `release_all` (releases only).
    fn absorb_releases(&mut self, machine: &mut dyn Endpoint) -> Result<(), EngineError> {
        while let Some(ev) = machine.poll_event() {
            match ev {
                Event::Release(b) => release_from_machine(
                    &mut self.place,
                    &mut self.transport,
                    &mut self.deferred,
                    b,
                )?,
                Event::Deliver { buf, .. } => {
                    // A delivery the caller will never take: free its frame.
                    let f = buf.0;
                    self.free(f);
                }
            }
        }
        Ok(())
    }

    fn free(&mut self, f: u32) {
        self.place[f as usize] = Place::Transport;
        self.transport.release(f);
    }

    fn handle_rx(&mut self, now: Instant, d: RxDesc) -> Result<(), EngineError> {
        let f = d.frame;
        if self.place[f as usize] != Place::Transport {
            return Err(EngineError::Accounting(format!(
                "received frame {f} that the engine has in {:?}",
                self.place[f as usize]
            )));
        }
        self.place[f as usize] = Place::Rx;
        self.counters.rx_frames += 1;
        let start = d.offset as usize;
        let bytes = &self.transport.frame(f)[start..start + d.len as usize];
        let parsed = Frame::new_checked(bytes, self.cfg.ethertype).and_then(|fr| {
            let h = fr.header()?;
            let nak = if h.kind == Kind::Nak {
                Some(RangeList::parse(fr.payload())?)
            } else {
                None
            };
            Ok((h, nak, fr.src_mac()))
        });
        let (header, nak, src_mac) = match parsed {
            Ok(p) => p,
            Err(WireError::BadChecksum { .. }) => {
                self.counters.rx_checksum_failures += 1;
                self.free(f);
                return Ok(());
            }
            Err(_) => {
                self.counters.rx_malformed += 1;
                self.free(f);
                return Ok(());
            }
        };
        if header.kind == Kind::Beat {
            self.counters.rx_beats += 1;
            if header.src != 0 && !src_mac.is_multicast() {
                self.peers.entry(header.src).or_insert(src_mac);
            }
            if self.beats.len() >= MAX_BEATS {
                self.beats.pop_front();
                self.counters.rx_beats_dropped += 1;
            }
            let start = d.offset as usize + FRAME_OVERHEAD;
            let n = usize::from(header.payload_len).min(MAX_BEAT);
            let payload = self.transport.frame(f)[start..start + n].to_vec();
            self.beats.push_back((header.src, payload));
            self.free(f);
            return Ok(());
        }
        let Some(gi) = self.group_index(header.group) else {
            self.counters.rx_other_group += 1;
            self.free(f);
            return Ok(());
        };
        if header.src != 0 && !src_mac.is_multicast() {
            self.peers.entry(header.src).or_insert(src_mac);
        }
        let stream = stream_of(&header);
        let data = header.kind.carries_data();
        if data && self.groups[gi].paused {
            self.counters.rx_paused += 1;
            self.free(f);
            return Ok(());
        }
        if data && stream != self.cfg.node && self.groups[gi].opts.accept_any_sender {
            self.accept_sender(gi, stream, header.epoch)?;
        }
        let g = &mut self.groups[gi];
        let machine: &mut dyn Endpoint = if stream == self.cfg.node {
            match g.sender.as_mut() {
                Some(s) => &mut s.machine,
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        } else {
            match g.receivers.iter_mut().find(|r| r.sender == stream) {
                Some(r) => &mut r.machine,
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        };
        if data {
            // The frame now belongs to the machine, which returns it exactly
            // once as Deliver or Release.
            self.place[f as usize] = Place::Machine;
            self.rx_offset[f as usize] = d.offset;
            machine.handle_frame(now, &header, RxBody::Data(BufId(f)));
        } else {
            match &nak {
                Some(list) => machine.handle_frame(now, &header, RxBody::Nak(list)),
                None => machine.handle_frame(now, &header, RxBody::None),
            }
            self.free(f);
        }
        Ok(())
    }

    /// `accept_any_sender`: a data frame from `sender` in `epoch` came; make
    /// sure a receive stream of that epoch exists (a newer epoch replaces the
    /// old stream: the peer restarted).
    fn accept_sender(&mut self, gi: usize, sender: NodeId, epoch: u32) -> Result<(), EngineError> {
        let g = &mut self.groups[gi];
        match g.receivers.iter().position(|r| r.sender == sender) {
            Some(i) if g.receivers[i].epoch >= epoch => return Ok(()),
            Some(i) => {
                let mut old = g.receivers.swap_remove(i);
                old.machine.release_all();
                self.absorb_releases(&mut old.machine)?;
                self.counters.rx_streams_restarted += 1;
            }
            None => self.counters.rx_streams_opened += 1,
        }
        self.push_receiver(gi, sender, StreamStart { epoch, seq: Seq(0) });
        Ok(())
    }

    /// Feeds queued fragments to each sender while its window is open.
    fn feed_senders(&mut self, now: Instant) -> bool {
        let mut fed = false;
        for g in &mut self.groups {
            let Some(s) = g.sender.as_mut() else {
                continue;
            };
            while let Some(mut of) = s.queue.pop_front() {
                if !s.machine.can_send() {
                    s.queue.push_front(of);
                    break;
                }
                of.last = s.queue.is_empty();
                match s.machine.send(now, of) {
                    Ok(seq) => {
                        self.place[of.buf.0 as usize] = Place::Machine;
                        s.next_seq = seq.next();
                        fed = true;
                    }
                    Err(SendError::WindowFull(_)) | Err(SendError::NoMembers(_)) => {
                        s.queue.push_front(of);
                        break;
                    }
                }
            }
        }
        fed
    }

    fn drain_events<'s>(
        &mut self,
        mut sink: Option<&mut (dyn Deliver + 's)>,
    ) -> Result<(), EngineError> {
        for g in &mut self.groups {
            if let Some(s) = g.sender.as_mut() {
                while let Some(ev) = s.machine.poll_event() {
                    match ev {
                        Event::Release(b) => release_from_machine(
                            &mut self.place,
                            &mut self.transport,
                            &mut self.deferred,
                            b,
                        )?,
                        Event::Deliver { buf, .. } => {
                            return Err(EngineError::Accounting(format!(
                                "a send machine delivered frame {}",
                                buf.0
                            )))
                        }
                    }
                }
            }
            for r in &mut g.receivers {
                while let Some(ev) = r.machine.poll_event() {
                    match ev {
                        Event::Release(b) => release_from_machine(
                            &mut self.place,
                            &mut self.transport,
                            &mut self.deferred,
                            b,
                        )?,
                        Event::Deliver {
                            stream,
                            seq,
                            buf,
                            len,
                            flags,
                        } => {
                            let f = buf.0;
                            if self.place[f as usize] != Place::Machine {
                                return Err(EngineError::Accounting(format!(
                                    "delivered frame {f} is in {:?}",
                                    self.place[f as usize]
                                )));
                            }
                            let start = self.rx_offset[f as usize] as usize + FRAME_OVERHEAD;
                            let payload = &self.transport.frame(f)[start..start + usize::from(len)];
                            match sink.as_deref_mut() {
                                // The one copy of a received payload is the sink's.
                                Some(sink) => sink.deliver(Fragment {
                                    group: g.id,
                                    stream,
                                    seq,
                                    first: flags.contains(Flags::FRAG_FIRST),
                                    last: flags.contains(Flags::FRAG_LAST),
                                    data: payload,
                                }),
                                // Or into the message.
                                None => match r.reassembler.push_owned(flags, payload) {
                                    Ok(Some(data)) => {
                                        self.messages.push_back(Message {
                                            group: g.id,
                                            stream,
                                            data,
                                        });
                                        self.counters.messages_delivered += 1;
                                    }
                                    Ok(None) => {}
                                    Err(_) => self.counters.reassembly_errors += 1,
                                },
                            }
                            if sink.is_some() && flags.contains(Flags::FRAG_LAST) {
                                self.counters.messages_delivered += 1;
                            }
                            self.place[f as usize] = Place::Transport;
                            self.transport.release(f);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn drain_transmits(&mut self, now: Instant) -> Result<bool, EngineError> {
        let mut work = false;
        // Deferred retransmissions first: their frames may have completed.
        for _ in 0..self.deferred.len() {
            let t = self.deferred.pop_front().expect("counted");
            self.stage(t)?;
        }
        let n = self.groups.len();
        if n > 0 {
            self.turn = (self.turn + 1) % n;
        }
        'groups: for k in 0..n {
            let gi = (self.turn + k) % n;
            loop {
                if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                    self.flush_batches()?;
                    if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                        break 'groups; // the TX ring is full: come back later
                    }
                }
                let g = &mut self.groups[gi];
                let t = match g.sender.as_mut().and_then(|s| s.machine.poll_transmit(now)) {
                    Some(t) => t,
                    None => match g
                        .receivers
                        .iter_mut()
                        .find_map(|r| r.machine.poll_transmit(now))
                    {
                        Some(t) => t,
                        None => break,
                    },
                };
                work = true;
                self.stage(t)?;
            }
        }
        if !self.tx_keep.is_empty() || !self.tx_copy.is_empty() {
            self.flush_batches()?;
            work = true;
        }
        Ok(work)
    }

    /// Writes a frame's headers and puts it in a TX batch (or defers it).
    fn stage(&mut self, t: Transmit) -> Result<(), EngineError> {
        let dst = match t.dest {
            Dest::Group => group_mac(t.header.group),
            Dest::Node(n) => match self.peers.get(&n) {
                Some(m) => *m,
                None => {
                    self.counters.tx_no_route += 1;
                    return Ok(());
                }
            },
        };
        let (src, ethertype) = (self.mac, self.cfg.ethertype);
        match &t.body {
            TxBody::None | TxBody::Nak(_) => {
                let Some(f) = self.transport.alloc() else {
                    self.counters.tx_no_frame += 1;
                    return Ok(());
                };
                let buf = self.transport.frame_mut(f);
                if let TxBody::Nak(list) = &t.body {
                    let area = Frame::<&mut [u8]>::payload_area_mut(buf, list.wire_len())
                        .map_err(|e| EngineError::Accounting(format!("NAK does not fit: {e}")))?;
                    list.emit(area)
                        .map_err(|e| EngineError::Accounting(format!("NAK emit: {e}")))?;
                }
                let len = emit(buf, dst, src, ethertype, &t)?;
                self.place[f as usize] = Place::Staged {
                    keep: false,
                    back: false,
                };
                self.tx_copy.push(TxDesc { frame: f, len });
            }
            TxBody::Buf(b) => {
                let b = b.0;
                let place = self.place[b as usize];
                // The payload's CRC, kept since publish wrote it (a copy for
                // CopyPerTransmit carries the same payload).
                let crc = self.payload_crc[b as usize];
                let addr = (dst, src, ethertype);
                let policy = self
                    .group_index(t.header.group)
                    .and_then(|gi| self.groups[gi].sender.as_ref())
                    .map_or(TxPolicy::InPlace, |s| s.policy);
                match (policy, place) {
                    (TxPolicy::InPlace, Place::Machine) => {
                        let len = emit_published(self.transport.frame_mut(b), addr, &t, crc)?;
                        self.place[b as usize] = Place::Staged {
                            keep: true,
                            back: true,
                        };
                        self.tx_keep.push(TxDesc { frame: b, len });
                    }
                    (_, Place::Staged { back: true, .. } | Place::InTx { back: true }) => {
                        // Still on its way out: rewriting it now would corrupt
                        // the copy in flight (and a frame the kernel owns
                        // cannot be read to copy it, after a change of
                        // policy). Retry after its completion.
                        self.counters.tx_deferred += 1;
                        self.deferred.push_back(t);
                    }
                    (TxPolicy::CopyPerTransmit, Place::Machine) => {
                        let Some(f) = self.transport.alloc() else {
                            self.counters.tx_deferred += 1;
                            self.deferred.push_back(t);
                            return Ok(());
                        };
                        let n = usize::from(t.header.payload_len);
                        self.transport
                            .copy_between(b, f, FRAME_OVERHEAD..FRAME_OVERHEAD + n);
                        let len = emit_published(self.transport.frame_mut(f), addr, &t, crc)?;
                        self.counters.tx_payload_copies += 1;
                        self.place[f as usize] = Place::Staged {
                            keep: false,
                            back: false,
                        };
                        self.tx_copy.push(TxDesc { frame: f, len });
                    }
                    (_, other) => {
                        return Err(EngineError::Accounting(format!(
                            "machine asked to send frame {b} that the engine has in {other:?}"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    fn flush_batches(&mut self) -> Result<(), EngineError> {
        if !self.tx_keep.is_empty() {
            let n = self.transport.transmit(&self.tx_keep, true)?;
            for d in &self.tx_keep[..n] {
                let back = matches!(
                    self.place[d.frame as usize],
                    Place::Staged { back: true, .. }
                );
                self.place[d.frame as usize] = Place::InTx { back };
            }
            self.tx_keep.drain(..n);
            self.counters.tx_frames += n as u64;
            self.counters.tx_batches += 1;
        }
        if !self.tx_copy.is_empty() {
            let n = self.transport.transmit(&self.tx_copy, false)?;
            for d in &self.tx_copy[..n] {
                self.place[d.frame as usize] = Place::Transport;
            }
            self.tx_copy.drain(..n);
            self.counters.tx_frames += n as u64;
            self.counters.tx_batches += 1;
        }
        Ok(())
    }
}

/// Where a receiver added to a send stream now starts: for MAK the oldest
/// frame the sender still holds (`Sender::join_point`: what a member of
/// before may lack, the new one gets too, so a flush after the sender dies
/// finds it); the next frame for the ACK and NAK baselines; the stream's first sequence
/// number for the iterative baseline, whose per-member Go-Back-N senders each
/// start there.
fn joining_position(algorithm: Algorithm, s: &SendStream) -> StreamStart {
    StreamStart {
        epoch: s.start.epoch,
        seq: match algorithm {
            Algorithm::Iterative => s.start.seq,
            _ => s.machine.join_point().unwrap_or(s.next_seq),
        },
    }
}

/// A machine gave buffer `b` back: free it now, or after its transmission.
/// Deferred transmissions of it are dropped: once freed the frame may be
/// reused for other data, and the machine no longer wants it sent.
fn release_from_machine<T: Transport>(
    place: &mut [Place],
    transport: &mut T,
    deferred: &mut VecDeque<Transmit>,
    b: BufId,
) -> Result<(), EngineError> {
    if !deferred.is_empty() {
        deferred.retain(|t| t.body != TxBody::Buf(b));
    }
    let f = b.0 as usize;
    match place[f] {
        Place::Machine => {
            place[f] = Place::Transport;
            transport.release(b.0);
        }
        Place::Staged { keep, back: true } => place[f] = Place::Staged { keep, back: false },
        Place::InTx { back: true } => place[f] = Place::InTx { back: false },
        other => {
            return Err(EngineError::Accounting(format!(
                "machine released frame {f} that the engine has in {other:?}"
            )))
        }
    }
    Ok(())
}

fn emit(
    buf: &mut [u8],
    dst: MacAddr,
    src: MacAddr,
    ethertype: u16,
    t: &Transmit,
) -> Result<u32, EngineError> {
    let (_, len) = Frame::emit(buf, dst, src, ethertype, &t.header)
        .map_err(|e| EngineError::Accounting(format!("frame does not fit: {e}")))?;
    Ok(len as u32)
}

/// [`emit`] for a frame a publish wrote, whose payload CRC it kept; `addr`
/// is (destination, source, EtherType).
fn emit_published(
    buf: &mut [u8],
    (dst, src, ethertype): (MacAddr, MacAddr, u16),
    t: &Transmit,
    payload_crc: u32,
) -> Result<u32, EngineError> {
    let (_, len) = Frame::emit_with_payload_crc(buf, dst, src, ethertype, &t.header, payload_crc)
        .map_err(|e| EngineError::Accounting(format!("frame does not fit: {e}")))?;
    Ok(len as u32)
}

thread_local! {
    /// Whether this thread's timer slack has been set.
    static PRECISE: Cell<bool> = const { Cell::new(false) };
}

/// The timer slack of a thread that sleeps towards protocol deadlines: 1 µs,
/// not the default 50 µs (a sleep's timeout may otherwise end that much
/// late, and NAK timers are tens of microseconds). Set once per thread, by
/// the first sleep.
fn precise_sleeps() {
    PRECISE.with(|p| {
        if !p.get() {
            // Best effort: a thread that cannot change it keeps the default.
            let _ = sys::set_timer_slack(Duration::from_micros(1));
            p.set(true);
        }
    });
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
