//! The token baseline of seed 002's Figure 1a: one order for everyone by
//! letting one process send at a time. Model-only (mcastd has no such
//! mode): a [`GroupMode`] the world drives like the daemon's own.
//!
//! The group's nodes take turns in node order; turn `t` belongs to node
//! `t mod n`. The holder multicasts its messages of the turn on its
//! stream, each tagged with the turn, then an end-of-turn marker; the
//! marker is the token (its stream is multicast, so every node learns the
//! turn is over, and the next holder that its turn has begun). A turn
//! ends after [`QUOTA`] messages, or once the holder has published
//! nothing for [`IDLE_NS`] (a holder with nothing to send passes at once,
//! after that wait). Every node delivers turn by turn, each turn's
//! messages in their stream's order: one sequence everywhere. Messages of
//! a later turn that arrive before the end of the current one (another
//! node's stream is faster) wait for it. No failure handling: a crashed
//! holder stops the group (the figure has no crash).
//!
//! Owns: the turn, the end-of-turn markers and the wait for a turn. The
//! send stream is the daemon's [`SendStream`].

use std::collections::BTreeMap;

use mcast_cli::daemon::mode::send_stream::SendStream;
use mcast_cli::daemon::mode::{GroupMode, ModeCx, Out, Published, To};
use mcast_engine::{EngineError, Fragment};
use mcast_ipc::ring::{FIRST, LAST};
use mcast_ipc::{ClientId, RecordHeader};
use mcast_wire::{GroupId, NodeId, Seq};
use serde_json::json;

/// Messages a holder sends in one turn at most.
pub const QUOTA: u32 = 64;
/// A holder that has published nothing for this long ends its turn.
pub const IDLE_NS: u64 = 2_000;

const TAG_MESSAGE: u8 = b'M';
const TAG_END: u8 = b'E';

/// A later turn's message from its holder (None: the turn's end).
type Waiting = (NodeId, Option<Vec<u8>>);

/// One node's side of the token ring.
#[derive(Debug)]
pub struct TokenRing {
    group: GroupId,
    node: NodeId,
    stream: SendStream,
    /// The view's nodes, ascending (this one included).
    nodes: Vec<NodeId>,
    /// The turn this node delivers now.
    turn: u64,
    /// Messages this node sent in its current turn.
    sent_in_turn: u32,
    /// `sent_in_turn` at the last poll: a change there is activity.
    sent_at_poll: u32,
    /// When this node was last seen publishing or took the token (ns; 0:
    /// at the next poll).
    active_at: u64,
    /// The end marker could not be sent (a full window): retried.
    end_owed: bool,
    /// Later turns' messages, in stream order.
    waiting: BTreeMap<u64, Vec<Waiting>>,
    turns_held: u64,
}

impl TokenRing {
    pub fn new(group: GroupId, node: NodeId) -> TokenRing {
        TokenRing {
            group,
            node,
            stream: SendStream::new(Seq(0)),
            nodes: vec![node],
            turn: 0,
            sent_in_turn: 0,
            sent_at_poll: 0,
            active_at: 0,
            end_owed: false,
            waiting: BTreeMap::new(),
            turns_held: 0,
        }
    }

    fn holder(&self, turn: u64) -> NodeId {
        self.nodes[(turn % self.nodes.len() as u64) as usize]
    }

    fn holding(&self) -> bool {
        self.holder(self.turn) == self.node
    }

    fn frame(tag: u8, turn: u64, msg: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(9 + msg.len());
        v.push(tag);
        v.extend_from_slice(&turn.to_be_bytes());
        v.extend_from_slice(msg);
        v
    }

    /// Ends this node's turn: the marker on its stream, then the next
    /// turn (and what waited for it) here.
    fn end_turn(
        &mut self,
        cx: &mut ModeCx<'_>,
        now: u64,
        out: &mut Out<'_>,
    ) -> Result<(), EngineError> {
        if !cx.remote.is_empty() {
            let marker = TokenRing::frame(TAG_END, self.turn, &[]);
            if self.stream.publish(cx, &marker)? != Published::Sent {
                self.end_owed = true;
                return Ok(());
            }
        }
        self.end_owed = false;
        self.next_turn(now, out);
        Ok(())
    }

    /// The current turn is over: deliver what waited for the next ones.
    fn next_turn(&mut self, now: u64, out: &mut Out<'_>) {
        loop {
            self.turn += 1;
            self.sent_in_turn = 0;
            self.sent_at_poll = 0;
            if self.holding() {
                self.active_at = now;
                self.turns_held += 1;
            }
            let Some(events) = self.waiting.remove(&self.turn) else {
                return;
            };
            let mut ended = false;
            for (from, msg) in events {
                match msg {
                    Some(m) => out(self.record(from), &m, To::AllBut(None)),
                    None => ended = true,
                }
            }
            if !ended {
                return;
            }
        }
    }

    fn record(&self, source: NodeId) -> RecordHeader {
        RecordHeader {
            group: self.group,
            source,
            flags: FIRST | LAST,
            stamp: 0,
        }
    }
}

impl GroupMode for TokenRing {
    fn name(&self) -> &'static str {
        "token"
    }

    /// Sent only in this node's turn (else WouldBlock), tagged with it.
    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        _from: ClientId,
        msg: &[u8],
        _out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        if !self.holding() || self.end_owed || self.sent_in_turn >= QUOTA {
            return Ok(Published::WouldBlock);
        }
        if !cx.remote.is_empty() {
            let frame = TokenRing::frame(TAG_MESSAGE, self.turn, msg);
            match self.stream.publish(cx, &frame)? {
                Published::Sent => {}
                other => return Ok(other),
            }
        }
        self.sent_in_turn += 1;
        Ok(Published::Sent)
    }

    fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        let mut nodes: Vec<NodeId> = cx.remote.to_vec();
        nodes.push(self.node);
        nodes.sort_unstable();
        nodes.dedup();
        self.nodes = nodes;
        self.stream.members_changed(cx, added)
    }

    fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError> {
        self.stream.resume_member(cx, to)
    }

    fn deliver(&mut self, f: &Fragment<'_>, out: &mut Out<'_>) {
        let Some((&tag, rest)) = f.data.split_first() else {
            return;
        };
        let Some((turn, msg)) = rest.split_first_chunk::<8>() else {
            return;
        };
        let turn = u64::from_be_bytes(*turn);
        let msg = (tag == TAG_MESSAGE).then(|| msg.to_vec());
        if turn > self.turn {
            self.waiting.entry(turn).or_default().push((f.stream, msg));
            return;
        }
        if turn < self.turn || f.stream != self.holder(turn) {
            return; // (not from this turn's holder: a broken peer)
        }
        match msg {
            Some(m) => out(self.record(f.stream), &m, To::AllBut(None)),
            // (No clock here: the turn it hands over starts its idle wait
            // at the next poll.)
            None => self.next_turn(0, out),
        }
    }

    fn wants_round(&self) -> bool {
        self.holding()
    }

    /// A holder ends its turn once it has sent its quota or been idle.
    fn poll(
        &mut self,
        cx: &mut ModeCx<'_>,
        now_ns: u64,
        out: &mut Out<'_>,
    ) -> Result<bool, EngineError> {
        if !self.holding() {
            return Ok(false);
        }
        if self.active_at == 0 || self.sent_in_turn != self.sent_at_poll {
            self.active_at = now_ns;
            self.sent_at_poll = self.sent_in_turn;
        }
        let idle = now_ns.saturating_sub(self.active_at) >= IDLE_NS;
        if self.end_owed || self.sent_in_turn >= QUOTA || idle {
            self.end_turn(cx, now_ns, out)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn stats_json(&self) -> serde_json::Value {
        json!({"mode": self.name(), "turn": self.turn, "turns_held": self.turns_held})
    }
}
