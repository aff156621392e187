//! What a run reports: its outcome and statistics, or the invariant it broke.

use core::fmt;

use mcast_proto::any::Algorithm;
use mcast_proto::{Counters, Instant};

/// Why a run ended without a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Every receiver delivered every message and the sender is idle.
    Completed,
    /// Nothing was left to happen (no frame in flight, no timer) before completion:
    /// only possible for algorithms without a completion guarantee.
    Quiescent,
    /// [`crate::SimConfig::max_virtual_time`] was reached.
    MaxVirtualTime,
    /// [`crate::SimConfig::max_steps`] were taken.
    MaxSteps,
}

/// Frames handed to the NICs (each transmission once, whatever the number of
/// copies), by kind, and what became of their copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// DATA and GBN data frames sent for the first time (no RETRANSMIT flag).
    pub data_original: u64,
    /// DATA and GBN data frames flagged RETRANSMIT.
    pub data_retransmit: u64,
    /// Of those, repairs a receiver sent a tree neighbour from its copy
    /// (DATA flagged NEAR, docs/protocol.md §3.5).
    pub relay: u64,
    /// Repairs a receiver asked its node to send from a copy the node no
    /// longer had (overwritten): not sent.
    pub relay_missed: u64,
    pub nak: u64,
    pub ack: u64,
    pub ack_req: u64,
    pub pack: u64,
    pub nack: u64,
    /// MAK's position advertisements (HEARTBEAT).
    pub advert: u64,
    /// Every other kind.
    pub other: u64,
    /// Bytes of every frame sent (header and payload, each transmission once).
    pub bytes: u64,
    /// Copies put on the way to some node (one per destination node).
    pub copies: u64,
    /// Copies lost (loss probability or partition).
    pub copies_lost: u64,
    /// Extra copies made by duplication.
    pub copies_duplicated: u64,
    /// Copies with a flipped byte.
    pub copies_corrupted: u64,
}

impl WireStats {
    /// Every frame sent.
    pub fn frames(&self) -> u64 {
        self.data_original
            + self.data_retransmit
            + self.nak
            + self.ack
            + self.ack_req
            + self.pack
            + self.nack
            + self.advert
            + self.other
    }
}

/// The outcome of a run that broke no invariant.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReport {
    /// Every receiver delivered every message and the sender became idle.
    pub completed: bool,
    pub stop: StopReason,
    /// The virtual time of completion.
    pub completion_time: Option<Instant>,
    /// When the last receiver delivered the last message: what the
    /// application sees. Completion comes later by the last ACK round (with
    /// MAK's default tail, one idle ACK round after the last frame).
    pub delivered_time: Option<Instant>,
    /// The virtual time when the run stopped.
    pub end_time: Instant,
    /// Events processed.
    pub steps: u64,
    /// Whole messages delivered by each receiver, index 0 being node 2.
    pub delivered_messages: Vec<u64>,
    /// Messages the sender accepted whole (every fragment, or in a frame).
    pub sent_messages: u64,
    /// Data frames the sender accepted from the application, each counted
    /// once however often it is transmitted: with
    /// [`crate::SimConfig::batch`], fewer than the messages.
    pub data_frames: u64,
    /// Of those, frames holding several messages (flag `BATCH`).
    pub batched_frames: u64,
    /// Messages that joined a frame another message started (so
    /// `data_frames` + `batched_messages` is the frames without batching).
    pub batched_messages: u64,
    /// The sender's counters, with the checksum failures the simulator counted at it.
    pub sender_counters: Counters,
    /// The sum of every receiver's counters, with the checksum failures counted at them.
    pub receiver_counters: Counters,
    /// Copies dropped because the CRC32C (or another check of
    /// `Frame::new_checked`) failed, at every node.
    pub checksum_failures: u64,
    /// Frames whose group differs from the run's, dropped.
    pub foreign_dropped: u64,
    /// NAK frames whose range list did not parse, dropped.
    pub malformed_dropped: u64,
    pub wire: WireStats,
    /// Distinct data sequence numbers whose original transmission was lost or
    /// corrupted at one receiver or more.
    pub frames_needing_repair: u64,
    /// The most buffers the sender's endpoint held at once.
    pub max_sender_buffers: usize,
    /// The most buffers any receiver's endpoint held at once.
    pub max_receiver_buffers: usize,
    /// The first [`crate::SimConfig::trace_lines`] lines of the run's trace.
    pub trace: Vec<String>,
}

impl SimReport {
    /// Messages per data frame the sender accepted (0 when none was sent):
    /// above 1 only with batching, below 1 when messages are fragmented.
    pub fn messages_per_frame(&self) -> f64 {
        if self.data_frames == 0 {
            0.0
        } else {
            self.sent_messages as f64 / self.data_frames as f64
        }
    }
}

/// A broken invariant: what, where, and how to replay it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFailure {
    /// What went wrong.
    pub reason: String,
    pub algorithm: Algorithm,
    pub seed: u64,
    /// The step (events processed, counting the failing one) and the virtual time.
    pub step: u64,
    pub time: Instant,
    /// The shell command that replays the run.
    pub replay: String,
    /// The last trace lines before the failure (when tracing was on).
    pub trace_tail: Vec<String>,
}

impl fmt::Display for SimFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "simulation of {} failed at step {}, {:?}: {}",
            self.algorithm, self.step, self.time, self.reason
        )?;
        writeln!(f, "  seed: {}", self.seed)?;
        write!(f, "  replay: {}", self.replay)?;
        if !self.trace_tail.is_empty() {
            write!(f, "\n  trace:")?;
            for l in &self.trace_tail {
                write!(f, "\n    {l}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for SimFailure {}
