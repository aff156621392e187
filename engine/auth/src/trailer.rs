//! The authentication trailer: where it sits, sealing a frame with it and
//! opening (checking) a received one.
//!
//! | offset from the payload's end | size | field |
//! |---|---|---|
//! | 0 | 4 | key id ([`ClusterKey::id`]) |
//! | 4 | 8 | session: the sender's, fixed for a run, larger for a later run |
//! | 12 | 8 | counter: the sender's transmit counter in that session, from 1 |
//! | 20 | 16 | tag: keyed BLAKE3 over the frame's first 58 bytes, the payload's [`Digest`] and the trailer's first 20 bytes, truncated |
//!
//! The payload enters the tag through its digest (SHA-256 of the payload), so
//! that a sender hashes a payload once, when it writes it and it is in
//! cache, however many times the frame is sent again with a new header
//! ([`seal_with_digest`]); each transmission then hashes 110 bytes.
//!
//! Owns: the trailer's layout and the tag. May not touch: the frame's other
//! fields, which are read only to find the trailer (`payload_len`).

use std::fmt;

use mcast_wire::{field, FRAME_OVERHEAD};

use crate::key::{ClusterKey, Keys};

/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 36;
/// Bytes of the tag (128 bits).
pub const TAG_LEN: usize = 16;
/// Bytes the tag covers beyond the frame: key id, session, counter.
const COVERED: usize = TRAILER_LEN - TAG_LEN;

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

/// What the tag covers of a payload: its SHA-256 hash.
pub type Digest = [u8; 32];

/// The digest of a payload (no key: the tag is keyed). SHA-256 rather than
/// BLAKE3 because it is the one pass over every payload byte, on the
/// daemon's only thread at both ends, and CPUs with the SHA extensions
/// (`sha2` uses them when present) hash a kilobyte in about 0.6 of
/// BLAKE3's time there (docs/protocol.md §1.9).
pub fn payload_digest(payload: &[u8]) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(payload).into()
}

/// The tag of a frame whose first 58 bytes are `head`, whose payload has
/// `digest`, with the trailer's first 20 bytes `fields`.
fn tag(key: &ClusterKey, head: &[u8], digest: &Digest, fields: &[u8]) -> [u8; TAG_LEN] {
    let mut h = blake3::Hasher::new_keyed(key.mac_key());
    h.update(head);
    h.update(digest);
    h.update(fields);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
    t
}

/// Appends the trailer to the frame of `len` bytes at the start of `buf`
/// (`len` is `58 + payload_len`, as [`mcast_wire::Frame::emit`] returns it)
/// and returns the sealed length. `None` when `buf` has no room for it.
pub fn seal(
    buf: &mut [u8],
    len: usize,
    key: &ClusterKey,
    session: u64,
    counter: u64,
) -> Option<usize> {
    let digest = payload_digest(buf.get(FRAME_OVERHEAD..len)?);
    seal_with_digest(buf, len, key, session, counter, &digest)
}

/// [`seal`] with the payload's digest already computed by whoever wrote the
/// payload ([`payload_digest`]); it must be the digest of `buf[58..len]`
/// (checked in debug builds).
pub fn seal_with_digest(
    buf: &mut [u8],
    len: usize,
    key: &ClusterKey,
    session: u64,
    counter: u64,
    digest: &Digest,
) -> Option<usize> {
    let end = len.checked_add(TRAILER_LEN)?;
    if len < FRAME_OVERHEAD {
        return None;
    }
    let b = buf.get_mut(..end)?;
    debug_assert_eq!(
        *digest,
        payload_digest(&b[FRAME_OVERHEAD..len]),
        "seal_with_digest given the digest of another payload"
    );
    b[len..len + 4].copy_from_slice(&key.id().to_be_bytes());
    b[len + 4..len + 12].copy_from_slice(&session.to_be_bytes());
    b[len + 12..len + 20].copy_from_slice(&counter.to_be_bytes());
    let t = tag(key, &b[..FRAME_OVERHEAD], digest, &b[len..len + COVERED]);
    b[len + COVERED..end].copy_from_slice(&t);
    Some(end)
}

/// Checks a received frame's trailer with the accepted `keys`. Reads only
/// the payload length before the tag is verified.
pub fn open(bytes: &[u8], keys: &Keys) -> Result<Opened, AuthError> {
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
    let id = u32::from_be_bytes([tr[0], tr[1], tr[2], tr[3]]);
    let key = keys.find(id).ok_or(AuthError::UnknownKey { id })?;
    let digest = payload_digest(&bytes[FRAME_OVERHEAD..len]);
    let want = tag(key, &bytes[..FRAME_OVERHEAD], &digest, &tr[..COVERED]);
    let got_tag: &[u8; TAG_LEN] = tr[COVERED..].try_into().expect("16 bytes");
    if !constant_time_eq::constant_time_eq_16(&want, got_tag) {
        return Err(AuthError::BadTag);
    }
    Ok(Opened {
        len,
        session: be64(4..12),
        counter: be64(12..20),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcast_wire::{Frame, Header, Kind, MacAddr};

    fn frame(payload: &[u8]) -> (Vec<u8>, usize) {
        let mut buf = vec![0u8; 2048];
        Frame::<&mut [u8]>::payload_area_mut(&mut buf, payload.len())
            .unwrap()
            .copy_from_slice(payload);
        let mut h = Header::new(Kind::Data);
        h.group = 7;
        h.src = 1;
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

    fn keys(b: u8) -> Keys {
        Keys::new(ClusterKey::from_bytes(&[b; 32]), None)
    }

    #[test]
    fn a_sealed_frame_opens_with_its_session_and_counter() {
        let (mut buf, len) = frame(b"hello");
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
        let (mut buf, len) = frame(b"payload bytes");
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
        let (mut buf, len) = frame(b"x");
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
        let (mut buf, len) = frame(b"forged");
        let k = keys(1);
        let sealed = seal(&mut buf, len, keys(9).send(), 1, 1).unwrap();
        buf[len..len + 4].copy_from_slice(&k.send().id().to_be_bytes());
        assert_eq!(open(&buf[..sealed], &k), Err(AuthError::BadTag));
    }

    #[test]
    fn sealing_with_a_kept_digest_is_sealing() {
        let (mut a, len) = frame(b"the same payload");
        let mut b = a.clone();
        let k = keys(1);
        let n = seal(&mut a, len, k.send(), 3, 4).unwrap();
        let d = payload_digest(&b[FRAME_OVERHEAD..len]);
        assert_eq!(seal_with_digest(&mut b, len, k.send(), 3, 4, &d), Some(n));
        assert_eq!(a[..n], b[..n]);
    }

    #[test]
    fn seal_needs_room_for_the_trailer() {
        let (mut buf, len) = frame(b"abc");
        assert!(seal(&mut buf[..len + TRAILER_LEN - 1], len, keys(1).send(), 1, 1).is_none());
        assert!(seal(&mut buf[..len + TRAILER_LEN], len, keys(1).send(), 1, 1).is_some());
    }
}
