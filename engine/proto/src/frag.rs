//! Messages larger than one frame: splitting into fragments and reassembling
//! them in the order the reliable stream delivers them.

use mcast_wire::Flags;

/// The fragments of a message of `message_len` bytes with at most
/// `max_payload` bytes a frame: `(offset, len, flags)` each. An empty message
/// is one empty fragment.
pub fn fragments(
    message_len: usize,
    max_payload: usize,
) -> impl Iterator<Item = (usize, usize, Flags)> {
    assert!(max_payload > 0, "max_payload must be positive");
    let count = message_len.div_ceil(max_payload).max(1);
    (0..count).map(move |i| {
        let offset = i * max_payload;
        let len = (message_len - offset).min(max_payload);
        let mut flags = Flags::NONE;
        if i == 0 {
            flags = flags.with(Flags::FRAG_FIRST);
        }
        if i + 1 == count {
            flags = flags.with(Flags::FRAG_LAST);
        }
        (offset, len, flags)
    })
}

/// Why reassembly failed. The partial message is discarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReassemblyError {
    /// A middle or last fragment came without a first (a late joiner sees this once).
    NoFirstFragment,
    /// The message exceeds the configured maximum.
    TooLarge { limit: usize },
}

impl core::fmt::Display for ReassemblyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReassemblyError::NoFirstFragment => write!(f, "fragment without a first fragment"),
            ReassemblyError::TooLarge { limit } => write!(f, "message larger than {limit} bytes"),
        }
    }
}

impl std::error::Error for ReassemblyError {}

/// Joins in-order fragments into messages, up to `max_message` bytes each.
/// The buffer grows to the largest message seen and is then reused.
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    in_progress: bool,
    max_message: usize,
    discarded: u64,
}

impl Reassembler {
    pub fn new(max_message: usize) -> Reassembler {
        Reassembler {
            buf: Vec::new(),
            in_progress: false,
            max_message,
            discarded: 0,
        }
    }

    /// Adds the next fragment. Returns the whole message when `flags` has
    /// FRAG_LAST. A first fragment while a message is incomplete discards the
    /// partial one (counted by [`Reassembler::discarded`]) and starts anew.
    pub fn push(&mut self, flags: Flags, payload: &[u8]) -> Result<Option<&[u8]>, ReassemblyError> {
        if flags.contains(Flags::FRAG_FIRST) {
            if self.in_progress {
                self.discarded += 1;
            }
            self.buf.clear();
            self.in_progress = true;
        } else if !self.in_progress {
            self.discarded += 1;
            return Err(ReassemblyError::NoFirstFragment);
        }
        self.append(payload)?;
        if flags.contains(Flags::FRAG_LAST) {
            self.in_progress = false;
            return Ok(Some(&self.buf));
        }
        Ok(None)
    }

    /// Like [`Reassembler::push`], but the whole message is handed out as an
    /// owned buffer without a second copy: a message of one fragment is
    /// copied once, straight from `payload`; a fragmented one is the
    /// reassembly buffer itself (a fresh one of the same capacity takes its
    /// place). Either way each payload byte is copied exactly once.
    pub fn push_owned(
        &mut self,
        flags: Flags,
        payload: &[u8],
    ) -> Result<Option<Vec<u8>>, ReassemblyError> {
        if flags.contains(Flags::WHOLE) {
            if self.in_progress {
                self.discarded += 1;
                self.in_progress = false;
                self.buf.clear();
            }
            if payload.len() > self.max_message {
                self.discarded += 1;
                return Err(ReassemblyError::TooLarge {
                    limit: self.max_message,
                });
            }
            return Ok(Some(payload.to_vec()));
        }
        Ok(match self.push(flags, payload)? {
            Some(msg) => {
                let cap = msg.len();
                Some(std::mem::replace(&mut self.buf, Vec::with_capacity(cap)))
            }
            None => None,
        })
    }

    /// Partial messages and stray fragments thrown away so far.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    fn append(&mut self, payload: &[u8]) -> Result<(), ReassemblyError> {
        if self.buf.len() + payload.len() > self.max_message {
            self.buf.clear();
            self.in_progress = false;
            self.discarded += 1;
            return Err(ReassemblyError::TooLarge {
                limit: self.max_message,
            });
        }
        self.buf.extend_from_slice(payload);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_join_a_one_mebibyte_message() {
        let msg: Vec<u8> = (0..(1 << 20) + 17).map(|i| (i * 31 % 251) as u8).collect();
        let mut r = Reassembler::new(2 << 20);
        let frags: Vec<_> = fragments(msg.len(), 1456).collect();
        assert_eq!(frags.len(), msg.len().div_ceil(1456));
        let mut out = None;
        for (off, len, flags) in frags {
            if let Some(m) = r.push(flags, &msg[off..off + len]).unwrap() {
                out = Some(m.to_vec());
            }
        }
        assert_eq!(out.as_deref(), Some(&msg[..]));
    }

    #[test]
    fn push_owned_hands_out_the_same_messages_as_push() {
        let first = Flags::FRAG_FIRST;
        let last = Flags::FRAG_LAST;
        let mid = Flags::NONE;
        // Whole, fragmented, a partial cut short by a whole one, a stray
        // fragment, a fragmented one again, one too large.
        let script: Vec<(Flags, Vec<u8>)> = vec![
            (Flags::WHOLE, vec![1; 10]),
            (first, vec![2; 5]),
            (mid, vec![3; 5]),
            (last, vec![4; 3]),
            (first, vec![5; 4]),
            (Flags::WHOLE, vec![6; 2]),
            (mid, vec![7; 2]),
            (first, vec![8; 6]),
            (last, vec![9; 6]),
            (Flags::WHOLE, vec![10; 40]),
            (Flags::WHOLE, vec![]),
        ];
        let (mut a, mut b) = (Reassembler::new(32), Reassembler::new(32));
        for (flags, p) in &script {
            let x = a.push(*flags, p).map(|m| m.map(<[u8]>::to_vec));
            let y = b.push_owned(*flags, p);
            assert_eq!(x, y, "{flags:?}");
        }
        assert_eq!(a.discarded(), b.discarded());
        assert_eq!(b.discarded(), 3);
    }

    #[test]
    fn empty_and_exact_messages() {
        assert_eq!(
            fragments(0, 100).collect::<Vec<_>>(),
            vec![(0, 0, Flags::WHOLE)]
        );
        assert_eq!(
            fragments(100, 100).collect::<Vec<_>>(),
            vec![(0, 100, Flags::WHOLE)]
        );
        assert_eq!(fragments(101, 100).count(), 2);
    }

    #[test]
    fn errors_are_reported_and_recovered_from() {
        let mut r = Reassembler::new(10);
        assert_eq!(
            r.push(Flags::FRAG_LAST, b"x"),
            Err(ReassemblyError::NoFirstFragment)
        );
        assert_eq!(r.push(Flags::FRAG_FIRST, b"abc"), Ok(None));
        assert_eq!(
            r.push(Flags::WHOLE, b"de"),
            Ok(Some(&b"de"[..])),
            "the partial message is dropped, the new one kept"
        );
        assert_eq!(r.push(Flags::FRAG_FIRST, b"123456"), Ok(None));
        assert_eq!(
            r.push(Flags::FRAG_LAST, b"7890x"),
            Err(ReassemblyError::TooLarge { limit: 10 })
        );
        assert_eq!(r.push(Flags::WHOLE, b"ok"), Ok(Some(&b"ok"[..])));
        assert_eq!(r.discarded(), 3);
    }
}
