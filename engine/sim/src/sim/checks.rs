//! The checkers, run after every step: each delivery is the next fragment
//! of the sender's stream, in order, once, byte-identical, and whole
//! messages reassemble to what was sent; a batched frame holds the next
//! whole messages, each a record of its exact length and bytes; every buffer a node releases or
//! delivers is its own; no machine holds more than its window; and every
//! allocated buffer is owned by exactly one party.
//!
//! Owns: [`RxCheck`] (each receiver's progress through the stream) and the
//! verdicts: a failure names what broke. May not touch: the endpoints
//! (it reads `held_buffers` only), the segment, or the application's offers.

use mcast_proto::frag::Reassembler;
use mcast_proto::{BufId, Endpoint, Event, Flags, Instant, NodeId, Seq};
use mcast_wire::batch;

use super::world::World;
use crate::config::{offer_time, SimConfig, SENDER};
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
    /// order, once, intact; whole messages reassemble byte-identical. A
    /// batched frame ([`check_batch`]) holds the next whole messages.
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
        if flags.contains(Flags::BATCH) {
            return match check_batch(cfg, c, self.now, seq, len, flags, payload) {
                Ok(done) => {
                    self.done_receivers += u32::from(done);
                    Ok(())
                }
                Err(p) => Err(self.failure(format!("node {node}, {p}"))),
            };
        }
        let mut problem = seq_problem(cfg, c, seq);
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
    /// (the sender's one refused frame). Delivered buffers are freed by the
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

/// The sequence number of a delivery: the stream's first, or the one after
/// the last delivered.
fn seq_problem(cfg: &SimConfig, c: &RxCheck, seq: Seq) -> Option<String> {
    match c.last_seq {
        Some(prev) if seq != prev.next() => Some(format!(
            "delivered {seq:?} right after {prev:?}: out of order, duplicated or skipped"
        )),
        None if seq.0 != cfg.initial_seq => Some(format!(
            "delivered {seq:?} first, not the initial #{}: out of order or skipped",
            cfg.initial_seq
        )),
        _ => None,
    }
}

/// A delivered frame with `BATCH`: the next in sequence, in a run that
/// batches, whole (`WHOLE`), at a message boundary, no larger than a frame,
/// a valid batch (`batch::validate`), and each record the next message of the stream, its
/// exact length and bytes, and (offered-rate mode) not delivered at `now`
/// before the application had it: a message is packed only once it is due.
/// Advances `c` past them; true when that completes the stream. The error
/// names the seq, and the record and message indices.
fn check_batch(
    cfg: &SimConfig,
    c: &mut RxCheck,
    now: Instant,
    seq: Seq,
    len: u16,
    flags: Flags,
    payload: &[u8],
) -> Result<bool, String> {
    let at = c.msg;
    let fail = |p: String| format!("at message {at}: {p}");
    if let Some(p) = seq_problem(cfg, c, seq) {
        return Err(fail(p));
    }
    if !cfg.batch {
        return Err(fail(format!(
            "delivered {seq:?} as a batch (flags {:#x}) in a run without batching",
            flags.0
        )));
    }
    if !flags.contains(Flags::WHOLE) {
        return Err(fail(format!(
            "delivered batch {seq:?} without both fragment flags (flags {:#x})",
            flags.0
        )));
    }
    if c.offset != 0 {
        return Err(fail(format!(
            "delivered batch {seq:?} inside message {at}, {} bytes into it",
            c.offset
        )));
    }
    if usize::from(len) != payload.len() {
        return Err(fail(format!(
            "delivered batch {seq:?} as {len} bytes in a buffer of {}",
            payload.len()
        )));
    }
    if payload.len() > cfg.max_payload {
        return Err(fail(format!(
            "delivered batch {seq:?} of {} bytes, more than a frame's {}",
            payload.len(),
            cfg.max_payload
        )));
    }
    let records = batch::validate(flags, payload)
        .map_err(|e| fail(format!("delivered {seq:?}, not a valid batch: {e}")))?;
    for (j, record) in batch::records(payload).enumerate() {
        let msg = c.msg;
        if msg >= cfg.messages {
            return Err(format!(
                "{seq:?} record {j} of {records}: message {msg}, but only {} were sent",
                cfg.messages
            ));
        }
        let want = cfg.message_len(msg);
        if record.len() != want {
            return Err(format!(
                "{seq:?} record {j} of {records}: message {msg} is {} bytes, expected {want}",
                record.len()
            ));
        }
        if !matches_message(cfg.seed, msg, 0, record) {
            return Err(format!(
                "{seq:?} record {j} of {records}: bytes differ from message {msg}"
            ));
        }
        if let Some(due) = cfg.messages_per_sec.map(|rate| offer_time(msg, rate)) {
            if due > now {
                return Err(format!(
                    "{seq:?} record {j} of {records}: message {msg} delivered before it was \
                     offered at {due:?} (packed before it was due)"
                ));
            }
        }
        c.msg += 1;
    }
    c.last_seq = Some(seq);
    Ok(c.msg == cfg.messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::message;

    const BATCH: Flags = Flags(Flags::WHOLE.0 | Flags::BATCH.0);
    const NOW: Instant = Instant(1_000_000_000);

    fn cfg() -> SimConfig {
        SimConfig {
            messages: 10,
            min_size: 0,
            max_size: 100,
            batch: true,
            seed: 3,
            ..SimConfig::default()
        }
    }

    /// Messages `from..to` of `cfg` as a batched payload.
    fn batch_of(cfg: &SimConfig, msgs: core::ops::Range<u64>) -> Vec<u8> {
        let mut area = vec![0; 2000];
        let mut len = 0;
        for (k, i) in msgs.enumerate() {
            let m = message(cfg.seed, i, cfg.min_size, cfg.max_size);
            if k == 0 {
                area[..m.len()].copy_from_slice(&m);
                len = batch::begin(&mut area, m.len());
            } else {
                len = batch::append(&mut area, len, &m);
            }
        }
        area.truncate(len);
        area
    }

    fn check(cfg: &SimConfig, c: &mut RxCheck, seq: u32, payload: &[u8]) -> Result<bool, String> {
        check_batch(cfg, c, NOW, Seq(seq), payload.len() as u16, BATCH, payload)
    }

    #[test]
    fn a_batch_of_the_next_messages_passes_and_advances_per_record() {
        let cfg = cfg();
        let s0 = cfg.initial_seq;
        let mut c = RxCheck::new(cfg.max_size);
        assert_eq!(check(&cfg, &mut c, s0, &batch_of(&cfg, 0..4)), Ok(false));
        assert_eq!(c.msg, 4);
        let next = Seq(s0).next().0;
        assert_eq!(check(&cfg, &mut c, next, &batch_of(&cfg, 4..10)), Ok(true));
        assert_eq!(c.msg, 10, "the stream is complete");
    }

    #[test]
    fn a_wrong_record_is_named_by_its_index_and_message() {
        let cfg = cfg();
        let s0 = cfg.initial_seq;
        let good = batch_of(&cfg, 0..4);
        // A flipped byte in the last record (message 3).
        let mut bytes = good.clone();
        *bytes.last_mut().unwrap() ^= 1;
        let e = check(&cfg, &mut RxCheck::new(100), s0, &bytes).unwrap_err();
        assert!(
            e.contains("record 3 of 4: bytes differ from message 3"),
            "{e}"
        );
        // Message 1 skipped: record 1 holds message 2.
        let mut skipped = batch_of(&cfg, 0..1);
        let two = message(cfg.seed, 2, 0, 100);
        let n = skipped.len();
        skipped.resize(n + 2 + two.len(), 0);
        batch::append(&mut skipped, n, &two);
        let e = check(&cfg, &mut RxCheck::new(100), s0, &skipped).unwrap_err();
        assert!(e.contains("record 1 of 2: message 1"), "{e}");
        // Beyond the end of the stream.
        let e = check(&cfg, &mut RxCheck::new(100), s0, &batch_of(&cfg, 0..11)).unwrap_err();
        assert!(
            e.contains("record 10 of 11: message 10, but only 10"),
            "{e}"
        );
    }

    #[test]
    fn malformed_or_misplaced_batches_fail() {
        let cfg = cfg();
        let s0 = cfg.initial_seq;
        let good = batch_of(&cfg, 0..3);
        let fresh = || RxCheck::new(100);
        // Cut short: the last record's length runs past the end.
        let cut = &good[..good.len() - 1];
        let e = check(&cfg, &mut fresh(), s0, cut).unwrap_err();
        assert!(e.contains("not a valid batch"), "{e}");
        // Not WHOLE.
        let flags = Flags(Flags::FRAG_FIRST.0 | Flags::BATCH.0);
        let e = check_batch(
            &cfg,
            &mut fresh(),
            NOW,
            Seq(s0),
            good.len() as u16,
            flags,
            &good,
        );
        assert!(e.unwrap_err().contains("without both fragment flags"));
        // Header length and buffer disagree.
        let e = check_batch(&cfg, &mut fresh(), NOW, Seq(s0), 3, BATCH, &good);
        assert!(e.unwrap_err().contains("as 3 bytes in a buffer of"));
        // Out of order.
        let e = check(&cfg, &mut fresh(), s0.wrapping_add(1), &good).unwrap_err();
        assert!(e.contains("not the initial"), "{e}");
        // Inside a fragmented message.
        let mut c = fresh();
        c.offset = 10;
        let e = check(&cfg, &mut c, s0, &good).unwrap_err();
        assert!(e.contains("inside message 0, 10 bytes into it"), "{e}");
        // In a run that does not batch.
        let plain = SimConfig {
            batch: false,
            ..cfg.clone()
        };
        let e = check(&plain, &mut fresh(), s0, &good).unwrap_err();
        assert!(e.contains("in a run without batching"), "{e}");
        // Larger than a frame.
        let small = SimConfig {
            max_payload: good.len() - 1,
            ..cfg.clone()
        };
        let e = check(&small, &mut fresh(), s0, &good).unwrap_err();
        assert!(e.contains("more than a frame's"), "{e}");
        // Offered at 1 a second: message 2 is due at 2 s, after `NOW`.
        let paced = SimConfig {
            messages_per_sec: Some(1),
            ..cfg.clone()
        };
        let e = check(&paced, &mut fresh(), s0, &good).unwrap_err();
        assert!(
            e.contains("record 2 of 3: message 2 delivered before"),
            "{e}"
        );
        // Nothing advanced on any of these.
        assert_eq!(check(&cfg, &mut fresh(), s0, &good), Ok(false));
    }
}
