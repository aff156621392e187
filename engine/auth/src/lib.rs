//! Frame authentication of the reliable-multicast engine (issue 23).
//!
//! With a cluster key every frame carries a 36-byte trailer after its
//! payload: the key's id, the sender's session and transmit counter, and a
//! 16-byte tag, AES-256-GCM's with the sender's session key (one per sender
//! and run, derived from the cluster key) and the counter as nonce, over the
//! headers, the trailer's fields and the payload (docs/protocol.md §1.9). A
//! receiver checks the tag before it parses anything else, then the counter
//! against the sender's replay window.
//!
//! Owns: the key type and its file format ([`key`]), session keys and the
//! tag ([`session`]), the trailer's layout, reading it, sealing and opening
//! ([`trailer`]), and the replay window ([`replay`]).
//! May not touch: frames' other fields (it reads the payload length only to
//! find the trailer, and the sender's id to know its session key) or any
//! I/O besides reading the OS random source for a new key.

pub mod key;
pub mod replay;
pub mod session;
pub mod trailer;

pub use key::{ClusterKey, KeyError, Keys};
pub use replay::{Replay, ReplayWindow, REPLAY_WINDOW};
pub use session::SessionKey;
pub use trailer::{header_src, open, seal, AuthError, Opened, Trailer, TAG_LEN, TRAILER_LEN};

/// Frames for the unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use mcast_wire::{Frame, Header, Kind, MacAddr};

    /// A DATA frame of group 7 from node `src` with `payload`, unsealed, at
    /// the start of a buffer with room for more; and its length.
    pub(crate) fn frame(src: u32, payload: &[u8]) -> (Vec<u8>, usize) {
        let mut buf = vec![0u8; 2048];
        Frame::<&mut [u8]>::payload_area_mut(&mut buf, payload.len())
            .unwrap()
            .copy_from_slice(payload);
        let mut h = Header::new(Kind::Data);
        h.group = 7;
        h.src = src;
        h.payload_len = payload.len() as u16;
        let (_, len) = Frame::emit(
            &mut buf[..],
            MacAddr([3, 0, 0, 0, 0, 7]),
            MacAddr([2, 0, 0, 0, 0, 1]),
            0x88b5,
            &h,
        )
        .unwrap();
        (buf, len)
    }
}
