//! A value per node (or none yet) and their least, kept sorted so that the
//! least costs O(log n) to keep and O(1) to read however large the view:
//! the total-order mode reads its barrier (the least of every node's
//! largest stamp) on every frame, and at 512 members a scan of the view
//! per frame would cost more than the frame (`mcast-bench toc`).
//!
//! Owns: the values and their order. May not touch: what they mean.

use std::collections::{BTreeMap, BTreeSet};

use mcast_wire::NodeId;

/// Per node, a value or none yet; the least of them.
#[derive(Debug, Default, Clone)]
pub struct Least {
    values: BTreeMap<NodeId, Option<u64>>,
    sorted: BTreeSet<(u64, NodeId)>,
    /// Nodes without a value.
    missing: usize,
}

impl Least {
    /// Adds `node` without a value, unless it is there. True when added.
    pub fn add(&mut self, node: NodeId) -> bool {
        match self.values.entry(node) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(None);
                self.missing += 1;
                true
            }
        }
    }

    /// Sets `node`'s value (adding the node if absent): one lookup of the
    /// node, and the sorted set moved only by the value's change (this
    /// runs for every stamp the total-order mode receives).
    pub fn set(&mut self, node: NodeId, value: Option<u64>) {
        let old = self.values.insert(node, value);
        self.unsort(node, old);
        match value {
            Some(v) => {
                self.sorted.insert((v, node));
            }
            None => self.missing += 1,
        }
    }

    pub fn remove(&mut self, node: NodeId) {
        let old = self.values.remove(&node);
        self.unsort(node, old);
    }

    /// `node`'s old value (None: it was absent) leaves the order.
    fn unsort(&mut self, node: NodeId, old: Option<Option<u64>>) {
        match old {
            Some(Some(v)) => {
                self.sorted.remove(&(v, node));
            }
            Some(None) => self.missing -= 1,
            None => {}
        }
    }

    /// `node`'s value: None when absent, Some(None) when it has none yet.
    pub fn get(&self, node: NodeId) -> Option<Option<u64>> {
        self.values.get(&node).copied()
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.values.contains_key(&node)
    }

    /// The least value; None while a node has none; `u64::MAX` when there
    /// are no nodes.
    pub fn least(&self) -> Option<u64> {
        if self.missing > 0 {
            return None;
        }
        Some(self.sorted.first().map_or(u64::MAX, |&(v, _)| v))
    }

    pub fn iter(&self) -> impl Iterator<Item = (NodeId, Option<u64>)> + '_ {
        self.values.iter().map(|(&n, &v)| (n, v))
    }

    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.values.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The least against a scan of every value, through random changes.
    #[test]
    fn the_least_is_always_that_of_a_scan() {
        let mut rng = mcast_proto::Rng::new(7);
        let mut l = Least::default();
        let mut model: BTreeMap<NodeId, Option<u64>> = BTreeMap::new();
        for _ in 0..20_000 {
            let n = rng.range(1, 12) as NodeId;
            match rng.range(0, 3) {
                0 => {
                    let added = l.add(n);
                    assert_eq!(added, !model.contains_key(&n));
                    model.entry(n).or_insert(None);
                }
                1 => {
                    let v = (rng.range(0, 3) > 0).then(|| rng.range(0, 100));
                    l.set(n, v);
                    model.insert(n, v);
                }
                _ => {
                    l.remove(n);
                    model.remove(&n);
                }
            }
            let scan = model
                .values()
                .try_fold(u64::MAX, |m, v| v.map(|v| m.min(v)));
            assert_eq!(l.least(), scan);
            assert_eq!(l.get(n), model.get(&n).copied());
            assert!(l.iter().eq(model.iter().map(|(&n, &v)| (n, v))));
        }
    }
}
