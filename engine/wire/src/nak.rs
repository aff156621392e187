//! The NAK payload: a bounded list of missing ranges, each `start` (u32) and
//! `count` (u32), big-endian, 8 bytes a range, at most [`MAX_NAK_RANGES`].

use crate::{Seq, WireError};

/// The most ranges one NAK carries (512 bytes of payload).
pub const MAX_NAK_RANGES: usize = 64;
/// Bytes per range on the wire.
pub const RANGE_LEN: usize = 8;

/// `count` consecutive sequence numbers from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SeqRange {
    pub start: Seq,
    pub count: u32,
}

impl SeqRange {
    /// True when `seq` is in the range.
    pub const fn contains(&self, seq: Seq) -> bool {
        let d = seq.distance(self.start);
        d >= 0 && (d as u32) < self.count
    }

    /// The sequence after the range's last.
    pub const fn end(&self) -> Seq {
        self.start.add(self.count)
    }
}

/// A bounded, fixed-capacity list of ranges: no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RangeList {
    len: u8,
    items: [SeqRange; MAX_NAK_RANGES],
}

impl Default for RangeList {
    fn default() -> Self {
        RangeList::new()
    }
}

impl core::fmt::Debug for RangeList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|r| (r.start.0, r.count)))
            .finish()
    }
}

impl RangeList {
    /// An empty list.
    pub const fn new() -> RangeList {
        RangeList {
            len: 0,
            items: [SeqRange {
                start: Seq(0),
                count: 0,
            }; MAX_NAK_RANGES],
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len() == MAX_NAK_RANGES
    }

    /// The ranges.
    pub fn iter(&self) -> impl Iterator<Item = &SeqRange> + '_ {
        self.items[..self.len()].iter()
    }

    /// Total sequence numbers covered.
    pub fn seq_count(&self) -> u64 {
        self.iter().map(|r| u64::from(r.count)).sum()
    }

    /// True when some range contains `seq`.
    pub fn contains(&self, seq: Seq) -> bool {
        self.iter().any(|r| r.contains(seq))
    }

    /// Appends `seq`, extending the last range when it is adjacent. Returns false
    /// (and changes nothing) when a new range is needed and the list is full.
    pub fn push_seq(&mut self, seq: Seq) -> bool {
        let len = self.len();
        if let Some(last) = self.items[..len].last_mut() {
            if last.end() == seq {
                last.count += 1;
                return true;
            }
        }
        self.push(SeqRange {
            start: seq,
            count: 1,
        })
    }

    /// Appends a range. Returns false when the list is full or the range is empty.
    pub fn push(&mut self, range: SeqRange) -> bool {
        if self.is_full() || range.count == 0 {
            return false;
        }
        self.items[self.len()] = range;
        self.len += 1;
        true
    }

    /// Bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.len() * RANGE_LEN
    }

    /// Writes the list into `out`, returning the bytes written.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, WireError> {
        let needed = self.wire_len();
        if out.len() < needed {
            return Err(WireError::Truncated {
                needed,
                got: out.len(),
            });
        }
        for (chunk, r) in out.chunks_exact_mut(RANGE_LEN).zip(self.iter()) {
            chunk[..4].copy_from_slice(&r.start.0.to_be_bytes());
            chunk[4..].copy_from_slice(&r.count.to_be_bytes());
        }
        Ok(needed)
    }

    /// Parses a NAK payload.
    pub fn parse(payload: &[u8]) -> Result<RangeList, WireError> {
        if payload.is_empty() {
            return Err(WireError::BadNak {
                reason: "no ranges",
            });
        }
        if payload.len() % RANGE_LEN != 0 {
            return Err(WireError::BadNak {
                reason: "length is not a multiple of 8",
            });
        }
        if payload.len() / RANGE_LEN > MAX_NAK_RANGES {
            return Err(WireError::BadNak {
                reason: "more than 64 ranges",
            });
        }
        let mut list = RangeList::new();
        for chunk in payload.chunks_exact(RANGE_LEN) {
            let start = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let count = u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            if count == 0 {
                return Err(WireError::BadNak {
                    reason: "empty range",
                });
            }
            if count > 1 << 30 {
                return Err(WireError::BadNak {
                    reason: "range longer than 2^30",
                });
            }
            list.push(SeqRange {
                start: Seq(start),
                count,
            });
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_seq_merges_adjacent() {
        let mut l = RangeList::new();
        for s in [u32::MAX, 0, 1, 5] {
            assert!(l.push_seq(Seq(s)));
        }
        assert_eq!(l.len(), 2);
        assert!(l.contains(Seq(0)) && l.contains(Seq(u32::MAX)) && l.contains(Seq(5)));
        assert!(!l.contains(Seq(2)));
        assert_eq!(l.seq_count(), 4);
    }

    #[test]
    fn emit_parse_roundtrip_and_fixture() {
        let mut l = RangeList::new();
        l.push(SeqRange {
            start: Seq(2),
            count: 1,
        });
        l.push(SeqRange {
            start: Seq(4),
            count: 2,
        });
        let mut out = [0u8; 16];
        assert_eq!(l.emit(&mut out).unwrap(), 16);
        assert_eq!(out, [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0, 2]);
        assert_eq!(RangeList::parse(&out).unwrap(), l);
    }

    #[test]
    fn full_list_refuses_more() {
        let mut l = RangeList::new();
        for i in 0..MAX_NAK_RANGES as u32 {
            assert!(l.push_seq(Seq(i * 2)));
        }
        assert!(!l.push_seq(Seq(1000)));
        assert!(
            l.push_seq(Seq((MAX_NAK_RANGES as u32 - 1) * 2 + 1)),
            "adjacent still merges"
        );
    }

    #[test]
    fn malformed_payloads_say_why() {
        assert_eq!(
            RangeList::parse(&[]).unwrap_err(),
            WireError::BadNak {
                reason: "no ranges"
            }
        );
        assert_eq!(
            RangeList::parse(&[0; 7]).unwrap_err(),
            WireError::BadNak {
                reason: "length is not a multiple of 8"
            }
        );
        assert_eq!(
            RangeList::parse(&[0; 8]).unwrap_err(),
            WireError::BadNak {
                reason: "empty range"
            }
        );
        assert_eq!(
            RangeList::parse(&[0; 8 * 65]).unwrap_err(),
            WireError::BadNak {
                reason: "more than 64 ranges"
            }
        );
    }
}
