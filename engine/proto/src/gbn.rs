//! Go-Back-N reliable unicast (seed 001 §4.2.1, Figure 4.1). (To be implemented.)

use crate::{Duration, StreamConfig};
use mcast_wire::NodeId;

/// When the receiver acknowledges: chosen by the layer above (seed 001).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AckPolicy {
    /// A Pack for every in-order frame.
    Immediate,
    /// A Pack after every `every` in-order frames, or `max_delay` after the first unacknowledged one.
    Delayed { every: u32, max_delay: Duration },
    /// Carried on reverse traffic when there is some within `max_delay`, else sent alone.
    Piggyback { max_delay: Duration },
}

/// Configuration of a Go-Back-N endpoint. The credit window W_FC is the stream's `window_frames`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GbnConfig {
    /// The static per-frame retransmission timeout.
    pub retransmit_timeout: Duration,
    pub ack_policy: AckPolicy,
}

impl Default for GbnConfig {
    fn default() -> Self {
        GbnConfig {
            retransmit_timeout: Duration::from_micros(500),
            ack_policy: AckPolicy::Immediate,
        }
    }
}

/// Go-Back-N sender towards one peer.
#[derive(Debug)]
pub struct GbnSender {}

impl GbnSender {
    pub fn new(_stream: StreamConfig, _peer: NodeId, _cfg: GbnConfig) -> GbnSender {
        unimplemented!()
    }
}

/// Go-Back-N receiver from one sender.
#[derive(Debug)]
pub struct GbnReceiver {}

impl GbnReceiver {
    pub fn new(_stream: StreamConfig, _cfg: GbnConfig) -> GbnReceiver {
        unimplemented!()
    }
}

crate::api::unimplemented_endpoint!(GbnSender, sender);
crate::api::unimplemented_endpoint!(GbnReceiver);
