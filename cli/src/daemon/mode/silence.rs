//! Beacons as evidence of life (seed 002 §1.2): the total-order mode's
//! watch for a node the order waits on that sends nothing. A live node
//! that others wait on sends a stamp (a message or a beacon) every beacon
//! interval; so when the oldest held message has waited
//! [`SILENT_INTERVALS`] intervals for a node's stamp, and that node sent
//! nothing at all in the last half of that wait (its largest stamp did not
//! move), the node is reported to the failure detector, which probes it
//! once it has heard nothing from it for a beat interval (sooner than a
//! beat schedule alone would). The probes decide: a node that is only slow
//! (descheduled, or still missing the message while a repair is under way)
//! answers and stays. A message that keeps waiting is looked at again
//! every [`REPORT_BACKOFF`] intervals, and a node is reported at most that
//! often.
//!
//! Owns: which held message is watched, the stamps at half a look, when
//! each node was last reported. May not touch: the held messages, the
//! barrier (the mode hands the oldest and the stamps in).

use std::collections::BTreeMap;

use mcast_wire::NodeId;

/// Beacon intervals a held message waits for a node's stamp before the
/// node may be reported silent (the seed detects a failure after ten).
pub const SILENT_INTERVALS: u64 = 10;
/// A node's stamps are compared from this many intervals into the wait.
const HALF: u64 = SILENT_INTERVALS / 2;
/// Beacon intervals before the same node is reported again.
pub const REPORT_BACKOFF: u64 = 100;

/// The watch over the oldest held message, identified by `K`.
#[derive(Debug)]
pub struct Silence<K> {
    /// The message watched.
    watched: Option<K>,
    /// When the next look is due (ns), for the message watched.
    next: u64,
    /// Taken half-way through a look: the nodes the message waited on and
    /// their largest stamps (None: the next look takes it).
    half: Option<Vec<(NodeId, u64)>>,
    /// When each node was last reported (ns).
    reported: BTreeMap<NodeId, u64>,
}

impl<K> Default for Silence<K> {
    fn default() -> Self {
        Silence {
            watched: None,
            next: 0,
            half: None,
            reported: BTreeMap::new(),
        }
    }
}

impl<K: Copy + PartialEq> Silence<K> {
    /// When [`Silence::check`] has work, for the oldest held message and
    /// since when it has been the oldest (None: nothing held).
    pub fn due(&self, oldest: Option<(K, u64)>, interval: u64) -> Option<u64> {
        let (k, since) = oldest?;
        Some(if self.watched == Some(k) {
            self.next
        } else {
            since + HALF * interval
        })
    }

    /// At `now`: the nodes to report silent. `waited_on` gives the nodes
    /// the oldest message waits on and their largest stamps (called only
    /// when due). A message that keeps waiting is looked at again every
    /// [`REPORT_BACKOFF`] intervals, the detector deciding each time
    /// whether the silence is long enough to probe.
    pub fn check(
        &mut self,
        now: u64,
        oldest: Option<(K, u64)>,
        interval: u64,
        waited_on: impl FnOnce() -> Vec<(NodeId, u64)>,
    ) -> Vec<NodeId> {
        let (Some(due), Some((k, _))) = (self.due(oldest, interval), oldest) else {
            return Vec::new();
        };
        if now < due {
            return Vec::new();
        }
        if self.watched != Some(k) {
            self.watched = Some(k);
            self.half = None;
        }
        let Some(half) = self.half.take() else {
            self.half = Some(waited_on());
            self.next = now + (SILENT_INTERVALS - HALF) * interval;
            return Vec::new();
        };
        let still = waited_on();
        let backoff = REPORT_BACKOFF * interval;
        let silent: Vec<NodeId> = half
            .iter()
            .filter(|s| still.contains(s))
            .filter(|(n, _)| self.reported.get(n).is_none_or(|&t| now >= t + backoff))
            .map(|&(n, _)| n)
            .collect();
        for &n in &silent {
            self.reported.insert(n, now);
        }
        self.next = now + backoff - HALF * interval;
        silent
    }

    /// `node` left: nothing kept of it.
    pub fn forget(&mut self, node: NodeId) {
        self.reported.remove(&node);
        if let Some(h) = &mut self.half {
            h.retain(|&(n, _)| n != node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: u64 = 100;

    #[test]
    fn a_node_silent_through_the_second_half_of_the_wait_is_reported_then_again_after_the_backoff()
    {
        let mut s = Silence::default();
        let oldest = Some(('m', 1_000));
        assert_eq!(s.due(oldest, I), Some(1_500));
        assert!(s.check(1_499, oldest, I, || panic!("not due")).is_empty());
        // Half-way: nodes 2 and 3 hold it back.
        assert!(s
            .check(1_500, oldest, I, || vec![(2, 10), (3, 20)])
            .is_empty());
        assert_eq!(s.due(oldest, I), Some(2_000));
        // Node 3 sent a stamp since (still below): alive. Node 2 did not.
        assert_eq!(
            s.check(2_000, oldest, I, || vec![(2, 10), (3, 25)]),
            vec![2]
        );
        // Still waiting: looked at again after the backoff, from half-way.
        assert_eq!(s.due(oldest, I), Some(2_000 + 100 * I - 5 * I));
        assert!(s.check(11_500, oldest, I, || vec![(2, 10)]).is_empty());
        assert_eq!(s.check(12_000, oldest, I, || vec![(2, 10)]), vec![2]);
        // The next message: node 2 again silent, but reported too recently.
        let next = Some(('n', 12_100));
        s.check(12_600, next, I, || vec![(2, 10)]);
        assert!(s.check(13_100, next, I, || vec![(2, 10)]).is_empty());
        // A node that passed the message in the second half is not waited on.
        let last = Some(('p', 30_000));
        s.check(30_500, last, I, || vec![(4, 10)]);
        assert!(s.check(31_000, last, I, Vec::new).is_empty());
        assert_eq!(s.due(None, I), None);
    }
}
