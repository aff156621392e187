//! Turning subscription records into messages, for [`Client`](super::Client):
//! fragments reassembled per (group, source), the half-built messages a
//! membership event breaks, and the per-hop timing of what is read.
//!
//! Owns: the client's reassembly rules. Does not touch: the rings
//! (`recv_batch` peeks and pops) or batch records (`crate::batch`).

use std::collections::HashMap;

use super::MAX_REASSEMBLY;
use crate::ring::{Record, RecordHeader, FIRST, LAST};
use crate::trace::{monotonic_ns, Hop};

/// A message a record completes: its bytes in the ring (a whole record) or
/// reassembled in the client's buffer (the last fragment).
pub(super) enum Completed<'a> {
    InRing(&'a [u8]),
    Reassembled(Vec<u8>),
}

impl Completed<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Completed::InRing(b) => b,
            Completed::Reassembled(v) => v,
        }
    }
}

/// Times the last hop of a message read now (`read_at`: the clock, read
/// once per call at the first stamped message) from its record's `stamp`
/// (0: not stamped), with tracing on.
pub(super) fn time_read(hop: Option<&mut Hop>, stamp: u64, read_at: &mut u64) {
    if let (Some(hop), 1..) = (hop, stamp) {
        if *read_at == 0 {
            *read_at = monotonic_ns();
        }
        hop.record(stamp, *read_at);
    }
}

/// What record `rec` does to the stream of its (group, source): a whole
/// record is a message, lent from the ring; a first fragment starts one in
/// `partial` (replacing an unfinished one), a middle one extends it, a last
/// one completes it. A middle or last fragment without a first one is
/// dropped, and so is a message that would grow past [`MAX_REASSEMBLY`].
pub(super) fn reassemble<'a>(
    partial: &mut HashMap<(u32, u32), Vec<u8>>,
    rec: Record<'a>,
) -> Option<Completed<'a>> {
    let RecordHeader {
        group,
        source,
        flags,
        ..
    } = rec.header;
    let key = (group, source);
    if flags & (FIRST | LAST) == FIRST | LAST {
        return Some(Completed::InRing(rec.payload));
    }
    if flags & FIRST != 0 {
        partial.insert(key, rec.payload.to_vec());
        return None;
    }
    let buf = partial.get_mut(&key)?;
    if buf.len() + rec.payload.len() > MAX_REASSEMBLY {
        partial.remove(&key);
        return None;
    }
    buf.extend_from_slice(rec.payload);
    if flags & LAST != 0 {
        return partial.remove(&key).map(Completed::Reassembled);
    }
    None
}

/// A membership event breaks the streams of the nodes it names: after
/// `gone`, `joined` or a flush's `skipped` naming node N, N's next fragment
/// in `group` starts a new message (its stream ended, restarted, or jumped),
/// and after this node's eviction every stream of `group` does. A message
/// half reassembled from such a stream is dropped, never completed with
/// fragments of another (found by scripts/soak.sh: a subscriber whose node
/// was evicted and rejoined got a first fragment glued to the middle of a
/// later message). Other senders' partial messages carry on: an event can
/// come between their fragments.
pub(super) fn drop_broken_partials(
    partial: &mut HashMap<(u32, u32), Vec<u8>>,
    group: u32,
    event: &[u8],
) {
    if !partial.keys().any(|&(g, _)| g == group) {
        return;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(event) else {
        return;
    };
    if v.get("evicted").is_some() {
        partial.retain(|&(g, _), _| g != group);
        return;
    }
    let mut broken: Vec<u64> = Vec::new();
    for key in ["gone", "joined"] {
        if let Some(nodes) = v.get(key).and_then(|n| n.as_array()) {
            broken.extend(nodes.iter().filter_map(|n| n.as_u64()));
        }
    }
    if let Some(n) = v
        .get("skipped")
        .and_then(|s| s.get("sender"))
        .and_then(|n| n.as_u64())
    {
        broken.push(n);
    }
    partial.retain(|&(g, src), _| g != group || !broken.contains(&u64::from(src)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partials() -> HashMap<(u32, u32), Vec<u8>> {
        [((7, 1), vec![1]), ((7, 2), vec![2]), ((8, 1), vec![3])]
            .into_iter()
            .collect()
    }

    fn left(p: &HashMap<(u32, u32), Vec<u8>>) -> Vec<(u32, u32)> {
        let mut k: Vec<_> = p.keys().copied().collect();
        k.sort_unstable();
        k
    }

    #[test]
    fn an_event_drops_the_partial_messages_of_the_streams_it_breaks_only() {
        let mut p = partials();
        let view = br#"{"epoch":5,"agent":2,"members":[],"joined":[3],"gone":[1],"failed":[1]}"#;
        drop_broken_partials(&mut p, 7, view);
        assert_eq!(left(&p), [(7, 2), (8, 1)], "node 1 gone in group 7 only");

        let mut p = partials();
        drop_broken_partials(&mut p, 7, br#"{"joined":[2],"gone":[]}"#);
        assert_eq!(
            left(&p),
            [(7, 1), (8, 1)],
            "a node (re)joined starts afresh"
        );

        let mut p = partials();
        drop_broken_partials(&mut p, 7, br#"{"skipped":{"sender":2,"frames":4}}"#);
        assert_eq!(left(&p), [(7, 1), (8, 1)]);

        let mut p = partials();
        drop_broken_partials(&mut p, 7, br#"{"evicted":true,"by":2,"rejoining":true}"#);
        assert_eq!(
            left(&p),
            [(8, 1)],
            "this node's eviction breaks every stream of the group"
        );

        let mut p = partials();
        drop_broken_partials(&mut p, 7, br#"{"epoch":6,"joined":[],"gone":[]}"#);
        drop_broken_partials(&mut p, 7, b"not json");
        assert_eq!(
            left(&p),
            [(7, 1), (7, 2), (8, 1)],
            "nothing broken, nothing dropped"
        );
    }
}
