//! A fixed-capacity window of slots indexed by sequence number: the sender's
//! retransmission buffer and every receiver's reorder buffer. Allocated once at
//! construction; nothing on the hot path allocates.

use mcast_wire::Seq;

/// Up to `capacity` entries for the sequence numbers `[base, base + capacity)`.
#[derive(Debug, Clone)]
pub struct SeqWindow<T> {
    base: Seq,
    slots: Vec<Option<T>>,
    len: usize,
}

impl<T> SeqWindow<T> {
    /// An empty window starting at `base`. `capacity` must be at least 1 and
    /// below 2^30 (serial arithmetic needs the window well under 2^31).
    pub fn new(base: Seq, capacity: u32) -> SeqWindow<T> {
        assert!(
            (1..1 << 30).contains(&capacity),
            "window capacity {capacity} out of range"
        );
        let mut slots = Vec::with_capacity(capacity as usize);
        slots.resize_with(capacity as usize, || None);
        SeqWindow {
            base,
            slots,
            len: 0,
        }
    }

    /// The first sequence number of the window.
    pub fn base(&self) -> Seq {
        self.base
    }

    /// One past the last sequence number the window can hold.
    pub fn end(&self) -> Seq {
        self.base.add(self.capacity())
    }

    pub fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `seq` falls inside `[base, base + capacity)`.
    pub fn in_range(&self, seq: Seq) -> bool {
        let d = seq.distance(self.base);
        d >= 0 && (d as u32) < self.capacity()
    }

    fn index(&self, seq: Seq) -> usize {
        (seq.0 % self.capacity()) as usize
    }

    pub fn get(&self, seq: Seq) -> Option<&T> {
        if !self.in_range(seq) {
            return None;
        }
        self.slots[self.index(seq)].as_ref()
    }

    pub fn get_mut(&mut self, seq: Seq) -> Option<&mut T> {
        if !self.in_range(seq) {
            return None;
        }
        let i = self.index(seq);
        self.slots[i].as_mut()
    }

    pub fn contains(&self, seq: Seq) -> bool {
        self.get(seq).is_some()
    }

    /// Stores `value` at `seq`. Returns it back when `seq` is outside the window
    /// or the slot is taken.
    pub fn insert(&mut self, seq: Seq, value: T) -> Result<(), T> {
        if !self.in_range(seq) {
            return Err(value);
        }
        let i = self.index(seq);
        if self.slots[i].is_some() {
            return Err(value);
        }
        self.slots[i] = Some(value);
        self.len += 1;
        Ok(())
    }

    /// Takes the entry at `seq`.
    pub fn remove(&mut self, seq: Seq) -> Option<T> {
        if !self.in_range(seq) {
            return None;
        }
        let i = self.index(seq);
        let v = self.slots[i].take();
        if v.is_some() {
            self.len -= 1;
        }
        v
    }

    /// Takes the entry at the base and advances the base by one (whether or not
    /// there was an entry).
    pub fn pop_front(&mut self) -> Option<T> {
        let v = self.remove(self.base);
        self.base = self.base.next();
        v
    }

    /// Advances the base to `new_base`, handing every entry passed over to `drop_fn`.
    /// A `new_base` before the current base does nothing.
    pub fn advance_to(&mut self, new_base: Seq, mut drop_fn: impl FnMut(Seq, T)) {
        while self.base.before(new_base) {
            let seq = self.base;
            if let Some(v) = self.pop_front() {
                drop_fn(seq, v);
            }
        }
    }

    /// Every entry, in sequence order.
    pub fn iter(&self) -> impl Iterator<Item = (Seq, &T)> + '_ {
        (0..self.capacity()).filter_map(move |i| {
            let seq = self.base.add(i);
            self.get(seq).map(|v| (seq, v))
        })
    }

    /// Removes every entry, handing each to `drop_fn`.
    pub fn drain(&mut self, mut drop_fn: impl FnMut(Seq, T)) {
        for i in 0..self.capacity() {
            let seq = self.base.add(i);
            if let Some(v) = self.remove(seq) {
                drop_fn(seq, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_across_wrap() {
        let mut w = SeqWindow::new(Seq(u32::MAX - 1), 4);
        assert!(w.insert(Seq(u32::MAX - 1), 'a').is_ok());
        assert!(w.insert(Seq(1), 'd').is_ok());
        assert_eq!(w.insert(Seq(2), 'x'), Err('x'), "outside the window");
        assert_eq!(w.insert(Seq(1), 'y'), Err('y'), "slot taken");
        assert_eq!(w.len(), 2);
        assert_eq!(w.get(Seq(1)), Some(&'d'));
        assert_eq!(
            w.iter().map(|(s, v)| (s.0, *v)).collect::<Vec<_>>(),
            vec![(u32::MAX - 1, 'a'), (1, 'd')]
        );
        let mut dropped = vec![];
        w.advance_to(Seq(1), |s, v| dropped.push((s.0, v)));
        assert_eq!(dropped, vec![(u32::MAX - 1, 'a')]);
        assert_eq!(w.base(), Seq(1));
        assert!(w.in_range(Seq(4)) && !w.in_range(Seq(5)));
        assert_eq!(w.pop_front(), Some('d'));
        assert!(w.is_empty());
    }

    #[test]
    fn advance_backwards_is_a_no_op() {
        let mut w: SeqWindow<u8> = SeqWindow::new(Seq(10), 8);
        w.advance_to(Seq(5), |_, _| panic!("nothing to drop"));
        assert_eq!(w.base(), Seq(10));
    }
}
