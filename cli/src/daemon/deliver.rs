//! The engine's deliveries: each fragment the engine hands over in place in
//! its UMEM frame goes either to the links (a daemon's message, reassembled
//! in [`peers`](super::peers)) or, for group data, through the group's mode
//! into each local member's subscription ring, overflowing into the
//! client's queue when the ring is full. A batched frame of a mode that
//! delivers verbatim (FIFO) goes into each member's ring as one record of
//! all its messages (one copy; the client library lends them one by one),
//! with the group, the member and its ring looked up once per frame.
//!
//! Owns: the [`Sink`] the engine delivers into, the ring record headers,
//! [`deliver_to`] (ring or overflow) and the commit that publishes what it
//! wrote ([`commit_subscriptions`]).
//! Does not touch: what the records mean to clients, the slow-subscriber
//! policy ([`clients`](super::clients) applies it), views.

use mcast_engine::{Batch, Deliver, Fragment, RawFrame};
use mcast_ipc::ring::{BATCH, FIRST as FLAG_FIRST, LAST as FLAG_LAST};
use mcast_ipc::{ClientId, Notice, PushError, RecordHeader, Server};
use mcast_wire::{Flags, GroupId, NodeId};

use super::clients::{ClientState, Clients};
use super::flush::Kept;
use super::membership::LocalGroup;
use super::mode::join_gate::JoinGate;
use super::mode::To;
use super::peers::Links;
use super::trace::Trace;
use super::DaemonCounters;
use super::FastMap;
use crate::links::is_link;

/// A record of a group's mode to the local `members` it reaches that
/// receive now (`gate`); the view notices the record releases (it is the
/// event of their view) go to them first.
pub(super) fn mode_record(
    clients: &mut Clients,
    members: &[ClientId],
    gate: &mut JoinGate<Notice>,
    hdr: RecordHeader,
    data: &[u8],
    to: To,
    counters: &mut DaemonCounters,
) {
    let notices = gate.pass(to);
    for &c in members {
        if !gate.admits(c, to) {
            continue;
        }
        for n in &notices {
            clients.server.notify(c, n.clone());
        }
        if let Some(state) = clients.by_id.get_mut(&c) {
            deliver_to(&mut clients.server, c, state, hdr, [data], counters);
        }
    }
}

/// Bytes an overflowed fragment counts for beyond its payload.
pub(super) const RECORD_COST: usize = 32;

/// Receives the engine's fragments: link messages are reassembled for the
/// daemon, group data goes through the group's mode into each local
/// member's ring.
pub(super) struct Sink<'a> {
    pub(super) clients: &'a mut Clients,
    pub(super) local: &'a mut FastMap<GroupId, LocalGroup>,
    pub(super) kept: &'a mut FastMap<(GroupId, NodeId), Kept>,
    pub(super) links: &'a mut Links,
    pub(super) counters: &'a mut DaemonCounters,
    pub(super) max_message: usize,
    /// With `trace = true`: times each frame and stamps its records.
    pub(super) trace: Option<&'a mut Trace>,
}

impl Deliver for Sink<'_> {
    fn frame(&mut self, f: RawFrame<'_>) {
        if let Some(t) = self.trace.as_deref_mut() {
            t.frame(&f);
        }
        // What the flush of this sender's departure may need: the frame as
        // it came, batched or not.
        if let Some(k) = self.kept.get_mut(&(f.group, f.stream)) {
            k.frames.push(
                f.seq,
                f.flags.contains(Flags::FRAG_FIRST),
                f.flags.contains(Flags::FRAG_LAST),
                f.flags.contains(Flags::BATCH),
                f.payload,
            );
        }
    }

    fn deliver(&mut self, f: Fragment<'_>) {
        if is_link(f.group) {
            if self.links.take_fragment(&f, self.max_message).is_err() {
                self.counters.link_errors += 1;
            }
            return;
        }
        let Some(lg) = self.local.get_mut(&f.group) else {
            return;
        };
        let (clients, counters) = (&mut *self.clients, &mut *self.counters);
        let (mode, members, gate) = lg.mode_and_members();
        let stamp = self.trace.as_ref().map_or(0, |t| t.ring_stamp());
        mode.deliver(&f, &mut |hdr, data, to| {
            let hdr = RecordHeader { stamp, ..hdr };
            mode_record(clients, members, gate, hdr, data, to, counters);
        });
    }

    fn batch(&mut self, b: Batch<'_>) {
        let members = match self.local.get(&b.group) {
            Some(lg) if !is_link(b.group) => lg.verbatim_members(),
            _ => None,
        };
        let Some(members) = members else {
            // Links and modes that look at each message: one by one.
            for f in b.fragments() {
                self.deliver(f);
            }
            return;
        };
        let stamp = self.trace.as_ref().map_or(0, |t| t.ring_stamp());
        let hdr = RecordHeader {
            stamp,
            ..data_record(b.group, b.stream, true, true)
        };
        let count = b.messages().count() as u64;
        let clients = &mut *self.clients;
        for &c in members {
            if let Some(state) = clients.by_id.get_mut(&c) {
                deliver_batch_to(&mut clients.server, c, state, hdr, &b, count, self.counters);
            }
        }
    }
}

/// The header of a membership event record (one whole record, from no
/// node) in `group`'s stream.
pub(super) fn event_record(group: GroupId) -> RecordHeader {
    RecordHeader {
        group,
        source: 0,
        flags: FLAG_FIRST | FLAG_LAST | mcast_ipc::ring::EVENT,
        stamp: 0,
    }
}

/// The record header of a data fragment from `source`.
pub(super) fn data_record(group: GroupId, source: NodeId, first: bool, last: bool) -> RecordHeader {
    let mut flags = 0;
    if first {
        flags |= FLAG_FIRST;
    }
    if last {
        flags |= FLAG_LAST;
    }
    RecordHeader {
        group,
        source,
        flags,
        stamp: 0,
    }
}

/// Each of `messages`, in order, into the client's ring while it has room
/// and nothing older waits, else into its overflow queue (bounded by the
/// slow-subscriber policy). A ring the client has made corrupt takes
/// nothing more: the client is marked for [`Clients`]' next round to cut
/// off, and nothing is queued for it.
///
/// The records are written but not yet published: the client sees them at
/// the next [`commit_subscriptions`] (the daemon's round calls it after
/// each phase that delivers), so a frame's messages, or a poll's frames,
/// cost one head store and one wake-up check in all.
pub(super) fn deliver_to<'d>(
    server: &mut Server,
    c: ClientId,
    state: &mut ClientState,
    hdr: RecordHeader,
    messages: impl IntoIterator<Item = &'d [u8]>,
    counters: &mut DaemonCounters,
) {
    if state.ring_corrupt.is_some() {
        return;
    }
    let mut ring = server.subscription(c);
    for data in messages {
        counters.fragments_delivered += 1;
        if let (true, Some(p)) = (state.overflow.is_empty(), ring.as_deref_mut()) {
            match p.try_push_deferred(hdr, &[data]) {
                Ok(()) => {
                    state.delivered += 1;
                    continue;
                }
                Err(PushError::Corrupt(e)) => {
                    // Queueing for a ring that never takes a record again
                    // would grow without bound under `hold` (issue 23).
                    state.ring_corrupt = Some(e.to_string());
                    return;
                }
                Err(PushError::Full | PushError::TooLarge { .. }) => {}
            }
        }
        counters.fragments_overflowed += 1;
        state.overflow_bytes += data.len() + RECORD_COST;
        state.overflow.push_back((hdr, data.to_vec()));
    }
}

/// A batched frame's `count` messages into the client's ring as one
/// [`BATCH`](mcast_ipc::ring::BATCH) record (`mcast_ipc::batch`: the
/// frame's payload as it came, one copy), when the ring has room for it and
/// nothing older waits; otherwise one by one as [`deliver_to`] does, as far
/// as the ring takes them, then into the overflow queue.
fn deliver_batch_to(
    server: &mut Server,
    c: ClientId,
    state: &mut ClientState,
    hdr: RecordHeader,
    b: &Batch<'_>,
    count: u64,
    counters: &mut DaemonCounters,
) {
    if state.ring_corrupt.is_some() {
        return;
    }
    if let (true, Some(p)) = (state.overflow.is_empty(), server.subscription(c)) {
        let whole = RecordHeader {
            flags: hdr.flags | BATCH,
            ..hdr
        };
        match p.try_push_deferred(whole, &[b.payload]) {
            Ok(()) => {
                counters.fragments_delivered += count;
                counters.batch_records += 1;
                state.delivered += count;
                return;
            }
            Err(PushError::Corrupt(e)) => {
                state.ring_corrupt = Some(e.to_string());
                return;
            }
            Err(PushError::Full | PushError::TooLarge { .. }) => {}
        }
    }
    deliver_to(server, c, state, hdr, b.messages(), counters);
}

/// Publishes every record [`deliver_to`] wrote since the last call, one
/// commit per client ring (nothing for a ring with none).
pub(super) fn commit_subscriptions(clients: &mut Clients) {
    for &c in clients.by_id.keys() {
        if let Some(p) = clients.server.subscription(c) {
            p.commit();
        }
    }
}
