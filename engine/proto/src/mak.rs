//! MAK reliable multicast (seed 000 §3). (To be implemented.)

use crate::StreamConfig;
use mcast_wire::NodeId;

/// Configuration of MAK.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MakConfig {}

/// The MAK sender.
#[derive(Debug)]
pub struct MakSender {}

impl MakSender {
    pub fn new(_stream: StreamConfig, _cfg: MakConfig, _members: &[NodeId]) -> MakSender {
        unimplemented!()
    }
}

/// The MAK receiver.
#[derive(Debug)]
pub struct MakReceiver {}

impl MakReceiver {
    pub fn new(_stream: StreamConfig, _cfg: MakConfig) -> MakReceiver {
        unimplemented!()
    }
}

crate::api::unimplemented_endpoint!(MakSender, sender);

crate::api::unimplemented_endpoint!(MakReceiver);
