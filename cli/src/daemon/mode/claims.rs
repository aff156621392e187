//! A total-order node's *claim* (docs/protocol.md §6.4, "Stamps over the
//! tree"): a stamp `c` such that every message and beacon this node put in
//! its send stream stamped at or below `c` has reached every member of the
//! view, and every stamp this node gives later exceeds `c`. It is seed
//! 002's commit barrier of one sender (TOC-Re, §2.1: "once every member
//! has acknowledged everything up to T"), known from the stream's
//! acknowledgments (`Engine::group_acked_messages`): below the least claim
//! of a view's members, nothing of theirs can arrive at any member any
//! more. So in views large enough for the commit tree, the claims of the
//! members with nothing unacknowledged climb it instead of every member
//! beaconing its stamp to every other (N² frames); a member with messages
//! still unacknowledged is *busy* (`unacked` > 0), and its own stamps
//! bound it instead.
//!
//! Owns: the stamps of this node's messages that some member may still
//! lack, and the claim. May not touch: the stream (the mode says what it
//! published; the engine what was acknowledged), the clock.

use std::collections::VecDeque;

/// This node's claim and what it rests on.
#[derive(Debug, Default)]
pub struct Claims {
    /// Messages (and beacons) published in the stream so far.
    published: u64,
    /// (index in the stream, stamp) of those some member may lack.
    unacked: VecDeque<(u64, u64)>,
    /// The claim: only grows.
    claim: u64,
}

impl Claims {
    /// A message or beacon stamped `ts` went into the stream.
    pub fn published(&mut self, ts: u64) {
        self.unacked.push_back((self.published, ts));
        self.published += 1;
    }

    /// A beacon that orders nothing went into the stream: it counts in
    /// the stream's messages, but the claim does not wait for it.
    pub fn published_bare(&mut self) {
        self.published += 1;
    }

    /// The claim now. `acked`: how many of the stream's messages, from the
    /// first, every member has (None: the stream does not say); `idle`: the
    /// stream has nothing queued or unacknowledged; `floor`: a bound every
    /// later stamp of this node exceeds (the clock's floor, kept).
    pub fn refresh(&mut self, acked: Option<u64>, idle: bool, floor: u64) -> u64 {
        match acked {
            Some(n) => {
                while let Some(&(i, ts)) = self.unacked.front() {
                    if i >= n {
                        break;
                    }
                    self.claim = self.claim.max(ts);
                    self.unacked.pop_front();
                }
            }
            None if idle => {
                if let Some(&(_, ts)) = self.unacked.back() {
                    self.claim = self.claim.max(ts);
                }
                self.unacked.clear();
            }
            None => {}
        }
        if self.unacked.is_empty() {
            // Everything sent is everywhere, and nothing later is stamped
            // this low.
            self.claim = self.claim.max(floor);
        }
        self.claim
    }

    /// The claim at the last [`Self::refresh`].
    pub fn current(&self) -> u64 {
        self.claim
    }

    /// Stamps some member may still lack (for `mcast stat`).
    pub fn unacked(&self) -> usize {
        self.unacked.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_is_the_last_stamp_every_member_has_and_the_floor_once_all_have_all() {
        let mut c = Claims::default();
        assert_eq!(c.refresh(Some(0), true, 50), 50, "nothing sent: the floor");
        for ts in [100, 110, 120] {
            c.published(ts);
        }
        assert_eq!(c.refresh(Some(0), false, 130), 50, "none acknowledged");
        assert_eq!(c.refresh(Some(2), false, 130), 110);
        assert_eq!(c.unacked(), 1);
        assert_eq!(c.refresh(Some(3), true, 140), 140, "all: the floor");
        assert_eq!(c.refresh(Some(3), true, 90), 140, "it never goes back");
        c.published(150);
        assert_eq!(c.refresh(Some(3), false, 160), 140);
        assert_eq!(c.current(), 140);
    }

    #[test]
    fn a_bare_beacon_counts_in_the_stream_but_the_claim_does_not_wait_for_it() {
        let mut c = Claims::default();
        c.published(100);
        c.published_bare();
        assert_eq!(
            c.refresh(Some(1), false, 130),
            130,
            "only the beacon is out"
        );
        c.published(140);
        assert_eq!(c.refresh(Some(2), false, 150), 130, "message 3 is out");
        assert_eq!(c.refresh(Some(3), false, 160), 160);
    }

    #[test]
    fn without_a_count_only_an_idle_stream_raises_the_claim() {
        let mut c = Claims::default();
        c.published(100);
        c.published(110);
        assert_eq!(c.refresh(None, false, 200), 0);
        assert_eq!(c.refresh(None, true, 200), 200);
        assert_eq!(c.unacked(), 0);
    }
}
