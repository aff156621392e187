//! Beat frames: unreliable liveness frames outside every stream, sent with
//! [`Engine::send_beat`] and taken with [`Engine::poll_beat`] (the receive
//! path queues them, bounded).
//!
//! Owns: the beat limits and the sending and taking of beats. May not touch:
//! any stream or machine; a beat's frame goes straight to the TX batch.

use mcast_proto::NodeId;
use mcast_wire::{Frame, Kind};

use super::frames::Place;
use super::tx::{emit, Crc};
use super::Engine;
use crate::transport::{Transport, TxDesc};
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
        let Some(f) = self.transport.alloc() else {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        };
        let mut h = mcast_wire::Header::new(Kind::Beat);
        h.src = self.cfg.node;
        h.peer = to;
        h.payload_len = payload.len() as u16;
        let buf = self.transport.frame_mut(f);
        Frame::<&mut [u8]>::payload_area_mut(buf, payload.len())
            .map_err(|e| EngineError::Accounting(format!("beat does not fit: {e}")))?
            .copy_from_slice(payload);
        let crc = if self.auth.is_some() {
            Crc::Sealed
        } else {
            Crc::Compute
        };
        let mut len = emit(buf, (dst, self.mac, self.cfg.ethertype), &h, crc)?;
        if let Some(a) = self.auth.as_mut() {
            len = a.seal(buf, len)?;
        }
        self.frames.place[f as usize] = Place::Staged {
            keep: false,
            back: false,
        };
        self.tx_copy.push(TxDesc { frame: f, len });
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
