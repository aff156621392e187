//! Where the time goes (docs/mcastd.md): with `trace = true`, every message
//! is timed at each hop of its path and `mcast stat` shows each hop's
//! quantiles. The hops, and who stamps them (all CLOCK_MONOTONIC):
//!
//! 1. **publish → taken**: the client library stamps a publication record
//!    when it writes it; this daemon takes it from the ring.
//! 2. **taken → sent**: the engine stamps the frame the message starts (or
//!    joins) in the send queue; the poll that first sends the frame ends it
//!    (the time the frame's header carries).
//! 3. **sent → received**: that header time, to the receiving engine reading
//!    the frame off its RX ring. Across machines this needs their clocks to
//!    agree (PTP); on one host (namespaces) they are one clock. A sample
//!    whose end comes before its start is counted as `backwards`.
//! 4. **received → ring**: to this daemon writing the frame's messages into
//!    the subscribers' rings (a frame held behind a lost one waits here for
//!    the repair).
//! 5. **ring → read**: to the subscriber's receive call; timed by the client
//!    library ([`Client::read_hop`](mcast_ipc::Client::read_hop)), which has
//!    the reading end.
//!
//! Owns: the daemon's four histograms and the stamps it puts on
//! subscription records. Per node, over all groups, since the daemon
//! started. Does not touch: what is delivered, or when.

use mcast_engine::{Engine, RawFrame, Transport};
use mcast_ipc::trace::{monotonic_ns, Hop};
use serde_json::json;

use crate::links::is_link;

#[derive(Debug, Default)]
pub(super) struct Trace {
    publish_to_taken: Hop,
    taken_to_sent: Hop,
    sent_to_received: Hop,
    received_to_ring: Hop,
    /// Send samples the engine could not keep between two rounds (its
    /// list is bounded): not timed.
    sent_dropped: u64,
    /// The stamp of the records of the frame being delivered (0: none).
    ring_at: u64,
}

impl Trace {
    /// A publication record stamped `stamp` by its client is taken now.
    #[inline]
    pub(super) fn taken(&mut self, stamp: u64) {
        if stamp != 0 {
            self.publish_to_taken.record(stamp, monotonic_ns());
        }
    }

    /// The engine's send samples of group data since the last round (the
    /// daemons' own links are not timed).
    pub(super) fn drain<T: Transport>(&mut self, engine: &mut Engine<T>) {
        let hop = &mut self.taken_to_sent;
        self.sent_dropped += engine.drain_sent_stamps(|group, queued, sent| {
            if !is_link(group) {
                hop.record(queued, sent);
            }
        });
    }

    /// A frame the engine delivers now; its messages' records carry
    /// [`Trace::ring_stamp`] until the next frame.
    #[inline]
    pub(super) fn frame(&mut self, f: &RawFrame<'_>) {
        if f.rx_ns == 0 || is_link(f.group) {
            self.ring_at = 0;
            return;
        }
        // The sender's µs clock wraps every 71 minutes: the difference is
        // taken modulo 2^32, and one beyond half of that is backwards.
        let rx_us = (f.rx_ns / 1_000) as u32;
        match rx_us.wrapping_sub(f.sent_us) {
            d if d < 1 << 31 => self.sent_to_received.record_ns(u64::from(d) * 1_000),
            _ => self.sent_to_received.record_backwards(),
        }
        self.ring_at = monotonic_ns();
        self.received_to_ring.record(f.rx_ns, self.ring_at);
    }

    /// The stamp for the subscription records of the frame being delivered.
    #[inline]
    pub(super) fn ring_stamp(&self) -> u64 {
        self.ring_at
    }

    /// `mcast stat`'s `trace`: one object per hop (nanoseconds), and the
    /// send samples not timed.
    pub(super) fn json(&self) -> serde_json::Value {
        json!({
            "publish_to_taken": self.publish_to_taken.summary(),
            "taken_to_sent": self.taken_to_sent.summary(),
            "sent_to_received": self.sent_to_received.summary(),
            "received_to_ring": self.received_to_ring.summary(),
            "sent_samples_dropped": self.sent_dropped,
        })
    }
}
