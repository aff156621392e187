//! Delivery of received fragments: in place to the caller's [`Deliver`]
//! sink ([`Engine::poll_deliver`]), or reassembled into a [`Message`] queued
//! for [`Engine::recv_message`]. The one copy of a received payload is made
//! here (the sink's, or into the message).
//!
//! A batched frame's messages go to the sink together ([`Deliver::batch`],
//! docs/protocol.md §1.10), after the frame itself to sinks that keep frames
//! ([`Deliver::frame`]); a sink that does not take batches gets them one by
//! one.
//!
//! Owns: the delivery types and the drain of the machines' events (a
//! delivery frees its frame, a release goes to the frame accounting). May
//! not touch: how frames arrive or leave (the receive path and the TX
//! batches), or a frame's place except to free a delivered one.

use std::time::Duration;

use mcast_proto::{Endpoint, Event, GroupId, NodeId, Seq};
use mcast_wire::{batch, Flags, FRAME_OVERHEAD};

use super::frames::{release_from_machine, Place};
use super::{nanos, Engine};
use crate::sys;
use crate::transport::Transport;
use crate::EngineError;

/// One received fragment, in place in its frame, handed to a [`Deliver`] sink
/// in stream order. A message is the fragments from one with `first` to the
/// next with `last` (both on a message of one frame).
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    /// The frame's sequence number in that node's stream.
    pub seq: Seq,
    pub first: bool,
    pub last: bool,
    pub data: &'a [u8],
}

/// A received data frame as it came off the wire, before its messages are
/// delivered: for a sink that keeps frames (a daemon keeps the last window of
/// each stream for a flush).
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    pub seq: Seq,
    /// The payload flags (`Flags::PAYLOAD`: fragment position, batch).
    pub flags: Flags,
    /// The payload: a fragment, or with `Flags::BATCH` the records of
    /// several messages (`mcast_wire::batch::records`).
    pub payload: &'a [u8],
    /// With tracing ([`EngineConfig::trace`](super::EngineConfig::trace)):
    /// when this node read the frame off its RX ring (CLOCK_MONOTONIC ns);
    /// 0 without.
    pub rx_ns: u64,
    /// With tracing: the sender's `tstamp_us` (its clock in µs, wrapping,
    /// when the poll that sent this copy of the frame started); 0 without.
    pub sent_us: u32,
}

/// The messages of one batched frame, in place, in order: each whole, all
/// with the frame's `seq`.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    pub seq: Seq,
    /// The records (`mcast_wire::batch`), validated on receipt.
    pub payload: &'a [u8],
}

impl<'a> Batch<'a> {
    /// Each message's bytes, in order.
    pub fn messages(&self) -> batch::Records<'a> {
        batch::records(self.payload)
    }

    /// Each message as a whole [`Fragment`], in order.
    pub fn fragments(&self) -> impl Iterator<Item = Fragment<'a>> + 'a {
        let (group, stream, seq) = (self.group, self.stream, self.seq);
        self.messages().map(move |data| Fragment {
            group,
            stream,
            seq,
            first: true,
            last: true,
            data,
        })
    }
}

/// Takes received fragments as the engine delivers them (see [`Engine::poll_deliver`]).
pub trait Deliver {
    /// Each message or fragment, in stream order.
    fn deliver(&mut self, fragment: Fragment<'_>);

    /// The messages of a batched frame, in its place in stream order. By
    /// default one by one to [`Deliver::deliver`]; a sink that looks
    /// something up per message can do it once per frame instead.
    fn batch(&mut self, batch: Batch<'_>) {
        for f in batch.fragments() {
            self.deliver(f);
        }
    }

    /// Each frame, just before its messages go to [`Deliver::deliver`] or
    /// [`Deliver::batch`].
    /// Does nothing unless the sink wants frames.
    fn frame(&mut self, _frame: RawFrame<'_>) {}
}

impl<F: FnMut(Fragment<'_>)> Deliver for F {
    fn deliver(&mut self, fragment: Fragment<'_>) {
        self(fragment)
    }
}

/// A whole message received on a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub group: GroupId,
    /// The sending node.
    pub stream: NodeId,
    pub data: Vec<u8>,
}

impl<T: Transport> Engine<T> {
    /// The next whole message received, if any.
    pub fn recv_message(&mut self) -> Option<Message> {
        self.messages.pop_front()
    }

    /// Runs the engine until a message arrives or `timeout` passes.
    pub fn recv_message_blocking(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<Message>, EngineError> {
        let deadline = sys::monotonic_ns() + nanos(timeout);
        loop {
            if let Some(m) = self.messages.pop_front() {
                return Ok(Some(m));
            }
            if sys::monotonic_ns() >= deadline {
                return Ok(None);
            }
            self.run_once()?;
        }
    }

    /// Messages received and not yet taken.
    pub fn pending_messages(&self) -> usize {
        self.messages.len()
    }

    #[inline]
    pub(super) fn drain_events<'s>(
        &mut self,
        mut sink: Option<&mut (dyn Deliver + 's)>,
    ) -> Result<(), EngineError> {
        for g in &mut self.groups {
            if let Some(s) = g.sender.as_mut() {
                while let Some(ev) = s.machine.poll_event() {
                    match ev {
                        Event::Release(b) => release_from_machine(
                            &mut self.frames.place,
                            &mut self.transport,
                            &mut self.deferred,
                            b,
                        )?,
                        Event::Deliver { buf, .. } => {
                            return Err(EngineError::Accounting(format!(
                                "a send machine delivered frame {}",
                                buf.0
                            )))
                        }
                    }
                }
            }
            for r in &mut g.receivers {
                while let Some(ev) = r.machine.poll_event() {
                    match ev {
                        Event::Release(b) => release_from_machine(
                            &mut self.frames.place,
                            &mut self.transport,
                            &mut self.deferred,
                            b,
                        )?,
                        Event::Deliver {
                            stream,
                            seq,
                            buf,
                            len,
                            flags,
                        } => {
                            let f = buf.0;
                            if self.frames.place[f as usize] != Place::Machine {
                                return Err(EngineError::Accounting(format!(
                                    "delivered frame {f} is in {:?}",
                                    self.frames.place[f as usize]
                                )));
                            }
                            let start = self.frames.rx_offset[f as usize] as usize + FRAME_OVERHEAD;
                            let payload = &self.transport.frame(f)[start..start + usize::from(len)];
                            let one = |data| Fragment {
                                group: g.id,
                                stream,
                                seq,
                                first: flags.contains(Flags::FRAG_FIRST),
                                last: flags.contains(Flags::FRAG_LAST),
                                data,
                            };
                            let batched = flags.contains(Flags::BATCH);
                            let (rx_ns, sent_us) =
                                self.trace.as_ref().map_or((0, 0), |t| t.of_received(f));
                            match sink.as_deref_mut() {
                                // The one copy of a received payload is the sink's.
                                Some(sink) => {
                                    sink.frame(RawFrame {
                                        group: g.id,
                                        stream,
                                        seq,
                                        flags: Flags(flags.0 & Flags::PAYLOAD.0),
                                        payload,
                                        rx_ns,
                                        sent_us,
                                    });
                                    if batched {
                                        // Validated on receipt (`rx`).
                                        let b = Batch {
                                            group: g.id,
                                            stream,
                                            seq,
                                            payload,
                                        };
                                        self.counters.messages_delivered +=
                                            b.messages().count() as u64;
                                        sink.batch(b);
                                    } else {
                                        sink.deliver(one(payload));
                                        if flags.contains(Flags::FRAG_LAST) {
                                            self.counters.messages_delivered += 1;
                                        }
                                    }
                                }
                                // Or into the message.
                                None => {
                                    let (messages, counters) =
                                        (&mut self.messages, &mut self.counters);
                                    let mut take =
                                        |flags, data| match r.reassembler.push_owned(flags, data) {
                                            Ok(Some(data)) => {
                                                messages.push_back(Message {
                                                    group: g.id,
                                                    stream,
                                                    data,
                                                });
                                                counters.messages_delivered += 1;
                                            }
                                            Ok(None) => {}
                                            Err(_) => counters.reassembly_errors += 1,
                                        };
                                    if batched {
                                        batch::records(payload).for_each(|m| take(Flags::WHOLE, m));
                                    } else {
                                        take(flags, payload);
                                    }
                                }
                            }
                            self.frames.place[f as usize] = Place::Transport;
                            self.transport.release(f);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
