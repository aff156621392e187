//! Receive streams stuck behind their sender's window: finding them and
//! asking their senders where to start again.
//!
//! A receive stream opened at a start its sender has since left behind (the
//! sender counts this node a member only from a later frame: data-path seed
//! 35190, a start held across a registry's rejoin) gets nothing but frames
//! beyond its window, delivers nothing, and its NAKs for the frames before
//! them go unanswered: no repair will ever come. Every `CHECK_NS` the
//! daemon reads each stream's progress; one that dropped frames beyond its
//! window and delivered nothing in `STRIKES` checks in a row asks its sender
//! for its start again (`StartRequest`, protocol.md §6). The sender answers
//! with where it counts this node from; the stream opens there, past the
//! frames that were never this node's, and the clients get the `skipped`
//! event (`stream_start`). A sender that does not count this node a member
//! does not answer, and the stream asks again at its next strikes.

use std::collections::HashMap;

use mcast_engine::{EngineError, Transport};
use mcast_wire::{GroupId, NodeId};

use super::Daemon;
use crate::links::LinkMessage;

/// How often the streams' progress is read.
const CHECK_NS: u64 = 500_000_000;
/// Checks in a row without a delivery, with drops beyond the window, before
/// the start is asked again.
const STRIKES: u32 = 2;

/// The progress each receive stream showed at the last check.
#[derive(Debug, Default)]
pub(super) struct StuckWatch {
    next_check: u64,
    last: HashMap<(GroupId, NodeId), Progress>,
    /// The engine's report, kept to reuse its allocation.
    report: Vec<(GroupId, NodeId, u64, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct Progress {
    delivered: u64,
    beyond_window: u64,
    strikes: u32,
}

impl StuckWatch {
    /// Whether a check is due at `now` (it then waits `CHECK_NS` again).
    fn due(&mut self, now: u64) -> bool {
        if now < self.next_check {
            return false;
        }
        self.next_check = now + CHECK_NS;
        true
    }

    /// Takes the streams' progress (`Engine::receive_progress`: group,
    /// sender, delivered, dropped beyond the window) and returns the
    /// streams stuck for `STRIKES` checks in a row; their count starts
    /// again. Streams no longer reported are forgotten.
    fn check(&mut self, report: &[(GroupId, NodeId, u64, u64)]) -> Vec<(GroupId, NodeId)> {
        let mut stuck = Vec::new();
        let mut next = HashMap::with_capacity(report.len());
        for &(group, sender, delivered, beyond_window) in report {
            let mut p = Progress {
                delivered,
                beyond_window,
                strikes: 0,
            };
            if let Some(last) = self.last.get(&(group, sender)) {
                // Counters start again with a reopened stream: any fall is
                // progress, not a strike.
                if delivered == last.delivered && beyond_window > last.beyond_window {
                    p.strikes = last.strikes + 1;
                }
            }
            if p.strikes >= STRIKES {
                stuck.push((group, sender));
                p.strikes = 0;
            }
            next.insert((group, sender), p);
        }
        self.last = next;
        stuck
    }
}

impl<T: Transport> Daemon<T> {
    /// Asks the sender of every stuck receive stream for its start again.
    pub(super) fn ask_stuck_streams(&mut self) -> Result<bool, EngineError> {
        if !self.stuck.due(mcast_engine::sys::monotonic_ns()) {
            return Ok(false);
        }
        let mut report = std::mem::take(&mut self.stuck.report);
        self.engine.receive_progress(&mut report);
        let stuck = self.stuck.check(&report);
        self.stuck.report = report;
        for &(group, sender) in &stuck {
            self.counters.stuck_streams += 1;
            self.counters.start_requests_sent += 1;
            self.log.warn(
                "receive stream behind its sender's window: asking the sender where it starts",
                &[("group", &group), ("sender", &sender)],
            );
            self.send_link(sender, LinkMessage::StartRequest { group });
        }
        Ok(!stuck.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: GroupId = 7;

    #[test]
    fn a_stream_that_only_drops_beyond_its_window_is_stuck_after_two_checks() {
        let mut w = StuckWatch::default();
        assert!(w.check(&[(G, 2, 5, 0)]).is_empty());
        assert!(w.check(&[(G, 2, 5, 10)]).is_empty(), "one strike");
        assert_eq!(w.check(&[(G, 2, 5, 20)]), vec![(G, 2)]);
        // The count starts again after asking.
        assert!(w.check(&[(G, 2, 5, 30)]).is_empty());
        assert_eq!(w.check(&[(G, 2, 5, 40)]), vec![(G, 2)]);
    }

    #[test]
    fn delivering_idle_or_reopened_streams_are_not_stuck() {
        let mut w = StuckWatch::default();
        // Drops beyond the window while delivering: a burst, not stuck.
        for (i, d) in [1u64, 2, 3, 4].into_iter().enumerate() {
            assert!(w.check(&[(G, 2, d, 10 * i as u64)]).is_empty());
        }
        // Idle: nothing delivered, nothing dropped.
        for _ in 0..4 {
            assert!(w.check(&[(G, 3, 0, 0)]).is_empty());
        }
        // A stream gone from the report is forgotten: its strikes with it.
        let mut w = StuckWatch::default();
        w.check(&[(G, 4, 0, 0)]);
        w.check(&[(G, 4, 0, 5)]);
        w.check(&[]);
        assert!(w.check(&[(G, 4, 0, 9)]).is_empty());
        // A reopened stream's counters start again: no strike.
        let mut w = StuckWatch::default();
        w.check(&[(G, 5, 0, 0)]);
        w.check(&[(G, 5, 0, 5)]);
        assert!(w.check(&[(G, 5, 0, 2)]).is_empty());
        assert!(w.check(&[(G, 5, 0, 3)]).is_empty(), "one strike since");
    }

    #[test]
    fn a_check_is_due_every_half_second() {
        let mut w = StuckWatch::default();
        assert!(w.due(1));
        assert!(!w.due(1 + CHECK_NS - 1));
        assert!(w.due(1 + CHECK_NS));
    }
}
