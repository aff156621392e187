//! The driver's copies of received data frames, from which a receiver in a
//! feedback tree repairs its neighbours (local recovery, docs/protocol.md
//! §3.5).
//!
//! The machines never see payload bytes ([`crate::BufId`] is a handle), and a
//! delivered frame belongs to the application. So the driver keeps a copy of
//! each data frame it hands to a machine that asks for copies
//! ([`crate::Endpoint::keeps_copies`]), and writes one out when the machine
//! returns a [`crate::TxBody::Relay`]. The copies are a ring indexed by
//! sequence number: a frame's slot is overwritten by the frame a capacity
//! later, and a lookup is one comparison. A slot's buffer grows to the
//! largest payload it has held (and no further than `max_payload`), so a
//! stream of small messages keeps small copies: 512 simulated receivers of
//! 64-byte messages took 0.75 GB zeroed up front for 1,456-byte slots.
//!
//! Owns: [`RelayCache`]. May not touch: the machines' state; it is pure
//! storage, filled and read by drivers.

use mcast_wire::{Flags, Seq};

/// The flags a copy keeps: what the payload is ([`Flags::PAYLOAD`]), and
/// the original's request for ACKs ([`Flags::ACK_REQ`], [`Flags::LAST`]),
/// which a receiver that lost the original learns from the repair.
pub const KEPT_FLAGS: Flags = Flags(Flags::PAYLOAD.0 | Flags::ACK_REQ.0 | Flags::LAST.0);

#[derive(Debug, Clone, Default)]
struct Slot {
    seq: Seq,
    flags: Flags,
    used: bool,
    payload: Vec<u8>,
}

/// Copies of the last `capacity` sequence numbers of one stream.
#[derive(Debug, Clone)]
pub struct RelayCache {
    slots: Vec<Slot>,
    max_payload: usize,
}

impl RelayCache {
    /// Room for `capacity` frames of at most `max_payload` bytes each (at
    /// most `capacity × max_payload` bytes, taken as payloads come).
    pub fn new(capacity: u32, max_payload: usize) -> RelayCache {
        let n = capacity.max(1) as usize;
        RelayCache {
            slots: vec![Slot::default(); n],
            max_payload,
        }
    }

    fn index(&self, seq: Seq) -> usize {
        seq.0 as usize % self.slots.len()
    }

    /// Keeps a copy of frame `seq` (its payload flags and payload). A
    /// payload longer than the slot is not kept.
    pub fn keep(&mut self, seq: Seq, flags: Flags, payload: &[u8]) {
        if payload.len() > self.max_payload {
            return;
        }
        let i = self.index(seq);
        let slot = &mut self.slots[i];
        slot.seq = seq;
        slot.flags = Flags(flags.0 & KEPT_FLAGS.0);
        slot.used = true;
        slot.payload.clear();
        slot.payload.extend_from_slice(payload);
    }

    /// The copy of frame `seq`, if still kept: its kept flags
    /// ([`KEPT_FLAGS`]) and payload.
    pub fn get(&self, seq: Seq) -> Option<(Flags, &[u8])> {
        let s = &self.slots[self.index(seq)];
        if !s.used || s.seq != seq {
            return None;
        }
        Some((s.flags, &s.payload))
    }

    /// Frames it can hold.
    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_found_until_the_frame_a_capacity_later_replaces_it() {
        let mut c = RelayCache::new(4, 8);
        let start = Seq(u32::MAX - 1); // crosses the wrap
        for i in 0..4u32 {
            let seq = start.add(i);
            c.keep(
                seq,
                Flags::WHOLE.with(Flags::RETRANSMIT).with(Flags::ACK_REQ),
                &[i as u8; 3],
            );
        }
        for i in 0..4u32 {
            let (flags, p) = c.get(start.add(i)).expect("kept");
            assert_eq!(
                flags,
                Flags::WHOLE.with(Flags::ACK_REQ),
                "what the payload is and the request are kept, RETRANSMIT is not"
            );
            assert_eq!(p, &[i as u8; 3]);
        }
        c.keep(start.add(4), Flags::WHOLE, b"new");
        assert!(c.get(start).is_none(), "overwritten a capacity later");
        assert_eq!(c.get(start.add(4)).map(|(_, p)| p), Some(&b"new"[..]));
        assert!(c.get(start.add(8)).is_none(), "never kept");
        c.keep(start.add(5), Flags::WHOLE, &[0; 9]);
        assert_eq!(
            c.get(start.add(1)).map(|(_, p)| p.len()),
            Some(3),
            "a payload too long for a slot is not kept"
        );
    }
}
