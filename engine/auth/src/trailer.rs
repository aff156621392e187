//! The authentication trailer: its layout, reading it from a received frame,
//! and sealing or opening a frame without a kept session key.
//!
//! | offset from the payload's end | size | field |
//! |---|---|---|
//! | 0 | 4 | key id ([`ClusterKey::id`]) |
//! | 4 | 8 | session: the sender's, fixed for a run, larger for a later run |
//! | 12 | 8 | counter: the sender's transmit counter in that session, from 1 |
//! | 20 | 16 | tag: AES-256-GMAC with the sender's [`SessionKey`] and the counter as nonce, over every byte before it |
//!
//! Owns: the trailer's layout. May not touch: the frame's other fields,
//! which are read only to find the trailer (`payload_len`) and to know
//! whose session key seals it (`src`).

use std::fmt;

use mcast_wire::{field, FRAME_OVERHEAD};

use crate::key::{ClusterKey, Keys};
use crate::session::SessionKey;

/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 36;
/// Bytes of the tag (128 bits).
pub const TAG_LEN: usize = 16;
/// Bytes the tag covers beyond the frame: key id, session, counter.
pub(crate) const COVERED: usize = TRAILER_LEN - TAG_LEN;

/// Why a received frame was refused before anything else was read of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// Too short to hold the frame its header announces plus a trailer.
    NoTrailer { needed: usize, got: usize },
    /// Sealed with a key this node does not hold.
    UnknownKey { id: u32 },
    /// The tag does not match: forged, altered or corrupted.
    BadTag,
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthError::NoTrailer { needed, got } => write!(
                f,
                "no authentication trailer: needed {needed} bytes, got {got}"
            ),
            AuthError::UnknownKey { id } => write!(f, "sealed with unknown key {id:08x}"),
            AuthError::BadTag => write!(f, "authentication tag does not match"),
        }
    }
}

impl std::error::Error for AuthError {}

/// What a successfully opened frame says about its sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The frame's length without the trailer (what the parser reads).
    pub len: usize,
    pub session: u64,
    pub counter: u64,
}

/// A frame's trailer as read, before its tag is checked: nothing in it can
/// be trusted yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Where the trailer starts: the frame's length without it.
    pub len: usize,
    pub key_id: u32,
    pub session: u64,
    pub counter: u64,
}

impl Trailer {
    /// Reads the trailer of a received frame, found from its header's
    /// payload length (the only field read).
    pub fn read(bytes: &[u8]) -> Result<Trailer, AuthError> {
        let got = bytes.len();
        let Some(len_field) = bytes.get(field::PAYLOAD_LEN) else {
            return Err(AuthError::NoTrailer {
                needed: FRAME_OVERHEAD + TRAILER_LEN,
                got,
            });
        };
        let len = FRAME_OVERHEAD + usize::from(u16::from_be_bytes([len_field[0], len_field[1]]));
        let needed = len + TRAILER_LEN;
        if got < needed {
            return Err(AuthError::NoTrailer { needed, got });
        }
        let tr = &bytes[len..needed];
        let be64 = |r: std::ops::Range<usize>| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&tr[r]);
            u64::from_be_bytes(a)
        };
        Ok(Trailer {
            len,
            key_id: u32::from_be_bytes([tr[0], tr[1], tr[2], tr[3]]),
            session: be64(4..12),
            counter: be64(12..20),
        })
    }

    /// Writes the covered fields (not the tag) after the frame in `b`.
    pub(crate) fn write(&self, b: &mut [u8]) {
        let len = self.len;
        b[len..len + 4].copy_from_slice(&self.key_id.to_be_bytes());
        b[len + 4..len + 12].copy_from_slice(&self.session.to_be_bytes());
        b[len + 12..len + 20].copy_from_slice(&self.counter.to_be_bytes());
    }

    /// What an opened frame reports.
    pub fn opened(&self) -> Opened {
        Opened {
            len: self.len,
            session: self.session,
            counter: self.counter,
        }
    }
}

/// The sender node a frame's header names (not yet authentic before its tag
/// is checked). The frame holds at least the 58 header bytes.
pub fn header_src(frame: &[u8]) -> u32 {
    let s = &frame[field::SRC];
    u32::from_be_bytes([s[0], s[1], s[2], s[3]])
}

/// Appends the trailer to the frame of `len` bytes at the start of `buf`
/// (`len` is `58 + payload_len`, as [`mcast_wire::Frame::emit`] returns it)
/// and returns the sealed length; the session key is derived for the node
/// the header names. `None` when `buf` has no room for it. A sender that
/// seals many frames keeps its [`SessionKey`] and calls
/// [`SessionKey::seal`] instead.
pub fn seal(
    buf: &mut [u8],
    len: usize,
    key: &ClusterKey,
    session: u64,
    counter: u64,
) -> Option<usize> {
    if len < FRAME_OVERHEAD {
        return None;
    }
    let src = header_src(buf.get(..FRAME_OVERHEAD)?);
    SessionKey::derive(key, src, session).seal(buf, len, counter)
}

/// Checks a received frame's trailer with the accepted `keys`, deriving the
/// sender's session key. Reads only the payload length and the sender's id
/// before the tag is verified. A receiver of many frames keeps each
/// sender's [`SessionKey`] and calls [`Trailer::read`] and
/// [`SessionKey::verify`] instead.
pub fn open(bytes: &[u8], keys: &Keys) -> Result<Opened, AuthError> {
    let t = Trailer::read(bytes)?;
    let key = keys
        .find(t.key_id)
        .ok_or(AuthError::UnknownKey { id: t.key_id })?;
    let sk = SessionKey::derive(key, header_src(bytes), t.session);
    if sk.verify(bytes, &t) {
        Ok(t.opened())
    } else {
        Err(AuthError::BadTag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::frame;

    fn keys(b: u8) -> Keys {
        Keys::new(ClusterKey::from_bytes(&[b; 32]), None)
    }

    #[test]
    fn a_sealed_frame_opens_with_its_session_and_counter() {
        let (mut buf, len) = frame(1, b"hello");
        let k = keys(1);
        let sealed = seal(&mut buf, len, k.send(), 0xabcdef, 42).unwrap();
        assert_eq!(sealed, len + TRAILER_LEN);
        let o = open(&buf[..sealed], &k).unwrap();
        assert_eq!(
            o,
            Opened {
                len,
                session: 0xabcdef,
                counter: 42
            }
        );
        // Ethernet padding after the trailer changes nothing.
        assert_eq!(open(&buf[..sealed + 20], &k).unwrap(), o);
    }

    #[test]
    fn every_covered_byte_is_covered() {
        let (mut buf, len) = frame(1, b"payload bytes");
        let k = keys(1);
        let sealed = seal(&mut buf, len, k.send(), 5, 6).unwrap();
        for i in 0..sealed {
            if field::PAYLOAD_LEN.contains(&i) {
                continue; // moves the trailer: checked below
            }
            let mut b = buf[..sealed].to_vec();
            b[i] ^= 0x01;
            let e = open(&b, &k).unwrap_err();
            if (len..len + 4).contains(&i) {
                assert!(matches!(e, AuthError::UnknownKey { .. }), "byte {i}: {e}");
            } else {
                assert_eq!(e, AuthError::BadTag, "byte {i}");
            }
        }
        let mut b = buf[..sealed].to_vec();
        b[field::PAYLOAD_LEN.start + 1] -= 1; // one payload byte fewer
        assert!(open(&b, &k).is_err());
    }

    #[test]
    fn another_key_or_a_missing_trailer_is_refused() {
        let (mut buf, len) = frame(1, b"x");
        assert_eq!(
            open(&buf[..len], &keys(1)),
            Err(AuthError::NoTrailer {
                needed: len + TRAILER_LEN,
                got: len
            })
        );
        let sealed = seal(&mut buf, len, keys(1).send(), 1, 1).unwrap();
        let other = keys(2);
        assert_eq!(
            open(&buf[..sealed], &other),
            Err(AuthError::UnknownKey {
                id: keys(1).send().id()
            })
        );
        // A receiver that also accepts the sealing key opens it.
        let rotating = Keys::new(other.send().clone(), Some(keys(1).send().clone()));
        assert!(open(&buf[..sealed], &rotating).is_ok());
        assert!(open(&buf[..10], &keys(1)).is_err());
        assert!(open(&[], &keys(1)).is_err());
    }

    #[test]
    fn a_frame_sealed_under_another_key_with_the_same_id_fails_its_tag() {
        // An attacker can copy an id; the tag still needs the key.
        let (mut buf, len) = frame(1, b"forged");
        let k = keys(1);
        let sealed = seal(&mut buf, len, keys(9).send(), 1, 1).unwrap();
        buf[len..len + 4].copy_from_slice(&k.send().id().to_be_bytes());
        assert_eq!(open(&buf[..sealed], &k), Err(AuthError::BadTag));
    }

    #[test]
    fn seal_needs_room_for_the_trailer() {
        let (mut buf, len) = frame(1, b"abc");
        assert!(seal(&mut buf[..len + TRAILER_LEN - 1], len, keys(1).send(), 1, 1).is_none());
        assert!(seal(&mut buf[..len + TRAILER_LEN], len, keys(1).send(), 1, 1).is_some());
    }
}
