//! The driver's side of the service: messages in (decoded and handed to
//! the role they are for), messages out, events out, and time (requests
//! expire, sync rounds start).
//!
//! Owns the loopback (messages this node sends itself, handled in order),
//! the outbox, the events and the clock. Decides nothing about groups:
//! every message goes to its handler in `registry`, `agent`, `operating` or
//! `anti_entropy`; registry requests wait in `roles`' held queue until the
//! registry is confirmed.

use crate::wire::Message;
use crate::{DecodeError, GroupError, GroupEvent, GroupService, NodeId, SYNC_PERIOD};

impl GroupService {
    /// A message from node `from`'s group service. Hostile input gives an error
    /// (the message is dropped) or is ignored; it never panics.
    pub fn handle_message(&mut self, from: NodeId, bytes: &[u8]) -> Result<(), DecodeError> {
        let msg = Message::decode(bytes)?;
        self.dispatch(from, msg);
        self.pump();
        Ok(())
    }

    /// The next message for another node's group service.
    pub fn poll_send(&mut self) -> Option<(NodeId, Vec<u8>)> {
        self.outbox.pop_front()
    }

    /// The next event for the daemon.
    pub fn poll_event(&mut self) -> Option<GroupEvent> {
        self.events.pop_front()
    }

    /// Time passes (a monotonic clock, ns): requests unanswered for
    /// [`REQUEST_TIMEOUT`](crate::REQUEST_TIMEOUT) fail with [`GroupError::NoAnswer`] (an answer can
    /// be lost when a link is reset while the cluster changes; the client
    /// retries). Call it now and then; without it nothing times out.
    pub fn tick(&mut self, now: u64) {
        self.now = now;
        let registry = self.registry_node;
        let expired: Vec<u64> = self
            .deadlines
            .iter()
            .filter(|(_, &d)| d <= now)
            .map(|(&t, _)| t)
            .collect();
        for t in expired {
            self.deadlines.remove(&t);
            let Some(p) = self.pending.remove(&t) else {
                continue;
            };
            let node = p.peer(registry);
            if let Some(req) = p.answer_to() {
                self.fail(req, GroupError::NoAnswer { node });
            }
        }
        if self.last_sync.is_none_or(|t| now >= t + SYNC_PERIOD) {
            self.last_sync = Some(now);
            self.sync_round();
        }
        self.pump();
    }

    pub(crate) fn send(&mut self, to: NodeId, msg: Message) {
        // Until this node knows who the registry is, what it would ask the
        // registry waits (a restarted node must not trust its configuration:
        // the role may have moved while it was away).
        if !self.confirmed
            && matches!(
                msg,
                Message::Lookup { .. } | Message::List { .. } | Message::Claim { .. }
            )
        {
            self.held.push_back(msg);
            return;
        }
        if to == self.node {
            self.loopback.push_back(msg);
        } else {
            self.outbox.push_back((to, msg.encode()));
        }
    }

    /// Handles the messages this node sent itself, in order.
    pub(crate) fn pump(&mut self) {
        while let Some(msg) = self.loopback.pop_front() {
            self.dispatch(self.node, msg);
        }
    }

    /// Hands a message to the role it is for.
    fn dispatch(&mut self, from: NodeId, msg: Message) {
        match msg {
            // registry
            Message::Lookup {
                token,
                create,
                name,
            } => self.registry_lookup(from, token, create, name),
            Message::Count {
                group,
                epoch,
                members,
            } => self.registry_count(from, group, epoch, members),
            Message::List { token } => self.registry_list(from, token),
            Message::Announce {
                group,
                epoch,
                members,
                name,
            } => self.registry_announce(from, group, epoch, members, name),
            Message::Synced { epoch } => self.registry_note_synced(from, epoch),
            // agent
            Message::Register {
                token,
                group,
                member,
                name,
                settings,
            } => self.agent_register(from, token, group, member, name, &settings),
            Message::Leave {
                token,
                group,
                member,
            } => self.agent_leave(from, token, group, member),
            Message::Query { token, group } => self.agent_query(from, token, group),
            // operating agent
            Message::LookupReply { token, result } => self.oa_lookup_reply(from, token, result),
            Message::JoinReply {
                token,
                group,
                result,
            } => self.oa_join_reply(from, token, group, result),
            Message::LeaveReply {
                token,
                group,
                result,
            } => self.oa_leave_reply(from, token, group, result),
            Message::View(view) => self.view_from(from, view),
            Message::QueryReply { token, group, view } => {
                self.oa_query_reply(from, token, group, view)
            }
            Message::ListReply { token, groups } => self.oa_list_reply(from, token, groups),
            // anti-entropy
            Message::Sync {
                group,
                epoch,
                agent,
                name,
                members,
            } => self.agent_sync(from, group, epoch, agent, &name, &members),
            Message::NotAgent { group, name } => self.oa_not_agent(from, group, name),
            Message::Claim {
                token,
                group,
                stale,
                name,
            } => self.registry_claim(from, token, group, stale, name),
            Message::Resign {
                group,
                name,
                canonical,
                agent,
            } => self.resign(from, group, name, canonical, agent),
        }
    }
}
