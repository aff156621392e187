//! The in-order receive buffer shared by the multicast receivers (MAK, ACK,
//! NAK): epoch and window checks, duplicate detection, and delivery in sequence
//! order, exactly once.

use std::collections::VecDeque;

use crate::window::SeqWindow;
use crate::{BufId, Counters, Event};
use mcast_wire::{Flags, NodeId, Seq};

/// What became of an accepted data frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accepted {
    /// It was the next expected frame: delivered, with any buffered successors.
    InOrder,
    /// It was stored ahead of a gap.
    Buffered,
    /// Already held or delivered: released.
    Duplicate,
    /// Beyond the window: released.
    OutOfWindow,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    buf: BufId,
    len: u16,
    flags: Flags,
}

/// Frames from one stream, delivered in order.
#[derive(Debug)]
pub(crate) struct InOrder {
    stream: NodeId,
    window: SeqWindow<Held>,
    /// The highest sequence number seen so far, if any frame came.
    highest: Option<Seq>,
}

impl InOrder {
    pub(crate) fn new(stream: NodeId, initial_seq: Seq, window_frames: u32) -> InOrder {
        InOrder {
            stream,
            window: SeqWindow::new(initial_seq, window_frames),
            highest: None,
        }
    }

    /// Everything before this has been delivered.
    pub(crate) fn next_expected(&self) -> Seq {
        self.window.base()
    }

    /// The highest sequence number seen, if any.
    pub(crate) fn highest_seen(&self) -> Option<Seq> {
        self.highest
    }

    /// Records that `seq` exists (learned from a control frame such as an ACK
    /// request or heartbeat), so gaps up to it count as missing.
    pub(crate) fn note_exists(&mut self, seq: Seq) {
        if !self.window.base().after(seq) && self.window.in_range(seq) {
            self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        }
    }

    /// True when `seq` has been delivered or is held.
    pub(crate) fn has(&self, seq: Seq) -> bool {
        seq.before(self.window.base()) || self.window.contains(seq)
    }

    /// True when nothing between the next expected and the highest seen is missing.
    pub(crate) fn is_complete(&self) -> bool {
        self.highest.is_none_or(|h| h.before(self.window.base()))
    }

    /// Frames held out of order.
    pub(crate) fn held(&self) -> usize {
        self.window.len()
    }

    /// Takes a data frame. Ownership of `buf` passes here and comes back in
    /// `events` as Deliver or Release.
    pub(crate) fn accept(
        &mut self,
        seq: Seq,
        buf: BufId,
        len: u16,
        flags: Flags,
        counters: &mut Counters,
        events: &mut VecDeque<Event>,
    ) -> Accepted {
        counters.data_received += 1;
        if seq.before(self.window.base()) || self.window.contains(seq) {
            counters.duplicates_dropped += 1;
            events.push_back(Event::Release(buf));
            return Accepted::Duplicate;
        }
        if !self.window.in_range(seq) {
            counters.out_of_window_dropped += 1;
            events.push_back(Event::Release(buf));
            return Accepted::OutOfWindow;
        }
        self.highest = Some(self.highest.map_or(seq, |h| h.max(seq)));
        let in_order = seq == self.window.base();
        let stored = self.window.insert(seq, Held { buf, len, flags });
        debug_assert!(stored.is_ok(), "slot checked free above");
        if !in_order {
            return Accepted::Buffered;
        }
        while self.window.contains(self.window.base()) {
            let seq = self.window.base();
            let Some(h) = self.window.pop_front() else {
                break;
            };
            counters.delivered += 1;
            events.push_back(Event::Deliver {
                stream: self.stream,
                seq,
                buf: h.buf,
                len: h.len,
                flags: h.flags,
            });
        }
        Accepted::InOrder
    }

    /// Missing sequence numbers from the next expected up to the highest seen, in order.
    pub(crate) fn missing(&self) -> impl Iterator<Item = Seq> + '_ {
        let span = match self.highest {
            Some(h) if !h.before(self.window.base()) => h.distance(self.window.base()) as u32 + 1,
            _ => 0,
        };
        (0..span)
            .map(move |i| self.window.base().add(i))
            .filter(move |s| !self.window.contains(*s))
    }

    /// Releases every held frame (shutdown).
    pub(crate) fn release_all(&mut self, events: &mut VecDeque<Event>) {
        self.window
            .drain(|_, h| events.push_back(Event::Release(h.buf)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliveries(events: &mut VecDeque<Event>) -> Vec<u32> {
        events
            .drain(..)
            .filter_map(|e| match e {
                Event::Deliver { seq, .. } => Some(seq.0),
                Event::Release(_) => None,
            })
            .collect()
    }

    #[test]
    fn delivers_in_order_once_and_reports_gaps() {
        let mut r = InOrder::new(9, Seq(u32::MAX), 8);
        let mut c = Counters::default();
        let mut ev = VecDeque::new();
        assert_eq!(
            r.accept(Seq(1), BufId(1), 10, Flags::WHOLE, &mut c, &mut ev),
            Accepted::Buffered
        );
        assert_eq!(
            r.missing().map(|s| s.0).collect::<Vec<_>>(),
            vec![u32::MAX, 0]
        );
        assert!(!r.is_complete());
        assert_eq!(
            r.accept(Seq(u32::MAX), BufId(2), 10, Flags::WHOLE, &mut c, &mut ev),
            Accepted::InOrder
        );
        assert_eq!(deliveries(&mut ev), vec![u32::MAX]);
        assert_eq!(
            r.accept(Seq(0), BufId(3), 10, Flags::WHOLE, &mut c, &mut ev),
            Accepted::InOrder
        );
        assert_eq!(deliveries(&mut ev), vec![0, 1]);
        assert!(r.is_complete());
        assert_eq!(
            r.accept(Seq(0), BufId(4), 10, Flags::WHOLE, &mut c, &mut ev),
            Accepted::Duplicate
        );
        assert_eq!(ev.pop_front(), Some(Event::Release(BufId(4))));
        assert_eq!(
            r.accept(Seq(10), BufId(5), 10, Flags::WHOLE, &mut c, &mut ev),
            Accepted::OutOfWindow
        );
        assert_eq!(ev.pop_front(), Some(Event::Release(BufId(5))));
        assert_eq!(
            (c.delivered, c.duplicates_dropped, c.out_of_window_dropped),
            (3, 1, 1)
        );
    }

    #[test]
    fn note_exists_makes_the_tail_missing() {
        let mut r = InOrder::new(9, Seq(5), 8);
        r.note_exists(Seq(6));
        assert_eq!(r.missing().map(|s| s.0).collect::<Vec<_>>(), vec![5, 6]);
        r.note_exists(Seq(100));
        assert_eq!(
            r.highest_seen(),
            Some(Seq(6)),
            "beyond the window is ignored"
        );
    }
}
