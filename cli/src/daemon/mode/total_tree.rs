//! The total-order mode's side of the commit tree (docs/protocol.md §6.4,
//! "Commit over a tree" and "Stamps over the tree"): what this node sends
//! up (its barrier report where the group commits, else its claim or that
//! it is busy), when, and what it takes from the root's point (the stable
//! point, or the least claim bounded by the busy members' stamps); and the
//! tree's part of `mcast stat`.
//!
//! Owns: the decisions above, over [`TotalOrder`]'s state. May not touch:
//! the tree's shape and the children's reports
//! ([`commit_tree`](super::super::commit_tree)), the claim itself
//! ([`claims`](super::super::claims)), the barrier's other terms and the
//! deliveries ([`total`](super)).

use super::*;

impl TotalOrder {
    /// The tree carries claims: a group that does not commit, over a
    /// stream that acknowledges (a committing group's tree carries its
    /// reports, which need no acknowledgment round).
    pub(super) fn claims_mode(&self) -> bool {
        self.claims_on && !self.commit
    }

    /// The group uses the commit tree in large enough views.
    pub(super) fn tree_used(&self) -> bool {
        self.commit || self.claims_mode()
    }

    /// The view's tree carries claims.
    pub(super) fn tree_claims(&self) -> bool {
        self.claims_mode() && self.commit_tree.on()
    }

    /// The root's least claim is known in this view: nobody beacons for
    /// another's message, nor is watched for its stamps, but the busy.
    pub(super) fn claims_cover(&self) -> bool {
        self.tree_claims() && self.commit_tree.stable().is_some_and(|p| p > 0)
    }

    /// Others' messages may wait on this node's stamps: the root's least
    /// claim does not cover the view, or this node is busy (its stamps
    /// bound it).
    pub(super) fn stamps_wanted(&self) -> bool {
        !self.claims_cover() || self.own_busy().is_some()
    }

    /// This node, where it is busy: it has messages some member may lack,
    /// and says so up the tree instead of a claim that waits for them.
    pub(super) fn own_busy(&self) -> Option<NodeId> {
        (self.claims_mode() && self.claims.unacked() > 0).then_some(self.node)
    }

    /// This node's value up the tree: its report; or its claim (none,
    /// `u64::MAX`, while it is busy).
    pub(super) fn own_up(&mut self) -> u64 {
        if self.claims_mode() {
            self.own_up_peek()
        } else {
            self.report()
        }
    }

    /// [`Self::own_up`] without keeping the clock's reading.
    pub(super) fn own_up_peek(&self) -> u64 {
        if !self.claims_mode() {
            self.report_peek()
        } else if self.own_busy().is_some() {
            u64::MAX
        } else {
            self.claim_vouched()
        }
    }

    /// The claim, but no further than what is known of the place of a
    /// pending event of a view that adds a node, as a report
    /// ([`Self::report_peek`]): should this node fail before its stamps are
    /// ready for that view, the survivors drop what it stamped above that
    /// place (`gone_unready`), which no member may have delivered. (The
    /// total-order sweep's seed 2617 without it: a root delivered its own
    /// message, committed by the claims, that the survivors then cut.)
    pub(super) fn claim_vouched(&self) -> u64 {
        let claim = self.claims.current();
        match self.events.iter().find(|e| e.adds) {
            Some(e) => claim.min(e.at),
            None => claim,
        }
    }

    /// The view's least claim, where the tree carries claims (the root
    /// settles its own first): below it every member has every message of
    /// the view's members.
    pub(super) fn tree_point(&mut self) -> Option<u64> {
        if !self.tree_claims() {
            return None;
        }
        if self.commit_tree.is_root() {
            let own = self.own_up_peek();
            self.commit_tree.settle_root(own, Some(self.own_busy()));
        }
        let point = self.commit_tree.stable()?;
        // The busy members are bounded by their own stamps.
        let mut bound = point;
        for &q in self.commit_tree.stable_busy() {
            if q != self.node {
                if let Some(largest) = self.senders.get(q) {
                    bound = bound.min(largest?);
                }
            }
        }
        Some(bound)
    }

    /// At or below this, every member of the view has every message: the
    /// least of this node's barrier and what is known of the others'
    /// reports: the least of their last reports here, or the view's stable
    /// point from the commit tree, whichever is larger (both are bounds
    /// below every member's barrier). None while neither is known.
    /// Departed nodes no longer count: they deliver nothing more.
    pub(super) fn stable(&mut self) -> Option<u64> {
        let barrier = self.barrier()?;
        if self.commit_tree.is_root() {
            let own = self.own_up();
            self.commit_tree.settle_root(own, None);
        }
        let others = match (self.counted.least(), self.commit_tree.stable()) {
            (Some(direct), Some(tree)) => Some(direct.max(tree)),
            (direct, tree) => direct.or(tree),
        };
        Some(barrier.min(others?))
    }

    /// The barrier to put in the next frame (0 when the group does not
    /// commit: nobody reads it).
    pub(super) fn report(&mut self) -> u64 {
        self.clock.floor();
        self.report_peek()
    }

    /// [`Self::report`] without keeping the clock's reading (for
    /// [`GroupMode::poll_at`]).
    pub(super) fn report_peek(&self) -> u64 {
        if !self.commit {
            return 0;
        }
        let barrier = self
            .senders
            .least()
            .map_or(0, |least| self.clock.peek().min(least));
        // While the event of a view that adds a node has no place, nothing
        // above what is known of its place is vouched for: above it, the
        // order counts the joining node, which lacks what a member that
        // has not seen the view yet stamped before it does.
        match self.events.iter().find(|e| e.adds) {
            Some(e) => barrier.min(e.at),
            None => barrier,
        }
    }

    /// Others may wait for this node's report: a message stamped above the
    /// last one is known here (others' or its own), and the barrier has
    /// moved past that report.
    /// (Over a commit tree, reports go up the tree instead.)
    pub(super) fn report_due(&mut self) -> bool {
        !self.commit_tree.on()
            && self.report_wanted()
            && self.barrier().is_some_and(|b| b > self.reported)
    }

    /// `node`'s report, kept only where the group commits (nobody reads it
    /// elsewhere: no map update per frame).
    pub(super) fn note_report(&mut self, node: NodeId, report: u64) {
        if self.commit {
            self.reports.insert(node, report);
            if self.counted.contains(node) {
                self.counted.set(node, Some(report));
            }
        }
    }

    /// A message stamped above this node's last report is known here.
    pub(super) fn report_wanted(&self) -> bool {
        self.commit && self.demand.max(self.own_max) > self.reported
    }

    /// (Commit tree) this node's report is wanted up the tree: as a
    /// report beacon would be ([`Self::report_wanted`]), or because
    /// something held here waits for the view's stable point, which the
    /// root can only raise with every member's report (nobody else knows
    /// what this node holds until its beacons say it is stuck).
    /// With claims: this node's busy state is not what it last sent up, or
    /// (not busy) it sent up a claim short of [`Self::claim_wanted`].
    pub(super) fn up_wanted(&self) -> bool {
        let waiting = !self.held.is_empty();
        if self.claims_mode() {
            let busy = self.own_busy().is_some();
            busy != self.sent_busy || !busy && self.claim_wanted() > self.claimed
        } else {
            self.report_wanted() || waiting
        }
    }

    /// (Claims) how far the view's least claim must reach: past every
    /// message held here (every member holds each until it passes, its
    /// sender too) and what a stuck node asked for.
    pub(super) fn claim_wanted(&self) -> u64 {
        self.held_max().max(self.asked)
    }

    /// (Commit tree) sends this node's subtree report to its parent when
    /// one is due; true at the root when its stable point is due to go
    /// out (in a beacon).
    pub(super) fn send_up(&mut self, cx: &mut ModeCx<'_>, now_ns: u64) -> bool {
        if !self.commit_tree.on() {
            return false;
        }
        if self.claims_mode() {
            let acked = cx.streams.acked_messages(self.group);
            let idle = cx.streams.send_idle(self.group);
            let floor = self.clock.floor();
            self.claims.refresh(acked, idle, floor);
            self.claim_checked_ns = Some(now_ns);
        }
        let own = self.own_up();
        let own_busy = self.own_busy();
        let wanted = self.up_wanted();
        let claims = self.claims_mode().then_some(own_busy);
        let Some(parent) = self.commit_tree.parent() else {
            let due = self
                .commit_tree
                .due(own, own_busy, wanted, now_ns, self.beacon_ns);
            self.commit_tree.settle_root(own, claims);
            return due.is_some();
        };
        let (value, busy) =
            match self
                .commit_tree
                .due(own, own_busy, wanted, now_ns, self.beacon_ns)
            {
                Some(value) => {
                    if !self.claims_mode() {
                        self.reported = self.reported.max(own);
                    }
                    let busy = if self.claims_mode() {
                        self.commit_tree.aggregate_busy(own_busy)
                    } else {
                        Vec::new()
                    };
                    (value, busy)
                }
                // Stuck: the last report again, as evidence of life.
                None if self.stuck(now_ns)
                    && self.commit_tree.keepalive_due(now_ns, self.beacon_ns) =>
                {
                    (
                        self.commit_tree.last_sent(),
                        self.commit_tree.last_sent_busy().to_vec(),
                    )
                }
                None => return false,
            };
        let body = commit_tree::encode_up(self.commit_tree.epoch(), value, &busy);
        cx.outbox.push((
            parent,
            LinkMessage::Mode {
                group: self.group,
                body,
            },
        ));
        self.note_sent(value, busy, now_ns);
        false
    }

    /// `value` and `busy` went up the tree (or, its root, out) at `now_ns`.
    pub(super) fn note_sent(&mut self, value: u64, busy: Vec<NodeId>, now_ns: u64) {
        self.sent_busy = busy.contains(&self.node);
        if !self.sent_busy && value != u64::MAX {
            self.claimed = self.claimed.max(value);
        }
        self.commit_tree.sent(value, busy, now_ns);
    }

    /// (Commit) the tree's part of `mcast stat`, `now` this node's clock.
    pub(super) fn commit_tree_json(&self, now: u64) -> serde_json::Value {
        let t = &self.commit_tree;
        json!({
            "on": t.on(),
            "view": t.epoch(),
            "parent": t.parent(),
            "root": t.is_root(),
            // What climbs it: each member's claim, or its barrier report.
            "carries": if self.claims_mode() { "claims" } else { "reports" },
            "busy": t.stable_busy().len(),
            "stable_lag_us": t.stable().map(|s| now.saturating_sub(s) / 1_000),
            "claim_lag_us": self.claims_mode().then(|| now.saturating_sub(self.claims.current()) / 1_000),
            "claim_waits_on": self.claims.unacked(),
            "ups_sent": t.ups_sent,
            "ups_received": t.ups_received,
            "stables_received": t.stables_received,
            "ups_dropped": t.ups_dropped,
        })
    }
}
