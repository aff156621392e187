//! Membership glue: the group service's events (answers to the clients'
//! joins, leaves and queries; new views) and the groups this node carries:
//! their local members, their views, starting and stopping to carry them.
//!
//! Owns: [`LocalGroup`] (one per group carried, with its [`mode`](super::mode))
//! and the group service's construction.
//! Does not touch: receive streams beyond closing those of departed
//! senders ([`streams`](super::streams)), the flush's state (it tells
//! [`flush`](super::flush) who left), the clients' rings.

use std::collections::VecDeque;

use mcast_engine::{Accept, EngineError, GroupOptions, ProtocolConfig, StreamStart, Transport};
use mcast_groups::detector::PeerState;
use mcast_groups::flush::FlushKey;
use mcast_groups::{GroupEvent, GroupService, Limits, SettingsOf, View};
use mcast_ipc::{ClientId, ErrorCode, Notice, Response};
use mcast_wire::{GroupId, NodeId};
use serde_json::json;

use super::clients::Pending;
use super::deliver::event_record;
use super::flush::Kept;
use super::mode::join_gate::JoinGate;
use super::mode::{self, GroupMode};
use super::stats::info_json;
use super::Daemon;
use crate::config::{Config, SlowSubscriber};
use crate::links::LinkMessage;

/// A group this node carries.
#[derive(Debug)]
pub(super) struct LocalGroup {
    pub(super) name: String,
    /// The group's view here; changed only by [`LocalGroup::set_view`] and
    /// [`LocalGroup::drop_node`], which keep `remote` with it.
    pub(super) view: Option<View>,
    /// The view's nodes but this one.
    remote: Vec<NodeId>,
    /// The root of the view's tree (`tree::root_of`), looked up for
    /// every publication.
    root: Option<NodeId>,
    /// Local clients joined, in join order.
    pub(super) members: Vec<ClientId>,
    /// How the group sends, acknowledges and delivers.
    pub(super) mode: Box<dyn GroupMode>,
    pub(super) paused: bool,
    pub(super) slow: SlowSubscriber,
    /// Final counters of receive streams closed (senders that left), oldest first.
    pub(super) closed: Vec<(NodeId, mcast_proto::Counters)>,
    /// Every stream's window (frames): how much of a sender's stream is
    /// kept for a flush.
    pub(super) window_frames: u32,
    /// Membership events waiting for the group's flushes to end, in order.
    pub(super) held_events: VecDeque<Vec<u8>>,
    /// The nodes that the held events name gone.
    pub(super) held_gone: Vec<NodeId>,
    /// Stream starts of those nodes, or of nodes whose flush runs here,
    /// waiting with the events for the group's flushes to end: at most one
    /// per sender, the latest (`stream_start`).
    pub(super) held_starts: Vec<(NodeId, StreamStart)>,
    /// The fanout of the group's feedback tree (0: none).
    pub(super) tree_fanout: u16,
    /// The group's barrier at this node.
    pub(super) barrier: super::barrier::GroupBarrier,
    /// Local members waiting for the event of the view they joined in
    /// (modes that place events in their order), and view notices waiting
    /// for their event.
    pub(super) gate: JoinGate<Notice>,
}

impl LocalGroup {
    /// Installs `view` (which holds `node`, this one).
    fn set_view(&mut self, view: View, node: NodeId) {
        self.remote = view.nodes().into_iter().filter(|&n| n != node).collect();
        self.root = super::tree::root_of(Some(&view));
        self.view = Some(view);
    }

    /// Takes node `n` out of this node's copy of the view (it restarted).
    pub(super) fn drop_node(&mut self, n: NodeId, node: NodeId) {
        if let Some(mut view) = self.view.take() {
            view.members.retain(|m| m.node != n);
            self.set_view(view, node);
        }
    }

    /// The view's nodes but this one.
    pub(super) fn remote(&self) -> &[NodeId] {
        &self.remote
    }

    /// The root of the view's tree (None before the first view).
    pub(super) fn root(&self) -> Option<NodeId> {
        self.root
    }

    /// The mode, and the view's nodes but this one, borrowed together.
    pub(super) fn mode_and_remote(&mut self) -> (&mut dyn GroupMode, &[NodeId]) {
        (self.mode.as_mut(), &self.remote)
    }

    /// The mode, the local members and the gate of those that wait for
    /// their view's event, borrowed together.
    pub(super) fn mode_and_members(
        &mut self,
    ) -> (&mut dyn GroupMode, &[ClientId], &mut JoinGate<Notice>) {
        (self.mode.as_mut(), &self.members, &mut self.gate)
    }

    /// Whether the group's mode delivers each fragment unchanged to every
    /// local member ([`GroupMode::delivers_verbatim`]), and those members.
    pub(super) fn verbatim_members(&self) -> Option<&[ClientId]> {
        self.mode.delivers_verbatim().then_some(&self.members)
    }
}

/// A group service for this node, knowing the cluster, with no group yet.
pub(super) fn fresh_service(cfg: &Config) -> GroupService {
    let own = cfg.clone();
    let settings = SettingsOf::new(move |name| own.group_settings(name).shared());
    let mut groups =
        GroupService::new(cfg.node, cfg.registry, Limits::default()).with_settings(settings);
    let cluster: Vec<NodeId> = std::iter::once(cfg.node)
        .chain(cfg.peers.iter().map(|p| p.node))
        .collect();
    groups.set_cluster(&cluster);
    groups.tick(mcast_engine::sys::monotonic_ns());
    groups
}

impl<T: Transport> Daemon<T> {
    /// Answers the clients and installs the views the group service decided.
    pub(super) fn handle_group_events(&mut self) -> Result<bool, EngineError> {
        self.flush_group_sends();
        let mut work = false;
        while let Some(ev) = self.groups.poll_event() {
            work = true;
            match ev {
                GroupEvent::Joined {
                    req,
                    member,
                    group,
                    name,
                    rank,
                    view,
                } => {
                    let client = ClientId(member);
                    self.ensure_local(group, &name)?;
                    if let Some(s) = self.clients.by_id.get_mut(&client) {
                        s.groups.insert(group);
                        let lg = self.local.get_mut(&group).expect("ensured");
                        if !lg.members.contains(&client) {
                            lg.members.push(client);
                            if lg.mode.orders_events() {
                                lg.gate.joined(client, view.epoch);
                            }
                        }
                    }
                    self.log.info(
                        "client joined",
                        &[
                            ("client", &member),
                            ("group", &name),
                            ("number", &group),
                            ("rank", &rank),
                        ],
                    );
                    self.live.rejoins.answered(req);
                    if let Some(Pending::Join { client, req }) = self.clients.pending.remove(&req) {
                        self.clients.server.reply(
                            client,
                            req,
                            Response::Joined {
                                group,
                                name,
                                rank,
                                view: ipc_view(&view),
                            },
                        );
                    }
                }
                GroupEvent::Left { req, member, group } => {
                    let client = ClientId(member);
                    if let Some(s) = self.clients.by_id.get_mut(&client) {
                        s.groups.remove(&group);
                    }
                    if let Some(lg) = self.local.get_mut(&group) {
                        lg.members.retain(|&c| c != client);
                        lg.gate.left(client);
                    }
                    self.barrier_member_gone(group, client);
                    if let Some(Pending::Leave { client, req }) = self.clients.pending.remove(&req)
                    {
                        self.clients.server.reply(client, req, Response::Left);
                    }
                }
                GroupEvent::Failed { req, error } => {
                    if let mcast_groups::GroupError::SettingsDiffer { .. } = error {
                        self.log.warn("join refused", &[("error", &error)]);
                    }
                    let rejoin = self.live.rejoins.answered(req);
                    if let Some((c, name)) = rejoin.as_ref().filter(|_| passes(&error)) {
                        // The client asked for nothing: its join is the
                        // daemon's to make, so it is made again rather than
                        // left out of the group for good.
                        self.log.warn(
                            "a client's join after the rejoin failed: retrying",
                            &[("client", &c.0), ("group", name), ("error", &error)],
                        );
                        let at = mcast_engine::sys::monotonic_ns() + REJOIN_RETRY_NS;
                        self.live.rejoins.retry(*c, name.clone(), at);
                    } else if let Some((c, name)) = rejoin {
                        self.log.warn(
                            "a client's join after the rejoin failed",
                            &[("client", &c.0), ("group", &name), ("error", &error)],
                        );
                        self.clients.server.notify(
                            c,
                            Notice::Error {
                                message: format!(
                                    "this node was declared failed and could not join {name} again: {error}"
                                ),
                            },
                        );
                    }
                    if let Some(p) = self.clients.pending.remove(&req) {
                        self.clients.server.reply(
                            p.client(),
                            p.req(),
                            Response::error(error_code(&error), error.to_string()),
                        );
                    }
                }
                GroupEvent::QueryResult { req, info } => {
                    if let Some(p) = self.clients.pending.remove(&req) {
                        let v = info.as_ref().map_or(json!(null), info_json);
                        self.clients
                            .server
                            .reply(p.client(), p.req(), Response::Json(v));
                    }
                }
                GroupEvent::List { req, groups } => {
                    if let Some(p) = self.clients.pending.remove(&req) {
                        let v = json!(groups
                            .iter()
                            .map(|g| json!({
                                "name": g.name,
                                "group": g.group,
                                "agent": g.agent,
                                "members": g.members,
                            }))
                            .collect::<Vec<_>>());
                        self.clients
                            .server
                            .reply(p.client(), p.req(), Response::Json(v));
                    }
                }
                GroupEvent::ViewChanged { group, view } => self.view_changed(group, view)?,
            }
        }
        self.flush_group_sends();
        Ok(work)
    }

    /// Starts carrying `group` if this node does not yet.
    pub(super) fn ensure_local(&mut self, group: GroupId, name: &str) -> Result<(), EngineError> {
        if self.local.contains_key(&group) {
            return Ok(());
        }
        let s = self.cfg.group_settings(name);
        let mut mode = mode::for_group(
            &s,
            group,
            self.node,
            self.incarnation,
            self.streams.send_resume.get(&group).copied(),
            self.cfg.beacon_us,
        );
        if let Some(d) = self.streams.recalled.remove(&group) {
            mode.recall_delivered(d);
        }
        self.engine.add_group(
            group,
            GroupOptions {
                algorithm: s.algorithm.to_engine(),
                protocol: {
                    let mut p = ProtocolConfig::default();
                    p.mak.near_repairs = s.near_repairs;
                    p
                },
                window_frames: s.window_frames,
                subscribe: true,
                accept_senders: Accept::Opened,
                max_queued_frames: (s.window_frames as usize).max(256),
                batch_messages: s.batch,
            },
        )?;
        self.local.insert(
            group,
            LocalGroup {
                name: name.to_owned(),
                view: None,
                remote: Vec::new(),
                root: None,
                members: Vec::new(),
                mode,
                paused: false,
                slow: s.slow_subscriber,
                closed: Vec::new(),
                window_frames: s.window_frames,
                held_events: VecDeque::new(),
                held_gone: Vec::new(),
                held_starts: Vec::new(),
                tree_fanout: s.tree_fanout,
                barrier: Default::default(),
                gate: JoinGate::default(),
            },
        );
        for (from, start) in self
            .streams
            .pending_starts
            .remove(&group)
            .unwrap_or_default()
        {
            self.stream_start(from, group, start)?;
        }
        let now = mcast_engine::sys::monotonic_ns();
        let early = self.mode_early.take(now, group);
        if !self.local[&group].mode.takes_early_messages() {
            self.counters.mode_messages_stale += early.len() as u64;
            return Ok(());
        }
        for (from, body) in early {
            self.mode_message(from, group, &body);
        }
        Ok(())
    }

    pub(super) fn view_changed(&mut self, group: GroupId, view: View) -> Result<(), EngineError> {
        let nodes = view.nodes();
        self.log.info(
            "view",
            &[
                ("group", &view.name),
                ("number", &group),
                ("epoch", &view.epoch),
                ("agent", &view.agent),
                ("nodes", &format!("{nodes:?}")),
            ],
        );
        if !nodes.contains(&self.node) {
            // Our last local member left: stop carrying the group.
            if self.local.contains_key(&group) {
                self.retire(group)?;
            }
            return Ok(());
        }
        self.ensure_local(group, &view.name)?;
        let remote: Vec<NodeId> = nodes.iter().copied().filter(|&n| n != self.node).collect();
        let before: Vec<NodeId> = self.local[&group].remote().to_vec();
        let added: Vec<NodeId> = remote
            .iter()
            .copied()
            .filter(|n| !before.contains(n))
            .collect();
        let epoch = view.epoch;
        let notice = Notice::ViewChanged {
            group,
            epoch,
            members: ipc_view(&view).members,
        };
        let event = self.view_event(&view, &before, &added);
        // Nothing below reads the view before this, and the mode is told of
        // the new one.
        let node = self.node;
        let lg = self.local.get_mut(&group).expect("ensured");
        lg.set_view(view, node);
        self.members_changed(group, &added)?;
        let receivers = self.engine.receivers_in(group);
        let streams = self
            .local
            .get(&group)
            .is_some_and(|lg| lg.mode.uses_streams());
        let now = mcast_engine::sys::monotonic_ns();
        for &n in &added {
            // Back in the view, alive, with the stream flushed here: the
            // flush stops waiting for survivors that never saw it leave.
            let inc = self.live.tracker.peer_incarnation(n);
            self.flush
                .flushes
                .sender_back(group, n, |e| Some(e) == inc, now);
            if streams && !receivers.contains(&n) {
                // Its send stream may count this node a member all along
                // (its views never showed this node leave): ask for a start.
                self.counters.start_requests_sent += 1;
                self.send_link(n, LinkMessage::StartRequest { group });
            }
        }
        // The survivors of this change: no flush waits for a node gone too,
        // and each sender gone starts one with the nodes of both views.
        let survivors: Vec<NodeId> = remote
            .iter()
            .copied()
            .filter(|n| before.contains(n))
            .collect();
        let mut out = Vec::new();
        for &n in before.iter().filter(|n| !remote.contains(n)) {
            self.flush.flushes.peer_gone(group, n, &mut out);
        }
        self.send_flush(out);
        // A start held for the flushes, from a sender gone now: closed with
        // the stream it would have opened (below).
        let lg = self.local.get_mut(&group).expect("ensured");
        lg.held_starts
            .retain(|(n, _)| remote.contains(n) || !before.contains(n));
        for n in self.engine.receivers_in(group) {
            // A stream whose start overtook the view that adds its sender is
            // kept: only a sender that was in the view and is not now left.
            if !remote.contains(&n) && before.contains(&n) {
                self.close_receiver(group, n)?;
                self.start_flush(group, n, &survivors);
            }
        }
        // The same change, in stream order, in every local member's ring.
        let hdr = event_record(group);
        let lg = self.local.get_mut(&group).expect("ensured");
        let members = lg.members.clone();
        if lg.mode.orders_events() {
            // With the view's event, at its place in the order.
            lg.gate.notice(epoch, notice);
        } else {
            for &c in &members {
                self.clients.server.notify(c, notice.clone());
            }
        }
        if self.place_event(group, event.as_bytes()) {
            // The mode delivers it at its place in the group's order.
            return Ok(());
        }
        let lg = self.local.get_mut(&group).expect("ensured");
        if self.flush.flushes.pending_in(group) || !lg.held_events.is_empty() {
            // After the departed senders' last messages, which the flush
            // may still bring.
            lg.held_events.push_back(event.into_bytes());
            for &n in before.iter().filter(|n| !remote.contains(n)) {
                if !lg.held_gone.contains(&n) {
                    lg.held_gone.push(n);
                }
            }
            self.counters.events_held += 1;
        } else {
            self.event_to(&members, hdr, event.as_bytes());
        }
        Ok(())
    }

    /// The membership event of a change from `before` (remote nodes) to
    /// `view`, for the local members' rings.
    fn view_event(&self, view: &View, before: &[NodeId], added: &[NodeId]) -> String {
        let now_nodes = view.nodes();
        let gone: Vec<NodeId> = before
            .iter()
            .copied()
            .filter(|n| !now_nodes.contains(n))
            .collect();
        let failed: Vec<NodeId> = gone
            .iter()
            .copied()
            .filter(|&n| self.live.tracker.detector().state(n) != Some(PeerState::Alive))
            .collect();
        json!({
            "epoch": view.epoch,
            "agent": view.agent,
            "members": view.members.iter().map(|m| json!({"rank": m.rank, "node": m.node, "member": m.member})).collect::<Vec<_>>(),
            "joined": added,
            "gone": gone,
            "failed": failed,
        })
        .to_string()
    }

    /// The nodes of `group`'s view here but this one.
    pub(super) fn remote_nodes(&self, group: GroupId) -> Vec<NodeId> {
        self.local
            .get(&group)
            .map(|lg| lg.remote().to_vec())
            .unwrap_or_default()
    }

    /// Stops carrying `group`, keeping its final counters for `mcast stat`.
    pub(super) fn retire(&mut self, group: GroupId) -> Result<(), EngineError> {
        let resume = self
            .local
            .get_mut(&group)
            .and_then(|lg| lg.mode.retire(&self.engine, group));
        if let Some(seq) = resume {
            self.streams.note_send_resume(group, seq);
        }
        if let Some(g) = self.engine.stats().groups.iter().find(|g| g.group == group) {
            let v = self.group_json(g, false);
            self.retired.push(v);
        }
        self.local.remove(&group);
        let senders: Vec<NodeId> = self
            .flush
            .kept
            .keys()
            .filter(|(g, _)| *g == group)
            .map(|&(_, n)| n)
            .collect();
        let closed: Vec<(NodeId, Kept)> = senders
            .into_iter()
            .filter_map(|n| self.flush.kept.remove(&(group, n)).map(|k| (n, k)))
            .collect();
        for (n, k) in &closed {
            self.note_stopped(group, *n, k.epoch, k.frames.next());
        }
        self.flush.forget_group(group);
        // What was delivered stays for a flush, and for the stream opened
        // again where it stopped (`Flushes::keep_record`).
        for (sender, k) in closed {
            let key = FlushKey {
                group,
                sender,
                epoch: k.epoch,
            };
            self.flush.flushes.keep_record(key, k.frames);
        }
        self.engine.remove_group(group)
    }
}

pub(super) fn ipc_view(v: &View) -> mcast_ipc::View {
    mcast_ipc::View {
        epoch: v.epoch,
        members: v
            .members
            .iter()
            .map(|m| mcast_ipc::Member {
                rank: m.rank,
                node: m.node,
                member: m.member,
            })
            .collect(),
    }
}

/// How long a rejoin's join that failed for a passing reason waits before
/// it is made again.
const REJOIN_RETRY_NS: u64 = 200_000_000;

/// Whether a join refused with `e` may succeed if made again: the node it
/// waited for did not answer or failed (another takes its role), or too many
/// requests were in flight.
fn passes(e: &mcast_groups::GroupError) -> bool {
    use mcast_groups::GroupError as G;
    matches!(
        e,
        G::NoAnswer { .. } | G::NodeFailed { .. } | G::TooManyPending { .. }
    )
}

fn error_code(e: &mcast_groups::GroupError) -> ErrorCode {
    use mcast_groups::GroupError as G;
    match e {
        G::InvalidName { .. } => ErrorCode::Malformed,
        G::UnknownGroup { .. } | G::NotMember { .. } => ErrorCode::UnknownGroup,
        G::TooManyGroups { .. } | G::GroupFull { .. } | G::TooManyPending { .. } => {
            ErrorCode::Unavailable
        }
        _ => ErrorCode::Other,
    }
}
