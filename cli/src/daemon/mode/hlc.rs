//! The total-order mode's clock: a hybrid logical clock (Kulkarni et al.,
//! "Logical Physical Clocks", 2014) over the wall clock in nanoseconds.
//! Its stamps follow the wall clock while the nodes' clocks agree, never
//! repeat or go back on one node whatever its clock does, and exceed every
//! stamp the node has seen from others. So the order they give is correct
//! however far the clocks drift apart: skew can only cost latency (a node
//! whose clock runs behind stamps from the others' time once it has seen
//! it, and its beacons carry that).
//!
//! Owns: the last stamp issued or seen. May not touch: what is stamped.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock the stamps follow (ns).
pub type Wall = Box<dyn Fn() -> u64>;

/// The system's wall clock in ns since the Unix epoch (0 before it): what
/// the daemon gives a total-order group's clock (the mode itself reads no
/// clock, so the simulation gives it its own).
#[allow(
    clippy::disallowed_methods,
    reason = "the daemon's one wall-clock source for the modes"
)]
pub fn system_wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A hybrid logical clock.
pub struct Hlc {
    /// The largest stamp issued or seen, or the wall time last read if
    /// larger: every later stamp exceeds it.
    last: u64,
    wall: Wall,
}

impl fmt::Debug for Hlc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hlc").field("last", &self.last).finish()
    }
}

impl Hlc {
    pub fn new(wall: Wall) -> Hlc {
        Hlc { last: 0, wall }
    }

    /// A stamp for something this node sends: greater than every stamp
    /// issued or seen here, and than the wall clock's last reading.
    pub fn stamp(&mut self) -> u64 {
        self.last = (self.last + 1).max((self.wall)());
        self.last
    }

    /// A stamp seen from another node: later stamps exceed it.
    pub fn witness(&mut self, ts: u64) {
        self.last = self.last.max(ts);
    }

    /// A bound every later stamp of this node exceeds: the larger of the
    /// last stamp and the wall clock now (kept, so it holds).
    pub fn floor(&mut self) -> u64 {
        self.last = self.last.max((self.wall)());
        self.last
    }

    /// The clock's reading without keeping it (for reports).
    pub fn peek(&self) -> u64 {
        self.last.max((self.wall)())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    fn clock(at: &Rc<Cell<u64>>) -> Hlc {
        let at = Rc::clone(at);
        Hlc::new(Box::new(move || at.get()))
    }

    #[test]
    fn stamps_follow_the_wall_clock_and_never_repeat_or_go_back() {
        let wall = Rc::new(Cell::new(1_000));
        let mut c = clock(&wall);
        assert_eq!(c.stamp(), 1_000);
        // The clock stands still, then steps back: stamps still grow.
        assert_eq!(c.stamp(), 1_001);
        wall.set(10);
        assert_eq!(c.stamp(), 1_002);
        wall.set(5_000);
        assert_eq!(c.stamp(), 5_000);
    }

    #[test]
    fn a_stamp_seen_from_a_node_ahead_is_exceeded_by_every_later_stamp_and_floor() {
        let wall = Rc::new(Cell::new(100));
        let mut c = clock(&wall);
        c.witness(9_000);
        assert_eq!(c.peek(), 9_000);
        assert_eq!(c.floor(), 9_000);
        assert!(c.stamp() > 9_000);
        // A stamp from a node behind changes nothing.
        let before = c.peek();
        c.witness(50);
        assert_eq!(c.peek(), before);
        // The floor is kept: a later stamp exceeds it even if the wall
        // clock steps back after it was read.
        wall.set(20_000);
        let floor = c.floor();
        wall.set(0);
        assert!(c.stamp() > floor);
    }
}
