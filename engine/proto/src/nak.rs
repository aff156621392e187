//! The plain NAK baseline (seed 000 §2 (3)). (To be implemented.)

use crate::StreamConfig;
use mcast_wire::NodeId;

/// Configuration of the plain NAK baseline.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NakConfig {}

/// Sender of the plain NAK baseline.
#[derive(Debug)]
pub struct NakSender {}

impl NakSender {
    pub fn new(_stream: StreamConfig, _cfg: NakConfig, _members: &[NodeId]) -> NakSender {
        unimplemented!()
    }
}

/// Receiver of the plain NAK baseline.
#[derive(Debug)]
pub struct NakReceiver {}

impl NakReceiver {
    pub fn new(_stream: StreamConfig, _cfg: NakConfig) -> NakReceiver {
        unimplemented!()
    }
}

crate::api::unimplemented_endpoint!(NakSender, sender);

crate::api::unimplemented_endpoint!(NakReceiver);
