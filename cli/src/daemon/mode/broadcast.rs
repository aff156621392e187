//! The broadcast mode (`mode = "broadcast"`): a group on a fabric without
//! multicast (seed 003).
//!
//! Owns: the group's [`Relay`] (crate `mcast-bcast`, docs/protocol.md §8.5),
//! fed from this mode's calls: a local publication is published by the
//! relay, a mode message from a peer is handed to it, each new view is
//! installed in it. What it asks to send goes out as link messages
//! ([`ModeCx::outbox`]); what it delivers goes to the local members, one
//! message at a time, in each sender's order. The engine's streams are never
//! used: no frame of this group is multicast. Nothing else: the views,
//! failure detection and the local members are the daemon's.
//!
//! Root ids in the relay are node ids. A node's messages are numbered from
//! its incarnation (high 32 bits) and, within one, from where the node's
//! sequence stopped the last time it carried the group ([`GroupMode::retire`]),
//! so a restarted or returning node's messages are never taken for earlier
//! ones.

use mcast_bcast::cost::{Fabric, Link, Model};
use mcast_bcast::relay::{Config as RelayConfig, Output, Pick, PublishError, Relay, View};
use mcast_engine::{EngineError, Fragment};
use mcast_ipc::ClientId;
use mcast_wire::{GroupId, NodeId, Seq};
use serde_json::json;

use super::{GroupMode, ModeCx, Out, Published, StreamOps, To};
use crate::config::Broadcast;
use crate::daemon::deliver::{data_record, event_record};
use crate::links::LinkMessage;

/// Messages of this node that may be unstable (not yet delivered by every
/// member) before a publication waits.
pub const WINDOW: u64 = 256;

/// Transfers of this many bytes or more leave a node one at a time (the
/// next once the last one arrived), as seed 003's one-port model has it:
/// sent together, a node's transfers would share its link and its first
/// child would wait for all of them. Smaller ones go at once (an answer per
/// transfer would cost them a round trip each).
pub const ONE_PORT_BYTES: u64 = 64 * 1024;

/// How often a member reports its positions to the roots while they move.
const TICK_NS: u64 = 5_000_000;

/// A delivered message goes to the local members' rings in records of at
/// most this many bytes (FIRST … LAST, reassembled by the client library).
const RECORD_CHUNK: usize = 16 * 1024;

/// The α and β `auto` starts with: the daemons' link as measured through
/// mcastd on the reference machines (about 50 µs per message, 250 MB/s;
/// docs/benchmarks.md). Once the relay has timed answered transfers of
/// sizes far enough apart, it uses what it measured instead
/// (`mcast_bcast::relay::link`).
pub const LINK: Link = Link {
    alpha: 50e-6,
    beta: 4e-9,
};

/// The broadcast mode of one group.
#[derive(Debug)]
pub struct BroadcastMode {
    group: GroupId,
    node: NodeId,
    /// This node's incarnation: the high half of its sequence numbers.
    incarnation: u32,
    setting: Broadcast,
    relay: Relay,
    next_tick: u64,
    /// Deliveries made where no `out` was at hand (a view's install), for
    /// the next call that has one.
    waiting: Vec<(NodeId, Vec<u8>)>,
    /// Membership events held until the survivors' rounds for the members
    /// that left are over (their last messages come first).
    events: Vec<Vec<u8>>,
    /// Link messages the relay sent.
    sent: u64,
}

impl BroadcastMode {
    /// The mode of `group` at node `node` in incarnation `incarnation`; its
    /// sequence goes on from `resume` (where it stopped when this
    /// incarnation last carried the group).
    pub fn new(
        group: GroupId,
        node: NodeId,
        incarnation: u32,
        resume: Option<Seq>,
        setting: Broadcast,
    ) -> BroadcastMode {
        let pick = match setting {
            Broadcast::Auto => Pick::Auto(Model {
                link: LINK,
                fabric: Fabric::Switch,
            }),
            Broadcast::Fixed(a) => Pick::Fixed(a),
        };
        let first = u64::from(incarnation) << 32 | u64::from(resume.map_or(0, |s| s.0));
        BroadcastMode {
            group,
            node,
            incarnation,
            setting,
            relay: Relay::starting_at(
                node,
                RelayConfig {
                    pick,
                    window: WINDOW,
                    one_port_bytes: ONE_PORT_BYTES,
                    deliver_own: false,
                },
                first,
            ),
            next_tick: 0,
            waiting: Vec::new(),
            events: Vec::new(),
            sent: 0,
        }
    }

    /// Installs the daemon's current view in the relay if it is newer, and
    /// gives it the time (it measures the links' round trips).
    fn follow_view(&mut self, cx: &ModeCx<'_>) {
        self.relay.set_now(mcast_engine::sys::monotonic_ns());
        if cx.view_epoch > self.relay.epoch() {
            let mut members: Vec<u32> = cx.remote.to_vec();
            members.push(self.node);
            members.sort_unstable();
            members.dedup();
            self.relay.install(View {
                epoch: cx.view_epoch,
                members,
            });
        }
    }

    /// Sends what the relay asked to send, and gives the local members what
    /// it delivered (this node's own messages excepted: the daemon loops
    /// those back itself).
    fn drain(&mut self, cx: &mut ModeCx<'_>, out: &mut Out<'_>) {
        for (root, data) in std::mem::take(&mut self.waiting) {
            self.hand_over(root, &data, out);
        }
        self.send_queued(cx, |me, root, data| {
            me.hand_over(root, &data, out);
        });
        if self.relay.open_rounds() == 0 {
            for e in std::mem::take(&mut self.events) {
                out(event_record(self.group), &e, To::AllBut(None));
            }
        }
    }

    /// Sends what the relay asked to send; each delivery to `deliver` (the
    /// relay hands back none of this node's own: the daemon loops those
    /// back, `deliver_own` is false).
    fn send_queued(
        &mut self,
        cx: &mut ModeCx<'_>,
        mut deliver: impl FnMut(&mut Self, NodeId, Vec<u8>),
    ) {
        let group = self.group;
        while let Some(o) = self.relay.poll() {
            match o {
                Output::Send { to, msg } => {
                    self.sent += 1;
                    cx.outbox.push((to, LinkMessage::Mode { group, body: msg }));
                }
                Output::Deliver { root, data, .. } => deliver(self, root, data),
            }
        }
    }

    /// One message to the local members, in records of at most
    /// [`RECORD_CHUNK`] bytes.
    fn hand_over(&mut self, root: NodeId, data: &[u8], out: &mut Out<'_>) {
        let n = data.len().div_ceil(RECORD_CHUNK).max(1);
        for i in 0..n {
            let part =
                &data[(i * RECORD_CHUNK).min(data.len())..((i + 1) * RECORD_CHUNK).min(data.len())];
            out(
                data_record(self.group, root, i == 0, i + 1 == n),
                part,
                To::AllBut(None),
            );
        }
    }
}

impl GroupMode for BroadcastMode {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        _from: ClientId,
        msg: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        self.follow_view(cx);
        let r = match self.relay.publish(msg) {
            Ok(_) => Published::Sent,
            Err(PublishError::WouldBlock) => Published::WouldBlock,
            // Before this node's first view: held in the client's ring until
            // it comes.
            Err(PublishError::NotMember) if cx.view_epoch == 0 => Published::WouldBlock,
            Err(PublishError::NotMember) => Published::Dropped(format!(
                "group {} has no view holding this node: the message was dropped",
                self.group
            )),
            Err(PublishError::TooLong) => Published::Dropped(format!(
                "a message of {} bytes is too long to broadcast",
                msg.len()
            )),
        };
        self.drain(cx, out);
        Ok(r)
    }

    fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        _added: &[NodeId],
    ) -> Result<(), EngineError> {
        self.follow_view(cx);
        // Messages that waited for this view may be delivered now: with no
        // `out` here, they wait for the next call (polled at once).
        self.send_queued(cx, |me, root, data| me.waiting.push((root, data)));
        Ok(())
    }

    /// Its new relay gets a new start from this node's relay as a root at
    /// the next view that holds it.
    fn peer_restarted(&mut self, n: NodeId) {
        self.relay.member_restarted(n);
    }

    /// A view's event waits for the rounds of the members it removed, so a
    /// departed member's last messages come before the event that says it
    /// left (as the flush makes them in the other modes).
    fn place_event(&mut self, _cx: &mut ModeCx<'_>, event: &[u8]) -> bool {
        if self.relay.open_rounds() == 0 && self.events.is_empty() {
            return false;
        }
        self.events.push(event.to_vec());
        true
    }

    /// Nothing to tell: the daemon asks when a peer it declared failed is
    /// heard again (a broadcast group's members make no start requests),
    /// and such a peer rejoins as a new incarnation (this node's beats tell
    /// it it was declared failed), whose relay starts afresh. A START sent
    /// now would reach that new relay, which would take it and then jump
    /// past the messages sent while it was out of this node's view when the
    /// view that adds it grants its real start (found by `scripts/soak.sh
    /// --mode broadcast`).
    fn resume_member(&mut self, _cx: &mut ModeCx<'_>, _to: NodeId) -> Result<bool, EngineError> {
        Ok(false)
    }

    fn uses_streams(&self) -> bool {
        false
    }

    /// A member's first STARTs and transfers can come before the view that
    /// adds it here.
    fn takes_early_messages(&self) -> bool {
        true
    }

    fn deliver(&mut self, _f: &Fragment<'_>, _out: &mut Out<'_>) {
        // No stream carries this group's data: nothing comes this way.
    }

    fn on_link(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: NodeId,
        body: &[u8],
        out: &mut Out<'_>,
    ) -> Result<(), String> {
        self.follow_view(cx);
        let refused = self.relay.stats().refused;
        self.relay.receive(from, body);
        self.drain(cx, out);
        if self.relay.stats().refused > refused {
            return Err(format!("a broadcast message from node {from} was refused"));
        }
        Ok(())
    }

    fn poll_at(&self) -> Option<u64> {
        if !self.waiting.is_empty() || (!self.events.is_empty() && self.relay.open_rounds() == 0) {
            return Some(0);
        }
        self.relay.wants_tick().then_some(self.next_tick)
    }

    fn poll(
        &mut self,
        cx: &mut ModeCx<'_>,
        now_ns: u64,
        out: &mut Out<'_>,
    ) -> Result<bool, EngineError> {
        self.follow_view(cx);
        let handed =
            !self.waiting.is_empty() || (!self.events.is_empty() && self.relay.open_rounds() == 0);
        if now_ns < self.next_tick {
            self.drain(cx, out);
            return Ok(handed);
        }
        self.next_tick = now_ns + TICK_NS;
        self.relay.tick();
        self.drain(cx, out);
        Ok(true)
    }

    fn send_idle(&self, _streams: &dyn StreamOps, _group: GroupId) -> bool {
        self.relay.idle()
    }

    fn retire(&mut self, _streams: &dyn StreamOps, _group: GroupId) -> Option<Seq> {
        // The low half of the next sequence: where this incarnation goes on
        // if it carries the group again.
        Some(Seq(self.relay.next_seq() as u32))
    }

    fn stats_json(&self) -> serde_json::Value {
        let s = self.relay.stats();
        let (chosen, why) = self.relay.choices();
        let (measured, samples) = self.relay.measured_link();
        json!({
            "mode": self.name(),
            "broadcast": self.setting.to_string(),
            "incarnation": self.incarnation,
            "published": s.published,
            "delivered": s.delivered,
            "transfers_sent": s.transfers_sent,
            "link_messages_sent": self.sent,
            "refed_after_view_change": s.refed,
            "refeeds_delegated": s.delegated,
            "refeed_delegations_returned": s.delegations_returned,
            "duplicates": s.duplicates,
            "skipped_departed": s.skipped,
            "departure_rounds": s.rounds,
            "refused": s.refused,
            "held_messages": self.relay.held(),
            "open_rounds": self.relay.open_rounds(),
            "chosen": chosen,
            "auto_last_choice": why,
            "link_measured": measured.map(|l| json!({"alpha_us": l.alpha * 1e6, "beta_ns_per_byte": l.beta * 1e9})),
            "link_samples": samples,
            "link_round_trips": self.relay.link_estimate().classes().iter().map(|&(b, t, n)| json!({"bytes": b.round(), "rtt_us": t * 1e6, "samples": n})).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::mode::fake::Fake;
    use mcast_ipc::RecordHeader;

    type Records = Vec<(NodeId, Vec<u8>, bool)>;

    /// Three nodes' modes joined by their outboxes: every link message is
    /// handed to its node's mode at once; records land per node as
    /// (source, bytes, an event).
    struct Three {
        modes: Vec<BroadcastMode>,
        epoch: u64,
        records: Vec<Records>,
        streams: Fake,
    }

    impl Three {
        fn new(setting: Broadcast) -> Three {
            Three {
                modes: (1..=3)
                    .map(|n| BroadcastMode::new(7, n, 2, None, setting))
                    .collect(),
                epoch: 0,
                records: vec![Vec::new(); 3],
                streams: Fake::default(),
            }
        }

        /// Runs `f` on node `n`'s mode with a context of the current view
        /// of `members`, then carries what it sent to the others.
        fn call(
            &mut self,
            n: NodeId,
            members: &[NodeId],
            f: impl FnOnce(&mut BroadcastMode, &mut ModeCx<'_>, &mut Out<'_>),
        ) {
            let mut queue = vec![(n, f_call(self, n, members, f))];
            while let Some((from, outbox)) = queue.pop() {
                for (to, m) in outbox {
                    let LinkMessage::Mode { group: 7, body } = m else {
                        panic!("not a mode message of group 7: {m:?}")
                    };
                    if !members.contains(&to) {
                        continue;
                    }
                    let sent = f_call(self, to, members, |mode, cx, out| {
                        mode.on_link(cx, from, &body, out).unwrap();
                    });
                    queue.push((to, sent));
                }
            }
        }
    }

    /// One call of node `n`'s mode; returns its outbox.
    fn f_call(
        t: &mut Three,
        n: NodeId,
        members: &[NodeId],
        f: impl FnOnce(&mut BroadcastMode, &mut ModeCx<'_>, &mut Out<'_>),
    ) -> Vec<(NodeId, LinkMessage)> {
        let remote: Vec<NodeId> = members.iter().copied().filter(|&m| m != n).collect();
        let mut outbox = Vec::new();
        let mut cx = ModeCx {
            group: 7,
            node: n,
            epoch: 2,
            remote: &remote,
            root: Some(1),
            settled: true,
            view_epoch: t.epoch,
            streams: &mut t.streams,
            outbox: &mut outbox,
        };
        let records = &mut t.records[n as usize - 1];
        let mut out = |h: RecordHeader, d: &[u8], _: To| {
            records.push((h.source, d.to_vec(), h.flags & mcast_ipc::ring::EVENT != 0));
        };
        f(&mut t.modes[n as usize - 1], &mut cx, &mut out);
        outbox
    }

    fn view(t: &mut Three, epoch: u64, members: &[NodeId]) {
        t.epoch = epoch;
        for &n in members {
            t.call(n, members, |m, cx, _| m.members_changed(cx, &[]).unwrap());
        }
    }

    #[test]
    fn a_publication_reaches_the_other_nodes_over_links_only_in_order() {
        let mut t = Three::new(Broadcast::Fixed(mcast_bcast::Algorithm::Chain {
            segments: 3,
        }));
        view(&mut t, 1, &[1, 2, 3]);
        let big: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        for msg in [&b"one"[..], &big[..], b"three"] {
            t.call(1, &[1, 2, 3], |m, cx, out| {
                assert_eq!(
                    m.publish(cx, ClientId(9), msg, out).unwrap(),
                    Published::Sent
                );
            });
        }
        assert!(
            t.streams.published.is_empty() && t.streams.opened.is_empty(),
            "no stream used"
        );
        for n in [2, 3] {
            let r = &t.records[n - 1];
            let whole: Vec<u8> = r[1..r.len() - 1].iter().flat_map(|x| x.1.clone()).collect();
            assert_eq!(r[0], (1, b"one".to_vec(), false), "node {n}");
            assert_eq!(
                whole, big,
                "node {n}: the big one in records of at most {RECORD_CHUNK}"
            );
            assert_eq!(r.len(), 2 + big.len().div_ceil(RECORD_CHUNK), "node {n}");
            assert_eq!(r.last().unwrap().1, b"three", "node {n}");
        }
        assert!(
            t.records[0].is_empty(),
            "the publisher's node loops its own back itself"
        );
        // The others report their positions on their next tick: then every
        // member has everything, and a leave need not wait.
        assert!(!t.modes[0].send_idle(&t.streams, 7));
        for n in [2, 3] {
            assert_eq!(
                t.modes[n - 1].poll_at(),
                Some(0),
                "node {n} wants to report"
            );
            t.call(n as NodeId, &[1, 2, 3], |m, cx, out| {
                assert!(m.poll(cx, 1, out).unwrap());
            });
        }
        let s = t.modes[0].stats_json();
        assert_eq!(s["published"], 3);
        assert_eq!(s["chosen"]["chain"], 3);
        assert!(t.modes[0].send_idle(&t.streams, 7), "every member reported");
    }

    #[test]
    fn a_departed_senders_event_waits_for_the_survivors_round() {
        let mut t = Three::new(Broadcast::Auto);
        view(&mut t, 1, &[1, 2, 3]);
        t.call(3, &[1, 2, 3], |m, cx, out| {
            m.publish(cx, ClientId(9), b"last words", out).unwrap();
        });
        assert_eq!(t.records[0].len(), 1);
        // Node 3 departs: node 1 installs the view first, and its round
        // waits for node 2's SYNC, so the event waits too.
        t.epoch = 2;
        let mut held = false;
        t.call(1, &[1, 2], |m, cx, _| {
            m.members_changed(cx, &[]).unwrap();
            held = m.place_event(cx, b"{\"gone\":[3]}");
        });
        assert!(held, "the event waits while the round is open");
        assert!(t.modes[0].poll_at().is_none_or(|t| t > 0));
        t.call(2, &[1, 2], |m, cx, _| m.members_changed(cx, &[]).unwrap());
        // The round ended with node 2's DONE: node 1 gave the event then,
        // after the departed sender's message.
        let last = t.records[0].last().unwrap();
        assert!(last.2, "the event came last: {:?}", t.records[0]);
        assert_eq!(t.records[0].len(), 2);
        assert!(t.modes[0].events.is_empty());
        // Without a round open, the daemon writes the event itself.
        t.epoch = 3;
        t.call(1, &[1, 2], |m, cx, _| {
            assert!(!m.place_event(cx, b"{}"));
        });
    }
}
