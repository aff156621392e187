//! A node's payload buffers: a slab addressed by [`BufId`] with a free list, the
//! simulator's stand-in for a UMEM. Each slot records who owns it, so the
//! checkers can tell a double release from a release of a buffer never lent.

use mcast_proto::BufId;
use mcast_wire::field;

/// Who owns an allocated buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Free: in the free list.
    Free,
    /// Lent to the node's endpoint (`send`, or a received data frame).
    Endpoint,
    /// Held by the simulator on the application's behalf: a frame the
    /// sender refused (window full) and that waits to be offered again.
    App,
}

#[derive(Debug)]
struct Slot {
    /// Frame bytes: the payload sits at [`field::PAYLOAD`], room for the
    /// headers in front (the layout a UMEM frame has). Kept when freed, so a
    /// slot's allocation is reused.
    bytes: Vec<u8>,
    owner: Owner,
}

/// One node's buffers.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    slots: Vec<Slot>,
    free: Vec<u32>,
    allocated: usize,
}

impl Pool {
    /// A buffer holding `payload`, owned by `owner`.
    pub(crate) fn alloc(&mut self, owner: Owner, payload_len: usize) -> (BufId, &mut [u8]) {
        debug_assert_ne!(owner, Owner::Free);
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(Slot {
                    bytes: Vec::new(),
                    owner: Owner::Free,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[id as usize];
        debug_assert_eq!(slot.owner, Owner::Free);
        slot.owner = owner;
        slot.bytes.resize(field::PAYLOAD + payload_len, 0);
        self.allocated += 1;
        (BufId(id), &mut slot.bytes[field::PAYLOAD..])
    }

    /// Resizes an allocated buffer's payload to `payload_len` bytes in place
    /// (the bytes it had are kept; new ones are zero) and returns it: a
    /// frame that more messages join while the application holds it.
    pub(crate) fn resize(&mut self, buf: BufId, payload_len: usize) -> &mut [u8] {
        let slot = &mut self.slots[buf.0 as usize];
        debug_assert_ne!(slot.owner, Owner::Free);
        slot.bytes.resize(field::PAYLOAD + payload_len, 0);
        &mut slot.bytes[field::PAYLOAD..]
    }

    /// Who owns `buf` (`Free` also for ids never allocated).
    pub(crate) fn owner(&self, buf: BufId) -> Owner {
        self.slots
            .get(buf.0 as usize)
            .map_or(Owner::Free, |s| s.owner)
    }

    /// Hands a buffer to a new owner.
    pub(crate) fn set_owner(&mut self, buf: BufId, owner: Owner) {
        debug_assert_ne!(owner, Owner::Free);
        self.slots[buf.0 as usize].owner = owner;
    }

    /// Frees `buf` if `expected` owns it; otherwise says who does.
    pub(crate) fn free(&mut self, buf: BufId, expected: Owner) -> Result<(), Owner> {
        let owner = self.owner(buf);
        if owner != expected || owner == Owner::Free {
            return Err(owner);
        }
        self.slots[buf.0 as usize].owner = Owner::Free;
        self.free.push(buf.0);
        self.allocated -= 1;
        Ok(())
    }

    /// The payload in an allocated buffer.
    pub(crate) fn payload(&self, buf: BufId) -> &[u8] {
        &self.slots[buf.0 as usize].bytes[field::PAYLOAD..]
    }

    /// The whole slot (headers' room then payload), for emitting in place.
    pub(crate) fn frame_mut(&mut self, buf: BufId) -> &mut [u8] {
        &mut self.slots[buf.0 as usize].bytes
    }

    /// Buffers allocated now.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_reuse_and_double_free() {
        let mut p = Pool::default();
        let (a, bytes) = p.alloc(Owner::Endpoint, 3);
        bytes.copy_from_slice(b"abc");
        let (b, _) = p.alloc(Owner::App, 1);
        assert_eq!(p.allocated(), 2);
        assert_eq!(p.payload(a), b"abc");
        assert_eq!(p.free(b, Owner::Endpoint), Err(Owner::App));
        assert_eq!(p.free(a, Owner::Endpoint), Ok(()));
        assert_eq!(p.free(a, Owner::Endpoint), Err(Owner::Free));
        assert_eq!(p.free(BufId(99), Owner::Endpoint), Err(Owner::Free));
        let (c, bytes) = p.alloc(Owner::Endpoint, 2);
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(bytes.len(), 2);
        assert_eq!(p.allocated(), 2);
    }

    #[test]
    fn a_buffer_grows_in_place_keeping_its_bytes() {
        let mut p = Pool::default();
        let (a, bytes) = p.alloc(Owner::App, 3);
        bytes.copy_from_slice(b"abc");
        let grown = p.resize(a, 5);
        assert_eq!(grown, b"abc\0\0");
        grown[3..].copy_from_slice(b"de");
        assert_eq!(p.payload(a), b"abcde");
        assert_eq!(p.allocated(), 1, "no new buffer");
    }
}
