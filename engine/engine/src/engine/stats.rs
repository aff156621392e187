//! What the engine counts: its own [`EngineCounters`], and the snapshot
//! [`Engine::stats`] takes of them with every machine's and the transport's.
//!
//! Owns: the counter and statistics types and the snapshot. May not touch:
//! any state (the snapshot reads only); the counters themselves are bumped
//! where the events happen.

use mcast_proto::any::Algorithm;
use mcast_proto::{Counters, Endpoint, GroupId, NodeId};
use mcast_xsk::{SocketStats, SteeringCounters};

use super::Engine;
use crate::transport::{Transport, TransportCounts, TransportInfo};

/// The engine's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub rx_frames: u64,
    /// Frames whose CRC32C did not match: dropped, handled as lost.
    pub rx_checksum_failures: u64,
    /// Frames that failed any other check (length, version, kind, NAK list).
    pub rx_malformed: u64,
    /// With authentication: frames refused because their tag did not match
    /// or they had no trailer (forged, altered, or from an unkeyed node).
    pub rx_auth_failed: u64,
    /// With authentication: frames sealed with a key this node does not hold
    /// (a key rotation half done, or another cluster).
    pub rx_auth_unknown_key: u64,
    /// With authentication: authentic frames refused as replays (a counter
    /// seen before or older than the window, or an earlier session).
    pub rx_replayed: u64,
    /// Frames of a group this engine does not carry.
    pub rx_other_group: u64,
    /// Data frames dropped because their group's delivery is paused.
    pub rx_paused: u64,
    /// Beat frames received, and dropped because the caller did not take them.
    pub rx_beats: u64,
    pub rx_beats_dropped: u64,
    /// Beat frames sent.
    pub tx_beats: u64,
    /// Receive streams opened on their first frame (`accept_senders`).
    pub rx_streams_opened: u64,
    /// Data frames of a node the group's `accept_senders` does not name,
    /// dropped (no stream opened for it).
    pub rx_sender_refused: u64,
    /// Receive streams started afresh for a newer epoch of their sender.
    pub rx_streams_restarted: u64,
    /// Frames of a stream this engine neither sends nor receives, and beats
    /// addressed to another node.
    pub rx_unrouted: u64,
    /// Data frames dropped on arrival because frames to receive into ran
    /// short and they would have waited for earlier ones (repaired later).
    pub rx_dropped_scarce: u64,
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
    /// Repairs of a tree neighbour not sent: this node's copy of the frame
    /// was already overwritten (docs/protocol.md §3.5; the neighbour then
    /// asks the group).
    pub tx_relay_missed: u64,
    pub messages_published: u64,
    pub publish_would_block: u64,
    /// Of those, refused to keep a quarter of the frames for receiving.
    pub publish_rx_reserve: u64,
    pub messages_delivered: u64,
    pub reassembly_errors: u64,
    pub polls: u64,
    pub sleeps: u64,
}

/// What one send stream carried: messages, the data frames they went out
/// in, and bytes (docs/protocol.md §1.10).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendTally {
    /// Messages published.
    pub messages: u64,
    /// Of those, messages packed into a frame another message had started.
    pub batched: u64,
    /// Data frames handed to the send machine (each sent once, then repaired
    /// as needed).
    pub frames: u64,
    /// Application bytes published.
    pub payload_bytes: u64,
    /// Bytes of every data frame transmitted, first sends and repeats, from
    /// the Ethernet header to the end of the trailer.
    pub wire_bytes: u64,
}

impl SendTally {
    /// Messages per data frame (0 before the first frame).
    pub fn messages_per_frame(&self) -> f64 {
        ratio(self.messages, self.frames)
    }

    /// Bytes on the wire per application byte (0 before the first byte).
    pub fn wire_per_payload_byte(&self) -> f64 {
        ratio(self.wire_bytes, self.payload_bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The counters of one group's streams.
#[derive(Debug, Clone)]
pub struct GroupStats {
    pub group: GroupId,
    pub algorithm: Algorithm,
    /// This node's send machine.
    pub sender: Option<Counters>,
    /// What this node's send stream carried.
    pub tally: Option<SendTally>,
    /// This node's send machine's group round trip (MAK's GRTT), in
    /// nanoseconds.
    pub grtt_ns: Option<u64>,
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
    /// Several NIC queues: each extra queue's receive thread.
    pub queues: Vec<crate::transport::queues::QueueStats>,
}

impl<T: Transport> Engine<T> {
    /// Counters of the engine, its machines and its transport.
    pub fn stats(&self) -> EngineStats {
        let groups: Vec<GroupStats> = self
            .groups
            .iter()
            .map(|g| GroupStats {
                group: g.id,
                algorithm: g.opts.algorithm,
                sender: g.sender.as_ref().map(|s| *s.machine.counters()),
                tally: g.sender.as_ref().map(|s| s.tally),
                grtt_ns: g
                    .sender
                    .as_ref()
                    .and_then(|s| s.machine.group_rtt())
                    .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
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
            queues: self.transport.queue_stats(),
        }
    }
}
