//! Failure detection (seed 004 §3.4) and what follows from it: beats and
//! probes, peers declared failed, restarted or heard again, this node's own
//! eviction and its rejoin as a new member.
//!
//! Owns: [`Live`]: the detector (`mcast_groups::liveness`), the joins of a
//! rejoin, and when the send streams are next asked for silent members.
//! Does not touch: views (the group service changes them; it is told of
//! failures here), the flush's state, the links' queues (it asks
//! [`peers`](super::peers) to reset a link).

use std::collections::HashMap;

use mcast_engine::{EngineError, Transport};
use mcast_groups::detector::DetectorConfig;
use mcast_groups::liveness::{LiveEvent, Liveness, Report};
use mcast_ipc::{ClientId, ErrorCode, Response};
use mcast_wire::{GroupId, NodeId};
use serde_json::json;

use super::deliver::event_record;
use super::Daemon;
use crate::config::Config;
use crate::links::LinkMessage;

/// A member that leaves this many of a MAK sender's acknowledgment requests
/// in a row unanswered is reported to the failure detector, which probes it
/// at once if it is also overdue for a beat (protocol.md §6.0).
const UNANSWERED_REQUESTS: u32 = 2;
/// How often the send streams are asked for such members (ns).
const UNRESPONSIVE_CHECK_NS: u64 = 10_000_000;

/// Failure detection and rejoin state.
#[derive(Debug)]
pub(super) struct Live {
    pub(super) tracker: Liveness,
    pub(super) events: Vec<LiveEvent>,
    /// When the send streams are next asked for unresponsive members, and
    /// the receive streams for the frames that came (ns).
    next_unresponsive_check: u64,
    /// Per node, its frames received in the receive streams at the last
    /// check ([`Engine::frames_from`](mcast_engine::Engine::frames_from)).
    frames_from: Vec<(NodeId, u64)>,
    /// The clients' joins after a rejoin.
    pub(super) rejoins: Rejoins,
}

/// The joins a rejoin makes again for its clients: held until every peer
/// has seen the new incarnation, then made, then answered.
#[derive(Debug, Default)]
pub(super) struct Rejoins {
    /// Waiting until `at` (ns): (client, group name).
    queue: Vec<(ClientId, String)>,
    at: u64,
    /// Made, by request id, until answered.
    made: HashMap<u64, (ClientId, String)>,
}

impl Rejoins {
    /// A rejoin: `members` (the clients of the groups this node carried)
    /// join again at `at`, and so do the joins of an earlier rejoin still
    /// waiting or on their way: a second eviction before the first one's
    /// joins went out must not lose its clients.
    pub(super) fn restart(&mut self, members: Vec<(ClientId, String)>, at: u64) {
        let mut again = std::mem::take(&mut self.queue);
        let mut made: Vec<_> = std::mem::take(&mut self.made).into_iter().collect();
        made.sort_unstable_by_key(|&(id, _)| id);
        again.extend(made.into_iter().map(|(_, j)| j));
        again.extend(members);
        let mut seen = std::collections::HashSet::new();
        again.retain(|(c, name)| seen.insert((*c, name.clone())));
        self.queue = again;
        self.at = at;
    }

    /// The joins whose wait is over at `now`.
    pub(super) fn due(&mut self, now: u64) -> Vec<(ClientId, String)> {
        if now < self.at {
            return Vec::new();
        }
        std::mem::take(&mut self.queue)
    }

    /// Join `id` was made for `client` and `name`.
    pub(super) fn made(&mut self, id: u64, client: ClientId, name: String) {
        self.made.insert(id, (client, name));
    }

    /// Join `id` was answered: whose it was, if it was a rejoin's.
    pub(super) fn answered(&mut self, id: u64) -> Option<(ClientId, String)> {
        self.made.remove(&id)
    }

    /// A rejoin's join was refused for a reason that passes (the agent did
    /// not answer while the cluster changed): make it again at `at`.
    pub(super) fn retry(&mut self, client: ClientId, name: String, at: u64) {
        if !self.queue.iter().any(|(c, n)| *c == client && *n == name) {
            self.queue.push((client, name));
        }
        self.at = self.at.max(at);
    }

    /// True while joins are waiting or on their way.
    pub(super) fn under_way(&self) -> bool {
        !self.made.is_empty() || !self.queue.is_empty()
    }
}

impl Live {
    pub(super) fn new(cfg: &Config, incarnation: u32) -> Live {
        let ms = 1_000_000;
        let dcfg = DetectorConfig {
            interval: cfg.heartbeat_ms * ms,
            suspect_after: cfg.suspect_after,
            probe_interval: cfg.probe_ms * ms,
            probes: cfg.probes,
        };
        let peers: Vec<NodeId> = cfg.peers.iter().map(|p| p.node).collect();
        Live {
            tracker: Liveness::new(incarnation, &peers, dcfg, mcast_engine::sys::monotonic_ns()),
            events: Vec::new(),
            next_unresponsive_check: 0,
            frames_from: Vec::new(),
            rejoins: Rejoins::default(),
        }
    }
}

/// The nodes whose stream frame count moved from `before` to `now` (a node
/// first seen in `now` has no earlier count to move from).
fn frames_came(before: &[(NodeId, u64)], now: &[(NodeId, u64)]) -> Vec<NodeId> {
    now.iter()
        .filter(|(n, count)| before.iter().any(|(m, c)| m == n && c != count))
        .map(|&(n, _)| n)
        .collect()
}

impl<T: Transport> Daemon<T> {
    /// Beats, probes and their answers; the detector's verdicts.
    pub(super) fn liveness(&mut self) -> Result<bool, EngineError> {
        let now = mcast_engine::sys::monotonic_ns();
        self.groups.tick(now);
        let mut events = std::mem::take(&mut self.live.events);
        while let Some((from, payload)) = self.engine.poll_beat() {
            self.live.tracker.on_beat(
                from,
                &payload,
                now,
                self.groups.registry_epoch(),
                &mut events,
            );
        }
        if now >= self.live.next_unresponsive_check {
            self.live.next_unresponsive_check = now + UNRESPONSIVE_CHECK_NS;
            // A node whose stream frames keep coming is alive, whatever its
            // beats do: under a full load they may come late or be dropped
            // with the data (protocol.md §6.0).
            let mut frames = Vec::new();
            self.engine.frames_from(&mut frames);
            for n in frames_came(&self.live.frames_from, &frames) {
                self.live.tracker.heard(n, now);
            }
            self.live.frames_from = frames;
            let mut silent = Vec::new();
            self.engine.unresponsive(UNANSWERED_REQUESTS, &mut silent);
            for (group, n) in silent {
                if self.live.tracker.reported(
                    n,
                    Report::Unacknowledged,
                    now,
                    self.groups.registry_epoch(),
                    &mut events,
                ) {
                    self.counters.data_path_suspicions += 1;
                    self.log.warn(
                        "peer stopped acknowledging a stream and missed a beat: probing it",
                        &[("node", &n), ("group", &group)],
                    );
                }
            }
        }
        self.live
            .tracker
            .poll(now, self.groups.registry_epoch(), &mut events);
        // Before the verdicts: a peer falling silent with others is not
        // counted live when this node weighs taking a role.
        self.weigh_doubts(now);
        let mut work = false;
        for ev in events.drain(..) {
            match ev {
                LiveEvent::Send { to, payload } => {
                    self.engine.send_beat(to, &payload)?;
                }
                LiveEvent::Suspect(n) => {
                    self.counters.suspicions += 1;
                    self.log.warn("peer suspect: probing it", &[("node", &n)]);
                }
                LiveEvent::Failed(n) => {
                    work = true;
                    self.node_failed(n)?;
                }
                LiveEvent::Restarted(n) => {
                    work = true;
                    self.log
                        .warn("peer restarted: its old state is gone", &[("node", &n)]);
                    self.node_failed(n)?;
                    self.groups.node_recovered(n);
                    self.peer_restarted(n)?;
                }
                LiveEvent::Recovered(n) => {
                    work = true;
                    self.counters.nodes_recovered += 1;
                    self.groups.node_recovered(n);
                    self.log
                        .info("peer heard again after failing", &[("node", &n)]);
                    self.peer_recovered(n)?;
                }
                LiveEvent::Rejoin { by } => {
                    work = true;
                    self.rejoin(by)?;
                }
                LiveEvent::Registry { node, epoch } => self.groups.adopt_registry(node, epoch),
                LiveEvent::Majority => {
                    let (r, e) = self.groups.registry_epoch();
                    self.log.info(
                        "registry known: a majority of the cluster heard",
                        &[("registry", &r), ("moves", &e)],
                    );
                    self.groups.confirm_registry();
                }
            }
        }
        self.live.events = events;
        work |= self.close_dead_streams()?;
        self.rejoin_joins();
        let d = self.live.tracker.detector();
        self.counters.probes_sent = d.probes_sent;
        self.counters.probes_answered = self.live.tracker.counters.probes_answered;
        Ok(work)
    }

    /// A peer declared this node failed (it was paused, or cut off by a
    /// partition, longer than the detection bound): every view it was in
    /// has moved on without it. It starts afresh as a new member: a new
    /// incarnation (so every peer drops its old state), its groups and
    /// streams closed, its clients told (a membership event saying
    /// `evicted`) and joined again by name: they continue from their new
    /// join point, so nothing is delivered twice or out of order.
    pub(super) fn rejoin(&mut self, by: NodeId) -> Result<(), EngineError> {
        self.counters.rejoins += 1;
        self.live.tracker.rejoined();
        self.incarnation = self.live.tracker.incarnation();
        self.log.warn(
            "this node was declared failed: rejoining as a new member",
            &[("by", &by), ("incarnation", &self.incarnation)],
        );
        self.store_incarnation();
        let mut again: Vec<(ClientId, String)> = Vec::new();
        let groups: Vec<GroupId> = self.local.keys().copied().collect();
        let mut stale = Vec::new();
        for g in groups {
            let lg = &self.local[&g];
            stale.push((g, lg.name.clone()));
            let event = json!({"evicted": true, "by": by, "rejoining": true}).to_string();
            let hdr = event_record(g);
            let members = lg.members.clone();
            again.extend(members.iter().map(|&c| (c, lg.name.clone())));
            for &c in &members {
                if let Some(state) = self.clients.by_id.get_mut(&c) {
                    state.groups.remove(&g);
                }
            }
            self.event_to(&members, hdr, event.as_bytes());
            if !members.is_empty() {
                self.streams.rejoin_groups.insert(g);
            }
            if let Some(d) = self.local[&g].mode.delivered() {
                self.streams.note_recalled(g, d);
            }
            self.retire(g)?;
        }
        for (_, p) in std::mem::take(&mut self.clients.pending) {
            self.clients.server.reply(
                p.client(),
                p.req(),
                Response::error(
                    ErrorCode::Unavailable,
                    format!("node {by} declared this node failed; it is rejoining: retry"),
                ),
            );
        }
        self.clients.lingering.clear();
        self.streams.pending_starts.clear();
        self.mode_early.clear();
        self.mode_early.stale_until_joined(stale);
        let (registry, epoch) = self.groups.registry_epoch();
        let mut groups = super::membership::fresh_service(&self.cfg);
        groups.adopt_registry(registry, epoch);
        groups.confirm_registry();
        groups.rejoined();
        self.groups = groups;
        let peers: Vec<NodeId> = self.cfg.peers.iter().map(|p| p.node).collect();
        for p in peers {
            let e = self.links.epochs.entry(p).or_insert(0);
            *e = (*e).max(self.incarnation);
            self.reset_link(p)?;
        }
        // The joins wait a few beats, until every peer has seen the new
        // incarnation: a peer that sees it only later drops this node's
        // members as a restart's leftovers, new ones included.
        let interval = self.live.tracker.detector().config().interval;
        let at = mcast_engine::sys::monotonic_ns() + 3 * interval;
        self.live.rejoins.restart(again, at);
        Ok(())
    }

    /// Keeps the incarnation a rejoin took in the state file, so the next
    /// run takes a larger one (`crate::epochs`).
    fn store_incarnation(&mut self) {
        let path = crate::epochs::path(&self.cfg.state_dir, self.node);
        let last = crate::epochs::load(&path).ok().flatten();
        let e = crate::epochs::Epochs {
            incarnation: self.incarnation.max(last.map_or(0, |l| l.incarnation)),
            session: last.map_or(0, |l| l.session),
        };
        if let Err(err) = crate::epochs::store(&path, e) {
            self.log
                .warn("the rejoin's incarnation is not stored", &[("error", &err)]);
        }
    }

    /// Peer `n` restarted: its old incarnation has left every group here,
    /// whatever the views say yet (a view that drops it may never arrive:
    /// views are skipped when the agent moves). Its streams are closed and
    /// flushed, it leaves the send streams' ACK sets, and it leaves this
    /// node's copy of each view, so the view that lists its new incarnation
    /// is a join and gets a stream start.
    pub(super) fn peer_restarted(&mut self, n: NodeId) -> Result<(), EngineError> {
        let groups = self.groups_with(n);
        for group in groups {
            let lg = self.local.get_mut(&group).expect("listed");
            lg.mode.peer_restarted(n);
            lg.drop_node(n, self.node);
            self.members_changed(group, &[])?;
            let remote = self.remote_nodes(group);
            let mut out = Vec::new();
            self.flush.flushes.peer_gone(group, n, &mut out);
            self.send_flush(out);
            if self.engine.receivers_in(group).contains(&n) {
                self.close_receiver(group, n)?;
                self.start_flush(group, n, &remote);
            }
        }
        Ok(())
    }

    /// Closes (and flushes) every receive stream whose sender's beats carry
    /// a newer incarnation: the sender restarted, and no `Restarted` came
    /// because this daemon never heard its old incarnation (this daemon
    /// started after the peer's last beat before it died, yet got a start
    /// from it). Without this, the old stream stays open and holds the
    /// flush states of its departure for ever, so the other survivors wait
    /// for this node until their deadline.
    pub(super) fn close_dead_streams(&mut self) -> Result<bool, EngineError> {
        let dead = |d: &Self| -> Vec<(GroupId, NodeId)> {
            d.flush
                .kept
                .iter()
                .filter(|(&(_, s), k)| {
                    d.live
                        .tracker
                        .peer_incarnation(s)
                        .is_some_and(|i| k.epoch < i)
                })
                .map(|(&gs, _)| gs)
                .collect()
        };
        let mut nodes: Vec<NodeId> = dead(self).into_iter().map(|(_, s)| s).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for &n in &nodes {
            self.counters.dead_streams_closed += 1;
            self.log.warn(
                "peer restarted unnoticed: the streams of its old incarnation are closed",
                &[("node", &n)],
            );
            self.peer_restarted(n)?;
        }
        // Streams of groups whose view here lacks the sender have no
        // departure to flush.
        for (group, n) in dead(self) {
            self.close_receiver(group, n)?;
            // Or it would be found dead again at every poll.
            self.flush.kept.remove(&(group, n));
        }
        Ok(!nodes.is_empty())
    }

    /// Issues the joins of a rejoin once their wait is over.
    pub(super) fn rejoin_joins(&mut self) {
        for (c, name) in self.live.rejoins.due(mcast_engine::sys::monotonic_ns()) {
            if !self.clients.by_id.contains_key(&c) {
                continue;
            }
            let id = self.clients.next_id();
            self.mode_early.joining(&name);
            self.groups.join(id, c.0, &name);
            self.live.rejoins.made(id, c, name);
        }
    }

    /// Hands the group service the detector's doubts at `now`: a role left
    /// on a failed node for want of a majority is taken once they clear
    /// (`GroupService::set_doubted`).
    fn weigh_doubts(&mut self, now: u64) {
        let (takeovers, registry) = (self.groups.takeovers(), self.groups.registry());
        self.groups.set_doubted(self.live.tracker.doubted(now));
        let taken = self.groups.takeovers() - takeovers;
        let moved = self.groups.registry() != registry;
        if taken > 0 || moved {
            self.counters.role_moves += taken + u64::from(moved);
            self.log.warn(
                "a majority is heard again: roles left on failed nodes move",
                &[
                    ("agent_roles_taken", &taken),
                    ("registry", &self.groups.registry()),
                ],
            );
        }
    }

    /// Counts and logs the roles this node took since `before` (agent roles
    /// taken, the registry's node) on the failure of node `failed`.
    fn note_role_moves(&mut self, before: (u64, NodeId), failed: NodeId) {
        let (takeovers, registry) = before;
        if self.groups.takeovers() > takeovers {
            self.counters.role_moves += self.groups.takeovers() - takeovers;
            self.log.warn(
                "took over the agent role of the failed node's groups",
                &[
                    ("failed", &failed),
                    ("groups", &(self.groups.takeovers() - takeovers)),
                ],
            );
        }
        if self.groups.registry() != registry {
            self.counters.role_moves += 1;
            self.log.warn(
                "registry role moved",
                &[("failed", &failed), ("registry", &self.groups.registry())],
            );
        }
    }

    /// Node `n` is declared failed: it leaves every view this node is the
    /// agent of, and the link to it starts afresh (what was queued for it
    /// is dropped; if it comes back it gets a new link epoch).
    pub(super) fn node_failed(&mut self, n: NodeId) -> Result<(), EngineError> {
        self.counters.nodes_failed += 1;
        let bound_ms = self.live.tracker.detector().config().detection_bound() / 1_000_000;
        self.log.warn(
            "peer failed: no beat or probe answer",
            &[("node", &n), ("detection_bound_ms", &bound_ms)],
        );
        // Doubts as of now: the verdict may come from a beat read before
        // this round's liveness poll (a restart seen after a pause here).
        self.weigh_doubts(mcast_engine::sys::monotonic_ns());
        let before = (self.groups.takeovers(), self.groups.registry());
        let changed = self.groups.node_failed(n);
        for g in &changed {
            self.counters.evictions += 1;
            self.log
                .warn("evicted from group", &[("node", &n), ("group", g)]);
        }
        self.note_role_moves(before, n);
        self.streams.forget_starts_from(n);
        let mut out = Vec::new();
        self.flush.flushes.node_failed(n, &mut out);
        self.send_flush(out);
        self.flush_group_sends();
        self.reset_link(n)
    }

    /// Node `n`, taken as failed here, is heard again. The link to it was
    /// reset, so a start or a start request to it may have been dropped:
    /// ask it again for the streams this node lacks, and tell it again
    /// where this node's own streams go on. Not when this node declared it
    /// failed (evicted it): it is told so, and rejoins as a new incarnation
    /// whose streams start afresh; its old one's answers would be dropped
    /// anyway (`daemon.link_messages_from_failed`).
    pub(super) fn peer_recovered(&mut self, n: NodeId) -> Result<(), EngineError> {
        if self.live.tracker.declared_failed(n) {
            self.counters.recovered_evicted += 1;
            return Ok(());
        }
        let groups = self.groups_with(n);
        for group in groups {
            let streams = self
                .local
                .get(&group)
                .is_some_and(|lg| lg.mode.uses_streams());
            if streams && !self.engine.receivers_in(group).contains(&n) {
                self.counters.start_requests_sent += 1;
                self.send_link(n, LinkMessage::StartRequest { group });
            }
            self.resume_member(group, n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_heard_when_its_stream_frames_moved_since_the_last_check() {
        let before = [(2, 10), (3, 5), (4, 7)];
        // 2 moved, 3 did not, 4's stream closed, 5 is new (nothing to compare).
        let now = [(2, 11), (3, 5), (5, 1)];
        assert_eq!(frames_came(&before, &now), [2]);
        // A stream reopened from 0 moved too.
        assert_eq!(frames_came(&[(2, 10)], &[(2, 0)]), [2]);
        assert!(frames_came(&[], &now).is_empty());
    }

    fn join(c: u64, name: &str) -> (ClientId, String) {
        (ClientId(c), name.to_owned())
    }

    #[test]
    fn a_rejoin_join_refused_for_a_passing_reason_is_made_again_later() {
        let mut r = Rejoins::default();
        r.restart(vec![join(1, "a")], 100);
        assert_eq!(r.due(100), [join(1, "a")]);
        r.made(7, ClientId(1), "a".into());
        assert_eq!(r.answered(7), Some(join(1, "a")));
        r.retry(ClientId(1), "a".into(), 300);
        r.retry(ClientId(1), "a".into(), 300);
        assert!(r.under_way());
        assert!(r.due(299).is_empty(), "not before its time");
        assert_eq!(r.due(300), [join(1, "a")], "once, however often refused");
        assert!(!r.under_way());
    }

    #[test]
    fn joins_wait_then_go_and_are_answered() {
        let mut r = Rejoins::default();
        assert!(!r.under_way());
        r.restart(vec![join(1, "a"), join(2, "b")], 100);
        assert!(r.under_way());
        assert!(r.due(99).is_empty());
        assert_eq!(r.due(100), [join(1, "a"), join(2, "b")]);
        assert!(r.due(101).is_empty(), "made once");
        r.made(7, ClientId(1), "a".into());
        assert_eq!(r.answered(7), Some(join(1, "a")));
        assert_eq!(r.answered(7), None);
        assert!(!r.under_way());
    }

    /// Issue 23: evicted again before the first rejoin's joins went out
    /// (its groups were already given up, so it has no members of its
    /// own to rejoin): the waiting joins are kept, not replaced by none.
    #[test]
    fn a_second_eviction_keeps_the_joins_still_waiting_and_those_on_their_way() {
        let mut r = Rejoins::default();
        r.restart(vec![join(1, "a"), join(2, "b")], 100);
        r.restart(Vec::new(), 200);
        assert!(r.due(150).is_empty(), "the second rejoin's wait counts");
        assert_eq!(r.due(200), [join(1, "a"), join(2, "b")]);
        // Evicted once more while those joins are on their way, with a
        // new member of its own.
        r.made(8, ClientId(1), "a".into());
        r.made(9, ClientId(2), "b".into());
        r.restart(vec![join(3, "c"), join(1, "a")], 300);
        assert_eq!(
            r.answered(8),
            None,
            "an answer to the old join is not a rejoin's any more"
        );
        assert_eq!(r.due(300), [join(1, "a"), join(2, "b"), join(3, "c")]);
    }
}
