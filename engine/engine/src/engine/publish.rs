//! Publishing: the application's send side. A message's fragments are
//! written once into transport frames and queued ahead of the send window
//! (back-pressure: `WouldBlock`); a small message that finds a frame of
//! whole messages waiting at the back of the queue joins it instead
//! (batching, docs/protocol.md §1.10); whether everything published has gone
//! ([`Engine::send_idle`], [`Engine::flush`]).
//!
//! Owns: the writing of published payloads, the packing of messages into
//! queued frames, an unsealed queued frame's checksum (taken as it leaves
//! the queue, once its payload is final), and the send queues' admission
//! (the queue's bound, and the frames left for receiving).
//! May not touch: the send machines (the poll loop feeds them) or frames
//! once they left the queue.

use std::time::Duration;

use mcast_proto::{BufId, GroupId, OutFrame, Sender};
use mcast_wire::{batch, Flags, Frame};

use super::frames::{FrameTable, Place};
use super::{nanos, Engine};
use crate::sys;
use crate::transport::Transport;
use crate::{EngineError, PublishError};

/// Frames of `total` that publishing leaves free or in the fill ring, for
/// receiving: a quarter. A send window and its queue (at most `frames / 4`
/// each by default) then fit beside it with room for the receive streams.
pub(crate) fn rx_reserve(total: u32) -> usize {
    total as usize / 4
}

impl<T: Transport> Engine<T> {
    /// [`Engine::publish_in`] the configuration's group.
    pub fn publish(&mut self, msg: &[u8]) -> Result<(), PublishError> {
        self.publish_in(self.cfg.group, msg)
    }

    /// Queues a message for reliable delivery in `group`: its fragments are
    /// written once into transport frames and fed to the send machine as its
    /// window opens. A message that fits beside those in the frame waiting at
    /// the back of the queue is packed into it instead (no frame is spent,
    /// and none waits for one: a frame leaves as soon as the window takes
    /// it). `WouldBlock` when the queue ahead of the window or the frame pool
    /// is full.
    pub fn publish_in(&mut self, group: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        let Some(gi) = self.group_index(group) else {
            return Err(PublishError::NoSendStream);
        };
        let limit = self.groups[gi].opts.max_queued_frames;
        if self.groups[gi].sender.is_none() {
            return Err(PublishError::NoSendStream);
        }
        if msg.len() > self.cfg.max_message {
            return Err(PublishError::TooLarge {
                limit: self.cfg.max_message,
            });
        }
        if self.groups[gi].opts.batch_messages && self.append_to_batch(gi, msg) {
            self.counters.messages_published += 1;
            return Ok(());
        }
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return Err(PublishError::NoSendStream);
        };
        let count = msg.len().div_ceil(self.max_payload).max(1);
        if !s.queue.is_empty() && s.queue.len() + count > limit {
            self.counters.publish_would_block += 1;
            return Err(PublishError::WouldBlock);
        }
        // Publishing never takes the frames receiving needs: a node whose
        // send windows and queues held them all could not receive the ACKs
        // that free them (nor beats), and would be declared failed.
        let (spare, total) = self.transport.spare_frames();
        if spare as usize <= rx_reserve(total) + count {
            self.counters.publish_would_block += 1;
            self.counters.publish_rx_reserve += 1;
            return Err(PublishError::WouldBlock);
        }
        let first = s.queue.len();
        for (offset, len, frag) in mcast_proto::frag::fragments(msg.len(), self.max_payload) {
            let Some(f) = self.transport.alloc() else {
                // Not enough frames for the whole message: undo.
                for of in s.queue.drain(first..) {
                    self.frames.place[of.buf.0 as usize] = Place::Transport;
                    self.transport.release(of.buf.0);
                }
                self.counters.publish_would_block += 1;
                return Err(PublishError::WouldBlock);
            };
            let area = Frame::<&mut [u8]>::payload_area_mut(self.transport.frame_mut(f), len)
                .expect("MTU checked against the frame size");
            area.copy_from_slice(&msg[offset..offset + len]);
            self.frames.place[f as usize] = Place::Queued;
            self.frames.ends[f as usize] = u16::from(frag.contains(Flags::FRAG_LAST));
            if let Some(t) = self.trace.as_deref_mut() {
                t.queued(f);
            }
            s.queue.push_back(OutFrame {
                buf: BufId(f),
                len: len as u16,
                frag,
                last: false,
            });
        }
        s.tally.messages += 1;
        s.tally.payload_bytes += msg.len() as u64;
        self.counters.messages_published += 1;
        Ok(())
    }

    /// Packs `msg` into the frame at the back of group `gi`'s send queue if
    /// that frame holds whole messages and has room; true when it did. The
    /// frame has not been handed to the machine, so nothing has been sent
    /// of it and no sequence number is spent.
    fn append_to_batch(&mut self, gi: usize, msg: &[u8]) -> bool {
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return false;
        };
        // A frame of whole messages: a lone message's (every fragment of a
        // larger one lacks one of the two bits).
        let Some(back) = s.queue.back_mut().filter(|b| b.frag.contains(Flags::WHOLE)) else {
            return false;
        };
        let (len, batched) = (usize::from(back.len), back.frag.contains(Flags::BATCH));
        let new_len = batch::len_after_append(len, batched, msg.len());
        if new_len > self.max_payload {
            return false;
        }
        let area =
            Frame::<&mut [u8]>::payload_area_mut(self.transport.frame_mut(back.buf.0), new_len)
                .expect("within the MTU checked against the frame size");
        let mut at = len;
        if !batched {
            at = batch::begin(area, len);
            back.frag = back.frag.with(Flags::BATCH);
        }
        back.len = batch::append(area, at, msg) as u16;
        self.frames.ends[back.buf.0 as usize] += 1;
        s.tally.messages += 1;
        s.tally.batched += 1;
        s.tally.payload_bytes += msg.len() as u64;
        true
    }

    /// [`Engine::publish`], running the engine until the message is accepted
    /// or `timeout` passes.
    pub fn publish_blocking(&mut self, msg: &[u8], timeout: Duration) -> Result<(), PublishError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        loop {
            match self.publish(msg) {
                Err(PublishError::WouldBlock) => {}
                other => return other,
            }
            if sys::monotonic_ns() >= deadline {
                return Err(PublishError::TimedOut);
            }
            self.run_once().map_err(PublishError::Engine)?;
        }
    }

    /// True when everything published has left the queues and every send
    /// machine is idle (every frame acknowledged, or for NAK: nothing left to send).
    pub fn send_idle(&self) -> bool {
        self.deferred.is_empty()
            && self.tx_keep.is_empty()
            && self.tx_copy.is_empty()
            && self.groups.iter().all(|g| {
                g.sender
                    .as_ref()
                    .is_none_or(|s| s.queue.is_empty() && s.machine.is_idle())
            })
    }

    /// True when `group`'s send stream has nothing queued or unacknowledged.
    pub fn group_send_idle(&self, group: GroupId) -> bool {
        self.group_index(group).is_none_or(|gi| {
            self.groups[gi]
                .sender
                .as_ref()
                .is_none_or(|s| s.queue.is_empty() && s.machine.is_idle())
        })
    }

    /// How many of the messages published to `group`'s send stream, from
    /// the first, every member has acknowledged whole (every frame of
    /// theirs): the stream's commit point in messages. None without a send
    /// stream, or when its algorithm takes no acknowledgments
    /// ([`Sender::acked_until`]).
    pub fn group_acked_messages(&mut self, group: GroupId) -> Option<u64> {
        let gi = self.group_index(group)?;
        self.groups[gi].sender.as_mut()?.settle_acked()
    }

    /// Fragments queued ahead of `group`'s send window.
    pub fn queued_in(&self, group: GroupId) -> usize {
        self.group_index(group)
            .and_then(|gi| self.groups[gi].sender.as_ref())
            .map_or(0, |s| s.queue.len())
    }

    /// Runs the engine until [`Engine::send_idle`] or `timeout`; returns whether idle.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool, EngineError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        while !self.send_idle() {
            if sys::monotonic_ns() >= deadline {
                return Ok(false);
            }
            self.run_once()?;
        }
        Ok(true)
    }
}

/// The payload's CRC32C, which a queued frame's transmissions will cover,
/// taken as the frame leaves the queue for the send machine, once no
/// message can join it. The payload was written moments ago and is still in
/// cache. Unsealed frames only: a sealed frame's tag covers its payload at
/// each transmission, and its CRC field is 0.
pub(super) fn keep_payload_crc<T: Transport>(
    transport: &T,
    frames: &mut FrameTable,
    of: &OutFrame,
) {
    let f = of.buf.0;
    let start = mcast_wire::FRAME_OVERHEAD;
    let payload = &transport.frame(f)[start..start + usize::from(of.len)];
    frames.payload_crc[f as usize] = mcast_wire::payload_crc(payload);
}
