//! The survivors' round for a departed root (docs/protocol.md §8.5): each
//! member's SYNC to every other, the target and the holes everyone computes
//! alike, the re-sending by the lowest holder, DONE, and forgetting the
//! root once every member is done.

use std::collections::{BTreeMap, BTreeSet};

use super::wire::{Has, Msg};
use super::{Relay, GONE};

/// The survivors' round for one departed root, in one view.
#[derive(Debug)]
pub(super) struct Round {
    pub(super) epoch: u64,
    /// Each member's SYNC (this member's own included).
    pub(super) syncs: BTreeMap<u32, Option<Has>>,
    /// The sequence every survivor ends at, once all SYNCs are in.
    pub(super) target: Option<u64>,
    /// This member reached the target and said so.
    pub(super) finished: bool,
    /// Members that said DONE.
    pub(super) done: BTreeSet<u32>,
}

impl Relay {
    /// Starts this view's round for a departed root: this member's SYNC to
    /// every other member.
    pub(super) fn open_round(&mut self, root: u32, epoch: u64, has: Option<Has>) {
        if self.rounds.get(&root).is_some_and(|r| r.epoch >= epoch) {
            return;
        }
        let mut syncs = BTreeMap::new();
        syncs.insert(self.me, has.clone());
        // What is held beyond this member's position is let go: the round
        // re-sends everything any survivor delivered.
        if let Some(r) = self.roots.get_mut(&root) {
            r.partial.clear();
        }
        self.rounds.insert(
            root,
            Round {
                epoch,
                syncs,
                target: None,
                finished: false,
                done: BTreeSet::new(),
            },
        );
        let sync = Msg::Sync { epoch, root, has };
        for m in self.others() {
            self.send(m, &sync);
        }
        self.settle_round(root);
    }

    pub(super) fn on_sync(&mut self, from: u32, epoch: u64, root: u32, has: Option<Has>) {
        if self
            .view
            .as_ref()
            .is_some_and(|v| v.members.contains(&root))
        {
            // A root this member still has in its view: the sender's view
            // must be older; its round will be redone in a later view.
            return;
        }
        if self.rounds.get(&root).is_none_or(|r| r.epoch < epoch) {
            // Another member opened the round: answer with this member's
            // own position (none if it never heard of the root).
            let mine = self.roots.get(&root).and_then(|r| r.has());
            self.open_round(root, epoch, mine);
        }
        if let Some(r) = self.rounds.get_mut(&root).filter(|r| r.epoch == epoch) {
            r.syncs.insert(from, has);
        }
        self.settle_round(root);
    }

    /// Once every member's SYNC is in: the target, the holes, and this
    /// member's share of the re-sending (each missing message from the
    /// lowest member that delivered it).
    fn settle_round(&mut self, root: u32) {
        let others = self.others();
        let Some(round) = self.rounds.get_mut(&root) else {
            return;
        };
        if round.target.is_some() || !others.iter().all(|m| round.syncs.contains_key(m)) {
            return;
        }
        let holders: Vec<(u32, Has)> = round
            .syncs
            .iter()
            .filter_map(|(m, h)| h.clone().map(|h| (*m, h)))
            .collect();
        let target = holders.iter().map(|h| h.1.next).max().unwrap_or(0);
        round.target = Some(target);
        // A member that skipped a sequence in an earlier round does not
        // hold it: it is a hole for everyone (no survivor delivered it).
        let holder_of = |seq: u64| holders.iter().find(|h| h.1.holds(seq)).map(|h| h.0);
        // This member's holes: what no holder delivered.
        if let Some((_, mine)) = holders.iter().find(|h| h.0 == self.me) {
            let mut holes = Vec::new();
            let mut seq = mine.next;
            while seq < target {
                let end = (seq..target)
                    .find(|&s| holder_of(s).is_some())
                    .unwrap_or(target);
                if end > seq {
                    holes.push(seq..end);
                }
                seq = (end..target)
                    .find(|&s| holder_of(s).is_none())
                    .unwrap_or(target);
            }
            let r = self.roots.get_mut(&root).expect("a holder knows the root");
            r.holes = holes;
            // Nothing beyond the target will come: what is held there goes.
            r.partial = std::mem::take(&mut r.partial)
                .into_iter()
                .filter(|(s, _)| *s < target)
                .collect();
        }
        // This member's share of the re-sending.
        for &(m, ref h) in &holders {
            let next = h.next;
            if m == self.me {
                continue;
            }
            for seq in next..target {
                if holder_of(seq) != Some(self.me) {
                    continue;
                }
                let kept = self
                    .roots
                    .get(&root)
                    .and_then(|r| r.kept.get(&seq))
                    .cloned();
                match kept {
                    Some(k) => self.refeed(m, root, seq, &k),
                    None => self.stats.refused += 1,
                }
            }
        }
        self.advance(root);
    }

    /// Says DONE once this member reached the round's target.
    pub(super) fn finish_round(&mut self, root: u32) {
        let next = self.roots.get(&root).and_then(|r| r.start.map(|_| r.next));
        let Some(round) = self.rounds.get_mut(&root) else {
            return;
        };
        let Some(target) = round.target else { return };
        if round.finished || next.is_some_and(|n| n < target) {
            return;
        }
        round.finished = true;
        let epoch = round.epoch;
        self.stats.rounds += 1;
        for m in self.others() {
            self.send(m, &Msg::Done { epoch, root });
        }
        self.close_round(root);
    }

    /// Forgets a departed root once every member finished its round.
    pub(super) fn close_round(&mut self, root: u32) {
        let others = self.others();
        let Some(r) = self.rounds.get(&root) else {
            return;
        };
        if r.finished && others.iter().all(|m| r.done.contains(m)) {
            let epoch = r.epoch;
            self.rounds.remove(&root);
            self.roots.remove(&root);
            if self.gone.len() >= GONE {
                self.gone.pop_first();
            }
            self.gone.insert(root, epoch);
        }
    }
}
