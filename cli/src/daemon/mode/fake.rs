//! Test support for the modes: engine streams that record what a mode
//! asked of them.

use mcast_engine::{EngineError, PublishError, StreamStart};
use mcast_wire::{GroupId, NodeId, Seq};

use super::StreamOps;

/// Streams that record what the mode asked of them.
#[derive(Debug, Default)]
pub struct Fake {
    pub opened: Vec<(Vec<NodeId>, StreamStart)>,
    pub published: Vec<Vec<u8>>,
    pub members: Vec<Vec<NodeId>>,
    pub full: bool,
    pub position: Option<StreamStart>,
    /// The last this many messages published are not acknowledged yet.
    pub unacked: usize,
}

impl StreamOps for Fake {
    fn open_sender(
        &mut self,
        _: GroupId,
        members: &[NodeId],
        start: StreamStart,
    ) -> Result<(), EngineError> {
        self.opened.push((members.to_vec(), start));
        Ok(())
    }
    fn publish(&mut self, _: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        if self.full {
            return Err(PublishError::WouldBlock);
        }
        self.published.push(msg.to_vec());
        Ok(())
    }
    fn set_members(&mut self, _: GroupId, members: &[NodeId]) -> Result<StreamStart, EngineError> {
        self.members.push(members.to_vec());
        Ok(at(40))
    }
    fn resume_member(
        &mut self,
        _: GroupId,
        _: NodeId,
        _: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        Ok(at(30))
    }
    fn sender_position(&self, _: GroupId) -> Option<StreamStart> {
        self.position
    }
    fn send_idle(&self, _: GroupId) -> bool {
        self.unacked == 0
    }
    fn acked_messages(&mut self, _: GroupId) -> Option<u64> {
        Some(self.published.len().saturating_sub(self.unacked) as u64)
    }
}

pub fn at(seq: u32) -> StreamStart {
    StreamStart {
        epoch: 5,
        seq: Seq(seq),
    }
}
