//! A frame pool of the same shape as a UMEM, in ordinary memory: `count`
//! frames of `size` bytes addressed by index, each `Free`, `Held` or `Tx`,
//! with exact accounting. Used by the AF_PACKET and memory transports.
//!
//! What it does: hands out and takes back frames, checking each transition,
//! and models the TX completion ring: a sent frame stays `Tx` until
//! [`FramePool::reap`], so the engine's rule "never rewrite a frame in flight"
//! is exercised on every transport. What it never does: it performs no I/O
//! and lets nobody see the bytes of a frame that is not `Held`.

use crate::transport::TransportCounts;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Free,
    Held,
    Tx { keep: bool },
}

/// Frames by index with a free list and per-frame states.
#[derive(Debug)]
pub struct FramePool {
    area: Vec<u8>,
    size: usize,
    state: Vec<State>,
    free: Vec<u32>,
    /// Sent frames whose "completion" has not been reaped yet.
    completions: Vec<u32>,
    counts: TransportCounts,
}

impl FramePool {
    /// `count` frames of `size` bytes, all free.
    pub fn new(count: u32, size: usize) -> FramePool {
        FramePool {
            area: vec![0; count as usize * size],
            size,
            state: vec![State::Free; count as usize],
            free: (0..count).rev().collect(),
            completions: Vec::new(),
            counts: TransportCounts {
                total: count,
                free: count,
                ..TransportCounts::default()
            },
        }
    }

    pub fn frame_size(&self) -> usize {
        self.size
    }

    pub fn alloc(&mut self) -> Option<u32> {
        let f = self.free.pop()?;
        debug_assert_eq!(self.state[f as usize], State::Free);
        self.state[f as usize] = State::Held;
        self.counts.free -= 1;
        self.counts.held += 1;
        Some(f)
    }

    pub fn release(&mut self, f: u32) {
        assert_eq!(
            self.state.get(f as usize),
            Some(&State::Held),
            "release of frame {f} that is not held"
        );
        self.state[f as usize] = State::Free;
        self.free.push(f);
        self.counts.held -= 1;
        self.counts.free += 1;
    }

    pub fn frame(&self, f: u32) -> &[u8] {
        assert_eq!(
            self.state.get(f as usize),
            Some(&State::Held),
            "frame {f} is not held"
        );
        let start = f as usize * self.size;
        &self.area[start..start + self.size]
    }

    pub fn frame_mut(&mut self, f: u32) -> &mut [u8] {
        assert_eq!(
            self.state.get(f as usize),
            Some(&State::Held),
            "frame {f} is not held"
        );
        let start = f as usize * self.size;
        &mut self.area[start..start + self.size]
    }

    /// Copies `range` of held frame `from` into the same range of held frame `to`.
    pub fn copy_between(&mut self, from: u32, to: u32, range: std::ops::Range<usize>) {
        for f in [from, to] {
            assert_eq!(
                self.state.get(f as usize),
                Some(&State::Held),
                "frame {f} is not held"
            );
        }
        assert!(from != to && range.end <= self.size, "bad frame copy");
        let src = from as usize * self.size;
        let dst = to as usize * self.size;
        self.area
            .copy_within(src + range.start..src + range.end, dst + range.start);
    }

    /// Marks a held frame as sent; it completes at the next [`FramePool::reap`].
    pub fn mark_sent(&mut self, f: u32, keep: bool) {
        assert_eq!(
            self.state.get(f as usize),
            Some(&State::Held),
            "send of frame {f} not held"
        );
        self.state[f as usize] = State::Tx { keep };
        self.completions.push(f);
        self.counts.held -= 1;
        self.counts.tx += 1;
    }

    /// Completes every sent frame: kept ones become held (appended to `kept`),
    /// the others free.
    pub fn reap(&mut self, kept: &mut Vec<u32>) {
        for f in self.completions.drain(..) {
            match self.state[f as usize] {
                State::Tx { keep: true } => {
                    self.state[f as usize] = State::Held;
                    self.counts.held += 1;
                    kept.push(f);
                }
                State::Tx { keep: false } => {
                    self.state[f as usize] = State::Free;
                    self.free.push(f);
                    self.counts.free += 1;
                }
                other => panic!("completion of frame {f} in state {other:?}"),
            }
            self.counts.tx -= 1;
        }
    }

    pub fn counts(&self) -> TransportCounts {
        self.counts
    }

    pub fn check_conservation(&self) -> Result<TransportCounts, String> {
        let c = self.counts;
        let (mut free, mut held, mut tx) = (0u32, 0u32, 0u32);
        for s in &self.state {
            match s {
                State::Free => free += 1,
                State::Held => held += 1,
                State::Tx { .. } => tx += 1,
            }
        }
        if (free, held, tx) != (c.free, c.held, c.tx) {
            return Err(format!(
                "pool states (free {free}, held {held}, tx {tx}) != counters {c:?}"
            ));
        }
        if c.free + c.held + c.tx + c.fill != c.total {
            return Err(format!("pool counts do not add up: {c:?}"));
        }
        if self.free.len() != c.free as usize || self.completions.len() != c.tx as usize {
            return Err(format!(
                "free list {} / completions {} disagree with {c:?}",
                self.free.len(),
                self.completions.len()
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_frames_come_back_held_others_free() {
        let mut p = FramePool::new(4, 64);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        p.frame_mut(a)[0] = 7;
        p.mark_sent(a, true);
        p.mark_sent(b, false);
        assert_eq!(p.counts().tx, 2);
        p.check_conservation().unwrap();
        let mut kept = Vec::new();
        p.reap(&mut kept);
        assert_eq!(kept, vec![a]);
        assert_eq!(p.frame(a)[0], 7, "a kept frame keeps its bytes");
        assert_eq!(p.counts().held, 1);
        assert_eq!(p.counts().free, 3);
        p.release(a);
        p.check_conservation().unwrap();
    }

    #[test]
    #[should_panic(expected = "not held")]
    fn a_frame_in_flight_cannot_be_written() {
        let mut p = FramePool::new(2, 64);
        let a = p.alloc().unwrap();
        p.mark_sent(a, true);
        let _ = p.frame_mut(a);
    }
}
