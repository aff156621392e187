//! Batched payloads: several whole messages in one data frame
//! (docs/protocol.md §1.10).
//!
//! A frame with [`Flags::BATCH`] (always together with [`Flags::WHOLE`])
//! carries one or more *records*, back to back, filling the payload exactly:
//!
//! ```text
//! u16 len (big-endian) | bytes[len] | u16 len | bytes[len] | ...
//! ```
//!
//! Owns: the record layout, its validation ([`validate`], run on receipt
//! before any machine sees the frame), reading ([`records`]) and writing in
//! place ([`begin`], [`append`]). Which messages share a frame is the
//! publisher's business (the engine's send queue), not this module's.

use crate::{Flags, WireError};

/// Bytes in front of each record's message: its length.
pub const RECORD_HEADER: usize = 2;

/// Checks a batched payload: the frame is a whole message, there is at least
/// one record, and the records fill the payload exactly. Returns how many
/// records it holds.
pub fn validate(flags: Flags, payload: &[u8]) -> Result<usize, WireError> {
    if !flags.contains(Flags::WHOLE) {
        return Err(WireError::BadBatch {
            reason: "a batch must be a whole message (FRAG_FIRST and FRAG_LAST)",
        });
    }
    if payload.is_empty() {
        return Err(WireError::BadBatch {
            reason: "empty batch",
        });
    }
    let mut rest = payload;
    let mut count = 0;
    while !rest.is_empty() {
        if rest.len() < RECORD_HEADER {
            return Err(WireError::BadBatch {
                reason: "a record's length is cut off",
            });
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        if rest.len() - RECORD_HEADER < len {
            return Err(WireError::BadBatch {
                reason: "a record is longer than the bytes left",
            });
        }
        rest = &rest[RECORD_HEADER + len..];
        count += 1;
    }
    Ok(count)
}

/// The messages of a batched payload, in order. On a payload that
/// [`validate`] refused, it stops at the first bad record (never panics).
pub fn records(payload: &[u8]) -> Records<'_> {
    Records { rest: payload }
}

/// Iterator over a batched payload's messages (see [`records`]).
#[derive(Debug, Clone)]
pub struct Records<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.rest;
        if rest.len() < RECORD_HEADER {
            self.rest = &[];
            return None;
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let Some(msg) = rest.get(RECORD_HEADER..RECORD_HEADER + len) else {
            self.rest = &[];
            return None;
        };
        self.rest = &rest[RECORD_HEADER + len..];
        Some(msg)
    }
}

/// Payload bytes a frame holding one message of `len` bytes needs once it
/// becomes a batch with another of `next` bytes (`batched`: it already is one).
#[inline]
pub const fn len_after_append(len: usize, batched: bool, next: usize) -> usize {
    let header = if batched { 0 } else { RECORD_HEADER };
    len + header + RECORD_HEADER + next
}

/// Turns a payload holding one message of `len` bytes at the start of
/// `area` into a batch of one record (the message moves up by
/// [`RECORD_HEADER`] bytes). Returns the payload's new length.
///
/// # Panics
/// If `area` is shorter than `len + RECORD_HEADER` or `len` exceeds a u16.
pub fn begin(area: &mut [u8], len: usize) -> usize {
    let n = u16::try_from(len).expect("a record's length fits in 16 bits");
    area.copy_within(0..len, RECORD_HEADER);
    area[..RECORD_HEADER].copy_from_slice(&n.to_be_bytes());
    len + RECORD_HEADER
}

/// Appends `msg` as a record at `len`, the end of a batch in `area`.
/// Returns the payload's new length.
///
/// # Panics
/// If `area` is shorter than the new length or `msg` is longer than a u16.
pub fn append(area: &mut [u8], len: usize, msg: &[u8]) -> usize {
    let n = u16::try_from(msg.len()).expect("a record's length fits in 16 bits");
    let end = len + RECORD_HEADER + msg.len();
    area[len..len + RECORD_HEADER].copy_from_slice(&n.to_be_bytes());
    area[len + RECORD_HEADER..end].copy_from_slice(msg);
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    const BATCH: Flags = Flags(Flags::WHOLE.0 | Flags::BATCH.0);

    #[test]
    fn written_records_read_back_in_order() {
        let mut area = [0u8; 64];
        area[..3].copy_from_slice(b"abc");
        let mut len = begin(&mut area, 3);
        assert_eq!(len, 5);
        len = append(&mut area, len, b"");
        len = append(&mut area, len, b"hello");
        assert_eq!(len, len_after_append(5, true, 0) + RECORD_HEADER + 5);
        assert_eq!(&area[..len], b"\x00\x03abc\x00\x00\x00\x05hello");
        assert_eq!(validate(BATCH, &area[..len]), Ok(3));
        let got: Vec<&[u8]> = records(&area[..len]).collect();
        assert_eq!(got, [&b"abc"[..], b"", b"hello"]);
    }

    #[test]
    fn the_size_of_a_frame_that_becomes_a_batch() {
        // One message of 10: header for it and for the next.
        assert_eq!(len_after_append(10, false, 4), 10 + 2 + 2 + 4);
        assert_eq!(len_after_append(10, true, 4), 10 + 2 + 4);
    }

    #[test]
    fn malformed_batches_are_refused_with_their_reason() {
        let cases: [(Flags, &[u8], &str); 5] = [
            (BATCH, b"", "empty"),
            (BATCH, b"\x00\x03ab", "longer"),
            (BATCH, b"\x00\x01a\x00", "cut off"),
            (BATCH, b"\x00\x05abc", "longer"),
            (
                Flags(Flags::FRAG_FIRST.0 | Flags::BATCH.0),
                b"\x00\x00",
                "whole",
            ),
        ];
        for (flags, payload, why) in cases {
            let e = validate(flags, payload).unwrap_err();
            assert!(
                matches!(e, WireError::BadBatch { reason } if reason.contains(why)),
                "{payload:?}: {e:?}"
            );
            // Reading a refused payload stops without panicking.
            let _ = records(payload).count();
        }
        assert_eq!(validate(BATCH, b"\x00\x00"), Ok(1));
    }
}
