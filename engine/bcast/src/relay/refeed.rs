//! Re-feeding after a view change (docs/protocol.md §8.5, "At a view
//! change"): a live root's messages that a member missed under an earlier
//! view (an interior member of its tree died, or a link lost its suffix)
//! reach it from its **nearest live ancestor** in the message's tree that
//! holds the message, and from the root only when no such ancestor is
//! left (seed 003: "a subtree whose interior node died is re-fed by its
//! nearest live ancestor").
//!
//! Owns: the root's choice of who re-feeds each missed message, the
//! root's memory of the views its unstable messages were sent in, and a
//! member's answer to the root's REFEED request. May not touch: the
//! schedules themselves ([`crate::plan`]) or the rounds of departed roots
//! (`round`).

use std::collections::HashMap;

use super::wire::Msg;
use super::{Kept, Relay};
use crate::plan::{plan, Algorithm, Shape};

/// A view this root's unstable messages were sent in: its members, and the
/// trees planned from it so far, each member's parent by algorithm (a
/// tree's shape does not depend on the message's length), planned once for
/// every orphan and message that asks.
#[derive(Debug)]
pub(super) struct PastView {
    members: Vec<u32>,
    parents: HashMap<Algorithm, Vec<Option<u32>>>,
}

impl Relay {
    /// As the root: member `to`, whose SYNC for view `epoch` said it will
    /// deliver `next`, lacks what this root sent under earlier views from
    /// `next` on. Each message goes from the nearest live ancestor of `to`
    /// in its tree that holds it (a REFEED asks it), or from here.
    pub(super) fn refeed_missed(&mut self, to: u32, next: u64, epoch: u64) {
        let again: Vec<(u64, Kept)> = self
            .sent
            .range(next..)
            .filter(|(_, k)| k.epoch < epoch)
            .map(|(s, k)| (*s, k.clone()))
            .collect();
        for (seq, k) in again {
            match self.nearest_holder(to, seq, &k) {
                Some(a) => {
                    self.stats.delegated += 1;
                    let root = self.me;
                    self.send(a, &Msg::Refeed { root, seq, to });
                }
                None => self.refeed(to, self.me, seq, &k),
            }
        }
    }

    /// The nearest ancestor of `to` in the tree `k` was sent by that is in
    /// this root's view and has delivered `seq` (its start at or below it,
    /// its reported position above it), or None: the root itself is the
    /// nearest, the algorithm is not a tree (pipelines and scatter-collect
    /// spread pieces from many members: the root re-feeds), or the view
    /// of the message is no longer known.
    fn nearest_holder(&mut self, to: u32, seq: u64, k: &Kept) -> Option<u32> {
        let tree = matches!(
            k.algorithm,
            Algorithm::Mst | Algorithm::RsBcast | Algorithm::Hypercube | Algorithm::HypercubeNaive
        );
        if !tree {
            return None;
        }
        let me = self.me;
        let past = self.past_views.get_mut(&k.epoch)?;
        let index = |n: u32| past.members.iter().position(|&m| m == n).map(|i| i as u32);
        let (r, mut x) = (index(me)?, index(to)?);
        if !past.parents.contains_key(&k.algorithm) {
            let shape = Shape::near_square(past.members.len() as u32);
            let schedule = plan(k.algorithm, shape, r, 1).ok()?;
            // In a tree every member but the root receives the message once.
            let mut parent = vec![None; past.members.len()];
            for t in schedule.steps.iter().flatten() {
                parent[t.to as usize] = Some(t.from);
            }
            past.parents.insert(k.algorithm, parent);
        }
        let (past, view) = (&self.past_views[&k.epoch], self.view.as_ref()?);
        let parent = &past.parents[&k.algorithm];
        loop {
            x = parent[x as usize]?;
            if x == r {
                return None;
            }
            let node = past.members[x as usize];
            let holds = self.starts.get(&node).is_some_and(|&s| s <= seq)
                && self.granted.get(&node).is_some_and(|&g| g > seq);
            if holds && view.members.contains(&node) {
                return Some(node);
            }
        }
    }

    /// A REFEED from `from`: re-feed member `to` root `root`'s message
    /// `seq`. Only the root asks; a member that does not hold the message
    /// (or no longer has `to` in its view) hands the request back, and the
    /// root re-feeds it itself.
    pub(super) fn on_refeed(&mut self, from: u32, root: u32, seq: u64, to: u32) {
        if root == self.me {
            // Handed back by the member this root asked.
            self.stats.delegations_returned += 1;
            if let Some(k) = self.sent.get(&seq).cloned() {
                self.refeed(to, root, seq, &k);
            }
            return;
        }
        if from != root {
            self.stats.refused += 1;
            return;
        }
        let in_view = self.view.as_ref().is_some_and(|v| v.members.contains(&to));
        match self
            .roots
            .get(&root)
            .and_then(|r| r.kept.get(&seq))
            .cloned()
        {
            Some(k) if in_view => self.refeed(to, root, seq, &k),
            _ => self.send(root, &Msg::Refeed { root, seq, to }),
        }
    }

    /// Remembers the members of a view this member installed, for as long
    /// as a message it sent under that view is unstable.
    pub(super) fn remember_view(&mut self, epoch: u64, members: &[u32]) {
        let oldest = self.sent.values().map(|k| k.epoch).min().unwrap_or(epoch);
        self.past_views.retain(|&e, _| e >= oldest.min(epoch));
        self.past_views.insert(
            epoch,
            PastView {
                members: members.to_vec(),
                parents: HashMap::new(),
            },
        );
    }
}
