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
//! frame arrives or the next protocol deadline.
//!
//! Zero copy: a published fragment is written once into a transport frame at
//! [`FRAME_OVERHEAD`]; the send machine holds that frame index as its
//! retransmission buffer, and the engine writes only headers in place
//! (`Frame::emit`). A frame staged or in flight is never rewritten: a
//! retransmission of it is deferred until its completion is reaped. Received
//! data frames go to the machine by index. The one exception is the iterative
//! baseline, whose per-receiver headers make the engine copy the payload into
//! a fresh frame for each receiver (docs/protocol.md §4.3).
//!
//! What it never does: it reads the clock only here (CLOCK_MONOTONIC, passed
//! to the machines as `Instant`), never lets the protocol core see bytes, never
//! loses track of a frame ([`Engine::check_conservation`]), and never blocks
//! except in [`Engine::run_once`]'s wait and the `*_blocking` calls.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use mcast_proto::any::{Algorithm, AnyReceiver, AnySender, ProtocolConfig};
use mcast_proto::frag::Reassembler;
use mcast_proto::{
    stream_of, BufId, Counters, Dest, Endpoint, Event, GroupId, Instant, NodeId, OutFrame, RxBody,
    SendError, Sender, Seq, StreamConfig, Transmit, TxBody,
};
use mcast_wire::{
    group_mac, max_payload_for_mtu, Frame, Kind, MacAddr, RangeList, WireError, ETHERTYPE_DEFAULT,
    FRAME_OVERHEAD,
};
use mcast_xsk::SteeringCounters;

use crate::sys;
use crate::transport::{RxDesc, Transport, TransportCounts, TransportInfo, TxDesc};
use crate::{EngineError, PublishError};

/// Configuration of one engine. Sizes are fixed at construction.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node.
    pub node: NodeId,
    /// The group every stream of this engine belongs to.
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
    /// Pin the thread that creates the engine to this CPU.
    pub cpu: Option<usize>,
    /// Largest message accepted and reassembled.
    pub max_message: usize,
    /// Fragments queued ahead of the send window at most (back-pressure).
    pub max_queued_frames: usize,
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
            cpu: None,
            max_message: 1 << 20,
            max_queued_frames: 256,
        }
    }
}

/// A whole message received on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
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
    /// Frames of another group.
    pub rx_other_group: u64,
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

/// Everything countable about a running engine.
#[derive(Debug, Clone)]
pub struct EngineStats {
    pub engine: EngineCounters,
    /// The send machine's counters.
    pub sender: Option<Counters>,
    /// Each receive machine's counters, by sending node.
    pub receivers: Vec<(NodeId, Counters)>,
    pub transport: TransportInfo,
    /// AF_XDP: the steering program's counters.
    pub steering: Option<SteeringCounters>,
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
    machine: AnyReceiver,
    reassembler: Reassembler,
}

/// How the send machine's data buffers reach the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxPolicy {
    /// Headers written in place in the machine's buffer (multicast algorithms).
    InPlace,
    /// Payload copied into a fresh frame per transmit (iterative: one header per receiver).
    CopyPerTransmit,
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
    sender: Option<AnySender>,
    tx_policy: TxPolicy,
    receivers: Vec<RecvStream>,
    peers: HashMap<NodeId, MacAddr>,
    send_queue: VecDeque<OutFrame>,
    deferred: VecDeque<Transmit>,
    tx_keep: Vec<TxDesc>,
    tx_copy: Vec<TxDesc>,
    rx_batch: Vec<RxDesc>,
    kept: Vec<u32>,
    scratch: Vec<u8>,
    messages: VecDeque<Message>,
    counters: EngineCounters,
    idle_since: Option<u64>,
}

impl<T: Transport> Engine<T> {
    /// An engine over `transport`; subscribes the group MAC and, if
    /// `config.cpu` is set, pins the calling thread (the polling thread).
    pub fn new(mut transport: T, config: EngineConfig) -> Result<Engine<T>, EngineError> {
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
        if config.window_frames == 0 || config.window_frames >= transport.frame_count() {
            return Err(EngineError::Config(format!(
                "window of {} frames does not fit a pool of {} frames",
                config.window_frames,
                transport.frame_count()
            )));
        }
        if let Some(cpu) = config.cpu {
            sys::pin_current_thread(cpu).map_err(|e| EngineError::Io {
                operation: "pinning the polling thread (sched_setaffinity)",
                source: e,
            })?;
        }
        transport.subscribe(group_mac(config.group))?;
        let n = transport.frame_count() as usize;
        Ok(Engine {
            mac: transport.mac(),
            max_payload,
            place: vec![Place::Transport; n],
            rx_offset: vec![0; n],
            sender: None,
            tx_policy: TxPolicy::InPlace,
            receivers: Vec::new(),
            peers: config.peers.iter().copied().collect(),
            send_queue: VecDeque::new(),
            deferred: VecDeque::new(),
            tx_keep: Vec::with_capacity(config.batch),
            tx_copy: Vec::with_capacity(config.batch),
            rx_batch: Vec::with_capacity(config.batch),
            kept: Vec::new(),
            scratch: Vec::new(),
            messages: VecDeque::new(),
            counters: EngineCounters::default(),
            idle_since: None,
            transport,
            cfg: config,
        })
    }

    /// Opens this node's send stream to `members`.
    pub fn open_sender(&mut self, members: &[NodeId]) -> Result<(), EngineError> {
        if self.sender.is_some() {
            return Err(EngineError::Config("a send stream is already open".into()));
        }
        let stream = self.stream_config(self.cfg.node);
        self.sender = Some(AnySender::new(
            self.cfg.algorithm,
            stream,
            &self.cfg.protocol,
            members,
        ));
        self.tx_policy = match self.cfg.algorithm {
            Algorithm::Iterative => TxPolicy::CopyPerTransmit,
            _ => TxPolicy::InPlace,
        };
        Ok(())
    }

    /// Opens a receive stream for the data of node `sender`.
    pub fn open_receiver(&mut self, sender: NodeId) -> Result<(), EngineError> {
        if sender == self.cfg.node || self.receivers.iter().any(|r| r.sender == sender) {
            return Err(EngineError::Config(format!(
                "a stream from node {sender} is already open"
            )));
        }
        let stream = self.stream_config(sender);
        self.receivers.push(RecvStream {
            sender,
            machine: AnyReceiver::new(self.cfg.algorithm, stream, &self.cfg.protocol),
            reassembler: Reassembler::new(self.cfg.max_message),
        });
        Ok(())
    }

    /// Largest payload of one fragment.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Queues a message for reliable delivery: its fragments are written once
    /// into transport frames and fed to the send machine as its window opens.
    /// `WouldBlock` when the queue ahead of the window or the frame pool is full.
    pub fn publish(&mut self, msg: &[u8]) -> Result<(), PublishError> {
        if self.sender.is_none() {
            return Err(PublishError::NoSendStream);
        }
        if msg.len() > self.cfg.max_message {
            return Err(PublishError::TooLarge {
                limit: self.cfg.max_message,
            });
        }
        let count = msg.len().div_ceil(self.max_payload).max(1);
        if !self.send_queue.is_empty() && self.send_queue.len() + count > self.cfg.max_queued_frames
        {
            self.counters.publish_would_block += 1;
            return Err(PublishError::WouldBlock);
        }
        let first = self.send_queue.len();
        for (offset, len, frag) in mcast_proto::frag::fragments(msg.len(), self.max_payload) {
            let Some(f) = self.transport.alloc() else {
                // Not enough frames for the whole message: undo.
                for of in self.send_queue.drain(first..) {
                    self.place[of.buf.0 as usize] = Place::Transport;
                    self.transport.release(of.buf.0);
                }
                self.counters.publish_would_block += 1;
                return Err(PublishError::WouldBlock);
            };
            let area = Frame::<&mut [u8]>::payload_area_mut(self.transport.frame_mut(f), len)
                .expect("MTU checked against the frame size");
            area.copy_from_slice(&msg[offset..offset + len]);
            self.place[f as usize] = Place::Queued;
            self.send_queue.push_back(OutFrame {
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

    /// True when everything published has left the queue and the send machine
    /// is idle (every frame acknowledged, or for NAK: nothing left to send).
    pub fn send_idle(&self) -> bool {
        self.send_queue.is_empty()
            && self.deferred.is_empty()
            && self.tx_keep.is_empty()
            && self.tx_copy.is_empty()
            && self.sender.as_ref().is_none_or(|s| s.is_idle())
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

    /// One iteration without sleeping. Returns whether anything happened.
    pub fn poll(&mut self) -> Result<bool, EngineError> {
        self.counters.polls += 1;
        let now = self.now();
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
        if let Some(s) = self.sender.as_mut() {
            if s.poll_timeout().is_some_and(|t| t <= now) {
                s.handle_timeout(now);
                work = true;
            }
        }
        for r in &mut self.receivers {
            if r.machine.poll_timeout().is_some_and(|t| t <= now) {
                r.machine.handle_timeout(now);
                work = true;
            }
        }

        work |= self.feed_sender(now);
        self.drain_events()?;
        work |= self.drain_transmits(now)?;
        self.drain_events()?;
        Ok(work)
    }

    /// One iteration with adaptive waiting: busy-polls for `spin` after the
    /// last work, then sleeps until a frame arrives or the next deadline.
    pub fn run_once(&mut self) -> Result<bool, EngineError> {
        if self.poll()? {
            self.idle_since = None;
            return Ok(true);
        }
        let now = sys::monotonic_ns();
        let since = *self.idle_since.get_or_insert(now);
        if now - since < nanos(self.cfg.spin) {
            std::hint::spin_loop();
            return Ok(false);
        }
        let mut timeout = self.cfg.max_sleep;
        if let Some(d) = self.next_deadline() {
            timeout = timeout.min(Duration::from_nanos(d.0.saturating_sub(now)));
        }
        if !self.tx_keep.is_empty() || !self.tx_copy.is_empty() || !self.deferred.is_empty() {
            // The TX ring was full or a frame is in flight: look again soon.
            timeout = timeout.min(Duration::from_micros(20));
        }
        if !timeout.is_zero() {
            self.counters.sleeps += 1;
            self.transport.wait(timeout)?;
        }
        Ok(false)
    }

    /// The earliest protocol deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        let s = self.sender.as_ref().and_then(|s| s.poll_timeout());
        self.receivers
            .iter()
            .filter_map(|r| r.machine.poll_timeout())
            .chain(s)
            .min()
    }

    /// Counters of the engine, its machines and its transport.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            engine: self.counters,
            sender: self.sender.as_ref().map(|s| *s.counters()),
            receivers: self
                .receivers
                .iter()
                .map(|r| {
                    let mut c = *r.machine.counters();
                    c.checksum_failures = self.counters.rx_checksum_failures;
                    (r.sender, c)
                })
                .collect(),
            transport: self.transport.info(),
            steering: self.transport.steering_counters(),
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
        l.machines_report = self.sender.as_ref().map_or(0, |s| s.held_buffers()) as u32
            + self
                .receivers
                .iter()
                .map(|r| r.machine.held_buffers() as u32)
                .sum::<u32>();
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
        while let Some(of) = self.send_queue.pop_front() {
            self.free(of.buf.0);
        }
        self.deferred.clear();
        let mut stats = self.stats();
        if let Some(sender) = self.sender.as_mut() {
            sender.release_all();
        }
        for r in &mut self.receivers {
            r.machine.release_all();
        }
        self.drain_events()?;
        self.sender = None;
        self.receivers.clear();
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

    fn stream_config(&self, sender: NodeId) -> StreamConfig {
        StreamConfig {
            group: self.cfg.group,
            local: self.cfg.node,
            sender,
            epoch: self.cfg.epoch,
            initial_seq: self.cfg.initial_seq,
            window_frames: self.cfg.window_frames,
            seed: self.cfg.seed,
        }
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
        if header.group != self.cfg.group {
            self.counters.rx_other_group += 1;
            self.free(f);
            return Ok(());
        }
        if header.src != 0 && !src_mac.is_multicast() {
            self.peers.entry(header.src).or_insert(src_mac);
        }
        let stream = stream_of(&header);
        let machine: &mut dyn Endpoint = if stream == self.cfg.node {
            match self.sender.as_mut() {
                Some(s) => s,
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        } else {
            match self.receivers.iter_mut().find(|r| r.sender == stream) {
                Some(r) => &mut r.machine,
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        };
        if header.kind.carries_data() {
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

    /// Feeds queued fragments to the sender while its window is open.
    fn feed_sender(&mut self, now: Instant) -> bool {
        let Some(sender) = self.sender.as_mut() else {
            return false;
        };
        let mut fed = false;
        while let Some(mut of) = self.send_queue.pop_front() {
            if !sender.can_send() {
                self.send_queue.push_front(of);
                break;
            }
            of.last = self.send_queue.is_empty();
            match sender.send(now, of) {
                Ok(_) => {
                    self.place[of.buf.0 as usize] = Place::Machine;
                    fed = true;
                }
                Err(SendError::WindowFull(_)) | Err(SendError::NoMembers(_)) => {
                    self.send_queue.push_front(of);
                    break;
                }
            }
        }
        fed
    }

    fn drain_events(&mut self) -> Result<(), EngineError> {
        if let Some(s) = self.sender.as_mut() {
            while let Some(ev) = s.poll_event() {
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
        for r in &mut self.receivers {
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
                        buf,
                        len,
                        flags,
                        ..
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
                        // The one copy of a received payload: into the message.
                        match r.reassembler.push(flags, payload) {
                            Ok(Some(msg)) => {
                                self.messages.push_back(Message {
                                    stream,
                                    data: msg.to_vec(),
                                });
                                self.counters.messages_delivered += 1;
                            }
                            Ok(None) => {}
                            Err(_) => self.counters.reassembly_errors += 1,
                        }
                        self.place[f as usize] = Place::Transport;
                        self.transport.release(f);
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
        loop {
            if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                self.flush_batches()?;
                if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                    break; // the TX ring is full: come back later
                }
            }
            let t = match self.sender.as_mut().and_then(|s| s.poll_transmit(now)) {
                Some(t) => t,
                None => match self
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
                match (self.tx_policy, place) {
                    (TxPolicy::InPlace, Place::Machine) => {
                        let len = emit(self.transport.frame_mut(b), dst, src, ethertype, &t)?;
                        self.place[b as usize] = Place::Staged {
                            keep: true,
                            back: true,
                        };
                        self.tx_keep.push(TxDesc { frame: b, len });
                    }
                    (
                        TxPolicy::InPlace,
                        Place::Staged { back: true, .. } | Place::InTx { back: true },
                    ) => {
                        // Still on its way out: rewriting it now would corrupt
                        // the copy in flight. Retry after its completion.
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
                        let range = FRAME_OVERHEAD..FRAME_OVERHEAD + n;
                        self.scratch.clear();
                        self.scratch
                            .extend_from_slice(&self.transport.frame(b)[range.clone()]);
                        let buf = self.transport.frame_mut(f);
                        buf[range].copy_from_slice(&self.scratch);
                        let len = emit(buf, dst, src, ethertype, &t)?;
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

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
