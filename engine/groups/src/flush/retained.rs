//! The retained window: the last frames delivered from one sender, kept so
//! that a flush can serve them to survivors behind this node.
//!
//! Owns the frames' bytes and metadata ring ([`Retained`]). Knows nothing of
//! peers, states or deadlines: the flush of a stream (`stream`) reads it.

use std::collections::VecDeque;

use mcast_wire::Seq;

use super::FlushFrame;

/// The last frames delivered from one sender, kept for a flush. At most
/// `max_frames` frames (one window); payload bytes in one ring, so keeping a
/// frame is one copy and no allocation once the ring has grown.
#[derive(Debug, Clone)]
pub struct Retained {
    meta: VecDeque<Meta>,
    bytes: VecDeque<u8>,
    pub(super) max_frames: usize,
    next: Option<Seq>,
}

#[derive(Debug, Clone, Copy)]
struct Meta {
    seq: Seq,
    first: bool,
    last: bool,
    batch: bool,
    len: u32,
}

impl Retained {
    /// Keeps the last `max_frames` frames (at least one).
    pub fn new(max_frames: u32) -> Retained {
        Retained {
            meta: VecDeque::new(),
            bytes: VecDeque::new(),
            max_frames: (max_frames as usize).max(1),
            next: None,
        }
    }

    /// Keeps the last `max_frames` frames of a stream that starts at
    /// `start` for this node: before any frame is delivered it reports
    /// `start` as its position, so a survivor that delivered more sends it
    /// everything from there.
    pub fn starting_at(max_frames: u32, start: Seq) -> Retained {
        Retained {
            next: Some(start),
            ..Retained::new(max_frames)
        }
    }

    /// A frame delivered in order. A frame that does not follow the last one
    /// (the stream was opened again elsewhere) starts the record afresh.
    /// `batch`: the frame holds several whole messages.
    pub fn push(&mut self, seq: Seq, first: bool, last: bool, batch: bool, data: &[u8]) {
        if self.next.is_some_and(|n| n != seq) {
            self.meta.clear();
            self.bytes.clear();
        }
        if self.meta.len() == self.max_frames {
            let old = self.meta.pop_front().expect("full");
            self.bytes.drain(..old.len as usize);
        }
        self.bytes.extend(data);
        self.meta.push_back(Meta {
            seq,
            first,
            last,
            batch,
            len: data.len() as u32,
        });
        self.next = Some(seq.next());
    }

    /// Keeps at most `max_frames` frames from now on (at least one),
    /// letting the oldest go.
    pub fn limit(&mut self, max_frames: usize) {
        self.max_frames = max_frames.max(1);
        while self.meta.len() > self.max_frames {
            let old = self.meta.pop_front().expect("longer than the limit");
            self.bytes.drain(..old.len as usize);
        }
    }

    /// The sequence number after the last frame delivered, if any was.
    pub fn next(&self) -> Option<Seq> {
        self.next
    }

    /// The first frame this record can give a peer: the oldest kept, or
    /// `next` when none is (`None`: no position at all).
    pub fn serves_from(&self) -> Option<Seq> {
        self.meta.front().map(|m| m.seq).or(self.next)
    }

    /// Frames kept.
    pub fn frames(&self) -> usize {
        self.meta.len()
    }

    /// Payload bytes kept.
    pub fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// True when every frame from `from` to the last is kept.
    pub fn covers(&self, from: Seq) -> bool {
        match (self.meta.front(), self.next) {
            (Some(m), Some(next)) => !from.before(m.seq) && !from.after(next),
            (None, Some(next)) => from == next,
            _ => false,
        }
    }

    /// Copies of the frames from `from` to the last (empty unless
    /// [`Retained::covers`] `from`).
    pub fn frames_from(&self, from: Seq) -> Vec<FlushFrame> {
        if !self.covers(from) {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut offset = 0usize;
        for m in &self.meta {
            let len = m.len as usize;
            if !m.seq.before(from) {
                out.push(FlushFrame {
                    seq: m.seq,
                    first: m.first,
                    last: m.last,
                    batch: m.batch,
                    data: self.bytes.range(offset..offset + len).copied().collect(),
                });
            }
            offset += len;
        }
        out
    }
}
