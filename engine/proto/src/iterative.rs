//! The iterative baseline (seed 000 §2 (1)): "the message is sent to each
//! destination node in turn by reliable point-to-point communication". Here the
//! point-to-point protocol is Go-Back-N (seed 001 §4.2.1): one [`GbnSender`] per
//! receiver, each with its own sequence space; the receivers are plain
//! [`crate::gbn::GbnReceiver`]s.
//!
//! Each frame handed to [`Sender::send`] goes to every member's Go-Back-N
//! sender under the same [`BufId`]; the buffer is reference-counted and released
//! once every member has acknowledged it. Performs no I/O and reads no clock.

use std::collections::VecDeque;

use crate::gbn::{GbnConfig, GbnSender};
use crate::time::earliest;
use crate::window::SeqWindow;
use crate::{
    BufId, Counters, Endpoint, Event, Instant, OutFrame, RxBody, SendError, Sender, StreamConfig,
    Transmit,
};
use mcast_wire::{Header, NodeId, Seq};

/// Sender of the iterative baseline; receivers are plain [`crate::gbn::GbnReceiver`]s.
///
/// Message numbers (returned by [`Sender::send`]) start at `stream.initial_seq`
/// and count every frame sent; each member's own Go-Back-N sequence numbers
/// start at `stream.initial_seq` when it joins.
#[derive(Debug)]
pub struct IterativeSender {
    stream: StreamConfig,
    cfg: GbnConfig,
    /// In the order frames go out to them ("in turn": r1, r2, ... rN).
    members: Vec<Member>,
    /// Buffers by message number, with the number of members still owing an
    /// acknowledgment. At most W_FC messages are unreleased: the oldest one is
    /// held by a member that holds every later one too, in its W_FC window.
    refs: SeqWindow<Shared>,
    /// The number of the next message.
    next_msg: Seq,
    /// The member `poll_transmit` asks first (round-robin).
    turn: usize,
    events: VecDeque<Event>,
    /// This layer's own counts (refused sends, frames from non-members) plus
    /// the final counts of members removed from the view, so the sum never
    /// goes back.
    base: Counters,
    /// `base + every member's`, kept current after each call (`counters()`
    /// returns a reference).
    total: Counters,
}

#[derive(Debug)]
struct Member {
    node: NodeId,
    gbn: GbnSender,
    /// The oldest message this member has not acknowledged: its Go-Back-N
    /// sender releases buffers in sequence order, so its next Release is of
    /// this message.
    unacked_msg: Seq,
}

#[derive(Debug, Clone, Copy)]
struct Shared {
    buf: BufId,
    refs: u32,
}

impl IterativeSender {
    /// A sender to `members` in that order (duplicates and the local node are
    /// skipped), with windows of `stream.window_frames` (W_FC) allocated here.
    pub fn new(stream: StreamConfig, cfg: GbnConfig, members: &[NodeId]) -> IterativeSender {
        let mut s = IterativeSender {
            stream,
            cfg,
            members: Vec::with_capacity(members.len()),
            refs: SeqWindow::new(stream.initial_seq, stream.window_frames),
            next_msg: stream.initial_seq,
            turn: 0,
            events: VecDeque::with_capacity(stream.window_frames as usize),
            base: Counters::default(),
            total: Counters::default(),
        };
        s.set_members(Instant::ZERO, members);
        s
    }

    /// The current members, in the order they are served.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().map(|m| m.node)
    }

    /// The Go-Back-N sender towards `node`, if it is a member.
    pub fn member(&self, node: NodeId) -> Option<&GbnSender> {
        self.members.iter().find(|m| m.node == node).map(|m| &m.gbn)
    }

    /// Drops one reference to message `msg` (holding `buf`); releases the buffer
    /// at the last one.
    fn unref(&mut self, msg: Seq, buf: BufId) {
        let shared = self
            .refs
            .get_mut(msg)
            .expect("a member acknowledged a message it does not hold");
        assert_eq!(
            shared.buf, buf,
            "member released message {msg:?} out of order"
        );
        shared.refs -= 1;
        if shared.refs == 0 {
            self.refs.remove(msg);
            self.events.push_back(Event::Release(buf));
            // Messages are fully acknowledged in order; keep the base at the oldest held.
            while self.refs.base().before(self.next_msg) && !self.refs.contains(self.refs.base()) {
                self.refs.pop_front();
            }
        }
    }

    /// Turns the Release events of member `i`'s sender into reference drops.
    fn drain_member(&mut self, i: usize) {
        while let Some(ev) = self.members[i].gbn.poll_event() {
            match ev {
                Event::Release(buf) => {
                    let msg = self.members[i].unacked_msg;
                    self.members[i].unacked_msg = msg.next();
                    self.unref(msg, buf);
                }
                Event::Deliver { .. } => unreachable!("a Go-Back-N sender delivers nothing"),
            }
        }
    }

    fn update_total(&mut self) {
        let mut t = self.base;
        for m in &self.members {
            t.accumulate(m.gbn.counters());
        }
        self.total = t;
    }
}

impl Endpoint for IterativeSender {
    /// Pack and Nack frames are routed by `header.src` to that member's sender;
    /// frames from a non-member are counted as rejected (and a data buffer
    /// released).
    fn handle_frame(&mut self, now: Instant, header: &Header, body: RxBody<'_>) {
        match self.members.iter().position(|m| m.node == header.src) {
            Some(i) => {
                self.members[i].gbn.handle_frame(now, header, body);
                self.drain_member(i);
            }
            None => {
                self.base.rejected += 1;
                if let RxBody::Data(buf) = body {
                    self.events.push_back(Event::Release(buf));
                }
            }
        }
        self.update_total();
    }

    fn handle_timeout(&mut self, now: Instant) {
        for i in 0..self.members.len() {
            // Only members whose timer is due: each check scans a window.
            if self.members[i].gbn.poll_timeout().is_some_and(|d| d <= now) {
                self.members[i].gbn.handle_timeout(now);
                self.drain_member(i);
            }
        }
        self.update_total();
    }

    /// Serves the members round-robin, one frame each, so that with every
    /// member ready message m goes to r1, r2, ... rN before m+1 does (seed 000
    /// §2 (1): "to each destination node in turn").
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        let n = self.members.len();
        for k in 0..n {
            let i = (self.turn + k) % n;
            if let Some(t) = self.members[i].gbn.poll_transmit(now) {
                self.turn = (i + 1) % n;
                self.update_total();
                return Some(t);
            }
        }
        None
    }

    fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.members
            .iter()
            .fold(None, |acc, m| earliest(acc, m.gbn.poll_timeout()))
    }

    fn counters(&self) -> &Counters {
        &self.total
    }

    /// Distinct buffers held (one per unreleased message, however many members hold it).
    fn held_buffers(&self) -> usize {
        self.refs.len()
    }

    fn release_all(&mut self) {
        // The members' senders hold the same buffers by reference: drop their
        // state without their releases, and release each buffer once here.
        for m in &mut self.members {
            m.gbn.release_all();
            while m.gbn.poll_event().is_some() {}
        }
        let events = &mut self.events;
        self.refs.advance_to(self.next_msg, |_, shared| {
            events.push_back(Event::Release(shared.buf))
        });
        for m in &mut self.members {
            m.unacked_msg = self.next_msg;
        }
    }
}

impl Sender for IterativeSender {
    /// Hands the frame to every member's Go-Back-N sender; refuses it when any
    /// of their windows is full (the slowest receiver paces the stream).
    fn send(&mut self, now: Instant, frame: OutFrame) -> Result<Seq, SendError> {
        if self.members.is_empty() {
            return Err(SendError::NoMembers(frame.buf));
        }
        if !self.can_send() {
            self.base.window_full += 1;
            self.update_total();
            return Err(SendError::WindowFull(frame.buf));
        }
        let msg = self.next_msg;
        let shared = Shared {
            buf: frame.buf,
            refs: self.members.len() as u32,
        };
        let stored = self.refs.insert(msg, shared);
        assert!(
            stored.is_ok(),
            "message window full though every member had room"
        );
        for m in &mut self.members {
            let sent = m.gbn.send(now, frame);
            assert!(sent.is_ok(), "member {} refused after can_send", m.node);
        }
        self.next_msg = msg.next();
        Ok(msg)
    }

    fn can_send(&self) -> bool {
        !self.members.is_empty() && self.members.iter().all(|m| m.gbn.can_send())
    }

    fn is_idle(&self) -> bool {
        self.members.iter().all(|m| m.gbn.is_idle())
    }

    /// Installs a new view, served in the order given (duplicates and the local
    /// node skipped). A removed member's Go-Back-N sender is dropped and its
    /// references released (buffers it alone held go back to the driver). An
    /// added member starts with the next message sent: frames sent before it
    /// joined are not replayed to it.
    fn set_members(&mut self, _now: Instant, members: &[NodeId]) {
        // Drop the members that left.
        let mut i = 0;
        while i < self.members.len() {
            if members.contains(&self.members[i].node) {
                i += 1;
                continue;
            }
            self.drain_member(i);
            let gone = self.members.remove(i);
            self.base.accumulate(gone.gbn.counters());
            let mut msg = gone.unacked_msg;
            while msg.before(self.next_msg) {
                let buf = self.refs.get(msg).map(|s| s.buf);
                let buf = buf.expect("a member's unacknowledged message is held");
                self.unref(msg, buf);
                msg = msg.next();
            }
        }
        // Rebuild in the new order, adding the members that joined.
        let mut old = core::mem::take(&mut self.members);
        for &node in members {
            if node == self.stream.local || self.members.iter().any(|m| m.node == node) {
                continue;
            }
            let member = match old.iter().position(|m| m.node == node) {
                Some(p) => old.swap_remove(p),
                None => Member {
                    node,
                    gbn: GbnSender::new(self.stream, node, self.cfg),
                    unacked_msg: self.next_msg,
                },
            };
            self.members.push(member);
        }
        debug_assert!(old.is_empty());
        self.turn = 0;
        self.update_total();
    }
}
