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
//! Owns: [`SeqRing`], [`RelayCache`] and [`KEPT_FLAGS`]. May not touch: the machines' state; it is pure
//! storage, filled and read by drivers.

use mcast_wire::{Flags, Seq};

/// The flags a copy keeps: what the payload is ([`Flags::PAYLOAD`]), and
/// the original's request for ACKs ([`Flags::ACK_REQ`], [`Flags::LAST`]),
/// which a receiver that lost the original learns from the repair.
pub const KEPT_FLAGS: Flags = Flags(Flags::PAYLOAD.0 | Flags::ACK_REQ.0 | Flags::LAST.0);

/// The values of the last `capacity` sequence numbers of a stream: a ring
/// indexed by sequence number, where a value is found until the one a
/// capacity later takes its slot. What every driver keeps its copies in
/// (the engine's [`RelayCache`], the simulators' references to their
/// frames).
#[derive(Debug, Clone)]
pub struct SeqRing<T> {
    slots: Vec<Option<(Seq, T)>>,
}

impl<T> SeqRing<T> {
    /// Room for `capacity` sequence numbers (at least one).
    pub fn new(capacity: u32) -> SeqRing<T> {
        SeqRing {
            slots: (0..capacity.max(1)).map(|_| None).collect(),
        }
    }

    /// The slot `seq` goes in, with what it holds now (maybe an earlier
    /// sequence number's value, to overwrite or reuse).
    pub fn slot(&mut self, seq: Seq) -> &mut Option<(Seq, T)> {
        let n = self.slots.len();
        &mut self.slots[seq.0 as usize % n]
    }

    /// The value of `seq`, if its slot still holds it.
    pub fn get(&self, seq: Seq) -> Option<&T> {
        match &self.slots[seq.0 as usize % self.slots.len()] {
            Some((s, v)) if *s == seq => Some(v),
            _ => None,
        }
    }
}

/// Copies of the last `capacity` sequence numbers of one stream: their
/// kept flags and payloads.
#[derive(Debug, Clone)]
pub struct RelayCache {
    ring: SeqRing<(Flags, Vec<u8>)>,
    max_payload: usize,
}

impl RelayCache {
    /// Room for `capacity` frames of at most `max_payload` bytes each (at
    /// most `capacity × max_payload` bytes, taken as payloads come).
    pub fn new(capacity: u32, max_payload: usize) -> RelayCache {
        RelayCache {
            ring: SeqRing::new(capacity),
            max_payload,
        }
    }

    /// Keeps a copy of frame `seq` (its flags and payload). A payload
    /// longer than `max_payload` is not kept.
    pub fn keep(&mut self, seq: Seq, flags: Flags, payload: &[u8]) {
        if payload.len() > self.max_payload {
            return;
        }
        let kept = Flags(flags.0 & KEPT_FLAGS.0);
        let slot = self.ring.slot(seq);
        if let Some((s, (f, buf))) = slot.as_mut() {
            // The slot's buffer is reused: no allocation once it is grown.
            (*s, *f) = (seq, kept);
            buf.clear();
            buf.extend_from_slice(payload);
        } else {
            *slot = Some((seq, (kept, payload.to_vec())));
        }
    }

    /// The copy of frame `seq`, if still kept: its kept flags
    /// ([`KEPT_FLAGS`]) and payload.
    pub fn get(&self, seq: Seq) -> Option<(Flags, &[u8])> {
        self.ring.get(seq).map(|(f, p)| (*f, &p[..]))
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
