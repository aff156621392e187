//! The sequenced mode: many-to-many through the root of the group's hybrid
//! tree (seed 004 §2.1; docs/protocol.md §6.3). A member's message goes to
//! the root (the group agent) over the daemons' link; the root multicasts
//! it in its own MAK stream, with the message's origin; every member then
//! delivers every sender's messages in one order, the root's. It is the
//! sequencer the total-order mode (seed 002) compares itself against.
//!
//! Owns: this node's messages not yet seen back from the root (`pending`,
//! resent to a new root), the forwarded messages waiting for the root's
//! window (`queue`), how far each origin's messages were delivered here
//! (`seen`, which drops what a new root would deliver twice), what a root
//! waits for before it multicasts (every member's READY, every former
//! root's HANDOFF), and the root's send stream. Does not touch: the flush
//! (the daemon's: it delivers a departed root's last messages through
//! [`GroupMode::deliver`]; `ModeCx::settled` says when it is over), views,
//! the tree's ACKs.

use std::collections::{HashMap, VecDeque};

use mcast_engine::{EngineError, Fragment};
use mcast_ipc::ClientId;
use mcast_wire::{GroupId, NodeId, Seq};
use serde_json::json;

use super::send_stream::SendStream;
use super::{Delivered, GroupMode, ModeCx, Out, Published, StreamOps, To};
use crate::daemon::deliver::data_record;
use crate::links::LinkMessage;

/// Bytes before the message: tag, origin node, origin epoch, origin sequence.
pub const HEADER_LEN: usize = 1 + 4 + 4 + 8;
/// A message in the root's stream.
pub(super) const TAG_DATA: u8 = b'S';
/// A member's message on its way to the root (a link message's body).
const TAG_FORWARD: u8 = b'F';
/// A former root to the members: every member holds its stream to its end
/// (the view epoch at which it stopped being the root follows, u64).
const TAG_HANDOFF: u8 = b'H';
/// A member to its root: this node's view makes you the root (its epoch
/// follows, u64) and no flush runs here.
const TAG_READY: u8 = b'R';

/// Most of this node's messages on their way through the root at once; a
/// publication beyond waits in the client's ring (WouldBlock).
pub const MAX_PENDING: usize = 1024;
/// Most bytes of them (at least one message is always let through).
pub const MAX_PENDING_BYTES: usize = 1 << 20;

/// Who published a message, and its place among that node's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub node: NodeId,
    /// The origin's incarnation: its numbering starts again with a new one.
    pub epoch: u32,
    /// Counted from 0 per incarnation, one per message.
    pub seq: u64,
}

/// `tag`, `origin` and `msg` as one buffer, into `out` (cleared).
pub fn encode(tag: u8, origin: Origin, msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(HEADER_LEN + msg.len());
    out.push(tag);
    out.extend_from_slice(&origin.node.to_be_bytes());
    out.extend_from_slice(&origin.epoch.to_be_bytes());
    out.extend_from_slice(&origin.seq.to_be_bytes());
    out.extend_from_slice(msg);
}

/// The origin and message of a buffer [`encode`]d with `tag`.
pub fn decode(tag: u8, buf: &[u8]) -> Option<(Origin, &[u8])> {
    if buf.len() < HEADER_LEN || buf[0] != tag {
        return None;
    }
    let u32_at = |i: usize| u32::from_be_bytes(buf[i..i + 4].try_into().unwrap());
    let origin = Origin {
        node: u32_at(1),
        epoch: u32_at(5),
        seq: u64::from_be_bytes(buf[9..17].try_into().unwrap()),
    };
    Some((origin, &buf[HEADER_LEN..]))
}

/// A FORWARD's bytes: the header with tag `F`, then `base` (u64), then
/// the epoch of the view the member sent it in (u64), then the message.
pub fn encode_forward(origin: Origin, base: u64, view: u64, msg: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + 16 + msg.len());
    encode(TAG_FORWARD, origin, &[], &mut v);
    v.extend_from_slice(&base.to_be_bytes());
    v.extend_from_slice(&view.to_be_bytes());
    v.extend_from_slice(msg);
    v
}

/// What a FORWARD carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward<'a> {
    pub origin: Origin,
    pub base: u64,
    /// The epoch of the view its member sent it in.
    pub view: u64,
    pub msg: &'a [u8],
}

/// A FORWARD's fields (None: malformed, or `base` beyond its sequence).
pub fn decode_forward(buf: &[u8]) -> Option<Forward<'_>> {
    let (origin, rest) = decode(TAG_FORWARD, buf)?;
    let base = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
    let view = u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?);
    (base <= origin.seq).then_some(Forward {
        origin,
        base,
        view,
        msg: &rest[16..],
    })
}

/// A message held here: this node's own on its way through the root, or a
/// member's waiting for this root's window.
#[derive(Debug, Clone)]
struct Held {
    origin: Origin,
    /// The origin's oldest message on its way when it sent this one: those
    /// before came back to it through a root. (Its own, here: itself.)
    base: u64,
    /// The epoch of the view its member sent it in (the root's own: the
    /// root's view then).
    view: u64,
    /// The local client that published it (it does not get it back).
    from: Option<ClientId>,
    msg: Vec<u8>,
}

/// Whether a queued message may go into the root's stream now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Ready,
    Duplicate,
    /// Of an earlier incarnation of its origin than one already
    /// multicast: after it, it would reorder the origin's messages.
    Stale,
    Wait,
}

/// What the later fragments of the message a stream is delivering go to.
#[derive(Debug, Clone, Copy)]
enum Current {
    Deliver {
        origin: NodeId,
        except: Option<ClientId>,
    },
    Skip,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    /// Own messages sent to the root.
    forwarded: u64,
    /// Own messages sent again to a new root.
    resent: u64,
    /// Messages this node multicast as the root (its own and forwarded).
    sequenced: u64,
    /// Of which its own.
    sequenced_own: u64,
    /// Own messages seen back from the root.
    echoed: u64,
    /// Messages delivered or forwarded here before, dropped.
    duplicates: u64,
    /// Messages the clients here had before this node's rejoin, not
    /// delivered again.
    recalled: u64,
    /// Messages of an origin that came after a hole in its numbering.
    gaps: u64,
    /// Fragments of the root's stream without a valid header, dropped.
    malformed: u64,
    /// This node's own messages of an incarnation before its rejoin, not
    /// delivered here (its clients had the eviction event).
    stale_own: u64,
    /// Forwarded messages the root's stream refused, dropped.
    dropped: u64,
    /// HANDOFFs sent as a former root.
    handoffs: u64,
    /// Forwards of an origin's earlier incarnation, dropped (one of its
    /// next was multicast, or it came back as a new member).
    stale: u64,
}

/// A group in the root's order.
#[derive(Debug)]
pub struct Sequenced {
    node: NodeId,
    /// This node's incarnation when it started carrying the group (a
    /// rejoin after an eviction carries it anew).
    epoch: u32,
    /// This node's send stream (open once it has been the root).
    stream: SendStream,
    /// The root of the view last seen.
    root: Option<NodeId>,
    /// The number of this node's next message.
    next: u64,
    pending: VecDeque<Held>,
    pending_bytes: usize,
    queue: VecDeque<Held>,
    queue_bytes: usize,
    /// This node's own messages in `queue` (as the root), and their bytes.
    own_queued: usize,
    own_queued_bytes: usize,
    /// Per origin: its incarnation and the number of its next message.
    seen: HashMap<NodeId, (u32, u64)>,
    /// What this node's clients had before it was declared failed and
    /// rejoined ([`GroupMode::recall_delivered`]): not delivered here again,
    /// though a root multicasts it (the others may not have it).
    recalled: Delivered,
    current: HashMap<NodeId, Current>,
    /// Former roots still in the view whose HANDOFF this node waits for,
    /// each with the view epoch at which it stopped being the root here:
    /// the root multicasts only once there are none.
    former_roots: Vec<(NodeId, u64)>,
    /// HANDOFFs that came before the view that makes their sender a former
    /// root here: (node, the epoch it names). One from an earlier term
    /// names an older epoch and does not count.
    handed_off: Vec<(NodeId, u64)>,
    /// This node was the root and is no longer (since the view epoch
    /// given): it tells the members once they all hold its stream to its
    /// end.
    handing_off: Option<u64>,
    /// As the root: the view epoch at which it became the root here, and
    /// the members whose READY for this term it waits for.
    term_epoch: u64,
    awaiting_ready: Vec<NodeId>,
    /// The last READY from each node: (node, the sender's view epoch); one
    /// may come before this node installs the view it is for.
    early_ready: Vec<(NodeId, u64)>,
    /// A new view here: READY is owed to the root once no flush runs.
    ready_owed: bool,
    /// The root moved: this node's messages still on their way go to the
    /// new root once it knows which of them an earlier root multicast (no
    /// flush runs here and every former root still in the view handed
    /// off), and before its READY.
    resend_owed: bool,
    /// The view's other nodes at the last view change.
    last_remote: Vec<NodeId>,
    /// Nodes that left the view here, each with the epoch of the view that
    /// removed it: its forwards sent in earlier views are its old
    /// incarnation's (a new one forwards from the view that adds it).
    removed_at: HashMap<NodeId, u64>,
    /// The buffer a message is framed in for the root's stream.
    scratch: Vec<u8>,
    counters: Counters,
}

impl Sequenced {
    pub fn new(node: NodeId, epoch: u32, first_seq: Seq) -> Sequenced {
        Sequenced {
            node,
            epoch,
            stream: SendStream::new(first_seq),
            root: None,
            next: 0,
            pending: VecDeque::new(),
            pending_bytes: 0,
            queue: VecDeque::new(),
            queue_bytes: 0,
            own_queued: 0,
            own_queued_bytes: 0,
            seen: HashMap::new(),
            recalled: Delivered::new(),
            current: HashMap::new(),
            former_roots: Vec::new(),
            handed_off: Vec::new(),
            handing_off: None,
            term_epoch: 0,
            awaiting_ready: Vec::new(),
            early_ready: Vec::new(),
            ready_owed: false,
            resend_owed: false,
            last_remote: Vec::new(),
            removed_at: HashMap::new(),
            scratch: Vec::new(),
            counters: Counters::default(),
        }
    }

    /// True when `count` messages of `bytes` of this node's own, on their
    /// way, leave no room for one of `len` more.
    fn own_full(&self, count: usize, bytes: usize, len: usize) -> bool {
        count >= MAX_PENDING || count > 0 && bytes + len > MAX_PENDING_BYTES
    }

    /// As the root: no flush runs and no former root's stream is still on
    /// its way, so what this node has delivered is final (and its
    /// duplicate checks exact).
    fn may_sequence(&self, cx: &ModeCx<'_>) -> bool {
        self.is_root()
            && cx.settled
            && self.former_roots.is_empty()
            && self.awaiting_ready.is_empty()
    }

    /// As a member whose root changed: READY to the root once no flush runs
    /// here (so no message of the root's reaches this node before the
    /// departed roots' last ones).
    fn send_ready(&mut self, cx: &mut ModeCx<'_>) -> bool {
        let root = cx.root.unwrap_or(cx.node);
        self.send_resend(cx);
        if !self.ready_owed || self.resend_owed || !cx.settled || root == cx.node {
            return false;
        }
        self.ready_owed = false;
        let mut body = vec![TAG_READY];
        body.extend_from_slice(&cx.view_epoch.to_be_bytes());
        cx.outbox.push((
            root,
            LinkMessage::Mode {
                group: cx.group,
                body,
            },
        ));
        true
    }

    /// As a member whose root moved: once every earlier root's stream has
    /// ended here (flushed, or handed off), this node knows which of its
    /// messages one multicast; the others go to the new root. (Sent at
    /// once, a message an earlier root multicast before a root that joined
    /// later started its stream would be taken by that root as new, and
    /// delivered to its clients out of the order.)
    fn send_resend(&mut self, cx: &mut ModeCx<'_>) {
        let root = cx.root.unwrap_or(cx.node);
        if self.resend_owed && cx.settled && self.former_roots.is_empty() && root != cx.node {
            self.resend_owed = false;
            self.resend(cx, root);
        }
    }

    /// As a former root: once every member holds this node's stream to its
    /// end, tells them.
    fn hand_off(&mut self, cx: &mut ModeCx<'_>) -> bool {
        let Some(since) = self.handing_off else {
            return false;
        };
        if self.stream.is_open() && !cx.streams.send_idle(cx.group) {
            return false;
        }
        self.handing_off = None;
        self.counters.handoffs += 1;
        let group = cx.group;
        let mut body = vec![TAG_HANDOFF];
        body.extend_from_slice(&since.to_be_bytes());
        cx.outbox.extend(cx.remote.iter().map(|&n| {
            (
                n,
                LinkMessage::Mode {
                    group,
                    body: body.clone(),
                },
            )
        }));
        true
    }

    fn is_root(&self) -> bool {
        self.root == Some(self.node)
    }

    /// True when this node's clients had `o` before its rejoin.
    fn was_recalled(&self, o: Origin) -> bool {
        // Empty but after a rejoin: no lookup per message otherwise.
        !self.recalled.is_empty()
            && self
                .recalled
                .get(&o.node)
                .is_some_and(|&(epoch, next)| epoch == o.epoch && o.seq < next)
    }

    /// True when `o` was delivered here already.
    fn is_duplicate(&self, o: Origin) -> bool {
        self.seen
            .get(&o.node)
            .is_some_and(|&(epoch, next)| epoch == o.epoch && o.seq < next)
    }

    /// `o` is delivered here (or multicast, at the root).
    fn note_seen(&mut self, o: Origin) {
        match self.seen.get_mut(&o.node) {
            Some((epoch, next)) if *epoch == o.epoch => {
                if o.seq > *next {
                    self.counters.gaps += 1;
                }
                *next = (*next).max(o.seq + 1);
            }
            Some((epoch, _)) if *epoch > o.epoch => {} // a late one of an older incarnation
            _ => {
                self.seen.insert(o.node, (o.epoch, o.seq + 1));
            }
        }
    }

    /// This node's message `o` came back from the root (or a flush of a
    /// departed root's stream): it and those before it are through. The
    /// client that published it (the message may wait in the queue when
    /// this node has become the root since; the queue drops it as a
    /// duplicate).
    fn echoed(&mut self, o: Origin) -> Option<ClientId> {
        let mut from = self
            .queue
            .iter()
            .find(|h| h.origin == o)
            .and_then(|h| h.from);
        while let Some(h) = self.pending.front() {
            if h.origin.epoch != o.epoch || h.origin.seq > o.seq {
                break;
            }
            if h.origin.seq == o.seq {
                from = h.from;
                self.counters.echoed += 1;
            }
            self.pending_bytes -= h.msg.len();
            self.pending.pop_front();
        }
        from
    }

    /// As the root: `msg` of `o` into the stream and to the local members.
    fn multicast(
        &mut self,
        cx: &mut ModeCx<'_>,
        o: Origin,
        msg: &[u8],
        except: Option<ClientId>,
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        if !cx.remote.is_empty() {
            encode(TAG_DATA, o, msg, &mut self.scratch);
            match self.stream.publish(cx, &self.scratch)? {
                Published::Sent => {}
                refused => return Ok(refused),
            }
        }
        self.note_seen(o);
        self.counters.sequenced += 1;
        self.counters.sequenced_own += u64::from(o.node == self.node);
        if self.was_recalled(o) {
            self.counters.recalled += 1;
        } else {
            out(
                data_record(cx.group, o.node, true, true),
                msg,
                To::AllBut(except),
            );
        }
        Ok(Published::Sent)
    }

    /// Whether `o` may go into the root's stream now: its origin's next
    /// message, or the origin's oldest on its way when it sent `o` (`base`:
    /// those before it came back to the origin through a root), a
    /// duplicate, or one that must wait for those before it (a forward that
    /// came to this node in an earlier root's term, before its origin sent
    /// its earlier messages here again). A departed origin's messages wait
    /// for nothing: what is missing before them is lost with it. One of a
    /// node not in this node's view, sent in a view this node has not
    /// installed yet, waits for it (a joining member's: sequenced before
    /// this root's stream starts for the member, it would not reach the
    /// member's own clients). A member of the view is never held so: its
    /// messages go on whatever epoch it is at.
    fn readiness(&self, h: &Held, cx: &ModeCx<'_>) -> Readiness {
        let (o, base) = (h.origin, h.base);
        let departed = o.node != self.node && !cx.remote.contains(&o.node);
        if departed && h.view > cx.view_epoch && !self.is_duplicate(o) {
            return Readiness::Wait;
        }
        match self.seen.get(&o.node) {
            Some(&(epoch, next)) if epoch == o.epoch => {
                if o.seq < next {
                    Readiness::Duplicate
                } else if o.seq == next || o.seq == base || departed {
                    Readiness::Ready
                } else {
                    Readiness::Wait
                }
            }
            Some(&(epoch, _)) if epoch > o.epoch => Readiness::Stale,
            _ if o.seq == base || departed => Readiness::Ready,
            _ => Readiness::Wait,
        }
    }

    /// As the root, with no flush running and no former root awaited: the
    /// queued messages into the stream, in order (each origin's in its
    /// order: one that must wait lets the others pass), while the window
    /// takes them.
    fn drain(&mut self, cx: &mut ModeCx<'_>, out: &mut Out<'_>) -> Result<bool, EngineError> {
        if !self.may_sequence(cx) {
            return Ok(false);
        }
        let mut work = false;
        let mut i = 0;
        while i < self.queue.len() {
            match self.readiness(&self.queue[i], cx) {
                Readiness::Wait => {
                    i += 1;
                    continue;
                }
                r @ (Readiness::Duplicate | Readiness::Stale) => {
                    let h = self.queue.remove(i).expect("in the queue");
                    self.count_dropped(r);
                    self.unqueued(&h);
                    continue;
                }
                Readiness::Ready => {}
            }
            let h = self.queue.remove(i).expect("in the queue");
            match self.multicast(cx, h.origin, &h.msg, h.from, out)? {
                Published::Sent => {}
                Published::WouldBlock => {
                    self.queue.insert(i, h);
                    break;
                }
                Published::Dropped(_) => {
                    self.counters.dropped += 1;
                    self.note_seen(h.origin);
                }
            }
            self.unqueued(&h);
            work = true;
            // One that waited for this one may be ready now.
            i = 0;
        }
        Ok(work)
    }

    /// A forward dropped as a duplicate or stale.
    fn count_dropped(&mut self, r: Readiness) {
        match r {
            Readiness::Stale => self.counters.stale += 1,
            _ => self.counters.duplicates += 1,
        }
    }

    /// `h` left the queue.
    fn unqueued(&mut self, h: &Held) {
        self.queue_bytes -= h.msg.len();
        if h.origin.node == self.node {
            self.own_queued -= 1;
            self.own_queued_bytes -= h.msg.len();
        }
    }

    /// This node's messages still on their way, to `root` (a new one).
    /// Those delivered here already came back through an earlier root (one
    /// may have waited in this node's queue while it was the root): they
    /// are through.
    fn resend(&mut self, cx: &mut ModeCx<'_>, root: NodeId) {
        let seen = &self.seen;
        self.pending.retain(|h| {
            !seen
                .get(&h.origin.node)
                .is_some_and(|&(e, next)| e == h.origin.epoch && h.origin.seq < next)
        });
        self.pending_bytes = self.pending.iter().map(|h| h.msg.len()).sum();
        let base = self.pending.front().map(|h| h.origin.seq);
        for h in &self.pending {
            let base = base.unwrap_or(h.origin.seq);
            let body = encode_forward(h.origin, base, cx.view_epoch, &h.msg);
            cx.outbox.push((
                root,
                LinkMessage::Mode {
                    group: cx.group,
                    body,
                },
            ));
            self.counters.resent += 1;
        }
    }
}

impl GroupMode for Sequenced {
    fn name(&self) -> &'static str {
        "sequenced"
    }

    /// At the root: into the stream at once when nothing waits before it
    /// and the window has room, else queued behind what does (WouldBlock
    /// once [`MAX_PENDING`] of its own wait). Elsewhere: to the root, kept
    /// until it comes back.
    fn publish(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: ClientId,
        msg: &[u8],
        out: &mut Out<'_>,
    ) -> Result<Published, EngineError> {
        let o = Origin {
            node: cx.node,
            epoch: cx.epoch,
            seq: self.next,
        };
        let root = cx.root.unwrap_or(cx.node);
        if root == cx.node {
            if self.may_sequence(cx) && self.queue.is_empty() {
                let r = self.multicast(cx, o, msg, Some(from), out)?;
                if r != Published::WouldBlock {
                    self.next += 1;
                    return Ok(r);
                }
            }
            // Others' messages wait before it, a flush runs, or the window
            // is full: it takes its turn in the queue, as the members'
            // messages do (the window a round frees would otherwise go to
            // the forwards that arrive before the client's ring is read).
            if self.own_full(self.own_queued, self.own_queued_bytes, msg.len()) {
                return Ok(Published::WouldBlock);
            }
            self.next += 1;
            self.own_queued += 1;
            self.own_queued_bytes += msg.len();
            self.queue_bytes += msg.len();
            self.queue.push_back(Held {
                origin: o,
                base: o.seq,
                view: cx.view_epoch,
                from: Some(from),
                msg: msg.to_vec(),
            });
            self.drain(cx, out)?;
            return Ok(Published::Sent);
        }
        if self.own_full(self.pending.len(), self.pending_bytes, msg.len()) {
            return Ok(Published::WouldBlock);
        }
        self.next += 1;
        let base = self.pending.front().map_or(o.seq, |h| h.origin.seq);
        // (While a resend is owed it goes with the resend.)
        if !self.resend_owed {
            cx.outbox.push((
                root,
                LinkMessage::Mode {
                    group: cx.group,
                    body: encode_forward(o, base, cx.view_epoch, msg),
                },
            ));
            self.counters.forwarded += 1;
        }
        self.pending.push_back(Held {
            origin: o,
            base,
            view: cx.view_epoch,
            from: Some(from),
            msg: msg.to_vec(),
        });
        self.pending_bytes += msg.len();
        Ok(Published::Sent)
    }

    fn loops_back(&self) -> bool {
        false
    }

    /// The root's stream follows the view (as in the FIFO mode). A new root
    /// is sent this node's messages still on their way; a node that becomes
    /// the root sequences its own first; one that stops being it takes its
    /// own back and drops the others' (their origins send them again).
    fn members_changed(
        &mut self,
        cx: &mut ModeCx<'_>,
        added: &[NodeId],
    ) -> Result<(), EngineError> {
        self.stream.members_changed(cx, added)?;
        let root = cx.root.unwrap_or(cx.node);
        let changed = self.root != Some(root);
        if changed {
            let was_root = self.is_root();
            // A former root still in the view goes on delivering its stream:
            // the new root's comes after its end (its HANDOFF says when).
            let since = cx.view_epoch;
            if let Some(old) = self
                .root
                .filter(|&r| r != cx.node && cx.remote.contains(&r))
            {
                let handed = self.handed_off.iter().any(|&(n, e)| n == old && e >= since);
                if !handed && !self.former_roots.iter().any(|&(n, _)| n == old) {
                    self.former_roots.push((old, since));
                }
            }
            self.former_roots.retain(|&(n, _)| n != root);
            self.handed_off.retain(|&(n, _)| n != root);
            // (One that never multicast says so at once: the members wait
            // for its word all the same. A handoff still owed survives
            // later moves of the root, naming the epoch of the first.)
            self.handing_off = if root == cx.node {
                None
            } else if was_root {
                self.handing_off.or(Some(since))
            } else {
                self.handing_off
            };
            self.root = Some(root);
            if root == cx.node {
                self.resend_owed = false;
                for mut h in std::mem::take(&mut self.pending).into_iter().rev() {
                    // Its own go in its order: each is ready in its turn.
                    h.base = h.origin.seq;
                    self.queue_bytes += h.msg.len();
                    self.own_queued += 1;
                    self.own_queued_bytes += h.msg.len();
                    self.queue.push_front(h);
                }
                self.pending_bytes = 0;
            } else {
                if was_root {
                    for h in std::mem::take(&mut self.queue) {
                        if h.origin.node == cx.node {
                            self.pending_bytes += h.msg.len();
                            self.pending.push_back(h);
                        }
                    }
                    (self.queue_bytes, self.own_queued, self.own_queued_bytes) = (0, 0, 0);
                }
                self.resend_owed = true;
            }
        }
        // The root multicasts once every member is READY for this view: its
        // flushes over, so no message of the root's reaches a member before
        // a departed root's last ones. Asked again at a new root and at
        // every departure (a former or stale root's stream may be flushed);
        // READYs that came early count if sent from this view on.
        let departed = self.last_remote.iter().any(|n| !cx.remote.contains(n));
        if root == cx.node && (changed || departed) {
            self.term_epoch = cx.view_epoch;
            let (early, epoch) = (&self.early_ready, self.term_epoch);
            self.awaiting_ready = cx
                .remote
                .iter()
                .copied()
                .filter(|n| !early.iter().any(|&(m, e)| m == *n && e >= epoch))
                .collect();
        }
        if root != cx.node {
            self.awaiting_ready.clear();
        }
        self.ready_owed = root != cx.node;
        // A node that left and is back is a new incarnation: what its old
        // one forwarded and is still queued is lost with it (sequenced
        // now, it could follow the new one's messages).
        for n in self.last_remote.iter().filter(|n| !cx.remote.contains(n)) {
            self.removed_at.insert(*n, cx.view_epoch);
        }
        let back: Vec<(NodeId, u64)> = cx
            .remote
            .iter()
            .filter_map(|n| Some((*n, self.removed_at.remove(n)?)))
            .collect();
        if !back.is_empty() {
            let before = self.queue.len();
            self.queue.retain(|h| {
                !back
                    .iter()
                    .any(|&(n, at)| h.origin.node == n && h.view < at)
            });
            self.counters.stale += (before - self.queue.len()) as u64;
            self.queue_bytes = self.queue.iter().map(|h| h.msg.len()).sum();
        }
        self.last_remote = cx.remote.to_vec();
        // A former root that left: its flush ends its stream instead.
        let remote = cx.remote;
        self.former_roots.retain(|(n, _)| remote.contains(n));
        self.handed_off.retain(|(n, _)| remote.contains(n));
        self.awaiting_ready.retain(|n| remote.contains(n));
        self.early_ready.retain(|(n, _)| remote.contains(n));
        self.hand_off(cx);
        self.send_ready(cx);
        // What departed origins sent waits for nobody but a root; what was
        // delivered here already, for nobody.
        let (seen, is_root) = (&self.seen, root == cx.node);
        let before = self.queue.len();
        self.queue.retain(|h| {
            let dup = seen
                .get(&h.origin.node)
                .is_some_and(|&(e, next)| e == h.origin.epoch && h.origin.seq < next);
            !dup && (is_root || remote.contains(&h.origin.node))
        });
        if self.queue.len() != before {
            self.queue_bytes = self.queue.iter().map(|h| h.msg.len()).sum();
            let own = self.queue.iter().filter(|h| h.origin.node == cx.node);
            (self.own_queued, self.own_queued_bytes) =
                own.fold((0, 0), |(n, b), h| (n + 1, b + h.msg.len()));
        }
        self.seen
            .retain(|n, _| *n == cx.node || remote.contains(n) || *n == root);
        Ok(())
    }

    fn resume_member(&mut self, cx: &mut ModeCx<'_>, to: NodeId) -> Result<bool, EngineError> {
        self.stream.resume_member(cx, to)
    }

    /// What was delivered here (and what an earlier rejoin recalled): a
    /// root paused past the failure detector delivers the forwards waiting
    /// for it when it wakes, and the next root sequences them again.
    fn delivered(&self) -> Option<Delivered> {
        let mut d = self.recalled.clone();
        for (&n, &(epoch, next)) in &self.seen {
            match d.get_mut(&n) {
                Some(at) if at.0 == epoch => at.1 = at.1.max(next),
                Some(at) if at.0 > epoch => {}
                _ => {
                    d.insert(n, (epoch, next));
                }
            }
        }
        Some(d)
    }

    /// Others' messages only: this node's own of an earlier incarnation
    /// are stale here anyway (see `deliver`).
    fn recall_delivered(&mut self, mut delivered: Delivered) {
        delivered.remove(&self.node);
        self.recalled = delivered;
    }

    /// A fragment of a root's stream: the first of a message names its
    /// origin (a message delivered here before is skipped whole); the
    /// message goes to the local members as the origin's.
    fn deliver(&mut self, f: &Fragment<'_>, out: &mut Out<'_>) {
        let current = if f.first {
            match decode(TAG_DATA, f.data) {
                None => {
                    self.counters.malformed += 1;
                    Current::Skip
                }
                Some((o, _)) if self.is_duplicate(o) => {
                    self.counters.duplicates += 1;
                    Current::Skip
                }
                Some((o, _)) if self.was_recalled(o) => {
                    self.note_seen(o);
                    self.counters.recalled += 1;
                    Current::Skip
                }
                Some((o, _)) if o.node == self.node && o.epoch != self.epoch => {
                    // Sent before this node was declared failed and the root
                    // multicast it since: the members have it, but this
                    // node's clients had the eviction event, which broke
                    // the stream before it.
                    self.counters.stale_own += 1;
                    Current::Skip
                }
                Some((o, msg)) => {
                    self.note_seen(o);
                    let except = if o.node == self.node {
                        self.echoed(o)
                    } else {
                        None
                    };
                    out(
                        data_record(f.group, o.node, true, f.last),
                        msg,
                        To::AllBut(except),
                    );
                    Current::Deliver {
                        origin: o.node,
                        except,
                    }
                }
            }
        } else {
            match self.current.get(&f.stream) {
                Some(&Current::Deliver { origin, except }) => {
                    out(
                        data_record(f.group, origin, false, f.last),
                        f.data,
                        To::AllBut(except),
                    );
                    Current::Deliver { origin, except }
                }
                Some(Current::Skip) => Current::Skip,
                None => {
                    self.counters.malformed += 1;
                    Current::Skip
                }
            }
        };
        if f.last {
            self.current.remove(&f.stream);
        } else {
            self.current.insert(f.stream, current);
        }
    }

    /// A member's message for the root: into the stream if this node is
    /// the root, nothing waits before it and the window has room; else
    /// queued.
    fn on_link(
        &mut self,
        cx: &mut ModeCx<'_>,
        from: NodeId,
        body: &[u8],
        out: &mut Out<'_>,
    ) -> Result<(), String> {
        if body.len() == 9 && body[0] == TAG_READY {
            let epoch = u64::from_be_bytes(body[1..].try_into().expect("8 bytes"));
            if self.is_root() && epoch >= self.term_epoch {
                self.awaiting_ready.retain(|&n| n != from);
            }
            // Kept too: it may be for a view this node has not installed.
            self.early_ready.retain(|&(n, _)| n != from);
            self.early_ready.push((from, epoch));
            return self.drain(cx, out).map(|_| ()).map_err(|e| e.to_string());
        }
        if body.len() == 9 && body[0] == TAG_HANDOFF {
            let epoch = u64::from_be_bytes(body[1..].try_into().expect("8 bytes"));
            let before = self.former_roots.len();
            self.former_roots
                .retain(|&(n, since)| n != from || epoch < since);
            if self.former_roots.len() == before {
                self.handed_off.retain(|&(n, _)| n != from);
                self.handed_off.push((from, epoch));
            }
            // (A member's resend and READY may wait for it.)
            self.send_ready(cx);
            return self.drain(cx, out).map(|_| ()).map_err(|e| e.to_string());
        }
        let f =
            decode_forward(body).ok_or_else(|| format!("a malformed forward from node {from}"))?;
        let (o, msg) = (f.origin, f.msg);
        if o.node != from {
            return Err(format!(
                "node {from} forwarded a message of node {}",
                o.node
            ));
        }
        let held = |msg: Vec<u8>| Held {
            origin: o,
            base: f.base,
            view: f.view,
            from: None,
            msg,
        };
        let ready = self.readiness(&held(Vec::new()), cx);
        if matches!(ready, Readiness::Duplicate | Readiness::Stale) {
            self.count_dropped(ready);
            return Ok(());
        }
        if self.may_sequence(cx) && self.queue.is_empty() && ready == Readiness::Ready {
            // Nothing waits before it: straight into the stream, uncopied.
            match self.multicast(cx, o, msg, None, out) {
                Ok(Published::WouldBlock) => {}
                Ok(Published::Sent) => return Ok(()),
                Ok(Published::Dropped(_)) => {
                    self.counters.dropped += 1;
                    self.note_seen(o);
                    return Ok(());
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        self.queue_bytes += msg.len();
        self.queue.push_back(held(msg.to_vec()));
        self.drain(cx, out).map(|_| ()).map_err(|e| e.to_string())
    }

    fn wants_round(&self) -> bool {
        self.is_root() && !self.queue.is_empty()
            || self.handing_off.is_some()
            || self.ready_owed
            || self.resend_owed
    }

    fn poll(
        &mut self,
        cx: &mut ModeCx<'_>,
        _now_ns: u64,
        out: &mut Out<'_>,
    ) -> Result<bool, EngineError> {
        let handed = self.hand_off(cx);
        let ready = self.send_ready(cx);
        Ok(self.drain(cx, out)? || handed || ready)
    }

    fn send_idle(&self, streams: &dyn StreamOps, group: GroupId) -> bool {
        self.pending.is_empty()
            && (!self.is_root() || self.queue.is_empty())
            && streams.send_idle(group)
    }

    fn stats_json(&self) -> serde_json::Value {
        let c = &self.counters;
        json!({
            "mode": self.name(),
            "root": self.root,
            "sender_open": self.stream.is_open(),
            "pending": self.pending.len(),
            "pending_bytes": self.pending_bytes,
            "queued": self.queue.len(),
            "queued_bytes": self.queue_bytes,
            "forwarded": c.forwarded,
            "resent": c.resent,
            "sequenced": c.sequenced,
            "sequenced_own": c.sequenced_own,
            "echoed": c.echoed,
            "duplicates": c.duplicates,
            "recalled": c.recalled,
            "gaps": c.gaps,
            "malformed": c.malformed,
            "stale_own": c.stale_own,
            "dropped": c.dropped,
            "handoffs": c.handoffs,
            "stale": c.stale,
            "awaiting": self.former_roots.iter().map(|&(n, _)| n).collect::<Vec<_>>(),
            "awaiting_ready": self.awaiting_ready,
        })
    }
}

#[cfg(test)]
#[path = "sequenced_tests.rs"]
mod tests;
