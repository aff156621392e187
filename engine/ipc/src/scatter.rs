//! A scattering's parts in one record (and one message on the wire): each
//! part for one member of a total-order group, all delivered under one
//! stamp (docs/protocol.md §6.4, "Scattering").
//!
//! Owns: the encoding, `count u32` then per part `node u32, member u64,
//! length u32, bytes` (big-endian), and its checks. A part names its member
//! as the group's view lists it: its node and its member id there. The
//! client encodes; the daemon checks the parts' members and the mode
//! decodes at delivery.

/// A part: the member's node and member id, and its bytes.
pub type Part<'a> = (u32, u64, &'a [u8]);

/// Bytes of a part's header.
const PART_HEADER: usize = 4 + 8 + 4;

/// Bytes of the encoding beyond the parts' own.
pub fn overhead(parts: usize) -> usize {
    4 + parts * PART_HEADER
}

/// `parts` encoded into `out` (cleared).
pub fn encode(parts: &[Part<'_>], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(overhead(parts.len()) + parts.iter().map(|p| p.2.len()).sum::<usize>());
    out.extend_from_slice(&(parts.len() as u32).to_be_bytes());
    for (node, member, part) in parts {
        out.extend_from_slice(&node.to_be_bytes());
        out.extend_from_slice(&member.to_be_bytes());
        out.extend_from_slice(&(part.len() as u32).to_be_bytes());
        out.extend_from_slice(part);
    }
}

/// The parts of an encoded scattering, or why it is not one.
pub fn decode(buf: &[u8]) -> Result<Vec<Part<'_>>, String> {
    let take = |at: usize, n: usize| buf.get(at..at + n).ok_or("a scattering cut short");
    let count = u32::from_be_bytes(take(0, 4)?.try_into().expect("4 bytes")) as usize;
    if count == 0 {
        return Err("a scattering without parts".into());
    }
    // Each part takes its header at least: a count beyond is a lie.
    if overhead(count) > buf.len() {
        return Err(format!(
            "a scattering of {count} parts in {} bytes",
            buf.len()
        ));
    }
    let mut parts = Vec::with_capacity(count);
    let mut at = 4;
    for _ in 0..count {
        let node = u32::from_be_bytes(take(at, 4)?.try_into().expect("4 bytes"));
        let member = u64::from_be_bytes(take(at + 4, 8)?.try_into().expect("8 bytes"));
        let len = u32::from_be_bytes(take(at + 12, 4)?.try_into().expect("4 bytes")) as usize;
        parts.push((node, member, take(at + PART_HEADER, len)?));
        at += PART_HEADER + len;
    }
    if at != buf.len() {
        return Err(format!(
            "{} bytes after a scattering's parts",
            buf.len() - at
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_come_back_as_they_went_and_bad_encodings_are_refused() {
        let mut buf = Vec::new();
        encode(
            &[(1, 7, b"seven"), (2, 9, b""), (3, 1 << 40, b"big")],
            &mut buf,
        );
        assert_eq!(buf.len(), overhead(3) + 8);
        let parts = decode(&buf).unwrap();
        let want: [Part<'_>; 3] = [(1, 7, b"seven"), (2, 9, b""), (3, 1 << 40, b"big")];
        assert_eq!(parts, want);
        assert!(decode(&buf[..buf.len() - 1]).is_err(), "cut short");
        let mut longer = buf.clone();
        longer.push(0);
        assert!(decode(&longer).is_err(), "bytes after");
        assert!(decode(&0u32.to_be_bytes()).is_err(), "no parts");
        assert!(
            decode(&u32::MAX.to_be_bytes()).is_err(),
            "a count beyond the bytes"
        );
        assert!(decode(&[]).is_err());
    }
}
