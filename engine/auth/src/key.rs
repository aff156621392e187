//! Cluster keys: 32 random bytes, written as 64 hexadecimal digits on one
//! line (`mcast keygen`), and the two keys a node accepts during a rotation.
//!
//! Owns: the key's text format, its id, and the MAC key derived from it. May
//! not touch: files (the daemon reads the key file and checks who may read
//! it).

use std::fmt;

/// Context of the MAC key's derivation (BLAKE3 `derive_key`): the file's
/// bytes are never used as a key directly.
const MAC_CONTEXT: &str = "mcast 2026-11-25 frame MAC v1";
/// Context of the key id's derivation.
const ID_CONTEXT: &str = "mcast 2026-11-25 key id v1";

/// One cluster key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey {
    mac_key: [u8; 32],
    id: u32,
}

impl fmt::Debug for ClusterKey {
    /// Shows the id only: a key never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterKey({})", self.id_hex())
    }
}

/// Why a key's text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Not 64 hexadecimal digits.
    Format(String),
    /// The OS random source failed.
    Random(String),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Format(why) => write!(f, "not a cluster key: {why} (a key file holds 64 hexadecimal digits on one line; `mcast keygen FILE` writes one)"),
            KeyError::Random(why) => write!(f, "cannot draw a random key: {why}"),
        }
    }
}

impl std::error::Error for KeyError {}

impl ClusterKey {
    /// The key of these 32 bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> ClusterKey {
        let mac_key = blake3::derive_key(MAC_CONTEXT, bytes);
        let idb = blake3::derive_key(ID_CONTEXT, bytes);
        ClusterKey {
            mac_key,
            id: u32::from_be_bytes([idb[0], idb[1], idb[2], idb[3]]),
        }
    }

    /// Parses a key file's text: 64 hexadecimal digits, surrounding white
    /// space ignored.
    pub fn parse(text: &str) -> Result<ClusterKey, KeyError> {
        let t = text.trim();
        if t.len() != 64 {
            return Err(KeyError::Format(format!(
                "{} characters where 64 hexadecimal digits were expected",
                t.chars().count()
            )));
        }
        let mut bytes = [0u8; 32];
        for (i, pair) in t.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => bytes[i] = (h * 16 + l) as u8,
                _ => {
                    return Err(KeyError::Format(format!(
                        "character {} is not a hexadecimal digit",
                        2 * i + 1 + usize::from(digit(pair[0]).is_some())
                    )))
                }
            }
        }
        Ok(ClusterKey::from_bytes(&bytes))
    }

    /// A new random key's file text (64 digits and a newline).
    pub fn generate_text() -> Result<String, KeyError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| KeyError::Random(e.to_string()))?;
        let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        s.push('\n');
        Ok(s)
    }

    /// The key's id: carried in every frame so that a receiver holding two
    /// keys knows which one to check with. Derived from the key, it tells
    /// nothing about it.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The id as 8 hexadecimal digits, as logs and `mcast stat` show it.
    pub fn id_hex(&self) -> String {
        format!("{:08x}", self.id)
    }

    pub(crate) fn mac_key(&self) -> &[u8; 32] {
        &self.mac_key
    }
}

/// The keys of a node: the one it seals with, and at most one more it also
/// accepts (a rotation's old or next key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    send: ClusterKey,
    also: Option<ClusterKey>,
}

impl Keys {
    /// Seals with and accepts `send`; also accepts `also`.
    pub fn new(send: ClusterKey, also: Option<ClusterKey>) -> Keys {
        Keys { send, also }
    }

    /// The key frames are sealed with.
    pub fn send(&self) -> &ClusterKey {
        &self.send
    }

    /// The other accepted key, if any.
    pub fn also(&self) -> Option<&ClusterKey> {
        self.also.as_ref()
    }

    /// The accepted key of this id.
    pub fn find(&self, id: u32) -> Option<&ClusterKey> {
        if self.send.id == id {
            Some(&self.send)
        } else {
            self.also.as_ref().filter(|k| k.id == id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_parses_back_and_two_keys_differ() {
        let a = ClusterKey::generate_text().unwrap();
        let b = ClusterKey::generate_text().unwrap();
        assert_eq!(a.len(), 65);
        assert!(a.ends_with('\n'));
        let (ka, kb) = (
            ClusterKey::parse(&a).unwrap(),
            ClusterKey::parse(&b).unwrap(),
        );
        assert_ne!(ka, kb);
        assert_ne!(ka.id(), kb.id());
        assert_eq!(ClusterKey::parse(&a).unwrap(), ka);
    }

    #[test]
    fn upper_and_lower_case_digits_are_the_same_key() {
        let lower = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let upper = lower.to_uppercase();
        assert_eq!(
            ClusterKey::parse(lower).unwrap(),
            ClusterKey::parse(&format!("  {upper}\n")).unwrap()
        );
    }

    #[test]
    fn malformed_keys_are_refused_with_the_reason() {
        let short = ClusterKey::parse("abcd").unwrap_err().to_string();
        assert!(short.contains("4 characters"), "{short}");
        assert!(short.contains("mcast keygen"), "{short}");
        let mut bad = "0".repeat(64);
        bad.replace_range(9..10, "g");
        let e = ClusterKey::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("character 10 is not"), "{e}");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let k = ClusterKey::from_bytes(&[7; 32]);
        let d = format!("{k:?} {:?}", Keys::new(k.clone(), None));
        assert!(d.contains(&k.id_hex()), "{d}");
        assert!(!d.contains("mac_key"), "{d}");
        assert!(!d.contains("[7"), "{d}");
    }

    #[test]
    fn keys_find_both_accepted_keys_and_nothing_else() {
        let (a, b, c) = (
            ClusterKey::from_bytes(&[1; 32]),
            ClusterKey::from_bytes(&[2; 32]),
            ClusterKey::from_bytes(&[3; 32]),
        );
        let keys = Keys::new(a.clone(), Some(b.clone()));
        assert_eq!(keys.find(a.id()), Some(&a));
        assert_eq!(keys.find(b.id()), Some(&b));
        assert_eq!(keys.find(c.id()), None);
        assert_eq!(Keys::new(a.clone(), None).find(b.id()), None);
    }
}
