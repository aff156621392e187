//! Session keys: the AES-256-GCM key one sender seals its frames with for
//! one run, and the tag it makes over a frame.
//!
//! A cluster key never seals a frame itself. Each sender's run (its node id
//! and session, both in every frame it sends) has its own key, derived from
//! the cluster key's MAC key with BLAKE3 `derive_key`; within the run the
//! trailer's transmit counter is the GCM nonce. A counter is never used
//! twice in a run, and a run's (node, session) is never used again (a later
//! run's session is larger), so no key ever sees a nonce twice, which is
//! what GCM's security rests on. The tag is AES-GMAC's: GCM with no
//! plaintext, over the frame from its first byte to the trailer's tag as
//! additional data (headers, payload, key id, session, counter: contiguous,
//! so nothing is copied). docs/protocol.md §1.9 says why this construction.
//!
//! Owns: the derivation of session keys and the tag. May not touch: the
//! trailer's layout ([`crate::trailer`] reads and writes it) or which
//! session key a receiver keeps for which sender (the engine's cache).

use std::fmt;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

use crate::key::ClusterKey;
use crate::trailer::{Trailer, COVERED, TAG_LEN};
use mcast_wire::FRAME_OVERHEAD;

/// Context of a session key's derivation (BLAKE3 `derive_key`).
const SESSION_CONTEXT: &str = "mcast 2026-11-27 frame session key v2";

/// The key one sender's run seals with.
pub struct SessionKey {
    key_id: u32,
    src: u32,
    session: u64,
    aead: LessSafeKey,
}

impl fmt::Debug for SessionKey {
    /// Shows whose key it is, never the key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SessionKey(key {:08x}, node {}, session {})",
            self.key_id, self.src, self.session
        )
    }
}

impl SessionKey {
    /// The key node `src` seals with in `session` under the cluster `key`.
    /// About 0.3 µs: a receiver keeps the key of each sender it hears.
    pub fn derive(key: &ClusterKey, src: u32, session: u64) -> SessionKey {
        let mut h = blake3::Hasher::new_derive_key(SESSION_CONTEXT);
        h.update(key.mac_key());
        h.update(&src.to_be_bytes());
        h.update(&session.to_be_bytes());
        let bytes = h.finalize();
        let unbound = UnboundKey::new(&AES_256_GCM, bytes.as_bytes()).expect("32-byte AES-256 key");
        SessionKey {
            key_id: key.id(),
            src,
            session,
            aead: LessSafeKey::new(unbound),
        }
    }

    /// Whether this is the key of frames sealed with cluster key `key_id`
    /// by `src` in `session`.
    pub fn is_for(&self, key_id: u32, src: u32, session: u64) -> bool {
        self.key_id == key_id && self.src == src && self.session == session
    }

    /// The tag of `frame`, whose payload ends at `len` and whose trailer's
    /// first 20 bytes follow it, sealed with transmit counter `counter`.
    fn tag(&self, frame: &[u8], len: usize, counter: u64) -> [u8; TAG_LEN] {
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&counter.to_be_bytes());
        let tag = self
            .aead
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&frame[..len + COVERED]),
                &mut [],
            )
            .expect("a frame is far below GCM's length limit");
        let mut t = [0u8; TAG_LEN];
        t.copy_from_slice(tag.as_ref());
        t
    }

    /// Writes the trailer (this key's id and session, `counter`) after the
    /// frame of `len` bytes at the start of `buf` and the tag into it;
    /// returns the sealed length, or `None` when `buf` has no room. The
    /// frame's header must name this key's node as its sender (checked in
    /// debug builds), and `counter` must never have sealed another frame
    /// with this key.
    pub fn seal(&self, buf: &mut [u8], len: usize, counter: u64) -> Option<usize> {
        if len < FRAME_OVERHEAD {
            return None;
        }
        let end = len.checked_add(crate::TRAILER_LEN)?;
        let b = buf.get_mut(..end)?;
        debug_assert_eq!(
            crate::trailer::header_src(b),
            self.src,
            "sealed with another node's session key"
        );
        Trailer {
            len,
            key_id: self.key_id,
            session: self.session,
            counter,
        }
        .write(b);
        let t = self.tag(b, len, counter);
        b[len + COVERED..end].copy_from_slice(&t);
        Some(end)
    }

    /// Checks the tag of a received frame whose trailer `t` was read
    /// ([`Trailer::read`]) and names this key.
    pub fn verify(&self, bytes: &[u8], t: &Trailer) -> bool {
        debug_assert!(self.key_id == t.key_id && self.session == t.session);
        let want = self.tag(bytes, t.len, t.counter);
        let got: &[u8; TAG_LEN] = bytes[t.len + COVERED..t.len + crate::TRAILER_LEN]
            .try_into()
            .expect("16 bytes");
        constant_time_eq::constant_time_eq_16(&want, got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::frame;
    use crate::trailer::{open, seal};
    use crate::Keys;
    use mcast_wire::field;

    #[test]
    fn a_kept_key_seals_what_the_stateless_seal_does() {
        let key = ClusterKey::from_bytes(&[4; 32]);
        let sk = SessionKey::derive(&key, 5, 77);
        let (mut a, len) = frame(5, b"the same frame");
        let mut b = a.clone();
        let n = sk.seal(&mut a, len, 9).unwrap();
        assert_eq!(seal(&mut b, len, &key, 77, 9), Some(n));
        assert_eq!(a[..n], b[..n]);
        let t = Trailer::read(&a[..n]).unwrap();
        assert!(sk.verify(&a[..n], &t));
        assert!(sk.is_for(key.id(), 5, 77) && !sk.is_for(key.id(), 5, 78));
    }

    #[test]
    fn each_sender_run_and_counter_has_its_own_tag() {
        // The same payload from another node or run, or with another
        // counter (nonce), carries another tag.
        let key = ClusterKey::from_bytes(&[4; 32]);
        let tag_of = |src: u32, session: u64, counter: u64| {
            let (mut b, len) = frame(src, b"payload");
            let n = SessionKey::derive(&key, src, session)
                .seal(&mut b, len, counter)
                .unwrap();
            b[n - TAG_LEN..n].to_vec()
        };
        let base = tag_of(1, 1, 1);
        assert_ne!(base, tag_of(2, 1, 1));
        assert_ne!(base, tag_of(1, 2, 1));
        assert_ne!(base, tag_of(1, 1, 2));
        assert_eq!(base, tag_of(1, 1, 1));
    }

    #[test]
    fn a_frame_opens_only_in_the_name_of_the_node_that_sealed_it() {
        // Sealed by node 1; the header then says node 2: node 2's session
        // key does not make that tag.
        let keys = Keys::new(ClusterKey::from_bytes(&[4; 32]), None);
        let (mut b, len) = frame(1, b"mine");
        let n = seal(&mut b, len, keys.send(), 3, 3).unwrap();
        assert!(open(&b[..n], &keys).is_ok());
        b[field::SRC].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(open(&b[..n], &keys), Err(crate::AuthError::BadTag));
    }
}
