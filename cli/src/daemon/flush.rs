//! The flush: when a sender leaves a group's view, the survivors tell each
//! other how far they delivered its stream and send each other the frames
//! they lack, so all end at the same message before the membership event
//! (docs/mcastd.md, "When a sender leaves"; protocol.md §6.1).
//!
//! Owns: [`FlushGlue`]: the flushes running here (`mcast_groups::flush`),
//! the last window kept of each open receive stream, and the stream starts
//! deferred until a flush of the same stream ends.
//! Does not touch: views (it is told of departures by
//! [`membership`](super::membership) and [`liveness`](super::liveness)),
//! the engine's streams.

use std::collections::HashMap;

use mcast_engine::{EngineError, Fragment, StreamStart, Transport};
use mcast_groups::detector::PeerState;
use mcast_groups::flush::{FlushFrame, FlushKey, FlushMsg, Flushes, Outcome, Retained};
use mcast_ipc::ClientId;
use mcast_wire::{GroupId, NodeId};
use serde_json::json;

use super::deliver::event_record;
use super::Daemon;
use super::FastMap;
use crate::links::LinkMessage;

/// How long the flush of a departed sender's stream waits for the other
/// survivors (docs/mcastd.md, "When a sender leaves"). A survivor that dies
/// meanwhile leaves the view within the detection bound and is no longer
/// waited for; this is the bound for what remains (a survivor that does not
/// answer while its beats still arrive).
const FLUSH_TIMEOUT_NS: u64 = 1_000_000_000;

/// What this node delivered of one sender's stream, kept for a flush: the
/// stream's epoch and its last window of frames.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) epoch: u32,
    pub(super) frames: Retained,
}

/// The flushes and what they need.
#[derive(Debug, Default)]
pub(super) struct FlushGlue {
    pub(super) flushes: Flushes,
    /// The last window delivered from each open receive stream.
    pub(super) kept: FastMap<(GroupId, NodeId), Kept>,
    /// Starts of a stream whose flush runs here, applied when it ends (the
    /// flush and the reopened stream would deliver the same frames).
    pub(super) deferred_starts: HashMap<FlushKey, StreamStart>,
}

impl FlushGlue {
    /// Forgets every record of `group` (this node no longer carries it).
    pub(super) fn forget_group(&mut self, group: GroupId) {
        self.kept.retain(|(g, _), _| *g != group);
        self.deferred_starts.retain(|k, _| k.group != group);
        self.flushes.forget_group(group);
    }
}

impl<T: Transport> Daemon<T> {
    /// `sender` left the view of `group`, its receive stream is closed:
    /// tell the survivors how far it was delivered here.
    pub(super) fn start_flush(&mut self, group: GroupId, sender: NodeId, survivors: &[NodeId]) {
        let Some(kept) = self.flush.kept.remove(&(group, sender)) else {
            return;
        };
        let key = FlushKey {
            group,
            sender,
            epoch: kept.epoch,
        };
        let deadline = mcast_engine::sys::monotonic_ns() + FLUSH_TIMEOUT_NS;
        // A survivor already declared failed is not waited for (a view may
        // still hold it when its group's agent cannot change the view).
        let survivors: Vec<NodeId> = survivors
            .iter()
            .copied()
            .filter(|&n| self.live.tracker.detector().state(n) != Some(PeerState::Failed))
            .collect();
        let mut out = Vec::new();
        self.flush
            .flushes
            .start(key, Some(kept.frames), &survivors, deadline, &mut out);
        self.send_flush(out);
    }

    /// True when a peer's flush state for `key` is held for a flush of this
    /// node's to come. Only while this node's view still holds the sender
    /// (its own view change is on its way): a stream whose start overtook
    /// the view adding its sender has no departure to flush, and holding
    /// would keep the peer waiting. Before this node's first view (it
    /// restarted, and starts came first, kept for that view) it is held:
    /// that view opens the stream and shows the departure, and answering
    /// "nothing" would let the peers end without sending this node the
    /// frames it was counted for (seed 1168).
    pub(super) fn may_flush_later(&self, key: FlushKey) -> bool {
        let streaming = self
            .flush
            .kept
            .get(&(key.group, key.sender))
            .is_some_and(|k| k.epoch == key.epoch)
            && self
                .local
                .get(&key.group)
                .and_then(|lg| lg.view.as_ref())
                .is_none_or(|v| v.nodes().contains(&key.sender));
        let pending = self
            .streams
            .pending_starts
            .get(&key.group)
            .is_some_and(|q| {
                q.iter()
                    .any(|(n, s)| *n == key.sender && s.epoch == key.epoch)
            });
        streaming || pending
    }

    pub(super) fn flush_message(&mut self, from: NodeId, m: FlushMsg) {
        let mut out = Vec::new();
        match m {
            FlushMsg::State {
                key,
                next,
                from: serves,
            } => {
                let has_stream = self.may_flush_later(key);
                self.flush
                    .flushes
                    .on_state(from, key, (next, serves), has_stream, &mut out);
            }
            FlushMsg::Data { key, frame } => {
                if let Some(skipped) = self.flush.flushes.on_data(key, &frame, &mut out) {
                    self.deliver_flushed(key, &frame, skipped);
                }
            }
        }
        self.send_flush(out);
    }

    /// A frame the flush of `key` took: to the local members through the
    /// group's mode, as from the departed sender, after the event of a jump.
    pub(super) fn deliver_flushed(&mut self, key: FlushKey, frame: &FlushFrame, skipped: u64) {
        self.note_stopped(key.group, key.sender, key.epoch, Some(frame.seq.next()));
        if skipped > 0 {
            let members = self
                .local
                .get(&key.group)
                .map(|lg| lg.members.clone())
                .unwrap_or_default();
            self.jumped(key, skipped, &members);
        }
        let deliver = |d: &mut Self, data: &[u8]| {
            d.deliver_in_mode(&Fragment {
                group: key.group,
                stream: key.sender,
                seq: frame.seq,
                first: frame.first,
                last: frame.last,
                data,
            })
        };
        if frame.batch {
            // Validated when the link message was decoded.
            for m in mcast_wire::batch::records(&frame.data) {
                deliver(self, m);
            }
        } else {
            deliver(self, &frame.data);
        }
    }

    /// The flush of `key` jumped over `skipped` frames no survivor kept: the
    /// sender sent them while it did not count this node a member (it was
    /// taken out by a view this node never installed, or the start that
    /// would have moved its stream on was lost with the sender). The
    /// clients are told before the messages after the jump.
    pub(super) fn jumped(&mut self, key: FlushKey, skipped: u64, members: &[ClientId]) {
        self.log.warn(
            "flush jumped: frames the departed sender sent while it did not count this node a member were passed over",
            &[
                ("group", &key.group),
                ("sender", &key.sender),
                ("skipped_frames", &skipped),
            ],
        );
        self.skipped_event(key.group, key.sender, skipped, members);
    }

    /// Tells `members` that `frames` frames of `sender`'s stream in `group`
    /// will never reach them (the `skipped` membership event, docs/mcastd.md).
    pub(super) fn skipped_event(
        &mut self,
        group: GroupId,
        sender: NodeId,
        frames: u64,
        members: &[ClientId],
    ) {
        let event = json!({"skipped": {"sender": sender, "frames": frames}}).to_string();
        // In a mode that holds messages back (total order), after those of
        // the sender from before the jump.
        if self.place_skipped(group, sender, event.as_bytes()) {
            return;
        }
        self.event_to(members, event_record(group), event.as_bytes());
    }

    /// Delivers what the flushes took of the frames that came early, then
    /// sends `out`: every call into the flushes ends here.
    pub(super) fn send_flush(&mut self, out: Vec<(NodeId, FlushMsg)>) {
        for r in self.flush.flushes.take_ready() {
            self.deliver_flushed(r.key, &r.frame, r.skipped);
        }
        for (to, m) in out {
            self.send_link(to, LinkMessage::Flush(m));
        }
    }

    /// Ends the flushes that are over and lets out the membership events
    /// they held.
    pub(super) fn finish_flushes(&mut self) -> Result<bool, EngineError> {
        let now = mcast_engine::sys::monotonic_ns();
        let mut work = false;
        while let Some(ended) = self.flush.flushes.poll_ended(now) {
            work = true;
            let (key, outcome) = (ended.key, ended.outcome);
            self.note_stopped(key.group, key.sender, key.epoch, ended.next);
            if let Some(start) = self.flush.deferred_starts.remove(&key) {
                self.stream_start(key.sender, key.group, start)?;
            }
            match outcome {
                Outcome::Agreed { recovered } => self.log.info(
                    "flush agreed: the survivors hold the same messages of the departed sender",
                    &[
                        ("group", &key.group),
                        ("sender", &key.sender),
                        ("recovered_frames", &recovered),
                    ],
                ),
                Outcome::TimedOut { waiting, recovered } => self.log.warn(
                    "flush timed out: survivors may differ on the departed sender's last messages",
                    &[
                        ("group", &key.group),
                        ("sender", &key.sender),
                        ("waiting_for", &waiting),
                        ("recovered_frames", &recovered),
                    ],
                ),
            }
            if self.flush.flushes.pending_in(key.group) {
                continue;
            }
            self.poll_mode(key.group, now)?;
            let Some(lg) = self.local.get_mut(&key.group) else {
                continue;
            };
            let held = std::mem::take(&mut lg.held_events);
            let starts = std::mem::take(&mut lg.held_starts);
            lg.held_gone.clear();
            let members = lg.members.clone();
            let hdr = event_record(key.group);
            for e in held {
                self.event_to(&members, hdr, &e);
            }
            // Then the streams that waited for them, each through the
            // whole start as it stands now.
            for (from, start) in starts {
                self.stream_start(from, key.group, start)?;
            }
        }
        Ok(work)
    }
}
