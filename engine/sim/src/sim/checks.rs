//! The checkers, run after every step: each delivery is the next fragment
//! of the sender's stream, in order, once, byte-identical, and whole
//! messages reassemble to what was sent; every buffer a node releases or
//! delivers is its own; no machine holds more than its window; and every
//! allocated buffer is owned by exactly one party.
//!
//! Owns: [`RxCheck`] (each receiver's progress through the stream) and the
//! verdicts: a failure names what broke. May not touch: the endpoints
//! (it reads `held_buffers` only), the segment, or the application's offers.

use mcast_proto::frag::Reassembler;
use mcast_proto::{BufId, Endpoint, Event, Flags, NodeId, Seq};

use super::world::World;
use crate::config::SENDER;
use crate::content::matches_message;
use crate::pool::Owner;
use crate::report::SimFailure;

/// What a receiver has delivered so far, for the checkers.
pub(super) struct RxCheck {
    /// The message in progress and the bytes of it delivered.
    pub(super) msg: u64,
    offset: usize,
    last_seq: Option<Seq>,
    reassembler: Reassembler,
}

impl RxCheck {
    /// Nothing delivered yet; messages reassemble up to `max_size` bytes.
    pub(super) fn new(max_size: usize) -> RxCheck {
        RxCheck {
            msg: 0,
            offset: 0,
            last_seq: None,
            reassembler: Reassembler::new(max_size),
        }
    }
}

impl World<'_> {
    /// An endpoint's event: a delivery is checked against the sender's stream,
    /// then its buffer freed; a release frees the buffer.
    pub(super) fn event(&mut self, node: NodeId, ev: Event) -> Result<(), SimFailure> {
        match ev {
            Event::Release(buf) => self.free(node, buf, "released"),
            Event::Deliver {
                stream,
                seq,
                buf,
                len,
                flags,
            } => {
                if node == SENDER {
                    return Err(self.failure(format!("the sender delivered {seq:?}")));
                }
                if stream != SENDER {
                    return Err(self.failure(format!(
                        "node {node} delivered {seq:?} of stream {stream}, not {SENDER}"
                    )));
                }
                let owner = self.nodes[node as usize - 1].pool.owner(buf);
                if owner != Owner::Endpoint {
                    return Err(self.failure(format!(
                        "node {node} delivered {seq:?} in {buf:?}, which it does not hold (owner: {owner:?})"
                    )));
                }
                self.check_delivery(node, seq, buf, len, flags)?;
                self.free(node, buf, "delivered")
            }
        }
    }

    fn free(&mut self, node: NodeId, buf: BufId, how: &str) -> Result<(), SimFailure> {
        match self.nodes[node as usize - 1]
            .pool
            .free(buf, Owner::Endpoint)
        {
            Ok(()) => Ok(()),
            Err(Owner::Free) => Err(self.failure(format!(
                "node {node} {how} {buf:?}, which is not allocated (released twice, or never lent)"
            ))),
            Err(owner) => Err(self.failure(format!(
                "node {node} {how} {buf:?}, which is not its own (owner: {owner:?})"
            ))),
        }
    }

    /// Safety: the frame is the next fragment of the sender's stream, in
    /// order, once, intact; whole messages reassemble byte-identical.
    fn check_delivery(
        &mut self,
        node: NodeId,
        seq: Seq,
        buf: BufId,
        len: u16,
        flags: Flags,
    ) -> Result<(), SimFailure> {
        let cfg = self.cfg;
        let payload = self.nodes[node as usize - 1].pool.payload(buf);
        let c = &mut self.checks[node as usize - 2];
        let mut problem = None;
        match c.last_seq {
            Some(prev) if seq != prev.next() => {
                problem = Some(format!(
                    "delivered {seq:?} right after {prev:?}: out of order, duplicated or skipped"
                ));
            }
            None if seq.0 != cfg.initial_seq => {
                problem = Some(format!(
                    "delivered {seq:?} first, not the initial #{}: out of order or skipped",
                    cfg.initial_seq
                ));
            }
            _ => {}
        }
        if problem.is_none() && c.msg >= cfg.messages {
            problem = Some(format!(
                "delivered {seq:?} after all {} messages were delivered",
                cfg.messages
            ));
        }
        let size = cfg.message_len(c.msg);
        let want_len = (size.saturating_sub(c.offset)).min(cfg.max_payload);
        let mut want_flags = Flags::NONE;
        if c.offset == 0 {
            want_flags = want_flags.with(Flags::FRAG_FIRST);
        }
        if c.offset + want_len == size {
            want_flags = want_flags.with(Flags::FRAG_LAST);
        }
        let frag_bits = flags.0 & Flags::WHOLE.0;
        if problem.is_none()
            && (usize::from(len) != want_len
                || payload.len() != want_len
                || frag_bits != want_flags.0)
        {
            problem = Some(format!(
                "delivered {seq:?} as {len} bytes (buffer {}) with fragment flags {frag_bits:#x}, \
                 expected {want_len} bytes at offset {} of message {} with {:#x}",
                payload.len(),
                c.offset,
                c.msg,
                want_flags.0
            ));
        }
        if problem.is_none() && !matches_message(cfg.seed, c.msg, c.offset, payload) {
            problem = Some(format!(
                "delivered {seq:?} with bytes that differ from offset {} of message {}",
                c.offset, c.msg
            ));
        }
        if let Some(p) = problem {
            let msg = c.msg;
            return Err(self.failure(format!("node {node}, at message {msg}: {p}")));
        }
        c.last_seq = Some(seq);
        c.offset += want_len;
        let msg = c.msg;
        match c.reassembler.push(flags, payload) {
            Ok(None) => {}
            Ok(Some(m)) => {
                // A one-fragment message was compared whole just above.
                let whole = flags.contains(Flags::WHOLE);
                if m.len() != size || (!whole && !matches_message(cfg.seed, msg, 0, m)) {
                    let got = m.len();
                    return Err(self.failure(format!(
                        "node {node}: message {msg} reassembled wrong ({got} bytes, expected {size})"
                    )));
                }
                c.msg += 1;
                c.offset = 0;
                if c.msg == cfg.messages {
                    self.done_receivers += 1;
                }
            }
            Err(e) => {
                return Err(self.failure(format!(
                    "node {node}: message {msg} failed to reassemble: {e}"
                )));
            }
        }
        Ok(())
    }

    /// Bounds and conservation at one node, after a step that touched it.
    /// Every allocated buffer of a node is owned by exactly one party: its
    /// endpoint (`held_buffers`), or the simulator on the application's behalf
    /// (the sender's one refused fragment). Delivered buffers are freed by the
    /// simulator within the step, so none is counted between steps.
    pub(super) fn check_node<E: Endpoint>(
        &mut self,
        ep: &E,
        node: NodeId,
    ) -> Result<(), SimFailure> {
        let held = ep.held_buffers();
        let window = self.cfg.window_frames as usize;
        let sim_held = usize::from(node == SENDER && self.app.pending.is_some());
        let st = &mut self.nodes[node as usize - 1];
        st.max_held = st.max_held.max(held);
        let allocated = st.pool.allocated();
        if held > window {
            return Err(self.failure(format!(
                "node {node} holds {held} buffers, more than its window of {window}"
            )));
        }
        if allocated != held + sim_held {
            return Err(self.failure(format!(
                "buffer conservation at node {node}: {allocated} allocated, but the endpoint holds \
                 {held} and the simulator {sim_held} (a buffer leaked or was counted wrong)"
            )));
        }
        Ok(())
    }
}
