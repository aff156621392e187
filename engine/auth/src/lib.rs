//! Frame authentication of the reliable-multicast engine (issue 23).
//!
//! With a cluster key every frame carries a 36-byte trailer after its
//! payload: the key's id, the sender's session and transmit counter, and a
//! 16-byte tag, keyed BLAKE3 over the headers, a SHA-256 digest of the
//! payload and the trailer up to the tag
//! (docs/protocol.md §1.9). A receiver checks the tag before it parses
//! anything else, then the counter against the sender's replay window.
//!
//! Owns: the key type and its file format ([`key`]), the trailer's layout,
//! sealing and opening ([`trailer`]), and the replay window ([`replay`]).
//! May not touch: frames' other fields (it reads the payload length only to
//! find the trailer) or any I/O besides reading the OS random source for a
//! new key.

pub mod key;
pub mod replay;
pub mod trailer;

pub use key::{ClusterKey, KeyError, Keys};
pub use replay::{Replay, ReplayWindow, REPLAY_WINDOW};
pub use trailer::{
    open, payload_digest, seal, seal_with_digest, AuthError, Digest, Opened, TAG_LEN, TRAILER_LEN,
};
