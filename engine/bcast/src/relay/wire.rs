//! The relay's messages between members, and their encoding.
//!
//! They travel over reliable, in-order links between members (mcastd's
//! links); the link tells the receiver who sent them. All integers are
//! big-endian; every message is a tag byte, then its fields, and nothing
//! after them.
//!
//! | tag | message | fields after the tag |
//! |---|---|---|
//! | 1 | DATA | root u32, seq u64, epoch u64, stable u64, flags u8 (1 direct, 2 answer GOT), algorithm u8, k u32, pieces u32, len u64, first u32, count u32, then the carried pieces' bytes |
//! | 2 | POS | root u32, next u64 |
//! | 3 | START | root u32, epoch u64, seq u64 |
//! | 4 | SYNC | epoch u64, root u32, has u8 (0/1), start u64, next u64, skips u32, then skips × (from u64, to u64) |
//! | 5 | DONE | epoch u64, root u32 |
//! | 6 | GOT | root u32, seq u64, first u32: the DATA that asked for it arrived |
//! | 7 | REFEED | root u32, seq u64, to u32: re-feed member `to` the root's message `seq` (the root to a nearer holder, or handed back) |
//!
//! `algorithm` is 1 iterative, 2 hypercube-naive, 3 hypercube, 4 mst,
//! 5 rsbcast, 6 chain (with `k` segments; `k` is 0 otherwise),
//! 7 scatter-collect, 8 scatter-collect-2d, 9 def (with `k` segments, as
//! the chain). A decoder rejects a truncated
//! message, trailing bytes, an unknown tag or algorithm, a boolean other
//! than 0/1, DATA flags beyond 1 and 2, a DATA whose bytes are not exactly its pieces' bytes, pieces
//! outside the message, a length above [`MAX_LEN`], a SYNC whose start
//! is above its next, and a SYNC whose skipped ranges are more than
//! [`MAX_SKIPS`], empty, out of order, overlapping or outside start..next
//! (or present without `has`).

use crate::plan::{piece_range, Algorithm};

/// The largest message a relay carries.
pub const MAX_LEN: u64 = 1 << 30;

/// The most skipped ranges a SYNC carries.
pub const MAX_SKIPS: usize = 1024;

/// Where a member stands in one root's sequence, as its SYNC says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Has {
    /// The first sequence it holds or skipped.
    pub start: u64,
    /// The next sequence it will deliver.
    pub next: u64,
    /// Ranges of start..next it skipped because no survivor held them in
    /// an earlier round (a departed root's): it holds none of them, and no
    /// survivor delivered them. Ascending and disjoint.
    pub skipped: Vec<(u64, u64)>,
}

impl Has {
    /// Whether the member holds `seq`: delivered it and did not skip it.
    pub fn holds(&self, seq: u64) -> bool {
        (self.start..self.next).contains(&seq)
            && !self.skipped.iter().any(|&(a, b)| (a..b).contains(&seq))
    }
}

/// One decoded message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Pieces of one broadcast message.
    Data(Data),
    /// A member's position in a root's sequence: it delivered everything
    /// below `next` (to the root, for its stability count).
    Pos {
        /// The root.
        root: u32,
        /// The next sequence the member will deliver.
        next: u64,
    },
    /// The root tells a member added to its view where its sequence begins
    /// for that member.
    Start {
        /// The root.
        root: u32,
        /// The root's view epoch that added the member.
        epoch: u64,
        /// The first sequence the member is owed.
        seq: u64,
    },
    /// After a view change: where the sender stands in `root`'s sequence.
    Sync {
        /// The view being installed.
        epoch: u64,
        /// The root concerned.
        root: u32,
        /// What the sender holds: `None` when it was never given a start.
        has: Option<Has>,
    },
    /// The sender finished the round for a departed root in this view.
    Done {
        /// The view of the round.
        epoch: u64,
        /// The departed root.
        root: u32,
    },
    /// The root asks a member to re-feed `to` its message `seq` (the
    /// member's nearest live ancestor in the message's tree), or a member
    /// that does not hold it hands the request back.
    Refeed {
        /// The root.
        root: u32,
        /// Its sequence.
        seq: u64,
        /// The member to re-feed.
        to: u32,
    },
    /// A DATA with `answer` arrived (whatever became of it).
    Got {
        /// Its root.
        root: u32,
        /// Its sequence.
        seq: u64,
        /// Its first piece.
        first: u32,
    },
}

/// Pieces of one broadcast message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// The member whose message it is.
    pub root: u32,
    /// Its sequence number in the root's sequence.
    pub seq: u64,
    /// The root's view epoch when it sent the message: the schedule's view.
    pub epoch: u64,
    /// The root's stability: every member had delivered below it.
    pub stable: u64,
    /// A re-feed, sent straight to one member: never forwarded.
    pub direct: bool,
    /// The sender sends its next large transfer once this one arrived:
    /// answer with [`Msg::Got`] at once.
    pub answer: bool,
    /// The schedule's algorithm.
    pub algorithm: Algorithm,
    /// The pieces the message is cut into.
    pub pieces: u32,
    /// The message's length.
    pub len: u64,
    /// The first piece carried.
    pub first: u32,
    /// Pieces carried.
    pub count: u32,
    /// The carried pieces' bytes.
    pub bytes: Vec<u8>,
}

fn algorithm_code(a: Algorithm) -> (u8, u32) {
    match a {
        Algorithm::Iterative => (1, 0),
        Algorithm::HypercubeNaive => (2, 0),
        Algorithm::Hypercube => (3, 0),
        Algorithm::Mst => (4, 0),
        Algorithm::RsBcast => (5, 0),
        Algorithm::Chain { segments } => (6, segments),
        Algorithm::ScatterCollect => (7, 0),
        Algorithm::ScatterCollect2d => (8, 0),
        Algorithm::Def { segments } => (9, segments),
    }
}

fn algorithm_of(code: u8, k: u32) -> Option<Algorithm> {
    Some(match (code, k) {
        (1, 0) => Algorithm::Iterative,
        (2, 0) => Algorithm::HypercubeNaive,
        (3, 0) => Algorithm::Hypercube,
        (4, 0) => Algorithm::Mst,
        (5, 0) => Algorithm::RsBcast,
        (6, k) if k > 0 => Algorithm::Chain { segments: k },
        (7, 0) => Algorithm::ScatterCollect,
        (8, 0) => Algorithm::ScatterCollect2d,
        (9, k) if k > 0 => Algorithm::Def { segments: k },
        _ => return None,
    })
}

/// The number of pieces `algorithm` cuts a message into for `p` members.
pub fn pieces(algorithm: Algorithm, p: u32) -> u32 {
    match algorithm {
        Algorithm::Chain { segments } | Algorithm::Def { segments } => segments,
        Algorithm::ScatterCollect | Algorithm::ScatterCollect2d => p,
        _ => 1,
    }
}

impl Msg {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self {
            Msg::Data(d) => return encode_data(d, &d.bytes),
            Msg::Pos { root, next } => {
                v.push(2);
                v.extend_from_slice(&root.to_be_bytes());
                v.extend_from_slice(&next.to_be_bytes());
            }
            Msg::Start { root, epoch, seq } => {
                v.push(3);
                v.extend_from_slice(&root.to_be_bytes());
                v.extend_from_slice(&epoch.to_be_bytes());
                v.extend_from_slice(&seq.to_be_bytes());
            }
            Msg::Sync { epoch, root, has } => {
                v.push(4);
                v.extend_from_slice(&epoch.to_be_bytes());
                v.extend_from_slice(&root.to_be_bytes());
                let none = Has::default();
                let h = has.as_ref().unwrap_or(&none);
                v.push(u8::from(has.is_some()));
                v.extend_from_slice(&h.start.to_be_bytes());
                v.extend_from_slice(&h.next.to_be_bytes());
                v.extend_from_slice(&(h.skipped.len() as u32).to_be_bytes());
                for (a, b) in &h.skipped {
                    v.extend_from_slice(&a.to_be_bytes());
                    v.extend_from_slice(&b.to_be_bytes());
                }
            }
            Msg::Done { epoch, root } => {
                v.push(5);
                v.extend_from_slice(&epoch.to_be_bytes());
                v.extend_from_slice(&root.to_be_bytes());
            }
            Msg::Got { root, seq, first } => {
                v.push(6);
                v.extend_from_slice(&root.to_be_bytes());
                v.extend_from_slice(&seq.to_be_bytes());
                v.extend_from_slice(&first.to_be_bytes());
            }
            Msg::Refeed { root, seq, to } => {
                v.push(7);
                v.extend_from_slice(&root.to_be_bytes());
                v.extend_from_slice(&seq.to_be_bytes());
                v.extend_from_slice(&to.to_be_bytes());
            }
        }
        v
    }

    /// Decodes one message (a DATA's pieces checked by [`Data::check`]).
    pub fn decode(b: &[u8]) -> Result<Msg, String> {
        let mut r = Reader(b);
        let msg = match r.u8()? {
            1 => {
                let root = r.u32()?;
                let seq = r.u64()?;
                let epoch = r.u64()?;
                let stable = r.u64()?;
                let flags = r.u8()?;
                if flags & !3 != 0 {
                    return Err(format!("DATA flags {flags:#x}"));
                }
                let (direct, answer) = (flags & 1 != 0, flags & 2 != 0);
                let (code, k) = (r.u8()?, r.u32()?);
                let algorithm = algorithm_of(code, k).ok_or("unknown algorithm")?;
                let pieces = r.u32()?;
                let len = r.u64()?;
                if len > MAX_LEN {
                    return Err(format!("message of {len} bytes, above {MAX_LEN}"));
                }
                let (first, count) = (r.u32()?, r.u32()?);
                let d = Data {
                    root,
                    seq,
                    epoch,
                    stable,
                    direct,
                    answer,
                    algorithm,
                    pieces,
                    len,
                    first,
                    count,
                    bytes: r.0.to_vec(),
                };
                r.0 = &[];
                d.check()?;
                Msg::Data(d)
            }
            2 => Msg::Pos {
                root: r.u32()?,
                next: r.u64()?,
            },
            3 => Msg::Start {
                root: r.u32()?,
                epoch: r.u64()?,
                seq: r.u64()?,
            },
            4 => {
                let epoch = r.u64()?;
                let root = r.u32()?;
                let has = r.flag()?;
                let (start, next) = (r.u64()?, r.u64()?);
                if has && start > next {
                    return Err("a SYNC whose start is above its next".into());
                }
                let skips = r.u32()? as usize;
                if skips > MAX_SKIPS || (skips > 0 && !has) {
                    return Err(format!("a SYNC with {skips} skipped ranges"));
                }
                let mut skipped = Vec::with_capacity(skips);
                let mut at = start;
                for _ in 0..skips {
                    let (a, b) = (r.u64()?, r.u64()?);
                    if a < at || b <= a || b > next {
                        return Err(format!("a SYNC's skipped range {a}..{b} out of place"));
                    }
                    skipped.push((a, b));
                    at = b;
                }
                Msg::Sync {
                    epoch,
                    root,
                    has: has.then_some(Has {
                        start,
                        next,
                        skipped,
                    }),
                }
            }
            5 => Msg::Done {
                epoch: r.u64()?,
                root: r.u32()?,
            },
            6 => Msg::Got {
                root: r.u32()?,
                seq: r.u64()?,
                first: r.u32()?,
            },
            7 => Msg::Refeed {
                root: r.u32()?,
                seq: r.u64()?,
                to: r.u32()?,
            },
            t => return Err(format!("unknown tag {t}")),
        };
        if !r.0.is_empty() {
            return Err("bytes after the last field".into());
        }
        Ok(msg)
    }
}

/// A DATA message with `head`'s fields (its own `bytes` ignored) carrying
/// `bytes`: the pieces are copied once, straight into the message.
pub fn encode_data(head: &Data, bytes: &[u8]) -> Vec<u8> {
    let (code, k) = algorithm_code(head.algorithm);
    let mut v = Vec::with_capacity(DATA_HEAD + bytes.len());
    v.push(1);
    v.extend_from_slice(&head.root.to_be_bytes());
    v.extend_from_slice(&head.seq.to_be_bytes());
    v.extend_from_slice(&head.epoch.to_be_bytes());
    v.extend_from_slice(&head.stable.to_be_bytes());
    v.push(u8::from(head.direct) | u8::from(head.answer) << 1);
    v.push(code);
    v.extend_from_slice(&k.to_be_bytes());
    v.extend_from_slice(&head.pieces.to_be_bytes());
    v.extend_from_slice(&head.len.to_be_bytes());
    v.extend_from_slice(&head.first.to_be_bytes());
    v.extend_from_slice(&head.count.to_be_bytes());
    v.extend_from_slice(bytes);
    v
}

/// The bytes of a DATA message before its pieces.
pub const DATA_HEAD: usize = 55;

impl Data {
    /// Checks the pieces: within the message, and the bytes exactly the
    /// pieces' bytes.
    pub fn check(&self) -> Result<(), String> {
        let schedule_pieces = self.pieces;
        let end = u64::from(self.first) + u64::from(self.count);
        if self.count == 0 || end > u64::from(schedule_pieces) {
            return Err(format!(
                "pieces {}..{end} outside the message's {schedule_pieces}",
                self.first
            ));
        }
        let want = piece_range(self.len, schedule_pieces, self.first + self.count - 1).end
            - piece_range(self.len, schedule_pieces, self.first).start;
        if want != self.bytes.len() as u64 {
            return Err(format!("{} bytes for pieces of {want}", self.bytes.len()));
        }
        Ok(())
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        if self.0.len() < N {
            return Err("truncated".into());
        }
        let (a, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(a.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn flag(&mut self) -> Result<bool, String> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(format!("a boolean of {b}")),
        }
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.take()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_round_trips_and_damage_is_refused() {
        let msgs = [
            Msg::Data(Data {
                root: 3,
                seq: 9,
                epoch: 2,
                stable: 4,
                direct: true,
                answer: true,
                algorithm: Algorithm::Chain { segments: 4 },
                pieces: 4,
                len: 10,
                first: 1,
                count: 2,
                bytes: vec![7; 5],
            }),
            Msg::Pos { root: 1, next: 5 },
            Msg::Start {
                root: 1,
                epoch: 3,
                seq: 8,
            },
            Msg::Sync {
                epoch: 4,
                root: 2,
                has: Some(Has {
                    start: 1,
                    next: 6,
                    skipped: vec![],
                }),
            },
            Msg::Sync {
                epoch: 4,
                root: 2,
                has: Some(Has {
                    start: 1,
                    next: 9,
                    skipped: vec![(2, 4), (4, 5), (7, 9)],
                }),
            },
            Msg::Sync {
                epoch: 4,
                root: 2,
                has: None,
            },
            Msg::Done { epoch: 4, root: 2 },
            Msg::Got {
                root: 2,
                seq: 9,
                first: 3,
            },
            Msg::Refeed {
                root: 2,
                seq: 9,
                to: 4,
            },
        ];
        for m in &msgs {
            let b = m.encode();
            assert_eq!(&Msg::decode(&b).unwrap(), m);
            if !matches!(m, Msg::Data(_)) {
                assert!(Msg::decode(&b[..b.len() - 1]).is_err());
                let mut longer = b.clone();
                longer.push(0);
                assert!(Msg::decode(&longer).is_err());
            }
        }
        assert!(Msg::decode(&[8]).unwrap_err().contains("tag"));
        let Msg::Data(d) = &msgs[0] else {
            unreachable!()
        };
        // Pieces 1..3 of 4 over 10 bytes: bytes 2..7.
        assert!(d.check().is_ok());
        let mut two = d.clone();
        two.pieces = 2;
        assert!(two.check().unwrap_err().contains("outside"));
        let mut short = d.clone();
        short.bytes.pop();
        assert!(short.check().unwrap_err().contains("bytes"));
        assert!(Msg::decode(&Msg::Data(short).encode()).is_err());
        let mut bad = msgs[0].encode();
        bad[30] = 10; // the algorithm
        assert!(Msg::decode(&bad).is_err());
        // Skipped ranges out of place: reversed, overlapping, beyond next,
        // below start, or without `has`.
        for (skipped, start, next) in [
            (vec![(4, 2)], 1, 9),
            (vec![(2, 5), (4, 6)], 1, 9),
            (vec![(7, 10)], 1, 9),
            (vec![(0, 2)], 1, 9),
        ] {
            let m = Msg::Sync {
                epoch: 1,
                root: 1,
                has: Some(Has {
                    start,
                    next,
                    skipped: skipped.clone(),
                }),
            };
            let e = Msg::decode(&m.encode()).unwrap_err();
            assert!(e.contains("out of place"), "{skipped:?}: {e}");
        }
        let mut bare = Msg::Sync {
            epoch: 1,
            root: 1,
            has: None,
        }
        .encode();
        bare.truncate(bare.len() - 4);
        bare.extend_from_slice(&1u32.to_be_bytes());
        bare.extend_from_slice(&[0; 16]);
        assert!(Msg::decode(&bare).unwrap_err().contains("skipped ranges"));
        let held = Has {
            start: 1,
            next: 9,
            skipped: vec![(2, 4)],
        };
        assert!(held.holds(1) && !held.holds(2) && !held.holds(3) && held.holds(4));
        assert!(!held.holds(9) && !held.holds(0));
    }

    #[test]
    fn every_algorithm_has_its_own_code_and_only_the_pipelines_carry_k() {
        let mut codes = std::collections::BTreeSet::new();
        for a in crate::plan::every(5) {
            let (code, k) = algorithm_code(a);
            assert!(codes.insert(code), "{a}: code {code} twice");
            assert_eq!(algorithm_of(code, k), Some(a));
        }
        assert_eq!(algorithm_of(9, 0), None);
        assert_eq!(algorithm_of(6, 0), None);
        assert_eq!(algorithm_of(5, 1), None);
        assert_eq!(pieces(Algorithm::Def { segments: 5 }, 8), 5);
    }
}
