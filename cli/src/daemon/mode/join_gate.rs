//! Where a local member's share of a group's order begins, in the modes
//! that place membership events in their order (total order).
//!
//! Owns: [`JoinGate`]: the local members that joined in a view whose event
//! the mode has not delivered here yet, and the view notices waiting for
//! their event. Such a member receives nothing of the group until the
//! event of the view it joined in, then everything: its sequence is every
//! earlier member's from that event on (docs/protocol.md §6.4, "Where a
//! member's order begins"). A notice of a view goes out when its event
//! does, so a client that waits for a view (`--wait-nodes`) and then
//! publishes stamps its messages after the event: every member of that
//! view receives them.
//! Does not touch: the members themselves (the daemon's `membership`), the
//! order (the mode), records that are not the mode's (a flush's
//! `skipped`, an eviction: every member gets those at once).

use std::collections::VecDeque;

use mcast_ipc::ClientId;

use super::To;

/// The local members of one group waiting for their view's event, and the
/// notices waiting for theirs. `N` is the notice (the daemon's
/// `mcast_ipc::Notice`).
#[derive(Debug)]
pub struct JoinGate<N> {
    /// (member, the epoch of the view it joined in).
    waiting: Vec<(ClientId, u64)>,
    /// The largest epoch whose event the mode delivered here (0: none).
    delivered: u64,
    /// (epoch, notice of that view), in view order.
    notices: VecDeque<(u64, N)>,
}

impl<N> Default for JoinGate<N> {
    fn default() -> Self {
        JoinGate {
            waiting: Vec::new(),
            delivered: 0,
            notices: VecDeque::new(),
        }
    }
}

impl<N> JoinGate<N> {
    /// Member `c` joined in the view of `epoch`: it waits for that view's
    /// event, unless the event (or a later one) was delivered already.
    pub fn joined(&mut self, c: ClientId, epoch: u64) {
        if epoch > self.delivered && !self.waits(c) {
            self.waiting.push((c, epoch));
        }
    }

    /// Member `c` left (or its client went away).
    pub fn left(&mut self, c: ClientId) {
        self.waiting.retain(|&(w, _)| w != c);
    }

    /// The notice of the view of `epoch`, to go out with its event.
    pub fn notice(&mut self, epoch: u64, notice: N) {
        self.notices.push_back((epoch, notice));
    }

    /// The mode hands out a record for `to`: the event of a view opens the
    /// gate for the members that joined in it or before. The notices due
    /// now (of that view and those before), oldest first, for every member
    /// that [`receives`](Self::receives).
    pub fn pass(&mut self, to: To) -> Vec<N> {
        let To::Event(epoch) = to else {
            return Vec::new(); // (every message: nothing to do)
        };
        self.delivered = self.delivered.max(epoch);
        self.waiting.retain(|&(_, e)| e > epoch);
        let due = self.notices.iter().take_while(|(e, _)| *e <= epoch).count();
        self.notices.drain(..due).map(|(_, n)| n).collect()
    }

    /// Whether member `c` receives the group's records now.
    pub fn receives(&self, c: ClientId) -> bool {
        !self.waits(c)
    }

    /// Whether a record for `to` goes to member `c`: one it reaches, if
    /// `c` [`receives`](Self::receives), or if the record is addressed to
    /// `c` alone (a scattering's part: its sender named this member, so
    /// it is delivered wherever it falls, and a scattering still reaches
    /// all its members or none).
    pub fn admits(&self, c: ClientId, to: To) -> bool {
        to.reaches(c) && (matches!(to, To::Only(_)) || self.receives(c))
    }

    fn waits(&self, c: ClientId) -> bool {
        self.waiting.iter().any(|&(w, _)| w == c)
    }

    /// Members waiting for their view's event.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ClientId = ClientId(1);
    const B: ClientId = ClientId(2);

    #[test]
    fn a_member_receives_from_the_event_of_the_view_it_joined_in() {
        let mut g = JoinGate::<&str>::default();
        g.joined(A, 3);
        g.joined(B, 5);
        assert!(!g.receives(A) && !g.receives(B));
        // Messages and earlier events open nothing.
        assert!(g.pass(To::AllBut(None)).is_empty());
        assert!(g.pass(To::Event(2)).is_empty());
        assert!(!g.receives(A));
        g.pass(To::Event(3));
        assert!(g.receives(A) && !g.receives(B));
        // A skipped view's event: the next one opens it.
        g.pass(To::Event(6));
        assert!(g.receives(B));
        assert_eq!(g.waiting(), 0);
    }

    #[test]
    fn a_part_addressed_to_a_waiting_member_reaches_it() {
        let mut g = JoinGate::<&str>::default();
        g.joined(A, 3);
        assert!(g.admits(A, To::Only(A)));
        assert!(!g.admits(B, To::Only(A)));
        assert!(!g.admits(A, To::AllBut(None)));
        assert!(g.admits(B, To::AllBut(None)));
        assert!(!g.admits(B, To::AllBut(Some(B))));
    }

    #[test]
    fn a_member_joining_in_a_view_whose_event_came_already_receives_at_once() {
        let mut g = JoinGate::<&str>::default();
        g.pass(To::Event(4));
        g.joined(A, 4);
        g.joined(B, 5);
        assert!(g.receives(A));
        assert!(!g.receives(B));
        g.left(B);
        assert!(g.receives(B), "a member that left waits for nothing");
    }

    #[test]
    fn notices_go_out_with_their_event_in_view_order() {
        let mut g = JoinGate::default();
        g.notice(2, "two");
        g.notice(3, "three");
        g.notice(4, "four");
        assert!(g.pass(To::AllBut(None)).is_empty());
        assert_eq!(g.pass(To::Event(3)), ["two", "three"]);
        assert_eq!(g.pass(To::Event(4)), ["four"]);
        assert!(g.pass(To::Event(5)).is_empty());
    }
}
