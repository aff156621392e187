//! The total-order mode's bytes ([`total`](super::total), docs/protocol.md
//! §6.4 "Frames"): the header before each message of a member's stream
//! (tag, stamp, ready epoch, barrier report) and a beacon's trailer
//! (`wants`, and from a commit tree's root the view's stable point).
//!
//! Owns: the layout, its encoding and its checks. May not touch: what the
//! fields mean (the mode's).

/// Bytes before a message: tag, stamp (u64), the sender's ready epoch
/// (u64), and its barrier when it sent it (u64; 0 unless the group commits).
pub const HEADER_LEN: usize = 1 + 8 + 8 + 8;
/// A message and its stamp.
pub(super) const TAG_DATA: u8 = b'T';
/// A scattering (`mcast_ipc::scatter`) and its stamp: each part is
/// delivered to its member only.
pub(super) const TAG_SCATTER: u8 = b'S';
/// A stamp alone, and the highest stamp of a message its sender holds
/// waiting (u64 after the header; 0: none); from the root of a commit tree
/// ([`commit_tree`]), then the view's epoch and stable
/// point (u64 each).
pub(super) const TAG_BEACON: u8 = b'B';
/// Bytes of a beacon.
pub(super) const BEACON_LEN: usize = HEADER_LEN + 8;
/// Bytes of a beacon that carries a stable point (then, where the tree
/// carries claims, the busy members' ids, u32 each).
pub(super) const STABLE_BEACON_LEN: usize = BEACON_LEN + 16;
/// Busy members a root's beacon names at most (it fits one frame); with
/// more, the root sends no point and the members stamp for each other.
pub(super) const MAX_BUSY: usize = 256;
/// What a fragment that opens a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Opening<'a> {
    Data {
        ts: u64,
        epoch: u64,
        report: u64,
        msg: &'a [u8],
        scatter: bool,
    },
    Beacon {
        ts: u64,
        epoch: u64,
        report: u64,
        wants: u64,
        /// (view epoch, stable point) from a commit tree's root.
        stable: Option<(u64, u64)>,
        /// With a stable point over claims: the busy members' ids (u32
        /// each, [`busy_ids`]).
        busy: &'a [u8],
    },
}

/// The ids in a beacon's busy list.
pub(super) fn busy_ids(busy: &[u8]) -> impl Iterator<Item = u32> + '_ {
    busy.chunks_exact(4)
        .map(|c| u32::from_be_bytes(c.try_into().expect("4 bytes")))
}

/// `msg` with its header (stamp, ready epoch, barrier report), into `out`
/// (cleared).
pub(super) fn encode(tag: u8, ts: u64, epoch: u64, report: u64, msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(HEADER_LEN + msg.len());
    out.push(tag);
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&epoch.to_be_bytes());
    out.extend_from_slice(&report.to_be_bytes());
    out.extend_from_slice(msg);
}

pub(super) fn decode(buf: &[u8]) -> Option<Opening<'_>> {
    if buf.len() < HEADER_LEN {
        return None;
    }
    let word = |at: usize| u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
    let (ts, epoch, report) = (word(1), word(9), word(17));
    match buf[0] {
        TAG_DATA | TAG_SCATTER => Some(Opening::Data {
            ts,
            epoch,
            report,
            msg: &buf[HEADER_LEN..],
            scatter: buf[0] == TAG_SCATTER,
        }),
        TAG_BEACON
            if buf.len() == BEACON_LEN
                || buf.len() >= STABLE_BEACON_LEN
                    && (buf.len() - STABLE_BEACON_LEN) % 4 == 0
                    && (buf.len() - STABLE_BEACON_LEN) / 4 <= MAX_BUSY =>
        {
            Some(Opening::Beacon {
                ts,
                epoch,
                report,
                wants: word(HEADER_LEN),
                stable: (buf.len() >= STABLE_BEACON_LEN)
                    .then(|| (word(BEACON_LEN), word(BEACON_LEN + 8))),
                busy: buf.get(STABLE_BEACON_LEN..).unwrap_or(&[]),
            })
        }
        _ => None,
    }
}

/// A beacon into `out` (cleared): stamp `ts`, ready epoch `epoch`, barrier
/// report `report`, `wants`, and (a commit tree's root) the view's epoch,
/// stable point and busy members (at most [`MAX_BUSY`]).
pub(super) fn encode_beacon(
    ts: u64,
    epoch: u64,
    report: u64,
    wants: u64,
    stable: Option<(u64, u64, &[u32])>,
    out: &mut Vec<u8>,
) {
    let mut trailer = Vec::with_capacity(24);
    trailer.extend_from_slice(&wants.to_be_bytes());
    if let Some((view, point, busy)) = stable {
        debug_assert!(busy.len() <= MAX_BUSY);
        trailer.extend_from_slice(&view.to_be_bytes());
        trailer.extend_from_slice(&point.to_be_bytes());
        for id in busy {
            trailer.extend_from_slice(&id.to_be_bytes());
        }
    }
    encode(TAG_BEACON, ts, epoch, report, &trailer, out);
}
