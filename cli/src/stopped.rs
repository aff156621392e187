//! Where each closed receive stream stopped, so that a start behind it (a
//! repeated start, or a join point below what this node delivered) never
//! delivers a message to a client twice (docs/protocol.md §6, stopped
//! positions).

use std::collections::HashMap;

use mcast_groups::{GroupId, NodeId};
use mcast_wire::Seq;

/// The positions, bounded.
#[derive(Debug)]
pub struct StoppedPositions {
    /// (group, sender) → (the stream's epoch, the frame after the last
    /// delivered from it or its flush).
    at: HashMap<(GroupId, NodeId), (u32, Seq)>,
    cap: usize,
}

/// What [`StoppedPositions::note`] had to do to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// There was room, or the positions no client wants made it.
    Made,
    /// Every position was wanted and all were forgotten: a start behind one
    /// of them may now repeat messages.
    Cleared(usize),
}

impl StoppedPositions {
    /// At most `cap` positions. Size it at twice what the wanted ones can
    /// reach, so that forgetting the unwanted always makes room.
    pub fn new(cap: usize) -> StoppedPositions {
        StoppedPositions {
            at: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// Where `sender`'s stream of `epoch` in `group` stopped, if known.
    pub fn get(&self, group: GroupId, sender: NodeId, epoch: u32) -> Option<Seq> {
        self.at
            .get(&(group, sender))
            .and_then(|&(e, next)| (e == epoch).then_some(next))
    }

    /// Notes that the stream stopped before `next` (keeping the furthest
    /// position of one epoch; a new epoch replaces an older one). When
    /// full, first forgets the positions of groups `wanted` says no client
    /// of this node can receive again.
    pub fn note(
        &mut self,
        group: GroupId,
        sender: NodeId,
        epoch: u32,
        next: Seq,
        wanted: impl Fn(GroupId) -> bool,
    ) -> Room {
        let mut room = Room::Made;
        if self.at.len() >= self.cap && !self.at.contains_key(&(group, sender)) {
            self.at.retain(|&(g, _), _| wanted(g));
            if self.at.len() >= self.cap {
                room = Room::Cleared(self.at.len());
                self.at.clear();
            }
        }
        let e = self.at.entry((group, sender)).or_insert((epoch, next));
        if e.0 != epoch || e.1.before(next) {
            *e = (epoch, next);
        }
        room
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_furthest_position_of_the_latest_epoch_is_kept() {
        let mut s = StoppedPositions::new(8);
        let all = |_| true;
        assert_eq!(s.note(1, 2, 5, Seq(10), all), Room::Made);
        s.note(1, 2, 5, Seq(7), all);
        assert_eq!(
            s.get(1, 2, 5),
            Some(Seq(10)),
            "an older position changes nothing"
        );
        // Across the wrap of the sequence space.
        s.note(1, 2, 5, Seq(u32::MAX), all);
        s.note(1, 2, 5, Seq(3), all);
        assert_eq!(s.get(1, 2, 5), Some(Seq(10)));
        s.note(1, 2, 6, Seq(4), all);
        assert_eq!(s.get(1, 2, 6), Some(Seq(4)), "a new epoch replaces it");
        assert_eq!(s.get(1, 2, 5), None);
        assert_eq!(s.get(1, 3, 6), None);
    }

    #[test]
    fn when_full_only_positions_no_client_wants_are_forgotten() {
        let mut s = StoppedPositions::new(4);
        // Groups 1 and 2 are carried (or being rejoined); 8 and 9 are not.
        let wanted = |g: GroupId| g < 5;
        for (g, n) in [(1, 1), (8, 1), (2, 1), (9, 1)] {
            assert_eq!(s.note(g, n, 1, Seq(100), wanted), Room::Made);
        }
        assert_eq!(s.len(), 4);
        assert_eq!(s.note(1, 2, 1, Seq(50), wanted), Room::Made);
        assert_eq!(s.len(), 3);
        assert_eq!(s.get(1, 1, 1), Some(Seq(100)));
        assert_eq!(s.get(2, 1, 1), Some(Seq(100)));
        assert_eq!(s.get(1, 2, 1), Some(Seq(50)));
        assert_eq!(s.get(8, 1, 1), None);
        assert_eq!(s.get(9, 1, 1), None);
        // Updating a known position needs no room.
        s.note(3, 1, 1, Seq(1), wanted);
        assert_eq!(s.note(1, 1, 1, Seq(200), wanted), Room::Made);
        assert_eq!(s.len(), 4);
        // Every position wanted and no room: all are forgotten, and said so.
        assert_eq!(s.note(4, 1, 1, Seq(1), wanted), Room::Cleared(4));
        assert_eq!(s.len(), 1);
        assert_eq!(s.get(4, 1, 1), Some(Seq(1)));
    }
}
