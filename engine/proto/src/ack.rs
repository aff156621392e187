//! The ACK baseline (seed 000 §2 (2)): the sender multicasts each frame and waits
//! for an ACK from every receiver; frames not acknowledged by all within the
//! timeout are multicast again. (To be implemented.)

use crate::{Duration, StreamConfig};
use mcast_wire::NodeId;

/// Configuration of the ACK baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AckConfig {
    /// How long the sender waits for every ACK before resending.
    pub retransmit_timeout: Duration,
}

impl Default for AckConfig {
    fn default() -> Self {
        AckConfig {
            retransmit_timeout: Duration::from_micros(500),
        }
    }
}

/// Sender of the ACK baseline.
#[derive(Debug)]
pub struct AckSender {}

impl AckSender {
    pub fn new(_stream: StreamConfig, _cfg: AckConfig, _members: &[NodeId]) -> AckSender {
        unimplemented!()
    }
}

/// Receiver of the ACK baseline.
#[derive(Debug)]
pub struct AckReceiver {}

impl AckReceiver {
    pub fn new(_stream: StreamConfig, _cfg: AckConfig) -> AckReceiver {
        unimplemented!()
    }
}

crate::api::unimplemented_endpoint!(AckSender, sender);

crate::api::unimplemented_endpoint!(AckReceiver);
