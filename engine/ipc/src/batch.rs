//! A subscription record of several whole messages (flag
//! [`BATCH`](crate::ring::BATCH)): the daemon hands a batched data frame's
//! payload (docs/protocol.md §1.10) to a subscriber's ring as it came, one
//! record and one copy for all its messages, and the client library lends
//! them one by one (docs/mcastd.md, "Batch records").
//!
//! Owns: the layout of such a record's payload and reading it with every
//! bound checked. Does not touch: the ring (a record is a record to it) or
//! which frames the daemon hands over this way.
//!
//! ```text
//! u16 len (big-endian) | message[len] | u16 len | message[len] | ...
//! ```
//!
//! one or more messages filling the payload exactly: the frame's own
//! records, so the daemon writes them without looking inside.

use crate::ring::Corrupt;

/// The message that starts at byte `at` of a batch record's `payload`,
/// and where the next one starts; `None` at the end. A length running
/// past the payload, a trailing byte, or an empty payload is [`Corrupt`]:
/// the daemon only writes records a frame's check passed, so such a record
/// is a ring someone scribbled on.
pub fn next(payload: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, Corrupt> {
    if at == payload.len() && at > 0 {
        return Ok(None);
    }
    let Some(len) = payload.get(at..at + 2) else {
        return Err(Corrupt(format!(
            "batch record of {} bytes: no length at byte {at}",
            payload.len()
        )));
    };
    let start = at + 2;
    let end = start + usize::from(u16::from_be_bytes([len[0], len[1]]));
    match payload.get(start..end) {
        Some(m) => Ok(Some((m, end))),
        None => Err(Corrupt(format!(
            "batch record of {} bytes: a message of {} bytes at byte {at}",
            payload.len(),
            end - start
        ))),
    }
}

/// Builds a batch record's payload from `messages` (each under 64 KiB):
/// what a batched frame carries, for tests and tools.
pub fn encode<'a>(messages: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        let len = u16::try_from(m.len()).expect("a batched message is under 64 KiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(m);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(payload: &[u8]) -> Result<Vec<Vec<u8>>, Corrupt> {
        let (mut at, mut got) = (0, Vec::new());
        while let Some((m, n)) = next(payload, at)? {
            got.push(m.to_vec());
            at = n;
        }
        Ok(got)
    }

    #[test]
    fn messages_come_back_in_order_and_whole() {
        let msgs: [&[u8]; 4] = [b"a", b"", b"third message", &[7; 300]];
        let p = encode(msgs);
        assert_eq!(all(&p).unwrap(), msgs.map(<[u8]>::to_vec));
    }

    #[test]
    fn a_length_past_the_end_a_trailing_byte_or_nothing_is_corrupt() {
        let p = encode([&b"hello"[..], b"world"]);
        for cut in 1..p.len() {
            let short = &p[..cut];
            // Cut between two messages, what is left is a good record.
            if cut == 7 {
                assert_eq!(all(short).unwrap().len(), 1);
            } else {
                assert!(all(short).is_err(), "cut at {cut}");
            }
        }
        let mut long = p.clone();
        long.push(0);
        assert!(all(&long).is_err(), "a trailing byte");
        assert!(all(&[]).is_err(), "an empty record");
    }
}
