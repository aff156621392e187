//! The transmit path: the machines' transmits, round-robin over groups,
//! written in place (headers only) or copied once (iterative to several
//! receivers) into TX batches, deferred while their frame is still in
//! flight, and handed to the transport in batches.
//!
//! Owns: the TX batches, the deferred transmits and the header writing (and
//! the seal after it, when frames are authenticated). May not touch: a
//! payload, except the one copy of `CopyPerTransmit`.

use mcast_proto::{Dest, Endpoint, Header, Instant, Transmit, TxBody};
use mcast_wire::{group_mac, Frame, MacAddr, FRAME_OVERHEAD};

use super::frames::Place;
use super::streams::TxPolicy;
use super::Engine;
use crate::transport::{Transport, TxDesc};
use crate::EngineError;

impl<T: Transport> Engine<T> {
    #[inline]
    pub(super) fn drain_transmits(&mut self, now: Instant) -> Result<bool, EngineError> {
        let mut work = false;
        // Deferred retransmissions first: their frames may have completed.
        for _ in 0..self.deferred.len() {
            let t = self.deferred.pop_front().expect("counted");
            self.stage(t)?;
        }
        let n = self.groups.len();
        if n > 0 {
            self.turn = (self.turn + 1) % n;
        }
        'groups: for k in 0..n {
            let gi = (self.turn + k) % n;
            loop {
                if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                    self.flush_batches()?;
                    if self.tx_keep.len() + self.tx_copy.len() >= self.cfg.batch {
                        break 'groups; // the TX ring is full: come back later
                    }
                    // Feedback came while this batch went out: read it before
                    // the next (the next poll starts with the next group). A
                    // window sent whole in one poll kept ACKs and NAKs waiting
                    // for milliseconds, which the GRTT and every repair wait
                    // grew by (docs/datapath.md, "The loop").
                    if self.transport.rx_waiting() {
                        break 'groups;
                    }
                }
                let g = &mut self.groups[gi];
                let t = match g.sender.as_mut().and_then(|s| s.machine.poll_transmit(now)) {
                    Some(t) => t,
                    None => match g
                        .receivers
                        .iter_mut()
                        .find_map(|r| r.machine.poll_transmit(now))
                    {
                        Some(t) => t,
                        None => break,
                    },
                };
                work = true;
                self.stage(t)?;
            }
        }
        if !self.tx_keep.is_empty() || !self.tx_copy.is_empty() {
            self.flush_batches()?;
            work = true;
        }
        Ok(work)
    }

    /// Writes a frame whose payload is not a machine's buffer (none, a
    /// range list, a relayed copy) into a frame of its own and puts it in
    /// the copy batch; `write` fills the payload area (`payload_len` bytes).
    /// False when the pool had no free frame (counted).
    pub(super) fn stage_written(
        &mut self,
        dst: MacAddr,
        header: &Header,
        write: impl FnOnce(&mut [u8]) -> Result<(), EngineError>,
    ) -> Result<bool, EngineError> {
        let Some(f) = self.transport.alloc() else {
            self.counters.tx_no_frame += 1;
            return Ok(false);
        };
        let n = usize::from(header.payload_len);
        if n > 0 {
            write(payload_area(self.transport.frame_mut(f), n)?)?;
        }
        self.stage_frame(f, dst, header)?;
        Ok(true)
    }

    /// Writes `header` into frame `f`, whose payload is in place, seals it
    /// and puts it in the copy batch.
    fn stage_frame(&mut self, f: u32, dst: MacAddr, header: &Header) -> Result<(), EngineError> {
        let buf = self.transport.frame_mut(f);
        let crc = if self.auth.is_some() {
            Crc::Sealed
        } else {
            Crc::Compute
        };
        let mut len = emit(buf, (dst, self.mac, self.cfg.ethertype), header, crc)?;
        if let Some(a) = self.auth.as_mut() {
            len = a.seal(buf, len)?;
        }
        self.frames.place[f as usize] = Place::Staged {
            keep: false,
            back: false,
        };
        self.tx_copy.push(TxDesc { frame: f, len });
        Ok(())
    }

    /// Writes a frame's headers and puts it in a TX batch (or defers it).
    pub(super) fn stage(&mut self, t: Transmit) -> Result<(), EngineError> {
        let dst = match t.dest {
            Dest::Group => group_mac(t.header.group),
            Dest::Node(n) => match self.peers.get(&n) {
                Some(m) => *m,
                None => {
                    self.counters.tx_no_route += 1;
                    return Ok(());
                }
            },
        };
        let (src, ethertype) = (self.mac, self.cfg.ethertype);
        match &t.body {
            TxBody::None | TxBody::Ranges(_) => {
                let header = t.header;
                self.stage_written(dst, &header, |area| {
                    if let TxBody::Ranges(list) = &t.body {
                        list.emit(area)
                            .map_err(|e| EngineError::Accounting(format!("NAK emit: {e}")))?;
                    }
                    Ok(())
                })?;
            }
            TxBody::Relay(seq) => {
                // A repair of a tree neighbour from this node's copy
                // (docs/protocol.md §3.5), copied once, into a frame of its own.
                let Some(f) = self.transport.alloc() else {
                    self.counters.tx_no_frame += 1;
                    return Ok(());
                };
                let copy = self
                    .group_index(t.header.group)
                    .and_then(|gi| {
                        let g = &self.groups[gi];
                        g.receivers.iter().find(|r| r.sender == t.header.peer)
                    })
                    .and_then(|r| r.copies.as_ref())
                    .and_then(|c| c.get(*seq));
                let Some((flags, payload)) = copy else {
                    self.free(f);
                    self.counters.tx_relay_missed += 1;
                    return Ok(());
                };
                let mut header = t.header;
                header.flags = header.flags.with(flags);
                header.payload_len = payload.len() as u16;
                payload_area(self.transport.frame_mut(f), payload.len())?.copy_from_slice(payload);
                self.stage_frame(f, dst, &header)?;
            }
            TxBody::Buf(b) => {
                let b = b.0;
                let place = self.frames.place[b as usize];
                // The payload's CRC, kept since publish wrote it (a copy for
                // CopyPerTransmit carries the same payload); none when the
                // frame is sealed.
                let crc = if self.auth.is_some() {
                    Crc::Sealed
                } else {
                    Crc::PayloadKnown(self.frames.payload_crc[b as usize])
                };
                let addr = (dst, src, ethertype);
                let gi = self.group_index(t.header.group);
                let policy = gi
                    .and_then(|gi| self.groups[gi].sender.as_ref())
                    .map_or(TxPolicy::InPlace, |s| s.policy);
                match (policy, place) {
                    (TxPolicy::InPlace, Place::Machine) => {
                        let buf = self.transport.frame_mut(b);
                        let mut len = emit(buf, addr, &t.header, crc)?;
                        if let Some(a) = self.auth.as_mut() {
                            len = a.seal(buf, len)?;
                        }
                        self.frames.place[b as usize] = Place::Staged {
                            keep: true,
                            back: true,
                        };
                        self.tx_keep.push(TxDesc { frame: b, len });
                        self.tally_wire(gi, len);
                        self.trace_sent(b, &t.header);
                    }
                    (_, Place::Staged { back: true, .. } | Place::InTx { back: true }) => {
                        // Still on its way out: rewriting it now would corrupt
                        // the copy in flight (and a frame the kernel owns
                        // cannot be read to copy it, after a change of
                        // policy). Retry after its completion.
                        self.counters.tx_deferred += 1;
                        self.deferred.push_back(t);
                    }
                    (TxPolicy::CopyPerTransmit, Place::Machine) => {
                        let Some(f) = self.transport.alloc() else {
                            self.counters.tx_deferred += 1;
                            self.deferred.push_back(t);
                            return Ok(());
                        };
                        let n = usize::from(t.header.payload_len);
                        self.transport
                            .copy_between(b, f, FRAME_OVERHEAD..FRAME_OVERHEAD + n);
                        let buf = self.transport.frame_mut(f);
                        let mut len = emit(buf, addr, &t.header, crc)?;
                        if let Some(a) = self.auth.as_mut() {
                            len = a.seal(buf, len)?;
                        }
                        self.counters.tx_payload_copies += 1;
                        self.frames.place[f as usize] = Place::Staged {
                            keep: false,
                            back: false,
                        };
                        self.tx_copy.push(TxDesc { frame: f, len });
                        self.tally_wire(gi, len);
                        self.trace_sent(b, &t.header);
                    }
                    (_, other) => {
                        return Err(EngineError::Accounting(format!(
                            "machine asked to send frame {b} that the engine has in {other:?}"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// Counts a data frame of `len` bytes sent on group `gi`'s send stream.
    fn tally_wire(&mut self, gi: Option<usize>, len: u32) {
        if let Some(s) = gi.and_then(|gi| self.groups[gi].sender.as_mut()) {
            s.tally.wire_bytes += u64::from(len);
        }
    }

    pub(super) fn flush_batches(&mut self) -> Result<(), EngineError> {
        if !self.tx_keep.is_empty() {
            let n = self.transport.transmit(&self.tx_keep, true)?;
            for d in &self.tx_keep[..n] {
                let back = matches!(
                    self.frames.place[d.frame as usize],
                    Place::Staged { back: true, .. }
                );
                self.frames.place[d.frame as usize] = Place::InTx { back };
            }
            self.tx_keep.drain(..n);
            self.counters.tx_frames += n as u64;
            self.counters.tx_batches += 1;
        }
        if !self.tx_copy.is_empty() {
            let n = self.transport.transmit(&self.tx_copy, false)?;
            for d in &self.tx_copy[..n] {
                self.frames.place[d.frame as usize] = Place::Transport;
            }
            self.tx_copy.drain(..n);
            self.counters.tx_frames += n as u64;
            self.counters.tx_batches += 1;
        }
        Ok(())
    }
}

/// How a frame's CRC field is filled.
#[derive(Debug, Clone, Copy)]
pub(super) enum Crc {
    /// Computed over the payload and the header.
    Compute,
    /// The payload's part is known (kept since a publish wrote it); only
    /// the header is read.
    PayloadKnown(u32),
    /// Left 0: the frame will be sealed, and the tag covers every byte.
    Sealed,
}

/// Writes both headers in front of the payload already in place; returns
/// the frame's length. `addr` is (destination, source, EtherType).
pub(super) fn emit(
    buf: &mut [u8],
    (dst, src, ethertype): (MacAddr, MacAddr, u16),
    header: &mcast_wire::Header,
    crc: Crc,
) -> Result<u32, EngineError> {
    let written = match crc {
        Crc::Compute => Frame::emit(buf, dst, src, ethertype, header),
        Crc::PayloadKnown(c) => Frame::emit_with_payload_crc(buf, dst, src, ethertype, header, c),
        Crc::Sealed => Frame::emit_without_checksum(buf, dst, src, ethertype, header),
    };
    let (_, len) =
        written.map_err(|e| EngineError::Accounting(format!("frame does not fit: {e}")))?;
    Ok(len as u32)
}

/// The payload area of `n` bytes of a frame being written.
fn payload_area(buf: &mut [u8], n: usize) -> Result<&mut [u8], EngineError> {
    Frame::<&mut [u8]>::payload_area_mut(buf, n)
        .map_err(|e| EngineError::Accounting(format!("payload does not fit: {e}")))
}
