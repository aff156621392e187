//! What the mode sweep checks once nothing is left to happen (see the
//! parent module for the simulation and the list of checks).
//!
//! Owns: the verdict on a finished run. May not touch: the run (it reads
//! the world only).

use std::collections::{BTreeMap, BTreeSet};

use mcast_wire::NodeId;

use super::{Kind, Node, Received, World, PUBLISHER, SUBSCRIBER};

impl World {
    /// What is checked once nothing is left to happen.
    pub(super) fn check(&self) -> Result<(), String> {
        let empty = Vec::new();
        let show = |l: &[(NodeId, Vec<u8>)]| -> Vec<String> {
            l.iter()
                .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
                .collect()
        };
        // (origin, index) of a message's text.
        let key = |m: &[u8]| -> Option<(NodeId, u64)> {
            let text = String::from_utf8_lossy(m);
            let (o, k) = text.split_once(':')?;
            Some((o.parse().ok()?, k.parse().ok()?))
        };
        let scattered = |m: &[u8]| key(m).is_some_and(|k| self.scatterings.contains_key(&k));
        let plain_of = |n: &Node| -> Received {
            let got = n.got.get(&SUBSCRIBER).unwrap_or(&empty);
            got.iter().filter(|(_, m)| !scattered(m)).cloned().collect()
        };
        // The nodes there from the start (and never evicted) deliver one
        // sequence (but the scatterings' parts, each node its own); a node
        // that joined later, its part from where it joined: any two deliver
        // the messages they both deliver (parts included) in the same order.
        let order: Option<(NodeId, Received)> = self
            .nodes
            .iter()
            .find(|(id, _)| !self.joined_later(**id))
            .map(|(id, n)| (*id, plain_of(n)));
        for (&id, n) in &self.nodes {
            let got = n.got.get(&SUBSCRIBER).unwrap_or(&empty);
            let plain = plain_of(n);
            // What a rejoined node's clients had before its pause, and all
            // they had before its rejoin (awake, it may deliver what the
            // survivors order otherwise, docs/protocol.md §6.3).
            let no_evictions = Vec::new();
            let evictions = self.evictions.get(&id).unwrap_or(&no_evictions);
            let before_all: Received = evictions
                .iter()
                .flat_map(|(b, a)| b.iter().chain(a))
                .cloned()
                .collect();
            // Its own messages from this number on are of its incarnation.
            let own_from = self
                .boundaries
                .get(&id)
                .and_then(|b| b.last())
                .copied()
                .unwrap_or(0);
            match &order {
                // A node that joined later: the founders' sequence from where
                // it joined on, whole (from the event of the view it joined
                // in, where the mode places events), but for what its clients
                // had before an eviction and its own messages of an earlier
                // incarnation.
                Some((first, o)) if self.joined_later(id) => {
                    let had: BTreeSet<&[u8]> = before_all
                        .iter()
                        .filter(|(s, _)| *s != 0)
                        .map(|(_, m)| m.as_slice())
                        .collect();
                    let stale =
                        |s: NodeId, m: &[u8]| s == id && key(m).is_some_and(|(_, k)| k < own_from);
                    let from = if n.mode.orders_events() {
                        let view = (0, format!("view:{}", n.joined_in).into_bytes());
                        o.iter().position(|e| *e == view)
                    } else {
                        plain.first().and_then(|f| o.iter().position(|e| e == f))
                    };
                    let theirs: Received = from.map_or(Vec::new(), |i| {
                        o[i..]
                            .iter()
                            .filter(|(s, m)| !had.contains(m.as_slice()) && !stale(*s, m))
                            .cloned()
                            .collect()
                    });
                    if plain != theirs {
                        let at = theirs.iter().zip(&plain).position(|(a, b)| a != b);
                        return Err(format!(
                            "node {id} (joined in view {}) did not deliver node {first}'s sequence from where it joined on (first difference at {at:?}): {:?} and {:?}",
                            n.joined_in,
                            show(&theirs),
                            show(&plain)
                        ));
                    }
                }
                _ if self.joined_later(id) => {}
                None => {}
                Some((first, o)) if *o != plain => {
                    let (first, got) = (*first, &plain);
                    let at = o.iter().zip(got).position(|(a, b)| a != b);
                    return Err(format!(
                        "nodes {first} and {id} delivered different orders ({} and {} messages, first difference at {at:?}): {:?} and {:?}",
                        o.len(),
                        got.len(),
                        show(o),
                        show(got)
                    ));
                }
                Some(_) => {}
            }
            for (&other, m) in self.nodes.range(..id) {
                let theirs = m.got.get(&SUBSCRIBER).unwrap_or(&empty);
                same_order(got, theirs).map_err(|(a, b)| {
                    format!(
                        "nodes {id} and {other} delivered their common messages in different orders: {:?} and {:?}",
                        show(&a),
                        show(&b)
                    )
                })?;
            }
            // Across evictions nothing twice and each origin's in its order;
            // what the clients had before each pause in the order of every
            // node.
            let mut last: BTreeMap<NodeId, u64> = BTreeMap::new();
            for (s, m) in before_all.iter().chain(got).filter(|(s, _)| *s != 0) {
                let Some((_, k)) = key(m) else { continue };
                if last.get(s).is_some_and(|&l| k <= l) {
                    return Err(format!(
                        "node {id} delivered {} after {s}:{} (it rejoined {} times)",
                        String::from_utf8_lossy(m),
                        last[s],
                        evictions.len()
                    ));
                }
                last.insert(*s, k);
            }
            // (But for what its own frames decided that reached no
            // survivor: the sequenced root's last messages, delivered here
            // at once; the place of a view's event, which its own first
            // stamp of the view may have set.)
            let unstable = self.unstable.get(&id);
            for (before, _) in evictions {
                let before: Received = before
                    .iter()
                    .filter(|(s, m)| *s != 0 && !unstable.is_some_and(|u| u.contains(m)))
                    .cloned()
                    .collect();
                for (&other, m) in &self.nodes {
                    let theirs = m.got.get(&SUBSCRIBER).unwrap_or(&empty);
                    same_order(&before, theirs).map_err(|(a, b)| {
                        format!(
                            "what node {id} delivered before its pause and what node {other} delivered are in different orders: {:?} and {:?}",
                            show(&a),
                            show(&b)
                        )
                    })?;
                }
            }
            let mut next: BTreeMap<NodeId, u64> = BTreeMap::new();
            let mut events = Vec::new();
            for (source, m) in got {
                let text = String::from_utf8_lossy(m);
                if *source == 0 {
                    let epoch = text
                        .strip_prefix("view:")
                        .ok_or("an event without its view")?;
                    events.push(epoch.parse::<u64>().unwrap());
                    continue;
                }
                // Before the event of the view it joined in, a node's
                // clients get only the parts of scatterings addressed to
                // them (checked below with the scatterings).
                if events.is_empty() && matches!(self.kind, Kind::Total { .. }) {
                    if scattered(m) {
                        continue;
                    }
                    return Err(format!(
                        "node {id} delivered {text} before the event of the view it joined in"
                    ));
                }
                // A message comes between the event of a view that holds its
                // node and the next event (of a view without it, if any).
                if let Some(e) = events.last() {
                    if !self.history[e].contains(source) {
                        return Err(format!(
                            "node {id} delivered {text} after the event of view {e}, which does not hold node {source}"
                        ));
                    }
                }
                let (o, k) = text.split_once(':').ok_or("a message without its origin")?;
                let (o, k): (NodeId, u64) = (o.parse().unwrap(), k.parse().unwrap());
                if o != *source {
                    return Err(format!("{text} delivered as node {source}'s"));
                }
                if self
                    .scatterings
                    .get(&(o, k))
                    .is_some_and(|to| !to.contains(&id))
                {
                    return Err(format!(
                        "node {id} delivered {text}, a scattering's part for another node"
                    ));
                }
                // (A node that joined later starts where it joined, but for
                // its own messages, which it delivers from its incarnation's
                // first.)
                let want = next.entry(o).or_insert(if !self.joined_later(id) {
                    0
                } else if o == id {
                    own_from
                } else {
                    k
                });
                // Scatterings without a part for this node are not due.
                let not_here = |j: u64| {
                    self.scatterings
                        .get(&(o, j))
                        .is_some_and(|to| !to.contains(&id))
                };
                // A crashed origin's messages that no survivor received are
                // lost with it: its later ones may follow a gap. So may an
                // evicted origin's (of an incarnation before one of its
                // boundaries).
                let old = |j: u64| {
                    self.boundaries
                        .get(&o)
                        .is_some_and(|b| b.iter().any(|&b| j < b))
                };
                while *want < k && (not_here(*want) || old(*want)) {
                    *want += 1;
                }
                let crashed = !self.nodes.contains_key(&o);
                if k != *want && !(crashed && k > *want) {
                    return Err(format!(
                        "node {id} delivered {text} where {o}:{want} was due (lost, repeated or out of order)"
                    ));
                }
                *want = k + 1;
            }
            for (&o, &taken) in &self.taken {
                // (Not due: scatterings without a part here, and an evicted
                // origin's messages of an incarnation before its last.)
                let mut got = next.get(&o).copied().unwrap_or(0);
                let old = |j: u64| {
                    self.boundaries
                        .get(&o)
                        .is_some_and(|b| b.iter().any(|&b| j < b))
                };
                let not_here = |j: u64| {
                    self.scatterings
                        .get(&(o, j))
                        .is_some_and(|to| !to.contains(&id))
                };
                while got < taken && (not_here(got) || old(got)) {
                    got += 1;
                }
                let counted = !self.joined_later(id) || next.contains_key(&o) || o == id;
                if self.nodes.contains_key(&o) && counted && got != taken {
                    return Err(format!(
                        "node {id} delivered {got} of the {taken} messages node {o} took"
                    ));
                }
            }
            // Every view's event the mode placed, once, in view order.
            if events != n.placed {
                return Err(format!(
                    "node {id} delivered the events of views {events:?}, not those of {:?}",
                    n.placed
                ));
            }
            let publisher = n.got.get(&PUBLISHER).unwrap_or(&empty);
            let others: Vec<_> = got
                .iter()
                .filter(|(s, m)| *s != id && !scattered(m))
                .cloned()
                .collect();
            if *publisher != others {
                let show = |l: &[(NodeId, Vec<u8>)]| -> Vec<String> {
                    l.iter()
                        .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
                        .collect()
                };
                return Err(format!(
                    "node {id}'s publisher did not get exactly the others' messages: {:?}, subscriber {:?}",
                    show(publisher),
                    show(got)
                ));
            }
            let stats = n.mode.stats_json();
            if stats["pending"].as_u64().unwrap_or(0) != 0 {
                return Err(format!("node {id} still waits for the root: {stats}"));
            }
            if stats["held"].as_u64().unwrap_or(0) != 0
                || stats["events_unplaced"].as_u64().unwrap_or(0) != 0
            {
                return Err(format!("node {id} still holds messages: {stats}"));
            }
        }
        // (Commit) what a node delivered before it crashed, every surviving
        // founder delivers (they were members when it was sent).
        if let Kind::Total { commit: true, .. } = self.kind {
            let paused = self
                .evictions
                .iter()
                .flat_map(|(c, e)| e.iter().map(move |(b, _)| (c, b)));
            for (c, got) in self.crashed_got.iter().chain(paused) {
                for (source, m) in got.iter().filter(|(s, m)| *s != 0 && !scattered(m)) {
                    let lacks = self.nodes.iter().find(|(&id, n)| {
                        !self.joined_later(id)
                            && !n
                                .got
                                .get(&SUBSCRIBER)
                                .is_some_and(|g| g.iter().any(|(s, x)| s == source && x == m))
                    });
                    if let Some((id, _)) = lacks {
                        return Err(format!(
                            "node {c} delivered {} before it crashed or was evicted, and node {id} never does",
                            String::from_utf8_lossy(m)
                        ));
                    }
                }
            }
        }
        // A scattering reaches every live node it has a part for, or none
        // (its origin failed before any survivor had it whole).
        // (A rejoined node's old incarnation, if the scattering came before
        // its rejoin, counts as a crashed node.)
        for (&(o, k), to) in &self.scatterings {
            let text = format!("{o}:{k}").into_bytes();
            let old = |d: &NodeId| {
                self.scattered_before
                    .get(d)
                    .is_some_and(|s| s.contains(&(o, k)))
            };
            let (has, lacks): (Vec<NodeId>, Vec<NodeId>) = to
                .iter()
                .filter(|d| self.nodes.contains_key(d) && !old(d))
                .partition(|d| {
                    self.nodes[d]
                        .got
                        .get(&SUBSCRIBER)
                        .is_some_and(|g| g.iter().any(|(_, m)| *m == text))
                });
            if !has.is_empty() && !lacks.is_empty() {
                return Err(format!(
                    "the scattering {o}:{k} reached nodes {has:?}, not {lacks:?}"
                ));
            }
        }
        Ok(())
    }
}

/// Ok when `a` and `b` deliver the messages they share in the same order;
/// else those messages in each one's order.
fn same_order(a: &Received, b: &Received) -> Result<(), (Received, Received)> {
    let (x, y) = (common(a, b), common(b, a));
    if x == y {
        Ok(())
    } else {
        Err((x, y))
    }
}

/// The messages of `a` that `b` holds too, in `a`'s order.
fn common(a: &Received, b: &Received) -> Received {
    let in_b: BTreeSet<&[u8]> = b.iter().map(|(_, m)| m.as_slice()).collect();
    a.iter()
        .filter(|(_, m)| in_b.contains(m.as_slice()))
        .cloned()
        .collect()
}
