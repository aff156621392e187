//! Publishing: the application's send side. A message's fragments are
//! written once into transport frames and queued ahead of the send window
//! (back-pressure: `WouldBlock`); whether everything published has gone
//! ([`Engine::send_idle`], [`Engine::flush`]).
//!
//! Owns: the writing of published payloads (and their payload CRC) and the
//! send queues' admission. May not touch: the send machines (the poll loop
//! feeds them) or frames once queued.

use std::time::Duration;

use mcast_proto::{BufId, GroupId, OutFrame, Sender};
use mcast_wire::Frame;

use super::frames::Place;
use super::{nanos, Engine};
use crate::sys;
use crate::transport::Transport;
use crate::{EngineError, PublishError};

impl<T: Transport> Engine<T> {
    /// [`Engine::publish_in`] the configuration's group.
    pub fn publish(&mut self, msg: &[u8]) -> Result<(), PublishError> {
        self.publish_in(self.cfg.group, msg)
    }

    /// Queues a message for reliable delivery in `group`: its fragments are
    /// written once into transport frames and fed to the send machine as its
    /// window opens. `WouldBlock` when the queue ahead of the window or the
    /// frame pool is full.
    pub fn publish_in(&mut self, group: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        let Some(gi) = self.group_index(group) else {
            return Err(PublishError::NoSendStream);
        };
        let limit = self.groups[gi].opts.max_queued_frames;
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return Err(PublishError::NoSendStream);
        };
        if msg.len() > self.cfg.max_message {
            return Err(PublishError::TooLarge {
                limit: self.cfg.max_message,
            });
        }
        let count = msg.len().div_ceil(self.max_payload).max(1);
        if !s.queue.is_empty() && s.queue.len() + count > limit {
            self.counters.publish_would_block += 1;
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
            let part = &msg[offset..offset + len];
            area.copy_from_slice(part);
            // Whichever the frame's transmissions will cover: the tag when
            // it is sealed (the CRC field is then 0), else the CRC.
            if self.auth.is_some() {
                self.frames.digest[f as usize] = mcast_auth::payload_digest(part);
            } else {
                self.frames.payload_crc[f as usize] = mcast_wire::payload_crc(part);
            }
            self.frames.place[f as usize] = Place::Queued;
            s.queue.push_back(OutFrame {
                buf: BufId(f),
                len: len as u16,
                frag,
                last: false,
            });
        }
        self.counters.messages_published += 1;
        Ok(())
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
