//! A soak message's header: what a publisher stamps on each message (its
//! node, id, incarnation, counter, length, checksum) and reading it back.
//!
//! Owns: the message layout. May not touch: what a stream of them must look like (`checker`).

use super::*;

pub(super) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

pub(super) fn group_tag(name: &str) -> u32 {
    fnv1a(&[name.as_bytes()]) as u32
}

/// One message's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub tag: u32,
    pub node: u32,
    pub publisher: u32,
    pub inc: u64,
    pub counter: u64,
}

/// Writes message `s` with a body of `len` bytes into `out`.
pub fn encode(s: &Stamp, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&s.tag.to_be_bytes());
    out.extend_from_slice(&s.node.to_be_bytes());
    out.extend_from_slice(&s.publisher.to_be_bytes());
    out.extend_from_slice(&s.inc.to_be_bytes());
    out.extend_from_slice(&s.counter.to_be_bytes());
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    let mut x = s.inc ^ s.counter.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 1;
    for _ in 0..len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
    let sum = fnv1a(&[&out[..36], &out[HEADER..]]);
    out[36..44].copy_from_slice(&sum.to_be_bytes());
}

/// The header of an intact message, or why it is not one.
pub fn decode(m: &[u8]) -> Result<Stamp, String> {
    if m.len() < HEADER || &m[..4] != MAGIC {
        return Err(format!("{}-byte message without the soak header", m.len()));
    }
    let u32_at = |i: usize| u32::from_be_bytes(m[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_be_bytes(m[i..i + 8].try_into().expect("8 bytes"));
    let len = u32_at(32) as usize;
    if m.len() != HEADER + len {
        return Err(format!(
            "{} bytes where the header says {}",
            m.len(),
            HEADER + len
        ));
    }
    if u64_at(36) != fnv1a(&[&m[..36], &m[HEADER..]]) {
        return Err("checksum mismatch".into());
    }
    Ok(Stamp {
        tag: u32_at(4),
        node: u32_at(8),
        publisher: u32_at(12),
        inc: u64_at(16),
        counter: u64_at(24),
    })
}
