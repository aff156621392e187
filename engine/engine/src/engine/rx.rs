//! The receive path: one received frame, authenticated (when the engine has
//! keys: `auth`), checked (`Frame::new_checked`; a checksum failure counts as
//! a loss; a batched payload's records checked), routed by (group, [`stream_of`]) to
//! its send or receive machine, or taken as a beat.
//!
//! Owns: the per-frame receive decisions (including which frames to drop
//! when frames to receive into run short) and the peers the frames teach.
//! May not touch: the TX batches; it opens receive streams only through the
//! stream table (`GroupOptions::accept_senders`).

use mcast_proto::relay::RelayCache;
use mcast_proto::{stream_of, BufId, Endpoint, Instant, RxBody};
use mcast_wire::{batch, Flags, Frame, Kind, RangeList, WireError, FRAME_OVERHEAD};

use super::beats::{MAX_BEAT, MAX_BEATS};
use super::frames::Place;
use super::{Accept, Engine};
use crate::transport::{RxDesc, Transport};
use crate::EngineError;

impl<T: Transport> Engine<T> {
    #[inline]
    pub(super) fn handle_rx(&mut self, now: Instant, d: RxDesc) -> Result<(), EngineError> {
        let f = d.frame;
        if self.frames.place[f as usize] != Place::Transport {
            return Err(EngineError::Accounting(format!(
                "received frame {f} that the engine has in {:?}",
                self.frames.place[f as usize]
            )));
        }
        self.frames.place[f as usize] = Place::Rx;
        self.counters.rx_frames += 1;
        let start = d.offset as usize;
        let mut bytes = &self.transport.frame(f)[start..start + d.len as usize];
        if let Some(a) = self.auth.as_mut() {
            // Checked before anything else is read; refused frames are
            // counted by `open`.
            match a.open(bytes, &mut self.counters) {
                Some(len) => bytes = &bytes[..len],
                None => {
                    self.free(f);
                    return Ok(());
                }
            }
        }
        // A sealed frame's tag covers every byte the CRC would (and its
        // sender leaves the CRC 0).
        let checked = if self.auth.is_some() {
            Frame::new_checked_but_crc(bytes, self.cfg.ethertype)
        } else {
            Frame::new_checked(bytes, self.cfg.ethertype)
        };
        let parsed = checked.and_then(|fr| {
            let h = fr.header()?;
            // A NAK's missing frames, or the nodes a merged ACK covers.
            let ranges = h.kind == Kind::Nak || (h.kind == Kind::Ack && h.payload_len > 0);
            let nak = if ranges {
                Some(RangeList::parse(fr.payload())?)
            } else {
                None
            };
            if h.kind.carries_data() && h.flags.contains(Flags::BATCH) {
                // Checked whole before any machine holds the frame, so
                // delivery can take its records as they come.
                batch::validate(h.flags, fr.payload())?;
            }
            Ok((h, nak, fr.src_mac()))
        });
        let (header, nak, src_mac) = match parsed {
            Ok(p) => p,
            Err(WireError::BadChecksum { .. }) => {
                self.counters.rx_checksum_failures += 1;
                self.free(f);
                return Ok(());
            }
            Err(_) => {
                self.counters.rx_malformed += 1;
                self.free(f);
                return Ok(());
            }
        };
        if header.kind == Kind::Beat {
            if header.peer != self.cfg.node {
                // Beats are unicast: one addressed to another node reached
                // this one only because the segment flooded it.
                self.counters.rx_unrouted += 1;
                self.free(f);
                return Ok(());
            }
            self.counters.rx_beats += 1;
            if header.src != 0 && !src_mac.is_multicast() {
                self.peers.entry(header.src).or_insert(src_mac);
            }
            if self.beats.len() >= MAX_BEATS {
                self.beats.pop_front();
                self.counters.rx_beats_dropped += 1;
            }
            let start = d.offset as usize + FRAME_OVERHEAD;
            let n = usize::from(header.payload_len).min(MAX_BEAT);
            let payload = self.transport.frame(f)[start..start + n].to_vec();
            self.beats.push_back((header.src, payload));
            self.free(f);
            return Ok(());
        }
        let Some(gi) = self.group_index(header.group) else {
            self.counters.rx_other_group += 1;
            self.free(f);
            return Ok(());
        };
        if header.src != 0 && !src_mac.is_multicast() {
            self.peers.entry(header.src).or_insert(src_mac);
        }
        let stream = stream_of(&header);
        let data = header.kind.carries_data();
        if data && self.groups[gi].paused {
            self.counters.rx_paused += 1;
            self.free(f);
            return Ok(());
        }
        let opens = !matches!(self.groups[gi].opts.accept_senders, Accept::Opened);
        if data
            && stream != self.cfg.node
            && opens
            && !self.accept_sender(gi, stream, header.epoch)?
        {
            self.counters.rx_sender_refused += 1;
            self.free(f);
            return Ok(());
        }
        // Short of frames to receive into: only a frame delivered at once is
        // kept (see below).
        let scarce = data && stream != self.cfg.node && {
            let (spare, total) = self.transport.spare_frames();
            rx_frames_scarce(spare, total)
        };
        let g = &mut self.groups[gi];
        let machine: &mut dyn Endpoint = if stream == self.cfg.node {
            match g.sender.as_mut() {
                Some(s) => &mut s.machine,
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        } else {
            match g.receivers.iter_mut().find(|r| r.sender == stream) {
                Some(r) => {
                    if data && r.machine.keeps_copies() {
                        // The copy a repair of a tree neighbour is written
                        // from (docs/protocol.md §3.5): a window of them,
                        // since the sender holds at most a window
                        // unacknowledged, and a neighbour may miss any of
                        // them (with fewer, 5 % of the relays asked for at
                        // 1 % loss found their copy gone).
                        let cap = g.opts.window_frames;
                        let start = d.offset as usize + FRAME_OVERHEAD;
                        let end = start + usize::from(header.payload_len);
                        let payload = &self.transport.frame(f)[start..end];
                        r.copies
                            .get_or_insert_with(|| RelayCache::new(cap, self.max_payload))
                            .keep(header.seq, header.flags, payload);
                    }
                    &mut r.machine
                }
                None => {
                    self.counters.rx_unrouted += 1;
                    self.free(f);
                    return Ok(());
                }
            }
        };
        if scarce
            && machine
                .next_expected()
                .is_some_and(|next| header.seq != next)
        {
            // It would wait in the machine for the frames before it, and
            // frames that wait could take the last ones the repair of those
            // needs to be received into: dropped, it is NAKed and repaired
            // like a lost one.
            self.counters.rx_dropped_scarce += 1;
            self.free(f);
            return Ok(());
        }
        if data {
            // The frame now belongs to the machine, which returns it exactly
            // once as Deliver or Release.
            self.frames.place[f as usize] = Place::Machine;
            self.frames.rx_offset[f as usize] = d.offset;
            if let Some(t) = self.trace.as_deref_mut() {
                if header.flags.contains(Flags::NEAR) {
                    t.untimed(f);
                } else {
                    t.received(f, header.tstamp_us);
                }
            }
            machine.handle_frame(now, &header, RxBody::Data(BufId(f)));
        } else {
            match &nak {
                Some(list) => machine.handle_frame(now, &header, RxBody::Ranges(list)),
                None => machine.handle_frame(now, &header, RxBody::None),
            }
            self.free(f);
        }
        Ok(())
    }
}

/// Whether `available` frames (free or in the fill ring) of `total` are too
/// few to hold received frames that wait: under a quarter, of which the
/// fill ring's refill keeps an eighth back for sending (`XskSocket::refill`),
/// so under an eighth left for receiving. Publishing stops at the same
/// quarter (`publish::rx_reserve`).
pub(super) fn rx_frames_scarce(available: u32, total: u32) -> bool {
    available < total / 4
}
