//! Beat frames: unreliable liveness frames outside every stream, sent with
//! [`Engine::send_beat`] and taken with [`Engine::poll_beat`] (the receive
//! path queues them, bounded).
//!
//! Owns: the beat limits and the sending and taking of beats. May not touch:
//! any stream or machine; a beat's frame goes straight to the TX batch.

use mcast_proto::NodeId;
use mcast_wire::Kind;

use super::Engine;
use crate::transport::Transport;
use crate::EngineError;

/// Beat frames held for the caller at most (older ones are dropped).
pub(super) const MAX_BEATS: usize = 1024;

/// Largest beat payload.
pub const MAX_BEAT: usize = 256;

impl<T: Transport> Engine<T> {
    /// Sends an unreliable beat frame (liveness, outside every stream) with
    /// `payload` (at most [`MAX_BEAT`] bytes) to node `to`. False when it
    /// could not go: no MAC known for `to`, or no free frame.
    pub fn send_beat(&mut self, to: NodeId, payload: &[u8]) -> Result<bool, EngineError> {
        if payload.len() > MAX_BEAT {
            return Err(EngineError::Config(format!(
                "a beat of {} bytes exceeds {MAX_BEAT}",
                payload.len()
            )));
        }
        let Some(&dst) = self.peers.get(&to) else {
            self.counters.tx_no_route += 1;
            return Ok(false);
        };
        let mut h = mcast_wire::Header::new(Kind::Beat);
        h.src = self.cfg.node;
        h.peer = to;
        h.payload_len = payload.len() as u16;
        let staged = self.stage_written(dst, &h, |area| {
            area.copy_from_slice(payload);
            Ok(())
        })?;
        if !staged {
            return Ok(false);
        }
        self.counters.tx_beats += 1;
        if self.tx_copy.len() + self.tx_keep.len() >= self.cfg.batch {
            self.flush_batches()?;
        }
        Ok(true)
    }

    /// The next beat received: (sending node, payload).
    pub fn poll_beat(&mut self) -> Option<(NodeId, Vec<u8>)> {
        self.beats.pop_front()
    }
}
