//! The replay window of one sender: which of its (session, counter) pairs
//! were already accepted (RFC 4303 §3.4.3's sliding window, with a session
//! in front of the counter).
//!
//! A frame of a later session starts the window afresh (the sender
//! restarted); one of an earlier session is refused. Within the session the
//! highest counter seen and the [`REPLAY_WINDOW`] counters below it are
//! remembered: a counter seen before, or older than the window, is refused.
//! Frames may arrive out of order within the window (the sender's batches
//! are written in one order and may leave in another).
//!
//! Owns: the window's state and rule. May not touch: anything else; it is
//! updated only for frames whose tag was verified.

/// Counters remembered below the highest.
pub const REPLAY_WINDOW: u64 = 1024;

const WORDS: usize = (REPLAY_WINDOW / 64) as usize;

/// Why a frame was refused as a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// From an earlier session of its sender.
    OldSession,
    /// Its counter was accepted before.
    Duplicate,
    /// Its counter is older than the window.
    TooOld,
}

/// One sender's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    session: u64,
    top: u64,
    /// Bit `i` (word `i / 64`, bit `i % 64`): counter `top - i` was seen.
    seen: [u64; WORDS],
}

impl ReplayWindow {
    /// The window of a sender whose first accepted frame is (session, counter).
    pub fn new(session: u64, counter: u64) -> ReplayWindow {
        let mut seen = [0u64; WORDS];
        seen[0] = 1;
        ReplayWindow {
            session,
            top: counter,
            seen,
        }
    }

    /// The sender's session as last accepted.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Accepts (and records) the frame or says why it is a replay.
    pub fn accept(&mut self, session: u64, counter: u64) -> Result<(), Replay> {
        if session < self.session {
            return Err(Replay::OldSession);
        }
        if session > self.session {
            *self = ReplayWindow::new(session, counter);
            return Ok(());
        }
        if counter > self.top {
            self.shift(counter - self.top);
            self.top = counter;
            self.seen[0] |= 1;
            return Ok(());
        }
        let age = self.top - counter;
        if age >= REPLAY_WINDOW {
            return Err(Replay::TooOld);
        }
        let (w, bit) = ((age / 64) as usize, age % 64);
        if self.seen[w] & (1 << bit) != 0 {
            return Err(Replay::Duplicate);
        }
        self.seen[w] |= 1 << bit;
        Ok(())
    }

    /// Ages every remembered counter by `by`.
    fn shift(&mut self, by: u64) {
        if by >= REPLAY_WINDOW {
            self.seen = [0; WORDS];
            return;
        }
        let (words, bits) = ((by / 64) as usize, (by % 64) as u32);
        for i in (0..WORDS).rev() {
            let from = i.checked_sub(words);
            let hi = from.map_or(0, |j| self.seen[j]);
            let lo = from
                .and_then(|j| j.checked_sub(1))
                .map_or(0, |j| self.seen[j]);
            self.seen[i] = if bits == 0 {
                hi
            } else {
                (hi << bits) | (lo >> (64 - bits))
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counter_is_accepted_once_in_any_order_within_the_window() {
        let mut w = ReplayWindow::new(1, 1);
        assert_eq!(w.accept(1, 1), Err(Replay::Duplicate));
        for c in [5, 3, 2, 4, 100, 70, 6] {
            assert_eq!(w.accept(1, c), Ok(()), "{c}");
        }
        for c in [1, 2, 3, 4, 5, 6, 70, 100] {
            assert_eq!(w.accept(1, c), Err(Replay::Duplicate), "{c}");
        }
        // Not seen yet, still inside the window.
        assert_eq!(w.accept(1, 50), Ok(()));
    }

    #[test]
    fn counters_older_than_the_window_are_refused() {
        let mut w = ReplayWindow::new(1, 10);
        assert_eq!(w.accept(1, 10 + REPLAY_WINDOW), Ok(()));
        assert_eq!(w.accept(1, 10), Err(Replay::TooOld));
        assert_eq!(w.accept(1, 11), Ok(()), "the oldest counter inside");
        assert_eq!(w.accept(1, 11), Err(Replay::Duplicate));
        // A jump past the whole window forgets everything below it.
        assert_eq!(w.accept(1, 100_000), Ok(()));
        assert_eq!(w.accept(1, 100_000 - REPLAY_WINDOW), Err(Replay::TooOld));
        assert_eq!(w.accept(1, 100_000 - REPLAY_WINDOW + 1), Ok(()));
    }

    #[test]
    fn a_later_session_restarts_the_window_and_an_earlier_one_is_refused() {
        let mut w = ReplayWindow::new(5, 1000);
        assert_eq!(w.accept(6, 1), Ok(()));
        assert_eq!(w.session(), 6);
        assert_eq!(w.accept(6, 1), Err(Replay::Duplicate));
        assert_eq!(w.accept(5, 2000), Err(Replay::OldSession));
        assert_eq!(w.accept(6, 2), Ok(()));
    }

    #[test]
    fn the_window_matches_a_set_of_everything_seen() {
        // A model check: random arrivals against the set of accepted counters.
        let mut seen = std::collections::BTreeSet::new();
        let mut w = ReplayWindow::new(1, 0);
        seen.insert(0u64);
        let mut top = 0u64;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let step = x % 1500;
            let c = if x & (1 << 40) != 0 {
                top + step % 200
            } else {
                top.saturating_sub(step)
            };
            let want = if top >= c && top - c >= REPLAY_WINDOW {
                Err(Replay::TooOld)
            } else if seen.contains(&c) {
                Err(Replay::Duplicate)
            } else {
                Ok(())
            };
            assert_eq!(w.accept(1, c), want, "counter {c}, top {top}");
            if want.is_ok() {
                seen.insert(c);
                top = top.max(c);
            }
        }
    }
}
