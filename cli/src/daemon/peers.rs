//! The links between daemons: one Go-Back-N stream to each peer's inbox
//! (docs/mcastd.md, "The daemons' links"), what waits to go on them, the
//! reassembly of what arrives, and its dispatch to the concern it is for.
//!
//! Owns: [`Links`] (send queues, reassembly, each link's epoch) and the
//! inbox groups in the engine.
//! Does not touch: what the messages mean (the group service,
//! [`streams`](super::streams), [`flush`](super::flush) and the group's
//! [`mode`](super::mode) handle them).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use mcast_engine::{
    Accept, Engine, EngineError, Fragment, GroupOptions, ProtocolConfig, PublishError, StreamStart,
    Transport,
};
use mcast_groups::detector::PeerState;
use mcast_proto::frag::Reassembler;
use mcast_wire::{NodeId, Seq};

use super::Daemon;
use crate::config::Config;
use crate::links::{inbox, LinkMessage};

/// Control messages waiting for a full link at most, per peer.
const MAX_LINK_BACKLOG: usize = 65_536;

/// The daemon's side of its links.
#[derive(Debug)]
pub(super) struct Links {
    reassembly: HashMap<NodeId, Reassembler>,
    /// Whole messages received, by sender, not yet handled.
    inbound: Vec<(NodeId, Vec<u8>)>,
    /// Messages waiting for room in each link's window.
    pub(super) backlog: HashMap<NodeId, VecDeque<Vec<u8>>>,
    /// The epoch of each link's send stream (bumped when the link is reset).
    pub(super) epochs: HashMap<NodeId, u32>,
}

impl Links {
    /// Adds this node's inbox and a link to every configured peer to `engine`.
    pub(super) fn open<T: Transport>(
        engine: &mut Engine<T>,
        cfg: &Config,
        incarnation: u32,
    ) -> Result<Links, EngineError> {
        let link = link_options();
        engine.add_group(
            inbox(cfg.node),
            GroupOptions {
                // Only the configured peers' frames open a link: where frames
                // are not authenticated, anyone can claim any sender id.
                accept_senders: Accept::Only(cfg.peers.iter().map(|p| p.node).collect()),
                ..link.clone()
            },
        )?;
        for p in &cfg.peers {
            engine.add_group(inbox(p.node), link.clone())?;
            engine.open_sender_in(
                inbox(p.node),
                &[p.node],
                StreamStart {
                    epoch: incarnation,
                    seq: Seq(0),
                },
            )?;
        }
        Ok(Links {
            reassembly: HashMap::new(),
            inbound: Vec::new(),
            backlog: HashMap::new(),
            epochs: cfg.peers.iter().map(|p| (p.node, incarnation)).collect(),
        })
    }

    /// A fragment of a peer's message; a whole message goes to `inbound`.
    /// Err: the fragments do not make a message.
    pub(super) fn take_fragment(&mut self, f: &Fragment<'_>, max_message: usize) -> Result<(), ()> {
        let r = self
            .reassembly
            .entry(f.stream)
            .or_insert_with(|| Reassembler::new(max_message));
        let mut flags = mcast_wire::Flags::NONE;
        if f.first {
            flags = flags.with(mcast_wire::Flags::FRAG_FIRST);
        }
        if f.last {
            flags = flags.with(mcast_wire::Flags::FRAG_LAST);
        }
        match r.push(flags, f.data) {
            Ok(Some(m)) => self.inbound.push((f.stream, m.to_vec())),
            Ok(None) => {}
            Err(_) => return Err(()),
        }
        Ok(())
    }
}

impl<T: Transport> Daemon<T> {
    /// Starts the link to `n` afresh: what was queued for it is dropped and
    /// its send stream reopens in a new epoch.
    pub(super) fn reset_link(&mut self, n: NodeId) -> Result<(), EngineError> {
        if let Some(q) = self.links.backlog.get_mut(&n) {
            q.clear();
        }
        let epoch = self.links.epochs.entry(n).or_insert(self.incarnation);
        *epoch += 1;
        let start = StreamStart {
            epoch: *epoch,
            seq: Seq(0),
        };
        self.engine.close_sender_in(inbox(n))?;
        self.engine.open_sender_in(inbox(n), &[n], start)?;
        self.counters.link_resets += 1;
        Ok(())
    }

    /// Queues `msg` for `peer` (dropped if the peer is declared failed).
    pub(super) fn send_link(&mut self, peer: NodeId, msg: LinkMessage) {
        if self.live.tracker.detector().state(peer) == Some(PeerState::Failed) {
            self.counters.link_backlog_drops += 1;
            return;
        }
        let q = self.links.backlog.entry(peer).or_default();
        if q.len() >= MAX_LINK_BACKLOG {
            self.counters.link_backlog_drops += 1;
            self.log.error(
                "link backlog full: dropping a control message",
                &[("peer", &peer), ("backlog", &q.len())],
            );
            return;
        }
        q.push_back(msg.encode());
    }

    /// Moves queued messages into the links' windows.
    pub(super) fn flush_links(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        for (&peer, q) in self.links.backlog.iter_mut() {
            while let Some(m) = q.front() {
                match self.engine.publish_in(inbox(peer), m) {
                    Ok(()) => {
                        q.pop_front();
                        self.counters.link_messages_sent += 1;
                        work = true;
                    }
                    Err(PublishError::WouldBlock) => break,
                    Err(e) => {
                        self.counters.link_errors += 1;
                        self.log
                            .error("cannot send to peer", &[("peer", &peer), ("error", &e)]);
                        q.pop_front();
                    }
                }
            }
        }
        Ok(work)
    }

    /// Queues what the group service has for its peers.
    pub(super) fn flush_group_sends(&mut self) {
        while let Some((peer, bytes)) = self.groups.poll_send() {
            if peer == self.node {
                // The service answers itself internally; never expected.
                continue;
            }
            if !self.cfg.peers.iter().any(|p| p.node == peer) {
                self.counters.link_errors += 1;
                self.log.error(
                    "group message for a node that is not a [[peer]]",
                    &[("node", &peer)],
                );
                continue;
            }
            self.send_link(peer, LinkMessage::Groups(bytes));
        }
    }

    /// Hands each message received to the concern it is for.
    pub(super) fn handle_links(&mut self) -> Result<bool, EngineError> {
        let inbound = std::mem::take(&mut self.links.inbound);
        let work = !inbound.is_empty();
        let now = mcast_engine::sys::monotonic_ns();
        for (from, bytes) in inbound {
            self.live.tracker.heard(from, now);
            self.counters.link_messages_received += 1;
            if self.live.tracker.declared_failed(from) {
                // Its old incarnation, woken from a pause: every view it
                // was in has moved on without it, and its beats are telling
                // it to rejoin as a new one. Taken, its SYNC had the agent
                // add its members back with their streams far behind (the
                // members skipped what they missed), and its FORWARDs went
                // to a sequenced root as a departed origin's.
                self.counters.link_messages_from_failed += 1;
                continue;
            }
            match LinkMessage::decode(&bytes) {
                Ok(LinkMessage::Groups(b)) => {
                    if let Err(e) = self.groups.handle_message(from, &b) {
                        self.counters.link_errors += 1;
                        self.log
                            .warn("bad group message", &[("from", &from), ("error", &e)]);
                    }
                }
                Ok(LinkMessage::Start { group, start }) => self.stream_start(from, group, start)?,
                Ok(LinkMessage::StartRequest { group }) => self.start_request(from, group)?,
                Ok(LinkMessage::Flush(m)) => self.flush_message(from, m),
                Ok(LinkMessage::Mode { group, body }) => self.mode_message(from, group, &body),
                Ok(LinkMessage::Barrier {
                    group,
                    what,
                    number,
                    dropped,
                }) => self.barrier_message(from, group, what, number, &dropped),
                Err(e) => {
                    self.counters.link_errors += 1;
                    self.log
                        .warn("bad link message", &[("from", &from), ("error", &e)]);
                }
            }
        }
        Ok(work)
    }
}

/// The daemons' unicast links: Go-Back-N (the iterative sender to one
/// member), never subscribed. The retransmission timeout is measured (RFC
/// 6298, as for every Go-Back-N stream) once the peer answers: a LAN round
/// trip gives the 200 us floor, where the fixed 2 ms used before made every
/// lost link frame cost 2 ms. Until then it starts at 2 ms, and a peer that is
/// slow to start (or gone) is retried with the timeout doubling up to 20 ms,
/// not the 1 s ceiling of application streams: a link must come up within a
/// beat or two of its peer.
fn link_options() -> GroupOptions {
    let mut protocol = ProtocolConfig::default();
    protocol.gbn.rto = mcast_proto::RtoConfig {
        initial: Duration::from_millis(2),
        min: Duration::from_micros(200),
        max: Duration::from_millis(20),
    };
    GroupOptions {
        algorithm: mcast_engine::Algorithm::Iterative,
        protocol,
        window_frames: 64,
        subscribe: false,
        accept_senders: Accept::Opened,
        max_queued_frames: 4096,
        batch_messages: true,
    }
}
