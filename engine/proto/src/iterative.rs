//! The iterative baseline (seed 000 §2 (1)): reliable unicast (Go-Back-N) to each
//! receiver in turn. (To be implemented.)

use crate::gbn::GbnConfig;
use crate::StreamConfig;
use mcast_wire::NodeId;

/// Sender of the iterative baseline; receivers are plain [`crate::gbn::GbnReceiver`]s.
#[derive(Debug)]
pub struct IterativeSender {}

impl IterativeSender {
    pub fn new(_stream: StreamConfig, _cfg: GbnConfig, _members: &[NodeId]) -> IterativeSender {
        unimplemented!()
    }
}

crate::api::unimplemented_endpoint!(IterativeSender, sender);
