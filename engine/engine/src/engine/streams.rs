//! The stream table: the groups this engine carries and, in each, this
//! node's send stream and one receive stream per sending node. Adding and
//! removing groups, opening and closing streams, installing a send stream's
//! members (a view), resuming a member, pausing a group's delivery, and the
//! routing lookups (`group_index`) the poll loop uses.
//!
//! Owns: [`GroupState`], [`SendStream`], [`RecvStream`], each group's
//! feedback tree (installed in its machines as they open), how a send stream's
//! buffers reach the wire ([`TxPolicy`]) and where a joining receiver starts.
//! May not touch: frames, except to hand a closed stream's buffers back
//! through the frame accounting; nothing here runs per frame but the lookups.

use std::collections::VecDeque;

use mcast_proto::any::{Algorithm, AnyReceiver, AnySender};
use mcast_proto::frag::Reassembler;
use mcast_proto::relay::RelayCache;
use mcast_proto::{Endpoint, FeedbackTree, GroupId, NodeId, OutFrame, Sender, Seq, StreamConfig};
use mcast_wire::group_mac;

use super::{Engine, GroupOptions, SendTally, StreamStart};
use crate::transport::Transport;
use crate::EngineError;

#[derive(Debug)]
pub(super) struct RecvStream {
    pub(super) sender: NodeId,
    pub(super) epoch: u32,
    pub(super) machine: AnyReceiver,
    pub(super) reassembler: Reassembler,
    /// Copies of the frames received, from which the machine repairs its
    /// tree neighbours (docs/protocol.md §3.5); made when it first asks
    /// for them ([`mcast_proto::Endpoint::keeps_copies`]).
    pub(super) copies: Option<RelayCache>,
}

#[derive(Debug)]
pub(super) struct SendStream {
    pub(super) machine: AnySender,
    pub(super) policy: TxPolicy,
    pub(super) start: StreamStart,
    /// The sequence number the next frame fed to the machine gets.
    pub(super) next_seq: Seq,
    /// Published fragments waiting for the window.
    pub(super) queue: VecDeque<OutFrame>,
    /// What the stream carried (messages, frames, bytes).
    pub(super) tally: SendTally,
    /// The frames in the machine that end messages: (sequence number,
    /// messages ending in it), oldest first, until acknowledged.
    pub(super) ends: VecDeque<(Seq, u32)>,
    /// Messages every member has acknowledged whole, from the first.
    pub(super) acked_messages: u64,
}

impl SendStream {
    /// Counts the messages whose last frame every member has acknowledged
    /// (the machine's [`acked_until`](mcast_proto::Sender::acked_until))
    /// and drops their entries; None when the machine does not say.
    pub(super) fn settle_acked(&mut self) -> Option<u64> {
        let until = self.machine.acked_until()?;
        while let Some(&(seq, n)) = self.ends.front() {
            if !seq.before(until) {
                break;
            }
            self.acked_messages += u64::from(n);
            self.ends.pop_front();
        }
        Some(self.acked_messages)
    }
}

#[derive(Debug)]
pub(super) struct GroupState {
    pub(super) id: GroupId,
    pub(super) opts: GroupOptions,
    pub(super) sender: Option<SendStream>,
    pub(super) receivers: Vec<RecvStream>,
    pub(super) paused: bool,
    /// The feedback tree every stream of the group reports over
    /// ([`Engine::set_tree_in`]); `None`: ACKs go straight to the sender.
    pub(super) tree: Option<FeedbackTree>,
}

/// How the send machine's data buffers reach the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TxPolicy {
    /// Headers written in place in the machine's buffer (the multicast
    /// algorithms, and iterative with a single member: Go-Back-N unicast).
    InPlace,
    /// Payload copied into a fresh frame per transmit (iterative to two or
    /// more members: one header per receiver, possibly in flight at once).
    CopyPerTransmit,
}

/// The policy a send machine needs: only iterative to several members has
/// per-destination headers that could be on the wire at the same time.
pub(super) fn tx_policy(machine: &AnySender) -> TxPolicy {
    match machine {
        AnySender::Iterative(s) if s.members().nth(1).is_some() => TxPolicy::CopyPerTransmit,
        _ => TxPolicy::InPlace,
    }
}

impl<T: Transport> Engine<T> {
    /// Starts carrying `group` (subscribing its MAC if `opts.subscribe`).
    pub fn add_group(&mut self, group: GroupId, opts: GroupOptions) -> Result<(), EngineError> {
        if self.group_index(group).is_some() {
            return Err(EngineError::Config(format!(
                "group {group} is already open"
            )));
        }
        if self.groups.len() >= self.cfg.max_groups {
            return Err(EngineError::Config(format!(
                "{} groups are open, the limit (max_groups)",
                self.groups.len()
            )));
        }
        if opts.window_frames == 0 || opts.window_frames >= self.transport.frame_count() {
            return Err(EngineError::Config(format!(
                "window of {} frames does not fit a pool of {} frames",
                opts.window_frames,
                self.transport.frame_count()
            )));
        }
        if opts.subscribe {
            self.transport.subscribe(group_mac(group))?;
        }
        self.groups.push(GroupState {
            id: group,
            opts,
            sender: None,
            receivers: Vec::new(),
            paused: false,
            tree: None,
        });
        Ok(())
    }

    /// Stops carrying `group`: its streams are closed (their frames freed,
    /// queued messages dropped) and its MAC unsubscribed.
    pub fn remove_group(&mut self, group: GroupId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        self.close_sender_in(group)?;
        while let Some(r) = self.groups[gi].receivers.last() {
            let sender = r.sender;
            self.close_receiver_in(group, sender)?;
        }
        let g = self.groups.remove(gi);
        self.messages.retain(|m| m.group != group);
        if g.opts.subscribe {
            self.transport.unsubscribe(group_mac(group))?;
        }
        Ok(())
    }

    /// The groups carried.
    pub fn groups(&self) -> impl Iterator<Item = GroupId> + '_ {
        self.groups.iter().map(|g| g.id)
    }

    /// Opens this node's send stream in the configuration's group to `members`.
    pub fn open_sender(&mut self, members: &[NodeId]) -> Result<(), EngineError> {
        self.open_sender_in(self.cfg.group, members, self.cfg.start())
    }

    /// Opens this node's send stream in `group` to `members`, starting at `start`.
    pub fn open_sender_in(
        &mut self,
        group: GroupId,
        members: &[NodeId],
        start: StreamStart,
    ) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        if self.groups[gi].sender.is_some() {
            return Err(EngineError::Config(format!(
                "a send stream is already open in group {group}"
            )));
        }
        let stream = self.stream_config(gi, self.cfg.node, start);
        let g = &mut self.groups[gi];
        let mut machine = AnySender::new(g.opts.algorithm, stream, &g.opts.protocol, members);
        machine.set_tree(g.tree.as_ref());
        g.sender = Some(SendStream {
            policy: tx_policy(&machine),
            machine,
            start,
            next_seq: start.seq,
            queue: VecDeque::new(),
            tally: SendTally::default(),
            ends: VecDeque::new(),
            acked_messages: 0,
        });
        Ok(())
    }

    /// Installs a new view in `group`'s send stream: the members whose
    /// acknowledgments count from now on. Returns where a member added now
    /// starts (what its receive stream must be opened at).
    pub fn set_members_in(
        &mut self,
        group: GroupId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        let now = self.now();
        let gi = self.require_group(group)?;
        let Some(mut s) = self.groups[gi].sender.take() else {
            return Err(EngineError::Config(format!(
                "no send stream is open in group {group}"
            )));
        };
        s.machine.set_members(now, members);
        // Iterative with one member sends in place; with more, a copy each.
        // Frames already in flight in place are deferred by the copy path
        // until their completion, so a change is safe at any time.
        s.policy = tx_policy(&s.machine);
        let start = joining_position(self.groups[gi].opts.algorithm, &s);
        // Frames only departed members held are released now.
        let freed = self.absorb_releases(&mut s.machine);
        self.groups[gi].sender = Some(s);
        freed.map(|()| start)
    }

    /// Installs `group`'s feedback tree (seed 004 §2.1) in its send stream
    /// and every receive stream, now and as they open: each receiver
    /// reports its subtree's ACKs toward the data's source over the tree
    /// (docs/protocol.md §3.4). `None` removes it: ACKs go straight to the
    /// sender. A tree that does not contain this node is refused.
    pub fn set_tree_in(
        &mut self,
        group: GroupId,
        tree: Option<FeedbackTree>,
    ) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        if let Some(t) = &tree {
            if !t.contains(self.cfg.node) {
                return Err(EngineError::Config(format!(
                    "the feedback tree of group {group} does not contain this node ({})",
                    self.cfg.node
                )));
            }
        }
        let g = &mut self.groups[gi];
        if g.tree == tree {
            return Ok(());
        }
        g.tree = tree;
        if let Some(s) = g.sender.as_mut() {
            s.machine.set_tree(g.tree.as_ref());
        }
        for r in &mut g.receivers {
            r.machine.set_tree(g.tree.as_ref());
        }
        Ok(())
    }

    /// `group`'s feedback tree, if one is installed.
    pub fn tree_in(&self, group: GroupId) -> Option<&FeedbackTree> {
        self.groups[self.group_index(group)?].tree.as_ref()
    }

    /// Where `member`, which lost its receive stream of `group`'s send
    /// stream while this node kept counting it a member, opens it again:
    /// at the first frame it has not acknowledged, which the machine still
    /// holds (nothing it lacks is skipped). Algorithms that keep no such
    /// position take it out of `members` and add it back, so it starts
    /// where a new member would.
    pub fn resume_member_in(
        &mut self,
        group: GroupId,
        member: NodeId,
        members: &[NodeId],
    ) -> Result<StreamStart, EngineError> {
        let now = self.now();
        let gi = self.require_group(group)?;
        let Some(s) = self.groups[gi].sender.as_mut() else {
            return Err(EngineError::Config(format!(
                "no send stream is open in group {group}"
            )));
        };
        if let Some(seq) = s.machine.resume_point(now, member) {
            return Ok(StreamStart {
                epoch: s.start.epoch,
                seq,
            });
        }
        let others: Vec<NodeId> = members.iter().copied().filter(|&n| n != member).collect();
        self.set_members_in(group, &others)?;
        self.set_members_in(group, members)
    }

    /// Where a receiver added to `group`'s send stream now would start.
    pub fn sender_position(&self, group: GroupId) -> Option<StreamStart> {
        let g = &self.groups[self.group_index(group)?];
        g.sender
            .as_ref()
            .map(|s| joining_position(g.opts.algorithm, s))
    }

    /// Closes this node's send stream in `group`: frames not yet acknowledged
    /// are abandoned, messages queued behind the window dropped.
    pub fn close_sender_in(&mut self, group: GroupId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        let Some(mut s) = self.groups[gi].sender.take() else {
            return Ok(());
        };
        while let Some(of) = s.queue.pop_front() {
            self.free(of.buf.0);
        }
        s.machine.release_all();
        self.absorb_releases(&mut s.machine)
    }

    /// Opens a receive stream in the configuration's group for node `sender`'s data.
    pub fn open_receiver(&mut self, sender: NodeId) -> Result<(), EngineError> {
        self.open_receiver_in(self.cfg.group, sender, self.cfg.start())
    }

    /// Opens a receive stream in `group` for node `sender`'s data, expecting
    /// `start` first. Frames before it are history this stream never delivers.
    pub fn open_receiver_in(
        &mut self,
        group: GroupId,
        sender: NodeId,
        start: StreamStart,
    ) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        if sender == self.cfg.node || self.groups[gi].receivers.iter().any(|r| r.sender == sender) {
            return Err(EngineError::Config(format!(
                "a stream from node {sender} is already open in group {group}"
            )));
        }
        self.push_receiver(gi, sender, start);
        Ok(())
    }

    /// Closes the receive stream of `sender` in `group` (frames it held are
    /// freed, a message half reassembled is dropped).
    pub fn close_receiver_in(&mut self, group: GroupId, sender: NodeId) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        let g = &mut self.groups[gi];
        let Some(i) = g.receivers.iter().position(|r| r.sender == sender) else {
            return Ok(());
        };
        let mut r = g.receivers.swap_remove(i);
        r.machine.release_all();
        self.absorb_releases(&mut r.machine)
    }

    /// The senders `group` has receive streams for.
    pub fn receivers_in(&self, group: GroupId) -> Vec<NodeId> {
        self.group_index(group)
            .map(|gi| self.groups[gi].receivers.iter().map(|r| r.sender).collect())
            .unwrap_or_default()
    }

    /// The members that left at least `after` acknowledgment requests in a
    /// row unanswered, per group, as `(group, node)` (see
    /// [`Sender::unresponsive`]): for the caller's failure detector.
    pub fn unresponsive(&self, after: u32, out: &mut Vec<(GroupId, NodeId)>) {
        let mut nodes = Vec::new();
        for g in &self.groups {
            if let Some(s) = &g.sender {
                nodes.clear();
                s.machine.unresponsive(after, &mut nodes);
                out.extend(nodes.iter().map(|&n| (g.id, n)));
            }
        }
    }

    /// For each node whose stream this node receives, in any group: how
    /// many of its frames have arrived (data, repeats, ACK requests and
    /// position adverts), summed over its streams. A count that moves says
    /// the node is alive: evidence for the caller's failure detector, whose
    /// beats a node busy sending may be late with.
    pub fn frames_from(&self, out: &mut Vec<(NodeId, u64)>) {
        out.clear();
        for r in self.groups.iter().flat_map(|g| &g.receivers) {
            let c = r.machine.counters();
            let n =
                c.data_received + c.duplicates_dropped + c.ack_reqs_received + c.adverts_received;
            match out.iter_mut().find(|(node, _)| *node == r.sender) {
                Some((_, sum)) => *sum += n,
                None => out.push((r.sender, n)),
            }
        }
    }

    /// Every receive stream's progress, in every group, as `(group, sender,
    /// delivered, dropped beyond its window)` from its machine's counters. A
    /// stream whose drops beyond the window grow while it delivers nothing
    /// sits behind its sender's window: the caller asks the sender where to
    /// start again (its frames before that are not this node's).
    pub fn receive_progress(&self, out: &mut Vec<(GroupId, NodeId, u64, u64)>) {
        out.clear();
        for g in &self.groups {
            for r in &g.receivers {
                let c = r.machine.counters();
                out.push((g.id, r.sender, c.delivered, c.out_of_window_dropped));
            }
        }
    }

    /// Pauses (or resumes) `group`'s delivery: while paused, its data frames
    /// are dropped on arrival (and counted), so nothing more is delivered
    /// and its senders, missing this node's acknowledgments, hold back. On
    /// resume the receive machines recover the frames by their usual repair.
    pub fn set_paused(&mut self, group: GroupId, paused: bool) -> Result<(), EngineError> {
        let gi = self.require_group(group)?;
        self.groups[gi].paused = paused;
        Ok(())
    }

    #[inline]
    pub(super) fn group_index(&self, group: GroupId) -> Option<usize> {
        self.groups.iter().position(|g| g.id == group)
    }

    pub(super) fn require_group(&self, group: GroupId) -> Result<usize, EngineError> {
        self.group_index(group)
            .ok_or_else(|| EngineError::Config(format!("group {group} is not open")))
    }

    pub(super) fn stream_config(
        &self,
        gi: usize,
        sender: NodeId,
        start: StreamStart,
    ) -> StreamConfig {
        StreamConfig {
            group: self.groups[gi].id,
            local: self.cfg.node,
            sender,
            epoch: start.epoch,
            initial_seq: start.seq,
            window_frames: self.groups[gi].opts.window_frames,
            seed: self.cfg.seed,
        }
    }

    pub(super) fn push_receiver(&mut self, gi: usize, sender: NodeId, start: StreamStart) {
        let stream = self.stream_config(gi, sender, start);
        let g = &mut self.groups[gi];
        let mut machine = AnyReceiver::new(g.opts.algorithm, stream, &g.opts.protocol);
        machine.set_tree(g.tree.as_ref());
        g.receivers.push(RecvStream {
            sender,
            epoch: start.epoch,
            machine,
            reassembler: Reassembler::new(self.cfg.max_message),
            copies: None,
        });
    }

    /// `accept_senders`: a data frame from `sender` in `epoch` came; make
    /// sure a receive stream of that epoch exists (a newer epoch replaces the
    /// old stream: the peer restarted). False when the group does not
    /// admit `sender` (asked only when it has no stream yet, not per frame).
    #[inline]
    pub(super) fn accept_sender(
        &mut self,
        gi: usize,
        sender: NodeId,
        epoch: u32,
    ) -> Result<bool, EngineError> {
        let g = &mut self.groups[gi];
        match g.receivers.iter().position(|r| r.sender == sender) {
            Some(i) if g.receivers[i].epoch >= epoch => return Ok(true),
            Some(i) => {
                let mut old = g.receivers.swap_remove(i);
                old.machine.release_all();
                self.absorb_releases(&mut old.machine)?;
                self.counters.rx_streams_restarted += 1;
            }
            None if !g.opts.accept_senders.admits(sender) => return Ok(false),
            None => self.counters.rx_streams_opened += 1,
        }
        self.push_receiver(gi, sender, StreamStart { epoch, seq: Seq(0) });
        Ok(true)
    }
}

/// Where a receiver added to a send stream now starts: for MAK the oldest
/// frame the sender still holds (`Sender::join_point`: what a member of
/// before may lack, the new one gets too, so a flush after the sender dies
/// finds it); the next frame for the ACK and NAK baselines; the stream's first sequence
/// number for the iterative baseline, whose per-member Go-Back-N senders each
/// start there.
pub(super) fn joining_position(algorithm: Algorithm, s: &SendStream) -> StreamStart {
    StreamStart {
        epoch: s.start.epoch,
        seq: match algorithm {
            Algorithm::Iterative => s.start.seq,
            _ => s.machine.join_point().unwrap_or(s.next_seq),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mcast_proto::any::Algorithm;
    use mcast_wire::node_mac;

    use crate::{Engine, EngineConfig, MemorySegment, MemoryTransport};

    /// A sender (node 1) and a receiver (node 2) of `algorithm`, 3,000
    /// small messages through; then the sender's count of message
    /// ends waiting for acknowledgment.
    fn ends_left(algorithm: Algorithm) -> usize {
        let seg: Arc<MemorySegment> = MemorySegment::new();
        let engine = |node| {
            let mut cfg = EngineConfig::new(node, 7, algorithm);
            cfg.window_frames = 64;
            cfg.peers = (1..=2).map(|n| (n, node_mac(n))).collect();
            Engine::<MemoryTransport>::new(seg.port(node_mac(node), 512, 2048, 1024), cfg)
                .expect("engine")
        };
        let (mut tx, mut rx) = (engine(1), engine(2));
        tx.open_sender(&[2]).unwrap();
        rx.open_receiver(1).unwrap();
        let mut sent = 0;
        let mut got = 0;
        for _ in 0..100_000 {
            while sent < 3_000 && tx.publish(&[sent as u8; 40]).is_ok() {
                sent += 1;
            }
            tx.poll().unwrap();
            rx.poll().unwrap();
            while rx.recv_message().is_some() {
                got += 1;
            }
            if got == 3_000 {
                break;
            }
        }
        assert_eq!(got, 3_000, "{algorithm:?}: not all delivered");
        tx.groups[0].sender.as_ref().expect("a sender").ends.len()
    }

    #[test]
    fn message_ends_are_kept_only_where_acknowledgments_settle_them() {
        // The ACK baseline frees its window but never says what every
        // member acknowledged: kept, its entries would grow with every
        // frame for ever.
        assert_eq!(ends_left(Algorithm::Ack), 0);
        // MAK settles them: at most a window's worth remain.
        assert!(ends_left(Algorithm::Mak) <= 64);
    }
}
