//! The seam for group modes: how one group's messages are sent,
//! acknowledged and delivered.
//!
//! Owns: the [`GroupMode`] interface, the [`StreamOps`] a mode may ask of
//! the engine, the context ([`ModeCx`]) the daemon hands it, the choice of
//! a group's mode ([`for_group`]), and the daemon's calls into a group's
//! mode (one place that builds the context and sends what the mode queued).
//! Does not touch: clients, views, liveness, the flush: the daemon calls a
//! mode at fixed points and does everything else itself. A mode sees only
//! its own group's streams and talks to its peers only through
//! [`ModeCx::outbox`] (link messages the daemon sends after the call).
//!
//! Built today:
//! - [`fifo::PerSenderFifo`] (`mode = "fifo"`, the default): each member's
//!   MAK stream, the receivers delivering each sender's messages in that
//!   sender's order.
//! - [`sequenced::Sequenced`] (`mode = "sequenced"`): many-to-many through
//!   the root of the hybrid tree (seed 004 §2.1): [`GroupMode::publish`]
//!   forwards a member's message to the root over [`ModeCx::outbox`], the
//!   root's [`GroupMode::on_link`] multicasts it in its own stream, and
//!   every member delivers every sender's messages in the root's order.
//!
//! - [`total::TotalOrder`] (`mode = "total"`): every member stamps its
//!   messages with a hybrid logical clock and multicasts them in its own
//!   stream; every member delivers all senders' messages in stamp order
//!   once a barrier (the least stamp heard from each node) passes them,
//!   idle nodes sending beacons (seed 002, TOC).
//!
//! All drive this node's send stream through [`send_stream::SendStream`]
//! (opened on first use, following the view, resuming a member). In a
//! mode that places membership events in its order
//! ([`GroupMode::orders_events`]), [`join_gate::JoinGate`] holds a local
//! member's deliveries until the event of the view it joined in.
//!
//! The tree's ACK aggregation is built below the modes (the engine's
//! machines report over the tree the daemon's `tree` module installs,
//! docs/protocol.md §3.4), and the barrier is the daemon's own (`barrier`):
//! both work the same in every mode.
//!
//! Total order's events and scatterings need no link messages: they ride
//! in its stream frames ([`total`]); a scattering reaches the mode through
//! [`GroupMode::publish_scatter`]. Its commit does too in small views; from
//! `commit_tree_from` members the reports climb a tree of link messages
//! ([`commit_tree`], through [`GroupMode::on_link`]).
//!
//! How the coming mode fits (docs/mcastd.md, "Architecture"):
//! - **broadcast over unicast links** (seed 003): [`GroupMode::publish`]
//!   sends to the first children of the spanning tree over
//!   [`ModeCx::outbox`]; [`GroupMode::on_link`] delivers (through `out`)
//!   and forwards; [`GroupMode::members_changed`] re-plans the tree.

pub mod broadcast;
pub mod claims;
pub mod commit_tree;
#[cfg(test)]
mod fake;
pub mod fifo;
pub mod hlc;
pub mod join_gate;
pub mod least;
pub mod send_stream;
pub mod sequenced;
pub mod silence;
#[cfg(test)]
mod sweep;
pub mod total;
mod total_wire;

use std::fmt;

use mcast_engine::{Engine, EngineError, Fragment, PublishError, StreamStart, Transport};
use mcast_ipc::{ClientId, RecordHeader};
use mcast_wire::{GroupId, NodeId, Seq};

use super::deliver::mode_record;
use super::membership::LocalGroup;
use super::Daemon;
use crate::config;
use crate::links::LinkMessage;

/// Per origin node: its incarnation and the number of its next message not
/// yet delivered here ([`GroupMode::delivered`]).
pub type Delivered = std::collections::HashMap<NodeId, (u32, u64)>;

/// What became of a message a local client published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Taken: the mode owns it now.
    Sent,
    /// The group cannot take it now (its window is full): the record stays
    /// in the client's ring and is offered again next round.
    WouldBlock,
    /// Refused for good (the client is told why).
    Dropped(String),
}

/// Where a mode hands records for the group's local members: the record,
/// and which of them it goes to.
pub type Out<'a> = dyn FnMut(RecordHeader, &[u8], To) + 'a;

/// Which of a group's local members a record goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum To {
    /// Every one but this one (its own publisher), if any.
    AllBut(Option<ClientId>),
    /// This one only (its part of a scattering).
    Only(ClientId),
    /// Every one: the membership event of the view of this epoch, placed
    /// in the group's order (a member that joined in that view receives
    /// from it on, [`join_gate`]).
    Event(u64),
}

impl To {
    /// The member left out (tests: a record for one member only panics).
    #[cfg(test)]
    pub fn except(self) -> Option<ClientId> {
        match self {
            To::AllBut(except) => except,
            To::Only(c) => panic!("a record for {c} only"),
            To::Event(_) => None,
        }
    }

    /// Whether local member `c` gets the record.
    pub fn reaches(self, c: ClientId) -> bool {
        match self {
            To::AllBut(except) => except != Some(c),
            To::Only(only) => only == c,
            To::Event(_) => true,
        }
    }
}

/// Bytes a mode may add to a message on the wire (the engine and the links
/// take messages this much larger than `max_message`).
pub const MODE_HEADROOM: usize = 64;

/// How one group sends, acknowledges and delivers. One instance per group
/// this node carries, created when the node starts carrying it.
pub trait GroupMode: fmt::Debug {
    /// The mode's name in `mcast stat`.
    fn name(&self) -> &'static str;

    /// Local client `from`'s message for the group. When
    /// [`loops_back`](GroupMode::loops_back), the daemon gives it to the
    /// other local members itself; else the mode does, through `out`, when
    /// the message takes its place in the group's order.
    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        msg: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError>;

    /// Local client `from`'s scattering (`mcast_ipc::scatter`: each part
    /// for one member of the group, checked by the daemon against the
    /// view). Only a total-order group takes one.
    fn publish_scatter(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        parts: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        let _ = (cx, from, parts, out);
        Ok(Published::Dropped(format!(
            "a scattering needs a total-order group (mode = \"total\"); this one's mode is {}",
            self.name()
        )))
    }

    /// True when the daemon gives a local publication to the other local
    /// members at once (false: the mode delivers it in its order).
    fn loops_back(&self) -> bool {
        true
    }

    /// The group's remote members changed (a new view, or a member that
    /// restarted left it): [`ModeCx::remote`] is the new set, `added` the
    /// nodes new in it.
    fn members_changed(&mut self, cx: &mut ModeCx<'_>, added: &[NodeId])
        -> Result<(), EngineError>;

    /// Remote member `n` restarted (a new incarnation), whatever the views
    /// say yet: called before [`members_changed`](GroupMode::members_changed)
    /// without it. A mode whose peers keep state per member of their own
    /// forgets it here (the broadcast relay's start grants), since the view
    /// that lists the new incarnation may be one the old was in already
    /// (the view without it skipped here while the agent moved).
    fn peer_restarted(&mut self, n: NodeId) {
        let _ = n;
    }

    /// Remote member `to` lost what this node sends it while this node kept
    /// counting it (it asked, or was heard again after a reset link): tell
    /// it where to go on. True when it was told.
    fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError>;

    /// A fragment of a remote member's stream, in that stream's order (live
    /// or recovered by a flush): hand what may be delivered now to `out`, as
    /// ring records for the local members.
    fn deliver(&mut self, f: &Fragment<'_>, out: &mut Out<'_>);

    /// False for a mode that never uses the engine's streams (broadcast):
    /// the daemon then asks no peer for a stream start in its group.
    fn uses_streams(&self) -> bool {
        true
    }

    /// Whether the mode takes the mode messages that came before this node
    /// carried its group (`EarlyModeMessages`): only one whose peers
    /// start talking to this node on a view it may not have yet, and whose
    /// messages say by themselves which membership they are for
    /// (broadcast: every START and transfer names its view). False (the
    /// default): they are dropped. The sequenced mode must not take them:
    /// a new root would sequence again FORWARDs meant for an earlier one
    /// (its members send their unechoed messages to it again anyway).
    fn takes_early_messages(&self) -> bool {
        false
    }

    /// Whether [`GroupMode::deliver`] hands every fragment, unchanged, to
    /// every local member as a record from its stream's node, and keeps no
    /// state doing it (the FIFO mode). The daemon then writes a batched
    /// frame's messages straight into each member's ring, with one lookup
    /// of the member per frame instead of a call per message.
    fn delivers_verbatim(&self) -> bool {
        false
    }

    /// A [`LinkMessage::Mode`] for this group from peer `from`. Err: the
    /// message is malformed or not one this mode takes (counted as a link
    /// error).
    fn on_link(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: NodeId,
        body: &[u8],
        out: &mut Out<'_>,
    ) -> Result<(), String> {
        let _ = (cx, body, out);
        Err(format!(
            "a {} group takes no mode messages (from node {from})",
            self.name()
        ))
    }

    /// The membership event of the view just installed
    /// ([`ModeCx::view_epoch`], after [`members_changed`](GroupMode::members_changed)):
    /// true when the mode delivers it itself, through `out`, at its place
    /// in the group's order; false (the default) when the daemon writes it
    /// (after the departed senders' flushes).
    fn place_event(&mut self, cx: &mut ModeCx<'_>, event: &[u8]) -> bool {
        let _ = (cx, event);
        false
    }

    /// A `skipped` notice: frames of `sender`'s stream that will never
    /// reach this node (a stream started again past them, or a flush's
    /// jump; docs/mcastd.md). True when the mode delivers it itself,
    /// through `out`, at its place in the group's order: after what it
    /// still holds of `sender` from before the jump, before anything
    /// after it. False (the default) when the daemon writes it at once,
    /// which is that place in a mode that holds nothing back.
    fn place_skipped(&mut self, sender: NodeId, notice: &[u8], out: &mut Out<'_>) -> bool {
        let _ = (sender, notice, out);
        false
    }

    /// Per origin, how far this node delivered the group's messages, taken
    /// when this node is declared failed and rejoins: the daemon hands it
    /// to the group's next mode ([`recall_delivered`](GroupMode::recall_delivered)),
    /// so what the clients had before the eviction event is not delivered
    /// again after it. None (the default) in a mode whose receive streams
    /// already say it (the daemon keeps their stopped positions). The
    /// sequenced mode keeps one: a root paused past the failure detector
    /// delivers the forwards waiting for it when it wakes, and the new root
    /// sequences the same messages again (their origins send them to it).
    fn delivered(&self) -> Option<Delivered> {
        None
    }

    /// What [`delivered`](GroupMode::delivered) kept, handed to the mode
    /// that carries the group again after this node's rejoin, before any
    /// view: messages at or below it are not delivered here again.
    fn recall_delivered(&mut self, delivered: Delivered) {
        let _ = delivered;
    }

    /// True when the mode places every view's membership event in its
    /// order ([`place_event`](GroupMode::place_event) takes them all): a
    /// local member then receives from the event of the view it joined in
    /// on, and each view's notice goes out with its event ([`join_gate`]).
    fn orders_events(&self) -> bool {
        false
    }

    /// When the mode next wants [`poll`](GroupMode::poll) called
    /// (monotonic ns; None: never). The daemon's sleep ends by then.
    fn poll_at(&self) -> Option<u64> {
        None
    }

    /// True when the mode holds work that waits on the engine (a full
    /// window) or on a flush: [`poll`](GroupMode::poll) is then called
    /// every round, without keeping the daemon from sleeping.
    fn wants_round(&self) -> bool {
        false
    }

    /// Nodes of the view this group's order waits on and has heard nothing
    /// from for long (a total-order group: ten beacon intervals), reported
    /// to the failure detector (which probes one it has heard nothing from
    /// for a beat interval). Called after each [`poll`](GroupMode::poll).
    fn silent(&mut self, now_ns: u64) -> Vec<NodeId> {
        let _ = now_ns;
        Vec::new()
    }

    /// Timers and held deliveries: called once [`poll_at`](GroupMode::poll_at)
    /// has come. True when it did something.
    fn poll(
        &mut self,
        cx: &mut ModeCx<'_>,
        now_ns: u64,
        out: &mut Out<'_>,
    ) -> Result<bool, EngineError> {
        let _ = (cx, now_ns, out);
        Ok(false)
    }

    /// True when everything published here has reached every member (a
    /// leave waits for it).
    /// (The default: the group's send stream is idle, for a mode that
    /// sends nothing else.)
    fn send_idle(&self, streams: &dyn StreamOps, group: GroupId) -> bool {
        streams.send_idle(group)
    }

    /// The node stops carrying the group: where its send stream stopped, so
    /// that a stream opened again within this incarnation goes on from
    /// there and no sequence number names two frames.
    /// (The default: where the group's send stream is.)
    fn retire(&mut self, streams: &dyn StreamOps, group: GroupId) -> Option<Seq> {
        streams.sender_position(group).map(|at| at.seq)
    }

    /// The mode's own state for `mcast stat`.
    fn stats_json(&self) -> serde_json::Value;
}

/// What a mode is given at each call.
pub struct ModeCx<'a> {
    pub group: GroupId,
    /// This node.
    pub node: NodeId,
    /// The epoch of this node's streams (its incarnation).
    pub epoch: u32,
    /// The nodes of the group's current view, this one excluded.
    pub remote: &'a [NodeId],
    /// The root of the group's hybrid tree in the current view (its agent,
    /// else its lowest node; `tree::root_of`); None before the first view.
    pub root: Option<NodeId>,
    /// No flush runs in the group here: every departed sender's last
    /// messages have been delivered.
    pub settled: bool,
    /// The epoch of the group's view here (0 before the first).
    pub view_epoch: u64,
    pub streams: &'a mut dyn StreamOps,
    /// Link messages for peers, sent by the daemon after the call.
    pub outbox: &'a mut Vec<(NodeId, LinkMessage)>,
}

impl ModeCx<'_> {
    /// Tells each of `to` where this node's send stream starts for it.
    pub fn announce(&mut self, to: &[NodeId], start: StreamStart) {
        let group = self.group;
        self.outbox
            .extend(to.iter().map(|&n| (n, LinkMessage::Start { group, start })));
    }
}

impl fmt::Debug for ModeCx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModeCx")
            .field("group", &self.group)
            .field("node", &self.node)
            .field("epoch", &self.epoch)
            .field("remote", &self.remote)
            .field("root", &self.root)
            .field("settled", &self.settled)
            .field("view_epoch", &self.view_epoch)
            .field("outbox", &self.outbox)
            .finish_non_exhaustive()
    }
}

/// The engine's stream operations a mode may use, for any group.
pub trait StreamOps {
    fn open_sender(
        &mut self,
        group: GroupId,
        members: &[NodeId],
        start: StreamStart,
    ) -> Result<(), EngineError>;
    fn publish(&mut self, group: GroupId, msg: &[u8]) -> Result<(), PublishError>;
    fn set_members(
        &mut self,
        group: GroupId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError>;
    fn resume_member(
        &mut self,
        group: GroupId,
        member: NodeId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError>;
    fn sender_position(&self, group: GroupId) -> Option<StreamStart>;
    fn send_idle(&self, group: GroupId) -> bool;
    /// How many of the stream's messages, from the first, every member has
    /// acknowledged (None: no stream, or its algorithm does not say).
    fn acked_messages(&mut self, group: GroupId) -> Option<u64>;
}

impl<T: Transport> StreamOps for Engine<T> {
    fn open_sender(
        &mut self,
        group: GroupId,
        members: &[NodeId],
        start: StreamStart,
    ) -> Result<(), EngineError> {
        self.open_sender_in(group, members, start)
    }
    fn publish(&mut self, group: GroupId, msg: &[u8]) -> Result<(), PublishError> {
        self.publish_in(group, msg)
    }
    fn set_members(
        &mut self,
        group: GroupId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        self.set_members_in(group, members)
    }
    fn resume_member(
        &mut self,
        group: GroupId,
        member: NodeId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        self.resume_member_in(group, member, members)
    }
    fn sender_position(&self, group: GroupId) -> Option<StreamStart> {
        Engine::sender_position(self, group)
    }
    fn send_idle(&self, group: GroupId) -> bool {
        self.group_send_idle(group)
    }
    fn acked_messages(&mut self, group: GroupId) -> Option<u64> {
        self.group_acked_messages(group)
    }
}

/// The mode of `group`, which this node (`node`, incarnation `epoch`)
/// starts carrying with settings `s`. `resume`: where this node's send
/// stream (or broadcast sequence) in the group stopped the last time it
/// carried it in this incarnation; `beacon_us`: a total-order group's
/// beacon interval.
pub fn for_group(
    s: &config::GroupSettings,
    group: GroupId,
    node: NodeId,
    epoch: u32,
    resume: Option<Seq>,
    beacon_us: u64,
) -> Box<dyn GroupMode> {
    let first_seq = resume.unwrap_or(Seq(0));
    let commit = s.commit;
    match s.mode {
        config::GroupMode::Broadcast => Box::new(broadcast::BroadcastMode::new(
            group,
            node,
            epoch,
            resume,
            s.broadcast,
        )),
        config::GroupMode::Fifo => Box::new(fifo::PerSenderFifo::new(first_seq)),
        config::GroupMode::Sequenced => Box::new(sequenced::Sequenced::new(node, epoch, first_seq)),
        config::GroupMode::Total => Box::new(
            total::TotalOrder::new(
                group,
                node,
                first_seq,
                Box::new(hlc::system_wall_ns),
                beacon_us.saturating_mul(1_000),
            )
            .committing(commit)
            .acknowledged(s.algorithm != config::Algorithm::Nak)
            .commit_tree_from(match s.commit_tree_from {
                0 => usize::MAX,
                n => n as usize,
            }),
        ),
    }
}

/// Records a mode handed over during one call, kept until the daemon gives
/// them to the local members (one buffer, reused: no allocation per
/// record once it has grown).
#[derive(Debug, Default)]
pub(super) struct ModeRecords {
    records: Vec<(RecordHeader, std::ops::Range<usize>, To)>,
    bytes: Vec<u8>,
}

impl ModeRecords {
    fn push(&mut self, hdr: RecordHeader, data: &[u8], to: To) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(data);
        self.records.push((hdr, at..self.bytes.len(), to));
    }
}

/// Mode messages that came before their group was carried here, per group
/// (at most [`EarlyModeMessages::MAX_PER_GROUP`] each, for at most
/// [`EarlyModeMessages::MAX_GROUPS`] groups: beyond, the oldest group's
/// go). Only the last [`EarlyModeMessages::MAX_AGE_NS`] of them are handed
/// over: older ones belong to an earlier membership, not to the view on
/// its way. After this node was declared failed, what comes for a group it
/// is rejoining before it has asked to join it again is dropped instead
/// ([`EarlyModeMessages::stale_until_joined`]).
#[derive(Debug, Default)]
pub(super) struct EarlyModeMessages {
    groups: std::collections::VecDeque<(GroupId, Vec<ModeMessage>)>,
    /// The groups this node left when it was declared failed, by name,
    /// until its rejoin asks to join them again: no peer can count this
    /// incarnation's members before that, so whatever comes for them was
    /// sent to the previous incarnation (a broadcast group's START, taken
    /// by the new relay, would make it skip messages).
    stale: Vec<(GroupId, String)>,
}

/// A mode message as it came: when (monotonic ns), from which peer, and
/// its body.
type ModeMessage = (u64, NodeId, Vec<u8>);

impl EarlyModeMessages {
    /// Messages kept per group.
    pub const MAX_PER_GROUP: usize = 4096;
    /// Groups kept.
    pub const MAX_GROUPS: usize = 64;
    /// How old a kept message may be when its group is carried.
    pub const MAX_AGE_NS: u64 = 2_000_000_000;

    /// Messages for `groups` (id, name) are stale until
    /// [`Self::joining`] names them: this node was declared failed and
    /// rejoins them as a new incarnation.
    pub(super) fn stale_until_joined(&mut self, groups: Vec<(GroupId, String)>) {
        self.stale
            .retain(|(g, _)| !groups.iter().any(|(h, _)| h == g));
        self.stale.extend(groups);
    }

    /// This node asks to join the group named `name`: messages for it may
    /// be for the membership on its way again.
    pub(super) fn joining(&mut self, name: &str) {
        self.stale.retain(|(_, n)| n != name);
    }

    /// True when what comes for `group` now was sent to an earlier
    /// incarnation of this node.
    pub(super) fn is_stale(&self, group: GroupId) -> bool {
        self.stale.iter().any(|&(g, _)| g == group)
    }

    /// Keeps `body` from `from` for `group`, come at `now`; false when it
    /// had to be dropped.
    fn keep(&mut self, now: u64, group: GroupId, from: NodeId, body: &[u8]) -> bool {
        if let Some((_, q)) = self.groups.iter_mut().find(|(g, _)| *g == group) {
            q.retain(|m| now.saturating_sub(m.0) <= Self::MAX_AGE_NS);
            if q.len() >= Self::MAX_PER_GROUP {
                return false;
            }
            q.push((now, from, body.to_vec()));
            return true;
        }
        if self.groups.len() >= Self::MAX_GROUPS {
            self.groups.pop_front();
        }
        self.groups
            .push_back((group, vec![(now, from, body.to_vec())]));
        true
    }

    /// What was kept for `group` and is young enough at `now`, in arrival
    /// order: (from, body).
    pub(super) fn take(&mut self, now: u64, group: GroupId) -> Vec<(NodeId, Vec<u8>)> {
        let kept = match self.groups.iter().position(|(g, _)| *g == group) {
            Some(i) => self.groups.remove(i).map(|(_, q)| q).unwrap_or_default(),
            None => Vec::new(),
        };
        kept.into_iter()
            .filter(|m| now.saturating_sub(m.0) <= Self::MAX_AGE_NS)
            .map(|(_, from, body)| (from, body))
            .collect()
    }

    /// Forgets everything (the node rejoins the cluster).
    pub(super) fn clear(&mut self) {
        self.groups.clear();
    }
}

impl<T: Transport> Daemon<T> {
    /// Runs `f` on `group`'s mode (None if this node does not carry the
    /// group), then queues the link messages it left in the outbox and
    /// gives the records it handed over to the group's local members.
    fn with_mode<R>(
        &mut self,
        group: GroupId,
        f: impl FnOnce(&mut dyn GroupMode, &mut ModeCx<'_>, &mut Out<'_>) -> R,
    ) -> Option<R> {
        let settled = !self.flush.flushes.pending_in(group);
        let lg = self.local.get_mut(&group)?;
        let root = lg.root();
        let view_epoch = lg.view.as_ref().map_or(0, |v| v.epoch);
        let mut outbox = Vec::new();
        let mut recs = std::mem::take(&mut self.mode_records);
        let r = {
            let (mode, remote) = lg.mode_and_remote();
            let mut cx = ModeCx {
                group,
                node: self.node,
                epoch: self.incarnation,
                remote,
                root,
                settled,
                view_epoch,
                streams: &mut self.engine,
                outbox: &mut outbox,
            };
            f(mode, &mut cx, &mut |hdr, data, to| recs.push(hdr, data, to))
        };
        for (to, m) in outbox {
            self.send_link(to, m);
        }
        if !recs.records.is_empty() {
            let lg = self.local.get_mut(&group)?;
            let (members, mut gate) = (
                std::mem::take(&mut lg.members),
                std::mem::take(&mut lg.gate),
            );
            for (hdr, range, to) in recs.records.drain(..) {
                let data = &recs.bytes[range];
                mode_record(
                    &mut self.clients,
                    &members,
                    &mut gate,
                    hdr,
                    data,
                    to,
                    &mut self.counters,
                );
            }
            recs.bytes.clear();
            if let Some(lg) = self.local.get_mut(&group) {
                (lg.members, lg.gate) = (members, gate);
            }
        }
        self.mode_records = recs;
        Some(r)
    }

    /// The record the client service is taking from client `from`, to
    /// `group`'s mode; a scattering's parts when `scatter`, once their
    /// members are found in the group's view.
    pub(super) fn publish_in_mode(
        &mut self,
        group: GroupId,
        from: ClientId,
        scatter: bool,
    ) -> Result<Published, EngineError> {
        if scatter {
            if let Err(why) = self.check_scatter(group) {
                return Ok(Published::Dropped(why));
            }
        }
        let msg = std::mem::take(&mut self.clients.scratch);
        let r = self.with_mode(group, |m, cx, out| {
            if scatter {
                m.publish_scatter(cx, from, &msg, out)
            } else {
                m.publish(cx, from, &msg, out)
            }
        });
        self.clients.scratch = msg;
        r.expect("a joined group is carried")
    }

    /// Whether the scattering being taken is well formed and each of its
    /// parts goes to a member of `group`'s view here.
    fn check_scatter(&self, group: GroupId) -> Result<(), String> {
        let parts = mcast_ipc::scatter::decode(&self.clients.scratch)?;
        let view = self.local.get(&group).and_then(|lg| lg.view.as_ref());
        for (node, member, _) in parts {
            let known = |v: &mcast_groups::View| {
                v.members
                    .iter()
                    .any(|m| m.node == node && m.member == member)
            };
            if !view.is_some_and(known) {
                return Err(format!(
                    "a scattering to member {member} of node {node}, which is not in group {group}'s view, was dropped"
                ));
            }
        }
        Ok(())
    }

    /// A fragment that did not come from the engine (a flush recovered it)
    /// through its group's mode to the local members.
    pub(super) fn deliver_in_mode(&mut self, f: &Fragment<'_>) {
        self.with_mode(f.group, |m, _, out| m.deliver(f, out));
    }

    /// `group`'s remote members changed; `added` are new.
    pub(super) fn members_changed(
        &mut self,
        group: GroupId,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        // The tree first: a send stream the mode opens or widens reports over it.
        self.install_tree(group)?;
        self.barrier_view_changed(group)?;
        self.with_mode(group, |m, cx, _| m.members_changed(cx, added))
            .unwrap_or(Ok(()))
    }

    /// Offers `group`'s mode the membership event of the view just
    /// installed: true when the mode delivers it at its place in its order.
    pub(super) fn place_event(&mut self, group: GroupId, event: &[u8]) -> bool {
        self.with_mode(group, |m, cx, _| m.place_event(cx, event))
            .unwrap_or(false)
    }

    /// Offers `group`'s mode a `skipped` notice about `sender`'s stream:
    /// true when the mode delivers it at its place in its order.
    pub(super) fn place_skipped(&mut self, group: GroupId, sender: NodeId, notice: &[u8]) -> bool {
        self.with_mode(group, |m, _, out| m.place_skipped(sender, notice, out))
            .unwrap_or(false)
    }

    /// Tells `to` again where this node's stream in `group` goes on for
    /// it, if the group's mode counts it. True when it was told.
    pub(super) fn resume_member(
        &mut self,
        group: GroupId,
        to: NodeId,
    ) -> Result<bool, EngineError> {
        self.with_mode(group, |m, cx, _| m.resume_member(cx, to))
            .unwrap_or(Ok(false))
    }

    /// True when what this node published in `group` reached every member.
    pub(super) fn send_idle(&self, group: GroupId) -> bool {
        self.local
            .get(&group)
            .is_none_or(|lg| lg.mode.send_idle(&self.engine, group))
    }

    /// A mode message for `group` from peer `from`. One for a group this
    /// node does not carry yet is kept until it does (its mode may need
    /// it: a broadcast group's first messages and starts).
    pub(super) fn mode_message(&mut self, from: NodeId, group: GroupId, body: &[u8]) {
        if !self.local.contains_key(&group) {
            if self.mode_early.is_stale(group) {
                self.counters.mode_messages_stale += 1;
                return;
            }
            let now = mcast_engine::sys::monotonic_ns();
            if self.mode_early.keep(now, group, from, body) {
                self.counters.mode_messages_early += 1;
                return;
            }
            self.counters.link_errors += 1;
            self.log.warn(
                "a mode message for a group this node does not carry, beyond what is kept for it: dropped",
                &[("from", &from), ("group", &group)],
            );
            return;
        }
        let r = self.with_mode(group, |m, cx, out| m.on_link(cx, from, body, out));
        let error = match r {
            Some(Ok(())) => return,
            Some(Err(e)) => e,
            None => format!("a mode message for group {group}, which this node does not carry"),
        };
        self.counters.link_errors += 1;
        self.log
            .warn("bad mode message", &[("from", &from), ("error", &error)]);
    }

    /// The earliest time a group's mode wants to be polled.
    pub(super) fn modes_due(&self) -> Option<u64> {
        self.local.values().filter_map(|lg| lg.mode.poll_at()).min()
    }

    /// The timers and held work of the modes whose time has come, and of
    /// those that want every round.
    pub(super) fn poll_modes(&mut self) -> Result<bool, EngineError> {
        let now = mcast_engine::sys::monotonic_ns();
        let due =
            |lg: &LocalGroup| lg.mode.wants_round() || lg.mode.poll_at().is_some_and(|t| t <= now);
        if !self.local.values().any(due) {
            return Ok(false);
        }
        let mut work = false;
        let groups: Vec<GroupId> = self
            .local
            .iter()
            .filter(|(_, lg)| due(lg))
            .map(|(&g, _)| g)
            .collect();
        for group in groups {
            work |= self.poll_mode(group, now)?;
        }
        Ok(work)
    }

    /// Polls `group`'s mode: its timers and held work, and what it reports
    /// silent to the failure detector. Also called as soon as the group's
    /// last flush ends, before any frame is delivered: a mode that keeps
    /// departed nodes until no flush runs (the total-order mode's barrier)
    /// lets them go before a new incarnation's stream, started as the
    /// flush ended, brings stamps it would take for the old one's.
    pub(super) fn poll_mode(&mut self, group: GroupId, now: u64) -> Result<bool, EngineError> {
        let polled = self.with_mode(group, |m, cx, out| {
            m.poll(cx, now, out).map(|w| (w, m.silent(now)))
        });
        let Some((work, silent)) = polled.transpose()? else {
            return Ok(false);
        };
        for n in silent {
            let registry = self.groups.registry_epoch();
            let events = &mut self.live.events;
            let why = mcast_groups::liveness::Report::Silent;
            if self.live.tracker.reported(n, why, now, registry, events) {
                self.counters.beacon_suspicions += 1;
                self.log.info(
                    "a total-order group waited ten beacon intervals on a peer that sent nothing: probing it",
                    &[("node", &n), ("group", &group)],
                );
            }
        }
        Ok(work)
    }
}

#[cfg(test)]
mod early_tests {
    use super::EarlyModeMessages as E;

    #[test]
    fn early_mode_messages_are_bounded_and_only_recent_ones_are_handed_over() {
        let mut e = E::default();
        assert!(e.keep(0, 7, 2, b"old"));
        assert!(e.keep(E::MAX_AGE_NS, 7, 3, b"new"));
        assert_eq!(e.take(E::MAX_AGE_NS + 1, 7), vec![(3, b"new".to_vec())]);
        assert!(e.take(0, 7).is_empty(), "taken once");
        for i in 0..E::MAX_PER_GROUP {
            assert!(e.keep(5, 8, 1, &[i as u8]));
        }
        assert!(!e.keep(5, 8, 1, b"one too many"));
        for g in 100..100 + E::MAX_GROUPS as u32 {
            assert!(e.keep(5, g, 1, b"x"));
        }
        assert!(e.take(5, 8).is_empty(), "the oldest group made room");
    }

    #[test]
    fn after_an_eviction_a_group_is_stale_until_its_join_is_asked_again() {
        let mut e = E::default();
        e.stale_until_joined(vec![(7, "a".into()), (8, "b".into())]);
        assert!(e.is_stale(7) && e.is_stale(8) && !e.is_stale(9));
        // Its join goes out: what comes now may be for the new membership.
        e.joining("a");
        assert!(!e.is_stale(7) && e.is_stale(8));
        // A second eviction before the joins: stale again, once each.
        e.stale_until_joined(vec![(7, "a".into()), (8, "b".into())]);
        e.joining("b");
        assert!(e.is_stale(7) && !e.is_stale(8));
        e.joining("a");
        assert!(!e.is_stale(7));
    }
}
