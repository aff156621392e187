//! Where membership events sit in the total order (docs/protocol.md §6.4,
//! "Membership events in the order"): each member's first stamp of a view,
//! an event's place (the largest of its members' first stamps, as far as
//! known), the events placed in the held order, this node's ready epoch,
//! and what a departed node keeps: its cut (the failure stamp) and, in a
//! group that commits, the place its held messages wait for.
//!
//! Owns: those decisions, over [`TotalOrder`]'s state (`firsts`, `events`,
//! `cuts`). May not touch: the barrier and the deliveries
//! ([`total`](super)), the commit tree ([`tree`](super::tree)).

use super::*;

impl TotalOrder {
    /// The place that decides whether the held message `key` is kept, when
    /// its node is gone: its event's (known, or as far as known). In a group
    /// that commits the message waits until the stable point has passed that
    /// place too, so that every member has the first stamps that put the
    /// place there: a member that fails or is evicted may have raised the
    /// place with its own first stamp of the view, which no survivor ever
    /// receives; had it delivered the message on that place, the survivors,
    /// placing the event lower, would drop it (uniform agreement broken:
    /// the total-order sweep, seed 3175507).
    pub(super) fn fate_place(&self, key: Key) -> Option<u64> {
        let (_, node, tag) = key;
        if tag != 0 || node == EVENT_NODE || node == self.node {
            return None;
        }
        if let Some(&cut) = self.cuts.get(&node) {
            return Some(cut);
        }
        self.events
            .iter()
            .find(|e| e.gone.contains(&node) || e.gone_keys.contains(&key))
            .map(|e| e.at)
    }

    /// `node` stamped `ts` in view `epoch`: the first stamp of a newer
    /// view is noted, and given to the events that wait for it.
    pub(super) fn note_first(&mut self, node: NodeId, epoch: u64, ts: u64) {
        let firsts = self.firsts.entry(node).or_default();
        if firsts.last().is_some_and(|&(e, _)| e >= epoch) {
            return;
        }
        firsts.push((epoch, ts));
        // Entries of epochs older than any event can ask for (an event
        // wants the first stamp of its view or a later one) go; the last
        // stays, to tell a newer epoch.
        let wanted_from = self
            .events
            .front()
            .map_or(self.installed, |e| e.epoch.min(self.installed));
        let last = firsts.len() - 1;
        let old = firsts[..last]
            .iter()
            .take_while(|&&(e, _)| e < wanted_from)
            .count();
        firsts.drain(..old);
        for e in self.events.iter_mut().filter(|e| e.epoch <= epoch) {
            if let Some(i) = e.first_from.iter().position(|&n| n == node) {
                e.first_from.swap_remove(i);
                e.at = e.at.max(ts);
            }
        }
        self.place_events();
    }

    /// `node`'s first stamp in view `epoch` or a later one, if it came.
    pub(super) fn first_since(&self, node: NodeId, epoch: u64) -> Option<u64> {
        self.firsts
            .get(&node)?
            .iter()
            .find(|&&(e, _)| e >= epoch)
            .map(|&(_, ts)| ts)
    }

    /// This node joined, and the event of the view it joined in has no
    /// place yet: its first message must be stamped above that place (the
    /// stamps that decide it are witnessed as they come), so that it
    /// follows the event that says it joined.
    pub(super) fn join_event_unplaced(&self) -> bool {
        let (Some(joined), Some(e)) = (self.joined_epoch, self.events.front()) else {
            return false;
        };
        e.epoch <= joined
    }

    /// `node` leaves the barrier with all of its stream that any survivor
    /// has: an event still waiting for its first stamp of a view gets none.
    pub(super) fn left_barrier(&mut self, node: NodeId) {
        self.silence.forget(node);
        for e in &mut self.events {
            e.first_from.retain(|&n| n != node);
        }
        self.firsts.remove(&node);
        self.reports.remove(&node);
        self.place_events();
    }

    /// Departed node `d` leaves the barrier without its first stamp of a
    /// view that added a node (it failed first): what it stamped above
    /// that event's place, before it knew of the view, is on no stream to
    /// the node that joined, so it is dropped at every survivor alike
    /// (they have the same stamps of it after the flush): `d` is gone from
    /// that event on.
    pub(super) fn gone_unready(&mut self, d: NodeId) {
        for e in self.events.iter_mut().filter(|e| e.adds) {
            if e.first_from.contains(&d) && !e.gone.contains(&d) {
                e.gone.push(d);
            }
        }
    }

    /// Puts the events whose place is known into the order, oldest first
    /// (each is above the one before: a member's first stamp ready for a
    /// view comes once the earlier events are placed, [`Self::ready`]),
    /// and drops what the departed nodes stamped after their event.
    pub(super) fn place_events(&mut self) {
        while self.events.front().is_some_and(|e| e.first_from.is_empty()) {
            let e = self.events.pop_front().expect("there");
            for k in e.gone_keys.into_iter().filter(|k| k.0 > e.at) {
                self.drop_held(k);
            }
            for d in e.gone {
                // A node gone in an earlier view keeps that view's place.
                let cut = *self.cuts.entry(d).or_insert(e.at);
                let after: Vec<Key> = self
                    .held
                    .range((cut + 1, d, 0)..)
                    .filter(|(k, _)| k.1 == d)
                    .map(|(k, _)| *k)
                    .collect();
                for k in after {
                    self.drop_held(k);
                }
            }
            self.held
                .insert((e.at, EVENT_NODE, e.epoch), Held::Event(e.event));
        }
    }

    /// A departed node's held message stamped after its event: dropped.
    pub(super) fn drop_held(&mut self, k: Key) {
        if let Some(Held::Message { msg, .. }) = self.held.remove(&k) {
            self.held_bytes -= msg.bytes.len();
            self.counters.cut += 1;
        }
    }

    /// The epoch this node's stamps carry: the largest view epoch E it
    /// installed with every event of a view before E placed here. A
    /// view's event is placed by its members' first stamps ready for it,
    /// so above the events of the views before, at every member alike
    /// (one that joined in it too, which never saw those).
    pub(super) fn ready(&self) -> u64 {
        self.events
            .front()
            .map_or(self.installed, |e| e.epoch.min(self.installed))
    }
}
