//! Per-hop stamps of data frames, on only with [`EngineConfig::trace`]
//! (docs/mcastd.md "Where the time goes"). The engine stamps; its caller
//! keeps the histograms:
//!
//! - a frame that a publish starts in the send queue is stamped then
//!   (CLOCK_MONOTONIC); its first transmission hands the caller the pair
//!   (queued, sent), `sent` being the clock of the poll that sends it, the
//!   one the frame's `tstamp_us` carries ([`Engine::drain_sent_stamps`]);
//! - a received data frame is stamped when the poll has read its RX batch,
//!   and its delivery tells the sink that stamp and the sender's `tstamp_us`
//!   ([`RawFrame::rx_ns`](super::RawFrame), [`RawFrame::sent_us`](super::RawFrame)).
//!
//! Owns: those stamps (one `u64` and one `u32` per UMEM frame) and the
//! bounded list of send samples. Costs nothing without tracing (no clock
//! read, no memory); with it, one clock read per frame queued and one per
//! RX batch. May not touch: the frames, the machines, the wire format.
//!
//! [`EngineConfig::trace`]: super::EngineConfig::trace

use mcast_wire::{Flags, GroupId, Header};

use super::Engine;
use crate::sys;
use crate::transport::Transport;

/// Send samples kept between two drains at most; later ones are counted
/// and dropped (a caller that never drains costs bounded memory).
pub const MAX_SENT_STAMPS: usize = 1 << 16;

#[derive(Debug)]
pub(super) struct Tracer {
    /// By frame: when a publish queued it, or when it was received.
    stamp: Vec<u64>,
    /// By frame: a received frame's `tstamp_us`.
    sent_us: Vec<u32>,
    /// (group, queued, sent) of frames sent for the first time, oldest first.
    sent: Vec<(GroupId, u64, u64)>,
    /// Samples dropped because `sent` was full, since the last drain.
    sent_dropped: u64,
    /// When the poll read its current RX batch.
    rx_at: u64,
}

impl Tracer {
    pub(super) fn new(frames: usize) -> Tracer {
        Tracer {
            stamp: vec![0; frames],
            sent_us: vec![0; frames],
            sent: Vec::new(),
            sent_dropped: 0,
            rx_at: 0,
        }
    }

    /// A publish started frame `f` in the send queue.
    #[inline]
    pub(super) fn queued(&mut self, f: u32) {
        self.stamp[f as usize] = sys::monotonic_ns();
    }

    /// Frame `f`, queued by a publish, goes out for the first time in the
    /// poll that started at `polled_at`.
    #[inline]
    pub(super) fn first_sent(&mut self, group: GroupId, f: u32, polled_at: u64) {
        if self.sent.len() < MAX_SENT_STAMPS {
            self.sent.push((group, self.stamp[f as usize], polled_at));
        } else {
            self.sent_dropped += 1;
        }
    }

    /// The poll has just read an RX batch.
    #[inline]
    pub(super) fn rx_batch(&mut self) {
        self.rx_at = sys::monotonic_ns();
    }

    /// Data frame `f` of that batch, sent at `tstamp_us` by its sender.
    #[inline]
    pub(super) fn received(&mut self, f: u32, tstamp_us: u32) {
        self.stamp[f as usize] = self.rx_at;
        self.sent_us[f as usize] = tstamp_us;
    }

    /// Frame `f` came without the sender's stamp (a tree neighbour's
    /// relayed repair, docs/protocol.md §3.5): its delivery is not timed.
    pub(super) fn untimed(&mut self, f: u32) {
        self.stamp[f as usize] = 0;
        self.sent_us[f as usize] = 0;
    }

    /// (received, sent µs) of frame `f`, for its delivery.
    #[inline]
    pub(super) fn of_received(&self, f: u32) -> (u64, u32) {
        (self.stamp[f as usize], self.sent_us[f as usize])
    }
}

impl<T: Transport> Engine<T> {
    /// Data frame `b` leaves in this poll: a sample if it is its first
    /// transmission (not a repair or a timer's resend).
    #[inline]
    pub(super) fn trace_sent(&mut self, b: u32, header: &Header) {
        if let Some(t) = self.trace.as_deref_mut() {
            if header.kind.carries_data() && !header.flags.contains(Flags::RETRANSMIT) {
                t.first_sent(header.group, b, self.polled_at);
            }
        }
    }

    /// With tracing, hands `f` the group and the (queued, sent) times, in
    /// CLOCK_MONOTONIC nanoseconds, of every data frame sent for the first
    /// time since the last call, and forgets them: the hop from a publish
    /// reaching the engine to the poll that sent its frame (per frame, from
    /// the frame's first message). At most [`MAX_SENT_STAMPS`] wait between
    /// two calls; returns how many more were sent since the last call and
    /// not kept.
    pub fn drain_sent_stamps(&mut self, mut f: impl FnMut(GroupId, u64, u64)) -> u64 {
        let Some(t) = self.trace.as_deref_mut() else {
            return 0;
        };
        for &(group, queued, sent) in &t.sent {
            f(group, queued, sent);
        }
        t.sent.clear();
        std::mem::take(&mut t.sent_dropped)
    }

    /// Whether the engine stamps frames ([`EngineConfig::trace`](super::EngineConfig::trace)).
    pub fn traces(&self) -> bool {
        self.trace.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_samples_are_bounded_and_the_ones_not_kept_counted() {
        let mut t = Tracer::new(2);
        t.queued(1);
        for i in 0..MAX_SENT_STAMPS as u64 + 5 {
            t.first_sent(7, 1, i);
        }
        assert_eq!(t.sent.len(), MAX_SENT_STAMPS);
        assert_eq!(t.sent_dropped, 5);
        assert!(t.sent.iter().all(|&(g, q, _)| g == 7 && q == t.stamp[1]));
    }
}
